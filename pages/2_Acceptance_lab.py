"""Acceptance lab (claim 10): α by domain and temperature, by draft position, and against the target's entropy."""

import streamlit as st

from pages.common import lab_ui, ui
from specviz import charts, lab, limits, prompts

ui.page_setup("Acceptance lab: where drafts are accepted")

st.markdown(
    """
**α** is the chance that the target accepts a drafted token. It measures **agreement**, not quality: a
small draft agrees with a big target where the next token is predictable (code syntax, list numbering,
boilerplate, well-known facts, repeated text) and disagrees where many continuations are plausible
(open-ended, creative text). Temperature matters too: sampling spreads both models' choices, so they
match less often.

Below, each domain's preset prompt is run for real with the draft model, at each temperature you pick.
Start small (it runs on your device), then add temperatures or domains: finished measurements are kept.
"""
)

pair = lab_ui.pair_for_page("lab")
if pair is None:
    st.stop()
decode = lab_ui.decoder(pair)
presets = prompts.domain_prompts()

# --- settings -------------------------------------------------------------------------------
c1, c2 = st.columns([3, 2])
domains = c1.multiselect("Domains (one preset prompt each)", list(presets), default=list(presets),
                         key="lab.domains", format_func=lambda d: f"{d}: {presets[d].name}")
temps = c1.multiselect("Temperatures", [0.0, 0.3, 0.7, 1.0, 1.2, 1.5], default=[0.0, 0.7, 1.2],
                       key="lab.temps", help="0 is greedy.")
k = c2.slider("k: tokens drafted per round", 1, 12, 4, key="lab.k")
cap = limits.max_new_tokens()
max_new = c2.number_input("new tokens per run", 4, cap, min(24, cap), 4, key="lab.max_new",
                          help="More tokens give tighter estimates and take longer.")
seed = c2.number_input("seed", 0, 2**31 - 1, 0, 1, key="lab.seed")

key = (pair.name, lab_ui.dtype_name(pair), int(k), int(max_new), int(seed))
if st.session_state.get("lab.key") != key:
    # results measured with other settings stay visible until the next measurement replaces them
    stale = "lab.sweep" in st.session_state
else:
    stale = False

b1, b2 = st.columns([1, 4])
if b1.button("Measure", type="primary", key="lab.run"):
    if not domains or not temps:
        st.error("Pick at least one domain and one temperature.", icon=":material/error:")
    else:
        existing = st.session_state.get("lab.sweep") if not stale else None
        try:
            ids = {d: prompts.encode(pair.tokenizer, presets[d].text, presets[d].chat) for d in domains}
            bar = lab_ui.ProgressBar("starting…")
            sweep = lab.acceptance_sweep(pair.target, pair.draft, ids, temps, k=int(k), max_new_tokens=int(max_new),
                                         seed=int(seed), eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab,
                                         existing=existing, progress=bar)
            bar.done()
            if existing:  # keep domains measured before but not picked now
                sweep = {**existing, **sweep}
            st.session_state["lab.sweep"] = sweep
            st.session_state["lab.key"] = key
            stale = False
        except Exception as e:  # noqa: BLE001 - shown in the page, never a traceback
            ui.show_error(e)
if b2.button("Clear results", key="lab.clear"):
    st.session_state.pop("lab.sweep", None)
    st.session_state.pop("lab.key", None)

sweep = st.session_state.get("lab.sweep")
if not sweep:
    st.info("No measurements yet: press **Measure**. With the defaults that is 15 short runs.")
    st.stop()
if stale:
    st.warning("The results below were measured with other settings (pair, k, tokens or seed); "
               "**Measure** starts a new set.")

# --- α by domain and temperature ---------------------------------------------------------------
st.subheader("α by domain and temperature")
ui.show_chart(charts.fig_alpha_vs_temperature(lab.alpha_table(sweep)), "alpha_vs_temperature", key="lab.fig_alpha")
st.dataframe(lab.sweep_rows(sweep), hide_index=True)
st.caption("α = accepted ÷ drafted tokens the target judged (a rejection ends a round, so later drafts are not "
           "judged). With few tokens the interval is wide: add tokens for a sharper picture.")

# --- one temperature in detail --------------------------------------------------------------
all_t = sorted({t for by_t in sweep.values() for t in by_t})
t_pick = st.selectbox("Temperature to look at in detail", all_t, key="lab.t_detail", format_func=lambda t: f"{t:g}")
runs = {d: by_t[t_pick] for d, by_t in sweep.items() if t_pick in by_t}

ui.show_chart(charts.fig_accept_by_position(runs), f"accept_by_position_T{t_pick:g}", key="lab.fig_pos")
dom_len = st.selectbox("Domain for the accepted-length histogram", list(runs), key="lab.dom_len")
ui.show_chart(charts.fig_accept_lengths(runs[dom_len]), f"accept_lengths_{dom_len}_T{t_pick:g}", key="lab.fig_len")
st.caption("If every drafted token were accepted independently with the same α, the number accepted per round "
           "would follow the truncated geometric α^n(1 − α) shown as the dashed line.")

st.subheader("Why creative text accepts poorly: the target's own uncertainty")
st.markdown("The **entropy** of the target's distribution says how unsure the target is about the next token. "
            "Where it is high, many tokens are plausible and the draft rarely picks the one the target picks.")
verdict = lab.entropy_verdict(sweep, t_pick)
if verdict:
    st.markdown(verdict)
doms = list(runs)
for default, slot, label in (("creative", "a", "Domain"), ("list", "b", "Compare with")):
    d = st.selectbox(label, doms, index=doms.index(default) if default in doms else 0, key=f"lab.ent_{slot}")
    ui.show_chart(charts.fig_entropy_acceptance(runs[d], decode), f"entropy_{d}_T{t_pick:g}", key=f"lab.fig_ent_{slot}")
