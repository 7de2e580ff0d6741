"""Does mixing sessions' model work on one device slow it? One process, no server, no browsers.

Runs n main-page Runs (prompts.FIRST_RUN: the best-k chooser, then the target alone, greedy) back to back,
then the same n interleaved round-robin one round at a time (as the device queue hands the device over),
and repeats, alternating. `--target-only` runs just the target-alone runs, one token at a time.
Prints each Run's decode times, the median target-alone token and the speedups; every text must match.

    PYTHONPATH=. python scripts/interleave_check.py --sessions 4 --reps 2
    PYTHONPATH=. python scripts/interleave_check.py --target-only --reps 3

Figures from it are in the README ("Running a workshop", What is left).
"""

from __future__ import annotations

import argparse
import statistics
import time

from specviz.device import tuning
from specviz.decoding import engine, models
from specviz.core import prompts
from specviz.core.settings import DecodeSettings


def streams(pair, ids: list[int], target_only: bool) -> list:
    """One session's model work, in order: the speculative run (unless target_only), then the target alone."""
    fr = prompts.FIRST_RUN
    spec = [] if target_only else [engine.speculative_stream(
        pair.target, pair.draft, ids, DecodeSettings(k=fr.k, k_policy=fr.k_policy,
                                                     max_new_tokens=fr.max_new_tokens), **pair.run_kw)]
    return spec + [engine.autoregressive_stream(pair.target, ids, DecodeSettings(max_new_tokens=fr.max_new_tokens),
                                                **pair.run_kw)]


def run_sessions(pair, ids: list[int], n: int, interleave: bool, target_only: bool) -> list[list]:
    """n sessions' Runs, back to back or round-robin one round at a time -> [[Run, ...] per session]."""
    sessions = [streams(pair, ids, target_only) for _ in range(n)]
    if not interleave:
        for s in sessions:
            for stream in s:
                for _ in stream:
                    pass
    else:
        pos, live = [0] * n, list(range(n))
        while live:
            for i in list(live):
                try:
                    next(sessions[i][pos[i]])
                except StopIteration:  # this stream is done: the session's next one, or the session is
                    pos[i] += 1
                    if pos[i] == len(sessions[i]):
                        live.remove(i)
    return [[stream.run for stream in s] for s in sessions]


def report(name: str, runs: list[list], wall: float) -> str:
    base = [s[-1] for s in runs]
    token_ms = 1000 * statistics.median(r.verify_s for b in base for r in b.rounds[1:])  # prefill round left out
    texts = {tuple(run.token_ids) for s in runs for run in s}
    line = f"{name:16s} wall {wall:6.1f} s | target alone {[round(b.decode_s, 2) for b in base]} s, " \
           f"median token {token_ms:.0f} ms"
    if len(runs[0]) == 2:
        spec = [s[0] for s in runs]
        speedups = [(b.decode_s / len(b.token_ids)) / (p.decode_s / len(p.token_ids)) for p, b in zip(spec, base)]
        line += f" | speculative {[round(p.decode_s, 2) for p in spec]} s | speedups {[round(x, 2) for x in speedups]}"
    return line + f" | one text: {len(texts) == 1}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--target-only", action="store_true", help="only the target-alone runs")
    a = ap.parse_args()
    pair = models.load_pair()
    tuning.freeze_heap()  # as the server does after a load
    ids = prompts.encode(pair.tokenizer, prompts.preset(prompts.FIRST_RUN.preset).text)
    run_sessions(pair, ids, 1, False, a.target_only)  # warm-up
    for rep in range(a.reps):
        for name, interleave in (("back to back", False), ("interleaved", True)):
            t = time.perf_counter()
            runs = run_sessions(pair, ids, a.sessions, interleave, a.target_only)
            print(report(f"{rep} {name}", runs, time.perf_counter() - t), flush=True)


if __name__ == "__main__":
    main()
