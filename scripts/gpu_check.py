"""specviz's passes on a CUDA device, with models shaped like the real pairs (random weights).

The lent GPU machines have no model hub and take no large files, so this builds each model from its
real config with random weights. A forward pass costs the same whatever the weights' values, so the
pass times, c and the verify cost are the real ones; α is not (random models disagree), so speedups
are predicted with theory.best_k from the measured costs and α measured on the real pair (README).

For each model and each cache mode (eager: DynamicCache, today's path; static: StaticCache, eager;
graphs: StaticCache with each pass replayed as a CUDA graph) it times passes of T new tokens after a
128-token context, then runs the engine on the 1.5B/0.5B shapes (bookkeeping per round, and greedy
speculative output against the target alone).

    python scripts/gpu_check.py --out gpu.json [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from specviz.decoding import engine, models
from specviz.modeling import lm as L
from specviz.core import theory
from specviz.core.settings import DecodeSettings

COMMON = dict(hidden_act="silu", max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
              use_sliding_window=False, bos_token_id=151643, eos_token_id=151645, initializer_range=0.02)
SHAPES = {  # the Qwen2.5 configs of models.yaml's pairs
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "3B": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}
TOKENS = (1, 2, 3, 5, 8, 16)
MODES = ("eager", "static", "graphs")
ALPHAS = (0.56, 0.75, 0.87, 0.95)  # Gemma, factual, code (int8 default, k=4), list on the CPU bench


DEVICE = "cuda"


def build(shape: str, dtype=torch.bfloat16):
    cfg = Qwen2Config(**COMMON, **SHAPES[shape])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(DEVICE):
            model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    return model.eval().requires_grad_(False)


def set_mode(model, mode: str) -> None:
    if mode == "eager":
        model.__dict__.pop("_specviz_static", None)
    else:
        L.static_cache(model, models.static_len(model), graphs=mode == "graphs")


def pass_times(model, mode: str, reps: int, context: int = 128) -> dict:
    """Median ms of a pass of T new tokens after `context` tokens, for each T in TOKENS."""
    set_mode(model, mode)
    lm = L.open_lm(model)
    ids = torch.randint(0, min(s["vocab_size"] for s in SHAPES.values()), (context + max(TOKENS),), generator=torch.Generator().manual_seed(1)).tolist()
    lm.feed(ids[:context], keep=1)
    out = {}
    for T in TOKENS:
        times = []
        for i in range(reps + 3):
            L.sync(lm.device)
            t0 = time.perf_counter()
            lm.feed(ids[context:context + T], keep=T)
            L.sync(lm.device)
            if i >= 3:  # three warm-ups: the first records the graph
                times.append(1000 * (time.perf_counter() - t0))
            lm.rollback(context)
        out[T] = statistics.median(times)
    err = getattr(lm, "graph_error", None)
    lm.close()
    return {"ms": out, "graph_error": err}


def engine_runs(target, draft, mode: str, prompt: list[int], new: int = 48) -> dict:
    set_mode(target, mode)
    set_mode(draft, mode)
    res = {}
    for name, fn in [("target",
                      lambda: engine.autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=new))),
                     ("k4",
                      lambda: engine.speculative_decode(target, draft, prompt,
                                                        DecodeSettings(k=4, max_new_tokens=new))),
                     ("best",
                      lambda: engine.speculative_decode(target, draft, prompt,
                                                        DecodeSettings(k=4, k_policy="best", max_new_tokens=new)))]:
        fn()  # warm-up: records the graphs
        runs = [fn() for _ in range(3)]
        r = runs[len(runs) // 2]
        rounds = r.rounds
        fwd = sum(x.draft_s + x.verify_s for x in rounds)
        wall = sum(x.round_s for x in rounds)
        res[name] = {"tokens": len(r.token_ids), "decode_s": statistics.median(x.decode_s for x in runs),
                     "rounds": len(rounds), "forward_s": fwd, "round_s": wall,
                     "bookkeeping_per_round_ms": 1000 * (wall - fwd) / max(1, len(rounds)),
                     "token_ids": r.token_ids}
    res["greedy_identical"] = {k: res[k]["token_ids"] == res["target"]["token_ids"] for k in ("k4", "best")}
    for k in ("target", "k4", "best"):
        res[k].pop("token_ids")
    return res


def session(target, draft, prompt, new: int = 48) -> dict:
    """The main page's work for one Run: the target alone, then the best-k chooser, a round at a time."""
    t0 = time.perf_counter()
    runs = {}
    for name, stream in [("base", engine.autoregressive_stream(target, prompt, DecodeSettings(max_new_tokens=new))),
                         ("spec",
                          engine.speculative_stream(target, draft, prompt,
                                                    DecodeSettings(k=4, k_policy="best", max_new_tokens=new)))]:
        for _ in stream:
            pass
        runs[name] = (stream.run, stream.waited_s)
    (base, wb), (spec, ws) = runs["base"], runs["spec"]
    return {"wall_s": time.perf_counter() - t0, "held_s": base.decode_s + spec.decode_s, "waited_s": wb + ws,
            "speedup": base.decode_s / spec.decode_s, "ids": spec.token_ids, "identical": spec.token_ids == base.token_ids}


def workshop(target, draft, prompt, counts) -> dict:
    """N sessions pressing Run at once (threads through the device queue), against one session alone."""
    set_mode(target, "graphs")
    set_mode(draft, "graphs")
    session(target, draft, prompt)  # records the graphs of one idle cache each
    solo = [session(target, draft, prompt) for _ in range(3)]
    solo_wall = statistics.median(s["wall_s"] for s in solo)
    solo_speedup = statistics.median(s["speedup"] for s in solo)
    out = {"solo_wall_s": solo_wall, "solo_speedup": solo_speedup}
    for n in counts:
        for warm in (False, True):  # the first time, new caches record their graphs (not timed as decoding)
            out[f"{n}{'-warm' if warm else ''}"] = together(target, draft, prompt, n, solo, solo_wall, solo_speedup)
    return out


def together(target, draft, prompt, n, solo, solo_wall, solo_speedup) -> dict:
    """n sessions in threads at once: wall time against n solo sessions, each speedup against solo's."""
    res = [None] * n

    def one(i):
        res[i] = session(target, draft, prompt)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in res if r is not None]
    out = {"wall_s": wall, "wall_over_solo_sum": wall / (n * solo_wall), "finished": len(ok),
           "speedup_over_solo": [r["speedup"] / solo_speedup for r in ok],
           "same_text_as_solo": all(r["ids"] == solo[0]["ids"] for r in ok),
           "max_session_wall_s": max(r["wall_s"] for r in ok), "graph_errors": sorted(
               {lm.graph_error for m in (target, draft) for lm in m._specviz_static.idle if lm.graph_error}),
           "idle_caches": [len(m._specviz_static.idle) for m in (target, draft)]}
    print(n, {k: v for k, v in out.items() if k != "speedup_over_solo"},
          [round(x, 3) for x in out["speedup_over_solo"]], flush=True)
    return out


def queue_ab(target, draft, prompt, other: str, counts: str, rounds: int = 2) -> dict:
    """N sessions at once through devqueue's queue and through another's, interleaved (wall ÷ N solo)."""
    import importlib.util

    from specviz.device import devqueue

    spec = importlib.util.spec_from_file_location("other_queue", other)
    mod = sys.modules["other_queue"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(mod)
    queues = {"this": devqueue.QUEUE, "other": mod.DeviceQueue()}
    set_mode(target, "graphs")
    set_mode(draft, "graphs")
    session(target, draft, prompt)
    out = {}
    for n in [int(x) for x in counts.split(",")]:
        together(target, draft, prompt, n, [session(target, draft, prompt)], 1.0, 1.0)  # n caches, recorded
        for r in range(rounds):
            for name, q in queues.items():
                devqueue.QUEUE = q  # devqueue.hold() reads the module's QUEUE on every call
                solo = [session(target, draft, prompt) for _ in range(3)]
                sw = statistics.median(x["wall_s"] for x in solo)
                res = together(target, draft, prompt, n, solo, sw, statistics.median(x["speedup"] for x in solo))
                out.setdefault(f"{name}-{n}", []).append({k: v for k, v in res.items() if k != "graph_errors"})
    devqueue.QUEUE = queues["this"]
    return out


def predictions(costs: dict) -> dict:
    """Best-k predicted speedup at each α, from c and the verify curve of each target and mode."""
    out = {}
    for tname, by_mode in costs.items():
        if tname == "0.5B":
            continue
        for mode, r in by_mode.items():
            d = costs["0.5B"][mode]["ms"][1]
            t1 = r["ms"][1]
            verify = {T: ms / t1 for T, ms in r["ms"].items()}
            c = d / t1
            out[f"{tname}/{mode}"] = {"c": c, "verify": verify,
                                      "best_k": {a: theory.best_k(a, c, verify, k_max=15) for a in ALPHAS}}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu.json")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no 7B")
    ap.add_argument("--smoke", action="store_true", help="a dry run of this script on the CPU, with small shapes")
    ap.add_argument("--workshop", default="", help="only this: N sessions at once, e.g. 1,4,8,16")
    ap.add_argument("--queue-ab", default="", help="only this: a module file with another DeviceQueue, timed "
                                                   "against devqueue's, interleaved, for N sessions, e.g. old.py:8,16")
    args = ap.parse_args()
    global DEVICE
    if args.smoke:
        DEVICE = "cpu"
        for s in SHAPES.values():
            s.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000)
    else:
        models.limit_cpu_threads()
    report = {"torch": torch.__version__, "device": DEVICE, "threads": torch.get_num_threads(),
              "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else None}

    def save():
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1, default=str)

    reps = 5 if args.quick else 15
    costs = report.setdefault("pass_ms", {})
    keep = {}
    prompt = torch.randint(0, min(s["vocab_size"] for s in SHAPES.values()), (40,),
                           generator=torch.Generator().manual_seed(2)).tolist()
    if args.queue_ab:
        report["queue_ab"] = queue_ab(build("1.5B"), build("0.5B"), prompt, *args.queue_ab.split(":"))
        save()
        return
    if args.workshop:
        report["workshop"] = workshop(build("1.5B"), build("0.5B"), prompt,
                                      [int(n) for n in args.workshop.split(",")])
        save()
        return

    def measure(shape):
        t0 = time.perf_counter()
        model = build(shape)
        costs[shape] = {mode: pass_times(model, mode, reps) for mode in MODES}
        costs[shape]["build_s"] = time.perf_counter() - t0
        print(shape, {m: costs[shape][m]["ms"] for m in MODES}, flush=True)
        save()
        return model

    keep["0.5B"], keep["1.5B"] = measure("0.5B"), measure("1.5B")
    report["engine_bf16"] = {m: engine_runs(keep["1.5B"], keep["0.5B"], m, prompt) for m in MODES}
    print(json.dumps(report["engine_bf16"], default=str), flush=True)
    save()
    for shape in ([] if args.quick else ["7B", "3B"]):
        measure(shape)
        gc.collect()  # the model and its idle caches refer to each other
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    shapes = [s for s in SHAPES if s in costs]
    report["predicted"] = predictions({s: {m: costs[s][m] for m in MODES} for s in shapes})
    save()
    print(json.dumps(report["predicted"], default=str)[:4000], flush=True)
    for shape in ("0.5B", "1.5B"):
        keep[shape] = keep[shape].float()
    report["engine_fp32_graphs"] = engine_runs(keep["1.5B"], keep["0.5B"], "graphs", prompt)
    save()
    print("fp32 graphs identical:", report["engine_fp32_graphs"]["greedy_identical"], flush=True)

if __name__ == "__main__":
    main()
