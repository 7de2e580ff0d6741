"""Plotly figures of token trees: pure functions of TreeRounds.

fig_tree draws one round's tree left to right by depth: the accepted path,
the rejected nodes, the nodes never judged (faded), and the target's own token
after the path (correction or bonus); or, given a depth, the tree as drafting
left it after that depth. Each node's customdata is its index (-1 the root,
N the correction/bonus), so a page can react to a click. fig_node_pq, the
acceptance and chain-vs-tree figures draw specviz.teaching.tree_lab's measurements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import plotly.graph_objects as go

from specviz.teaching.charts import (BOTTOM_MARGIN, GREY, P_COLOR, PALETTE, PLOT_HEIGHT, Q_COLOR, TEMPLATE, TOP_MARGIN, themed_fig, token_labels,
                     plain_text, token_title, topk_map, union_ids, set_title, subplot_row)
from specviz.teaching.explain import num as _fmt
from specviz.teaching.render import STATE_COLORS, visible
from specviz.teaching.tree_lab import FREE_TOL, ChainVsTree, Tally
from specviz.data.tree_records import TreeRound

SHAPE_COLORS = (PALETTE[0], PALETTE[3])  # chain, tree

NODE_STATES = {  # state -> (legend label, colour, opacity)
    "accepted": ("accepted path", STATE_COLORS["accepted"], 1.0),
    "rejected": ("rejected", STATE_COLORS["rejected"], 1.0),
    "untried": ("never judged (pruned)", GREY, 0.35),
    "correction": ("correction (target's token)", STATE_COLORS["correction"], 1.0),
    "bonus": ("bonus (target's token)", STATE_COLORS["bonus"], 1.0),
}
# a node's label sits above its marker: two nodes of one depth, one leaf apart, are ROW_PX apart so that the
# lower one's label (about 18 px of text) clears the upper one's marker (16 px), with a gap
ROW_PX = 40
ROOM_ABOVE, ROOM_BELOW = 0.8, 0.4  # rows above the top node (its label) and below the bottom one (its marker)
DRAFTED = "drafted"
DRAFTED_STATE = {DRAFTED: ("drafted, not verified yet", STATE_COLORS["pending"], 1.0)}


def tree_layout(parents: list[int]) -> dict[int, float]:
    """y of each node (-1 the root): leaves one apart in depth-first order, a parent centred on its children."""
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(par, []).append(i)
    y: dict[int, float] = {}
    next_leaf = [0.0]

    def place(n: int) -> float:
        ch = kids.get(n, [])
        if not ch:
            y[n] = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            ys = [place(c) for c in ch]
            y[n] = (ys[0] + ys[-1]) / 2
        return y[n]

    place(-1)
    return y


def _hover(r: TreeRound, i: int, decode: Callable[[int], str], drafting: bool = False) -> str:
    tok = plain_text(visible(decode(r.tokens[i])))
    if drafting:  # the target has not read it yet
        return (f"node {i}, depth {r.depths[i]}: ‘{tok}’<br>q = {_fmt(r.q[i], '.3f')}, "
                f"cumulative q = {_fmt(r.cum_q[i], '.3f')}")
    lines = [f"node {i}, depth {r.depths[i]}: ‘{tok}’", f"q = {_fmt(r.q[i], '.3f')}  p = {_fmt(r.p[i], '.3f')}",
             f"cumulative q = {_fmt(r.cum_q[i], '.3f')}", f"verdict: {r.verdict[i]}"]
    if r.u[i] is not None:
        lines.append(f"u = {_fmt(r.u[i], '.3f')} vs p/q = {_fmt(r.ratio[i], '.3f')} (after earlier siblings)")
    return "<br>".join(lines)


def tree_height(y: dict[int, float]) -> tuple[int, list[float]]:
    """The figure's height (before its title's extra lines) and its y range (reversed: the root's side up) that
    keep ROW_PX between neighbouring nodes of one depth, and room for the top node's label."""
    top, bottom = min(y.values()) - ROOM_ABOVE, max(y.values()) + ROOM_BELOW
    plot_px = ROW_PX * (bottom - top)
    return max(PLOT_HEIGHT, round(TOP_MARGIN + plot_px + BOTTOM_MARGIN)), [bottom, top]


def fig_tree(r: TreeRound, decode: Callable[[int], str] = str, depth: int | None = None) -> go.Figure:
    """One round's token tree: nodes by depth, coloured by what verification made of them. The figure is as tall
    as its widest depth needs (tree_height), so no label is drawn over a neighbour.

    depth: draw the tree as drafting left it after that depth (nodes up to it, none verified yet).
    """
    n = r.n_nodes
    drafting = depth is not None
    has_extra = r.extra_id is not None and not drafting
    parents = list(r.parents) + ([r.path[-1] if r.path else -1] if has_extra else [])
    y = tree_layout(parents)  # the whole tree's layout, so nodes stay put while it grows
    height, y_range = tree_height(y)
    x = {-1: 0, **{i: r.depths[i] for i in range(n)}}
    if has_extra:
        x[n] = len(r.path) + 1
    shown = [i for i in range(len(parents)) if not drafting or r.depths[i] <= depth]
    state = {i: DRAFTED if drafting else r.verdict[i] for i in range(n)}
    if has_extra:
        state[n] = r.extra_kind
    # the same token may sit in two branches: each node is labelled by its own text alone
    labels = token_labels(list(r.tokens) + ([r.extra_id] if has_extra else []), decode, maxlen=10, unique=False)

    if drafting:
        fig = themed_fig(f"Round {r.index + 1}, drafting: depth {depth}, {len(shown)} of {n} nodes",
                   "one draft pass per depth expands the most probable nodes; nothing is verified yet",
                   x="depth (tokens after the committed context)", y="", height=height)
    else:
        fig = themed_fig(f"Round {r.index + 1}: a tree of {n} drafted tokens, {r.n_accepted} accepted",
                   "one target pass judged every node; each node saw only its own ancestors",
                   x="depth (tokens after the committed context)", y="", height=height)
    # edges: parent -> child, with the path drawn thicker
    on_path = set() if drafting else set(r.path) | ({n} if has_extra else set())
    for thick in (False, True):
        ex, ey = [], []
        for i in shown:
            if (i in on_path) == thick:
                ex += [x[parents[i]], x[i], None]
                ey += [y[parents[i]], y[i], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=STATE_COLORS["accepted"] if thick else "#c8c8c8",
                                           width=4 if thick else 1.5)))
    fig.add_trace(go.Scatter(x=[0], y=[y[-1]], mode="markers+text", text=["context"], textposition="middle left",
                             marker=dict(size=18, color="#6b6b6b", symbol="square"), name="committed context",
                             customdata=[-1], hovertext=["the committed context; its last token is the root"],
                             hoverinfo="text"))
    for s, (label, color, opacity) in {**NODE_STATES, **DRAFTED_STATE}.items():
        nodes = [i for i in shown if state[i] == s]
        if not nodes:
            continue
        hover = [_hover(r, i, decode, drafting) if i < n else
                 f"the target's own token ‘{plain_text(visible(decode(r.extra_id)))}’ ({s})" for i in nodes]
        fig.add_trace(go.Scatter(
            x=[x[i] for i in nodes], y=[y[i] for i in nodes], mode="markers+text", name=label,
            text=[labels[i] for i in nodes], textposition="top center", customdata=nodes,
            marker=dict(size=16, color=color, opacity=opacity, line=dict(color="white", width=1)),
            textfont=dict(color="#222" if opacity == 1.0 else "#999"), hovertext=hover, hoverinfo="text"))
    fig.update_xaxes(dtick=1, range=[-0.6, max(x.values()) + 0.6])
    fig.update_yaxes(visible=False, range=y_range)
    return fig


def fig_node_pq(r: TreeRound, node: int, decode: Callable[[int], str] = str, top_n: int = 12) -> go.Figure:
    """Target p vs draft q where node `node` was drafted (at its parent), the node's token and siblings marked."""
    par = r.parents[node]
    pm, qm = topk_map(r.p_top[par + 1]), topk_map(r.q_top[par + 1])
    tok = r.tokens[node]
    pm.setdefault(tok, r.p[node])
    qm.setdefault(tok, r.q[node])
    ids = union_ids(pm, qm, must=[tok], top_n=top_n)
    siblings = {r.tokens[c] for c in r.children.get(par, [])}
    fig = themed_fig(f"Round {r.index + 1}, node {node} {token_title(tok, decode)}: p vs q where it was drafted",
               f"hatched: this node's token; outlined: its siblings (the other children drafted there); "
               f"verdict: {r.verdict[node]}", x="token (top candidates)", y="probability")
    xs = token_labels(ids, decode)
    pattern = ["/" if i == tok else "" for i in ids]
    width = [2.5 if i in siblings else 0 for i in ids]
    for name, m, col in (("target p", pm, P_COLOR), ("draft q", qm, Q_COLOR)):
        fig.add_bar(x=xs, y=[m.get(i, 0.0) for i in ids], name=name, marker_color=col,
                    marker_line=dict(width=width, color="#111"),
                    marker_pattern=dict(shape=pattern, fillmode="overlay", fgcolor="#111"))
    fig.update_layout(barmode="group")
    return fig


def fig_tree_acceptance(depth: Sequence[Tally], rank: Sequence[Tally]) -> go.Figure:
    """Acceptance by depth (did the path go on to depth d, once tried?) and by branch rank (child #r accepted,
    once tried?), with how many times each was tried."""
    fig = subplot_row(("by depth", "by branch rank"))
    fig.update_layout(template=TEMPLATE, height=380, showlegend=False)
    set_title(fig, "Acceptance in the tree", "accepted ÷ tried; the number on each bar is how many times it was tried")
    for col, tallies, shift in ((1, depth, 0), (2, rank, 1)):
        fig.add_bar(x=[t.label + shift for t in tallies], y=[t.rate for t in tallies],
                    text=[f"{t.accepted}/{t.tried}" for t in tallies], textposition="outside",
                    marker_color=STATE_COLORS["accepted"], row=1, col=col)
        fig.update_xaxes(dtick=1, title_text="depth" if col == 1 else "branch rank (1 = the first child tried)",
                         row=1, col=col)
        fig.update_yaxes(range=[0, 1.15], title_text="accepted ÷ tried" if col == 1 else None, row=1, col=col)
    return fig


SUBPLOT_TITLE_PX = 30  # a subplot's title above its plot


def fig_chain_vs_tree(cmp: ChainVsTree) -> go.Figure:
    """Chain (k = N) against tree (N nodes) at each node budget N: tokens per pass, verify cost, tokens/s."""
    b = cmp.budgets
    fig = subplot_row(("tokens per target pass", "verify ÷ one-token pass", "tokens per second"))
    fig.update_layout(template=TEMPLATE, height=440)
    set_title(fig, "Chain against tree at equal node budgets",
              "same prompt, seed and models; a budget of N nodes = a chain of k = N drafts or a tree of N nodes, "
              "both verified in one pass over N + 1 tokens · dotted: a verify pass of "
              f"{FREE_TOL}× a one-token pass, nearly free below")
    # the subplots' titles sit where the legend's band would: the band goes above them
    top, bottom = fig.layout.margin.t + SUBPLOT_TITLE_PX, fig.layout.template.layout.margin.b
    height = fig.layout.height + SUBPLOT_TITLE_PX  # the plot keeps its height below the added band
    fig.update_layout(margin_t=top, height=height, legend_y=1 + SUBPLOT_TITLE_PX / (height - top - bottom))
    colors = {"chain": SHAPE_COLORS[0], "tree": SHAPE_COLORS[1]}
    for shape in ("chain", "tree"):
        runs = [cmp.get(shape, n) for n in b]
        for col, ys in ((1, [r.tokens_per_pass for r in runs]), (3, [r.tokens_per_s for r in runs])):
            fig.add_scatter(x=b, y=ys, name=shape, legendgroup=shape, showlegend=col == 1, mode="lines+markers",
                            line=dict(color=colors[shape], width=3, dash="solid" if shape == "tree" else "dash"),
                            marker=dict(size=9, symbol="circle" if shape == "tree" else "square"), row=1, col=col)
    fig.add_scatter(x=b, y=[cmp.verify_ratio.get(n + 1, float("nan")) for n in b], name="verify cost",
                    mode="lines+markers", line=dict(color=GREY, width=3), showlegend=False, row=1, col=2)
    # said in the subtitle: a note on the line would sit on the curve wherever the device puts it
    fig.add_hline(y=FREE_TOL, line=dict(color=GREY, dash="dot"), row=1, col=2)
    for col in (1, 2, 3):
        fig.update_xaxes(type="log", tickvals=b, ticktext=[str(n) for n in b], title_text="node budget N",
                         row=1, col=col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
    return fig
