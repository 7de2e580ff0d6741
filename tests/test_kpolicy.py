"""The best-k chooser on synthetic Round sequences, and wired into the engine."""

from __future__ import annotations

import dataclasses
import random

import pytest

from specviz import speculative_decode
from specviz.core import theory
from specviz.decoding.drafters import PromptLookupDrafter
from specviz.core.limits import K_MAX
from specviz.decoding.kpolicy import make_k_policy
from specviz.core.errors import InvalidSetting
from specviz.decoding.kpolicy import CALIB_EDGES, BestK
from specviz.data.records import Round, TopK
from tiny import hf_greedy, tiny_lm
from specviz.core.settings import DecodeSettings


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
    target, draft = tiny_lm(100), tiny_lm(200)
    prompt = [3, 1, 4, 1, 5]
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=3, max_new_tokens=30, k_policy="best"))
    assert run.token_ids == hf_greedy(target, prompt, 30)
    assert run.settings["k_policy"] == "best"
    # a one-token prompt: the first round is still the stop rule's (primed with measure.c_prior)
    assert speculative_decode(target, draft, [3], DecodeSettings(k=3, max_new_tokens=8, k_policy="best")).token_ids == \
        hf_greedy(target, [3], 8)
    # a self-draft accepts everything (but costs as much as the target, so k need not grow)
    run = speculative_decode(target, target, prompt, DecodeSettings(k=2, max_new_tokens=40, k_policy="best"))
    assert run.token_ids == hf_greedy(target, prompt, 40)
    assert run.alpha == 1.0 and all(1 <= k <= K_MAX for k in run.ks)


def test_engine_takes_a_policy_object_and_sampling_still_runs():
    target, draft = tiny_lm(100), tiny_lm(200)
    pol = BestK(2, k_max=6)
    assert make_k_policy(2, pol) is pol
    run = speculative_decode(target, draft, [1, 2, 3],
                             DecodeSettings(k=2, temperature=1.0, max_new_tokens=20, k_policy=pol, seed=3))
    assert len(run.token_ids) == 20 and run.settings["k_policy"] == "best"
    assert all(1 <= k <= 6 for k in run.ks[:-1])
    with pytest.raises(InvalidSetting, match="k_policy"):
        make_k_policy(4, "greedy-ish")


# --------------------------------------------------------------------------
# stop=True: the round ends after a doubtful draft


def _seeded(stop=True, alpha_rounds=((4, 3),) * 6, **kw) -> BestK:
    p = BestK(4, stop=stop, **kw)
    for k, n in alpha_rounds:
        p.observe(make_round(k, n, draft_step=0.3, verify=verify_time(k + 1)))
    return p


def drafted_length(p: BestK, confidences: list[float], cap: int = 16, extra: float = 0.0) -> int:
    """How many tokens a round drafts when the drafts come with these confidences."""
    j = 0
    while j < cap:
        j += 1
        if j < cap and not p.keep_drafting(confidences[:j], extra):
            break
    return j


def test_stop_rule_with_flat_confidence_is_best_k(monkeypatch):
    for alpha in (0.5, 0.7, 0.85, 0.95):
        p = _seeded()
        monkeypatch.setattr(p, "accept_chance", lambda q: alpha)
        monkeypatch.setattr(BestK, "alpha", property(lambda self: alpha))
        want, _ = theory.best_k(alpha, p.c, p.verify_cost, k_max=16)
        assert drafted_length(p, [0.5] * 16) == want
        monkeypatch.undo()


def test_stop_after_a_doubtful_draft_and_not_before():
    p = _seeded(alpha_rounds=((4, 4),) * 8)
    sure = [0.99] * 16
    assert drafted_length(p, sure) >= 8
    doubtful = [0.99, 0.99, 0.15] + [0.99] * 13
    assert drafted_length(p, doubtful) == 3  # the doubtful draft is still proposed, then the round ends
    from specviz.decoding.drafters import ModelDrafter, PromptLookupDrafter

    assert not PromptLookupDrafter.asks_keep  # nothing to ask
    assert p.next_k(PromptLookupDrafter.asks_keep) == theory.best_k(p.alpha, p.c, p.verify_cost, k_max=16)[0]
    assert p.next_k(ModelDrafter.asks_keep) == p.k_max  # a drafter that stops early gets the cap


def test_a_confident_streak_keeps_drafting_when_the_run_alpha_is_low(monkeypatch):
    """The next draft's chance is the last draft's a(q), not the run's alpha: a streak of sure drafts
    in a run that accepts poorly overall (prose, then boilerplate) still drafts long."""
    p = _seeded(alpha_rounds=((4, 4),) * 8)
    monkeypatch.setattr(BestK, "alpha", property(lambda self: 0.5))
    assert drafted_length(p, [0.99] * K_MAX, cap=K_MAX) >= 8
    assert drafted_length(p, [0.99, 0.99, 0.15] + [0.99] * 29, cap=K_MAX) == 3


def test_calibration_learns_from_judged_drafts():
    p = BestK(4, stop=True)
    assert p.accept_chance(0.97) == pytest.approx(0.965)  # prior: a(q) = q (middle of its bin)
    for _ in range(20):  # confident drafts that keep being rejected
        r = make_round(2, 0)
        p.observe(r.__class__(**{**r.__dict__, "q_drafted": [0.97, 0.97]}))
    assert p.accept_chance(0.97) < 0.2
    assert p.accept_chance(0.5) == pytest.approx(0.55)  # other bins untouched


def test_first_round_drafts_the_starting_k_with_stop():
    p = BestK(3, stop=True)
    assert p.next_k() == 3
    assert drafted_length(p, [0.01] * 16, cap=3) == 3


def test_a_primed_first_round_is_decided_by_the_stop_rule():
    """With a first estimate of c (the engine's prefill ratio) round one drafts long through sure
    tokens and stops after a doubtful one, instead of drafting the starting k."""
    from specviz.decoding.drafters import ModelDrafter

    p = BestK(3, k_max=K_MAX, stop=True)
    p.prime(0.35)
    assert p.c is None and p.next_k(ModelDrafter.asks_keep) == K_MAX  # nothing measured, but the rule can decide: the cap
    assert drafted_length(p, [0.995] * K_MAX, cap=K_MAX) > 8
    assert drafted_length(p, [0.995, 0.995, 0.995, 0.995, 0.1] + [0.995] * 27, cap=K_MAX) == 5
    for bad in (None, 0.0, -1.0, float("nan")):  # no estimate: the starting k, as unprimed
        q = BestK(3, stop=True)
        q.prime(bad)
        assert q.c_prior is None and drafted_length(q, [0.995] * 16) == 3


def test_the_engine_primes_the_policy_with_the_weight_ratio():
    """Before anything is timed (the first round reads the prompt), c is the draft/target weight ratio."""
    from specviz.core.measure import c_prior

    target, draft = tiny_lm(100, vocab=64), tiny_lm(200, vocab=80)  # the draft has a larger head
    ratio = c_prior(draft, target)
    assert ratio > 1
    for prompt in ([5, 6, 7, 8, 9, 10], [5]):
        pol = BestK(2, stop=True)
        speculative_decode(target, draft, prompt, DecodeSettings(k=2, max_new_tokens=6, k_policy=pol))
        assert pol.c_prior == pytest.approx(ratio)
    lookup = BestK(2, stop=True)  # no draft model: nothing to compare
    speculative_decode(target, PromptLookupDrafter(), [5, 6, 5, 6],
                       DecodeSettings(k=2, max_new_tokens=6, k_policy=lookup))
    assert lookup.c_prior is None

    class OwnDrafter(PromptLookupDrafter):  # says it runs a model, but does not expose one
        uses_model = True

    own = BestK(2, stop=True)
    run = speculative_decode(target, OwnDrafter(), [5, 6, 5, 6], DecodeSettings(k=2, max_new_tokens=6, k_policy=own))
    assert own.c_prior is None and run.token_ids == hf_greedy(target, [5, 6, 5, 6], 6)


def test_the_round_that_reads_the_prompt_teaches_acceptance_but_not_costs():
    """Its draft and verify times include the prompt: learning c or the verify cost from them would
    make the draft look expensive (a 50-token prompt read in the first draft step)."""
    first = dataclasses.replace(make_round(4, 3, draft_step=0.5, verify=5.0), prefill_tokens=49)
    later = make_round(4, 4, draft_step=0.1, verify=1.0)
    p = BestK(4)
    p.observe(first)
    assert p.c is None and not p.verify_by_n and p.judged == 4 and p.accepted == 3
    p.observe(later)
    assert p.c == pytest.approx(0.1) and list(p.verify_by_n) == [5]


def _cheap_close_draft(target):
    """A float32, lightly perturbed copy of a float64 target: half its weight bytes (a primed c of 0.5)."""
    import copy

    import torch

    draft = copy.deepcopy(target).float()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(torch.randn(w.shape, generator=g, dtype=w.dtype) * 0.1 * w.std())
    return draft


def test_engine_best_stops_model_drafts_early_and_stays_exact(bytes_only):
    from specviz.decoding.drafters import ModelDrafter

    target = tiny_lm(100)
    draft = _cheap_close_draft(target)
    prompt = [2, 7, 1, 8, 2, 8]
    pol = make_k_policy(4, "best")
    assert isinstance(pol, BestK) and pol.stop and pol.clock
    assert ModelDrafter.asks_keep  # the engine passes the policy's keep_drafting into its propose
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=4, max_new_tokens=40, k_policy="best"))
    assert run.token_ids == hf_greedy(target, prompt, 40)
    assert run.draft_passes == sum(run.ks)
    # without the clock the lengths follow only the draft's confidences: rounds of different lengths, every time
    fixed = BestK(4, k_max=K_MAX, stop=True, clock=False)
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=4, max_new_tokens=40, k_policy=fixed))
    assert run.token_ids == hf_greedy(target, prompt, 40)
    assert fixed.c_prior == 0.5 and run.draft_passes == sum(run.ks) and len(set(run.ks)) > 1


def test_without_the_clock_k_does_not_follow_the_timings_which_are_still_reported():
    def chosen(clock: bool, draft_step: float) -> tuple[list[int], float]:
        p = BestK(4, clock=clock)
        p.prime(0.2)
        return drive(p, alpha=0.8, draft_step=draft_step), p.c

    (fast, c_fast), (slow, c_slow) = chosen(False, 0.02), chosen(False, 0.5)
    assert fast == slow and len(set(fast)) > 1  # k still follows alpha
    assert c_fast == pytest.approx(0.02) and c_slow == pytest.approx(0.5)  # measured, reported, not used
    assert chosen(True, 0.02)[0] != chosen(True, 0.5)[0]  # with the clock the same stream gets other ks
    p = _seeded(clock=False)
    p.prime(0.3)
    assert drafted_length(p, [0.9] * 16, extra=50.0) == drafted_length(p, [0.9] * 16)  # extra is a timing too


@pytest.mark.parametrize("k_policy", ["fixed", "adaptive", "best"])
def test_same_seed_and_settings_give_the_same_text_under_every_k_policy(tiny_pair, k_policy):
    """The sidebar's promise: the number of random draws follows k, so k must not follow the wall clock."""
    texts, ks = set(), set()
    for _ in range(6):
        run = speculative_decode(tiny_pair.target, tiny_pair.draft, [3, 5, 7],
                                 DecodeSettings(k=4, temperature=1.0, max_new_tokens=40, seed=7, k_policy=k_policy))
        texts.add(tuple(run.token_ids))
        ks.add(tuple(run.ks))
    assert len(texts) == 1 and len(ks) == 1


def test_seeded_sampling_with_best_k_repeats_while_its_rounds_vary(bytes_only):
    target = tiny_lm(100)
    draft = _cheap_close_draft(target)
    runs = [speculative_decode(target, draft, [2, 7, 1, 8],
                               DecodeSettings(k=4, temperature=0.7, max_new_tokens=40, seed=3, k_policy="best")) for _ in range(3)]
    assert len({tuple(r.token_ids) for r in runs}) == 1 and len(set(runs[0].ks)) > 1


def test_sampling_with_early_stops_keeps_the_target_distribution(bytes_only):
    """The stop decision uses only the draft's side: the output must still be distributed as p."""
    import collections
    import copy

    from stats import passes, total_variation
    from test_engine import N_NEW, N_RUNS, PROMPT, VOCAB, exact_distribution, hotter_copy

    # a float32 draft of a float64 target: c = 0.5 (the weight bytes) decides when sampling
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    draft = hotter_copy(target).float()
    exact = exact_distribution(target, 1.0)
    seeded = _seeded(alpha_rounds=((2, 1),) * 6)
    # a(q) = 0 below q = 0.3, 1 above: a draft below 0.3 ends the round, one above continues it
    seeded.calib_acc = [n if lo >= 0.3 else 0.0 for n, lo in zip(seeded.calib_n, CALIB_EDGES)]
    counts, lengths, bonuses = collections.Counter(), collections.Counter(), 0
    for seed in range(N_RUNS):
        pol = copy.deepcopy(seeded)
        run = speculative_decode(target, draft, PROMPT,
                                 DecodeSettings(k=2, temperature=1.0, max_new_tokens=N_NEW, seed=seed, k_policy=pol))
        counts[tuple(run.token_ids)] += 1
        lengths[run.ks[0]] += 1
        bonuses += run.rounds[0].extra_kind == "bonus"
    assert lengths[1] > 100 and lengths[2] > 100 and bonuses > 100  # early stops, full rounds, bonuses
    assert passes(counts, exact, N_RUNS), total_variation(counts, exact, N_RUNS)


def test_the_round_that_also_reads_the_prompt_drafts_longer():
    """Its target pass costs several 1-token passes (it reads the prompt), so a draft is cheap next to
    it: with that extra cost the stop rule keeps drafting through confidences where it would stop."""
    from specviz.decoding.kpolicy import prompt_extra

    p = BestK(3, k_max=K_MAX, stop=True)
    p.prime(0.35)
    mid = [0.995, 0.995, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6] + [0.995] * 24
    plain = drafted_length(p, mid, cap=K_MAX)
    longer = drafted_length(p, mid, cap=K_MAX, extra=3.0)
    assert longer > plain
    assert prompt_extra([0.4]) == 0.0  # no 1-token step timed yet
    assert prompt_extra([0.4, 0.1, 0.1, 0.12]) == pytest.approx(3.0)
    assert prompt_extra([0.1, 0.1]) == 0.0


def test_the_engine_passes_the_prompt_extra_in_the_first_round_only(monkeypatch):
    import specviz.decoding.kpolicy as kp

    class Spy(BestK):
        def keep_drafting(self, confidences, extra=0.0):
            self.extras.append((self.round, extra))
            keep = super().keep_drafting(confidences, extra)
            return keep or (self.round == 0 and len(confidences) < 3)  # a first round of 3: a step to time

        def observe(self, rnd):
            super().observe(rnd)
            self.round += 1

    seen = []
    monkeypatch.setattr(kp, "prompt_extra", lambda step_s: seen.append(list(step_s)) or 7.0)
    target, draft = tiny_lm(100), tiny_lm(200)
    pol = Spy(3, k_max=8, stop=True)
    pol.extras, pol.round = [], 0
    prompt = list(range(1, 30))
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=3, max_new_tokens=24, k_policy=pol))
    assert run.token_ids == hf_greedy(target, prompt, 24)
    first = [e for r, e in pol.extras if r == 0]
    later = [e for r, e in pol.extras if r > 0]
    assert first and all(e == 7.0 for e in first)  # the round whose passes read the prompt
    assert later and all(e == 0.0 for e in later)
    assert [len(s) for s in seen] == list(range(1, len(first) + 1))  # the step times so far, each time
    # the prompt pass became the anchor of the cost curve: its width, its time, and 1 + extra per token read
    r0, prompt_read = run.rounds[0], len(prompt) - 1
    assert r0.prefill_tokens == prompt_read and r0.k >= 2
    assert pol.anchor == (prompt_read + r0.k + 1, r0.verify_s,
                          pytest.approx(1 + 7.0 * (prompt_read + r0.k) / prompt_read))


def _anchored(extra: float, step_s: float, verify_s: float, prompt: int = 50, k: int = 10) -> BestK:
    """A stopping chooser after a first round of k drafts whose target pass also read `prompt` tokens."""
    p = BestK(4, k_max=K_MAX, stop=True)
    p.prime(0.08)  # the weight-bytes prior (int8 draft, float32 target)
    p.read_prompt(extra, step_s)
    p.observe(dataclasses.replace(make_round(k, k, draft_step=step_s, verify=verify_s), prefill_tokens=prompt))
    return p


def test_the_prompt_pass_anchors_the_cost_of_long_passes():
    """A pass over n tokens costing t1 (1 + 0.04 (n - 1)), as on the real pair on a CPU. The draft read
    the 50-token prompt (51 tokens) at 1 + 50 * 0.04 = 3 of its steps, so extra = 2, and the target read
    50 + 11 tokens in one pass of 3.4 t1. The chooser learns t1 and the slope from that pass alone."""
    t1, step = 0.16, 0.024
    cost = lambda n: t1 * (1 + 0.04 * (n - 1))  # noqa: E731
    p = _anchored(extra=2.0, step_s=step, verify_s=cost(61))
    assert p.anchor == (61, pytest.approx(cost(61)), pytest.approx(3.4))
    assert p.t1 == pytest.approx(t1)
    assert p.c == pytest.approx(step / t1)  # the draft's steps after its prompt read
    assert p.verify_cost == {1: 1.0, 61: pytest.approx(3.4)}
    assert theory.verify_ratio(33, p.verify_cost) == pytest.approx(cost(33) / t1)
    # without the anchor (no prompt read reported) nothing is timed: c is the weight-bytes prior and the
    # pass is taken as flat, so a fairly sure streak drafts on where each draft no longer pays for its
    # step and its verify token; a sure streak is drafted to the cap either way
    blind = BestK(4, k_max=K_MAX, stop=True)
    blind.prime(0.08)
    blind.observe(dataclasses.replace(make_round(10, 10, draft_step=step, verify=cost(61)), prefill_tokens=50))
    assert blind.anchor is None and blind.t1 is None and blind.verify_cost is None
    fairly_sure, sure = [0.95] * K_MAX, [0.999] * K_MAX
    assert 8 <= drafted_length(p, fairly_sure, cap=K_MAX) < drafted_length(blind, fairly_sure, cap=K_MAX) - 4
    assert drafted_length(p, sure, cap=K_MAX) == drafted_length(blind, sure, cap=K_MAX) == K_MAX


def test_plain_passes_join_the_anchor_and_the_lower_one_time_stands_in():
    t1 = 0.16
    cost = lambda n: t1 * (1 + 0.04 * (n - 1))  # noqa: E731
    p = _anchored(extra=2.0, step_s=0.024, verify_s=cost(61))
    p.observe(make_round(17, 17, draft_step=0.024, verify=cost(18)))  # a plain 18-token pass
    assert p.t1 == pytest.approx(t1)  # the anchor's, lower than the 18-token pass
    assert p.verify_cost == {1: 1.0, 18: pytest.approx(cost(18) / t1), 61: pytest.approx(3.4)}
    p.observe(make_round(64, 3, draft_step=0.024, verify=cost(65)))  # a pass wider than the anchor's
    assert 61 not in p.verify_cost and p.verify_cost[65] == pytest.approx(cost(65) / t1)
    fast = _anchored(extra=2.0, step_s=0.024, verify_s=cost(61) * 2)  # the prompt pass read slow
    fast.observe(make_round(4, 4, draft_step=0.024, verify=t1))
    assert fast.t1 == pytest.approx(t1)  # a plain pass that was faster stands in
    assert fast.verify_cost == {1: 1.0, 5: pytest.approx(1.0), 61: pytest.approx(6.8)}
    # sampling decides on no timing of the run (clock=False): the anchor changes nothing there
    p.clock = False
    assert p._verify_estimate() is None and p._c_estimate() == 0.08


def test_a_policy_without_the_stop_rule_drafts_every_k_it_chooses():
    """keep_drafting says yes for FixedK, AdaptiveK and BestK(stop=False): a model drafter drafts the full k."""
    from specviz.decoding.kpolicy import AdaptiveK, FixedK

    def recording(cls):
        class Recording(cls):
            def next_k(self, asks_keep=False):
                k = super().next_k(asks_keep)
                self.chosen.append(k)
                return k

        return Recording

    target, draft = tiny_lm(100), tiny_lm(200)
    prompt = [3, 1, 4, 1, 5]
    for pol in (recording(FixedK)(3), recording(AdaptiveK)(3), recording(BestK)(3, k_max=8)):
        pol.chosen = []
        run = speculative_decode(target, draft, prompt, DecodeSettings(k=3, max_new_tokens=30, k_policy=pol))
        assert run.token_ids == hf_greedy(target, prompt, 30)
        done = [sum(len(r.emitted) for r in run.rounds[:i]) for i in range(len(run.rounds))]
        assert run.ks == [min(k, 30 - n) for k, n in zip(pol.chosen, done)]  # no more than the room left
        assert pol.keep_drafting([0.01]) and pol.keep_drafting([0.99, 0.01], extra=5.0)
