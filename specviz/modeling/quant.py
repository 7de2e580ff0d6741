"""Draft precision: the draft's weights in float32, bfloat16, float16 (mps), int8 or int4.

The draft's precision never changes what speculative decoding outputs:
greedy output is the target's argmax, and in sampling mode the acceptance
rule min(1, p/q) with the residual norm(max(0, p - q)) is exact for ANY q,
as long as q is the distribution the draft token was actually drawn from
(the engine samples from, and records, the quantized draft's own q).
A cheaper draft lowers c, the cost of a draft step relative to a target
pass; rounding its weights may lower α a little.

    int8  int8 weights (symmetric, one scale per output row) and activations
          quantized per token: PyTorch's dynamic int8 linear, on the quantized engine
          this build has (int8_engine): x86/fbgemm on x86 CPUs (8-bit activations with
          VNNI, else 7), else qnnpack (ARM: Apple Silicon, Linux on ARM)
    int4  weight-only, groups of 32 along the input, through torchao's
          Int4WeightOnlyQuantizer (ATen's _weight_int4pack_mm_for_cpu)

Both quantize a float32 draft at load, in place, in a few seconds; the input
embedding stays as it is (a lookup reads one row, not the matrix).

Target precision: float32 (the reference) or int8. The target's precision DOES
decide the output, so speculative text must equal the same target's alone: a
verify pass scores k+1 rows in one call where the target alone scores 1, and
each row's result must not depend on the others in its call. ExactInt8Linear
gives that: each row is quantized on its own range onto fixed qparams, the
int8 x int8 products are summed exactly in int32, and the rescale is per element.
bfloat16 is refused as an exact target (its k+1-row pass rounds differently).

The float dtypes a model runs in are named here too: dtypes(device) lists those that run on a device,
parse_dtype reads a dtype setting ('bf16', torch.bfloat16) and dtype_name names it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from typing import Any

import torch
from torch import nn

from specviz.core.errors import InvalidSetting

PRECISIONS = ("float32", "bfloat16", "float16", "int8", "int4")
TARGET_PRECISIONS = ("float32", "int8")  # exact targets: a row's result does not depend on its call's other rows
# On Apple's GPU (mps) a draft is float32 or float16, or bfloat16 from macOS 14 (dtypes): the int8 and
# int4 kernels used here are CPU kernels, and mps runs no dynamic int8 quantization.
INT4_GROUP = 32
INT4_ROWS = 16  # ATen's int4 packing takes output rows 16 at a time


# PyTorch's quantized engines with a dynamic int8 linear, the preferred first: x86 (fbgemm's kernels
# on x86 CPUs), fbgemm itself, then qnnpack, the one ARM builds (Apple Silicon, Linux on ARM) have.
INT8_ENGINES = ("x86", "fbgemm", "qnnpack")


def int8_engine() -> str | None:
    """The quantized engine an int8 draft is packed for: the engine in force when it is one of
    INT8_ENGINES (so torch.backends.quantized.engine = 'qnnpack' chooses qnnpack), else the first
    of them this PyTorch build has; None where it has none (int8 is then not offered)."""
    have = torch.backends.quantized.supported_engines
    now = torch.backends.quantized.engine
    if now in INT8_ENGINES and now in have:
        return now
    return next((e for e in INT8_ENGINES if e in have), None)


@contextlib.contextmanager
def _engine(name: str):
    """Within the block, PyTorch's quantized engine is `name` (packing reads it); afterwards as before."""
    was = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = was


def supported(device: str) -> tuple[str, ...]:
    """The draft precisions that run on `device` ('cpu', 'cuda', 'cuda:0', 'mps')."""
    if device.startswith("cpu"):
        ok = ["float32", "bfloat16"]
        if int8_engine() is not None:
            ok.append("int8")
        if hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and _torchao_int4() is not None:
            ok.append("int4")
        return tuple(ok)
    if device.startswith("mps"):
        return dtypes(device)
    return ("float32", "bfloat16")


def mps_has_bfloat16() -> bool:
    """bfloat16 on Apple's GPU (mps) needs macOS 14 or newer (PyTorch's own check)."""
    try:
        return bool(torch.backends.mps.is_macos_or_newer(14, 0))
    except (AttributeError, RuntimeError):
        return False


def dtypes(device: str) -> tuple[str, ...]:
    """The float dtypes a model (a target, a float draft) runs in on `device`. None has float64; on mps
    (Apple's GPU): float32, float16, and bfloat16 from macOS 14."""
    if device.startswith("mps"):
        return ("float32", "float16") + (("bfloat16",) if mps_has_bfloat16() else ())
    return ("float32", "bfloat16", "float16")


DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}  # fmt: skip


def parse_dtype(value: Any, what: str = "dtype") -> torch.dtype:
    """'float32' | 'bfloat16' | 'float16' (or a torch.dtype) -> torch.dtype."""
    if isinstance(value, torch.dtype):
        if value in DTYPES.values():
            return value
    elif isinstance(value, str) and value.strip().lower() in DTYPES:
        return DTYPES[value.strip().lower()]
    raise InvalidSetting(f"{what}: {value!r} is not one of float32, bfloat16, float16")


def dtype_name(dtype: Any) -> str:
    """'float32' | 'bfloat16' | 'float16' for a torch.dtype or any name parse_dtype takes ('bf16')."""
    return str(parse_dtype(dtype)).removeprefix("torch.")


def default_precision(device: str) -> str:
    """The draft precision that gave the best measured speedup on this kind of device (docs/precision.md);
    on mps, where none was measured, the cheapest one it runs."""
    if device.startswith("mps"):
        return "float16"
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
# activations agree with the float draft far more often on hard text.
REDUCE_RANGE = not _has_vnni()


def _quantize(w: torch.Tensor) -> torch.Tensor:
    """A float weight (N, K) as a per-channel qint8 tensor: symmetric, one scale per output row."""
    w = w.detach().float()
    scale = (w.abs().amax(dim=1).clamp(min=1e-12) / 127.0).double()  # (N,)
    zero = torch.zeros(w.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # quantized tensors are deprecated; the fbgemm kernel is the fast one
        warnings.simplefilter("ignore")
        return torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)


def _row_sums(qw: torch.Tensor) -> torch.Tensor:
    return qw.dequantize().sum(dim=1)


def int8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(int8 weights (N, K), float64 scales (N,), float32 row sums (N,)) of a float weight, exactly as an
    Int8Linear quantizes it. Each row is quantized on its own, so a block of rows gives those rows' values."""
    qw = _quantize(w)
    return qw.int_repr(), qw.q_per_channel_scales(), _row_sums(qw)


class Int8Linear(nn.Module):
    """y ≈ x @ W^T + b with W in int8 (one scale per output row) and x quantized to int8 per token.

    PyTorch's dynamic int8 linear, packed for `engine` (default int8_engine(); the packed weight
    keeps its engine's kernel whatever the engine in force later): the activations are quantized
    on the fly, the product is computed in int8 and rescaled to float32. Reads a quarter of the
    float32 weight bytes.
    """

    def __init__(self, linear: nn.Linear, engine: str | None = None):
        super().__init__()
        self.engine = engine or int8_engine()
        if self.engine is None:
            raise InvalidSetting("draft precision int8 needs a quantized engine (fbgemm or qnnpack); "
                                 "this PyTorch build has none.")
        bias = None if linear.bias is None else linear.bias.detach().float()
        self._set(_quantize(linear.weight), bias)

    @classmethod
    def from_int8(cls, q: torch.Tensor, scale: torch.Tensor, row_sums: torch.Tensor, bias: torch.Tensor | None,
                  engine: str | None = None) -> "Int8Linear":
        """The layer from what int8_weight gave (an int8 cache holds it): the same packed weights, so the same
        outputs as a layer quantized from the float weight here; no float weight is made."""
        out = cls.__new__(cls)
        nn.Module.__init__(out)
        out.engine = engine or int8_engine()
        if out.engine is None:
            raise InvalidSetting("precision int8 needs a quantized engine (fbgemm or qnnpack); "
                                 "this PyTorch build has none.")
        zero = torch.zeros(q.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated; the fbgemm kernel is the fast one
            warnings.simplefilter("ignore")
            qw = torch._make_per_channel_quantized_tensor(q, scale.double(), zero, 0)  # (N, K)
        out._set(qw, bias, row_sums)
        return out

    def _set(self, qw: torch.Tensor, bias: torch.Tensor | None, row_sums: torch.Tensor | None = None) -> None:
        with warnings.catch_warnings(), _engine(self.engine):
            warnings.simplefilter("ignore")
            self._packed = torch.ops.quantized.linear_prepack(qw, bias)
        # qnnpack quantizes activations to 8 bits asymmetrically: a reduced range would only cost a bit
        self._reduce = REDUCE_RANGE and self.engine != "qnnpack"
        self._bias = bias
        # (N,) W 1, for rows shifted to centre on zero
        self._row_sums = _row_sums(qw) if row_sums is None else row_sums
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
        out.engine = self.engine
        out._set(sub, None if bias is None else bias[ids].clone())
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (T, K)
        if rows.shape[0] == 1:  # a draft step: the kernel's one scale is this token's own
            y = torch.ops.quantized.linear_dynamic(rows, self._packed, self._reduce)  # (1, N)
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
        y = torch.ops.quantized.linear_dynamic((rows - mid) / half, self._packed, self._reduce)  # (T, N): x' W^T + b
        if self._bias is not None:
            y = y - self._bias
        y = y * half + mid * self._row_sums  # (T, N): x W^T
        return y if self._bias is None else y + self._bias  # the bias once, unscaled


class ExactInt8Linear(Int8Linear):
    """Int8Linear for a target: every call, of any row count, takes the per-row path with fixed qparams.

    Each row is mapped onto [-1, 1] with its own exact -1 and +1 in it, so fbgemm's one activation
    scale (chosen from the whole call's min and max) is always 2/255 with zero point 128: the
    quantized row, its int32 sums and its rescaled output are the same whatever rows share the call.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (T, K)
        return self._per_row(rows).view(*x.shape[:-1], self.out_features).to(x.dtype)

    def _per_row(self, rows: torch.Tensor) -> torch.Tensor:
        lo, hi = rows.aminmax(dim=1, keepdim=True)  # (T, 1) each
        mid, half = (hi + lo) / 2, ((hi - lo) / 2).clamp(min=1e-12)  # (T, 1)
        unit = ((rows - mid) / half).clamp_(-1.0, 1.0)  # (T, K): this row alone sets its range
        # the row's own ends become exactly -1 and +1 (a rounding step at most), so every call spans
        # [-1, 1] exactly; a constant row (one index for both) gets its -1 on the next column
        top = rows.argmax(dim=1, keepdim=True)  # (T, 1)
        bottom = rows.argmin(dim=1, keepdim=True)
        bottom = torch.where(bottom == top, (top + 1) % rows.shape[1], bottom)
        unit.scatter_(1, top, 1.0).scatter_(1, bottom, -1.0)
        y = torch.ops.quantized.linear_dynamic(unit, self._packed, REDUCE_RANGE)  # (T, N): x' W^T + b
        if self._bias is not None:
            y = y - self._bias
        y = y * half + mid * self._row_sums  # (T, N): x W^T
        return y if self._bias is None else y + self._bias


def check_target(precision: str | None, device: str) -> str:
    """A valid target precision for `device` (None: float32); InvalidSetting otherwise."""
    if precision is None or precision == "auto":
        return "float32"
    if precision == "bfloat16":
        raise InvalidSetting("target precision bfloat16 is not offered: the target's verify pass of k+1 tokens "
                             "rounds differently from its one-token steps in bfloat16, so speculative text could "
                             "differ from the target alone. Choose float32 (the reference) or int8.")
    if precision not in TARGET_PRECISIONS:
        raise InvalidSetting(f"target precision must be one of {', '.join(TARGET_PRECISIONS)}; got {precision!r}.")
    if precision == "int8" and "int8" not in supported(device):
        raise InvalidSetting(f"target precision int8 does not run on {device} here (it needs a CPU with "
                             f"PyTorch's fbgemm); choose float32.")
    return precision


def apply_target(model: nn.Module, precision: str) -> nn.Module:
    """Put a float32 target into an exact `precision` (float32 or int8), in place; returns the model."""
    precision = check_target(precision, str(next(model.parameters()).device))
    model.config.specviz_precision = precision
    if precision == "float32":
        return model.to(torch.float32)
    _unfast(model)
    _swap_linears(model.to(torch.float32), ExactInt8Linear)
    return mark_int8(model, target=True)


def mark_int8(model: nn.Module, target: bool, engine: str | None = None) -> nn.Module:
    """Record that `model`'s linears are int8 (a target's exact ones, or a draft's packed for `engine`); a
    target also attends row by row. apply_target and apply call it, and so does a load from an int8 cache."""
    model.config.specviz_precision = "int8"
    if not target:
        model.config.specviz_int8_engine = engine
        return model
    from specviz.modeling import rowattn

    rowattn.enable(model)  # stock attention's bits depend on the call's row count; int8 would magnify that
    return model


@functools.cache
def _torchao_int4():
    """torchao's int4 quantizer, imported once (quietly: specviz.core.quiet); None where torchao is missing
    or does not load."""
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
    if precision in ("bfloat16", "float16"):
        _unfast(model)
        return model.to(getattr(torch, precision))
    if next(model.parameters()).device.type != "cpu":
        raise InvalidSetting(f"draft precision {precision} runs on a CPU only here.")
    _unfast(model)
    model.to(torch.float32)
    if precision == "int8":
        engine = int8_engine()
        if engine is None:
            raise InvalidSetting("draft precision int8 needs a quantized engine (fbgemm or qnnpack); "
                                 "this PyTorch build has none.")
        _swap_linears(model, lambda lin: Int8Linear(lin, engine))
        return mark_int8(model, target=False, engine=engine)
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


def engine_of(model: nn.Module) -> str | None:
    """The quantized engine an int8 model's layers were packed for ('x86', 'fbgemm', 'qnnpack'); else None."""
    return getattr(model.config, "specviz_int8_engine", None) if precision_of(model) == "int8" else None


def precision_label(model: nn.Module) -> str:
    """The precision as the app shows it: 'int8 (qnnpack)' names the int8 engine; others as precision_of."""
    engine = engine_of(model)
    return precision_of(model) + (f" ({engine})" if engine else "")


