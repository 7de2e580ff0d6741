"""Tests for specviz.teaching.render: token states in HTML/ANSI, escaping, round log rows."""

from __future__ import annotations

import re

import pytest

from specviz.teaching import render
from specviz.data.records import Round, Run, TopK
from specviz.core.settings import DecodeSettings

VOCAB = {1: " Paris", 2: ",", 3: " a", 4: " city", 5: " major", 6: "\n", 7: "<script>alert(1)</script>",
         8: " and", 9: " the", 10: " x"}
decode = VOCAB.__getitem__


def mk_round(index, drafted, accepted, extra_id, extra_kind, emitted=None, k=None):
    k = len(drafted) if k is None else k
    n_acc = sum(accepted)
    emitted = drafted[:n_acc] + ([extra_id] if extra_id is not None else []) if emitted is None else emitted
    top = TopK([1], [0.5])
    return Round(
        index=index, k=k, drafted=drafted, q_drafted=[0.6] * k, p_drafted=[0.4] * k,
        u=[0.3] * len(accepted), ratio=[0.4 / 0.6] * len(accepted), accepted=accepted, n_accepted=n_acc,
        emitted=emitted, extra_id=extra_id, extra_kind=extra_kind, p_top=[top] * (k + 1), q_top=[top] * k,
        target_argmax=[1] * (k + 1), overlap=[0.5] * k, entropy=[1.0] * (k + 1),
        residual_top=TopK([5], [1.0]) if extra_kind == "correction" else None, greedy=False,
        draft_s=0.0123, verify_s=0.0456, round_s=0.06)


def france():
    return mk_round(0, [1, 2, 3, 4], [True, True, True, False], 5, "correction")


def bonus_round():
    return mk_round(1, [6, 8], [True, True], 9, "bonus")


def mk_run(rounds):
    toks = [t for r in rounds for t in r.emitted]
    return Run(mode="speculative", prompt_ids=[0], token_ids=toks, rounds=rounds, settings={},
               stop_reason="max_new_tokens", prefill_s=0.01, decode_s=0.1, target_passes=len(rounds),
               draft_passes=sum(r.k for r in rounds), ks=[r.k for r in rounds])


def spans(html, state):
    """Text inside the spans of one state (tags stripped)."""
    out = re.findall(rf'<span class="sv-tok sv-{state}"[^>]*>(.*?)</span>(?=<wbr>|</div>)', html, re.S)
    return [re.sub(r"<[^>]+>", "", s) for s in out]


def test_a_token_box_is_never_cut_across_two_lines():
    """In a narrow column with the presenter's type, the text wraps between tokens: each token is one box on one
    line (a correction ' largest' used to end one line with its space and begin the next with 'largest')."""
    from pathlib import Path

    import pytest

    from specviz.devtools import loadtest

    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    if not Path(loadtest.CHROMIUM).exists():
        pytest.skip(f"{loadtest.CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    rounds = [france(), bonus_round()] * 6
    html = render.tokens_html("The capital of France is", rounds, decode, pending=[4, 5, 1])
    big = "<style>.sv-text{font-size:30px!important} .sv-tok{padding:2px 5px!important;margin:0 3px!important}</style>"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=loadtest.CHROMIUM, args=loadtest.CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 420, "height": 800})
            page.set_content(big + html)
            boxes = page.evaluate("""() => [...document.querySelectorAll('.sv-tok')].map(e => ({
                text: e.textContent, rects: [...e.getClientRects()].filter(r => r.width > 0).length,
                right: e.getBoundingClientRect().right, top: e.getBoundingClientRect().top}))""")
            width = page.evaluate("() => document.querySelector('.sv-text').getBoundingClientRect().right")
        finally:
            browser.close()
    assert len({b["top"] for b in boxes}) > 4  # it did wrap, over several lines
    cut = [b["text"] for b in boxes if b["rects"] != 1 and "\n" not in b["text"] and "⏎" not in b["text"]]
    assert not cut, f"token boxes cut across lines: {cut}"
    assert max(b["right"] for b in boxes) <= width + 1  # and none runs past the column


def test_states_in_order_with_second_cues():
    h = render.tokens_html("The capital of France is", [france(), bonus_round()], decode)
    states = re.findall(r'data-state="(\w+)"', h)
    assert states == ["accepted"] * 3 + ["rejected", "correction"] + ["accepted"] * 2 + ["bonus"]
    assert spans(h, "rejected") == [" city"] and spans(h, "correction") == [" major"]
    # second cues besides colour
    rej = re.search(r'<span class="sv-tok sv-rejected"[^>]*style="([^"]*)"', h).group(1)
    assert "line-through" in rej
    cor = re.search(r'<span class="sv-tok sv-correction"[^>]*style="([^"]*)"', h).group(1)
    assert "font-weight:700" in cor and "border:2px solid" in cor
    acc = re.search(r'<span class="sv-tok sv-accepted"[^>]*style="([^"]*)"', h).group(1)
    assert "border-bottom:3px solid" in acc
    assert '<sup class="sv-plus">+</sup>' in h  # bonus superscript
    assert "The capital of France is" in h


def test_escapes_html_and_shows_newlines():
    r = mk_round(0, [7, 6], [True, True], 2, "bonus")
    h = render.tokens_html("a < b & c", [r], decode)
    assert "<script>" not in h
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in h
    assert "a &lt; b &amp; c" in h
    assert "⏎" in h  # newline token made visible
    assert "white-space:pre-wrap" in h
    # one line: a blank line would end the raw-HTML block inside st.markdown
    h2 = render.tokens_html("x\n\ny", [mk_round(0, [6, 6], [True, True], 6, "bonus")], decode)
    assert "\n" not in h2 and h2.count("<br>") == 5


def test_a_reply_to_a_chat_message_starts_on_its_own_line():
    """With the chat template the model answers a message: its text starts on a new line, not glued to the
    prompt's last word ("...Only the code.```python"). Raw text is a continuation and stays on the line."""
    rounds = [france()]
    chat = render.tokens_html("Only the code.", rounds, decode, reply=True)
    raw = render.tokens_html("Only the code.", rounds, decode)
    assert re.search(r'class="sv-prompt"[^>]*>Only the code\.</span><br class="sv-reply">(<wbr>)?<span', chat)
    assert "sv-reply" not in raw and chat.replace('<br class="sv-reply">', "") == raw
    assert "sv-reply" not in render.tokens_html("", rounds, decode, reply=True)  # no prompt shown, no break
    assert "\n" not in chat  # still one line of HTML (a blank line would end the raw-HTML block)


def test_upto_and_pending():
    rounds = [france(), bonus_round()]
    h1 = render.tokens_html("", rounds, decode, upto=1)
    assert "bonus" not in re.findall(r'data-state="(\w+)"', h1)
    pend = mk_round(2, [8, 9, 10], [], None, None, emitted=[])
    h2 = render.tokens_html("", rounds, decode, pending=pend)
    assert spans(h2, "pending") == [" and", " the", " x"]
    assert "dashed" in re.search(r'sv-pending"[^>]*style="([^"]*)"', h2).group(1)
    assert spans(render.tokens_html("", [], decode, pending=[3]), "pending") == [" a"]


def test_zero_accepted_round_still_emits_a_token():
    r = mk_round(0, [4, 3], [False], 5, "correction")
    states = re.findall(r'data-state="(\w+)"', render.tokens_html("", [r], decode))
    assert states == ["rejected", "correction"]


def test_eos_cut_and_autoregressive_rounds():
    # correction cut by a length limit: the refusal is still shown, nothing is invented
    cut = mk_round(0, [1, 4], [True, False], None, None, emitted=[1])
    assert re.findall(r'data-state="(\w+)"', render.tokens_html("", [cut], decode)) == ["accepted", "rejected"]
    ar = mk_round(0, [], [], 9, "bonus", emitted=[9])
    assert re.findall(r'data-state="(\w+)"', render.tokens_html("", [ar], decode)) == ["target"]


def test_legend_has_every_state():
    leg = render.legend_html()
    for s in ("accepted", "rejected", "correction", "bonus", "pending"):
        assert f'data-state="{s}"' in leg
        assert render.STATE_LABELS[s].split(" ")[0] in leg
    assert set(render.STATE_COLORS) >= {"accepted", "rejected", "correction", "bonus", "pending"}
    assert len({render.STATE_COLORS[s] for s in ("accepted", "rejected", "correction", "bonus", "pending")}) == 5


def test_round_log_rows():
    rows = render.round_log_rows(mk_run([france(), bonus_round()]), decode)
    assert len(rows) == 2
    r0, r1 = rows
    assert r0["round"] == 1 and r0["k this round"] == 4 and r0["accepted"] == 3
    assert r0["drafted"] == "␣Paris | , | ␣a | ␣city"
    assert r0["rejected"] == "␣city" and r0["correction/bonus"] == "␣major (correction)"
    assert r0["draft ms"] == 12.3 and r0["verify ms"] == 45.6
    assert r1["rejected"] == "" and r1["correction/bonus"] == "␣the (bonus)" and r1["drafted"].startswith("⏎")
    # the drafted text comes after every short column: a best-k round of 27 drafts made it wider than the
    # page at 1280 px, and the timings behind it were out of sight
    assert list(r0)[-2:] == ["drafted", "note"]


def test_ansi_tokens():
    s = render.ansi_tokens(mk_run([france(), bonus_round()]), decode, prompt_text="France:")
    assert "\x1b[9;" in s  # strikethrough for the rejected draft
    assert "\x1b[4;" in s  # underline for accepted
    assert " major" in s and "⏎\n" in s and "⁺" in s and "France:" in s
    plain = re.sub(r"\x1b\[[0-9;:]*m", "", s)
    assert plain == "France: Paris, a city major⏎\n and the⁺"


def test_visible():
    assert render.visible(" a\n\t") == "␣a⏎⇥"
    assert render.visible("") == "∅"
    assert render.visible(" a", spaces=False) == " a"
    # a label or table cell: an indentation token of twelve spaces was cut to '␣␣␣␣␣␣␣␣␣' in the round table
    assert render.visible(" " * 12, runs=True) == "␣×12" and render.visible(" " * 12) == "␣" * 12
    assert render.visible("\n\n\n\n  x", runs=True) == "⏎×4␣␣x"  # three or fewer stay as they are


def test_the_round_that_read_the_prompt_says_so():
    """Round one's passes also read the prompt (no separate prefill): its times are not a plain round's,
    and the table, the one-line summary and the slow-motion story say why."""
    import dataclasses

    from specviz.teaching import explain

    first = dataclasses.replace(france(), prefill_tokens=5)
    rows = render.round_log_rows(mk_run([first, bonus_round()]), decode)
    assert rows[0]["note"] == "passes also read the prompt (6 tokens)" and rows[1]["note"] == ""
    assert "also read the prompt's 5 earlier tokens" in explain.round_summary(first, decode)
    assert "also read the prompt" not in explain.round_summary(france(), decode)
    assert "also read the prompt (5 earlier tokens)" in explain.round_story(first, decode)[0]
    assert "prompt" not in explain.round_story(france(), decode)[0]


def _plain(s: str) -> str:
    return re.sub(r"\x1b\[[0-9;:]*m", "", s)


def test_ansi_tokens_takes_the_new_tokens_text_in_order_and_refused_drafts_by_id():
    run = mk_run([france(), bonus_round()])
    texts = ["P", "", "A", "M", "N", "T", "B"]  # "" : half a character, carried by the next token
    s = render.ansi_tokens(run, decode, texts=texts)
    assert _plain(s) == "PA city" + "M" + "NTB⁺"  # the refused " city" is decode(4), struck through
    assert f"\x1b[{render.ANSI_STYLES['rejected']}m city" in s


def test_ansi_tokens_draws_a_tree_run_with_its_path_and_extra_token():
    from tiny import tiny_lm

    from specviz.decoding.tree import tree_decode

    # the target drafting for itself: paths are accepted, a bonus follows, the last round is cut
    run = tree_decode(tiny_lm(100), tiny_lm(100), [2, 7, 1, 8], DecodeSettings(max_new_tokens=10), budget=4,
                      eos_token_id=[])
    texts = [f"<{t}>" for t in run.token_ids]
    s = render.ansi_tokens(run, str, texts=texts)
    assert _plain(s).replace("⁺", "") == "".join(texts)
    n_acc = sum(r.n_accepted for r in run.rounds)
    assert n_acc > 0 and s.count(f"\x1b[{render.ANSI_STYLES['accepted']}m") == n_acc


# every character that ends a line in CommonMark ('\r\n', '\r', '\n') and the others str.splitlines breaks at
LINE_ENDS = ["\r\n", "\r", "\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
PAYLOAD = "![i](http://127.0.0.1:9/cr-img.png) [CLICK TO FIX](https://evil.example/fix)"


def test_no_line_break_character_lets_markdown_out_of_the_html_block():
    """A prompt "Hello\\r\\rworld" ended the raw-HTML block inside st.markdown: the texts after it were read as
    markdown, an image fetched and a link drawn. Every line break is drawn as a mark and <br>, in the prompt, the
    tokens and their hover titles, so markdown reads the whole text as one HTML block."""
    MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt
    vocab = {i: f"a{end}{end}{PAYLOAD}" for i, end in enumerate(LINE_ENDS)}
    r = mk_round(0, list(vocab)[:4], [True] * 4, 4, "bonus",
                 emitted=list(vocab)[:4] + list(vocab)[4:])  # every token's text, in one round's emitted list
    for prompt in ["Hello\r\rworld " + PAYLOAD, *(f"x{end}{end}{PAYLOAD}" for end in LINE_ENDS)]:
        h = render.tokens_html(prompt, [r], vocab.__getitem__)
        assert not any(end in h for end in LINE_ENDS), repr(prompt)
        blocks = MarkdownIt("commonmark").parse(h)
        assert [b.type for b in blocks] == ["html_block"], repr(prompt)  # no paragraph, image or link after it
        assert h.count("⏎") == 2 + 2 * len(LINE_ENDS)  # each break shown: two in the prompt, two in each token
    assert "\r" not in render.text_block("", [("t", "accepted", "a\r\rb")])  # a hover title too


def _read(md: str) -> str:
    """What markdown shows of md: the text of its inline text pieces, escapes read."""
    from markdown_it import MarkdownIt

    return "".join(c.content for b in MarkdownIt("commonmark").parse(md) if b.type == "inline"
                   for c in b.children if c.type == "text")


def test_md_text_shows_a_web_or_mail_address_as_plain_text():
    """Streamlit's markdown (GFM, mdast-util-gfm-autolink-literal) makes a link of "http://", "https://",
    "www." and "a@b.c" in the text as read, after its escapes: a file named "see https://evil.example/fix.json"
    quoted in an error was a live link. md_text puts a word joiner (drawn as nothing) into each."""
    pytest.importorskip("markdown_it")
    for s in ["see https://evil.example/fix.json", "HTTP://EVIL.EXAMPLE", "www.evil.example", "WWW.evil.example",
              "mail me: x.y+z@evil.example", "drafter http://127.0.0.1:9/x"]:
        shown = _read(render.md_text(s))
        assert shown.replace("\u2060", "") == s  # the same text, to the eye
        assert not re.search(r"(?i)https?://|www\.|[-.\w+]@[-\w]", shown), shown


def test_md_text_shows_a_bidi_control_as_a_mark():
    """U+202E in a file name mirrored the page's header ("replay of dehsinif"): shown as ⟨U+202E⟩, as token
    texts from a file are (runfile.neutral), every bidirectional control character it knows."""
    from specviz.data.records import BIDI_CONTROLS

    for ch in BIDI_CONTROLS:
        shown = render.md_text(f"finished{ch}.json")
        assert ch not in shown and f"⟨U\\+{ord(ch):04X}⟩" in shown
