"""How a server's threads run beside its model work: their priority, the GIL, the garbage collector, and one
thread's own OpenMP and MKL counts.

None of this schedules the device (devqueue.py does): these are settings of the process, each measured in
docs/workshop.md, that keep pages from slowing the model worker.

Priority: a page calls `lower_page_threads()`, which lowers its own thread
and the server's main thread (whose new script threads inherit it) to
niceness $SPECVIZ_PAGE_NICE. The default, 0, leaves them at the server's:
a page draws for a few per cent of a core, and lowered below the model
threads, which take both cores, the pages and the main thread (which serves
every browser) waited for a core while the device stood idle. Nicing cannot
be undone without privileges, so the model work runs off the page's thread
either way.

The GIL: the model worker lets go of it in every PyTorch operation and takes it back after, so a page drawing in
Python makes each operation wait up to Python's switch interval; `handover()` shortens it to
$SPECVIZ_SWITCH_INTERVAL_MS.

The garbage collector: once a pair is loaded the collector tracks hundreds of thousands of objects (models,
tokenizers, libraries), and a full collection walks them all with the GIL held. Any thread's allocations may
start one: a page's, in its turn to draw, or the worker's, mid-pass, which then waits. The server calls
`freeze_heap()` after each load, which moves what is alive then out of the collector's reach (gc.freeze);
$SPECVIZ_GC_FREEZE=0 turns it off.

Threads: `own_threads(n)` gives the calling thread alone n OpenMP threads (GNU OpenMP keeps a count per thread)
and n in MKL; devqueue's `share_cores()` gives the CPU's worker all of them and every other thread one.
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import sys
import threading

from specviz.core.errors import InvalidSetting

ENV_PAGE_NICE = "SPECVIZ_PAGE_NICE"
ENV_GC_FREEZE = "SPECVIZ_GC_FREEZE"  # 0: a server leaves its loaded objects to the garbage collector (freeze_heap)
PAGE_NICE = 0  # the niceness of page threads (0..19; 0 leaves them as they are)
ENV_SWITCH = "SPECVIZ_SWITCH_INTERVAL_MS"
SWITCH_MS = 0.5  # Python's switch interval in a server (ms; Python's own default is 5): see handover()


def _loaded(prefix: str):
    """The one shared library this process loaded whose file name starts with `prefix`, through ctypes; None
    if there is not exactly one."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if os.path.basename(line.split()[-1]).startswith(prefix)}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    try:
        return ctypes.CDLL(paths.pop())
    except OSError:
        return None


def libgomp():
    """The GNU OpenMP runtime this process loaded (for PyTorch), through ctypes; None if there is not one."""
    return _loaded("libgomp")


def mkl_threads(n: int) -> int | None:
    """Give this thread alone n threads in MKL (which PyTorch links into libtorch_cpu for float32 matrix
    products); the count MKL has for it then, or None where this build has no MKL.

    MKL keeps its own count, set process-wide by torch.set_num_threads: after share_cores() set 1, a
    float32 Linear that goes to MKL (transformers as shipped: fastlinear off) ran on one core on the worker."""
    lib = _loaded("libtorch_cpu")
    if lib is None or not hasattr(lib, "mkl_set_num_threads_local") or not hasattr(lib, "mkl_get_max_threads"):
        return None
    lib.mkl_set_num_threads_local(ctypes.byref(ctypes.c_int(n)))  # the Fortran name: its argument by reference
    return int(lib.mkl_get_max_threads())


def own_threads(n: int) -> int:
    """On a worker: give this thread alone n OpenMP threads (and n in MKL); the count it has then."""
    import torch

    torch.get_num_threads()  # PyTorch sets a thread's count from its process-wide one on first use: do it now
    libgomp().omp_set_num_threads(n)  # then this thread's own count (OpenMP keeps one per thread)
    mkl_threads(n)
    return torch.get_num_threads()


# --------------------------------------------------------------------------
# the page threads: priority and the GIL; the heap


def _env_number(name: str, env: str | None, default, parse, lo, hi, what: str):
    """A server setting from $name (or `env`, when given): `default` when empty, else parse(raw) within
    [lo, hi]; InvalidSetting naming the variable otherwise."""
    raw = (os.environ.get(name, "") if env is None else env).strip()
    if not raw:
        return default
    try:
        v = parse(raw)
    except ValueError:
        v = math.nan
    if not lo <= v <= hi:
        raise InvalidSetting(f"{name} must be {what} from {lo} to {hi}, got {raw!r}.")
    return v


def page_nice(env: str | None = None) -> int:
    """$SPECVIZ_PAGE_NICE: the niceness of page threads, 0..19 (PAGE_NICE by default)."""
    return _env_number(ENV_PAGE_NICE, env, PAGE_NICE, int, 0, 19, "an integer")


def thread_nice(tid: int) -> int | None:
    """The niceness of thread `tid` (a native id), or None where it cannot be read."""
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (OSError, AttributeError):
        return None


def lower_thread(tid: int, nice: int) -> bool:
    """Raise thread `tid`'s niceness to `nice` (never lower it: that needs privileges); whether it is there."""
    now = thread_nice(tid)
    if now is None:
        return False
    if now < nice:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:
            return False
    return True


def lower_page_threads(nice: int | None = None) -> bool:
    """Lower this (page) thread and the main thread, which starts the page threads, to `nice`.

    Call it from a page's thread; model work then goes through run(), on threads made before.
    Whether both threads are at that niceness now (False where the system says no).
    """
    nice = page_nice() if nice is None else nice
    if nice == 0:
        return False
    ok = lower_thread(threading.get_native_id(), nice)
    main = threading.main_thread().native_id
    return lower_thread(main, nice) and ok if main is not None else ok


def switch_ms(env: str | None = None) -> float:
    """$SPECVIZ_SWITCH_INTERVAL_MS: Python's switch interval for a server, in ms (SWITCH_MS by default)."""
    return _env_number(ENV_SWITCH, env, SWITCH_MS, float, 0.05, 100, "a number of milliseconds")


def handover(ms: float | None = None) -> float:
    """Set how long a thread that wants the GIL waits before the thread holding it must let go; the seconds set.

    The model worker lets go of the GIL in every PyTorch operation and takes it back after, so while pages
    draw (Python, holding the GIL) each of its operations may wait up to the switch interval: a draft step
    makes hundreds. A shorter interval hands the GIL back sooner. Pages call
    it; while only one thread runs it changes nothing."""
    s = (switch_ms() if ms is None else ms) / 1000
    if sys.getswitchinterval() != s:
        sys.setswitchinterval(s)
    return s


def freeze_heap() -> int:
    """Keep every object alive now out of all later garbage collections (gc.freeze); the number frozen.

    A server calls it once a pair is loaded: a full collection then walks only what was made since (a page's
    runs and charts), not the models, tokenizers and libraries, so it holds the GIL (on the page thread or the
    model worker, wherever an allocation set it off) for far less long. Frozen objects are still freed when
    nothing refers to them; only a reference cycle among them stays. $SPECVIZ_GC_FREEZE=0: nothing is frozen
    (0)."""
    if os.environ.get(ENV_GC_FREEZE, "1") == "0":
        return 0
    gc.collect()  # what is garbage already goes now: frozen, a cycle would never go
    gc.freeze()
    return gc.get_freeze_count()
