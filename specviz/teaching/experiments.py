"""Live measurements behind the claims: forward cost, bandwidth, c, exactness.

Shared by the app's pages and by `python -m specviz bench`. Everything is
measured on the models and device at hand; nothing is canned.

  forward_cost      target forward time for n new tokens on a cached context
  batch_cost        the same for a batch of sequences (where the flat part ends)
  memory_bandwidth  a copy benchmark: bytes/s this device moves
  draft_cost_ratio  c from forward timings (measure.c_ratio of 1-token draft and target passes)
  first_logits      the target's and the draft's logits for the first token after the prompt
  first_token_trials  many seeded decisions of the real acceptance rule
  agreement_along   draft/target agreement at every position of the target's own text
  trials_from_logits  the same decisions on given logits (recorded distributions, no model)
  compare_with_baseline  speculative vs a warmed target-only run, same settings
  precision_comparison   the same prompt with the draft in each precision: c, α, speedup
  target_comparison      the same draft against the target in each precision (float32, int8): c, α, speedup

What is computed from these timings and runs (α, c, speedup, tokens/s) is
measure.py's; this module only measures. Each measured pass holds the device
on its own (through a runner, the shared queue's by default), so other sessions get their turn between the
steps of a long measurement and no wait is ever timed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from specviz.device import devqueue
from specviz.device.runner import Runner
from specviz.core import measure
from specviz.decoding.drafters import ModelDrafter, Proposal
from specviz.decoding.engine import decide, pair_vocab, speculative_decode, warm_up
from specviz.teaching import baseline
from specviz.core.errors import InvalidSetting
from specviz.core.progress import Units
from specviz.modeling.lm import CachedLM, vocab_size
from specviz.data.records import Run
from specviz.decoding.sampling import Sampler, logits_to_probs
from specviz.core.settings import DecodeSettings, is_greedy
from specviz.core.theory import Estimate, TVNoise, simulate_tv_noise

Progress = Callable[[str, float | None], None] | None


def _say(progress: Progress, msg: str, frac: float | None = None) -> None:
    if progress is not None:
        progress(msg, frac)


def _context(model, n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, min(vocab_size(model), 1000), (n,), generator=g).tolist()


def _open(model, runner: Runner | None = None) -> CachedLM:
    """A cache on `model` through `runner` (None: CachedLM's default); given a ModelDrafter with a frequent head,
    the drafter's own cache through it, as its steps run."""
    if isinstance(model, ModelDrafter):
        if model.head is None:
            return CachedLM(model.lm.model, runner=runner)
        if runner is not None:
            model.use_runner(runner)
        model.start([])  # an empty cache, and the head over its shared frequent rows only
        return model.lm
    return CachedLM(model, runner=runner)


def forward_cost(model, n_tokens=(1, 2, 4, 8, 16), reps: int = 5, context: int = 64,
                 progress: Progress = None, runner: Runner | None = None) -> dict[int, list[float]]:
    """Seconds per forward of n new tokens on top of `context` cached tokens, of a model or of a ModelDrafter's
    step (through its head). A stop (core.errors.Stopped) keeps the repetitions finished in its partial.
    runner: how the passes reach the device (None: the shared queue's for the model's device)."""
    lm = _open(model, runner)
    ctx = _context(lm.model, context + max(n_tokens))
    lm.feed(ctx[:context], keep=1)
    lm.timed_feed(ctx[context:context + 1], keep=1)  # warm-up
    lm.rollback(context)
    out: dict[int, list[float]] = {n: [] for n in n_tokens}
    # a unit is one repetition of every size: a stop keeps the repetitions finished, the same count per size
    units = Units(progress, reps, partial=lambda: {n: v[:units.done] for n, v in out.items()})
    for r in range(reps):
        for j, n in enumerate(n_tokens):  # interleaved, so drift hits every size alike
            _, dt = lm.timed_feed(ctx[context:context + n], keep=n)
            lm.rollback(context)
            out[n].append(dt)
            units.say(f"forward pass of {n} token(s)", (j + 1) / len(n_tokens))
        units.unit_done(f"repetition {r + 1}")
    return out


@torch.inference_mode()
def batch_cost(model, n_tokens=(1, 4, 8), batches=(1, 2, 4, 8, 16), reps: int = 3, context: int = 32,
               progress: Progress = None, runner: Runner | None = None) -> dict[tuple[int, int], list[float]]:
    """Seconds per forward of `b` sequences × `n` new tokens, each on a cached context. A stop
    (core.errors.Stopped) keeps the batch sizes finished in its partial. runner: how the passes reach the
    device (None: the shared queue's for the model's device)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    runner = runner or devqueue.queue_runner(device)
    out: dict[tuple[int, int], list[float]] = {}
    units = Units(progress, len(batches), partial=lambda: dict(out))  # a stop keeps the batch sizes finished
    for b in batches:
        ids = torch.randint(0, min(vocab_size(model), 1000), (b, context + max(n_tokens)),
                            generator=torch.Generator().manual_seed(b)).to(device)
        cache = DynamicCache(config=model.config)
        runner.run(lambda: model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True, logits_to_keep=1))
        for j, n in enumerate(n_tokens):
            times = []
            for r in range(reps + 1):
                # one pass per turn, on the device's own thread: the clock starts once the device is ours
                _, t = runner.timed(lambda: model(input_ids=ids[:, context:context + n], past_key_values=cache,
                                                  use_cache=True, logits_to_keep=n))
                runner.note_pass(t)
                if r > 0:  # the first is a warm-up
                    times.append(t.held)
                cache.crop(-n)
            out[(n, b)] = times
            units.say(f"batch {b} × {n} token(s)", (j + 1) / len(n_tokens))
        units.unit_done(f"batch {b}")
    return out


def memory_bandwidth(device="cpu", megabytes: int = 256, reps: int = 5, runner: Runner | None = None) -> float:
    """Bytes/s of a large copy (read + write counted), the best of `reps`; runner: as batch_cost's."""
    device = torch.device(device)
    runner = runner or devqueue.queue_runner(device)
    n = megabytes * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(reps + 1):
        best = min(best, runner.timed(lambda: dst.copy_(src))[1].held)
    return 2 * n * 4 / best


@dataclass(frozen=True)
class BandwidthCheck:
    """Claim 1: time per token ≈ bytes of weights ÷ memory bandwidth."""

    weight_bytes: int
    bandwidth: float  # bytes/s
    predicted_s: float  # weight_bytes / bandwidth
    measured_s: float  # median 1-token forward


def bandwidth_check(model, reps: int = 5, pass_s: float | None = None) -> BandwidthCheck:
    """The model's weight bytes over the measured memory bandwidth, against its 1-token pass: timed here, or
    pass_s (a profile's, so a recorded page quotes the one timing of it)."""
    dev = next(model.parameters()).device
    wb = measure.weight_bytes(model)  # the bytes one decoding step streams
    bw = memory_bandwidth(dev)
    measured = statistics.median(forward_cost(model, n_tokens=(1,), reps=reps)[1]) if pass_s is None else pass_s
    return BandwidthCheck(wb, bw, wb / bw, measured)


def draft_cost_ratio(target, draft, reps: int = 5, context: int = 64) -> float:
    """c: the median 1-token draft forward (a model, or a ModelDrafter's step) over the median 1-token target
    forward."""
    t = forward_cost(target, n_tokens=(1,), reps=reps, context=context)[1]
    d = forward_cost(draft, n_tokens=(1,), reps=reps, context=context)[1]
    return measure.c_ratio(d, t)


@dataclass(frozen=True)
class FirstTokenTrials:
    """Many seeded decisions at the first position against the target's p."""

    counts: dict[int, int]  # first emitted token -> how often
    p: dict[int, float]  # the target's distribution (top tokens), same settings
    q: dict[int, float]  # the draft's distribution (top tokens)
    n: int
    accepted: int  # how many trials kept the drafted token
    noise: TVNoise | None = None  # the TV that n tokens drawn straight from the whole p give (noise_reps > 0)


@torch.inference_mode()
def first_logits(target, draft, input_ids: list[int], vocab: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's and the draft's logits (V,) for the first token after the prompt, on the CPU,
    in float32 or wider, over the ids both models (and the tokenizer) share: one forward pass of each."""
    ids = list(input_ids)
    if not ids:
        raise InvalidSetting("The prompt is empty: type something for the model to continue.")
    vocab = pair_vocab(target, draft, vocab)
    p_logits = CachedLM(target).feed(ids, keep=1)[-1, :vocab].cpu()  # (V,)
    q_logits = CachedLM(draft).feed(ids, keep=1)[-1, :vocab].cpu()  # (V,)
    at_least_32 = lambda x: x.to(torch.promote_types(x.dtype, torch.float32))  # noqa: E731 - bf16 up, float64 kept
    return at_least_32(p_logits), at_least_32(q_logits)


@torch.inference_mode()
def first_token_trials(target, draft, input_ids: list[int], n: int = 2000, temperature: float = 1.0,
                       top_k: int = 0, top_p: float = 1.0, seed: int = 0, top: int = 50,
                       vocab: int | None = None, noise_reps: int = 0, progress: Progress = None) -> FirstTokenTrials:
    """Run the engine's own acceptance step `n` times with seeds seed..seed+n-1.

    The forward passes are deterministic, so q (draft) and p (target) for the
    first position are computed once; each trial then draws d ~ q, and the
    engine's `decide` keeps it with probability min(1, p/q) or draws a
    correction from norm(max(0, p - q)), exactly as in a full run. With noise_reps, also the yardstick:
    noise_reps samplings of n tokens straight from the whole p (theory.simulate_tv_noise).
    """
    p_logits, q_logits = first_logits(target, draft, input_ids, vocab)
    return trials_from_logits(p_logits, q_logits, n=n, temperature=temperature, top_k=top_k,
                              top_p=top_p, seed=seed, top=top, noise_reps=noise_reps, progress=progress)


TRIAL_BLOCK = 250  # trials per unit of progress


@torch.inference_mode()
def trials_from_logits(p_logits: torch.Tensor, q_logits: torch.Tensor, n: int = 2000, temperature: float = 1.0,
                       top_k: int = 0, top_p: float = 1.0, seed: int = 0, top: int = 50,
                       noise_reps: int = 0, progress: Progress = None) -> FirstTokenTrials:
    """first_token_trials' decisions on given target and draft logits (V,): no model needed.

    Trials run in blocks of TRIAL_BLOCK (the units of progress); a stop (core.errors.Stopped) gives the trials
    of the blocks finished, with their own noise yardstick, as its partial."""
    vocab = p_logits.shape[-1]
    both = torch.stack([p_logits, p_logits])  # (2, V): position 1 and an unused bonus row
    counts: dict[int, int] = {}
    accepted = 0
    t = 1.0 if is_greedy(temperature) else temperature  # greedy: the distributions at T = 1
    p = logits_to_probs(p_logits, t, top_k, top_p)
    q = logits_to_probs(q_logits, t, top_k, top_p)

    def result(n_done: int) -> FirstTokenTrials:
        keep = set(torch.topk(p, min(top, vocab)).indices.tolist()) | set(counts)
        noise = simulate_tv_noise(p.double().numpy(), n_done, noise_reps) if noise_reps > 0 and n_done else None
        return FirstTokenTrials(dict(counts), {i: float(p[i]) for i in keep}, {i: float(q[i]) for i in keep},
                                n_done, accepted, noise)

    starts = range(seed, seed + n, TRIAL_BLOCK)
    units = Units(progress, len(starts), partial=lambda: result(min(units.done * TRIAL_BLOCK, n)))
    for start in starts:
        for s in range(start, min(start + TRIAL_BLOCK, seed + n)):
            sampler = Sampler.create(temperature, top_k, top_p, s)
            qs = sampler.probs(q_logits)
            d = sampler.pick(q_logits, qs)  # the draft's proposal
            dec = decide(both, Proposal([d], qs[None], qs[None]), sampler)
            tok = d if dec.n_accepted >= 1 else dec.extra_id
            accepted += dec.n_accepted >= 1
            counts[tok] = counts.get(tok, 0) + 1
        units.unit_done(f"{min(start + TRIAL_BLOCK, seed + n) - seed} of {n} trials")
    return result(n)


@dataclass(frozen=True)
class Agreement:
    """How often the draft would be accepted at each position of a text the target wrote.

    Position i is the token text[i], predicted from prompt + text[:i]. Every drafted
    token a speculative run judges sits at such a position (accepted drafts become
    the text), so averaging over all of them estimates α from every position instead
    of only the judged ones: far less variance for the same text.
    """

    temperature: float
    token_ids: list[int]  # the text the distributions were read along
    match: list[bool]  # the draft's argmax == the target's argmax
    overlap: list[float]  # Σ min(p, q) at the temperature (at 1 when greedy, as rounds record it)
    entropy: list[float]  # the target's entropy (nats) at the temperature (1 when greedy)

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    @property
    def accept_chance(self) -> list[float]:
        """The chance a draft is accepted at each position: argmax match (greedy), else Σ min(p, q)."""
        return [float(m) for m in self.match] if self.greedy else list(self.overlap)

    @property
    def expected_alpha(self) -> float:
        v = self.accept_chance
        return sum(v) / len(v) if v else float("nan")

    def estimate(self) -> Estimate:
        """expected_alpha with a 95% interval (Wilson for greedy's 0/1, normal otherwise).

        Neighbouring positions are not independent, so the interval is a guide, not a guarantee.
        """
        if self.greedy:
            return measure.alpha_estimate(sum(self.match), len(self.match))
        n = len(self.overlap)
        if n == 0:
            nan = float("nan")
            return Estimate(nan, nan, nan, nan, 0)
        m = self.expected_alpha
        se = statistics.stdev(self.overlap) / n ** 0.5 if n > 1 else float("nan")
        return Estimate(m, se, max(0.0, m - 1.96 * se), min(1.0, m + 1.96 * se), n)


@torch.inference_mode()
def agreement_along(target, draft, input_ids: list[int], text_ids: list[int], temperature: float = 0.0,
                    vocab: int | None = None) -> Agreement:
    """One target pass and one draft pass over prompt + text: p and q at every text position.

    `text_ids` should be the target's own text (a plain decode, or a speculative
    run's output, which has the target's distribution). No decoding happens here.
    """
    vocab = pair_vocab(target, draft, vocab)
    text = [int(t) for t in text_ids]
    n = len(text)
    if n == 0:
        return Agreement(float(temperature), [], [], [], [])
    ids = list(input_ids) + text[:-1]  # the last text token predicts nothing we need
    p_logits = CachedLM(target).feed(ids, keep=n)[:, :vocab]  # (n, V): row i predicts text[i]
    q_logits = CachedLM(draft).feed(ids, keep=n)[:, :vocab].to(p_logits.device)  # (n, V)
    t = 1.0 if is_greedy(temperature) else float(temperature)
    p = logits_to_probs(p_logits, t)  # (n, V)
    q = logits_to_probs(q_logits, t)  # (n, V)
    match = (p_logits.argmax(-1) == q_logits.argmax(-1)).tolist()  # (n,)
    overlap = torch.minimum(p, q).sum(-1).tolist()  # (n,)
    entropy = torch.special.entr(p).sum(-1).tolist()  # (n,)
    return Agreement(float(temperature), text, [bool(m) for m in match], overlap, entropy)


@dataclass(frozen=True)
class Comparison:
    spec: Run
    base: Run
    speedup: float  # measure.speedup: end to end, per token
    identical: bool | None  # greedy only: same text as the target alone
    base_at: float = 0.0  # when the target alone was timed (time.time())
    base_reused: bool = False  # this server's earlier timing of the same target alone (baseline.STORE)
    slowed: bool = False  # the speedup stayed above what the passes allow, even timed again (measure.beyond_pass_bound)


def _comparison(spec: Run, measured) -> Comparison:
    base = measured.run
    identical = spec.token_ids == base.token_ids if is_greedy(spec.decode.temperature) else None
    return Comparison(spec, base, measure.speedup(spec, base), identical, measured.at, measured.reused,
                      measure.beyond_pass_bound(spec, base))


def compare_with_baseline(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(), *,
                          eos_token_id=None, vocab: int | None = None, spec: Run | None = None,
                          warm: bool = True, base: baseline.Measured | None = None) -> Comparison:
    """A speculative run and the target alone with the same settings.

    The target alone is this server's one measurement of it (baseline.shared_target_alone: every page and
    lesson asking for the same target, prompt and settings reads the same timing). Both runs see the same
    (shared) vocabulary, so a target whose embedding has padded rows cannot pick an id the speculative run
    could not. `warm` runs a few tokens of each first (engine.warm_up) so one-time costs (allocations, kernel
    selection) land in neither measurement. A speedup above what the passes allow (measure.beyond_pass_bound)
    means a slowed timing of the target alone: it is timed once more, and flagged `slowed` if it stays so.
    base: a target-alone measurement this caller already holds for the same target, prompt and settings (a
    sweep's first, given to each of its later points), used instead of asking the store again.
    """
    common = dict(eos_token_id=eos_token_id, vocab=vocab)
    if spec is None:
        if warm:
            warm_up(target, input_ids, draft, settings, **common)
        spec = speculative_decode(target, draft, input_ids, settings, **common)
    cmp = _comparison(spec, base or baseline.shared_target_alone(target, spec, vocab, warm=warm))
    if cmp.slowed:  # one timing was slowed, the target alone most often: time it again
        cmp = _comparison(spec, baseline.shared_target_alone(target, spec, vocab, warm=False, fresh=True))
    return cmp


@dataclass(frozen=True)
class PrecisionResult:
    """One draft precision on one prompt, against the target alone run next to it."""

    precision: str
    comparison: Comparison
    c: float  # measure.c_from_runs over the speculative run and its target-alone run


def precision_comparison(pairs, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                         vocab: int | None = None, progress: Progress = None,
                         role: str = "draft") -> list[PrecisionResult]:
    """`pairs`: draft precision -> a pair (same target) with its draft in that precision.

    Each precision runs next to its own warmed target-alone run (its own target's), so a change of load
    on the machine affects both sides of each speedup alike. role: what the precisions are of, as progress
    says it.
    """
    out = []
    for i, (precision, pair) in enumerate(pairs.items()):
        _say(progress, f"{precision} {role}", i / max(len(pairs), 1))
        cmp = compare_with_baseline(pair.target, pair.chain_draft(), input_ids, settings,
                                    eos_token_id=eos_token_id, vocab=vocab)
        out.append(PrecisionResult(precision, cmp, measure.c_from_runs([cmp.spec], [cmp.base])))
    _say(progress, "done", 1.0)
    return out


def target_comparison(pairs, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                      vocab: int | None = None, progress: Progress = None) -> list[PrecisionResult]:
    """`pairs`: target precision (float32, int8) -> a pair with its target in that precision and the same
    draft (model and precision). Each runs against its own target alone, so each speedup is over its own
    target (precision_comparison, keyed by the target's precision). InvalidSetting when the drafts differ."""
    drafts = {(p.spec.draft.name, p.draft_precision) for p in pairs.values()}
    if len(drafts) > 1:
        raise InvalidSetting("comparing targets needs the same draft against each; got "
                             + ", ".join(f"{name} in {prec}" for name, prec in sorted(drafts)) + ".")
    return precision_comparison(pairs, input_ids, settings, eos_token_id=eos_token_id, vocab=vocab,
                                progress=progress, role="target")
