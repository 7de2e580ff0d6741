"""Playback of runs: what the main page animates, without Streamlit.

Playback reveals Rounds one at a time, either live (pulled from a running
DecodeStream, so a paused page resumes where it stopped) or from a finished
Run (replay: no model needed). The run files it replays are specviz/data/runfile.py.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from specviz.device import devqueue
from specviz.device.clock import LoadNote
from specviz.core.errors import SpecvizError
from specviz.data.records import Round, Run
from specviz.core.settings import DecodeSettings

# animation speeds: (seconds the drafted tokens stay pending, seconds after the verdict)
SPEEDS: dict[str, tuple[float, float]] = {
    "instant": (0.0, 0.0),
    "fast": (0.15, 0.1),
    "normal": (0.6, 0.35),
    "slow": (1.5, 1.0),
}
DEFAULT_SPEED = "normal"
# A browser on the same machine builds the page's text, status and round log when the first verdict is drawn,
# and at "normal" it was still drawing when the second round's passes ran: they read as outside load.
FIRST_VERDICT_S = 1.0  # the least pause after the first round's verdict at an animated speed: a browser on the server building the page from it had the next round marked as outside load


# --------------------------------------------------------------------------
# playback: the animation state machine


def partial_run(prompt_ids: list[int], rounds: list[Round], settings: dict, mode: str = "speculative",
                device: str = "cpu", dtype: str = "float32") -> Run:
    """A Run of the rounds so far (for live metrics and charts while a run plays)."""
    tokens = [t for r in rounds for t in r.emitted]
    return Run(
        mode=mode, prompt_ids=list(prompt_ids), token_ids=tokens, rounds=list(rounds), settings=dict(settings),
        stop_reason="running", prefill_s=0.0, decode_s=sum(r.round_s for r in rounds),
        target_passes=len(rounds), draft_passes=sum(r.k for r in rounds), ks=[r.k for r in rounds],
        device=device, dtype=dtype,
    )  # fmt: skip


@dataclass
class Playback:
    """Rounds revealed one at a time, live from a DecodeStream or replayed from a Run.

    `rounds` are the rounds revealed so far; `advance()` reveals one more
    (computing it, when live) and returns it, or None once finished.
    Keep the Playback object between page reruns to pause and resume.
    Two page reruns may call advance() at once (a click while a round is computed):
    a turn lock makes the second wait for the round in flight, then take the next one. The state
    (rounds, run, done, error) has its own lock, held only to hand a round over, never while a round
    runs or waits for the device: current_run() reads it at any time.
    """

    prompt_ids: list[int]
    prompt_text: str
    settings: dict
    source: str = "live"  # "live" | "replay"
    meta: dict = field(default_factory=dict)  # pair, dtype, drafter, title, ... for display
    rounds: list[Round] = field(default_factory=list)
    run: Run | None = None  # the finished Run (replay: known from the start)
    error: str | None = None
    _stream: Any = None
    _it: Iterator[Round] | None = None
    _done: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    _lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)  # the state's hand-off
    _turn: Any = field(default_factory=threading.Lock, repr=False, compare=False)  # one advance/close at a time
    runner: Any = field(default=None, repr=False, compare=False)  # how a live run's rounds reach the device
    # (its stream's runner): advance lets this thread's turn to draw go through it; None (replay): no model work
    hold: Any = field(default=None, repr=False, compare=False)  # what a live run holds while it runs (a lease
    # on its models, with release()): let go when the stream ends, is closed, or fails

    def _let_go(self) -> None:
        hold, self.hold = self.hold, None
        if hold is not None:
            hold.release()

    @classmethod
    def live(cls, stream, prompt_ids: list[int], prompt_text: str, settings: dict, meta: dict | None = None,
             device: str = "cpu", dtype: str = "float32", runner=None) -> "Playback":
        """Wrap a DecodeStream (specviz.decoding.engine.speculative_stream); nothing is computed yet.

        The stream's `model_work_left` tells the last round, so the Run is collected with it. runner: the
        stream's (device/runner.py); None: the stream's own `runner`, else the shared queue's for `device`.
        """
        runner = runner or getattr(stream, "runner", None)
        pb = cls(prompt_ids=list(prompt_ids), prompt_text=prompt_text, settings=dict(settings), source="live",
                 meta=dict(meta or {}), device=device, dtype=dtype, runner=runner or devqueue.queue_runner(device))
        pb._stream, pb._it = stream, iter(stream)
        return pb

    @classmethod
    def replay(cls, run: Run, prompt_text: str, meta: dict | None = None) -> "Playback":
        """Replay a finished Run from its first round: no model involved."""
        return cls(prompt_ids=list(run.prompt_ids), prompt_text=prompt_text, settings=dict(run.settings),
                   source="replay", meta=dict(meta or {}), run=run, device=run.device, dtype=run.dtype)

    @property
    def reply(self) -> bool:
        """Whether the prompt went in as a chat message (meta["chat"]), so the text is the model's reply
        (render.text_block starts it on its own line); False when unknown."""
        return bool(self.meta.get("chat"))

    @property
    def decode(self) -> DecodeSettings:
        """The run's decoding settings, typed (`settings` is the dict its Run records)."""
        return DecodeSettings.from_record(self.settings)

    @property
    def done(self) -> bool:
        return self._done or (self.source == "replay" and self.run is not None
                              and len(self.rounds) >= len(self.run.rounds))

    @property
    def waited_s(self) -> float:
        """Seconds this live run's rounds have waited for the device so far (engine.DecodeStream; 0 once done)."""
        return float(getattr(self._stream, "waited_s", 0.0) or 0.0)

    @property
    def total(self) -> int | None:
        """Number of rounds when known (replay, or a finished live run)."""
        return len(self.run.rounds) if self.run is not None else None

    def advance(self) -> Round | None:
        """Reveal the next round (live: compute it). None when there is none left.

        Safe to call from two threads: the second waits for the first's round (not in a turn to draw:
        that round's model work may be waiting for the turn to end). The state lock is held only to hand
        the round over (_take, _keep), not while the round runs.
        """
        with self._paused(), self._turn:
            it = self._take()
            if it is None or self.source == "replay":
                return it
            rnd = self._next(it)
            if rnd is None:
                return None
            last = not getattr(self._stream, "model_work_left", True)
            self._keep(rnd)
            if last:  # the stream says that was its last round: collect the Run now
                extra = self._next(it)
                if extra is not None:  # not expected; keep the round rather than lose it
                    self._keep(extra)
            return rnd

    def close(self, reason: str = "the run was stopped") -> None:
        """Stop a live run now and let its KV caches go (after the round in flight, if any)."""
        with self._paused(), self._turn, self._lock:
            if self._it is not None and not self._done:
                self._it.close()
                self._done, self.error = True, self.error or reason
            self._it = self._stream = None
            self._let_go()

    def _paused(self):
        """The runner's paused() (this thread's turn to draw let go while it waits for a round); replay: nothing."""
        return self.runner.paused() if self.runner is not None else contextlib.nullcontext()

    def _take(self):
        """Under the state lock: None when done; replay: the next recorded round, revealed; live: the generator."""
        with self._lock:
            if self.done:
                return None
            if self.source == "replay":
                rnd = self.run.rounds[len(self.rounds)]
                self.rounds.append(rnd)
                return rnd
            return self._it

    def _keep(self, rnd: Round) -> None:
        with self._lock:
            self.rounds.append(rnd)

    def _next(self, it) -> Round | None:
        """The generator's next round, computed without the state lock; None (and the Run collected) at its end. A
        failure mid-run ends the stream, keeping what was computed, and is raised."""
        try:
            return next(it)
        except StopIteration:
            with self._lock:
                self._finish()
            return None
        except Exception as e:
            with self._lock:
                self._done, self.error = True, (str(e) if isinstance(e, SpecvizError) else f"{type(e).__name__}: {e}")
                self._it = None
                self._let_go()
            raise

    def _finish(self) -> None:
        self._done = True
        self.run = self._stream.run
        self.settings = dict(self.run.settings)
        self._it = self._stream = None  # the generator holds KV caches: let them go
        self._let_go()

    def restart(self) -> "Playback":
        """A fresh replay of this playback's finished run."""
        if self.run is None:
            raise SpecvizError("Nothing to replay yet: the run has not finished.")
        return Playback.replay(self.run, self.prompt_text, self.meta)

    def current_run(self) -> Run:
        """The finished Run (replay: all rounds up to the revealed ones), or a partial one. Takes the state lock
        only: never waits for a round in flight."""
        with self._lock:
            return self._current_run()

    def _current_run(self) -> Run:
        if self.run is not None and self.done:
            return self.run
        if self.run is not None:  # replaying: only the revealed rounds
            r = self.run
            return partial_run(r.prompt_ids, self.rounds, r.settings, r.mode, r.device, r.dtype)
        return partial_run(self.prompt_ids, self.rounds, self.settings, device=self.device, dtype=self.dtype)


def play(pb: Playback, steps: int | None = None) -> Iterator[Round]:
    """Advance up to `steps` rounds (None = to the end), yielding each new round."""
    n = 0
    while steps is None or n < steps:
        rnd = pb.advance()
        if rnd is None:
            return
        n += 1
        yield rnd


# --------------------------------------------------------------------------
# text for the page


def load_note(run: Run, baseline: dict | None = None) -> LoadNote | None:
    """The LoadNote when some of these timings were taken while other programs were using the CPU, else None."""
    parts, busy, timed = [], run.outside_load_s, run.rounds_s
    if run.outside_load_rounds:
        parts.append(f"{run.outside_load_rounds} of the run's {len(run.rounds)} rounds")
    b = (baseline or {}).get("base_outside_load")
    if isinstance(b, int) and not isinstance(b, bool) and b > 0:
        parts.append(f"{b} of the target-alone run's {baseline.get('base_target_passes', '?')} passes")
        # a file saved before the seconds were kept: their share is unknown, and taken as serious
        b_s, base_s = baseline.get("base_outside_load_s"), baseline.get("base_decode_s")
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (b_s, base_s))
        busy, timed = (busy + b_s, timed + base_s) if ok else (math.nan, timed)
    return LoadNote.of(" and ".join(parts), busy, timed) if parts else None


def rounds_load_note(rounds, what: str) -> LoadNote | None:
    """The LoadNote of some rounds, chain or tree (each with outside_load and round_s), named
    "{n} of {what}'s {N} rounds"; None if none ran under outside load."""
    busy = [r for r in rounds if r.outside_load]
    return LoadNote.of(f"{len(busy)} of {what}'s {len(rounds)} rounds", sum(r.round_s for r in busy),
                       sum(r.round_s for r in rounds)) if busy else None


def now() -> float:
    """A monotonic clock in seconds (time.perf_counter)."""
    return time.perf_counter()


def after_pause(index: int, after_s: float) -> float:
    """Seconds to wait after drawing the verdict of round `index`: the speed's pause, and at least
    FIRST_VERDICT_S after the first round when the speed animates at all ("instant" never waits)."""
    return max(after_s, FIRST_VERDICT_S) if index == 0 and after_s > 0 else after_s


def sleep(seconds: float) -> None:
    """time.sleep, skipped for 0 (kept here so the page stays free of timing logic)."""
    if seconds > 0:
        time.sleep(seconds)
