"""The int8 cache (specviz/modeling/int8cache.py, store.ensure_cached(precision='int8')): a GGUF written in int8
tensor by tensor, loaded with no float32 weights, and bit-identical to the float32 path put into int8.

The GGUF files are tiny random models written the way llama.cpp lays them out (tests/tiny_gguf.py), read by
transformers as a real GGUF is. The reference is today's float32 path: transformers dequantizes the whole
GGUF (store._load_gguf), then quant.apply_target (a target) or quant.apply (a draft) quantizes it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_models import chunk_source_dict, fake_chunks, registry_data
from tiny_gguf import tiny_model, write_gguf

from specviz import autoregressive_decode, speculative_decode
from specviz.core.settings import DecodeSettings
from specviz.decoding import models
from specviz.modeling import int8cache, quant, sizing, store
from specviz.modeling.config import PathSource, parse_registry
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


@pytest.mark.parametrize("arch,tie,kind", [("qwen2", False, "mixed"), ("qwen2", True, "mixed"),
                                           ("llama", False, "mixed"), ("llama", True, "mixed"),
                                           ("qwen2", False, "kquants"), ("llama", True, "kquants")])
def test_an_int8_cache_gives_the_float32_paths_int8_logits_bit_for_bit(tmp_path, monkeypatch, arch, tie, kind):
    """qwen2 (biases on q/k/v, no permutation) and llama (q/k rows permuted in the file), with a head of its
    own or tied to the embedding; blocks of 3 rows, so each tensor is written in many blocks. mixed: F16, F32
    and five of ggml's block types; kquants: Q4_K and Q6_K, as the real files have."""
    hidden = 256 if kind == "kquants" else 64  # k-quant rows are whole blocks of 256
    monkeypatch.setattr(int8cache, "BLOCK_BYTES", 4 * hidden * 3)
    model = tiny_model(arch, tie=tie, hidden=hidden, intermediate=2 * hidden)
    gguf = write_gguf(model, tmp_path / "m.gguf", kind)
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


@pytest.mark.parametrize("arch,tie,kind", [("qwen2", False, "mixed"), ("qwen2", True, "mixed"),
                                           ("llama", False, "mixed"), ("llama", True, "mixed"),
                                           ("qwen2", False, "kquants"), ("llama", True, "kquants")])
def test_the_caches_int8_rows_scales_and_row_sums_are_the_float32_paths(tmp_path, monkeypatch, arch, tie, kind):
    """Tensor by tensor: each Linear's int8 rows, scales and row sums in the cache are, bit for bit, what
    quant.int8_weight gives for the float32 path's weight (the GGUF dequantized by transformers). A scale one
    float32 ulp off moves the logits too little for the logits check above to see in most of these files."""
    from safetensors import safe_open

    hidden = 256 if kind == "kquants" else 64
    monkeypatch.setattr(int8cache, "BLOCK_BYTES", 4 * hidden * 3)  # many blocks a tensor, as above
    gguf = write_gguf(tiny_model(arch, tie=tie, hidden=hidden, intermediate=2 * hidden), tmp_path / "m.gguf", kind)
    int8cache.write(gguf, tmp_path / "int8")
    _, ref = store._load_gguf(gguf, "target", store.quiet)  # float32, before any quantization
    linears = {n + ".weight" for n, m in ref.named_modules() if isinstance(m, torch.nn.Linear)}
    with safe_open(tmp_path / "int8" / int8cache.WEIGHTS, framework="pt") as f:
        assert {n for n in f.keys() if f.get_slice(n).get_dtype() == "I8"} == linears
        for name in sorted(linears):
            want = dict(zip(("", "_scale", "_row_sums"), quant.int8_weight(ref.get_parameter(name))))
            for suffix, w in want.items():
                got = f.get_tensor(name + suffix)
                assert got.dtype == w.dtype and torch.equal(got, w), name + suffix


def test_the_float32_path_reads_qwen2_and_llama_with_gguf_py_as_the_int8_cache_does():
    """The reference the identity rests on: transformers reads these architectures with its legacy loader
    (gguf-py's dequantize, as int8cache does), not its own torch dequantizer, which may round otherwise. If a
    transformers upgrade moves them, this says so before any cache is compared."""
    from transformers.integrations.gguf import utils

    assert not any(utils.is_gguf_arch_supported(arch) for arch in int8cache.SUPPORTED)


def test_the_cache_holds_int8_linears_and_only_the_tensors_that_stay_float(tmp_path):
    gguf = write_gguf(tiny_model("qwen2"), tmp_path / "m.gguf")
    int8cache.write(gguf, tmp_path / "int8")
    raw = (tmp_path / "int8" / int8cache.WEIGHTS).read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__")
    floats = sorted(n for n, h in header.items() if h["dtype"] == "F32" and not n.endswith("_row_sums"))
    assert floats and all(n.endswith(("norm.weight", "bias")) for n in floats), floats
    assert header["model.embed_tokens.weight"]["dtype"] == "U8"  # the GGUF's own blocks (here F16)
    linears = [n for n, h in header.items() if h["dtype"] == "I8"]
    assert "lm_head.weight" in linears and len(linears) == 1 + 2 * 7  # the head and 7 per layer
    assert all(f"{n}_scale" in header and f"{n}_row_sums" in header for n in linears)


def _header(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])


@pytest.mark.parametrize("arch,tie,kind", [("qwen2", False, "kquants"), ("llama", True, "kquants"),
                                           ("qwen2", True, "mixed"), ("llama", False, "f32")])
def test_the_embedding_is_kept_in_the_ggufs_own_blocks_and_looks_up_the_float32_rows(tmp_path, arch, tie, kind):
    """On disk the embedding is the GGUF tensor's bytes as they are (a Q4_K table: 144 bytes a 256 weights, not
    1024), and in memory it stays so: a lookup gives, bit for bit, the rows of the float32 path's table."""
    import gguf as gguf_py

    hidden = 512 if kind == "kquants" else 64  # two k-quant blocks a row: a block out of place shows
    gguf = write_gguf(tiny_model(arch, tie=tie, hidden=hidden, intermediate=2 * hidden, vocab=160), tmp_path / "m.gguf",
                      kind)
    int8cache.write(gguf, tmp_path / "int8")
    src = next(t for t in gguf_py.GGUFReader(str(gguf)).tensors if t.name == "token_embd.weight")
    want = {"kquants": "Q4_K", "mixed": "F16", "f32": "F32"}[kind]
    assert src.tensor_type.name == want
    table = _header(tmp_path / "int8" / int8cache.WEIGHTS)
    entry = table["model.embed_tokens.weight"]
    at, end = entry["data_offsets"]
    row_bytes = {"Q4_K": hidden // 256 * 144, "F16": 2 * hidden, "F32": 4 * hidden}[want]
    assert entry["dtype"] == "U8" and entry["shape"] == [160, row_bytes] and end - at == 160 * row_bytes
    assert json.loads(table["__metadata__"]["model.embed_tokens.weight"]) == {"gguf_type": want, "shape": [160, hidden]}
    data = (tmp_path / "int8" / int8cache.WEIGHTS).read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    assert data[start + at:start + end] == bytes(src.data.reshape(-1).view("uint8"))  # the GGUF's bytes as they are

    ref = _reference(gguf).model.embed_tokens.weight
    got = int8cache.load(tmp_path / "int8", target=True)
    emb = got.get_input_embeddings()
    assert isinstance(emb, int8cache.GGUFEmbedding) and emb.raw.dtype == torch.uint8
    assert emb.nbytes == 160 * row_bytes and not list(emb.parameters())  # no float32 table held
    assert emb.weight.shape == ref.shape and emb.weight.dtype == torch.float32  # what transformers reads of it
    assert emb.num_embeddings == 160 and emb.embedding_dim == hidden
    with torch.inference_mode():
        ids = torch.tensor([[159, 0, 7, 7, 158, 31, 0, 100], [1, 2, 3, 159, 159, 5, 6, 8]])  # repeats, both ends
        assert torch.equal(emb(ids), ref[ids])
        assert torch.equal(emb(torch.arange(160)), ref)
        assert torch.equal(emb.full_weight(), ref)
    # a tied head is still quantized from the embedding: an int8 head, the table's rows in int8
    assert type(got.lm_head) is quant.ExactInt8Linear


@pytest.mark.parametrize("qtype", ["Q5_0", "Q8_0", "Q4_0", "Q4_1", "Q5_1", "Q4_K", "Q6_K", "F16", "F32"])
def test_a_lookup_dequantizes_the_rows_the_whole_table_would_give(qtype):
    """Every block type a real embedding comes in (the default pair's: Q5_0 and Q4_K): the rows a lookup
    dequantizes are the whole table's dequantized rows, bit for bit, with several blocks a row."""
    import gguf as gguf_py
    import numpy as np
    from tiny_gguf import KQUANTS, _kquant

    rows, cols = 96, 768
    rng = np.random.default_rng(1)
    if qtype in KQUANTS:
        raw = _kquant(rows, cols, qtype, rng)
    else:
        kind = gguf_py.GGMLQuantizationType[qtype]
        raw = gguf_py.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), kind)
        raw = raw.reshape(rows, -1).view(np.uint8)
    whole = torch.from_numpy(gguf_py.quants.dequantize(raw, gguf_py.GGMLQuantizationType[qtype]).copy())
    emb = int8cache.GGUFEmbedding(torch.from_numpy(raw.copy()), qtype, (rows, cols))
    ids = torch.tensor([[95, 0, 3, 3, 50], [7, 95, 94, 1, 0]])
    with torch.inference_mode():
        assert torch.equal(emb(ids), whole[ids])
        assert torch.equal(emb.full_weight(), whole)


def test_an_int8_copy_weighs_its_embedding_at_the_ggufs_bits(tmp_path):
    """A Q4_K embedding takes 4.5 bits a weight on disk, where a float32 one took 32: the copy is smaller by
    exactly vocab x hidden x (4 - 144/256) bytes than its float32-embedding layout."""
    vocab, hidden = 512, 512
    gguf = write_gguf(tiny_model("qwen2", hidden=hidden, intermediate=2 * hidden, vocab=vocab), tmp_path / "m.gguf",
                      "kquants")
    int8cache.write(gguf, tmp_path / "int8")
    table = _header(tmp_path / "int8" / int8cache.WEIGHTS)
    table.pop("__metadata__")
    data = sum(end - at for at, end in (h["data_offsets"] for h in table.values()))
    float32_table = data - vocab * hidden // 256 * 144 + vocab * hidden * 4
    assert float32_table - data == vocab * hidden * (4 - 144 / 256)
    assert (tmp_path / "int8" / int8cache.WEIGHTS).stat().st_size - data < 16 * 1024  # the header
    # and what it holds loaded: the int8 model's tensors, the embedding in its blocks
    model = int8cache.load(tmp_path / "int8", target=False)
    emb = model.get_input_embeddings()
    assert emb.nbytes == vocab * hidden // 256 * 144
    from specviz.core import measure

    streamed = measure.weight_bytes(model)  # a step streams the layers and the head, not the embedding's blocks
    held = streamed + emb.nbytes
    assert data * 0.95 < held <= data, (held, data)


# -----------------------------------------------------------------------------
# through load_pair: chunk packages of real (tiny) GGUF files


@pytest.fixture
def gguf_data(tmp_path, monkeypatch):
    """(registry data, GGUF files) of pair 'p': a draft and a target shipped as fake chunk packages of tiny GGUF
    files; cache in tmp."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    files = {role: write_gguf(tiny_model("qwen2", seed=3, noise=noise, vocab=128), tmp_path / f"{role}.gguf")
             for role, noise in (("draft", 0.05), ("target", 0.0))}
    srcs = {}
    for role, f in files.items():
        data = f.read_bytes()
        srcs[role] = fake_chunks(tmp_path, monkeypatch, [data[:len(data) // 2], data[len(data) // 2:]])
    data = registry_data({"d": chunk_source_dict(srcs["draft"]), "t": chunk_source_dict(srcs["target"])},
                         {"p": ("d", "t")})
    return data, files


@pytest.fixture
def gguf_pair(gguf_data):
    """Registry 'p' (gguf_data) parsed, and its GGUF files."""
    data, files = gguf_data
    return parse_registry(data), files


def _cached(tmp_path) -> list[str]:
    """The cache's folders, as model[-int8]."""
    return sorted(p.name.split("-")[0] + ("-int8" if p.name.endswith("-int8") else "")
                  for p in (tmp_path / "cache").iterdir())


def test_an_int8_load_converts_only_int8_copies_and_keeps_greedy_identity(tmp_path, gguf_pair):
    reg, files = gguf_pair
    stages = []
    pair = models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8",
                            progress=lambda s, f=None: stages.append(s))
    assert _cached(tmp_path) == ["d-int8", "t-int8"]  # no float32 copy: no run here needs one
    assert "converting target to int8 (first time only)" in stages
    assert pair.sources["target"].endswith("(int8)") and pair.sources["draft"].endswith("(int8)")
    assert pair.target_precision == "int8" and pair.draft_precision == "int8"
    ref = _reference(files["target"])
    with torch.inference_mode():
        x = torch.tensor([PROMPT])
        assert torch.equal(pair.target(x).logits, ref(x).logits)
    for prompt in ([5, 6, 7], [12, 40, 3, 3, 9, 21]):
        alone = autoregressive_decode(ref, prompt, DecodeSettings(max_new_tokens=30), **pair.run_kw)
        assert autoregressive_decode(pair.target, prompt, DecodeSettings(max_new_tokens=30), **pair.run_kw).token_ids == alone.token_ids
        for k in (2, 4):
            run = speculative_decode(pair.target, pair.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=30), **pair.run_kw)
            assert run.token_ids == alone.token_ids, (prompt, k)

    # a second load comes from the int8 copies; a float32 target is what writes a float32 copy
    stages.clear()
    models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8",
                     progress=lambda s, f=None: stages.append(s))
    assert "loading cached int8 target" in stages and not any("converting" in s for s in stages)
    f32 = models.load_pair("p", registry=reg, device="cpu", draft_precision="int8")
    assert f32.target_precision == "float32" and _cached(tmp_path) == ["d-int8", "t", "t-int8"]
    assert "converted copy cached in" in models.pair_status("p", reg).reason


@pytest.mark.parametrize("draft", ["self", {"early-exit": {"layers": 1}}])
def test_a_draft_made_of_the_int8_targets_layers_keeps_greedy_identity(tmp_path, monkeypatch, gguf_pair, draft):
    reg, _ = gguf_pair
    t = reg.pairs["p"].target
    data = registry_data({"t": chunk_source_dict(t.source)}, {"s": ("t", "t")})
    data["pairs"]["s"]["draft"] = draft
    pair = models.load_pair("s", registry=parse_registry(data), device="cpu", target_precision="int8")
    assert _cached(tmp_path) == ["t-int8"] and pair.draft_precision == "int8"
    prompt = [12, 40, 3, 3, 9, 21]
    alone = autoregressive_decode(pair.target, prompt, DecodeSettings(max_new_tokens=20), **pair.run_kw)
    run = speculative_decode(pair.target, pair.drafter(), prompt, DecodeSettings(k=3, max_new_tokens=20), **pair.run_kw)
    assert run.token_ids == alone.token_ids


def test_a_damaged_int8_copy_is_rebuilt(tmp_path, gguf_pair):
    reg, _ = gguf_pair
    models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8")
    weights = store.cached_dir(reg.pairs["p"].target.source, "t", "int8") / int8cache.WEIGHTS
    full = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(full // 2)
    stages = []
    models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8",
                     progress=lambda s, f=None: stages.append(s))
    assert any(s.startswith("the cached copy of t is damaged") for s in stages)
    assert weights.stat().st_size == full


def test_an_int8_copy_of_an_older_format_is_converted_again(tmp_path, gguf_pair):
    """A copy written before the embedding was kept in the GGUF's blocks (format 1, a float32 table) is not
    loaded: the next load converts it again, and the new copy holds the blocks."""
    reg, _ = gguf_pair
    models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8")
    folder = store.cached_dir(reg.pairs["p"].target.source, "t", "int8")
    manifest = json.loads((folder / store.MANIFEST).read_text())
    assert manifest["format"] == store.CACHE_FORMAT["int8"] == 2
    (folder / store.MANIFEST).write_text(json.dumps({**manifest, "format": 1}))
    stages = []
    pair = models.load_pair("p", registry=reg, device="cpu", target_precision="int8", draft_precision="int8",
                            progress=lambda s, f=None: stages.append(s))
    assert "converting target to int8 (first time only)" in stages
    assert "converting draft to int8 (first time only)" not in stages  # the draft's copy is current
    assert json.loads((folder / store.MANIFEST).read_text())["format"] == 2
    assert isinstance(pair.target.get_input_embeddings(), int8cache.GGUFEmbedding)
    # a float32 copy keeps its own format: nothing to convert
    assert store.CACHE_FORMAT["float32"] == 1


def test_an_int8_model_from_its_copy_is_counted_with_its_embedding_at_the_ggufs_bits(gguf_pair):
    """The budget's figure for a chunked model in int8 from its int8 copy: its embedding share (KEPT_FP32) at the
    GGUF's bytes a weight (its size over its parameters), not float32; an int8 draft quantized from a float32
    one (a bfloat16 run's, or a folder's) still counts a float32 embedding."""
    from specviz.modeling import memory

    reg, _ = gguf_pair
    spec = reg.pairs["p"]
    params = {"draft": 630_167_424, "target": 1_777_088_000}  # the default pair's
    spec = dataclasses.replace(spec, draft=dataclasses.replace(spec.draft, params=params["draft"]),
                               target=dataclasses.replace(spec.target, params=params["target"]))
    parts = sizing.pair_parts(spec, "float32", "int8", target_precision="int8")
    for role, m in (("draft", spec.draft), ("target", spec.target)):
        (got,) = [v for k, v in parts.items() if k[0] == role]
        per_param = memory.int8_bytes_per_param(m.source.size / params[role])
        assert got == int(params[role] * per_param * memory.RUNNING)
        assert got < memory.held_bytes(params[role], "int8")  # the float32-embedding figure
    # the default pair's own GGUFs (491 MB and 1117 MB): 1.5B and 1.3B less than with float32 embeddings
    real = {"draft": 491_400_064, "target": 1_117_320_768}
    new = sum(memory.held_bytes(params[r], "int8", real[r] / params[r]) for r in params)
    old = sum(memory.held_bytes(params[r], "int8") for r in params)
    assert new < 0.55 * old and new + memory.LOADING < 5 * memory.GiB
    folder = dataclasses.replace(spec, draft=dataclasses.replace(spec.draft, source=PathSource(path=Path("/x"))))
    (draft,) = [v for k, v in sizing.pair_parts(folder, "float32", "int8").items() if k[0] == "draft"]
    assert draft == memory.held_bytes(params["draft"], "int8")


def test_an_int8_target_from_its_copy_needs_no_float32_stage_in_the_memory_estimate(gguf_pair):
    reg, _ = gguf_pair
    spec = reg.pairs["p"]
    spec = dataclasses.replace(spec, target=dataclasses.replace(spec.target, params=10**9))  # as a real one declares
    assert sizing.loading_bytes(spec, "float32", target_precision="int8") == sizing.loading_bytes(spec, "float32")
    # a target from a folder still passes through float32 on its way to int8
    folder = dataclasses.replace(spec, target=dataclasses.replace(spec.target, source=PathSource(path=Path("/x"))))
    assert sizing.loading_bytes(folder, "float32", target_precision="int8") > sizing.loading_bytes(spec, "float32")


def test_a_chunked_int8_draft_needs_no_float32_draft_in_the_memory_estimate(gguf_pair):
    """What the app's budget counts for an int8 draft from its int8 copy: the int8 draft, no float32 draft beside
    it, and no float32 stage while it loads."""
    from specviz.modeling import memory

    reg, _ = gguf_pair
    spec = reg.pairs["p"]
    spec = dataclasses.replace(spec, draft=dataclasses.replace(spec.draft, params=10**8))
    direct = sizing.pair_parts(spec, "float32", "int8")
    assert sizing.config_parts(spec, "float32", "int8") == direct
    assert sizing.loading_bytes(spec, "float32", "int8") == memory.LOADING
    assert sizing.estimate_memory_bytes(spec, "float32", True, "int8") == sum(direct.values()) + memory.LOADING
    # an int4 draft still loads in float32 and is copied into int4; a bfloat16 run has no int8 copy to load
    assert sizing.loading_bytes(spec, "float32", "int4") > memory.LOADING
    assert len(sizing.config_parts(spec, "float32", "int4")) == 3
    assert not sizing.draft_loads_direct(spec, "bfloat16", "int8")


@pytest.fixture
def gguf_app(gguf_data, tmp_path, monkeypatch):
    """The app's store pointed at registry 'p' (gguf_data), empty before and after; -> the parsed registry."""
    import yaml

    from specviz.service import pairs

    data, _ = gguf_data
    for name in ("d", "t"):  # sizes for the store to charge (the GGUF files are tiny)
        data["models"][name]["params"] = 10**6
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("SPECVIZ_MODELS", str(path))
    pairs.clear()
    yield parse_registry(data)
    pairs.clear()


def test_the_app_loads_an_int8_draft_from_its_int8_copy_and_lends_its_target(tmp_path, gguf_app):
    """The app's pair with an int8 draft (the CPU's default) holds and caches no float32 draft, and runs the
    tokens the old path ran (the float32 draft copied into int8: with_draft_precision). A float32 draft then
    loads beside it, lent its target; a bfloat16 draft is a copy of that one, no load."""
    from specviz.service import pairs

    reg = gguf_app
    store_ = pairs.store()
    pair, lease = pairs.lease_pair("p", "float32", "int8")
    lease.release()
    assert _cached(tmp_path) == ["d-int8", "t"]  # the float32 target's copy; no float32 copy of the draft
    assert pair.draft_precision == "int8" and pair.sources["draft"].endswith("(int8)")
    assert store_.keys() == [("p", "float32", "int8")]
    assert store_.held() == sum(sizing.pair_parts(reg.pairs["p"], "float32", "int8").values())

    old = models.with_draft_precision(models.load_pair("p", registry=reg, device="cpu", draft_precision="float32"),
                                      "int8")
    x = torch.tensor([PROMPT])
    with torch.inference_mode():
        assert torch.equal(pair.draft(x).logits, old.draft(x).logits)
    for prompt in ([5, 6, 7], [12, 40, 3, 3, 9, 21]):
        for k in (2, 4):
            run = speculative_decode(pair.target, pair.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=30), **pair.run_kw)
            ref = speculative_decode(old.target, old.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=30), **old.run_kw)
            assert run.token_ids == ref.token_ids and [r.drafted for r in run.rounds] == [r.drafted for r in ref.rounds]

    f32, lease = pairs.lease_pair("p", "float32", "float32")
    lease.release()
    assert f32.target is pair.target and "(shared with the pair p)" in f32.sources["target"]
    calls = pairs.LOAD_CALLS
    bf16, lease = pairs.lease_pair("p", "float32", "bfloat16")
    lease.release()
    assert pairs.LOAD_CALLS == calls and bf16.target is pair.target and bf16.draft_precision == "bfloat16"
    assert store_.peek(("p", "float32", "bfloat16")).pair is bf16  # a variant of the float32 pair


def test_the_main_page_runs_the_default_int8_draft_from_its_int8_copy(tmp_path, gguf_app):
    """The main page on the chunked pair, as a laptop starts it (the CPU's default int8 draft): Run caches no
    float32 copy of the draft, and the text is identical to the target alone."""
    from streamlit.testing.v1 import AppTest

    from specviz.service import pairs

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key="main.draft_precision").value == "int8"
    at.select_slider(key="main.speed").set_value("instant")
    at.radio(key="main.k_policy").set_value("fixed")
    at.number_input(key="main.max_new").set_value(8)
    at.button(key="main.run_btn").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert _cached(tmp_path) == ["d-int8", "t"]
    assert pairs.store().keys() == [("p", "float32", "int8")]
    assert at.session_state["main.job"].meta["baseline"]["identical"] is True


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


# -----------------------------------------------------------------------------
# the real default pair (run by hand: -m real)


@pytest.mark.real
def test_real_int8_copies_are_small_load_in_seconds_and_never_hold_float32(tmp_path):
    """From a fresh cache: converting the default pair to int8 holds little, each int8 copy is at most 1.5x its
    GGUF, and a load of the int8 pair from them takes seconds and holds about the int8 models."""
    import os

    spec = models.as_registry(None).pair(None)
    env = {**os.environ, "SPECVIZ_CACHE": str(tmp_path / "cache")}
    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent("""
        import json, sys, time
        from specviz.decoding import models
        from specviz.modeling import store
        t0 = time.perf_counter()
        store.prepare(precisions={"draft": "int8", "target": "int8"})
        convert_s = time.perf_counter() - t0
        hwm = lambda: int([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]) * 1024
        print(json.dumps({"convert_s": convert_s, "convert_hwm": hwm()}))
    """)
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=root, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    conv = json.loads(res.stdout.strip().splitlines()[-1])
    for role, m in (("draft", spec.draft), ("target", spec.target)):
        folder = tmp_path / "cache" / store.cached_dir(m.source, m.name, "int8").name
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        # the linears in int8, the embedding in the GGUF's own blocks: expected 0.60 GB (1.23x its GGUF) and
        # 1.70 GB (1.52x: its Q4_K layers take a byte a weight in int8)
        assert size <= 1.6 * m.source.size, (role, size, m.source.size)
        assert not (tmp_path / "cache" / folder.name.removesuffix("-int8")).exists()  # no float32 copy
    # the conversion's peak includes the GGUF's mapped pages (file-backed, given back under pressure)
    assert conv["convert_hwm"] < 3.5 * 2**30, conv

    load = textwrap.dedent("""
        import json, time
        from specviz.decoding import models
        t0 = time.perf_counter()
        pair = models.load_pair(device="cpu", target_precision="int8", draft_precision="int8")
        load_s = time.perf_counter() - t0
        anon = int([l for l in open('/proc/self/status') if l.startswith('RssAnon:')][0].split()[1]) * 1024
        hwm = int([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]) * 1024
        print(json.dumps({"load_s": load_s, "anon": anon, "hwm": hwm, "sources": pair.sources}))
    """)
    res = subprocess.run([sys.executable, "-c", load], check=False, capture_output=True, text=True, cwd=root, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    print(conv, got)
    assert all(s.endswith("(int8)") for s in got["sources"].values()), got
    assert got["load_s"] < 30, got
    assert got["hwm"] < 6 * 2**30, got  # the float32 path peaked at 16.4 GB


@pytest.mark.real
def test_real_int8_target_from_its_copy_gives_the_float32_paths_int8_logits():
    """The default pair's target: its int8 copy gives, bit for bit, the logits of its float32 copy put into int8
    by apply_target (what load_pair did before the int8 copy). Holds the float32 target (7 GB) and the int8 one."""
    from transformers import AutoModelForCausalLM

    spec = models.as_registry(None).pair(None)
    pair = models.load_pair(device="cpu", target_precision="int8", draft_precision="int8")
    assert pair.sources["target"].endswith("(int8)")
    folder, _ = store.ensure_cached(spec.target, "target", store.quiet)  # the float32 copy (made if absent)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    quant.apply_target(ref.requires_grad_(False), "int8")
    ids = torch.tensor([pair.tokenizer("def fibonacci(n):\n    \"\"\"Return the n-th number.")["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(pair.target(ids).logits, ref(ids).logits)


def test_under_a_budget_only_an_int8_target_fits_the_app_starts_with_it_and_runs(gguf_data, tmp_path, monkeypatch):
    """The 8 GB laptop: a budget in which no float32 target fits, in any dtype or draft precision, but the int8
    target does. The main page starts with the int8 target, says why, and a Run loads it and keeps greedy
    identity (the pages without a target picker load the same choice)."""
    import yaml
    from streamlit.testing.v1 import AppTest

    from specviz.service import pairs

    data, _ = gguf_data
    for m in data["models"].values():
        m["params"] = 10**9  # as a real one declares: the estimates see models of this size
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("SPECVIZ_MODELS", str(path))
    spec = parse_registry(data).pairs["p"]
    f32 = [sizing.estimate_memory_bytes(spec, d, True, p, "float32") for d in ("float32", "bfloat16")
           for p in quant.supported("cpu")]
    int8 = sizing.estimate_memory_bytes(spec, "float32", True, "int8", "int8")
    assert int8 < min(f32)
    monkeypatch.setenv("SPECVIZ_MEMORY_GB", str((int8 + min(f32)) / 2 / 2**30))
    pairs.clear()
    try:
        assert pairs.fitting_default("p")[:3] == ("float32", "int8", "int8")
        at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120)
        at.run()
        assert not at.exception, at.exception
        assert at.radio(key="main.target_precision").value == "int8"
        assert any("so this page starts with p (float32, int8 draft, int8 target)" in i.value for i in at.sidebar.info)
        at.select_slider(key="main.speed").set_value("instant")
        at.button(key="main.run_btn").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        job = at.session_state["main.job"]
        assert job.done and job.meta["baseline"]["identical"] is True, job.meta.get("baseline")
        held = pairs.store().keys()
        assert held and all("int8 target" in key for key in held), held
    finally:
        pairs.clear()


_LOAD_PEAK = r"""
import json, re, sys
from pathlib import Path
import torch
from specviz.modeling import int8cache

def hwm_mb():
    return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024

int8cache.load(Path(sys.argv[2]), target=True)  # a small copy first: what any load allocates for good
before = hwm_mb()
model = int8cache.load(Path(sys.argv[1]), target=True)
print(json.dumps({"grew": hwm_mb() - before}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_loading_an_int8_copy_holds_the_model_once_at_its_peak(tmp_path):
    """The copy is read tensor by tensor into int8 layers, and what each layer was made from goes back to the
    system: the peak grows by about the file's size, not twice it (a mapped file's pages stay resident beside
    the layers until it closes; freed read buffers stay in the heap without a trim). In a fresh process that
    loaded a small copy first, a 50 MB copy may grow the peak by at most 1.4 times its size."""
    import json

    model = tiny_model("qwen2", hidden=1024, intermediate=2816, layers=4, heads=8, kv_heads=8, vocab=512)
    gguf = write_gguf(model, tmp_path / "m.gguf")
    int8cache.write(gguf, tmp_path / "int8")
    int8cache.write(write_gguf(tiny_model("qwen2"), tmp_path / "small.gguf"), tmp_path / "small")
    size_mb = (tmp_path / "int8" / int8cache.WEIGHTS).stat().st_size / 2**20
    out = subprocess.run([sys.executable, "-c", _LOAD_PEAK, str(tmp_path / "int8"), str(tmp_path / "small")],
                         capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    grew = json.loads(out.stdout.strip().splitlines()[-1])["grew"]
    assert size_mb > 40 and grew < 1.4 * size_mb, (grew, size_mb)


@pytest.mark.real
def test_real_int8_pair_copies_take_at_most_3_gb_and_their_embedding_lookups_are_the_float32_rows():
    """The default pair's int8 copies (made if absent) take at most 3 GB together (the embeddings in the GGUFs'
    Q5_0 and Q4_K blocks: 0.09 and 0.13 GB, not 0.54 and 0.93 GB in float32), and each model gives, bit for bit,
    the logits of the same model with its embedding dequantized whole into a float32 nn.Embedding."""
    from torch import nn

    spec = models.as_registry(None).pair(None)
    total = 0
    ids = None
    for role, m in (("draft", spec.draft), ("target", spec.target)):
        folder, _ = store.ensure_cached(m, role, store.quiet, precision="int8")
        total += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        if ids is None:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            ids = torch.tensor([tok("def fibonacci(n):\n    \"\"\"Return the n-th number.")["input_ids"]])
        model = int8cache.load(folder, target=role == "target")
        emb = model.get_input_embeddings()
        assert isinstance(emb, int8cache.GGUFEmbedding) and emb.nbytes < 0.2e9, (role, emb.qtype, emb.nbytes)
        with torch.inference_mode():
            got = model(ids).logits
            model.set_input_embeddings(nn.Embedding.from_pretrained(emb.full_weight()))  # the float32 table
            assert torch.equal(got, model(ids).logits), role
        del model, emb
    assert total <= 3e9, total


def test_an_int8_target_drafts_through_the_frequent_head_unless_asked(gguf_pair):
    """load_pair's default head follows the target's precision (vocabhead.default_head): frequent against an
    int8 target, full against float32, and an explicit choice wins."""
    reg, _ = gguf_pair
    kw = {"registry": reg, "device": "cpu", "draft_precision": "int8"}
    assert models.load_pair("p", target_precision="int8", **kw).draft_head == "frequent"
    assert models.load_pair("p", target_precision="int8", draft_head="full", **kw).draft_head == "full"
    assert models.load_pair("p", **kw).draft_head == "full"
