"""AppTest of pages/common/kept.Kept, the one "keep a result until its settings change" pattern of every page.

A small app keeps a result made with one setting; the tests change the setting like a learner moving a
widget and check what the app shows: the result while the setting is the one it was made with, nothing
(or the stale result, for pages that show it with a warning) once it changes, the result again on going
back, and a live result (one that must be closed) closed and dropped when it is replaced or stale.
"""

from __future__ import annotations


def demo_app():
    import streamlit as st

    from pages.common.kept import Kept

    setting = int(st.number_input("setting", 0, 10, 1, key="setting"))
    now = {"seed": int(st.number_input("seed", 0, 10, 0, key="seed")), "k": int(st.number_input("k", 1, 9, 4, key="k"))}
    closed = st.session_state.setdefault("closed", [])  # results closed, in order (made_with of each)
    close = (lambda old: closed.append(old["made_with"])) if st.session_state.get("live") else None
    box = Kept("demo.result", setting, close=close)
    if st.button("compute", key="compute"):
        st.session_state["made"] = st.session_state.get("made", 0) + 1
        box.put({"made_with": setting, "n": st.session_state["made"]}, settings=now)
    if st.button("fail", key="fail"):
        box.put(None, settings=now)  # a run that failed: its error was shown, nothing is lost
    if st.button("clear", key="clear"):
        box.clear()
    got, stale = box.get(), box.stale()
    st.text(f"kept: {got and got['made_with']} #{got and got['n']}")
    st.text(f"stale: {stale and stale['made_with']}")
    st.text(f"changed: {box.changed(now)}")


def app(live: bool = False):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(demo_app, default_timeout=30)
    at.session_state["live"] = live
    at.run()
    assert not at.exception, at.exception
    return at


def shown(at) -> tuple[str, str]:
    return at.text[0].value, at.text[1].value


def act(at, key: str):
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def set_setting(at, value: int):
    at.number_input(key="setting").set_value(value).run()
    assert not at.exception, at.exception
    return at


def test_a_result_is_kept_while_its_setting_stays_and_hidden_when_it_changes():
    at = app()
    assert shown(at) == ("kept: None #None", "stale: None")
    act(at, "compute")
    assert shown(at) == ("kept: 1 #1", "stale: None")
    at.run()  # any rerun with the same setting: the same result, not computed again
    assert shown(at) == ("kept: 1 #1", "stale: None")
    set_setting(at, 2)  # other settings: the result is not theirs
    assert shown(at) == ("kept: None #None", "stale: 1")
    set_setting(at, 1)  # back: the result is shown again
    assert shown(at) == ("kept: 1 #1", "stale: None")
    set_setting(at, 3)
    act(at, "compute")  # a new result replaces the old one
    assert shown(at) == ("kept: 3 #2", "stale: None")
    set_setting(at, 1)
    assert shown(at) == ("kept: None #None", "stale: 3")


def test_a_failed_run_keeps_the_result_and_clear_forgets_it():
    at = act(app(), "compute")
    act(at, "fail")
    assert shown(at) == ("kept: 1 #1", "stale: None")
    act(at, "clear")
    assert shown(at) == ("kept: None #None", "stale: None")


def test_a_live_result_is_closed_when_replaced_cleared_or_its_settings_change():
    at = app(live=True)
    act(at, "compute")
    act(at, "compute")  # replaces the first: it is closed
    assert at.session_state["closed"] == [1] and shown(at) == ("kept: 1 #2", "stale: None")
    set_setting(at, 2)  # a live result on other settings is closed and dropped at once
    assert at.session_state["closed"] == [1, 1] and shown(at) == ("kept: None #None", "stale: None")
    set_setting(at, 1)
    assert shown(at) == ("kept: None #None", "stale: None")  # it is gone, not hidden
    act(at, "compute")
    act(at, "clear")
    assert at.session_state["closed"] == [1, 1, 1]


def test_changed_names_the_settings_that_differ_from_those_the_result_was_made_with():
    def changed(at) -> str:
        return at.text[2].value

    at = app()
    assert changed(at) == "changed: []"  # nothing kept
    act(at, "compute")
    assert changed(at) == "changed: []"
    at.number_input(key="k").set_value(2).run()
    assert changed(at) == "changed: ['k']" and shown(at)[0] == "kept: 1 #1"  # the result stays, marked
    at.number_input(key="seed").set_value(5).run()
    assert changed(at) == "changed: ['seed', 'k']"  # in the order the page names them
    act(at, "fail")  # a failed run keeps the result and the settings it was made with
    assert changed(at) == "changed: ['seed', 'k']"
    act(at, "compute")  # a new result, made with these settings
    assert changed(at) == "changed: []"
    at.number_input(key="k").set_value(4).run()
    assert changed(at) == "changed: ['k']"
    act(at, "clear")
    assert changed(at) == "changed: []"
