"""Plotly figures of token trees: pure functions of TreeRounds.

fig_tree draws one round's tree left to right by depth: the accepted path,
the rejected nodes, the nodes never judged (faded), and the target's own token
after the path (correction or bonus). Each node's customdata is its index
(-1 the root, N the correction/bonus), so a page can react to a click.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from .charts import GREY, _fig, _fmt, _labels, _plain
from .render import STATE_COLORS, visible
from .tree_records import TreeRound

NODE_STATES = {  # state -> (legend label, colour, opacity)
    "accepted": ("accepted path", STATE_COLORS["accepted"], 1.0),
    "rejected": ("rejected", STATE_COLORS["rejected"], 1.0),
    "untried": ("never judged (pruned)", GREY, 0.35),
    "correction": ("correction (target's token)", STATE_COLORS["correction"], 1.0),
    "bonus": ("bonus (target's token)", STATE_COLORS["bonus"], 1.0),
}


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


def _hover(r: TreeRound, i: int, decode: Callable[[int], str]) -> str:
    tok = _plain(visible(decode(r.tokens[i])))
    lines = [f"node {i}, depth {r.depths[i]}: ‘{tok}’", f"q = {_fmt(r.q[i], '.3f')}  p = {_fmt(r.p[i], '.3f')}",
             f"cumulative q = {_fmt(r.cum_q[i], '.3f')}", f"verdict: {r.verdict[i]}"]
    if r.u[i] is not None:
        lines.append(f"u = {_fmt(r.u[i], '.3f')} vs p/q = {_fmt(r.ratio[i], '.3f')} (after earlier siblings)")
    return "<br>".join(lines)


def fig_tree(r: TreeRound, decode: Callable[[int], str] = str) -> go.Figure:
    """One round's token tree: nodes by depth, coloured by what verification made of them."""
    n = r.n_nodes
    has_extra = r.extra_id is not None
    parents = list(r.parents) + ([r.path[-1] if r.path else -1] if has_extra else [])
    y = tree_layout(parents)
    x = {-1: 0, **{i: r.depths[i] for i in range(n)}}
    if has_extra:
        x[n] = len(r.path) + 1
    state = {i: r.verdict[i] for i in range(n)}
    if has_extra:
        state[n] = r.extra_kind
    labels = _labels(list(r.tokens) + ([r.extra_id] if has_extra else []), decode, maxlen=10)

    title = f"Round {r.index + 1}: a tree of {n} drafted tokens, {r.n_accepted} accepted"
    fig = _fig(title, "one target pass judged every node; each node saw only its own ancestors",
               x="depth (tokens after the committed context)", y="")
    # edges: parent -> child, with the path drawn thicker
    on_path = set(r.path) | ({n} if has_extra else set())
    for thick in (False, True):
        ex, ey = [], []
        for i, par in enumerate(parents):
            if (i in on_path) == thick:
                ex += [x[par], x[i], None]
                ey += [y[par], y[i], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=STATE_COLORS["accepted"] if thick else "#c8c8c8",
                                           width=4 if thick else 1.5)))
    fig.add_trace(go.Scatter(x=[0], y=[y[-1]], mode="markers+text", text=["context"], textposition="middle left",
                             marker=dict(size=18, color="#6b6b6b", symbol="square"), name="committed context",
                             customdata=[-1], hovertext=["the committed context; its last token is the root"],
                             hoverinfo="text"))
    for s, (label, color, opacity) in NODE_STATES.items():
        nodes = [i for i in range(len(parents)) if state[i] == s]
        if not nodes:
            continue
        hover = [_hover(r, i, decode) if i < n else
                 f"the target's own token ‘{_plain(visible(decode(r.extra_id)))}’ ({s})" for i in nodes]
        fig.add_trace(go.Scatter(
            x=[x[i] for i in nodes], y=[y[i] for i in nodes], mode="markers+text", name=label,
            text=[labels[i] for i in nodes], textposition="top center", customdata=nodes,
            marker=dict(size=16, color=color, opacity=opacity, line=dict(color="white", width=1)),
            textfont=dict(color="#222" if opacity == 1.0 else "#999"), hovertext=hover, hoverinfo="text"))
    fig.update_xaxes(dtick=1, range=[-0.6, max(x.values()) + 0.6])
    fig.update_yaxes(visible=False, autorange="reversed")
    return fig
