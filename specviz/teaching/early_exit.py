"""Early exit against its depth: alpha, c and the speedup for several L on one prompt (charts.fig_early_exit
draws them: draft quality against draft cost, on one model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from specviz.core import measure, theory
from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings
from specviz.decoding.selfdraft import draft_at, num_layers
from specviz.teaching.experiments import compare_with_baseline, draft_cost_ratio


@dataclass(frozen=True)
class EarlyExitPoint:
    """One early-exit depth L on one prompt (L = the target's depth: the target drafting for itself)."""

    layers: int
    alpha: float  # accepted / judged drafts
    c: float  # one draft step / one target step, timed here
    tokens_per_pass: float
    speedup: float  # measured over the steady rounds, against a warmed target-only run
    predicted: float  # theory.expected_speedup(alpha, k, c)


@dataclass(frozen=True)
class EarlyExitSweep:
    n_layers: int  # the target's depth
    k: int
    temperature: float
    points: tuple[EarlyExitPoint, ...]


def default_layers(n: int, count: int = 5) -> list[int]:
    """`count` depths spread over 1..n, ending with n (the target itself)."""
    return sorted({max(1, round(n * (i + 1) / count)) for i in range(count)})


def early_exit_sweep(target, input_ids: Sequence[int], layers: Sequence[int],
                     settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                     vocab: int | None = None, cost_reps: int = 5,
                     progress: Callable[[str, float | None], None] | None = None) -> EarlyExitSweep:
    """For each L: a speculative run with the first L layers as the draft against a warmed
    target-only run (experiments.compare_with_baseline), and c timed (experiments.draft_cost_ratio)."""
    n = num_layers(target)
    ls = sorted({int(x) for x in layers})
    if not ls:
        raise InvalidSetting("Pick at least one early-exit depth L.")
    points = []
    for j, L in enumerate(ls):
        if progress is not None:
            progress(f"L = {L} of {n} layers: baseline, speculative run and c ({j + 1}/{len(ls)})", j / len(ls))
        draft = draft_at(target, L)
        cmp = compare_with_baseline(target, draft, list(input_ids), settings, eos_token_id=eos_token_id,
                                    vocab=vocab)
        c = draft_cost_ratio(target, draft, reps=cost_reps)
        a = cmp.spec.alpha
        pred = theory.expected_speedup(a, settings.k, c) if a == a else float("nan")  # nan when nothing was judged
        speedup = measure.steady_speedup(cmp.spec, cmp.base)
        points.append(EarlyExitPoint(L, a, c, cmp.spec.tokens_per_pass, speedup, float(pred)))
    if progress is not None:
        progress("done", 1.0)
    return EarlyExitSweep(n, int(settings.k), float(settings.temperature), tuple(points))


def early_exit_rows(sweep: EarlyExitSweep) -> list[dict]:
    return [{"L": pt.layers, "α": round(pt.alpha, 3), "c": round(pt.c, 3), "tokens / pass": round(pt.tokens_per_pass, 2),
             "speedup (measured)": round(pt.speedup, 2), "speedup (predicted)": round(pt.predicted, 2)}
            for pt in sweep.points]
