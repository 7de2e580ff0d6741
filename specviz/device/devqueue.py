"""The model service's core: one line of model work per device, and the worker threads that run it.

All model work is a `Job` (a concurrent.futures.Future) in its device's line. Each of the device's
`limit(device)` workers (1 by default, $SPECVIZ_DEVICE_CONCURRENCY) takes the first job, runs it with its
caller's context (_carried) and sets its result: first come, first served. Work comes in pieces (a round, a
pass), so a stop waits at most for the piece in flight, and a long job lines up again after every piece.

    job = QUEUE.submit(device, fn)     # fn() on the device's worker when its turn comes: a Future
    QUEUE.wait(job, on_wait)           # until it is done, on_wait hearing its place; a stop cancels it
    run(device, fn)                    # submit, wait, result; on the worker (a pass inside a round): at once

Jobs of one `together` key in line when one is granted run as one call (decoding/pool.py's shared verify
pass). A job belongs to the owner of `session(owner, on_wait)`; `cancel(owner)` drops its queued jobs. What
the rest is for (Turns, share_cores, the maker thread, the trace) and why: docs/architecture.md, "The device
as a runner". Importing this module starts no thread and changes no PyTorch setting: `start()` does, once.
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
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Hashable, Iterator

from specviz.core.errors import InvalidSetting, SpecvizError
from specviz.device import clock, tuning

ENV_CONCURRENCY = "SPECVIZ_DEVICE_CONCURRENCY"
MAX_CONCURRENCY = 64  # workers one device may have, each running one job at a time
ENV_SHARE_CORES = "SPECVIZ_SHARE_CORES"  # 0: every thread keeps PyTorch's thread count (share_cores)
ENV_TRACE = "SPECVIZ_QUEUE_TRACE"  # a file: one JSON line per job (owner, device, asked, granted, released)
POLL_S = 0.05  # how often a waiting caller reports its place (and may be told to stop)
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
# the line


class Job(Future):
    """One piece of model work in a device's line (DeviceQueue.submit). cancel() takes it out of the line while
    it waits (True), never once it runs (False); `granted` is set when it holds the device or is cancelled."""

    def __init__(self, line: "_Line", owner: str, fn: Callable, what: str | None, turn: bool,
                 together: Hashable | None, item: object, most: int):
        super().__init__()
        self.line, self.owner, self.fn, self.what, self.turn = line, owner, fn, what, turn
        self.together, self.item, self.most = together, item, most
        self.asked, self.t0 = time.time(), time.perf_counter()
        self.waited_s = 0.0
        self.granted = threading.Event()
        self.row: dict | None = None  # its trace line, made by the worker, written by its caller (DeviceQueue.done)

    def cancel(self) -> bool:
        with self.line.cond:
            if self in self.line.waiting:
                self.line.waiting.remove(self)
            ok = super().cancel()
        if ok:
            self.granted.set()
        return ok


@dataclass
class _Line:
    """The jobs of one device: those running (holders) and those waiting, first come first."""

    key: str
    limit: int
    cond: threading.Condition
    holders: list[Job] = field(default_factory=list)
    waiting: deque = field(default_factory=deque)
    workers: int = 0
    grants: int = 0
    max_holders: int = 0
    longest_wait_s: float = 0.0
    last_hold_s: dict = field(default_factory=dict)  # owner -> how long its last job lasted (wait_estimate)

    def ahead(self, job: Job) -> int:
        """Other owners running or queued before job."""
        before = [*self.holders, *(w for w, _ in zip(self.waiting, range(self._index(job))))]
        return len({w.owner for w in before if w.owner != job.owner})

    def _index(self, job: Job) -> int:
        return next((i for i, w in enumerate(self.waiting) if w is job), len(self.waiting))

    def take(self) -> list[Job]:
        """Under cond: the first job in line and, if it goes together, the others of its key (up to its most)."""
        job = self.waiting.popleft()
        batch = [job]
        if job.together is not None:
            batch += [w for w in self.waiting if w.together == job.together][:job.most - 1]
            for w in batch[1:]:
                self.waiting.remove(w)
        for j in batch:
            j.set_running_or_notify_cancel()
        self.holders.append(job)
        self.grants += 1
        self.max_holders = max(self.max_holders, len(self.holders))
        return batch


_owner: contextvars.ContextVar[tuple[str, OnWait | None] | None] = contextvars.ContextVar("specviz_owner",
                                                                                      default=None)


@contextmanager
def session(owner: str, on_wait: OnWait | None = None) -> Iterator[None]:
    """Jobs asked in this context belong to `owner`; on_wait hears where they wait."""
    token = _owner.set((str(owner), on_wait))
    try:
        yield
    finally:
        _owner.reset(token)


def _current_owner() -> str:
    """Who a job asked here belongs to: the current session(), or else this thread."""
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
    """A line of jobs per device and the workers that run them; see the module docstring."""

    def __init__(self, poll_s: float = POLL_S, env: str | None = None, trace: str | None = None):
        self.poll_s = poll_s
        self.trace = trace  # a path: every job is appended to it as one JSON line (the load test reads it)
        self._env = env  # None: read $SPECVIZ_DEVICE_CONCURRENCY when a device is first used
        self._lock = threading.RLock()  # guards the lines
        self._trace_lock = threading.Lock()  # one trace line written at a time, never under _lock (a slow disk)
        self._staff_lock = threading.Lock()  # held while a device's workers are made
        self._lines: dict[str, _Line] = {}
        self._here = threading.local()  # per thread: .worker (the key of the device whose worker this is),
        # .drawer (the draw ticket it holds)
        self.turns = Turns()  # model work and drawing, apart (see drawing())
        self.threads: dict[str, int] = {}  # a device's workers' OpenMP threads, where they were set apart
        self.team: dict[str, frozenset[int]] = {}  # the thread ids of a device's worker and its OpenMP team

    def _line(self, key: str) -> _Line:
        with self._lock:
            line = self._lines.get(key)
            if line is None:
                line = self._lines[key] = _Line(key, concurrency(key, self._env), threading.Condition(self._lock))
            return line

    def limit(self, device) -> int:
        return self._line(device_key(device)).limit

    def on_worker(self, key: str) -> bool:
        return getattr(self._here, "worker", None) == key

    # -- jobs and their workers

    def submit(self, device, fn: Callable, *, owner: str | None = None, what: str | None = None,
               turn: bool = True, together: Hashable | None = None, item: object = None, most: int = 1) -> Job:
        """Put fn in the device's line: a worker runs fn() when its turn comes, with this thread's context (see
        _carried), and the Job gives its result.

        turn=False: pages may draw meanwhile (a model load, which shows no timing and may take minutes).
        together: the jobs of this key in line when one is granted (up to `most`) run as one call of the first's
        fn, given their `item`s in line order; each Job then gives what that call returned.
        what: a label the trace writes with the job (the load test's trace_holds sorts times by it)."""
        start()
        line = self._line(device_key(device))
        here = self.on_worker(line.key)  # model work asked inside model work (a run inside a measurement): at once
        job = Job(line, _current_owner() if owner is None else owner, fn if here else _carried(fn), what, turn,
                  together, item, most)
        if here:
            job.set_running_or_notify_cancel()
            job.granted.set()
            _settle([job], *_outcome([job]))
            return job
        self._staff(line)
        with line.cond:
            line.waiting.append(job)
            line.cond.notify_all()
        return job

    def _staff(self, line: _Line) -> None:
        """Make the device's workers (one per job it may run at once) through the maker thread (start())."""
        with self._staff_lock:
            while line.workers < line.limit:
                made: queue.SimpleQueue = queue.SimpleQueue()
                _ORDERS.put((self._work, line, made))
                made.get()
                line.workers += 1

    def _work(self, line: _Line) -> None:
        """A worker: the first job in line, run, then the next."""
        self._here.worker = line.key
        threads = self.threads.get(line.key)
        if threads:  # before any model work: see share_cores()
            tuning.own_threads(threads)
        while True:
            with line.cond:
                while not line.waiting:
                    line.cond.wait()
                batch = line.take()
            self._serve(line, batch)

    def _serve(self, line: _Line, batch: list[Job]) -> None:
        """Run a granted job (with those that go with it) and let go of the device before its result is set."""
        job = batch[0]
        ticket = self.turns.acquire("model") if job.turn else None  # after the drawing that asked before it
        t1 = time.perf_counter()
        for j in batch:
            j.waited_s = t1 - j.t0
        with line.cond:
            line.longest_wait_s = max(line.longest_wait_s, job.waited_s)
        for j in batch:
            j.granted.set()
        out, error = _outcome(batch)
        held = time.perf_counter() - t1
        if ticket is not None:
            self.turns.release("model", ticket)
        with line.cond:  # the measured cost of this owner's turn, for those who wait behind it
            line.holders.remove(job)
            line.last_hold_s.pop(job.owner, None)
            line.last_hold_s[job.owner] = held
            if len(line.last_hold_s) > MAX_OWNERS_KEPT:
                del line.last_hold_s[next(iter(line.last_hold_s))]
        released = time.time()
        job.row = {"owner": job.owner, "device": line.key, "asked": job.asked, "granted": released - held,
                   "released": released, **({"what": job.what} if job.what is not None else {})}
        _settle(batch, out, error)

    def wait(self, job: Job, on_wait: OnWait | None) -> None:
        """Until job is done. While it waits for the device, on_wait hears its place after each poll (and None
        once it is granted after a wait); what on_wait raises, or a cancel (Cancelled), takes the job out of the
        line. A job granted just as its caller stops is finished first, and the stop raised after it."""
        waited = False
        try:
            while not job.granted.wait(self.poll_s):
                waited = True
                if on_wait is not None:
                    with job.line.cond:
                        ahead = job.line.ahead(job)
                    on_wait(ahead)
            if job.cancelled():
                raise Cancelled("This session's queued model work was dropped (the session ended or a new run "
                                "replaced it).")
        except BaseException:
            if not job.cancel():
                self.done(job)
            raise
        if waited and on_wait is not None:
            on_wait(None)  # granted after a wait: the page clears its notice
        self.done(job)

    def done(self, job: Job) -> None:
        """Until job is done; then its trace line is written, by its caller: a slow disk never holds the worker."""
        job.exception()
        row, job.row = job.row, None
        if self.trace and row is not None:
            with self._trace_lock:
                try:
                    with open(self.trace, "a") as f:
                        f.write(json.dumps(row) + "\n")
                except (OSError, TypeError):
                    self.trace = None

    def call(self, device, fn: Callable[[], object], turn: bool = True, owner: str | None = None,
             what: str | None = None):
        """fn() on the device's worker: at once on the worker (a pass inside a round), else as a job of its own
        that waits its turn (wait(), with the current session's on_wait); what fn returns, or raises."""
        key = device_key(device)
        if self.on_worker(key):
            return fn()
        with self.paused():  # a page asking while it draws stops drawing until the work is done
            job = self.submit(key, fn, owner=owner, turn=turn, what=what)
            self.wait(job, session_on_wait())
            return job.result()

    # -- drawing

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """Draw in the block while no model work of this process runs (see Turns, and the module docstring).

        Passes straight through inside drawing() of the same thread, and on a device's worker (model work)."""
        if getattr(self._here, "drawer", None) is not None or getattr(self._here, "worker", None) is not None:
            yield
            return
        self._here.drawer = self.turns.acquire("draw")
        try:
            yield
        finally:
            t, self._here.drawer = self._here.drawer, None
            if t is not None:
                self.turns.release("draw", t)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop this thread's drawing() for the block (which waits on model work), and take a turn again after."""
        t = getattr(self._here, "drawer", None)
        if t is None:
            yield
            return
        self._here.drawer = None
        self.turns.release("draw", t)
        try:
            yield
        finally:
            self._here.drawer = self.turns.acquire("draw")

    # -- who waits

    def ahead(self, owner: str, device="cpu") -> int | None:
        """Other owners before this owner's first queued job; 0 if one of its jobs runs, None if absent."""
        line = self._line(device_key(device))
        with line.cond:
            if any(h.owner == owner for h in line.holders):
                return 0
            mine = next((w for w in line.waiting if w.owner == owner), None)
            return None if mine is None else line.ahead(mine)

    def wait_estimate(self, owner: str, device="cpu") -> float | None:
        """Seconds this owner's first queued job may still wait: one turn of each other owner before it, each
        as long as that owner's last job (one never timed: the median of those that were). None when it is not
        in line or no job has been timed yet."""
        line = self._line(device_key(device))
        with line.cond:
            mine = next((w for w in line.waiting if w.owner == owner), None)
            if mine is None or not line.last_hold_s:
                return None
            before = [h.owner for h in line.holders] + [w.owner for w in list(line.waiting)[:line._index(mine)]]
            typical = statistics.median(line.last_hold_s.values())
            return sum(line.last_hold_s.get(o, typical) for o in dict.fromkeys(before) if o != owner)

    def others(self, device="cpu", owner: str | None = None) -> int:
        """How many other owners run or wait for the device now; owner: the current session()'s (or, outside
        one, this thread's)."""
        owner = _current_owner() if owner is None else owner
        line = self._line(device_key(device))
        with line.cond:
            return len({j.owner for j in (*line.holders, *line.waiting) if j.owner != owner})

    def cancel(self, owner: str) -> int:
        """Cancel every queued job of `owner` (each caller raises Cancelled); return how many. A job that runs
        finishes its piece (one round or pass) and lets go."""
        with self._lock:
            jobs = [w for line in self._lines.values() for w in line.waiting if w.owner == owner]
        return sum(j.cancel() for j in jobs)

    def stats(self, device="cpu") -> dict:
        """Grants so far, the most holders at once, the longest wait, and who holds / waits now."""
        line = self._line(device_key(device))
        with line.cond:
            return {"limit": line.limit, "grants": line.grants, "max_holders": line.max_holders,
                    "longest_wait_s": line.longest_wait_s, "holders": [h.owner for h in line.holders],
                    "waiting": [w.owner for w in line.waiting]}


def _outcome(batch: list[Job]) -> tuple[object, BaseException | None]:
    """(what the first job's fn returned, None) or (None, what it raised): given the batch's items when it goes
    together, else no arguments."""
    job = batch[0]
    try:
        return (job.fn([j.item for j in batch]) if job.together is not None else job.fn()), None
    except BaseException as e:  # noqa: BLE001 - the job's, raised in its caller
        return None, e


def _settle(batch: list[Job], out: object, error: BaseException | None) -> None:
    """Every job of the batch gives the one call's outcome."""
    for j in batch:
        j.set_result(out) if error is None else j.set_exception(error)


def _carried(fn: Callable) -> Callable:
    """fn, to run on a worker with the caller's context variables (its owner too, outside a session()), open
    load watches and PyTorch grad/inference mode."""
    import torch

    ctx = contextvars.copy_context()
    if ctx.get(_owner) is None:  # outside a session(): fn's holds and others() are still the caller's thread's
        ctx.run(_owner.set, (_current_owner(), None))
    stack = clock.open_watches()
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def carried(*args):
        clock.use_watches(stack)
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                return ctx.run(fn, *args)
        finally:
            clock.use_watches(None)

    return carried


QUEUE = DeviceQueue(trace=os.environ.get(ENV_TRACE) or None)  # the one queue of this process: every
# session of a server shares it


def drawing():
    """QUEUE.drawing(): a page draws in the block while no model work runs."""
    return QUEUE.drawing()


# --------------------------------------------------------------------------
# starting the layer


_ORDERS: queue.SimpleQueue = queue.SimpleQueue()  # (worker loop, line, where to put the thread) for the maker
_START = threading.RLock()  # held while the layer starts: a second thread's first job waits for it
_started = False


def _maker() -> None:
    """Make the devices' workers, at the niceness this thread had when start() made it."""
    while True:
        loop, line, made = _ORDERS.get()
        t = threading.Thread(target=loop, args=(line,), name=f"specviz-device-{line.key}", daemon=True)
        t.start()
        made.put(t)


def start() -> None:
    """Start the device layer, once per process: the thread that makes the devices' workers (before any page
    lowers its own priority), then the CPU's cores given to its worker (share_cores)."""
    global _started
    with _START:
        if _started:
            return
        _started = True
        threading.Thread(target=_maker, name="specviz-device-maker", daemon=True).start()
        share_cores()


def run(device, fn: Callable[[], object], turn: bool = True):
    """fn() on one of the device's workers (QUEUE.call); return what fn returns, or raise its exception.
    turn=False: pages may draw meanwhile (loading a model)."""
    return QUEUE.call(device, fn, turn=turn)


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
        QUEUE.limit("cpu")
    except InvalidSetting:  # a bad $SPECVIZ_DEVICE_CONCURRENCY: said by the first job (the CLI: at its start)
        return None
    n = torch.get_num_threads()
    if n <= 1 or os.environ.get(ENV_SHARE_CORES, "1") == "0" or tuning.libgomp() is None:
        return None
    QUEUE.threads["cpu"] = n  # before the worker is made: it sets its own count first
    torch.set_num_threads(1)  # this thread and every thread that starts from now
    got = QUEUE.submit("cpu", torch.get_num_threads).result()
    if got != n:  # the runtime did not keep a per-thread count: back to PyTorch's own setting
        torch.set_num_threads(n)
        QUEUE.threads.pop("cpu", None)
        return None
    _find_team("cpu")
    return n


def _native_ids() -> set[int]:
    """The ids of this process's threads that Python did not start (OpenMP's, among others); empty where
    /proc cannot be read."""
    try:
        tids = {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()
    return tids - {t.native_id for t in threading.enumerate()}


def _find_team(key: str) -> frozenset[int]:
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

    found = QUEUE.submit(key, find).result()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    readable = not math.isnan(clock.run_delay_s(found))
    team = QUEUE.team.get(key, frozenset()) | found
    QUEUE.team[key] = team if readable and model_threads(key) <= cores else frozenset()
    return QUEUE.team[key]


def team(device="cpu") -> frozenset[int]:
    """The thread ids whose waits for a core are taken off the device's pass times (empty: none are)."""
    return QUEUE.team.get(device_key(device), frozenset())


def model_threads(device="cpu") -> int:
    """The OpenMP threads the device's model work runs with (the worker's; PyTorch's own count otherwise)."""
    got = QUEUE.threads.get(device_key(device))
    if got:
        return got
    import torch

    return torch.get_num_threads()


def set_model_threads(n: int, device="cpu") -> int:
    """Run the device's model work with n OpenMP threads from now on; the count it has then."""
    start()
    key = device_key(device)
    if not QUEUE.threads.get(key):
        import torch

        torch.set_num_threads(n)
        return torch.get_num_threads()
    got = run(key, lambda: tuning.own_threads(n))
    QUEUE.threads[key] = got
    _find_team(key)
    return got


# --------------------------------------------------------------------------
# the queue as the engine's runner (specviz/device/runner.py)


@dataclass(frozen=True)
class QueueRunner:
    """The device as the app runs it (runner.Runner): the fair queue and the device's worker thread of this module,
    the pass clock and the load checks of clock.py, for one device."""

    device: str  # its key (device_key)

    def run(self, fn: Callable[[], object], turn: bool = True):
        return run(self.device, fn, turn=turn)

    def submit(self, fn: Callable, what: str | None = None, together: Hashable | None = None, item: object = None,
               most: int = 1) -> Job:
        return QUEUE.submit(self.device, fn, what=what, together=together, item=item, most=most)

    def wait(self, job: Job) -> None:
        QUEUE.wait(job, session_on_wait())

    def watch(self):
        return clock.watch()

    def clock(self) -> clock.PassClock:
        return clock.PassClock(self.device, team(self.device))

    def note_pass(self, t: clock.PassTime) -> bool:
        return clock.note_pass(self.device, t.wall, t.cpu, model_threads(self.device), t.others, t.stalled)

    def others(self) -> int:
        return QUEUE.others(self.device)

    def timed(self, fn: Callable[[], object],
              spent: Callable[[], float] | None = None) -> tuple[object, clock.PassTime]:
        return clock.timed_pass(self, fn, spent)

    def paused(self) -> ContextManager[None]:
        return QUEUE.paused()

    shares_passes = True  # other sessions' passes queue on the same device: a verify pass may be shared (pool.py)


def queue_runner(device) -> QueueRunner:
    """The shared queue's runner for `device`: what an entry point uses when its caller passes no runner."""
    return QueueRunner(device_key(device))
