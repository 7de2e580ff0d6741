"""AppTest of the main page against hostile or heavy input, on the tiny random pair.

A rejected upload leaves the run on screen; a file's title is plain text; a
long run renders in linear time; switching the pair mid-run is said.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from test_app import APP, TINY, new_app, start, text_html
from specviz.core.settings import DecodeSettings

pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")

GOOD = Path(__file__).resolve().parents[1] / "specviz" / "recorded" / "capital-of-france-greedy.json"


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def plain(md: str) -> str:
    """Markdown text as it reads on the page: backslash escapes undone."""
    return re.sub(r"\\(.)", r"\1", md)


def upload(at, name: str, data: bytes):
    at.file_uploader(key="main.upload").set_value((name, data, "application/json"))
    at.run()
    assert not at.exception, at.exception
    return at


def replayed(d: dict, name: str):
    """A new main page that replays the run file d, uploaded as `name`, at instant speed."""
    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    return upload(at, name, json.dumps(d).encode())


def test_a_rejected_upload_leaves_the_run_on_screen():
    at = start(new_app(), max_new=12, baseline=False)
    job, html = at.session_state["main.job"], text_html(at)
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["settings"] = 3
    upload(at, "bad.json", json.dumps(d).encode())
    assert any("settings: expected an object" in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert at.session_state["main.job"] is job and text_html(at) == html
    at.run()  # the next rerun: still the message and the run, no traceback
    assert not at.exception and at.session_state["main.job"] is job
    assert any("settings" in e.value for e in at.error)


def test_an_uploaded_title_is_plain_text():
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["specviz_export"]["title"] = "[click me](http://evil.example) ![x](http://evil.example/x.png) :red[big]"
    at = replayed(d, "titled.json")
    assert not at.error, [e.value for e in at.error]
    head = [c.value for c in at.caption if "replay of" in c.value]
    assert head, [c.value for c in at.caption]
    assert "](http" not in head[0] and ":red[" not in head[0]
    assert r"\[click me\]\(http\:\/\/evil.example\)" in head[0].replace(r"\.", ".").replace("\u2060", "")


def test_a_live_run_replaced_by_an_upload_is_stopped():
    at = new_app()
    at.slider(key="main.k").set_value(2)
    at.number_input(key="main.max_new").set_value(40)
    at.checkbox(key="main.baseline").set_value(False)
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.step_btn").click().run()  # one round, paused
    job = at.session_state["main.job"]
    assert job.source == "live" and not job.done and job._it is not None
    upload(at, "good.json", GOOD.read_bytes())
    assert at.session_state["main.job"] is not job
    assert job.done and job._it is None  # its generator (and KV caches) let go


def long_run_file(n: int) -> bytes:
    """A valid run of n one-token rounds (plain decoding of the tiny target), as a file."""
    from specviz import autoregressive_decode
    from specviz.decoding import models
    from specviz.data import runfile

    pair = models.load_pair(None)
    run = autoregressive_decode(pair.target, [5, 6, 7], DecodeSettings(max_new_tokens=n), eos_token_id=[],
                                vocab=pair.shared_vocab)
    assert len(run.rounds) == n
    return runfile.export_json(run, lambda t: pair.tokenizer.decode([t]), "abc", title="long").encode()


def replay_seconds(data: bytes) -> float:
    at = new_app()
    at.select_slider(key="main.speed").set_value("instant")
    t0 = time.perf_counter()
    upload(at, "long.json", data)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["main.job"].done
    return time.perf_counter() - t0


def test_a_long_run_replays_at_instant_in_linear_time():
    short, long = long_run_file(64), long_run_file(512)
    replay_seconds(short)  # warm-up
    t_short, t_long = replay_seconds(short), replay_seconds(long)
    # 8x the rounds: at "instant" drawing is skipped while the last drawing's cost has not passed, so
    # the time is the fixed page cost plus little more (drawing all 512 rounds took ~20x the short one)
    print(f"instant replay: 64 rounds {t_short:.2f} s, 512 rounds {t_long:.2f} s")
    assert t_long < 3 * t_short + 1.0, (t_short, t_long)


def test_streamlit_config_caps_uploads_and_hides_tracebacks():
    import tomllib

    from streamlit import config

    from specviz.core import limits

    cfg = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    options = {f"{section}.{key}": v for section, table in cfg.items() for key, v in table.items()}
    unknown = set(options) - set(config._config_options_template)
    assert not unknown, unknown  # Streamlit only warns about these: a typo would silently do nothing
    assert options["server.maxUploadSize"] * 2**20 > limits.max_run_file_bytes()  # the app says why it refuses
    assert options["client.showErrorDetails"] in ("type", "none")  # no traceback in the browser


def test_an_unexpected_error_is_a_message_with_details_and_no_paths():
    from streamlit.testing.v1 import AppTest

    def page():
        from pages.common import ui

        try:
            int("not a number")
        except ValueError as e:
            ui.show_error(e)

    at = AppTest.from_function(page).run()
    assert not at.exception
    assert "Something went wrong" in at.error[0].value and "Traceback" not in at.error[0].value
    details = at.expander[0].code[0].value.splitlines()
    assert details[0] == "ValueError: invalid literal for int() with base 10: 'not a number'"
    assert details[1].strip().endswith("in page") and "/" not in "".join(details[1:])  # file names, no paths


def test_switching_the_pair_mid_run_is_said():
    at = new_app()
    at.number_input(key="main.max_new").set_value(40)
    at.checkbox(key="main.baseline").set_value(False)
    at.select_slider(key="main.speed").set_value("instant")
    at.button(key="main.step_btn").click().run()  # one round, paused
    assert not any("run in progress uses" in i.value for i in at.info)
    at.radio(key="main.dtype").set_value("bfloat16" if at.radio(key="main.dtype").value == "float32" else "float32")
    at.run()
    assert any("run in progress uses" in i.value for i in at.info), [i.value for i in at.info]


def test_a_prompt_over_the_token_limit_is_refused_and_the_run_stays(monkeypatch):
    from specviz.core import limits

    at = start(new_app(), max_new=8, baseline=False)
    job = at.session_state["main.job"]
    assert at.text_area(key="main.prompt").proto.max_chars == limits.max_prompt_chars()
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "3")
    at.text_area(key="main.prompt").set_value("one two three four five")
    at.button(key="main.run_btn").click().run()
    assert not at.exception
    assert any("more than the limit of 3 tokens" in e.value for e in at.error), [e.value for e in at.error]
    assert at.session_state["main.job"] is job


@pytest.mark.cores
def test_a_model_load_outlives_the_script_run_that_started_it():
    """A click during the first-time conversion stops that script run; the load goes on, and the next
    run waits for the same load instead of starting it again."""
    import threading
    import time

    from specviz.service import pairs

    slot, gate, calls = pairs.Slot(), threading.Event(), []

    def load(progress):
        calls.append(1)
        progress("converting draft", 0.5)
        gate.wait(10)
        return "pair"

    t0 = time.perf_counter()
    slot.start(load)  # the run that started it is stopped right after: nobody waits
    assert time.perf_counter() - t0 < 1.0  # the load runs in its own thread
    slot.start(load)  # the next run asks again
    seen = []
    threading.Timer(0.5, gate.set).start()
    assert slot.wait(lambda stage, f: seen.append((stage, f)), poll_s=0.05) == "pair"
    assert calls == [1] and ("converting draft", 0.5) in seen


def test_a_failed_model_load_is_reported_once_then_retried():
    from specviz.service import pairs

    slot, calls = pairs.Slot(), []

    def load(progress):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("not enough memory")
        return "pair"

    slot.start(load)
    with pytest.raises(MemoryError):
        slot.wait(lambda *a: None)
    slot.start(load)
    assert slot.wait(lambda *a: None) == "pair" and calls == [1, 1]


EVIL_TOKENS = ["[x](http://evil.example)", "![i](http://evil.example/i.png)", "<a href='http://evil.example'>y</a>",
               "```", "**b**", ":red[big]", "\n\n[z](http://evil.example)\n\n"]  # a blank line ends an HTML block


@pytest.mark.parametrize("presenter", [False, True])
def test_token_texts_from_a_file_plant_no_link_image_or_directive_anywhere_on_the_page(presenter):
    """Every token of an uploaded run is hostile markdown; nothing the page renders as markdown (text, captions,
    headings, notices, and st.table's cells in presenter mode) may turn one into a link, an image or a
    Streamlit directive. Its HTML (the coloured text) escapes them itself."""
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt
    from streamlit import dataframe_util

    d = json.loads(GOOD.read_text(encoding="utf-8"))
    table = d["specviz_export"]["tokens"]
    d["specviz_export"]["tokens"] = {t: EVIL_TOKENS[i % len(EVIL_TOKENS)] for i, t in enumerate(table)}
    at = new_app()
    if presenter:
        at.toggle(key="ui.presenter").set_value(True).run()
    at.select_slider(key="main.speed").set_value("instant")
    upload(at, "evil.json", json.dumps(d).encode())
    job = at.session_state["main.job"]
    assert not at.exception and job.done and len(job.rounds) == len(d["rounds"])  # played to its end
    texts = [e.value for kind in ("markdown", "caption", "subheader", "header", "title", "info", "success",
                                  "warning", "error") for e in at.get(kind)]
    cells = [v for t in at.table for v in dataframe_util.convert_arrow_bytes_to_pandas_df(
        t.proto.arrow_data.styler.display_values).astype(str).to_numpy().ravel()]
    assert cells or not presenter  # presenter mode draws its tables as st.table
    # plotly draws <a href> and some other HTML in its titles, labels and annotations
    def strings(x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            for v in x.values():
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)

    charts = [s for c in at.get("plotly_chart") for s in strings(json.loads(c.proto.spec))]
    assert charts and not [s for s in charts if re.search(r"<(a|img)\b", s)]
    md = MarkdownIt()
    for text in [*texts, *cells]:
        html = md.render(text)  # a token's text may show, literally: never as a link or an image
        assert not re.search(r"<(a|img)\b[^>]*evil\.example", html), text
        raw_html = text.startswith("<") and "\n" not in text  # one HTML block: no directive is read inside it
        assert raw_html or ":red[big]" not in text, text


SAMPLED = GOOD.with_name("creative-sampling-t1.json")


def _u_short(d):
    d["rounds"][0]["u"].pop()


def _greedy_false(d):
    d["rounds"][1]["greedy"] = False


@pytest.mark.parametrize("path, change, field", [(SAMPLED, _u_short, "rounds[0].u"),
                                                 (GOOD, _greedy_false, "rounds[1].greedy")])
def test_a_file_whose_round_table_cannot_be_drawn_is_refused_and_the_run_stays(path, change, field):
    """Both files passed the checks once, then broke the round table: the page showed Streamlit's error instead
    of its charts, and Replay broke it again."""
    at = start(new_app(), max_new=12, baseline=False)
    job, html = at.session_state["main.job"], text_html(at)
    d = json.loads(path.read_text(encoding="utf-8"))
    change(d)
    upload(at, "odd.json", json.dumps(d).encode())
    assert any(field in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert at.session_state["main.job"] is job and text_html(at) == html
    at.button(key="main.replay_btn").click().run()
    assert not at.exception and at.session_state["main.job"].run is job.run


def _no_link_or_image(texts):
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt
    md = MarkdownIt()
    for text in texts:
        assert not re.search(r"<(a|img)\b", md.render(text)), text


def test_an_uploaded_dtype_is_plain_text_in_the_identity_warning():
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["dtype"] = "![x](http://evil.example/x.png)"
    d["specviz_export"]["baseline"].update(identical=False, first_difference=3)
    d["specviz_export"]["baseline"]["base_token_ids"][3] += 1  # as the token ids say (they are checked)
    at = replayed(d, "dtype.json")
    warnings = [w.value for w in at.warning if "floating-point" in w.value]
    assert warnings and "evil" in warnings[0], [w.value for w in at.warning]
    _no_link_or_image(warnings)


@pytest.mark.parametrize("field, value", [("mode", "[m](http://evil.example)"),
                                          ("stop_reason", "![s](http://evil.example/s.png)")])
def test_an_upload_error_quoting_the_file_is_plain_text(field, value):
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d[field] = value
    at = new_app()
    upload(at, "[f](http://evil.example).json", json.dumps(d).encode())
    errors = [e.value for e in at.error]
    assert errors and all("evil" in e for e in errors) and any(field in plain(e) for e in errors), errors
    _no_link_or_image(errors)


def test_a_file_just_over_the_size_limit_gets_a_message_and_the_run_stays():
    at = start(new_app(), max_new=12, baseline=False)
    job = at.session_state["main.job"]
    data = GOOD.read_bytes()
    data = data[:-1] + b', "pad": "' + b"x" * (2 * 2**20 + 1 - len(data) - 11) + b'"}'
    assert len(data) == 2 * 2**20 + 1
    upload(at, "big.json", data)
    assert any("larger than the limit of 2 MB" in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert at.session_state["main.job"] is job
    assert any("at most 2 MB" in u.label for u in at.get("file_uploader"))


def _shown(md: str) -> str:
    """What markdown shows of md: the text of its inline text pieces, escapes read (what Streamlit's GFM autolinks
    look for)."""
    from markdown_it import MarkdownIt

    return "".join(c.content for b in MarkdownIt("commonmark").parse(md) if b.type == "inline"
                   for c in b.children if c.type == "text")


BARE_LINK = re.compile(r"(?i)https?://|www\.|[-.\w+]@[-\w]")  # what GFM makes a link of in the text as read


def test_a_carriage_return_in_a_file_keeps_its_text_in_one_html_block():
    """A prompt "Hello\\r\\rworld" ended the raw-HTML block: the tokens after it were read as markdown, a remote
    image fetched and a link drawn. Every markdown body the page draws as HTML is one HTML block."""
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    payload = "![i](http://127.0.0.1:9/cr-img.png) [CLICK TO FIX](https://evil.example/fix)"
    d["specviz_export"]["prompt_text"] = "Hello\r\rworld " + payload
    for i, t in enumerate(d["specviz_export"]["tokens"]):
        d["specviz_export"]["tokens"][t] = ("\r\r", "\r\n\r\n", "\u2028\u2028", "\u2029\u2029")[i % 4] + payload
    at = replayed(d, "cr.json")
    assert not at.error and at.session_state["main.job"].done, [e.value for e in at.error]
    drawn = [m.value for m in at.markdown if 'class="sv-text"' in m.value]
    assert len(drawn) >= 2  # the text, and the chosen round's tokens
    for body in drawn:
        assert not re.search("[\r\n\u2028\u2029]", body)
        assert [b.type for b in MarkdownIt("commonmark").parse(body)] == ["html_block"]


def test_a_web_address_in_a_file_name_or_drafter_is_plain_text():
    """Streamlit's markdown makes a link of a bare web address: a file named "see https://evil.example/fix.json"
    quoted in an error, and a drafter or a file name in the replay's head line, were live links."""
    pytest.importorskip("markdown_it")
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["stop_reason"] = "see https://evil.example/fix or www.evil.example or help@evil.example"
    at = new_app()
    upload(at, "see https://evil.example/fix.json", json.dumps(d).encode())
    errors = [_shown(e.value) for e in at.error]
    assert errors and "stop_reason" in errors[0] and "evil" in errors[0], errors
    assert not [e for e in errors if BARE_LINK.search(e)], errors
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["specviz_export"]["title"] = ""  # the file name is the title
    d["settings"]["drafter"] = "see https://evil.example/drafter"
    at.select_slider(key="main.speed").set_value("instant")
    upload(at, "see https://evil.example/fix.json", json.dumps(d).encode())
    head = [_shown(c.value) for c in at.caption if "replay of" in c.value]
    assert head and "evil.example/fix.json" in head[0].replace("\u2060", "") and "drafter" in head[0], head
    assert not BARE_LINK.search(head[0]), head


def test_a_bidi_control_in_a_file_name_is_shown_as_a_mark():
    """U+202E in a file name mirrored the head line ("replay of dehsinif ✓ · 91/91 dnuor…")."""
    d = json.loads(GOOD.read_text(encoding="utf-8"))
    d["specviz_export"]["title"] = ""
    at = replayed(d, "finished\u202e.json")
    head = [c.value for c in at.caption if "replay of" in c.value]
    assert head and "\u202e" not in head[0] and "finished⟨U\\+202E⟩" in head[0], head
    d["mode"] = "x"  # an error quoting the file's name
    upload(at, "bad\u202e.json", json.dumps(d).encode())
    assert at.error and not [e.value for e in at.error if "\u202e" in e.value]


def test_a_run_file_of_line_breaks_is_refused_for_the_html_it_would_draw():
    """The fuzz's file: 512 rounds, tokens of 179 line breaks, a prompt of 16,000, 258 KB, inside every limit
    (107,648 characters, the cap is 200,000): it drew 6.7 MB of HTML per redraw and froze the tab. It is refused,
    naming the limit, and the run on screen stays."""
    d = json.loads(long_run_file(512))
    d["specviz_export"]["prompt_text"] = "\n" * 16000
    d["specviz_export"]["tokens"] = {t: "\n" * 179 for t in d["specviz_export"]["tokens"]}
    data = json.dumps(d).encode()
    assert len(data) < 2**20
    at = start(new_app(), max_new=12, baseline=False)
    job = at.session_state["main.job"]
    upload(at, "flood.json", data)
    assert any("SPECVIZ_MAX_DRAWN_CHARS" in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert at.session_state["main.job"] is job


@pytest.mark.parametrize("page, variable, value", [
    ("app.py", "SPECVIZ_MAX_RUN_FILE_MB", "0"), ("app.py", "SPECVIZ_MAX_NEW_TOKENS", "0"),
    ("app.py", "SPECVIZ_MAX_PROMPT_CHARS", "[x](https://evil.example)"),
    ("pages/2_Acceptance_lab.py", "SPECVIZ_MAX_RUN_FILE_MB", "0"),
])
def test_a_bad_limit_is_said_on_the_page_naming_the_variable(monkeypatch, page, variable, value):
    """SPECVIZ_MAX_RUN_FILE_MB=0 was Streamlit's generic error on load (the upload box read it first)."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(variable, value)
    at = AppTest.from_file(str(Path(APP).parent / page), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    said = [plain(e.value).replace("\u2060", "") for e in at.error]  # md_text's word joiners: no autolink
    assert len(said) == 1 and variable in said[0] and (repr(value) in said[0] or f"got {value}." in said[0]), said
    assert "](" not in at.error[0].value  # the value is plain text, never a link
