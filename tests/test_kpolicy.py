"""The best-k chooser on synthetic Round sequences, and wired into the engine."""

from __future__ import annotations

import random

import pytest

from specviz import speculative_decode, theory
from specviz.engine import make_k_policy
from specviz.errors import InvalidSetting
from specviz.kpolicy import BestK
from specviz.records import Round, TopK
from tiny import hf_greedy, tiny_qwen


def make_round(k: int, n_accepted: int, *, draft_step: float = 0.1, verify: float = 1.0, index: int = 0) -> Round:
    """A Round with k drafts of which the first n_accepted were kept, and the given timings."""
    rejected = n_accepted < k
    accepted = [True] * n_accepted + ([False] if rejected else [])
    z = TopK(ids=[0], probs=[1.0])
    return Round(
        index=index, k=k, drafted=[1] * k, q_drafted=[1.0] * k, p_drafted=[1.0] * k, u=[], ratio=[1.0] * len(accepted),
        accepted=accepted, n_accepted=n_accepted, emitted=[1] * (n_accepted + 1), extra_id=1,
        extra_kind="correction" if rejected else "bonus", p_top=[z] * (k + 1), q_top=[z] * k,
        target_argmax=[1] * (k + 1), overlap=[1.0] * k, entropy=[0.0] * (k + 1), residual_top=None, greedy=True,
        draft_s=draft_step * k, verify_s=verify, round_s=draft_step * k + verify,
    )


def verify_time(n: int) -> float:
    """A target pass over n tokens: flat, then slowly rising (memory-bound, then compute)."""
    return 1.0 + 0.02 * max(0, n - 4)


def drive(policy: BestK, alpha: float, rounds: int = 60, seed: int = 0, draft_step: float = 0.1) -> list[int]:
    """Run the policy against a Bernoulli(alpha) acceptance stream; return the k chosen each round."""
    rng = random.Random(seed)
    ks = []
    for i in range(rounds):
        k = policy.next_k()
        ks.append(k)
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        policy.observe(make_round(k, n, draft_step=draft_step, verify=verify_time(k + 1), index=i))
    return ks


def test_first_round_uses_the_starting_k():
    assert BestK(5).next_k() == 5
    assert BestK(40, k_max=16).next_k() == 16


def test_high_alpha_drives_k_up():
    ks = drive(BestK(2), alpha=0.95)
    assert ks[0] == 2
    assert min(ks[-20:]) >= 8


def test_low_alpha_drives_k_down():
    ks = drive(BestK(6), alpha=0.2)
    assert ks[0] == 6
    assert max(ks[-20:]) <= 2


def test_costly_drafts_mean_smaller_k():
    cheap = drive(BestK(4), alpha=0.8, draft_step=0.02)
    dear = drive(BestK(4), alpha=0.8, draft_step=0.5)
    assert sum(cheap[-20:]) > sum(dear[-20:])


def test_chosen_k_is_theory_best_k_for_the_estimates():
    p = BestK(3, k_max=12)
    rng = random.Random(1)
    for i in range(40):
        k = p.next_k()
        if i > 0:  # from the second round on, the choice is best_k of the live estimates
            a, c, vc = p.alpha, p.c, p.verify_cost
            want, s = theory.best_k(a, c, vc, k_max=12, k_min=1)
            assert k == want
            assert p.history[-1] == {"alpha": a, "c": c, "k": k, "predicted": s}
        n = sum(1 for _ in range(k) if rng.random() < 0.7)  # any acceptance pattern will do
        p.observe(make_round(k, min(n, k), draft_step=0.05 + 0.01 * (i % 3), verify=verify_time(k + 1)))


def test_estimates_are_the_documented_ones():
    p = BestK(4, prior=(2.0, 2.0))
    assert p.alpha == pytest.approx(0.5) and p.c is None and p.verify_cost is None
    p.observe(make_round(4, 4, draft_step=0.1, verify=1.0))  # 4 of 4 judged accepted
    p.observe(make_round(4, 1, draft_step=0.3, verify=3.0))  # 1 of 2 judged accepted
    assert p.alpha == pytest.approx((2 + 5) / (4 + 6))
    assert p.t1 == pytest.approx(2.0)  # median verify time of the only size seen (5 tokens)
    assert p.c == pytest.approx(0.2 / 2.0)  # median draft time per token / t1
    assert p.verify_cost == {5: pytest.approx(1.0)}
    p.observe(make_round(2, 2, draft_step=0.2, verify=1.0))  # a 3-token pass, cheaper
    assert p.t1 == pytest.approx(1.0)  # the smallest size seen stands in for one token
    assert p.verify_cost == {3: pytest.approx(1.0), 5: pytest.approx(2.0)}


def test_a_measured_profile_sets_the_shape_and_live_times_the_scale():
    prof = {1: 0.4, 2: 0.8, 4: 0.8, 8: 0.88}  # seconds: the fp32 2-token cliff
    p = BestK(4, verify_cost=prof)
    assert p.verify_cost == {1: 1.0, 2: 2.0, 4: 2.0, 8: pytest.approx(2.2)}
    p.observe(make_round(3, 3, draft_step=0.1, verify=1.6))  # 4 tokens: ratio 2 -> t1 = 0.8
    assert p.t1 == pytest.approx(0.8)
    assert p.c == pytest.approx(0.1 / 0.8)
    assert p.next_k() == theory.best_k(p.alpha, p.c, p.verify_cost, k_max=16)[0]


def test_forgetting_follows_a_change_of_domain():
    keep, forget = BestK(4), BestK(4, decay=0.8)
    for p in (keep, forget):
        for _ in range(30):
            p.observe(make_round(4, 4))
        for _ in range(8):
            p.observe(make_round(4, 0))  # each judges one draft and rejects it
    assert forget.alpha < 0.6 and keep.alpha > 0.9


def test_prompt_lookup_rounds_without_drafts_are_fine():
    p = BestK(4)
    p.observe(make_round(0, 0, draft_step=0.0, verify=1.0))  # nothing found: a 1-token pass
    p.observe(make_round(3, 3, draft_step=0.0, verify=1.1))
    assert p.c == 0.0 and p.t1 == pytest.approx(1.0)
    assert p.verify_cost == {1: 1.0, 4: pytest.approx(1.1)}
    assert 1 <= p.next_k() <= 16


@pytest.mark.parametrize("kw", [dict(k_min=0), dict(k_min=5, k_max=4), dict(prior=(0, 1)), dict(decay=0),
                                dict(verify_cost={})])
def test_bad_settings_are_clear_errors(kw):
    with pytest.raises(InvalidSetting):
        BestK(4, **kw)


def test_engine_best_policy_is_exact_and_recorded():
    target, draft = tiny_qwen(100), tiny_qwen(200)
    prompt = [3, 1, 4, 1, 5]
    run = speculative_decode(target, draft, prompt, k=3, max_new_tokens=30, k_policy="best")
    assert run.token_ids == hf_greedy(target, prompt, 30)
    assert run.settings["k_policy"] == "best"
    assert run.ks[0] == 3
    # a self-draft accepts everything (but costs as much as the target, so k need not grow)
    run = speculative_decode(target, target, prompt, k=2, max_new_tokens=40, k_policy="best")
    assert run.token_ids == hf_greedy(target, prompt, 40)
    assert run.alpha == 1.0 and all(1 <= k <= 16 for k in run.ks)


def test_engine_takes_a_policy_object_and_sampling_still_runs():
    target, draft = tiny_qwen(100), tiny_qwen(200)
    pol = BestK(2, k_max=6)
    assert make_k_policy(2, pol) is pol
    run = speculative_decode(target, draft, [1, 2, 3], k=2, temperature=1.0, max_new_tokens=20, k_policy=pol, seed=3)
    assert len(run.token_ids) == 20 and run.settings["k_policy"] == "best"
    assert all(1 <= k <= 6 for k in run.ks[:-1])
    with pytest.raises(InvalidSetting, match="k_policy"):
        make_k_policy(4, "greedy-ish")
