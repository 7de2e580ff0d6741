"""Could a chain round overlap its drafting with its verify pass on this CPU? One process, the default pair.

Where the draft is almost always right (code: α near 0.98), a chain round is about k draft steps and one
verify pass, and both engines (specviz and transformers' assisted generation, given the same draft) pay
one draft step per drafted token. Overlapping them (PEARL, Liu et al. 2025: the draft drafts the next
tokens while the target verifies) is the one way left to make such a round cheaper without a cheaper draft.
This measures what it could gain here:
- a target pass of 1 and k+1 tokens and one draft step, with every core (the engine's way) and on one core;
- the draft's pass over 1, 3 and 5 tokens (what checking n-gram guesses of the draft's own tokens costs);
- the two at once: a target pass of k+1 tokens on one core, in a second thread, while the draft steps on
  the other, interleaved with the solo runs.
It prints the round's time both ways and the best an overlap could do.

    PYTHONPATH=. python scripts/overlap_check.py --k 11 --reps 5

Figures from it are in the README (Performance, the ratio over transformers).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch
from transformers import DynamicCache

from specviz.device import devqueue, tuning
from specviz.decoding import models
from specviz.core import prompts


class Model:
    """One model with a prompt read into its cache; each pass is undone after (the cache stays the prompt).

    Not specviz.modeling.lm.CachedLM: its passes run on the device's one worker thread (devqueue.run), so two of them
    could never overlap, which is what this measures. Threads per pass are set with tuning.own_threads,
    the per-thread count the worker itself is given."""

    def __init__(self, model, ids: list[int]):
        self.model, self.cache = model, DynamicCache()
        with torch.no_grad():
            model(torch.tensor([ids]), past_key_values=self.cache, use_cache=True)

    def pass_s(self, n: int) -> float:
        x = torch.randint(100, 20000, (1, n))  # (1, n): the tokens' values do not change the cost
        t0 = time.perf_counter()
        with torch.no_grad():
            self.model(x, past_key_values=self.cache, use_cache=True)
        dt = time.perf_counter() - t0
        self.cache.crop(-n)
        return dt


def overlapped(target: Model, draft: Model, n: int) -> tuple[float, int, float]:
    """A target pass of n tokens on one core in a second thread, draft steps on the other until it ends:
    (the pass's seconds, the draft steps made meanwhile, the median step)."""
    done, out = threading.Event(), []

    def verify():
        tuning.own_threads(1)
        out.append(target.pass_s(n))
        done.set()

    th = threading.Thread(target=verify)
    th.start()
    steps = []
    while not done.is_set():
        steps.append(draft.pass_s(1))
    th.join()
    return out[0], len(steps), statistics.median(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=11, help="draft tokens a round (the best-k chooser's on code: 11-12)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    pair = models.load_pair()
    ids = prompts.encode(pair.tokenizer, prompts.bench_prompts("held-out")["code"].text)
    cores = devqueue.model_threads()
    n = args.k + 1

    def measure() -> dict[str, float]:
        target, draft = Model(pair.target, ids), Model(pair.draft, ids)
        rows: dict[str, list[float]] = {}
        for _ in range(args.reps):  # interleaved: every figure of a repetition taken within seconds
            for threads in (cores, 1):
                tuning.own_threads(threads)
                rows.setdefault(f"target 1 token, {threads} thread(s)", []).append(target.pass_s(1))
                rows.setdefault(f"target {n} tokens, {threads} thread(s)", []).append(target.pass_s(n))
                rows.setdefault(f"draft step, {threads} thread(s)", []).append(
                    statistics.median(draft.pass_s(1) for _ in range(5)))
            tuning.own_threads(cores)
            for m in (3, 5):
                rows.setdefault(f"draft pass of {m} tokens, {cores} thread(s)", []).append(draft.pass_s(m))
            tuning.own_threads(1)
            pass_s, steps, step_s = overlapped(target, draft, n)
            rows.setdefault(f"at once: target {n} tokens, 1 thread", []).append(pass_s)
            rows.setdefault("at once: draft step, 1 thread", []).append(step_s)
            rows.setdefault("at once: draft steps made during the pass", []).append(steps)
        tuning.own_threads(cores)
        return {name: statistics.median(v) for name, v in rows.items()}

    med = devqueue.run("cpu", measure)
    for name, v in med.items():
        print(f"{name:45s} {v * 1000 if 'made' not in name else v:8.1f}" + ("" if "made" in name else " ms"))
    seq = args.k * med[f"draft step, {cores} thread(s)"] + med[f"target {n} tokens, {cores} thread(s)"]
    both = max(args.k * med["at once: draft step, 1 thread"], med[f"at once: target {n} tokens, 1 thread"])
    print(f"a round of k = {args.k}: in turn, every core each {seq * 1000:.0f} ms; overlapped, one core each, "
          f"at best {both * 1000:.0f} ms ({seq / both:.2f}x)")


if __name__ == "__main__":
    main()
