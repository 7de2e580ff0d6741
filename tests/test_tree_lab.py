"""specviz.teaching.tree_lab: acceptance by depth and rank, a node's story, chain against tree, and the verdict's words."""

import pytest
import torch

from specviz.decoding.engine import speculative_decode
from specviz.modeling.tiny import tiny_model
from specviz.decoding.tree import tree_decode
from specviz.teaching.tree_charts import DRAFTED_STATE, fig_tree
from specviz.core.settings import DecodeSettings
from specviz.teaching.tree_lab import (ChainVsTree, ShapeRun, by_depth, by_rank, chain_vs_tree, chain_vs_tree_verdict,
                              node_story, ranks)


@pytest.fixture(scope="module")
def pair():
    return tiny_model(0, dtype=torch.float64), tiny_model(0, noise=0.05, dtype=torch.float64)


@pytest.fixture(scope="module")
def rounds(pair):
    return [r for t in (0.0, 1.0)
            for r in tree_decode(*pair, [5, 6, 7], DecodeSettings(temperature=t, max_new_tokens=40, seed=2),
                                 budget=12, branch=3, eos_token_id=[]).rounds]


def test_tallies_count_what_the_walk_tried_and_accepted(rounds):
    depth, rank = by_depth(rounds), by_rank(rounds)
    # every accepted node is counted once by its rank and once by its depth
    assert sum(t.accepted for t in rank) == sum(t.accepted for t in depth) == sum(r.n_accepted for r in rounds)
    # depth d: rounds whose path reached d, out of the rounds that tried a node there
    for t in depth:
        assert t.accepted == sum(r.n_accepted >= t.label for r in rounds)
        assert t.tried == sum(any(r.depths[i] == t.label and v != "untried" for i, v in enumerate(r.verdict))
                              for r in rounds)
    # rank 0 is the first child of every parent the walk judged; later ranks are tried only after it
    assert [t.label for t in rank] == sorted(t.label for t in rank) and rank[0].label == 0
    assert all(a.tried >= b.tried for a, b in zip(rank, rank[1:]))
    assert any(t.label > 0 and t.accepted for t in rank)  # the side branches did win somewhere


def test_ranks_are_the_order_among_siblings(rounds):
    r = max(rounds, key=lambda x: x.n_nodes)
    rk = ranks(r)
    for kids in r.children.values():
        assert [rk[c] for c in kids] == list(range(len(kids)))


def test_node_story_says_why(rounds):
    greedy = next(r for r in rounds if r.greedy and "untried" in r.verdict and "rejected" in r.verdict)
    say = lambda r, v: " ".join(node_story(r, r.verdict.index(v), str))  # noqa: E731
    assert "**rejected**" in say(greedy, "rejected") and "Greedy" in say(greedy, "rejected")
    assert "pruned" in say(greedy, "untried")
    sampled = next(r for r in rounds if not r.greedy and r.path)
    assert "**accepted**" in say(sampled, "accepted") and "u = " in say(sampled, "accepted")


def test_node_story_shows_a_tokens_text_as_itself(rounds):
    """The story goes to st.markdown: tokens such as ‘**’, ‘_’ or ‘`’ change no markup (test_explain's check)."""
    from test_explain import MARKUP_TOKENS, markup_tags

    hostile = lambda i: MARKUP_TOKENS[i % len(MARKUP_TOKENS)]  # noqa: E731
    for r in rounds:
        for i in range(r.n_nodes):
            for plain, marked in zip(node_story(r, i, lambda t: f"w{t}"), node_story(r, i, hostile)):
                assert markup_tags(marked) == markup_tags(plain), marked


def test_drafting_view_grows_by_depth_with_nothing_verified(rounds):
    r = max(rounds, key=lambda x: max(x.depths))
    label = DRAFTED_STATE["drafted"][0]
    for d in range(1, max(r.depths) + 1):
        traces = {t.name: t for t in fig_tree(r, depth=d).data if t.customdata is not None}
        assert set(traces) == {"committed context", label}
        assert sorted(traces[label].customdata) == [i for i in range(r.n_nodes) if r.depths[i] <= d]


def test_chain_vs_tree_runs_the_engines_chain_and_tree(pair):
    cmp = chain_vs_tree(*pair, [5, 6, 7], settings=DecodeSettings(max_new_tokens=12, seed=1), budgets=[2, 6],
                        eos_token_id=[], cost_reps=1)
    for b in (2, 6):
        chain = speculative_decode(*pair, [5, 6, 7], settings=DecodeSettings(k=b, max_new_tokens=12, seed=1),
                                   eos_token_id=[])
        tree = tree_decode(*pair, [5, 6, 7], settings=DecodeSettings(max_new_tokens=12, seed=1), budget=b,
                           eos_token_id=[])
        assert cmp.get("chain", b).target_passes == chain.target_passes
        assert cmp.get("tree", b).target_passes == tree.target_passes
    assert cmp.same_output and set(cmp.verify_ratio) == {1, 3, 7} and cmp.verify_ratio[1] == 1.0


def test_chain_vs_tree_stopped_after_one_budget_keeps_that_budget(pair):
    from specviz.core.errors import Stopped

    ticks = []

    def stop_after_one(msg, frac):
        ticks.append(msg)
        return msg.done < 1  # False once one budget is done: stop

    with pytest.raises(Stopped) as got:
        chain_vs_tree(*pair, [5, 6, 7], settings=DecodeSettings(max_new_tokens=12, seed=1), budgets=[6, 2, 4],
                      eos_token_id=[], cost_reps=1, progress=stop_after_one)
    part = got.value.partial
    assert part.budgets == [2] and [(r.shape, r.budget) for r in part.runs] == [("chain", 2), ("tree", 2)]
    assert set(part.verify_ratio) == {1, 3}  # the pass sizes of the budget kept
    assert chain_vs_tree_verdict(part)  # a partial result still reads
    assert ticks[-1].done == 1 and ticks[-1].total == 3 and ticks[-1].eta_s is not None

def made(ratio, tps):
    """A ChainVsTree with the given verify ratios and tree tokens/s by budget (the chain at 10 tokens/s)."""
    runs = [ShapeRun(s, b, 30, 10, 3.0 if s == "tree" else 2.0, tps[b] if s == "tree" else 10.0, 1.0)
            for b in tps for s in ("chain", "tree")]
    return ChainVsTree(sorted(tps), runs, ratio, True, True)


def test_the_verdict_names_where_a_wide_pass_stops_being_free():
    costly = chain_vs_tree_verdict(made({1: 1.0, 5: 1.1, 9: 1.2, 17: 2.0, 33: 3.5}, {4: 11.0, 8: 14.0, 16: 12.0,
                                                                                     32: 8.0}))
    text = " ".join(costly)
    assert "the tree beat the chain at 4 of 4 budgets" in text and "Fastest tree: 8 nodes" in text
    assert "only up to 9 tokens" in text and "A tree of 16 nodes needs a pass over 17 tokens" in text
    assert "2.00×" in text and "3.50× for 32 nodes" in text and "(16, 32 nodes) made fewer tokens/s" in text
    # the real pair's case: no pass but the 1-token one is free, and the smaller trees are slower only for
    # drafting fewer tokens, so only the wider one is named as not paying for its pass
    text = " ".join(chain_vs_tree_verdict(made({1: 1.0, 5: 1.3, 9: 1.4, 17: 1.7, 33: 2.75},
                                               {4: 6.5, 8: 9.9, 16: 10.9, 32: 10.0})))
    assert "at 4 of 4 budgets (4, 8, 16, 32 nodes);" in text and "only up to 1 token." in text
    assert "wider trees (32 nodes) made fewer tokens/s than the 16-node tree" in text
    free = " ".join(chain_vs_tree_verdict(made({1: 1.0, 5: 1.05, 9: 1.1}, {4: 11.0, 8: 14.0})))
    assert "nearly free here" in free and "exception" not in free
