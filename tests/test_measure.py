"""specviz.core.measure: every measured figure, checked against its definition on synthetic records.

Rounds are plain data (test_kpolicy.make_round), so each figure is worked out by
hand here and compared with what measure computes; one test also runs the engine
on tiny models and checks that the figures the pages and the bench read agree
with measure's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest

from specviz.tools import bench
from specviz.core import measure
from specviz.core.errors import InvalidSetting
from specviz.data.records import Run
from test_kpolicy import make_round


def run_of(rounds, tokens: int | None = None, decode_s: float | None = None) -> Run:
    n = sum(len(r.emitted) for r in rounds) if tokens is None else tokens
    return Run(mode="speculative", prompt_ids=[1] * 10, token_ids=[1] * n, rounds=list(rounds), settings={},
               stop_reason="max_new_tokens", prefill_s=0.0,
               decode_s=sum(r.round_s for r in rounds) if decode_s is None else decode_s,
               target_passes=len(rounds), draft_passes=sum(r.k for r in rounds))


def prompt_round(r):
    return dataclasses.replace(r, prefill_tokens=9)


# --- α -----------------------------------------------------------------------------
def test_pooled_alpha_is_all_accepted_over_all_judged():
    a = run_of([make_round(4, 4), make_round(4, 1)])  # 5 accepted of 4 + 2 judged
    b = run_of([make_round(2, 0)])  # 0 of 1 judged
    assert measure.pooled_alpha([a, b]) == pytest.approx(5 / 7)
    assert measure.pooled_alpha([a]) == pytest.approx(a.alpha)
    assert measure.rounds_alpha([*a.rounds, *b.rounds]) == pytest.approx(5 / 7)
    assert math.isnan(measure.pooled_alpha([]))


def test_alpha_estimate_intervals():
    e = measure.alpha_estimate(80, 100)
    assert e.value == 0.8 and e.n == 100
    assert e.stderr == pytest.approx(0.04)
    assert e.lo < 0.8 < e.hi and e.lo == pytest.approx(0.7112, abs=1e-3) and e.hi == pytest.approx(0.8666, abs=1e-3)
    n = measure.alpha_estimate(80, 100, method="normal")
    assert n.lo == pytest.approx(0.8 - 1.96 * 0.04) and n.hi == pytest.approx(0.8 + 1.96 * 0.04)
    # Wilson stays inside [0, 1] and is not degenerate at 100%
    w = measure.alpha_estimate(10, 10)
    assert w.hi == 1.0 and w.lo < 1.0
    assert math.isnan(measure.alpha_estimate(0, 0).value)
    with pytest.raises(InvalidSetting):
        measure.alpha_estimate(5, 3)


def test_every_alpha_is_accepted_over_judged():
    assert measure.alpha(3, 4) == 0.75 and math.isnan(measure.alpha(0, 0))
    assert measure.alpha_posterior(0, 0, 2.0, 2.0) == 0.5  # the prior alone
    assert measure.alpha_posterior(80, 100, 1.0, 1.0) == pytest.approx(81 / 102)


# --- c -----------------------------------------------------------------------------
def test_draft_steps_leave_out_the_prompt_round_and_count_the_round_after_a_bonus():
    first = prompt_round(make_round(4, 4, draft_step=9.0))
    after_bonus = make_round(4, 2, draft_step=0.3)
    assert measure.draft_step_s(first) is None  # its passes also read the prompt
    assert measure.draft_step_s(after_bonus) == pytest.approx(0.3)  # the rule: counted like any other
    assert measure.draft_step_s(make_round(0, 0)) is None  # nothing drafted
    assert measure.draft_step_s(dataclasses.replace(after_bonus, draft_s=0.0)) is None  # no draft model


def test_c_from_runs_is_median_draft_step_over_median_target_pass():
    spec = run_of([prompt_round(make_round(4, 4, draft_step=9.0)), make_round(4, 4, draft_step=0.2),
                   make_round(4, 2, draft_step=0.3), make_round(3, 3, draft_step=0.1), make_round(2, 1, draft_step=0.9)])
    base = run_of([prompt_round(make_round(0, 0, verify=50.0))]
                  + [make_round(0, 0, verify=v) for v in (1.0, 2.0, 3.0, 10.0)])
    assert measure.c_from_runs([spec], [base]) == pytest.approx(0.25 / 2.5)  # medians, not means (0.375 / 4)
    assert math.isnan(measure.c_from_runs([], [base]))  # nothing timed: no c


def test_c_ratio_takes_medians_and_refuses_a_zero_target_pass():
    assert measure.c_ratio([0.002, 0.003, 0.0025], [0.02, 0.025, 0.03]) == pytest.approx(0.1)
    assert measure.c_ratio(0.01, 0.05) == pytest.approx(0.2)
    assert measure.c_ratio([0.01, None, float("nan")], [0.05]) == pytest.approx(0.2)  # unmeasured values skipped
    assert math.isnan(measure.c_ratio([], [0.05]))
    with pytest.raises(InvalidSetting):
        measure.c_ratio(0.01, 0.0)


def test_verify_ratios_are_relative_to_the_smallest_pass():
    r = measure.verify_ratios({1: [0.01, 0.012, 0.011], 4: [0.0121], 16: [0.022]})
    assert r == {1: pytest.approx(1.0), 4: pytest.approx(1.1), 16: pytest.approx(2.0)}
    assert measure.verify_ratios({2: [0.02], 8: [0.03]}) == {2: 1.0, 8: pytest.approx(1.5)}
    with pytest.raises(InvalidSetting):
        measure.verify_ratios({})


# --- speedup and rates ----------------------------------------------------------------
def test_end_to_end_and_steady_speedup():
    # speculative: a 5 s prompt round with 3 tokens, then 4 rounds of 1 s with 4 tokens each
    spec = run_of([prompt_round(make_round(2, 2, draft_step=0.0, verify=5.0))]
                  + [make_round(3, 3, draft_step=0.0, verify=1.0) for _ in range(4)])
    # target alone: a 6 s prompt pass, then 19 passes of 0.5 s, one token each
    base = run_of([prompt_round(make_round(0, 0, draft_step=0.0, verify=6.0))]
                  + [make_round(0, 0, draft_step=0.0, verify=0.5) for _ in range(19)])
    ns, nb = len(spec.token_ids), len(base.token_ids)
    assert measure.speedup(spec, base) == pytest.approx((base.decode_s / nb) / (spec.decode_s / ns))
    steady = (19 * 0.5 / 19) / (4 * 1.0 / 16)  # per token, the prompt rounds left out
    assert measure.steady_speedup(spec, base) == pytest.approx(steady)
    one = run_of([prompt_round(make_round(2, 2, verify=5.0))])  # only the prompt round: end to end instead
    assert measure.steady_speedup(one, base) == pytest.approx(measure.speedup(one, base))


def test_rates():
    assert measure.tokens_per_s(10, 2.0) == 5.0 and math.isnan(measure.tokens_per_s(10, 0.0))
    run = run_of([make_round(3, 3, draft_step=0.1, verify=1.0), make_round(3, 1, draft_step=0.1, verify=1.0)],
                 decode_s=10.0)  # pauses between rounds: decode_s is longer than the rounds
    assert run.tokens_per_s == pytest.approx(len(run.token_ids) / 10.0)
    assert measure.engine_rate(run) == pytest.approx(len(run.token_ids) / sum(r.round_s for r in run.rounds))
    assert measure.speedup_from(2.0, 0.5) == 4.0
    assert math.isnan(measure.speedup_from(2.0, 0.0)) and math.isnan(measure.speedup_from(float("nan"), 1.0))


def test_median_skips_what_was_not_measured():
    assert measure.median([3, None, 1, float("inf"), 2]) == 2 and measure.median(4.0) == 4.0
    assert math.isnan(measure.median([None]))


def test_first_difference():
    assert measure.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert measure.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert measure.first_difference([1, 2], [1, 2, 3]) == 2
    assert measure.first_difference([], []) is None


# --- the callers use these definitions ----------------------------------------------------
def test_the_bench_row_reports_measures_figures():
    """bench.summarise's α, speedup and tokens/s are measure's, on the same runs."""
    from types import SimpleNamespace

    spec = [run_of([prompt_round(make_round(3, 3, verify=4.0))] + [make_round(3, n, verify=1.0) for n in (3, 1, 0)])]
    base = [run_of([prompt_round(make_round(0, 0, verify=4.0))] + [make_round(0, 0, verify=0.4) for _ in range(9)])]

    def samples(runs):
        return [SimpleNamespace(run=r, tokens=r.token_ids, wall_s=r.decode_s) for r in runs]

    b = bench.summarise(bench.ENGINE_BASELINE, samples(base), {}, (0.3, None))
    row = bench.summarise("k=3", samples(spec), b, (0.3, None))
    assert row["alpha"] == pytest.approx(measure.pooled_alpha(spec))
    assert row["speedup"] == pytest.approx(measure.speedup(spec[0], base[0]))
    assert row["decode_speedup"] == pytest.approx(measure.speedup_from(base[0].steady_s_per_token,
                                                                       spec[0].steady_s_per_token))
    assert row["tokens_per_s"] == pytest.approx(statistics.median([spec[0].tokens_per_s]))


# Weight bytes (measure.weight_bytes) and decoder layers of the models whose one-token passes were timed
# (docs/precision.md, "c before anything is timed"): the default pair's target and drafts on the project's 2-core CPU, and
# the Qwen2.5 shapes in bf16 on an H200 with CUDA graphs.
TARGET_CPU = (6_174_857_728, 28)  # Qwen2.5-Coder 1.5B, float32
DRAFTS_CPU = {  # draft: (bytes, layers), the c its timed passes measured (low, high)
    "Qwen 0.5B int8": ((496_071_936, 24), (0.11, 0.16)),
    "Qwen 0.5B float32": ((1_976_131_328, 24), (0.32, 0.45)),
    "SmolLM2 135M int8": ((135_439_360, 30), (0.075, 0.11)),
}
GPU_DRAFT = (988_065_664, 24)  # Qwen2.5 0.5B, bf16
TARGETS_GPU = {"1.5B": ((3_087_428_864, 28), (0.60, 0.80)), "7B": ((14_150_000_000, 28), (0.38, 0.52))}


def test_the_prior_for_c_lands_where_the_timed_passes_did():
    """Bytes alone said 0.080 for the int8 draft against 0.14 timed, and 0.02 for SmolLM2 against 0.09: a
    small model's step is mostly the fixed cost of its layers, all of it on a GPU."""
    for name, ((b, n), (lo, hi)) in DRAFTS_CPU.items():
        assert lo <= measure.prior_c(b, n, *TARGET_CPU, "cpu") <= hi, name
    for name, ((b, n), (lo, hi)) in TARGETS_GPU.items():
        assert lo <= measure.prior_c(*GPU_DRAFT, b, n, "cuda") <= hi, name
    assert measure.prior_c(*GPU_DRAFT, *TARGETS_GPU["1.5B"][0], "mps") == \
        measure.prior_c(*GPU_DRAFT, *TARGETS_GPU["1.5B"][0], "cpu")  # a device not fitted: the CPU's cost


def test_c_prior_reads_bytes_layers_and_the_device_from_the_models():
    from specviz.core.measure import weight_bytes
    from specviz.modeling.tiny import tiny_model

    draft, target = tiny_model(0, layers=2), tiny_model(1, layers=4)
    assert measure.decoder_layers(draft) == 2 and measure.decoder_layers(target) == 4
    # a multimodal config (Gemma 3's, say) keeps the depth in its text config; a config without one says nothing
    from types import SimpleNamespace as NS

    text = NS(num_hidden_layers=18)
    assert measure.decoder_layers(NS(config=NS(get_text_config=lambda: text, vision_config=NS()))) == 18
    assert measure.decoder_layers(NS(config=NS(hidden_size=64))) is None
    assert measure.c_prior(draft, target) == pytest.approx(
        measure.prior_c(weight_bytes(draft), 2, weight_bytes(target), 4, "cpu"))
    assert measure.c_prior(tiny_model(0), tiny_model(1)) == pytest.approx(1.0)  # the same shape
    # as many weight bytes through twice the layers cost more: bytes alone would call the two steps equal
    assert measure.prior_c(1e9, 24, 1e9, 12) > 1.1 and measure.prior_c(1e9, 12, 1e9, 12) == 1.0


def test_entropy_by_verdict_splits_the_judged_drafts_entropy_by_accepted_and_rejected():
    from types import SimpleNamespace as NS

    rounds = [NS(accepted=[True, True, False], entropy=[0.5, 1.0, 3.0, 9.0, 9.0]),  # positions past the judged
              NS(accepted=[], entropy=[7.0]),  # a round with no draft judged
              NS(accepted=[True, False], entropy=[float("nan"), 2.0])]  # no entropy recorded: left out
    assert measure.entropy_by_verdict(rounds) == ([0.5, 1.0], [3.0, 2.0])
