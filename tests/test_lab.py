"""specviz.teaching.lab on tiny random models: round arithmetic, sweeps, verdicts, exactness helpers.

Rounds come from the real engine (tiny float64 Qwen2 models), so the written-out
arithmetic is checked against the decisions the engine actually made.
"""

from __future__ import annotations

import math

import pytest
import torch

from specviz import InvalidSetting, autoregressive_decode, speculative_decode
from specviz.teaching import charts, explain, lab
from specviz.core import measure
from specviz.teaching.experiments import agreement_along, first_token_trials
from specviz.data.records import Run
from specviz.decoding.sampling import logits_to_probs
from specviz.core.theory import expected_speedup, expected_tokens
from tiny import split_settings, tiny_lm
from specviz.core.settings import DecodeSettings

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 11]


def decode(i: int) -> str:
    return f"t{i}"


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=VOCAB), tiny_lm(1, vocab=VOCAB)  # target, draft


def spec(models, **kw) -> Run:
    target, draft = models
    args = dict(k=3, temperature=0.0, max_new_tokens=16, seed=0, eos_token_id=[])
    args.update(kw)
    settings, rest = split_settings(args)
    return speculative_decode(target, draft, PROMPT, settings, **rest)


# --- page 2: acceptance sweep ----------------------------------------------------------------------------
def test_acceptance_sweep_shape_alpha_and_reuse(models):
    target, draft = models
    prompts = {"a": PROMPT, "b": [9, 9, 9, 9, 9]}
    seen = []
    sweep = lab.acceptance_sweep(target, draft, prompts, [0.0, 1.0], DecodeSettings(k=2, max_new_tokens=6, seed=0),
                                 eos_token_id=[], progress=lambda m, f: seen.append(f))
    assert set(sweep) == {"a", "b"} and all(set(v) == {0.0, 1.0} for v in sweep.values())
    assert seen and seen[-1] == 1.0 and all(0 <= f <= 1 for f in seen if f is not None)
    table = lab.alpha_table(sweep)
    for d in prompts:
        for t, (a, se) in table[d].items():
            run = sweep[d][t]
            assert run.settings["label"] == d and len(run.token_ids) == 6
            assert a == pytest.approx(run.n_accepted / run.n_judged)
            assert 0 <= a <= 1 and se >= 0
    # cells already measured are kept (same objects), only the new temperature runs
    grown = lab.acceptance_sweep(target, draft, prompts, [0.0, 1.0, 0.5], DecodeSettings(k=2, max_new_tokens=6, seed=0),
                                 eos_token_id=[], existing=sweep)
    assert grown["a"][0.0] is sweep["a"][0.0] and grown["b"][1.0] is sweep["b"][1.0]
    assert 0.5 in grown["a"] and 0.5 not in sweep["a"]
    rows = lab.sweep_rows(grown)
    assert len(rows) == 6 and {r["domain"] for r in rows} == {"a", "b"}
    with pytest.raises(InvalidSetting):
        lab.acceptance_sweep(target, draft, {}, [0.0])


def test_same_model_as_draft_gives_alpha_one(models):
    target, _ = models
    sweep = lab.acceptance_sweep(target, target, {"x": PROMPT}, [0.0], DecodeSettings(k=3, max_new_tokens=8),
                                 eos_token_id=[])
    assert lab.alpha_table(sweep)["x"][0.0][0] == 1.0


def test_entropy_verdict_names_the_most_uncertain_domain(models):
    target, draft = models
    sweep = lab.acceptance_sweep(target, draft, {"a": PROMPT, "b": [1, 2, 3, 4]}, [0.0],
                                 DecodeSettings(k=2, max_new_tokens=8),
                                 eos_token_id=[])
    ents = {d: lab.mean_entropy(sweep[d][0.0]) for d in sweep}
    hi = max(ents, key=ents.get)
    text = lab.entropy_verdict(sweep, 0.0)
    assert f"least sure on **{hi}**" in text
    agree = lab.agreement_sweep(target, draft, {"a": PROMPT, "b": [1, 2, 3, 4]}, sweep)
    ents = {d: sum(agree[d][0.0].entropy) / len(agree[d][0.0].entropy) for d in agree}
    hi = max(ents, key=ents.get)
    assert f"least sure on **{hi}** (mean entropy {ents[hi]:.2f}" in lab.entropy_verdict(sweep, 0.0, agree)
    assert lab.entropy_verdict(sweep, 0.7) == ""  # nothing measured at that temperature


def test_agreement_along_with_the_target_as_draft_is_one(models):
    target, _ = models
    text = autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=10), eos_token_id=[]).token_ids
    for t in (0.0, 0.8):
        a = agreement_along(target, target, PROMPT, text, t)
        assert a.token_ids == text and len(a.match) == len(a.overlap) == len(a.entropy) == 10
        assert all(a.match) and a.overlap == pytest.approx([1.0] * 10)
        assert a.expected_alpha == pytest.approx(1.0)


def test_agreement_along_two_tokens_by_hand(models):
    target, draft = models
    text = [7, 30]
    a = agreement_along(target, draft, PROMPT, text, 0.7)
    # by hand: one uncached forward of each model over prompt + text; row len(PROMPT)-1+i predicts text[i]
    x = torch.tensor([PROMPT + text])
    with torch.no_grad():
        pl, ql = target(x).logits[0], draft(x).logits[0]  # (T, V)
    for i in range(2):
        row = len(PROMPT) - 1 + i
        p, q = torch.softmax(pl[row] / 0.7, -1), torch.softmax(ql[row] / 0.7, -1)
        assert a.overlap[i] == pytest.approx(float(sum(min(float(p[v]), float(q[v])) for v in range(VOCAB))), abs=1e-9)
        assert a.match[i] == (int(pl[row].argmax()) == int(ql[row].argmax()))
        assert a.entropy[i] == pytest.approx(float(-(p * p.log()).sum()), abs=1e-9)
    assert a.accept_chance == a.overlap and a.expected_alpha == pytest.approx(sum(a.overlap) / 2)
    g = agreement_along(target, draft, PROMPT, text, 0.0)
    assert g.accept_chance == [float(m) for m in a.match]  # greedy: accepted iff the argmaxes agree
    e = g.estimate()
    assert e.n == 2 and e.value == pytest.approx(sum(g.match) / 2)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_agreement_along_the_runs_text_sees_what_every_round_judged(models, temperature):
    """Each judged draft sits at a position of the run's own text: the decision (greedy) or the
    chance to accept Σ min(p, q) (sampling) there must be what agreement_along reads."""
    target, draft = models
    run = spec(models, k=3, temperature=temperature, max_new_tokens=20)
    a = agreement_along(target, draft, PROMPT, run.token_ids, temperature)
    pos, checked = 0, 0
    for r in run.rounds:
        for j, acc in enumerate(r.accepted):
            if temperature == 0:
                assert a.match[pos + j] == acc
            else:
                # the run's draft stepped one token at a time: equal up to float rounding
                assert a.overlap[pos + j] == pytest.approx(r.overlap[j], abs=1e-6)
            checked += 1
        pos += len(r.emitted)
    assert checked >= 5 and pos == len(run.token_ids)


def test_agreement_sweep_reads_each_runs_text_and_keeps_measured_cells(models):
    target, draft = models
    prompts = {"a": PROMPT, "b": [9, 9, 9, 9, 9]}
    sweep = lab.acceptance_sweep(target, draft, prompts, [0.0, 1.0], DecodeSettings(k=2, max_new_tokens=6),
                                 eos_token_id=[])
    agree = lab.agreement_sweep(target, draft, prompts, sweep)
    for d in prompts:
        for t, run in sweep[d].items():
            assert agree[d][t].token_ids == run.token_ids and agree[d][t].temperature == t
    again = lab.agreement_sweep(target, draft, prompts, sweep, existing=agree)
    assert again["a"][0.0] is agree["a"][0.0]
    table = lab.expected_table(agree)
    assert table["b"][1.0][0] == pytest.approx(agree["b"][1.0].expected_alpha)
    rows = lab.sweep_rows(sweep, agree)
    assert {"expected α (every position)", "counted α", "positions"} <= set(rows[0])
    assert rows[0]["positions"] == 6
    # the lesson's figures lead: both α's and the target's entropy, before any interval
    assert list(rows[0])[2:6] == ["expected α (every position)", "counted α", "mean target entropy (nats)",
                                  "tokens/pass"] and len(rows[0]) == len(lab.SWEEP_COLUMNS)


# --- page 3: speedup -------------------------------------------------------------------------------------
def test_k_sweep_rows_and_race_points(models):
    target, draft = models
    sw = lab.k_sweep(target, draft, PROMPT, [2, 1], DecodeSettings(max_new_tokens=6), eos_token_id=[])
    assert list(sw) == [1, 2]
    vc = {1: 1.0, 2: 1.1, 4: 1.3}
    rows = lab.k_sweep_rows(sw, 0.2, vc)
    for row in rows:
        cmp = sw[row["k"]]
        assert cmp.identical is True  # greedy: same text as the target alone
        a = cmp.spec.alpha
        assert row["predicted speedup"] == pytest.approx(expected_speedup(a, row["k"], 0.2, vc), abs=0.006)
        # against the model: the rounds after the one that also read the prompt; end to end: all of them
        steady = cmp.base.steady_s_per_token / cmp.spec.steady_s_per_token
        assert row["measured speedup"] == pytest.approx(steady, abs=0.006)
        assert row["end-to-end speedup"] == pytest.approx(cmp.speedup, abs=0.006)
        assert row["target passes"] == len(cmp.spec.rounds) == cmp.spec.target_passes
    assert lab.k_sweep_rows(sw, None)[0]["predicted speedup"] is None
    pts = lab.race_points(sw[2].spec)
    assert [n for _, n in pts] == sorted(n for _, n in pts) and pts[-1][1] == len(sw[2].spec.token_ids)
    assert pts[-1][0] == pytest.approx(sum(r.round_s for r in sw[2].spec.rounds))
    assert measure.engine_rate(sw[2].spec) == pytest.approx(pts[-1][1] / pts[-1][0])
    assert measure.pooled_alpha([c.spec for c in sw.values()]) == pytest.approx(
        sum(c.spec.n_accepted for c in sw.values()) / sum(c.spec.n_judged for c in sw.values()))


def test_compare_with_baseline_restricts_both_runs_to_the_shared_vocabulary():
    # a target with more embedding rows than the shared vocabulary: its extra ids must never be emitted
    target, draft = tiny_lm(0, vocab=VOCAB + 16), tiny_lm(1, vocab=VOCAB)
    with torch.no_grad():
        target.lm_head.weight[VOCAB:] = target.lm_head.weight[:VOCAB].abs().max() * 50  # padded rows would win
    cmp = lab.compare_with_baseline(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=8), eos_token_id=[],
                                    vocab=VOCAB)
    assert max(cmp.base.token_ids) < VOCAB and max(cmp.spec.token_ids) < VOCAB
    assert cmp.identical is True and cmp.speedup > 0


# --- page 5: exactness -----------------------------------------------------------------------------------
def test_exactness_verdict_and_diff_html(models):
    target, draft = models
    base = autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=10), eos_token_id=[])
    same = spec(models, max_new_tokens=10)
    assert same.token_ids == base.token_ids
    v = explain.exactness_verdict(same.token_ids, base, "float32", decode)
    assert v.kind == "identical" and "all 10 tokens" in v.text
    changed = list(base.token_ids)
    changed[4] = (changed[4] + 1) % VOCAB
    v = explain.exactness_verdict(changed, base, "bfloat16", decode)
    assert v.kind in ("near-tie", "differs") and "differ at token 5" in v.text
    top = base.rounds[4].p_top[0].probs
    assert (v.kind == "near-tie") == (top[0] - top[1] < 2e-2)
    assert "bfloat16" in v.text
    html = lab.diff_html(changed, base.token_ids, decode)
    assert html.count('data-state="first-difference"') == 1 and f"t{changed[4]}" in html
    assert 'data-state="first-difference"' not in lab.diff_html(base.token_ids, base.token_ids, decode)
    assert explain.exactness_verdict(base.token_ids[:7], base, "float32", decode).kind == "length"


def test_first_position_matches_the_models_and_the_trials(models):
    target, draft = models
    fp = lab.first_position(target, draft, PROMPT, temperature=1.0, top=VOCAB)
    with torch.no_grad():
        p = logits_to_probs(target(torch.tensor([PROMPT])).logits[0, -1].double(), 1.0)
        q = logits_to_probs(draft(torch.tensor([PROMPT])).logits[0, -1].double(), 1.0)
    assert fp.overlap == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-9)
    assert sum(fp.p.values()) == pytest.approx(1.0) and sum(fp.residual.values()) == pytest.approx(1.0)
    for i in fp.p:
        assert fp.p[i] == pytest.approx(float(p[i]), abs=1e-9)
        if q[i] >= p[i]:
            assert fp.residual[i] == 0.0  # the residual lives only where the target wants more
    # the engine's acceptance rate over many seeded trials agrees with Σ min(p, q)
    n = 3000
    trials = first_token_trials(target, draft, PROMPT, n=n, temperature=1.0, noise_reps=200)
    se = math.sqrt(fp.overlap * (1 - fp.overlap) / n)
    assert abs(trials.accepted / n - fp.overlap) < 4.5 * se
    from specviz.core.theory import total_variation

    assert total_variation(trials.p, trials.counts) <= trials.noise.limit  # same distribution as p
    assert trials.noise.n == n and trials.noise.expected == pytest.approx(trials.noise.mean, rel=0.1)
    fig = charts.fig_first_position(fp, decode)
    assert [t.name for t in fig.data] == ["target p", "draft q", "residual norm(max(0, p − q))"]
    with pytest.raises(InvalidSetting):
        lab.first_position(target, draft, [])


def test_the_expected_noise_matches_simulation_on_a_small_vocabulary_and_on_a_long_tail():
    import math

    from specviz.core.theory import expected_tv_noise

    from specviz.core.theory import simulate_tv_noise

    p = torch.softmax(torch.randn(64, generator=torch.Generator().manual_seed(0)) * 2, 0).double()
    noise = simulate_tv_noise(p.numpy(), 2000, reps=300)
    mean = noise.mean
    assert mean == pytest.approx(expected_tv_noise({i: float(v) for i, v in enumerate(p)}, 2000), rel=0.05)
    assert noise.expected == pytest.approx(mean, rel=0.05) and noise.limit > noise.p95 > mean
    tail = torch.full((50_000,), 0.5 / 50_000, dtype=torch.float64)
    tail[0] = 0.5  # half the mass on one token, half spread thin: every rare draw is a new token
    mean = simulate_tv_noise(tail.numpy(), 2000, reps=50).mean
    assert mean > 0.4 and mean == pytest.approx(expected_tv_noise(tail, 2000), rel=0.05)
    # the same tail lumped into one bucket, or a normal approximation per token, is far off
    assert mean > 3 * expected_tv_noise({0: 0.5}, 2000)
    normal = 0.5 * sum(math.sqrt(2 * q * (1 - q) / (math.pi * 2000)) for q in tail.tolist())
    assert abs(normal - mean) > 0.5 * mean


# --- page 6: theory ----------------------------------------------------------------------------------------
def test_seed_table_reproduces_the_quoted_numbers():
    rows = lab.seed_table(4)
    assert [r["α"] for r in rows] == [0.5, 0.7, 0.8, 0.9]
    for r in rows:
        assert r["(1 − α^(k+1)) / (1 − α)"] == pytest.approx(expected_tokens(r["α"], 4), abs=1e-3)
        assert r["matches (to 0.05)"] == "yes"
    assert "quoted in claim 8" not in lab.seed_table(3)[0]

