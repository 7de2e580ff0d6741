"""The app within a memory budget (SPECVIZ_MEMORY_GB), on the tiny models with large stated sizes: the page starts
with a choice that fits and says why, refuses one that cannot fit before it loads, and across pairs and sessions
unloads what was used least recently, never a pair a live run holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
BIG = 400_000_000  # the parameters each tiny model claims: the estimates see models of this size


@pytest.fixture(scope="module", autouse=True)
def big_registry(tiny_app_registry, tmp_path_factory):
    """The tiny registry, each model claiming BIG parameters (they still load in milliseconds)."""
    text = (ROOT / "tests" / "models_tiny.yaml").read_text()
    path = tmp_path_factory.mktemp("reg") / "models.yaml"
    path.write_text(re.sub(r"params: \d+", f"params: {BIG}", text))
    return tiny_app_registry(path)


@pytest.fixture(autouse=True)
def empty_store():
    from specviz.service import pairs

    pairs.clear()
    yield
    pairs.clear()


def need(pair: str, dtype: str, precision: str) -> int:
    """What the sidebar says a choice needs: its parts and the room a load takes."""
    from specviz.modeling import sizing
    from specviz.modeling.config import as_registry

    return sizing.estimate_memory_bytes(as_registry(None).pair(pair), dtype, True, precision)


def set_budget(monkeypatch, nbytes: int) -> None:
    monkeypatch.setenv("SPECVIZ_MEMORY_GB", str(nbytes / 2**30))


def new_app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_page_starts_with_a_choice_that_fits_and_says_why(monkeypatch):
    """A budget that only bfloat16 with a bfloat16 draft fits (an int8 draft is made through a float32 copy)."""
    from specviz.modeling import quant

    least = need("tiny-random", "bfloat16", "bfloat16")
    others = [need("tiny-random", d, p) for d in ("float32", "bfloat16") for p in quant.supported("cpu")
              if (d, p) != ("bfloat16", "bfloat16")]
    assert least < min(others)
    set_budget(monkeypatch, (least + min(others)) // 2)
    at = new_app()
    assert at.radio(key="main.dtype").value == "bfloat16"
    assert at.radio(key="main.draft_precision").value == "bfloat16"
    why = " ".join(i.value for i in at.sidebar.info)
    default = f"tiny-random (float32, {quant.default_precision('cpu')} draft)"
    assert f"{default} needs about" in why and "(set by SPECVIZ_MEMORY_GB)" in why
    assert "so this page starts with tiny-random (bfloat16, bfloat16 draft)" in why
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.run_btn").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = at.session_state["main.job"]
    assert job.done and job.hold is None  # a finished run lets its pair go


def test_a_choice_that_cannot_fit_is_refused_before_it_loads(monkeypatch):
    from specviz.service import pairs

    set_budget(monkeypatch, need("tiny-random", "bfloat16", "bfloat16") - 1)  # nothing of this pair fits
    calls = pairs.LOAD_CALLS
    at = new_app()
    assert any("no configuration of this pair fits" in i.value for i in at.sidebar.info)
    assert any(w.value.startswith("Not loaded: tiny-random") for w in at.sidebar.warning)  # said before Run
    at.button(key="main.run_btn").click().run()
    assert not at.exception
    assert any("Not loaded: tiny-random" in e.value and "memory budget" in e.value for e in at.error)
    assert pairs.LOAD_CALLS == calls and not pairs.store().keys()


def test_a_live_run_holds_its_pair_until_it_ends():
    from specviz.service import pairs

    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.step_btn").click().run()  # one round: the run goes on, paused
    assert not at.exception, at.exception
    job = at.session_state["main.job"]
    assert not job.done and job.hold is not None and job.hold.held
    assert pairs.store().in_use(job.hold.key)
    job.close("test")
    assert job.hold is None and not any(pairs.store().in_use(k) for k in pairs.store().keys())


def test_over_the_servers_life_a_pair_in_use_stays_and_the_least_recent_goes(monkeypatch):
    """Session A's live run holds tiny-random; session B's pair does not fit beside it: refused, naming A's pair,
    nothing unloaded. Once A's run ends, B's pair loads and tiny-random is unloaded. Then B holds its pair, and a
    third pair is refused naming it; once B lets go, the third loads in its place."""
    from specviz.service import pairs
    from specviz.core.errors import NotEnoughMemory
    from specviz.modeling import sizing
    from specviz.modeling.config import as_registry

    held_a = sum(sizing.pair_parts(as_registry(None).pair("tiny-random"), "bfloat16").values())
    set_budget(monkeypatch, held_a + need("tiny-early-exit", "bfloat16", "bfloat16") - 2**20)
    store = pairs.store()
    _, a = pairs.lease_pair("tiny-random", "bfloat16", "bfloat16")  # as start_live does
    with pytest.raises(NotEnoughMemory) as e:
        pairs.load_pair_cached("tiny-early-exit", "bfloat16", "bfloat16")
    said = str(e.value)
    assert said.startswith("Not loaded: tiny-early-exit (bfloat16, bfloat16 draft) needs about")
    assert "tiny-random (bfloat16, bfloat16 draft) is in use by a running session" in said
    assert store.keys() == [("tiny-random", "bfloat16", "bfloat16")] and not store.unloaded
    a.release()  # A's run ended: its pair may go now
    _, b = pairs.lease_pair("tiny-early-exit", "bfloat16", "bfloat16")
    assert store.unloaded == [("tiny-random", "bfloat16", "bfloat16")]
    with pytest.raises(NotEnoughMemory, match=r"tiny-early-exit \(bfloat16, bfloat16 draft\) is in use"):
        pairs.load_pair_cached("tiny-other-tokenizer", "bfloat16", "bfloat16")
    b.release()
    pairs.load_pair_cached("tiny-other-tokenizer", "bfloat16", "bfloat16")
    assert store.unloaded[-1] == ("tiny-early-exit", "bfloat16", "bfloat16")
    assert store.keys() == [("tiny-other-tokenizer", "bfloat16", "bfloat16")]


@pytest.mark.parametrize("value", ["1e300", "inf", "nan", "-4", "[x](https://evil.example)"])
def test_a_bad_budget_is_said_on_the_main_page_naming_the_variable(monkeypatch, value):
    """SPECVIZ_MEMORY_GB=1e300 overflowed int() in memory.py: the main page showed Streamlit's generic error."""
    monkeypatch.setenv("SPECVIZ_MEMORY_GB", value)
    at = new_app()
    said = [e.value for e in at.error] + [e.value for e in at.sidebar.error]
    # markdown as it reads: backslash escapes undone, and md_text's word joiners (no autolink) left out
    plain = [re.sub(r"\\(.)", r"\1", s).replace("\u2060", "") for s in said]
    assert any("SPECVIZ_MEMORY_GB" in s and repr(value) in s for s in plain), said
    assert not any("](" in s for s in said)  # the value is plain text, never a link


def test_a_laptop_the_pair_cannot_fit_is_shown_the_way_in_on_the_first_screen(monkeypatch):
    """Where no configuration of the pair fits the budget, the main page says so above everything (not only in
    the collapsed settings) and one click shows the recorded runs, remembered in the address."""
    set_budget(monkeypatch, need("tiny-random", "bfloat16", "bfloat16") - 1)  # nothing of this pair fits
    at = new_app()
    said = [w.value for w in at.warning]
    assert any("no configuration of this pair fits" in w and "recorded runs" in w for w in said), said
    at.button(key="main.to_recorded").click().run()
    assert not at.exception
    assert at.radio(key="main.source").value == "Recorded runs (no model needed)"
    assert at.query_params.get("source") in ("recorded", ["recorded"])
    assert not [w.value for w in at.warning if "no configuration" in w.value]  # the way in is taken
    at.button(key="main.run_btn").click().run()  # Play: the first recording, with no model
    assert not at.exception and not at.error and at.session_state["main.job"].source == "replay"


def test_a_laptop_the_pair_fits_is_shown_no_way_in():
    at = new_app()
    assert not [w.value for w in at.warning if "recorded runs" in w.value]
    assert "main.to_recorded" not in [b.key for b in at.button]
