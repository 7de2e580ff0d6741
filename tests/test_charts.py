"""Tests for specviz.teaching.charts: the figures carry the right traces and numbers."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

import pytest

from specviz.teaching import charts, explain
from specviz.core import theory
from specviz.data.records import Round, Run, TopK
from specviz.core.theory import expected_speedup, expected_tokens

VOCAB = ["The", " Paris", ",", " a", " city", " major", "\n", " of", "<s>"]
decode = VOCAB.__getitem__


# --- a tiny exact simulator: plausible, internally consistent Rounds -----------
def _dist(rng, v=len(VOCAB), conc=0.6):
    return rng.dirichlet([conc] * v)


def _top(p, n=6):
    ids = [int(i) for i in np.argsort(-p)[:n]]
    return TopK(ids=ids, probs=[float(p[i]) for i in ids])


def sim_round(rng, index, k, greedy=False, agree=0.0):
    """One speculative round on random p/q (q pulled toward p by `agree`)."""
    ps = [_dist(rng) for _ in range(k + 1)]
    qs = [(1 - agree) * _dist(rng) + agree * ps[i] for i in range(k)]
    drafted, u, ratio, acc = [], [], [], []
    for i in range(k):
        d = int(np.argmax(qs[i])) if greedy else int(rng.choice(len(VOCAB), p=qs[i]))
        drafted.append(d)
    extra, kind, residual = None, None, None
    for i, d in enumerate(drafted):
        r = ps[i][d] / qs[i][d]
        ratio.append(float(r))
        if greedy:
            ok = d == int(np.argmax(ps[i]))
        else:
            u.append(float(rng.random()))
            ok = u[-1] <= min(1.0, r)
        acc.append(bool(ok))
        if not ok:
            res = np.maximum(ps[i] - qs[i], 0)
            res /= res.sum()
            residual = _top(res)
            extra = int(np.argmax(ps[i])) if greedy else int(rng.choice(len(VOCAB), p=res))
            kind = "correction"
            break
    n_acc = sum(acc)
    if extra is None:
        extra = int(np.argmax(ps[k])) if greedy else int(rng.choice(len(VOCAB), p=ps[k]))
        kind = "bonus"
    return Round(
        index=index, k=k, drafted=drafted,
        q_drafted=[float(qs[i][d]) for i, d in enumerate(drafted)],
        p_drafted=[float(ps[i][d]) for i, d in enumerate(drafted)],
        u=u, ratio=ratio, accepted=acc, n_accepted=n_acc,
        emitted=drafted[:n_acc] + [extra], extra_id=extra, extra_kind=kind,
        p_top=[_top(p) for p in ps], q_top=[_top(q) for q in qs],
        target_argmax=[int(np.argmax(p)) for p in ps],
        overlap=[float(np.minimum(ps[i], qs[i]).sum()) for i in range(k)],
        entropy=[float(-(p * np.log(p)).sum()) for p in ps],
        residual_top=residual, greedy=greedy,
        draft_s=0.002 * k, verify_s=0.02, round_s=0.021 + 0.002 * k,
    )


def sim_run(seed=0, n_rounds=30, k=4, ks=None, greedy=False, agree=0.6, label=None):
    rng = np.random.default_rng(seed)
    ks = ks or [k] * n_rounds
    rounds = [sim_round(rng, i, kk, greedy, agree) for i, kk in enumerate(ks)]
    toks = [t for r in rounds for t in r.emitted]
    return Run(mode="speculative", prompt_ids=[0], token_ids=toks, rounds=rounds,
               settings={"k": k, **({"label": label} if label else {})}, stop_reason="max_new_tokens",
               prefill_s=0.05, decode_s=sum(r.round_s for r in rounds),
               target_passes=len(rounds), draft_passes=sum(ks), ks=list(ks))


def france_round(greedy=False):
    """The classic example: ' Paris' ',' ' a' accepted, ' city' -> ' major'."""
    p = [TopK([1, 7, 5], [0.7, 0.2, 0.1]), TopK([2, 7], [0.8, 0.2]), TopK([3, 5], [0.6, 0.4]),
         TopK([5, 4, 3], [0.55, 0.3, 0.15]), TopK([7], [1.0])]
    q = [TopK([1, 5], [0.9, 0.1]), TopK([2], [1.0]), TopK([3, 4], [0.5, 0.5]),
         TopK([4, 5], [0.8, 0.2])]
    return Round(
        index=0, k=4, drafted=[1, 2, 3, 4], q_drafted=[0.9, 1.0, 0.5, 0.8],
        p_drafted=[0.7, 0.8, 0.6, 0.3], u=[] if greedy else [0.5, 0.3, 0.9, 0.6],
        ratio=[0.7 / 0.9, 0.8, 1.2, 0.375], accepted=[True, True, True, False], n_accepted=3,
        emitted=[1, 2, 3, 5], extra_id=5, extra_kind="correction", p_top=p, q_top=q,
        target_argmax=[1, 2, 3, 5, 7], overlap=[0.8, 0.8, 0.6, 0.5],
        entropy=[0.8, 0.5, 0.67, 0.95, 0.0],
        residual_top=TopK([5, 3], [0.35 / 0.5, 0.15 / 0.5]), greedy=greedy,
        draft_s=0.01, verify_s=0.03, round_s=0.041,
    )


def trace(fig, name):
    hits = [t for t in fig.data if t.name == name]
    assert hits, f"no trace named {name!r}: {[t.name for t in fig.data]}"
    return hits[0]


def title(fig):
    return fig.layout.title.text + " " + (fig.layout.title.subtitle.text or "")


# --- theme and config -------------------------------------------------------
def test_theme_and_config():
    f = charts.fig_expected_tokens(4)
    assert f.layout.template.layout.paper_bgcolor == "white"
    assert f.layout.template.layout.font.size >= 14
    assert charts.PLOTLY_CONFIG["toImageButtonOptions"]["format"] == "png"
    assert charts.PLOTLY_CONFIG["toImageButtonOptions"]["scale"] == 2
    assert charts.plotly_config("pq")["toImageButtonOptions"]["filename"] == "pq"
    # legend sits above the plot area, not over the data
    assert f.layout.template.layout.legend.y >= 1


# --- fig_pq ---------------------------------------------------------------
def test_fig_pq_bar_heights_match_round():
    r = france_round()
    f = charts.fig_pq(r, 3, decode)
    p, q = trace(f, "target p"), trace(f, "draft q")
    lab = {x: i for x, i in zip(p.x, p.customdata)}
    pm = dict(zip(r.p_top[3].ids, r.p_top[3].probs))
    qm = dict(zip(r.q_top[3].ids, r.q_top[3].probs))
    for x, y in zip(p.x, p.y):
        assert y == pytest.approx(pm.get(lab[x], 0.0))
    for x, y in zip(q.x, q.y):
        assert y == pytest.approx(qm.get(lab[x], 0.0))
    assert set(p.customdata) == set(pm) | set(qm)
    assert "0.50" in f.layout.title.text  # overlap of position 4
    assert "rejected" in f.layout.title.subtitle.text
    assert explain.ACCEPT_TEST in f.layout.title.subtitle.text


def test_fig_pq_marks_drafted_token():
    r = france_round()
    f = charts.fig_pq(r, 3, decode)
    p = trace(f, "target p")
    drafted_label = p.x[list(p.customdata).index(4)]
    assert drafted_label == "␣city"
    notes = [a for a in f.layout.annotations if "drafted" in a.text]
    assert len(notes) == 1 and notes[0].x == drafted_label
    shapes = dict(zip(p.x, p.marker.pattern.shape))
    assert shapes[drafted_label] == "/" and all(s == "" for x, s in shapes.items() if x != drafted_label)


def test_fig_pq_greedy_and_unjudged():
    g = charts.fig_pq(france_round(greedy=True), 0, decode)
    assert "target argmax" in g.layout.title.subtitle.text and "accepted" in g.layout.title.subtitle.text
    # greedy decides by the argmax, for certain: the title says whether it matched, and offers no chance
    greedy = france_round(greedy=True)
    for i, ok in enumerate(greedy.accepted):
        head = charts.fig_pq(greedy, i, decode).layout.title.text
        assert "chance" not in head and ("matches the target's argmax" in head) == ok, head
        assert ("does not match" in head) == (not ok), head
    r = sim_run(seed=3, n_rounds=20).rounds
    late = next(x for x in r if x.n_accepted == 0)
    f = charts.fig_pq(late, late.k - 1, decode)
    assert "not judged" in f.layout.title.subtitle.text
    with pytest.raises(ValueError):
        charts.fig_pq(france_round(), 4, decode)


# --- fig_residual -----------------------------------------------------------
def test_fig_residual_marks_correction():
    r = france_round()
    f = charts.fig_residual(r, decode)
    res = trace(f, "residual norm(max(0, p − q))")
    got = dict(zip(res.customdata, res.y))
    assert got[5] == pytest.approx(0.7) and got[3] == pytest.approx(0.3)
    notes = {a.text: a.x for a in f.layout.annotations}
    assert notes["◆ correction"] == "␣major"
    assert notes["✗ rejected draft"] == "␣city"


@pytest.mark.parametrize("height", [None, 400])  # the theme's height, and the main page's shorter charts
@pytest.mark.parametrize("presenter", [False, True])  # presenter mode: every size in pixels grown alike
def test_marks_above_bars_stay_under_the_legend_band(height, presenter):
    # At T = 0.7 on code a drafted token has p = q = 1: the main page drew its "▼ drafted" over the legend.
    s = charts.PRESENTER_SCALE if presenter else 1.0

    def room_px(fig, y):  # pixels from y to the plot's top edge, on the smallest plot area the figure can get:
        top = fig.layout.yaxis.range[1]  # its height less the title's room and 130 px of slanted token labels
        return round((top - y) / top * (fig.layout.height - fig.layout.margin.t - 130 * s), 6)

    def drawn(fig):
        return charts.for_presenter(fig) if presenter else fig

    pq = drawn(charts.fig_pq(france_round(), 1, decode, height=height))  # the drafted bar is the tallest: q = 1
    assert room_px(pq, 1.0) >= (24 + 20) * s  # the arrow and a line of text
    res = drawn(charts.fig_residual(france_round(), decode, height=height))
    assert room_px(res, 0.8) >= (24 + 20) * s and room_px(res, 0.7) >= (48 + 20) * s  # rejected; correction above


def test_fig_residual_without_rejection_is_informative():
    r = next(x for x in sim_run(seed=1, agree=0.9).rounds if not x.rejected)
    f = charts.fig_residual(r, decode)
    assert f.layout.meta["empty"] and "No rejection" in f.layout.annotations[0].text
    assert len(f.data) == 0


# --- fig_expected_tokens --------------------------------------------------
def test_expected_tokens_curve_and_measured_point():
    f = charts.fig_expected_tokens(4, measured={"alpha": 0.74, "tpp": 2.9, "tpp_err": 0.15})
    c = trace(f, "k = 4 (formula)")
    assert np.interp(0.8, c.x, c.y) == pytest.approx(3.36, abs=1e-2)
    assert np.interp(0.5, c.x, c.y) == pytest.approx(1.94, abs=1e-2)
    assert max(c.x) < 1.0 and min(c.x) == 0.0
    m = trace(f, "measured (this run)")
    assert m.x[0] == 0.74 and m.y[0] == 2.9 and m.error_y.array[0] == 0.15
    seeds = trace(f, "k = 4 at α = 0.5, 0.7, 0.8, 0.9")
    assert list(seeds.text) == ["1.94", "2.77", "3.36", "4.10"]
    assert {"k = 1", "k = 2", "k = 8"} <= {t.name for t in f.data}
    # the main page draws it in half the page: the subtitle comes in short lines (plotly cuts a long one off)
    lines = f.layout.title.subtitle.text.split("<br>")
    assert all(len(line) <= charts.HALF_WIDTH for line in lines) and lines[1] == "measured: α = 0.74 → 2.90 ± 0.15"
    assert lines[2] == f"formula: {expected_tokens(0.74, 4):.2f}"
    # tuple form
    f2 = charts.fig_expected_tokens(3, measured=(0.6, 2.0, 0.1))
    assert trace(f2, "measured (this run)").y[0] == 2.0


def test_expected_tokens_names_curves_that_leave_together_once_in_a_margin_that_holds_the_name():
    """At k = 16 the y axis reaches 17.5, and the k = 1 and k = 2 curves leave the plot 1 apart: one name,
    "k = 1, 2" (not "k = 1 (+1)", which the 60-pixel margin cut in the PNG), and a margin as wide as it
    (tests/test_chart_export.py draws it)."""
    f = charts.fig_expected_tokens(16)
    names = [a.text for a in f.layout.annotations]
    assert names == ["k = 1, 2", "k = 8"]
    assert f.layout.margin.r >= 4 + charts.OTHER_K_CHAR_PX * len("k = 1, 2")
    assert [a.text for a in charts.fig_expected_tokens(4).layout.annotations] == ["k = 1", "k = 2", "k = 8"]


def test_expected_tokens_puts_a_run_of_varying_k_on_the_formula_over_its_rounds():
    ks = [11, 10, 27]
    f = charts.fig_expected_tokens(4, measured={"alpha": 0.96, "tpp": 16.0, "tpp_err": 3.0}, run_ks=ks)
    dashed = trace(f, "this run's k (formula)")
    assert dashed.line.dash == "dash"
    assert dashed.y == pytest.approx(np.mean([theory.expected_tokens(dashed.x, k) for k in ks], axis=0))
    assert trace(f, "k = 4 (formula)").y[-1] == pytest.approx(theory.expected_tokens(0.99, 4))  # the sidebar's k
    m = trace(f, "measured (this run)")
    assert m.x[0] == 0.96 and m.y[0] == 16.0
    assert f.layout.yaxis.range[1] >= 16.0 + 3.0  # the point and its error bar fit
    formula = theory.expected_tokens_over(0.96, ks)
    assert f"formula at this run's k: {formula:.2f}" in f.layout.title.subtitle.text.split("<br>")
    # not "k = 4" alone; in half the page the brackets go whole to the second line
    assert f.layout.title.text == "Tokens per pass vs α (k = 4; this run 10–27)"
    half = charts.fig_expected_tokens(4, measured={"alpha": 0.96, "tpp": 16.0}, run_ks=ks, width=charts.HALF_WIDTH)
    assert half.layout.title.text == "Tokens per pass vs α<br>(k = 4; this run 10–27)"
    # without run_ks, no dashed curve and the point is read against the sidebar's k
    g = charts.fig_expected_tokens(4, measured={"alpha": 0.96, "tpp": 16.0, "tpp_err": 3.0})
    assert g.layout.title.text.startswith("Tokens per pass vs α (k = 4)")
    assert "this run's k (formula)" not in {t.name for t in g.data}
    assert f"formula: {theory.expected_tokens(0.96, 4):.2f}" in g.layout.title.subtitle.text.split("<br>")


def test_measured_point_from_run():
    run = sim_run(seed=2)
    m = charts.measured_point(run)
    assert m["alpha"] == pytest.approx(run.alpha)
    assert m["tpp"] == pytest.approx(len(run.token_ids) / len(run.rounds))
    assert m["k"] == 4


# --- traces over a run --------------------------------------------------------
def test_alpha_trace_running_values():
    run = sim_run(seed=4)
    f = charts.fig_alpha_trace(run)
    a = trace(f, "running α (accepted / judged)")
    rate = trace(f, "running accepted / drafted")
    tpp = trace(f, "running tokens per pass")
    assert a.y[-1] == pytest.approx(run.alpha)
    assert rate.y[-1] == pytest.approx(run.acceptance_rate)
    assert tpp.y[-1] == pytest.approx(run.tokens_per_pass)
    r0 = run.rounds[0]
    assert a.y[0] == pytest.approx(r0.n_accepted / len(r0.accepted))
    assert all(x <= y + 1e-12 for x, y in zip(rate.y, a.y))  # accepted/drafted <= alpha


def test_k_trace():
    ks = [2, 3, 4, 5, 4, 3, 4, 5, 6, 6]
    run = sim_run(seed=5, ks=ks)
    f = charts.fig_k_trace(run)
    assert list(trace(f, "k (drafted this round)").y) == ks
    assert list(trace(f, "accepted this round").y) == [r.n_accepted for r in run.rounds]
    # the subtitle explains the run's own k policy, not always the adaptive rule
    sub = {}
    for policy in ("adaptive", "best", "fixed"):
        run.settings["k_policy"] = policy
        sub[policy] = charts.fig_k_trace(run, charts.HALF_WIDTH).layout.title.subtitle.text
    # drawn in half the page, where plotly cuts off a long line instead of wrapping it
    assert all(len(line) <= charts.HALF_WIDTH for text in sub.values() for line in text.split("<br>"))
    assert all(len(line) > charts.HALF_WIDTH for line in charts.fig_k_trace(run).layout.title.subtitle.text.split(
        "<br>")[:-1])  # across the page (the default), lines as long as the page has room for
    sub = {p: text.replace("<br>", " ") for p, text in sub.items()}
    assert "grows after full acceptance" in sub["adaptive"]
    assert "best-k chooser" in sub["best"] and "doubtful" in sub["best"]
    assert "grows" not in sub["fixed"] and "chooser" not in sub["fixed"]


# --- speedup model ---------------------------------------------------------------
def test_a_subtitle_wraps_at_spaces_and_never_starts_a_line_with_its_separator():
    # the rules chart's subtitle, which broke right before its second "·"
    text = ("first token, T = 1, 2000 seeded trials per rule · filled: exact, hollow: sampled · grey band: "
            "sampling noise")
    lines = charts._wrap(text).split("<br>")
    assert " ".join(lines) == text and all(len(line) <= charts.SUBTITLE_WIDTH for line in lines)
    assert not any(line.startswith("·") for line in lines)
    # the speedup model's subtitle, which left "→ 2.47×" alone on a line: the best k has a line of its own
    assert charts.fig_speedup_model(0.8, 0.1).layout.title.subtitle.text.split("<br>")[-1] == "best k = 6 → 2.47×"
    assert charts._wrap("a<br>b c", 3) == "a<br>b c" and charts._wrap("", 10) == ""
    # a p-vs-q chart's title in a narrow column broke "Σ min(p," from "q)"
    title = "Round 2, draft #2 ‘␣located’: chance to accept = Σ min(p, q) = 0.62"
    assert charts._wrap(title, 58).split("<br>") == ["Round 2, draft #2 ‘␣located’: chance to accept =",
                                                     "Σ min(p, q) = 0.62"]


def test_a_long_title_wraps_and_is_not_lifted_out_of_the_chart():
    # plotly cut the acceptance trace's title off at the chart's right edge in a 640-pixel chart
    text = "Acceptance over the run: α = 0.87, accepted/drafted = 41/47, 3.42 tokens/pass"
    half = charts.set_title(go.Figure(), text, "one line", width=charts.HALF_WIDTH).layout
    head = half.title.text.split("<br>")
    assert " ".join(head) == text and len(head) == 3
    assert all(len(line) <= charts.HALF_WIDTH * charts.SUBTITLE_PX // charts.TITLE_PX for line in head)
    assert half.margin.t == charts.TOP_MARGIN + 2 * charts.TITLE_LINE_PX
    # and the figure grows as much, so the plot keeps its height: a p-vs-q chart with a two-line title and
    # subtitle left its "▼ drafted" mark no room below the legend
    assert half.height == charts.PLOT_HEIGHT + 2 * charts.TITLE_LINE_PX
    # plotly.js lifts a title of several lines above the chart's top edge; the pad brings it back
    assert half.title.pad.t == charts.TITLE_LIFT_PX
    one = charts.set_title(go.Figure(), "Short title", "one line").layout
    assert one.title.text == "Short title" and one.title.pad.t == 0 and one.margin.t == charts.TOP_MARGIN
    assert one.height == charts.PLOT_HEIGHT


def test_subplot_titles_fit_their_share_of_the_chart():
    # the offline pairs' four panels: "c (draft step / target step)" ran into its neighbours at 1024 px
    titles = ["α (drafts accepted)", "c (draft step / target step)", "tokens per target pass", "speedup (×)"]
    fig = charts.subplot_row(titles)
    got = [a.text for a in fig.layout.annotations]
    assert [t.replace("<br>", " ") for t in got] == titles
    assert all(len(line) <= charts.SUBTITLE_WIDTH // 4 for t in got for line in t.split("<br>"))
    assert all(a.font.size == charts.SUBTITLE_PX for a in fig.layout.annotations)


def test_labels_that_would_print_over_each_other_are_left_to_the_hover():
    xs, ys = [0.45, 0.452, 0.455, 0.10, 0.45], [0.91, 0.92, 0.90, 0.91, 0.50]
    texts = ["a", "b", "c", "d", "e"]
    # b and c sit on a: only a keeps its label, and says it stands for two more; d is far left and e far
    # below, so they keep theirs
    assert charts.uncrowded_labels(xs, ys, texts, 0.6, 1.05) == ["a (+2)", "", "", "d", "e"]
    assert charts.uncrowded_labels(xs, ys, ["", "b", "c", "d", "e"], 0.6, 1.05) == ["", "b (+1)", "", "d", "e"]
    assert charts.uncrowded_labels(xs[:3], ys[:3], texts[:3], 0.6, 1.05, room=(0.001, 0.001)) == texts[:3]


def test_round_axes_tick_whole_rounds():
    """A short run's round axis has no tick at 1.5 or 2.5; a long one keeps plotly's spacing, in whole rounds."""
    for n, whole in ((3, True), (40, False)):
        run = sim_run(seed=6, ks=[4] * n)
        for f in (charts.fig_alpha_trace(run), charts.fig_k_trace(run)):
            for axis in (a for name, a in f.layout.to_plotly_json().items() if name.startswith("xaxis")):
                if whole:
                    assert (axis.get("tick0"), axis.get("dtick")) == (1, 1)
                else:
                    assert axis.get("dtick") is None and axis.get("tickformat") == "d"


def test_speedup_model_best_k_and_measured():
    f = charts.fig_speedup_model(0.8, 0.1, k_max=12, measured={3: 1.9, 5: (2.1, 0.1)})
    pred = trace(f, "predicted speedup")
    assert list(pred.x) == list(range(1, 13))
    assert pred.y[3] == pytest.approx(expected_speedup(0.8, 4, 0.1))
    best = [t for t in f.data if t.name.startswith("best k")][0]
    assert best.y[0] == pytest.approx(max(pred.y)) and best.x[0] == list(pred.x)[int(np.argmax(pred.y))]
    m = trace(f, "measured speedup")
    assert list(m.x) == [3, 5] and list(m.y) == [1.9, 2.1]


def test_bench_speedup_averages_repeats():
    rows = [{"k": 2, "measured": 1.5, "predicted": 1.6}, {"k": 2, "measured": 1.7, "predicted": 1.6},
            {"k": 4, "measured": 2.0, "predicted": 2.2}]
    f = charts.fig_bench_speedup(rows)
    assert list(trace(f, "measured").y) == pytest.approx([1.6, 2.0])
    assert list(trace(f, "predicted").y) == pytest.approx([1.6, 2.2])
    assert "best measured k = 4" in f.layout.title.subtitle.text


# --- forward cost ------------------------------------------------------------------
def test_forward_cost_ratios_and_references():
    t = {1: [0.010, 0.011, 0.009], 2: [0.0105], 4: [0.011], 8: [0.013], 16: [0.020]}
    f = charts.fig_forward_cost(t)
    m = trace(f, "measured (median, IQR bars)")
    assert list(m.y) == pytest.approx([10.0, 10.5, 11.0, 13.0, 20.0])
    flat = trace(f, "flat = memory-bound")
    assert list(flat.y) == pytest.approx([10.0] * 5)
    prop = trace(f, "∝ tokens (compute-bound)")
    assert prop.y[-1] == pytest.approx(160.0)
    assert "16→2.00×" in f.layout.title.subtitle.text
    assert f.layout.meta["ratios"][16] == pytest.approx(2.0)


def test_forward_cost_ratios_stand_above_their_iqr_bars():
    t = {1: [0.010, 0.010, 0.011], 8: [0.009, 0.012, 0.016, 0.020], 16: [0.020, 0.021]}
    f = charts.fig_forward_cost(t)
    labels = trace(f, "cost(n) ÷ cost(1)")
    m = trace(f, "measured (median, IQR bars)")
    upper = [y + e for y, e in zip(m.y, m.error_y.array)]  # the top of each point's IQR bar
    assert list(labels.x) == [8, 16] and list(labels.text) == ["×1.40", "×2.05"]
    assert list(labels.y) == pytest.approx(upper[1:]) and labels.textposition == "top center"
    assert f.layout.yaxis.range[1] > max(upper)


def test_batch_cost_finds_flat_end():
    t = {}
    for b in (1, 4, 16):
        for n in (1, 4, 16):
            tot = n * b
            t[(n, b)] = 0.01 * max(1.0, tot / 32)  # flat until 32 tokens, then linear
    f = charts.fig_batch_cost(t)
    assert f.layout.meta["flat_until"] == 16  # 64 tokens costs 2x: not flat
    assert {d.name for d in f.data} == {"batch 1", "batch 4", "batch 16"}
    b4 = trace(f, "batch 4")
    assert list(b4.x) == [4, 16, 64]


# --- acceptance ---------------------------------------------------------------------
def test_accept_by_position_counts():
    run = sim_run(seed=6, n_rounds=40)
    f = charts.fig_accept_by_position({"sim": run})
    t = trace(f, "sim")
    for i, y in zip(t.x, t.y):
        judged = [r for r in run.rounds if len(r.accepted) >= i]
        assert y == pytest.approx(sum(r.accepted[i - 1] for r in judged) / len(judged))
    f2 = charts.fig_accept_by_position([sim_run(seed=1, label="list"), sim_run(seed=2)])
    assert [d.name for d in f2.data] == ["list", "run 2"]


def test_accept_lengths_vs_geometric():
    run = sim_run(seed=7, n_rounds=50, ks=[4] * 45 + [2] * 5)
    f = charts.fig_accept_lengths(run)
    assert f.layout.meta["k"] == 4
    obs = [t for t in f.data if t.name.startswith("observed")][0]
    used = [r for r in run.rounds if r.k == 4]
    want = np.bincount([r.n_accepted for r in used], minlength=5) / len(used)
    assert list(obs.y) == pytest.approx(list(want))
    pred = [t for t in f.data if t.name.startswith("predicted")][0]
    a = f.layout.meta["alpha"]
    assert pred.y[0] == pytest.approx(1 - a) and pred.y[4] == pytest.approx(a**4)
    assert sum(pred.y) == pytest.approx(1.0)


def test_entropy_acceptance_markers():
    r = france_round()
    run = Run(mode="speculative", prompt_ids=[0], token_ids=r.emitted, rounds=[r], settings={},
              stop_reason="max_new_tokens", prefill_s=0.0, decode_s=0.04, target_passes=1,
              draft_passes=4, ks=[4])
    f = charts.fig_entropy_acceptance(run, decode)
    assert list(trace(f, "accepted draft").y) == [0.8, 0.5, 0.67]
    rej, cor = trace(f, "rejected draft"), trace(f, "correction")
    assert list(rej.x) == list(cor.x) == [3] and rej.y[0] == 0.95
    assert "␣city" in rej.hovertext[0] and "␣major" in cor.hovertext[0]
    assert f.layout.meta["mean_entropy_rejected"] == pytest.approx(0.95)
    # the subtitle's means are the markers' (measure.entropy_by_verdict); a named run is named in the title
    assert f.layout.meta["mean_entropy_accepted"] == pytest.approx(statistics.fmean([0.8, 0.5, 0.67]))
    assert "accepted: 0.66 nats" in f.layout.title.subtitle.text and "(" not in f.layout.title.text
    assert "(the story alone)" in charts.fig_entropy_acceptance(run, decode, "the story alone").layout.title.text


def test_alpha_vs_temperature_lines():
    data = {"list": {0.0: 0.96, 1.0: 0.8}, "poem": {1.0: 0.5, 0.0: 0.62}}
    f = charts.fig_alpha_vs_temperature(data, counted={"poem": {0.0: 0.9}})
    poem = trace(f, "poem")
    assert list(poem.x) == [0.0, 1.0] and list(poem.y) == [0.62, 0.5]
    assert trace(f, "list").marker.symbol != poem.marker.symbol  # second cue
    assert list(trace(f, "poem (counted)").y) == [0.9] and "list (counted)" not in [t.name for t in f.data]
    assert f.layout.title.subtitle.text.replace("<br>", " ") == charts.alpha_summary(data)  # wrapped in lines


def test_alpha_subtitle_is_read_from_the_data():
    # the same domains, opposite order: the sentence follows the numbers, not an expectation
    poor_poem = {"list": {0.0: (0.96, 0.02)}, "poem": {0.0: (0.62, 0.05)}}
    good_poem = {"list": {0.0: (0.62, 0.05)}, "poem": {0.0: (0.96, 0.02)}}
    assert charts.alpha_summary(poor_poem) == ("At T = 0: highest α on list (0.96), lowest on poem (0.62); "
                                               "their 95% intervals do not overlap")
    assert "highest α on poem (0.96), lowest on list (0.62)" in charts.alpha_summary(good_poem)
    wide = {"list": {0.0: (0.90, 0.08)}, "poem": {0.0: (0.80, 0.08)}}
    assert charts.alpha_summary(wide).endswith("overlap: this measurement cannot tell them apart")
    assert charts.alpha_summary({"list": {0.7: 0.9}}) == "At T = 0.7, α = 0.90 on list: add a domain to compare."
    assert charts.alpha_summary({"a": {0.0: 0.5}, "b": {1.0: 0.4}}, 1.0).startswith("At T = 1, α = 0.40 on b")


def test_alpha_by_domain_bars_sorted_with_counted_markers():
    data = {"code": {0.0: (0.9, 0.03)}, "poem": {0.0: (0.6, 0.05)}, "list": {0.0: (0.95, 0.02), 1.0: (0.8, 0.05)}}
    f = charts.fig_alpha_by_domain(data, 0.0, counted={"poem": {0.0: 0.7}, "list": {0.0: 1.0}})
    bars = f.data[0]
    assert list(bars.x) == ["list", "code", "poem"] and list(bars.y) == [0.95, 0.9, 0.6]
    assert list(bars.error_y.array) == pytest.approx([1.96 * 0.02, 1.96 * 0.03, 1.96 * 0.05])
    assert list(trace(f, "counted α").x) == ["list", "poem"] and list(trace(f, "counted α").y) == [1.0, 0.7]
    assert bars.insidetextanchor == "start"  # each value at its bar's foot, clear of the diamond at the top
    assert f.layout.title.subtitle.text.startswith("At T = 0: highest α on list (0.95), lowest on poem (0.60)")
    assert list(charts.fig_alpha_by_domain(data, 1.0).data[0].x) == ["list"]
    assert charts.fig_alpha_by_domain(data, 0.3).layout.meta["empty"]


# --- exactness ---------------------------------------------------------------------
def test_total_variation_hand_computed():
    p = {0: 0.5, 1: 0.3, 2: 0.2}
    counts = {0: 40, 1: 40, 2: 10, 3: 10}  # f = .4 .4 .1 .1
    # 1/2 (|.5-.4| + |.3-.4| + |.2-.1| + |0-.1|) = 0.2
    assert charts.total_variation(p, counts) == pytest.approx(0.2)
    assert charts.total_variation(p, {0: 5, 1: 3, 2: 2}) == pytest.approx(0.0)


def test_fig_exactness():
    p = {0: 0.5, 1: 0.3, 2: 0.2}
    counts = {0: 40, 1: 40, 2: 10, 3: 10}
    f = charts.fig_exactness(counts, p, decode)
    assert "0.200" in f.layout.title.text
    tp, ob = trace(f, "target p"), trace(f, "observed (100 samples)")
    assert dict(zip(tp.x, tp.y))["The"] == 0.5
    assert dict(zip(ob.x, ob.y))["␣a"] == pytest.approx(0.1)
    assert f.layout.meta["n"] == 100 and 0 < f.layout.meta["noise_tv"] < 0.2
    # p listing its top tokens only: the page passes the whole distribution's noise, and the subtitle says it
    g = charts.fig_exactness(counts, {0: 0.5}, decode, noise=0.083)
    assert g.layout.meta["noise_tv"] == 0.083 and "TV ≈ 0.083" in g.layout.title.subtitle.text


# --- race ----------------------------------------------------------------------
def test_race_speedup_in_title():
    spec = [(0.1, 4), (0.2, 8), (0.3, 12)]
    base = [(0.1 * i, i) for i in range(1, 13)]
    f = charts.fig_race(spec, base)
    assert "4.00×" in f.layout.title.text  # 12 tokens: 1.2 s vs 0.3 s
    s = [t for t in f.data if t.name and t.name.startswith("speculative")][0]
    assert s.x[0] == 0 and s.y[-1] == 12 and s.line.shape == "hv"


# --- presenter mode ---------------------------------------------------------------
def test_for_presenter_grows_every_size_in_pixels_alike_and_leaves_the_figure_alone():
    run = sim_run(seed=8)
    s = charts.PRESENTER_SCALE
    figs = [charts.fig_pq(run.rounds[0], 0, decode, height=400), charts.fig_speedup_model(0.7, 0.2),
            charts.fig_k_trace(run), charts.fig_alpha_trace(run)]
    t = pio.templates[charts.TEMPLATE].layout
    for f in figs:
        before = json.loads(f.to_json())
        g = charts.for_presenter(f)
        assert json.loads(f.to_json()) == before  # a copy: the figure a page keeps is not grown twice
        assert g.layout.height == pytest.approx(f.layout.height * s)
        for side in "tblr":
            assert g.layout.margin[side] == pytest.approx((f.layout.margin[side] or t.margin[side]) * s)
        assert g.layout.title.font.size == pytest.approx(charts.TITLE_PX * s)
        assert g.layout.title.subtitle.font.size == pytest.approx(charts.SUBTITLE_PX * s)
        assert g.layout.xaxis.tickfont.size == pytest.approx(t.xaxis.tickfont.size * s)
        assert g.layout.yaxis.title.font.size == pytest.approx(t.yaxis.title.font.size * s)
        assert g.layout.legend.font.size == pytest.approx(t.legend.font.size * s)
        for a, b in zip(f.layout.annotations, g.layout.annotations):  # the marks above the bars, and notes
            assert b.font.size == (None if a.font.size is None else pytest.approx(a.font.size * s))
            assert b.ay == (None if a.ay is None else pytest.approx(a.ay * s))
        for a, b in zip(f.data, g.data):
            if "marker" in a and "size" in a.marker and isinstance(a.marker.size, (int, float)):
                assert b.marker.size == pytest.approx(a.marker.size * s)


# --- every figure: a Figure in the theme; empty inputs don't crash ---------------
def test_all_figures_use_theme_and_handle_empty():
    run = sim_run(seed=8)
    empty = Run(mode="speculative", prompt_ids=[0], token_ids=[], rounds=[], settings={},
                stop_reason="eos", prefill_s=0, decode_s=0, target_passes=0, draft_passes=0)
    figs = [
        charts.fig_pq(run.rounds[0], 0, decode), charts.fig_residual(run.rounds[0], decode),
        charts.fig_expected_tokens(4), charts.fig_alpha_trace(run), charts.fig_speedup_model(0.7, 0.2),
        charts.fig_forward_cost({1: [0.01], 2: [0.02]}), charts.fig_batch_cost({(1, 1): 0.01}),
        charts.fig_accept_by_position(run), charts.fig_accept_lengths([run, run]),
        charts.fig_entropy_acceptance(run, decode), charts.fig_alpha_vs_temperature({"a": {0.0: 0.5}}),
        charts.fig_k_trace(run), charts.fig_exactness({1: 3}, {1: 1.0}, decode),
        charts.fig_race([(1, 2)], [(1, 1)]), charts.fig_bench_speedup([{"k": 1, "measured": 1, "predicted": 1}]),
        charts.fig_alpha_trace(empty), charts.fig_k_trace(empty), charts.fig_accept_lengths(empty),
        charts.fig_entropy_acceptance(empty), charts.fig_forward_cost({}), charts.fig_batch_cost({}),
        charts.fig_race([], []), charts.fig_bench_speedup([]), charts.fig_alpha_vs_temperature({}),
        charts.fig_exactness({}, {1: 1.0}), charts.fig_accept_by_position(empty),
    ]
    for f in figs:
        assert isinstance(f, go.Figure)
        assert f.layout.template.layout.font.family.startswith("Arial")
        assert f.layout.title.text
        # plotly cuts off a title or subtitle line wider than the chart: every one comes in lines a projector
        # shows, the title's shorter in characters as its type is larger
        lines = (f.layout.title.subtitle.text or "").split("<br>")
        head = f.layout.title.text.split("<br>")
        assert all(len(line) <= charts.SUBTITLE_WIDTH for line in lines)
        assert all(len(line) <= charts.SUBTITLE_WIDTH * charts.SUBTITLE_PX // charts.TITLE_PX for line in head)
        # and each line past the first pushes the plot down, so the legend's band above it does not cover them
        assert f.layout.margin.t == (charts.TOP_MARGIN + charts.LINE_PX * (len(lines) - 1)
                                     + charts.TITLE_LINE_PX * (len(head) - 1))
        f.to_json()  # serialisable: valid property values throughout


def test_labels_make_whitespace_visible_and_unique():
    dec = {1: " a", 2: "\n", 3: " a"}.__getitem__
    assert charts.token_labels([1, 2, 3], dec) == ["␣a #1", "⏎", "␣a #3"]
    assert charts.token_labels([4], {4: " " * 12}.__getitem__) == ["␣×12"]  # not cut to '␣␣␣␣␣␣␣␣␣␣␣␣␣…'
    assert not math.isnan(expected_tokens(0.3, 2))


def test_json_style_keys_and_nan_measurements():
    # timings / measured speedups reloaded from JSON have str keys
    f = charts.fig_forward_cost({"1": [0.01], "2": [0.02]})
    assert list(trace(f, "measured (median, IQR bars)").x) == [1, 2]
    g = charts.fig_speedup_model(0.7, 0.1, measured={"4": 1.8, "10": 1.5})
    assert list(trace(g, "measured speedup").x) == [4, 10]
    # an autoregressive-only run has no α: no crash, no fake point
    h = charts.fig_expected_tokens(4, measured={"alpha": float("nan"), "tpp": 1.0, "tpp_err": 0.0})
    assert "no measured point" in h.layout.title.subtitle.text
    assert all(t.name != "measured (this run)" for t in h.data)


def test_autoregressive_run_figures():
    rng = np.random.default_rng(9)
    rounds = [sim_round(rng, i, 0) for i in range(6)]  # k=0: one target token per pass
    run = Run(mode="autoregressive", prompt_ids=[0], token_ids=[r.emitted[0] for r in rounds], rounds=rounds,
              settings={}, stop_reason="max_new_tokens", prefill_s=0, decode_s=0.1, target_passes=6,
              draft_passes=0, ks=[0] * 6)
    assert all(r.extra_kind == "bonus" and len(r.emitted) == 1 for r in rounds)
    f = charts.fig_alpha_trace(run)
    assert "α = –" in f.layout.title.text
    assert list(trace(f, "running tokens per pass").y) == [1.0] * 6
    assert charts.fig_accept_by_position(run).layout.meta["empty"]
    assert charts.fig_accept_lengths(run).layout.meta["empty"]
    e = charts.fig_entropy_acceptance(run, decode)
    assert len(trace(e, "target token (no draft)").x) == 6
    charts.fig_expected_tokens(4, measured=charts.measured_point(run)).to_json()


# --- token text is shown literally, never as plotly HTML -------------------------
EVIL = "<a href='x'>y</a>"


def test_token_text_is_html_escaped_in_every_figure():
    import json

    from specviz.teaching import lab

    # every token, and a run's label (both can come from an uploaded file), is a link
    evil = lambda i: f"{EVIL}{i}"  # noqa: E731 (distinct texts: no '#id' suffixes needed)
    run = sim_run(seed=3, label=EVIL)
    fp = lab.FirstPosition(p={1: 0.6, 2: 0.4}, q={1: 0.3, 2: 0.7}, residual={1: 1.0, 2: 0.0}, overlap=0.7,
                           temperature=1.0)
    figs = {
        "pq": charts.fig_pq(france_round(), 3, evil), "pq greedy": charts.fig_pq(france_round(True), 3, evil),
        "residual": charts.fig_residual(france_round(), evil), "entropy": charts.fig_entropy_acceptance(run, evil),
        "exactness": charts.fig_exactness({1: 3, 2: 1}, {1: 0.7, 2: 0.3}, evil),
        "first position": charts.fig_first_position(fp, evil),
        "by position": charts.fig_accept_by_position([run, sim_run(seed=4)]),
        "by position (named)": charts.fig_accept_by_position({EVIL: run}),
    }
    for name, fig in figs.items():
        # titles, labels, hover texts, annotations, names: re-dumped so '<' is literal, not \u003c
        text = json.dumps(json.loads(fig.to_json()), ensure_ascii=False)
        for tag in ("<a", "</a>"):
            assert tag not in text, f"{name}: token text reaches plotly as HTML: ...{text[text.index(tag) - 60:][:120]}"
        assert "&lt;a" in text, f"{name}: the token is not shown at all"
    # the full escaped text where nothing is cut: the pq title and subtitle
    assert "‘&lt;a␣href='x'&gt;y&lt;/a&gt;4’" in title(figs["pq"])


def test_alpha_by_domain_names_the_same_lowest_domain_as_its_last_bar_when_two_tie():
    data = {"code": {0.0: 0.9}, "factual": {0.0: 0.6}, "creative": {0.0: 0.6}}
    fig = charts.fig_alpha_by_domain(data, 0.0)
    last = fig.data[0].x[-1]
    assert f"lowest on {last} (0.60)" in fig.layout.title.subtitle.text
