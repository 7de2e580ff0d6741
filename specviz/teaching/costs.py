"""c and the target's pass costs on this device, measured once per server: the one measurement every page and
lesson quotes.

The Speedup page's section 1 and the lessons (the verify cost, tokens per pass, the best k) all need what a draft
step and target passes of a few sizes cost here. Timed apart, two of them could quote two different c for the
same draft a minute apart (one slowed by other work). `shared_cost` times them once (measure_cost) and `STORE`
gives that Cost back, with no model work, to the next caller asking for the same target and draft (`CostKey`:
the device, the target's dtype, the draft model and its head, the sizes) for COST_TTL_S seconds. A Cost timed
under outside load is never kept, so the next caller measures again.

A Cost measured with the pair's identity (`identity`: the machine, the device and the models at their
precisions) is this machine's profile: `shared_cost(..., ident=...)` also keeps it on disk
(<cache>/profiles/, `save_profile`) and gives it back to any later process on the same machine and models until
it is PROFILE_TTL_S old, or until asked to measure again (fresh). The shipped recordings carry the profile of the
sitting they were made in (specviz/recorded/profile.json, `recorded_profile`): every recorded page and lesson reads
its c, its pass times and its verify cost from it.

`check_c` holds a kept Cost against c measured another way (a speculative run's own draft steps against its
target-alone run, measure.c_from_runs): where the two part by more than their timings allow
(measure.c_disagree), the Cost is timed once more, and a disagreement that stays is said in the page
(explain.c_disagreement), never taught from.

  measure_cost(target, draft, ...)         time it -> Cost
  shared_cost(target, draft, ...)          the store's Cost, else measure_cost -> Cost (reused=True when kept)
  check_c(target, draft, cost, samples)    -> CCheck: the Cost (timed again if it disagreed) and the verdict
  run_samples(spec_runs, base_runs)        the draft steps and target passes of runs, for check_c
  identity(pair)                           what a profile is kept under: the machine and the models
  recorded_profile()                       the shipped recordings' profile (None if missing or broken)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from specviz.core import measure
from specviz.core.errors import SpecvizError
from specviz.data import pagefile
from specviz.data.records import Run
from specviz.data.runfile import RECORDED_DIR
from specviz.device import devqueue
from specviz.device.clock import LoadNote
from specviz.device.runner import Runner
from specviz.decoding.drafters import ModelDrafter
from specviz.teaching import experiments

Progress = Callable[[str, "float | None"], None] | None
SIZES = (1, 2, 4, 5, 8, 16)  # tokens per target pass timed: 5 is the lessons' k + 1
COST_TTL_S = 300.0  # how long a Cost is given back: minutes, so a change of load shows in the next one
CONTEXT = 64  # cached tokens under the timed passes: about a lesson run's prompt and text
LONG_CONTEXT = 512  # the profile's second context: how the pass cost grows with what is cached
PROFILE_TTL_S = 7 * 24 * 3600.0  # a profile kept on disk is measured again after a week
RECORDED_PROFILE = RECORDED_DIR / "profile.json"


def _say(progress: Progress, msg: str, frac: float | None = None) -> None:
    if progress is not None:
        progress(msg, frac)


@dataclass(frozen=True)
class Cost:
    """What one draft step and one verify pass cost on this device."""

    c: float  # a draft step ÷ a 1-token target step
    timings: dict[int, list[float]]  # tokens per pass -> seconds per target pass
    verify: dict[int, float]  # tokens per pass -> cost(n) ÷ cost(1)
    draft_s: list[float] = field(default_factory=list)  # the draft steps c is the median of
    target_s: list[float] = field(default_factory=list)  # and the 1-token target passes
    at: float = 0.0  # when the timing ended (time.time())
    reused: bool = False  # given back from the store: this server's earlier timing
    stalled_s: float = 0.0  # wall time left out of the passes: their threads waited for a core
    timed_s: float = 0.0  # the passes' wall time
    load: LoadNote | None = None  # when some passes ran under outside load (then it is never kept)
    ident: dict[str, str] = field(default_factory=dict)  # a profile's machine and models (identity); {}: none
    context: int = CONTEXT  # cached tokens under `timings`
    long: dict[int, list[float]] = field(default_factory=dict)  # tokens per pass -> seconds at LONG_CONTEXT

    def pass_s(self, n: int = 1) -> float:
        """The median seconds of a target pass over n tokens (at `context`)."""
        return statistics.median(self.timings[n])


def measure_cost(target, draft, reps: int = 5, pass_reps: int = 3, sizes=SIZES, progress: Progress = None,
                 long_context: int | None = None, runner: Runner | None = None) -> Cost:
    """Time a draft step against a target step, then target passes over each number of tokens in sizes (and,
    with long_context, the same passes on that many cached tokens). runner: how the passes reach the device
    (None: the shared queue's for the target's device); its watch() judges them for outside load."""
    runner = runner or devqueue.queue_runner(next(target.parameters()).device)
    with runner.watch() as w:
        _say(progress, "timing one draft step and one target step…", 0.0)
        t1 = experiments.forward_cost(target, n_tokens=(1,), reps=reps, context=CONTEXT, runner=runner)[1]
        d1 = experiments.forward_cost(draft, n_tokens=(1,), reps=reps, context=CONTEXT, runner=runner)[1]
        _say(progress, f"timing target passes of {min(sizes)}–{max(sizes)} tokens…", 0.3)
        share = 0.7 if long_context is None else 0.4
        t = experiments.forward_cost(target, n_tokens=tuple(sizes), reps=pass_reps, context=CONTEXT, runner=runner,
                                     progress=lambda m, f: _say(progress, m, 0.3 + share * (f or 0)))
        long = {} if long_context is None else experiments.forward_cost(
            target, n_tokens=tuple(sizes), reps=pass_reps, context=long_context, runner=runner,
            progress=lambda m, f: _say(progress, f"{m} after {long_context} tokens", 0.7 + 0.3 * (f or 0)))
    return Cost(c=measure.c_ratio(d1, t1), timings={int(n): list(v) for n, v in t.items()},
                verify=measure.verify_ratios(t), draft_s=list(d1), target_s=list(t1), at=time.time(),
                stalled_s=w.stalled_s, timed_s=w.wall_s, load=w.note(),
                long={int(n): list(v) for n, v in long.items()})


def _model(draft):
    """The model behind a drafter (what its cost depends on, with its head)."""
    return draft.lm.model if isinstance(draft, ModelDrafter) else draft


@dataclass(frozen=True)
class CostKey:
    """What a Cost depends on besides the target and draft models themselves (the store keeps Costs per pair
    of models)."""

    device: str
    dtype: str
    head: str  # the draft's head: "full" or "frequent-N"
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, target, draft, sizes=SIZES) -> CostKey:
        p = next(target.parameters())
        head = draft.head_name if isinstance(draft, ModelDrafter) else "full"
        return cls(str(p.device), str(p.dtype).replace("torch.", ""), head, tuple(int(n) for n in sizes))


class CostStore:
    """Costs measured in this process, per target, draft model and CostKey; thread-safe. ttl_s: how long one is
    given back; clock: time.time (a test gives its own)."""

    def __init__(self, ttl_s: float = COST_TTL_S, clock: Callable[[], float] = time.time):
        self.ttl_s, self.clock = ttl_s, clock
        self._lock = threading.Lock()
        # target -> draft model -> {key: Cost}: weak, so models let go take their Costs with them
        self._kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._turns: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _slot(self, kept, target, draft) -> dict:
        return kept.setdefault(target, weakref.WeakKeyDictionary()).setdefault(_model(draft), {})

    def get(self, target, draft, key: CostKey) -> Cost | None:
        with self._lock:
            got = self._slot(self._kept, target, draft).get(key)
        if got is None or self.clock() - got.at > self.ttl_s:
            return None
        return replace(got, reused=True)

    def put(self, target, draft, key: CostKey, cost: Cost) -> Cost:
        """Keep cost for later callers unless it was timed under outside load (not this device's speed)."""
        cost = replace(cost, at=self.clock())
        if cost.load is None and self.ttl_s > 0:
            with self._lock:
                self._slot(self._kept, target, draft)[key] = cost
        return cost

    def turn(self, target, draft, key: CostKey) -> threading.Lock:
        """One caller at a time measures a key: the next one then finds its Cost."""
        with self._lock:
            return self._slot(self._turns, target, draft).setdefault(key, threading.Lock())

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


STORE = CostStore()  # this server's


def shared_cost(target, draft, *, fresh: bool = False, store: CostStore | None = None,
                progress: Progress = None, ident: dict[str, str] | None = None, **kw) -> Cost:
    """The Cost of this target and draft here: the one this server measured within the store's TTL (reused, no
    model work), else, given the pair's identity (ident), this machine's profile kept on disk within
    PROFILE_TTL_S, else a new timing (measure_cost: with ident, also at LONG_CONTEXT, and kept on disk), kept for
    the next caller. fresh: time it again whatever is kept (a kept one found contradicted); the new one replaces
    it. kw: measure_cost's reps, pass_reps."""
    store = STORE if store is None else store
    key = CostKey.of(target, draft, kw.get("sizes", SIZES))
    with store.turn(target, draft, key):
        if not fresh and (found := store.get(target, draft, key)) is not None:
            _say(progress, "measured a moment ago on this server", 1.0)
            return found
        if not fresh and ident and (kept := load_profile(ident)) is not None:
            _say(progress, "this machine's profile", 1.0)
            return kept
        if ident:
            kw.setdefault("long_context", LONG_CONTEXT)
        cost = store.put(target, draft, key, measure_cost(target, draft, progress=progress, **kw))
        if ident and cost.load is None:
            cost = replace(cost, ident=dict(ident))
            save_profile(cost)
        return cost


# --------------------------------------------------------------------------
# the machine's profile: a Cost with the identity of the machine and the models


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def identity(pair) -> dict[str, str]:
    """What a profile is kept under: the CPU, its cores, torch, the device and the pair's models at their
    precisions. A profile measured under another identity is never given back."""
    import torch

    return {"cpu": _cpu_name(), "cores": str(os.cpu_count()), "torch": torch.__version__, "device": str(pair.device),
            "pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""),
            "target_precision": str(pair.target_precision), "draft_precision": str(pair.draft_precision),
            "draft_head": pair.draft_head_name}


def profile_root() -> Path:
    """Where this machine's profiles are kept: <cache>/profiles (the tests point it at a folder of their own)."""
    from specviz.modeling.store import cache_root

    return cache_root() / "profiles"


def profile_path(ident: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return profile_root() / f"{digest}.json"


def save_profile(cost: Cost, path: Path | None = None) -> Path:
    """Write a profile (a Cost with its identity) as JSON; the folder is made. Never raises for a folder that
    cannot be written: a profile not kept is measured again next time."""
    path = profile_path(cost.ident) if path is None else Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(pagefile.to_data(replace(cost, reused=False))), encoding="utf-8")
    except OSError:
        pass
    return path


def read_profile(path: Path) -> Cost:
    """A profile file read back; SpecvizError when it is not one."""
    try:
        return pagefile.from_data(Cost, json.loads(Path(path).read_text(encoding="utf-8")), "profile")
    except (OSError, ValueError) as e:
        raise SpecvizError(f"The profile {path} cannot be read: {e}") from None


def load_profile(ident: dict[str, str], now: float | None = None) -> Cost | None:
    """This machine's profile for ident, when one is kept, made under the same identity, and fresh."""
    path = profile_path(ident)
    if not path.is_file():
        return None
    try:
        got = read_profile(path)
    except SpecvizError:
        return None
    now = time.time() if now is None else now
    if got.ident != ident or not 0 <= now - got.at < PROFILE_TTL_S or got.load is not None:
        return None
    return replace(got, reused=True)


@functools.lru_cache(maxsize=1)
def recorded_profile() -> Cost | None:
    """The profile of the sitting the shipped recordings were made in; None if the file is missing or broken."""
    try:
        return read_profile(RECORDED_PROFILE)
    except SpecvizError:
        return None


@dataclass(frozen=True)
class CCheck:
    """A kept Cost held against c from runs of the same draft."""

    cost: Cost  # timed again when the first disagreed
    run_c: float  # measure.c_from_runs of the runs
    agree: bool
    remeasured: bool


def run_samples(spec_runs: Iterable[Run], base_runs: Iterable[Run]) -> tuple[list[float], list[float]]:
    """What c from runs is made of (measure.c_samples_from_runs): check_c's samples."""
    return measure.c_samples_from_runs(spec_runs, base_runs)


def check_c(target, draft, cost: Cost, samples: tuple, store: CostStore | None = None,
            progress: Progress = None) -> CCheck:
    """Whether cost's c agrees with c from runs of the same draft, given as samples (draft steps, 1-token
    target passes: run_samples); if not (measure.c_disagree), time the Cost once more (shared_cost(fresh=True))
    and judge again."""
    run_c = measure.c_ratio(*samples)
    if not measure.c_disagree((cost.draft_s, cost.target_s), samples):
        return CCheck(cost, run_c, True, False)
    again = shared_cost(target, draft, fresh=True, store=store, progress=progress, ident=cost.ident or None)
    return CCheck(again, run_c, not measure.c_disagree((again.draft_s, again.target_s), samples), True)
