"""The baseline lesson ("What the speedup is measured against", specviz/teaching/lessons.py) and its recording.

The same draft against a float32 and an int8 target, each against its own target alone
(experiments.target_comparison): recorded by page_records.record_targets into the Speedup page's recording
(result "targets"), read back through pagefile, and taught by the lesson's two steps, recorded and live on the
tiny pair. Every figure and every word of comparison in their explanations comes from that result.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specviz.core import measure
from specviz.data import pagefile
from specviz.modeling import quant
from specviz.teaching import lessons, page_records

TINY = Path(__file__).resolve().parent / "models_tiny.yaml"
pytestmark = pytest.mark.skipif("int8" not in quant.supported("cpu"), reason="no fbgemm int8 target here")
SHRINKS, MOVES = lessons.lesson("baseline").steps


@pytest.fixture(scope="module")
def tiny():
    """(pair, load_pair): the tiny pair and its loader of a float32 or an int8 target with the same draft."""
    from specviz.decoding import models

    kw = dict(registry=TINY, device="cpu", draft_precision="float32")
    pair = models.load_pair("tiny-random", **kw)
    return pair, lambda tp: models.load_pair("tiny-random", target_precision=tp, loaded=[pair], **kw)


@pytest.fixture(scope="module")
def recording(tiny, tmp_path_factory):
    """The Speedup page's "targets" recorded on the tiny pair, saved and loaded back through pagefile."""
    pair, load = tiny
    res = page_records.record_targets(pair, load)
    rec = pagefile.make("speedup", page_records.about(pair), "", page_records.SPEEDUP, {"targets": res},
                        lambda t: pair.tokenizer.decode([int(t)]))
    return pagefile.load("speedup", pagefile.save(rec, tmp_path_factory.mktemp("pages")).parent)


def targets(rec) -> dict:
    got = rec.result("targets", page_records.RESULTS["speedup"]["targets"])
    return {r.precision: r for r in got}


def speedup(r) -> float:
    return measure.steady_speedup(r.comparison.spec, r.comparison.base)


def verdict(new: float, old: float, tol: float) -> str:
    return "about the same" if abs(new - old) <= tol else ("larger" if new > old else "smaller")


def check(ctx, by: dict) -> tuple[str, str]:
    """Run both steps; each explanation quotes by's numbers, each attributed to its own target."""
    f, q = by["float32"], by["int8"]
    o1, o2 = lessons.run_step(SHRINKS, ctx), lessons.run_step(MOVES, ctx)
    t1, t2 = lessons.explain(SHRINKS, o1), lessons.explain(MOVES, o2)
    assert o1.measured == verdict(speedup(q), speedup(f), lessons.SAME * speedup(f))
    assert f"Over the float32 target alone the speculative run was {speedup(f):.2f}×" in t1
    assert f"over the int8 target alone {speedup(q):.2f}×" in t1 and f": {o1.measured}." in t1
    assert "llama.cpp" in t1
    assert f"c = {q.c:.3f} against the int8 target and {f.c:.3f} against the float32 target" in t2
    share = verdict(q.c, f.c, lessons.C_MOVES * f.c)
    assert f"a {share} share of the int8 target's pass" in t2
    alpha = verdict(q.comparison.spec.alpha, f.comparison.spec.alpha, lessons.SAME)
    moved = (share != "about the same", alpha != "about the same")
    names = {(True, False): "c", (False, True): "α", (True, True): "both", (False, False): "neither"}
    assert o2.measured == names[moved]
    return t1, t2


def test_the_speedup_page_records_both_targets_and_reads_them_back(tiny, recording):
    by = targets(recording)
    assert set(by) == set(quant.TARGET_PRECISIONS)
    assert all(r.comparison.spec.decode.k == page_records.SPEEDUP["starting k"] for r in by.values())
    again = pagefile.from_data(page_records.RESULTS["speedup"]["targets"], recording.results["targets"])
    assert pagefile.to_data(again) == recording.results["targets"]  # nothing lost on the way back
    assert by["int8"].comparison.identical  # greedy: the int8 target's own text


def test_the_recorded_steps_quote_the_recordings_own_numbers(recording):
    check(lessons.Context(page_recordings={"speedup": recording}), targets(recording))


@pytest.mark.parametrize("swap", ["c", "speedup"])
def test_the_explanations_follow_the_data_not_a_script(recording, swap):
    """The recording with the two targets' c (or their runs, so their speedups) swapped: the words turn too."""
    by = targets(recording)
    f, q = by["float32"], by["int8"]
    if swap == "c":
        f, q = dataclasses.replace(f, c=q.c), dataclasses.replace(q, c=f.c)
    else:
        f, q = dataclasses.replace(f, comparison=q.comparison), dataclasses.replace(q, comparison=f.comparison)
    rec = dataclasses.replace(recording, results={"targets": pagefile.to_data([f, q])})
    check(lessons.Context(page_recordings={"speedup": rec}), {"float32": f, "int8": q})


def test_live_on_the_tiny_pair_the_steps_measure_both_targets(tiny):
    pair, load = tiny
    ctx = lessons.Context(pair=pair, load_pair=load)
    assert lessons.run_step(SHRINKS, ctx).source.startswith("live: tiny-random")
    by = ctx.memo["targets"][0]  # what the live step measured, shared by both steps
    assert {r.comparison.spec.decode.k for r in by.values()} == {lessons.K}
    check(ctx, by)


def test_without_the_int8_target_or_its_recording_a_step_says_so_in_one_line(tiny, recording):
    pair, _ = tiny
    bare = dataclasses.replace(recording, results={})  # a recording made before "targets" existed
    for ctx in (lessons.Context(page_recordings={"speedup": bare}), lessons.Context(page_recordings={"speedup": None})):
        for step in (SHRINKS, MOVES):
            o = lessons.run_step(step, ctx)
            assert o.shown == lessons.NOT_RECORDED and "\n" not in lessons.explain(step, o)
    # live with no loader (no int8 target here): said, then the recording's answer
    o = lessons.run_step(SHRINKS, lessons.Context(pair=pair, page_recordings={"speedup": recording}))
    assert o.source.startswith("recorded:") and lessons.explain(SHRINKS, o).startswith(
        lessons.NEEDS_INT8.format(why="this device or pair does not offer"))


def test_the_first_step_says_what_llama_cpp_did_with_this_pair_from_the_measured_figures(recording, monkeypatch):
    """The llama.cpp line comes from specviz/core/measured.json's bench_llamacpp_int8 (claim 16), so a changed
    measurement changes the words; without the group the step says nothing of llama.cpp's speed."""
    from specviz.core import claims

    data = claims.load_measured()
    fig = data["groups"]["bench_llamacpp_int8"]["figures"]
    ctx = lambda: lessons.Context(page_recordings={"speedup": recording})  # noqa: E731 (a fresh memo each time)
    said = lessons.explain(SHRINKS, lessons.run_step(SHRINKS, ctx()))
    assert (f"llama.cpp ran this pair's quantized GGUF files at {fig['llama_target_tps']:.0f} tokens/s with the "
            f"target alone and {fig['llama_spec_tps']:.0f} with its speculative decoding "
            f"({fig['llama_spec_own']:.2f}× its own target alone)") in said
    assert f"with the int8 target made {fig['best_tps']:.0f} tokens/s." in said
    bumped = {**data, "groups": {**data["groups"], "bench_llamacpp_int8": {
        **data["groups"]["bench_llamacpp_int8"], "figures": {**fig, "llama_spec_tps": 99.0}}}}
    monkeypatch.setattr(claims, "load_measured", lambda path=None: bumped)
    assert "and 99 with its speculative decoding" in lessons.explain(SHRINKS, lessons.run_step(SHRINKS, ctx()))
    gone = {**data, "groups": {k: v for k, v in data["groups"].items() if k != "bench_llamacpp_int8"}}
    monkeypatch.setattr(claims, "load_measured", lambda path=None: gone)
    assert "tokens/s with the target alone" not in lessons.explain(SHRINKS, lessons.run_step(SHRINKS, ctx()))
