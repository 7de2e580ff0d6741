"""Verify passes of several sessions on the same target, as one forward pass (continuous batching).

A round that reaches its verify pass while another session runs or waits for the device (runner.others() > 0)
hands a VerifyRequest to the target's VerifyPool, which submits it as a job `together` with the pool's others.
When the first is granted, the worker takes every other one in line (up to MAX_BATCH), runs their passes as one
(modeling/batched.feed_many: each row bit for bit its own pass's) and resumes each round with its logits. A
waiting request is cancelled like any job; one pass's failure fails its own round alone.

A shared round is charged what a pass of its own costs here, measured (SoloCost: the median of the unshared
passes by rows and context bucket; a key with none runs its own pass first), never its share: a run's speedup
and c stay what one laptop alone sees. Off with $SPECVIZ_BATCH_VERIFY=0, for a runner whose passes no other
owner shares (InlineRunner), and for a cache feed_many cannot serve (batched.can_batch).
"""

from __future__ import annotations

import statistics
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from specviz.core import limits
from specviz.modeling import batched
from specviz.modeling.lm import CachedLM

MAX_BATCH = 8  # the most requests one shared pass serves
CONTEXT_BUCKET = 256  # SoloCost keys passes by their cached context in steps of this many tokens
SOLO_KEPT = 32  # the most recent solo timings a key keeps


@dataclass(frozen=True)
class VerifyResult:
    """What a round's verify pass gave it, sent back into the round (engine.round_steps)."""

    logits: torch.Tensor  # (keep, V): what lm.feed(ids, keep) returns
    verify_s: float  # the seconds the round is charged: its own pass's, or the SoloCost median
    outside_load: bool  # the pass ran under outside load (clock.note_pass)
    shared: int = 1  # how many rounds the pass served
    shared_pass_s: float = 0.0  # the shared pass's held seconds (0: not shared)


@dataclass(eq=False)
class VerifyRequest:
    """A round at its verify pass: feed `ids` (pending + drafted tokens) to `lm`, keep the last `keep` logits."""

    lm: CachedLM
    ids: list[int]
    keep: int
    gen: Any = None  # the run's generator, suspended at this request (DecodeStream sets it)
    asked: float = field(default_factory=time.perf_counter)
    waited_s: float = 0.0  # from asking to its pass (DecodeStream.waited_s)
    done: bool = False
    value: Any = None  # what resuming the generator gave (the Round)
    error: BaseException | None = None  # or what it raised (StopIteration included)

    @property
    def key(self) -> tuple[int, int]:
        return solo_key(self.lm, self.ids)


def solo_key(lm: CachedLM, ids: list[int]) -> tuple[int, int]:
    """The SoloCost key of feeding ids to lm: (rows, cached context bucket)."""
    return len(ids), lm.n // CONTEXT_BUCKET


class SoloCost:
    """Measured seconds of verify passes of one's own, by key; entries older than baseline_ttl_s are dropped.

    A key's first pass ever is left out once the key has another: the first pass of a row count also sets up
    oneDNN's kernels for that shape, a one-off like loading (it read 8 % slower than the rest)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[tuple[int, int], deque] = {}  # key -> (monotonic, seconds, first ever), oldest first

    def add(self, key: tuple[int, int], seconds: float) -> None:
        with self._lock:
            first = key not in self._times
            self._times.setdefault(key, deque(maxlen=SOLO_KEPT)).append((time.monotonic(), seconds, first))

    def entries(self, key: tuple[int, int], steady: bool = True) -> list[float]:
        """The key's live entries (seconds), oldest first; steady: its first pass ever left out when others are
        live."""
        cutoff = time.monotonic() - limits.baseline_ttl_s()
        with self._lock:
            times = self._times.get(key)
            while times and times[0][0] < cutoff:
                times.popleft()
            live = list(times or ())
        rest = [s for _, s, first in live if not (steady and first)]
        return rest or [s for _, s, _ in live]

    def median(self, key: tuple[int, int]) -> float | None:
        """The median of the key's live entries; None when it has none."""
        live = self.entries(key)
        return statistics.median(live) if live else None


class VerifyPool:
    """The requests waiting to verify on one target model, and its SoloCost table (module doc)."""

    def __init__(self) -> None:
        self.solo = SoloCost()

    @staticmethod
    def eligible(lm: CachedLM) -> bool:
        """Whether lm's verify passes may ever be pooled: pooling on, a runner whose passes are shared with other
        owners (shares_passes: the queue's), a cache feed_many serves."""
        return (limits.batch_verify() and lm.runner.shares_passes
                and batched.can_batch([lm]))

    def wanted(self, lm: CachedLM) -> bool:
        """Pool this verify pass now: eligible, and another session holds or waits for the device."""
        return self.eligible(lm) and lm.runner.others() > 0

    def note_solo(self, key: tuple[int, int], seconds: float, busy: bool) -> None:
        """An unshared verify pass's held seconds, kept unless it ran under outside load."""
        if not busy:
            self.solo.add(key, seconds)

    def verify(self, req: VerifyRequest):
        """Queue req's pass as a job on the device; what resuming its round gave (or raise it).

        The jobs of this pool in line when one is granted run as one call (_serve): continuous batching. What the
        session's on_wait raises while req waits (a page that must stop), or a cancel (Cancelled), takes req out
        of the line and is raised with req.done still False: its round was not resumed, and req may be asked
        again. One taken into a pass already is waited for (its round is being resumed on the worker)."""
        runner = req.lm.runner
        job = runner.submit(self._serve, what="verify", together=self, item=req, most=MAX_BATCH)
        runner.wait(job)
        error = job.exception()
        if error is not None and not req.done:  # the pass broke under it
            req.error, req.done = error, True
        if req.error is not None:
            raise req.error
        return req.value

    def _serve(self, batch: list[VerifyRequest]) -> None:
        """The pool's job on the worker, holding the device: passes of their own first (keys with no measured cost), then
        one shared pass for the rest; each round resumed with its logits."""
        start = time.perf_counter()
        for m in batch:
            m.waited_s = start - m.asked
        costs = {m: self.solo.median(m.key) for m in batch}
        alone = [m for m in batch if costs[m] is None]
        together = [m for m in batch if costs[m] is not None]
        if len(together) == 1:
            alone, together = alone + together, []
        for m in alone:
            self._alone(m)
        if together:
            self._shared_pass(together, costs)

    def _alone(self, m: VerifyRequest) -> None:
        """m's pass of its own and the rest of its round; a pass that raises fails m alone."""
        try:
            result = self._own_pass(m)
        except Exception as e:  # noqa: BLE001 - raised in m's session
            m.error, m.done = e, True
            return
        self._resume(m, result)

    def _own_pass(self, m: VerifyRequest) -> VerifyResult:
        """m's pass alone, timed as CachedLM.timed does, its time kept in the table."""
        key = m.key
        with m.lm.runner.watch() as load:
            logits, seconds = m.lm.timed_feed(m.ids, keep=m.keep)
        self.note_solo(key, seconds, load.busy)
        return VerifyResult(logits, seconds, load.busy)

    def _shared_pass(self, batch: list[VerifyRequest], costs: dict) -> None:
        """One timed pass for the batch (feed_many); each round charged its key's SoloCost median."""
        runner = batch[0].lm.runner
        clock = runner.clock()
        try:
            logits = batched.feed_many([m.lm for m in batch], [m.ids for m in batch], [m.keep for m in batch])
        except Exception:  # noqa: BLE001 - the caches are as they were: each round's own pass says whose it was
            for m in batch:
                self._alone(m)
            return
        t = clock.stop()
        busy = runner.note_pass(t)
        for m, out in zip(batch, logits):
            self._resume(m, VerifyResult(out, costs[m], busy, len(batch), t.held))

    @staticmethod
    def _resume(m: VerifyRequest, result: VerifyResult) -> None:
        """The rest of m's round, on this thread, with its pass's result."""
        try:
            m.value = m.gen.send(result)
        except BaseException as e:  # noqa: BLE001 - StopIteration or the round's error, raised in its session
            m.error = e
        m.done = True


_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target model -> its VerifyPool
_POOLS_LOCK = threading.Lock()


def pool_for(model) -> VerifyPool:
    """The VerifyPool of a target model (one per model in this process)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(model)
        if pool is None:
            pool = _POOLS[model] = VerifyPool()
        return pool
