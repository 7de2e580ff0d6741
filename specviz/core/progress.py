"""Progress of a long measurement in units (runs, repetitions, trials), with an estimate and a way to stop.

A measurement made of units (a k sweep's runs, a lab's cells, repetitions of forward passes) counts them
with `Units`. After each unit, and while one runs, it calls the progress callback as every specviz progress
callback is called, `progress(message, fraction)`; the message is a `Tick`, a str that also carries `done`,
`total` and `eta_s`, the seconds left estimated from the measured cost of the units done. The callback stops
the measurement by raising `Stopped` or returning False; `Units` then raises `Stopped` with `partial`, the
units finished so far, exactly, in the shape the measurement returns.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from specviz.core.errors import Stopped

Progress = Callable[[str, "float | None"], Any] | None


class Tick(str):
    """A progress message that also says how many units are done, of how many, and the seconds left (None
    until a unit has finished)."""

    done: int
    total: int
    eta_s: float | None

    def __new__(cls, text: str, done: int, total: int, eta_s: float | None):
        t = super().__new__(cls, text)
        t.done, t.total, t.eta_s = int(done), int(total), eta_s
        return t


def eta_words(eta_s: float | None) -> str:
    """'about 40 s left', 'about 3 min left'; '' before any estimate."""
    if eta_s is None or not math.isfinite(eta_s):
        return ""
    if eta_s < 90:
        return f"about {max(1, round(eta_s))} s left"
    return f"about {eta_s / 60:.0f} min left"


class Units:
    """Counts `total` units of a measurement for `progress`; `partial()` gives the units finished so far.

    unit_done(msg) after each unit; say(msg, frac) while one runs (frac: how far into the current unit).
    Either raises Stopped(partial=partial()) when the callback stops the measurement."""

    def __init__(self, progress: Progress, total: int, partial: Callable[[], Any] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter):
        self.progress, self.total, self.partial, self.clock = progress, max(int(total), 0), partial, clock
        self.done = 0
        self.t0 = clock()

    def eta_s(self) -> float | None:
        """Seconds left: the mean measured cost of the units done, times the units left."""
        if self.done == 0:
            return None
        return (self.clock() - self.t0) / self.done * (self.total - self.done)

    def _tell(self, msg: str, frac: float) -> None:
        if self.progress is None:
            return
        eta = self.eta_s()
        words = eta_words(eta)
        text = f"{self.done}/{self.total} · {msg}" + (f" · {words}" if words else "")
        try:
            go_on = self.progress(Tick(text, self.done, self.total, eta), min(max(frac, 0.0), 1.0))
        except Stopped as e:
            raise Stopped(str(e), self.partial()) from None
        if go_on is False:
            raise Stopped("Stopped before the end.", self.partial())

    def say(self, msg: str, frac: float | None = None) -> None:
        """While a unit runs: `frac` of the current unit is done."""
        within = min(max(frac or 0.0, 0.0), 1.0)
        self._tell(msg, (self.done + within) / self.total if self.total else 1.0)

    def unit_done(self, msg: str = "") -> None:
        """One more unit finished (and kept in what partial() gives)."""
        self.done += 1
        self._tell(msg, self.done / self.total if self.total else 1.0)
