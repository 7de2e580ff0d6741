"""The glossary (specviz/teaching/glossary.py), its page (pages/7_Glossary.py), and each page's "Words on this
page" expander: every glossary term a page shows, in recorded mode with no model, is defined on that page.

The Lessons page's words are checked step by step in tests/test_lessons.py (walk).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from glossary_check import listed, undefined, visible_text
from specviz.teaching import glossary

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
APP = str(ROOT / "app.py")
PAGES = {p.stem: str(p) for p in sorted((ROOT / "pages").glob("[0-9]_*.py"))}


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def names(text: str) -> list[str]:
    return [t.name for t in glossary.found_in(text)]


# --- the glossary itself -------------------------------------------------------------------------------------
def test_each_term_is_defined_once_and_each_form_belongs_to_one_term():
    assert len({t.name for t in glossary.TERMS}) == len(glossary.TERMS)
    forms = [f.casefold() if not t.case else f for t in glossary.TERMS for f in (t.name, *t.also)]
    assert len(forms) == len(set(forms)), sorted({f for f in forms if forms.count(f) > 1})
    for t in glossary.TERMS:
        assert t.definition.endswith(".") and len(t.definition) <= 300, t.name
        assert t.found_in(t.name) or t.name == "E[…]", t.name  # a term is found by its own name


def test_the_audits_words_are_found_and_defined():
    """The words a teacher's audit found undefined (issue 56), each found where the pages write it."""
    said = {"mean target entropy (nats)": "nats", "measured (median, IQR bars)": "IQR",
            "(95% Wilson interval)": "Wilson interval", "Accepted tokens per round vs truncated geometric":
            "truncated geometric", "sampling, KV-cache rollback, Python overhead": "KV cache",
            "weights packed for oneDNN": "oneDNN", "measured: α = 0.97 → 16.00 ± 5.51": "±"}
    for text, name in said.items():
        assert name in names(text), (text, names(text))
    assert "16.00" in glossary.term("±").definition  # what ± means in the figure the audit quoted


def test_forms_are_whole_words_with_their_case_where_it_matters():
    assert names("the cost of a step") == []  # no "c", no "T", no "k" inside words
    assert {"c", "k"} <= set(names("a round costs 1 + k·c target passes"))
    assert "T" in names("at T = 0") and "T" not in names("at t = 0")
    assert "p" in names("min(1, p/q)") and "q" in names("min(1, p/q)")
    assert names("±1.96 stderr") == ["±"] and "top-p" in names("top-p 0.9")


def test_every_page_lists_only_glossary_words_and_the_list_is_alphabetical():
    for page, words in glossary.PAGE_WORDS.items():
        assert page == "app" or page in PAGES, page
        assert [glossary.term(n).name for n in words] == list(words)  # each name is a term (KeyError if not)
    assert set(PAGES) - set(glossary.PAGE_WORDS) == {"7_Glossary"}  # every other page has its words
    with pytest.raises(KeyError, match="not in the glossary"):
        glossary.term("flux capacitor")
    order = [t.name for t in glossary.alphabetical()]
    assert order.index("α") < order.index("argmax") and order.index("IQR") < order.index("judged")


# --- the Glossary page ---------------------------------------------------------------------------------------
def test_the_glossary_page_lists_every_term_alphabetically_and_finds_one(no_model):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGES["7_Glossary"], default_timeout=60)
    at.run()
    assert not at.exception and not at.error
    entries = [m.value for m in at.markdown if m.value.startswith("**")]
    want = [glossary.entry_md(t) for t in glossary.alphabetical()]
    assert [e.split("  \n")[0] for e in entries] == want
    at.text_input(key="glossary.find").set_value("IQR").run()
    shown = [m.value.split("  \n")[0] for m in at.markdown if m.value.startswith("**")]
    assert glossary.entry_md(glossary.term("IQR")) in shown and len(shown) < len(want)
    at.text_input(key="glossary.find").set_value("flux capacitor").run()
    assert not [m for m in at.markdown if m.value.startswith("**")] and "No word here" in at.info[0].value


# --- each page: the words it shows are defined on it ---------------------------------------------------------
def recorded(page: str, presses=()):
    """The page in recorded mode (its shipped recording, no model), with these buttons pressed."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP if page == "app" else PAGES[page], default_timeout=120)
    if page == "app":
        at.run()
        at.radio(key="main.source").set_value("Recorded runs (no model needed)").run()
        at.select_slider(key="main.speed").set_value("instant")
    else:
        at.query_params["source"] = "recorded"
        at.run()
    for key in presses:
        if key == "tree.start":
            at.select_slider(key="tree.speed").set_value("instant")
        at.button(key=key).click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


PRESSES = {"app": ("main.run_btn",), "1_Slow_motion_round": ("slow.start", "slow.next"),
           "9_Token_tree": ("tree.start", "tree.next")}


@pytest.mark.parametrize("page", ["app", *sorted(set(PAGES) - {"7_Glossary", "8_Lessons"})])
def test_every_glossary_word_a_page_shows_is_defined_on_it(page, no_model):
    at = recorded(page, PRESSES.get(page, ()))
    [words] = [e for e in at.expander if e.label == "Words on this page"]
    assert not words.proto.expanded  # collapsed: the page reads as before
    assert undefined(at) == [], f"{page} shows these words without defining them"
    assert listed(at) == set(glossary.PAGE_WORDS[page])


def test_the_check_fails_when_a_page_leaves_a_word_out(no_model, monkeypatch):
    """A word dropped from the Theory page's list is caught: α is on that page, and then not defined there."""
    monkeypatch.setitem(glossary.PAGE_WORDS, "6_Theory", tuple(n for n in glossary.PAGE_WORDS["6_Theory"] if n != "α"))
    at = recorded("6_Theory")
    assert "α" in names(visible_text(at)) and undefined(at) == ["α"]
