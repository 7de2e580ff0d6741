"""A Stop click during a page's long measurement, in AppTest on the tiny pair: what was finished is kept and
shown, with a note that it was stopped.

AppTest cannot click while a script runs. What streamlit does on such a click is raise a RerunException at the
script's next element update, which here is the progress bar's; the test makes the bar's update raise exactly
that once two k values are done, and everything after (the page's StopBar, the sweep's partial, keeping it, the
rerun going on) is the app's own code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
SPEEDUP = str(ROOT / "pages" / "3_Speedup.py")


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


@pytest.fixture
def click_stop_after(monkeypatch):
    """click_stop_after(n): the first progress-bar update once n units are done raises streamlit's rerun, as a
    Stop click during the measurement does."""
    from pages.common import lab_ui

    real = lab_ui.ProgressBar.__call__
    clicked = []

    def use(n: int):
        def update(self, msg, frac=None):
            if getattr(msg, "done", 0) >= n and not clicked:
                clicked.append(msg)
                raise RerunException(RerunData())
            return real(self, msg, frac)

        monkeypatch.setattr(lab_ui.ProgressBar, "__call__", update)
        return clicked

    return use


def test_a_k_sweep_stopped_after_two_k_values_shows_those_two_and_says_it_stopped(click_stop_after):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(SPEEDUP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    ks = at.multiselect(key="speed.ks").value
    assert len(ks) > 2
    clicked = click_stop_after(2)
    at.button(key="speed.run_sweep").click().run()
    assert not at.exception, at.exception
    assert clicked, "the sweep never reported two k values done"
    kept = at.session_state["speed.sweep"]
    assert sorted(kept) == sorted(ks)[:2]  # exactly the two finished
    rows = at.dataframe[0].value
    assert list(rows["k"]) == sorted(ks)[:2]
    notes = [w.value for w in at.warning]
    assert any(n.startswith(f"Stopped after 2 k values of {len(ks)}") for n in notes), notes
    # a whole sweep afterwards replaces it, and the note goes
    click_stop_after(10**6)
    at.button(key="speed.run_sweep").click().run()
    assert not at.exception, at.exception
    assert sorted(at.session_state["speed.sweep"]) == sorted(ks)
    assert not any(w.value.startswith("Stopped after") for w in at.warning)


def _stopped_after_one(click_stop_after, page: str, button: str, state: str, unit: str, total: int):
    """Press `button`, stop once one unit is done: (the AppTest, what the page keeps in `state`)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(page, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    clicked = click_stop_after(1)
    at.button(key=button).click().run()
    assert not at.exception, at.exception
    assert clicked, f"{button} never reported one unit done"
    notes = [w.value for w in at.warning]
    assert any(n.startswith(f"Stopped after 1 {unit} of {total}") for n in notes), notes
    return at, at.session_state[state]


def test_early_exit_stopped_after_one_depth_shows_that_depth_and_says_it_stopped(click_stop_after):
    from specviz.teaching import early_exit

    depths = early_exit.default_layers(2)  # the tiny target's two layers
    at, kept = _stopped_after_one(click_stop_after, SPEEDUP, "speed.run_early_exit", "speed.early_exit", "depth",
                                  len(depths))
    sweep, _ = kept
    assert [p.layers for p in sweep.points] == depths[:1]  # exactly the one finished
    rows = at.dataframe[-1].value
    assert list(rows["L"]) == depths[:1]


def test_k_policies_stopped_after_one_show_fixed_k_only_and_say_it_stopped(click_stop_after):
    from specviz.teaching import race

    at, kept = _stopped_after_one(click_stop_after, SPEEDUP, "speed.run_adaptive", "speed.adaptive", "k policy",
                                  len(race.POLICIES))
    assert list(kept) == ["fixed"]
    assert [m.label for m in at.metric if m.label.endswith("k: tokens/s")] == ["fixed k: tokens/s"]


def test_chain_against_tree_stopped_after_one_budget_shows_that_budget_and_says_it_stopped(click_stop_after):
    from specviz.teaching import tree_lab

    budgets = sorted(tree_lab.DEFAULT_BUDGETS)
    _, kept = _stopped_after_one(click_stop_after, str(ROOT / "pages" / "9_Token_tree.py"), "tree.measure",
                                 "tree.cmp", "node budget", len(budgets))
    cmp, _ = kept
    assert cmp.budgets == budgets[:1]


def test_a_race_stopped_after_the_target_alone_shows_it_and_says_it_stopped(click_stop_after):
    at, kept = _stopped_after_one(click_stop_after, SPEEDUP, "speed.run_race", "speed.race", "run", 2)
    assert kept.spec is None and kept.base.token_ids
    assert not [b for b in at.button if b.key == "speed.replay"]  # nothing to replay without the speculative run


def test_a_click_while_the_race_draws_a_round_stops_it_there(monkeypatch):
    """The click that streamlit signals at the live text's update (not the bar's): the race stops with the
    target alone kept, as at the bar."""
    from streamlit.testing.v1 import AppTest

    from pages.common import lab_ui
    from specviz.teaching import render

    real_bar, real_html = lab_ui.ProgressBar.__call__, render.tokens_html
    last, clicked = [], []

    def bar(self, msg, frac=None):
        last[:] = [msg]
        return real_bar(self, msg, frac)

    def html(*a, **kw):
        if last and getattr(last[0], "done", 0) >= 1 and not clicked:  # the first speculative round drawn
            clicked.append(True)
            raise RerunException(RerunData())
        return real_html(*a, **kw)

    monkeypatch.setattr(lab_ui.ProgressBar, "__call__", bar)
    monkeypatch.setattr(render, "tokens_html", html)
    at = AppTest.from_file(SPEEDUP, default_timeout=120)
    at.run()
    at.button(key="speed.run_race").click().run()
    assert not at.exception, at.exception
    assert clicked
    kept = at.session_state["speed.race"]
    assert kept.spec is None and kept.base.token_ids
    assert any(w.value.startswith("Stopped after 1 run of 2") for w in at.warning)
