"""The k policies: how many tokens each round drafts.

  FixedK      the same k every round
  AdaptiveK   transformers' heuristic: +1 after a full acceptance, -1 after a rejection
  BestK       the k that maximises the predicted speedup, and a stop after a doubtful draft

make_k_policy turns the engine's k_policy setting into one of them. Each is a
KPolicy, the three methods the engine calls each round:

  next_k(asks_keep)          the round's k, before drafting (asks_keep: the drafter
                             will ask keep_drafting after each token, so k may be a cap)
  keep_drafting(conf, extra) asked after each drafted token: draft one more?
                             (FixedK and AdaptiveK always say yes)
  observe(round)             learn from the finished round

The best-k chooser picks k each round to maximise the predicted speedup.

The speedup model (theory.expected_speedup) needs three numbers, and a run
measures all three as it goes, so the chooser estimates them live from the
Rounds so far and asks theory.best_k for the k that maximises

    E[tokens per pass](alpha, k) / round_cost(k, c)   (k * c + verify_ratio(k + 1))

  alpha   per-token acceptance, a Beta(a0, b0) prior updated with each round's
          accepted / judged drafts (the same estimate as Run.alpha), with
          optional exponential forgetting so a run that moves from boilerplate
          to prose can change its mind
  c       one draft step / one 1-token target step: measure.c_ratio of the
          rounds' draft steps (measure.draft_step_s) over the estimated 1-token
          target time
  verify  the target pass over n = k + 1 tokens relative to a 1-token pass:
          medians of the rounds' verify_s for each n seen so far (plus a
          measured profile, e.g. from experiments.forward_cost, if given)

Only the ratio of costs matters for the arg max, so when no 1-token pass has
been seen (a speculative run never makes one) the smallest pass seen stands in
for it; sizes not seen yet are interpolated, and beyond the largest size seen
the last measured slope is extended (flat when only one size is known: the
optimistic guess, which makes the chooser try a larger k and measure it).
The first round's target pass, which also read the prompt, is one measured
point far out on the curve (the prompt anchor): its cost in 1-token passes is
estimated from the draft's own reading of the same prompt (prompt_extra), so
it gives a 1-token time before any plain pass is timed (the lower of the two
stands in), and a slope beyond the sizes seen. Without it, nothing is timed
after the first round, so a confident second round drafts up to K_MAX as if a
pass of K_MAX + 1 tokens cost one token's.

With stop=True (what k_policy="best" uses) the round's k is decided online
as well, by keep_drafting, from the draft's own confidence: after each
drafted token the chooser keeps drafting only while one more token is
expected to add more tokens per unit of cost than the round so far,

    P_j * a(q_j) / (c + r(j+2) - r(j+1))  >  E_j / (j c + r(j+1))

where P_j is the chance that all j drafts so far are accepted (the product of
each draft's calibrated acceptance chance a(q), q = the draft's probability of
the token it proposed; a(q) is learned live from the judged drafts, starting
from a(q) = q) and E_j = 1 + P_1 + ... + P_j. The next draft's chance is not
known before it is drafted; confidence runs in streaks, so the last draft's
a(q_j) stands in for it (rather than the run's alpha, which gave fewer tokens/s on the real pair).
With every a(q) equal to alpha this stops exactly at theory.best_k; with real
confidences it drafts long
through boilerplate and stops right after a doubtful token (transformers'
assisted generation stops after a draft token with probability < 0.4, a fixed
threshold). The stopping decision depends only on the draft's side, so the
output distribution is still exactly the target's. Before the first round
nothing is measured: the engine primes c with measure.c_prior, what a step of
each model streams (prime()), and the verify cost is taken as flat. The first
round's target pass also reads the prompt, so it costs several 1-token passes
and each draft is cheap next to it: the cost of the round gets that `extra`,
estimated from the draft's own first step, which read the same prompt
(prompt_extra; the engine passes it to keep_drafting), and the first round
drafts longer. Its timings include reading the prompt: observe() learns its
acceptance but not its costs.

With clock=False (what the engine sets when sampling) the decisions use no
timing of this run: c is the primed first estimate, the verify cost is the
given profile or flat, and the first round gets no `extra`. How many tokens a
round drafts decides how many random numbers the run draws, so this is what
makes a seeded sampling run give the same text every time. Greedy output does
not depend on k, so greedy runs keep the live timings. Either way the timings
are still measured and reported (c, verify_cost).

The estimates are plain numbers (no torch): the chooser can be unit-tested on
synthetic Rounds.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping

from specviz.core import measure, theory
from specviz.core.errors import InvalidSetting
from specviz.core.limits import K_MAX


# confidence bins for the calibration a(q) of the stop rule
CALIB_EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0)
CALIB_PRIOR = 2.0  # pseudo-observations per bin, at a(q) = the bin's middle


class KPolicy:
    """What the engine asks a k policy each round. This base drafts every token it is given k for."""

    stops = False  # keep_drafting may say no: the engine asks it after each drafted token

    def next_k(self, asks_keep: bool = False) -> int:
        """The round's k (asks_keep: the drafter asks keep_drafting() after each token)."""
        raise NotImplementedError

    def keep_drafting(self, confidences: list[float], extra: float = 0.0) -> bool:
        """After drafting len(confidences) tokens (each the draft's probability of its token): one more?"""
        return True

    def read_prompt(self, extra: float, step_s: float) -> None:
        """In the round that also reads the prompt: the draft's first step cost `extra` 1-token steps more
        than its later steps, which took `step_s` each (prompt_extra)."""

    def observe(self, rnd) -> None:
        """Learn from one finished Round."""


class FixedK(KPolicy):
    """The same k every round."""

    def __init__(self, k: int):
        self.k = k

    def next_k(self, asks_keep: bool = False) -> int:
        return self.k


class AdaptiveK(FixedK):
    """Like transformers' heuristic: +1 after a full acceptance, -1 after a rejection."""

    def __init__(self, k: int, k_min: int = 1, k_max: int = 16):
        super().__init__(k)
        self.k_min, self.k_max = k_min, max(k_max, k)

    def observe(self, rnd) -> None:
        if rnd.rejected:
            self.k = max(self.k_min, self.k - 1)
        elif rnd.k > 0:
            self.k = min(self.k_max, self.k + 1)


class BestK(KPolicy):
    """A k policy that maximises the predicted speedup.

    k:            the first round's k, before anything is measured
    k_min, k_max: the range searched
    prior:        (a0, b0) of the Beta prior on alpha (mean a0 / (a0 + b0))
    decay:        weight kept by older rounds' acceptance counts per round
                  (1.0 = never forget)
    verify_cost:  optional measured profile {n_tokens: seconds or ratio} or a
                  callable n -> ratio; its shape is used, and the live verify
                  times scale it. None: learn the shape from the rounds.
    window:       how many recent timings per size the medians use
    stop:         also stop drafting early on a doubtful draft (keep_drafting; see the module
                  doc); for a drafter that asks it, next_k() then gives the cap, k_max
    clock:        let this run's timings steer k (False: the primed c and the profile
                  only, so the same inputs give the same k every time)
    """

    name = "best"

    def __init__(self, k: int = 4, *, k_min: int = 1, k_max: int = 16, prior: tuple[float, float] = (3.0, 1.5),
                 decay: float = 1.0, verify_cost: Mapping[int, float] | Callable[[float], float] | None = None,
                 window: int = 12, stop: bool = False, clock: bool = True):
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
        self.stop = bool(stop)
        self.clock = bool(clock)
        self.k0 = self.k
        self.c_prior: float | None = None  # c before any round is measured (see prime())
        self.prompt_read: tuple[float, float] | None = None  # (extra, draft step s) from read_prompt
        self.anchor: tuple[int, float, float] | None = None  # the prompt pass: (tokens, seconds, est. ratio)
        nb = len(CALIB_EDGES) - 1
        self.calib_acc = [CALIB_PRIOR * (CALIB_EDGES[i] + CALIB_EDGES[i + 1]) / 2 for i in range(nb)]
        self.calib_n = [CALIB_PRIOR] * nb

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
        """Posterior mean of alpha under the Beta prior (measure.alpha_posterior)."""
        return measure.alpha_posterior(self.accepted, self.judged, self.a0, self.b0)

    def _profile_ratio(self, n: int) -> float:
        return float(theory.verify_ratio(n, self.profile))

    @property
    def t1(self) -> float | None:
        """Estimated seconds of a 1-token target pass (or the stand-in; see the module doc)."""
        if self.profile is not None:
            if not self.verify_by_n:
                return None
            # every size seen says t1 = T(n) / ratio(n); take the median over all recent passes
            return statistics.median(t / self._profile_ratio(n) for n, ts in self.verify_by_n.items() for t in ts)
        seen = statistics.median(self.verify_by_n[min(self.verify_by_n)]) if self.verify_by_n else None
        if self.anchor is None:
            return seen
        _, seconds, ratio = self.anchor
        return seconds / ratio if seen is None else min(seen, seconds / ratio)

    @property
    def c(self) -> float | None:
        t1 = self.t1
        if t1 is None or not t1 > 0:
            return None
        return measure.c_ratio(self.draft_per_token or [0.0], t1)  # no model draft (prompt lookup): c = 0

    @property
    def verify_cost(self):
        """What theory.verify_ratio gets: the profile, or {n: median T(n) / t1} for the sizes seen."""
        if self.profile is not None:
            return self.profile
        t1 = self.t1
        if t1 is None:
            return None
        pts = {n: statistics.median(ts) / t1 for n, ts in sorted(self.verify_by_n.items())}
        if self.anchor is not None:  # from 1 token at t1 out to the prompt pass (module doc)
            n0, seconds, _ = self.anchor
            pts.setdefault(1, 1.0)
            if n0 > max(pts):
                pts[n0] = seconds / t1
        return pts

    @staticmethod
    def _bin(q: float) -> int:
        for i in range(len(CALIB_EDGES) - 2, -1, -1):
            if q >= CALIB_EDGES[i]:
                return i
        return 0

    def accept_chance(self, q: float) -> float:
        """a(q): the calibrated chance that a draft proposed with probability q is accepted."""
        i = self._bin(q)
        return self.calib_acc[i] / self.calib_n[i]

    def prime(self, c: float | None) -> None:
        """A first-round estimate of c, before any round is measured.

        The engine passes measure.c_prior: what a step of each model streams, weights and a cost per
        layer (decoding a token streams every weight once). With it the stop rule already
        decides the first round (verify cost taken as flat) instead of drafting the
        starting k.
        """
        if isinstance(c, (int, float)) and math.isfinite(c) and c > 0:
            self.c_prior = float(c)

    def _c_estimate(self) -> float | None:
        """The c decisions use: from the rounds so far (clock only), else prime()'s estimate, else None."""
        c = self.c if self.clock else None
        return c if c is not None else self.c_prior

    def _verify_estimate(self):
        """The verify cost decisions use: the live one (clock), else the profile (None: flat)."""
        return self.verify_cost if self.clock else self.profile

    # --- the policy interface ------------------------------------------------
    @property
    def stops(self) -> bool:
        return self.stop

    def next_k(self, asks_keep: bool = False) -> int:
        if self.stop and asks_keep and self._c_estimate() is not None:
            return self.k_max  # the drafter asks keep_drafting() after each token: the cap
        c = self.c if self.clock else self.c_prior
        if c is None:  # nothing measured and no estimate for the stop rule: the starting k
            return self.k
        k, s = theory.best_k(self.alpha, c, self._verify_estimate(), k_max=self.k_max, k_min=self.k_min)
        self.k = k
        self.history.append({"alpha": self.alpha, "c": c, "k": k, "predicted": s})
        return k

    def keep_drafting(self, confidences: list[float], extra: float = 0.0) -> bool:
        """After drafting len(confidences) tokens (each the draft's probability of its token):
        is one more draft expected to raise tokens per unit of cost? (See the module doc.)

        extra: what this round's target pass costs beyond verifying the drafts, in 1-token
        target passes (the first round's pass also reads the prompt: prompt_extra).
        Without stop=True, always yes."""
        if not self.stop:
            return True
        j = len(confidences)
        c = self._c_estimate()
        if c is None:  # first round, no estimate of c: draft the starting k
            return j < self.k0
        if j < self.k_min:
            return True
        p, e = 1.0, 1.0
        for q in confidences:
            p *= self.accept_chance(q)
            e += p
        vc = self._verify_estimate()
        extra = max(0.0, extra) if self.clock else 0.0  # `extra` comes from this run's timings
        cost = theory.round_cost(j, c, vc) + extra
        d_cost = theory.round_cost(j + 1, c, vc) - theory.round_cost(j, c, vc)  # one draft step more
        d_tokens = p * self.accept_chance(confidences[-1])  # the next draft's chance, from the last one's
        return d_tokens * cost > e * d_cost if d_cost > 0 else d_tokens > 0

    def read_prompt(self, extra: float, step_s: float) -> None:
        if extra > 0 and step_s > 0 and math.isfinite(extra) and math.isfinite(step_s):
            self.prompt_read = (float(extra), float(step_s))

    def observe(self, rnd) -> None:
        """Learn from one Round: acceptance counts, draft time per token, verify time by size."""
        self.learn(rnd.q_drafted[: len(rnd.accepted)], rnd.accepted, measure.draft_step_s(rnd), rnd.verify_s,
                   rnd.k + 1, prompt=rnd.prefill_tokens)

    def learn(self, confidences: list[float], verdicts: list[bool], draft_step_s: float | None, verify_s: float,
              width: int, prompt: int = 0) -> None:
        """Learn from one round of any shape: the judged chain drafts (the draft's probability of each, and
        whether it was accepted), the seconds of one draft step (None: not timed), and the target pass
        over `width` tokens and `prompt` earlier ones (the first round's also reads the prompt: it is timed
        only as the prompt anchor, from what read_prompt was told)."""
        if self.decay < 1.0:
            self.accepted *= self.decay
            self.judged *= self.decay
        self.accepted += sum(bool(ok) for ok in verdicts)
        self.judged += len(verdicts)
        if draft_step_s is not None:
            self.draft_per_token.append(draft_step_s)
        timed = verify_s > 0 and math.isfinite(verify_s)
        if timed and not prompt:
            self.verify_by_n.setdefault(width, deque(maxlen=self.window)).append(verify_s)
        elif timed and self.prompt_read is not None:
            # the draft read prompt + 1 tokens for 1 + extra steps; the target read prompt + width tokens
            extra, step_s = self.prompt_read
            self.anchor = (prompt + width, verify_s, 1.0 + extra * (prompt + width - 1) / prompt)
            if draft_step_s is None:
                self.draft_per_token.append(step_s)
        self.prompt_read = None
        for q, ok in zip(confidences, verdicts):  # the judged drafts: calibrate a(q)
            i = self._bin(q)
            self.calib_acc[i] += bool(ok)
            self.calib_n[i] += 1


def prompt_extra(step_s: list[float]) -> float:
    """The first round's target pass also reads the prompt: its cost beyond a 1-token pass, in 1-token
    target passes, estimated from the draft reading the same prompt in its first step (both models'
    costs grow alike with the tokens read: real pair, 2-core CPU, 50-token code prompt: the draft's
    prompt read costs 3.8-4.3 of its 1-token steps, the target's first pass 4.6-4.7 of its own, so
    the estimate errs low). 0 until a later 1-token step has been timed."""
    if len(step_s) < 2:
        return 0.0
    later = statistics.median(step_s[1:])
    return max(0.0, step_s[0] / later - 1.0) if later > 0 else 0.0


def keep_rule(policy: KPolicy, reads_prompt: bool) -> Callable[[list[float], list[float]], bool] | None:
    """What a drafter asks after each drafted token, keep(confidences, step seconds) -> draft one more?
    None when the policy never stops a round. reads_prompt: this round's target pass also reads the
    prompt (the first round), an extra cost estimated from the draft's own first step."""
    if not policy.stops:
        return None

    def keep(confidences: list[float], step_s: list[float]) -> bool:
        extra = prompt_extra(step_s) if reads_prompt else 0.0  # in 1-token target passes
        if extra > 0 and len(step_s) > 1:
            policy.read_prompt(extra, statistics.median(step_s[1:]))
        return policy.keep_drafting(confidences, extra)

    return keep


def prepare(policy: KPolicy, draft_model, target_model, greedy: bool) -> KPolicy:
    """Set a policy up for one run, before anything is timed: a first estimate of c from the two models'
    weights (BestK.prime), and, when sampling, no wall clock: k sets how many random draws a round
    makes, so the same seed must give the same k."""
    prime = getattr(policy, "prime", None)
    if prime is not None and draft_model is not None:
        prime(measure.c_prior(draft_model, target_model))
    if not greedy and hasattr(policy, "clock"):
        policy.clock = False
    return policy


def make_k_policy(k: int, k_policy):
    """'fixed', 'adaptive', 'best' (BestK: live estimates of alpha, c and verify cost, and
    a stop after a doubtful draft), or a ready KPolicy."""
    if k_policy == "fixed":
        return FixedK(k)
    if k_policy == "adaptive":
        return AdaptiveK(k)
    if k_policy == "best":
        return BestK(k, k_max=K_MAX, stop=True)  # the stop rule, not the cap, ends a confident round
    if isinstance(k_policy, KPolicy):
        return k_policy
    raise InvalidSetting(f"k_policy must be 'fixed', 'adaptive' or 'best', got {k_policy!r}.")
