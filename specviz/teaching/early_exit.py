"""Early exit against its depth: alpha, c and the speedup for several L on one prompt (charts.fig_early_exit
draws them: draft quality against draft cost, on one model)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specviz.core import measure, theory
from specviz.core.errors import InvalidSetting
from specviz.core.progress import Progress, Units
from specviz.core.settings import DecodeSettings
from specviz.decoding.selfdraft import draft_at, num_layers
from specviz.teaching.baseline import Measured
from specviz.teaching.experiments import compare_with_baseline
from specviz.teaching.explain import target_alone


@dataclass(frozen=True)
class EarlyExitPoint:
    """One early-exit depth L on one prompt (L = the target's depth: the target drafting for itself)."""

    layers: int
    alpha: float  # accepted / judged drafts
    c: float  # one draft step / one target step, from this point's runs (measure.c_from_runs)
    tokens_per_pass: float
    speedup: float  # measured over the steady rounds, against a warmed target-only run
    predicted: float  # theory.expected_speedup(alpha, k, c)


@dataclass(frozen=True)
class EarlyExitSweep:
    n_layers: int  # the target's depth
    k: int
    temperature: float
    points: tuple[EarlyExitPoint, ...]


# The page's defaults, within a class's time on a 2-core CPU: three depths (a shallow exit, a middle one, the
# target itself) show the trend, and k = 2 wastes few draft steps where an early exit drafts poorly (α near 0).
DEFAULT_DEPTHS = 3
DEFAULT_K = 2
DEFAULT_TOKENS = 16  # new tokens a depth's run makes: a shallow exit yields about one a round, so a round each


def default_layers(n: int, count: int = DEFAULT_DEPTHS) -> list[int]:
    """`count` depths, each twice the one before, ending with n (the target itself): 7, 14, 28 of 28 layers.
    Halving keeps the shallow, cheap exits, whose poor α is the point, and costs less than even spacing."""
    return sorted({max(1, round(n / 2 ** (count - 1 - i))) for i in range(count)})


def early_exit_sweep(target, input_ids: Sequence[int], layers: Sequence[int],
                     settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                     vocab: int | None = None, progress: Progress = None) -> EarlyExitSweep:
    """For each L: a speculative run with the first L layers as the draft against the target alone
    (experiments.compare_with_baseline), c from that run's draft steps and the target alone's passes.

    The target alone does not change with L: it is measured (or found in this server's store) once, at the
    first depth, and reused by every other. Every draft is made of the target's own layers, so one warm-up,
    at the first depth, warms them all. A stop (core.errors.Stopped) keeps the depths finished in its
    partial (an EarlyExitSweep; None before the first)."""
    n = num_layers(target)
    ls = sorted({int(x) for x in layers})
    if not ls:
        raise InvalidSetting("Pick at least one early-exit depth L.")
    points: list[EarlyExitPoint] = []

    def done() -> EarlyExitSweep:
        return EarlyExitSweep(n, int(settings.k), float(settings.temperature), tuple(points))

    units = Units(progress, len(ls), partial=lambda: done() if points else None)
    base = None  # the target alone, once for every depth
    for L in ls:
        units.say(f"L = {L} of {n} layers: speculative run" + ("" if base else " and the target alone"))
        cmp = compare_with_baseline(target, draft_at(target, L), list(input_ids), settings,
                                    eos_token_id=eos_token_id, vocab=vocab, warm=base is None, base=base)
        base = Measured(cmp.base, cmp.base_at, reused=True)
        c = measure.c_from_runs([cmp.spec], [cmp.base])
        a = cmp.spec.alpha
        judged = not (math.isnan(a) or math.isnan(c))  # nan when no draft was judged or no step timed
        pred = theory.expected_speedup(a, settings.k, c) if judged else float("nan")
        points.append(EarlyExitPoint(L, a, c, cmp.spec.tokens_per_pass, measure.steady_speedup(cmp.spec, cmp.base),
                                     float(pred)))
        units.unit_done(f"L = {L}")
    return done()


def early_exit_rows(sweep: EarlyExitSweep) -> list[dict]:
    return [{"L": pt.layers, "α": round(pt.alpha, 3), "c": round(pt.c, 3), "tokens / pass": round(pt.tokens_per_pass, 2),
             f"speedup over {target_alone({})} (measured)": round(pt.speedup, 2),
             "speedup (predicted)": round(pt.predicted, 2)}
            for pt in sweep.points]
