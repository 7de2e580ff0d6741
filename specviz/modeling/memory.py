"""The memory budget for loaded models, what a model needs, and the budgeted store that holds them.

The budget is SPECVIZ_MEMORY_GB when set. Unset, it is what the machine offers this process for models: the
available memory (MemAvailable, plus what the process already holds for models), and, where a cgroup limits
the process, the room under that limit (limit - usage + held) - the smaller of the two.

ModelStore is the server's one cache of loaded models: a least-recently-used store that charges each entry
the bytes of its parts (a part shared by two entries, such as one target under two draft precisions, is
charged once), unloads what was least recently used to make room for a new entry, never unloads an entry
that is leased (in use), and refuses, before anything loads, an entry that cannot fit.

Public API: Budget, read_budget, held_bytes, int8_bytes_per_param, give_back, trim, release_file_pages,
peak_resident_bytes, status_bytes, Refusal, OverBudget, Lease, ModelStore, GiB, ENV.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import itertools
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Mapping

from specviz.core.errors import InvalidSetting, NotEnoughMemory

GiB = 1024**3
ENV = "SPECVIZ_MEMORY_GB"
NO_LIMIT = 2**60  # cgroup v1 writes 'no limit' as a number near 2**63
MAX_GB = 2**20  # the largest SPECVIZ_MEMORY_GB (a pebibyte): more is no machine's, and 1e300 overflowed int()

# bytes per parameter as loaded. A quantized draft keeps its embedding table in float32 (a lookup reads one
# row): KEPT_FP32 is the share of parameters that stay float32, the embedding of a small model with a large
# vocabulary (Qwen2.5 0.5B: 136M of 630M). An int8 model loaded from its int8 copy (int8cache) keeps that
# share in the GGUF's own blocks instead: int8_bytes_per_param.
KEPT_FP32 = 0.25
BYTES_PER_PARAM = {
    "float32": 4.0, "bfloat16": 2.0, "float16": 2.0,
    "int8": (1 - KEPT_FP32) * 1.0 + KEPT_FP32 * 4.0,
    "int4": (1 - KEPT_FP32) * 0.5 + KEPT_FP32 * 4.0,
}  # fmt: skip
RUNNING = 1.1  # KV caches and activations of a run, on top of the weights
LOADING = 512 * 2**20  # room a load needs for a moment on top of what stays (buffers, oneDNN packing)


def int8_bytes_per_param(embedding_bytes: float) -> float:
    """Bytes per parameter of an int8 model whose embedding (KEPT_FP32 of its parameters) holds `embedding_bytes`
    a weight: 4.0 when it stays float32 (quant.apply), a GGUF's bits / 8 when it stays in the GGUF's blocks (an
    int8 copy: int8cache); the rest in a byte a weight."""
    return (1 - KEPT_FP32) * 1.0 + KEPT_FP32 * embedding_bytes


def held_bytes(params: int, precision: str, embedding_bytes: float | None = None) -> int:
    """Bytes that `params` parameters in `precision` hold while they run (weights, caches, activations).
    embedding_bytes (int8 only): the embedding's bytes a weight where it is not float32 (int8_bytes_per_param)."""
    if precision not in BYTES_PER_PARAM:
        raise InvalidSetting(f"no memory estimate for precision {precision!r}")
    per_param = BYTES_PER_PARAM[precision]
    if embedding_bytes is not None and precision == "int8":
        per_param = int8_bytes_per_param(embedding_bytes)
    return int(params * per_param * RUNNING)


def give_back() -> None:
    """Free what nothing refers to any more and hand it back to the system: gc.collect, then glibc's malloc_trim.

    Without the trim, the memory of models let go (and of the float32 copy an int8 draft is made from) stays in
    the process's heap: measured on two 108M-parameter models, 0.40 GB of 0.43 GB freed stayed resident, and
    0.03 GB with it."""
    gc.collect()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


def trim() -> None:
    """Hand the heap's free memory back to the system (glibc's malloc_trim; elsewhere nothing), without
    give_back's gc.collect: cheap enough to call after each block of a conversion, whose freed blocks glibc
    would otherwise keep."""
    fn = _libc("malloc_trim")
    if fn is not None:
        fn(0)


def release_file_pages(tensor) -> int:
    """Take the pages of a tensor that maps a file (a safetensors load maps the file, private and read-only in
    use) out of this process's resident set; the bytes released (0 for any other tensor, or off Linux).

    For a weight that was just copied into another layout (fastlinear's packing): its mapped pages, read once
    for the copy, would otherwise stay resident beside the copy, the model counted twice. Only whole pages
    inside the tensor are released. The pages stay the file's, so a read through any other reference maps
    them in again with the same bytes; they also stay in the page cache, which the kernel reclaims."""
    start, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    if size <= 0 or not tensor.is_contiguous() or not _is_file_mapped(start, start + size):
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    lo, hi = -(-start // page) * page, (start + size) // page * page  # whole pages inside the tensor
    if hi <= lo:
        return 0
    fn = _libc("madvise")
    if fn is None or fn(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_DONTNEED) != 0:
        return 0
    return hi - lo


MADV_DONTNEED = 4  # Linux: drop the pages; a private file mapping reads them from the file again if touched


def _is_file_mapped(lo: int, hi: int) -> bool:
    """Whether [lo, hi) lies in one mapping of a file (/proc/self/maps: an inode and a path, not a [heap])."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                a, b = (int(x, 16) for x in fields[0].split("-"))
                if a <= lo < b:
                    return hi <= b and len(fields) >= 6 and fields[4] != "0" and fields[5].startswith("/")
    except (OSError, ValueError, IndexError):
        pass
    return False


@functools.cache
def _glibc():
    """The C library, opened once; None where it cannot be (then trim and release_file_pages do nothing)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _libc(name: str):
    """The C library's function `name` (madvise, malloc_trim); None where there is none (not glibc: gc.collect
    is all there is)."""
    return getattr(_glibc(), name, None)


# --- the budget ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """How many bytes models may hold in this process, and where that figure comes from."""

    bytes: int
    source: str  # ENV | "available memory" | "cgroup limit" | "GPU memory"
    available: int | None = None  # MemAvailable (or free GPU memory) + held
    cgroup: int | None = None  # room under the tightest cgroup limit + held; None: no limit applies


def read_budget(held: int = 0, device: str = "cpu", env: Mapping[str, str] | None = None,
                proc: str | os.PathLike = "/proc", cgroup: str | os.PathLike = "/sys/fs/cgroup") -> Budget:
    """The budget for models now, given that this process holds `held` bytes of them already.

    proc and cgroup: where /proc and the cgroup mount are (tests point them at folders of fake files)."""
    env = os.environ if env is None else env
    if env.get(ENV, "").strip():
        return Budget(_gb_setting(env[ENV]), ENV)
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return Budget(int(free) + held, "GPU memory", available=int(free) + held)
    available = _mem_available(Path(proc)) + held
    room = cgroup_room(held, proc, cgroup)
    if room is not None and room < available:
        return Budget(room, "cgroup limit", available=available, cgroup=room)
    return Budget(available, "available memory", available=available, cgroup=room)


def _gb_setting(text: str) -> int:
    try:
        gb = float(text)
    except ValueError:
        gb = float("nan")
    if not 0 < gb <= MAX_GB:  # nan, inf, 0, negative, 1e300
        raise InvalidSetting(f"{ENV}: {text[:40]!r} is not a number of gigabytes above 0 and at most {MAX_GB} "
                             "(e.g. 8 or 7.5)")
    return int(gb * GiB)


def _mem_available(proc: Path) -> int:
    for line in (proc / "meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{proc / 'meminfo'} has no MemAvailable line")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes 'max' for no limit


def _inactive_file(folder: Path) -> int:
    """Page cache the kernel drops before it kills: memory.stat's inactive file pages (0 if unknown)."""
    try:
        lines = (folder / "memory.stat").read_text().splitlines()
    except OSError:
        return 0
    stat = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
    value = stat.get("total_inactive_file", stat.get("inactive_file", "0"))
    return int(value) if value.isdigit() else 0


def _own_cgroups(proc: Path, cgroup: Path) -> list[Path]:
    """The memory cgroup folders of this process, its own first, then each parent up to the mount's root."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = []
    rel = None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            root, rel = cgroup / "memory", path  # cgroup v1
            break
        if controllers == "" and (cgroup / "cgroup.controllers").exists():
            root, rel = cgroup, path  # cgroup v2: one tree
    if rel is None:
        root = cgroup / "memory" if (cgroup / "memory").is_dir() else cgroup
        rel = "/"
    own = root / rel.strip("/")
    if not own.is_dir():  # no cgroup namespace: the path is the host's, and the mount shows ours at its root
        own = root
    return [own, *[p for p in own.parents if p.is_relative_to(root)]] if own != root else [root]


def cgroup_room(held: int = 0, proc: str | os.PathLike = "/proc",
                cgroup: str | os.PathLike = "/sys/fs/cgroup") -> int | None:
    """Bytes models may hold under the tightest memory cgroup limit over this process (held included); None:
    no limit applies."""
    rooms = []
    for folder in _own_cgroups(Path(proc), Path(cgroup)):
        v1 = _read_int(folder / "memory.limit_in_bytes")
        limit = v1 if v1 is not None else _read_int(folder / "memory.max")
        if limit is None or limit >= NO_LIMIT:
            continue
        usage = _read_int(folder / ("memory.usage_in_bytes" if v1 is not None else "memory.current")) or 0
        rooms.append(limit - max(usage - _inactive_file(folder), 0) + held)
    return min(rooms) if rooms else None


def peak_resident_bytes(proc: str | os.PathLike = "/proc") -> int | None:
    """The most memory this process has held resident so far (VmHWM of /proc/self/status); None if unknown."""
    return status_bytes("VmHWM", "self", proc)


def status_bytes(field: str, pid: int | str = "self", proc: str | os.PathLike = "/proc") -> int | None:
    """A memory field of a process's /proc status (VmHWM, VmRSS, RssAnon, ...) in bytes; None where the process
    or the field is missing (gone, or not Linux)."""
    try:
        lines = (Path(proc) / str(pid) / "status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


# --- the store ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Refusal:
    """Why an entry was refused: what it needs beyond what is held, the budget, and what could not go."""

    what: str
    need: int  # bytes the new entry adds (its parts not held already, and the room a load needs)
    held: int  # bytes the store holds
    budget: Budget
    in_use: tuple[str, ...]  # entries that are leased, so they stay
    freeable: int  # bytes that unloading every unleased entry would free


class OverBudget(NotEnoughMemory):
    """An entry does not fit in the budget, even with every unused entry unloaded."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(eq=False)
class _Entry:
    value: Any
    parts: dict[Hashable, int]
    what: str
    leases: int = 0
    used: int = 0  # the store's clock when it was last asked for


class Lease:
    """An entry in use: while a lease is held the store never unloads it. release() (or dropping the lease)
    ends it; release twice is harmless."""

    def __init__(self, store: "ModelStore", key: Hashable) -> None:
        self.key = key
        self._done = weakref.finalize(self, store._release, key)  # a lease that is dropped ends too

    def release(self) -> None:
        self._done()

    @property
    def held(self) -> bool:
        return self._done.alive

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class ModelStore:
    """Models held within a budget; the least recently used unleased entries are unloaded to make room.

    budget: a Budget, or a function of the bytes held -> Budget (read_budget), asked at each new entry.
    say: Refusal -> the message people read (explain.over_budget). collect: run after an unload, so the
    memory goes back before the new entry loads (give_back). Thread-safe."""

    def __init__(self, budget: Budget | Callable[[int], Budget], say: Callable[[Refusal], str],
                 collect: Callable[[], Any] = give_back) -> None:
        self._budget = budget if callable(budget) else (lambda held: budget)
        self._say, self._collect = say, collect
        self._lock = threading.RLock()
        self._entries: dict[Hashable, _Entry] = {}
        self._clock = itertools.count(1)
        self.unloaded: list[Hashable] = []  # keys unloaded to make room, oldest first (what tests and logs read)

    # what is held
    def held(self) -> int:
        """Bytes the store holds: each part once, however many entries share it."""
        with self._lock:
            return sum(self._parts().values())

    def _parts(self, skip=()) -> dict[Hashable, int]:
        parts: dict[Hashable, int] = {}
        for key, e in self._entries.items():
            if key not in skip:
                parts.update(e.parts)
        return parts

    def keys(self) -> list[Hashable]:
        """The keys held, least recently used first."""
        with self._lock:
            return sorted(self._entries, key=lambda k: self._entries[k].used)

    def peek(self, key: Hashable) -> Any:
        """The value held under key (None if none), without counting as a use."""
        with self._lock:
            e = self._entries.get(key)
            return None if e is None else e.value

    def in_use(self, key: Hashable) -> bool:
        with self._lock:
            e = self._entries.get(key)
            return e is not None and e.leases > 0

    def budget(self) -> Budget:
        return self._budget(self.held())

    # asking for an entry
    def lease(self, key: Hashable, parts: Mapping[Hashable, int], make: Callable[[], Any], what: str = "",
              loading: int = 0) -> tuple[Any, Lease]:
        """(the value under key, a lease on it). A new entry is made with make() once room is made for its
        parts (plus `loading` bytes for the moment it loads): OverBudget if there is no room, before make runs.
        make should be cheap (the load itself can run outside, under the lease)."""
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                self._make_room(dict(parts), what or str(key), loading)
                e = self._entries[key] = _Entry(make(), dict(parts), what or str(key))
            e.used = next(self._clock)
            e.leases += 1
            return e.value, Lease(self, key)

    def fits(self, parts: Mapping[Hashable, int], loading: int = 0) -> bool:
        """Would an entry with these parts fit, once every unleased entry that must go is unloaded?"""
        with self._lock:
            return self._plan(dict(parts), loading)[0] is not None

    def need(self, parts: Mapping[Hashable, int], loading: int = 0) -> int:
        """Bytes an entry with these parts adds to what is held now."""
        with self._lock:
            held = self._parts()
            return sum(b for p, b in parts.items() if p not in held) + loading

    def _plan(self, parts: dict, loading: int) -> tuple[list | None, Refusal]:
        """(keys to unload, least recently used first, or None if even all of them would not do, refusal)."""
        budget = self.budget()
        gone: list = []
        for key in [None, *sorted((k for k, e in self._entries.items() if e.leases == 0),
                                  key=lambda k: self._entries[k].used)]:
            if key is not None:
                gone.append(key)
            kept = self._parts(skip=gone)
            need = sum(b for p, b in parts.items() if p not in kept) + loading
            if sum(kept.values()) + need <= budget.bytes:
                return gone, Refusal("", need, sum(kept.values()), budget, (), 0)
        held = self._parts()
        refusal = Refusal("", sum(b for p, b in parts.items() if p not in held) + loading, sum(held.values()),
                          budget, tuple(e.what for e in self._entries.values() if e.leases > 0),
                          sum(held.values()) - sum(self._parts(skip=gone).values()))
        return None, refusal

    def check(self, parts: Mapping[Hashable, int], what: str = "", loading: int = 0) -> list:
        """The keys that must be unloaded for an entry with these parts, least recently used first; OverBudget,
        saying why, if even unloading every unleased entry would not make room."""
        with self._lock:
            gone, refusal = self._plan(dict(parts), loading)
            if gone is None:
                refusal = Refusal(what, refusal.need, refusal.held, refusal.budget, refusal.in_use, refusal.freeable)
                raise OverBudget(refusal, self._say(refusal))
            return gone

    def _make_room(self, parts: dict, what: str, loading: int) -> None:
        gone = self.check(parts, what, loading)
        for key in gone:
            self._unload(key)
        if gone:
            self._collect()  # the dropped models' memory goes back before the new one loads

    def _unload(self, key: Hashable) -> None:
        e = self._entries.pop(key)
        self.unloaded.append(key)
        closer = getattr(e.value, "unload", None)
        if callable(closer):
            closer()

    def discard(self, key: Hashable) -> None:
        """Forget an entry whatever its leases (its load failed): its leases end harmlessly."""
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._collect()

    def clear(self) -> None:
        """Forget every entry (tests; a server that starts over)."""
        with self._lock:
            self._entries.clear()
        self._collect()

    def _release(self, key: Hashable) -> None:
        with self._lock:
            e = self._entries.get(key)
            if e is not None and e.leases > 0:
                e.leases -= 1


__all__ = ["Budget", "ENV", "GiB", "Lease", "ModelStore", "OverBudget", "Refusal", "cgroup_room", "give_back",
           "held_bytes", "int8_bytes_per_param", "peak_resident_bytes", "read_budget", "release_file_pages",
           "status_bytes", "trim"]
