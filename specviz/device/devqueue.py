"""One fair queue per device, and the worker threads that run its model work.

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

Trace: with $SPECVIZ_QUEUE_TRACE set to a file, every hold is appended to it
as one JSON line (owner, device, asked, granted, released; seconds since the
epoch). The load test reads it from the server it starts (its `trace_holds`
sums a window of it: how long the device was held and by whom).

Owners: each hold belongs to an owner (a session id). `session(owner, on_wait)`
names the owner of every hold made in this context; `on_wait(ahead)` is called
while the hold waits (ahead = how many other owners are before it, every
poll) and once with None when the device is granted after a wait. An
exception raised by on_wait (a page that must stop) drops the queued ticket.
`cancel(owner)` drops an owner's queued tickets from another thread: each
raises Cancelled, and nothing of it ever holds the device.

Model work before pages: `run(device, fn)` holds the device and runs fn on one of
the device's own worker threads, made at normal priority, while the caller
waits. Loading a model, a round, a pass, a measurement and transformers'
generate in the bench all go through it. Two things follow:
- the cores: only the CPU worker runs PyTorch with all its threads; every other
  thread gets one (`share_cores()`, when the layer starts; $SPECVIZ_SHARE_CORES=0
  turns it off). Each thread that runs parallel work keeps its own team of OpenMP
  threads, and once a process has more of them than cores GNU OpenMP puts them
  to sleep between regions, which slowed every pass after a second thread had
  run model work.
- priority and the GIL: pages draw at the server's priority and hand the GIL back
  quickly (tuning.py).

Starting: importing this module starts no thread and changes no PyTorch setting. `start()` does both, once
per process: `run()` calls it on first use, a page calls it before it lowers its own priority (a worker
inherits the niceness of the thread that makes it), and the command line calls it first.

Drawing apart from model work: a page draws in Python, and Python runs one thread at a time (the GIL).
The model worker lets go of the GIL in every PyTorch operation and must take it back after, so while
another thread draws, each operation may wait for it, and a draft step makes hundreds: a page drawing
next to a draft step slows the step several times over (docs/workshop.md). So model work and drawing
take turns (`Turns`): a page draws inside `QUEUE.drawing()`, which waits while model work holds a device,
and a hold waits for the drawing that asked before it. Each waits only for the other kind that asked
earlier, so neither starves, and pages draw at the same time as each other. A page that asks for model
work while it draws stops drawing until the work is done (`paused()`, also for whatever else waits on
model work, such as a model being loaded by another session); inside model work (a load's progress
bar) drawing passes straight through.

Timing: a pass is timed and judged for outside load by clock.py. The queue's runner (`QueueRunner`) hands each
pass clock the threads the model's work runs on (`team()`, found when the worker's thread count is set), and
`run()` carries the caller's open load watches to the worker.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import queue
import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator

from specviz.core.errors import InvalidSetting, SpecvizError
from specviz.device import clock, tuning

ENV_CONCURRENCY = "SPECVIZ_DEVICE_CONCURRENCY"
MAX_CONCURRENCY = 64  # holders one device may admit: each is a worker thread, made when the device is first used
ENV_SHARE_CORES = "SPECVIZ_SHARE_CORES"  # 0: every thread keeps PyTorch's thread count (share_cores)
ENV_TRACE = "SPECVIZ_QUEUE_TRACE"  # a file: one JSON line per hold (owner, device, asked, granted, released)
POLL_S = 0.05  # how often a waiting hold checks for cancellation and reports its place
MAX_OWNERS_KEPT = 256  # owners whose last hold time a line keeps (wait_estimate), the least recent go first

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
    type or name ("cpu=1,cuda=2"); a device it does not name gets 1. Each value is from 1 to MAX_CONCURRENCY
    (a device gets a worker thread per holder it admits).
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
            bad = [v for v in table.values() if not 1 <= v <= MAX_CONCURRENCY]
            n = bad[0] if bad else n  # a bad value for any device is said whichever device is asked
    except ValueError:
        raise InvalidSetting(f"{ENV_CONCURRENCY} must be an integer (e.g. 1) or a list like 'cpu=1,cuda=2', "
                             f"got {raw[:40]!r}.") from None
    if not 1 <= n <= MAX_CONCURRENCY:
        raise InvalidSetting(f"{ENV_CONCURRENCY} must be from 1 to {MAX_CONCURRENCY}, got {raw[:40]!r}.")
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
    what: str | None = None  # what the work is, for the trace (engine.DecodeStream: its Run's mode)


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
    last_hold_s: dict = field(default_factory=dict)  # owner -> how long its last hold lasted (wait_estimate)


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


def _current_owner() -> str:
    """Who a hold made here belongs to: the current session(), or else this thread."""
    ctx = _owner.get()
    return ctx[0] if ctx else f"thread-{threading.get_ident()}"


def session_on_wait() -> OnWait | None:
    """The on_wait of the current session() (None outside one): what a wait outside the queue reports to."""
    ctx = _owner.get()
    return ctx[1] if ctx else None


def set_session(owner: str, on_wait: OnWait | None = None) -> None:
    """session() for the rest of this context (a page script sets it once per run)."""
    _owner.set((str(owner), on_wait))


class Turns:
    """Model work and drawing take turns in a process: each waits for the other kind that asked before it.

    Tickets are numbered in the order asked; a ticket enters when no ticket of the other kind with a
    smaller number is still open (waiting or in). Same-kind tickets do not wait for each other."""

    KINDS = ("model", "draw")

    def __init__(self):
        self._cond = threading.Condition()
        self._next = 0
        self._open: dict[str, list[int]] = {k: [] for k in self.KINDS}  # open tickets by kind, ascending
        self.waits = {k: 0 for k in self.KINDS}  # how many tickets of each kind had to wait

    def acquire(self, kind: str) -> int:
        """Wait for this kind's turn; the ticket to release."""
        other = "draw" if kind == "model" else "model"
        with self._cond:
            t, self._next = self._next, self._next + 1
            mine = self._open[kind]
            mine.append(t)
            waited = False
            try:
                while self._open[other] and self._open[other][0] < t:
                    waited = True
                    self._cond.wait()
            except BaseException:
                mine.remove(t)
                self._cond.notify_all()
                raise
            self.waits[kind] += waited
            return t

    def release(self, kind: str, t: int) -> None:
        with self._cond:
            self._open[kind].remove(t)
            self._cond.notify_all()

    def open(self) -> dict[str, int]:
        """How many tickets of each kind are open now."""
        with self._cond:
            return {k: len(v) for k, v in self._open.items()}


class DeviceQueue:
    """A fair FIFO queue per device; see the module docstring."""

    def __init__(self, poll_s: float = POLL_S, env: str | None = None, trace: str | None = None):
        self.poll_s = poll_s
        self.trace = trace  # a path: every hold is appended to it as one JSON line (the load test reads it)
        self._env = env  # None: read $SPECVIZ_DEVICE_CONCURRENCY when a device is first used
        self._lock = threading.RLock()  # guards the lines
        self._trace_lock = threading.Lock()  # one trace line written at a time, never under _lock (a slow disk)
        self._cond = threading.Condition(self._lock)  # each ticket waits on its own condition over the same lock
        self._lines: dict[str, _Line] = {}
        self._depth = threading.local()  # per thread: {device: nesting depth}
        self.turns = Turns()  # model work and drawing, apart (see drawing())
        self._drawer = threading.local()  # per thread: .t, the draw ticket it holds (None when not drawing)

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
    def hold(self, device="cpu", owner: str | None = None, on_wait: OnWait | None = None,
             turn: bool = True, what: str | None = None) -> Iterator[Slot]:
        """Wait for this owner's turn on the device, hold it for the block, then pass it on.

        turn=False: pages may draw meanwhile (a model load, which shows no timing and may take minutes).
        what: a label the trace writes with the hold (the load test's trace_holds sorts the holds' times by it)."""
        key = device_key(device)
        ctx = _owner.get()
        owner = _current_owner() if owner is None else owner
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
        with self.paused():  # a page asking while it draws stops drawing until the work is done
            slot = Slot(owner, key, what=what)
            t = _Ticket(owner, wake=threading.Condition(self._lock))
            asked = time.time()
            t0 = time.perf_counter()
            with self._cond:
                line = self._line(key)
                line.waiting.append(t)
                slot.ahead = self._ahead(line, t)
            waited = self._wait_turn(line, t, on_wait)
            try:  # then the drawing that asked before it ends
                ticket = self.turns.acquire("model") if turn else None
            except BaseException:
                self._let_go(line, t)
                raise
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
                with self._cond:  # the measured cost of this owner's turn, for those who wait behind it
                    line.last_hold_s.pop(owner, None)
                    line.last_hold_s[owner] = slot.held_s
                    if len(line.last_hold_s) > MAX_OWNERS_KEPT:
                        del line.last_hold_s[next(iter(line.last_hold_s))]
                if ticket is not None:
                    self.turns.release("model", ticket)
                self._let_go(line, t)
                if self.trace:
                    self._write_trace(slot, asked)

    def _let_go(self, line: _Line, t: _Ticket) -> None:
        """Holder t leaves the device: the next in line may enter."""
        with self._cond:
            line.holders.remove(t)
            self._wake_next(line)

    def _holds_a_device(self) -> bool:
        return any((getattr(self._depth, "d", None) or {}).values())

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """Draw in the block while no model work of this process runs (see Turns, and the module docstring).

        Passes straight through inside drawing() of the same thread, and inside model work (a hold, or a
        device worker running one)."""
        if getattr(self._drawer, "t", None) is not None or self._holds_a_device():
            yield
            return
        self._drawer.t = self.turns.acquire("draw")
        try:
            yield
        finally:
            t, self._drawer.t = self._drawer.t, None
            if t is not None:
                self.turns.release("draw", t)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop this thread's drawing() for the block (which waits on model work), and take a turn again after."""
        t = getattr(self._drawer, "t", None)
        if t is None:
            yield
            return
        self._drawer.t = None
        self.turns.release("draw", t)
        try:
            yield
        finally:
            self._drawer.t = self.turns.acquire("draw")

    def _write_trace(self, slot: Slot, asked: float) -> None:
        """One line per hold, times in seconds since the epoch (so another process can line them up).
        A trace that cannot be written is dropped: it must never cost the work it describes. Written under a lock
        of its own, not the queue's: a slow write holds up the next trace line, never another hold or query."""
        released = time.time()
        row = {"owner": slot.owner, "device": slot.device, "asked": asked,
               "granted": released - slot.held_s, "released": released}
        if slot.what is not None:
            row["what"] = slot.what
        with self._trace_lock:
            try:
                with open(self.trace, "a") as f:
                    f.write(json.dumps(row) + "\n")
            except (OSError, TypeError):
                self.trace = None

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

    def wait_estimate(self, owner: str, device="cpu") -> float | None:
        """Seconds this owner's first queued ticket may still wait: one turn of each other owner before it, each
        as long as that owner's last hold (one never timed: the median of those that were). None when it is not
        in line or no hold has been timed yet."""
        with self._cond:
            line = self._line(device_key(device))
            mine = next((w for w in line.waiting if w.owner == owner), None)
            if mine is None or not line.last_hold_s:
                return None
            before = [h.owner for h in line.holders]
            for w in line.waiting:
                if w is mine:
                    break
                before.append(w.owner)
            typical = statistics.median(line.last_hold_s.values())
            return sum(line.last_hold_s.get(o, typical) for o in dict.fromkeys(before) if o != owner)

    def others(self, device="cpu", owner: str | None = None) -> int:
        """How many other owners hold the device or wait for it now; owner: the current session()'s (or, outside
        one, this thread's, as hold() names it)."""
        owner = _current_owner() if owner is None else owner
        with self._cond:
            line = self._line(device_key(device))
            return len({t.owner for t in (*line.holders, *line.waiting) if t.owner != owner})

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


QUEUE = DeviceQueue(trace=os.environ.get(ENV_TRACE) or None)  # the one queue of this process: every
# session of a server shares it


def hold(device="cpu", what: str | None = None):
    """QUEUE.hold(device) for the owner of the current session(); `what` labels the hold in the trace."""
    return QUEUE.hold(device, what=what)


def drawing():
    """QUEUE.drawing(): a page draws in the block while no model work runs."""
    return QUEUE.drawing()


# --------------------------------------------------------------------------
# model work on the device's own threads, pages below it


class _Workers:
    """Threads that run model work handed over by the threads holding a device (see run())."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pools: dict[str, list[threading.Thread]] = {}
        self._jobs: dict[str, queue.SimpleQueue] = {}
        self._mine = threading.local()  # set on a worker: the key of its device
        self._orders: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: dict[str, int] = {}  # a device's workers' OpenMP threads, where they were set apart
        self.team: dict[str, frozenset[int]] = {}  # the thread ids of a device's worker and its OpenMP team

    def start(self) -> None:
        """Start the thread that makes the workers (see start()): before any page lowers its own priority, since
        a thread inherits its maker's niceness."""
        threading.Thread(target=self._maker, name="specviz-device-maker", daemon=True).start()

    def _maker(self) -> None:
        while True:
            key, made = self._orders.get()
            t = threading.Thread(target=self._loop, args=(key, self.threads.get(key)), name=f"specviz-device-{key}",
                                 daemon=True)
            t.start()
            made.put(t)

    def _loop(self, key: str, threads: int | None) -> None:
        self._mine.key = key
        if threads:  # before any model work: see share_cores()
            tuning.own_threads(threads)
        jobs = self._jobs[key]
        while True:
            jobs.get()()

    def on_worker(self, key: str) -> bool:
        return getattr(self._mine, "key", None) == key

    def submit(self, key: str, size: int, job: Callable[[], None]) -> None:
        with self._lock:
            jobs = self._jobs.setdefault(key, queue.SimpleQueue())
            pool = self._pools.setdefault(key, [])
            while len(pool) < size:  # one per holder the device admits
                made: queue.SimpleQueue = queue.SimpleQueue()
                self._orders.put((key, made))
                pool.append(made.get())
        jobs.put(job)


_WORKERS = _Workers()
_START = threading.RLock()  # held while the layer starts: a second thread's first run() waits for it
_started = False


def start() -> None:
    """Start the device layer, once per process: the thread that makes the devices' workers, then the CPU's
    cores given to its worker (share_cores). Its model work goes to the worker directly, not through the queue,
    so a thread that already holds the device and starts the layer waits for nothing but this."""
    global _started
    with _START:
        if _started:
            return
        _started = True
        _WORKERS.start()
        share_cores()


def run(device, fn: Callable[[], object], turn: bool = True):
    """Hold the device (QUEUE.hold) and run fn() on one of its worker threads; return what fn returns.

    The caller waits; fn sees the caller's context variables (its owner too, outside a session()), holds,
    load watches and PyTorch grad/inference mode, and its exception is raised here. Inside a hold of a worker, fn runs directly.
    turn=False: pages may draw meanwhile (loading a model; see QUEUE.hold).
    """
    start()
    key = device_key(device)
    with QUEUE.hold(key, turn=turn):
        if _WORKERS.on_worker(key):
            return fn()
        return _on_worker(key, fn)


def _on_worker(key: str, fn: Callable[[], object]):
    import torch

    ctx = contextvars.copy_context()
    if ctx.get(_owner) is None:  # outside a session(): fn's holds and others() are still the caller's thread's
        ctx.run(_owner.set, (_current_owner(), None))
    depth = getattr(QUEUE._depth, "d", None)  # the caller holds the device: its nested holds pass through
    stack = clock.open_watches()
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    done, box = threading.Event(), {}

    def job() -> None:
        QUEUE._depth.d = depth
        clock.use_watches(stack)
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                box["value"] = ctx.run(fn)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller, raised there
            box["error"] = e
        finally:
            QUEUE._depth.d = None
            clock.use_watches(None)
            done.set()

    _WORKERS.submit(key, QUEUE.limit(key), job)
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


# --------------------------------------------------------------------------
# the CPU's cores: one team of OpenMP threads, on the CPU's worker (tuning.own_threads sets a thread's count)


def share_cores() -> int | None:
    """Give the CPU's cores to its worker: one OpenMP team in the process; the worker's thread count.

    Every thread of PyTorch's that runs parallel work keeps a team of OpenMP threads, and
    GNU OpenMP stops its threads spinning between two parallel regions once the process has
    more of them than cores: they sleep, and every region pays for waking them, so two threads
    that had each run model work made every pass after that slower. So the worker, which runs
    all model work, keeps PyTorch's thread count, and every other thread (pages, the main
    thread) gets one thread: what they compute runs on their own core and starts no team.
    Called once, by start(); None, and nothing changed, where this runtime cannot set one
    thread's count alone (not GNU OpenMP) or there is one core.
    """
    import torch

    try:
        limit = QUEUE.limit("cpu")
    except InvalidSetting:  # a bad $SPECVIZ_DEVICE_CONCURRENCY: said by the first hold (the CLI: at its start)
        return None
    n = torch.get_num_threads()
    if n <= 1 or os.environ.get(ENV_SHARE_CORES, "1") == "0" or tuning.libgomp() is None:
        return None
    with _WORKERS._lock:
        _WORKERS.threads["cpu"] = n
    torch.set_num_threads(1)  # this thread and every thread that starts from now
    _WORKERS.submit("cpu", limit, lambda: None)  # make the worker now, with its n threads
    got = _on_worker("cpu", torch.get_num_threads)
    if got != n:  # the runtime did not keep a per-thread count: back to PyTorch's own setting
        torch.set_num_threads(n)
        with _WORKERS._lock:
            _WORKERS.threads.pop("cpu", None)
        return None
    _find_team("cpu", _on_worker)
    return n


def _native_ids() -> set[int]:
    """The ids of this process's threads that Python did not start (OpenMP's, among others); empty where
    /proc cannot be read."""
    try:
        tids = {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()
    return tids - {t.native_id for t in threading.enumerate()}


def _find_team(key: str, on_worker: Callable = run) -> frozenset[int]:
    """Record the thread ids of the device's worker and of the OpenMP team it runs model work with.

    The team is made by the worker's first parallel region: the threads that appear across one are its own.
    A grown team adds threads; a shrunk one leaves idle threads, which never wait for a core. No team (no
    correction of pass times) where the model's threads outnumber the cores this process may use: they would
    then wait for each other, which is no other program's doing."""
    import torch

    def find() -> frozenset[int]:
        before = _native_ids()
        torch.ones(1 << 20).add_(1)  # (2^20,): big enough for every thread of the team to take a share
        return frozenset({threading.get_native_id()} | (_native_ids() - before))

    found = on_worker(key, find)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    readable = not math.isnan(clock.run_delay_s(found))
    with _WORKERS._lock:
        team = _WORKERS.team.get(key, frozenset()) | found
        _WORKERS.team[key] = team if readable and model_threads(key) <= cores else frozenset()
        return _WORKERS.team[key]


def team(device="cpu") -> frozenset[int]:
    """The thread ids whose waits for a core are taken off the device's pass times (empty: none are)."""
    return _WORKERS.team.get(device_key(device), frozenset())


def model_threads(device="cpu") -> int:
    """The OpenMP threads the device's model work runs with (the worker's; PyTorch's own count otherwise)."""
    got = _WORKERS.threads.get(device_key(device))
    if got:
        return got
    import torch

    return torch.get_num_threads()


def set_model_threads(n: int, device="cpu") -> int:
    """Run the device's model work with n OpenMP threads from now on; the count it has then."""
    start()
    key = device_key(device)
    if not _WORKERS.threads.get(key):
        import torch

        torch.set_num_threads(n)
        return torch.get_num_threads()
    got = run(key, lambda: tuning.own_threads(n))
    with _WORKERS._lock:
        _WORKERS.threads[key] = got
    _find_team(key)
    return got


# --------------------------------------------------------------------------
# the queue as the engine's runner (specviz/device/runner.py)


@dataclass(frozen=True)
class QueueRunner:
    """The device as the app runs it (runner.Runner): the fair queue and the device's worker thread of this module,
    the pass clock and the load checks of clock.py, for one device."""

    device: str  # its key (device_key)

    def hold(self, what: str | None = None):
        return QUEUE.hold(self.device, what=what)

    def run(self, fn: Callable[[], object], turn: bool = True):
        return run(self.device, fn, turn=turn)

    def watch(self):
        return clock.watch()

    def clock(self) -> clock.PassClock:
        return clock.PassClock(self.device, team(self.device))

    def note_pass(self, t: clock.PassTime) -> bool:
        return clock.note_pass(self.device, t.wall, t.cpu, model_threads(self.device), t.others, t.stalled)

    def others(self) -> int:
        return QUEUE.others(self.device)

    def timed(self, fn: Callable[[], object]) -> tuple[object, clock.PassTime]:
        return clock.timed_pass(self, fn)

    def paused(self) -> ContextManager[None]:
        return QUEUE.paused()

    shares_passes = True  # other sessions' passes queue on the same device: a verify pass may be shared (pool.py)


def queue_runner(device) -> QueueRunner:
    """The shared queue's runner for `device`: what an entry point uses when its caller passes no runner."""
    return QueueRunner(device_key(device))
