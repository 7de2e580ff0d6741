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

teaching.early_exit measures α, c and the speedup for several L on one prompt;
charts.fig_early_exit draws them (draft quality against draft cost, on one model).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from specviz.core import measure
from specviz.modeling.config import SELF, DerivedSource
from specviz.core.errors import InvalidSetting


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
        raise InvalidSetting(f"early exit: layers must be a whole number from 1 to {n - 1} (the model has {n}), "
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


def draft_at(target, layers: int):
    """The early-exit draft with `layers` layers, or the target itself at its full depth."""
    return target if layers == num_layers(target) else early_exit(target, layers)
