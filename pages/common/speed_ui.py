"""The Speedup page's self-contained sections, one call each from pages/3_Speedup.py.

  cost_result(cost, note, drafter, off)  1  · c and the verify cost measured in section 1 (or recorded)
  draft_precisions(pair, ids, settings)   1b · the same prompt with the draft in each precision: c against α
  target_precisions(pair, ids, settings, recorded)  1c · the same draft against the float32 and the int8 target
  cost_model(fixed, ids, settings, cost, sweep)  2 · predicted speedup against k, at the α measured on the page
  sweep_result(sw, cost, device, pair_name)  3 · the k sweep against the target alone: table, chart, best k
  k_policies(pair, ids, settings, recorded)  5  · fixed k, adaptive k and the best-k chooser (specviz.teaching.race)
  early_exit(pair, ids, settings, recorded)  6  · the target's own first L layers as the draft (specviz.decoding.selfdraft)
  c_check(pair, kept_cost)              section 1's c against 1b's and 1c's for the same draft: timed again, or flagged
  fixed_k_runs(pair)                    the runs of 1b and 5 with the sidebar's draft and a fixed k (section 2's α)
  measured_here(run, ids, settings)       whether a kept run came from the prompt and settings above
  note_other_settings(runs, ids, settings, k)  a kept result measured with another prompt or settings says which

Each reads its widgets, calls specviz, keeps its result with pages.common.kept.Kept, and draws it (cost_result and
sweep_result only draw what the page measured); with pair None (a page recording) it draws the recorded result, its
widgets off (1b, which loads a pair per precision, says that recorded mode does not cover it; 1c shows the
recording's two targets where it has them). settings: the page's DecodeSettings (temperature, new tokens, seed), built
once from its widgets.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import streamlit as st

from pages.common import lab_ui, ui
from pages.common.kept import Kept
from specviz.core.settings import DecodeSettings
from specviz.teaching import charts, costs, experiments, explain, lab, race
from specviz.teaching import early_exit as exit_sweep
from specviz.core import claims, measure, theory
from specviz.modeling import quant
from specviz.decoding import models, selfdraft
from specviz.service.pairs import target_choices
from specviz.modeling.config import DerivedSource
from specviz.core.errors import SpecvizError


def _ident(pair) -> tuple:
    return pair.name, lab_ui.dtype_name(pair), pair.draft_precision


def fixed_k_runs(pair) -> dict[str, list]:
    """Speculative runs kept by 1b and 5 with the sidebar's draft and a fixed k: where each came from -> runs."""
    out = {}
    for res in Kept("speed.precision", _ident(pair)[:2]).get() or []:
        if res.precision == pair.draft_precision:
            out["1b"] = [res.comparison.spec]
    if (runs := Kept("speed.adaptive", _ident(pair)).get()) is not None:
        out["5"] = [runs["fixed"]]
    return out


def _settings(run) -> dict:
    """What a kept run was measured with."""
    d = run.decode
    return lab_ui.run_settings(run.prompt_ids, d, k=d.k)


def _settings_now(ids, settings: DecodeSettings, k: int | None = None) -> dict:
    """The page's settings as they are now (k only where a section has one)."""
    return lab_ui.run_settings(ids, settings, **({"k": int(k)} if k is not None else {}))


def measured_here(run, ids, settings: DecodeSettings) -> bool:
    """Whether a kept run came from the prompt and the settings above: a result stays on the page when they
    change, so a page must ask before it calls the result this prompt's."""
    now = _settings_now(ids, settings)
    return all(_settings(run)[name] == value for name, value in now.items())


def note_other_settings(runs, ids, settings: DecodeSettings, k: int | None = None, off: bool = False) -> None:
    """A caption under a kept result naming the settings above (and the section's k, if given) that differ from
    any of its runs'; none under a recorded result (off), which shows its own settings."""
    if off:
        return
    now = _settings_now(ids, settings, k)
    then = [_settings(r) for r in runs]
    ui.note_other_settings(name for name in now if any(t[name] != now[name] for t in then))


def _comparison_table(res, ids, settings: DecodeSettings, *header: str, off: bool = False) -> None:
    """A kept precision comparison (1b, 1c): the settings it differs in (none for a recorded one, off), its timing
    notes, and its table."""
    note_other_settings([r.comparison.spec for r in res], ids, settings, k=st.session_state.get("speed.k0", 4),
                        off=off)
    lab_ui.timing_notes((x for r in res for run in (r.comparison.spec, r.comparison.base) for x in run.rounds),
                        "the comparison")
    ui.table(explain.precision_rows(res, *header), hide_index=True, width="stretch")


def draft_precisions(pair, ids, settings: DecodeSettings, recorded: list | None = None) -> None:
    """1b · the same target with the draft in each precision, each against its own target alone
    (experiments.precision_comparison). With pair None, the page recording's comparison (recorded; None: a
    recording made without one)."""
    st.subheader("1b · A cheaper draft: the same prompt with the draft in each precision")
    st.caption("The draft's precision never changes the output (the target decides every token); it changes c, "
               "what a draft step costs, and may change α a little. Each precision runs next to its own run of "
               "the target alone, with the k of section 5 (fixed).")
    if pair is None:
        if recorded is None:
            st.info(explain.not_recorded("this recording was made without the other draft precisions."))
        else:
            _comparison_table(recorded, ids, settings, off=True)
            _run_c_caption()
            st.markdown(explain.precision_verdict(recorded))
        return
    derived = isinstance(pair.spec.draft.source, DerivedSource)  # the target's own layers: one precision
    choices = [pair.draft_precision] if derived else list(quant.supported(pair.device))
    precs = st.multiselect("draft precisions", choices, default=[p for p in ("float32", pair.draft_precision)
                                                                 if p in choices], key="speed.precisions")
    kept = Kept("speed.precision", _ident(pair)[:2])  # every precision of this pair and dtype
    if st.button("Compare draft precisions", key="speed.run_precisions") and ids is not None and precs:
        try:
            pairs = {p: ui.load_pair_cached(pair.name, lab_ui.dtype_name(pair), p) for p in precs}
            kept.put(lab_ui.with_bar(experiments.precision_comparison, pairs, ids, text="loading the drafts…",
                                     settings=replace(settings, k=int(st.session_state.get("speed.k0", 4))),
                                     **pair.run_kw)[0])
        except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
            ui.show_error(e)
    if (res := kept.get()) is not None:
        _comparison_table(res, ids, settings)
        _run_c_caption()
        st.markdown(explain.precision_verdict(res))


def _run_c_caption() -> None:
    st.caption("c here is each run's own: its draft steps against its target-alone run's one-token passes. "
               "Section 1 times single steps apart from any run, so the two can differ a little for the same "
               "draft.")


def target_precisions(pair, ids, settings: DecodeSettings, recorded: list | None = None) -> None:
    """1c · the same draft against the float32 target and the int8 target, each against its own target alone
    (experiments.target_comparison): c, α, tokens per pass and speedup, and why the int8 one gains little.
    With pair None, the page recording's comparison (recorded; None: a recording made without one)."""
    st.subheader("1c · A quantized target: the same draft against the float32 and the int8 target")
    st.caption("An int8 target makes every target pass faster, and is exact: speculative text equals that "
               "target's own. Each target runs next to its own run of the target alone, with the draft of the "
               "sidebar and the k of section 5 (fixed).")
    if pair is None:
        if recorded is None:
            st.info(explain.not_recorded("this recording was made without the int8 target."))
        else:
            _comparison_table(recorded, ids, settings, "target precision", off=True)
            st.markdown(explain.target_verdict(recorded))
        return
    if "int8" not in target_choices("float32"):
        st.caption("An int8 target runs only on a CPU with PyTorch's fbgemm: not on this device.")
        return
    if isinstance(pair.spec.draft.source, DerivedSource):  # the draft would change with the target
        st.caption("This pair's draft is made of the target's own layers: pick a pair with a draft model.")
        return
    kept = Kept("speed.target", _ident(pair))
    if st.button("Compare float32 and int8 targets", key="speed.run_targets") and ids is not None:
        try:
            pairs = {tp: ui.load_pair_cached(pair.name, "float32", pair.draft_precision, tp)
                     for tp in quant.TARGET_PRECISIONS}
            kept.put(lab_ui.with_bar(experiments.target_comparison, pairs, ids, text="loading the targets…",
                                     settings=replace(settings, k=int(st.session_state.get("speed.k0", 4))),
                                     **pair.run_kw)[0])
        except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
            ui.show_error(e)
    if (res := kept.get()) is not None:
        _comparison_table(res, ids, settings, "target precision")
        st.markdown(explain.target_verdict(res))


def _same_draft_runs(pair) -> list:
    """The comparisons of 1b and 1c whose draft and target are the sidebar's: the same draft as section 1."""
    out = [r.comparison for r in Kept("speed.precision", _ident(pair)[:2]).get() or []
           if r.precision == pair.draft_precision]
    if lab_ui.dtype_name(pair) == "float32":  # 1c's pairs are float32; its float32 target is the sidebar's
        out += [r.comparison for r in Kept("speed.target", _ident(pair)).get() or []
                if r.precision == (pair.target_precision or "float32")]
    return out


def c_check(pair, kept_cost) -> None:
    """Section 1's c (single steps) against c in 1b's and 1c's runs of the same draft (costs.check_c): where they
    part by more than their timings allow, section 1 is timed once more; a disagreement that stays is said."""
    got = kept_cost.get() if pair is not None else None
    runs = _same_draft_runs(pair) if got is not None else []
    if not runs:
        return
    cost = got[0]
    ident = (cost.at, tuple(id(cmp) for cmp in runs))  # checked once per pair of measurements
    done = st.session_state.get("speed.c_check")
    if done is None or done[0] != ident:
        samples = costs.run_samples([cmp.spec for cmp in runs], [cmp.base for cmp in runs])
        chk = lab_ui.run_guarded(costs.check_c, pair.target, pair.chain_draft(), cost, samples)
        if chk is None:
            return
        st.session_state["speed.c_check"] = done = ((chk.cost.at, ident[1]), chk)
        if chk.remeasured:
            kept_cost.put((chk.cost, chk.cost.load))
            st.rerun()  # section 1 shows the new timing
    chk = done[1]
    if not chk.agree:
        st.warning(explain.c_disagreement(chk.cost.c, chk.run_c, "the runs of sections 1b and 1c"),
                   icon=":material/warning:")


START_ALPHA = 0.8  # section 2's α before anything is measured
K_MAX = lab.MODEL_K_MAX  # the largest k of the page's sliders


def measured_alpha(fixed: dict[str, list], ids, settings: DecodeSettings, sweep) -> tuple[float | None, list[str]]:
    """α over the page's runs with the sidebar's draft and a fixed k, on the prompt and settings above (the
    sweep, 3; fixed: 1b's and 5's, fixed_k_runs), and the sections it came from; None where no draft was judged."""
    sources = {**fixed, "3": [cmp.spec for cmp in (sweep or {}).values()]}
    here = {where: got for where, runs in sources.items()
            if (got := [r for r in runs if measured_here(r, ids, settings)])}
    alpha = measure.pooled_alpha([r for runs in here.values() for r in runs]) if here else None
    return (alpha if alpha is not None and math.isfinite(alpha) else None), sorted(here)


def cost_model(fixed: dict[str, list], ids, settings: DecodeSettings, cost, sweep) -> None:
    """2 · predicted speedup against k, with c and the verify cost of section 1 (cost), at an α the learner
    sets: the α measured on the page (fixed: fixed_k_runs, and the sweep) until the slider is moved; the sweep's
    (3) measured points on it."""
    st.subheader("2 · The model: predicted speedup against k")
    if cost is None:
        return
    alpha_now, where = measured_alpha(fixed, ids, settings, sweep)

    def use_measured_alpha():
        st.session_state["speed.alpha"] = st.session_state["speed.alpha_auto"] = round(float(alpha_now), 2)

    a1, a2 = st.columns([3, 2], vertical_alignment="bottom")  # the button's label whole, in presenter type at 1024 px
    st.session_state.setdefault("speed.alpha", START_ALPHA)  # set here, so the "use measured α" button can change it
    untouched = st.session_state["speed.alpha"] == st.session_state.get("speed.alpha_auto", START_ALPHA)
    if alpha_now is not None and untouched:
        use_measured_alpha()  # a new measurement moves the slider, unless the learner has moved it
    alpha = a1.slider("α for the model", 0.0, 0.99, step=0.01, key="speed.alpha",
                      help=f"Starts at {START_ALPHA:.2f}; once α is measured on this page with a fixed k "
                           "(sections 1b, 3 or 5), at the measured α, until you move it.")
    if alpha_now is not None:
        a2.button(f"use measured α = {alpha_now:.2f}", key="speed.use_alpha", on_click=use_measured_alpha,
                  help="α over every run of this page with the sidebar's draft and a fixed k: sections "
                       + ", ".join(where))
    use_vr = st.checkbox("use the measured verify cost", value=True, key="speed.use_vr",
                         help="Off: assume checking k+1 tokens costs one 1-token pass (the textbook 1 + k·c).")
    vc = cost.verify if use_vr else None
    measured = {k: measure.steady_speedup(cmp.spec, cmp.base) for k, cmp in sweep.items()} if sweep else None
    ui.show_chart(charts.fig_speedup_model(alpha, cost.c, k_max=K_MAX, verify_cost=vc, measured=measured),
                  "speedup_model", key="speed.fig_model")
    kb, sb = lab.model_best_k(alpha, cost) if use_vr else theory.best_k(alpha, cost.c, None, k_max=K_MAX)
    which = "the measured " if alpha_now is not None and alpha == round(alpha_now, 2) else ""
    st.markdown(f"At {which}α = {alpha:.2f} and the measured c = {cost.c:.3f}, the model's best k is "
                f"{explain.best_k_words((kb, sb), K_MAX)}." + (" Below 1×: speculation does not pay on this device at "
                                                             "these settings." if sb < 1 else ""))


def cost_result(cost, note, drafter: str, off: bool) -> None:
    """1 · c and the verify cost, measured here or recorded (off): where they came from, c (with the drafter's
    words, explain.drafter_words), and the cost of verifying n tokens against one."""
    if cost is None:
        st.info("Press **Measure c and the verify cost** (a few seconds) to fit the model to this device.")
        return
    lab_ui.load_warning(note)
    if off:
        st.caption(explain.recorded_profile_note(cost.ident))
    elif cost.reused:
        st.caption(explain.shared_cost_note(time.time() - cost.at))
    m1, m2, m3 = st.columns(3)
    m1.metric("c = draft step ÷ target step", f"{cost.c:.3f}",
              help="with the " + drafter)
    m2.metric("verify 5 tokens ÷ 1 token", f"{theory.verify_ratio(5, cost.verify):.2f}×")
    m3.metric("verify 9 tokens ÷ 1 token", f"{theory.verify_ratio(9, cost.verify):.2f}×")
    st.caption("cost(n)/cost(1) measured: " + ", ".join(f"{n} → {r:.2f}×" for n, r in cost.verify.items())
               + ". If these are near 1, checking extra tokens is free; if they grow like n, it is not.")


def sweep_result(sw: dict, cost, device: str, pair_name: str) -> None:
    """3 · the k sweep's result (k -> comparison with the target alone): its table, measured against predicted
    speedup (with section 1's cost, where measured), the verdict on the best k, and a GPU tip for this device."""
    lab_ui.timing_notes((r for cmp in sw.values() for run in (cmp.spec, cmp.base) for r in run.rounds), "the sweep")
    rows = lab.k_sweep_rows(sw, cost.c if cost else None, cost.verify if cost else None)
    ui.table(rows, hide_index=True)
    st.caption(f"Measured speedup over {explain.target_alone({})}: over the rounds after the first, whose passes "
               "also read the prompt (what the model describes); end-to-end speedup includes that first round. "
               "A short run has only a few target "
               "passes, so one rejection more or less moves its point by a whole pass: read the measured curve "
               "with the passes column, and lengthen the runs to smooth it.")
    bench = [{"k": r["k"], "measured": r["measured speedup"], "predicted": r["predicted speedup"]} for r in rows]
    ui.show_chart(charts.fig_bench_speedup(bench), "k_sweep_measured_vs_predicted", key="speed.fig_bench")
    best = max(rows, key=lambda r: r["measured speedup"])
    st.markdown(explain.speedup_verdict(best["measured speedup"], best["predicted speedup"], cost.c, best["α"])
                if cost else f"Best measured: k = {best['k']} at {best['measured speedup']:.2f}× "
                             f"{explain.target_alone({})}. "
                             "Measure c above to compare with the model.")
    edge = explain.sweep_edge_note(best["k"], max(r["k"] for r in rows))
    if edge:
        st.markdown(edge)
    tip = explain.gpu_advice(device, best["measured speedup"], models.gpu_suggestion(pair_name))
    if tip:
        st.info(tip, icon=":material/lightbulb:")


def k_policies(pair, ids, settings: DecodeSettings, recorded: dict | None = None) -> None:
    st.subheader(f"5 · Adaptive k and the best-k chooser: k changes as acceptance is observed ({claims.link(13)})")
    st.caption("Adaptive k grows by 1 after a fully accepted round and shrinks by 1 after a rejection. The best-k "
               "chooser estimates α, c and the verify cost as it goes, and drafts while one more draft is expected "
               f"to pay: long through sure tokens, stopping right after a doubtful one. {explain.K_DRAFTED_NOTE}")
    off = pair is None  # recorded: these runs, nothing runs
    k0 = st.slider("starting k (fixed k: the k of every round)", 1, 12, 4, key="speed.k0", disabled=off)
    kept = Kept("speed.adaptive", ("recorded",) if off else _ident(pair))
    if st.button("Run fixed k, adaptive k and the best-k chooser", key="speed.run_adaptive", disabled=off) \
            and ids is not None:
        run = lab_ui.stoppable(race.compare_policies, pair.target, pair.chain_draft(), ids, replace(settings, k=k0),
                               key="speed.stop_adaptive", unit="k policy", plural="k policies", text="fixed k…",
                               **pair.run_kw)
        kept_now = run.keep(kept)
        run.go_on()
        if kept_now is not None:
            st.rerun()  # so section 2 above can use the measured α
    runs = recorded if off else kept.get()
    if runs is None:
        return
    if not off:
        lab_ui.stopped_note(kept)
    note_other_settings(runs.values(), ids, settings, k=k0, off=off)
    lab_ui.timing_notes((r for run in runs.values() for r in run.rounds), "the comparison")
    s = race.policy_summary(runs)  # engine time only: the progress bar is excluded
    for col, name in zip(st.columns(3), race.POLICIES):  # α and k under each: a metric cuts a long value off
        if name in s:  # a stopped comparison has the policies finished
            col.metric(f"{name} k: tokens/s", f"{s[name].tokens_per_s:.1f}",
                       f"{s[name].gain * 100:+.0f}%" if s[name].gain is not None else None)
            col.caption(f"α = {s[name].alpha:.2f} · {explain.k_used(name, runs[name].decode.k, s[name].mean_k)}")
    for col, name, key in zip(st.columns(2), ("adaptive", "best"), ("speed.fig_k", "speed.fig_k_best")):
        if name in runs:
            with col:
                ui.show_chart(charts.fig_k_trace(runs[name], charts.HALF_WIDTH), f"{name}_k_trace", key=key)


def early_exit(pair, ids, settings: DecodeSettings, recorded=None) -> None:
    st.subheader("6 · Early exit: the target's own first L layers as the draft")
    st.caption("Self-speculation needs no second model: the draft is the target's first L layers, then its own "
               "final norm and LM head (the same weights). A deeper exit drafts better (α up) but costs more (c up); "
               "at full depth the target drafts for itself: every greedy draft is kept, and it is still slower than "
               "the target alone, because c ≈ 1. Models not trained for early exit (like Qwen2.5) draft poorly at "
               "small L. This uses the target of the pair in the sidebar, whatever its draft.")
    off = pair is None  # recorded: its depths and k, nothing runs
    try:
        n_layers = recorded.n_layers if off else selfdraft.num_layers(pair.target)
    except SpecvizError as e:
        ui.show_error(e)
        return
    e1, e2 = st.columns([3, 1])
    depths = e1.multiselect("depths L (layers the draft runs)", list(range(1, n_layers + 1)), disabled=off,
                            default=[p.layers for p in recorded.points] if off else exit_sweep.default_layers(n_layers),
                            key="speed.ee_layers")
    ek = e2.slider("k", 1, 8, recorded.k if off else exit_sweep.DEFAULT_K, key="speed.ee_k", disabled=off)
    cap = max(4, int(settings.max_new_tokens))
    e_new = e2.number_input("new tokens per depth", 4, cap, min(exit_sweep.DEFAULT_TOKENS, cap), 4,
                            key="speed.ee_tokens", disabled=off,
                            help="Each depth makes this many tokens. A shallow exit is accepted rarely, so its run "
                                 "takes about one round a token: fewer tokens keep the sweep short.")
    settings = replace(settings, k=int(ek), max_new_tokens=int(e_new))
    kept = Kept("speed.early_exit", ("recorded",) if off else _ident(pair))
    now = _settings_now(ids, settings, int(ek))  # the sweep's runs are not kept: what it was measured with is
    if st.button("Measure α, c and the speedup for each L", key="speed.run_early_exit", disabled=off) \
            and ids is not None:
        run = lab_ui.stoppable(exit_sweep.early_exit_sweep, pair.target, ids, depths, settings,
                               key="speed.stop_early_exit", unit="depth", text="early exit…", **pair.run_kw)
        run.keep(kept, (run.value, run.load) if run.value is not None else None, settings=now)
        run.go_on()
    if (got := (recorded, None) if off else kept.get()) is not None:
        sweep, note = got
        if not off:
            lab_ui.stopped_note(kept)
        ui.note_other_settings([] if off else kept.changed(now))
        lab_ui.load_warning(note)  # its runs are not kept: the note of every pass it timed
        ui.show_chart(charts.fig_early_exit(sweep), "early_exit_alpha_c", key="speed.fig_early_exit")
        ui.table(exit_sweep.early_exit_rows(sweep), hide_index=True)
