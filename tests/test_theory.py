"""Tests for specviz.core.theory: the formulas the app shows, checked against brute force."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specviz.core import theory
from specviz.core.errors import InvalidSetting
from specviz.data.records import Round, Run, TopK

ROOT = Path(__file__).resolve().parents[1]


def test_expected_tokens_matches_sum_of_powers():
    for a in (0.0, 0.3, 0.5, 0.77, 0.95, 1.0):
        for k in (0, 1, 4, 7):
            assert theory.expected_tokens(a, k) == pytest.approx(sum(a**i for i in range(k + 1)))


def test_expected_tokens_over_a_run_of_varying_k_is_what_iid_acceptance_gives():
    # a run whose k changed round by round: tokens per pass of i.i.d. drafts accepted with chance alpha,
    # simulated, against the formula averaged over the rounds' k
    rng = np.random.default_rng(0)
    ks = [11, 10, 27, 3, 1]
    for a in (0.5, 0.9):
        ok = rng.random((20_000, len(ks), max(ks))) < a  # (trials, rounds, drafts)
        kept = [np.argmin(np.c_[ok[:, r, :k], np.zeros(len(ok), bool)], axis=1) for r, k in enumerate(ks)]
        tpp = np.mean([1 + m for m in kept])  # each round: the accepted prefix, then one token from the target
        assert theory.expected_tokens_over(a, ks) == pytest.approx(tpp, rel=0.01)
    assert theory.expected_tokens_over(0.8, [4, 4]) == theory.expected_tokens(0.8, 4)
    assert theory.expected_tokens_over(np.array([0.0, 1.0]), [2, 6]) == pytest.approx([1.0, 5.0])
    with pytest.raises(InvalidSetting):
        theory.expected_tokens_over(0.8, [])


def test_expected_tokens_edges_and_vectorised():
    assert theory.expected_tokens(1.0, 4) == 5.0
    assert theory.expected_tokens(0.0, 4) == 1.0
    assert isinstance(theory.expected_tokens(0.5, 4), float)
    out = theory.expected_tokens(np.array([0.0, 0.5, 1.0]), 4)
    assert out.shape == (3,) and out[1] == pytest.approx(1.9375) and out[2] == 5.0
    grid = theory.expected_tokens(np.array([[0.5], [0.9]]), np.array([1, 4]))
    assert grid.shape == (2, 2) and grid[1, 1] == pytest.approx(4.0951)
    with pytest.raises(InvalidSetting):
        theory.expected_tokens(1.2, 4)
    with pytest.raises(InvalidSetting):
        theory.expected_tokens(0.5, -1)


def test_seed_table_matches_claim_8():
    t = theory.SEED_TABLE
    assert set(t) == {0.5, 0.7, 0.8, 0.9}
    for a, want in zip((0.5, 0.7, 0.8, 0.9), (1.94, 2.77, 3.36, 4.10)):
        assert t[a] == pytest.approx(want, abs=0.01)


def test_accepted_length_pmf():
    pmf = theory.accepted_length_pmf(0.8, 4)
    assert pmf.sum() == pytest.approx(1.0)
    assert pmf[0] == pytest.approx(0.2) and pmf[2] == pytest.approx(0.64 * 0.2)
    assert pmf[4] == pytest.approx(0.8**4)
    # mean accepted + 1 emitted token per round = E[tokens per pass]
    assert (np.arange(5) * pmf).sum() + 1 == pytest.approx(theory.expected_tokens(0.8, 4))
    assert list(theory.accepted_length_pmf(1.0, 3)) == [0, 0, 0, 1]


def test_accepted_length_pmf_matches_simulation():
    rng = np.random.default_rng(0)
    a, k, n = 0.7, 4, 20000
    acc = rng.random((n, k)) < a
    lengths = np.where(acc.all(axis=1), k, np.argmin(acc, axis=1))
    emp = np.bincount(lengths, minlength=k + 1) / n
    assert np.abs(emp - theory.accepted_length_pmf(a, k)).max() < 0.01


def test_speedup_classic_and_measured_verify_cost():
    a, k, c = 0.8, 4, 0.1
    classic = theory.expected_tokens(a, k) / (1 + k * c)
    assert theory.expected_speedup(a, k, c) == pytest.approx(classic)
    # verify cost as a dict is interpolated at k+1 tokens
    vc = {1: 1.0, 2: 1.1, 8: 1.7}
    assert theory.verify_ratio(5, vc) == pytest.approx(1.4)
    assert theory.expected_speedup(a, k, c, vc) == pytest.approx(theory.expected_tokens(a, k) / (k * c + 1.4))
    # a callable gets n_tokens = k + 1
    seen = []
    theory.expected_speedup(a, k, c, lambda n: seen.append(n) or 1.0)
    assert seen == [5]
    # beyond the largest measured size: the last slope is extended (not clamped)
    assert theory.verify_ratio(14, vc) == pytest.approx(1.7 + 0.1 * 6)


def test_round_cost_is_k_draft_steps_and_one_pass_over_k_plus_1_tokens():
    vc = {1: 1.0, 2: 1.1, 8: 1.7}
    assert theory.round_cost(0, 0.2) == pytest.approx(1.0)  # no drafts: the pass that emits one token
    assert theory.round_cost(4, 0.1) == pytest.approx(1.4)
    assert theory.round_cost(4, 0.1, vc) == pytest.approx(0.4 + 1.4)
    ks = np.arange(1, 10)
    assert np.allclose(theory.round_cost(ks, 0.15, vc), [k * 0.15 + theory.verify_ratio(k + 1, vc) for k in ks])
    # the speedup divides by it
    assert theory.expected_speedup(0.7, ks, 0.15, vc) == pytest.approx(
        theory.expected_tokens(0.7, ks) / theory.round_cost(ks, 0.15, vc))
    with pytest.raises(InvalidSetting):
        theory.round_cost(4, -0.1)


def test_best_k_is_brute_force_argmax():
    vc = {1: 1.0, 2: 1.02, 4: 1.05, 8: 1.3, 16: 2.0}
    for a in (0.5, 0.7, 0.9):
        for c in (0.02, 0.1, 0.3):
            for cost in (None, vc):
                best, s = None, -1.0
                for k in range(1, 17):
                    v = theory.expected_speedup(a, k, c, cost)
                    if v > s:
                        best, s = k, v
                assert theory.best_k(a, c, cost, 16) == (best, pytest.approx(s))


def test_best_k_claim_9_ballpark():
    # a draft ~1/10 the cost with good acceptance: best k around 4-6, 2-3x
    k, s = theory.best_k(0.8, 0.1)
    assert 4 <= k <= 7 and 2.0 <= s <= 3.0


def _round(i, k, n_acc, n_emit):
    acc = [True] * n_acc + ([False] if n_acc < k else [])
    return Round(index=i, k=k, drafted=[1] * k, q_drafted=[0.5] * k, p_drafted=[0.5] * k,
                 u=[0.1] * len(acc), ratio=[1.0] * len(acc), accepted=acc, n_accepted=n_acc,
                 emitted=[1] * n_emit, extra_id=2, extra_kind="bonus" if n_acc == k else "correction",
                 p_top=[TopK([1], [0.5])] * (k + 1), q_top=[TopK([1], [0.5])] * k,
                 target_argmax=[1] * (k + 1), overlap=[0.5] * k, entropy=[1.0] * (k + 1),
                 residual_top=None, greedy=False, draft_s=0.01, verify_s=0.02, round_s=0.03)


def test_tokens_per_pass_ci():
    rounds = [_round(0, 4, 4, 5), _round(1, 4, 1, 2), _round(2, 4, 2, 3), _round(3, 4, 0, 1)]
    run = Run(mode="speculative", prompt_ids=[0], token_ids=[1] * 11, rounds=rounds, settings={},
              stop_reason="max_new_tokens", prefill_s=0, decode_s=0.12, target_passes=4, draft_passes=16)
    e = theory.tokens_per_pass_ci(run)
    assert e.value == pytest.approx(2.75) and e.value == pytest.approx(run.tokens_per_pass)
    assert e.stderr == pytest.approx(np.std([5, 2, 3, 1], ddof=1) / 2)
    assert e.n == 4


def test_flat_until():
    assert theory.flat_until([1, 2, 4, 8, 16], [1.0, 1.0, 1.1, 1.2, 2.0]) == 8
    assert theory.flat_until([1, 2], [1.0, 3.0]) == 1
    assert theory.flat_until([4, 1], [[1.0, 1.1], [1.0]], tol=1.2) == 4


def test_total_variation_and_noise():
    p = {0: 0.5, 1: 0.5}
    assert theory.total_variation(p, {0: 3, 1: 1}) == pytest.approx(0.25)
    # p given as a top list (sums to 0.9): missing mass compared as one bucket
    assert theory.total_variation({0: 0.6, 1: 0.3}, {0: 6, 1: 3, 7: 1}) == pytest.approx(0.0)
    # the noise estimate matches simulated exact sampling
    rng = np.random.default_rng(1)
    pv = np.array([0.5, 0.3, 0.2])
    tvs = [0.5 * np.abs(rng.multinomial(500, pv) / 500 - pv).sum() for _ in range(400)]
    assert theory.expected_tv_noise({0: 0.5, 1: 0.3, 2: 0.2}, 500) == pytest.approx(np.mean(tvs), rel=0.15)


def test_modules_never_import_streamlit():
    code = ("import sys; import specviz.teaching.charts, specviz.core.theory, specviz.teaching.render, specviz.teaching.rules, specviz.decoding.selfdraft; "
            "bad = [m for m in sys.modules if m == 'streamlit' or m.startswith('streamlit.')]; "
            "assert not bad, bad; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_verify_cost_dict_with_str_keys():
    assert theory.verify_ratio(5, {"1": 1.0, "2": 1.1, "16": 2.5}) == pytest.approx(1.1 + 0.1 * 3)
