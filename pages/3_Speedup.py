"""Speedup (claims 9, 13): the cost model with c measured here, a measured k sweep, a race, adaptive k, early exit."""

import time
from dataclasses import replace

import streamlit as st

from pages.common import lab_ui, recorded_ui, speed_ui, ui
from pages.common.kept import Kept
from specviz.teaching import charts, costs, explain, glossary, lab, page_records, race, render
from specviz.core import limits
from specviz.core.settings import DecodeSettings

ui.page_setup("Speedup: tokens per pass is not speedup", shows=(9, 13), words=glossary.PAGE_WORDS["3_Speedup"])

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

pair, rec = recorded_ui.pair_or_page_recording("speed", "speedup")
got = recorded_ui.results(rec, page_records.RESULTS["speedup"]) if rec is not None else None
if pair is None and got is None:
    st.stop()
off = rec is not None  # a recording: its settings are shown, nothing runs
if off:
    decode, ident, ids, text = rec.decode(), ("recorded",), got["race"].spec.prompt_ids, rec.prompt_text
    st.markdown(f"**Prompt** (recorded): {text}")
    s = rec.settings
    settings = DecodeSettings(temperature=s["temperature"], max_new_tokens=s["new tokens per run"], seed=s["seed"])
    precision, head, device, pair_name = rec.about["draft_precision"], "full", rec.about["device"], rec.about["pair"]
else:
    decode = lab_ui.decoder(pair)
    ident = (pair.name, lab_ui.dtype_name(pair), pair.draft_precision)
    ids, text = lab_ui.prompt_input("speed", pair, default=page_records.SPEEDUP["prompt"])
    precision, head, device, pair_name = pair.draft_precision, pair.draft_head_name, pair.device, pair.name
c1, c2, c3 = st.columns(3)
temperature = c1.number_input("temperature (0 = greedy)", 0.0, 2.0, 0.0, 0.1, key="speed.temperature", disabled=off)
cap = limits.max_new_tokens()
max_new = c2.number_input("new tokens per run", 4, cap, min(24, cap), 4, key="speed.max_new", disabled=off)
seed = c3.number_input("seed", 0, 2**31 - 1, 0, 1, key="speed.seed", disabled=off)
if not off:
    settings = DecodeSettings(temperature=float(temperature), max_new_tokens=int(max_new), seed=int(seed))
kept = {name: Kept(f"speed.{name}", ident) for name in ("cost", "sweep", "race", "adaptive")}
# recorded: c and the pass costs are the recorded set's profile (the recording's own "cost" was made from it)
recorded = {"cost": (costs.recorded_profile() or got["cost"], None), "sweep": got["sweep"], "race": got["race"]} if off else {}


def result(what: str):
    """The section's result: the recording's, else the one kept from a live run."""
    return recorded[what] if off else kept[what].get()


# --- 1. c and the verify cost -----------------------------------------------------------------
st.subheader("1 · Measure c and the cost of verifying k tokens")
b1, b2 = st.columns(2)
go = b1.button("Measure c and the verify cost", type="primary", key="speed.run_cost", disabled=off)
again = b2.button("Measure again", key="speed.run_cost_again", disabled=off,
                  help="Time c and the passes anew and keep them as this machine's profile, in place of the kept one.")
if go or again:
    lab_ui.keep_measured(kept["cost"], lab_ui.with_bar(race.measure_cost, pair.target, pair.chain_draft(), fresh=again,
                                                        text="timing…", ident=costs.identity(pair)))
cost, note = result("cost") or (None, None)
speed_ui.cost_result(cost, note, explain.drafter_words(precision, head), off)

speed_ui.draft_precisions(pair, ids, settings, got["precisions"] if off else None)  # 1b
speed_ui.target_precisions(pair, ids, settings, got["targets"] if off else None)  # 1c
speed_ui.c_check(pair, kept["cost"])  # section 1's c against 1b's and 1c's: timed again, or flagged

sw = result("sweep")
fixed = {"5": [got["policies"]["fixed"]]} if off else speed_ui.fixed_k_runs(pair)
speed_ui.cost_model(fixed, ids, settings, cost, sw)  # 2

# --- 3. a measured k sweep --------------------------------------------------------------------
st.subheader("3 · Measured: one prompt, several k, each against a warmed target-only run")
ks = st.multiselect("k values", [1, 2, 3, 4, 5, 6, 8, 10, 12], default=[1, 2, 4, 6, 8], key="speed.ks",
                    disabled=off)
if st.button("Run the k sweep", key="speed.run_sweep", disabled=off) and ids is not None:
    if not ks:
        st.error("Pick at least one k.", icon=":material/error:")
    else:
        run = lab_ui.stoppable(lab.k_sweep, pair.target, pair.chain_draft(), ids, ks, settings,
                               key="speed.stop_sweep", unit="k value", **pair.run_kw)
        kept_now = run.keep(kept["sweep"])
        run.go_on()
        if kept_now is not None:
            st.rerun()  # so the model above shows the new measured points
if sw is not None:
    if not off:
        lab_ui.stopped_note(kept["sweep"])
    speed_ui.note_other_settings([cmp.spec for cmp in sw.values()], ids, settings, off=off)
    speed_ui.sweep_result(sw, cost, device, pair_name)

# --- 4. the race -----------------------------------------------------------------------------
st.subheader("4 · A race: target alone against speculative")
r1, r2 = st.columns([1, 3])
race_k = r1.slider("k for the race", 1, 12, 4, key="speed.race_k", disabled=off)
left, right = st.columns(2)
left.markdown("**Target alone**")
spec_head = right.empty()  # the k of the race shown: the slider's until a race is kept, then that race's
spec_head.markdown(f"**Speculative** (k = {race_k})")
shown = {"base": left.empty(), "spec": right.empty()}


def show_text(who: str, rounds) -> None:
    """The generated text so far; speculative tokens show their state (accepted, correction, bonus)."""
    shown[who].markdown(render.tokens_html("", rounds, decode), unsafe_allow_html=True)


if r1.button("Start the race", type="primary", key="speed.run_race", disabled=off) and ids is not None:
    run = lab_ui.stoppable(race.race, pair.target, pair.chain_draft(), ids, replace(settings, k=race_k),
                           key="speed.stop_race", unit="run", text="warming up…", on_round=show_text, **pair.run_kw)
    run.keep(kept["race"])
    run.go_on()
rc = result("race")
if rc is not None:
    if not off:
        lab_ui.stopped_note(kept["race"])
    runs = [r for r in (rc.base, rc.spec) if r is not None]  # a stopped race: the target alone only
    speed_ui.note_other_settings(runs[-1:], ids, settings, k=race_k, off=off)
    spec_head.markdown(f"**Speculative** (k = {rc.k})")
    lab_ui.timing_notes([r for run in runs for r in run.rounds], "the race")
    show_text("base", rc.base.rounds)
    if rc.spec is not None:
        show_text("spec", rc.spec.rounds)
    ui.show_chart(charts.fig_race(lab.race_points(rc.spec) if rc.spec else [], lab.race_points(rc.base)), "race",
                  key="speed.fig_race")
    if rc.spec is not None and st.button("Replay side by side at the measured speed", key="speed.replay"):
        t0 = time.perf_counter()
        for t, who, n in race.replay_schedule(rc):
            time.sleep(max(0.0, t - (time.perf_counter() - t0)))
            show_text(who, getattr(rc, who).rounds[:n])

speed_ui.k_policies(pair, ids, settings, got["policies"] if off else None)  # 5
speed_ui.early_exit(pair, ids, settings, got["early_exit"] if off else None)  # 6
