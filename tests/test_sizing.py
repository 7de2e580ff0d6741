"""What each part of a pair holds in memory, and a load's peak (specviz/modeling/sizing.py): from the registry
and the weight files alone, before anything loads."""

from __future__ import annotations

from pathlib import Path

import torch

from specviz.modeling import config, memory, sizing

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"


def test_memory_estimate_scales_with_dtype():
    spec = config.default_registry().pair()
    fp32 = sizing.estimate_memory_bytes(spec, torch.float32)
    bf16 = sizing.estimate_memory_bytes(spec, torch.bfloat16)
    n = spec.draft.params + spec.target.params
    assert fp32 > n * 4 > bf16 > n * 2


def test_memory_estimate_counts_the_draft_copy_in_its_precision():
    """An int4 draft is made from the dtype one: the configuration holds both, the int4 copy less than the
    float32 one. The default (chunked) draft in int8 loads from its int8 copy: no float32 draft at all."""
    reg = config.default_registry()
    spec = reg.pair()
    parts = sizing.config_parts(spec, "float32", "int4")
    draft_fp32 = spec.draft.params * 4
    assert draft_fp32 / 8 < sum(parts.values()) - sum(sizing.config_parts(spec, "float32").values()) < draft_fp32
    # at the peak the copy passes through float32 (it is quantized layer by layer from a float32 copy)
    peak = sizing.estimate_memory_bytes(spec, torch.float32, draft_precision="int4")
    assert peak - sizing.estimate_memory_bytes(spec, torch.float32) == memory.held_bytes(spec.draft.params, "float32")
    assert len(parts) == 3 and sum(1 for k in parts if k[0] == "target") == 1
    int8 = sizing.config_parts(spec, "float32", "int8")
    assert len(int8) == 2 and not any(k[0] == "draft" and k[3] == "float32" for k in int8)
    assert (sizing.estimate_memory_bytes(spec, torch.float32, draft_precision="int8")
            - sizing.estimate_memory_bytes(spec, torch.float32)
            == memory.held_bytes(spec.draft.params, "int8", spec.draft.source.size / spec.draft.params)
            - memory.held_bytes(spec.draft.params, "float32"))  # its embedding at the GGUF's bits
    assert sizing.pair_parts(reg.pair("qwen2.5-coder-1.5b-self"), "float32") == {
        k: v for k, v in parts.items() if k[0] == "target"}


def test_the_estimator_counts_an_int8_target_as_an_int8_draft_is_counted():
    for spec in (config.load_registry(ROOT / "models.yaml").pair(), config.load_registry(TINY).pair("tiny-random")):
        held = {tp: sum(sizing.config_parts(spec, "float32", target_precision=tp).values())
                for tp in ("float32", "int8")}
        assert held["int8"] < held["float32"]  # what the store charges once it is loaded
        # the load's peak: the target passes through float32 before it is int8, so no more than float32's
        peak = {tp: sizing.estimate_memory_bytes(spec, torch.float32, target_precision=tp) for tp in held}
        assert peak["int8"] <= peak["float32"]
        parts = sizing.pair_parts(spec, "float32", target_precision="int8")
        target = next(v for k, v in parts.items() if k[0] == "target")
        params = sizing.guess_params(spec.target)
        # the draft's rule; a chunked target from its int8 copy holds its embedding at the GGUF's bits
        gguf = spec.target.source.size / params if isinstance(spec.target.source, config.ChunkSource) else None
        assert target == memory.held_bytes(params, "int8", gguf)
        # an int8-target pair holds a target and a draft of its own: no key shared with the float32 pair
        assert not set(parts) & set(sizing.pair_parts(spec, "float32"))
    # a target made from float32 weights passes through float32 while it is put into int8: the peak says so
    spec = config.load_registry(TINY).pair("tiny-random")
    params = sizing.guess_params(spec.target)
    assert (sizing.loading_bytes(spec, "float32", None, "int8") - memory.LOADING
            == memory.held_bytes(params, "float32") - memory.held_bytes(params, "int8"))
    # the default (chunked) target loads from its int8 copy: no float32 stage (store.int8_cached)
    spec = config.load_registry(ROOT / "models.yaml").pair()
    assert sizing.loading_bytes(spec, "float32", None, "int8") == memory.LOADING
