"""Every measured figure, defined once: α, c, the verify cost, speedup and tokens/s.

The engine, the bench, the best-k chooser, the pages and the app all call these,
so a number with one name means one thing everywhere. Pure arithmetic on
records (Run, Round: anything with their fields) and on lists of seconds: no
torch, no models. The live measurements that produce timings (forward_cost,
compare_with_baseline, ...) are in experiments.py and call this module.

  alpha              α = accepted ÷ judged drafts (Run.alpha, and every α below)
  alpha_estimate     α with its standard error and a confidence interval
  alpha_posterior    α's posterior mean under a Beta prior (the best-k chooser's running estimate)
  pooled_alpha       α over several runs: all accepted ÷ all judged drafts
  rounds_alpha       the same over some rounds
  entropy_by_verdict the target's entropy at the judged drafts: where accepted, where rejected
  draft_step_s       one round's draft step (seconds), by the rule below
  c_ratio            c = median draft step ÷ median 1-token target pass
  c_from_runs        c from speculative runs' rounds and target-alone runs' passes
  c_samples_from_runs  the draft steps and 1-token target passes c_from_runs takes the medians of
  c_range, c_disagree  c as low and as high as its timings' spread allows; two c of one draft that part further
  prior_c, c_prior   what a step streams (weights, and a cost per layer), draft ÷ target: c before any timing
  verify_ratios      the verify cost against tokens: {n: cost(n) ÷ cost(smallest n)}
  speedup_from       (baseline seconds per token) ÷ (seconds per token)
  speedup            end to end: whole runs, reading the prompt included
  steady_speedup     over the rounds after the first, whose passes also read the prompt
  beyond_pass_bound  a speedup above the ratio of tokens per target pass: a slowed timing, not a result
  beyond_bound       the same from the numbers (a saved run's summary)
  tokens_per_s       tokens ÷ seconds
  engine_rate        tokens ÷ Σ round_s: engine time only, without pauses between rounds
  median             the median of the finite values given (nan when none)
  first_difference   where two token lists first differ

c and the step after a bonus (the one rule): a draft step is a round's
draft_s ÷ k, over the rounds whose passes read no prompt (prefill_tokens == 0)
and drafted with a model (draft_s > 0). A round right after a wholly accepted
one is counted like any other: its first step reads two tokens (the last draft,
which the draft never fed, and the bonus), an extra that every such round pays
and that the cost model E[tokens] ÷ (k·c + r(k+1)) has no other term for. So c
from runs is what a drafted token costs as decoding runs it; c from forward
timings (1-token passes only) leaves that extra out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from specviz.core.errors import InvalidSetting
from specviz.core.theory import Estimate


def median(xs) -> float:
    """The median of the finite numbers in xs (a number or an iterable); nan when there are none."""
    vals = []
    for x in xs if isinstance(xs, Iterable) else [xs]:
        try:
            v = float(x)
        except (TypeError, ValueError):  # None, or not a number
            continue
        if math.isfinite(v):
            vals.append(v)
    return statistics.median(vals) if vals else float("nan")


# --- α ---------------------------------------------------------------------
def alpha(accepted: int, judged: int) -> float:
    """α: accepted ÷ judged drafts (a draft after the round's first rejection is never judged); nan for none."""
    return accepted / judged if judged else float("nan")


def alpha_estimate(accepted: int, judged: int, z: float = 1.96, method: str = "wilson") -> Estimate:
    """α = accepted ÷ judged drafts with its standard error and a Wilson (default) or normal interval."""
    if judged < 0 or accepted < 0 or accepted > judged:
        raise InvalidSetting(f"need 0 <= accepted <= judged, got {accepted}/{judged}")
    if judged == 0:
        nan = float("nan")
        return Estimate(nan, nan, nan, nan, 0)
    n = judged
    p = alpha(accepted, judged)
    se = math.sqrt(p * (1 - p) / n)
    if method == "normal":
        lo, hi = p - z * se, p + z * se
    elif method == "wilson":
        den = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / den
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
        lo, hi = centre - half, centre + half
    else:
        raise InvalidSetting(f"method must be 'wilson' or 'normal', got {method!r}")
    return Estimate(p, se, max(0.0, lo), min(1.0, hi), n)


def alpha_posterior(accepted: int, judged: int, a0: float, b0: float) -> float:
    """α's posterior mean under a Beta(a0, b0) prior: what the best-k chooser plans with before many drafts."""
    return (a0 + accepted) / (a0 + b0 + judged)


def pooled_alpha(runs: Iterable) -> float:
    """α over several runs: all accepted ÷ all judged drafts (Run.alpha for one run)."""
    runs = list(runs)
    return alpha(sum(r.n_accepted for r in runs), sum(r.n_judged for r in runs))


def rounds_alpha(rounds: Iterable) -> float:
    """pooled_alpha over some rounds (e.g. those with one k): accepted ÷ judged drafts."""
    rounds = list(rounds)
    return alpha(sum(r.n_accepted for r in rounds), sum(len(r.accepted) for r in rounds))


def entropy_by_verdict(rounds: Iterable) -> tuple[list[float], list[float]]:
    """The target's entropy (nats) at each judged draft of the rounds: (where the draft was accepted, where it
    was rejected). A position with no finite entropy recorded is left out."""
    acc: list[float] = []
    rej: list[float] = []
    for r in rounds:
        for i, ok in enumerate(r.accepted):
            e = float(r.entropy[i]) if i < len(r.entropy) else float("nan")
            if math.isfinite(e):
                (acc if ok else rej).append(e)
    return acc, rej


# --- c ---------------------------------------------------------------------
def draft_step_s(rnd) -> float | None:
    """Seconds of one draft step in this round (module doc: the rule), or None when the round has none.

    A chain Round: draft_s over its k drafts. A TreeRound: draft_s is a list, one entry per draft pass."""
    steps, total = (len(rnd.draft_s), sum(rnd.draft_s)) if isinstance(rnd.draft_s, list) else (rnd.k, rnd.draft_s)
    if rnd.prefill_tokens or steps <= 0 or not total > 0:
        return None
    return total / steps


def c_ratio(draft_s, target_s) -> float:
    """c = median draft step ÷ median 1-token target pass (each a number or a list of seconds).

    nan when either side has no timing; a target pass that took no time is an error."""
    d, t = median(draft_s), median(target_s)
    if not (math.isfinite(d) and math.isfinite(t)):
        return float("nan")
    if not t > 0:
        raise InvalidSetting("target step time must be > 0 to compute c")
    return d / t


def c_samples_from_runs(spec_runs: Iterable, base_runs: Iterable) -> tuple[list[float], list[float]]:
    """(draft steps of the speculative runs (draft_step_s), 1-token passes of the target-alone runs after the
    prompt was read), in seconds."""
    steps = [s for run in spec_runs for r in run.rounds if (s := draft_step_s(r)) is not None]
    target = [r.verify_s for run in base_runs for r in run.rounds if not r.prefill_tokens]
    return steps, target


def c_from_runs(spec_runs: Iterable, base_runs: Iterable) -> float:
    """c from the runs' own timings: draft steps of the speculative runs (draft_step_s) over the
    1-token passes of target-alone runs after the prompt was read."""
    return c_ratio(*c_samples_from_runs(spec_runs, base_runs))


# How far two honest measurements of one draft's c may part beyond their timings' spread: c from runs also pays
# the step after a bonus and the round's own work (the rule above), c from forward timings does not.
C_SLACK = 0.5


def _quartiles(xs) -> tuple[float, float]:
    xs = sorted(float(x) for x in ([xs] if isinstance(xs, (int, float)) else xs) if math.isfinite(float(x)))
    if not xs:
        return float("nan"), float("nan")
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def c_range(draft_s, target_s) -> tuple[float, float]:
    """c as low and as high as the timings' spread allows: the lower quartile of the draft steps over the upper
    quartile of the target passes, and the other way round (nan when either side has no timing)."""
    (d_lo, d_hi), (t_lo, t_hi) = _quartiles(draft_s), _quartiles(target_s)
    if not (math.isfinite(d_lo) and math.isfinite(t_lo) and t_lo > 0):
        return float("nan"), float("nan")
    return d_lo / t_hi, d_hi / t_lo


def c_disagree(a, b, slack: float = C_SLACK) -> bool:
    """Whether two measurements of c for one draft on one device, each (draft step seconds, 1-token target pass
    seconds), part by more than their spread (c_range) widened by slack: then one of them was slowed, and
    neither is the draft's cost. False when either has no timing."""
    (a_lo, a_hi), (b_lo, b_hi) = c_range(*a), c_range(*b)
    if not all(math.isfinite(x) for x in (a_lo, a_hi, b_lo, b_hi)):
        return False
    return a_hi * (1 + slack) < b_lo or b_hi * (1 + slack) < a_lo


# What a decoding step costs beyond streaming its weights, per decoder layer (the kernel launches and the
# Python between a layer's operations), counted as the bytes the device streams in that time. Fitted to
# one-token passes timed on the project's machines (docs/precision.md, "c before anything is timed"); a device type not listed
# gets the CPU's.
LAYER_COST_BYTES = {"cpu": 16e6, "cuda": 5e8}


def prior_c(draft_bytes: float, draft_layers: int, target_bytes: float, target_layers: int,
            device: str = "cpu") -> float:
    """What one decoding step streams, draft over target: each model's weight bytes plus its layers'
    fixed cost (LAYER_COST_BYTES for the device type)."""
    per_layer = LAYER_COST_BYTES.get(device, LAYER_COST_BYTES["cpu"])
    return (draft_bytes + draft_layers * per_layer) / (target_bytes + target_layers * per_layer)


def decoder_layers(model) -> int | None:
    """How many decoder layers a step of a transformers causal LM runs through (num_hidden_layers of its text
    config: a multimodal config keeps it there); None when its config does not say."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n = getattr(config, "num_hidden_layers", None)
    return n if isinstance(n, int) else None


def weight_bytes(model) -> int:
    """Bytes of weights one decoding step streams: every parameter and buffer but the input embedding's
    (unless the output head shares them: a lookup reads a row, a head the whole table)."""
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    skip = {id(t) for t in [*emb.parameters(), *emb.buffers()]} if emb is not None else set()
    skip -= {id(t) for t in head.parameters()} if head is not None else set()  # tied: the head reads it all
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()] if id(t) not in skip}
    packed = sum(getattr(m, "weight_nbytes", 0) for m in model.modules())  # Int8Linear keeps its own
    return sum(t.numel() * t.element_size() for t in tensors.values()) + packed


def c_prior(draft_model, target_model) -> float:
    """A prior for c before any pass is timed: prior_c of the two models, on the target's device.

    Decoding one token streams every weight once, so on a memory-bound device a step costs about its
    weight bytes (an int8 draft streams a quarter of its float32 bytes), plus a fixed cost per layer
    that bytes alone leave out: the whole cost of a small model's step on a GPU.
    """
    device = next(target_model.parameters()).device.type
    return prior_c(weight_bytes(draft_model), decoder_layers(draft_model) or 0,
                   weight_bytes(target_model), decoder_layers(target_model) or 0, device)


# --- the verify cost against tokens ---------------------------------------------
def verify_ratios(timings: Mapping[int, Iterable[float]]) -> dict[int, float]:
    """{n_tokens: [seconds...]} -> {n_tokens: median(n) ÷ median(smallest n)}.

    The result can be passed as verify_cost to theory.expected_speedup / best_k."""
    med = {int(n): median(list(v)) for n, v in timings.items()}
    med = {n: m for n, m in med.items() if math.isfinite(m)}
    if not med:
        raise InvalidSetting("no timings given")
    base = med[min(med)]
    return {n: med[n] / base for n in sorted(med)}


# --- speedup and rates ---------------------------------------------------------
def tokens_per_s(tokens: float, seconds: float) -> float:
    """tokens ÷ seconds; nan when no time was measured."""
    return tokens / seconds if seconds > 0 else float("nan")


def engine_rate(run) -> float:
    """Tokens per second of engine time (Σ round_s): pauses while a page draws between rounds excluded."""
    return tokens_per_s(len(run.token_ids), run.rounds_s)


def speedup_from(base_s_per_token: float, s_per_token: float) -> float:
    """A speedup over the baseline: its seconds per token ÷ these seconds per token (nan when unmeasured)."""
    if not (s_per_token > 0 and math.isfinite(s_per_token) and math.isfinite(base_s_per_token)):
        return float("nan")
    return base_s_per_token / s_per_token


def speedup(spec, base) -> float:
    """End-to-end speedup of run `spec` over the target-alone run `base`: per token, reading the prompt included."""
    return speedup_from(base.decode_s / max(len(base.token_ids), 1), spec.decode_s / max(len(spec.token_ids), 1))


def steady_speedup(spec, base) -> float:
    """The speedup over the rounds after the first (whose passes also read the prompt): what the cost
    model describes (the bench's decode speedup). End to end when there are no such rounds."""
    s = speedup_from(base.steady_s_per_token, spec.steady_s_per_token)
    return s if math.isfinite(s) else speedup(spec, base)


PASS_BOUND_SLACK = 0.10  # timing noise allowed above the bound before a speedup is called impossible


def beyond_pass_bound(spec, base, slack: float = PASS_BOUND_SLACK) -> bool:
    """Whether speedup(spec, base) is above what the passes allow: each speculative round costs at least one
    target pass, so the speedup cannot pass the ratio of tokens per target pass (the target alone makes one per
    pass) by more than timing noise. Above it, one of the two timings was slowed: the target alone, most often,
    by other work on the machine."""
    return beyond_bound(speedup(spec, base), spec.tokens_per_pass, base.tokens_per_pass, slack)


def beyond_bound(speedup_x: float, spec_tokens_per_pass: float, base_tokens_per_pass: float,
                 slack: float = PASS_BOUND_SLACK) -> bool:
    """beyond_pass_bound from the numbers: a speedup, and the tokens per target pass of each run."""
    bound = spec_tokens_per_pass / base_tokens_per_pass if base_tokens_per_pass else float("nan")
    return math.isfinite(bound) and math.isfinite(speedup_x) and speedup_x > bound * (1 + slack)


# --- text ---------------------------------------------------------------------------
def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (None if a == b)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
