"""The engine on tiny random models: exactness, distribution, records, bad input.

Greedy: speculative output must equal transformers' own greedy generate, for
many seeds and k, with drafts that always agree, never agree, and anything in
between. Sampling: the distribution of the first two new tokens, estimated
from thousands of seeded runs, must match the target's exact distribution
(enumerated); a deliberately broken engine must fail the same check.
"""

import collections
import copy
import dataclasses
import itertools
import json

import pytest
import torch

import specviz.decoding.engine as engine
from specviz import InvalidSetting, PromptLookupDrafter, Run, autoregressive_decode, speculative_decode
from specviz.decoding.drafters import Drafter, Proposal
from specviz.decoding.sampling import logits_to_probs
from stats import chi2_critical, chi2_stat, passes, total_variation
from tiny import hf_greedy, tiny_lm
from specviz.core.settings import DecodeSettings


@pytest.fixture(scope="module")
def qwen_pair():
    return tiny_lm(0), tiny_lm(1)


class NeverAgrees(Drafter):
    """Proposes, at every position, a token the target would not pick (test-only)."""

    name = "never"

    def __init__(self, target):
        self.target = target

    def propose(self, ids, k, sampler):
        with torch.no_grad():
            logits = self.target(torch.tensor([ids])).logits[0, -1]
        wrong = (int(torch.argmax(logits)) + 1) % logits.shape[-1]
        return Proposal([wrong] * k, None, None, [])


# --------------------------------------------------------------------------
# greedy exactness


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_greedy_matches_hf_generate(seed, k):
    target, drafter = tiny_lm(100 + seed), tiny_lm(200 + seed)
    prompt = [(seed * 7 + i) % 64 for i in range(3 + seed)]
    ref = hf_greedy(target, prompt, 24)
    run = speculative_decode(target, drafter, prompt, DecodeSettings(k=k, temperature=0, max_new_tokens=24, seed=seed))
    assert run.token_ids == ref


def test_greedy_matches_on_gpt2_too():
    target, drafter = tiny_lm(0, arch="gpt2"), tiny_lm(1, arch="gpt2")
    prompt = [5, 9, 2]
    assert speculative_decode(target, drafter, prompt,
                              DecodeSettings(k=4, max_new_tokens=30)).token_ids == hf_greedy(target, prompt, 30)


def test_draft_that_always_agrees(qwen_pair):
    target, _ = qwen_pair
    prompt = [3, 1, 4, 1, 5]
    run = speculative_decode(target, target, prompt, DecodeSettings(k=4, max_new_tokens=25))
    assert run.token_ids == hf_greedy(target, prompt, 25)
    assert run.alpha == 1.0
    # every full round emits k accepted + 1 bonus
    assert all(r.extra_kind == "bonus" for r in run.rounds[:-1])
    assert run.rounds[0].n_accepted == 4 and len(run.rounds[0].emitted) == 5
    assert run.tokens_per_pass == pytest.approx(25 / 5)


def test_draft_that_never_agrees_still_progresses(qwen_pair):
    target, _ = qwen_pair
    prompt = [2, 7, 1, 8]
    run = speculative_decode(target, NeverAgrees(target), prompt, DecodeSettings(k=3, max_new_tokens=12))
    assert run.token_ids == hf_greedy(target, prompt, 12)
    # claim 5: zero accepted, yet each round emits exactly one token (the correction)
    assert run.alpha == 0.0
    assert all(r.n_accepted == 0 and r.emitted == [r.extra_id] and r.extra_kind == "correction" for r in run.rounds)
    assert len(run.rounds) == 12


def test_autoregressive_baseline_matches_hf(qwen_pair):
    target, _ = qwen_pair
    prompt = [1, 2, 3]
    run = autoregressive_decode(target, prompt, DecodeSettings(temperature=0, max_new_tokens=20))
    assert run.token_ids == hf_greedy(target, prompt, 20)
    assert run.target_passes == 20 and run.mode == "autoregressive"


def test_eos_stops_and_is_never_passed(qwen_pair):
    target, drafter = qwen_pair
    prompt = [4, 4, 2]
    free = hf_greedy(target, prompt, 30)
    eos = free[7]  # a token the target emits at step 8
    first = free.index(eos)
    run = speculative_decode(target, drafter, prompt, DecodeSettings(k=5, max_new_tokens=30), eos_token_id=eos)
    assert run.token_ids == free[: first + 1]
    assert run.stop_reason == "eos"
    assert run.token_ids == hf_greedy(target, prompt, 30, eos=eos)


def test_a_drafted_eos_ends_the_round(qwen_pair):
    """Nothing after EOS can be emitted, so the draft stops there instead of drafting on to k."""
    target, _ = qwen_pair
    prompt = [4, 4, 2]
    free = hf_greedy(target, prompt, 12)
    eos = free[2]
    first = free.index(eos)
    run = speculative_decode(target, target, prompt, DecodeSettings(k=8, max_new_tokens=12),
                             eos_token_id=eos)  # a self-draft
    assert run.token_ids == free[: first + 1] and run.stop_reason == "eos"
    assert run.rounds[0].drafted == free[: first + 1] and run.draft_passes == first + 1


def test_max_new_tokens_is_exact(qwen_pair):
    target, _ = qwen_pair
    for n in [1, 2, 5, 9]:
        run = speculative_decode(target, target, [1, 2], DecodeSettings(k=4, max_new_tokens=n))
        assert len(run.token_ids) == n
        assert sum(len(r.emitted) for r in run.rounds) == n


def test_adaptive_k_changes_k_and_keeps_output(qwen_pair):
    target, drafter = qwen_pair
    prompt = [9, 8, 7]
    run = speculative_decode(target, drafter, prompt, DecodeSettings(k=3, max_new_tokens=30, k_policy="adaptive"))
    assert run.token_ids == hf_greedy(target, prompt, 30)
    run_always = speculative_decode(target, target, prompt, DecodeSettings(k=2, max_new_tokens=30, k_policy="adaptive"))
    assert run_always.ks[:4] == [2, 3, 4, 5]  # grows after each fully accepted round


def test_prompt_lookup_drafter_is_exact_and_accepts_repetition():
    target = tiny_lm(3)
    prompt = [5, 6, 7, 8, 9, 10]
    ref = hf_greedy(target, prompt, 40)
    # a context that repeats the target's own continuation: lookup should find it
    ctx = prompt + ref[:20] + prompt
    ref2 = hf_greedy(target, ctx, 20)
    run = speculative_decode(target, PromptLookupDrafter(), ctx, DecodeSettings(k=4, max_new_tokens=20))
    assert run.token_ids == ref2
    assert run.draft_passes == 0
    assert run.n_accepted > 0


def test_prompt_lookup_finds_latest_match():
    d = PromptLookupDrafter(max_ngram=2)
    assert d.lookup([1, 2, 3, 9, 1, 2, 4, 5, 1, 2], 3) == [4, 5, 1]
    assert d.lookup([7, 8], 3) == []


# --------------------------------------------------------------------------
# sampling preserves the target's distribution


VOCAB = 6
PROMPT = [1, 3]
N_NEW = 3  # k=2 drafts then a bonus when both are accepted: the bonus is inside the budget


def exact_distribution(target, temperature, top_k=0, top_p=1.0, n=N_NEW, prefix=()):
    """P(x1..xn | prompt) under the target, by enumeration over the vocabulary."""
    with torch.no_grad():
        p = logits_to_probs(target(torch.tensor([PROMPT + list(prefix)])).logits[0, -1], temperature, top_k, top_p)
    if n == 1:
        return {(x,): float(p[x]) for x in range(VOCAB)}
    return {(x, *rest): float(p[x]) * pr for x in range(VOCAB) if p[x] > 0
            for rest, pr in exact_distribution(target, temperature, top_k, top_p, n - 1, (*prefix, x)).items()}


def exact_two_token_distribution(target, temperature, top_k=0, top_p=1.0):
    return exact_distribution(target, temperature, top_k, top_p, n=2)


def sampled_counts(target, draft, n, temperature, k=2, top_k=0, top_p=1.0, max_new_tokens=N_NEW):
    """Counts of the new tokens over n seeded runs, and the runs' rounds (for what happened in them)."""
    counts, rounds = collections.Counter(), []
    for seed in range(n):
        run = speculative_decode(target, draft, PROMPT,
                                 DecodeSettings(k=k, temperature=temperature, top_k=top_k, top_p=top_p,
                                                max_new_tokens=max_new_tokens, seed=seed))
        counts[tuple(run.token_ids)] += 1
        rounds += run.rounds
    return counts, rounds


def hotter_copy(target, factor=0.5):
    """The target with its logits scaled by `factor`: the target at 1/factor times the temperature."""
    draft = copy.deepcopy(target)
    with torch.no_grad():
        draft.lm_head.weight.mul_(factor)
    return draft


@pytest.fixture(scope="module")
def small_vocab_pair():
    """A target and a draft that overlaps it (the target at twice the temperature): both outcomes of the
    acceptance test, and bonus tokens, are common."""
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    return target, hotter_copy(target)


N_RUNS = 3000


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.8, 4, 0.9)])
def test_sampling_matches_target_distribution(small_vocab_pair, temperature, top_k, top_p):
    target, draft = small_vocab_pair
    exact = exact_distribution(target, temperature, top_k, top_p)
    counts, rounds = sampled_counts(target, draft, N_RUNS, temperature, 2, top_k, top_p)
    assert passes(counts, exact, N_RUNS), total_variation(counts, exact, N_RUNS)
    # every path was taken often: accepted drafts, corrections and bonus tokens
    kinds = collections.Counter(r.extra_kind for r in rounds)
    judged = [ok for r in rounds for ok in r.accepted]
    assert kinds["bonus"] > N_RUNS / 5 and kinds["correction"] > N_RUNS / 5
    assert 0.4 < sum(judged) / len(judged) < 0.95
    # and it is not trivially the draft: the draft's own distribution must differ clearly
    q_exact = exact_distribution(draft, temperature, top_k, top_p)
    assert sum(abs(exact[x] - q_exact.get(x, 0.0)) for x in exact) / 2 > 0.1


def test_broken_engine_fails_the_distribution_check(small_vocab_pair, monkeypatch):
    """Resample corrections from p instead of the residual: the same check must fail."""
    target, draft = small_vocab_pair
    exact = exact_distribution(target, 1.0)
    monkeypatch.setattr(engine, "residual", lambda p, q, d: p)
    counts, _ = sampled_counts(target, draft, N_RUNS, 1.0)
    assert not passes(counts, exact, N_RUNS)


def test_accept_everything_engine_fails_the_distribution_check(small_vocab_pair, monkeypatch):
    target, draft = small_vocab_pair
    exact = exact_distribution(target, 1.0)
    monkeypatch.setattr(engine, "accept_token", lambda u, p, q: True)
    counts, _ = sampled_counts(target, draft, N_RUNS, 1.0)
    assert not passes(counts, exact, N_RUNS)


def test_a_bonus_drawn_from_the_draft_fails_the_distribution_check(small_vocab_pair, monkeypatch):
    """The bonus comes from the target's p at position k+1; the draft's q there is close but wrong."""
    target, draft = small_vocab_pair
    exact = exact_distribution(target, 1.0)
    decide = engine.decide

    def bonus_from_q(logits, prop, sampler, argmax=None):
        d = decide(logits, prop, sampler, argmax)
        if d.extra_kind == "bonus":  # with k=2 and 3 new tokens a bonus only fits in the first round: context = PROMPT
            with torch.no_grad():
                q_next = sampler.probs(draft(torch.tensor([PROMPT + prop.tokens])).logits[0, -1])
            d = dataclasses.replace(d, extra_id=sampler.pick(logits[-1], q_next))
        return d

    monkeypatch.setattr(engine, "decide", bonus_from_q)
    counts, _ = sampled_counts(target, draft, N_RUNS, 1.0)
    assert not passes(counts, exact, N_RUNS)


# --------------------------------------------------------------------------
# one round alone, on chosen p and q: each judged draft is tested with its own u

ROUND_P = [0.5, 0.3, 0.2]  # the target's distribution at every position (it ignores its context)
ROUND_Q = [0.2, 0.29, 0.51]  # the draft's: the acceptance test rejects often at both positions
N_ROUNDS = 3000  # one u for both drafts misses by a chi-square of ~400 here, against a bound of ~27


def test_each_judged_draft_is_tested_with_the_generators_next_u():
    """A round's drafts are judged with fresh uniforms, the run's generator's next draws in order: one u
    for all positions ties their verdicts together (accepting d1 makes accepting d2 likelier)."""
    from specviz.decoding.sampling import Sampler, uniform

    k = 4
    logits = torch.tensor([ROUND_P] * (k + 1)).log()
    q = torch.tensor([[0.1, 0.1, 0.8]] * k)  # p/q >= 1 for tokens 0 and 1: every draft accepted, whatever u
    prop = Proposal([0, 1, 1, 0], q, q, [])
    d = engine.decide(logits, prop, Sampler.create(1.0, 0, 1.0, seed=9))
    g = torch.Generator().manual_seed(9)
    assert d.n_accepted == k and d.u == [uniform(g) for _ in range(k)]
    assert len(set(d.u)) == k


def test_one_round_then_the_target_alone_gives_the_targets_two_token_distribution():
    """decide() on N_ROUNDS proposals drawn from q (k = 2): the first two tokens, the round's and then the
    target's own draw where the round gave one, must be distributed as p x p."""
    from specviz.decoding.sampling import Sampler, sample

    logits = torch.tensor([ROUND_P] * 3).log()  # (k+1, V)
    q = torch.tensor([ROUND_Q] * 2)
    sampler, g = Sampler.create(1.0, 0, 1.0, seed=0), torch.Generator().manual_seed(1)
    p = sampler.probs(logits)  # the distribution decide() works in (float32)
    drafts = torch.multinomial(q, N_ROUNDS, replacement=True, generator=g).T.tolist()  # (N, 2): d ~ q
    counts, accepted = collections.Counter(), collections.Counter()
    for d1, d2 in drafts:
        d = engine.decide(logits, Proposal([d1, d2], q, q, []), sampler)
        accepted[d.n_accepted] += 1
        out = [d1, d2][: d.n_accepted] + [d.extra_id]
        if len(out) < 2:
            out.append(sample(p[1], g))
        counts[tuple(out[:2])] += 1
    exact = {(a, b): float(p[0, a] * p[1, b]) for a in range(3) for b in range(3)}
    stat, df = chi2_stat(counts, exact, N_ROUNDS)
    assert passes(counts, exact, N_ROUNDS), (stat, chi2_critical(df), total_variation(counts, exact, N_ROUNDS))
    assert min(accepted[n] for n in range(3)) > N_ROUNDS / 10  # rejected at d1, at d2, and both accepted


# --------------------------------------------------------------------------
# the draft samples from the q it reports (the acceptance test divides by it)


def draft_draws(draft, n, temperature, top_k, top_p, k=2):
    """(counts of the drafted pairs, the q each draw reports) over n seeded proposals."""
    from specviz.decoding.drafters import ModelDrafter
    from specviz.decoding.sampling import Sampler

    counts, reported = collections.Counter(), {}
    for seed in range(n):
        drafter = ModelDrafter(draft, vocab=VOCAB)
        drafter.start(PROMPT)
        prop = drafter.propose(PROMPT, k, Sampler.create(temperature, top_k, top_p, seed))
        x = tuple(prop.tokens)
        counts[x] += 1
        reported.setdefault((), prop.q[0])  # q of the first draft (one prompt: the same every run)
        reported.setdefault(x[:1], prop.q[1])  # q of the second, given the first
    return counts, reported


def reported_distribution(counts, reported) -> dict:
    """P(x1, x2) under the q's the draws reported: q1(x1) q2(x2 | x1); an x1 never drawn keeps its mass."""
    q1 = reported[()]
    probs = {}
    for x1 in range(VOCAB):
        q2 = reported.get((x1,))
        for x2 in range(VOCAB) if q2 is not None else [None]:
            probs[(x1, x2)] = float(q1[x1] * (1.0 if q2 is None else q2[x2]))
    return probs


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.8, 4, 0.9), (1.0, 0, 0.8)])
def test_the_draft_draws_from_the_q_it_reports(small_vocab_pair, temperature, top_k, top_p):
    _, draft = small_vocab_pair
    counts, reported = draft_draws(draft, N_RUNS, temperature, top_k, top_p)
    probs = reported_distribution(counts, reported)
    assert passes(counts, probs, N_RUNS), total_variation(counts, probs, N_RUNS)
    # and the reported q is the settings' distribution of the draft's logits
    with torch.no_grad():
        want = logits_to_probs(draft(torch.tensor([PROMPT])).logits[0, -1], temperature, top_k, top_p)
    assert torch.allclose(reported[()].double(), want.double())


def test_a_draft_that_ignores_top_p_fails_the_draw_check(small_vocab_pair, monkeypatch):
    """Reporting the top-p q while drawing from the full softmax: the same check must fail."""
    import specviz.decoding.drafters as drafters

    _, draft = small_vocab_pair
    real_pick = drafters.Sampler.pick

    def pick_without_top_p(self, logits, probs):
        return real_pick(self, logits, logits_to_probs(logits, self.temperature, self.top_k, 1.0))

    monkeypatch.setattr(drafters.Sampler, "pick", pick_without_top_p)
    n = N_RUNS // 3
    counts, reported = draft_draws(draft, n, 1.0, 0, 0.8)
    assert not passes(counts, reported_distribution(counts, reported), n)


# --------------------------------------------------------------------------
# records, determinism


def test_same_seed_same_run_and_json_round_trip(qwen_pair):
    target, drafter = qwen_pair
    a = speculative_decode(target, drafter, [1, 2, 3], DecodeSettings(k=3, temperature=1.0, max_new_tokens=20, seed=42))
    b = speculative_decode(target, drafter, [1, 2, 3], DecodeSettings(k=3, temperature=1.0, max_new_tokens=20, seed=42))
    c = speculative_decode(target, drafter, [1, 2, 3], DecodeSettings(k=3, temperature=1.0, max_new_tokens=20, seed=43))
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids
    back = Run.from_json(a.to_json())
    assert back == a
    assert json.loads(a.to_json())["format"] == "specviz.run/1"


def test_round_records_are_consistent(qwen_pair):
    target, drafter = qwen_pair
    prompt, temperature = [1, 2, 3], 0.9
    run = speculative_decode(target, drafter, prompt,
                             DecodeSettings(k=4, temperature=temperature, max_new_tokens=40, seed=1))
    assert [t for r in run.rounds for t in r.emitted] == run.token_ids
    ids, corrections, thrown_away = list(prompt), 0, 0
    for r in run.rounds:
        assert len(r.drafted) == r.k == len(r.q_top) == len(r.overlap)
        assert len(r.p_top) == len(r.entropy) == len(r.target_argmax) == r.k + 1
        assert r.emitted[: r.n_accepted] == r.drafted[: r.n_accepted]
        assert len(r.u) == len(r.accepted) == len(r.ratio) == len(set(r.u))  # a fresh u for each judged draft
        for u, ratio, ok in zip(r.u, r.ratio, r.accepted):
            assert ok == (u < ratio)  # the recorded decision is the rule applied to the recorded numbers
        # a rejection ends the round: the judged drafts are the accepted prefix and at most one rejection
        assert r.accepted == [True] * r.n_accepted + [False] * r.rejected
        if r.rejected:
            assert r.extra_kind == "correction" and r.residual_top is not None
            # the correction is drawn from norm(max(0, p - q)): a token where p > q at the rejected position.
            # p and q from the models' float32 logits, as the engine computes them (verify and the draft step
            # round the float64 logits to float32): a float64 reference differs by up to 2e-5 relative
            ctx = torch.tensor([ids + r.drafted[: r.n_accepted]])
            with torch.no_grad():
                p = logits_to_probs(target(ctx).logits[0, -1].float(), temperature)
                q = logits_to_probs(drafter(ctx).logits[0, -1].float(), temperature)
            assert p[r.extra_id] > q[r.extra_id]
            res = torch.clamp(p - q, min=0.0)
            # this full pass and the run's cached passes may round a logit one float32 ulp apart: moving every
            # logit one ulp moved a residual entry by 7.7e-7 at most over 40 seeds (res.sum() >= 0.46 there)
            tol = 16 * torch.finfo(torch.float32).eps / float(res.sum())
            want = torch.topk(res / res.sum(), 10).values.tolist()
            assert r.residual_top.probs == pytest.approx(want, rel=0, abs=tol)
            corrections += 1
            thrown_away += r.k - len(r.accepted)
        for ov, pd, qd in zip(r.overlap, r.p_drafted, r.q_drafted):
            assert 0.0 <= ov <= 1.0 + 1e-9 and 0 <= pd <= 1 and 0 < qd <= 1
        ids += r.emitted
    assert corrections > 0 and thrown_away > 0  # the run exercised both
    # alpha leaves out the drafts thrown away after a rejection; the acceptance rate counts them
    assert run.alpha == run.n_accepted / (run.n_drafted - thrown_away) > run.acceptance_rate
    assert run.tokens_per_pass == pytest.approx(len(run.token_ids) / len(run.rounds))


def _count_forwards(model, monkeypatch) -> list[int]:
    """Record the number of tokens of each forward call of `model`."""
    calls = []
    orig = model.forward

    def forward(*a, **kw):
        calls.append(int(kw["input_ids"].shape[-1]))
        return orig(*a, **kw)

    monkeypatch.setattr(model, "forward", forward)
    return calls


def test_the_first_round_reads_the_prompt_no_separate_prefill_pass(monkeypatch):
    """As in transformers' assisted generation: the first draft step and the first target pass read
    the whole prompt, so a run costs one target pass per round and one draft pass per drafted token."""
    target, draft = tiny_lm(1), tiny_lm(2)
    prompt = [3, 1, 4, 1, 5, 9]
    expected = hf_greedy(target, prompt, 20)
    t_calls, d_calls = _count_forwards(target, monkeypatch), _count_forwards(draft, monkeypatch)
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=3, max_new_tokens=20))
    assert run.token_ids == expected
    assert len(t_calls) == run.target_passes == len(run.rounds)
    assert len(d_calls) == run.draft_passes == sum(r.k for r in run.rounds)
    assert t_calls[0] == len(prompt) + run.rounds[0].k and d_calls[0] == len(prompt)
    assert [r.prefill_tokens for r in run.rounds] == [len(prompt) - 1] + [0] * (len(run.rounds) - 1)
    assert run.steady_rounds == run.rounds[1:]
    t_calls.clear()
    base = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=7))
    assert t_calls == [len(prompt)] + [1] * 6 and base.target_passes == 7
    assert base.rounds[0].prefill_tokens == len(prompt) - 1
    # the steady rate leaves out the round that read the prompt, and its tokens
    first = base.rounds[0]
    assert base.steady_s_per_token == pytest.approx((base.decode_s - first.round_s) / 6)


def test_rounds_without_prefill_tokens_load_as_reading_no_prompt(qwen_pair):
    target, drafter = qwen_pair
    run = speculative_decode(target, drafter, [1, 2, 3], DecodeSettings(k=3, max_new_tokens=8))
    d = run.to_dict()
    assert d["rounds"][0]["prefill_tokens"] == 2
    for r in d["rounds"]:
        del r["prefill_tokens"]  # an optional field
    old = Run.from_dict(d)
    assert [r.prefill_tokens for r in old.rounds] == [0] * len(old.rounds) and old.steady_rounds == old.rounds


def test_stream_yields_rounds_live_then_run(qwen_pair):
    target, drafter = qwen_pair
    stream = engine.speculative_stream(target, drafter, [1, 2, 3], DecodeSettings(k=2, max_new_tokens=10))
    seen = []
    for rnd in stream:
        seen.append(rnd)
        assert stream.run is None  # the Run exists only once the stream is done
    assert stream.run.rounds == seen


@pytest.mark.cores
@pytest.mark.parametrize("speculative", [True, False])
def test_time_a_caller_spends_on_a_round_is_not_decode_time(qwen_pair, speculative):
    """The app animates between rounds; that must not count as decoding (it would fake a slowdown)."""
    import time

    target, drafter = qwen_pair
    stream = (engine.speculative_stream(target, drafter, [1, 2, 3],
                                        DecodeSettings(k=2, max_new_tokens=12)) if speculative
              else engine.autoregressive_stream(target, [1, 2, 3], DecodeSettings(max_new_tokens=12)))
    t0, held = time.perf_counter(), 0.0
    for _ in stream:
        time.sleep(0.05)
        held += 0.05
    wall = time.perf_counter() - t0
    run = stream.run
    assert held >= 0.3
    assert run.decode_s < wall - 0.9 * held  # the sleeps are left out ...
    assert run.decode_s >= sum(r.round_s for r in run.rounds)  # ... and every round's own time is in


def test_padded_vocab_draft_is_handled():
    # a target whose embedding is padded to more rows than the draft's
    target, drafter = tiny_lm(5, vocab=72), tiny_lm(6, vocab=64)
    prompt = [1, 2, 3]
    run = speculative_decode(target, drafter, prompt, DecodeSettings(k=3, max_new_tokens=15), vocab=64)
    assert all(t < 64 for t in run.token_ids)
    run_t = speculative_decode(target, drafter, prompt, DecodeSettings(k=3, max_new_tokens=15, temperature=1.0),
                               vocab=64)
    assert len(run_t.token_ids) == 15


def test_both_entry_points_share_one_vocabulary_default():
    """A baseline and a speculative run of the same target pick from the same ids, whatever the pair."""
    target = tiny_lm(5, vocab=72)
    with torch.no_grad():
        target.lm_head.weight[64:] = target.lm_head.weight[:64].abs().max() * 50  # the padded rows would win
    prompt = [1, 2, 3]
    # a draft with more rows than the target: the default is the target's ids, for both
    base = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=10))
    spec = speculative_decode(target, tiny_lm(6, vocab=80), prompt, DecodeSettings(k=3, max_new_tokens=10))
    assert spec.token_ids == base.token_ids == hf_greedy(target, prompt, 10)
    assert max(base.token_ids) >= 64  # the padded rows are in the default vocabulary
    assert engine.default_vocab(target) == 72
    # a draft with fewer rows cannot read every id the target may pick: say which ids both share
    small = tiny_lm(6, vocab=64)
    with pytest.raises(InvalidSetting, match="vocab=64"):
        speculative_decode(target, small, prompt, DecodeSettings(k=3, max_new_tokens=10))
    shared_base = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=10), vocab=64)
    shared_spec = speculative_decode(target, small, prompt, DecodeSettings(k=3, max_new_tokens=10), vocab=64)
    assert shared_spec.token_ids == shared_base.token_ids and max(shared_base.token_ids) < 64


class Fixed(Drafter):
    """Proposes the given tokens with certainty, as prompt lookup does (test-only)."""

    name = "fixed"

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, ids, k, sampler):
        return Proposal(self.tokens[:k], None, None, [])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafts_after_a_proposed_eos_are_not_judged_or_counted(qwen_pair, temperature):
    """Nothing after EOS can be emitted, so it is not judged: not in alpha, not in the best-k calibration."""
    from specviz.decoding.kpolicy import CALIB_PRIOR, BestK

    target, _ = qwen_pair
    prompt = [4, 4, 2]
    free = hf_greedy(target, prompt, 2)
    eos = free[1]
    wrong = (free[0] + 1) % 64
    policy = BestK(4)
    run = speculative_decode(target, Fixed([free[0], eos, wrong, wrong]), prompt,
                             DecodeSettings(k=4, max_new_tokens=10, temperature=temperature, k_policy=policy),
                             eos_token_id=eos)
    rnd = run.rounds[0]
    assert rnd.k == len(rnd.drafted) == len(rnd.q_top) == 2 and len(rnd.p_top) == 3  # cut after the EOS
    assert all(eos not in r.drafted[:-1] for r in run.rounds)
    assert run.n_drafted == sum(r.k for r in run.rounds) and all(len(r.accepted) <= r.k for r in run.rounds)
    assert policy.judged == run.n_judged == sum(policy.calib_n) - CALIB_PRIOR * len(policy.calib_n)
    if temperature == 0:  # the target would pick both: all judged drafts accepted
        assert run.token_ids == free and run.stop_reason == "eos"
        assert rnd.accepted == [True, True] and run.alpha == 1.0 and run.n_judged == 2


# --------------------------------------------------------------------------
# bad input: clear errors


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(input_ids=[]), "empty"),
        (dict(k=0), "k"),
        (dict(k=33), "k"),
        (dict(temperature=-0.1), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(max_new_tokens=254), "context"),
        (dict(input_ids=[1, 2, 999]), "vocabulary"),
        (dict(input_ids=torch.zeros(2, 3, dtype=torch.long)), "one sequence"),
    ],
)
def test_bad_input_is_a_clear_error(qwen_pair, kw, match):
    target, drafter = qwen_pair
    args = dict(input_ids=[1, 2, 3], k=4, temperature=0.0, top_p=1.0, max_new_tokens=10)
    args.update(kw)
    ids = args.pop("input_ids")
    with pytest.raises(InvalidSetting, match=match):
        speculative_decode(target, drafter, ids, DecodeSettings(**args))


def test_tensor_input_accepted(qwen_pair):
    target, drafter = qwen_pair
    a = speculative_decode(target, drafter, torch.tensor([[1, 2, 3]]), DecodeSettings(k=2, max_new_tokens=8))
    b = speculative_decode(target, drafter, [1, 2, 3], DecodeSettings(k=2, max_new_tokens=8))
    assert a.token_ids == b.token_ids


def test_all_k_values_over_product(qwen_pair):
    """A compact sweep: seeds x k x temperature 0 all equal to the reference."""
    target, drafter = qwen_pair
    for seed, k in itertools.product(range(3), [1, 4, 7]):
        prompt = [seed + 1, 2 * seed + 3]
        assert speculative_decode(target, drafter, prompt,
                                  DecodeSettings(k=k, max_new_tokens=15, seed=seed)).token_ids == \
            hf_greedy(target, prompt, 15)


def test_one_eos_resolver_for_the_engine_and_the_loader():
    """Given ids win; else the tokenizer's, the generation config's (the config's when it has none) and
    the end-of-turn tokens, each once, in that order, below the shared vocabulary."""
    from specviz.modeling.lm import eos_ids

    a, b = tiny_lm(0), tiny_lm(1)
    a.generation_config.eos_token_id, a.config.eos_token_id = None, 7
    b.generation_config.eos_token_id = [9, 7]

    class Tok:
        eos_token_id = 3

        def get_vocab(self):
            return {"<|im_end|>": 5, "<|endoftext|>": 200, "hello": 6}

    assert eos_ids([a, b]) == [7, 9]
    assert eos_ids([a, b], 4) == [4] and eos_ids([a, b], [2, 2]) == [2] and eos_ids([a, b], []) == []
    assert eos_ids([a, b], tokenizer=Tok(), vocab=100) == [3, 7, 9, 5]


def test_the_pair_labs_default_to_the_engines_vocabulary():
    """The tree, the rule lab, the first-position lab and the agreement measure pick the engine's default:
    the target's ids, which a draft with fewer rows cannot score (so they ask for vocab=, as the engine does)."""
    from specviz.teaching import experiments, lab, rules
    from specviz.decoding import tree

    target, big, small = tiny_lm(5, vocab=72), tiny_lm(6, vocab=80), tiny_lm(6, vocab=64)
    prompt = [1, 2, 3]
    p, q = experiments.first_logits(target, big, prompt)
    assert p.shape == q.shape == (72,)
    assert rules.first_distributions(target, big, prompt)[1].shape == (72,)
    assert len(lab.first_position(target, big, prompt).p) > 0
    assert experiments.agreement_along(target, big, prompt, [4, 5]).token_ids == [4, 5]
    base = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=6))
    assert tree.tree_decode(target, big, prompt, DecodeSettings(max_new_tokens=6), budget=4).token_ids == base.token_ids
    calls = [lambda: experiments.first_logits(target, small, prompt),
             lambda: rules.first_distributions(target, small, prompt),
             lambda: lab.first_position(target, small, prompt),
             lambda: experiments.agreement_along(target, small, prompt, [4, 5]),
             lambda: tree.tree_decode(target, small, prompt, DecodeSettings(max_new_tokens=6), budget=4)]
    for call in calls:
        with pytest.raises(InvalidSetting, match="vocab=64"):
            call()
    assert experiments.first_logits(target, small, prompt, vocab=64)[0].shape == (64,)
