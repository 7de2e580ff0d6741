"""The sampling primitives and the acceptance rule, checked against exact math.

The rule test draws d ~ q, keeps it with probability min(1, p/q) and otherwise
draws from norm(max(0, p - q)); the output must be distributed as p. Two
deliberately broken rules (accept everything; resample from p) run through the
same harness and must fail it, which shows the test has the power to notice.
"""

import collections

import pytest
import torch

from specviz.decoding.sampling import Sampler, accept_token, logits_to_probs, residual, sample, uniform
from stats import passes, total_variation

V = 8
N = 20000


def _pq():
    torch.manual_seed(7)
    p = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64) * 0.7).sample()
    q = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64) * 0.7).sample()
    return p, q


def correct_rule(p, q, gen):
    d = sample(q, gen)
    if accept_token(uniform(gen), float(p[d]), float(q[d])):
        return d
    return sample(residual(p, q, d), gen)


def accept_everything(p, q, gen):  # broken: the output is q, not p
    return sample(q, gen)


def resample_from_p(p, q, gen):  # broken: the correction ignores what q already covered
    d = sample(q, gen)
    if accept_token(uniform(gen), float(p[d]), float(q[d])):
        return d
    return sample(p, gen)


def _run(rule, p, q, seed=0):
    gen = torch.Generator().manual_seed(seed)
    counts = collections.Counter(rule(p, q, gen) for _ in range(N))
    probs = {i: float(p[i]) for i in range(V)}
    return counts, probs


def test_rule_output_is_distributed_as_p():
    p, q = _pq()
    counts, probs = _run(correct_rule, p, q)
    assert passes(counts, probs, N), total_variation(counts, probs, N)
    assert total_variation(counts, probs, N) < 0.02


@pytest.mark.parametrize("broken", [accept_everything, resample_from_p])
def test_broken_rules_fail_the_same_check(broken):
    p, q = _pq()
    counts, probs = _run(broken, p, q)
    assert not passes(counts, probs, N)


def test_accept_probability_is_min_1_p_over_q():
    gen = torch.Generator().manual_seed(1)
    for p_d, q_d in [(0.2, 0.5), (0.5, 0.2), (0.0, 0.3), (0.3, 0.3)]:
        n = 20000
        acc = sum(accept_token(uniform(gen), p_d, q_d) for _ in range(n)) / n
        assert acc == pytest.approx(min(1.0, p_d / q_d), abs=0.015)


def test_residual_is_normalized_positive_part():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    r = residual(p, q, 1)
    assert r.tolist() == pytest.approx([1.0, 0.0, 0.0])
    # one-hot q (prompt lookup): p with the drafted token removed
    r1 = residual(p, None, 0)
    assert r1.tolist() == pytest.approx([0.0, 0.6, 0.4])


def test_logits_to_probs_temperature_topk_topp():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    p1 = logits_to_probs(logits, 1.0)
    assert p1.sum() == pytest.approx(1.0)
    assert torch.allclose(p1, torch.softmax(logits, -1))
    p_cold = logits_to_probs(logits, 0.5)
    assert p_cold[0] > p1[0]
    pk = logits_to_probs(logits, 1.0, top_k=2)
    assert pk[2] == 0 and pk[3] == 0 and pk.sum() == pytest.approx(1.0)
    # top_p: softmax is [0.644, 0.237, 0.087, 0.032]; 0.7 keeps the first two
    pp = logits_to_probs(logits, 1.0, top_p=0.7)
    assert (pp > 0).tolist() == [True, True, False, False]
    assert pp.sum() == pytest.approx(1.0)
    # top_p smaller than the top token's mass keeps exactly one token
    assert (logits_to_probs(logits, 1.0, top_p=0.1) > 0).sum() == 1


def test_sampler_greedy_is_argmax_and_seeded_sampling_repeats():
    logits = torch.tensor([0.1, 3.0, 0.2])
    g = Sampler.create(0.0, 0, 1.0, seed=0)
    assert g.greedy and g.pick(logits, g.probs(logits)) == 1
    a = Sampler.create(1.0, 0, 1.0, seed=5)
    b = Sampler.create(1.0, 0, 1.0, seed=5)
    flat = torch.zeros(50)
    pa = [a.pick(flat, a.probs(flat)) for _ in range(20)]
    pb = [b.pick(flat, b.probs(flat)) for _ in range(20)]
    assert pa == pb and len(set(pa)) > 1


def test_sample_is_distributed_as_the_probabilities():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.0, 0.1, 0.0, 0.35, 0.05, 0.5, 0.0])
    n = 30000
    counts = collections.Counter(sample(p, g) for _ in range(n))
    exact = {i: float(p[i]) for i in range(len(p))}
    assert passes(counts, exact, n), total_variation(counts, exact, n)
    assert set(counts) <= {1, 3, 4, 5}  # never a token with probability 0
    # unnormalised weights (a residual before normalising) give the same distribution
    counts = collections.Counter(sample(p * 3.7, g) for _ in range(n))
    assert passes(counts, exact, n)


def test_a_sampler_that_forgets_the_total_fails_the_same_check():
    def broken(p, g):  # u not scaled by the CDF's total: only right for normalised p
        cdf = p.double().cumsum(-1)
        return min(int(torch.searchsorted(cdf, torch.rand((), generator=g, dtype=torch.float64), right=True)),
                   len(p) - 1)

    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.0, 0.1, 0.0, 0.35, 0.05, 0.5, 0.0])
    n = 30000
    exact = {i: float(p[i]) for i in range(len(p))}
    assert passes(collections.Counter(broken(p, g) for _ in range(n)), exact, n)  # normalised: fine
    assert not passes(collections.Counter(broken(p * 3.7, g) for _ in range(n)), exact, n)


def test_sample_edges():
    g = torch.Generator().manual_seed(1)
    assert sample(torch.tensor([0.0, 0.0, 1.0, 0.0]), g) == 2
    assert sample(torch.tensor([1.0]), g) == 0
    assert all(sample(torch.tensor([0.0, 0.25, 0.75, 0.0], dtype=torch.float64), g) in (1, 2) for _ in range(200))


def test_the_sampler_the_settings_and_the_records_share_one_greedy():
    """settings.is_greedy is the definition: the Sampler, DecodeSettings and every recorded Round follow it."""
    from specviz import speculative_decode
    from specviz.core.settings import DecodeSettings, is_greedy
    from tiny import tiny_lm

    for t in (0, 0.0, -0.0, 1e-3, 0.7, 1.0):
        assert Sampler.create(t, 0, 1.0, 0).greedy == is_greedy(t) == DecodeSettings(temperature=t).greedy
    target, draft = tiny_lm(0), tiny_lm(1)
    for t in (0.0, 1e-3):
        run = speculative_decode(target, draft, [1, 2, 3], DecodeSettings(k=2, temperature=t, max_new_tokens=4))
        assert all(r.greedy == is_greedy(t) for r in run.rounds)
