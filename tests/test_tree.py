"""Token trees on tiny random models: the mask, one-pass logits, greedy identity, caches, distribution.

Greedy: tree decoding must equal transformers' greedy generate and the plain
engine, with drafts that rarely agree, often agree (the target plus noise) and
always agree (the target itself), so paths get accepted deep. Sampling: the
first two tokens over thousands of seeds must match the target's exact
distribution; the same check must fail when p is not updated after a rejection.
"""

import collections
import copy
import json

import pytest
import torch

import specviz.decoding.tree as tree
from specviz import InvalidSetting, autoregressive_decode
from specviz.decoding.kpolicy import FixedK
from specviz.modeling.lm import CachedLM
from specviz.decoding.sampling import Sampler
from specviz.modeling.tiny import tiny_model
from specviz.decoding.tree import ROOT, DraftTree, draft_mask, draft_tree, tree_decode, tree_step, verify_mask, verify_tree
from specviz.data.tree_records import TreeRun
from busy import busy_programs, team_or_skip
from stats import passes, total_variation
from tiny import hf_greedy, split_settings, tiny_lm
from specviz.core.settings import DecodeSettings


def no_eos(model):
    model.config.eos_token_id = model.generation_config.eos_token_id = None  # run to max_new_tokens
    return model


def close_pair(noise: float = 0.02):
    """A target and a draft that is its weights plus noise: they agree often (float64, no EOS)."""
    return no_eos(tiny_model(0, dtype=torch.float64)), no_eos(tiny_model(0, noise=noise, dtype=torch.float64))


def ancestors_by_closure(parents: list[int]) -> torch.Tensor:
    """(N, N) bool: j is i or an ancestor of i, by transitive closure of the parent relation."""
    n = len(parents)
    step = torch.zeros(n, n, dtype=torch.long)
    for i, par in enumerate(parents):
        if par != ROOT:
            step[i, par] = 1
    reach = torch.eye(n, dtype=torch.long)
    for _ in range(n):
        reach = ((reach + reach @ step) > 0).long()
    return reach.bool()


def random_tree(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [ROOT if i == 0 else int(torch.randint(-1, i, (), generator=g)) for i in range(n)]


# --------------------------------------------------------------------------
# the mask


def test_mask_of_a_small_tree_by_hand():
    #        root
    #       /    \
    #      0      1
    #     / \     |
    #    2   3    4
    #    |
    #    5
    parents = [ROOT, ROOT, 0, 0, 1, 2]
    m = verify_mask(n_cache=2, n_pending=1, parents=parents)  # columns: 2 cached, the root, 6 nodes
    assert m.shape == (7, 9)
    assert m[:, :3].all()  # everyone sees the committed context and the root
    assert m[0, 3:].sum() == 0  # the root sees no node
    expected = [[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0],
                [1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [1, 0, 1, 0, 0, 1]]
    assert m[1:, 3:].long().tolist() == expected


@pytest.mark.parametrize("seed", range(5))
def test_each_node_attends_to_exactly_its_ancestors(seed):
    parents = random_tree(20, seed)
    n_cache, n_pending = 5, 3
    m = verify_mask(n_cache, n_pending, parents)
    ctx = n_cache + n_pending
    assert m[n_pending:, :ctx].all()
    assert torch.equal(m[n_pending:, ctx:], ancestors_by_closure(parents))
    # the pending context tokens are causal and see no node
    assert torch.equal(m[:n_pending, n_cache:ctx], torch.ones(n_pending, n_pending, dtype=torch.bool).tril())
    assert not m[:n_pending, ctx:].any()
    # a draft pass: rows = some nodes, columns = context + nodes already cached + the rows
    cached, rows = list(range(0, 20, 2)), list(range(1, 20, 2))
    d = draft_mask(7, cached, rows, parents)
    full = ancestors_by_closure(parents)
    assert d[:, :7].all()
    assert torch.equal(d[:, 7:], full[rows][:, cached + rows])


def test_tree_logits_equal_each_paths_own_logits():
    """One target pass over the whole tree gives, at every node, the logits of feeding its path alone."""
    model = tiny_lm(3)
    ids = [5, 9, 2, 7, 1]
    parents = [ROOT, ROOT, ROOT, 0, 0, 1, 3, 3, 6, 5]
    t = DraftTree()
    for i, par in enumerate(parents):
        t.add((11 * i + 4) % 64, par, 0.5)
    lm = CachedLM(model)
    lm.feed(ids[:3])  # a cache holding part of the context: two pending tokens plus the tree
    logits, _ = verify_tree(lm, ids, t, 64)  # (N+1, V)
    with torch.no_grad():
        root = model(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(logits[0].double(), root, rtol=0, atol=1e-10)
        for i in range(len(t)):
            path = [t.tokens[a] for a in reversed(tree.lineage(parents, i))]
            alone = model(torch.tensor([ids + path])).logits[0, -1]
            torch.testing.assert_close(logits[i + 1].double(), alone, rtol=0, atol=1e-10)


@pytest.mark.parametrize("greedy", [True, False])
def test_draft_passes_see_each_nodes_path_alone(greedy):
    """Every distribution the drafter drew children from is the draft's distribution after that node's path."""
    model = tiny_lm(4)
    ids = [3, 1, 4, 1, 5]
    lm = CachedLM(model)
    lm.feed(ids[:2])
    sampler = Sampler.create(0.0 if greedy else 1.0, 0, 1.0, seed=7)
    t = draft_tree(lm, ids, sampler, 64, set(), budget=16, branch=2, max_depth=5)
    assert max(t.depths) == 5 and len(t) == 16  # 2, 4, 4, 4, 2 nodes by depth
    assert len(t.step_s) == 5  # one pass per depth that was expanded (the root's included)
    expanded = [n for n in t.q_rows if n != ROOT]
    assert len(expanded) >= 4
    with torch.no_grad():
        for n in [ROOT] + expanded:
            path = [t.tokens[a] for a in reversed(tree.lineage(t.parents, n))]
            alone = model(torch.tensor([ids + path])).logits[0, -1]
            torch.testing.assert_close(t.q_rows[n].double(), sampler.probs(alone).double(), rtol=0, atol=1e-10)


# --------------------------------------------------------------------------
# greedy: identical to the target alone


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget,branch,max_depth", [(1, 1, 1), (4, 1, 4), (16, 2, 8), (12, 3, 4), (32, 4, 6)])
def test_greedy_matches_hf_generate(seed, budget, branch, max_depth):
    target, draft = tiny_lm(100 + seed), tiny_lm(200 + seed)
    prompt = [(seed * 7 + i) % 64 for i in range(3 + seed)]
    run = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=20, seed=seed), budget=budget, branch=branch,
                      max_depth=max_depth)
    assert run.token_ids == hf_greedy(target, prompt, 20)


@pytest.mark.parametrize("noise", [0.0, 0.02, 0.05])
@pytest.mark.parametrize("budget,branch", [(8, 2), (16, 2), (24, 3)])
def test_greedy_with_a_draft_that_often_agrees(noise, budget, branch):
    target, draft = close_pair(noise) if noise else (close_pair()[0],) * 2
    prompt = [5, 6, 7, 8]
    run = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=40), budget=budget, branch=branch)
    assert run.token_ids == hf_greedy(target, prompt, 40)
    assert run.token_ids == autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=40)).token_ids
    assert max(r.n_accepted for r in run.rounds) >= 3  # trees are accepted deep
    assert run.tokens_per_pass > 1.5


def test_greedy_matches_on_gpt2_too():
    target, draft = tiny_lm(0, arch="gpt2"), tiny_lm(1, arch="gpt2")
    prompt = [5, 9, 2]
    assert tree_decode(target, draft, prompt,
                       DecodeSettings(max_new_tokens=20)).token_ids == hf_greedy(target, prompt, 20)


# --------------------------------------------------------------------------
# the spine: a chain with siblings where the draft is unsure


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("doubt,branch", [(0.0, 2), (0.8, 2), (1.0, 3)])
def test_spine_greedy_matches_hf_generate(seed, doubt, branch):
    target, draft = tiny_lm(100 + seed), tiny_lm(200 + seed)
    prompt = [(seed * 7 + i) % 64 for i in range(3 + seed)]
    run = tree_decode(target, draft, prompt, DecodeSettings(k_policy="best", max_new_tokens=20, seed=seed), shape="spine",
                      doubt=doubt,
                      branch=branch, budget=24, max_depth=12)
    assert run.token_ids == hf_greedy(target, prompt, 20)


def sibling_paths(run) -> int:
    """Rounds whose accepted path went through a sibling (a node that is not its parent's first child)."""
    return sum(any(r.children[r.parents[i]][0] != i for i in r.path) for r in run.rounds)


@pytest.mark.parametrize("noise", [0.05, 0.1])
def test_spine_accepts_the_drafts_second_choice_and_saves_passes(noise):
    """The same tokens as the chain (doubt 0: no siblings), in fewer target passes, some of the rounds
    ending on a sibling; every node is a chain node or a leaf, and only chain nodes are fed to the draft."""
    target, draft = close_pair(noise)
    prompt = [5, 6, 7, 8]
    chain, spine = (tree_decode(target, draft, prompt, DecodeSettings(k_policy="fixed", max_new_tokens=60),
                                shape="spine", doubt=d, budget=64, max_depth=6) for d in (0.0, 1.0))
    assert spine.token_ids == chain.token_ids == hf_greedy(target, prompt, 60)
    assert sibling_paths(chain) == 0 and all(len(r.children.get(-1, [])) == 1 for r in chain.rounds)
    assert sibling_paths(spine) >= 2 and max(len(r.path) for r in spine.rounds) >= 2
    assert spine.target_passes < chain.target_passes
    for r in spine.rounds:
        chain_nodes = tree.spine(r)
        assert all(r.children.get(i) is None or i in chain_nodes for i in range(r.n_nodes))  # siblings are leaves
        assert len(r.draft_s) == len([i for i in chain_nodes if i in r.children]) + 1  # a step per fed chain node


def top_probs(run) -> list[tuple[float, int]]:
    """(the draft's top probability, how many children) at each expanded node of each round."""
    return [(r.q_top[par + 1].probs[0], len(kids)) for r in run.rounds for par, kids in r.children.items()]


def test_spine_branches_exactly_where_the_draft_is_unsure():
    target, draft = close_pair(0.05)
    kw = dict(shape="spine", budget=64, max_depth=32, branch=2)
    s = DecodeSettings(k_policy="best", max_new_tokens=40)
    tops = sorted(t for t, _ in top_probs(tree_decode(target, draft, [5, 6, 7, 8], s, doubt=0.0, **kw)))
    doubt = tops[len(tops) // 2]  # the tiny draft is never sure in absolute terms: half its nodes are below
    nodes = top_probs(tree_decode(target, draft, [5, 6, 7, 8], s, doubt=doubt, **kw))
    assert all((n == 2) == (t < doubt) for t, n in nodes), nodes
    assert any(n == 2 for _, n in nodes) and any(n == 1 for _, n in nodes)


def test_spine_k_policy_learns_from_the_chain_nodes():
    """The chooser sees the judged chain nodes (not the siblings) and the verify width of every node."""
    target, draft = close_pair(0.1)
    policy = tree.spine_policy(draft, target, greedy=True)
    t, d = CachedLM(target), CachedLM(draft)
    ids = [5, 6, 7, 8]
    rounds = []
    for index in range(6):
        judged_before = policy.judged
        rnd, _ = tree_step(t, d, ids, Sampler.create(0.0, 0, 1.0, 0), 128, set(), 100, index, budget=32, branch=2,
                           max_depth=16, policy=policy, doubt=1.0)
        tree.observe_spine(policy, rnd)
        judged = [i for i in tree.spine(rnd) if rnd.verdict[i] != "untried"]
        assert policy.judged == judged_before + len(judged)
        rounds.append(rnd)
    widths = {r.n_nodes + 1 for r in rounds[1:]}
    assert set(policy.verify_by_n) <= widths and policy.verify_by_n


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_the_mask_works_with_each_attention_implementation(attn):
    """eager attention adds the mask to the scores, sdpa takes it as is: the additive mask suits both."""
    target, draft = close_pair(0.05)
    for m in (target, draft):
        m.set_attn_implementation(attn)
    prompt = [5, 6, 7]
    run = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=25))
    assert run.token_ids == hf_greedy(target, prompt, 25) and run.tokens_per_pass > 1.5


def test_tree_beats_chain_of_same_first_branch_on_a_noisy_draft():
    """Alternatives help: with a draft that is often second-best, branch 3 accepts more per pass than branch 1."""
    target, draft = close_pair(0.1)
    prompt = [5, 6, 7, 8]
    chain = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=60), budget=6, branch=1, max_depth=6)
    wide = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=60), budget=24, branch=3, max_depth=6)
    assert chain.token_ids == wide.token_ids
    assert wide.tokens_per_pass > chain.tokens_per_pass


def test_eos_stops_and_is_never_passed():
    target, draft = close_pair()
    prompt = [4, 4, 2]
    free = hf_greedy(target, prompt, 30)
    eos = free[9]
    run = tree_decode(target, draft, prompt, DecodeSettings(max_new_tokens=30), eos_token_id=eos)
    assert run.token_ids == free[: free.index(eos) + 1] == hf_greedy(target, prompt, 30, eos=eos)
    assert run.stop_reason == "eos"


def test_one_target_pass_per_round_and_one_draft_pass_per_depth(monkeypatch):
    target, draft = close_pair()
    calls = {"t": [], "d": []}
    for name, m in (("t", target), ("d", draft)):
        orig = m.forward
        monkeypatch.setattr(m, "forward", lambda *a, _o=orig, _c=calls[name], **kw: _c.append(1) or _o(*a, **kw))
    run = tree_decode(target, draft, [1, 2, 3], DecodeSettings(max_new_tokens=25), budget=16, branch=2, max_depth=5)
    assert len(calls["t"]) == run.target_passes == len(run.rounds)
    assert len(calls["d"]) == run.draft_passes == sum(len(r.draft_s) for r in run.rounds)
    assert all(len(r.draft_s) <= 5 for r in run.rounds)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_max_new_tokens_is_exact(n):
    target, draft = close_pair(0.0)
    run = tree_decode(target, draft, [1, 2], DecodeSettings(max_new_tokens=n))
    assert len(run.token_ids) == n and sum(len(r.emitted) for r in run.rounds) == n


# --------------------------------------------------------------------------
# KV caches keep only the accepted path


def cache_tensors(lm: CachedLM) -> list[torch.Tensor]:
    return [t for layer in lm.cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("shape", ["tree", "spine"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_after_a_round_equal_feeding_the_accepted_path_alone(temperature, shape):
    t_model, d_model = close_pair(0.05)
    target, draft = CachedLM(t_model), CachedLM(d_model)
    ids = [5, 6, 7, 8]
    sampler = Sampler.create(temperature, 0, 1.0, seed=3)
    spine = dict(policy=FixedK(5), doubt=1.0) if shape == "spine" else {}  # 5 deep, 2 siblings at each node
    skipped = 0
    for index in range(12):
        rnd, _ = tree_step(target, draft, ids, sampler, 128, set(), 100, index, budget=16, branch=3, max_depth=5,
                           **spine)
        # a path that skips earlier siblings: its entries are not a prefix of the tree's
        skipped += rnd.path != list(range(len(rnd.path)))
        assert target.n == len(ids) - 1 and draft.n <= len(ids) - 1
        for lm, model in ((target, t_model), (draft, d_model)):
            fresh = CachedLM(model)
            fresh.feed(ids[: lm.n])
            for a, b in zip(cache_tensors(lm), cache_tensors(fresh), strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert skipped >= 3


# --------------------------------------------------------------------------
# sampling preserves the target's distribution


VOCAB = 6
PROMPT = [1, 3]
N_RUNS = 1000  # the broken variants below miss by a chi-square of ~500 against a bound of ~31


@pytest.fixture(scope="module")
def small_vocab_pair():
    # the draft differs from the target a lot (different weights, flatter init)
    return tiny_lm(11, vocab=VOCAB, init=1.0), tiny_lm(12, vocab=VOCAB, init=0.3)


def sampled_counts(target, draft, temperature, top_k=0, top_p=1.0, shape="tree"):
    counts = collections.Counter()
    # the spine with doubt 1.0: siblings at every node, so each token can come from a sibling
    spine = dict(shape="spine", doubt=1.0) if shape == "spine" else {}
    for seed in range(N_RUNS):
        run = tree_decode(target, draft, PROMPT,
                          DecodeSettings(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=2,
                                         seed=seed), budget=8, branch=3, **spine)
        counts[tuple(run.token_ids)] += 1
    return counts


def exact(target, temperature, top_k=0, top_p=1.0):
    from test_engine import PROMPT as P, VOCAB as V, exact_two_token_distribution

    assert (P, V) == (PROMPT, VOCAB)
    return exact_two_token_distribution(target, temperature, top_k, top_p)


@pytest.mark.parametrize("shape", ["tree", "spine"])
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.8, 4, 0.9)])
def test_sampling_matches_target_distribution(small_vocab_pair, temperature, top_k, top_p, shape):
    target, draft = small_vocab_pair
    want = exact(target, temperature, top_k, top_p)
    counts = sampled_counts(target, draft, temperature, top_k, top_p, shape)
    assert passes(counts, want, N_RUNS), total_variation(counts, want, N_RUNS)


N_DEEP = 400  # a node judged against another node's p misses by a TV of ~0.5: far outside the bound at this n


@pytest.fixture(scope="module")
def close_small_vocab_pair():
    """A target and a draft close to it (its weights plus a little noise): drafts are accepted often, so the
    walk reaches depth 2 and 3 in most rounds, where a node is judged against p after its own parent."""
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(torch.randn(w.shape, generator=g, dtype=w.dtype) * 0.02 * w.std())
    return target, draft


@pytest.mark.parametrize("shape", ["tree", "spine"])
def test_sampling_three_tokens_deep_matches_target_distribution(close_small_vocab_pair, shape):
    """Three tokens from trees three deep (the spine: a fixed chain of 3, siblings at every node): the
    first round judges nodes at depth 2 and 3, whose p is the target's after their whole path."""
    from test_engine import PROMPT as P, VOCAB as V, exact_distribution

    assert (P, V) == (PROMPT, VOCAB)
    target, draft = close_small_vocab_pair
    want = exact_distribution(target, 1.0, n=3)
    spine = dict(shape="spine", doubt=1.0) if shape == "spine" else {}  # DecodeSettings' k policy: fixed
    counts, deep = collections.Counter(), 0
    for seed in range(N_DEEP):
        run = tree_decode(target, draft, PROMPT, DecodeSettings(temperature=1.0, max_new_tokens=3, seed=seed),
                          budget=12, branch=2, max_depth=3, **spine)
        counts[tuple(run.token_ids)] += 1
        deep += any(d >= 2 and v != "untried" for r in run.rounds for d, v in zip(r.depths, r.verdict))
    assert deep > N_DEEP / 2, deep  # most runs judged a node below depth 1
    assert passes(counts, want, N_DEEP), total_variation(counts, want, N_DEEP)


def test_spine_siblings_taken_as_the_next_most_likely_fail_the_distribution_check(small_vocab_pair, monkeypatch):
    """Siblings must be drawn from q without replacement: the draft's next most likely tokens, as in a
    greedy round, are not what the rejection rule was told they are."""
    target, draft = small_vocab_pair
    want = exact(target, 1.0)
    real = tree.pick_children

    def first_drawn_then_most_likely(logits, q, m, sampler):
        first = real(logits, q, 1, sampler)
        rest = [x for x in torch.argsort(q, descending=True).tolist() if x not in first]
        return first + rest[: m - 1]

    monkeypatch.setattr(tree, "pick_children", first_drawn_then_most_likely)
    counts = sampled_counts(target, draft, 1.0, shape="spine")
    assert not passes(counts, want, N_RUNS)


def test_siblings_judged_at_one_node_each_draw_their_own_u():
    """Each child tried at a node is tested with a fresh uniform, the generator's next draw. One u for all
    siblings biases the walk by a TV of ~0.01 (p = [.5, .3, .2], q = [.2, .29, .51]), too little for the
    distribution checks above to see, so the mechanism is checked here."""
    from specviz.decoding.sampling import uniform

    p = torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5])  # p = 0 at every child: each is rejected, whatever its u
    q = torch.tensor([0.4, 0.3, 0.2, 0.05, 0.05])
    chosen, _, us, _ = tree.recursive_rejection(p, q, [0, 1, 2], Sampler.create(1.0, 0, 1.0, seed=4))
    g = torch.Generator().manual_seed(4)
    assert chosen is None and us == [uniform(g) for _ in range(3)]
    assert len(set(us)) == 3


def test_not_updating_p_after_a_rejection_fails_the_distribution_check(small_vocab_pair, monkeypatch):
    target, draft = small_vocab_pair
    want = exact(target, 1.0)
    monkeypatch.setattr(tree, "residual", lambda p, q, x: p)
    counts = sampled_counts(target, draft, 1.0)
    assert not passes(counts, want, N_RUNS)


def test_not_removing_a_rejected_child_from_q_fails_the_distribution_check(small_vocab_pair, monkeypatch):
    """The children are drawn without replacement, so q must lose each rejected child."""
    target, draft = small_vocab_pair
    want = exact(target, 1.0)
    monkeypatch.setattr(tree, "without", lambda q, x: q)
    counts = sampled_counts(target, draft, 1.0)
    assert not passes(counts, want, N_RUNS)


# --------------------------------------------------------------------------
# records, determinism, bad input


def test_records_are_consistent_and_round_trip_through_json():
    target, draft = close_pair(0.1)
    run = tree_decode(target, draft, [1, 2, 3], DecodeSettings(temperature=0.9, max_new_tokens=30, seed=5), budget=12,
                      branch=3)
    assert [t for r in run.rounds for t in r.emitted] == run.token_ids
    assert run.tokens_per_pass == pytest.approx(len(run.token_ids) / len(run.rounds))
    siblings_judged = 0
    for r in run.rounds:
        for node in {ROOT, *r.path}:  # the nodes the walk judged children at: each child had a u of its own
            us = [u for u, par in zip(r.u, r.parents) if par == node and u is not None]
            assert len(set(us)) == len(us), us
            siblings_judged += len(us) > 1
    assert siblings_judged  # the run rejected a child and tried its sibling
    for r in run.rounds:
        n = r.n_nodes
        assert len(r.parents) == len(r.q) == len(r.p) == len(r.verdict) == len(r.u) == n
        assert len(r.p_top) == len(r.q_top) == len(r.target_argmax) == n + 1
        assert [i for i, v in enumerate(r.verdict) if v == "accepted"] == r.path
        assert r.emitted[: r.n_accepted] == [r.tokens[i] for i in r.path][: len(r.emitted)]
        for i, (par, d) in enumerate(zip(r.parents, r.depths)):
            assert d == (1 if par == -1 else r.depths[par] + 1)
            assert r.cum_q[i] == pytest.approx(r.q[i] * (1 if par == -1 else r.cum_q[par]))
        for u, ratio, v in zip(r.u, r.ratio, r.verdict):
            assert (u is None) == (v == "untried")
            if u is not None:
                assert (u < ratio) == (v == "accepted")  # the recorded decision is the rule on recorded numbers
        if r.extra_kind == "correction":
            assert r.residual_top is not None
    back = TreeRun.from_json(run.to_json())
    assert back == run and json.loads(run.to_json())["format"] == "specviz.treerun/1"


@pytest.mark.cores
def test_tree_rounds_timed_while_the_cpu_was_taken_are_flagged_and_survive_json():
    """As chain rounds are: a round whose passes lose the CPU (a sleep: wall time passes, no CPU time is used,
    as when another program takes the cores mid-pass) says so, and the flag goes through a run file."""
    from busy import passes_losing_the_cpu

    from specviz.core.errors import SpecvizError

    target, draft = close_pair(0.1)
    quiet = tree_decode(target, draft, [1, 2, 3], DecodeSettings(max_new_tokens=8), budget=6)
    with passes_losing_the_cpu(target):  # the verify pass (masked)
        busy = tree_decode(target, draft, [1, 2, 3], DecodeSettings(max_new_tokens=8), budget=6)
    assert busy.token_ids == quiet.token_ids
    assert busy.outside_load_rounds == len(busy.rounds) > 0
    assert busy.outside_load_s == pytest.approx(busy.rounds_s)
    assert TreeRun.from_json(busy.to_json()).outside_load_rounds == len(busy.rounds)
    d = quiet.to_dict()
    for r in d["rounds"]:
        del r["outside_load"]  # a file saved before the check
    assert TreeRun.from_dict(d).outside_load_rounds == 0
    d["rounds"][0]["outside_load"] = "yes"
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.outside_load"):
        TreeRun.from_dict(d)


@pytest.mark.cores
def test_a_tree_runs_time_leaves_out_the_waits_for_a_core():
    """As a chain run's: rounds record the time their passes' threads waited for a core beside programs busy
    on every core, and neither the rounds' times nor the run's decoding time count it."""
    import os
    import time

    from specviz.core.errors import SpecvizError

    team_or_skip()
    target, draft = close_pair(0.1)
    with busy_programs(os.cpu_count() or 2):
        t0 = time.perf_counter()
        run = tree_decode(target, draft, [1, 2, 3], DecodeSettings(max_new_tokens=16), budget=6)
        clock = time.perf_counter() - t0
    assert run.stalled_s >= 0.05 * clock, (run.stalled_s, clock)
    assert run.rounds_s + run.stalled_s <= clock + 1e-3 and run.decode_s + run.stalled_s <= clock + 1e-3
    back = TreeRun.from_json(run.to_json())
    assert back.stalled_s == run.stalled_s
    d = run.to_dict()
    d["rounds"][0]["stalled_s"] = -0.5
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.stalled_s"):
        TreeRun.from_dict(d)
    del d["rounds"][0]["stalled_s"]  # a file saved before it
    assert TreeRun.from_dict(d).rounds[0].stalled_s == 0.0


def test_same_seed_same_run():
    target, draft = close_pair(0.1)
    a, b, c = (tree_decode(target, draft, [1, 2, 3],
                           DecodeSettings(temperature=1.0, max_new_tokens=20, seed=s)) for s in (4, 4, 5))
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


@pytest.mark.parametrize("field,value,match", [
    ("verdict", lambda r: ["maybe"] + r["verdict"][1:], r"rounds\[0\]\.verdict\[0\]"),
    ("parents", lambda r: [0] + r["parents"][1:], r"rounds\[0\]\.parents\[0\]: a node's parent"),  # a cycle
    ("depths", lambda r: [2] + r["depths"][1:], r"rounds\[0\]\.depths\[0\]"),
    ("path", lambda r: [r["path"][1]] + r["path"][1:], r"rounds\[0\]\.path\[0\]"),
    ("p_top", lambda r: r["p_top"][:-1], r"rounds\[0\]\.p_top"),
    ("tokens", lambda r: [], r"rounds\[0\]\.parents"),
])
def test_a_malformed_tree_file_names_the_field(field, value, match):
    from specviz.core.errors import SpecvizError

    target, draft = close_pair(0.0)
    d = tree_decode(target, draft, [1, 2], DecodeSettings(max_new_tokens=8)).to_dict()
    assert len(d["rounds"][0]["path"]) >= 2
    d["rounds"][0][field] = value(d["rounds"][0])
    with pytest.raises(SpecvizError, match=match):
        TreeRun.from_dict(d)


@pytest.mark.parametrize("kw,match", [(dict(budget=0), "budget"), (dict(branch=9), "branch"),
                                      (dict(max_depth=0), "max_depth"), (dict(budget=2.5), "budget"),
                                      (dict(temperature=-1.0), "temperature"), (dict(input_ids=[]), "empty"),
                                      (dict(shape="star"), "shape"), (dict(shape="spine", doubt=1.5), "doubt"),
                                      (dict(shape="spine", doubt=float("nan")), "doubt")])
def test_bad_input_is_a_clear_error(kw, match):
    target, draft = close_pair()
    args = dict(input_ids=[1, 2, 3], max_new_tokens=5)
    args.update(kw)
    ids = args.pop("input_ids")
    settings, rest = split_settings(args)
    with pytest.raises(InvalidSetting, match=match):
        tree_decode(target, draft, ids, settings, **rest)


# --------------------------------------------------------------------------
# the real pair


@pytest.mark.real
def test_real_pair_greedy_tree_equals_the_target_alone(default_pair_fp32):
    from specviz.core.prompts import encode

    pair = default_pair_fp32
    if pair.dtype != torch.float32:
        pytest.skip("greedy identity is checked in float32")
    ids = encode(pair.tokenizer, "Write a Python function `fib(n)` that returns the n-th Fibonacci number.", chat=True)
    common = dict(eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    s = DecodeSettings(k_policy="best", max_new_tokens=16)
    alone = autoregressive_decode(pair.target, ids, s, **common)
    for shape in (dict(budget=16, branch=2), dict(tree.SPINE, shape="spine")):
        run = tree_decode(pair.target, pair.draft, ids, s, **shape, **common)
        assert run.token_ids == alone.token_ids, (shape, pair.tokenizer.decode(run.token_ids),
                                                  pair.tokenizer.decode(alone.token_ids))
        assert run.n_accepted > 0 and run.target_passes < len(run.token_ids)  # the tree did accept drafts
