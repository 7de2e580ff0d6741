"""AppTest of the main page (app.py) on the tiny random pair (tests/models_tiny.yaml).

Each test drives the page like a user (widgets, buttons, uploads) and checks
what is drawn against specviz called directly on the same tiny models.
"""

from __future__ import annotations

import base64
import json
import re
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TINY = Path(os.environ.get("SPECVIZ_TEST_MODELS") or ROOT / "tests" / "models_tiny.yaml")

pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")

STATES = ("sv-accepted", "sv-rejected", "sv-correction", "sv-bonus")


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    """Every test here runs the pages on the tiny pair (see conftest.tiny_app_registry)."""
    return tiny_app_registry(TINY)


def new_app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def start(at, **settings):
    """Set sidebar widgets by key suffix (speed instant unless given), press Run."""
    settings.setdefault("speed", "instant")
    settings.setdefault("k_policy", "fixed")  # the direct calls compared against draft a fixed k
    kinds = {"speed": "select_slider", "k": "slider", "temperature": "slider", "top_p": "slider",
             "max_new": "number_input", "seed": "number_input", "prompt": "text_area", "chat": "checkbox",
             "baseline": "checkbox", "k_policy": "radio", "drafter": "radio", "dtype": "radio"}
    for name, value in settings.items():
        getattr(at, kinds[name])(key=f"main.{name}").set_value(value)
    at.button(key="main.run_btn").click().run()
    assert not at.exception, at.exception
    return at


def registry_pair():
    """The pair the page loads: the registry's default (the module's tiny registry), as models.load_pair(None)."""
    from specviz.decoding import models

    return models.load_pair(None)


def test_the_server_freezes_the_heap_once_a_pair_is_loaded():
    """A full garbage collection must not walk the models: the page's load freezes what is alive
    (tuning.freeze_heap)."""
    import gc

    from specviz.service import pairs

    pairs.clear()  # this test's page loads the pair
    gc.unfreeze()
    try:
        start(new_app(), max_new=4)  # Run loads the pair
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def direct_run(prompt: str, chat: bool, **kw):
    """The same generation straight from specviz, without the page."""
    from specviz.core import prompts
    from specviz import speculative_decode

    pair = registry_pair()
    ids = prompts.encode(pair.tokenizer, prompt, chat)
    return speculative_decode(pair.target, pair.draft, ids, DecodeSettings(**kw), eos_token_id=pair.eos_token_ids,
                              vocab=pair.shared_vocab)


def text_html(at) -> str:
    found = [m.value for m in at.markdown if 'class="sv-text"' in m.value and "sv-prompt" in m.value]
    assert found, "no token text drawn"
    return found[0]


def figures(at) -> dict[str, dict]:
    """plotly figures by element key (suffix after the widget-id prefix)."""
    from streamlit.runtime.state.common import user_key_from_element_id

    out = {}
    for el in at.get("plotly_chart"):
        out[user_key_from_element_id(el.proto.id) or el.proto.id] = json.loads(el.proto.spec)
    return out


def values(v) -> np.ndarray:
    """A numeric array of a figure's JSON: a list, or plotly's {"dtype", "bdata"} (base64)."""
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
    return np.asarray(v, dtype=float)


def metric(at, label_start: str) -> str:
    for m in at.metric:
        if m.label.startswith(label_start):
            return m.value
    raise AssertionError(f"no metric {label_start!r}: {[m.label for m in at.metric]}")


# --------------------------------------------------------------------------------------------
def test_presenter_mode_large_type_slow_animation_and_back():
    from pages.common import ui

    def css(at) -> list[str]:
        return [m.value for m in at.markdown if m.value.startswith("<style>") and ".sv-text" in m.value]

    at = new_app()
    assert at.toggle(key="ui.presenter").value is False and not css(at)
    at.select_slider(key="main.speed").set_value("fast").run()
    at.toggle(key="ui.presenter").set_value(True).run()
    assert not at.exception and at.session_state[ui.PRESENTER] == "on"
    assert css(at) == [ui.PRESENTER_CSS] and "font-size: 30px" in css(at)[0]
    assert at.select_slider(key="main.speed").value == "slow"  # its own default, whatever was picked before
    at.toggle(key="ui.presenter").set_value(False).run()
    assert not css(at) and at.select_slider(key="main.speed").value == "normal"


PQ_TITLE = re.compile(r"draft #\d+ .*(chance to accept|the target's argmax)")  # charts.fig_pq's title


def test_presenter_mode_shows_one_chart_at_a_time_and_binds_keys():
    from pages.common import ui
    from specviz.teaching import charts

    def pq_charts(at) -> int:  # p vs q charts of the round shown in detail
        return sum(bool(PQ_TITLE.search(json.loads(c.proto.spec)["layout"]["title"]["text"]))
                   for c in at.get("plotly_chart"))

    at = start(new_app(), max_new=12, k=4, baseline=False)
    at.number_input(key="main.round_no").set_value(1).run()  # the first round drafted k = 4
    drafted = at.session_state["main.job"].rounds[0].k
    assert pq_charts(at) == drafted > 1  # without presenter mode: one p/q chart per drafted position
    def layouts(at) -> dict[str, dict]:  # title (its lines joined: a chart in half the page wraps it) -> layout
        return {(lay := json.loads(c.proto.spec)["layout"])["title"]["text"].replace("<br>", " "): lay
                for c in at.get("plotly_chart")}

    base = layouts(at)
    at.toggle(key="ui.presenter").set_value(True).run()
    assert not at.exception and pq_charts(at) == 1
    # every chart grows with the room's type: its title and its plot (charts.for_presenter)
    big = layouts(at)
    assert big and set(big) <= set(base)
    for title, lay in big.items():
        assert lay["title"]["font"]["size"] == pytest.approx(charts.TITLE_PX * charts.PRESENTER_SCALE)
        plot = lambda lay: lay["height"] - lay["margin"]["t"]  # noqa: E731 - the part under the title's lines
        assert plot(lay) == pytest.approx(plot(base[title]) * charts.PRESENTER_SCALE)
    assert [t.label for t in at.tabs] == ["α over the run", "tokens per pass", "k per round"]
    assert any("space plays or pauses" in c.value for c in at.sidebar.caption)
    assert "keydown" in ui.PRESENTER_KEYS and "'Step'" in ui.PRESENTER_KEYS


def test_presenter_mode_round_log_in_the_rooms_type():
    """On a projector the round log is an HTML table (st.table), whose type grows with the page's; the
    dataframe's canvas stays at 14 px. Its rounds are chosen by number there."""
    from pages.common import main_view

    def log_rounds(elements) -> list[list[int]]:  # the "round" column of each table drawn as a round log
        return [list(e.value["round"]) for e in elements if "verify ms" in e.value.columns]

    at = start(new_app(), max_new=12, k=4, baseline=False)
    n = len(at.session_state["main.job"].rounds)
    assert log_rounds(at.dataframe) == [list(range(1, n + 1))] and log_rounds(at.table) == []
    at.toggle(key="ui.presenter").set_value(True).run()
    assert not at.exception
    assert log_rounds(at.table) == [list(range(1, n + 1))] and log_rounds(at.dataframe) == []
    assert any("Type a round number below" in c.value for c in at.caption)
    # round 1's note (it read the prompt) is said above the table, not in a column cut off at the edge
    assert "note" not in next(t for t in at.table if "verify ms" in t.value.columns).value.columns
    assert any("Round 1: passes also read the prompt" in c.value for c in at.caption)
    # st.table renders each cell's shown text as markdown: the drafted text is shown escaped, every character
    # literal (a drafted "```" would open a code block, and a file's token could plant a link)
    from streamlit import dataframe_util
    from specviz.teaching import render

    log = next(t for t in at.table if "verify ms" in t.value.columns)
    shown = dataframe_util.convert_arrow_bytes_to_pandas_df(log.proto.arrow_data.styler.display_values)
    drafted = list(log.value["drafted"])
    assert any(set(d) & set("|`*_[]()") for d in drafted)  # " | " joins the drafted tokens
    assert list(shown["drafted"]) == [render.md_text(d) for d in drafted]
    at.number_input(key="main.round_no").set_value(1).run()
    assert not at.exception and any(s.value == "Round 1 in detail" for s in at.subheader)
    # a log longer than the room's table: its last rows, in the room's type, and the page says which
    main_view.PRESENTER_LOG_ROWS, old = n - 1, main_view.PRESENTER_LOG_ROWS
    try:
        at.run()
        assert log_rounds(at.table) == [list(range(2, n + 1))] and log_rounds(at.dataframe) == []
        assert any(f"The last {n - 1} of {n} rounds (rounds 2–{n})" in c.value for c in at.caption)
        assert not any("Round 1: passes also read the prompt" in c.value for c in at.caption)  # not shown
        at.number_input(key="main.round_no").set_value(1).run()  # a round not in the table is still picked
        assert not at.exception and any(s.value == "Round 1 in detail" for s in at.subheader)
    finally:
        main_view.PRESENTER_LOG_ROWS = old


# --------------------------------------------------------------------------------------------
@pytest.mark.cores
def test_defaults_and_no_exception():
    from specviz.decoding import models
    from specviz.core import prompts
    from specviz.modeling import quant
    from specviz.service import pairs

    at = new_app()
    assert at.slider(key="main.k").value == 4
    assert at.slider(key="main.temperature").value == 0.0
    assert at.slider(key="main.top_p").value == 1.0
    assert at.number_input(key="main.max_new").value == 48
    assert at.number_input(key="main.seed").value == 0
    assert at.radio(key="main.dtype").value == pairs.default_dtype_name()
    assert at.radio(key="main.drafter").value == "draft model"
    assert at.radio(key="main.k_policy").value == prompts.FIRST_RUN.k_policy  # the engine's name
    assert at.radio(key="main.k_policy").options == ["fixed", "adaptive", "best k"]  # labels of the engine's policies
    assert at.checkbox(key="main.baseline").value is True
    assert at.select_slider(key="main.speed").value == "normal"
    first = prompts.preset(prompts.FIRST_RUN.preset)  # chosen by measurement: it shows the speedup
    assert at.text_area(key="main.prompt").value == first.text
    assert at.checkbox(key="main.chat").value is first.chat
    assert at.radio(key="main.draft_precision").value == quant.default_precision("cpu")
    assert at.selectbox(key="main.pair").value == models.list_pairs()[0].name
    # device and dtype shown; an invitation to run, no tokens yet
    assert any("device" in c.value and "dtype" in c.value for c in at.sidebar.caption)
    assert any("Run" in i.value for i in at.info)
    assert not at.error


def test_a_long_round_draws_one_p_vs_q_chart_at_a_time_from_the_decisive_draft():
    """A best-k round drafts up to 32 tokens: a chart for each made the page slow to draw and scroll. Past
    six drafted positions the page draws one, with a picker that starts at the first refused draft."""
    from pages.common.main_view import PQ_CHARTS_MAX

    at = start(new_app(), max_new=24, k=PQ_CHARTS_MAX + 2, baseline=False)
    job = at.session_state["main.job"]
    at.number_input(key="main.round_no").set_value(1).run()
    r = job.rounds[0]
    assert r.k == PQ_CHARTS_MAX + 2
    pq = [k for k in figures(at) if k.startswith("main.pq.")]
    first = r.n_accepted if r.rejected else r.k - 1
    assert pq == [f"main.pq.{first}"]
    assert at.select_slider(key=f"main.pq_pos.1.{r.k}").value == first
    at.select_slider(key=f"main.pq_pos.1.{r.k}").set_value(0).run()
    assert [k for k in figures(at) if k.startswith("main.pq.")] == ["main.pq.0"]


def test_run_draws_tokens_log_charts_and_metrics():
    from specviz.teaching import explain

    at = start(new_app(), max_new=24, prompt="hello world", chat=False)
    assert not at.error, [e.value for e in at.error]
    job = at.session_state["main.job"]
    assert job.done and job.run is not None
    run = job.run

    # the page shows exactly what specviz computes directly
    ref = direct_run("hello world", False, k=4, temperature=0.0, max_new_tokens=24, seed=0)
    assert run.token_ids == ref.token_ids

    html = text_html(at)
    assert "sv-accepted" in html and ("sv-correction" in html or "sv-bonus" in html)
    n_spans = sum(html.count(f'data-state="{s[3:]}"') for s in STATES)
    assert n_spans >= len(run.token_ids)

    # round log: one row per round
    log = [d for d in at.dataframe if "drafted" in d.value.columns and "round" in d.value.columns]
    assert len(log) == 1 and len(log[0].value) == len(run.rounds)
    assert list(log[0].value["round"]) == list(range(1, len(run.rounds) + 1))
    assert all(d.proto.placeholder == explain.MISSING for d in at.dataframe)  # no cell reads "None"

    # the last round is inspected: one p-vs-q chart per drafted position, with p and q bars
    last = run.rounds[-1]
    figs = figures(at)
    pq = [k for k in figs if k.startswith("main.pq.")]
    assert len(pq) == last.k
    for key in pq:
        names = [t.get("name") for t in figs[key]["data"]]
        assert names == ["target p", "draft q"]
    assert any("alpha" in k for k in figs) and any("expected" in k for k in figs)
    exp = figs[[k for k in figs if "expected" in k][0]]
    assert "measured (this run)" in [t.get("name") for t in exp["data"]]

    # three acceptance measures, each in range and as defined
    a, rate, tpp = (float(metric(at, s)) for s in ("α", "accepted ÷ drafted", "tokens per target pass"))
    assert 0 <= rate <= a <= 1
    assert tpp >= 1
    assert a == pytest.approx(run.alpha, abs=0.006) and tpp == pytest.approx(run.tokens_per_pass, abs=0.006)
    assert any("accepted / judged" in c.value for c in at.caption)

    # the first round is drawn promptly: little work besides the model's own before it
    m = job.meta
    ui_s = m["t_first_draw"] - m["t_run"] - m["load_s"] - run.prefill_s - run.rounds[0].round_s
    assert ui_s < 3.0
    assert any("First round on screen" in c.value for c in at.caption)

    # the target alone ran afterwards: greedy → identical text (float64 tiny models)
    base = job.meta["baseline"]
    assert base["identical"] is True and base["base_target_passes"] == len(run.token_ids)
    assert any("identical text" in s.value for s in at.success)


def test_rejected_round_shows_residual():
    at = start(new_app(), max_new=24, temperature=1.0, seed=2, prompt="abc abc", baseline=False)
    run = at.session_state["main.job"].run
    rejected = [r for r in run.rounds if r.rejected and r.extra_kind == "correction"]
    assert rejected, "expected a rejection with these settings"
    r = rejected[0]
    at.number_input(key="main.round_no").set_value(r.index + 1).run()
    assert not at.exception
    figs = figures(at)
    assert "main.residual" in figs
    names = [t.get("name") for t in figs["main.residual"]["data"]]
    assert "residual norm(max(0, p − q))" in names
    # sampling mode: the decision table shows u against min(1, p/q)
    table = [d.value for d in at.dataframe if "u" in d.value.columns]
    assert table and len(table[0]) == r.k


def test_the_first_verdict_gets_a_longer_pause_so_a_local_browser_can_draw_it(monkeypatch):
    """In Chromium on the same 2-core machine, at "normal" the second round's passes ran while the browser still
    built the page from the first verdict, and were flagged as outside load in 6 of 6 runs (docs/workshop.md)."""
    from specviz.data import playback

    pauses = []
    monkeypatch.setattr(playback, "sleep", pauses.append)
    at = start(new_app(), speed="normal", k=2, max_new=16, prompt="hello world", chat=False, baseline=False)
    run = at.session_state["main.job"].run
    assert len(run.rounds) > 2
    pend, after = playback.SPEEDS["normal"]
    assert after < playback.FIRST_VERDICT_S
    # per round: the pending pause (every round drafts here), then the pause after its verdict
    assert pauses == [pend, playback.FIRST_VERDICT_S] + [pend, after] * (len(run.rounds) - 1)
    # "instant" stays instant
    assert playback.after_pause(0, 0.0) == 0.0 and playback.after_pause(1, after) == after


def test_empty_prompt_shows_error_not_traceback():
    at = start(new_app(), prompt="   ")
    assert not at.exception
    assert any("empty" in e.value for e in at.error)
    assert not [m for m in at.markdown if 'class="sv-text"' in m.value], "tokens drawn for an empty prompt"


def test_same_seed_same_text_and_matches_direct_call():
    settings = dict(max_new=20, temperature=0.9, seed=7, prompt="the cat", chat=True, baseline=False)
    a = start(new_app(), **settings).session_state["main.job"].run
    b = start(new_app(), **settings).session_state["main.job"].run
    assert a.token_ids == b.token_ids
    ref = direct_run("the cat", True, k=4, temperature=0.9, max_new_tokens=20, seed=7)
    assert a.token_ids == ref.token_ids


def test_step_then_resume_keeps_rounds():
    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    at.number_input(key="main.max_new").set_value(20)
    at.checkbox(key="main.baseline").set_value(False)
    at.button(key="main.step_btn").click().run()
    job = at.session_state["main.job"]
    assert len(job.rounds) == 1 and not job.done
    at.button(key="main.step_btn").click().run()
    assert at.session_state["main.job"] is job and len(job.rounds) == 2
    first_two = list(job.rounds)
    # any other rerun (a widget change) must not lose or advance the paused run
    at.slider(key="main.k").set_value(5).run()
    assert len(job.rounds) == 2
    at.button(key="main.resume_btn").click().run()  # resume: plays to the end
    assert job.done and job.rounds[:2] == first_two
    from specviz.core import prompts

    first = prompts.preset(prompts.FIRST_RUN.preset)
    ref = direct_run(first.text, first.chat, k=4, temperature=0.0, max_new_tokens=20, seed=0)
    assert job.run.token_ids == ref.token_ids  # greedy: the same text whatever k each round drafted


@pytest.mark.parametrize("chat", [True, False])
def test_the_reply_to_a_chat_message_starts_on_its_own_line(chat):
    """A run whose prompt went in through the chat template shows the model's text as a reply, on a new line;
    raw text continues the prompt's line. A shipped recording says which it was."""
    at = start(new_app(), max_new=8, chat=chat, baseline=False)
    assert ('<br class="sv-reply">' in text_html(at)) is chat
    from specviz.data import runfile

    recs = {r.name: r for r in runfile.list_recorded()}
    assert recs["code-greedy"].chat is True and recs["capital-of-france-greedy"].chat is False


def test_export_then_load_replays_same_tokens():
    from specviz.data import runfile

    at = start(new_app(), max_new=16, temperature=0.7, seed=3, baseline=False)
    job = at.session_state["main.job"]
    assert at.get("download_button"), "no download button"
    data = runfile.export_json(job.run, job.meta["decode"], job.prompt_text, job.meta["pair"],
                               chat=job.meta["chat"])  # as the page's download button does
    html_live = text_html(at)

    at2 = new_app()
    at2.select_slider(key="main.speed").set_value("instant")
    at2.file_uploader(key="main.upload").set_value(("run.json", data.encode(), "application/json"))
    at2.run()
    assert not at2.exception and not at2.error, [e.value for e in at2.error]
    job2 = at2.session_state["main.job"]
    assert job2.source == "replay" and job2.done
    assert job2.run.token_ids == job.run.token_ids
    assert [r.drafted for r in job2.rounds] == [r.drafted for r in job.rounds]
    assert text_html(at2) == html_live  # the same coloured tokens, drawn from the file alone


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not valid JSON"),
    (b'{"format": "something else"}', "not a specviz run file"),
    (b"\xff\xfe\x00", "not UTF-8"),
])
def test_malformed_upload_gives_error(content, message):
    at = new_app()
    at.file_uploader(key="main.upload").set_value(("bad.json", content, "application/json"))
    at.run()
    assert not at.exception
    assert any(message in re.sub(r"\\(.)", r"\1", e.value) for e in at.error), [e.value for e in at.error]


def test_inconsistent_run_file_is_refused():
    from specviz.data import runfile

    at = start(new_app(), max_new=12, baseline=False)
    job = at.session_state["main.job"]
    d = json.loads(runfile.export_json(job.run, job.meta["decode"], job.prompt_text))
    d["rounds"][0]["n_accepted"] = 99
    at2 = new_app()
    at2.file_uploader(key="main.upload").set_value(("tampered.json", json.dumps(d).encode(), "application/json"))
    at2.run()
    assert not at2.exception
    assert any("malformed" in e.value for e in at2.error)


def test_recorded_runs_replay_without_loading_a_model(monkeypatch):
    from specviz.decoding import models
    from specviz.data import runfile
    from specviz.service import pairs

    recs = runfile.list_recorded()
    assert len(recs) >= 3, "shipped recordings missing from specviz/recorded/"

    def no_load(*a, **k):
        raise AssertionError("a model was loaded to replay a recording")

    monkeypatch.setattr(models, "load_pair", no_load)
    calls = pairs.LOAD_CALLS
    at = new_app()
    assert "Press **Run** to watch" in at.info[0].value
    at.radio(key="main.source").set_value("Recorded runs (no model needed)").run()
    # the page names the button it shows: "Run" read wrong beside a button labelled "Play recording"
    assert at.button(key="main.run_btn").label == "Play recording" and "Press **Play recording**" in at.info[0].value
    # the offline pairs' comparison loads every pair: recorded mode says so in one line, not silently gone
    assert any("Recorded mode does not cover this section" in c.value and "offline pairs" in c.value
               for c in at.caption), [c.value for c in at.caption]
    at.selectbox(key="main.recording").set_value(recs[0].name)
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.run_btn").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = at.session_state["main.job"]
    assert job.done and job.run.token_ids == recs[0].run.token_ids
    assert pairs.LOAD_CALLS == calls
    assert any(s in text_html(at) for s in STATES)
    assert any(k.startswith("main.pq.") for k in figures(at))


def test_a_replayed_recordings_header_says_greedy_and_k_once(monkeypatch):
    """The line over a replayed recording: its title names the mode and k, and the settings after it do not say
    them again ("… · greedy · k=4 · … · greedy" read as two settings)."""
    from specviz.data import runfile

    rec = next(r for r in runfile.list_recorded() if r.run.decode.greedy and " · greedy · " in r.title)
    at = new_app()
    at.radio(key="main.source").set_value("Recorded runs (no model needed)").run()
    at.selectbox(key="main.recording").set_value(rec.name)
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.run_btn").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    [head] = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("**replay of")]  # unescaped
    assert head.count("greedy") == 1 and head.count("k=4") == 1 and "seed 0" in head, head


def test_the_first_recording_is_the_first_runs_prompt_and_shows_the_effect():
    """"Recorded runs" plays first the recording of the prompt the first live run uses (a room with no models
    sees the lesson first, its exceptions one click away): recorded with the default draft, faster than the
    target alone and with the same text."""
    from specviz.teaching import explain
    from specviz.core import prompts
    from specviz.modeling import quant
    from specviz.data import runfile

    at = new_app()
    at.radio(key="main.source").set_value("Recorded runs (no model needed)").run()
    recs = {r.name: r for r in runfile.list_recorded()}
    rec = recs[at.selectbox(key="main.recording").value]
    first = prompts.preset(prompts.FIRST_RUN.preset)
    assert rec.prompt_text == first.text and rec.run.decode.greedy
    # the first live run itself, as Run makes it: its k policy and length too (the other recordings are fixed k)
    fr = prompts.FIRST_RUN
    assert (rec.run.decode.k, rec.run.decode.k_policy, rec.run.decode.max_new_tokens) == (fr.k, fr.k_policy,
                                                                                          fr.max_new_tokens)
    assert any(explain.k_words(fr.k, fr.k_policy) in c.value for c in at.sidebar.caption)
    assert rec.run.settings["drafter"] == f"{quant.default_precision('cpu')} draft model"
    assert rec.baseline["speedup"] > 1 and rec.baseline["identical"] is True
    # every shipped recording names its draft, as the live header does (or that the target drafted for itself)
    assert all(r.run.settings["drafter"].endswith("draft model") and " draft)" in r.title
               or (r.run.settings["drafter"] == runfile.SELF_DRAFTER and "drafting for itself" in r.title)
               for r in recs.values())


@pytest.fixture
def shared_runtime(monkeypatch):
    """A fallback Streamlit runtime while AppTests run concurrently.

    Each AppTest.run() installs its own mock Runtime and sets it to None when it
    ends, even if another AppTest is still running in another thread. Here
    Runtime.instance()/exists() fall back to a shared mock (test harness only).

    Each AppTest also has its own script cache, so two sessions compile app.py
    at the same moment, which a real server never does (one cache, one lock).
    CPython 3.11's ast module keeps its recursion counter per interpreter, not
    per thread, so concurrent ast.parse calls can fail with "AST constructor
    recursion depth mismatch" (python/cpython#106905). Parsing is serialised
    here, as the server's shared ScriptCache lock does.
    """
    import ast
    from unittest.mock import MagicMock

    from streamlit.runtime import Runtime
    from streamlit.runtime.caching.storage.dummy_cache_storage import MemoryCacheStorageManager
    from streamlit.runtime.media_file_manager import MediaFileManager
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    rt = MagicMock(spec=Runtime)
    rt.media_file_mgr = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
    rt.cache_storage_manager = MemoryCacheStorageManager()
    monkeypatch.setattr(Runtime, "instance", classmethod(lambda cls: cls._instance or rt))
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: True))
    parse, lock = ast.parse, threading.Lock()

    def serial_parse(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", serial_parse)
    return rt


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_two_sessions_at_once_are_both_correct_and_share_one_load(shared_runtime):
    from specviz.service import pairs

    pairs.clear()
    calls = pairs.LOAD_CALLS
    jobs = [dict(prompt="one fish", seed=1, temperature=0.8), dict(prompt="two fish", seed=2, temperature=0.0)]
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    first_render = threading.Lock()

    def session(i: int) -> None:
        try:
            s = jobs[i]
            with first_render:  # first renders take turns; the Runs overlap (see test_queue_app._sessions)
                at = new_app()
            at = start(at, max_new=32, baseline=False, chat=False, **s)
            assert not at.error, (i, [e.value for e in at.error])
            results[i] = at.session_state["main.job"].run
        except BaseException as e:  # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert pairs.LOAD_CALLS == calls + 1  # one load for both sessions
    for i, s in enumerate(jobs):
        ref = direct_run(s["prompt"], False, k=4, temperature=s["temperature"], max_new_tokens=32, seed=s["seed"])
        assert results[i].token_ids == ref.token_ids


def test_the_best_k_chooser_runs_in_the_app_and_keeps_the_greedy_text():
    from specviz.core import theory

    text = "one two three one two three one two"
    at = start(new_app(), k_policy="best", max_new=24, prompt=text, chat=False, baseline=False)
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["main.job"].run
    assert run.settings["k_policy"] == "best" and run.settings["drafter"] == "model"
    assert run.token_ids == direct_run(text, False, k=4, max_new_tokens=24).token_ids  # greedy: the target's text
    assert any("best-k chooser" in c.value for c in at.caption)
    figs = figures(at)
    assert "main.k_trace" in figs  # k changes from round to round
    # the run is on the tokens-per-pass chart, against the formula over its own rounds' k (dashed)
    traces = {t.get("name"): t for t in figs["main.expected"]["data"]}
    ks = [r.k for r in run.rounds]
    dashed = traces["this run's k (formula)"]
    x, y = values(dashed["x"]), values(dashed["y"])
    assert y == pytest.approx(theory.expected_tokens_over(x, ks))
    assert set(ks) != {4} and y[100] != pytest.approx(theory.expected_tokens(x[100], 4))  # not the k = 4 curve
    assert traces["measured (this run)"]["y"][0] == pytest.approx(run.tokens_per_pass)
    assert any("averaged over this run's rounds" in c.value for c in at.caption)


def test_prompt_lookup_with_adaptive_k_shows_k_trace():
    from specviz.core import prompts
    from specviz import speculative_decode
    from specviz.decoding.drafters import PromptLookupDrafter

    text = "abc abc abc abc"
    at = start(new_app(), drafter="prompt lookup (no second model)", k_policy="adaptive", max_new=24, prompt=text,
               chat=False, baseline=False)
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["main.job"].run
    assert run.settings["k_policy"] == "adaptive" and run.settings["drafter"] == "prompt-lookup"
    pair = registry_pair()
    ref = speculative_decode(pair.target, PromptLookupDrafter(), prompts.encode(pair.tokenizer, text, False),
                             DecodeSettings(k=4, max_new_tokens=24, k_policy="adaptive"),
                             eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    assert run.token_ids == ref.token_ids and run.ks == ref.ks
    figs = figures(at)
    assert "main.k_trace" in figs
    assert [t.get("name") for t in figs["main.k_trace"]["data"]] == ["accepted this round", "k (drafted this round)"]


def test_unavailable_pair_explains_how_to_get_it(tmp_path, monkeypatch):
    reg = tmp_path / "models.yaml"
    reg.write_text(TINY.read_text().replace("pairs:\n", """pairs:
  missing-pair:
    draft: missing-draft
    target: missing-target
    description: a pair whose folders do not exist
""").replace("models:\n", f"""models:
  missing-draft:
    label: Missing draft
    family: nowhere
    tokenizer: nowhere
    params: 1000
    source: {{path: {tmp_path / 'no-draft'}}}
  missing-target:
    label: Missing target
    family: nowhere
    tokenizer: nowhere
    params: 1000
    source: {{path: {tmp_path / 'no-target'}}}
""", 1))
    monkeypatch.setenv("SPECVIZ_MODELS", str(reg))
    at = new_app()
    at.selectbox(key="main.pair").set_value("missing-pair").run()
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning] + [w.value for w in at.warning]
    assert any("How to get it" in w and "missing-pair" in w for w in warnings), warnings
    at.button(key="main.run_btn").click().run()
    assert not at.exception
    assert at.error and "not found" in at.error[0].value


def test_a_run_that_lost_on_a_gpu_says_why_and_names_a_pair_that_can_win():
    from specviz.data import runfile

    d = json.loads(runfile.RECORDED_DIR.joinpath("capital-of-france-greedy.json").read_text())
    b = d["specviz_export"]["baseline"]
    b["base_decode_s"] = 0.9 * d["decode_s"] / len(d["token_ids"]) * b["base_tokens"]  # a run that lost: the
    b["base_tokens_per_s"], b["speedup"] = b["base_tokens"] / b["base_decode_s"], 0.9  # target alone was faster
    shown = {}
    for device in ("cpu", "cuda:0"):
        d["device"] = device
        at = new_app()
        at.select_slider(key="main.speed").set_value("instant")
        at.file_uploader(key="main.upload").set_value(("run.json", json.dumps(d).encode(), "application/json"))
        at.run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        shown[device] = [i.value for i in at.info if "too small to win" in i.value]
    assert shown["cpu"] == []
    assert len(shown["cuda:0"]) == 1 and "launching" in shown["cuda:0"][0]


def test_the_draft_precision_help_says_int4_is_slow_on_a_cpu():
    """The help must not promise that int4 lowers c: measured on a CPU it made c ≈ 2 (docs/precision.md)."""
    help_text = new_app().radio(key="main.draft_precision").help
    assert "int4" in help_text and "slow" in help_text and "c ≈ 2" in help_text
    assert "(int8, int4) lowers c" not in help_text


FIRST_SCREEN = {"main.source", "main.preset", "main.k_policy", "main.k", "main.temperature"}  # what the first Run needs


def widget_keys(block) -> set[str]:
    """The keys of the widgets drawn in `block` (an AppTest block), at any depth."""
    kinds = ("radio", "selectbox", "slider", "select_slider", "number_input", "text_area", "checkbox", "toggle")
    return {w.key for kind in kinds for w in block.get(kind) if w.key}


def test_the_first_screen_shows_a_few_controls_and_the_rest_behind_more_settings():
    """Source, prompt preset, k (and how k is chosen), temperature show first; every other control sits in the
    collapsed "More settings" expander, keys unchanged; Run is on the page."""
    from pages.common.main_sidebar import MORE

    at = new_app()
    more = [e for e in at.sidebar.expander if e.label == MORE]
    assert len(more) == 1 and not more[0].proto.expanded
    inside = widget_keys(more[0])
    assert widget_keys(at.sidebar) - inside == FIRST_SCREEN | {"ui.presenter"}  # every page has the toggle
    assert {"main.pair", "main.dtype", "main.draft_precision", "main.drafter", "main.top_p", "main.max_new", "main.shape",
            "main.tree_budget", "main.seed", "main.speed", "main.baseline", "main.prompt", "main.chat"} <= inside
    assert at.button(key="main.run_btn").label == "Run"


def test_with_the_best_k_chooser_the_k_slider_reads_as_chosen_live():
    """best k: the slider says k is chosen each round (it sets only where the chooser starts); fixed: plain k.
    The round log names its column "k this round"."""
    from specviz.teaching import explain

    at = new_app()
    at.radio(key="main.k_policy").set_value("best").run()
    k = at.slider(key="main.k")
    assert k.label == explain.K_CHOSEN_LIVE_LABEL and "chosen live each round" in k.label
    assert "first round" in k.help
    at.radio(key="main.k_policy").set_value("fixed").run()
    assert at.slider(key="main.k").label == "k: tokens drafted per round"
    start(at, max_new=6, k_policy="best")
    log = next(t for t in at.dataframe if "verify ms" in t.value.columns)  # the finished log
    assert list(log.value["k this round"]) == at.session_state["main.job"].run.k_per_round


def test_what_the_timings_left_out_is_said_in_the_how_measured_expander():
    """The "Not counted: …" sentence (waits for a core left out of the times) is drawn in the collapsed
    "How these figures were measured" expander, not among the figures; the first-round latency stays visible."""
    from specviz.teaching import explain

    at = start(new_app(), max_new=6)  # the target alone is timed after the run
    base = at.session_state["main.job"].meta["baseline"]
    base["base_stalled_s"] = 2 * base["base_decode_s"]  # as if other work held the cores that long
    at.run()
    assert not at.exception, at.exception
    measured = [e for e in at.expander if e.label == explain.MEASURED_TITLE]
    assert len(measured) == 1 and not measured[0].proto.expanded
    inside = [c.value for c in measured[0].caption]
    assert any(c.startswith("Not counted: ") and "of the target alone" in c for c in inside)
    assert sum("Not counted" in c.value for c in at.caption) == 1  # only the one in the expander
    assert any(c.value.startswith("Where the time went") and "Not counted" not in c.value for c in at.caption)
    outside = [c.value for c in at.main.caption if c.value not in inside]
    assert any("First round on screen" in c for c in outside)


def test_verify_passes_shared_with_other_sessions_are_said_in_the_how_measured_expander():
    """A run some of whose verify passes were shared with other sessions (decoding/pool.py) says so, with what
    each was charged, in the "How these figures were measured" expander; a run with none says nothing of it."""
    import dataclasses

    from specviz.teaching import explain

    at = start(new_app(), max_new=6)  # the target alone is timed after the run
    assert not any("shared with other sessions" in c.value for c in at.caption)
    job = at.session_state["main.job"]
    rounds = [dataclasses.replace(r, shared=3, shared_pass_s=0.01) if i == 0 else r
              for i, r in enumerate(job.run.rounds)]
    job.run = dataclasses.replace(job.run, rounds=rounds)
    at.run()
    assert not at.exception, at.exception
    measured = [e for e in at.expander if e.label == explain.MEASURED_TITLE]
    assert len(measured) == 1
    said = [c.value for c in measured[0].caption if "shared with other sessions" in c.value]
    assert said == [explain.shared_note(rounds)] and said[0].startswith(f"1 of this run's {len(rounds)} verify")


def test_the_main_page_says_which_claims_it_shows_in_its_footer():
    """The first line under the title is the page's introduction, not the bookkeeping "Shows claim 3, …": that
    caption is the page's last element, before a run and after one."""
    from streamlit.testing.v1 import element_tree

    def last_main_element(at):
        leaves = [n for n in at.main if not isinstance(n, element_tree.Block)]
        return leaves[-1] if leaves else None

    for at in (new_app(), start(new_app(), max_new=4, baseline=False)):
        shows = [c.value for c in at.main.caption if c.value.startswith("Shows ")]
        assert len(shows) == 1
        assert not at.main.caption[0].value.startswith("Shows ")
        assert last_main_element(at).value == shows[0]


def test_a_speedup_above_what_the_passes_allow_is_said_not_shown_as_a_result():
    """A target-alone timing slowed enough that the speedup passes its bound (tokens per target pass): the page
    says so in a warning above the figures. (Seen failing with the warning left out of main_view.)"""
    from specviz.data import runfile
    from specviz.teaching import explain

    at = start(new_app(), max_new=6)  # the target alone is timed after the run
    job = at.session_state["main.job"]
    base = job.meta["baseline"]
    assert not any("more than the passes allow" in w.value for w in at.warning)
    bound = runfile.pass_bound(job.run, base)
    base["speedup"] = 3 * bound  # as if the target alone had run three times slower than it can
    at.run()
    assert not at.exception, at.exception
    said = explain.slowed_speedup(3 * bound, bound)
    assert [w.value for w in at.warning if "more than the passes allow" in w.value] == [said]


def test_the_speedup_names_the_target_alone_it_is_against():
    """The headline speedup says what it is against: the precision of the target alone that was timed (a file
    keeps it, and a replay shows it), and an unknown one in a file is refused."""
    from specviz.data import runfile

    at = start(new_app(), max_new=8, baseline=True)
    assert metric(at, "measured speedup over the float32 target alone").endswith("×")
    run = at.session_state["main.job"].run
    base = at.session_state["main.job"].meta["baseline"]
    assert base["target"] == "float32"
    d = json.loads(runfile.export_json(run, lambda t: f"t{t} ", "p", baseline={**base, "target": "int8"}))
    rec = runfile.load_export(json.dumps(d))
    assert rec.baseline["target"] == "int8"
    d["specviz_export"]["baseline"]["target"] = "int4"
    with pytest.raises(Exception, match="target"):
        runfile.load_export(json.dumps(d))
    d["specviz_export"]["baseline"]["target"] = "int8"
    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    at.file_uploader(key="main.upload").set_value(("int8.json", json.dumps(d).encode(), "application/json")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert metric(at, "measured speedup over the int8 target alone").endswith("×")  # the replay says it too


def test_a_recording_replays_with_its_own_k_and_the_live_k_is_set_aside():
    """The sidebar read k = 4 while a recording that drafted 10-27 a round replayed: in recorded mode the live k is
    visibly set aside (disabled, and its label says so), and the expected-tokens curve is drawn for the recording's
    own k, not the slider's."""
    from specviz.teaching import explain

    at = new_app()
    at.slider(key="main.k").set_value(9).run()  # a live setting, unlike any recording's
    at.radio(key="main.source").set_value("Recorded runs (no model needed)").run()
    slider = at.slider(key="main.k")
    assert slider.disabled and slider.label == explain.K_SET_ASIDE_LABEL
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.run_btn").click().run()
    assert not at.exception
    run = at.session_state["main.job"].run
    (curve,) = [f for f in figures(at).values() if f["layout"]["title"]["text"].startswith("Tokens per pass vs α")]
    title = curve["layout"]["title"]["text"].replace("\u00a0", " ")
    assert f"(k = {run.decode.k};" in title and run.decode.k != 9, title


def test_a_run_whose_models_are_not_loaded_shows_their_recording_while_they_load(tmp_path, monkeypatch):
    """Run with the pair not loaded: the recording of the same prompt and settings made with this pair is drawn at
    once, with the line that the live run follows, while the load goes on; the live run then replaces it. With the
    pair loaded, Run draws no recording. (Seen failing with main_controls._while_loading returning None: nothing
    was drawn while the pair loaded.)"""
    from pages.common import main_controls
    from specviz.service import pairs
    from specviz.core import prompts
    from specviz.data import runfile
    from specviz.tools import record

    pair, f = registry_pair(), prompts.FIRST_RUN
    spec = runfile.RecordSpec("first", f.preset, k=f.k, k_policy=f.k_policy)
    record.record_presets(pair, tmp_path, specs=[spec], max_new_tokens=f.max_new_tokens, progress=lambda m: None)
    tiny = runfile.list_recorded(tmp_path)
    monkeypatch.setattr(runfile, "list_recorded", lambda *a, **kw: tiny)  # the shipped ones, for the tiny pair
    drawn = []
    real = main_controls.start_live

    def seen_while_loading(ms, t):  # what the page holds when the load begins (AppTest sees only the end)
        drawn.append((at.session_state[main_controls.SHOWN_WHILE_LOADING]
                       if main_controls.SHOWN_WHILE_LOADING in at.session_state else None))
        return real(ms, t)

    monkeypatch.setattr(main_controls, "start_live", seen_while_loading)
    pairs.clear()  # nothing loaded
    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.run_btn").click().run()
    assert not at.exception, at.exception
    assert drawn == [tiny[0].name]  # drawn before the load, then the live run
    job = at.session_state["main.job"]
    assert job.source == "live" and job.meta.get("origin") == "live" and job.done
    assert not any("While the models load" in i.value for i in at.info)  # cleared once the live run draws
    del at.session_state[main_controls.SHOWN_WHILE_LOADING]
    at.button(key="main.run_btn").click().run()  # the pair is loaded now: straight to the live run
    assert main_controls.SHOWN_WHILE_LOADING not in at.session_state and drawn[-1] is None
