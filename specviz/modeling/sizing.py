"""What each part of a draft/target pair holds in memory, and what a load of it needs, before anything loads.

A part is a loaded model keyed by what it is (pair_parts), so a part two loaded pairs share is counted once.
A configuration holds the pair and, while a draft in another precision is made, its copy in `dtype` too
(config_parts); a load needs room beyond that for a moment (loading_bytes). estimate_memory_bytes is the peak,
and check_memory refuses a pair that will not fit the memory budget (memory.read_budget). The sizes come from
the registry and the weight files alone (guess_params): no weights are read.

Public API: guess_params, pair_parts, config_parts, draft_loads_direct, loading_bytes, estimate_memory_bytes,
check_memory.
"""

from __future__ import annotations

import json

import torch

from specviz.core.errors import NotEnoughMemory
from specviz.modeling import memory, quant
from specviz.modeling.config import DerivedSource, HubSource, ModelSpec, PairSpec, PathSource, TinySource, tiny_params
from specviz.modeling.store import hub_snapshot, int8_cached


def guess_params(m: ModelSpec) -> int:
    """Parameter count from the yaml, else from weight file sizes (0 if unknown); a tiny model's from its shape
    (its declared count may say less than the layers it asks for)."""
    src = m.source
    if isinstance(src, TinySource):
        return max(m.params, tiny_params(src))
    if m.params:
        return m.params
    folder = src.path if isinstance(src, PathSource) else hub_snapshot(src.hub) if isinstance(src, HubSource) else None
    if folder is None or not folder.is_dir():
        return 0
    files = list(folder.glob("*.safetensors")) or list(folder.glob("pytorch_model*.bin"))
    nbytes = sum(f.stat().st_size for f in files)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        stored = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32")
    except (OSError, ValueError):
        stored = "float32"
    return nbytes // (2 if ("16" in stored) else 4)


def pair_parts(spec: PairSpec, dtype: torch.dtype | str, draft_precision: str | None = None,
               device: str = "cpu", with_target: bool = True, target_precision: str | None = None) -> dict[tuple, int]:
    """The bytes each loaded part of a pair holds (memory.held_bytes), keyed by what the part is, so a part
    two loaded pairs share (one target under two draft precisions, or two pairs) is counted once:
    ('target', model, dtype, device) and ('draft', pair, dtype, draft precision, device). A draft made of the
    target's own layers has no part of its own. draft_precision None: the draft in `dtype`.

    target_precision int8 (None: float32): the target is counted as an int8 draft is (memory.BYTES_PER_PARAM),
    and both keys end with 'int8 target': a pair loaded with it holds a target and a draft of its own. A model
    loaded from its int8 copy (int8_cached) holds its embedding at its GGUF's bits (_embedding_bytes)."""
    dt = quant.dtype_name(dtype)
    precision = draft_precision or dt
    t_precision = target_precision or "float32"
    tail = () if t_precision == "float32" else (f"{t_precision} target",)
    parts = {}
    if with_target:
        t = dt if t_precision == "float32" else t_precision
        parts[("target", spec.target.name, dt, device, *tail)] = memory.held_bytes(
            guess_params(spec.target), t, _embedding_bytes(spec.target, t, dt))
    if not isinstance(spec.draft.source, DerivedSource) and spec.draft.name != spec.target.name:
        parts[("draft", spec.name, dt, precision, device, *tail)] = memory.held_bytes(
            guess_params(spec.draft), precision, _embedding_bytes(spec.draft, precision, dt))
    return parts


def _embedding_bytes(m: ModelSpec, precision: str, dtype: torch.dtype | str) -> float | None:
    """Bytes a weight of m's embedding holds when m loads from its int8 copy (int8_cached), which keeps it in the
    GGUF's own blocks: the GGUF's bytes a weight on average (its size over its parameters; its embedding's
    own type is read only at conversion). None: it loads otherwise, its embedding in float32."""
    if not int8_cached(m, precision, dtype):
        return None
    return m.source.size / max(guess_params(m), 1)


def config_parts(spec: PairSpec, dtype: torch.dtype | str, draft_precision: str | None = None,
                 device: str = "cpu", target_precision: str | None = None) -> dict[tuple, int]:
    """The parts a configuration holds while it is made: the pair in `dtype` (its target in target_precision),
    and, for another draft precision, the draft's copy in it as well (made from the dtype draft, which can be
    unloaded later). A draft that loads straight in its precision (draft_loads_direct) has no dtype copy."""
    if draft_loads_direct(spec, dtype, draft_precision):
        return pair_parts(spec, dtype, draft_precision, device, target_precision=target_precision)
    return {**pair_parts(spec, dtype, None, device, target_precision=target_precision),
            **pair_parts(spec, dtype, draft_precision, device, target_precision=target_precision)}


def draft_loads_direct(spec: PairSpec, dtype: torch.dtype | str, draft_precision: str | None) -> bool:
    """Does the pair's draft load straight in draft_precision (from its int8 copy: int8_cached), with no copy in
    `dtype` to make it from? Then a configuration holds no dtype draft, and no dtype pair is loaded first."""
    return (draft_precision is not None and not isinstance(spec.draft.source, DerivedSource)
            and int8_cached(spec.draft, draft_precision, dtype))


def _quantizing_bytes(params: int, precision: str) -> int:
    """What a model's float32 stage holds beyond its finished copy in `precision` while it is quantized."""
    return max(memory.held_bytes(params, "float32") - memory.held_bytes(params, precision), 0)


def loading_bytes(spec: PairSpec, dtype: torch.dtype | str, draft_precision: str | None = None,
                  target_precision: str | None = None) -> int:
    """Room a load needs for a moment beyond what stays: buffers (memory.LOADING), and, while the draft's copy in
    another precision is made or the target is put into int8, what its float32 stage holds beyond the finished
    copy (each is put into float32, then quantized layer by layer; the two never happen at once). A chunked
    target or draft in int8 loads from its int8 copy, with no float32 stage (int8_cached)."""
    dt = quant.dtype_name(dtype)
    precision = draft_precision or dt
    draft = 0
    if precision != dt and not isinstance(spec.draft.source, DerivedSource) \
            and not draft_loads_direct(spec, dt, precision):
        draft = _quantizing_bytes(guess_params(spec.draft), precision)
    t_precision = target_precision or "float32"
    target = 0 if t_precision == "float32" or int8_cached(spec.target, t_precision) \
        else _quantizing_bytes(guess_params(spec.target), t_precision)
    return memory.LOADING + max(draft, target)


def estimate_memory_bytes(spec: PairSpec, dtype: torch.dtype, with_target: bool = True,
                          draft_precision: str | None = None, target_precision: str | None = None) -> int:
    """Bytes a load of the pair needs at its peak: the target in `dtype` or target_precision (not with
    with_target=False: it is loaded already), the draft in `dtype` (it loads in dtype before it is put into
    draft_precision; not a draft that loads straight in it: draft_loads_direct), the draft's copy in
    draft_precision when that differs, and the room a load needs for a moment (loading_bytes)."""
    parts = config_parts(spec, dtype, draft_precision, target_precision=target_precision)
    if not with_target:
        parts = {k: v for k, v in parts.items() if k[0] != "target"}
    return sum(parts.values()) + loading_bytes(spec, dtype, draft_precision,
                                               target_precision if with_target else None)


def check_memory(spec: PairSpec, dtype: torch.dtype, device: str, with_target: bool = True,
                 draft_precision: str | None = None, env=None, target_precision: str | None = None) -> None:
    """Raise NotEnoughMemory if the pair will not fit in the memory budget (memory.read_budget: SPECVIZ_MEMORY_GB,
    or the available memory and the cgroup limit) on `device`."""
    need = estimate_memory_bytes(spec, dtype, with_target, draft_precision, target_precision)
    budget = memory.read_budget(device=device, env=env)
    if need > budget.bytes:
        name = str(dtype).removeprefix("torch.")
        tip = " or a 16-bit dtype (--dtype bfloat16)" if dtype == torch.float32 else ""
        why = {memory.ENV: " (set by SPECVIZ_MEMORY_GB)", "cgroup limit": " under the container's memory limit"}
        raise NotEnoughMemory(
            f"pair '{spec.name}' needs about {need / memory.GiB:.1f} GiB in {name} on {device}, but only "
            f"{budget.bytes / memory.GiB:.1f} GiB is available{why.get(budget.source, '')}. Close other programs, "
            f"or pick a smaller pair{tip}."
        )
