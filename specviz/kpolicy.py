"""The best-k chooser: pick k each round to maximise the predicted speedup.

The speedup model (theory.expected_speedup) needs three numbers, and a run
measures all three as it goes, so the chooser estimates them live from the
Rounds so far and asks theory.best_k for the k that maximises

    E[tokens per pass](alpha, k) / (k * c + verify_ratio(k + 1))

  alpha   per-token acceptance, a Beta(a0, b0) prior updated with each round's
          accepted / judged drafts (the same estimate as Run.alpha), with
          optional exponential forgetting so a run that moves from boilerplate
          to prose can change its mind
  c       one draft step / one 1-token target step: the median of the rounds'
          draft_s per drafted token over the estimated 1-token target time
  verify  the target pass over n = k + 1 tokens relative to a 1-token pass:
          medians of the rounds' verify_s for each n seen so far (plus a
          measured profile, e.g. from experiments.forward_cost, if given)

Only the ratio of costs matters for the arg max, so when no 1-token pass has
been seen (a speculative run never makes one) the smallest pass seen stands in
for it; sizes not seen yet are interpolated, and beyond the largest size seen
the last measured slope is extended (flat when only one size is known: the
optimistic guess, which makes the chooser try a larger k and measure it).

Plain numbers only (no torch): it can be unit-tested on synthetic Rounds.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping

from . import theory
from .errors import InvalidSetting


class BestK:
    """A k policy (next_k / observe) that maximises the predicted speedup.

    k:            the first round's k, before anything is measured
    k_min, k_max: the range searched
    prior:        (a0, b0) of the Beta prior on alpha (mean a0 / (a0 + b0))
    decay:        weight kept by older rounds' acceptance counts per round
                  (1.0 = never forget)
    verify_cost:  optional measured profile {n_tokens: seconds or ratio} or a
                  callable n -> ratio; its shape is used, and the live verify
                  times scale it. None: learn the shape from the rounds.
    window:       how many recent timings per size the medians use
    """

    name = "best"

    def __init__(self, k: int = 4, *, k_min: int = 1, k_max: int = 16, prior: tuple[float, float] = (3.0, 1.5),
                 decay: float = 1.0, verify_cost: Mapping[int, float] | Callable[[float], float] | None = None,
                 window: int = 12):
        if not (1 <= k_min <= k_max):
            raise InvalidSetting(f"need 1 <= k_min <= k_max, got {k_min}, {k_max}")
        if not (prior[0] > 0 and prior[1] > 0):
            raise InvalidSetting(f"the Beta prior needs a0 > 0 and b0 > 0, got {prior!r}")
        if not (0 < decay <= 1):
            raise InvalidSetting(f"decay must be in (0, 1], got {decay!r}")
        self.k = min(max(int(k), k_min), k_max)
        self.k_min, self.k_max = k_min, k_max
        self.a0, self.b0 = float(prior[0]), float(prior[1])
        self.decay = float(decay)
        self.window = int(window)
        self.profile = self._normalise(verify_cost)
        self.accepted = 0.0  # (decayed) accepted drafts
        self.judged = 0.0  # (decayed) drafts the target judged
        self.draft_per_token: deque[float] = deque(maxlen=window)
        self.verify_by_n: dict[int, deque[float]] = {}
        self.history: list[dict] = []  # what was decided each round, for the bench and the app

    # --- estimates ---------------------------------------------------------
    @staticmethod
    def _normalise(vc):
        if vc is None or callable(vc):
            return vc
        if not vc:
            raise InvalidSetting("verify_cost is an empty profile")
        pts = {int(n): float(v if not isinstance(v, (list, tuple)) else statistics.median(v)) for n, v in vc.items()}
        base = pts[min(pts)]
        if not base > 0:
            raise InvalidSetting("verify_cost: the smallest size must cost > 0")
        return {n: v / base for n, v in sorted(pts.items())}

    @property
    def alpha(self) -> float:
        """Posterior mean of alpha under the Beta prior."""
        return (self.a0 + self.accepted) / (self.a0 + self.b0 + self.judged)

    def _profile_ratio(self, n: int) -> float:
        return float(theory.verify_ratio(n, self.profile))

    @property
    def t1(self) -> float | None:
        """Estimated seconds of a 1-token target pass (or the stand-in; see the module doc)."""
        if not self.verify_by_n:
            return None
        if self.profile is not None:
            # every size seen says t1 = T(n) / ratio(n); take the median over all recent passes
            return statistics.median(t / self._profile_ratio(n) for n, ts in self.verify_by_n.items() for t in ts)
        return statistics.median(self.verify_by_n[min(self.verify_by_n)])

    @property
    def c(self) -> float | None:
        t1 = self.t1
        if t1 is None or not t1 > 0:
            return None
        d = statistics.median(self.draft_per_token) if self.draft_per_token else 0.0
        return d / t1

    @property
    def verify_cost(self):
        """What theory.verify_ratio gets: the profile, or {n: median T(n) / t1} for the sizes seen."""
        if self.profile is not None:
            return self.profile
        t1 = self.t1
        if t1 is None:
            return None
        return {n: statistics.median(ts) / t1 for n, ts in sorted(self.verify_by_n.items())}

    # --- the policy interface ------------------------------------------------
    def next_k(self) -> int:
        c = self.c
        if c is None:  # nothing measured yet: the starting k
            return self.k
        k, s = theory.best_k(self.alpha, c, self.verify_cost, k_max=self.k_max, k_min=self.k_min)
        self.k = k
        self.history.append({"alpha": self.alpha, "c": c, "k": k, "predicted": s})
        return k

    def observe(self, rnd) -> None:
        """Learn from one Round: acceptance counts, draft time per token, verify time by size."""
        judged = len(rnd.accepted)
        if self.decay < 1.0:
            self.accepted *= self.decay
            self.judged *= self.decay
        self.accepted += rnd.n_accepted
        self.judged += judged
        if rnd.k > 0 and rnd.draft_s > 0:
            self.draft_per_token.append(rnd.draft_s / rnd.k)
        if rnd.verify_s > 0 and math.isfinite(rnd.verify_s):
            self.verify_by_n.setdefault(rnd.k + 1, deque(maxlen=self.window)).append(rnd.verify_s)
