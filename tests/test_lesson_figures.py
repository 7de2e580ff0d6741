"""A lesson step's text and the chart under it tell the same figures.

For every step with a figure (Step.figure), from the shipped recordings and live on the tiny pair: the
explanation (lessons.explain) and the chart (lessons.figure) are made from one outcome, the figures the text
states about the chart's quantity are read from the text, the figures the chart carries from the plotly
figure (its title and subtitle, its traces' names, points and marker counts), and each text figure must be
in the chart to the text's precision. What "the chart's quantity" is in words differs per chart, so each
figure function has a reader here (READERS); a figure step whose function has none fails, so a new chart
comes with its check.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from specviz.core import measure
from specviz.core.settings import DecodeSettings
from specviz.teaching import lessons

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
NUMBER = r"\d+(?:\.\d+)?"


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    """Live runs here use the tiny pair (see conftest.tiny_app_registry)."""
    return tiny_app_registry(TINY)


def figure_steps():
    return [(les, s) for les in lessons.LESSONS for s in les.steps if s.figure]


# --- what a chart carries -----------------------------------------------------------------------------------------
def _plain(text) -> str:
    """A plotly text without its markup: <br> as a space, other tags dropped."""
    return re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", " ", str(text or "")))


def chart_words(fig) -> str:
    """The chart's written text: title, subtitle, annotations, trace names and trace texts."""
    title = fig.layout.title
    parts = [title.text, title.subtitle.text if title.subtitle else None]
    parts += [a.text for a in fig.layout.annotations or ()]
    for t in fig.data:
        parts.append(t.name)
        parts += list(t.text) if isinstance(getattr(t, "text", None), (list, tuple)) else [getattr(t, "text", None)]
    return " ".join(_plain(p) for p in parts if p)


def written_numbers(fig) -> list[float]:
    return [float(x) for x in re.findall(NUMBER, chart_words(fig))]


def points(fig) -> list[tuple[float, float]]:
    """(x, y) of every trace point with numeric coordinates."""
    out = []
    for t in fig.data:
        for x, y in zip(t.x if t.x is not None else (), t.y if t.y is not None else ()):
            try:
                out.append((float(x), float(y)))
            except (TypeError, ValueError):
                continue
    return out


def shown(value: float, as_written: str) -> bool:
    """Whether value reads as the text's figure at the text's precision (its number of decimals)."""
    decimals = len(as_written.split(".")[1]) if "." in as_written else 0
    return format(value, f".{decimals}f") == as_written


# --- readers: the text's figures about the chart's quantity, each against the chart ---------------------------------
def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", text)


def entropy_disagreements(text: str, fig) -> tuple[int, list[str]]:
    """The entropy chart (fig_entropy_acceptance) carries the target's entropy where drafts were accepted and
    where they were rejected, and how many of each (its markers). Every number in a sentence of the text about
    accepted or rejected drafts must be one of those, and the chart's title must name the run the text names."""
    counts = [float(len(t.x)) for t in fig.data if t.name in ("accepted draft", "rejected draft")]
    carried = written_numbers(fig) + counts
    stated, bad = 0, []
    for sentence in _sentences(text):
        if not re.search(r"\b(accepted|rejected)\b", sentence):
            continue
        for n in re.findall(NUMBER, sentence):
            stated += 1
            if not any(shown(v, n) for v in carried):
                bad.append(f"{n} in {sentence!r}: not on the chart ({chart_words(fig)!r}, markers {counts})")
        named = re.match(r"On (the [\w ]+? alone)\b", sentence)
        if named and named.group(1) not in chart_words(fig):
            bad.append(f"the text quotes {named.group(1)}, the chart's title does not name it")
    return stated, bad


def speedup_disagreements(text: str, fig) -> tuple[int, list[str]]:
    """The speedup-against-k chart (fig_speedup_model) carries α and c in its title and a speedup at each k
    (the model's curve, the best k's star, measured points). Every 'α = a', 'c = c' and every speedup the text
    ties to a k ('k = 4: 2.31×', 'k = 4 (2.31×)', '2.31× at k = 4') must be on it."""
    words, pts = chart_words(fig), points(fig)
    stated, bad = 0, []
    for name in ("α", "c"):
        for n in re.findall(rf"(?<!\w){name} = ({NUMBER})", text):
            stated += 1
            on_chart = [float(x) for x in re.findall(rf"(?<!\w){name} = ({NUMBER})", words)]
            if not any(shown(v, n) for v in on_chart):
                bad.append(f"{name} = {n}: the chart says {name} = {on_chart}")
    ties = [(k, s) for k, s in re.findall(rf"k = (\d+)(?::| \() ?({NUMBER})×", text)]
    ties += [(k, s) for s, k in re.findall(rf"({NUMBER})× at k = (\d+)", text)]
    for k, s in ties:
        stated += 1
        if not any(x == int(k) and shown(y, s) for x, y in pts):
            bad.append(f"k = {k}: {s}×: the chart has {[round(y, 3) for x, y in pts if x == int(k)]} at k = {k}")
    return stated, bad


READERS: dict[str, Callable] = {
    "draw_entropy_along_story": entropy_disagreements,
    "draw_speedup_against_k": speedup_disagreements,
}


def check_step(step, ctx) -> list[str]:
    o = lessons.run_step(step, ctx)
    text, fig = lessons.explain(step, o), lessons.figure(step, ctx, o)
    stated, bad = READERS[step.figure](text, fig)
    nothing_to_state = "No draft was rejected" in text
    assert stated or nothing_to_state, f"{step.key}: the reader found no figure in {text!r} (did the wording change?)"
    return bad


# --- the tests ------------------------------------------------------------------------------------------------------
def test_every_chart_of_a_lesson_has_a_reader():
    missing = set(lessons.FIGURES) - set(READERS)
    assert not missing, f"a lesson chart with no check of its text here: {missing}"
    assert figure_steps(), "no lesson step draws a chart"


@pytest.mark.parametrize("les, step", figure_steps(), ids=lambda x: getattr(x, "key", None))
def test_a_recorded_steps_text_and_chart_tell_the_same_figures(les, step):
    assert check_step(step, lessons.Context()) == []


@pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")
def test_a_live_steps_text_and_chart_tell_the_same_figures_on_the_tiny_pair():
    from specviz.decoding import models

    ctx = lessons.Context(pair=models.load_pair(None, draft_precision="float32"),
                          settings=DecodeSettings(k=4, max_new_tokens=16, seed=3))
    bad = {f"{les.key}/{step.key}": b for les, step in figure_steps() if (b := check_step(step, ctx))}
    assert bad == {}


def test_the_check_catches_an_entropy_text_pooled_over_both_runs():
    """The creative lesson's entropy step once quoted the means pooled over the code and the story while its
    chart drew the story alone: that text, put under the chart, is caught."""
    step = lessons.lesson("creative").steps[2]
    ctx = lessons.Context()
    o = lessons.run_step(step, ctx)
    fig = lessons.figure(step, ctx, o)
    code, story = lessons.trials_of(ctx, (lessons.CODE, 0.0), (lessons.STORY, 0.0))
    acc, rej = (a + b for a, b in zip(measure.entropy_by_verdict(code.run.rounds),
                                      measure.entropy_by_verdict(story.run.rounds)))
    pooled = (f"Where a draft was rejected the target's entropy averaged {sum(rej) / len(rej):.2f} nats, against "
              f"{sum(acc) / len(acc):.2f} where it was accepted ({len(rej)} rejections, {len(acc)} acceptances).")
    stated, bad = entropy_disagreements(pooled, fig)
    assert stated == 4 and bad, bad
