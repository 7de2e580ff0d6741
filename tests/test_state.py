"""pages/common/state.py: presenter mode, the source (live or recorded), the lesson and its progress survive a
change of page and a reload (a new session that reads the page's address).

AppTest runs the app in this process, as the server does, so a 'reload' here is a new AppTest given the
address's query parameters that the first one wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
LESSONS = "pages/8_Lessons.py"
MAIN_RECORDED = "Recorded runs (no model needed)"
LESSONS_RECORDED = "Recorded runs and theory (no model needed)"


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(ROOT / "tests" / "models_tiny.yaml")


def ok(at):
    assert not at.exception, at.exception
    return at


def app(page: str | None = None, query: dict | None = None):
    """The app as a browser opens it: app.py with its page list, at page, with the address's parameters."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    if page:
        at.switch_page(page)
    return ok(at.run())


def address(at) -> dict:
    return {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def test_source_and_presenter_mode_survive_a_change_of_page():
    at = app()
    at.radio(key="main.source").set_value(MAIN_RECORDED).run()
    ok(at.toggle(key="ui.presenter").set_value(True).run())
    assert address(at)["source"] == "recorded" and address(at)["presenter"] == "on"
    ok(at.switch_page(LESSONS).run())  # the main page's widgets are gone; the Lessons page's are new
    assert at.radio(key="lessons.source").value == LESSONS_RECORDED
    assert at.toggle(key="ui.presenter").value is True
    ok(at.switch_page("app.py").run())
    assert at.radio(key="main.source").value == MAIN_RECORDED


def test_a_reload_reads_the_source_presenter_mode_and_lesson_from_the_address():
    from specviz.teaching import lessons

    first = app(LESSONS)
    first.radio(key="lessons.source").set_value(LESSONS_RECORDED).run()
    les = lessons.LESSONS[2]
    ok(first.selectbox(key="lessons.lesson").set_value(les.title).run())
    assert address(first)["lesson"] == les.key
    again = app(LESSONS, address(first))  # a reload: a new session, the same address
    assert again.radio(key="lessons.source").value == LESSONS_RECORDED
    assert again.selectbox(key="lessons.lesson").value == les.title
    assert app(None, {"presenter": "on"}).toggle(key="ui.presenter").value is True


def test_nonsense_in_the_address_is_ignored():
    at = app(LESSONS, {"source": "bogus", "lesson": "<img src=x>", "presenter": "maybe"})
    assert at.radio(key="lessons.source").value == "Live, on the loaded pair"
    assert at.toggle(key="ui.presenter").value is False
    assert "source" not in address(at) and "presenter" not in address(at)  # the defaults stay out of the address


def step_shown(at) -> str:
    """The lesson's progress bar text, 'step i of n'."""
    return " ".join(p.proto.text for p in at.get("progress"))


def _measure_first_step(at):
    at.button(key="lessons.run").click().run()
    ok(at)
    assert any(m.label == "measured" for m in at.metric), "the first step was not measured"
    nxt = next(b for b in at.button if b.key.startswith("lessons.next."))
    ok(nxt.click().run())


def _back(at):
    ok(at.button(key=next(b.key for b in at.button if b.key.startswith("lessons.prev."))).click().run())


def measured(at) -> bool:
    return any(m.label == "measured" for m in at.metric)


def test_the_lessons_step_survives_a_reload_and_its_results_stay_with_the_session():
    """The address carries the lesson and its step, never the learner's predictions and results: a reload (a
    new session with the same address) is at the same step, and starts it without them."""
    at = app(LESSONS, {"source": "recorded"})
    _measure_first_step(at)
    assert "step 2 of" in step_shown(at), step_shown(at)
    assert address(at).get("step") == "2" and "session" not in address(at)
    again = app(LESSONS, address(at))  # a reload
    assert "step 2 of" in step_shown(again)
    _back(again)
    assert "step 1 of" in step_shown(again) and not measured(again)
    _back(at)  # the first session still has its answer, after a change of page too
    ok(at.switch_page("pages/6_Theory.py").run())
    ok(at.switch_page(LESSONS).run())
    assert "step 1 of" in step_shown(at) and measured(at)


def test_two_sessions_with_one_address_neither_see_nor_wipe_each_others_progress():
    """A link copied from the projector used to carry the session's token: a second browser saw the first one's
    predictions and results, and its "Start the lesson again" wiped them."""
    projector = app(LESSONS, {"source": "recorded"})
    _measure_first_step(projector)
    _back(projector)
    assert measured(projector)
    student = app(LESSONS, address(projector))  # the same address, another browser
    assert "step 1 of" in step_shown(student) and not measured(student)
    ok(student.button(key="lessons.restart").click().run())
    ok(projector.run())
    assert "step 1 of" in step_shown(projector) and measured(projector)


@pytest.mark.parametrize("query", [{"session": "<script>alert(1)</script>"}, {"session": "x" * 6000},
                                   {"step": "9" * 6000}, {"step": "<script>"}, {"step": "-1"}, {"step": "999"}])
def test_a_hostile_token_or_step_in_the_address_is_refused_cleanly(query):
    at = app(LESSONS, {"source": "recorded", **query})
    assert "step 1 of" in step_shown(at)
    assert "session" not in address(at) and "step" not in address(at)  # step 1 is the default, left out


def test_the_main_page_is_named_for_what_it_does_and_every_page_keeps_its_address():
    """The navigation that app.py sends: the main page titled for what it does (Streamlit would say "app"), at
    the root address, then every pages/*.py at the address Streamlit gives a pages/ folder, under its title there
    or its short one (nav.SHORT_TITLES, a sidebar's width)."""
    from streamlit.source_util import page_icon_and_name

    from pages.common import nav

    at = app()
    listed = list(at._registered_pages.values())  # what the navigation registered (AppTest has no public reader)
    main = listed[0]
    assert main["page_name"] == nav.MAIN_TITLE != "app" and main["url_pathname"] == ""
    assert Path(main["script_path"]) == ROOT / "app.py"
    files = sorted((ROOT / "pages").glob("*.py"))
    assert [Path(p["script_path"]).name for p in listed[1:]] == [f.name for f in files]
    for p, f in zip(listed[1:], files):
        name = page_icon_and_name(f)[1]
        assert (p["url_pathname"], p["page_name"]) == (name, nav.SHORT_TITLES.get(f.name, name.replace("_", " ")))
    assert ok(at.switch_page("pages/5_Exactness.py").run()).title[0].value.startswith("Exactness")
