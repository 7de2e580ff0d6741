"""`python -m specviz loadtest` checked on the tiny pair: real server, real browsers, two sessions at once.

Marked browser (needs /usr/bin/chromium and Playwright). The figures of the tiny
pair mean nothing (animation dominates); this checks the test's own machinery:
every session finishes, its text equals the solo text, and the figures are read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.browser


def test_loadtest_runs_two_sessions_on_the_tiny_pair():
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from specviz import loadtest

    if not Path(loadtest.CHROMIUM).exists():
        pytest.skip(f"{loadtest.CHROMIUM} is missing")
    rep = loadtest.loadtest(sessions=2, models=str(ROOT / "tests" / "models_tiny.yaml"), max_new=12,
                            timeout_s=400)
    s = rep.summary()
    assert s["finished"] == 2 and s["errors"] == 0
    assert s["texts_identical_to_solo"] and rep.solo.text
    assert rep.solo.speedup and all(r.speedup for r in rep.together)
    assert all(r.model_s and r.model_s > 0 for r in [rep.solo, *rep.together])
    assert all(len(r.rounds) >= 2 for r in rep.together)  # rounds were seen appearing one by one
    assert len(rep.lines()) == 6
