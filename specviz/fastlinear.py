"""Opt-in: float32 nn.Linear on CPU through oneDNN instead of MKL ("fp32-fast").

Why: a float32 nn.Linear on CPU calls MKL's sgemm. MKL_VERBOSE shows the same
SGEMM call for one row (one token) and for 2..8 rows, but the multi-row calls
stream the weights far slower ("the fp32 2-token cliff"), so a float32 verify
pass costs about two plain steps and speculation barely pays.

oneDNN's matmul (torch.ops.mkldnn._linear_pointwise on the plain row-major
weight; ONEDNN_VERBOSE shows brg_matmul kernels) reads the weights once for any
small row count: a k-token pass costs little more than a 1-token one, and a
long prompt is read faster too. README, Precision, has the timings.

`enable(model)` routes every float32 CPU nn.Linear through it. Nothing is
copied or re-packed (a re-packed blocked layout was flatter over 1..8 rows but
slower for one row, and needs a second weight format): the Linear keeps its
own weight, memory is unchanged, and `disable(model)` restores the stock
forward. Results differ from stock only by float rounding (another summation
order; README, Precision).
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F
from torch import nn

MIN_ROWS = 1  # oneDNN beat MKL for every size measured: 1 row (one token) up to 256 (a long prompt)
MAX_ROWS = None  # no upper limit
_FLAG = "_specviz_fastlinear"


def available() -> bool:
    """True if this PyTorch build has oneDNN (mkldnn) and its linear op."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = self.weight
    rows = x.numel() // x.shape[-1] if x.dim() else 0
    hi = self._specviz_max_rows
    if (self._specviz_min_rows <= rows and (hi is None or rows <= hi) and x.dtype == torch.float32 and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), w, self.bias, "none", [], "")
        return y.view(*x.shape[:-1], w.shape[0])
    return F.linear(x, w, self.bias)


def enable(model: nn.Module, max_rows: int | None = MAX_ROWS, min_rows: int = MIN_ROWS) -> nn.Module:
    """Route float32 CPU nn.Linear layers of `model` with min_rows..max_rows input rows through oneDNN.

    In place (returns the same model); memory-neutral; undo with disable(model).
    A model with no such layers, or a PyTorch without oneDNN, is left as it is.
    """
    if not available():
        return model
    for mod in model.modules():
        if (isinstance(mod, nn.Linear) and mod.weight.dtype == torch.float32 and mod.weight.device.type == "cpu"
                and not getattr(mod, _FLAG, False)):
            mod.forward = types.MethodType(_forward, mod)
            mod._specviz_max_rows = None if max_rows is None else int(max_rows)
            mod._specviz_min_rows = int(min_rows)
            setattr(mod, _FLAG, True)
    return model


def disable(model: nn.Module) -> nn.Module:
    """Undo enable(): every Linear gets its stock forward back."""
    for mod in model.modules():
        if getattr(mod, _FLAG, False):
            del mod.forward
            del mod._specviz_max_rows
            del mod._specviz_min_rows
            delattr(mod, _FLAG)
    return model


def is_enabled(model: nn.Module) -> bool:
    return any(getattr(m, _FLAG, False) for m in model.modules())


@contextlib.contextmanager
def stock(*models: nn.Module):
    """Within the block, the models' Linears use PyTorch's stock forward; afterwards as before."""
    was = [_rows(m) for m in models]  # (min_rows, max_rows) where enabled, else None
    for m, rows in zip(models, was):
        if rows is not None:
            disable(m)
    try:
        yield
    finally:
        for m, rows in zip(models, was):
            if rows is not None:
                enable(m, min_rows=rows[0], max_rows=rows[1])


def _rows(model: nn.Module) -> tuple[int, int | None] | None:
    for mod in model.modules():
        if getattr(mod, _FLAG, False):
            return mod._specviz_min_rows, mod._specviz_max_rows
    return None
