"""The real app in a real browser: `streamlit run app.py` driven by headless Chromium.

Uses the REAL default pair (no SPECVIZ_MODELS). The main flow presses Run on
the main page's defaults, the first run a newcomer sees, and checks that the
animation shows pending drafts, then coloured tokens, the round log and the
charts. Screenshots go to $SPECVIZ_SCREENSHOTS
(default: a temporary folder). Needs Debian's chromium (apt-get install
chromium) and Playwright for Python; skipped with the reason otherwise.
Run with: pytest -m browser tests/test_browser.py
(SPECVIZ_BROWSER_MODELS=tests/models_tiny.yaml checks the test itself in seconds.)
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specviz.devtools.loadtest import more_settings, serve

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic", "--no-first-run",
        "--disable-component-update", "--disable-sync"]
WAIT_MS = 180_000  # the first run loads the models (seconds from the cache) and generates on a CPU

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from specviz.decoding import models
    from specviz.modeling.config import DEFAULT_PATH

    registry = DEFAULT_PATH  # the real default pair, whatever SPECVIZ_MODELS says
    if os.environ.get("SPECVIZ_BROWSER_MODELS"):  # a quick check of the test itself, e.g. the tiny pair
        registry = os.environ["SPECVIZ_BROWSER_MODELS"]
    status = models.pair_status(None, registry)
    if not status.available:
        pytest.skip(f"the default pair is not installed: {status.reason} ({status.how_to_get})")
    with serve(registry) as url:  # `streamlit run app.py` on 127.0.0.1, as a user starts it
        yield url


@pytest.fixture(scope="module")
def tiny_server(server):
    """The app on the tiny random pairs (tests/models_tiny.yaml): flows whose model work on the real pair
    takes minutes on a CPU (a run of every offline pair, each next to the target alone) are checked in the
    browser here; their figures on the real pair are the bench's (docs/performance.md). SPECVIZ_PAIRS_MODELS=models.yaml
    runs them on the real pairs instead (for the screenshots in docs/)."""
    registry = os.environ.get("SPECVIZ_PAIRS_MODELS") or str(Path(__file__).parent / "models_tiny.yaml")
    with serve(registry) as url:
        yield url


@pytest.fixture(scope="module")
def shots() -> Path:
    d = Path(os.environ.get("SPECVIZ_SCREENSHOTS") or tempfile.mkdtemp(prefix="specviz-shots-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def _set_number(page, label: str, value: int) -> None:
    box = page.get_by_label(label, exact=True)
    if label == "max new tokens" and page.get_by_text("More settings").count():  # the main page: in its expander
        box = more_settings(page).get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")


LATENCY = re.compile(r"First round on screen ([\d.]+) s after Run was pressed: ([\d.]+) s of model work"
                     r"[^.]*?(?:and ([\d.]+) s loading the models)?\.")


def _latency(page) -> tuple[float, float, float]:
    """(seconds to the first round on screen, model work, model loading) as the page reports them."""
    el = page.get_by_text("First round on screen").first
    el.wait_for()
    m = LATENCY.search(el.inner_text())
    assert m, el.inner_text()
    return float(m.group(1)), float(m.group(2)), float(m.group(3) or 0.0)


def _shot(page, path: Path, top=None) -> None:
    """Screenshot of the viewport, with `top` (a locator) scrolled to the top of it."""
    if top is not None:
        top.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.mouse.move(1430, 990)  # no hover tooltip in the picture
    page.wait_for_timeout(600)
    page.screenshot(path=str(path))


def test_one_generation_with_the_real_pair(server, browser, shots):
    page = browser.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
    page.set_default_timeout(WAIT_MS)
    page.goto(server)
    page.get_by_text("Watch speculative decoding").first.wait_for()
    page.get_by_role("button", name="Run", exact=True).wait_for()

    # the page's defaults, as a newcomer presses Run: docs/main-page.png and docs/speed.png show this run
    # the first Run loads the pair; drafted tokens appear as pending, then get their verdict
    page.get_by_role("button", name="Run", exact=True).click()
    t0 = time.perf_counter()
    page.locator('.sv-text [data-state="pending"]').first.wait_for(state="attached")
    print(f"\nfirst pending tokens {time.perf_counter() - t0:.1f} s after the click (first load included)")
    page.get_by_text("✔ finished").first.wait_for()
    page.get_by_text("measured speedup").first.wait_for()  # the target-alone run came afterwards
    page.wait_for_timeout(2500)  # charts draw

    text = page.locator(".sv-text").first
    coloured = text.locator('[data-state="accepted"], [data-state="correction"], [data-state="bonus"]')
    _at_least(page, coloured, 3)
    _at_least(page, page.locator(".js-plotly-plot"), 3)  # p vs q, alpha trace, expected tokens
    _at_least(page, page.get_by_text("Round log"))
    assert page.locator('[data-testid="stException"]').count() == 0
    first, work, load = _latency(page)
    print(f"first run: round on screen {first:.1f} s after Run, model work {work:.1f} s, loading {load:.1f} s")
    assert first - work - load < 3.0

    _shot(page, shots / "main-page.png", page.get_by_text("Watch speculative decoding").first)
    _shot(page, shots / "round-detail.png", page.get_by_role("heading", name=re.compile(r"Round \d+ in detail")).first)
    _shot(page, shots / "acceptance.png", page.get_by_role("heading", name="Acceptance").first)
    _shot(page, shots / "speed.png", page.get_by_role("heading", name="Speed: speculative vs. the target alone"))

    # a second Run reuses the loaded models: the first round is on screen after little more than its model work
    page.get_by_text("Watch speculative decoding").first.scroll_into_view_if_needed()
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator('.sv-text [data-state="pending"]').first.wait_for(state="attached")
    page.get_by_text("✔ finished").first.wait_for()
    before = (first, work, load)
    for _ in range(WAIT_MS // 500):  # until the caption of the first run has been replaced
        first, work, load = _latency(page)
        if (first, work, load) != before:
            break
        page.wait_for_timeout(500)
    print(f"second run: round on screen {first:.1f} s after Run, model work {work:.1f} s, loading {load:.1f} s")
    assert load == 0.0 and first - work < 3.0
    page.close()


# two clicks on one button, gap ms apart: the second lands before the browser has drawn the rerun the first asked for
DOUBLE_PRESS = "(b, gap) => new Promise(done => { b.click(); setTimeout(() => { b.click(); done(); }, gap); })"


def _head(page) -> str:
    return page.locator("text=/ · round \\d+/").first.inner_text()


def _round_shown(page) -> int:
    return int(re.search(r" · round (\d+)", _head(page)).group(1))


def test_pause_step_resume_keep_the_run(server, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(WAIT_MS)
    page.goto(server)
    page.get_by_role("button", name="Run", exact=True).wait_for()
    _set_number(page, "max new tokens", 48)  # 3 to 5 rounds: a Pause that lands a round late still has one to step
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Run", exact=True).click()
    page.locator('.sv-text [data-state="pending"]').first.wait_for(state="attached")
    # pressed twice, 30 ms apart: the second press lands on Pause before the browser redraws it as Resume (a
    # double click, a slow server), and must not resume (a toggle did: the run played on to its end)
    page.get_by_role("button", name="Pause", exact=True).evaluate(DOUBLE_PRESS, 30)
    page.get_by_role("button", name="Resume", exact=True).wait_for()
    page.wait_for_timeout(3000)  # a round in progress when Pause was pressed is kept, then nothing moves
    paused = _round_shown(page)
    page.wait_for_timeout(5000)
    assert _round_shown(page) == paused
    assert "finished" not in _head(page), f"the run played on to its end after Pause: {_head(page)}"
    _click_until(page, page.get_by_role("button", name="Step", exact=True), re.compile(rf"· round {paused + 1}\b"))
    _click_until(page, page.get_by_role("button", name="Resume", exact=True), "✔ finished")
    assert _round_shown(page) >= paused + 1
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def test_recorded_run_replays_in_the_browser(server, browser, shots):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(server)
    page.get_by_text("Recorded runs (no model needed)").first.click()
    page.get_by_role("button", name="Play recording", exact=True).click()
    page.get_by_text("✔ finished").first.wait_for()
    page.get_by_text("Round to inspect").first.wait_for()  # the finished page is drawn
    _at_least(page, page.locator('.sv-text [data-state="accepted"]'))
    _at_least(page, page.get_by_text("no model loaded"))
    _shot(page, shots / "recorded-replay.png")
    page.close()


def _settled(page) -> None:
    """Wait until the app's script run has finished, so what is on the page is this run's, not a stale copy
    of the last one (a rerun keeps the old elements until it replaces them)."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()


def _text_changes(page, locator, before: str, seconds: float = 10.0) -> bool:
    """Whether locator's text moves away from `before` within `seconds`, looked at once each script run has
    settled. Right after a click the app can still read "notRunning" from the last run (the rerun the click
    asks for has not started), so a single look after _settled() can see the old text: in a full CI run the
    node box had not followed any of five clicks when looked at that way."""
    end = time.monotonic() + seconds
    while True:
        _settled(page)
        if locator.inner_text() != before:
            return True
        if time.monotonic() >= end:
            return False
        page.wait_for_timeout(200)


def _wait_or_show(page, text: str | re.Pattern) -> None:
    """Wait for text; on a timeout, fail with what the page shows instead (the end of its text)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_text(text).first.wait_for()
    except PlaywrightTimeout:
        shown = page.locator("body").inner_text()[-3000:]
        state = page.locator('[data-testid="stApp"]').get_attribute("data-test-script-state")
        pytest.fail(f"{text!r} did not appear; the script is {state}; the page ends with:\n{shown}")


def _at_least(page, locator, n: int = 1) -> None:
    """Wait until the page holds at least n of locator; on a timeout, fail with what the page shows. A count
    taken as soon as the script run has ended can miss elements: the lesson's two metrics, inside
    st.columns, appeared a moment after the run ended in 2 of 13 runs of the presenter test."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.nth(n - 1).wait_for(state="attached")
    except PlaywrightTimeout:
        shown = page.locator("body").inner_text()[-3000:]
        pytest.fail(f"fewer than {n} of {locator} on the page; it ends with:\n{shown}")


def _click_until(page, button, text: str | re.Pattern, tries: int = 3, quiet_ms: int = 20_000) -> None:
    """Click button and wait for text. A click that lands as the app's websocket delivers a rerun can be
    dropped (the script stays idle, nothing is computed), so when neither the text nor a running script
    shows within quiet_ms, click again; the last try waits as long as the test."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(1, tries):
        button.click()
        try:
            page.locator('[data-testid="stApp"][data-test-script-state="running"]').or_(
                page.get_by_text(text).first).first.wait_for(timeout=quiet_ms)
            break
        except PlaywrightTimeout:
            print(f"click {attempt} on {button} started nothing in {quiet_ms} ms; clicking again")
            _settled(page)
    else:
        button.click()
    _wait_or_show(page, text)


# the font size of the first metric's value and label, as drawn (normal mode: 36 and 14 pixels)
METRIC_PX = """() => {
  const m = document.querySelector('[data-testid="stMetric"]');
  const px = (sel) => parseFloat(getComputedStyle(m.querySelector(sel + ' p')).fontSize);
  return [px('[data-testid="stMetricValue"]'), px('[data-testid="stMetricLabel"]')];
}"""


# metric labels that end in '…' (their text cut), and token boxes drawn in two pieces across a line break
CUT_SHORT = """() => ({
  labels: [...document.querySelectorAll('[data-testid="stMetricLabel"]')].filter(l =>
    [l, ...l.querySelectorAll('*')].some(e =>
      e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'visible')).map(l => l.textContent),
  boxes: [...document.querySelectorAll('.sv-tok')].filter(e => !e.textContent.includes('⏎') &&
    [...e.getClientRects()].filter(r => r.width > 0).length > 1).map(e => e.textContent)})"""


def test_a_lesson_in_presenter_mode_with_the_keys(server, browser, shots):
    """Presenter mode on, a whole lesson from the recorded runs, driven by the keyboard: space runs
    each experiment, → goes to the next step. Screenshots for slides go to $SPECVIZ_SCREENSHOTS."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{server}/Lessons")
    page.get_by_text("step 1 of").first.wait_for(timeout=WAIT_MS)  # run alone, the page loads the pair first
    page.get_by_text("Recorded runs and theory (no model needed)").first.click()
    page.get_by_text("Presenter mode").first.click()
    page.get_by_text("space plays or pauses").first.wait_for()
    _settled(page)
    page.wait_for_timeout(1500)  # the key script is in place
    total = int(re.search(r"step 1 of (\d+)", page.get_by_text("step 1 of").first.inner_text()).group(1))
    run = page.get_by_role("button", name="Run the experiment", exact=True)
    next_step = page.get_by_role("button", name="Next step →", exact=True)
    for n in range(1, total + 1):
        if n == 2:  # Next pressed twice at once: the second press lands before the browser redraws the buttons
            # (a double click, a busy server), and must not skip step 2 (with a relative step it did, 5
            # of 7 tries at 0–5 ms)
            next_step.evaluate(DOUBLE_PRESS, 0)
            page.get_by_text(f"step 1 of {total}").wait_for(state="detached")
            page.wait_for_timeout(1500)
            _settled(page)
            shown = page.get_by_text(re.compile(r"step \d+ of \d+")).first.inner_text()
            assert f"step {n} of {total}" in shown, f"a double press of Next moved on to {shown!r}"
        elif n > 1:  # →: the next step
            page.evaluate("() => document.activeElement && document.activeElement.blur()")  # keys go to the page
            page.keyboard.press("ArrowRight")
            page.get_by_text(f"step {n} of {total}").first.wait_for()
        expect(run).to_be_visible(timeout=60_000)  # this step, not yet measured
        _settled(page)
        if n == 1:  # the room's answer, clicked by the presenter (a choice starts with none picked)
            page.get_by_text("identical", exact=True).first.click()
            _settled(page)
        page.evaluate("() => document.activeElement && document.activeElement.blur()")
        page.keyboard.press(" ")  # space: run the experiment
        expect(run).to_have_count(0, timeout=60_000)  # measured: the button gives way to the answer
        if n < total:
            expect(next_step).to_be_enabled(timeout=60_000)
        else:
            page.get_by_text("Lesson complete").first.wait_for()
        _settled(page)
        _at_least(page, page.get_by_text("your prediction"))  # the answer next to the prediction
        _at_least(page, page.get_by_text("measured"))
        if n == 1:
            expect(page.get_by_text("You predicted identical, and that is what was measured.")).to_be_visible()
            # the figures are what the room reads: larger than in normal mode, and larger than their labels
            value_px, label_px = page.evaluate(METRIC_PX)
            assert value_px > 36 and value_px > 2 * label_px, (value_px, label_px)
            _shot(page, shots / "lesson-presenter.png")
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def test_holding_space_in_presenter_mode_acts_once(tiny_server, browser):
    """A held key repeats its keydown (the keyboard's auto-repeat, after about half a second): presenter mode
    acts on the first press of space only, so holding it does not pause and resume in turn."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 1000})  # a projector's width
    page.set_default_timeout(60_000)
    page.goto(tiny_server)
    page.get_by_text("Watch speculative decoding").first.wait_for()
    _settled(page)
    page.get_by_text("Recorded runs (no model needed)").first.click()
    _settled(page)
    # a recording of many rounds (the first one, the best-k first run, makes its 48 tokens in 3)
    page.get_by_test_id("stSelectbox").filter(has_text="Recorded run").click()
    page.get_by_role("option", name=re.compile("^The capital of France")).click()
    _settled(page)
    page.get_by_text("Presenter mode").first.click()
    page.get_by_text("space plays or pauses").first.wait_for()
    _settled(page)
    page.wait_for_timeout(1500)  # the key script is in place
    page.evaluate("() => document.activeElement && document.activeElement.blur()")  # keys go to the page
    pause = page.get_by_role("button", name="Pause", exact=True)
    resume = page.get_by_role("button", name="Resume", exact=True)
    page.keyboard.press(" ")  # plays the recording (slowly, in presenter mode)
    expect(pause).to_be_visible()
    page.keyboard.press(" ")  # pauses it
    expect(resume).to_be_enabled()
    page.keyboard.down(" ")  # held: the first keydown resumes ...
    expect(pause).to_be_visible()
    page.wait_for_timeout(500)
    page.keyboard.down(" ")  # ... and the auto-repeat, once Pause is drawn again, must not pause it
    page.keyboard.down(" ")
    page.keyboard.up(" ")
    _wait_or_show(page, "✔ finished")  # a paused run would wait here until the timeout
    assert page.locator('[data-testid="stException"]').count() == 0
    _settled(page)
    # in the presenter's type at 1280 pixels, every metric label is whole and every token one box
    assert page.evaluate(CUT_SHORT) == {"labels": [], "boxes": []}
    # and the round log is an HTML table in the room's type (a dataframe's canvas keeps 14-pixel type): one row
    # per round, none of it past the page's right edge
    rounds = int(re.search(r"round \d+/(\d+)", page.get_by_text(re.compile(r"round \d+/\d+")).first.inner_text())[1])
    log = page.evaluate("""() => {
        const t = [...document.querySelectorAll('[data-testid="stTable"] table')].find(t =>
            [...t.querySelectorAll('th')].some(h => h.textContent.trim() === 'verify ms'));
        if (!t) return null;
        const td = t.querySelector('tbody td');
        return {rows: t.querySelectorAll('tbody tr').length, px: parseFloat(getComputedStyle(td).fontSize),
                right: t.getBoundingClientRect().right, width: document.documentElement.clientWidth,
                canvas: document.querySelectorAll('[data-testid="stDataFrame"]').length}; }""")
    assert log is not None and log["rows"] == rounds > 10, (rounds, log)
    assert log["px"] > 14 and log["right"] <= log["width"] and log["canvas"] == 0, log
    page.close()


def test_the_token_tree_page_drafts_verifies_and_colours_a_tree(server, browser, shots):
    page = browser.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
    page.set_default_timeout(WAIT_MS)
    page.goto(server.rstrip("/") + "/Token_tree")
    page.get_by_text("device").first.wait_for()  # the pair is loaded
    _set_number(page, "max new tokens", 16)
    _settled(page)
    page.get_by_role("button", name="First round", exact=True).click()
    page.get_by_role("heading", name="One node: p against q, and the decision").wait_for()
    _settled(page)  # the depth-by-depth animation has ended in the coloured tree
    page.get_by_text("Round 1: a tree of").first.wait_for()
    _at_least(page, page.get_by_text("accepted path"))  # the legend of the coloured tree
    _at_least(page, page.locator('.sv-text [data-state="accepted"], .sv-text [data-state="bonus"], '
                                 '.sv-text [data-state="correction"]'))
    _at_least(page, page.locator(".js-plotly-plot"), 3)  # the tree, p vs q at a node, acceptance
    # the round in a sentence, with its draft passes' and its one verify pass's own times
    _at_least(page, page.get_by_text(re.compile(r"Drafted \d+ nodes? in \d+ draft pass.* in one pass \(\d+ ms")))
    assert page.locator('[data-testid="stException"]').count() == 0
    _shot(page, shots / "token-tree.png", page.get_by_role("heading", name="The tree").first)
    # clicking a node in the tree picks it in the node box below
    story = page.locator('[data-testid="stMarkdownContainer"] p', has_text=re.compile(r"is child #\d+ of"))
    before = story.first.inner_text()
    for point in page.locator(".js-plotly-plot").first.locator("path.point").all()[1:6]:
        point.click(force=True)
        if _text_changes(page, story.first, before):
            break
    assert story.first.inner_text() != before
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


# the labels of metrics and buttons that end in '…' (their text cut short)
CUT_LABELS = """() => [...document.querySelectorAll('[data-testid="stMetricLabel"], [data-testid="stButton"] button')]
  .filter(l => [l, ...l.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1 &&
    getComputedStyle(e).textOverflow === 'ellipsis')).map(l => l.textContent)"""


def test_a_laptop_screen_cuts_no_label(tiny_server, browser):
    """At 1024 pixels with the sidebar open (a laptop), the Slow motion page's buttons and the Exactness
    page's metrics read whole: they wrap onto another line instead of ending in '…'."""
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    page.set_default_timeout(WAIT_MS)
    page.goto(tiny_server.rstrip("/") + "/Slow_motion_round")
    first = page.get_by_role("button", name="First round", exact=True)
    first.wait_for()
    _settled(page)
    assert page.locator('[data-testid="stSidebar"]').bounding_box()["width"] > 200  # open, taking its room
    _click_until(page, first, "The text so far")
    _settled(page)
    assert page.evaluate(CUT_LABELS) == []
    page.goto(tiny_server.rstrip("/") + "/Exactness")
    trials = page.get_by_role("button", name=re.compile(r"^Run \d+ trials$"))
    trials.wait_for()
    _settled(page)
    _click_until(page, trials, "expected from noise alone")
    _settled(page)
    assert page.locator('[data-testid="stMetricLabel"]').count() >= 4
    assert page.evaluate(CUT_LABELS) == []
    page.close()


def test_offline_pairs_side_by_side_and_the_rule_lab(tiny_server, browser, shots):
    """The main page's side-by-side of the offline pairs, and the Exactness page's acceptance-rule lab:
    each runs, draws its chart and table without an exception; screenshots for docs/."""
    server = tiny_server
    page = browser.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
    page.set_default_timeout(WAIT_MS)
    from playwright.sync_api import expect

    page.goto(server)
    page.get_by_text("Watch speculative decoding").first.wait_for()
    _settled(page)
    _set_number(page, "max new tokens", 16)
    page.wait_for_timeout(1500)
    _settled(page)  # the rerun for the new number is over: a click now is not lost in it
    page.get_by_text("Compare the offline pairs on this prompt").first.click()  # open the expander
    button = page.get_by_role("button", name=re.compile(r"Compare the offline pairs$"))
    expect(button).to_be_enabled()
    _settled(page)
    _click_until(page, button, "The measured speedup is over the rounds after the first")
    _settled(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.wait_for_timeout(2000)  # the chart draws
    _shot(page, shots / "offline-pairs.png", page.get_by_text("Compare the offline pairs on this prompt").first)

    page.goto(server.rstrip("/") + "/Exactness")
    page.get_by_text("Which acceptance rules keep the distribution?").first.wait_for()
    _set_number(page, "trials per rule", 5000)
    page.wait_for_timeout(1500)
    _settled(page)
    _click_until(page, page.get_by_role("button", name="Compare the rules", exact=True),
                 "Up is faster (more drafts kept)")
    _settled(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.wait_for_timeout(2000)
    _shot(page, shots / "acceptance-rules.png", page.get_by_text("Compare the rules").first)
    page.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-m", "browser", "-s"]))


# a link of the sidebar's page list, clicked in the page (presenter mode keeps the sidebar collapsed): a change
# of page inside the app, as a click on the list is, not a reload
NAV = """(name) => { const a = [...document.querySelectorAll('[data-testid="stSidebarNav"] a')]
    .find(a => a.textContent.trim() === name); a.click(); }"""


def test_presenter_keys_source_and_progress_survive_page_changes_and_a_reload(tiny_server, browser):
    """Lessons → Theory → Lessons in presenter mode: the keys still drive the lesson (space runs the step,
    → goes on). Then a reload: presenter mode, the recorded source and the lesson's step are still there; the
    measured answer is the first session's own, not in the address."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{tiny_server}/Lessons")
    page.get_by_text("step 1 of").first.wait_for(timeout=WAIT_MS)
    page.get_by_text("Recorded runs and theory (no model needed)").first.click()
    _settled(page)
    page.get_by_text("Presenter mode").first.click()
    page.get_by_text("space plays or pauses").first.wait_for()
    _settled(page)
    for name in ("Theory", "Lessons"):  # two changes of page, inside the app
        page.evaluate(NAV, name)
        page.wait_for_url(re.compile(f"/{name}"))
        _settled(page)
    page.get_by_text("step 1 of").first.wait_for()
    page.get_by_text("space plays or pauses").first.wait_for()
    page.wait_for_timeout(1500)  # the key script is in place
    run = page.get_by_role("button", name="Run the experiment", exact=True)
    expect(run).to_be_visible()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")  # keys go to the page
    page.keyboard.press(" ")  # space: run the experiment
    expect(run).to_have_count(0, timeout=60_000)
    expect(page.get_by_role("button", name="Next step →", exact=True)).to_be_enabled()
    _settled(page)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press("ArrowRight")  # →: the next step
    page.get_by_text("step 2 of").first.wait_for()
    _settled(page)
    page.reload()  # a new session: what survives comes from the address
    page.get_by_text("step 2 of").first.wait_for(timeout=WAIT_MS)
    page.get_by_text("space plays or pauses").first.wait_for()
    assert page.get_by_label("Recorded runs and theory (no model needed)").is_checked()
    page.get_by_role("button", name="← Previous step", exact=True).click()
    page.get_by_text("step 1 of").first.wait_for()
    # step 1's measured answer stayed with the first session: the address carries no one's results
    page.get_by_role("button", name="Run the experiment", exact=True).wait_for()
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def test_the_page_list_names_the_main_page_for_what_it_does(tiny_server, browser):
    """The sidebar lists the main page by what it does (not "app", from app.py); a click on it from another page
    opens the main page at the app's root address, and a click on a page goes to that page's own address."""
    from pages.common import nav

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{tiny_server}/Theory")
    _settled(page)
    links = page.locator('[data-testid="stSidebarNav"] a')
    links.first.wait_for()
    names = [t.strip() for t in links.all_inner_texts()]
    assert names[0] == nav.MAIN_TITLE and "app" not in names and "Lessons" in names, names
    page.evaluate(NAV, nav.MAIN_TITLE)
    page.get_by_role("heading", name="Watch speculative decoding").wait_for()
    assert page.url.rstrip("/") == tiny_server.rstrip("/")
    page.evaluate(NAV, "Lessons")
    page.wait_for_url(re.compile("/Lessons"))
    page.get_by_text("step 1 of").first.wait_for()
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


@pytest.mark.parametrize("path, shows", [("Slow_motion_round", "{n} round"), ("Token_tree", "round {n}")])
def test_presenter_keys_step_the_rounds_on_the_pages_that_step_by_hand(tiny_server, browser, path, shows):
    """Slow motion round and Token tree have no Run or Pause: in presenter mode → takes the first round, then
    the next, and space the next one too."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{tiny_server}/{path}")
    page.get_by_text("Presenter mode").first.wait_for(timeout=WAIT_MS)
    _settled(page)
    page.get_by_text("Presenter mode").first.click()
    page.get_by_text("space plays or pauses").first.wait_for()
    _settled(page)
    page.wait_for_timeout(1500)  # the key script is in place
    for n, key in ((1, "ArrowRight"), (2, "ArrowRight"), (3, " ")):
        page.evaluate("() => document.activeElement && document.activeElement.blur()")  # keys go to the page
        page.keyboard.press(key)
        page.get_by_text(shows.format(n=n)).first.wait_for(timeout=WAIT_MS)
        _settled(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def test_a_new_run_clears_the_last_runs_figures_at_once(tiny_server, browser):
    """Play one recording to its end, then another: while the second animates, the first one's speed figures are
    gone at once, not left on screen (faded) until the new animation ends."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(tiny_server)
    page.get_by_text("Watch speculative decoding").first.wait_for(timeout=WAIT_MS)
    _settled(page)
    page.get_by_text("Recorded runs (no model needed)").first.click()
    _settled(page)
    play = page.get_by_role("button", name="Play recording", exact=True)
    play.click()  # the first recording: a few rounds
    page.get_by_text("✔ finished").first.wait_for()
    figures = page.get_by_text(re.compile("^measured speedup"))
    figures.first.wait_for()
    _settled(page)
    page.get_by_test_id("stSelectbox").filter(has_text="Recorded run").click()
    page.get_by_role("option", name=re.compile("^The capital of France")).click()  # many rounds
    _settled(page)
    play.click()
    page.get_by_text(re.compile(r"round 1/\d+")).first.wait_for()  # the new run animates
    expect(figures).to_have_count(0, timeout=3000)  # and the last run's figures are gone already
    assert page.get_by_text("✔ finished").count() == 0  # still animating: this was not the end of the run
    page.get_by_text("✔ finished").first.wait_for()
    figures.first.wait_for()  # the new run's own, once it has finished
    page.close()
