"""What the engine and a model's cache need from the device: a Runner (its methods say what each does).

The decoding engine (decoding/engine.py, decoding/tree.py) and the KV caches (modeling/lm.py) never call the
queue themselves; each is handed a Runner and does its model work through it. `devqueue.QueueRunner` is the
app's (one fair line per device, its worker thread, the load checks; `devqueue.queue_runner(device)`, which an
entry point picks when its caller passes none). `InlineRunner` runs everything in the caller, with no queue, no
threads and no load checks (each pass timed by its wall clock, never judged under load): for tests and scripts.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from contextlib import nullcontext
from typing import Callable, ContextManager, Hashable, Protocol, TypeVar, runtime_checkable

from specviz.device.clock import LoadWatch, PassTime, timed_pass, watching
from specviz.device.devqueue import device_key

T = TypeVar("T")


class Clock(Protocol):
    def stop(self, less_s: float = 0.0) -> PassTime: ...


@runtime_checkable
class Runner(Protocol):
    """The device as the engine and a model's cache use it (module doc)."""

    device: str  # the device's key: 'cpu', 'cuda:0', ...

    def run(self, fn: Callable[[], T], turn: bool = True) -> T:
        """fn() on the device's thread, holding the device; turn=False: pages may draw meanwhile (a load)."""
        ...

    def submit(self, fn: Callable, what: str | None = None, together: Hashable | None = None, item: object = None,
               most: int = 1) -> Future:
        """fn() on the device's thread when its turn comes, with the caller's context: a Future with `waited_s`.
        Jobs of one `together` key in line when one is granted (up to `most`) run as one call fn(items)
        (devqueue.DeviceQueue.submit)."""
        ...

    def wait(self, job: Future) -> None:
        """Until job is done, the session's on_wait hearing its place while it waits; what that raises (a page
        that must stop) cancels it, or, once it runs, is raised after it."""
        ...

    def watch(self) -> ContextManager[LoadWatch]:
        """The passes noted (note_pass) inside the block: how many, and how many ran under outside load."""
        ...

    def clock(self) -> Clock:
        """A clock for one pass, started now."""
        ...

    def note_pass(self, t: PassTime) -> bool:
        """Judge one timed pass for outside load and tell every open watch; the verdict."""
        ...

    def others(self) -> int:
        """How many other owners hold or wait for the device now."""
        ...

    def timed(self, fn: Callable[[], T], spent: Callable[[], float] | None = None) -> tuple[T, PassTime]:
        """(fn(), its PassTime): fn on the device's thread, holding it, timed by clock() with the device's work
        synchronized, less what `spent` grew by (clock.timed_pass); not judged (note_pass that)."""
        ...

    def paused(self) -> ContextManager[None]:
        """This thread lets its turn to draw go for the block (it is about to wait for model work)."""
        ...

    shares_passes: bool  # other owners' passes wait on the same device, so one pass may serve several (pool.py)


class WallClock:
    """A pass's wall and process CPU time, nothing taken off (InlineRunner)."""

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def stop(self, less_s: float = 0.0) -> PassTime:
        return PassTime(time.perf_counter() - self.t0 - less_s, time.process_time() - self.c0, math.nan)


class InlineRunner:
    """Model work in the caller's thread, one caller at a time by trust: no queue, no worker thread, and no
    pass judged under outside load."""

    def __init__(self, device="cpu") -> None:
        self.device = device_key(device)
        self._watches = threading.local()  # per thread: the open watches, innermost last

    def run(self, fn: Callable[[], T], turn: bool = True) -> T:
        return fn()

    def submit(self, fn: Callable, what: str | None = None, together: Hashable | None = None, item: object = None,
               most: int = 1) -> Future:
        job: Future = Future()
        job.waited_s = 0.0
        job.set_running_or_notify_cancel()
        try:
            job.set_result(fn([item]) if together is not None else fn())
        except Exception as e:  # noqa: BLE001 - raised by job.result()
            job.set_exception(e)
        return job

    def wait(self, job: Future) -> None:
        pass  # run by submit already

    def watch(self) -> ContextManager[LoadWatch]:
        return watching(self._watches)

    def clock(self) -> Clock:
        return WallClock()

    def note_pass(self, t: PassTime) -> bool:
        for w in getattr(self._watches, "stack", ()):
            w.passes += 1
            w.wall_s += t.wall
            w.cpu_s += t.cpu
        return False

    def others(self) -> int:
        return 0

    def timed(self, fn: Callable[[], T], spent: Callable[[], float] | None = None) -> tuple[T, PassTime]:
        return timed_pass(self, fn, spent)

    def paused(self) -> ContextManager[None]:
        return nullcontext()  # no turns: nothing to let go

    shares_passes = False  # one caller at a time: no other owner's pass to share
