"""The int8 cache (specviz/modeling/int8cache.py, store.ensure_cached(precision='int8')): a GGUF written in int8
tensor by tensor, loaded with no float32 weights, and bit-identical to the float32 path put into int8.

The GGUF files are tiny random models written the way llama.cpp lays them out (tests/tiny_gguf.py), read by
transformers as a real GGUF is. The reference is today's float32 path: transformers dequantizes the whole
GGUF (store._load_gguf), then quant.apply_target (a target) or quant.apply (a draft) quantizes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_gguf import tiny_model, write_gguf

from specviz.modeling import int8cache, quant, store
from specviz.modeling.lm import CachedLM

pytestmark = pytest.mark.skipif("int8" not in quant.supported("cpu"), reason="no fbgemm int8 here")

PROMPT = [5, 9, 33, 70, 2, 11, 90, 40]


def _reference(gguf: Path, target: bool = True):
    """Today's path: the whole GGUF dequantized to float32 by transformers, then put into int8."""
    _, model = store._load_gguf(gguf, "target", store.quiet)
    model.eval().requires_grad_(False)
    return quant.apply_target(model, "int8") if target else quant.apply(model, "int8")


def _chunked_logits(model, k1: int) -> torch.Tensor:
    """Every position's logits, fed k1 tokens a call after the first 3 (a verify pass's shape)."""
    lm = CachedLM(model)
    out = [lm.feed(PROMPT[:3])[-1:]]
    out += [lm.feed(PROMPT[i:i + k1]) for i in range(3, len(PROMPT), k1)]
    return torch.cat(out)


@pytest.mark.parametrize("arch,tie", [("qwen2", False), ("qwen2", True), ("llama", False), ("llama", True)])
def test_an_int8_cache_gives_the_float32_paths_int8_logits_bit_for_bit(tmp_path, monkeypatch, arch, tie):
    """qwen2 (biases on q/k/v, no permutation) and llama (q/k rows permuted in the file), with a head of its
    own or tied to the embedding; blocks of 3 rows, so each tensor is written in many blocks."""
    monkeypatch.setattr(int8cache, "BLOCK_BYTES", 4 * 64 * 3)
    gguf = write_gguf(tiny_model(arch, tie=tie), tmp_path / "m.gguf")
    int8cache.write(gguf, tmp_path / "int8")
    with torch.inference_mode():
        for target in (True, False):
            ref, got = _reference(gguf, target), int8cache.load(tmp_path / "int8", target=target)
            assert type(got.lm_head) is type(ref.lm_head)
            assert quant.precision_label(got) == quant.precision_label(ref)
            x = torch.tensor([PROMPT])
            assert torch.equal(got(x).logits, ref(x).logits), target
            if target:  # the int8 target's row exactness holds on the loaded copy too
                for k1 in (1, 2, 5):
                    assert torch.equal(_chunked_logits(got, k1), _chunked_logits(ref, k1)), k1


def test_the_cache_holds_int8_linears_and_only_the_tensors_that_stay_float(tmp_path):
    gguf = write_gguf(tiny_model("qwen2"), tmp_path / "m.gguf")
    int8cache.write(gguf, tmp_path / "int8")
    raw = (tmp_path / "int8" / int8cache.WEIGHTS).read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__")
    floats = sorted(n for n, h in header.items() if h["dtype"] == "F32" and not n.endswith("_row_sums"))
    assert all(n.endswith(("norm.weight", "bias")) or n == "model.embed_tokens.weight" for n in floats), floats
    linears = [n for n, h in header.items() if h["dtype"] == "I8"]
    assert "lm_head.weight" in linears and len(linears) == 1 + 2 * 7  # the head and 7 per layer
    assert all(f"{n}_scale" in header and f"{n}_row_sums" in header for n in linears)


# -----------------------------------------------------------------------------
# the conversion's peak: a block of rows, not the model

PEAK = textwrap.dedent("""
    import sys, threading, time
    def anon():
        for line in open('/proc/self/status'):
            if line.startswith('RssAnon:'):
                return int(line.split()[1]) * 1024
    from specviz.modeling import int8cache
    int8cache.write(sys.argv[3], sys.argv[4])  # a small one first: what imports hold is not the conversion's
    peak, done = [anon()], []
    base = peak[0]
    def watch():
        while not done:
            peak.append(anon())
            time.sleep(0.001)
    threading.Thread(target=watch, daemon=True).start()
    int8cache.write(sys.argv[1], sys.argv[2])
    done.append(1)
    print(max(peak) - base)
""")


def conversion_peak(gguf: Path, out: Path) -> int:
    """Anonymous memory (not the mapped GGUF's pages) a conversion in a fresh process holds at its peak, above
    what it held before it started (after converting a tiny model, so that imports are done)."""
    root = Path(__file__).resolve().parents[1]
    small = write_gguf(tiny_model("qwen2"), out.parent / "small.gguf")
    args = [str(gguf), str(out), str(small), str(out.parent / "small-int8")]
    res = subprocess.run([sys.executable, "-c", PEAK, *args], check=False, capture_output=True, text=True,
                         cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
                         timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return int(res.stdout.strip().splitlines()[-1])


def test_converting_holds_a_block_of_rows_not_the_model(tmp_path):
    """A 308 MiB (float32) model: the conversion's peak is what its setup holds (the GGUF's metadata, the
    tokenizer: about 50 MiB here) and a few blocks of rows (int8cache.BLOCK_BYTES, 8 MiB); measured 88 MiB.
    The whole model would be 308 MiB; its largest tensor converted at once (64 MiB, with its copies) about 240."""
    model = tiny_model("qwen2", hidden=1024, layers=4, heads=8, kv_heads=4, intermediate=2816, vocab=16384)
    model_bytes = sum(p.numel() * 4 for p in model.parameters())
    largest = max(p.numel() * 4 for p in model.parameters())
    gguf = write_gguf(model, tmp_path / "m.gguf")
    del model
    peak = conversion_peak(gguf, tmp_path / "int8")
    assert peak < 0.4 * model_bytes, (peak / 2**20, largest / 2**20, model_bytes / 2**20)
    # what it wrote loads, and is the int8 model (its size: about a quarter of float32, the embedding float32)
    assert (tmp_path / "int8" / int8cache.WEIGHTS).stat().st_size < 0.45 * model_bytes
