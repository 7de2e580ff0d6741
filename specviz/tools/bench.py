"""`python -m specviz bench`: speculative decoding against the target alone and transformers.

All methods run in ONE process on the same weights, dtype and prompts
(one chat prompt per domain: code, list, factual, creative), interleaved
within each repetition so that drift in machine load hits every method alike:

  target          plain target decoding (the engine's own baseline)
  k=1 .. k=8      specviz speculative decoding with a fixed k (--ks)
  adaptive        +1 after a full acceptance, -1 after a rejection
  best            the best-k chooser, k_policy="best" (kpolicy.BestK: live alpha, c,
                  verify cost, and a stop after a doubtful draft)
  best-nostop     the same chooser with k fixed for the whole round (theory.best_k)
  prompt-lookup   no draft model: copy what followed an earlier n-gram (k by BestK)
  draft-exit-L    the best-k chooser with a shallower draft: the draft's first L layers, its
                  final norm and head (selfdraft.early_exit of the draft; --draft-exits, none
                  by default). Each has its own alpha and its own c from its runs
  tree-8, tree-16, tree-32
                  a token tree of that many nodes per round (branch 2, depth <= 8; --trees),
                  all verified in one target pass (specviz.decoding.tree)
  spine           a chain stopped by the best-k chooser, with one sibling leaf wherever the
                  draft's top probability is below tree.DOUBT, verified in one pass (specviz.decoding.tree)
  hf-target       transformers' generate() on the target alone
  hf-assisted     transformers' generate(assistant_model=draft): the reference
  hf-target-stock, hf-assisted-stock
                  the same two on transformers as shipped: with the oneDNN linear
                  path (specviz.modeling.fastlinear) switched off for the call. Only when
                  the pair has it on (float32 on a CPU); otherwise they equal the above
  llama-target, llama-spec
                  llama.cpp on the pair's GGUF files as shipped (quantized): the target alone,
                  and its speculative decoding with the same draft (specviz.tools.llamacpp).
                  Only where llama-cpp-python is installed (an optional extra); the bench
                  says how to install it. Their rows also give the speedup over llama.cpp's
                  own target alone, and whether its greedy text equals llama.cpp's target's

hf-assisted runs transformers' algorithm on the very kernels specviz uses, so
it compares scheduling alone; hf-assisted-stock is what a user of transformers
gets from the same weights and dtype on this machine.

Timings: a warm-up round of every method first, then --reps repetitions,
medians reported. `speedup` is per token and end to end (reading the prompt
included): baseline seconds per token / method seconds per token. The engine's
methods also get `decode_speedup`, over the rounds after the first (whose
passes also read the prompt: Round.prefill_tokens), which is what the model in
theory.py predicts from the measured alpha, c and verify cost (c from the runs,
by measure's rule; only when the runs give none, c from forward passes plus the
draft's two-token step after a wholly accepted round: see predicted_speedup);
efficiency = decode_speedup / predicted, over the same rounds. Bookkeeping is what a
round spends outside the forward passes: round_s - draft_s - verify_s.

Output: a markdown table (default), --json (stdout or --out FILE), and
--figure FILE.json (plotly JSON of measured vs predicted speedup over k, for
the app's Speedup page). Progress goes to stderr.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch

from specviz.device import clock, devqueue
from specviz.teaching import explain
from specviz.core import measure, theory
from specviz.modeling import memory, quant, sizing
from specviz.decoding import tree
from specviz.decoding.drafters import ModelDrafter, PromptLookupDrafter
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.core.errors import InvalidSetting
from specviz.teaching.experiments import forward_cost
from specviz.decoding.kpolicy import BestK
from specviz.modeling.lm import vocab_size
from specviz.core.prompts import bench_prompts, encode
from specviz.data.records import json_safe
from specviz.decoding.selfdraft import early_exit
from specviz.decoding.tree import tree_decode
from specviz.data.tree_records import TreeRound, TreeRun
from specviz.core.settings import DecodeSettings
from specviz.tools import llamacpp
from specviz.tools.llamacpp import LLAMA_SPEC, LLAMA_TARGET

FORMAT = "specviz.tools.bench/1"
DEFAULT_DOMAINS = ("code", "list", "factual", "creative")
ENGINE_BASELINE = "target"
HF_ASSISTED = "hf-assisted"
HF_TARGET = "hf-target"
HF_ASSISTED_STOCK = "hf-assisted-stock"
HF_TARGET_STOCK = "hf-target-stock"
TREE = "tree-"  # + the node budget
SPINE = "spine"
BEST_FULL_HEAD = "best-full-head"
DRAFT_EXIT = "draft-exit-"


# -----------------------------------------------------------------------------
# methods (the flags are parsed by cli.py)


def method_names(ks: list[int], trees: list[int] = (8, 16, 32), exits: list[int] = ()) -> list[str]:
    return ([ENGINE_BASELINE] + [f"k={k}" for k in ks]
            + ["adaptive", "best", BEST_FULL_HEAD, "best-nostop", "prompt-lookup"] + [f"{DRAFT_EXIT}{n}" for n in exits]
            + [f"{TREE}{n}" for n in trees] + [SPINE]
            + [HF_TARGET, HF_ASSISTED, HF_TARGET_STOCK, HF_ASSISTED_STOCK] + list(llamacpp.METHODS))


def select_methods(ks: list[int], trees: list[int], wanted: list[str] | None = None,
                   exits: list[int] = ()) -> list[str]:
    """The methods to run, in table order: all of them, or those `wanted` plus the baseline; InvalidSetting."""
    names = method_names(ks, trees, exits)
    if not wanted:
        return names
    unknown = [m for m in wanted if m not in names]
    if unknown:
        raise InvalidSetting(f"unknown method(s) {unknown}; choose from {', '.join(names)}")
    # every speedup is relative to the baseline, and llama.cpp's speculative decoding also to its own target alone
    return [m for m in names if m in wanted or m == ENGINE_BASELINE or (m == LLAMA_TARGET and LLAMA_SPEC in wanted)]


# -----------------------------------------------------------------------------
# the pair


def tiny_pair():
    """The tiny random pair of specviz.modeling.tiny, shaped like models.Pair."""
    from specviz.modeling.tiny import SPECIALS, char_tokenizer, tiny_model

    tok = char_tokenizer()
    target = tiny_model(seed=0)
    draft = tiny_model(seed=0, noise=0.3, hidden=64)
    eos = [SPECIALS.index("<eos>")]
    # all of the head's ids, as transformers' generate() picks from (ids past the characters decode to "")
    pair = SimpleNamespace(name="tiny", target=target, draft=draft, tokenizer=tok, dtype=torch.float32,
                           device="cpu", eos_token_ids=eos, shared_vocab=vocab_size(target),
                           draft_precision="float32", shares_vocab=True)
    pair.drafter = pair.chain_draft = lambda: pair.draft  # as models.Pair.drafter(): the draft model drafts
    return pair


SHARED_VOCAB_ONLY = (TREE, HF_ASSISTED, HF_ASSISTED_STOCK, BEST_FULL_HEAD, DRAFT_EXIT)  # they read the draft's ids as the target's


def left_out(pair, names: list[str]) -> dict[str, str]:
    """{method: why} for the methods this pair cannot run here: a draft with another tokenizer drafts chains
    only, through text; llama.cpp needs llama-cpp-python and the pair's GGUF files."""
    out = {}
    if not pair.shares_vocab:
        out.update({n: "the draft has another tokenizer" for n in names if n.startswith(SHARED_VOCAB_ONLY)})
    if (why := llamacpp.missing_why(getattr(pair, "spec", None))) is not None:
        out.update({n: why for n in names if n in llamacpp.METHODS})
    return out


def load(args):
    if args.tiny:
        pair = tiny_pair()
        if args.dtype:
            dt = quant.parse_dtype(args.dtype)
            pair.target, pair.draft, pair.dtype = pair.target.to(dt), pair.draft.to(dt), dt
        pair.draft_precision = quant.check(args.draft_precision, "cpu")
        quant.apply(pair.draft, pair.draft_precision)
        if args.fast_linear:
            from specviz.modeling import fastlinear

            fastlinear.enable(pair.target, pack=True)
            fastlinear.enable(pair.draft)
    else:
        from specviz.decoding.models import load_pair

        pair = load_pair(args.pair, dtype=args.dtype, registry=args.models, fast_linear=args.fast_linear,
                         draft_precision=args.draft_precision, draft_head=args.draft_head,
                         target_precision=getattr(args, "target_precision", None))
    return pair


# -----------------------------------------------------------------------------
# one measured generation


@dataclass
class Sample:
    """One generation of one method: what came out and how long it took."""

    tokens: list[int]
    wall_s: float  # the whole call, prefill included, less the time other threads held its cores
    run: Any = None  # the engine's Run (None for transformers and llama.cpp)
    passes: int | None = None  # llama.cpp: the target's forward passes (the prompt's included)
    draft_s: float | None = None  # llama.cpp: the time its draft took
    child_cpu_s: float = 0.0  # llama.cpp: the CPU time its own process used (not other programs' load)
    outside_load: bool = False  # other programs used the CPU meanwhile: its time is not this machine's speed
    stalled_s: float = 0.0  # wall time left out of wall_s: other threads held the cores its threads waited for


def _hf_generate(target, ids, max_new_tokens, eos, mode, temperature, seed, assistant=None) -> Sample:
    from transformers import GenerationConfig

    x = torch.tensor([ids], device=target.device)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=mode == "sample",
                           repetition_penalty=1.0, eos_token_id=list(eos), pad_token_id=eos[0],
                           num_beams=1, use_cache=True)
    if mode == "sample":
        cfg.temperature, cfg.top_k, cfg.top_p = temperature, 0, 1.0
    kw = {"assistant_model": assistant} if assistant is not None else {}
    torch.manual_seed(seed)
    with torch.inference_mode():
        t0 = time.perf_counter()
        # on the device's worker, with the threads the engine's model work has (devqueue.share_cores)
        out = devqueue.run(target.device, lambda: target.generate(x, attention_mask=torch.ones_like(x),
                                                                  generation_config=cfg, **kw))
        wall = time.perf_counter() - t0
    new = out[0, len(ids):].tolist()
    toks = []
    for t in new:  # up to and including the first EOS
        toks.append(t)
        if t in eos:
            break
    return Sample(toks, wall)


def run_method(pair, name: str, ids: list[int], mode: str, args, seed: int) -> Sample:
    """One generation, judged for outside load as the pages judge theirs: the engine's timed passes
    (clock.watch), and the whole call against the CPU time other programs used meanwhile (transformers'
    generate times no pass of its own)."""
    device = pair.target.device
    runner = devqueue.queue_runner(device)
    whole = runner.clock()
    with runner.watch() as load:
        s = _generate(pair, name, ids, mode, args, seed)
    t = whole.stop()
    others = t.others - s.child_cpu_s  # llama.cpp's own process is this bench's work, not outside load
    s.outside_load = devqueue.device_key(device) == "cpu" and (
        load.busy or clock.crowded(others, t.wall, devqueue.model_threads(device)))
    s.stalled_s = min(t.stalled, s.wall_s)
    s.wall_s -= s.stalled_s  # as the pages count it: the engine's and transformers' calls alike
    return s


def _generate(pair, name: str, ids: list[int], mode: str, args, seed: int) -> Sample:
    temperature = 0.0 if mode == "greedy" else args.temperature
    n = args.max_new_tokens
    eos = list(pair.eos_token_ids)
    base = DecodeSettings(temperature=temperature, max_new_tokens=n, seed=seed)
    common = dict(eos_token_id=eos, vocab=pair.shared_vocab)
    t0 = time.perf_counter()
    if name == ENGINE_BASELINE:
        run = autoregressive_decode(pair.target, ids, base, **common)
    elif name.startswith("k="):
        run = speculative_decode(pair.target, pair.drafter(), ids, replace(base, k=int(name[2:])), **common)
    elif name == "adaptive":
        run = speculative_decode(pair.target, pair.drafter(), ids, replace(base, k=4, k_policy="adaptive"), **common)
    elif name == "best":
        run = speculative_decode(pair.target, pair.drafter(), ids, replace(base, k=4, k_policy="best"), **common)
    elif name == BEST_FULL_HEAD:  # the best-k chooser with the draft's whole head, whatever the pair's
        run = speculative_decode(pair.target, ModelDrafter(pair.draft), ids, replace(base, k=4, k_policy="best"),
                                 **common)
    elif name == "best-nostop":
        run = speculative_decode(pair.target, pair.drafter(), ids, replace(base, k=4, k_policy=BestK(4, k_max=16)),
                                 **common)
    elif name == "prompt-lookup":
        run = speculative_decode(pair.target, PromptLookupDrafter(), ids,
                                 replace(base, k=4, k_policy=BestK(4, k_max=16)),
                                 **common)
    elif name.startswith(DRAFT_EXIT):
        run = speculative_decode(pair.target, exit_drafter(pair, int(name[len(DRAFT_EXIT):])), ids,
                                 replace(base, k=4, k_policy="best"), **common)
    elif name.startswith(TREE):
        run = tree_decode(pair.target, pair.draft, ids, base, budget=int(name[len(TREE):]), **common)
    elif name == SPINE:
        run = tree_decode(pair.target, pair.draft, ids, replace(base, k_policy="best"), shape="spine", **tree.SPINE,
                          **common)
    elif name == HF_TARGET:
        return _hf_generate(pair.target, ids, n, eos, mode, temperature, seed)
    elif name == HF_ASSISTED:
        return _hf_generate(pair.target, ids, n, eos, mode, temperature, seed, assistant=pair.draft)
    elif name in (HF_TARGET_STOCK, HF_ASSISTED_STOCK):
        from specviz.modeling import fastlinear

        with fastlinear.stock(pair.target, pair.draft):
            return _hf_generate(pair.target, ids, n, eos, mode, temperature, seed,
                                assistant=pair.draft if name == HF_ASSISTED_STOCK else None)
    elif name in llamacpp.METHODS:
        g = args.llama.generate(name, ids, n, eos, temperature, seed)
        return Sample(g.tokens, g.wall_s, passes=g.passes, draft_s=g.draft_s, child_cpu_s=g.cpu_s)
    else:
        raise InvalidSetting(f"unknown method {name!r}")
    return Sample(list(run.token_ids), time.perf_counter() - t0, run)


def exit_drafter(pair, layers: int):
    """What drafts for draft-exit-L: the draft's first `layers` layers with its final norm and head
    (selfdraft.early_exit, sharing the draft's modules), through the frequent head where the pair drafts with one."""
    model = early_exit(pair.draft, layers)
    rows = pair.frequent_rows() if hasattr(pair, "frequent_rows") else None
    return model if rows is None else ModelDrafter(model, rows=rows)


# -----------------------------------------------------------------------------
# statistics


def predicted_speedup(runs, alpha: float, c: float, verify_cost, refeed: float = 0.0) -> float:
    """The model's speedup for the rounds actually run: sum E[tokens](alpha, k_r) / sum E[cost_r], with

        E[cost_r] = k_r c + r(k_r + 1) + alpha^(k_(r-1)) * refeed

    For a fixed k and refeed = 0 this is theory.expected_speedup(alpha, k, c, verify_cost).
    `refeed`: what the draft's first step of a round costs beyond c when the previous round
    was wholly accepted (chance alpha^k): the draft then reads two tokens, its own last draft,
    which it never fed, and the bonus (measured: 2-token minus 1-token draft step, in target
    steps). Each run's final round counts with the tokens it actually emitted: EOS or the
    length limit cuts it short, which the model does not know about (on a 60-token answer
    with k = 8 that one round is ~10%). The round that also read the prompt is left out, as
    it is from the measured decode speedup.
    """
    if not math.isfinite(alpha) or not math.isfinite(c):
        return float("nan")
    tokens = cost = 0.0
    for run in runs:
        for i, r in enumerate(run.rounds):
            if r.prefill_tokens:
                continue  # the round that also read the prompt: not in decode_speedup either
            last = i == len(run.rounds) - 1
            tokens += len(r.emitted) if last else theory.expected_tokens(alpha, r.k)
            cost += theory.round_cost(r.k, c, verify_cost)
            if i > 0 and r.k > 0:
                cost += alpha ** run.rounds[i - 1].k * refeed  # the draft re-reads after a full acceptance
    return tokens / cost if cost > 0 else float("nan")


def predicted_from_tokens_per_pass(runs, c: float, verify_cost, refeed: float = 0.0) -> float:
    """The cost model alone: measured tokens per pass / mean (k_r c + r(k_r + 1) + refeed after a bonus)."""
    tokens = cost = 0.0
    for run in runs:
        for i, r in enumerate(run.rounds):
            if r.prefill_tokens:
                continue
            tokens += len(r.emitted)
            cost += theory.round_cost(r.k, c, verify_cost)
            if i > 0 and r.k > 0 and run.rounds[i - 1].extra_kind == "bonus":
                cost += refeed
    if cost <= 0 or not math.isfinite(c):
        return float("nan")
    return tokens / cost


def summarise(name: str, samples: list[Sample], base: dict, alpha_c_vc) -> dict:
    """One row: medians over repetitions, for one method on one (mode, domain)."""
    toks = [len(s.tokens) for s in samples]
    spt = [s.wall_s / max(len(s.tokens), 1) for s in samples]
    row: dict[str, Any] = {
        "method": name,
        "tokens": int(statistics.median(toks)),
        "wall_s": measure.median([s.wall_s for s in samples]),
        "s_per_token": measure.median(spt),
        "reps_wall_s": [s.wall_s for s in samples],
        "reps_tokens": toks,
        "outside_load_reps": sum(getattr(s, "outside_load", False) for s in samples),
        "reps_stalled_s": [getattr(s, "stalled_s", 0.0) for s in samples],
    }
    row["tokens_per_s"] = measure.tokens_per_s(1.0, row["s_per_token"])
    row["speedup"] = measure.speedup_from(base["s_per_token"], row["s_per_token"]) if base else float("nan")
    if all(getattr(s, "passes", None) for s in samples):  # llama.cpp: tokens per pass, the draft's share of time
        row["tokens_per_pass"] = sum(toks) / sum(s.passes for s in samples)
        row["draft_pct"] = 100.0 * sum(s.draft_s for s in samples) / sum(s.wall_s for s in samples)
    runs = [s.run for s in samples if s.run is not None]
    if runs:
        row["decode_s_per_token"] = measure.median([r.steady_s_per_token for r in runs])  # after the prompt is read
        row["decode_speedup"] = (measure.speedup_from(base["decode_s_per_token"], row["decode_s_per_token"])
                                 if base and base.get("decode_s_per_token") else float("nan"))
        rounds = [r for run in runs for r in run.rounds]
        round_s = sum(r.round_s for r in rounds)
        inner = sum((sum(r.draft_s) if isinstance(r, TreeRound) else r.draft_s) + r.verify_s for r in rounds)
        row["bookkeeping_pct"] = 100.0 * (round_s - inner) / round_s if round_s > 0 else float("nan")
        row["bookkeeping_ms_per_round"] = 1000.0 * (round_s - inner) / len(rounds) if rounds else float("nan")
        loop = sum(r.decode_s for r in runs) - round_s
        row["loop_overhead_pct"] = 100.0 * loop / sum(r.decode_s for r in runs) if runs else float("nan")
        row["tokens_per_pass"] = sum(len(r.token_ids) for r in runs) / max(sum(r.target_passes for r in runs), 1)
        if isinstance(runs[0], TreeRun):
            return row  # no k, no chain model of alpha and c
        ks = [r.k for r in rounds]
        row["mean_k"] = statistics.fmean(ks) if ks else float("nan")
        if name != ENGINE_BASELINE:
            alpha = measure.pooled_alpha(runs)
            c, vc, refeed = (*alpha_c_vc, 0.0)[:3]
            if name == "prompt-lookup":
                c = refeed = 0.0  # no draft model: drafting costs nothing
            row["alpha"] = alpha
            row["c"] = c
            row["predicted"] = predicted_speedup(runs, alpha, c, vc, refeed)
            row["predicted_from_tokens_per_pass"] = predicted_from_tokens_per_pass(runs, c, vc, refeed)
            row["efficiency"] = row["decode_speedup"] / row["predicted"] if row["predicted"] > 0 else float("nan")
            if name.startswith("k="):
                k = int(name[2:])
                row["predicted_formula"] = (theory.expected_speedup(alpha, k, c, vc)
                                            if math.isfinite(alpha) and math.isfinite(c) else float("nan"))
    return row


def aggregate(name: str, rows: list[dict], base_rows: list[dict]) -> dict:
    """Over the mixed prompt set: total (median) time over total tokens, per method."""
    tok = sum(r["tokens"] for r in rows)
    wall = sum(r["s_per_token"] * r["tokens"] for r in rows)
    btok = sum(r["tokens"] for r in base_rows)
    bwall = sum(r["s_per_token"] * r["tokens"] for r in base_rows)
    out = {"method": name, "tokens": tok, "wall_s": wall, "tokens_per_s": measure.tokens_per_s(tok, wall),
           "outside_load_reps": sum(r.get("outside_load_reps", 0) for r in rows)}
    out["speedup"] = measure.speedup_from(bwall / btok, wall / tok) if tok and btok else float("nan")
    if all("decode_s_per_token" in r for r in rows):
        dec = sum(r["decode_s_per_token"] * r["tokens"] for r in rows)
        bdec = sum(r["decode_s_per_token"] * r["tokens"] for r in base_rows)
        out["decode_speedup"] = measure.speedup_from(bdec / btok, dec / tok) if tok and btok else float("nan")
    for key in ("alpha", "c", "predicted", "predicted_from_tokens_per_pass", "efficiency", "bookkeeping_pct", "mean_k",
                "tokens_per_pass", "draft_pct"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            w = [r["tokens"] for r in rows if key in r]
            good = [(v, ww) for v, ww in zip(vals, w) if math.isfinite(v)]
            out[key] = sum(v * ww for v, ww in good) / sum(ww for _, ww in good) if good else float("nan")
    return out


# -----------------------------------------------------------------------------
# the benchmark


@dataclass(frozen=True)
class Costs:
    """Forward timings: the target over n tokens, the draft over 1 and 2, and what follows from them."""

    target: dict[int, list[float]]  # n tokens -> seconds of each repetition
    draft: dict[int, list[float]]
    verify_ratio: dict[int, float]  # target n-token pass / 1-token pass
    c_forward: float  # draft step / target step
    refeed: float  # a draft step that reads two tokens (after a wholly accepted round), beyond c, in target steps


def measure_costs(pair, ks: list[int], reps: int, say) -> Costs:
    """Target forward over n tokens (the verify ratio), draft forward, c."""
    sizes = sorted({1, 2, 3, 4, 5, 6, 8, 9} | {k + 1 for k in ks})
    say(f"forward cost of the target for {sizes} tokens")
    tcost = forward_cost(pair.target, n_tokens=tuple(sizes), reps=reps)
    say("forward cost of the draft")
    dcost = forward_cost(pair.chain_draft(), n_tokens=(1, 2), reps=reps)  # as the chains draft
    refeed = max(0.0, (measure.median(dcost[2]) - measure.median(dcost[1])) / measure.median(tcost[1]))
    return Costs(tcost, dcost, measure.verify_ratios(tcost), measure.c_ratio(dcost[1], tcost[1]), refeed)


def warm_up(pair, args, prompt_ids: list[int], say) -> None:
    """Every method once, a few tokens, so one-time costs land in no measurement."""
    short = SimpleNamespace(**{**vars(args), "max_new_tokens": min(4, args.max_new_tokens)})
    for name in args.method_names:
        for mode in args.modes:
            say(f"warm-up {name} ({mode})")
            run_method(pair, name, prompt_ids, mode, short, args.seed)


def run_all(pair, args, prompts: dict[str, list[int]], say) -> dict[tuple[str, str, str], list[Sample]]:
    """The runs, interleaved (rep > mode > domain > method) so drift in load hits every method alike."""
    names = args.method_names
    samples: dict[tuple[str, str, str], list[Sample]] = {}
    total = args.reps * len(args.modes) * len(args.domains) * len(names)
    done = 0
    for rep in range(args.reps):
        for mode in args.modes:
            for dom in args.domains:
                for name in names:
                    s = run_method(pair, name, prompts[dom], mode, args, args.seed + rep)
                    samples.setdefault((mode, dom, name), []).append(s)
                    done += 1
                    say(f"[{done}/{total}] rep {rep + 1} {mode:6s} {dom:8s} {name:13s} "
                        f"{len(s.tokens):3d} tokens {len(s.tokens) / s.wall_s:6.2f} tok/s "
                        f"(load {_load_avg():.1f}{'; under outside load' if s.outside_load else ''})")
    return samples


def mode_statistics(mode: str, args, samples, costs: Costs) -> tuple[list[dict], list[dict]]:
    """One mode's rows (per domain and method) and summary (per method, over the mixed prompt set)."""
    names, domains = args.method_names, args.domains
    pooled = {ENGINE_BASELINE: [s for d in domains for s in samples[(mode, d, ENGINE_BASELINE)]],
              "draft": [s for d in domains for n in names
                        if n.startswith("k=") or n in ("adaptive", "best", "best-nostop")
                        for s in samples[(mode, d, n)]]}
    c_runs = measure.c_from_runs([s.run for s in pooled["draft"]], [s.run for s in pooled[ENGINE_BASELINE]])
    # c from the runs already carries the re-read after a bonus (measure's rule); c_forward does not
    c_use, refeed_use = (c_runs, 0.0) if math.isfinite(c_runs) else (costs.c_forward, costs.refeed)
    model = (c_use, costs.verify_ratio, refeed_use)
    own = {n: (measure.c_from_runs([s.run for d in domains for s in samples[(mode, d, n)]],
                                   [s.run for s in pooled[ENGINE_BASELINE]]), costs.verify_ratio, 0.0)
           for n in names if n.startswith(DRAFT_EXIT)}  # a shallower draft: its own c
    results, by_method = [], {}
    for dom in domains:
        base = summarise(ENGINE_BASELINE, samples[(mode, dom, ENGINE_BASELINE)], {}, model)
        base["speedup"] = 1.0
        base["decode_speedup"] = 1.0
        for name in names:
            row = base if name == ENGINE_BASELINE else summarise(name, samples[(mode, dom, name)], base,
                                                                 own.get(name, model))
            row = {"mode": mode, "domain": dom, **row}
            if mode == "greedy":
                row["same_as_baseline"] = (samples[(mode, dom, name)][0].tokens
                                           == samples[(mode, dom, ENGINE_BASELINE)][0].tokens)
            results.append(row)
            by_method.setdefault(name, []).append(row)
    summary = [{"mode": mode, "c_runs": c_runs, **aggregate(name, by_method[name], by_method[ENGINE_BASELINE])}
               for name in names]
    if LLAMA_TARGET in by_method:
        _own_baseline(mode, results + summary, samples)
    return results, summary


def _own_baseline(mode: str, rows: list[dict], samples) -> None:
    """llama.cpp's rows (per domain, then the mixed set) also against llama.cpp's target alone: own_speedup, and
    in greedy mode whether the text equals llama.cpp's target's (same_as_own_target)."""
    own = {r.get("domain"): r for r in rows if r["method"] == LLAMA_TARGET}
    for r in rows:
        if r["method"] in llamacpp.METHODS:
            base = own[r.get("domain")]
            r["own_speedup"] = (measure.speedup_from(base["s_per_token"], r["s_per_token"]) if "s_per_token" in r
                                else measure.speedup_from(base["wall_s"] / base["tokens"], r["wall_s"] / r["tokens"]))
            if mode == "greedy" and "domain" in r:
                d = r["domain"]
                r["same_as_own_target"] = (samples[(mode, d, r["method"])][0].tokens
                                           == samples[(mode, d, LLAMA_TARGET)][0].tokens)


def _config(args, pair, t_start: float, load_start: float) -> dict:
    """What was measured, on what, with which versions, and how loaded the machine was."""
    return {
        "pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""), "device": str(pair.device),
        "draft_precision": pair.draft_precision, "draft_head": getattr(pair, "draft_head", "full"),
        "target_precision": getattr(pair, "target_precision", "float32"),
        "fast_linear": _fast_linear_on(pair),
        "threads": devqueue.model_threads(pair.device), "ks": args.ks, "methods": args.method_names,
        "left_out": getattr(args, "left_out", {}), "domains": args.domains,
        "prompt_set": args.prompt_set, "modes": args.modes, "temperature": args.temperature, "reps": args.reps,
        "max_new_tokens": args.max_new_tokens, "seed": args.seed,
        "torch": torch.__version__, "transformers": _version("transformers"), "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": _load_avg(),
        "elapsed_s": time.perf_counter() - t_start,
        # the process's peak resident memory (one configuration per run), and what the estimator says it needs
        "peak_rss_bytes": memory.peak_resident_bytes(),
        "memory_estimate_bytes": (sizing.estimate_memory_bytes(pair.spec, pair.dtype, draft_precision=pair.draft_precision,
                                                               target_precision=getattr(pair, "target_precision", None))
                                  if getattr(pair, "spec", None) is not None else None),
    }  # fmt: skip


def _measure(pair, args, prompts: dict[str, list[int]], say):
    """1. the forward costs (specviz's, and llama.cpp's where it runs), 2. a warm-up, 3. the runs."""
    costs = measure_costs(pair, args.ks, args.cost_reps, say)
    llama_costs = None
    if getattr(args, "llama", None) is not None:
        say("forward cost of llama.cpp's target and draft")
        llama_costs = args.llama.forward_costs(prompts[args.domains[0]], reps=args.cost_reps)
    if not args.no_warmup:
        warm_up(pair, args, prompts[args.domains[0]], say)
    return costs, llama_costs, run_all(pair, args, prompts, say)


def llama_context(prompts: dict[str, list[int]], max_new_tokens: int) -> int:
    """llama.cpp's context for these prompts: the longest, the new tokens and a full draft, in steps of 64."""
    need = max(map(len, prompts.values())) + max_new_tokens + llamacpp.DRAFT_MAX + 1
    return 64 * math.ceil(need / 64)


def _load_avg() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def bench(args, pair=None, progress=None) -> dict:
    """The whole benchmark (args: cli.parse_bench_args); returns the report (markdown(), to_json())."""
    say = progress or (lambda msg: None)
    t_start, load_start = time.perf_counter(), _load_avg()
    if args.threads:
        devqueue.set_model_threads(args.threads)
    if pair is None:
        say("loading the pair")
        pair = load(args)
    out = left_out(pair, args.method_names)
    for why in dict.fromkeys(out.values()):
        say(f"{pair.name}: left out {[n for n, w in out.items() if w == why]}: {why}")
    args = SimpleNamespace(**{**vars(args), "method_names": [n for n in args.method_names if n not in out],
                              "left_out": out})
    presets = bench_prompts(args.prompt_set)
    prompts = {d: encode(pair.tokenizer, presets[d].text, presets[d].chat) for d in args.domains}
    if any(n in llamacpp.METHODS for n in args.method_names):
        say("opening the pair's GGUF files in llama.cpp")
        args.llama = llamacpp.LlamaProcess.open(pair.spec, n_ctx=llama_context(prompts, args.max_new_tokens),
                                                threads=devqueue.model_threads(pair.device), progress=say)
    try:
        costs, llama_costs, samples = _measure(pair, args, prompts, say)
    finally:
        if getattr(args, "llama", None) is not None:
            args.llama.close()
    results, summary, checks = [], [], {}
    for mode in args.modes:
        rows, summ = mode_statistics(mode, args, samples, costs)
        results += rows
        summary += summ
        checks[mode] = _checks(mode, results, summary, args.method_names)
    return {
        "format": FORMAT,
        "config": _config(args, pair, t_start, load_start),
        "prompts": {d: {"name": presets[d].name, "text": presets[d].text, "n_tokens": len(prompts[d])}
                    for d in args.domains},
        "costs": {
            "target_forward_s": {n: measure.median(v) for n, v in costs.target.items()},
            "draft_forward_s": {n: measure.median(v) for n, v in costs.draft.items()},
            "verify_ratio": costs.verify_ratio, "c_forward": costs.c_forward, "refeed": costs.refeed,
            # what the best-k chooser takes c to be before a round is timed (and through a sampling run)
            "c_prior": measure.c_prior(pair.draft, pair.target),
            "llama": llama_costs,  # llama.cpp's target over n tokens and draft step, seconds (None: not run)
        },
        "results": results,
        "summary": summary,
        "checks": checks,
        "figure_rows": [{"k": int(r["method"][2:]), "measured": r["decode_speedup"], "predicted": r["predicted"],
                         "domain": r["domain"], "mode": r["mode"]}
                        for r in results if r["method"].startswith("k=") and r["mode"] == args.modes[0]],
    }


def claims_figures(report: dict, mode: str = "greedy") -> dict:
    """The figures the claims quote (specviz/core/measured.json's bench groups), as far as the report has them:
    c from the runs, the speedups of the best-k chooser, k = 4 and prompt lookup on code and over the prompt set."""
    summ = {s["method"]: s for s in report["summary"] if s["mode"] == mode}
    code = {r["method"]: r for r in report["results"] if r["mode"] == mode and r["domain"] == "code"}
    out: dict[str, Any] = {"prompts": len(report["config"]["domains"])}
    if summ:
        out["c"] = next(iter(summ.values()))["c_runs"]
    for name, key in (("best", "best"), ("k=4", "k4"), ("prompt-lookup", "prompt_lookup")):
        if name in summ:
            out[f"{key}_mixed"] = summ[name]["speedup"]
        if name in code:
            out[f"{key}_code"] = code[name]["speedup"]
    if "best_over_k4_mixed" in report["checks"].get(mode, {}):
        out["best_over_k4_mixed"] = report["checks"][mode]["best_over_k4_mixed"]
    out.update(llama_figures(report, mode))
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


def llama_figures(report: dict, mode: str = "greedy") -> dict:
    """llama.cpp's figures over the prompt set, beside specviz's best-k chooser's: tokens per second, llama.cpp's
    speculative decoding over its own target alone, and on how many prompts its greedy text equals its target's."""
    summ = {s["method"]: s for s in report["summary"] if s["mode"] == mode}
    if LLAMA_SPEC not in summ or LLAMA_TARGET not in summ:
        return {}
    checks = report["checks"][mode]  # _llama_checks's ratios
    out = {"llama_target_tps": summ[LLAMA_TARGET]["tokens_per_s"], "llama_spec_tps": summ[LLAMA_SPEC]["tokens_per_s"],
           "llama_spec_own": checks["llama_spec_over_llama_target_mixed"]}
    if mode == "greedy":  # on how many prompts llama.cpp's speculative text equals its own target alone's
        out["llama_same_texts"] = sum(r["same_as_own_target"] for r in report["results"]
                                      if r["mode"] == mode and r["method"] == LLAMA_SPEC)
    if "best" in summ:
        out["best_tps"] = summ["best"]["tokens_per_s"]
        out["best_over_llama_spec"] = checks["best_tokens_per_s_over_llama_spec_mixed"]
    return out


def command_of(report: dict) -> str:
    """The bench command that reproduces the report's runs."""
    cfg = report["config"]
    pair = "--tiny" if cfg["pair"] == "tiny" else f"--pair {cfg['pair']}"
    target = cfg.get("target_precision", "float32")
    return (f"python -m specviz bench {pair} --dtype {cfg['dtype']} --draft-precision {cfg['draft_precision']} "
            + ("" if target == "float32" else f"--target-precision {target} ") + f"--reps {cfg['reps']} --ks {','.join(map(str, cfg['ks']))} --prompt-set {cfg['prompt_set']} "
            f"--domains {','.join(cfg['domains'])} --modes {','.join(cfg['modes'])} "
            f"--methods {','.join(cfg['methods'])} --max-new-tokens {cfg['max_new_tokens']}")


def machine_of(report: dict) -> str:
    cfg = report["config"]
    return (f"{cfg['device']}, {cfg['cpu_count']} CPUs, {cfg['threads']} threads, pair {cfg['pair']} "
            f"({cfg.get('target_precision', cfg['dtype'])} target, {cfg['draft_precision']} draft), "
            f"torch {cfg['torch']}")


def _fast_linear_on(pair) -> bool:
    from specviz.modeling import fastlinear

    return fastlinear.is_enabled(pair.target)


def _version(pkg: str) -> str:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def _checks(mode: str, results: list[dict], summary: list[dict], names: list[str]) -> dict:
    """The targets: specviz vs transformers on code, measured vs predicted, best vs k=4, bookkeeping."""
    out: dict[str, Any] = {}
    rows = {r["method"]: r for r in results if r["mode"] == mode and r["domain"] == "code"}
    summ = {s["method"]: s for s in summary if s["mode"] == mode}
    if HF_ASSISTED in rows:
        hf = rows[HF_ASSISTED]["speedup"]
        out["hf_assisted_speedup_code"] = hf
        if HF_TARGET in rows:
            out["hf_assisted_speedup_over_hf_target_code"] = rows[HF_TARGET]["s_per_token"] / rows[HF_ASSISTED]["s_per_token"]
        for m in ("best", SPINE):
            if m in rows:
                out[f"{m}_over_hf_code"] = rows[m]["speedup"] / hf
                if HF_TARGET in rows:  # each implementation's speedup over its own plain decoding
                    out[f"{m}_over_hf_own_baseline_code"] = (rows[m]["speedup"]
                                                             / out["hf_assisted_speedup_over_hf_target_code"])
    if HF_ASSISTED in summ and HF_TARGET in summ:  # the same over the whole prompt set
        hf_own = summ[HF_ASSISTED]["speedup"] / summ[HF_TARGET]["speedup"]
        for m in ("best", SPINE):
            if m in summ:
                out[f"{m}_over_hf_own_baseline_mixed"] = summ[m]["speedup"] / hf_own
        fixed = [n for n in rows if n.startswith("k=")]
        if fixed:
            kb = max(fixed, key=lambda n: rows[n]["speedup"])
            out["best_fixed_k_code"] = kb
            out["best_fixed_over_hf_code"] = rows[kb]["speedup"] / hf
    if HF_ASSISTED_STOCK in rows:
        stock = rows[HF_ASSISTED_STOCK]
        out["hf_assisted_stock_speedup_code"] = stock["speedup"]
        if HF_TARGET_STOCK in rows:
            own = rows[HF_TARGET_STOCK]["s_per_token"] / stock["s_per_token"]
            out["hf_assisted_stock_speedup_over_hf_target_stock_code"] = own
            if "best" in rows:
                out["best_over_hf_stock_own_baseline_code"] = rows["best"]["speedup"] / own
        if "best" in rows:
            out["best_over_hf_stock_code"] = rows["best"]["speedup"] / stock["speedup"]
    eff = [r["efficiency"] for r in results if r["mode"] == mode and r["method"].startswith("k=")
           and math.isfinite(r.get("efficiency", float("nan")))]
    if eff:
        out["efficiency_fixed_k_min"] = min(eff)
        out["efficiency_fixed_k_median"] = statistics.median(eff)
    if "best" in summ and "k=4" in summ:
        out["best_over_k4_mixed"] = summ["best"]["speedup"] / summ["k=4"]["speedup"]
    if "best" in summ and SPINE in summ:
        out["spine_over_best_mixed"] = summ[SPINE]["speedup"] / summ["best"]["speedup"]
    out.update(_tree_checks(rows, summ))
    out.update(_llama_checks(summ))
    bk = [r["bookkeeping_pct"] for r in results if r["mode"] == mode and "bookkeeping_pct" in r
          and math.isfinite(r["bookkeeping_pct"])]
    if bk:
        out["bookkeeping_pct_max"] = max(bk)
    return out


def _llama_checks(summ: dict) -> dict:
    """llama.cpp's speculative decoding over its own target alone, and specviz's best-k chooser's tokens per
    second against llama.cpp's, over the mixed prompt set."""
    out: dict[str, Any] = {}
    if LLAMA_SPEC in summ:
        out["llama_spec_over_llama_target_mixed"] = summ[LLAMA_SPEC].get("own_speedup", float("nan"))
        for m in ("best", LLAMA_TARGET):
            if m in summ:
                out[f"{m.replace('-', '_')}_tokens_per_s_over_llama_spec_mixed"] = (
                    summ[m]["tokens_per_s"] / summ[LLAMA_SPEC]["tokens_per_s"])
    return out


def _tree_checks(rows: dict, summ: dict) -> dict:
    """Trees against chains: tokens per pass on code against k=4's, and the best budget's speedup (mixed set)
    against k=4 and the best-k chain."""
    trees = [n for n in summ if n.startswith(TREE)]
    if not trees:
        return {}
    out: dict[str, Any] = {}
    if "k=4" in rows:
        top = max((n for n in trees if n in rows), key=lambda n: rows[n]["tokens_per_pass"])
        out["tree_tokens_per_pass_over_k4_code"] = rows[top]["tokens_per_pass"] / rows["k=4"]["tokens_per_pass"]
    best = max(trees, key=lambda n: summ[n]["speedup"])
    out["best_tree"] = best
    out["best_tree_speedup"] = summ[best]["speedup"]
    for chain in ("k=4", "best"):
        if chain in summ:
            out[f"best_tree_over_{chain.replace('=', '')}"] = summ[best]["speedup"] / summ[chain]["speedup"]
    return out


# -----------------------------------------------------------------------------
# output


def _f(x, fmt="{:.2f}", none="–"):
    return fmt.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else none


def _at(d: dict, n: int) -> float:
    """d[n] for a dict keyed by int (in memory) or by str (read back from JSON); nan if absent."""
    v = d.get(n, d.get(str(n)))
    return float("nan") if v is None else v


def header(report: dict) -> list[str]:
    """The report's title, what was measured and how, its memory, and the forward costs."""
    cfg = report["config"]
    target = cfg.get("target_precision", "float32")
    lines = [f"# specviz bench: {cfg['pair']} ({cfg['dtype']}{', fast-linear' if cfg['fast_linear'] else ''}, "
             + ("" if target == "float32" else f"{target} target, ") +
             f"{cfg.get('draft_precision', 'float32')} draft, {cfg.get('draft_head', 'full')} head, {cfg['device']}, "
             f"{cfg['threads']} threads)", ""]
    lines.append(f"{cfg['max_new_tokens']} new tokens, median of {cfg['reps']} repetitions, load average "
                 f"{_f(cfg['load_avg_start'], '{:.1f}')} → {_f(cfg['load_avg_end'], '{:.1f}')}; "
                 f"speedup = target-alone s/token ÷ method s/token, end to end (reading the prompt included); "
                 f"decode = the rounds after the first (which also reads the prompt); "
                 f"predicted from the measured α, c and verify cost "
                 f"(or, to check the cost model alone, from the measured tokens per pass); "
                 f"efficiency = decode speedup ÷ predicted.")
    if cfg.get("peak_rss_bytes"):
        estimate = cfg.get("memory_estimate_bytes")
        lines.append(f"Peak resident memory (VmHWM) {cfg['peak_rss_bytes'] / 2**30:.2f} GiB"
                     + ("." if estimate is None else  # a pair from outside the registry (--tiny): no estimate
                        f"; the estimate for this configuration, {estimate / 2**30:.2f} GiB."))
    costs = report["costs"]
    lines.append("")
    lines.append("target forward: " + ", ".join(f"{n} tok {1000 * s:.0f} ms"
                                                for n, s in costs["target_forward_s"].items())
                 + f"; draft 1 tok {1000 * _at(costs['draft_forward_s'], 1):.0f} ms, 2 tok "
                 f"{1000 * _at(costs['draft_forward_s'], 2):.0f} ms; c = {costs['c_forward']:.3f} (the chooser's prior "
                 f"before any timing, {_f(costs.get('c_prior'), '{:.3f}')}); the draft's "
                 f"two-token step after a wholly accepted round costs {_f(costs.get('refeed'), '{:.3f}')} more")
    if costs.get("llama"):
        lines.append("")
        lines.append(llama_costs_line(costs["llama"]))
    return lines


def markdown(report: dict) -> str:
    cfg = report["config"]
    lines = header(report)
    domains = cfg["domains"]
    for mode in cfg["modes"]:
        title = "greedy" if mode == "greedy" else f"sampling, temperature {cfg['temperature']}"
        summ = {s["method"]: s for s in report["summary"] if s["mode"] == mode}
        c_runs = next(iter(summ.values()))["c_runs"] if summ else float("nan")
        lines += ["", f"## {title} (c from the runs = {_f(c_runs, '{:.3f}')})", ""]
        head = (["method"] + [f"{d} ×" for d in domains]
                + ["all tok/s", "all ×", "decode ×", "α", "mean k", "tokens/pass", "predicted ×",
                   "predicted from tokens/pass ×", "efficiency", "bookkeeping %"])
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        rows = {(r["domain"], r["method"]): r for r in report["results"] if r["mode"] == mode}
        for name in cfg["methods"]:
            s = summ[name]
            cells = [name] + [_f(rows[(d, name)]["speedup"])
                              + ("" if rows[(d, name)].get("same_as_baseline", True) else " ≠")
                              + (" †" if _loaded(rows, d, name) else "") for d in domains]
            marked = s.get("outside_load_reps") or summ.get(ENGINE_BASELINE, {}).get("outside_load_reps")
            cells += [_f(s["tokens_per_s"]) + (" †" if s.get("outside_load_reps") else ""),
                      _f(s["speedup"]) + (" †" if marked else ""), _f(s.get("decode_speedup")),
                      _f(s.get("alpha"), "{:.3f}"), _f(s.get("mean_k"), "{:.1f}"), _f(s.get("tokens_per_pass")),
                      _f(s.get("predicted")), _f(s.get("predicted_from_tokens_per_pass")),
                      _f(s.get("efficiency")), _f(s.get("bookkeeping_pct"), "{:.1f}")]
            lines.append("| " + " | ".join(cells) + " |")
        if exits := [n for n in cfg["methods"] if n.startswith(DRAFT_EXIT)]:
            lines += ["", "c of each shallower draft, from its own runs: "
                      + ", ".join(f"{n} {_f(summ[n].get('c'), '{:.3f}')}" for n in exits)]
        if LLAMA_TARGET in summ:
            lines += llama_table(summ, rows, domains)
        ch = report["checks"].get(mode, {})
        if ch:
            lines.append("")
            lines.append("targets: " + "; ".join(f"{k} = {_f(v, '{:.3f}') if not isinstance(v, str) else v}"
                                                 for k, v in ch.items()))
    if any(r.get("same_as_baseline") is False for r in report["results"] if r["method"] not in llamacpp.METHODS):
        lines += ["", "≠: greedy output differs from the target alone (float rounding between batched and "
                      "one-token passes can flip a near-tie)"]
    if any(r.get("same_as_baseline") is False for r in report["results"] if r["method"] in llamacpp.METHODS):
        lines += ["", "≠ in llama.cpp's rows: its greedy text differs from specviz's target alone, which runs the "
                      "same GGUF weights dequantized; llama.cpp's kernels also round the activations to 8 bits"]
    loaded = sum(r.get("outside_load_reps", 0) for r in report["results"])
    if loaded:
        runs = sum(len(r["reps_wall_s"]) for r in report["results"])
        lines += ["", f"†: taken under outside load. The figure rests on a generation (the method's, or the target "
                      "alone's on that prompt) that ran while other programs on this machine used the CPU, so it is "
                      f"not this machine's speed; {loaded} of the {runs} generations did. Measure again when the "
                      "machine is quiet."]
    if (waited := stalled_line(report["results"])) is not None:
        lines += ["", waited]
    return "\n".join(lines) + "\n"


def llama_costs_line(lc: dict) -> str:
    """Where llama.cpp's time goes: its target's pass over n tokens against one token, and its draft's step."""
    t, d = lc["target"], lc["draft"]
    one = _at(t, 1)
    return ("llama.cpp forward: " + ", ".join(f"{n} tok {1000 * s:.0f} ms ({s / one:.1f}×)" for n, s in t.items())
            + f"; draft 1 tok {1000 * _at(d, 1):.0f} ms; c = {_at(d, 1) / one:.3f}")


def llama_table(summ: dict, rows: dict, domains: list[str]) -> list[str]:
    """llama.cpp's rows against both baselines, and the fastest of specviz's methods against llama-spec."""
    lines = ["", f"llama.cpp (llama-cpp-python {llamacpp.VERSION}) on the same GGUF files, in their shipped "
                 "quantization: × over llama.cpp's own target alone, per prompt and over all", "",
             "| method | " + " | ".join(f"{d} ×" for d in domains) + " | all tok/s | all × | tokens/pass | draft % |",
             "|---|" + "---:|" * (len(domains) + 4)]
    for name in (n for n in llamacpp.METHODS if n in summ):
        s = summ[name]
        cells = [_f(rows[(d, name)].get("own_speedup")) + ("" if rows[(d, name)].get("same_as_own_target", True)
                                                           else " ≠") for d in domains]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_f(s['tokens_per_s'])} | {_f(s.get('own_speedup'))}"
                     f" | {_f(s.get('tokens_per_pass'))} | {_f(s.get('draft_pct'), '{:.0f}')} |")
    ours = [n for n in summ if n not in llamacpp.METHODS and not n.startswith("hf-")]
    if LLAMA_SPEC in summ and ours:
        top = max(ours, key=lambda n: summ[n]["tokens_per_s"])
        lines += ["", f"specviz's fastest method here, {top}, makes {_f(summ[top]['tokens_per_s'])} tokens/s: "
                      f"{summ[top]['tokens_per_s'] / summ[LLAMA_SPEC]['tokens_per_s']:.2f}× llama-spec's "
                      f"{_f(summ[LLAMA_SPEC]['tokens_per_s'])}. ≠: llama.cpp's greedy text differs from its own "
                      "target alone's."]
    return lines


def stalled_line(results: list[dict]) -> str | None:
    """What the generations' times left out because other threads held the cores (explain.stalled_note)."""
    left = sum(sum(r.get("reps_stalled_s", [])) for r in results)
    counted = sum(sum(r["reps_wall_s"]) for r in results)
    return explain.stalled_note(left, counted, what="the generations") if counted > 0 else None


def _loaded(rows: dict, domain: str, name: str) -> bool:
    """Whether a speedup cell rests on a generation under outside load: the method's or its baseline's."""
    return any(rows.get((domain, n), {}).get("outside_load_reps", 0) for n in (name, ENGINE_BASELINE))


def figure(report: dict):
    from specviz.teaching.charts import fig_bench_speedup

    return fig_bench_speedup(report["figure_rows"])


def to_json(report: dict) -> str:
    return json.dumps(json_safe(report), indent=1, allow_nan=False)
