"""The opt-in oneDNN linear path for float32 on a CPU (specviz.modeling.fastlinear)."""

from __future__ import annotations

import pytest
import torch

from specviz import autoregressive_decode, speculative_decode
from specviz.modeling import fastlinear
from specviz.modeling.tiny import tiny_model
from specviz.core.settings import DecodeSettings


# --------------------------------------------------------------------------
# fastlinear


@pytest.fixture()
def fp32_pair():
    return tiny_model(seed=0), tiny_model(seed=0, noise=0.3)


def _linears(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


needs_onednn = pytest.mark.skipif(not fastlinear.available(), reason="this PyTorch has no oneDNN")


@needs_onednn
def test_enable_is_in_place_memory_neutral_and_reversible(fp32_pair):
    target, _ = fp32_pair
    ptrs = [m.weight.data_ptr() for m in _linears(target)]
    x = torch.randint(0, 90, (1, 7))
    with torch.inference_mode():
        ref = target(x).logits
        assert fastlinear.enable(target) is target and fastlinear.is_enabled(target)
        assert [m.weight.data_ptr() for m in _linears(target)] == ptrs  # the same weights, no copy
        fast = target(x).logits
        fastlinear.enable(target)  # twice is harmless
        assert fastlinear.disable(target) is target and not fastlinear.is_enabled(target)
        back = target(x).logits
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-4)  # float rounding only
    assert torch.equal(back, ref)
    assert all("forward" not in vars(m) for m in _linears(target))


@needs_onednn
def test_rows_in_range_go_through_onednn_and_others_do_not(fp32_pair, monkeypatch):
    target, _ = fp32_pair
    fastlinear.enable(target, min_rows=2, max_rows=8)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise

    class Spy:
        def __getattr__(self, name):
            if name == "_linear_pointwise":
                return lambda *a: calls.append(a[0].shape[0]) or real(*a)
            return getattr(torch.ops.mkldnn, name)

    monkeypatch.setattr(fastlinear.torch.ops, "mkldnn", Spy())
    with torch.inference_mode():
        for t in (1, 3, 8, 20):
            calls.clear()
            target(torch.randint(0, 90, (1, t)))
            n_linear = len(_linears(target))
            assert len(calls) == (n_linear if 2 <= t <= 8 else 0), t
    fastlinear.disable(target)
    fastlinear.enable(target)  # the default: every size
    with torch.inference_mode():
        for t in (1, 20):
            calls.clear()
            target(torch.randint(0, 90, (1, t)))
            assert len(calls) == len(_linears(target))
    fastlinear.disable(target)


@needs_onednn
def test_stock_block_runs_the_stock_forward_and_restores_the_fast_one(fp32_pair):
    target, draft = fp32_pair
    x = torch.randint(0, 90, (1, 5))
    with torch.inference_mode():
        ref = target(x).logits
        fastlinear.enable(target, min_rows=2, max_rows=8)
        try:
            with fastlinear.stock(target, draft):  # draft was never enabled: left alone
                assert not fastlinear.is_enabled(target) and not fastlinear.is_enabled(draft)
                assert torch.equal(target(x).logits, ref)
            assert fastlinear.is_enabled(target) and not fastlinear.is_enabled(draft)
            assert {(m._specviz_min_rows, m._specviz_max_rows) for m in _linears(target)} == {(2, 8)}
            with pytest.raises(RuntimeError, match="inside"):
                with fastlinear.stock(target):
                    raise RuntimeError("inside")
            assert fastlinear.is_enabled(target)  # restored after an error too
        finally:
            fastlinear.disable(target)


class _RowSpy:
    """Stands in for torch.ops.mkldnn: records the rows of every oneDNN linear call."""

    def __init__(self):
        self.rows, self._real = [], torch.ops.mkldnn

    def __getattr__(self, name):
        if name == "_linear_pointwise":
            return lambda *a: self.rows.append(a[0].shape[0]) or self._real._linear_pointwise(*a)
        return getattr(self._real, name)


@needs_onednn
def test_pack_repacks_in_place_pads_short_calls_and_unpacks_exactly(fp32_pair, monkeypatch):
    target, _ = fp32_pair
    before = {n: m.weight.clone() for n, m in target.named_modules() if isinstance(m, torch.nn.Linear)}
    x = {t: torch.randint(0, 90, (1, t)) for t in (1, 3, 7)}
    with torch.inference_mode():
        ref = {t: target(ids).logits for t, ids in x.items()}
        fastlinear.enable(target, pack=True)
        assert fastlinear.is_packed(target)
        assert all(fastlinear.w_is_packed(m.weight) for m in _linears(target))
        spy = _RowSpy()
        monkeypatch.setattr(fastlinear.torch.ops, "mkldnn", spy)
        for t, ids in x.items():
            spy.rows.clear()
            got = target(ids).logits
            assert got.shape == ref[t].shape
            torch.testing.assert_close(got, ref[t], rtol=1e-4, atol=1e-4)  # float rounding only
            assert spy.rows == [max(t, fastlinear.PAD_ROWS)] * len(_linears(target)), t  # short calls padded
        monkeypatch.undo()
        fastlinear.disable(target)
        assert not fastlinear.is_packed(target)
        for n, m in target.named_modules():
            if n in before:
                assert torch.equal(m.weight, before[n])  # unpacked exactly
        assert torch.equal(target(x[3]).logits, ref[3])


@needs_onednn
def test_pack_leaves_a_tied_head_plain():
    m = tiny_model(seed=2)
    m.lm_head.weight = m.get_input_embeddings().weight  # tied, as in Qwen2.5-0.5B
    x = torch.randint(0, 90, (1, 4))
    with torch.inference_mode():
        ref = m(x).logits
        fastlinear.enable(m, pack=True)
        assert not fastlinear.w_is_packed(m.lm_head.weight) and m.lm_head.weight is m.get_input_embeddings().weight
        assert fastlinear.w_is_packed(m.model.layers[0].mlp.up_proj.weight)
        torch.testing.assert_close(m(x).logits, ref, rtol=1e-4, atol=1e-4)
    fastlinear.disable(m)


@needs_onednn
def test_stock_block_unpacks_a_packed_model_and_packs_it_again(fp32_pair):
    target, _ = fp32_pair
    x = torch.randint(0, 90, (1, 5))
    with torch.inference_mode():
        ref = target(x).logits
        fastlinear.enable(target, pack=True)
        try:
            with fastlinear.stock(target):
                assert not fastlinear.is_enabled(target) and not fastlinear.is_packed(target)
                assert torch.equal(target(x).logits, ref)
            assert fastlinear.is_packed(target)
        finally:
            fastlinear.disable(target)


@needs_onednn
@pytest.mark.parametrize("pack", [False, True], ids=["plain", "packed"])
def test_greedy_speculative_equals_greedy_with_fastlinear(fp32_pair, pack):
    target, draft = fp32_pair
    prompt = [5, 20, 33, 41, 7, 9]
    ref = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=24)).token_ids  # the stock target
    fastlinear.enable(target, pack=pack)
    fastlinear.enable(draft)
    try:
        assert autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=24)).token_ids == ref
        for k in (1, 4, 7):
            assert speculative_decode(target, draft, prompt, DecodeSettings(k=k, max_new_tokens=24)).token_ids == ref
    finally:
        fastlinear.disable(target)
        fastlinear.disable(draft)


def test_other_dtypes_are_left_alone():
    m = tiny_model(seed=1, dtype=torch.float64)
    fastlinear.enable(m)
    assert not fastlinear.is_enabled(m)


# --------------------------------------------------------------------------
# without oneDNN (a build without it, or a CPU its op fails on): load_pair keeps PyTorch's stock Linear


def _raise(*args, **kwargs):
    raise RuntimeError("oneDNN's linear does not run on this CPU")


@pytest.fixture
def fresh_probe():
    fastlinear._runs_here.cache_clear()  # the probe runs again under the test's PyTorch, and after it
    yield
    fastlinear._runs_here.cache_clear()


@pytest.mark.parametrize("off", ["no-onednn", "op-fails"])
def test_without_onednn_load_pair_falls_back_to_the_stock_linear_with_the_same_text(monkeypatch, fresh_probe, off):
    from pathlib import Path

    from specviz.decoding import models

    if off == "no-onednn":
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    else:
        monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", _raise)
    reg = Path(__file__).resolve().parent / "models_tiny.yaml"
    pair = models.load_pair("tiny-random", registry=reg, dtype="float32", draft_precision="float32")
    assert not pair.fast_linear
    for model in (pair.target, pair.draft):
        assert not fastlinear.is_enabled(model)
        assert all("forward" not in vars(m) and not fastlinear.w_is_packed(m.weight) for m in _linears(model))
    prompt = pair.tokenizer.encode("the cat sat on")
    ref = autoregressive_decode(pair.target, prompt, DecodeSettings(max_new_tokens=24)).token_ids
    for k in (1, 4):
        assert speculative_decode(pair.target, pair.draft, prompt,
                                  DecodeSettings(k=k, max_new_tokens=24)).token_ids == ref
    int8 = models.with_draft_precision(pair, "int8")  # another precision on the same pair: still stock, still exact
    assert not fastlinear.is_enabled(int8.draft)
    assert speculative_decode(int8.target, int8.draft, prompt, DecodeSettings(k=4, max_new_tokens=24)).token_ids == ref
    monkeypatch.undo()  # oneDNN back: the same pair loads through it, with the same text
    fastlinear._runs_here.cache_clear()
    if fastlinear.available():
        fast = models.load_pair("tiny-random", registry=reg, dtype="float32", draft_precision="float32")
        assert fast.fast_linear and fastlinear.is_packed(fast.target)
        assert speculative_decode(fast.target, fast.draft, prompt,
                                  DecodeSettings(k=4, max_new_tokens=24)).token_ids == ref


_MAPPED_PACK = r"""
import json, re, sys
import torch
from transformers import AutoModelForCausalLM
from specviz.modeling import fastlinear, memory

def rss_file_mb():
    return int(re.search(r"RssFile:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval().requires_grad_(False)
x = torch.tensor([[3, 14, 15, 92, 65]])
with torch.inference_mode():
    before = model(x).logits
    touched = rss_file_mb()  # the forward read every mapped weight
    fastlinear.enable(model, pack=True)
    after = model(x).logits
print(json.dumps({"touched": touched, "packed": rss_file_mb(), "same": bool(torch.allclose(before, after, atol=1e-4)),
                  "packed_all": fastlinear.is_packed(model)}))
"""


@pytest.mark.skipif(not fastlinear.available() or not __import__("os").path.exists("/proc/self/maps"),
                    reason="oneDNN packing and /proc (Linux) needed")
def test_a_packed_weight_mapped_from_a_file_leaves_the_resident_set(tmp_path):
    """A safetensors load maps the file; packing copies each linear's weight into oneDNN's layout. The mapped
    pages the copy read must leave the resident set (memory.release_file_pages), or the target is held twice
    (6.6 GB of RssFile beside its packed copy on the default pair). A 64 MB model in a fresh process: RssFile
    falls by most of the linears' bytes, and the packed model gives the same logits."""
    import json
    import subprocess
    import sys

    from tiny import tiny_lm

    model = tiny_lm(0, 512, arch="llama", hidden=512, layers=4, init=0.02, positions=2048, dtype=torch.float32,
                    intermediate_size=2048, num_attention_heads=8, num_key_value_heads=8, tie_word_embeddings=True,
                    bos_token_id=1, eos_token_id=2)  # LlamaConfig's own defaults but for the shape
    model.save_pretrained(tmp_path / "m")  # safetensors
    linear_mb = 4 * (4 * 512 * 512 + 3 * 512 * 2048) * 4 / 2**20  # 4 layers' float32 linears: 64 MB
    out = subprocess.run([sys.executable, "-c", _MAPPED_PACK, str(tmp_path / "m")], capture_output=True, text=True,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["same"] and got["packed_all"]
    assert got["touched"] - got["packed"] > 0.8 * linear_mb, got
