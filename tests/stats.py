"""Small statistics helpers for the distribution tests (no scipy needed)."""

import math


def chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper quantile of chi-square(df) by Wilson-Hilferty; z=3.09 is p = 0.001."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: dict, probs: dict, n: int, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson chi-square of counts against probs; bins with small expectation pooled.

    Returns (statistic, degrees of freedom). Outcomes with probability 0 that
    were observed make the statistic infinite (an impossible outcome happened).
    """
    if any(probs.get(x, 0.0) == 0.0 and c > 0 for x, c in counts.items()):
        return math.inf, 1
    stat, bins = 0.0, 0
    pooled_o, pooled_e = 0, 0.0
    for x, p in probs.items():
        e, o = n * p, counts.get(x, 0)
        if e < min_expected:
            pooled_o += o
            pooled_e += e
            continue
        stat += (o - e) ** 2 / e
        bins += 1
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
        bins += 1
    return stat, max(bins - 1, 1)


def total_variation(counts: dict, probs: dict, n: int) -> float:
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(x, 0) / n - probs.get(x, 0.0)) for x in keys)


def passes(counts: dict, probs: dict, n: int) -> bool:
    stat, df = chi2_stat(counts, probs, n)
    return stat < chi2_critical(df)
