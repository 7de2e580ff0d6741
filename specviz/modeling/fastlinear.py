"""Opt-in: float32 nn.Linear on CPU through oneDNN instead of MKL ("fp32-fast").

Why: a float32 nn.Linear on CPU calls MKL's sgemm. MKL_VERBOSE shows the same
SGEMM call for one row (one token) and for 2..8 rows, but the multi-row calls
stream the weights far slower ("the fp32 2-token cliff"), so a float32 verify
pass costs about two plain steps and speculation barely pays.

oneDNN's matmul (torch.ops.mkldnn._linear_pointwise on the plain row-major
weight; ONEDNN_VERBOSE shows brg_matmul kernels) reads the weights once for any
small row count: a k-token pass costs little more than a 1-token one, and a
long prompt is read faster too. docs/precision.md has the timings.

`enable(model)` routes every float32 CPU nn.Linear through it. The Linear keeps
its own weight, memory is unchanged, and `disable(model)` restores the stock
forward. Where oneDNN is missing or its op fails on this CPU (`available()`),
`enable` changes nothing: the stock nn.Linear, the same text. Results differ from stock only by float
rounding (another summation order).

`enable(model, pack=True)` also re-packs each weight, in place, into oneDNN's
blocked layout, and pads a call of fewer than PAD_ROWS rows to PAD_ROWS zero-
padded rows. On the plain weight oneDNN re-packs on every call of 2+ rows, and
its kernel for 1..4 rows streams the weights slower than the one for 5; packed
and padded, a pass of 1 to 6 tokens costs the same, and less than a plain
1-token pass. The packed weight replaces the plain one
(memory unchanged; `disable` unpacks it exactly; a weight mapped from a file has its pages released from the
resident set once packed: memory.release_file_pages), so only a model whose weights
nothing else reads should be packed: load_pair packs the target, never a draft
that is copied or quantized. A weight shared by two modules (a tied head) is
left plain.
"""

from __future__ import annotations

import contextlib
import functools
import types

import torch
import torch.nn.functional as F
from torch import nn

from specviz.modeling import memory

MIN_ROWS = 1  # oneDNN beat MKL for every size measured: 1 row (one token) up to 256 (a long prompt)
MAX_ROWS = None  # no upper limit
PAD_ROWS = 5  # a packed call of fewer rows is padded to this many
PACK_HINT = 4  # the row count oneDNN is told to expect when it packs a weight
_FLAG = "_specviz_fastlinear"


def available() -> bool:
    """True if this PyTorch build has oneDNN (mkldnn), its linear op, and both run on this CPU.

    Where any is missing (a build without oneDNN, a CPU its kernels do not cover), enable() leaves
    every Linear as PyTorch's stock one: the same output, without the flat verify cost.
    """
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise") \
            and _runs_here()
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def _runs_here() -> bool:
    """Once per process: a small packed and a plain oneDNN linear give the stock linear's numbers."""
    try:
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(8, 16, generator=g), torch.randn(PAD_ROWS, 16, generator=g)  # (out, in), (rows, in)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, PACK_HINT)
        ref = F.linear(x, w)
        return all(torch.allclose(torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], ""), ref,
                                  rtol=1e-4, atol=1e-4) for weight in (w, packed))
    except Exception:  # noqa: BLE001 — any failure of the op means: use the stock linear
        return False


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w, packed = self.weight, w_is_packed(self.weight)
    rows = x.numel() // x.shape[-1] if x.dim() else 0
    hi = self._specviz_max_rows
    in_range = packed or (self._specviz_min_rows <= rows and (hi is None or rows <= hi))
    if (in_range and x.dtype == torch.float32 and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
        x2 = x.reshape(rows, x.shape[-1])  # (rows, in)
        if packed and rows < PAD_ROWS:
            x2 = torch.cat((x2, x2.new_zeros(PAD_ROWS - rows, x2.shape[1])))  # (PAD_ROWS, in): zero rows
        y = torch.ops.mkldnn._linear_pointwise(x2, w, self.bias, "none", [], "")  # (rows or PAD_ROWS, out)
        return y[:rows].view(*x.shape[:-1], w.shape[0])
    return F.linear(x, plain(w), self.bias)  # rare (autograd, another dtype): unpacked


def w_is_packed(w: torch.Tensor) -> bool:
    return w.layout == torch._mkldnn


def plain(w: torch.Tensor) -> torch.Tensor:
    """A weight as an ordinary (out, in) tensor, packed or not (a packed one is unpacked: a copy)."""
    return w.to_dense() if w_is_packed(w) else w


def _shared_weights(model: nn.Module) -> set[int]:
    """ids of parameters that two or more modules hold (a head tied to the embedding)."""
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = seen.get(id(p), 0) + 1
    return {i for i, n in seen.items() if n > 1}


def _set_weight(mod: nn.Linear, w: torch.Tensor) -> None:
    mod.weight = nn.Parameter(w, requires_grad=mod.weight.requires_grad)


def enable(model: nn.Module, max_rows: int | None = MAX_ROWS, min_rows: int = MIN_ROWS,
           pack: bool = False) -> nn.Module:
    """Route float32 CPU nn.Linear layers of `model` with min_rows..max_rows input rows through oneDNN.

    pack: also re-pack each weight that no other module holds into oneDNN's layout, and pad calls
    of fewer than PAD_ROWS rows (every row count then goes through oneDNN).
    In place (returns the same model); memory-neutral; undo with disable(model).
    A model with no such layers, or a PyTorch without oneDNN, is left as it is.
    """
    if not available():
        return model
    shared = _shared_weights(model) if pack else set()
    for mod in model.modules():
        if (isinstance(mod, nn.Linear) and mod.weight.dtype == torch.float32 and mod.weight.device.type == "cpu"
                and not getattr(mod, _FLAG, False)):
            mod.forward = types.MethodType(_forward, mod)
            mod._specviz_max_rows = None if max_rows is None else int(max_rows)
            mod._specviz_min_rows = int(min_rows)
            if pack and id(mod.weight) not in shared:
                plain_w = mod.weight.detach()
                _set_weight(mod, torch.ops.mkldnn._reorder_linear_weight(plain_w, PACK_HINT))
                memory.release_file_pages(plain_w)  # a mapped file's pages, read for the copy, leave the resident set
            setattr(mod, _FLAG, True)
    return model


def disable(model: nn.Module) -> nn.Module:
    """Undo enable(): every Linear gets its stock forward, and its plain weight, back."""
    for mod in model.modules():
        if getattr(mod, _FLAG, False):
            if w_is_packed(mod.weight):
                _set_weight(mod, plain(mod.weight.detach()))  # exact: the same floats, re-ordered
            del mod.forward
            del mod._specviz_max_rows
            del mod._specviz_min_rows
            delattr(mod, _FLAG)
    return model


def is_enabled(model: nn.Module) -> bool:
    return any(getattr(m, _FLAG, False) for m in model.modules())


def is_packed(model: nn.Module) -> bool:
    return any(getattr(m, _FLAG, False) and w_is_packed(m.weight) for m in model.modules())


@contextlib.contextmanager
def stock(*models: nn.Module):
    """Within the block, the models' Linears use PyTorch's stock forward; afterwards as before."""
    was = [_rows(m) for m in models]  # (min_rows, max_rows, packed) where enabled, else None
    for m, rows in zip(models, was):
        if rows is not None:
            disable(m)
    try:
        yield
    finally:
        for m, rows in zip(models, was):
            if rows is not None:
                enable(m, min_rows=rows[0], max_rows=rows[1], pack=rows[2])


def _rows(model: nn.Module) -> tuple[int, int | None, bool] | None:
    for mod in model.modules():
        if getattr(mod, _FLAG, False):
            return mod._specviz_min_rows, mod._specviz_max_rows, is_packed(model)
    return None
