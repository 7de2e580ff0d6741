"""The Slow motion page's drawing of a run's rounds: the text so far, then one round decision by decision.

  text_so_far(state, decode, changed)  the run's text with each token's state, its settings, its zero-accept rounds
  round_detail(rounds, decode)         the chosen round's story, table and p/q and residual charts
"""

from __future__ import annotations

import streamlit as st

from pages.common import lab_ui, ui
from specviz.core import claims
from specviz.teaching import charts, explain, render


def text_so_far(state: dict, decode, changed: list[str]) -> None:
    """The text so far: `state` is the kept run ({"pb", "prompt_text", "settings"}); `changed` names the settings
    the widgets now differ in from the run's."""
    rounds = state["pb"].rounds
    s = state["settings"]
    st.subheader("The text so far")
    st.caption(f"{explain.rounds_are_passes(len(rounds))} · "
               f"{sum(len(r.emitted) for r in rounds)} new tokens · k = {s['k']}, T = {s['temperature']:g}, "
               f"seed {s['seed']}, {s['drafter']}" + (" · run finished" if state["pb"].done else ""))
    ui.note_other_settings(changed, button="First round")
    st.markdown(render.legend_html(), unsafe_allow_html=True)
    st.markdown(render.tokens_html(state["prompt_text"], rounds, decode, reply=state["pb"].reply),
                unsafe_allow_html=True)
    zeros = [r.index + 1 for r in rounds if r.k > 0 and r.n_accepted == 0]
    if zeros:
        st.caption(f"Rounds that accepted no draft but still emitted a token ({claims.link(5)}): "
                   f"{', '.join(map(str, zeros))}.")


def round_detail(rounds, decode) -> None:
    """One round, decision by decision: the round picked (the newest by default), its story and its charts."""
    st.subheader("One round, decision by decision")
    n = len(rounds)
    pick = st.selectbox("Round to inspect", list(range(1, n + 1)), index=n - 1,
                        help="The newest round is shown after each step.")
    r = rounds[pick - 1]
    for line in explain.round_story(r, decode):
        st.markdown(line)
    lab_ui.timing_notes(rounds, "the run")  # the times above: under outside load? waits left out?
    note = explain.zero_accept_note(r, decode)
    if note:
        st.success(note, icon=":material/check_circle:")
    ui.table(explain.round_rows(r, decode), hide_index=True)

    if r.k > 0:
        pos = st.selectbox("Drafted position to draw", list(range(1, r.k + 1)), index=min(r.n_accepted, r.k - 1),
                           format_func=lambda i: f"#{i} {explain.tok(r.drafted[i - 1], decode)}")
        ui.show_chart(charts.fig_pq(r, pos - 1, decode), f"round{r.index + 1}_pq{pos}", key="slow.fig_pq")
        ui.show_chart(charts.fig_residual(r, decode), f"round{r.index + 1}_residual", key="slow.fig_residual")
    else:
        st.info("The drafter proposed nothing this round (prompt lookup found no earlier match), so the target "
                "produced one token on its own.")
