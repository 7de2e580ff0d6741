"""Draft precision: the draft's weights in float32, bfloat16, int8 or int4.

The draft's precision never changes what speculative decoding outputs:
greedy output is the target's argmax, and in sampling mode the acceptance
rule min(1, p/q) with the residual norm(max(0, p - q)) is exact for ANY q,
as long as q is the distribution the draft token was actually drawn from
(the engine samples from, and records, the quantized draft's own q).
A cheaper draft lowers c, the cost of a draft step relative to a target
pass; rounding its weights may lower α a little.

    int8  int8 weights (symmetric, one scale per output row) and activations
          quantized per token (8 bits with VNNI, else 7): fbgemm's dynamic int8 linear
    int4  weight-only, groups of 32 along the input, through torchao's
          Int4WeightOnlyQuantizer (ATen's _weight_int4pack_mm_for_cpu)

Both quantize a float32 draft at load, in place, in a few seconds; the input
embedding stays as it is (a lookup reads one row, not the matrix).
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import torch
from torch import nn

from specviz.core.errors import InvalidSetting

PRECISIONS = ("float32", "bfloat16", "int8", "int4")
INT4_GROUP = 32
INT4_ROWS = 16  # ATen's int4 packing takes output rows 16 at a time
_CPU_ONLY = ("int8", "int4")


def supported(device: str) -> tuple[str, ...]:
    """The draft precisions that run on `device` ('cpu', 'cuda', 'cuda:0')."""
    if device.startswith("cpu"):
        ok = ["float32", "bfloat16"]
        if "fbgemm" in torch.backends.quantized.supported_engines:
            ok.append("int8")
        if hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and _torchao_int4() is not None:
            ok.append("int4")
        return tuple(ok)
    return tuple(p for p in PRECISIONS if p not in _CPU_ONLY)


def default_precision(device: str) -> str:
    """The draft precision that gave the best measured speedup on this kind of device (README Performance)."""
    return "int8" if device.startswith("cpu") else "bfloat16"


def check(precision: str | None, device: str) -> str:
    """A valid precision for `device` (None or 'auto': the default); InvalidSetting otherwise."""
    if precision is None or precision == "auto":
        return default_precision(device)
    if precision not in PRECISIONS:
        raise InvalidSetting(f"draft precision must be one of auto, {', '.join(PRECISIONS)}; got {precision!r}.")
    if precision not in supported(device):
        raise InvalidSetting(f"draft precision {precision} does not run on {device} here; "
                             f"choose one of {', '.join(supported(device))}.")
    return precision


def _has_vnni() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


# Activations in 8 bits where the CPU has VNNI (int32 accumulation cannot overflow); 7 bits elsewhere,
# where fbgemm's int16 pair sums could. The 7th bit matters for α: on the default pair, 8-bit
# activations agree with the float draft far more often on hard text (README, draft precision).
REDUCE_RANGE = not _has_vnni()


class Int8Linear(nn.Module):
    """y ≈ x @ W^T + b with W in int8 (one scale per output row) and x quantized to int8 per token.

    fbgemm's dynamic int8 linear: the activations are quantized on the fly, the product is
    computed in int8 and rescaled to float32. Reads a quarter of the float32 weight bytes.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()  # (N, K)
        scale = (w.abs().amax(dim=1).clamp(min=1e-12) / 127.0).double()  # (N,) symmetric, per output row
        zero = torch.zeros(w.shape[0], dtype=torch.long)
        bias = None if linear.bias is None else linear.bias.detach().float()
        with warnings.catch_warnings():  # quantized tensors are deprecated; the fbgemm kernel is the fast one
            warnings.simplefilter("ignore")
            qw = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
        self._set(qw, bias)

    def _set(self, qw: torch.Tensor, bias: torch.Tensor | None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._packed = torch.ops.quantized.linear_prepack(qw, bias)
        self._bias = bias
        self._row_sums = qw.dequantize().sum(dim=1)  # (N,) W 1, for rows shifted to centre on zero
        self.out_features, self.in_features = qw.shape
        self.weight_nbytes = qw.numel() + qw.shape[0] * 4 + (0 if bias is None else bias.numel() * 4)

    def rows(self, ids: torch.Tensor) -> "Int8Linear":
        """An Int8Linear over the output rows `ids`: the same int8 weights and scales, so the same logits."""
        if getattr(self, "_unpacked", None) is None:  # once: the int8 weights, scales and zero points
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                qw, bias = torch.ops.quantized.linear_unpack(self._packed)  # (N, K) per-channel qint8
            self._unpacked = (qw.int_repr(), qw.q_per_channel_scales(), qw.q_per_channel_zero_points(), bias)
        q, scales, zeros, bias = self._unpacked
        sub = torch._make_per_channel_quantized_tensor(q[ids], scales[ids], zeros[ids], 0)  # (n, K)
        out = Int8Linear.__new__(Int8Linear)
        nn.Module.__init__(out)
        out._set(sub, None if bias is None else bias[ids].clone())
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (T, K)
        if rows.shape[0] == 1:  # a draft step: the kernel's one scale is this token's own
            y = torch.ops.quantized.linear_dynamic(rows, self._packed, REDUCE_RANGE)  # (1, N)
        else:
            y = self._per_row(rows)  # (T, N)
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def _per_row(self, rows: torch.Tensor) -> torch.Tensor:
        """Several rows (the prompt), each quantized on its own range, in one kernel call.

        The kernel takes one activation scale per call. A prompt's first token carries activations
        hundreds of times larger than the others', so one scale for all would leave the rest a few
        levels and spoil the prompt's cache for the whole run. Each row is first mapped onto [-1, 1]
        (x = mid + half * x'), so every row gets all 256 levels as a one-token step does; then
        x W^T = half * (x' W^T) + mid * (W 1), with W the int8 weights.
        """
        lo, hi = rows.amin(dim=1, keepdim=True), rows.amax(dim=1, keepdim=True)  # (T, 1)
        mid, half = (hi + lo) / 2, ((hi - lo) / 2).clamp(min=1e-12)  # (T, 1)
        y = torch.ops.quantized.linear_dynamic((rows - mid) / half, self._packed, REDUCE_RANGE)  # (T, N): x' W^T + b
        if self._bias is not None:
            y = y - self._bias
        y = y * half + mid * self._row_sums  # (T, N): x W^T
        return y if self._bias is None else y + self._bias  # the bias once, unscaled


def _torchao_int4():
    try:
        from torchao.quantization.linear_quant_modules import Int4WeightOnlyQuantizer
    except Exception:  # noqa: BLE001 — torchao missing or built for another torch: int4 is then unavailable
        return None
    return Int4WeightOnlyQuantizer


@contextlib.contextmanager
def _quiet_root_log():
    was = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(was)


def _swap_linears(model: nn.Module, make) -> None:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, make(child))


def _unfast(model: nn.Module) -> None:
    from specviz.modeling import fastlinear

    fastlinear.disable(model)


def _check_int4_shapes(model: nn.Module) -> None:
    """InvalidSetting naming the first layer torchao's int4 packing cannot take (it would fail half way).

    It packs the Linears without a bias: their inputs in whole groups of INT4_GROUP, their outputs
    (rows) in multiples of INT4_ROWS.
    """
    for name, m in model.named_modules():
        packed = isinstance(m, nn.Linear) and m.bias is None
        if packed and (m.out_features % INT4_ROWS or m.in_features % INT4_GROUP):
            raise InvalidSetting(
                f"draft precision int4 needs layers of a multiple of {INT4_ROWS} rows and of "
                f"{INT4_GROUP} inputs; {name} has {m.out_features} rows and {m.in_features} inputs. "
                f"Choose int8 or bfloat16 for this draft.")


def apply(model: nn.Module, precision: str) -> nn.Module:
    """Put a float32 or bfloat16 draft into `precision`, in place; returns the model."""
    if precision == "int4":
        _check_int4_shapes(model)  # before the model is changed
    model.config.specviz_precision = precision
    if precision == "float32":
        return model.to(torch.float32)
    if precision == "bfloat16":
        _unfast(model)
        return model.to(torch.bfloat16)
    if next(model.parameters()).device.type != "cpu":
        raise InvalidSetting(f"draft precision {precision} runs on a CPU only here.")
    _unfast(model)
    model.to(torch.float32)
    if precision == "int8":
        _swap_linears(model, Int8Linear)
        return model
    if precision == "int4":
        quantizer = _torchao_int4()
        if quantizer is None:
            raise InvalidSetting("draft precision int4 needs torchao (pip install -r requirements.txt).")
        # Linears with a bias (Qwen2's q/k/v projections) stay float32: the quantizer skips them.
        # It logs a warning per padded layer on the root logger; the padding is expected.
        with _quiet_root_log():
            return quantizer(groupsize=INT4_GROUP, device=torch.device("cpu"),
                             precision=torch.float32).quantize(model)
    raise InvalidSetting(f"unknown draft precision {precision!r}")


def precision_of(model: nn.Module) -> str:
    """The precision apply() gave the model, else its parameters' dtype."""
    p = getattr(model.config, "specviz_precision", None)
    return p or str(next(model.parameters()).dtype).replace("torch.", "")


