"""Plotly figures for every claim specviz shows: pure functions of plain data.

Each `fig_*` takes numbers, dicts, Rounds or Runs (never models) and returns a
plotly Figure in the one light theme `specviz_light` (white, fonts >= 14,
Okabe-Ito colours, legend above the plot so it never covers data). Show them
with `config=PLOTLY_CONFIG` to get a "download as PNG" button (2x scale).
No streamlit here: the app is a thin layer on top.
"""

from __future__ import annotations

import html
import math
import re
import statistics
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots
from typing import TYPE_CHECKING

from specviz.core import measure
from specviz.core.errors import InvalidSetting
from specviz.teaching.explain import ACCEPT_TEST, num, target_alone
from specviz.teaching.explain import tok as _quoted
from specviz.data.records import Round, Run, TopK
from specviz.teaching.render import OKABE_ITO, STATE_COLORS, visible
if TYPE_CHECKING:  # the labs' results, drawn here; they import charts
    from specviz.teaching.early_exit import EarlyExitSweep
    from specviz.teaching.lab import FirstPosition
    from specviz.teaching.rules import RuleLab
    from specviz.teaching.sidebyside import PairResult
from specviz.core.theory import (
    Estimate,
    best_k,
    expected_speedup,
    expected_tokens,
    expected_tokens_over,
    accepted_length_pmf,
    expected_tv_noise,
    flat_until,
    tokens_per_pass_ci,
    total_variation,
)

SPEEDUP_AXIS = f"speedup over {target_alone({})} (×)"  # every speedup axis: what 1× is (the target alone)

__all__ = [
    "PALETTE", "PLOTLY_CONFIG", "TEMPLATE", "plotly_config", "measured_point", "total_variation",
    "fig_pq", "fig_residual", "fig_expected_tokens", "fig_alpha_trace", "fig_speedup_model",
    "fig_forward_cost", "fig_batch_cost", "fig_accept_by_position", "fig_accept_lengths",
    "fig_entropy_acceptance", "alpha_summary", "fig_alpha_by_domain", "fig_alpha_vs_temperature",
    "fig_k_trace", "fig_exactness",
    "fig_race", "fig_bench_speedup", "for_presenter",
    "fig_first_position", "fig_rules", "fig_pairs",
]

# --- theme ------------------------------------------------------------------
TEMPLATE = "specviz_light"
P_COLOR = OKABE_ITO["blue"]  # target distribution p
Q_COLOR = OKABE_ITO["orange"]  # draft distribution q
R_COLOR = OKABE_ITO["bluish_green"]  # residual norm(max(0, p - q))
MEASURED_COLOR = OKABE_ITO["black"]
GREY = "#8c8c8c"
PALETTE = [OKABE_ITO[c] for c in ("blue", "orange", "bluish_green", "vermillion",
                                  "reddish_purple", "sky_blue", "black", "yellow")]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "triangle-down", "cross"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
_FONT = "Arial, Helvetica, sans-serif"
PLOT_HEIGHT = 480  # a figure's height in the theme, with one line of title and one of subtitle
TOP_MARGIN = 130  # pixels above the plot: the title, one line of subtitle and the legend's band
BOTTOM_MARGIN = 70  # pixels below the plot: the x axis's ticks and title
LINE_PX = 20  # one more line of subtitle
TITLE_PX, SUBTITLE_PX = 19, 14  # font sizes
TITLE_LINE_PX = 25  # one more line of title
TITLE_PAD_PX = 12  # the title's and subtitle's room from the picture's left edge
TITLE_LIFT_PX = 13  # plotly.js draws a title of several lines this much higher than one line: cut at the top


def _axis() -> dict:
    return dict(showline=True, linecolor="#444", linewidth=1, ticks="outside", tickcolor="#444",
                gridcolor="#e8e8e8", zeroline=False, automargin=True,
                tickfont=dict(size=14), title=dict(font=dict(size=15), standoff=10))


def _make_template() -> go.layout.Template:
    t = go.layout.Template(pio.templates["plotly_white"])
    t.layout.update(
        font=dict(family=_FONT, size=15, color="#222"),
        colorway=PALETTE,
        paper_bgcolor="white",
        plot_bgcolor="white",
        height=PLOT_HEIGHT,
        margin=dict(l=75, r=30, t=TOP_MARGIN, b=BOTTOM_MARGIN),
        # the title from the picture's left edge, not the plot's: a subtitle line of SUBTITLE_WIDTH characters
        # then fits a chart 564 px wide (a 1024-pixel laptop with the sidebar open), its PNG too
        title=dict(x=0, xref="container", xanchor="left", y=0.975, yref="container", yanchor="top",
                   pad=dict(l=TITLE_PAD_PX),
                   font=dict(size=TITLE_PX, color="#111"),
                   subtitle=dict(font=dict(size=SUBTITLE_PX, color="#555"))),
        # legend in a band above the plot area: it never covers data
        legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom",
                    bgcolor="rgba(255,255,255,0.9)", font=dict(size=14), title=dict(text="")),
        hoverlabel=dict(font=dict(size=14, family=_FONT)),
        xaxis=_axis(),
        yaxis=_axis(),
        bargap=0.25,
    )
    return t


pio.templates[TEMPLATE] = _make_template()


def plotly_config(filename: str = "specviz") -> dict:
    """Config for st.plotly_chart(config=) / fig.show(config=): PNG download, 2x."""
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": filename, "scale": 2,
                                 "height": None, "width": None},
        "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"],
    }


PLOTLY_CONFIG = plotly_config()


SUBTITLE_WIDTH = 80  # characters in a line of a subtitle: a full-width chart on a 1024-pixel projector
HALF_WIDTH = 36  # in a chart drawn in half the page: about 210 px of text at 1024 pixels with the sidebar open


SHORT_PARENS = re.compile(r"\([^()<>]{1,20}\)")  # "min(p, q)": one unit, never split across two lines


def _wrap(text: str, width: int = SUBTITLE_WIDTH) -> str:
    """A subtitle broken into lines of at most `width` characters, keeping its own breaks (plotly never
    wraps a title: a line wider than the chart is cut off). A " · " separator ends a line, never starts one,
    and a short bracket such as "Σ min(p, q)" stays on one line."""
    tied = text.replace(" · ", "\u00a0· ")  # textwrap breaks at ASCII whitespace only
    tied = SHORT_PARENS.sub(lambda m: m.group(0).replace(" ", "\u00a0"), tied).replace("Σ ", "Σ\u00a0")
    return "<br>".join(line.replace("\u00a0", " ")
                       for part in tied.split("<br>") for line in (textwrap.wrap(part, width) or [""]))


def set_title(fig: go.Figure, text: str, subtitle: str = "", width: int = SUBTITLE_WIDTH) -> go.Figure:
    """Every chart's title goes through here: the subtitle in lines of at most `width` characters, the title
    in lines as wide (fewer, larger characters), and the room above the plot grown by a line for each line
    past the first, so the legend's band above the plot (which grows upward when a narrow chart wraps it)
    does not cover the subtitle, and the figure as much taller. (The pixel sizes were measured in Chromium.)"""
    head = _wrap(text, width * SUBTITLE_PX // TITLE_PX)
    sub = _wrap(subtitle, width)
    lines = head.count("<br>")
    extra = LINE_PX * sub.count("<br>") + TITLE_LINE_PX * lines
    # the figure grows by the lines it adds, so the plot keeps its height (call once per figure)
    height = fig.layout.height or fig.layout.template.layout.height or PLOT_HEIGHT
    fig.update_layout(title=dict(text=head, subtitle=dict(text=sub), pad_t=TITLE_LIFT_PX if lines else 0),
                      margin_t=TOP_MARGIN + extra, height=height + extra)
    return fig


LEGEND_ROW_PX = 22  # one row of the legend in 14 px type


def legend_rows(fig: go.Figure, rows: int) -> go.Figure:
    """Room above the plot for a legend of `rows` rows (the band holds one; more grow up into the subtitle),
    the figure as much taller so the plot keeps its height. Call after set_title."""
    extra = LEGEND_ROW_PX * (rows - 1)
    fig.update_layout(margin_t=fig.layout.margin.t + extra, height=fig.layout.height + extra)
    return fig


def subplot_row(titles: Sequence[str], width: int = SUBTITLE_WIDTH, **kw) -> go.Figure:
    """make_subplots with one row of len(titles) plots, each title in the subtitle's type and wrapped to its
    plot's share of `width` characters: at 16 px, plotly's size for them, three or four titles ran into each
    other or past the edge of a chart on a 1024-pixel screen."""
    cols = len(titles)
    fig = make_subplots(rows=1, cols=cols, subplot_titles=[_wrap(t, width // cols) for t in titles], **kw)
    fig.update_annotations(font_size=SUBTITLE_PX)  # only the titles exist yet
    return fig


PRESENTER_SCALE = 1.3  # presenter mode: its charts, and the page's type (ui.PRESENTER_ROOT_PX, 16 px × 1.3)


def for_presenter(fig: go.Figure, scale: float = PRESENTER_SCALE) -> go.Figure:
    """A copy of fig for a projector: every font, every marker, the figure's height, its margins and its
    annotations' offsets in pixels `scale` times larger. The width is the page's, and the titles' lines fit it
    still (they are wrapped for a 1024-pixel screen with the sidebar open; presenter mode collapses it). As
    everything in pixels grows alike, what was measured in pixels keeps its room: a mark above a bar
    (y_top_for_marks), a title's lines above the legend (set_title)."""
    f = go.Figure(fig)
    t = (f.layout.template or pio.templates[TEMPLATE]).layout
    big = lambda v, default: None if v is None and default is None else (default if v is None else v) * scale  # noqa: E731
    lay = f.layout
    lay.font.size = big(lay.font.size, t.font.size)
    lay.title.font.size = big(lay.title.font.size, t.title.font.size)
    lay.title.subtitle.font.size = big(lay.title.subtitle.font.size, t.title.subtitle.font.size)
    lay.title.pad.t = big(lay.title.pad.t, 0)
    lay.legend.font.size = big(lay.legend.font.size, t.legend.font.size)
    lay.hoverlabel.font.size = big(lay.hoverlabel.font.size, t.hoverlabel.font.size)
    lay.height = big(lay.height, t.height)
    for side in ("t", "b", "l", "r"):
        lay.margin[side] = big(lay.margin[side], t.margin[side])

    def axis(ax, default) -> None:
        ax.tickfont.size = big(ax.tickfont.size, default.tickfont.size)
        ax.title.font.size = big(ax.title.font.size, default.title.font.size)
        ax.title.standoff = big(ax.title.standoff, default.title.standoff)

    f.for_each_xaxis(lambda ax: axis(ax, t.xaxis))
    f.for_each_yaxis(lambda ax: axis(ax, t.yaxis))
    for a in lay.annotations:
        a.font.size = big(a.font.size, None)  # none set: it takes the layout's, grown above
        for off, ref in (("ax", a.axref), ("ay", a.ayref)):
            if a[off] is not None and ref in (None, "pixel"):
                a[off] = a[off] * scale
        a.xshift, a.yshift = big(a.xshift, None), big(a.yshift, None)
    for tr in f.data:
        if "textfont" in tr and tr.textfont.size is not None:
            tr.textfont.size = big(tr.textfont.size, None) if isinstance(tr.textfont.size, (int, float)) else [
                v * scale for v in tr.textfont.size]
        if "marker" in tr and "size" in tr.marker and isinstance(tr.marker.size, (int, float)):  # not bars
            tr.marker.size = tr.marker.size * scale
    return f


def themed_fig(text: str, subtitle: str = "", x: str = "", y: str = "", width: int = SUBTITLE_WIDTH,
         height: int | None = None) -> go.Figure:
    """A figure in the theme with its title; height: before the title's extra lines (PLOT_HEIGHT)."""
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis_title=x, yaxis_title=y, height=height)
    return set_title(fig, text, subtitle, width)


MARK_PX = 44  # a mark above a bar ("▼ drafted"): its arrow (ay) and a line of text
MARK_ARROW_PX = 24
TOKEN_AXIS_PX = 130  # below the plot of a chart with a token on each bar: the axis title and tick labels
# slanted as plotly slants them when they crowd (a 14-character token at 45°)


def y_top_for_marks(fig: go.Figure, ymax: float, marks: Sequence[tuple[float, float]]) -> float:
    """The top of the y range of a token bar chart that leaves each mark (y, pixels above y it takes) under the
    plot's top edge, where the legend's band begins. Pixels become data units on the plot area's height:
    the figure's height less the room above (set_title's) and below (TOKEN_AXIS_PX, the most it takes)."""
    plot_px = max(1.0, fig.layout.height - fig.layout.margin.t - TOKEN_AXIS_PX)
    tops = [y / (1 - px / plot_px) for y, px in marks if px < plot_px]
    return max([ymax * 1.1, 1e-9, *tops])


def uncrowded_labels(xs: Sequence[float], ys: Sequence[float], texts: Sequence[str], x_span: float,
                     y_span: float, room: tuple[float, float] = (0.14, 0.05)) -> list[str]:
    """The texts of a scatter, with "" for each point whose label would print over one already kept.

    A label sits next to its point, about `room` of the plot wide and high (fractions of x_span and y_span),
    so two labels whose points are closer than that on both axes overlap: the first keeps its label, with
    "(+n)" for the n points it stands for, and the others show theirs on hover (and in the table beside the
    chart)."""
    kept: list[tuple[float, float, int]] = []  # (u, v, index in out) of each label kept
    out, hidden = [], {}
    for x, y, t in zip(xs, ys, texts):
        u, v = x / x_span if x_span > 0 else 0.0, y / y_span if y_span > 0 else 0.0
        near = next((i for a, b, i in kept if abs(u - a) < room[0] and abs(v - b) < room[1]), None)
        if t and near is None:
            kept.append((u, v, len(out)))
        elif t:
            hidden[near] = hidden.get(near, 0) + 1
        out.append(t if t and near is None else "")
    return [f"{t} (+{hidden[i]})" if i in hidden else t for i, t in enumerate(out)]


MARKER_ROOM = 0.05  # below 0, as a fraction of the axis's span: a marker at 0 drawn whole (ticks still from 0)


def from_zero(top: float) -> list[float]:
    """An axis's range from 0 to `top` for a scatter whose markers may sit at 0: with room below 0 for their lower
    half (a range that starts at 0, as rangemode "tozero" makes it, cuts them at the axis in the PNG)."""
    top = top if math.isfinite(top) and top > 0 else 1.0
    return [-MARKER_ROOM * top, top]


FRACTION_RANGE = from_zero(1.05)  # a fraction's axis, 0 to 1 with room for a marker at either end


def _round_ticks(n: int) -> dict:
    """x-axis ticks for rounds 1..n: whole rounds only (plotly puts ticks at 1.5, 2.5 on a short range)."""
    return dict(tick0=1, dtick=1) if n <= 12 else dict(tickformat="d")


def empty_fig(title: str, message: str) -> go.Figure:
    """An informative placeholder figure (nothing to draw yet / not applicable)."""
    fig = themed_fig(title)
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font=dict(size=16, color="#555"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(meta={"empty": True})
    return fig


def plain_text(text: str) -> str:
    """Text from a tokenizer or a run file, shown literally by plotly.

    Plotly renders tags such as <a href>, <img>, <b>, <br> in every title, label and
    hover text, so a token (or a label in an uploaded run) could plant a link.
    """
    return html.escape(text, quote=False)


def token_labels(ids: Sequence[int], decode: Callable[[int], str], maxlen: int = 14, unique: bool = True) -> list[str]:
    """Whitespace-visible, HTML-escaped labels for token ids. unique: two ids that read alike get their id
    added, as a chart's categories must (unique=False: text beside points, where the same token may recur)."""
    base = []
    for i in ids:
        s = visible(decode(i), runs=True)
        # cut before escaping, so an entity such as &lt; is never cut in half
        base.append(plain_text(s if len(s) <= maxlen else s[: maxlen - 1] + "…"))
    if not unique:
        return base
    seen = Counter(base)
    return [s if seen[s] == 1 else f"{s} #{i}" for s, i in zip(base, ids)]


def token_title(tid: int, decode: Callable[[int], str]) -> str:
    """One token, quoted as the tables quote it (explain.tok), for a title or hover text."""
    return plain_text(_quoted(tid, decode))


def topk_map(t: TopK | None) -> dict[int, float]:
    return {} if t is None else dict(zip(t.ids, (float(p) for p in t.probs)))


def union_ids(*maps: Mapping[int, float], must: Iterable[int] = (), top_n: int = 12) -> list[int]:
    """Ids in any map, most probable first (by the first map, then the others)."""
    ids: list[int] = []
    for m in maps:
        ids += [i for i in m if i not in ids]
    ids.sort(key=lambda i: tuple(-m.get(i, 0.0) for m in maps))
    keep = ids[:top_n]
    for i in must:
        if i is not None and i not in keep:
            keep.append(i)
    return keep


# --- claim 7: one position, p vs q --------------------------------------------
def fig_pq(round: Round, position: int, decode: Callable[[int], str] = str,
           top_n: int = 12, height: int | None = None) -> go.Figure:
    """Target p vs draft q at one drafted position, the drafted token marked.

    The title gives the chance to accept at this position, Σ min(p, q) (greedy: whether the draft matches the
    target's argmax, which decides it for certain); the subtitle the decision: explain.ACCEPT_TEST when sampling, or "draft token ==
    target argmax?" when greedy. Tokens outside a top-N list are drawn at 0.
    """
    r = round
    if not 0 <= position < r.k:
        raise InvalidSetting(f"position must be in 0..{r.k - 1} for a round with k={r.k}")
    d = r.drafted[position]
    pm, qm = topk_map(r.p_top[position]), topk_map(r.q_top[position])
    pm.setdefault(d, float(r.p_drafted[position]))
    qm.setdefault(d, float(r.q_drafted[position]))
    ids = union_ids(pm, qm, must=[d], top_n=top_n)
    xs = token_labels(ids, decode)
    judged = position < len(r.accepted)
    ok = judged and r.accepted[position]
    verdict = "accepted ✓" if ok else "rejected ✗"

    p, q = r.p_drafted[position], r.q_drafted[position]
    if not judged:
        decision = "not judged: an earlier drafted token was rejected, so this one was discarded"
    elif r.greedy:
        a = r.target_argmax[position]
        decision = (f"greedy: draft token == target argmax?  {token_title(d, decode)} vs {token_title(a, decode)}"
                    f" → {'yes' if d == a else 'no'}, {verdict}")
    else:
        thr = min(1.0, p / q) if q > 0 else 1.0
        u = r.u[position] if position < len(r.u) else float("nan")
        decision = (f"sampling: accept iff {ACCEPT_TEST} = min(1, {p:.3f}/{q:.3f}) = {thr:.3f}"
                    f";  u = {u:.3f} → {verdict}")
    if r.greedy:  # the test is an argmax match, so there is no chance to speak of
        match = "matches" if d == r.target_argmax[position] else "does not match"
        title = f"Round {r.index + 1}, draft #{position + 1} {token_title(d, decode)} {match} the target's argmax"
    else:
        title = (f"Round {r.index + 1}, draft #{position + 1} {token_title(d, decode)}: "
                 f"chance to accept = Σ min(p, q) = {r.overlap[position]:.2f}")
    fig = themed_fig(title, decision, x="token (top candidates)", y="probability", height=height)

    pattern = ["/" if i == d else "" for i in ids]
    for name, m, col in (("target p", pm, P_COLOR), ("draft q", qm, Q_COLOR)):
        fig.add_bar(x=xs, y=[m.get(i, 0.0) for i in ids], name=name, marker_color=col,
                    marker_pattern=dict(shape=pattern, fillmode="overlay", fgcolor="#111"),
                    customdata=ids,
                    hovertemplate=f"%{{x}} (id %{{customdata}})<br>{name} = %{{y:.4f}}<extra></extra>")
    ymax = max([*pm.values(), *qm.values(), 1e-9])
    at = max(pm.get(d, 0), qm.get(d, 0))
    fig.add_annotation(x=xs[ids.index(d)], y=at, text="▼ drafted", showarrow=True, arrowhead=2, ax=0,
                       ay=-MARK_ARROW_PX, font=dict(size=15, color="#111"), name="drafted")
    fig.update_layout(barmode="group", meta={"drafted_id": d, "decision": verdict if judged else "not judged"})
    fig.update_yaxes(range=[0, y_top_for_marks(fig, ymax, [(at, MARK_PX)])])
    return fig


def fig_residual(round: Round, decode: Callable[[int], str] = str, top_n: int = 12,
                 height: int | None = None) -> go.Figure:
    """At the rejected position: p, q and the residual norm(max(0, p − q)).

    The correction token (sampled from the residual) and the rejected draft are
    marked. Returns an informative empty figure if nothing was rejected.
    """
    r = round
    title = f"Round {r.index + 1}: where the correction comes from"
    if not r.rejected:
        return empty_fig(title, "No rejection in this round: all drafted tokens were accepted,<br>"
                      "so no residual is needed (the target added a bonus token instead).")
    j = r.n_accepted
    d = r.drafted[j]
    corr = r.extra_id if r.extra_kind == "correction" else None
    pm, qm, rm = topk_map(r.p_top[j]), topk_map(r.q_top[j]), topk_map(r.residual_top)
    pm.setdefault(d, float(r.p_drafted[j]))
    qm.setdefault(d, float(r.q_drafted[j]))
    series = [("target p", pm, P_COLOR, "")]
    series.append(("draft q", qm, Q_COLOR, ""))
    if r.residual_top is not None:
        series.append(("residual norm(max(0, p − q))", rm, R_COLOR, "x"))
    ids = union_ids(rm or pm, pm, qm, must=[d, corr], top_n=top_n)
    xs = token_labels(ids, decode)
    if r.greedy or r.residual_top is None:
        sub = "greedy: the correction is the target's argmax at the rejected position"
    else:
        sub = ("the correction is sampled from norm(max(0, p − q)): "
               "the mass the target wanted more than the draft gave")
    ctext = token_title(corr, decode) if corr is not None else "(cut by EOS / length)"
    fig = themed_fig(f"Round {r.index + 1}, draft #{j + 1} {token_title(d, decode)} rejected → correction {ctext}",
               sub, x="token (top candidates)", y="probability", height=height)
    for name, m, col, pat in series:
        fig.add_bar(x=xs, y=[m.get(i, 0.0) for i in ids], name=name, marker_color=col,
                    marker_pattern=dict(shape=pat, fillmode="overlay", fgcolor="#fff"),
                    customdata=ids,
                    hovertemplate=f"%{{x}} (id %{{customdata}})<br>{name} = %{{y:.4f}}<extra></extra>")
    top = lambda i: max(m.get(i, 0.0) for _, m, _, _ in series)  # noqa: E731
    # the correction's mark above the rejected one's, where the two share a bar or stand side by side
    marks = [(top(d), MARK_PX)] + ([(top(corr), MARK_PX + MARK_ARROW_PX)] if corr is not None else [])
    fig.add_annotation(x=xs[ids.index(d)], y=top(d), text="✗ rejected draft", showarrow=True,
                       arrowhead=2, ax=0, ay=-MARK_ARROW_PX, font=dict(size=15, color=STATE_COLORS["rejected"]))
    if corr is not None:
        fig.add_annotation(x=xs[ids.index(corr)], y=top(corr), text="◆ correction", showarrow=True, arrowhead=2,
                           ax=0, ay=-2 * MARK_ARROW_PX, font=dict(size=15, color=STATE_COLORS["correction"]))
    ymax = max(top(i) for i in ids)
    fig.update_layout(barmode="group", meta={"rejected_id": d, "correction_id": corr})
    fig.update_yaxes(range=[0, y_top_for_marks(fig, ymax, marks)])
    return fig


# --- claim 8: tokens per pass --------------------------------------------------
def measured_point(run: Run) -> dict:
    """The measured (α, tokens per pass) of a run, with standard errors."""
    tpp = tokens_per_pass_ci(run)
    a = measure.alpha_estimate(run.n_accepted, run.n_judged)
    ks = run.k_per_round
    k = Counter(ks).most_common(1)[0][0] if ks else 0
    return {"alpha": a.value, "alpha_err": a.stderr, "tpp": tpp.value, "tpp_err": tpp.stderr, "k": k}


def _parse_measured(m) -> tuple[float, float, float, float]:
    if isinstance(m, Mapping):
        a = m["alpha"]
        t = m.get("tpp", m.get("tokens_per_pass"))
        te = m.get("tpp_err", m.get("stderr", 0.0))
        ae = m.get("alpha_err", 0.0)
    else:
        a, t, te, *rest = tuple(m) + (0.0,) * (3 - len(tuple(m)))
        ae = rest[0] if rest else 0.0
    f = lambda v: 0.0 if v is None or not np.isfinite(v) else float(v)  # noqa: E731
    return float(a), float(t), f(te), f(ae)


OTHER_K_PX = 60  # right of the tokens-per-pass plot: "k = 8" in 14 px type, or "k = 1, 2"
OTHER_K_CHAR_PX = 7  # a character of such a name in 14 px type (Arial's digits, spaces and commas: under 7 px)
OTHER_K_ROOM = 0.06  # the height of one such name, as a fraction of the y range (a plot about 280 px high)


def _other_k_names(others: Sequence[int], ends: Sequence[float], ytop: float) -> list[tuple[str, float]]:
    """(name, height) of the faint curves' names: curves that leave the plot closer than a name's height share one
    name at the lowest's height, "k = 1, 2" (never "k = 1 (+1)", which reads as a sum)."""
    groups: list[tuple[list[int], float]] = []
    for kk, y in sorted(zip(others, ends), key=lambda e: e[1]):
        if groups and y - groups[-1][1] < OTHER_K_ROOM * ytop:
            groups[-1][0].append(kk)
        else:
            groups.append(([kk], y))
    return [("k = " + ", ".join(map(str, sorted(ks))), y) for ks, y in groups]


def _other_k_curves(fig: go.Figure, alphas, others: Sequence[int], ytop: float) -> None:
    """The faint curves of other k, each named in the right margin at the height it leaves the plot (its right
    end, or the top): never over the data; the margin is as wide as the longest name."""
    ends = [min(float(expected_tokens(alphas[-1], kk)), ytop) for kk in others]
    for kk in others:
        fig.add_scatter(x=alphas, y=expected_tokens(alphas, kk), mode="lines", name=f"k = {kk}", showlegend=False,
                        line=dict(color=GREY, width=1.5, dash="dot"), opacity=0.8,
                        hovertemplate=f"k = {kk}<br>α = %{{x:.2f}}<br>%{{y:.2f}} tokens/pass<extra></extra>")
    names = _other_k_names(others, ends, ytop)
    for name, y_end in names:
        fig.add_annotation(x=1.0, y=y_end, xref="x", yref="y", text=name, showarrow=False, xanchor="left",
                           xshift=4, font=dict(size=14, color="#666"))
    longest = max((len(n) for n, _ in names), default=0)
    fig.update_layout(margin_r=max(OTHER_K_PX, 4 + OTHER_K_CHAR_PX * longest + 8))  # xshift, the name, slack


def fig_expected_tokens(k: int, measured=None, other_ks: Sequence[int] = (1, 2, 8),
                        run_ks: Sequence[int] = (), width: int = SUBTITLE_WIDTH) -> go.Figure:
    """E[tokens per target pass] vs α for this k (and faint curves for others).

    measured: {"alpha", "tpp", "tpp_err"[, "alpha_err"]} or a tuple
    (alpha, tpp, tpp_err[, alpha_err]): drawn with error bars on the curve.
    run_ks: the k of each round of the measured run, when it did not draft this k in every round (k set
    by a policy, or the sidebar's k changed since): the formula averaged over those rounds
    (expected_tokens_over) is drawn too, dashed, and the measured point is read against it.
    width: the title's line length (HALF_WIDTH in half the page).
    """
    alphas = np.linspace(0.0, 0.99, 199)
    sub = ["E[tokens] = (1 − α^(k+1)) / (1 − α)"]
    if measured is not None:
        a, t, te, ae = _parse_measured(measured)
        if not (np.isfinite(a) and np.isfinite(t)):
            measured = None
            sub.append("no measured point yet (no drafted tokens judged)")
    ks = [int(kr) for kr in run_ks]
    if measured is not None:
        at = min(max(a, 0), 1)
        formula = expected_tokens_over(at, ks) if ks else expected_tokens(at, k)
        sub.append(f"measured: α = {a:.2f} → {t:.2f} ± {te:.2f}<br>"
                   + (f"formula at this run's k: {formula:.2f}" if ks else f"formula: {formula:.2f}"))
    # a run whose k varied (a k policy) is drawn against its own k too, so the title names both, in brackets
    # kept on one line (no break inside "k = 4")
    span = (str(min(ks)) if min(ks) == max(ks) else f"{min(ks)}–{max(ks)}") if ks else ""
    title = "Tokens per pass vs α (" + (f"k = {k}; this run {span}" if ks else f"k = {k}").replace(" ", "\u00a0") + ")"
    fig = themed_fig(title,
               "<br>".join(sub), x="α = per-token acceptance", y="tokens per target pass", width=width)
    # the y range holds the curves, the point and its error bar up to the point's own height: a short run's
    # 2.4 ± 5.3 would squash the curves to the bottom; such a bar runs off the top, the subtitle gives its size
    ytop = k + 1.5 if measured is None else max(k + 1.5, t + min(te, abs(t)) + 0.5, formula + 0.5)
    _other_k_curves(fig, alphas, [kk for kk in other_ks if kk != k], ytop)
    fig.add_scatter(x=alphas, y=expected_tokens(alphas, k), mode="lines", name=f"k = {k} (formula)",
                    line=dict(color=P_COLOR, width=3),
                    hovertemplate=f"k = {k}<br>α = %{{x:.2f}}<br>%{{y:.2f}} tokens/pass<extra></extra>")
    seeds = np.array([0.5, 0.7, 0.8, 0.9])
    ys = expected_tokens(seeds, k)
    # the quoted values beside their points on the bare curve; with a run on it, the subtitle's numbers are the
    # ones to read and the values stay in the hover (they would sit under the point and its error bars)
    fig.add_scatter(x=seeds, y=ys, mode="markers" if measured is not None else "markers+text",
                    name=f"k = {k} at α = 0.5, 0.7, 0.8, 0.9", showlegend=False,
                    text=[f"{v:.2f}" for v in ys], textposition="top left", textfont=dict(size=14),
                    marker=dict(color=P_COLOR, size=9, symbol="circle-open", line=dict(width=2)),
                    hovertemplate="α = %{x}<br>%{y:.3f} tokens/pass<extra></extra>")
    if ks:
        yr = expected_tokens_over(alphas, ks)  # the formula over this run's rounds
        fig.add_scatter(x=alphas, y=yr, mode="lines", name="this run's k (formula)",
                        line=dict(color=MEASURED_COLOR, width=2, dash="dash"),
                        hovertemplate="formula at this run's k per round<br>α = %{x:.2f}<br>%{y:.2f} tokens/pass"
                                      "<extra></extra>")
    if measured is not None:
        fig.add_scatter(x=[a], y=[t], mode="markers", name="measured (this run)",
                        marker=dict(color=MEASURED_COLOR, size=14, symbol="diamond",
                                    line=dict(color="white", width=1.5)),
                        error_y=dict(type="data", array=[te], visible=True, thickness=2, width=6),
                        error_x=dict(type="data", array=[ae], visible=ae > 0, thickness=2, width=6),
                        hovertemplate="measured<br>α = %{x:.3f}<br>%{y:.3f} tokens/pass<extra></extra>")
    fig.update_xaxes(range=[0, 1.0], dtick=0.1)
    fig.update_yaxes(range=[0, ytop])
    return fig


def _running(run: Run) -> dict[str, np.ndarray]:
    acc = np.cumsum([r.n_accepted for r in run.rounds], dtype=float)
    judged = np.cumsum([len(r.accepted) for r in run.rounds], dtype=float)
    drafted = np.cumsum([r.k for r in run.rounds], dtype=float)
    emitted = np.cumsum([len(r.emitted) for r in run.rounds], dtype=float)
    n = np.arange(1, len(run.rounds) + 1, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"alpha": np.where(judged > 0, acc / judged, np.nan),
                "rate": np.where(drafted > 0, acc / drafted, np.nan),
                "tpp": emitted / n}


def fig_alpha_trace(run: Run) -> go.Figure:
    """Running α, running accepted/drafted and running tokens per pass over rounds."""
    if not run.rounds:
        return empty_fig("Acceptance over the run", "No rounds yet.")
    s = _running(run)
    x = np.arange(1, len(run.rounds) + 1)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.55, 0.45])
    fig.update_layout(template=TEMPLATE, height=540)
    set_title(fig, f"Acceptance over the run: α = {num(s['alpha'][-1], '.2f')}, accepted/drafted = "
              f"{num(s['rate'][-1], '.2f')}, {num(s['tpp'][-1], '.2f')} tokens/pass",
              "α counts only drafted tokens the target judged; accepted/drafted also counts those discarded after "
              "a rejection")
    fig.add_scatter(x=x, y=s["alpha"], name="running α (accepted / judged)", mode="lines",
                    line=dict(color=P_COLOR, width=3), row=1, col=1)
    fig.add_scatter(x=x, y=s["rate"], name="running accepted / drafted", mode="lines",
                    line=dict(color=Q_COLOR, width=3, dash="dash"), row=1, col=1)
    fig.add_scatter(x=x, y=s["tpp"], name="running tokens per pass", mode="lines+markers",
                    line=dict(color=R_COLOR, width=3), marker=dict(size=5, symbol="square"),
                    row=2, col=1)
    fig.update_yaxes(title_text="fraction", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="tokens / pass", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(**_round_ticks(len(run.rounds)))
    fig.update_xaxes(title_text="round", row=2, col=1)
    return fig


# --- claim 9: speedup --------------------------------------------------------
def _val_err(v) -> tuple[float, float]:
    if isinstance(v, Estimate):
        return v.value, v.stderr
    if isinstance(v, (tuple, list)):
        return float(v[0]), float(v[1]) if len(v) > 1 else 0.0
    return float(v), 0.0


def fig_speedup_model(alpha: float, c: float, k_max: int = 16, verify_cost=None,
                      measured: Mapping[int, float] | None = None) -> go.Figure:
    """Predicted speedup vs k with the best k marked; measured speedups overlaid.

    measured: {k: speedup} or {k: (speedup, stderr)}.
    """
    ks = np.arange(1, k_max + 1)
    s = expected_speedup(alpha, ks, c, verify_cost)
    kb, sb = best_k(alpha, c, verify_cost, k_max)
    vc = "measured verify cost" if verify_cost is not None else "verify = 1 target pass"
    fig = themed_fig(f"Predicted speedup vs k (α = {alpha:.2f}, c = {c:.3f})",
               f"speedup ≈ E[tokens] / (k·c + verify cost), {vc}<br>best k = {kb} → {sb:.2f}×",
               x="k = drafted tokens per round", y=SPEEDUP_AXIS)
    # the legend holds the speedups only, in one row: the dotted curve is named at its end, the best k beside
    # its star (and in the subtitle); four entries took two rows and the second ran into the subtitle
    free = expected_tokens(alpha, ks)
    fig.add_scatter(x=ks, y=free, mode="lines", name="tokens per pass (if drafting were free)", showlegend=False,
                    line=dict(color=GREY, width=2, dash="dot"),
                    hovertemplate="k = %{x}<br>%{y:.2f} tokens/pass<extra></extra>")
    fig.add_annotation(x=ks[-1], y=float(free[-1]), text="tokens per pass if drafting were free", showarrow=False,
                       xanchor="right", yanchor="bottom", yshift=4, font=dict(size=14, color="#666"))
    fig.add_scatter(x=ks, y=s, mode="lines+markers", name="predicted speedup",
                    line=dict(color=P_COLOR, width=3), marker=dict(size=7),
                    hovertemplate="k = %{x}<br>predicted %{y:.2f}×<extra></extra>")
    fig.add_scatter(x=[kb], y=[sb], mode="markers+text", name=f"best k = {kb} ({sb:.2f}×)", showlegend=False,
                    text=[f"best k = {kb}"], textposition="top center",
                    marker=dict(color=OKABE_ITO["vermillion"], size=18, symbol="star",
                                line=dict(color="white", width=1)))
    if measured:
        mk = sorted(measured, key=int)
        vals = [_val_err(measured[k]) for k in mk]
        mk = [int(k) for k in mk]
        fig.add_scatter(x=mk, y=[v for v, _ in vals], mode="markers", name="measured speedup",
                        marker=dict(color=MEASURED_COLOR, size=13, symbol="diamond"),
                        error_y=dict(type="data", array=[e for _, e in vals],
                                     visible=any(e > 0 for _, e in vals)),
                        hovertemplate="k = %{x}<br>measured %{y:.2f}×<extra></extra>")
    fig.add_hline(y=1, line=dict(color="#444", dash="dash", width=1.5),
                  annotation_text="1× = no gain", annotation_position="bottom right")
    fig.update_xaxes(dtick=1 if k_max <= 16 else 2)
    fig.update_yaxes(rangemode="tozero")
    return fig


# --- claims 1-2 and 12: forward cost ------------------------------------------
def _med_ms(v) -> tuple[float, float, float]:
    a = np.atleast_1d(np.asarray(v, dtype=float)) * 1000.0
    return float(np.median(a)), float(np.percentile(a, 25)), float(np.percentile(a, 75))


def fig_forward_cost(timings: Mapping[int, Sequence[float]]) -> go.Figure:
    """Median target forward time (ms) vs tokens in one pass, with references.

    Dashed: "flat = memory-bound" at the smallest pass's time. Dotted: time
    proportional to tokens (compute-bound). Bars: 25th-75th percentile.
    """
    timings = {int(n): v for n, v in timings.items() if len(np.atleast_1d(v))}  # JSON keys are str
    ns = sorted(timings)
    if not ns:
        return empty_fig("Target forward time vs tokens per pass", "No timings yet.")
    stats = [_med_ms(timings[n]) for n in ns]
    med = np.array([m for m, _, _ in stats])
    base, n0 = med[0], ns[0]
    ratios = med / base
    ref = "cost(1)" if n0 == 1 else f"cost({n0})"
    sub = f"cost(n)/{ref}: " + ", ".join(f"{n}→{r:.2f}×" for n, r in zip(ns[1:], ratios[1:]))
    fig = themed_fig("Target forward time vs tokens per pass", sub,
               x="tokens in one forward pass", y="forward time (ms, median)")
    fig.add_scatter(x=ns, y=[base] * len(ns), mode="lines", name="flat = memory-bound",
                    line=dict(color=GREY, dash="dash", width=2), hoverinfo="skip")
    fig.add_scatter(x=ns, y=[base * n / n0 for n in ns], mode="lines", name="∝ tokens (compute-bound)",
                    line=dict(color=OKABE_ITO["vermillion"], dash="dot", width=2), hoverinfo="skip")
    fig.add_scatter(x=ns, y=med, mode="lines+markers", name="measured (median, IQR bars)",
                    line=dict(color=P_COLOR, width=3), marker=dict(size=10),
                    error_y=dict(type="data", symmetric=False,
                                 array=[hi - m for m, _, hi in stats],
                                 arrayminus=[m - lo for m, lo, _ in stats], thickness=1.5),
                    customdata=ratios,
                    hovertemplate="%{x} tokens: %{y:.2f} ms (×%{customdata:.2f})<extra></extra>")
    # each ratio above its point's upper quartile: at the median it sat on the IQR bar
    hi = np.array([h for _, _, h in stats])
    fig.add_scatter(x=ns[1:], y=hi[1:], mode="text", name="cost(n) ÷ " + ref, showlegend=False,
                    text=[f"×{r:.2f}" for r in ratios[1:]], textposition="top center",
                    textfont=dict(color=P_COLOR), hoverinfo="skip")
    fig.update_xaxes(type="log", tickvals=ns, ticktext=[str(n) for n in ns])
    fig.update_yaxes(range=[0, max(med.max() * 1.3, hi.max() * 1.15, base * 2.3)])
    fig.update_layout(meta={"ratios": {n: float(r) for n, r in zip(ns, ratios)}})
    return fig


def fig_batch_cost(timings: Mapping[tuple[int, int], float | Sequence[float]],
                   tol: float = 1.25) -> go.Figure:
    """Verify cost vs tokens × batch: where extra tokens stop being free (claim 12).

    timings: {(n_tokens, batch): seconds or [seconds...]}. The flat part ends
    at the largest tokens × batch whose time stays within tol × the smallest.
    """
    if not timings:
        return empty_fig("Verify cost vs tokens × batch", "No timings yet.")
    pts = [(int(n), int(b), _med_ms(v)[0]) for (n, b), v in timings.items()]
    totals = [n * b for n, b, _ in pts]
    flat = flat_until(totals, [t for _, _, t in pts], tol=tol)
    fig = themed_fig("Verify cost vs tokens × batch",
               f"flat (memory-bound, within {tol:.2f}× of the smallest) up to ≈ {flat:g} tokens per pass;"
               " beyond it extra tokens cost time",
               x="tokens × batch in one target pass", y="forward time (ms, median)")
    # on a log axis shapes take data x, annotations take log10(x)
    fig.add_vrect(x0=min(totals), x1=flat, fillcolor=R_COLOR, opacity=0.10, line_width=0)
    fig.add_vline(x=flat, line=dict(color=R_COLOR, dash="dash", width=2))
    fig.add_annotation(x=np.log10(flat), y=1, yref="paper", text=f"flat part ends ≈ {flat:g} ",
                       showarrow=False, xanchor="right", yanchor="top", font=dict(size=14, color="#222"))
    for j, b in enumerate(sorted({b for _, b, _ in pts})):
        row = sorted((n * bb, t, n) for n, bb, t in pts if bb == b)
        fig.add_scatter(x=[r[0] for r in row], y=[r[1] for r in row], mode="lines+markers",
                        name=f"batch {b}", customdata=[r[2] for r in row],
                        line=dict(color=PALETTE[j % len(PALETTE)], width=2.5, dash=DASHES[j % len(DASHES)]),
                        marker=dict(size=9, symbol=SYMBOLS[j % len(SYMBOLS)]),
                        hovertemplate=f"batch {b} × %{{customdata}} tokens = %{{x}}<br>%{{y:.2f}} ms<extra></extra>")
    tv = sorted(set(totals))
    fig.update_xaxes(type="log", tickvals=tv, ticktext=[str(t) for t in tv])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(meta={"flat_until": flat})
    return fig


# --- claim 10: acceptance by position, length, entropy, temperature ----------
def _labelled_runs(runs) -> list[tuple[str, Run]]:
    if isinstance(runs, Run):
        return [(_run_label(runs, 0), runs)]
    if isinstance(runs, Mapping):
        return [(plain_text(str(k)), v) for k, v in runs.items()]
    return [(_run_label(r, j), r) for j, r in enumerate(runs)]


def _run_label(run: Run, j: int) -> str:
    s = run.settings or {}
    for key in ("label", "name", "domain", "drafter"):
        if s.get(key):
            return plain_text(str(s[key]))
    return f"run {j + 1}"


def fig_accept_by_position(runs) -> go.Figure:
    """Fraction of judged drafted tokens accepted at each draft position.

    runs: a Run, a list of Runs, or {label: Run}. Error bars: 95% Wilson.
    """
    fig = themed_fig("Acceptance by draft position",
               "accepted / judged at position i (95% Wilson interval); i is judged only if 1..i−1 were accepted",
               x="draft position in the round", y="accepted / judged")
    kmax = 0
    for j, (label, run) in enumerate(_labelled_runs(runs)):
        km = max((r.k for r in run.rounds), default=0)
        kmax = max(kmax, km)
        xs, ys, lo, hi, cd = [], [], [], [], []
        for i in range(km):
            judged = sum(1 for r in run.rounds if len(r.accepted) > i)
            acc = sum(1 for r in run.rounds if len(r.accepted) > i and r.accepted[i])
            if judged == 0:
                continue
            e = measure.alpha_estimate(acc, judged)
            xs.append(i + 1)
            ys.append(e.value)
            lo.append(e.value - e.lo)
            hi.append(e.hi - e.value)
            cd.append((acc, judged))
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=label, customdata=cd,
                        line=dict(color=PALETTE[j % len(PALETTE)], width=2.5, dash=DASHES[j % len(DASHES)]),
                        marker=dict(size=10, symbol=SYMBOLS[j % len(SYMBOLS)]),
                        error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo, thickness=1.5),
                        hovertemplate="position %{x}: %{y:.2f} (%{customdata[0]}/%{customdata[1]})<extra>"
                                      + label + "</extra>")
    if kmax == 0:
        return empty_fig("Acceptance by draft position", "No drafted tokens in these runs.")
    fig.update_xaxes(dtick=1, range=[0.5, kmax + 0.5])
    fig.update_yaxes(range=FRACTION_RANGE)
    return fig


def fig_accept_lengths(run_or_runs, alpha: float | None = None) -> go.Figure:
    """Histogram of accepted tokens per round vs the truncated geometric.

    Only rounds with the modal k are used (adaptive k or a shortened last
    round would mix different supports). alpha defaults to those rounds' α.
    """
    runs = [r for _, r in _labelled_runs(run_or_runs)]
    rounds = [r for run in runs for r in run.rounds if r.k > 0]
    title = "Accepted tokens per round"
    if not rounds:
        return empty_fig(title, "No speculative rounds (k ≥ 1) to count.")
    k = Counter(r.k for r in rounds).most_common(1)[0][0]
    used = [r for r in rounds if r.k == k]
    if alpha is None:
        alpha = measure.rounds_alpha(used)
        alpha = alpha if np.isfinite(alpha) else 0.0
    counts = np.bincount([r.n_accepted for r in used], minlength=k + 1)[: k + 1]
    obs = counts / counts.sum()
    pred = accepted_length_pmf(alpha, k)
    x = list(range(k + 1))
    fig = themed_fig(f"{title} vs truncated geometric (k = {k}, α = {alpha:.2f})",
               f"{len(used)} of {len(rounds)} rounds have k = {k}; n = k means all accepted (+ bonus)",
               x="drafted tokens accepted in the round", y="fraction of rounds")
    fig.add_bar(x=x, y=obs, name=f"observed ({len(used)} rounds)", marker_color=P_COLOR,
                text=[str(c) for c in counts], textposition="outside", customdata=counts,
                hovertemplate="%{x} accepted: %{y:.2f} (%{customdata} rounds)<extra></extra>")
    fig.add_scatter(x=x, y=pred, mode="lines+markers", name=f"predicted α^n(1−α), α = {alpha:.2f}",
                    line=dict(color=OKABE_ITO["vermillion"], width=2.5, dash="dash"),
                    marker=dict(size=11, symbol="diamond"),
                    hovertemplate="%{x} accepted: predicted %{y:.3f}<extra></extra>")
    fig.update_xaxes(tickvals=x, ticktext=[str(i) if i < k else f"{k} (all)" for i in x])
    fig.update_yaxes(range=[0, max(obs.max(), pred.max()) * 1.25])
    fig.update_layout(meta={"k": k, "alpha": alpha})
    return fig


def fig_entropy_acceptance(run: Run, decode: Callable[[int], str] = str, run_name: str = "") -> go.Figure:
    """Target entropy at each generated token, with accept/reject markers; run_name, where given, names the
    run in the title (a lesson that compares several runs says which one this is).

    Where the target is unsure (high entropy, e.g. creative text) the draft
    rarely matches: rejections cluster at entropy peaks. The subtitle's means are
    measure.entropy_by_verdict's, the figures a text about this run quotes.
    """
    pts = {s: ([], [], []) for s in ("accepted", "rejected", "correction", "bonus", "target")}
    line_x, line_y = [], []
    pos = 0
    for r in run.rounds:
        for j, tok in enumerate(r.emitted):
            ent = float(r.entropy[j]) if j < len(r.entropy) else float("nan")
            state = "target" if r.k == 0 else ("accepted" if j < r.n_accepted else (r.extra_kind or "target"))
            if state == "correction" and r.rejected:
                d = r.drafted[r.n_accepted]
                for lst, v in zip(pts["rejected"], (pos, ent, f"rejected draft {token_title(d, decode)}")):
                    lst.append(v)
            for lst, v in zip(pts[state], (pos, ent, f"{state} {token_title(tok, decode)}")):
                lst.append(v)
            line_x.append(pos)
            line_y.append(ent)
            pos += 1
    if not line_x:
        return empty_fig("Target entropy along the text", "No tokens yet.")
    ea, er = (statistics.fmean(v) if v else float("nan") for v in measure.entropy_by_verdict(run.rounds))
    named = f" ({run_name})" if run_name else ""
    fig = themed_fig(f"Target entropy along the text{named}, with accepts and rejects",
               f"mean target entropy where the draft was accepted: {ea:.2f} nats · where rejected: {er:.2f} nats",
               x="position in the generated text (tokens)", y="target entropy (nats)")
    fig.add_scatter(x=line_x, y=line_y, mode="lines", name="target entropy",
                    line=dict(color="#bbbbbb", width=1.5), hoverinfo="skip")
    style = {"accepted": ("circle", 8), "rejected": ("x-thin-open", 16), "correction": ("diamond", 10),
             "bonus": ("star", 13), "target": ("circle-open", 7)}
    names = {"accepted": "accepted draft", "rejected": "rejected draft", "correction": "correction",
             "bonus": "bonus", "target": "target token (no draft)"}
    for s, (xs, ys, tx) in pts.items():
        if not xs:
            continue
        sym, size = style[s]
        fig.add_scatter(x=xs, y=ys, mode="markers", name=names[s], hovertext=tx,
                        marker=dict(color=STATE_COLORS[s], symbol=sym, size=size,
                                    line=dict(width=2.5 if s == "rejected" else 0.5,
                                              color=STATE_COLORS[s] if s == "rejected" else "white")),
                        hovertemplate="%{hovertext}<br>position %{x}<br>entropy %{y:.2f} nats<extra></extra>")
    fig.update_yaxes(range=from_zero(1.08 * max(line_y)))  # a token the target was sure of: a marker at 0 nats
    fig.update_layout(meta={"mean_entropy_accepted": ea, "mean_entropy_rejected": er})
    return fig


def _ranked(data: Mapping[str, Mapping[float, float]], t: float) -> list[tuple[str, float, float]]:
    """(domain, α, stderr) at temperature t, highest α first (ties in the data's order): the one
    ranking both the bars and the sentence under them read."""
    return sorted(((dom, *_val_err(series[t])) for dom, series in data.items() if t in series), key=lambda x: -x[1])


def alpha_summary(data: Mapping[str, Mapping[float, float]], temperature: float | None = None) -> str:
    """What the α-by-domain data shows, in one sentence, from the numbers alone.

    At `temperature` (default: the lowest measured): the domains with the highest
    and lowest α, and whether their 95% intervals (±1.96 stderr) separate them.
    """
    temps = {t for series in data.values() for t in series}
    if not temps:
        return "No measurements yet."
    t0 = min(temps) if temperature is None else temperature
    pts = _ranked(data, t0)
    if not pts:
        return f"Nothing measured at T = {t0:g}."
    if len(pts) < 2:
        return f"At T = {t0:g}, α = {pts[0][1]:.2f} on {pts[0][0]}: add a domain to compare."
    (hi_d, hi, hi_e), (lo_d, lo, lo_e) = pts[0], pts[-1]
    s = f"At T = {t0:g}: highest α on {hi_d} ({hi:.2f}), lowest on {lo_d} ({lo:.2f})"
    if hi - 1.96 * hi_e > lo + 1.96 * lo_e:
        return s + "; their 95% intervals do not overlap"
    return s + "; their 95% intervals overlap: this measurement cannot tell them apart"


def fig_alpha_by_domain(data: Mapping[str, Mapping[float, float]], temperature: float,
                        counted: Mapping[str, Mapping[float, float]] | None = None) -> go.Figure:
    """α per domain at one temperature, highest first, with 95% error bars; the subtitle reads the data.

    data / counted: {domain: {temperature: alpha or (alpha, stderr) or Estimate}},
    counted drawn as open diamonds on each bar.
    """
    title = f"Acceptance α by domain at T = {temperature:g}"
    rows = _ranked(data, temperature)
    if not rows:
        return empty_fig(title, f"Nothing measured at T = {temperature:g}.")
    fig = themed_fig(title, alpha_summary(data, temperature), x="domain", y="α = per-token acceptance")
    doms = [r[0] for r in rows]
    fig.add_bar(x=doms, y=[r[1] for r in rows], name="expected α" if counted is not None else "α",
                marker_color=[PALETTE[list(data).index(d) % len(PALETTE)] for d in doms],
                error_y=dict(type="data", array=[1.96 * r[2] for r in rows], thickness=1.5),
                # the value at the bar's foot: the error bar and the counted diamond sit at its top
                text=[f"{r[1]:.2f}" for r in rows], textposition="inside", insidetextanchor="start",
                hovertemplate="%{x}: α = %{y:.3f}<extra></extra>")
    if counted is not None:
        cd = [(d, _val_err(counted[d][temperature])[0]) for d in doms if temperature in counted.get(d, {})]
        fig.add_scatter(x=[d for d, _ in cd], y=[v for _, v in cd], mode="markers", name="counted α",
                        marker=dict(size=13, symbol="diamond-open", color="black", line=dict(width=2)),
                        hovertemplate="%{x}: counted α = %{y:.3f}<extra></extra>")
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(meta={"order": doms})
    return fig


def fig_alpha_vs_temperature(data: Mapping[str, Mapping[float, float]],
                             counted: Mapping[str, Mapping[float, float]] | None = None) -> go.Figure:
    """α against sampling temperature, one line per domain; the subtitle says what the data shows.

    data: {domain: {temperature: alpha or (alpha, stderr) or Estimate}}.
    counted: the same shape, drawn as open markers next to each line (e.g. the
    counted α, when `data` holds the expected α along the text).
    """
    if not data:
        return empty_fig("Acceptance α vs temperature", "No measurements yet.")
    fig = themed_fig("Acceptance α vs temperature, by domain", alpha_summary(data),
               x="temperature", y="α = per-token acceptance")
    for j, (dom, series) in enumerate(data.items()):
        ts = sorted(series)
        vals = [_val_err(series[t]) for t in ts]
        color = PALETTE[j % len(PALETTE)]
        fig.add_scatter(x=ts, y=[v for v, _ in vals], mode="lines+markers", name=str(dom), legendgroup=str(dom),
                        line=dict(color=color, width=2.5, dash=DASHES[j % len(DASHES)]),
                        marker=dict(size=10, symbol=SYMBOLS[j % len(SYMBOLS)]),
                        error_y=dict(type="data", array=[e for _, e in vals],
                                     visible=any(e > 0 for _, e in vals), thickness=1.5),
                        hovertemplate=f"{dom}<br>T = %{{x}}<br>α = %{{y:.3f}}<extra></extra>")
        if counted and counted.get(dom):
            cs = sorted(counted[dom])
            fig.add_scatter(x=cs, y=[_val_err(counted[dom][t])[0] for t in cs], mode="markers",
                            name=f"{dom} (counted)", legendgroup=str(dom),
                            marker=dict(size=11, color=color, symbol=f"{SYMBOLS[j % len(SYMBOLS)]}-open",
                                        line=dict(width=2, color=color)),
                            hovertemplate=f"{dom}, counted<br>T = %{{x}}<br>α = %{{y:.3f}}<extra></extra>")
    fig.update_yaxes(range=FRACTION_RANGE)
    return fig


# --- claim 13: adaptive k -----------------------------------------------------
K_TRACE_NOTES = {  # the k trace's subtitle, by the run's k policy
    "adaptive": "adaptive k grows after full acceptance and shrinks after early rejections",
    "best": "the best-k chooser drafts while one more draft is expected to pay, and ends a round after a doubtful one",
}


def fig_k_trace(run: Run, width: int = SUBTITLE_WIDTH) -> go.Figure:
    """k per round (run.ks) as a step line, with accepted tokens per round as bars; width: the title's line
    length (HALF_WIDTH in half the page)."""
    if not run.rounds:
        return empty_fig("k over the run", "No rounds yet.")
    ks = run.k_per_round
    x = np.arange(1, len(run.rounds) + 1)
    acc = [r.n_accepted for r in run.rounds]
    fig = themed_fig(f"k over the run: {min(ks)} to {max(ks)}, mean {np.mean(ks):.1f}",
               K_TRACE_NOTES.get(run.decode.k_policy, "k drafted in each round"), x="round", y="tokens",
               width=width)
    fig.add_bar(x=x, y=acc, name="accepted this round", marker_color=R_COLOR, opacity=0.75,
                marker_pattern=dict(shape="/", fillmode="overlay", fgcolor="white"),
                hovertemplate="round %{x}: %{y} accepted<extra></extra>")
    fig.add_scatter(x=x, y=ks, mode="lines+markers", name="k (drafted this round)", line_shape="hv",
                    line=dict(color=P_COLOR, width=3), marker=dict(size=6, symbol="square"),
                    hovertemplate="round %{x}: k = %{y}<extra></extra>")
    fig.update_xaxes(**_round_ticks(len(run.rounds)))
    fig.update_yaxes(rangemode="tozero", dtick=1 if max(ks) <= 12 else None)
    return fig


# --- claim 7: exactness ------------------------------------------------------
def fig_exactness(counts: Mapping[int, int], p: Mapping[int, float],
                  decode: Callable[[int], str] = str, top_n: int = 15, noise: float | None = None) -> go.Figure:
    """Empirical token frequencies from many seeded runs vs the target p.

    The title gives the total variation distance, the subtitle what sampling
    noise alone would give with that many samples: `noise`, or else
    expected_tv_noise over p as given, which is that only when p lists the
    whole distribution (FirstTokenTrials.p lists its top tokens: pass
    FirstTokenTrials.noise.expected).
    """
    n = int(sum(counts.values()))
    if n == 0:
        return empty_fig("Sampled tokens vs target p", "No samples yet.")
    f = {i: c / n for i, c in counts.items()}
    tv = total_variation(p, counts)
    noise = expected_tv_noise(p, n) if noise is None else float(noise)
    ids = union_ids(dict(p), f, top_n=top_n)
    rest_p = max(0.0, 1.0 - sum(p.get(i, 0.0) for i in ids))
    rest_f = max(0.0, 1.0 - sum(f.get(i, 0.0) for i in ids))
    xs = token_labels(ids, decode)
    py = [float(p.get(i, 0.0)) for i in ids]
    fy = [f.get(i, 0.0) for i in ids]
    if rest_p > 1e-9 or rest_f > 1e-9:
        xs.append("(other)")
        py.append(rest_p)
        fy.append(rest_f)
    fig = themed_fig(f"Sampled tokens vs target p: total variation = {tv:.3f}",
               f"{n} seeded speculative samples · sampling noise alone gives TV ≈ {noise:.3f}",
               x="token", y="probability")
    fig.add_bar(x=xs, y=py, name="target p", marker_color=P_COLOR,
                hovertemplate="%{x}<br>target p = %{y:.4f}<extra></extra>")
    fig.add_bar(x=xs, y=fy, name=f"observed ({n} samples)", marker_color=Q_COLOR,
                marker_pattern=dict(shape="/", fillmode="overlay", fgcolor="#111"),
                hovertemplate="%{x}<br>observed = %{y:.4f}<extra></extra>")
    fig.update_layout(barmode="group", meta={"tv": tv, "noise_tv": noise, "n": n})
    fig.update_yaxes(range=[0, max(py + fy) * 1.2])
    return fig


# --- speed -----------------------------------------------------------------
def _reach(times: Sequence[tuple[float, int]], n: int) -> float:
    for t, k in times:
        if k >= n:
            return float(t)
    return float("nan")


def fig_race(spec_times: Sequence[tuple[float, int]], base_times: Sequence[tuple[float, int]]) -> go.Figure:
    """Cumulative tokens vs wall time: speculative run against target alone."""
    spec = sorted((float(t), int(n)) for t, n in spec_times)
    base = sorted((float(t), int(n)) for t, n in base_times)
    if not spec and not base:
        return empty_fig("Race: tokens over time", "Nothing timed yet.")
    title, sub = "Race: tokens generated over wall time", ""
    if spec and base:
        goal = min(spec[-1][1], base[-1][1])
        ts, tb = _reach(spec, goal), _reach(base, goal)
        if goal > 0 and ts > 0:
            title = f"Race to {goal} tokens: speculative {ts:.2f} s vs target alone {tb:.2f} s → {tb / ts:.2f}×"
            sub = "steps: speculative emits several tokens per target pass"
    fig = themed_fig(title, sub, x="wall time (s)", y="tokens generated")
    for pts, name, col, dash, sym in ((spec, "speculative", R_COLOR, "solid", "circle"),
                                      (base, "target alone (baseline)", GREY, "dash", "square")):
        if not pts:
            continue
        xs, ys = [0.0] + [t for t, _ in pts], [0] + [n for _, n in pts]
        rate = ys[-1] / xs[-1] if xs[-1] > 0 else float("nan")
        fig.add_scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=f"{name} ({rate:.1f} tok/s)",
                        line=dict(color=col, width=3, dash=dash),
                        hovertemplate=f"{name}<br>%{{x:.2f}} s: %{{y}} tokens<extra></extra>")
        fig.add_scatter(x=[xs[-1]], y=[ys[-1]], mode="markers", showlegend=False, hoverinfo="skip",
                        marker=dict(color=col, size=12, symbol=sym))
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


def fig_bench_speedup(rows: Sequence[Mapping]) -> go.Figure:
    """Measured vs predicted speedup over k from benchmark rows.

    rows: dicts with keys k, measured, predicted. Repeats of one k are
    averaged (error bars: standard error).
    """
    if not rows:
        return empty_fig("Measured vs predicted speedup", "No benchmark rows yet.")
    ks = sorted({int(r["k"]) for r in rows})
    meas, err, pred = [], [], []
    for k in ks:
        m = np.array([float(r["measured"]) for r in rows if int(r["k"]) == k])
        p = [float(r["predicted"]) for r in rows if int(r["k"]) == k and r.get("predicted") is not None]
        meas.append(float(m.mean()))
        err.append(float(m.std(ddof=1) / np.sqrt(len(m))) if len(m) > 1 else 0.0)
        pred.append(float(np.mean(p)) if p else float("nan"))
    kb = ks[int(np.argmax(meas))]
    fig = themed_fig("Measured vs predicted speedup by k",
               f"best measured k = {kb} ({max(meas):.2f}×); the model: E[tokens] / (k·c + verify cost)",
               x="k = drafted tokens per round", y=SPEEDUP_AXIS)
    fig.add_scatter(x=ks, y=pred, mode="lines+markers", name="predicted",
                    line=dict(color=OKABE_ITO["vermillion"], width=2.5, dash="dash"),
                    marker=dict(size=10, symbol="circle-open", line=dict(width=2)),
                    hovertemplate="k = %{x}: predicted %{y:.2f}×<extra></extra>")
    fig.add_scatter(x=ks, y=meas, mode="lines+markers", name="measured",
                    line=dict(color=P_COLOR, width=3), marker=dict(size=11, symbol="diamond"),
                    error_y=dict(type="data", array=err, visible=any(e > 0 for e in err), thickness=1.5),
                    hovertemplate="k = %{x}: measured %{y:.2f}×<extra></extra>")
    fig.add_hline(y=1, line=dict(color="#444", dash="dot", width=1.5),
                  annotation_text="1× = no gain", annotation_position="bottom right")
    fig.update_xaxes(tickvals=ks)
    fig.update_yaxes(rangemode="tozero")
    return fig


def fig_early_exit(sweep: EarlyExitSweep) -> go.Figure:
    """α and c (left axis) and the speedup, measured and predicted (right axis), against L."""
    title = "Early exit: draft quality against draft cost"
    if not sweep.points:
        return empty_fig(title, "No depths measured yet.")
    xs = [pt.layers for pt in sweep.points]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(template=TEMPLATE, meta={"n_layers": sweep.n_layers, "k": sweep.k})
    set_title(fig, title, f"draft = the target's first L of {sweep.n_layers} layers (L = {sweep.n_layers}: "
                                 f"the target itself) · k = {sweep.k}, T\u00a0=\u00a0{sweep.temperature:g}")
    legend_rows(fig, 2)  # four long names: two rows on a 564-pixel chart
    for name, ys, col, sym in (("α (drafts accepted)", [pt.alpha for pt in sweep.points], R_COLOR, "circle"),
                               ("c (draft step / target step)", [pt.c for pt in sweep.points], Q_COLOR,
                                "square")):
        fig.add_scatter(x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=col, width=3),
                        marker=dict(symbol=sym, size=11), secondary_y=False,
                        hovertemplate=f"L = %{{x}}<br>{name} = %{{y:.3f}}<extra></extra>")
    fig.add_scatter(x=xs, y=[pt.speedup for pt in sweep.points], name="speedup, measured", mode="lines+markers",
                    line=dict(color=MEASURED_COLOR, width=3), marker=dict(symbol="diamond", size=12),
                    secondary_y=True, hovertemplate="L = %{x}<br>measured %{y:.2f}×<extra></extra>")
    fig.add_scatter(x=xs, y=[pt.predicted for pt in sweep.points], name="speedup, predicted from α and c",
                    mode="lines", line=dict(color=GREY, width=2, dash="dash"), secondary_y=True,
                    hovertemplate="L = %{x}<br>predicted %{y:.2f}×<extra></extra>")
    fig.add_hline(y=1.0, line=dict(color=GREY, width=1, dash="dot"), secondary_y=True)
    fig.update_xaxes(title_text="early-exit depth L (layers the draft runs)", dtick=1 if max(xs) <= 16 else None)
    # both axes over one range from 0, with room for a marker at 0 (α is 0 for a shallow draft), each ticked on its
    # own: the same round numbers at the same heights (a right axis takes the left one's grid otherwise, and reads
    # 0.187, 0.374, 0.562)
    top = 1.1 * max([1.0] + [v for pt in sweep.points for v in (pt.alpha, pt.c, pt.speedup, pt.predicted)
                             if math.isfinite(v)])
    fig.update_yaxes(title_text="α and c", range=from_zero(top), tickmode="auto", secondary_y=False)
    fig.update_yaxes(title_text=SPEEDUP_AXIS, range=from_zero(top), tickmode="auto",
                     secondary_y=True, showgrid=False)
    return fig


# --- the labs' charts: the Exactness page's first position and rules, the main page's offline pairs ---


def fig_first_position(fp: FirstPosition, decode: Callable[[int], str], top_n: int = 12) -> go.Figure:
    """Bars of p, q and the residual at the first new position (claim 7), in the charts theme."""
    ids = sorted(set(fp.p) | set(fp.q) | set(fp.residual),
                 key=lambda i: -max(fp.p.get(i, 0), fp.q.get(i, 0), fp.residual.get(i, 0)))[:top_n]
    labels = token_labels(ids, decode)
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, barmode="group", xaxis_title="token (top candidates)",
                      yaxis_title="probability", meta={"overlap": fp.overlap})
    set_title(fig, f"First new token: target p, draft q and the residual (chance to accept Σ min(p, q) = "
                          f"{fp.overlap:.2f})",
                     "a drafted d is kept with probability min(1, p/q); otherwise the correction is drawn from "
                     "norm(max(0, p − q))")
    for name, m, col, pat in (("target p", fp.p, P_COLOR, ""), ("draft q", fp.q, Q_COLOR, ""),
                              ("residual norm(max(0, p − q))", fp.residual, R_COLOR, "x")):
        fig.add_bar(x=labels, y=[m.get(i, 0.0) for i in ids], name=name, marker_color=col,
                    marker_pattern=dict(shape=pat, fillmode="overlay", fgcolor="#fff"), customdata=ids,
                    hovertemplate=f"%{{x}} (id %{{customdata}})<br>{name} = %{{y:.4f}}<extra></extra>")
    return fig


RULE_STYLE = {  # kind -> (colour, symbol)
    "rejection": (PALETTE[2], "circle"),
    "exact-match": (PALETTE[0], "square"),
    "typical": (PALETTE[1], "diamond"),
    "threshold": (PALETTE[3], "triangle-up"),
}


def fig_rules(lab: RuleLab) -> go.Figure:
    """Acceptance (speed) against TV distance to p (faithfulness), one point per rule and setting.

    Filled markers: exact values; hollow markers: the n sampled trials. The grey
    band is the TV that sampling noise alone stays under in 95% of samplings of n.
    """
    fig = themed_fig("Acceptance rules: speed against faithfulness",
                      f"first token, T = {lab.temperature:g}, {lab.n} seeded trials per rule · filled: exact, "
                      f"hollow: sampled · grey band: sampling noise",
                      x="total variation distance to the target's p (0 = exact)",
                      y="chance the drafted token is kept")
    if not lab.results:
        return empty_fig("Acceptance rules: speed against faithfulness", "No rules to compare.")
    fig.add_vrect(x0=0, x1=lab.noise_tv95, fillcolor=GREY, opacity=0.2, line_width=0)
    # room on the right for the labels, and one label where several settings land on the same spot
    x_max = 1.3 * max([r.tv_exact for r in lab.results] + [r.tv_sampled for r in lab.results]
                      + [lab.noise_tv95 if math.isfinite(lab.noise_tv95) else 0.0, 0.05])
    # the lossy rules' settings often land on one spot (acceptance about the same, TV too): its one label says how
    # many more it stands for, "ε=0.01, δ=0.1 and 7 more" (each is in the hover)
    kept = uncrowded_labels([r.tv_exact for r in lab.results], [r.acceptance_exact for r in lab.results],
                            [r.setting for r in lab.results], x_max, 1.05)
    labels = dict(zip(map(id, lab.results), (re.sub(r" \(\+(\d+)\)$", r" and \1 more", t) for t in kept)))
    for kind in RULE_STYLE:
        rs = [r for r in lab.results if r.kind == kind]
        if not rs:
            continue
        col, sym = RULE_STYLE[kind]
        name = f"{kind} ({'lossless' if rs[0].lossless else 'lossy'})"
        fig.add_scatter(x=[r.tv_exact for r in rs], y=[r.acceptance_exact for r in rs], mode="markers+text",
                        name=name, text=[labels[id(r)] for r in rs],
                        # a label toward the plot's middle: right of a point on the left half, left of one on the
                        # right (the lossy rules land near the right end, where a label to the right is cut)
                        textposition=["top right" if r.tv_exact < x_max / 2 else "top left" for r in rs],
                        marker=dict(color=col, symbol=sym, size=14, line=dict(color="#222", width=1)),
                        customdata=[r.label for r in rs],
                        hovertemplate="%{customdata}<br>exact: kept %{y:.3f}, TV %{x:.4f}<extra></extra>")
        fig.add_scatter(x=[r.tv_sampled for r in rs], y=[r.acceptance_sampled for r in rs], mode="markers",
                        name=f"{kind}, sampled", showlegend=False,
                        marker=dict(color=col, symbol=f"{sym}-open", size=14, line=dict(width=2)),
                        customdata=[r.label for r in rs],
                        hovertemplate="%{customdata}<br>sampled: kept %{y:.3f}, TV %{x:.4f}<extra></extra>")
    fig.update_xaxes(range=from_zero(x_max))  # the lossless rules sit at TV 0: whole markers on the axis
    fig.update_yaxes(range=FRACTION_RANGE)
    fig.update_layout(meta={"noise_tv": lab.noise_tv, "n": lab.n})
    return fig


def fig_pairs(results: Sequence[PairResult]) -> go.Figure:
    """Four panels, one bar per pair: α, c, tokens per pass and the measured speedup."""
    title = "The offline pairs on one prompt"
    if not results:
        return empty_fig(title, "No pairs compared yet.")
    panels: Mapping[str, Callable[[PairResult], float]] = {
        "α (drafts accepted)": lambda p: p.alpha, "c (draft step / target step)": lambda p: p.c,
        "tokens per target pass": lambda p: p.tokens_per_pass, "measured speedup (×)": lambda p: p.speedup}
    fig = subplot_row(list(panels), horizontal_spacing=0.06)
    names = [p.name for p in results]
    colors = [R_COLOR, Q_COLOR, P_COLOR, MEASURED_COLOR]
    for j, ((label, get), col) in enumerate(zip(panels.items(), colors), start=1):
        ys = [get(p) for p in results]
        fig.add_bar(x=names, y=ys, name=label, marker_color=col, row=1, col=j, showlegend=False,
                    text=[f"{y:.2f}" if y == y else "–" for y in ys], textposition="outside",
                    hovertemplate=f"%{{x}}<br>{label} = %{{y:.3f}}<extra></extra>")
    fig.add_hline(y=1.0, line=dict(color=GREY, width=1, dash="dot"), row=1, col=4)
    fig.update_layout(template=TEMPLATE, meta={"pairs": names}, bargap=0.3)
    set_title(fig, title, "each pair next to its own run of the target alone, same prompt and settings")
    fig.update_yaxes(rangemode="tozero")
    fig.update_xaxes(tickangle=-30)
    return fig
