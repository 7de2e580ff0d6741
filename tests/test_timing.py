"""`python -m specviz timing` on the tiny random pair (tests/models_tiny.yaml): one item per live lesson step and
per page button, each timed and counted, in JSON and a markdown table. No timed assertions."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.teaching import lessons, page_records

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--models", "tests/models_tiny.yaml", "timing", "-q"]


def timing(tmp_path, *extra) -> tuple[dict, str, str]:
    out, md = tmp_path / "t.json", tmp_path / "t.md"
    proc = subprocess.run([sys.executable, "-m", "specviz", *TINY, "--out", str(out), "--md", str(md), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), md.read_text(), proc.stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return timing(tmp_path_factory.mktemp("timing"))


def test_every_lesson_step_and_page_button_is_timed_once(report):
    rep, _, _ = report
    steps = [f"Lessons: {les.key} · {s.key}" for les in lessons.LESSONS for s in les.steps]
    buttons = [f"{b.page}: {b.label}" for b in page_records.BUTTONS]
    assert [i["what"] for i in rep["items"]] == steps + buttons
    assert rep["pair"]["name"] == "tiny-random" and rep["limit_s"] == 30.0
    for i in rep["items"]:
        assert i["error"] == "", i
        assert math.isfinite(i["seconds"]) and i["seconds"] >= 0
        assert i["within"] == (i["seconds"] <= 30.0)
        assert i["target_calls"] >= 0 and i["draft_calls"] >= 0
    # the steps that run the pair call its target; the theory steps call nothing
    calls = {i["what"]: i["target_calls"] for i in rep["items"]}
    assert calls["Lessons: identity · same_text"] > 0 and calls["Lessons: choose_k · theory"] == 0
    assert calls["Speedup: Run the k sweep"] > 0 and calls["Acceptance lab: Measure"] > 0


def test_markdown_table_has_a_row_per_item_with_the_load(report):
    rep, md, stdout = report
    assert md.strip() == stdout.strip()
    rows = [r for r in md.splitlines() if r.startswith("| ") and not r.startswith("| what")]
    assert len(rows) == len(rep["items"])
    first = rep["items"][0]
    assert rows[0].startswith(f"| {first['what']} | {first['seconds']:.1f} | yes | ")
    assert "≤ 30 s?" in md and "load before → after" in md


def test_an_item_over_the_limit_is_marked(tmp_path):
    rep, md, _ = timing(tmp_path, "--what", "lessons", "--only", "identity", "--limit", "1e-9")
    assert [i["what"] for i in rep["items"]] == [f"Lessons: identity · {s.key}" for s in lessons.lesson("identity").steps]
    assert not any(i["within"] for i in rep["items"])
    assert md.count("| **no** |") == len(rep["items"])


def test_bad_limit_is_an_error_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "specviz", *TINY, "--limit", "0"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--limit" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.real
@pytest.mark.skipif(not os.environ.get("SPECVIZ_TIMING"), reason="set SPECVIZ_TIMING=1 to time every lesson step "
                    "and button on the real pair (about 15 minutes; needs a quiet machine)")
def test_every_lesson_step_and_page_button_ends_within_30_s_on_the_real_pair(default_pair, capsys):
    """The target of a class's time, on this machine when it is quiet: every item within timing.LIMIT_S. Prints
    the table. Opt-in: it takes many minutes, and timings on a machine shared with other work say little."""
    from specviz.devtools import timing

    rep = timing.timing(default_pair)
    with capsys.disabled():
        print("\n" + timing.markdown(rep))
    assert not [i for i in rep["items"] if i["error"]]
    slow = [f"{i['what']}: {i['seconds']:.0f} s" for i in rep["items"] if not i["within"]]
    assert not slow, slow
