"""specviz.devtools.servicecost: the model service as a thread or a process (docs/architecture.md)."""

from __future__ import annotations

import statistics
import time

import pytest

from specviz.devtools import servicecost


def test_ratios_are_the_arms_measured_medians_over_the_first_arms():
    sleepy = lambda s: (lambda: time.sleep(s))  # noqa: E731
    arms = {"alone": (sleepy(0.002), False), "slow": (sleepy(0.008), True)}
    got = servicecost.measure_gil(arms, steps=4, reps=2, page=lambda: sum(range(100)))
    assert list(got) == ["alone", "slow"]
    for arm in got.values():
        assert len(arm["times"]) == 8 and arm["median_s"] == statistics.median(arm["times"])
        assert arm["ratio"] == pytest.approx(arm["median_s"] / got["alone"]["median_s"])
    assert got["alone"]["ratio"] == 1 and 2.5 < got["slow"]["ratio"] < 15  # 8 ms sleeps (+ GIL waits) against 2 ms
    assert got["alone"]["draws_per_s"] == 0 < got["slow"]["draws_per_s"]  # only a drawing arm has a page


def test_the_tool_on_a_tiny_draft_reports_every_arm_memory_and_start_up():
    r = servicecost.servicecost("tiny", steps=2, reps=1, spawns=1)
    assert set(r["gil"]) == {"alone", "thread", "process-alone", "process-json", "passive-alone", "passive-json",
                             "process-logits"}
    alone = r["gil"]["alone"]["median_s"]
    for arm in r["gil"].values():
        assert len(arm["times"]) == 2 and arm["ratio"] == pytest.approx(arm["median_s"] / alone)
    mem = r["memory"]
    assert set(mem) == {"bare", "imported", "loaded"} and set(mem["bare"]) == set(servicecost.FIELDS)
    assert mem["imported"]["RssAnon"] > 100 + mem["bare"]["RssAnon"]  # torch and transformers weigh 100s of MB
    assert len(r["startup"]["ready_s"]) == 1 and 0.1 < r["startup"]["median_s"] < 120
    table = servicecost.markdown(r)
    assert "| process-logits |" in table and "start-up" in table


def test_a_service_replies_with_a_rounds_json_or_the_logits():
    s = servicecost.Service()
    try:
        s.load("tiny", 1)
        assert s.step("logits").shape == ((servicecost.K + 1) * 128,)  # the tiny model's vocabulary: 128
        assert len(s.step("json")["rows"]) == servicecost.K + 1
    finally:
        s.close()
