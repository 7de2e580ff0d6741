"""Speedup (claims 9, 13): the cost model with c measured here, a measured k sweep, a race, adaptive k, early exit."""

import math
import time

import streamlit as st

from pages.common import lab_ui, ui
from specviz import (charts, claims, devqueue, experiments, explain, lab, limits, measure, quant, render, selfdraft,
                     theory)
from specviz.engine import autoregressive_decode, autoregressive_stream, speculative_decode, speculative_stream
from specviz.config import DerivedSource
from specviz.errors import SpecvizError

ui.page_setup("Speedup: tokens per pass is not speedup", shows=(9, 13))

st.markdown(
    """
Tokens per target pass only counts the target. But the draft runs k times per round, and if one draft step
costs **c** target steps, a round costs about 1 + k·c target passes (more if checking k+1 tokens is not
free on this device). So

> speedup ≈ E[tokens per pass] / (k·c + cost of verifying k+1 tokens)

A bigger k gives more tokens per pass only while the draft stays right, and every drafted token costs c.
There is a **best k**. Below: measure c and the verify cost here, see the model's best k, then check it
against real runs for several k, race the two methods, and let k adapt as acceptance changes.
"""
)

pair = lab_ui.pair_for_page("speed")
if pair is None:
    st.stop()
decode = lab_ui.decoder(pair)
ident = (pair.name, lab_ui.dtype_name(pair), pair.draft_precision)
ids, text = lab_ui.prompt_input("speed", pair, default="Python function")
c1, c2, c3 = st.columns(3)
temperature = c1.number_input("temperature (0 = greedy)", 0.0, 2.0, 0.0, 0.1, key="speed.temperature")
cap = limits.max_new_tokens()
max_new = c2.number_input("new tokens per run", 4, cap, min(24, cap), 4, key="speed.max_new")
seed = c3.number_input("seed", 0, 2**31 - 1, 0, 1, key="speed.seed")
run_kw = dict(temperature=float(temperature), max_new_tokens=int(max_new), seed=int(seed),
              eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)


def current(name: str):
    """A stored result, if it was measured on this pair and dtype."""
    v = st.session_state.get(name)
    return v if v is not None and v.get("ident") == ident else None


# --- 1. c and the verify cost -----------------------------------------------------------------
st.subheader("1 · Measure c and the cost of verifying k tokens")
if st.button("Measure c and the verify cost", type="primary", key="speed.run_cost"):
    bar = lab_ui.ProgressBar("timing one draft step and one target step…")
    c, note_c = lab_ui.measure(experiments.draft_cost_ratio, pair.target, pair.draft, reps=5)
    bar("timing target passes of 1–16 tokens…", 0.3)
    t, note_t = lab_ui.measure(experiments.forward_cost, pair.target, n_tokens=(1, 2, 4, 8, 16), reps=3,
                               progress=lambda m, f: bar(m, 0.3 + 0.7 * (f or 0)))
    bar.done()
    if c is not None and t is not None:
        st.session_state["speed.cost"] = {"ident": ident, "c": c, "timings": t,
                                          "verify": measure.verify_ratios(t), "load": note_c or note_t}
cost = current("speed.cost")
if cost is None:
    st.info("Press **Measure c and the verify cost** (a few seconds) to fit the model to this device.")
else:
    lab_ui.load_warning(cost.get("load"))
    vr = cost["verify"]
    m1, m2, m3 = st.columns(3)
    m1.metric("c = draft step ÷ target step", f"{cost['c']:.3f}", help=f"with the {pair.draft_precision} draft")
    m2.metric("verify 5 tokens ÷ 1 token", f"{theory.verify_ratio(5, vr):.2f}×")
    m3.metric("verify 9 tokens ÷ 1 token", f"{theory.verify_ratio(9, vr):.2f}×")
    st.caption("cost(n)/cost(1) measured: " + ", ".join(f"{n} → {r:.2f}×" for n, r in vr.items())
               + ". If these are near 1, checking extra tokens is free; if they grow like n, it is not.")

# --- 1b. a cheaper draft: c against α ----------------------------------------------------------
st.subheader("1b · A cheaper draft: the same prompt with the draft in each precision")
st.caption("The draft's precision never changes the output (the target decides every token); it changes c, "
           "what a draft step costs, and may change α a little. Each precision runs next to its own run of "
           "the target alone, with the k of section 5 (fixed).")
derived = isinstance(pair.spec.draft.source, DerivedSource)  # the target's own layers: one precision
choices = [pair.draft_precision] if derived else list(quant.supported(pair.device))
precs = st.multiselect("draft precisions", choices, default=[p for p in ("float32", pair.draft_precision)
                                                             if p in choices], key="speed.precisions")
if st.button("Compare draft precisions", key="speed.run_precisions") and ids is not None and precs:
    try:
        bar = lab_ui.ProgressBar("loading the drafts…")
        pairs = {p: ui.load_pair_cached(pair.name, lab_ui.dtype_name(pair), p) for p in precs}
        res = experiments.precision_comparison(pairs, ids, k=int(st.session_state.get("speed.k0", 4)),
                                               progress=bar, **run_kw)
        bar.done()
        st.session_state["speed.precision"] = {"ident": ident[:2], "results": res}
    except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
        ui.show_error(e)
prec_state = st.session_state.get("speed.precision")
if prec_state is not None and prec_state["ident"] == ident[:2]:
    st.dataframe(explain.precision_rows(prec_state["results"]), hide_index=True, width="stretch")
    st.markdown(explain.precision_verdict(prec_state["results"]))

# --- 2. the model, with the best k ------------------------------------------------------------
sweep_state = current("speed.sweep")
measured_alpha = measure.pooled_alpha([cmp.spec for cmp in sweep_state["sweep"].values()]) if sweep_state else None


def use_measured_alpha():
    st.session_state["speed.alpha"] = round(float(measured_alpha), 2)


st.subheader("2 · The model: predicted speedup against k")
if cost is not None:
    a1, a2, a3 = st.columns([2, 1, 1])
    st.session_state.setdefault("speed.alpha", 0.8)  # set here, so the "use measured α" button can change it
    alpha = a1.slider("α for the model", 0.0, 0.99, step=0.01, key="speed.alpha")
    if measured_alpha is not None and math.isfinite(measured_alpha):
        a2.button(f"use measured α = {measured_alpha:.2f}", key="speed.use_alpha", on_click=use_measured_alpha)
    use_vr = a3.checkbox("use the measured verify cost", value=True, key="speed.use_vr",
                         help="Off: assume checking k+1 tokens costs one 1-token pass (the textbook 1 + k·c).")
    vc = cost["verify"] if use_vr else None
    measured = ({k: measure.steady_speedup(cmp.spec, cmp.base) for k, cmp in sweep_state["sweep"].items()}
                if sweep_state else None)
    ui.show_chart(charts.fig_speedup_model(alpha, cost["c"], k_max=12, verify_cost=vc, measured=measured),
                  "speedup_model", key="speed.fig_model")
    kb, sb = theory.best_k(alpha, cost["c"], vc, k_max=12)
    st.markdown(f"At α = {alpha:.2f} and the measured c = {cost['c']:.3f}, the model's best k is **{kb}** "
                f"({sb:.2f}×)." + (" Below 1×: speculation does not pay on this device at these settings."
                                   if sb < 1 else ""))

# --- 3. a measured k sweep --------------------------------------------------------------------
st.subheader("3 · Measured: one prompt, several k, each against a warmed target-only run")
ks = st.multiselect("k values", [1, 2, 3, 4, 5, 6, 8, 10, 12], default=[1, 2, 4, 6, 8], key="speed.ks")
if st.button("Run the k sweep", key="speed.run_sweep") and ids is not None:
    if not ks:
        st.error("Pick at least one k.", icon=":material/error:")
    else:
        bar = lab_ui.ProgressBar("starting…")
        sw = lab_ui.run_guarded(lab.k_sweep, pair.target, pair.draft, ids, ks, progress=bar, **run_kw)
        bar.done()
        if sw is not None:
            st.session_state["speed.sweep"] = {"ident": ident, "sweep": sw}
            st.rerun()  # so the model above shows the new measured points
if sweep_state is not None:
    sw = sweep_state["sweep"]
    busy = [r for cmp in sw.values() for r in (cmp.spec, cmp.base)]
    n_busy = sum(r.outside_load_rounds for r in busy)
    lab_ui.load_warning(devqueue.load_text(f"{n_busy} of the sweep's {sum(len(r.rounds) for r in busy)} rounds")
                        if n_busy else None)
    rows = lab.k_sweep_rows(sw, cost["c"] if cost else None, cost["verify"] if cost else None)
    st.dataframe(rows, hide_index=True)
    st.caption("Measured speedup: over the rounds after the first, whose passes also read the prompt (what the "
               "model describes); end-to-end speedup includes that first round.")
    bench = [{"k": r["k"], "measured": r["measured speedup"], "predicted": r["predicted speedup"]} for r in rows]
    ui.show_chart(charts.fig_bench_speedup(bench), "k_sweep_measured_vs_predicted", key="speed.fig_bench")
    best = max(rows, key=lambda r: r["measured speedup"])
    st.markdown(explain.speedup_verdict(best["measured speedup"], best["predicted speedup"],
                                    cost["c"] if cost else float("nan"), best["α"])
                if cost else f"Best measured: k = {best['k']} at {best['measured speedup']:.2f}×. "
                             "Measure c above to compare with the model.")

# --- 4. the race -----------------------------------------------------------------------------
st.subheader("4 · A race: target alone against speculative")
r1, r2 = st.columns([1, 3])
race_k = r1.slider("k for the race", 1, 12, 4, key="speed.race_k")
left, right = st.columns(2)
left.markdown("**Target alone**")
right.markdown(f"**Speculative** (k = {race_k})")
ph_base, ph_spec = left.empty(), right.empty()


def show_text(ph, rounds) -> None:
    """The generated text so far; speculative tokens show their state (accepted, correction, bonus)."""
    ph.markdown(render.tokens_html("", rounds, decode), unsafe_allow_html=True)


if r1.button("Start the race", type="primary", key="speed.run_race") and ids is not None:
    try:
        # warm both paths first so one-time costs land in neither
        autoregressive_decode(pair.target, ids, **{**run_kw, "max_new_tokens": 2})
        speculative_decode(pair.target, pair.draft, ids, k=int(race_k), **{**run_kw, "max_new_tokens": 2})
        runs = {}
        for name, stream, ph in (("base", autoregressive_stream(pair.target, ids, **run_kw), ph_base),
                                 ("spec", speculative_stream(pair.target, pair.draft, ids, k=int(race_k), **run_kw),
                                  ph_spec)):
            done = []
            for rnd in stream:  # live: each round appears as it is computed
                done.append(rnd)
                show_text(ph, done)
            runs[name] = stream.run
        st.session_state["speed.race"] = {"ident": ident, **runs, "k": int(race_k)}
    except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
        ui.show_error(e)
race = current("speed.race")
if race is not None:
    show_text(ph_base, race["base"].rounds)
    show_text(ph_spec, race["spec"].rounds)
    ui.show_chart(charts.fig_race(lab.race_points(race["spec"]), lab.race_points(race["base"])), "race",
                  key="speed.fig_race")
    if st.button("Replay side by side at the measured speed", key="speed.replay"):
        events = sorted([(t, "base", i) for i, (t, _) in enumerate(lab.race_points(race["base"]))]
                        + [(t, "spec", i) for i, (t, _) in enumerate(lab.race_points(race["spec"]))])
        t0 = time.perf_counter()
        for t, who, i in events:
            time.sleep(max(0.0, t - (time.perf_counter() - t0)))
            show_text(ph_base if who == "base" else ph_spec, race[who].rounds[:i + 1])

# --- 5. adaptive k and the best-k chooser ---------------------------------------------------
st.subheader(f"5 · Adaptive k and the best-k chooser: k changes as acceptance is observed ({claims.link(13)})")
st.caption("Adaptive k grows by 1 after a fully accepted round and shrinks by 1 after a rejection. The best-k "
           "chooser estimates α, c and the verify cost as it goes, and drafts while one more draft is expected "
           "to pay: long through sure tokens, stopping right after a doubtful one.")
k0 = st.slider("starting k", 1, 12, 4, key="speed.k0")
if st.button("Run fixed k, adaptive k and the best-k chooser", key="speed.run_adaptive") and ids is not None:
    try:
        bar = lab_ui.ProgressBar("fixed k…")
        speculative_decode(pair.target, pair.draft, ids, k=int(k0), **{**run_kw, "max_new_tokens": 2})  # warm-up
        out = {}
        for i, (name, policy) in enumerate((("fixed", "fixed"), ("adaptive", "adaptive"), ("best", "best"))):
            out[name] = lab.stream_run(
                speculative_stream(pair.target, pair.draft, ids, k=int(k0), k_policy=policy, **run_kw), int(max_new),
                lambda m, f, i=i, name=name: bar(f"{name} k: {m}", (i + (f or 0)) / 3))
        bar.done()
        st.session_state["speed.adaptive"] = {"ident": ident, **out}
    except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
        ui.show_error(e)
ad = current("speed.adaptive")
if ad is not None:
    fx, av, bk = ad["fixed"], ad["adaptive"], ad["best"]
    rf, ra, rb = (measure.engine_rate(r) for r in (fx, av, bk))  # engine time only: the progress bar is excluded
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("fixed k: tokens/s", f"{rf:.1f}")
    m2.metric("adaptive k: tokens/s", f"{ra:.1f}", f"{(ra / rf - 1) * 100:+.0f}%" if rf > 0 else None)
    m3.metric("best k: tokens/s", f"{rb:.1f}", f"{(rb / rf - 1) * 100:+.0f}%" if rf > 0 else None)
    mean_k = [sum(r.ks) / max(len(r.ks), 1) for r in (av, bk)]
    m4.metric("mean k: adaptive / best", f"{mean_k[0]:.1f} / {mean_k[1]:.1f}")
    m5.metric("α fixed / adaptive / best", f"{fx.alpha:.2f} / {av.alpha:.2f} / {bk.alpha:.2f}")
    t1, t2 = st.columns(2)
    with t1:
        ui.show_chart(charts.fig_k_trace(av), "adaptive_k_trace", key="speed.fig_k")
    with t2:
        ui.show_chart(charts.fig_k_trace(bk), "best_k_trace", key="speed.fig_k_best")

# --- 6. early exit: quality against cost on one model -------------------------------------------
st.subheader("6 · Early exit: the target's own first L layers as the draft")
st.caption("Self-speculation needs no second model: the draft is the target's first L layers, then its own final "
           "norm and LM head (the same weights). A deeper exit drafts better (α up) but costs more (c up); at full "
           "depth the target drafts for itself: every greedy draft is kept, and it is still slower than the target "
           "alone, because c ≈ 1. Models not trained for early exit (like Qwen2.5) draft poorly at small L. "
           "This uses the target of the pair in the sidebar, whatever its draft.")
try:
    n_layers = selfdraft.num_layers(pair.target)
except SpecvizError as e:
    n_layers = None
    ui.show_error(e)
if n_layers is not None:
    e1, e2 = st.columns([3, 1])
    depths = e1.multiselect("depths L (layers the draft runs)", list(range(1, n_layers + 1)),
                            default=selfdraft.default_layers(n_layers), key="speed.ee_layers")
    ek = e2.slider("k", 1, 8, 4, key="speed.ee_k")
    if st.button("Measure α, c and the speedup for each L", key="speed.run_early_exit") and ids is not None:
        bar = lab_ui.ProgressBar("early exit…")
        sweep = lab_ui.run_guarded(selfdraft.early_exit_sweep, pair.target, ids, depths, k=int(ek), progress=bar,
                                   **run_kw)
        bar.done()
        if sweep is not None:
            st.session_state["speed.early_exit"] = {"ident": ident, "sweep": sweep}
    ee = current("speed.early_exit")
    if ee is not None:
        ui.show_chart(selfdraft.fig_early_exit(ee["sweep"]), "early_exit_alpha_c", key="speed.fig_early_exit")
        st.dataframe(selfdraft.early_exit_rows(ee["sweep"]), hide_index=True)
