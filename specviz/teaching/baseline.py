"""The target alone, timed with a speculative run's prompt and settings: the baseline of every speedup.

A workshop room runs the same model, prompt and settings again and again, and the target alone then writes
the same text at a cost this server has already measured. `STORE` keeps each target-alone Run measured in
this process, keyed by what it depends on (`BaselineKey`: the target, its device and dtype, the prompt ids,
the decoding settings that matter, EOS and vocabulary; not k, the k policy or the drafter), for
limits.baseline_ttl_s() seconds. `shared_target_alone` gives it back to the next run that asks for the same
thing, with no model work (no warm-up either): a real measurement of this device, with its own timings and
the time it was taken. A run timed under outside load is never kept, so the next one measures again.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from specviz.core import limits
from specviz.core.errors import SpecvizError
from specviz.data import playback
from specviz.data.records import Run
from specviz.data.runfile import baseline_of
from specviz.decoding.engine import (
    DecodeStream,
    autoregressive_stream,
    default_vocab,
    device_of,
    warm_up,
)

TURN_WAIT_S = 300.0  # the longest a run waits for another session measuring the same key before measuring itself
MAX_KEPT = 64  # target-alone runs kept per target (the oldest go first)


def target_alone(target, spec: Run, vocab: int | None = None, warm: bool = True) -> dict:
    """Time the target alone with the spec run's prompt and settings; return baseline_summary()."""
    stream = target_alone_stream(target, spec, vocab, warm)
    for _ in stream:
        pass
    return baseline_of(spec, stream.run)


def target_alone_stream(target, spec: Run, vocab: int | None = None, warm: bool = True):
    """The target alone with the spec run's prompt and settings (Run.decode), one token per round, as an
    engine.DecodeStream: a page keeps it across reruns and goes on where it stopped. Its Run goes to
    baseline_of().

    `warm` first decodes a few tokens (engine.warm_up), so one-time costs (allocations, kernel selection) and
    the change from the speculative run's passes land in neither run; while other sessions are in line for
    the device, only the first time this process times this target alone."""
    kw = dict(eos_token_id=spec.eos_token_ids, vocab=vocab)
    if warm:
        warm_up(target, spec.prompt_ids, None, spec.decode, **kw)
    return autoregressive_stream(target, spec.prompt_ids, spec.decode, **kw)


@dataclass(frozen=True)
class BaselineKey:
    """What a target-alone run's tokens and timings depend on, besides the target object itself (the store
    keeps runs per target)."""

    device: str
    dtype: str
    prompt_ids: tuple[int, ...]
    settings: tuple[tuple[str, Any], ...]  # DecodeSettings.baseline_ident(): sampling, max new tokens, seed
    eos: tuple[int, ...] | None  # None: the model's own
    vocab: int

    @classmethod
    def of(cls, target, spec: Run, vocab: int | None = None) -> BaselineKey:
        """The key of the target alone with `spec`'s prompt and settings (target_alone_stream's arguments)."""
        eos = spec.eos_token_ids
        return cls(device=str(device_of(target)), dtype=str(next(target.parameters()).dtype).replace("torch.", ""),
                   prompt_ids=tuple(int(t) for t in spec.prompt_ids), settings=spec.decode.baseline_ident(),
                   eos=None if eos is None else tuple(sorted({int(t) for t in eos})),
                   vocab=int(vocab or default_vocab(target)))


@dataclass(frozen=True)
class Measured:
    """A target-alone Run and when its timing ended (time.time()); reused: given back from the store."""

    run: Run
    at: float
    reused: bool = False

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)


class BaselineStore:
    """Target-alone runs measured in this process, per target and BaselineKey; thread-safe.

    ttl_s: how long one is reused (None: limits.baseline_ttl_s(), read at each use); clock: time.time (a test
    gives its own)."""

    def __init__(self, ttl_s: float | None = None, clock: Callable[[], float] = time.time,
                 max_kept: int = MAX_KEPT):
        self.ttl_s, self.clock, self.max_kept = ttl_s, clock, max_kept
        self._lock = threading.Lock()
        # target -> {key: Measured} and target -> {key: Lock}: weak, so a model let go takes its runs with it
        self._kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._turns: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def ttl(self) -> float:
        return limits.baseline_ttl_s() if self.ttl_s is None else self.ttl_s

    def _fresh(self, m: Measured, now: float) -> bool:
        return now - m.at <= self.ttl()

    def get(self, target, key: BaselineKey) -> Measured | None:
        """The run kept for this target and key while it is fresh (reused=True), else None."""
        with self._lock:
            m = self._kept.get(target, {}).get(key)
        if m is None or not self._fresh(m, self.clock()):
            return None
        return replace(m, reused=True)

    def put(self, target, key: BaselineKey, run: Run) -> Measured:
        """`run` as measured now; kept for later runs unless it was timed under outside load (its figures are
        not this device's speed) or did not finish. Passes under outside load that took under MINOR_SHARE of
        its time (playback.load_note: the page shows a note, not the warning) leave it this device's speed: it
        is kept, and every page that reuses it shows the same note. Not keeping it would have every session
        waiting for it time its own, one after another."""
        m = Measured(run, self.clock())
        note = playback.load_note(run)
        if (note is not None and note.serious) or run.stop_reason == "running" or self.ttl() <= 0:
            return m
        with self._lock:
            kept = self._kept.setdefault(target, {})
            kept[key] = m
            # the stale go, then the oldest past max_kept
            for k in [k for k, v in kept.items() if not self._fresh(v, m.at)]:
                del kept[k]
            for k in sorted(kept, key=lambda k: kept[k].at)[:max(0, len(kept) - self.max_kept)]:
                del kept[k]
        return m

    @contextlib.contextmanager
    def turn(self, target, key: BaselineKey, wait_s: float = TURN_WAIT_S) -> Iterator[None]:
        """One caller at a time per target and key: a second one waits (up to wait_s) while the first measures,
        and then finds its run in the store."""
        with self._lock:
            lock = self._turns.setdefault(target, {}).setdefault(key, threading.Lock())
        got = lock.acquire(timeout=wait_s)
        try:
            yield
        finally:
            if got:
                lock.release()

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


STORE = BaselineStore()  # this server's


def shared_target_alone(target, spec: Run, vocab: int | None = None, *, store: BaselineStore | None = None,
                        stream: DecodeStream | None = None,
                        started: Callable[[DecodeStream], None] | None = None, warm: bool = True,
                        fresh: bool = False) -> Measured:
    """The target alone with `spec`'s prompt and settings, measured once per server: a run the store keeps for
    the same target and key is given back (reused=True, no model work); else target_alone_stream times one,
    which the store keeps. While another caller measures the same key, this one waits for its run.

    stream: a target-alone stream this caller started before (a page's script run cut by a rerun): it goes on
    from where it stopped. started(stream): called with a new stream before it runs, so a page can keep it.
    fresh: measure again whatever the store keeps (a kept run found slowed); the new run replaces it.
    SpecvizError when the stream stopped early (its generator failed in an earlier script run)."""
    store = STORE if store is None else store
    key = BaselineKey.of(target, spec, vocab)
    with store.turn(target, key):
        if stream is None:
            if not fresh and (found := store.get(target, key)) is not None:
                return found
            stream = target_alone_stream(target, spec, vocab, warm)
            if started is not None:
                started(stream)
        for _ in stream:
            pass
        if stream.run is None:
            raise SpecvizError("The target-alone run stopped early; press Run to time it again.")
        return store.put(target, key, stream.run)
