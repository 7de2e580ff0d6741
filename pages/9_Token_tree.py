"""Token tree: draft a tree of alternatives, verify every node in one target pass, keep the longest accepted path."""

from dataclasses import replace

import streamlit as st

from pages.common import lab_ui, recorded_ui, tree_round_ui, ui
from pages.common.kept import Kept
from specviz.teaching import glossary, page_records, tree_lab
from specviz.core import limits, prompts
from specviz.core.settings import DecodeSettings
from specviz.data import playback
from specviz.decoding.tree import BRANCH_MAX, DOUBT, SPINE, tree_stream
from specviz.teaching.tree_charts import fig_chain_vs_tree

ui.page_setup("Token tree: many drafts, one pass", words=glossary.PAGE_WORDS["9_Token_tree"])

st.markdown(
    """
A chain drafts **one** guess per position; when the draft's first choice is wrong, everything after it is
lost. A **token tree** (SpecInfer, Medusa, EAGLE-2) drafts **alternatives**: at each depth the draft gives the
most probable nodes **b** children each, until a **node budget** is spent. The target then reads **every node
in one pass**: an attention mask lets each node see the committed text and its own ancestors only, so every
branch is scored as if it were alone. Walking down from the root, the target keeps the child it agrees with
(greedy) or accepts children by recursive rejection sampling; the longest accepted path wins, and the target
adds one token of its own. The output is exactly the target's.

A **spine** is the cheap middle way: a chain, drafted and stopped as the best-k chooser drafts one, with a
**sibling** (the draft's next choice) added as a leaf wherever the draft is unsure. Where the draft is sure it
costs what the chain costs; where it is not, the target's token is often the draft's second choice, and the
sibling turns that rejection into an accepted token and a bonus after it, in the same one pass.
"""
)

pair, rec = recorded_ui.pair_or_page_recording("tree", "token_tree")
got = recorded_ui.results(rec, page_records.RESULTS["token_tree"]) if rec is not None else None
if pair is None and got is None:
    st.stop()
off = rec is not None  # a recording: its tree run is stepped through round by round, nothing is computed
if off:
    decode, ident, ids, text = rec.decode(), ("recorded",), got["run"].prompt_ids, rec.prompt_text
    st.markdown(f"**Prompt** (recorded): {text}")
    right = st.container()
else:
    pair, decode, ident, ids, text, right = lab_ui.stepping_setup("tree", page_records.TOKEN_TREE["prompt"], pair=pair)
with right:
    layout = st.radio("Shape", ["tree", "spine"], key="tree.shape", horizontal=True, disabled=off,
                      help="tree: alternatives depth by depth, within a node budget. spine: a chain the best-k "
                           "chooser stops, with siblings where the draft is unsure.")
    is_spine = layout == "spine"
    budget = st.select_slider("node budget (nodes verified per pass)", [2, 4, 8, 16, 32], 16, key="tree.budget",
                              disabled=is_spine or off)
    branch = st.slider("b: children per expanded node" + (" (1 + siblings)" if is_spine else ""), 1, BRANCH_MAX, 2,
                       key="tree.branch", disabled=off)
    max_depth = st.slider("max depth", 1, 8, 8, key="tree.depth", disabled=is_spine or off)
    doubt = st.slider("siblings where the draft's top probability is below", 0.0, 1.0, DOUBT, 0.05,
                      key="tree.doubt", disabled=off) if is_spine else DOUBT
    temperature = st.number_input("temperature (0 = greedy)", 0.0, 2.0, 0.0, 0.1, key="tree.temperature", disabled=off)
    seed = st.number_input("seed", 0, 2**31 - 1, 0, 1, key="tree.seed", disabled=off)
    max_new = st.number_input("max new tokens", 1, limits.max_new_tokens(), min(32, limits.max_new_tokens()), 1,
                              key="tree.max_new", disabled=off)
    speed = st.select_slider("animation speed", list(playback.SPEEDS), playback.DEFAULT_SPEED, key="tree.speed")
shape = (dict(SPINE, shape="spine", branch=int(branch), doubt=float(doubt)) if is_spine
         else dict(budget=int(budget), branch=int(branch), max_depth=int(max_depth)))
settings = DecodeSettings(temperature=float(temperature), max_new_tokens=int(max_new), seed=int(seed))
common = {} if off else pair.run_kw

# the page's run, until the pair or dtype changes; a run that is replaced is stopped, so its KV caches are freed
kept = Kept("tree.pb", ident, close=lambda old: old.close("replaced"))


def step():
    """The next round, or None (the rounds so far are kept; an error is shown, never a traceback)."""
    try:
        return kept.get().advance()
    except Exception as e:  # noqa: BLE001
        ui.show_error(e)


# the settings a run is started with, kept with it: the page says which differ when the widgets change
run_now = lab_ui.run_settings(ids, settings, shape=layout, b=int(branch),
                              **({"sibling threshold": float(doubt)} if is_spine else
                                 {"node budget": int(budget), "max depth": int(max_depth)}))
row = ui.button_row()
fresh = None  # the round computed in this script run, to animate
if row.button("First round", icon=":material/play_arrow:", type="primary", key="tree.start"):
    if off:  # the recorded run, replayed from its first round
        kept.put(playback.Playback.replay(got["run"], text, {"chat": prompts.preset(rec.settings["prompt"]).chat}))
    elif ids is not None and (stream := lab_ui.run_guarded(tree_stream, pair.target, pair.draft, ids,
                                                           replace(settings, k_policy="best"), **shape,
                                                           **common)) is not None:
        kept.put(playback.Playback.live(stream, ids, text, settings.record(**common),
                                        {"chat": lab_ui.chat_on("tree")}),
                 settings=run_now)
pb = kept.get()
if row.button("Next round", icon=":material/skip_next:", key="tree.next", disabled=pb is None or pb.done) or (
        pb is not None and not pb.rounds):
    fresh = step()
if row.button("Reset", key="tree.reset"):
    kept.clear()
    pb = None

if pb is None or not pb.rounds:
    st.info("No round yet: press **First round**.")
else:
    tree_round_ui.show_rounds(pb, fresh, decode, speed, kept.changed(run_now))

# --- chain against tree -----------------------------------------------------------------------
st.subheader("Chain against tree, measured here")
st.markdown("The same prompt, seed and settings, at each node budget N: a chain drafting k = N tokens and a tree "
            "of N nodes. Both verify N drafted tokens in one target pass; the tree spends them on alternatives.")
budgets = st.multiselect("Node budgets", [2, 4, 8, 16, 32], key="tree.budgets", disabled=off,
                         default=got["chain_vs_tree"].budgets if off else list(tree_lab.DEFAULT_BUDGETS))
kept_cmp = Kept("tree.cmp", ident)
cmp_now = lab_ui.run_settings(ids, settings, **{"b": int(branch), "max depth": int(max_depth)})
if st.button("Measure chain against tree", key="tree.measure", disabled=off):
    if not budgets or ids is None:
        st.error("Pick at least one node budget (and give a prompt).", icon=":material/error:")
    else:
        run = lab_ui.stoppable(tree_lab.chain_vs_tree, pair.target, pair.draft, ids, settings, budgets=budgets,
                               branch=int(branch), max_depth=int(max_depth), key="tree.stop_cmp", unit="node budget",
                               **common)
        run.keep(kept_cmp, (run.value, run.load) if run.value is not None else None, settings=cmp_now)
        run.go_on()
if (measured := (got["chain_vs_tree"], None) if off else kept_cmp.get()) is not None:
    cmp, note = measured
    if not off:
        lab_ui.stopped_note(kept_cmp)
    ui.note_other_settings(kept_cmp.changed(cmp_now))
    lab_ui.load_warning(note)
    ui.show_chart(fig_chain_vs_tree(cmp), "chain_vs_tree", key="tree.fig_cmp")
    for line in tree_lab.chain_vs_tree_verdict(cmp):
        st.markdown(line)
    if cmp.greedy:
        (st.success if cmp.same_output else st.warning)(
            "Greedy: every chain and tree produced the same text as each other." if cmp.same_output else
            "Greedy, yet the texts differ: float rounding between passes of different widths flipped a near-tie.")
