"""Every chart's PNG download keeps its text inside the picture and its markers inside their axes, with no two legend
entries or labels overlapping and round numbers on every axis.

The modebar's "download as PNG" (charts.plotly_config: width and height None) draws the figure again at the size
it has on screen: the page's width (st.plotly_chart stretches a chart to its container) by the figure's height.
So each figure is drawn here by plotly.js itself, in headless Chromium, at the widths a chart has in the app, and
the boxes of its text are read from the SVG: the title, subtitle, legend, annotations, axis titles, tick labels and
labels beside points must lie inside the picture (a label on a trace clipped to its axes: inside the plot area),
no two legend entries and no two labels beside points may overlap, and the legend may not cover the title. Each
marker of a scatter (read from the SVG: .scatterlayer's points) must lie whole inside its own plot area, whether its
trace is clipped to its axes (a marker cut in half) or not (a marker over the axis or the margin). Each axis's ticks
(plotly.js's own, in its full layout) must be round numbers: a step of 1, 2, 2.5 or 5 times a power of ten, each tick
a whole number of steps (an axis that takes its ticks from another's grid reads 0.187, 0.374, 0.562).

Widths, measured with `st.plotly_chart` in Streamlit's wide layout with the sidebar open, in headless Chromium: a
1024-pixel screen gives a full-width chart 564 px and half a row (st.columns(2)) 274 px; a 1440-pixel one gives 980.
The page draws the figure as made (ui.show_chart passes theme=None), so the figure here is the one downloaded.
Presenter mode draws charts.for_presenter(fig) (ui.presented: type, markers and margins 1.3 times larger) with the
sidebar collapsed: measured the same way, its type at 21 px, a 1024-pixel projector gives a full-width chart 814 px
and half a row 396 px, a 1440-pixel one 1230 px. Every figure is drawn as made and as presented.
One browser and one page draw every figure (plotly.min.js loaded once).

Run with: pytest -m browser tests/test_chart_export.py
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import plotly
import pytest

from specviz.teaching import charts
from specviz.core.settings import DecodeSettings

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("SPECVIZ_CHROMIUM", "/usr/bin/chromium")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
FULL_PX, WIDE_PX, HALF_PX = 564, 980, 274  # a chart's width on screen, so in its PNG (see above)
PRESENTER_PX = {FULL_PX: (814, 1230), HALF_PX: (396,)}  # the same charts in presenter mode (sidebar collapsed)
SLACK_PX = 1.0  # rounding in the boxes Chromium reports

# the text plotly.js draws in a figure's SVG, by what it is
TEXT = {"title": ".gtitle, .gtitle-subtitle", "legend": ".legend .legendtext",
        "annotation": ".annotation-text", "tick": ".xtick text, .ytick text, .x2tick text, .y2tick text",
        "axis title": ".g-xtitle text, .g-ytitle text, .g-x2title text, .g-y2title text, .g-x3title text",
        "label": ".textpoint text"}

# in the page: draw one figure, and report every text's box (the SVG's corner at 0, 0), each label's plot area
# when its trace is clipped to its axes, and the picture's size
MEASURE = """async ([fig, sel]) => {
  const gd = document.getElementById('gd');
  Plotly.purge(gd);
  await Plotly.newPlot(gd, fig.data, fig.layout, {staticPlot: true});
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const fl = gd._fullLayout;
  const out = [];
  for (const [kind, css] of Object.entries(sel)) {
    for (const el of gd.querySelectorAll(css)) {
      const text = el.textContent.trim();
      const b = el.getBoundingClientRect();
      if (!text || b.width === 0 || getComputedStyle(el).display === 'none') continue;
      let clip = null;
      const tr = kind === 'label' && el.closest('.trace');
      const t = tr && tr.__data__ && tr.__data__[0] && tr.__data__[0].trace;
      if (t && t.cliponaxis !== false) {
        const xa = fl[(t.xaxis || 'x').replace('x', 'xaxis')], ya = fl[(t.yaxis || 'y').replace('y', 'yaxis')];
        clip = [xa._offset, ya._offset, xa._offset + xa._length, ya._offset + ya._length];
      }
      out.push({kind, text, box: [b.left - svg.left, b.top - svg.top, b.right - svg.left, b.bottom - svg.top],
                clip});
    }
  }
  const area = (t) => {
    const xa = fl[(t.xaxis || 'x').replace('x', 'xaxis')], ya = fl[(t.yaxis || 'y').replace('y', 'yaxis')];
    return [xa._offset, ya._offset, xa._offset + xa._length, ya._offset + ya._length];
  };
  const markers = [];
  for (const el of gd.querySelectorAll('.scatterlayer .trace .points path')) {
    const b = el.getBoundingClientRect();
    const tr = el.closest('.trace');
    const t = tr && tr.__data__ && tr.__data__[0] && tr.__data__[0].trace;
    if (!t || b.width === 0 || getComputedStyle(el).display === 'none') continue;
    markers.push({trace: t.name || '', x: el.__data__ && el.__data__.x, y: el.__data__ && el.__data__.y,
                  box: [b.left - svg.left, b.top - svg.top, b.right - svg.left, b.bottom - svg.top], area: area(t)});
  }
  const axes = [];
  for (const [name, ax] of Object.entries(fl)) {
    if (!/^[xy]axis[0-9]*$/.test(name) || !ax.visible || !ax.showticklabels || !ax._vals) continue;
    const ticks = ax._vals.filter((v) => !v.minor && v.text !== '');
    axes.push({name, type: ax.type, tickmode: ax.tickmode, vals: ticks.map((v) => v.x),
               texts: ticks.map((v) => v.text)});
  }
  return {width: fl.width, height: fl.height, texts: out, markers, axes};
}"""


def _inside(box, area) -> bool:
    return (box[0] >= area[0] - SLACK_PX and box[1] >= area[1] - SLACK_PX
            and box[2] <= area[2] + SLACK_PX and box[3] <= area[3] + SLACK_PX)


def _overlap(a, b) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > SLACK_PX and min(a[3], b[3]) - max(a[1], b[1]) > SLACK_PX


ROUND_STEPS = (1.0, 2.0, 2.5, 5.0)  # a tick step is one of these times a power of ten


def _round_step(d: float) -> bool:
    m = d / 10 ** math.floor(math.log10(d))
    return any(math.isclose(m, r, rel_tol=1e-6) or math.isclose(m, 10 * r, rel_tol=1e-6) for r in ROUND_STEPS)


def _whole(v: float, step: float) -> bool:
    return abs(v / step - round(v / step)) < 1e-6


def tick_problems(ax: dict) -> list[str]:
    """A linear axis's ticks that are not round numbers: auto ticks must step by a round step (1, 2, 2.5, 5 × 10^n),
    each a whole number of steps; ticks the figure lists (tickvals) must each be a whole number of hundredths."""
    vals = sorted(ax["vals"])
    if ax["type"] != "linear" or len(vals) < 2:
        return []
    shown = ", ".join(ax["texts"][:4])
    if ax["tickmode"] == "array":
        bad = [v for v in vals if not _whole(v, 0.01)]
        return [f"{ax['name']}'s ticks {shown} are not round numbers"] if bad else []
    step = min(b - a for a, b in zip(vals, vals[1:]))
    if step <= 0 or not _round_step(step) or not all(_whole(v, step) for v in vals):
        return [f"{ax['name']}'s ticks {shown} step by {step:.4g}, not a round number"]
    return []


def marker_problems(m: dict) -> list[str]:
    """A marker that is not whole inside its plot area: cut at the axis, or printed over it."""
    if _inside(m["box"], m["area"]):
        return []
    return [f"marker of {m['trace']!r} at ({m['x']}, {m['y']}) {[round(v) for v in m['box']]} is not inside its plot "
            f"{[round(v) for v in m['area']]}"]


def problems(drawn: dict) -> list[str]:
    """What a reader of the PNG would miss: text cut at the picture's (or its plot's) edge, legend entries or
    labels printed over each other, a legend over the title, a marker cut at (or over) its axes, ticks that are not
    round numbers."""
    W, H = drawn["width"], drawn["height"]
    out = []
    for t in drawn["texts"]:
        if not _inside(t["box"], (0, 0, W, H)):
            out.append(f"{t['kind']} {t['text']!r} at {[round(v) for v in t['box']]} leaves the {W}×{H} picture")
        elif t["clip"] and not _inside(t["box"], t["clip"]):
            out.append(f"{t['kind']} {t['text']!r} is cut at its plot's edge {[round(v) for v in t['clip']]}")
    for kinds in (("legend", "legend"), ("label", "label"), ("legend", "title")):
        a_s = [t for t in drawn["texts"] if t["kind"] == kinds[0]]
        b_s = [t for t in drawn["texts"] if t["kind"] == kinds[1]]
        for i, a in enumerate(a_s):
            for b in b_s[i + 1:] if kinds[0] == kinds[1] else b_s:
                if _overlap(a["box"], b["box"]):
                    out.append(f"{kinds[0]} {a['text']!r} overlaps {kinds[1]} {b['text']!r}")
    for m in drawn["markers"]:
        out += marker_problems(m)
    for ax in drawn["axes"]:
        out += tick_problems(ax)
    return out


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=1)
        pg.set_content("<html><body style='margin:0'><div id='gd'></div></body></html>")
        pg.add_script_tag(path=str(PLOTLY_JS))
        yield lambda fig, width: pg.evaluate(MEASURE, [_at(fig, width), TEXT])
        browser.close()


def _at(fig, width: int) -> dict:
    """The figure as the page's chart has it: the container's width, the figure's own height."""
    spec = json.loads(fig.to_json())
    spec["layout"]["width"] = width
    spec["layout"]["height"] = fig.layout.height or fig.layout.template.layout.height
    return spec


# --- the figures, with realistic inputs ------------------------------------------------------------------------
def _figures():
    """(name, figure, width) for every fig_* in charts and tree_charts, at the widths the pages draw them."""
    import torch
    from test_charts import decode, france_round, sim_run

    from specviz.data import pagefile
    from specviz.data.records import Run
    from specviz.decoding.tree import tree_decode
    from specviz.modeling.tiny import tiny_model
    from specviz.teaching import tree_charts as tc
    from specviz.teaching import page_records
    from specviz.teaching.early_exit import EarlyExitPoint, EarlyExitSweep
    from specviz.teaching.sidebyside import PairResult
    from specviz.teaching.tree_lab import ChainVsTree, ShapeRun, by_depth, by_rank

    run = sim_run(seed=8, n_rounds=40)
    policy = sim_run(seed=3, n_rounds=40, ks=[2, 3, 4, 5, 6, 8] * 6 + [4] * 4)
    r = france_round()
    point = charts.measured_point(run)
    domains = {"code": {0.0: (0.93, 0.02), 0.7: (0.85, 0.03), 1.0: (0.8, 0.03)},
               "list": {0.0: (0.95, 0.02), 0.7: (0.9, 0.03), 1.0: (0.82, 0.04)},
               "creative writing": {0.0: (0.62, 0.05), 0.7: (0.55, 0.05), 1.0: (0.48, 0.05)},
               "chat": {0.0: (0.8, 0.04), 0.7: (0.72, 0.04), 1.0: (0.66, 0.05)}}
    timings = {n: [0.010 * (1 + 0.02 * n), 0.0105 * (1 + 0.02 * n), 0.011 * (1 + 0.02 * n)]
               for n in (1, 2, 4, 8, 16, 32, 64)}
    batch = {(n, b): 0.01 * max(1.0, n * b / 32) for n in (1, 4, 16) for b in (1, 4, 16)}
    one = Run(mode="speculative", prompt_ids=[0], token_ids=r.emitted, rounds=[r], settings={},
              stop_reason="max_new_tokens", prefill_s=0.0, decode_s=0.04, target_passes=1, draft_passes=4, ks=[4])
    counts = {i: c for i, c in enumerate([310, 180, 150, 120, 90, 60, 40, 30, 20])}
    p = {i: c / 1000 for i, c in counts.items()}
    spec = [(0.05 * i, 3 * i) for i in range(1, 21)]
    base = [(0.04 * i, i) for i in range(1, 61)]
    bench = [{"k": k, "measured": 1 + 0.3 * k - 0.02 * k * k, "predicted": 1 + 0.32 * k - 0.02 * k * k}
             for k in (1, 2, 3, 4, 6, 8)]
    sweep = EarlyExitSweep(28, 4, 0.0, tuple(EarlyExitPoint(L, 0.3 + 0.025 * L, 0.04 * L, 1 + 0.1 * L,
                                                            1.2 + 0.03 * L, 1.25 + 0.03 * L) for L in (6, 11, 17, 22, 28)))
    target = tiny_model(0, dtype=torch.float64)
    draft = tiny_model(0, noise=0.1, dtype=torch.float64)
    tree = tree_decode(target, draft, [5, 6, 7], DecodeSettings(temperature=1.0, max_new_tokens=30, seed=1), budget=12,
                       branch=3,
                       eos_token_id=[])
    tr = max(tree.rounds, key=lambda x: x.n_nodes)
    shapes = [ShapeRun(s, b, 60, 60 // (2 + b // 4), 2 + b / 4, 40.0 - b, 10 + b) for b in (4, 8, 16)
              for s in ("chain", "tree")]
    # the shipped page recordings: what recorded mode draws on a laptop with no model
    exact, speed = pagefile.load("exactness"), pagefile.load("speedup")
    shipped = lambda rec, name: rec.result(name, page_records.RESULTS[rec.page][name])  # noqa: E731
    pairs = [PairResult(n, "", a, c, t, s, s * 0.95, True, 32) for n, a, c, t, s in
             (("qwen2.5-coder-embedded", 0.81, 0.12, 3.1, 2.05), ("smollm2-self", 0.45, 0.35, 1.6, 0.93),
              ("tiny-noisy", 0.6, 0.2, 2.2, 1.4))]
    yield from [
        ("rules (recorded)", charts.fig_rules(shipped(exact, "rules")), FULL_PX),
        ("first_position (recorded)", charts.fig_first_position(shipped(exact, "fp"), exact.decode()), FULL_PX),
        ("early_exit (recorded)", charts.fig_early_exit(shipped(speed, "early_exit")), FULL_PX),
        ("expected_tokens (Theory, a run's k = 16)", charts.fig_expected_tokens(16, point), FULL_PX),
        ("pairs", charts.fig_pairs(pairs), FULL_PX),
        ("pq", charts.fig_pq(r, 3, decode), FULL_PX),
        ("residual", charts.fig_residual(r, decode), FULL_PX),
        ("expected_tokens (Theory)", charts.fig_expected_tokens(4, point), FULL_PX),
        ("expected_tokens (k policy)", charts.fig_expected_tokens(4, charts.measured_point(policy),
                                                                  run_ks=policy.k_per_round), FULL_PX),
        ("expected_tokens (a short run)", charts.fig_expected_tokens(4, {"alpha": 0.62, "tpp": 2.4, "tpp_err": 5.31,
                                                                          "alpha_err": 0.2}, run_ks=[4, 8, 8, 16]),
         FULL_PX),
        ("expected_tokens (half)", charts.fig_expected_tokens(4, charts.measured_point(policy),
                                                              run_ks=policy.k_per_round, width=charts.HALF_WIDTH),
         HALF_PX),
        ("alpha_trace", charts.fig_alpha_trace(run), FULL_PX),
        ("speedup_model (Theory)", charts.fig_speedup_model(0.8, 0.1, k_max=16), FULL_PX),
        ("speedup_model (measured)", charts.fig_speedup_model(0.7, 0.1, k_max=8, verify_cost={n: 1.0 + 0.02 * n
                                                                                                 for n in range(1, 10)},
                                                              measured={2: (1.6, 0.1), 4: (1.9, 0.15)}), FULL_PX),
        ("forward_cost", charts.fig_forward_cost(timings), FULL_PX),
        ("batch_cost", charts.fig_batch_cost(batch), FULL_PX),
        ("accept_by_position", charts.fig_accept_by_position({"code": run, "creative writing": policy}), FULL_PX),
        ("accept_lengths", charts.fig_accept_lengths(run), FULL_PX),
        ("entropy_acceptance", charts.fig_entropy_acceptance(one, decode), FULL_PX),
        ("alpha_by_domain", charts.fig_alpha_by_domain(domains, 0.0, counted={"code": {0.0: 0.9}}), FULL_PX),
        ("alpha_vs_temperature", charts.fig_alpha_vs_temperature(domains, counted={"chat": {0.7: 0.7}}), FULL_PX),
        ("k_trace", charts.fig_k_trace(policy), FULL_PX),
        ("exactness", charts.fig_exactness(counts, p, decode), FULL_PX),
        ("race", charts.fig_race(spec, base), FULL_PX),
        ("bench_speedup", charts.fig_bench_speedup(bench), FULL_PX),
        ("early_exit", charts.fig_early_exit(sweep), FULL_PX),
        ("tree", tc.fig_tree(tr, decode=lambda i: f"t{i}"), FULL_PX),
        ("node_pq", tc.fig_node_pq(tr, 1, decode=lambda i: f"t{i}"), FULL_PX),
        ("tree_acceptance", tc.fig_tree_acceptance(by_depth(tree.rounds), by_rank(tree.rounds)), FULL_PX),
        ("chain_vs_tree", tc.fig_chain_vs_tree(ChainVsTree([4, 8, 16], shapes, {1: 1.0, 5: 1.05, 9: 1.1, 17: 1.3},
                                                           True, True)), FULL_PX),
    ]


def _drawn_as(fig, width: int):
    """(mode, figure, width) for each way the app draws fig: as made at its widths, and as presenter mode presents
    it (charts.for_presenter, what ui.presented does) at presenter mode's."""
    for w in sorted({width, WIDE_PX} if width == FULL_PX else {width}):
        yield "", fig, w
    presented = charts.for_presenter(fig)
    for w in PRESENTER_PX[width]:
        yield " in presenter mode", presented, w


def test_every_png_download_keeps_its_text_inside_and_apart(page):
    bad = {}
    for name, fig, width in _figures():
        for mode, drawn, w in _drawn_as(fig, width):
            if found := problems(page(drawn, w)):
                bad[f"{name}{mode} at {w} px"] = found
    assert not bad, "\n" + "\n".join(f"{k}:\n  " + "\n  ".join(v) for k, v in bad.items())


def test_the_checks_see_a_cut_marker_a_cut_label_and_ticks_that_are_not_round(page):
    """The checks themselves: a marker on the plot's edge, a label past it and an axis ticked from another's grid."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 2], mode="markers+text", text=["", "a long label past the edge"],
                               textposition="middle right", marker_size=14))
    fig.update_layout(template=charts.TEMPLATE, xaxis_range=[0, 1.05], yaxis_range=[0, 2.5],
                      yaxis2=dict(overlaying="y", side="right", range=[0, 0.7], tickmode="sync"))
    fig.add_scatter(x=[0.5], y=[0.3], yaxis="y2", mode="markers")
    found = "\n".join(problems(page(fig, FULL_PX)))
    assert "marker of 'trace 0' at (0, 1)" in found
    assert "label 'a long label past the edge'" in found
    assert "yaxis2's ticks" in found and "yaxis's ticks" not in found
