"""fig_tree draws a real tree round: every node once, at its depth, in its verdict's trace."""

import json

import pytest
import torch

from specviz.modeling.tiny import tiny_model
from specviz.decoding.tree import tree_decode
from specviz.teaching.tree_charts import NODE_STATES, fig_tree, tree_layout
from specviz.core.settings import DecodeSettings

EVIL = "<a href='x'>y</a>"


@pytest.fixture(scope="module")
def rounds():
    target = tiny_model(0, dtype=torch.float64)
    draft = tiny_model(0, noise=0.1, dtype=torch.float64)
    runs = [tree_decode(target, draft, [5, 6, 7], DecodeSettings(temperature=t, max_new_tokens=30, seed=1), budget=12,
                        branch=3, eos_token_id=[]) for t in (0.0, 1.0)]
    return [r for run in runs for r in run.rounds]


def node_traces(fig):
    """legend name -> {node index: (x, y)} for the node traces (those with customdata)."""
    out = {}
    for tr in fig.data:
        if tr.customdata is not None:
            out[tr.name] = {int(c): (x, y) for c, x, y in zip(tr.customdata, tr.x, tr.y)}
    return out


def test_every_node_is_drawn_once_at_its_depth_in_its_verdicts_colour(rounds):
    kinds = set()
    for r in rounds:
        traces = node_traces(fig_tree(r))
        n = r.n_nodes
        drawn = [i for nodes in traces.values() for i in nodes]
        assert sorted(drawn) == [-1] + list(range(n + (r.extra_id is not None)))
        for state, (label, _, _) in NODE_STATES.items():
            got = set(traces.get(label, {}))
            if state in ("correction", "bonus"):
                assert got == ({n} if r.extra_kind == state else set())
            else:
                assert got == {i for i, v in enumerate(r.verdict) if v == state}
        pos = {i: xy for nodes in traces.values() for i, xy in nodes.items()}
        assert all(pos[i][0] == r.depths[i] for i in range(n))
        if r.extra_id is not None:
            assert pos[n][0] == r.n_accepted + 1
        kinds.update(r.verdict)
        kinds.add(r.extra_kind)
    assert {"accepted", "rejected", "untried", "correction", "bonus"} <= kinds  # the rounds cover every state


def test_the_path_is_drawn_as_the_thick_edges(rounds):
    r = next(r for r in rounds if r.n_accepted >= 2 and r.extra_id is not None)
    fig = fig_tree(r)
    thick = max((tr for tr in fig.data if tr.mode == "lines"), key=lambda tr: tr.line.width)
    pos = {i: xy for nodes in node_traces(fig).values() for i, xy in nodes.items()}
    chain = [-1] + r.path + [r.n_nodes]
    segments = {(thick.x[j], thick.y[j], thick.x[j + 1], thick.y[j + 1]) for j in range(0, len(thick.x), 3)}
    assert segments == {(*pos[a], *pos[b]) for a, b in zip(chain, chain[1:])}


def test_layout_puts_leaves_apart_and_parents_between_their_children():
    parents = [-1, -1, 0, 0, 0, 1, 5, 5]
    y = tree_layout(parents)
    leaves = [i for i in range(len(parents)) if i not in parents]
    assert len({y[i] for i in leaves}) == len(leaves)
    for node in [-1] + list(range(len(parents))):
        kids = [i for i, p in enumerate(parents) if p == node]
        if kids:
            assert min(y[k] for k in kids) <= y[node] <= max(y[k] for k in kids)


def test_token_text_is_html_escaped(rounds):
    fig = fig_tree(rounds[0], decode=lambda i: f"{EVIL}{i}")
    # labels and hover texts, re-dumped so '<' is literal, not \u003c
    text = json.dumps(json.loads(fig.to_json()), ensure_ascii=False)
    assert "<a" not in text and "</a>" not in text and "&lt;a" in text


def test_chain_vs_tree_keeps_its_legend_above_the_subplot_titles():
    """The three subplots' titles sit just above their plots, where the theme puts the legend's band."""
    from specviz.teaching import charts
    from specviz.teaching.tree_charts import SUBPLOT_TITLE_PX, fig_chain_vs_tree
    from specviz.teaching.tree_lab import FREE_TOL, ChainVsTree, ShapeRun

    runs = [ShapeRun(s, b, 30, 10, 3.0, 10.0, 1.0) for b in (4, 8) for s in ("chain", "tree")]
    fig = fig_chain_vs_tree(ChainVsTree([4, 8], runs, {1: 1.0, 5: 1.1, 9: 1.2}, True, True))
    lay = fig.layout
    lines = lay.title.subtitle.text.count("<br>") + 1
    assert lay.margin.t == charts.TOP_MARGIN + charts.LINE_PX * (lines - 1) + SUBPLOT_TITLE_PX
    plot_px = lay.height - lay.margin.t - lay.template.layout.margin.b
    titles = [a for a in lay.annotations if a.text in ("tokens per target pass", "tokens per second")]
    assert len(titles) == 2 and all(a.y == 1.0 for a in titles)  # plotly's place for a subplot title
    # in the subtitle's type, each fits its third of the chart in one line, so the band above holds it
    assert all(a.font.size == charts.SUBTITLE_PX and "<br>" not in a.text for a in lay.annotations)
    assert (lay.legend.y - 1) * plot_px >= SUBPLOT_TITLE_PX
    # the "nearly free" line is explained in the subtitle, not by a note on it that the verify curve crossed
    assert len(lay.annotations) == 3 and f"{FREE_TOL}×" in lay.title.subtitle.text.replace("<br>", " ")


def test_a_token_in_two_branches_reads_the_same_in_both(rounds):
    # the same token drafted under two parents is two nodes with one text: no id is added to tell them apart
    r = next(r for r in rounds if len(set(r.tokens)) < len(r.tokens))
    fig = fig_tree(r, decode=lambda i: f"t{i}")
    text = {int(c): t for tr in fig.data if tr.customdata is not None and tr.text is not None
            for c, t in zip(tr.customdata, tr.text)}
    assert all(text[i] == f"t{tok}" for i, tok in enumerate(r.tokens))


WORDS = ["␣capital", "␣France", "␣Paris", "␣is", "␣prime", "␣the", "␣largest", "python", "def", "␣simple"]
DRAWN = """() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const each = sel => [...document.querySelectorAll('.scatterlayer .trace')].flatMap((tr, t) =>
    [...tr.querySelectorAll(sel)].map((e, i) => ({id: t + ':' + i, box: box(e), text: e.textContent})));
  return {labels: each('.textpoint'), markers: each('path.point'), plot: box(document.querySelector('.xgrid'))};
}"""


def test_no_node_label_is_drawn_over_another_label_or_a_neighbours_marker(rounds):
    """Drawn by plotly.js in Chromium, normal and in presenter mode: a label clears every other node's label and
    marker, and the top node's label stays inside the plot. Budget 12 with b = 3 puts nine leaves at one depth."""
    from pathlib import Path

    from specviz.teaching import charts
    from specviz.devtools import loadtest

    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    if not Path(loadtest.CHROMIUM).exists():
        pytest.skip(f"{loadtest.CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    def hit(a, b, gap=1.0) -> bool:
        return a[0] < b[2] - gap and b[0] < a[2] - gap and a[1] < b[3] - gap and b[1] < a[3] - gap

    crowded = [r for r in rounds if r.n_nodes == 12][:4]
    assert crowded
    over, clipped = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=loadtest.CHROMIUM, args=loadtest.CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 1200})
            for r in crowded:
                fig = fig_tree(r, decode=lambda t: WORDS[t % len(WORDS)])
                for shown in (fig, charts.for_presenter(fig)):
                    page.set_content(shown.to_html(include_plotlyjs=True, config={"staticPlot": True}))
                    page.wait_for_selector(".scatterlayer .textpoint")
                    d = page.evaluate(DRAWN)
                    labels, markers = d["labels"], d["markers"]
                    over += [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:]
                             if hit(a["box"], b["box"])]
                    over += [(a["text"], "a marker") for a in labels for m in markers
                             if m["id"] != a["id"] and hit(a["box"], m["box"])]
                    clipped += [a["text"] for a in labels if a["box"][1] < d["plot"][1] - 1]
        finally:
            browser.close()
    assert not over, f"labels drawn over a neighbour: {over[:6]}"
    assert not clipped, f"labels cut at the top of the plot: {clipped}"
