"""The Speedup page's experiments, without streamlit: the cost model's inputs, the race and the k policies.

  measure_cost(target, draft, progress)              c and the verify cost on this device -> Cost (costs.shared_cost)
  race(target, draft, ids, k, on_round, progress, **run_kw)  the target alone, then speculative, both warmed -> Race
  replay_schedule(race)                              [(seconds, "base" | "spec", rounds shown)] in time order
  compare_policies(target, draft, ids, k, ...)       fixed k, adaptive k and the best-k chooser -> {name: Run}
  policy_summary(runs)                               tokens/s, gain over fixed k, mean k and α per policy

run_kw are the decoding settings every run of an experiment shares (temperature, max_new_tokens, seed,
eos_token_id, vocab). Each experiment warms the paths it times first, so one-time costs land in no run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

from specviz.teaching import costs, lab
from specviz.core import measure
from specviz.core.errors import Stopped
from specviz.core.progress import Units
from specviz.decoding.engine import autoregressive_stream, speculative_stream, warm_up
from specviz.data.records import Round, Run
from specviz.core.settings import DecodeSettings

Progress = Callable[[str, "float | None"], None] | None
POLICIES = ("fixed", "adaptive", "best")


Cost = costs.Cost


def measure_cost(target, draft, fresh: bool = False, progress: Progress = None, **kw) -> Cost:
    """c and the verify cost: this server's one measurement of them for this target and draft
    (costs.shared_cost, which the lessons read too); fresh: time them again."""
    return costs.shared_cost(target, draft, fresh=fresh, progress=progress, **kw)


@dataclass(frozen=True)
class Race:
    """The target alone and speculative decoding on the same prompt and settings (spec None: stopped before
    the speculative run was finished)."""

    base: Run
    spec: Run | None
    k: int


RUNNERS = {"base": "target alone", "spec": "speculative"}  # the race's two runs, in order


def race(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(),
         on_round: Callable[[str, list[Round]], None] | None = None, progress: Progress = None, **run_kw) -> Race:
    """Warm both paths, then run the target alone and speculative one after the other (a unit of progress
    each), with `settings`.

    on_round(name, rounds so far) is called after each round ("base" or "spec"), to draw it live.
    run_kw: what comes from the pair (eos_token_id, vocab: Pair.run_kw). A stop (core.errors.Stopped, from
    progress or from on_round) keeps the target alone, once finished, in its partial (a Race without spec).
    """
    runs: dict[str, Run] = {}

    def so_far() -> Race | None:
        return Race(base=runs["base"], spec=runs.get("spec"), k=int(settings.k)) if runs else None

    units = Units(progress, len(RUNNERS), partial=so_far)
    units.say("warming up")
    # warm both paths first so one-time costs land in neither
    warm_up(target, input_ids, None, settings, **run_kw)
    warm_up(target, input_ids, draft, settings, **run_kw)
    streams = {"base": autoregressive_stream(target, input_ids, settings, **run_kw),
               "spec": speculative_stream(target, draft, input_ids, settings, **run_kw)}
    n = max(int(settings.max_new_tokens), 1)
    for name, stream in streams.items():
        done = []
        for rnd in stream:  # each round is reported as soon as it is computed
            done.append(rnd)
            made = sum(len(r.emitted) for r in done)
            units.say(f"{RUNNERS[name]}: {made}/{n} tokens", made / n)
            if on_round is not None:
                try:
                    on_round(name, done)
                except Stopped as e:  # a click while drawing: the runs finished are kept
                    raise Stopped(str(e), so_far()) from None
        runs[name] = stream.run
        units.unit_done(RUNNERS[name])
    return so_far()


def replay_schedule(r: Race) -> list[tuple[float, str, int]]:
    """(seconds since decoding began, "base" or "spec", rounds shown) for every round of both runs, in time order."""
    events = [(t, who, i + 1) for who, run in (("base", r.base), ("spec", r.spec))
              for i, (t, _) in enumerate(lab.race_points(run))]
    return sorted(events)


def compare_policies(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(),
                     progress: Progress = None, **run_kw) -> dict[str, Run]:
    """One warmed speculative run for each k policy in POLICIES (a unit of progress each), all starting at
    settings.k, same prompt and settings. run_kw: eos_token_id, vocab (Pair.run_kw). A stop
    (core.errors.Stopped) keeps the policies finished, in POLICIES' order, in its partial."""
    out = {}
    units = Units(progress, len(POLICIES), partial=lambda: dict(out) or None)
    units.say("warming up")
    warm_up(target, input_ids, draft, settings, **run_kw)
    for policy in POLICIES:
        stream = speculative_stream(target, draft, input_ids, replace(settings, k_policy=policy), **run_kw)
        out[policy] = lab.stream_run(stream, settings.max_new_tokens,
                                     lambda m, f, p=policy: units.say(f"{p} k: {m}", f))
        units.unit_done(f"{policy} k")
    return out


@dataclass(frozen=True)
class PolicyStats:
    """One k policy's run, measured on engine time only (no drawing or progress bars)."""

    tokens_per_s: float
    gain: float | None  # tokens/s over fixed k's, minus 1; None for fixed k itself or when fixed k made nothing
    mean_k: float
    alpha: float


def policy_summary(runs: Mapping[str, Run]) -> dict[str, PolicyStats]:
    """PolicyStats for each run of compare_policies, the gain measured against the "fixed" run."""
    fixed = measure.engine_rate(runs["fixed"]) if "fixed" in runs else 0.0
    out = {}
    for name, run in runs.items():
        rate = measure.engine_rate(run)
        gain = rate / fixed - 1 if name != "fixed" and fixed > 0 else None
        out[name] = PolicyStats(rate, gain, sum(run.ks) / max(len(run.ks), 1), run.alpha)
    return out
