"""A class on any laptop or projector, in a real browser (`streamlit run app.py`, headless Chromium), on the tiny
random pairs (tests/models_tiny.yaml): what a newcomer and a presenter see at 1024×768. Needs Debian's chromium
and Playwright for Python; skipped with the reason otherwise. Run with: pytest -m browser tests/test_browser_class.py
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.devtools.loadtest import serve
from test_browser import CHROMIUM, browser  # noqa: F401 - the headless Chromium fixture, one per module

WAIT_MS = 60_000
LAPTOP = {"width": 1024, "height": 768}

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    with serve(str(Path(__file__).parent / "models_tiny.yaml")) as url:
        yield url


def settled(page) -> None:
    """Wait until the app's script run has finished (a rerun keeps the old elements until it replaces them)."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def open_page(browser, url: str, path: str = "", presenter: bool = False):
    """A new page at 1024×768 on the app's page `path`, settled; in presenter mode when asked (from the address,
    as a reload keeps it)."""
    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{url}/{path}" + ("?presenter=on" if presenter else ""))
    page.get_by_role("heading", level=1).first.wait_for()
    settled(page)
    return page


def test_the_uploader_shows_one_limit_the_apps(app, browser):
    """The main page's uploader states one size limit, the app's (its label's "at most 2 MB"), not Streamlit's
    server.maxUploadSize ("4MB per file"), which stays above it so that the app says why it refuses a file."""
    from specviz.core import limits

    page = open_page(browser, app)
    box = page.get_by_test_id("stFileUploader")
    box.scroll_into_view_if_needed()
    shown = box.inner_text()  # what is drawn: a hidden element has no inner text
    assert set(re.findall(r"(\d+)\s*MB", shown)) == {str(limits.max_run_file_bytes() // 2**20)}, shown
    page.close()


# the sidebar's page links whose text is cut (drawn wider than its box, ending in '…'), with the sidebar open
CUT_NAV = """() => [...document.querySelectorAll('[data-testid="stSidebarNav"] a')].filter(a =>
    [a, ...a.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)).map(a => a.textContent.trim())"""


def open_sidebar(page) -> None:
    """Open the sidebar where it starts collapsed (presenter mode, or a narrow window)."""
    expand = page.get_by_test_id("stExpandSidebarButton")
    if expand.is_visible():
        expand.click()
    page.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()
    page.wait_for_timeout(800)  # the sidebar's opening slide


@pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
def test_no_page_name_is_cut_in_the_sidebar(app, browser, presenter):
    """At 1024×768, in normal mode and in presenter mode's larger type, every page's name in the sidebar's
    list is whole (none ends in '…')."""
    page = open_page(browser, app, "Theory", presenter)
    open_sidebar(page)
    names = [t.strip() for t in page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()]
    assert len(names) == 11, names
    assert page.evaluate(CUT_NAV) == [], names
    page.close()


def lesson_keys() -> list[str]:
    from specviz.teaching import lessons

    return [les.key for les in lessons.LESSONS]


@pytest.mark.parametrize("source", ["recorded", "live"])
def test_each_lessons_first_question_is_above_the_fold_in_presenter_mode(app, browser, source):
    """At 1024×768 in presenter mode, each lesson's first question (its step's heading) is on screen as the page
    opens, with no scrolling: from the recorded runs, and live (where a note that no model is loaded may show)."""
    from specviz.teaching import lessons

    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(WAIT_MS)
    low = {}
    for les in lessons.LESSONS:
        page.goto(f"{app}/Lessons?presenter=on&source={source}&lesson={les.key}")
        question = page.get_by_role("heading", name=les.steps[0].text)
        question.wait_for()
        settled(page)
        page.wait_for_timeout(300)
        box = question.bounding_box()
        if box["y"] + box["height"] > LAPTOP["height"] or page.evaluate("() => window.scrollY") != 0:
            low[les.key] = box
    assert low == {}, low
    page.close()


# what presenter mode's keys do on each page (the tiny pair loaded): "text", the page's own action runs or steps
# (its text changes); "scroll", the page scrolls down (nothing to run); "page", the next page of the list opens
KEYS = [("", "text", "text"), ("What_this_app_demonstrates", "scroll", "page"), ("Slow_motion_round", "text", "text"),
        ("Acceptance_lab", "text", "page"), ("Speedup", "text", "page"), ("Why_it_is_fast", "text", "page"),
        ("Exactness", "text", "page"), ("Theory", "scroll", "page"), ("Glossary", "scroll", "page"),
        ("Lessons", "text", "text"), ("Token_tree", "text", "text")]
LOOK = """() => { const m = document.querySelector('[data-testid="stMain"]');
    return {path: location.pathname.replace(/\\/$/, ''), text: m.innerText,
            top: Math.max(m.scrollTop, document.scrollingElement.scrollTop)}; }"""


def press_and_see(page, key: str, what: str, before: dict, seconds: float = 30.0) -> dict:
    """Press key (the page focused, not a box) and wait until the page shows `what` happened; the last look."""
    import time

    page.evaluate("() => document.activeElement && document.activeElement.blur()")  # keys go to the page
    page.keyboard.press(key)
    end = time.monotonic() + seconds
    while True:
        page.wait_for_timeout(300)
        now = page.evaluate(LOOK)
        if what == "scroll" and now["top"] > before["top"] and now["path"] == before["path"]:
            return now
        if what == "page" and now["path"] != before["path"]:
            return now
        if what == "text" and now["text"] != before["text"] and now["path"] == before["path"]:
            return now
        assert time.monotonic() < end, f"{key!r} on /{before['path']}: no {what} change; now {now['path']}"


def test_presenter_keys_do_something_on_every_page(app, browser):
    """Presenter mode at 1024×768, on the main page and each of the 10 pages: space does the page's action (or
    scrolls a page with none), then → steps (or opens the next page of the sidebar's list)."""
    from streamlit.source_util import page_icon_and_name, page_sort_key

    order = [path for path, *_ in KEYS]
    files = sorted((Path(__file__).parents[1] / "pages").glob("*.py"), key=page_sort_key)
    assert order == ["", *(page_icon_and_name(f)[1] for f in files)]  # the main page, then every page, in order
    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(WAIT_MS)
    for i, (path, space, right) in enumerate(KEYS):
        page.goto(f"{app}/{path}?presenter=on")
        page.get_by_text("space plays or pauses").first.wait_for()
        settled(page)
        page.wait_for_timeout(1500)  # the key script is in place
        before = page.evaluate(LOOK)
        assert before["path"].endswith(path), before["path"]
        page.wait_for_timeout(1000)
        assert page.evaluate(LOOK) == before, f"/{path} changes by itself"  # so a change below is the key's
        press_and_see(page, " ", space, before)
        settled(page)
        page.wait_for_timeout(500)
        after = press_and_see(page, "ArrowRight", right, page.evaluate(LOOK))
        if right == "page":  # the next one in the list
            assert after["path"].endswith("/" + order[(i + 1) % len(order)]), (path, after["path"])
        assert page.locator('[data-testid="stException"]').count() == 0, path
    page.close()


@pytest.fixture(scope="module")
def app_no_fit(app):
    """The app on a laptop where the default pair fits nowhere: a memory budget of 10 KiB (SPECVIZ_MEMORY_GB)."""
    with serve(str(Path(__file__).parent / "models_tiny.yaml"), env={"SPECVIZ_MEMORY_GB": "0.00001"}) as url:
        yield url


# the input widgets drawn on the page (sidebar and main, scrolled to or not; none inside a collapsed expander)
WIDGETS = ("stButton", "stDownloadButton", "stTextArea", "stTextInput", "stNumberInput", "stSelectbox",
           "stMultiSelect", "stRadio", "stCheckbox", "stSlider", "stSelectSlider", "stFileUploader",
           "stButtonGroup", "stDateInput", "stColorPicker")
SHOWN_WIDGETS = """(ids) => [...document.querySelectorAll('[data-testid]')].filter(e => ids.includes(e.dataset.testid)
    && e.getBoundingClientRect().width > 0 && e.getBoundingClientRect().height > 0
    && !e.closest('details:not([open])'))  /* a collapsed expander keeps its content's boxes */
    .map(e => e.dataset.testid + ': ' + e.innerText.trim().split('\\n')[0])"""
FIRST_SCREEN_WIDGETS = 12  # presenter mode, source, prompt preset, k per round (and its slider), temperature,
# Run/Resume/Step/Replay, the run-file uploader, and the way in to the recorded runs where the pair cannot run


def test_a_laptop_without_room_for_the_pair_sees_the_way_in_first(app_no_fit, browser):
    """At 1024×768, where the default pair fits nowhere: the line saying so and the button to the recorded runs
    are on the first screen, with no scrolling, and the page shows a few controls (the rest under More
    settings). One click on it plays nothing yet but switches the source to the recorded runs."""
    page = open_page(browser, app_no_fit)
    line = page.get_by_test_id("stMain").get_by_text("no configuration of this pair fits").first  # the sidebar's
    # own note of it is in the collapsed More settings
    button = page.get_by_role("button", name="Watch the recorded runs (no model needed)")
    for el in (line, button):
        el.wait_for()
        box = el.bounding_box()
        assert box["y"] + box["height"] <= LAPTOP["height"], box
    assert page.evaluate("() => window.scrollY") == 0
    shown = page.evaluate(SHOWN_WIDGETS, list(WIDGETS))
    assert len(shown) <= FIRST_SCREEN_WIDGETS, shown
    button.click()
    page.get_by_role("button", name="Play recording", exact=True).wait_for()
    assert page.get_by_label("Recorded runs (no model needed)").is_checked()
    page.close()
