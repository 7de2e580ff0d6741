"""specviz.teaching.explain: what the app says in words, checked against the numbers it was given.

Rounds come from the real engine on tiny float64 models (the fixtures of
test_lab), so each sentence and table row is checked against the decisions the
engine actually made; verdicts are checked on hand-made measurements.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz import autoregressive_decode, speculative_decode
from specviz.teaching import explain
from specviz.core import measure
from specviz.data import runfile
from specviz.core.errors import InvalidSetting
from specviz.teaching.experiments import BandwidthCheck
from specviz.decoding.sampling import accept_token
from specviz.core.theory import expected_speedup
from test_lab import PROMPT, VOCAB, decode, spec
from tiny import tiny_lm
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=VOCAB), tiny_lm(1, vocab=VOCAB)  # target, draft (test_lab's pair)


# --- the acceptance rule, said one way ---------------------------------------------------
def test_the_worded_rule_is_the_engines_rule_including_ties():
    """ACCEPT_TEST (u < min(1, p/q)) decides exactly as sampling.accept_token, ties included."""
    cases = [(0.5, 0.25, 0.5), (0.0, 0.0, 0.3), (0.999, 0.7, 0.7), (0.3, 0.9, 0.1), (0.2, 0.1, 0.5), (0.5, 0.1, 0.2)]
    for u, p, q in cases:
        worded = u < min(1.0, p / q)
        assert bool(accept_token(u, p, q)) == worded, (u, p, q)
        line = explain.accept_check(u, p / q, worded)
        assert line.startswith(f"{u:.3f} {'<' if worded else '≥'} min(1, p/q)")
    assert explain.ACCEPT_TEST in explain.ACCEPT_RULE


def test_no_page_teaches_another_acceptance_test():
    """The app, the pages, the package, the README and docs/ never state the test with ≤ (the code's is strict)."""
    files = [ROOT / "app.py", ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "pages").rglob("*.py"),
             *(ROOT / "specviz").rglob("*.py")]
    bad = [f"{f.name}: {m.group(0)}" for f in files
           for m in re.finditer(r"u\s*(≤|<=)\s*(min\(1, ?p/q\)|p/q)", f.read_text(encoding="utf-8"))]
    assert not bad, bad


# --- one round ---------------------------------------------------------------------------------
def test_round_rows_without_the_extra_token_has_one_row_per_draft_with_the_overlap(models):
    run = spec(models, temperature=1.0, seed=3, max_new_tokens=24)
    for r in run.rounds:
        rows = explain.round_rows(r, decode, extra=False)
        assert len(rows) == r.k
        assert [row["Σ min(p, q) = chance to accept"] for row in rows] == [round(o, 4) for o in r.overlap]
        assert len(explain.round_rows(r, decode)) == r.k + (1 if r.extra_kind else 0)
    for r in spec(models, max_new_tokens=24).rounds:  # greedy: an argmax match, so no chance column
        assert all(explain.CHANCE not in row and "target argmax" in row for row in explain.round_rows(r, decode))


def test_round_summary_counts_what_the_round_did(models):
    run = spec(models, k=4, max_new_tokens=40)
    for r in run.rounds:
        s = explain.round_summary(r, decode)
        assert f"**Round {r.index + 1}.**" in s and f"{r.n_accepted} accepted" in s
        assert f"**{len(r.emitted)} new token" in s
        assert ("rejected" in s) == r.rejected and ("bonus" in s) == (r.extra_kind == "bonus")


def test_tree_round_summary_counts_and_times_what_the_round_did(models):
    from specviz.decoding.tree import tree_decode

    rounds = [r for t in (0.0, 1.0)
              for r in tree_decode(*models, PROMPT, DecodeSettings(temperature=t, max_new_tokens=40, seed=3),
                                   budget=8, branch=2, eos_token_id=[]).rounds]
    seen = set()
    for r in rounds:
        s = explain.tree_round_summary(r, decode)
        assert s.startswith(f"**Round {r.index + 1}.** Drafted {explain.count(r.n_nodes, 'node')} in "
                            f"{len(r.draft_s)} draft pass")
        # each step's own time: every draft pass summed, and the one verify pass
        assert f"({sum(r.draft_s) * 1000:.0f} ms)" in s and f"**one** pass ({r.verify_s * 1000:.0f} ms" in s
        assert ("also read the prompt" in s) == (r.prefill_tokens > 0)
        assert (f"a path of {r.n_accepted} accepted" in s) == (r.n_accepted > 0)
        assert ("no node accepted" in s) == (r.n_accepted == 0)
        assert ("bonus" in s) == (r.extra_kind == "bonus") and ("correction" in s) == (r.extra_kind == "correction")
        assert f"**{explain.count(len(r.emitted), 'new token')}** for one target pass" in s
        seen |= {r.extra_kind, "none accepted" if r.n_accepted == 0 else "some accepted"}
    assert {"bonus", "correction", "none accepted", "some accepted"} <= seen  # the rounds cover every case


# --- where the time went ----------------------------------------------------------------------
def test_time_breakdown_quotes_measures_c(models):
    target, draft = models
    run = spec(models, k=3, max_new_tokens=16)
    from specviz.decoding.engine import autoregressive_decode

    base = runfile.baseline_summary(run,
                                    autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=16),
                                                          eos_token_id=[]),
                                   1.0, None)
    text = explain.time_breakdown(run, base, "int8")
    steps = [measure.draft_step_s(r) for r in run.steady_rounds]
    c = measure.c_ratio(steps, base["base_step_s"])
    assert f"(this run's c = {c:.2f} of a target pass, int8 draft)" in text
    beside = explain.time_breakdown(run, base, "int8", profile_c=0.125)  # the profile's c, said beside the run's
    assert f"int8 draft; the profile's c, from single steps timed apart: 0.12)" in beside
    assert f"{1000 * measure.median(r.verify_s for r in run.steady_rounds):.0f} ms (median)" in text
    assert explain.time_breakdown(run, {**base, "base_target_passes": 0}) is None
    one = speculative_decode(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=1),
                             eos_token_id=[])  # only the prompt round
    assert explain.time_breakdown(one, base) is None


def test_time_breakdown_says_what_waits_for_a_core_were_left_out(models):
    import dataclasses

    from specviz.decoding.engine import autoregressive_decode

    target, _ = models
    run = spec(models, k=3, max_new_tokens=16)
    base = runfile.baseline_summary(run,
                                    autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=16),
                                                          eos_token_id=[]),
                                   1.0, None)
    quiet = dataclasses.replace(run, rounds=[dataclasses.replace(r, stalled_s=0.0) for r in run.rounds])
    # zeroed: the real run's own waits are whatever this machine's load made them (23 ms of a tiny run, quiet)
    assert "Not counted" not in explain.time_breakdown(quiet, {**base, "base_stalled_s": 0.0})
    waited = dataclasses.replace(run, rounds=[dataclasses.replace(r, stalled_s=r.round_s) for r in run.rounds])
    text = explain.time_breakdown(waited, {**base, "base_stalled_s": 2 * base["base_decode_s"]})
    assert f"Not counted: {1000 * waited.stalled_s:.0f} ms of the run and {2000 * base['base_decode_s']:.0f} ms " \
           "of the target alone, while other work" in text
    assert explain.stalled_note(2.5, 4.0).startswith("Not counted: 2.5 s of the run, while")
    small = dataclasses.replace(run, rounds=[dataclasses.replace(r, stalled_s=0.01 * r.round_s) for r in run.rounds])
    quiet_base = {**base, "base_stalled_s": 0.0}
    assert "Not counted" not in explain.time_breakdown(small, quiet_base)  # 1 %: a quiet machine's own
    assert explain.stalled_note(0.0, 1.0, 0.3, 3.0) == explain.stalled_note(0.0, 1.0, 0.3, 3.0) is not None
    assert explain.stalled_note(0.0, 1.0, "x", 3.0) is None  # a file's bad value says nothing


def test_round_rows_greedy_match_engine_decisions(models):
    run = spec(models)
    for r in run.rounds:
        rows = explain.round_rows(r, decode)
        assert len(rows) == r.k + (1 if r.extra_kind else 0)
        for i, row in enumerate(rows[:r.k]):
            if i < len(r.accepted):
                want = "yes" if r.drafted[i] == r.target_argmax[i] else "no"
                assert row["test"] == f"draft == argmax? {want}"
                assert row["decision"] == ("accept ✓" if r.accepted[i] else "reject ✗")
            else:
                assert row["test"] == "not judged"
                assert row["decision"].startswith("discarded")
        if r.extra_kind:
            assert rows[-1]["decision"] == f"{r.extra_kind} ‘t{r.extra_id}’"


def test_round_rows_sampling_arithmetic_is_the_rule(models):
    run = spec(models, temperature=1.0, seed=3, max_new_tokens=24)
    checked = 0
    for r in run.rounds:
        for i, row in enumerate(explain.round_rows(r, decode)[:len(r.accepted)]):
            # the decision must follow from the numbers written in the row: u < min(1, p/q)
            p, q, u = r.p_drafted[i], r.q_drafted[i], row["u"]
            assert row["p/q"] == pytest.approx(p / q, rel=1e-3, abs=1e-4)
            assert (r.u[i] < min(1.0, p / q)) == r.accepted[i]
            assert ("<" in row["test"]) == r.accepted[i] and ("≥" in row["test"]) == (not r.accepted[i])
            assert u == pytest.approx(r.u[i], abs=1e-4)
            checked += 1
    assert checked >= 5


def test_count_says_one_in_the_singular_and_every_other_number_in_the_plural():
    assert explain.count(1, "round") == "1 round"
    assert [explain.count(n, "round") for n in (0, 2, 12)] == ["0 rounds", "2 rounds", "12 rounds"]
    assert explain.count(3, "target pass", "target passes") == "3 target passes"
    assert explain.count(1, "target pass", "target passes") == "1 target pass"
    assert explain.count(2.5, "token") == "2.5 tokens" and explain.count(1.0, "token") == "1 token"
    assert explain.rounds_are_passes(1) == "1 round = 1 target pass"
    assert explain.rounds_are_passes(3) == "3 rounds = 3 target passes"


def test_other_settings_names_each_setting_that_differs_and_nothing_when_none_does():
    assert explain.other_settings([]) is None
    assert explain.other_settings(["seed"]).startswith("Measured with a different seed from the one above;")
    assert explain.other_settings(["prompt", "seed"]).startswith("Measured with a different prompt and seed from the "
                                                                 "ones above;")
    assert "a different prompt, k and seed from the ones" in explain.other_settings(["prompt", "k", "seed"])
    assert explain.other_settings(["seed"], button="First round") == (
        "This run was started with a different seed from the one above; press **First round** to start one with "
        "these.")  # a run stepped round by round
    assert explain.other_settings([], button="First round") is None
    assert [explain.and_list(w) for w in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a and b", "a, b and c"]


def test_round_story_tells_every_decision_and_the_extra_token(models):
    run = spec(models, temperature=1.0, seed=1, max_new_tokens=24)
    for r in run.rounds:
        story = explain.round_story(r, decode)
        text = "\n".join(story)
        assert text.count("**accept**") == r.n_accepted
        assert text.count("**reject**") == (1 if r.rejected else 0)
        assert f"emitted **{len(r.emitted)}** token{'s' * (len(r.emitted) != 1)} for" in story[-1]
        assert "(s)" not in text
        if r.extra_kind == "correction":
            assert "norm(max(0, p − q))" in text and f"‘t{r.extra_id}’" in text
        if r.extra_kind == "bonus":
            assert "**bonus**" in text


def test_zero_accept_note_exactly_when_nothing_was_accepted(models):
    run = spec(models, k=4, max_new_tokens=40)
    zeros = [r for r in run.rounds if r.n_accepted == 0]
    some = [r for r in run.rounds if r.n_accepted > 0]
    assert zeros, "random tiny models should disagree at least once"
    for r in zeros:
        note = explain.zero_accept_note(r, decode)
        assert note is not None and "claim 5" in note
        assert len(r.emitted) == 1 and f"‘t{r.emitted[0]}’" in note  # still one token
    for r in some:
        assert explain.zero_accept_note(r, decode) is None


MARKUP_TOKENS = ["**", "_", "`", "$x$", "[x](http://evil.example)", "<b>", "~~", "# h"]  # common in code


def markup_tags(text: str) -> list[str]:
    """The HTML tags a CommonMark renderer makes of a markdown sentence (Streamlit renders them so)."""
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt
    return re.findall(r"</?\w+", MarkdownIt().render(text))


def test_a_tokens_text_changes_no_markup_in_the_sentences(models):
    """round_story, zero_accept_note and exactness_verdict go to st.markdown: tokens such as ‘**’, ‘_’ or ‘`’
    (common in code) must show as themselves, so each sentence has the same markup as with plain-word tokens."""
    target, _ = models
    hostile = lambda i: MARKUP_TOKENS[i % len(MARKUP_TOKENS)]  # noqa: E731
    run = spec(models, temperature=1.0, seed=1, max_new_tokens=24)
    greedy = spec(models, k=4, max_new_tokens=40)
    base = autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=10), eos_token_id=[])
    changed = list(base.token_ids)
    changed[4] = (changed[4] + 1) % VOCAB
    sentences = [lambda d, r=r: explain.round_story(r, d) for r in run.rounds + greedy.rounds]
    sentences += [lambda d, r=r: [explain.zero_accept_note(r, d)] for r in greedy.rounds if r.n_accepted == 0]
    sentences += [lambda d: [explain.exactness_verdict(changed, base, "float32", d).text]]
    assert len(sentences) > len(run.rounds) + len(greedy.rounds) + 1  # a zero-accept note was among them
    for say in sentences:
        for plain, marked in zip(say(decode), say(hostile)):
            assert markup_tags(marked) == markup_tags(plain), marked
    story = "\n".join(explain.round_story(run.rounds[0], hostile))
    assert "‘\\*\\*’" in story  # shown literally: ‘**’ escaped, not dropped


def test_draft_equal_to_target_accepts_all_and_gets_bonus(models):
    target, _ = models
    run = speculative_decode(target, target, PROMPT, DecodeSettings(k=3, temperature=0.0, max_new_tokens=12),
                             eos_token_id=[])
    r = run.rounds[0]
    assert r.n_accepted == 3 and r.extra_kind == "bonus"
    assert "All 3 drafts accepted" in "\n".join(explain.round_story(r, decode))


def test_speedup_verdict_branches():
    assert "Close" in explain.speedup_verdict(2.0, 2.1, 0.1, 0.8)
    assert "Slower than predicted" in explain.speedup_verdict(1.0, 2.0, 0.1, 0.8)
    assert "Below 1×" in explain.speedup_verdict(0.7, 0.75, 0.5, 0.3)


def test_forward_cost_verdict_reads_the_measurement():
    flat = {1: [0.010, 0.011], 2: [0.0105], 4: [0.011], 8: [0.012], 16: [0.018]}
    v = explain.forward_cost_verdict(flat, "cpu", "bfloat16")
    assert v.kind == "memory-bound" and v.value == pytest.approx(0.0105 / 0.0105, rel=0.1)
    assert "(1.00×)" in v.text and "almost free" in v.text
    prop = {1: [0.01], 2: [0.02], 4: [0.04], 8: [0.08], 16: [0.16]}
    v = explain.forward_cost_verdict(prop, "cpu", "float32")
    assert v.kind == "compute-bound" and v.value == pytest.approx(2.0)
    assert "honest exception" in v.text and "matrix–matrix" in v.text and "bfloat16" in v.text
    sub = {1: [0.01], 2: [0.02], 4: [0.025], 8: [0.03], 16: [0.05]}  # CPU GEMM: 2× at once, then sublinear
    v = explain.forward_cost_verdict(sub, "cpu", "float32")
    assert v.kind == "compute-bound" and "grew more slowly (5.00× at 16)" in v.text
    odd = {1: [0.01], 2: [0.03], 16: [0.012]}
    v = explain.forward_cost_verdict(odd)
    assert v.kind == "irregular" and "16 tokens cost only 1.20×" in v.text
    mid = {1: [0.01], 2: [0.015], 4: [0.02]}
    assert explain.forward_cost_verdict(mid).kind == "partly memory-bound"
    with pytest.raises(InvalidSetting):
        explain.forward_cost_verdict({2: [0.1], 4: [0.2]})


def test_dtype_comparison_explains_which_was_faster():
    text = explain.dtype_comparison({"float32": {1: [0.05], 2: [0.1]}, "bfloat16": {1: [0.2], 2: [0.21]}})
    assert "fastest in float32" in text and "slower" in text
    text = explain.dtype_comparison({"float32": {1: [0.2], 2: [0.21]}, "bfloat16": {1: [0.1], 2: [0.1]}})
    assert "fastest in bfloat16" in text and "got quicker" in text
    assert explain.dtype_comparison({"float32": {1: [0.1], 2: [0.2]}}) == ""


def test_bandwidth_verdict_compares_prediction_and_measurement():
    big = 3 * 2**30
    close = explain.bandwidth_verdict(BandwidthCheck(big, 20e9, big / 20e9, 1.1 * big / 20e9))
    assert close.kind == "close" and close.value == pytest.approx(1.1)
    slow = explain.bandwidth_verdict(BandwidthCheck(big, 20e9, big / 20e9, 3 * big / 20e9))
    assert slow.kind == "slower" and "3.00×" in slow.text
    fast = explain.bandwidth_verdict(BandwidthCheck(2**20, 20e9, 2**20 / 20e9, 0.1 * 2**20 / 20e9))
    assert fast.kind == "faster" and "caches" in fast.text
    assert explain.format_bytes(3 * 2**30) == "3.0 GiB" and explain.format_bytes(512) == "512 B"


def test_batch_verdict_finds_the_end_of_the_flat_part():
    t = {(1, 1): [0.010], (1, 2): [0.010], (1, 4): [0.011], (4, 4): [0.030], (8, 4): [0.060]}
    v = explain.batch_verdict(t)
    assert v.value == 4 and "compute-bound" in v.text
    assert explain.batch_verdict({(1, 1): [0.01], (1, 2): [0.011]}).text.count("still in the flat part") == 1
    assert "no flat part" in explain.batch_verdict({(1, 1): [0.01], (2, 1): [0.03]}).text


def test_tv_verdict_branches():
    from specviz.core.theory import TVNoise

    noise = TVNoise(2000, tuple(0.080 + 0.001 * i for i in range(-10, 11)), 0.080)  # mean 0.080, sd ~0.006
    ok = explain.tv_verdict(0.079, noise, 900, 0.45)
    assert ok.kind == "within noise" and ok.value == 0.079
    assert "agree within noise" in ok.text and "900/2000" in ok.text and "0.450" in ok.text
    assert "0.080 on average" in ok.text and "21 times" in ok.text
    tail = explain.tv_verdict(0.0905, noise)  # above every sampling, but within the limit (mean + 4 sd)
    assert noise.p95 < 0.0905 <= noise.limit
    assert tail.kind == "within noise" and "one run in 20" in tail.text and "agree within noise" not in tail.text
    far = explain.tv_verdict(0.3, noise)
    assert far.kind == "more than noise" and "a real difference" in far.text
    flat = TVNoise(2000, (0.0, 0.0, 0.0), 0.0)  # p on one token: noise never moves the TV
    assert explain.tv_verdict(0.01, flat).kind == "more than noise" and "above every sampling" in \
        explain.tv_verdict(0.01, flat).text


def test_an_exact_sampler_is_almost_never_called_wrong_and_a_lossy_rule_always_is():
    # The verdict's yardstick (noise of 2000 draws from p, 200 samplings) against 2000 further samplings of
    # exact draws from p: at the 95th percentile, as before, one in 20 was called "more than noise".
    from specviz.core.theory import TVNoise, simulate_tv_noise

    rng = torch.Generator().manual_seed(0)
    z = torch.randn(5000, generator=rng)
    p = torch.softmax(z * 3, 0).double().numpy()  # a long tail, like a vocabulary
    noise = simulate_tv_noise(p, 2000)
    assert isinstance(noise, TVNoise)
    exact = simulate_tv_noise(p, 2000, reps=2000, seed=7).tvs
    flagged = [explain.tv_verdict(tv, noise).kind == "more than noise" for tv in exact]
    assert sum(flagged) <= 4  # under 0.2 %; the 95th percentile flagged 112
    # two broken rules, with a draft surer than the target (Σ min(p, q) = 0.57): one keeps every draft (its
    # output is q), one draws the correction from p instead of the residual (min(p, q) + (1 − Σ min) p)
    q = torch.softmax(z * 4.8 + 0.5 * torch.randn(5000, generator=rng), 0).double().numpy()
    m = np.minimum(p, q)
    for wrong in (q, m + (1 - m.sum()) * p):
        for seed in range(10):
            f = np.bincount(np.random.default_rng(seed).choice(p.size, 2000, p=wrong / wrong.sum()), minlength=p.size)
            assert explain.tv_verdict(0.5 * float(np.abs(p - f / 2000).sum()), noise).kind == "more than noise"


def test_theory_summary_states_speedup_and_best_k():
    text = explain.theory_summary(0.8, 4, 0.1, (5, 2.46))
    assert f"{expected_speedup(0.8, 4, 0.1):.2f}×" in text and "best k at these α and c is **5**" in text
    assert "Below 1×" in explain.theory_summary(0.1, 4, 0.9, (1, 0.6))
    assert "largest k tried" not in text
    # at the bound of the k searched, the best k is only the best tried, and the words say so
    from specviz.core import theory

    best = theory.best_k(0.99, 0.01, k_max=16)
    assert best[0] == 16 and best[1] > theory.expected_speedup(0.99, 15, 0.01)
    edge = explain.theory_summary(0.99, 4, 0.01, best, k_max=16)
    assert "is **16** (" in edge and "the largest k tried here: the prediction still rises at k = 16" in edge


def test_a_sweep_whose_best_is_its_largest_k_says_the_best_may_lie_beyond():
    assert explain.sweep_edge_note(6, 8) == "" and explain.sweep_edge_note(1, 12) == ""
    note = explain.sweep_edge_note(8, 8)
    assert note.startswith("k = 8 is the largest k this sweep tried") and "may lie beyond it" in note
    assert "k = 12 is the largest" in explain.sweep_edge_note(12, 12)


def test_gpu_advice_only_where_a_pair_lost_on_a_gpu():
    from specviz.decoding import models

    seven = models.gpu_suggestion("qwen2.5-coder-embedded", "models.yaml")
    assert explain.gpu_advice("cpu", 0.8, seven) is None  # on a CPU the draft's size is what it costs
    assert explain.gpu_advice("cuda:0", 1.3, seven) is None  # it won
    assert explain.gpu_advice("cuda:0", float("nan"), seven) is None
    text = explain.gpu_advice("cuda:0", 0.93, seven)
    assert "0.93×" in text and "qwen2.5-0.5b-7b" in text and "Qwen2.5 7B Instruct" in text
    assert "models.yaml" in explain.gpu_advice("cuda", 0.9, None)


def test_the_run_curve_note_says_what_the_dashed_curve_is_and_which_side_the_run_fell():
    from specviz.core.theory import expected_tokens_over

    ks = [11, 10, 27]
    at = expected_tokens_over(0.96, ks)
    above = explain.run_curve_note(4, ks, "best", {"alpha": 0.96, "tpp": at + 2.0, "tpp_err": 1.0})
    assert "best-k chooser set (k from 10 to 27, 16.0 on average)" in above and "k = 4 (sidebar)" in above
    assert "kept more than the formula says" in above and "where the drafts were sure" in above
    # within its error of the curve: nothing to explain
    near = explain.run_curve_note(4, ks, "best", {"alpha": 0.96, "tpp": at + 0.5, "tpp_err": 1.0})
    assert "diamond" in near and "kept more" not in near
    # a fixed k that is not the sidebar's any more: no policy to credit
    fixed = explain.run_curve_note(4, [6, 6], "fixed", {"alpha": 0.5, "tpp": 5.0, "tpp_err": 0.1})
    assert "this run's rounds (k = 6 in each)" in fixed and "kept more" in fixed and "drafts were sure" not in fixed
    # nothing judged yet: no diamond to speak of
    none = explain.run_curve_note(4, [3], "best", {"alpha": float("nan"), "tpp": 1.0, "tpp_err": 0.0})
    assert "once a drafted token has been judged" in none and "diamond" not in none


def test_the_baseline_note_says_when_a_reused_timing_was_measured():
    assert explain.ago(2) == "just now" and explain.ago(40) == "40 s ago"
    assert explain.ago(125) == "2 min ago" and explain.ago(2 * 3600) == "2 h ago"
    assert explain.baseline_note(None) == "measured right after the run, warmed up, same settings"
    note = explain.baseline_note(125)
    assert note.startswith("measured 2 min ago on this server and reused for this run")


def test_the_waiting_notice_gives_the_place_and_the_wait_when_known():
    assert explain.queue_wait(2).startswith("Waiting for the device: 2 sessions ahead of you. ")
    assert explain.queue_wait(0, 3.0).startswith("Waiting for the device: the device is busy. ")
    assert explain.queue_wait(3, 4.25).startswith(
        "Waiting for the device: 3 sessions ahead of you, about 4.2 s by their last turns on the device. ")


def test_a_speedup_names_what_it_is_against():
    """Every speedup is against one baseline: the comparison names the target alone's precision (an int8 target's
    weights, else its dtype), and a file that does not say falls back to the run's dtype."""
    from specviz.teaching import explain

    assert explain.target_alone({"target": "int8"}, "float32") == "the int8 target alone"
    assert explain.target_alone({}, "float32") == "the float32 target alone"
    assert explain.target_alone({}) == "the target alone"


def test_k_says_whether_it_is_the_setting_or_the_start_and_what_was_drafted():
    from specviz.teaching import explain

    assert explain.k_used("fixed", 4, 3.75) == "k = 4 set · 3.8 drafted a round on average"
    assert explain.k_used("adaptive", 4, 5.0).startswith("k starts at 4 ·")
    assert explain.k_used("best", 4, 12.0).startswith("k starts at 4 ·")
def test_a_runs_header_says_each_setting_once():
    """A replayed recording's title already names its mode and k ("… · greedy · k=4 · <pair> (…)"): the header
    leaves those out and keeps the rest; with no title, every setting is said."""
    from specviz.teaching import explain

    parts = ["drafter: int8 draft model", explain.k_words(4, "fixed"), "greedy", "seed 0"]
    title = "The capital of France · greedy · k=4 · qwen2.5-coder-embedded (cpu, float32, int8 draft)"
    assert explain.said_once(parts, title) == ["drafter: int8 draft model", "seed 0"]
    assert explain.said_once(parts) == parts
    assert explain.said_once(parts, "my-run.json") == parts  # a title that names no setting leaves them all
