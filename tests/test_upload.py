"""Run files from strangers: every crafted file gives one clear SpecvizError naming the field.

Each file is the shipped recording capital-of-france-greedy.json with one field
changed, as a malicious or broken upload would be.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from specviz.teaching import explain
from specviz.data import playback, runfile
from specviz.core.limits import K_MAX
from specviz.core.errors import SpecvizError

GOOD = Path(runfile.RECORDED_DIR) / "capital-of-france-greedy.json"


def base() -> dict:
    return json.loads(GOOD.read_text(encoding="utf-8"))


def edited(change) -> bytes:
    d = base()
    change(d)
    return json.dumps(d).encode()  # ensure_ascii: a lone surrogate is written as the escape \ud800


def nested(depth: int) -> bytes:
    text = GOOD.read_text(encoding="utf-8")
    return text.replace('"settings":', '"settings":' + "[" * depth + "]" * depth + ', "x":', 1).encode()


def set_in(path: list, value):
    def change(d):
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value
    return change


CRAFTED = {
    "prefill_tokens as a string": (edited(set_in(["rounds", 0, "prefill_tokens"], "abc")), "rounds[0].prefill_tokens"),
    "prefill_tokens 1e400": (GOOD.read_bytes().replace(b'"prefill_tokens":4', b'"prefill_tokens":1e400', 1),
                             "rounds[0].prefill_tokens"),
    "an integer of 5000 digits": (GOOD.read_bytes().replace(b'"index":0', b'"index":' + b"9" * 5000, 1),
                                  "cannot be read"),
    "JSON nested 100k deep": (nested(100_000), "nested too deeply"),
    "settings as a number": (edited(set_in(["settings"], 3)), "settings: expected an object"),
    "decode_s as a string": (edited(set_in(["decode_s"], "x")), "decode_s: expected a number"),
    "round_s as a string": (edited(set_in(["rounds", 2, "round_s"], "x")), "rounds[2].round_s: expected a number"),
    "index as a string": (edited(set_in(["rounds", 1, "index"], "x")), "rounds[1].index: expected an integer"),
    "extra_kind evil": (edited(set_in(["rounds", 0, "extra_kind"], "evil")), "rounds[0].extra_kind: must be one"),
    "extra_id as a string": (edited(set_in(["rounds", 0, "extra_id"], "x")), "rounds[0].extra_id: expected an int"),
    "baseline of the wrong shape": (edited(set_in(["specviz_export", "baseline"], {"x": 1})),
                                    "specviz_export.baseline.spec_tokens_per_s: missing"),
    "the target alone's seconds under outside load as a string": (
        edited(set_in(["specviz_export", "baseline", "base_outside_load_s"], "x")),
        "specviz_export.baseline.base_outside_load_s: expected a number"),
    "a lone surrogate in prompt_text": (edited(set_in(["specviz_export", "prompt_text"], "\ud800")),
                                        "specviz_export.prompt_text: not valid text"),
    "a bool for an integer": (edited(set_in(["rounds", 0, "n_accepted"], True)),
                              "rounds[0].n_accepted: expected an integer"),
    "NaN timing": (GOOD.read_bytes().replace(b'"draft_s":', b'"draft_s":NaN,"x":', 1), "rounds[0].draft_s"),
    "a title as a list": (edited(set_in(["specviz_export", "title"], ["a"])), "specviz_export.title"),
    "a negative token id": (edited(set_in(["prompt_ids", 0], -1)), "prompt_ids[0]: must be from 0"),
    "a token text that is not text": (edited(set_in(["specviz_export", "tokens", "12095"], 5)),
                                      "specviz_export.tokens.12095: expected a string"),
}


def test_the_untouched_file_loads():
    rec = runfile.load_export(GOOD.read_bytes())
    assert rec.run.token_ids and rec.baseline["speedup"] > 0 and rec.title
    assert rec.chat is False  # the France prompt is raw text; the file says so


@pytest.mark.parametrize("chat", [True, False, None])
def test_an_export_keeps_whether_the_prompt_was_a_chat_message(chat):
    rec = runfile.load_export(GOOD.read_bytes())
    again = runfile.load_export(runfile.export_json(rec.run, rec.decode(), rec.prompt_text, chat=chat))
    assert again.chat is chat and again.run.token_ids == rec.run.token_ids


@pytest.mark.parametrize("name", list(CRAFTED))
def test_each_crafted_file_gives_a_clear_error_naming_the_field(name):
    data, message = CRAFTED[name]
    with pytest.raises(SpecvizError) as err:
        runfile.load_export(data)
    assert message in str(err.value), str(err.value)
    assert "Traceback" not in str(err.value) and len(str(err.value)) < 300


def _big_k(k: int) -> dict:
    """Round 0 of the good file with k drafted tokens, all accepted, the output cut after one token."""
    d = base()
    r = d["rounds"][0]
    tok, top = r["drafted"][0], r["p_top"][0]
    r.update(k=k, drafted=[tok] * k, q_drafted=[0.5] * k, p_drafted=[0.5] * k, ratio=[1.0] * k,
             accepted=[True] * k, n_accepted=k, emitted=[tok], extra_id=None, extra_kind=None,
             p_top=[top] * (k + 1), q_top=[top] * k, target_argmax=[tok] * (k + 1), overlap=[0.5] * k,
             entropy=[1.0] * (k + 1))
    d["rounds"] = [r]
    d["token_ids"] = r["emitted"]
    d["specviz_export"]["baseline"] = None
    return d


def test_k_above_the_engine_limit_is_refused_quickly():
    data = json.dumps(_big_k(2000)).encode()
    t0 = time.perf_counter()
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.k: must be from 0 to 32"):
        runfile.load_export(data)
    assert time.perf_counter() - t0 < 2.0
    runfile.load_export(json.dumps(_big_k(K_MAX)).encode())  # the largest k the engine makes still loads


def test_more_tokens_than_a_live_run_may_make_is_refused(monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "20")
    with pytest.raises(SpecvizError, match="token_ids: 4[0-9] new tokens, more than the limit of 20"):
        runfile.load_export(GOOD.read_bytes())
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "48")
    runfile.load_export(GOOD.read_bytes())


def test_a_file_over_the_size_limit_is_refused(monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_RUN_FILE_MB", "1")
    padded = GOOD.read_bytes()[:-1] + b', "pad": "' + b"x" * 2**20 + b'"}'
    with pytest.raises(SpecvizError, match="larger than the limit of 1 MB"):
        runfile.load_export(padded)


def test_rounds_out_of_order_are_refused():
    d = base()
    d["rounds"][0], d["rounds"][1] = copy.deepcopy(d["rounds"][1]), copy.deepcopy(d["rounds"][0])
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.index: expected 0"):
        runfile.load_export(json.dumps(d).encode())


# --------------------------------------------------------------------------
# a Playback shared by two page reruns


def _slow_playback(n: int = 4, delay: float = 0.3):
    """A live Playback whose rounds (from the shipped recording) each take `delay` seconds to compute."""
    from specviz.decoding.engine import DecodeStream

    run = runfile.load_export(GOOD.read_bytes()).run
    closed = []

    def rounds():
        try:
            for r in run.rounds[:n]:
                time.sleep(delay)
                yield r
        finally:
            closed.append(True)
        return run

    return playback.Playback.live(DecodeStream(rounds()), run.prompt_ids, "", {}), closed


def test_two_threads_advancing_one_playback_wait_for_each_other():
    import threading

    pb, _ = _slow_playback()
    got, errors = [], []

    def rerun():
        try:
            got.append(pb.advance())
        except Exception as e:  # noqa: BLE001 — the failure this test looks for
            errors.append(e)

    threads = [threading.Thread(target=rerun) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)  # the second starts while the first round is being computed
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(r.index for r in got) == [0, 1]
    assert [r.index for r in pb.rounds] == [0, 1] and pb.error is None


def test_closing_a_live_playback_ends_its_generator():
    pb, closed = _slow_playback(delay=0.0)
    pb.advance()
    pb.close("replaced")
    assert closed == [True] and pb.done and pb.error == "replaced"
    assert pb.advance() is None and [r.index for r in pb.rounds] == [0]


def test_token_texts_from_a_file_cannot_plant_markdown_in_the_round_summary():
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt  # a CommonMark parser (via huggingface_hub's CLI)

    rec = runfile.load_export(GOOD.read_bytes())
    r = next(r for r in rec.run.rounds if r.extra_kind == "bonus")  # the summary quotes the bonus token
    evil = "a` [x](http://evil.example) `b"
    tokens = {**rec.tokens, r.extra_id: evil}
    html = MarkdownIt().render(explain.round_summary(r, runfile.table_decoder(tokens)))
    assert "href" not in html and "<code>a`␣[x](http://evil.example)␣`b</code>" in html
