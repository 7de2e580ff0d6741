"""Acceptance lab (claim 10): α by domain and temperature, by draft position, and against the target's entropy."""

import streamlit as st

from pages.common import lab_ui, recorded_ui, ui
from pages.common.kept import Kept
from specviz.teaching import charts, explain, glossary, lab, page_records
from specviz.core import limits, prompts
from specviz.core.settings import DecodeSettings

DEFAULTS = page_records.ACCEPTANCE_LAB  # the widgets start at the page's defaults (its recording's too)

ui.page_setup("Acceptance lab: where drafts are accepted", shows=(10,), words=glossary.PAGE_WORDS["2_Acceptance_lab"])

st.markdown(
    """
**α** is the chance that the target accepts a drafted token. It measures **agreement**, not quality: a
small draft agrees with a big target where the next token is predictable (code syntax, list numbering,
boilerplate, well-known facts, repeated text) and disagrees where many continuations are plausible
(open-ended, creative text). Temperature matters too: sampling spreads both models' choices, so they
match less often.

Below, each domain's prompt is run for real with the draft model, at each temperature you pick. α is
measured two ways: **counted** (accepted ÷ judged drafts in that run; a rejection ends a round, so only a few
positions are judged) and **expected** (the chance a draft would be accepted at *every* position of the same
text: Σ min(p, q), or whether the two models' top choices agree when greedy, read from one extra pass of each
model over the text). It rests on every position, and when sampling on the chance itself rather than one coin
flip per draft, so it moves less from run to run. Start with the defaults, then add temperatures or domains:
finished measurements are kept.
"""
)

pair, rec = recorded_ui.pair_or_page_recording("lab", "acceptance_lab")
got = recorded_ui.results(rec, page_records.RESULTS["acceptance_lab"]) if rec is not None else None
if pair is None and got is None:
    st.stop()
off = rec is not None  # a recording: its settings are shown, nothing runs
decode = rec.decode() if off else lab_ui.decoder(pair)
presets = prompts.lab_prompts()

# --- settings -------------------------------------------------------------------------------
c1, c2 = st.columns([3, 2])
shown = ".recorded" if off else ""  # a recording's own domains and temperatures, in widgets of their own
domains = c1.multiselect("Domains (one prompt each)", list(presets),
                         default=list(rec.settings["domains"] if off else prompts.LAB_DEFAULT_DOMAINS),
                         key=f"lab.domains{shown}", disabled=off, format_func=lambda d: f"{d}: {presets[d].name}")
temps = c1.multiselect("Temperatures", sorted({0.0, 0.3, 0.7, 1.0, 1.2, 1.5, *(rec.settings["temperatures"] if off
                                                                             else ())}),
                       default=list(rec.settings["temperatures"] if off else DEFAULTS["temperatures"]),
                       key=f"lab.temps{shown}",
                       disabled=off, help="0 is greedy. Each temperature adds one run per domain.")
k = c2.slider("k: tokens drafted per round", 1, 12, DEFAULTS["k"], key="lab.k", disabled=off)
cap = limits.max_new_tokens()
max_new = c2.number_input("new tokens per run", 4, cap, min(DEFAULTS["new tokens per run"], cap), 4, key="lab.max_new",
                          disabled=off,
                          help="More tokens give tighter estimates and take longer.")
seed = c2.number_input("seed", 0, 2**31 - 1, DEFAULTS["seed"], 1, key="lab.seed", disabled=off)
settings = DecodeSettings(k=int(k), max_new_tokens=int(max_new), seed=int(seed))  # each run at its temperature

# results measured with other settings stay visible until the next measurement replaces them
key = ("recorded",) if off else (pair.name, lab_ui.dtype_name(pair), int(k), int(max_new), int(seed))
kept_sweep, kept_agree = Kept("lab.sweep", key), Kept("lab.agree", key)

row = ui.button_row()
if row.button("Measure", type="primary", key="lab.run", disabled=off):
    if not domains or not temps:
        st.error("Pick at least one domain and one temperature.", icon=":material/error:")
    else:
        existing, existing_agree = kept_sweep.get(), kept_agree.get()  # cells with these settings are kept
        try:
            run = lab_ui.stoppable(page_records.acceptance_lab, pair, domains, temps, settings, existing=existing,
                                   existing_agree=existing_agree, key="lab.stop", unit="run")
            if run.keep(kept_sweep, run.value[0] if run.value else None) is not None:
                run.keep(kept_agree, run.value[1])
            run.go_on()
        except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
            ui.show_error(e)
if row.button("Clear results", key="lab.clear", disabled=off):
    kept_sweep.clear()
    kept_agree.clear()

sweep = got["sweep"] if off else kept_sweep.get() or kept_sweep.stale()
if not sweep:
    st.info(f"No measurements yet: press **Measure**. With these settings that is "
            f"{explain.count(len(domains) * len(temps), 'run')} of up to {int(max_new)} tokens.")
    st.stop()
if not off:
    lab_ui.stopped_note(kept_sweep)
if not off and kept_sweep.get() is None:
    st.warning("The results below were measured with other settings (pair, k, tokens or seed); "
               "**Measure** starts a new set.")

agree = got["agree"] if off else kept_agree.get() or kept_agree.stale() or {}
expected, counted = lab.expected_table(agree), lab.alpha_table(sweep)

# --- α by domain at one temperature, then against temperature ----------------------------------
st.subheader("α by domain")
all_t = sorted({t for by_t in sweep.values() for t in by_t})
t_pick = st.selectbox("Temperature to look at", all_t, key="lab.t_detail", format_func=lambda t: f"{t:g}")
ui.show_chart(charts.fig_alpha_by_domain(expected, t_pick, counted), f"alpha_by_domain_T{t_pick:g}",
              key="lab.fig_domain")
ui.table(lab.sweep_rows(sweep, agree), room_columns=lab.SWEEP_ROOM_COLUMNS, hide_index=True)
st.caption("Bars: the expected α at every position of each run's text (error bars: 95% interval; neighbouring "
           "positions are not independent, so read it as a guide). Diamonds: the counted α, accepted ÷ judged "
           "drafts, which rests on far fewer positions and so moves more from run to run.")
if len(all_t) > 1:
    ui.show_chart(charts.fig_alpha_vs_temperature(expected, counted), "alpha_vs_temperature", key="lab.fig_alpha")
else:
    st.caption("Add a temperature (0.7, 1.2) and press **Measure** to see α against temperature.")

# --- one temperature in detail --------------------------------------------------------------
runs = {d: by_t[t_pick] for d, by_t in sweep.items() if t_pick in by_t}

ui.show_chart(charts.fig_accept_by_position(runs), f"accept_by_position_T{t_pick:g}", key="lab.fig_pos")
dom_len = st.selectbox("Domain for the accepted-length histogram", list(runs), key="lab.dom_len")
ui.show_chart(charts.fig_accept_lengths(runs[dom_len]), f"accept_lengths_{dom_len}_T{t_pick:g}", key="lab.fig_len")
st.caption("If every drafted token were accepted independently with the same α, the number accepted per round "
           "would follow the truncated geometric α^n(1 − α) shown as the dashed line.")

st.subheader("Acceptance and the target's own uncertainty")
st.markdown("The **entropy** of the target's distribution says how unsure the target is about the next token. "
            "Where it is high, many tokens are plausible and the draft rarely picks the one the target picks.")
verdict = lab.entropy_verdict(sweep, t_pick, agree)
if verdict:
    st.markdown(verdict)
doms = list(runs)
for default, slot, label in (("creative", "a", "Domain"), ("list", "b", "Compare with")):
    d = st.selectbox(label, doms, index=doms.index(default) if default in doms else 0, key=f"lab.ent_{slot}")
    ui.show_chart(charts.fig_entropy_acceptance(runs[d], decode), f"entropy_{d}_T{t_pick:g}", key=f"lab.fig_ent_{slot}")
