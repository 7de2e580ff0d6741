"""The token tree on the main page: one call from app.py (main_page_tree).

A "drafter shape" choice and the tree's node budget in the sidebar (shape_picker, budget_picker); with "token tree"
or "spine", a panel drafts and verifies the first round of the main page's prompt in that shape, with the sidebar's
decoding settings, drawn as the Token tree page draws it (which runs whole ones).
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from pages.common import ui
from pages.common.kept import Kept
from specviz.core import prompts
from specviz.core.errors import SpecvizError
from specviz.decoding.tree import SPINE as SPINE_SHAPE, tree_stream
from specviz.teaching.tree_charts import fig_tree
from specviz.core.settings import DecodeSettings

CHAIN, TREE, SPINE = "chain", "token tree", "spine"
ROUND_TOKENS = 16  # the most new tokens the panel's one round is asked for


def shape_picker(where, live: bool) -> str:
    """The drafter shape radio, drawn in `where` (the main page's sidebar draws it under More settings)."""
    return where.radio("Drafter shape", [CHAIN, TREE, SPINE], key="main.shape", horizontal=True, disabled=not live,
                       help="chain: k drafts in a row (the run above). token tree: alternatives at each "
                            "depth, every node verified in the same one target pass. spine: the chain the "
                            "best-k chooser drafts, with a second choice beside each token the draft is "
                            "unsure of, verified in the same one pass.")


def budget_picker(where, live: bool, shape: str) -> int:
    """The token tree's node budget, drawn in `where` (under More settings, under the shape); only a token tree
    takes it (a spine's chooser ends the chain)."""
    return int(where.select_slider("node budget (token tree)", [4, 8, 16, 32], 16, key="main.tree_budget",
                                   disabled=not live or shape != TREE))


def main_page_tree(pair_name: str | None, dtype: str, draft_precision: str | None, prompt_text: str, chat: bool,
                   settings: DecodeSettings, *, live: bool, shape: str, budget: int) -> None:
    """With shape "token tree" or "spine" (shape_picker), the panel that drafts and verifies one such round with
    the sidebar's settings (one round: at most ROUND_TOKENS new tokens; a spine is stopped by the best-k
    chooser) and, for a tree, the sidebar's node budget (budget_picker)."""
    if shape == CHAIN or not live or not pair_name:
        return
    spine = shape == SPINE
    title = ("Spine: the first round of this prompt, a chain with a sibling where the draft is unsure" if spine
             else "Token tree: the first round of this prompt, drafted as a tree")
    with st.expander(title, expanded=True):
        # the round, until the pair changes; the tree's and the spine's apart, so switching loses neither
        kept = Kept("main.spine" if spine else "main.tree", (pair_name, dtype, draft_precision))
        if spine:  # the chooser's stop rule ends the chain; the budget only bounds it
            shape_kw = dict(SPINE_SHAPE, shape="spine")
            settings = replace(settings, k_policy="best")
        else:
            shape_kw = dict(budget=budget)
        if st.button(f"Draft and verify one {shape} round", key="main.tree_run"):
            try:
                pair = ui.load_pair_cached(pair_name, dtype, draft_precision)
                pair.check_shared_vocab("A token tree")
                ids = prompts.encode(pair.tokenizer, prompt_text, chat)
                stream = tree_stream(pair.target, pair.draft, ids,
                                     replace(settings, max_new_tokens=min(settings.max_new_tokens, ROUND_TOKENS)),
                                     **shape_kw, **pair.run_kw)
                kept.put((next(iter(stream)), ui.decoder(pair.tokenizer)))
                stream.close()  # one round is all this panel shows: let the caches go
            except (SpecvizError, MemoryError) as e:
                ui.show_error(e)
        if kept.get() is not None:
            rnd, decode = kept.get()
            ui.show_chart(fig_tree(rnd, decode), "main_tree", key="main.tree_fig")
        st.page_link("pages/9_Token_tree.py", label="Whole runs, node by node, and chain against tree: the Token "
                     "tree page", icon=":material/account_tree:")
