"""One fair queue per device, and a check for load from outside the app.

All model work goes through `QUEUE.hold(device)`: at most `limit(device)`
holders at a time (1 by default; $SPECVIZ_DEVICE_CONCURRENCY), granted in the
order they asked (a ticket lock, first come first served). Work is held in
small pieces, one decoding round or one measured pass, so a long job (a sweep,
a trial, a batch measurement) lines up again after every piece and a short
run waiting behind it gets the device after at most one piece of each job
ahead of it.

    with QUEUE.hold(device) as slot:   # waits its turn; slot.waited_s, slot.held_s
        ...one round of model work...

A hold inside a hold of the same thread and device passes straight through
(a round holds the device; its passes, which also ask, do not queue again).

Owners: each hold belongs to an owner (a session id). `session(owner, on_wait)`
names the owner of every hold made in this context; `on_wait(ahead)` is called
while the hold waits (ahead = how many other owners are before it, every
poll) and once with None when the device is granted after a wait. An
exception raised by on_wait (a page that must stop) drops the queued ticket.
`cancel(owner)` drops an owner's queued tickets from another thread: each
raises Cancelled, and nothing of it ever holds the device.

Outside load: the queue orders this app's work but cannot stop other programs.
`note_pass` compares a pass's process CPU time with wall time × threads; a CPU
pass that got well under its share of the cores ran while something else was
using them. `watch()` collects the verdicts of the passes made inside it.
"""

from __future__ import annotations

import contextvars
import math
import os
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .errors import InvalidSetting, SpecvizError

ENV_CONCURRENCY = "SPECVIZ_DEVICE_CONCURRENCY"
POLL_S = 0.05  # how often a waiting hold checks for cancellation and reports its place
BUSY_SHARE = 0.6  # a CPU pass that got less than this share of wall × threads ran under outside load
MIN_PASS_S = 0.005  # passes shorter than this are too short to judge

OnWait = Callable[[int | None], None]


class Cancelled(SpecvizError):
    """Queued model work was dropped (its session ended, or a new run replaced it)."""


# --------------------------------------------------------------------------
# settings


def device_key(device) -> str:
    """'cpu', 'cuda:0', ...: one queue per physical device ('cuda' means cuda:0)."""
    s = str(device)
    return "cuda:0" if s == "cuda" else s


def concurrency(device, env: str | None = None) -> int:
    """How many holders a device admits: $SPECVIZ_DEVICE_CONCURRENCY, 1 by default.

    The variable is either one integer for every device ("2") or a list by device
    type or name ("cpu=1,cuda=2"); a device it does not name gets 1.
    """
    raw = os.environ.get(ENV_CONCURRENCY, "") if env is None else env
    raw = raw.strip()
    if not raw:
        return 1
    key = device_key(device)
    kind = key.split(":")[0]
    try:
        if "=" not in raw:
            n = int(raw)
        else:
            table = {}
            for part in raw.split(","):
                name, _, value = part.partition("=")
                table[name.strip()] = int(value)
            n = table.get(key, table.get(kind, 1))
    except ValueError:
        raise InvalidSetting(f"{ENV_CONCURRENCY} must be an integer (e.g. 1) or a list like 'cpu=1,cuda=2', "
                             f"got {raw!r}.") from None
    if n < 1:
        raise InvalidSetting(f"{ENV_CONCURRENCY} must be at least 1, got {raw!r}.")
    return n


# --------------------------------------------------------------------------
# the queue


@dataclass
class Slot:
    """One hold: who, where, how long it waited for its turn and how long it held the device."""

    owner: str
    device: str
    ahead: int = 0  # other owners before it when it asked
    waited_s: float = 0.0
    held_s: float = 0.0
    nested: bool = False  # inside another hold of the same thread: passed straight through


@dataclass(eq=False)
class _Ticket:
    owner: str
    cancelled: bool = False
    wake: threading.Condition | None = None  # notified when this ticket may enter (or is cancelled)


@dataclass
class _Line:
    """The queue of one device."""

    limit: int
    holders: list[_Ticket] = field(default_factory=list)
    waiting: deque = field(default_factory=deque)  # of _Ticket, first come first
    grants: int = 0
    max_holders: int = 0
    longest_wait_s: float = 0.0


_owner: contextvars.ContextVar[tuple[str, OnWait | None] | None] = contextvars.ContextVar("specviz_owner",
                                                                                      default=None)


@contextmanager
def session(owner: str, on_wait: OnWait | None = None) -> Iterator[None]:
    """Holds made in this context belong to `owner`; on_wait hears where they wait."""
    token = _owner.set((str(owner), on_wait))
    try:
        yield
    finally:
        _owner.reset(token)


def set_session(owner: str, on_wait: OnWait | None = None) -> None:
    """session() for the rest of this context (a page script sets it once per run)."""
    _owner.set((str(owner), on_wait))


class DeviceQueue:
    """A fair FIFO queue per device; see the module docstring."""

    def __init__(self, poll_s: float = POLL_S, env: str | None = None):
        self.poll_s = poll_s
        self._env = env  # None: read $SPECVIZ_DEVICE_CONCURRENCY when a device is first used
        self._lock = threading.RLock()  # guards the lines
        self._cond = threading.Condition(self._lock)  # each ticket waits on its own condition over the same lock
        self._lines: dict[str, _Line] = {}
        self._depth = threading.local()  # per thread: {device: nesting depth}

    def _line(self, key: str) -> _Line:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(concurrency(key, self._env))
        return line

    def limit(self, device) -> int:
        with self._cond:
            return self._line(device_key(device)).limit

    @staticmethod
    def _ahead(line: _Line, t: _Ticket) -> int:
        """Other owners holding the device or queued before ticket t."""
        before = list(line.holders)
        for w in line.waiting:
            if w is t:
                break
            before.append(w)
        return len({w.owner for w in before if w.owner != t.owner})

    @staticmethod
    def _may_enter(line: _Line, t: _Ticket) -> bool:
        free = line.limit - len(line.holders)
        return free > 0 and any(w is t for w, _ in zip(line.waiting, range(free)))

    @contextmanager
    def hold(self, device="cpu", owner: str | None = None, on_wait: OnWait | None = None) -> Iterator[Slot]:
        """Wait for this owner's turn on the device, hold it for the block, then pass it on."""
        key = device_key(device)
        ctx = _owner.get()
        if owner is None:
            owner = ctx[0] if ctx else f"thread-{threading.get_ident()}"
        if on_wait is None and ctx is not None:
            on_wait = ctx[1]
        depth = getattr(self._depth, "d", None)
        if depth is None:
            depth = self._depth.d = {}
        if depth.get(key):  # this thread already holds the device: a pass inside a round
            depth[key] += 1
            try:
                yield Slot(owner, key, nested=True)
            finally:
                depth[key] -= 1
            return
        slot = Slot(owner, key)
        t = _Ticket(owner, wake=threading.Condition(self._lock))
        t0 = time.perf_counter()
        with self._cond:
            line = self._line(key)
            line.waiting.append(t)
            slot.ahead = self._ahead(line, t)
        waited = self._wait_turn(line, t, on_wait)
        slot.waited_s = time.perf_counter() - t0
        depth[key] = 1
        t1 = time.perf_counter()
        try:
            with self._cond:
                line.longest_wait_s = max(line.longest_wait_s, slot.waited_s)
            if waited and on_wait is not None:
                on_wait(None)  # granted after a wait: the page clears its notice
            yield slot
        finally:
            slot.held_s = time.perf_counter() - t1
            depth[key] = 0
            with self._cond:
                line.holders.remove(t)
                self._wake_next(line)

    def _wait_turn(self, line: _Line, t: _Ticket, on_wait: OnWait | None) -> bool:
        """Wait until queued ticket t may hold the device, then make it a holder; return whether it waited.

        Cancelled (or whatever on_wait raises) drops the ticket from the line."""
        waited = False
        try:
            while True:
                with self._cond:
                    if t.cancelled:
                        raise Cancelled("This session's queued model work was dropped (the session ended or a "
                                        "new run replaced it).")
                    if self._may_enter(line, t):
                        line.waiting.remove(t)
                        line.holders.append(t)
                        line.grants += 1
                        line.max_holders = max(line.max_holders, len(line.holders))
                        return waited
                    if waited:  # first report at once, then after each poll
                        t.wake.wait(self.poll_s)
                        if self._may_enter(line, t) or t.cancelled:
                            continue
                    ahead = self._ahead(line, t)
                waited = True
                if on_wait is not None:
                    on_wait(ahead)  # may raise: a page that must stop drops its ticket
        except BaseException:
            with self._cond:
                if t in line.waiting:
                    line.waiting.remove(t)
                self._wake_next(line)
            raise

    @staticmethod
    def _wake_next(line: _Line) -> None:
        """Wake only the tickets that may enter now: one handover wakes one waiter, not the whole room."""
        free = line.limit - len(line.holders)
        for w, _ in zip(line.waiting, range(max(0, free))):
            w.wake.notify()

    def ahead(self, owner: str, device="cpu") -> int | None:
        """Other owners before this owner's first queued ticket; 0 if it holds the device, None if absent."""
        with self._cond:
            line = self._line(device_key(device))
            if any(h.owner == owner for h in line.holders):
                return 0
            for w in line.waiting:
                if w.owner == owner:
                    return self._ahead(line, w)
            return None

    def cancel(self, owner: str) -> int:
        """Drop every queued ticket of `owner` (each hold raises Cancelled); return how many.

        A hold already granted finishes its piece (one round or pass) and lets go.
        """
        n = 0
        with self._cond:
            for line in self._lines.values():
                for w in line.waiting:
                    if w.owner == owner and not w.cancelled:
                        w.cancelled = True
                        w.wake.notify()
                        n += 1
                self._wake_next(line)
        return n

    def stats(self, device="cpu") -> dict:
        """Grants so far, the most holders at once, the longest wait, and who holds / waits now."""
        with self._cond:
            line = self._line(device_key(device))
            return {"limit": line.limit, "grants": line.grants, "max_holders": line.max_holders,
                    "longest_wait_s": line.longest_wait_s, "holders": [h.owner for h in line.holders],
                    "waiting": [w.owner for w in line.waiting]}


QUEUE = DeviceQueue()  # the one queue of this process: every session of a server shares it


def hold(device="cpu"):
    """QUEUE.hold(device) for the owner of the current session()."""
    return QUEUE.hold(device)


# --------------------------------------------------------------------------
# load from outside the app


def cpu_share(cpu_s: float, wall_s: float, threads: int) -> float:
    """The share of `threads` cores a pass got: process CPU time / (wall time × threads)."""
    return cpu_s / (wall_s * max(1, threads)) if wall_s > 0 else math.nan


def outside_load(cpu_s: float, wall_s: float, threads: int) -> bool:
    """True when a CPU pass long enough to judge got well under its share of the cores."""
    return wall_s >= MIN_PASS_S and cpu_share(cpu_s, wall_s, threads) < BUSY_SHARE


def load_text(what: str) -> str:
    """The warning shown next to figures taken under outside load; `what` says which timings."""
    return (f"Taken under outside load: {what} ran while other programs on this machine were using the CPU "
            "(a pass got well under its share of the cores). These timings, and the figures made from them, "
            "are not this device's speed: measure again when the machine is quiet.")


@dataclass(eq=False)  # watches nest: leaving one must remove that one, not an outer one with equal counts
class LoadWatch:
    """The passes timed inside one watch(): how many, and how many ran under outside load."""

    passes: int = 0
    busy_passes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def busy(self) -> bool:
        return self.busy_passes > 0

    def note(self) -> str | None:
        """load_text() for these passes, or None when none was under outside load."""
        return load_text(f"{self.busy_passes} of {self.passes} timed passes") if self.busy else None


_watches = threading.local()


@contextmanager
def watch() -> Iterator[LoadWatch]:
    """Collect note_pass() verdicts of this thread's passes inside the block (watches nest)."""
    stack = getattr(_watches, "stack", None)
    if stack is None:
        stack = _watches.stack = []
    w = LoadWatch()
    stack.append(w)
    try:
        yield w
    finally:
        stack.remove(w)


def note_pass(device, wall_s: float, cpu_s: float, threads: int) -> bool:
    """Judge one timed pass (CPU passes only) and tell every open watch(); return the verdict."""
    busy = device_key(device) == "cpu" and outside_load(cpu_s, wall_s, threads)
    for w in getattr(_watches, "stack", None) or []:
        w.passes += 1
        w.busy_passes += busy
        w.wall_s += wall_s
        w.cpu_s += cpu_s
    return busy
