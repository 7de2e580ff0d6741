"""Drafts made from the target itself, with no second model and no copy of its weights.

  self        the target drafts for itself: every draft is accepted in greedy
              mode (α = 1), yet it is slower than the target alone, because a
              draft step costs a whole target step (c ≈ 1)
  early exit  the target's first L layers, then its own final norm and LM head
              (self-speculation, as in LayerSkip and transformers'
              assistant_early_exit). The modules are the target's: the draft is
              a thin model object whose children point at them

Both are ordinary causal LMs, so ModelDrafter and CachedLM use them unchanged
(each keeps its own KV cache; the early-exit draft does not reuse the target's).

early_exit_sweep measures α, c and the speedup for several L on one prompt;
fig_early_exit draws them (draft quality against draft cost, on one model).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import nn

from . import charts, measure
from .config import SELF, DerivedSource
from .errors import InvalidSetting


def num_layers(model) -> int:
    """The decoder depth of a transformers causal LM (measure.decoder_layers), which early exit needs."""
    n = measure.decoder_layers(model)
    if n is None:
        raise InvalidSetting(f"{type(model).__name__}: its config has no num_hidden_layers, so no early exit")
    return n


def _layer_list(base: nn.Module, n: int) -> str:
    """Name of the base model's child that holds its n decoder layers."""
    found = [name for name, m in base.named_children() if isinstance(m, nn.ModuleList) and len(m) == n]
    if len(found) != 1:
        raise InvalidSetting(f"{type(base).__name__}: cannot tell which module list holds the {n} layers")
    return found[0]


def early_exit(target, layers: int):
    """A causal LM made of target's embedding, its first `layers` layers, its final norm and LM head.

    The modules are shared with the target, not copied: a weight changed in one
    changes in the other, and the draft costs no memory beyond a small config.
    """
    n = num_layers(target)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < n:
        raise InvalidSetting(f"early exit: layers must be a whole number from 1 to {n - 1} (the target has {n}), "
                             f"got {layers!r}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = layers
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[:layers]  # per-layer attention kinds: the cache reads them
    with torch.device("meta"):
        draft = type(target)(cfg)  # an empty shell: every module is replaced below
    prefix = target.base_model_prefix
    base, t_base = getattr(draft, prefix), getattr(target, prefix)
    stack = _layer_list(t_base, n)
    for name, module in t_base.named_children():  # embedding, rotary embedding, final norm, ...
        setattr(base, name, nn.ModuleList(list(module)[:layers]) if name == stack else module)
    for name, module in target.named_children():  # the LM head
        if name != prefix:
            setattr(draft, name, module)
    left = [k for k, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left:
        raise InvalidSetting(f"early exit of {type(target).__name__}: {left[0]} was not taken from the target")
    draft.generation_config = copy.deepcopy(target.generation_config)
    return draft.eval().requires_grad_(False)


def derive(source: DerivedSource, target):
    """The draft model a DerivedSource describes, built on the loaded target."""
    if source.kind == SELF:
        return target
    return early_exit(target, source.layers)


# -----------------------------------------------------------------------------
# α, c and speedup against L


@dataclass(frozen=True)
class EarlyExitPoint:
    """One early-exit depth L on one prompt (L = the target's depth: the target drafting for itself)."""

    layers: int
    alpha: float  # accepted / judged drafts
    c: float  # one draft step / one target step, timed here
    tokens_per_pass: float
    speedup: float  # measured over the steady rounds, against a warmed target-only run
    predicted: float  # theory.expected_speedup(alpha, k, c)


@dataclass(frozen=True)
class EarlyExitSweep:
    n_layers: int  # the target's depth
    k: int
    temperature: float
    points: tuple[EarlyExitPoint, ...]


def default_layers(n: int, count: int = 5) -> list[int]:
    """`count` depths spread over 1..n, ending with n (the target itself)."""
    return sorted({max(1, round(n * (i + 1) / count)) for i in range(count)})


def draft_at(target, layers: int):
    """The early-exit draft with `layers` layers, or the target itself at its full depth."""
    return target if layers == num_layers(target) else early_exit(target, layers)


def early_exit_sweep(target, input_ids: Sequence[int], layers: Sequence[int], *, k: int = 4,
                     temperature: float = 0.0, max_new_tokens: int = 24, seed: int = 0, eos_token_id=None,
                     vocab: int | None = None, cost_reps: int = 5,
                     progress: Callable[[str, float | None], None] | None = None) -> EarlyExitSweep:
    """For each L: a speculative run with the first L layers as the draft against a warmed
    target-only run (experiments.compare_with_baseline), and c timed (experiments.draft_cost_ratio)."""
    from . import theory
    from .experiments import compare_with_baseline, draft_cost_ratio

    n = num_layers(target)
    ls = sorted({int(x) for x in layers})
    if not ls:
        raise InvalidSetting("Pick at least one early-exit depth L.")
    points = []
    for j, L in enumerate(ls):
        if progress is not None:
            progress(f"L = {L} of {n} layers: baseline, speculative run and c ({j + 1}/{len(ls)})", j / len(ls))
        draft = draft_at(target, L)
        cmp = compare_with_baseline(target, draft, list(input_ids), k=k, temperature=temperature,
                                    max_new_tokens=max_new_tokens, seed=seed, eos_token_id=eos_token_id, vocab=vocab)
        c = draft_cost_ratio(target, draft, reps=cost_reps)
        a = cmp.spec.alpha
        pred = theory.expected_speedup(a, k, c) if a == a else float("nan")  # nan when nothing was judged
        speedup = measure.steady_speedup(cmp.spec, cmp.base)
        points.append(EarlyExitPoint(L, a, c, cmp.spec.tokens_per_pass, speedup, float(pred)))
    if progress is not None:
        progress("done", 1.0)
    return EarlyExitSweep(n, int(k), float(temperature), tuple(points))


def fig_early_exit(sweep: EarlyExitSweep) -> go.Figure:
    """α and c (left axis) and the speedup, measured and predicted (right axis), against L."""
    title = "Early exit: draft quality against draft cost"
    if not sweep.points:
        return charts._empty(title, "No depths measured yet.")
    xs = [pt.layers for pt in sweep.points]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(template=charts.TEMPLATE, meta={"n_layers": sweep.n_layers, "k": sweep.k})
    charts.set_title(fig, title, f"draft = the target's first L of {sweep.n_layers} layers (L = {sweep.n_layers}: "
                                 f"the target itself) · k = {sweep.k}, T = {sweep.temperature:g}")
    for name, ys, col, sym in (("α (drafts accepted)", [pt.alpha for pt in sweep.points], charts.R_COLOR, "circle"),
                               ("c (draft step / target step)", [pt.c for pt in sweep.points], charts.Q_COLOR,
                                "square")):
        fig.add_scatter(x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=col, width=3),
                        marker=dict(symbol=sym, size=11), secondary_y=False,
                        hovertemplate=f"L = %{{x}}<br>{name} = %{{y:.3f}}<extra></extra>")
    fig.add_scatter(x=xs, y=[pt.speedup for pt in sweep.points], name="speedup, measured", mode="lines+markers",
                    line=dict(color=charts.MEASURED_COLOR, width=3), marker=dict(symbol="diamond", size=12),
                    secondary_y=True, hovertemplate="L = %{x}<br>measured %{y:.2f}×<extra></extra>")
    fig.add_scatter(x=xs, y=[pt.predicted for pt in sweep.points], name="speedup, predicted from α and c",
                    mode="lines", line=dict(color=charts.GREY, width=2, dash="dash"), secondary_y=True,
                    hovertemplate="L = %{x}<br>predicted %{y:.2f}×<extra></extra>")
    fig.add_hline(y=1.0, line=dict(color=charts.GREY, width=1, dash="dot"), secondary_y=True)
    fig.update_xaxes(title_text="early-exit depth L (layers the draft runs)", dtick=1 if max(xs) <= 16 else None)
    fig.update_yaxes(title_text="α and c", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="speedup (×, target alone = 1)", rangemode="tozero", secondary_y=True,
                     showgrid=False)
    return fig


def early_exit_rows(sweep: EarlyExitSweep) -> list[dict]:
    return [{"L": pt.layers, "α": round(pt.alpha, 3), "c": round(pt.c, 3), "tokens / pass": round(pt.tokens_per_pass, 2),
             "speedup (measured)": round(pt.speedup, 2), "speedup (predicted)": round(pt.predicted, 2)}
            for pt in sweep.points]
