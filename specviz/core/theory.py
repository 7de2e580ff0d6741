"""The arithmetic of speculative decoding, as small pure functions.

Notation (as in the claims the app shows):
  alpha  per-token acceptance: the chance the target accepts a drafted token
  k      drafted tokens per round
  c      cost of one draft forward step relative to one 1-token target step
  E[tokens per target pass] = (1 - alpha^(k+1)) / (1 - alpha)
  speedup ~ E[tokens] / (k*c + verify_ratio(k+1))
where verify_ratio(n) is the measured cost of one target pass over n tokens
relative to a 1-token pass (1.0 everywhere gives the classic 1 + k*c).

Only numpy: no torch, no models, no streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specviz.core.errors import InvalidSetting

VerifyCost = Callable[[float], float] | Mapping[int, float] | None


# --- tokens per pass -----------------------------------------------------
def expected_tokens(alpha, k):
    """E[tokens emitted per target pass] = (1 - alpha^(k+1)) / (1 - alpha).

    Vectorised over numpy arrays (alpha and k broadcast). alpha=1 gives k+1,
    alpha=0 gives 1. Returns a float for scalar input, else an ndarray.
    """
    a = np.asarray(alpha, dtype=float)
    kk = np.asarray(k)
    if np.any((a < 0) | (a > 1)) or np.any(np.isnan(a)):
        raise InvalidSetting(f"alpha must be in [0, 1], got {alpha!r}")
    if np.any(kk < 0) or np.any(kk != np.round(kk)):
        raise InvalidSetting(f"k must be a whole number >= 0, got {k!r}")
    kk = kk.astype(float)
    one = np.isclose(a, 1.0, rtol=0, atol=1e-12)
    safe = np.where(one, 0.5, a)  # avoid 0/0 where alpha == 1
    out = np.where(one, kk + 1.0, (1.0 - safe ** (kk + 1.0)) / (1.0 - safe))
    return float(out) if out.ndim == 0 else out


def expected_tokens_over(alpha, ks):
    """E[tokens per target pass] of a run whose rounds drafted ks (k set by a policy, round by round):
    the formula averaged over its rounds, mean_r (1 - alpha^(k_r+1)) / (1 - alpha). With every k_r = k,
    expected_tokens(alpha, k). Vectorised over alpha."""
    ks = [int(k) for k in ks]
    if not ks:
        raise InvalidSetting("no rounds: the k of at least one round is needed")
    return np.mean([np.asarray(expected_tokens(alpha, k), dtype=float) for k in ks], axis=0)


def accepted_length_pmf(alpha: float, k: int) -> np.ndarray:
    """P(n drafted tokens accepted in a round), n = 0..k (truncated geometric).

    P(n) = alpha^n (1 - alpha) for n < k, and P(k) = alpha^k (all accepted).
    """
    expected_tokens(alpha, k)  # validates
    n = np.arange(k + 1, dtype=float)
    pmf = alpha**n * (1.0 - alpha)
    pmf[-1] = alpha**k
    return pmf


def _seed_table() -> dict[float, float]:
    return {a: round(expected_tokens(a, 4), 4) for a in (0.5, 0.7, 0.8, 0.9)}


# The worked numbers of claim 8 (k = 4), computed from the formula.
SEED_TABLE: dict[float, float] = _seed_table()


# --- cost model ------------------------------------------------------------
def verify_ratio(n_tokens, verify_cost: VerifyCost = None):
    """Cost of a target pass over n_tokens relative to a 1-token pass.

    verify_cost: None (1.0: the pass is memory-bound, extra tokens are free),
    a callable n_tokens -> ratio, or a dict {n_tokens: ratio} from measurements
    (linear interpolation; beyond the largest measured n the last segment's
    slope is extended; below the smallest n the first value is used).
    """
    n = np.asarray(n_tokens, dtype=float)
    if verify_cost is None:
        out = np.ones_like(n)
    elif callable(verify_cost):
        out = np.vectorize(lambda x: float(verify_cost(x)), otypes=[float])(n)
    elif isinstance(verify_cost, Mapping):
        if not verify_cost:
            raise InvalidSetting("verify_cost is an empty dict: measure at least one size")
        pts = sorted((float(x), float(y)) for x, y in verify_cost.items())  # keys may be str (JSON)
        xs = np.array([x for x, _ in pts])
        ys = np.array([y for _, y in pts])
        out = np.interp(n, xs, ys)
        if len(xs) >= 2:
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            out = np.where(n > xs[-1], ys[-1] + slope * (n - xs[-1]), out)
    else:
        raise InvalidSetting("verify_cost must be None, a callable or a dict {n_tokens: ratio}")
    return float(out) if out.ndim == 0 else out


def round_cost(k, c, verify_cost: VerifyCost = None):
    """Cost of one round in 1-token target passes: k draft steps and one pass over k+1 tokens,
    k*c + verify_ratio(k+1). Vectorised over k (and c)."""
    if np.any(np.asarray(c, dtype=float) < 0):
        raise InvalidSetting(f"c must be >= 0, got {c!r}")
    kk = np.asarray(k, dtype=float)
    out = kk * np.asarray(c, dtype=float) + verify_ratio(kk + 1, verify_cost)
    return float(out) if np.ndim(out) == 0 else out


def expected_speedup(alpha, k, c, verify_cost: VerifyCost = None):
    """Predicted wall-time speedup over target-only decoding.

    = E[tokens per pass] / round_cost(k, c). With verify_cost=None
    this is the classic E[tokens] / (1 + k*c).
    """
    out = np.asarray(expected_tokens(alpha, k)) / np.asarray(round_cost(k, c, verify_cost))
    return float(out) if np.ndim(out) == 0 else out


def best_k(alpha: float, c: float, verify_cost: VerifyCost = None, k_max: int = 16,
           k_min: int = 1) -> tuple[int, float]:
    """The k in [k_min, k_max] with the highest predicted speedup: (k, speedup).

    A speedup below 1 means speculation does not pay at these alpha and c.
    """
    if k_max < k_min:
        raise InvalidSetting(f"k_max ({k_max}) must be >= k_min ({k_min})")
    ks = np.arange(k_min, k_max + 1)
    s = np.asarray(expected_speedup(alpha, ks, c, verify_cost), dtype=float)
    i = int(np.argmax(s))  # first maximum: the smallest k on ties
    return int(ks[i]), float(s[i])


def flat_until(sizes, seconds, tol: float = 1.25) -> float:
    """Largest size whose cost stays within tol x the smallest size's cost.

    Used for claim 12: where the "extra tokens are free" region ends.
    `seconds` may hold a list per size (its median is used).
    """
    pts = sorted((float(s), float(np.median(np.atleast_1d(np.asarray(t, dtype=float)))))
                 for s, t in zip(sizes, seconds))
    if not pts:
        raise InvalidSetting("no points given")
    base = pts[0][1]
    last = pts[0][0]
    for s, t in pts:
        if t > tol * base:
            break
        last = s
    return last


# --- estimates from measurements -------------------------------------------
class Estimate(NamedTuple):
    """A proportion with its standard error and a confidence interval."""

    value: float
    stderr: float
    lo: float
    hi: float
    n: int


def tokens_per_pass_ci(run) -> Estimate:
    """Mean and standard error of tokens emitted per round (one target pass each).

    lo/hi are a normal 95% interval. stderr is nan with fewer than 2 rounds.
    """
    xs = np.array([len(r.emitted) for r in run.rounds], dtype=float)
    n = len(xs)
    if n == 0:
        nan = float("nan")
        return Estimate(nan, nan, nan, nan, 0)
    m = float(xs.mean())
    se = float(xs.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return Estimate(m, se, m - 1.96 * se, m + 1.96 * se, n)


# --- exactness (claim 7) -----------------------------------------------------
def _freqs(counts: Mapping[int, float]) -> dict[int, float]:
    total = float(sum(counts.values()))
    if total <= 0:
        raise InvalidSetting("counts are empty: nothing was sampled")
    return {i: c / total for i, c in counts.items()}


def total_variation(p: Mapping[int, float], counts: Mapping[int, float]) -> float:
    """Total variation distance between target p and the empirical counts.

    TV = 1/2 * sum |p(x) - f(x)|. If p lists only its top tokens (sums to < 1),
    its missing mass is compared with the observed mass outside p as one
    "other" bucket (exact when p is complete).
    """
    f = _freqs(counts)
    inside = sum(abs(float(p[i]) - f.get(i, 0.0)) for i in p)
    p_rest = max(0.0, 1.0 - float(sum(p.values())))
    f_rest = sum(v for i, v in f.items() if i not in p)
    return 0.5 * (inside + abs(p_rest - f_rest))


def expected_tv_noise(p, n: int) -> float:
    """The expected TV between p and the frequencies of n exact samples of p: what noise alone gives.

    Exact, token by token: a token's count X is Binomial(n, p_i), and de Moivre's mean absolute deviation
    E|X - n p_i| = 2 (m+1) C(n, m+1) p_i^(m+1) (1-p_i)^(n-m), m = floor(n p_i); TV = Σ E|X/n - p_i| / 2.
    Over a long tail of rare tokens this is much more than a normal approximation gives. p: a mapping
    id -> probability (what it leaves out of 1 counts as one more bucket) or the whole (V,) distribution.
    """
    if n <= 0:
        return float("nan")
    ps = np.asarray(list(p.values()) if isinstance(p, Mapping) else p, dtype=np.float64).ravel()
    rest = 1.0 - float(ps.sum())
    ps = np.append(ps, rest) if rest > 1e-12 else ps
    ps = ps[(ps > 0) & (ps < 1)]  # p = 0 or 1: never any noise
    m = np.floor(n * ps)
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    log_mad = (math.log(2) + np.log(m + 1) + math.lgamma(n + 1) - lgamma(m + 2) - lgamma(np.maximum(n - m, 1))
               + (m + 1) * np.log(ps) + (n - m) * np.log1p(-ps))
    return float(np.exp(log_mad[m < n]).sum() / (2 * n))


# A measured TV this many spreads (standard deviations of the simulated noise) above noise's mean is more than
# noise. Sampling alone gets there about once in 30,000 samplings (a normal tail), so a correct sampler is almost
# never called wrong, where a bar at the 95th percentile would call it wrong once in 20 runs. A wrong rule lands
# far beyond: the lossy rules of the rule lab sit at 10x the noise.
NOISE_SPREADS = 4.0
NOISE_REPS = 200  # simulated samplings of noise alone


@dataclass(frozen=True)
class TVNoise:
    """The TV between p and the frequencies of n samples drawn from p itself, in `reps` simulated samplings:
    the yardstick a measured TV is read against (simulate_tv_noise)."""

    n: int
    tvs: tuple[float, ...]  # one per sampling, sorted
    expected: float  # expected_tv_noise of the same p: the exact mean the simulation estimates

    @property
    def mean(self) -> float:
        return float(np.mean(self.tvs))

    @property
    def sd(self) -> float:
        return float(np.std(self.tvs, ddof=1)) if len(self.tvs) > 1 else float("nan")

    @property
    def p95(self) -> float:
        """The TV that 95% of the samplings stayed under."""
        return float(self.tvs[min(len(self.tvs) - 1, int(0.95 * len(self.tvs)))])

    @property
    def limit(self) -> float:
        """Beyond this a TV is more than noise: NOISE_SPREADS spreads above the mean."""
        return self.mean + NOISE_SPREADS * self.sd

    def share_at_least(self, tv: float) -> float:
        """The share of the samplings whose TV was at least `tv`."""
        return float(np.mean(np.asarray(self.tvs) >= tv))


def simulate_tv_noise(p, n: int, reps: int = NOISE_REPS, seed: int = 12345) -> TVNoise:
    """Draw n tokens from p, `reps` times, and take each sample's TV to p.

    p: the whole distribution (an array over the vocabulary; it is normalized). A measured TV compared with
    this must be over the same tokens: total_variation over every token drawn is (the tokens never drawn add
    their p either way)."""
    ps = np.asarray(p, dtype=np.float64).ravel()
    if n <= 0 or reps < 2 or ps.size == 0 or not ps.sum() > 0:
        raise InvalidSetting("the noise of sampling needs n >= 1, two samplings or more and a distribution with "
                             "some mass")
    ps = ps / ps.sum()
    cdf = np.cumsum(ps)
    cdf /= cdf[-1]
    rng = np.random.default_rng(seed)
    tvs = []
    for _ in range(reps):
        drawn = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), ps.size - 1)  # (n,) token ids
        f = np.bincount(drawn, minlength=ps.size) / n  # (V,)
        tvs.append(0.5 * float(np.abs(ps - f).sum()))
    return TVNoise(n, tuple(sorted(tvs)), expected_tv_noise(ps, n))
