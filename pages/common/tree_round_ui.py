"""The Token tree page's rounds, drawn: a round's tree (animated depth by depth when just computed), the text so
far, one node's p against q and its decision, and acceptance by depth and branch rank (pages/9_Token_tree.py runs
them; pages/common/tree_ui.py draws the main page's one-round panel).

  show_rounds(pb, fresh, decode, speed, changed)  the run's rounds so far, the chosen one in detail
"""

from __future__ import annotations

import streamlit as st

from pages.common import lab_ui, ui
from specviz.data import playback
from specviz.teaching import explain, render, tree_lab
from specviz.teaching.tree_charts import fig_node_pq, fig_tree, fig_tree_acceptance


def show_rounds(pb, fresh, decode, speed: str, changed: list[str]) -> None:
    """The chosen round's tree (animated, at the animation speed `speed`, when `fresh`, the round just computed),
    the text so far, one node, acceptance; pb is the kept Playback, changed the settings the widgets now differ in
    from its run's."""
    # --- the round: drafted depth by depth, then coloured by the one verify pass -----------------------------
    rounds = pb.rounds
    st.subheader("The tree")
    ui.note_other_settings(changed, button="First round")
    n = len(rounds)
    r = rounds[st.selectbox("Round", list(range(n)), index=n - 1, format_func=lambda i: f"round {i + 1}",
                            key=f"tree.round.{n}")]
    box = st.empty()
    pend_s = playback.SPEEDS[speed][0]  # the pause between depths
    if fresh is not None and pend_s > 0:
        for d in range(1, max(r.depths, default=0) + 1):
            box.plotly_chart(ui.presented(fig_tree(r, decode, depth=d)), key=f"tree.draft.{d}")
            playback.sleep(pend_s)
    with box.container():  # clicking a node picks it below
        event = ui.show_chart(fig_tree(r, decode), f"tree_round{r.index + 1}", key=f"tree.fig.{r.index}",
                              on_select="rerun", selection_mode="points")
    clicked = [p.get("customdata") for p in (event.selection.points if event else [])]
    if clicked and isinstance(clicked[0], int) and 0 <= clicked[0] < r.n_nodes:
        st.session_state[f"tree.node.{r.index}"] = clicked[0]
    st.markdown(explain.tree_round_summary(r, decode))
    lab_ui.timing_notes(rounds, "the tree run")  # the times above: under outside load? waits left out?
    st.markdown(render.legend_html(("accepted", "correction", "bonus")), unsafe_allow_html=True)
    st.caption("In a tree, the bonus comes when the accepted path reaches a leaf: the whole branch was accepted.")
    st.markdown(tree_lab.text_html(pb.prompt_text, rounds, decode, reply=pb.reply),
                unsafe_allow_html=True)
    st.caption(f"{explain.rounds_are_passes(n)}, {sum(len(x.emitted) for x in rounds)} new tokens, "
               f"{sum(x.n_nodes for x in rounds)} nodes drafted" + (" · run finished" if pb.done else ""))

    # --- one node --------------------------------------------------------------------------------------------
    st.subheader("One node: p against q, and the decision")
    if r.n_nodes:
        st.session_state.setdefault(f"tree.node.{r.index}", r.path[-1] if r.path else 0)  # the path's end
        node = st.selectbox("Node (or click one in the tree)", list(range(r.n_nodes)), key=f"tree.node.{r.index}",
                            format_func=lambda i: tree_lab.node_label(r, i, decode))
        for line in tree_lab.node_story(r, node, decode):
            st.markdown(line)
        ui.show_chart(fig_node_pq(r, node, decode), f"tree_round{r.index + 1}_node{node}", key="tree.fig_pq")

    # --- acceptance by depth and rank ------------------------------------------------------------------------
    st.subheader("Acceptance by depth and by branch rank")
    ranks = tree_lab.by_rank(rounds)
    ui.show_chart(fig_tree_acceptance(tree_lab.by_depth(rounds), ranks), "tree_acceptance", key="tree.fig_acc")
    st.info(tree_lab.rank_summary(ranks))
