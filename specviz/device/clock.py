"""How long a pass took, and whether something outside the app slowed it.

A pass is timed by a `PassClock` (`stop()` gives its `PassTime`) and judged by `note_pass`, which tells every
open `watch()` of its thread. The device layer (devqueue.py) hands each clock the model's threads and carries
a thread's open watches to the worker that runs its model work; this module knows nothing of the queue.

Outside load: the queue orders this app's work but cannot stop other programs.
`note_pass` judges a CPU pass two ways: its process CPU time against wall time × threads (a pass that got well
under its share of the cores ran while something else was using them), and the CPU time the machine's other
programs used meanwhile (`machine_cpu_s`). The first alone misses most of it: PyTorch's threads spin while they
wait for each other, so a pass slowed by another program still uses most of its share. The kernel
counts the machine's CPU time in ticks of 10 ms, so other programs' time is judged over at least OTHERS_MIN_S of
passes: a long pass on its own, short ones (draft steps) summed in each `watch()`, which collects the verdicts of
the passes made inside it.

Time other work held the cores is not counted (other programs', or this server's other threads', such as other
sessions' pages being drawn): a CPU pass's time is its wall less the time the model's threads (the worker and
its OpenMP team, `devqueue.team()`, handed to the clock) were ready to run but waited for a core (the kernel's
run delay, /proc/self/task/<tid>/schedstat). The team works in lockstep, so while another thread holds one of its
threads off a core the others spin at the next barrier, and the pass is late by that wait. At most
MAX_STALL_SHARE of a pass's wall is taken off: past that, several programs may have held several threads off
at once (their waits overlap, and their sum overstates the delay), and the pass is marked as under outside
load anyway.
"""

from __future__ import annotations

import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable, Iterator, NamedTuple

BUSY_SHARE = 0.6  # a CPU pass that got less than this share of wall × threads ran under outside load
MINOR_SHARE = 0.05  # passes under outside load that took less of the timed time than this: a note, not a warning
MIN_PASS_S = 0.005  # passes shorter than this are too short to judge
OTHERS_SHARE = 0.25  # other programs that used this share of the model threads' cores during passes: outside load
OTHERS_MIN_S = 0.25  # the least pass time other programs' CPU time is judged over (it is counted in 10 ms ticks)
MAX_STALL_SHARE = 0.75  # at most this share of a pass's wall is taken off as time its threads waited for a core


def _on_cpu(device) -> bool:
    """Whether `device` ('cpu', torch.device('cpu'), 'cuda:0', ...) is the CPU, the one device whose passes share
    the cores with other programs."""
    return str(device) == "cpu"


# --------------------------------------------------------------------------
# load from outside the app


def cpu_share(cpu_s: float, wall_s: float, threads: int) -> float:
    """The share of `threads` cores a pass got: process CPU time / (wall time × threads)."""
    return cpu_s / (wall_s * max(1, threads)) if wall_s > 0 else math.nan


def outside_load(cpu_s: float, wall_s: float, threads: int) -> bool:
    """True when a CPU pass long enough to judge got well under its share of the cores."""
    return wall_s >= MIN_PASS_S and cpu_share(cpu_s, wall_s, threads) < BUSY_SHARE


def crowded(others_s: float, wall_s: float, threads: int) -> bool:
    """True when, over wall_s seconds of passes (at least OTHERS_MIN_S), the machine's other programs used at
    least OTHERS_SHARE of the cores the passes' threads run on. The share is set above what a browser drawing
    this app on the same machine uses, so the learner's own browser is not taken for outside load (it used up to
    0.46 of a core on the 2-core machine)."""
    return wall_s >= OTHERS_MIN_S and others_s >= OTHERS_SHARE * wall_s * max(1, threads)


_TICK_S = 1 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def machine_cpu_s() -> float:
    """The CPU seconds every program on this machine has used since it started, time taken by the host of a
    virtual machine ('steal') included (/proc/stat); NaN where that cannot be read."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return math.nan
    if len(ticks) < 5:
        return math.nan
    return (sum(ticks) - ticks[3] - ticks[4]) * _TICK_S  # all but idle and waiting for disks


def run_delay_s(tids) -> float:
    """The seconds the threads `tids` have spent ready to run but waiting for a core since they started
    (the kernel's run delay, summed); a thread that has ended counts 0; NaN where it cannot be read."""
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])  # on-cpu ns, run-delay ns, time slices
        except FileNotFoundError:
            continue  # the thread has ended
        except (OSError, ValueError, IndexError):
            return math.nan
    return total / 1e9


class PassTime(NamedTuple):
    """One timed pass (PassClock.stop): seconds of wall, of this process's CPU, of other programs' CPU meanwhile
    (NaN off the CPU), and of the wall during which the model's threads waited for a core (0 off the CPU)."""

    wall: float
    cpu: float
    others: float
    stalled: float = 0.0

    @property
    def held(self) -> float:
        """The pass's time: its wall, less the time other threads held its cores."""
        return self.wall - self.stalled


class PassClock:
    """Times one pass on `device` from its creation: a PassTime. On the CPU it also reads the CPU time the
    machine's other programs use meanwhile (what note_pass judges) and how long the model's threads (`team`:
    their thread ids, devqueue.team()) wait for a core (what is taken off). Off the CPU a pass leaves the cores
    idle by design, and neither is read."""

    def __init__(self, device="cpu", team: Iterable[int] = frozenset()) -> None:
        self.cpu = _on_cpu(device)
        self.team = frozenset(team) if self.cpu else frozenset()
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.m0 = machine_cpu_s() if self.cpu else math.nan
        self.d0 = run_delay_s(self.team) if self.team else 0.0

    def stop(self, less_s: float = 0.0) -> PassTime:
        """The pass until now; less_s: wall time not to count (a CUDA graph being recorded)."""
        d1 = run_delay_s(self.team) if self.team else 0.0
        wall, cpu = time.perf_counter() - self.t0 - less_s, time.process_time() - self.c0
        others = (machine_cpu_s() - self.m0 - cpu) if self.cpu else math.nan
        waited = d1 - self.d0
        stalled = min(MAX_STALL_SHARE * wall, waited) if waited > 0 else 0.0  # NaN (unreadable): 0
        return PassTime(wall, cpu, others, max(0.0, stalled))


def load_text(what: str) -> str:
    """The warning shown next to figures taken under outside load; `what` says which timings."""
    return (f"Taken under outside load: {what} ran while other programs on this machine were using the CPU "
            "(they used a good part of the cores meanwhile, or a pass got well under its share of them). "
            "These timings, and the figures made from them, are not this device's speed: measure again when "
            "the machine is quiet.")


@dataclass(frozen=True)
class LoadNote:
    """What a page says next to figures some of whose passes ran under outside load.

    A pass under load is slower, so it can only add to the timed time: passes that took a small share of it
    (under MINOR_SHARE) move totals and rates by at most that share, and medians hardly at all. Those figures
    are still the device's speed, and the page says so in a quiet note; above it, the warning (load_text)."""

    what: str  # which timings, e.g. "1 of 351 timed passes"
    share: float  # the share of the timed wall time those passes took; NaN when unknown

    @classmethod
    def of(cls, what: str, busy_s: float, timed_s: float) -> LoadNote:
        """The note for timings of which busy_s seconds, of timed_s, ran under outside load."""
        return cls(what, min(1.0, busy_s / timed_s) if timed_s > 0 and busy_s >= 0 else math.nan)

    @property
    def serious(self) -> bool:
        return not self.share < MINOR_SHARE  # an unknown share (NaN) is taken as serious

    @property
    def text(self) -> str:
        if self.serious:
            return load_text(self.what)
        return (f"Outside load on {self.what}: other programs on this machine used the CPU during them, but "
                f"they took only {self.share:.1%} of the timed time, so they move these figures by at most "
                "about that.")


@dataclass(eq=False)  # watches nest: leaving one must remove that one, not an outer one with equal counts
class LoadWatch:
    """The passes timed inside one watch(): how many, and how many ran under outside load."""

    passes: int = 0
    busy_passes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    busy_wall_s: float = 0.0  # the wall time of the passes under outside load
    others_s: float = 0.0  # the CPU time other programs used during the passes where it could be read
    others_wall_s: float = 0.0  # the wall time of those passes
    others_cores_s: float = 0.0  # and their wall time × threads
    stalled_s: float = 0.0  # wall time taken off the passes: their threads waited for a core (PassTime.stalled)

    @property
    def crowded(self) -> bool:
        """Other programs used a good part of the cores over these passes taken together (short passes,
        such as draft steps, can only be judged together)."""
        return self.others_wall_s >= OTHERS_MIN_S and self.others_s >= OTHERS_SHARE * self.others_cores_s

    @property
    def busy(self) -> bool:
        return self.busy_passes > 0 or self.crowded

    def __add__(self, other: LoadWatch) -> LoadWatch:
        """The passes of both watches as if one watch had seen them all (a round watched in two parts)."""
        return LoadWatch(**{f: getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__})

    def held_since(self, t0: float) -> float:
        """Seconds since perf_counter() read t0, less the waits for a core of the passes watched: a round's
        round_s."""
        return time.perf_counter() - t0 - self.stalled_s

    def record(self) -> dict:
        """A round's load record (records.LOAD_FIELDS): whether it ran under outside load, and the wait left out."""
        return {"outside_load": self.busy, "stalled_s": self.stalled_s}

    def note(self) -> LoadNote | None:
        """The LoadNote of these passes, or None when none was under outside load."""
        if not self.busy:
            return None
        if self.crowded and self.busy_wall_s < self.others_wall_s:  # then the load was spread over them all
            return LoadNote.of(f"the {self.passes} timed passes", self.others_wall_s, self.wall_s)
        return LoadNote.of(f"{self.busy_passes} of {self.passes} timed passes", self.busy_wall_s, self.wall_s)


_watches = threading.local()  # per thread: .stack, its open watches, innermost last


def open_watches() -> list | None:
    """This thread's open watches (None: it never opened one): what its model work, run on another thread
    (devqueue.run), carries there, so the passes made there are noted in them."""
    return getattr(_watches, "stack", None)


def use_watches(stack: list | None) -> None:
    """Make `stack` (another thread's open_watches()) this thread's open watches; None: none."""
    _watches.stack = stack


def watch() -> ContextManager[LoadWatch]:
    """Collect note_pass() verdicts of this thread's passes inside the block (watches nest)."""
    return watching(_watches)


@contextmanager
def watching(local: threading.local) -> Iterator[LoadWatch]:
    """A LoadWatch open on this thread's stack of watches in `local` (innermost last) for the block."""
    stack = getattr(local, "stack", None)
    if stack is None:
        stack = local.stack = []
    w = LoadWatch()
    stack.append(w)
    try:
        yield w
    finally:
        stack.remove(w)


def note_pass(device, wall_s: float, cpu_s: float, threads: int, others_s: float = math.nan,
              stalled_s: float = 0.0) -> bool:
    """Judge one timed pass (CPU passes only) and tell every open watch(); return the verdict.

    others_s: the CPU time the machine's other programs used during the pass (machine_cpu_s() after, less
    before, less cpu_s); NaN when unknown. stalled_s: the part of wall_s taken off its time (PassTime.stalled).
    The verdict is on the whole wall."""
    cpu = _on_cpu(device)
    known = cpu and not math.isnan(others_s)
    busy = cpu and (outside_load(cpu_s, wall_s, threads) or (known and crowded(others_s, wall_s, threads)))
    for w in getattr(_watches, "stack", None) or []:
        w.passes += 1
        w.busy_passes += busy
        w.wall_s += wall_s
        w.cpu_s += cpu_s
        w.busy_wall_s += wall_s if busy else 0.0
        w.stalled_s += stalled_s
        if known:
            w.others_s += others_s
            w.others_wall_s += wall_s
            w.others_cores_s += wall_s * max(1, threads)
    return busy


# --------------------------------------------------------------------------
# a pass timed through a runner (specviz/device/runner.py)


def synchronize(device) -> None:
    """Wait for the device's queued work (a GPU's), so a wall clock read after it is the work's; the CPU: nothing.
    device: its key ('cpu', 'cuda:0', ...: a runner's device)."""
    key = str(device)
    if key.startswith("cuda"):
        import torch

        torch.cuda.synchronize(key)


def timed_pass(runner, fn: Callable[[], object],
               spent: Callable[[], float] | None = None) -> tuple[object, PassTime]:
    """(fn(), its PassTime) through `runner` (either runner's timed()): on the device's thread, holding the device,
    with the device's work synchronized before and after, so the clock (runner.clock()) times fn alone, no wait.
    spent: a running total of seconds that are not the pass's (a CUDA graph's recording), read before and after
    fn; what it grew by is taken off. The pass is not judged: a caller that times a model pass passes the
    PassTime to runner.note_pass."""
    def job():
        synchronize(runner.device)
        clock, s0 = runner.clock(), spent() if spent else 0.0
        out = fn()
        synchronize(runner.device)
        return out, clock.stop(less_s=spent() - s0 if spent else 0.0)
    return runner.run(job)
