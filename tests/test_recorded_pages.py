"""The learning pages' recorded mode: with the source "recorded" (or no usable model) each page draws its default
experiment from a shipped recording, loads no model, and says it shows a recording (pair, device, settings, when).

Page recordings (specviz/recorded/pages/<page>.json) are written by tools.record.record_pages: here on the tiny
pair into a temporary folder, read back, and drawn by the page.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
PAGES = {p.name.split("_", 1)[0]: str(p) for p in sorted((ROOT / "pages").glob("[0-9]_*.py"))}


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


@pytest.fixture
def no_model(monkeypatch):
    """A recorded page must not load a model: loading one fails the test."""
    from specviz.decoding import models

    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pytest.fail("a recorded page loaded a model"))


def recorded_page(n: str, by: str = "address"):
    """Page n with the source set to recorded, by the address (?source=recorded) or the session's kept value."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGES[n], default_timeout=120)
    if by == "address":
        at.query_params["source"] = "recorded"
    else:
        at.session_state["keep.source"] = "recorded"
    at.run()
    ok(at)
    return at


def ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def press(at, key: str):
    at.button(key=key).click().run()
    ok(at)
    return at


def notices(at) -> list[str]:
    return [i.value for i in at.info if "**recording**" in i.value]


# --- 1 · slow motion: a round of the main page's recording -------------------------------------------------------
@pytest.mark.parametrize("by", ["address", "session"])
def test_slow_motion_replays_the_recording_round_by_round_with_no_model(by, no_model):
    from specviz.data.runfile import list_recorded
    from specviz.teaching import explain

    rec = next(r for r in list_recorded() if r.name == "capital-of-france-greedy")
    decode, run = rec.decode(), rec.run
    at = recorded_page("1", by)
    [note] = notices(at)
    assert rec.pair in note and run.device in note and f"k {run.decode.k}" in note and rec.prompt_text in note
    assert at.sidebar.radio(key="slow.source").value.startswith("Recorded")
    press(at, "slow.start")
    story = [m.value for m in at.markdown if m.value.startswith("**Round 1**")]
    drafted = " ".join(explain.tok_md(t, decode) for t in run.rounds[0].drafted)
    assert story and drafted in story[0]  # the recording's own first round, its tokens from the file
    assert len(at.dataframe[0].value) == len(explain.round_rows(run.rounds[0], decode))
    assert at.get("plotly_chart")
    # step to the end: every round of the recording, and no more
    for _ in range(len(run.rounds) - 1):
        press(at, "slow.next")
    assert [s.value for s in at.selectbox if s.label == "Round to inspect"] == [len(run.rounds)]
    assert any("run finished" in c.value for c in at.caption)
