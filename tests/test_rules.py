"""The acceptance-rule lab (specviz/teaching/rules.py): which rules keep the target's distribution.

The distribution test is tests/stats.py's: Pearson chi-square of the first
emitted token over n = 20,000 seeded trials against the exact p, at the
p = 0.001 level (bins expecting fewer than 5 pooled). At that n, a rule whose
output is exactly p fails it one time in a thousand, while an output 0.05 away
in total variation puts the statistic far above the critical value (around 90
for the ~60 bins here): the test separates the lossless rules from the lossy ones.
"""

from __future__ import annotations

import math

import pytest
import torch

from specviz.teaching import charts, rules
from specviz.decoding import sampling
from specviz.modeling import tiny
from specviz.core.errors import InvalidSetting
from stats import passes

N = 20_000


def _tiny_pair_distributions(noise: float):
    """p, q at the first position of the app's tiny pair (target seed 0, draft = target + noise)."""
    tok = tiny.char_tokenizer()
    ids = tok("The capital of France is")["input_ids"]
    return rules.first_distributions(tiny.tiny_model(0), tiny.tiny_model(0, noise=noise), ids)


@pytest.fixture(scope="module", params=[0.05, 0.3], ids=["close-draft", "far-draft"])
def lab(request):
    p, q = _tiny_pair_distributions(request.param)
    return rules.compare_rules(p, q, n=N, seed=0, top=p.numel()), p, q


def _binomial_ok(observed: float, expected: float, n: int, z: float = 4.0) -> bool:
    return abs(observed - expected) <= z * math.sqrt(max(expected * (1 - expected), 1e-12) / n) + 1e-12


def test_lossless_rules_keep_p_and_accept_their_closed_forms(lab):
    lab, p, q = lab
    by = {r.kind: r for r in lab.results if r.lossless}
    assert set(by) == {"rejection", "exact-match"}
    for r in by.values():
        assert r.tv_exact < 1e-12, r.label  # each rule's output worked out from its own steps, then compared with p
        assert passes(r.counts, lab.p, N), r.label  # sampled: the chi-square test against p
        assert r.tv_sampled < 3 * lab.noise_tv, r.label
    assert by["rejection"].acceptance_exact == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-12)
    assert by["exact-match"].acceptance_exact == pytest.approx(float((p * q).sum()), abs=1e-12)
    for r in by.values():
        assert _binomial_ok(r.acceptance_sampled, r.acceptance_exact, N), r.label
    # the reason llama.cpp and mlx-lm moved to rejection sampling
    assert by["rejection"].acceptance_exact > by["exact-match"].acceptance_exact


def test_lossy_rules_fail_the_distribution_test(lab):
    lab, p, q = lab
    lossy = [r for r in lab.results if not r.lossless]
    assert {r.kind for r in lossy} == {"typical", "threshold"}
    visible = [r for r in lossy if r.tv_exact >= 0.05]  # far enough from p for N trials to see it
    assert len(visible) >= 3
    for r in visible:
        assert not passes(r.counts, lab.p, N), r.label
        assert abs(r.tv_sampled - r.tv_exact) < 3 * lab.noise_tv, r.label  # sampling agrees with the closed form
        assert _binomial_ok(r.acceptance_sampled, r.acceptance_exact, N), r.label


@pytest.mark.parametrize("broken", [
    lambda p, q, d: p,  # forgot to subtract q: a refusal resamples from p
    lambda p, q, d: (p - q).abs() / (p - q).abs().sum(),  # |p − q| instead of max(0, p − q)
], ids=["residual-is-p", "residual-without-max"])
def test_a_broken_rejection_rule_fails_the_distribution_test(broken):
    p, q = _tiny_pair_distributions(0.3)
    lab = rules.compare_rules(p, q, [rules.Rule("rejection")], n=N, seed=0, top=p.numel(), residual_fn=broken)
    (r,) = lab.results
    assert r.tv_exact > 0.05
    assert not passes(r.counts, lab.p, N)


def test_closed_forms_on_random_distributions_with_zeros():
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        p = torch.rand(30, generator=g, dtype=torch.float64) ** 4
        q = torch.rand(30, generator=g, dtype=torch.float64) ** 4
        p[:5], q[3:9] = 0.0, 0.0  # tokens only one side can produce
        p, q = p / p.sum(), q / q.sum()
        acc, out = rules.exact_outcome(rules.Rule("rejection"), p, q)
        assert rules.tv(out, p) < 1e-12 and acc == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-12)
        acc, out = rules.exact_outcome(rules.Rule("exact-match"), p, q)
        assert rules.tv(out, p) < 1e-12 and acc == pytest.approx(float((p * q).sum()), abs=1e-12)
        # and the closed form is the rule itself, enumerated: draft d ~ q, target t ~ p, emit d if d == t else t
        joint = q[:, None] * p[None, :]  # (V, V): P(d, t)
        assert torch.allclose(out, joint.sum(0), rtol=0, atol=1e-12)  # every trial emits t
        assert acc == pytest.approx(float(joint.diagonal().sum()), abs=1e-12)
        # a threshold of 0 keeps every draft: the output is the draft's q
        acc, out = rules.exact_outcome(rules.Rule("threshold", tau=0.0), p, q)
        assert acc == pytest.approx(1.0) and rules.tv(out, q) < 1e-12
        # typical with a threshold above every p refuses every draft: the output is the target's own sample
        acc, out = rules.exact_outcome(rules.Rule("typical", epsilon=1.0, delta=1.0), p, q)
        assert acc == 0 or float(p.max()) > math.exp(-rules.entropy(p))


def test_typical_threshold_is_min_of_epsilon_and_entropy_term():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    q = torch.full((4,), 0.25, dtype=torch.float64)
    h = rules.entropy(p)
    thr = min(0.2, 0.9 * math.exp(-h))  # ε = 0.2 binds here
    a = rules.keep_probability(rules.Rule("typical", epsilon=0.2, delta=0.9), p, q)
    assert a.tolist() == [float(x > thr) for x in p.tolist()] == [1.0, 1.0, 0.0, 0.0]
    thr = 0.3 * math.exp(-h)  # δ·e^−H binds (≈ 0.10)
    a = rules.keep_probability(rules.Rule("typical", epsilon=0.9, delta=0.3), p, q)
    assert a.tolist() == [float(x > thr) for x in p.tolist()] == [1.0, 1.0, 1.0, 0.0]


def test_sampling_uses_the_engine_rule_and_one_seed():
    p, q = _tiny_pair_distributions(0.3)
    a = rules.compare_rules(p, q, n=2000, seed=7)
    b = rules.compare_rules(p, q, n=2000, seed=7)
    c = rules.compare_rules(p, q, n=2000, seed=8)
    assert a == b and a != c
    # the rejection rule's corrections come from sampling.residual: every correction has residual mass
    r = sampling.residual(p, q, 0)
    counts, _ = rules.sample_outcome(rules.Rule("rejection"), p, q, 2000, 7)
    assert all(p[i] > 0 for i in counts) and any(r[i] > 0 for i in counts)


def test_bad_settings_are_clear_errors():
    with pytest.raises(InvalidSetting, match="acceptance rule 'medusa'"):
        rules.Rule("medusa")
    with pytest.raises(InvalidSetting, match="tau must be in"):
        rules.Rule("threshold", tau=2.0)
    p = torch.full((4,), 0.25, dtype=torch.float64)
    with pytest.raises(InvalidSetting, match="trials"):
        rules.compare_rules(p, p, n=0)
    with pytest.raises(InvalidSetting, match="same vocabulary"):
        rules.compare_rules(p, p[:3], n=10)
    with pytest.raises(InvalidSetting, match="temperature above 0"):
        rules.first_distributions(tiny.tiny_model(0), tiny.tiny_model(0), [3, 4], temperature=0)


def test_fig_rules_one_point_per_rule_and_setting(lab):
    lab, _, _ = lab
    fig = charts.fig_rules(lab).to_dict()
    exact = [t for t in fig["data"] if t.get("showlegend") is not False]
    assert [t["name"] for t in exact] == ["rejection (lossless)", "exact-match (lossless)",
                                         "typical (lossy)", "threshold (lossy)"]
    assert sum(len(t["x"]) for t in exact) == len(rules.DEFAULT_RULES)
    xs = {r.label: r.tv_exact for r in lab.results}
    assert list(exact[2]["x"]) == [xs[r.label] for r in rules.DEFAULT_RULES if r.kind == "typical"]
    assert fig["layout"]["meta"]["n"] == N
    # every point inside the plot with room for its label; labels that would overlap are left to the hover
    shown = [(x, y, t) for tr in exact for x, y, t in zip(tr["x"], tr["y"], tr["text"])]
    x_max = fig["layout"]["xaxis"]["range"][1]
    assert max(x for x, _, _ in shown) * 1.25 <= x_max
    labelled = [(x / x_max, y / 1.05) for x, y, t in shown if t]
    assert all(abs(a[0] - b[0]) >= 0.14 or abs(a[1] - b[1]) >= 0.05
               for i, a in enumerate(labelled) for b in labelled[i + 1:])


def test_over_a_long_tail_the_noise_band_holds_the_lossless_rules():
    """A real model's p puts a little mass on tens of thousands of tokens: n samples then draw many rare
    tokens once each, and TV from noise alone is large. The band must count every token, not the top few."""
    from specviz.core.theory import expected_tv_noise

    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(50_000, generator=g, dtype=torch.float64) * 1.5, 0)
    p = 0.85 * torch.nn.functional.one_hot(torch.tensor(7), 50_000).double() + 0.15 * p  # one likely token, a tail
    q = torch.softmax(torch.log(p) + 0.3 * torch.randn(50_000, generator=g, dtype=torch.float64), 0)
    lab = rules.compare_rules(p, q, rules.DEFAULT_RULES[:2], n=5000, seed=0, top=50)
    assert lab.noise_tv == pytest.approx(expected_tv_noise(p, 5000)) and lab.noise_tv95 > lab.noise_tv
    for r in lab.results:  # rejection and exact match: exact, so only noise
        assert r.tv_sampled < lab.noise_tv95, r.label
    # the top 50 tokens and one bucket for the rest (the band before): far too narrow for the same noise
    top50 = {int(i): float(p[i]) for i in torch.topk(p, 50).indices}
    assert all(r.tv_sampled > 2 * expected_tv_noise(top50, 5000) for r in lab.results)
