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
from specviz.data import playback, records, runfile
from specviz.core import markup
from specviz.core.limits import K_MAX
from specviz.core.errors import SpecvizError
from tiny import split_settings

GOOD = Path(runfile.RECORDED_DIR) / "capital-of-france-greedy.json"
SAMPLED = Path(runfile.RECORDED_DIR) / "creative-sampling-t1.json"


def base(path: Path = GOOD) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def edited(change, path: Path = GOOD) -> bytes:
    d = base(path)
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


def without_base_ids(**changes):
    """An edit of the baseline block: the target alone's token ids left out (an older file), `changes` made."""
    def change(d):
        d["specviz_export"]["baseline"].pop("base_token_ids")
        d["specviz_export"]["baseline"].update(changes)
    return change


def sampled_rejection() -> tuple[int, int, float]:
    """(round, position, p/q) of the first drafted token SAMPLED rejects while u = 0.01 would accept it."""
    for i, r in enumerate(base(SAMPLED)["rounds"]):
        for j, (ok, ratio) in enumerate(zip(r["accepted"], r["ratio"])):
            if not ok and ratio > 0.01:
                return i, j, ratio
    raise AssertionError(f"{SAMPLED.name} has no sampled rejection with p/q above 0.01")


REJECTED = sampled_rejection()
SAMPLED_DECISIONS = len(base(SAMPLED)["rounds"][0]["accepted"])

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
    # files that pass the type checks but say what the engine never does (each crashed the page or showed
    # nonsense as fact)
    "a sampling round with u shorter than accepted": (
        edited(lambda d: d["rounds"][0]["u"].pop(), SAMPLED),
        f"rounds[0].u: {SAMPLED_DECISIONS - 1} uniform draws for {SAMPLED_DECISIONS} decisions"),
    "greedy false on one round of a greedy run": (edited(set_in(["rounds", 1, "greedy"], False)),
                                                  "rounds[1].greedy: false in a greedy run"),
    "greedy true on one round of a sampled run": (edited(set_in(["rounds", 1, "greedy"], True), SAMPLED),
                                                  "rounds[1].greedy: true in a sampling run"),
    "inverted accepted flags": (edited(set_in(["rounds", 0, "accepted"], [False, False, True])),
                                "rounds[0].accepted: expected 2 accepted"),
    "an accepted draft that is not the target's argmax": (
        edited(set_in(["rounds", 0, "target_argmax", 0], 7)), "rounds[0].accepted[0]: greedy keeps a draft iff"),
    "a sampled rejection with u below p/q": (
        edited(set_in(["rounds", REJECTED[0], "u", REJECTED[1]], 0.01), SAMPLED),
        f"rounds[{REJECTED[0]}].accepted[{REJECTED[1]}]: u = 0.01 and p/q = {REJECTED[2]:g} accept"),
    "u on a greedy round": (edited(set_in(["rounds", 0, "u"], [0.5, 0.5, 0.5])), "rounds[0].u: a greedy round"),
    "extra_kind bonus on a rejected round": (edited(set_in(["rounds", 0, "extra_kind"], "bonus")),
                                             "rounds[0].extra_kind: expected 'correction'"),
    "extra_id that was not emitted": (edited(set_in(["rounds", 0, "extra_id"], 7)), "rounds[0].extra_id"),
    "top-N probabilities summing to 10": (edited(set_in(["rounds", 0, "p_top", 0, "probs"], [1.0] * 10)),
                                          "rounds[0].p_top[0].probs: they add up to 10"),
    "ks of 100000": (edited(set_in(["ks", 0], 100000)), "ks: does not match the rounds' k"),
    "autoregressive with drafted rounds": (edited(set_in(["mode"], "autoregressive")),
                                           "rounds[0].k: an autoregressive run drafts nothing"),
    "an unknown export format": (edited(set_in(["specviz_export", "format"], "specviz.export/99")),
                                 "specviz_export.format: must be one of specviz.export/1"),
    "a bidi override in the title": (edited(set_in(["specviz_export", "title"], "abc\u202edef")),
                                     "specviz_export.title: holds the bidirectional control character U+202E"),
    "a bidi override in dtype": (edited(set_in(["dtype"], "float\u202e32")), "dtype: holds the bidirectional"),
    "a token text of 1000 characters": (edited(set_in(["specviz_export", "tokens", "12095"], "x" * 1000)),
                                        "specviz_export.tokens.12095: longer than 256 characters"),
    # figures the rounds, the token ids and the times decide, stored as something else (each was shown as fact)
    "settings.k of 8 over rounds of 4": (edited(set_in(["settings", "k"], 8)),
                                         "rounds[0].k: drafted 4, but settings.k = 8 (fixed k policy) drafts 8"),
    "a first difference of 10**9 in a 48-token run": (
        edited(set_in(["specviz_export", "baseline", "first_difference"], 10**9)),
        "specviz_export.baseline.first_difference: 1000000000, but the token ids match"),
    "a first difference of 10**9 with no target-alone ids": (
        edited(without_base_ids(first_difference=10**9), SAMPLED),
        f"specviz_export.baseline.first_difference: 1000000000, beyond the {len(base(SAMPLED)['token_ids'])} tokens both runs have"),
    "identical with different target-alone ids": (
        edited(set_in(["specviz_export", "baseline", "base_token_ids", 5], 7)),
        "specviz_export.baseline.identical: true, but the token ids first differ at token 5"),
    "identical with a first difference": (
        edited(without_base_ids(first_difference=3)),
        "specviz_export.baseline.identical: true with first_difference 3"),
    "the target alone under outside load for 100000 passes": (
        edited(set_in(["specviz_export", "baseline", "base_outside_load"], 100000)),
        "specviz_export.baseline.base_outside_load: 100000, more than the target-alone run's 48 passes"),
    "the target alone's seconds under outside load beyond its time": (
        edited(set_in(["specviz_export", "baseline", "base_outside_load_s"], 1e6)),
        "specviz_export.baseline.base_outside_load_s: 1e+06 s, more than the target-alone run's "),
    "a speedup of 1e300": (edited(set_in(["specviz_export", "baseline", "speedup"], 1e300)),
                           "specviz_export.baseline.speedup: 1e+300, but the times give "),
    "a speedup of 1e300 with no target-alone times": (
        edited(lambda d: d["specviz_export"]["baseline"].update(speedup=1e300, base_decode_s=None,
                                                                base_tokens_per_s=None)),
        "specviz_export.baseline.speedup: 1e+300: a speedup is above 0 and at most 1000"),
    "target-alone tokens/s against its time": (
        edited(set_in(["specviz_export", "baseline", "base_tokens_per_s"], 4000.0)),
        "specviz_export.baseline.base_tokens_per_s: 4000, but the times give "),
    "spec_target_passes against the run's": (edited(set_in(["specviz_export", "baseline", "spec_target_passes"], 1)),
                                             f"specviz_export.baseline.spec_target_passes: 1, but the run has {len(base()['rounds'])}"),
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
    d["rounds"], d["ks"], d["settings"]["k"] = [r], [k], k
    d["token_ids"] = r["emitted"]
    d["specviz_export"]["baseline"] = None
    return d


def test_a_header_k_that_no_round_drafted_is_refused():
    """The header said k = 4 while every round drafted 1: settings.k is held to the rounds (fixed k policy)."""
    d = _big_k(1)
    d["settings"]["k"] = 4
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.k: drafted 1, but settings\.k = 4 \(fixed k policy\)"):
        runfile.load_export(json.dumps(d).encode())
    d["rounds"][0]["drafted"] = [5]  # unless a drafted end-of-text token ended the round
    d["rounds"][0]["emitted"], d["rounds"][0]["target_argmax"], d["token_ids"] = [5], [5, 5], [5]
    d["settings"]["eos_token_id"] = [5]
    runfile.load_export(json.dumps(d).encode())


@pytest.mark.cores
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


def test_every_round_of_each_shipped_recording_draws_its_table():
    for rec in runfile.list_recorded():
        for r in rec.run.rounds:
            assert len(explain.round_rows(r, rec.decode())) >= r.k


def _long_token_prompt(n: int, text: str) -> bytes:
    """The good file, its prompt n copies of one token whose text is `text`, rebuilt from the token table."""
    d = base()
    tid = d["prompt_ids"][0]
    d["prompt_ids"] = [tid] * n
    d["specviz_export"]["prompt_text"] = None
    d["specviz_export"]["tokens"][str(tid)] = text
    return json.dumps(d).encode()


def test_a_prompt_rebuilt_from_the_token_table_is_held_to_the_prompt_limit():
    with pytest.raises(SpecvizError, match="the prompt they spell is 409600 characters long, more than the limit"):
        runfile.load_export(_long_token_prompt(2048, "x" * 200))
    assert runfile.load_export(_long_token_prompt(2048, "xy")).prompt_text == "xy" * 2048


def test_what_a_file_makes_the_page_draw_is_capped(monkeypatch):
    rec = runfile.load_export(GOOD.read_bytes())
    drawn = markup.drawn_size(rec.prompt_text) + sum(markup.drawn_size(rec.tokens[t]) for r in rec.run.rounds
                                                     for t in r.drafted + r.emitted)
    monkeypatch.setenv("SPECVIZ_MAX_DRAWN_CHARS", str(drawn - 1))
    with pytest.raises(SpecvizError, match=f"rounds: its prompt and tokens would draw more than {drawn - 1} char"):
        runfile.load_export(GOOD.read_bytes())
    monkeypatch.setenv("SPECVIZ_MAX_DRAWN_CHARS", str(drawn))
    runfile.load_export(GOOD.read_bytes())


def test_a_bidi_control_in_a_token_text_is_shown_as_a_mark():
    d = base()
    d["specviz_export"]["tokens"]["12095"] = "ab\u202ecd"
    d["specviz_export"]["prompt_text"] = "The \u2066capital"
    rec = runfile.load_export(json.dumps(d).encode())
    assert rec.tokens[12095] == "ab⟨U+202E⟩cd" and rec.prompt_text == "The ⟨U+2066⟩capital"


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


@pytest.mark.parametrize("how", ["greedy", "sampled", "top-p", "adaptive", "adaptive greedy", "lookup", "eos",
                                 "autoregressive", "autoregressive sampled"])
def test_every_kind_of_live_run_passes_its_own_file_checks(how):
    """The consistency checks (decisions, extras, ks and settings.k, greedy, the baseline's figures) hold for what
    the engine makes, exported as is."""
    from tiny import tiny_lm

    from specviz import PromptLookupDrafter, autoregressive_decode, speculative_decode

    target, draft = tiny_lm(0, arch="gpt2"), tiny_lm(1, arch="gpt2")
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    kw = {"greedy": {}, "sampled": {"temperature": 1.0, "seed": 3}, "top-p": {"temperature": 0.8, "top_p": 0.7},
          "adaptive": {"k_policy": "adaptive", "temperature": 1.0}, "adaptive greedy": {"k_policy": "adaptive"},
          "lookup": {}, "eos": {"eos_token_id": [5, 9]},
          "autoregressive": {}, "autoregressive sampled": {"temperature": 1.0, "seed": 2}}[how]
    base = None
    if how.startswith("autoregressive"):
        settings, rest = split_settings({"max_new_tokens": 40, **kw})
        run = autoregressive_decode(target, prompt, settings, **rest)
    else:
        drafter = PromptLookupDrafter() if how == "lookup" else draft
        settings, rest = split_settings({"k": 5, "max_new_tokens": 40, **kw})
        run = speculative_decode(target, drafter, prompt, settings, **rest)
        base = runfile.baseline_of(run, autoregressive_decode(target, prompt, run.decode, **rest))
    rec = runfile.load_export(runfile.export_json(run, lambda t: f"t{t} ", "p", baseline=base))
    assert rec.baseline == (None if base is None else json.loads(json.dumps(records.json_safe(base))))


def _breaks_file(text: str, prompt: str) -> bytes:
    """The good file with every token's text `text` and the prompt `prompt`."""
    d = base()
    d["specviz_export"]["prompt_text"] = prompt
    d["specviz_export"]["tokens"] = {t: text for t in d["specviz_export"]["tokens"]}
    return json.dumps(d).encode()


def test_what_a_file_draws_is_counted_as_html_so_line_breaks_cannot_flood_the_page():
    """A file of line breaks inside every limit (tokens of 179 of them, a prompt of 16,000) drew megabytes of
    HTML per redraw: the cap counted a break as 1 character, and it draws as markup.BREAK. Counted as drawn, it
    is refused with the reason; the same number of plain characters is still accepted."""
    flood = _breaks_file("\n" * 179, "\n" * 16000)
    with pytest.raises(SpecvizError, match="characters of HTML .* SPECVIZ_MAX_DRAWN_CHARS"):
        runfile.load_export(flood)
    rec = runfile.load_export(_breaks_file("x" * 179, "x" * 16000))  # the same characters, drawn as they are
    drawn = markup.drawn_size(rec.prompt_text) + sum(markup.drawn_size(rec.tokens[t]) for r in rec.run.rounds
                                                     for t in r.drafted + r.emitted)
    assert drawn <= 200_000
