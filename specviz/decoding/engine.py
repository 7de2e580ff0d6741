"""The speculative decoding engine, and a plain autoregressive baseline.

One round (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023):
  1. draft    the drafter proposes k tokens d_1..d_k, each from q
  2. verify   the target scores all k+1 positions in one forward pass: p
  3. accept   left to right; greedy: d_i == argmax p_i; sampling: u < p/q
  4. emit     the accepted prefix, then one more token from the target:
              a correction from norm(max(0, p - q)) at the first rejection,
              or a bonus token from p_{k+1} when all k were accepted
  5. rollback crop both KV caches to the tokens that were kept

There is no separate prefill pass: the first round's draft step and target
pass read the whole prompt (Round.prefill_tokens), as transformers' assisted
generation does, which saves one pass of each model per run.

Every round is recorded as a plain-data Round (records.py) as it happens, so
the app can animate it live; the baseline uses the same cache machinery so
timings compare like with like.
"""

from __future__ import annotations

import inspect
import math
import time
import weakref
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import torch

from specviz.device import devqueue
from specviz.device.runner import InlineRunner, Runner
from specviz.decoding import kpolicy
from specviz.decoding.drafters import Drafter, ModelDrafter, Proposal
from specviz.core.errors import InvalidSetting
from specviz.core.limits import K_MAX
from specviz.decoding.kpolicy import make_k_policy
from specviz.decoding.pool import VerifyPool, VerifyRequest, VerifyResult, pool_for, solo_key
from specviz.modeling.lm import CachedLM, eos_ids, max_positions, open_lm, vocab_size
from specviz.data.records import AUTOREGRESSIVE, SPECULATIVE, Round, Run, TopK
from specviz.decoding.sampling import Sampler, accept_token, residual, uniform
from specviz.core.settings import DecodeSettings, is_greedy

TOP_N = 10  # how many of the most likely tokens are recorded per position
WARM_TOKENS = 2  # a warm-up run: enough for a prefill and one round


# --------------------------------------------------------------------------
# input checks: bad input is a clear InvalidSetting, never a traceback


def as_id_list(input_ids) -> list[int]:
    """A list of ints from a list, a (T,) or a (1, T) tensor."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise InvalidSetting(f"input_ids must be one sequence (1×T), got shape {tuple(input_ids.shape)}.")
            input_ids = input_ids[0]
        elif input_ids.dim() != 1:
            raise InvalidSetting(f"input_ids must be 1×T, got shape {tuple(input_ids.shape)}.")
        return [int(t) for t in input_ids.tolist()]
    try:
        return [int(t) for t in input_ids]
    except (TypeError, ValueError):
        raise InvalidSetting("input_ids must be a list of token ids or a 1×T tensor.") from None


TEMPERATURE_MIN = 1e-3  # below it logits / T overflow float32: 1e-45 gave NaN probabilities
SEED_MAX = 2**63 - 1  # seeds are 0..2**63-1: what torch.Generator.manual_seed takes without wrapping


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_decoding(settings: DecodeSettings, chain: bool = True) -> None:
    """The settings that need no model (the CLI checks them before loading one); InvalidSetting.
    chain: a run that drafts k per round (not the target alone, not a tree), so k is checked too."""
    k, temperature, top_p, top_k = settings.k, settings.temperature, settings.top_p, settings.top_k
    max_new_tokens, seed = settings.max_new_tokens, settings.seed
    if chain and not (is_int(k) and 1 <= k <= K_MAX):
        raise InvalidSetting(f"k (tokens drafted per round) must be an integer from 1 to {K_MAX}, got {k!r}.")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
            and math.isfinite(temperature) and (is_greedy(temperature) or temperature >= TEMPERATURE_MIN)):
        raise InvalidSetting(f"temperature must be 0 (greedy) or from {TEMPERATURE_MIN:g} up, got {temperature!r}"
                             " (a smaller one divides the logits into overflow; use 0 for greedy).")
    if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise InvalidSetting(f"top_p must be in (0, 1], got {top_p!r}.")
    if not (is_int(top_k) and top_k >= 0):
        raise InvalidSetting(f"top_k must be 0 (off) or a positive integer, got {top_k!r}.")
    if not (is_int(max_new_tokens) and max_new_tokens >= 1):
        raise InvalidSetting(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
    if not (is_int(seed) and 0 <= seed <= SEED_MAX):
        raise InvalidSetting(f"seed must be an integer from 0 to 2**63-1, got {seed!r}.")


def check_settings(ids: list[int], models: list, settings: DecodeSettings, *, vocab: int,
                   chain: bool = True) -> None:
    """Every setting, the prompt and the context; InvalidSetting with a message for a person."""
    if len(ids) == 0:
        raise InvalidSetting("The prompt is empty: type something for the model to continue.")
    check_decoding(settings, chain)
    max_new_tokens = settings.max_new_tokens
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise InvalidSetting(f"token id {bad[0]} is outside the shared vocabulary (0..{vocab - 1}).")
    # a run uses prompt + max_new_tokens positions: a round drafts at most the room left (k <= room)
    need = len(ids) + max_new_tokens
    for m in models:
        limit = max_positions(m)
        if limit is None or need <= limit:
            continue
        if len(ids) >= limit:
            raise InvalidSetting(f"The prompt ({len(ids)} tokens) alone fills the model's context of {limit} "
                                 "tokens, leaving no room for a new token: shorten the prompt.")
        raise InvalidSetting(f"The prompt ({len(ids)} tokens) plus max_new_tokens ({max_new_tokens}) does not fit "
                             f"the model's context of {limit} tokens: shorten the prompt or lower "
                             f"max_new_tokens to at most {limit - len(ids)}.")


def default_vocab(target) -> int:
    """The ids a run decodes over when the caller does not say: every id the target scores.

    The one default of both entry points, so a baseline and a speculative run of the same
    target pick from the same ids. A pair whose draft scores fewer ids (a target with
    padded rows) must say which ids both share (vocab=, e.g. Pair.shared_vocab)."""
    return vocab_size(target)


def check_draft_vocab(draft_model, vocab: int) -> None:
    """The draft must score every id of the run's vocabulary; InvalidSetting otherwise."""
    have = vocab_size(draft_model)
    if have < vocab:
        raise InvalidSetting(f"The draft scores {have:,} token ids but the run decodes over {vocab:,}: pass "
                             f"vocab={have} (the ids both models share, as Pair.shared_vocab) so that the "
                             "speculative run and its baseline pick from the same ids.")


def pair_vocab(target, draft_model, vocab: int | None = None) -> int:
    """The ids a target and a draft model are compared over: `vocab`, else default_vocab(target).
    The draft must score all of them (check_draft_vocab)."""
    vocab = vocab or default_vocab(target)
    check_draft_vocab(draft_model, vocab)
    return vocab


def cut_at_eos(emitted: list[int], eos: set[int], room: int) -> tuple[list[int], bool]:
    """Never emit past EOS or past max_new_tokens; return (tokens, hit_eos)."""
    out = []
    for t in emitted[:room]:
        out.append(t)
        if t in eos:
            return out, True
    return out, False


def topk_of(probs: torch.Tensor, n: int = TOP_N) -> TopK:
    v, i = torch.topk(probs, min(n, probs.shape[-1]))
    return TopK(ids=i.tolist(), probs=v.tolist())


def topk_rows(probs: torch.Tensor, n: int = TOP_N) -> list[TopK]:
    """topk_of of every row of a (rows, V) tensor, in one call."""
    if probs.shape[0] == 0:
        return []
    v, i = torch.topk(probs, min(n, probs.shape[-1]), dim=-1)
    return [TopK(ids=ii, probs=vv) for ii, vv in zip(i.tolist(), v.tolist())]


def _entropy(probs: torch.Tensor) -> list[float]:
    # (n, V) -> (n,) entropy in nats; entr(0) = 0. One fused pass in the probabilities' own
    # dtype: converting 151,936 x (k+1) floats to double and taking log there cost ~10x more.
    return torch.special.entr(probs).sum(-1).tolist()


# --------------------------------------------------------------------------
# the round, in small steps


def draft(drafter: Drafter, ids: list[int], k: int, sampler: Sampler, policy: kpolicy.KPolicy,
          reads_prompt: bool) -> Proposal:
    """Step 1: the drafter proposes up to k tokens (prompt lookup may find fewer).

    A drafter with asks_keep (a model drafter) consults the policy's keep_drafting after each token, when
    the policy stops rounds at all, with the extra cost of a target pass that also reads the prompt
    (reads_prompt: the first round)."""
    keep = kpolicy.keep_rule(policy, reads_prompt) if drafter.asks_keep else None
    if keep is None:
        return drafter.propose(ids, k, sampler)
    return drafter.propose(ids, k, sampler, keep=keep)


def until_eos(prop: Proposal, eos: set[int]) -> Proposal:
    """A proposal ends at its first EOS: nothing after it can be emitted, so nothing after it is judged
    (a model drafter stops there itself; prompt lookup copies on past it)."""
    n = next((i + 1 for i, t in enumerate(prop.tokens) if t in eos), len(prop.tokens))
    if n == len(prop.tokens):
        return prop
    rows = lambda x: None if x is None else x[:n]  # noqa: E731  (k, V) -> (n, V)
    return Proposal(prop.tokens[:n], rows(prop.q), rows(prop.q_display), prop.step_s)


def verify(target: CachedLM, ids: list[int], tokens: list[int], vocab: int) -> tuple[torch.Tensor, float]:
    """Step 2: one target pass over the unseen context tokens plus the k drafts.

    Returns logits for the k+1 positions that predict d_1..d_k and the bonus: (k+1, V).
    """
    pending = ids[target.n:]  # the last committed token (the cache holds the rest)
    logits, dt = target.timed_feed(pending + tokens, keep=len(tokens) + 1)
    return logits[:, :vocab].float(), dt  # (k+1, V), on the target's device


@dataclass(frozen=True)
class Decision:
    """What steps 3-4 decided for one round's proposal."""

    n_accepted: int  # the accepted prefix's length
    extra_id: int  # the token the target adds after it
    extra_kind: str  # "correction" (at the first rejection) or "bonus" (all k accepted)
    u: list[float]  # the uniform each judged draft was tested with (sampling; empty when greedy)
    ratio: list[float]  # p/q of each judged draft
    accepted: list[bool]  # the verdict on each judged draft
    p: torch.Tensor  # (k+1, V) the target's distributions
    residual: torch.Tensor | None  # (V,) what a sampled correction was drawn from


def decide(logits: torch.Tensor, prop: Proposal, sampler: Sampler, argmax: list[int] | None = None) -> Decision:
    """Steps 3-4: accept left to right, then pick the correction or the bonus.

    `argmax`: the target's argmax per position, if already computed (greedy decisions use it).
    """
    k = len(prop.tokens)
    p = sampler.probs(logits)  # (k+1, V)
    if sampler.greedy and argmax is None:
        argmax = torch.argmax(logits, dim=-1).tolist()
    us, ratios, decisions = [], [], []
    for i, d in enumerate(prop.tokens):
        p_d = float(p[i, d])
        q_d = 1.0 if prop.q is None else float(prop.q[i, d])
        ratios.append(p_d / q_d if q_d > 0 else math.inf)
        if sampler.greedy:
            ok = d == argmax[i]  # greedy: keep iff the target would pick it too
        else:
            u = uniform(sampler.generator)
            us.append(u)
            ok = accept_token(u, p_d, q_d)  # keep with probability min(1, p/q)
        decisions.append(ok)
        if not ok:
            # correction: the target's argmax (greedy) or a draw from norm(max(0, p - q))
            if sampler.greedy:
                return Decision(i, argmax[i], "correction", us, ratios, decisions, p, None)
            r = residual(p[i], None if prop.q is None else prop.q[i], d)  # (V,)
            return Decision(i, sampler.pick(logits[i], r), "correction", us, ratios, decisions, p, r)
    # all k accepted: a bonus token from the target's next distribution
    extra = argmax[k] if sampler.greedy else sampler.pick(logits[k], p[k])
    return Decision(k, extra, "bonus", us, ratios, decisions, p, None)


def step(target: CachedLM, drafter: Drafter, policy: kpolicy.KPolicy, ids: list[int], k: int, sampler: Sampler,
         vocab: int, eos: set[int], room: int, index: int) -> tuple[Round, bool]:
    """One whole round, its verify pass inline. Appends to `ids` in place; returns (Round, hit_eos)."""
    try:
        next(round_steps(target, drafter, policy, ids, k, sampler, vocab, eos, room, index))
    except StopIteration as e:
        return e.value
    raise RuntimeError("a round without a pool asked for one")  # pragma: no cover - round_steps never does


def round_steps(target: CachedLM, drafter: Drafter, policy: kpolicy.KPolicy, ids: list[int], k: int,
                sampler: Sampler, vocab: int, eos: set[int], room: int, index: int, pool: VerifyPool | None = None):
    """One whole round as a generator: returns (Round, hit_eos) as step does. With a pool that wants this
    round's pass (pool.wanted: others are waiting for the device), it yields a VerifyRequest instead of verifying
    and is sent back the pass's VerifyResult (decoding/pool.py); it yields nothing otherwise.

    The draft steps are watched for outside load apart from the verify pass, so no watch is open while the
    round waits at its request (watches are a stack per thread, and another session's round runs next)."""
    t0 = time.perf_counter()
    prefill = max(0, len(ids) - 1 - target.n)  # earlier tokens the target has not read (first round: the prompt)
    with target.runner.watch() as drafting:  # did any pass of this round run while other programs used the cores?
        prop = until_eos(draft(drafter, ids, k, sampler, policy, reads_prompt=prefill > 0), eos)
    feed = ids[target.n:] + prop.tokens  # the last committed token (the cache holds the rest), then the drafts
    if pool is not None and pool.wanted(target):
        drafted_s = drafting.held_since(t0)
        got = yield VerifyRequest(target, feed, len(prop.tokens) + 1)
        t1 = time.perf_counter()  # a round in a shared pass: its draft, the pass it is charged, its own finish
        load = {"outside_load": drafting.busy or got.outside_load, "stalled_s": drafting.stalled_s}
        return finish(prop, got.logits[:, :vocab].float(), sampler, target, drafter, ids, eos, room, index, prefill,
                      got, lambda: drafted_s + got.verify_s + time.perf_counter() - t1, load)
    key = solo_key(target, feed)
    with target.runner.watch() as checking:
        logits, verify_s = verify(target, ids, prop.tokens, vocab)
    if pool is not None and pool.eligible(target):
        pool.note_solo(key, verify_s, checking.busy)  # an unshared pass: what sharing rounds are charged
    load = drafting + checking  # one verdict over all the round's passes
    return finish(prop, logits, sampler, target, drafter, ids, eos, room, index, prefill,
                  VerifyResult(None, verify_s, load.busy), lambda: load.held_since(t0), load.record())


def finish(prop: Proposal, logits: torch.Tensor, sampler: Sampler, target: CachedLM, drafter: Drafter,
           ids: list[int], eos: set[int], room: int, index: int, prefill: int, got: VerifyResult,
           round_s: Callable[[], float], load: dict) -> tuple[Round, bool]:
    """Steps 3-5 and the record, after the verify pass: (Round, hit_eos). logits: (k+1, V) over the run's
    vocabulary; got: the pass's time and sharing; round_s(): the round's seconds, read last."""
    tokens = prop.tokens
    argmax = torch.argmax(logits, dim=-1).tolist()  # (k+1,): decisions (greedy) and the record
    d = decide(logits, prop, sampler, argmax)
    n_acc, extra, kind, p = d.n_accepted, d.extra_id, d.extra_kind, d.p

    # emit, cut at EOS / max_new_tokens, then roll both caches back
    emitted, hit_eos = cut_at_eos(tokens[:n_acc] + [extra], eos, room)
    if len(emitted) <= n_acc:
        extra, kind = None, None  # cut before the extra token
    ids.extend(emitted)
    target.rollback(len(ids) - 1)  # keep ids[:-1]: the newest token is fed next round
    drafter.update(ids, n_acc)

    # record (plain data only), each quantity for all positions in one tensor op
    k = len(tokens)
    q_disp = prop.q_display
    pos = torch.arange(k, device=p.device)
    drafted = torch.tensor(tokens, dtype=torch.long, device=p.device)
    p_d = p[pos, drafted].tolist() if k else []
    if q_disp is not None:
        q_disp = q_disp.to(p.device)
        q_top = topk_rows(q_disp[:k])
        q_d = q_disp[pos, drafted].tolist() if k else []
        overlap = torch.minimum(p[:k], q_disp[:k]).sum(-1).tolist() if k else []
    else:  # one-hot proposals
        q_top = [TopK(ids=[d], probs=[1.0]) for d in tokens]
        q_d = [1.0] * k
        overlap = list(p_d)
    rnd = Round(
        index=index, k=k, drafted=list(tokens), q_drafted=q_d, p_drafted=p_d,
        u=d.u, ratio=d.ratio, accepted=d.accepted, n_accepted=n_acc, emitted=emitted,
        extra_id=extra, extra_kind=kind, p_top=topk_rows(p), q_top=q_top,
        target_argmax=argmax, overlap=overlap,
        entropy=_entropy(p), residual_top=topk_of(d.residual) if d.residual is not None else None,
        greedy=sampler.greedy, draft_s=sum(prop.step_s), verify_s=got.verify_s, prefill_tokens=prefill,
        shared=got.shared, shared_pass_s=got.shared_pass_s, round_s=round_s(), **load,
    )
    return rnd, hit_eos


# --------------------------------------------------------------------------
# entry points


class DecodeStream:
    """Iterate to get each Round as it happens; afterwards `.run` holds the Run.

    Each next() submits one round as a job to the stream's runner (the queue's: in turn with every
    other session) and waits for it, so a long job lets others in between its rounds. The wait happens
    before the round's generator resumes, while the engine counts the time as not decoding:
    decode_s is only time spent holding the device. `waited_s` sums the waits.

    A round stopped while it waits (its page must stop) is never lost: one still in line is cancelled and asked
    again by the next next(), one granted meanwhile is kept for it; so is a round waiting for a shared verify
    pass (decoding/pool.py), which the next next() asks again or takes from the pass that served it.
    """

    def __init__(self, gen: Iterator[Round] | Callable[["DecodeStream"], Iterator[Round]],
                 runner: Runner | None = None, what: str | None = None):
        """gen: the rounds' generator, or a function of this stream that makes it (`drive` clears
        `model_work_left` before the last round, so collecting the Run does not queue again).
        runner: how the rounds reach the device, also the generator's (`out.runner`); None: in the
        caller (InlineRunner), for a generator that does no model work.
        what: what each hold of the device is, for the queue's trace (the Run's mode)."""
        self.runner = runner or InlineRunner()
        self.what = what
        self.run: Run | None = None
        self.waited_s = 0.0
        self.model_work_left = True
        self._gen = gen(self) if callable(gen) else gen
        self._asked: VerifyRequest | None = None  # a round's verify request whose wait was stopped
        self._job = None  # a round's job whose wait was stopped after it was granted: its round, for the next call

    @property
    def device(self) -> str:
        """The key of the device the rounds hold."""
        return self.runner.device

    def __iter__(self) -> "DecodeStream":
        return self

    def __next__(self) -> Round:
        if self._gen is None:
            raise StopIteration
        try:
            got, self._asked = self._asked or self._round(), None
            while isinstance(got, VerifyRequest):  # the round lets go of the device and shares its verify pass
                got = self._verify(got)
            return got
        except StopIteration as e:
            self.run, self._gen = e.value, None
            raise

    def _verify(self, req: VerifyRequest):
        """What req's pass gave its round (the rest of the round runs in the pass's hold); a wait that is stopped
        keeps req for the next call."""
        if not req.done:
            req.gen, req.asked = self._gen, time.perf_counter()
            try:
                pool_for(req.lm.model).verify(req)
            except BaseException:
                if not req.done or req.error is None:  # stopped while it waited: its round is still at the request
                    self._asked = req
                    raise
        self.waited_s += req.waited_s
        if req.error is not None:
            raise req.error
        return req.value

    def _round(self):
        """The next round, as one job on the device (or its VerifyRequest: decoding/pool.py)."""
        if not self.model_work_left:  # after the last round only the Run is assembled: no need to queue
            return next(self._gen)
        job = self._job or self.runner.submit(lambda: next(self._gen), what=self.what)
        self._job = job
        try:
            self.runner.wait(job)  # a stop (the page's on_wait) raises here
        except BaseException:
            if job.cancelled():  # dropped from the line: the next call asks again
                self._job = None
            raise  # else it ran: the next call takes its round
        self._job = None
        self.waited_s += job.waited_s
        return job.result()

    def close(self) -> None:
        """End the run now: the generator stops and lets its KV caches go; no round is computed."""
        gen, self._gen, self._asked, self._job = self._gen, None, None, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()


def speculative_stream(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                       vocab: int | None = None, runner: Runner | None = None) -> DecodeStream:
    """Speculative decoding, one Round at a time. `draft` is a model or a Drafter.

    Checks every setting before any work starts (InvalidSetting on bad input). runner: how every round and
    pass reaches the device (device/runner.py); None: the shared queue's for the target's device.
    """
    runner = runner or devqueue.queue_runner(device_of(target))
    drafter = draft if isinstance(draft, Drafter) else ModelDrafter(draft)
    models = [target] + ([drafter.lm.model] if isinstance(drafter, ModelDrafter) else [])
    vocab = pair_vocab(target, drafter.lm.model, vocab) if isinstance(drafter, ModelDrafter) \
        else vocab or default_vocab(target)
    ids = as_id_list(input_ids)
    check_settings(ids, models, settings, vocab=vocab)
    eos = set(eos_ids(models, eos_token_id))
    if isinstance(drafter, ModelDrafter):
        drafter.vocab, drafter.eos = vocab, eos
    drafter.use_vocab(vocab)
    drafter.use_runner(runner)
    k_policy = settings.k_policy
    policy = make_k_policy(settings.k, k_policy)
    policy_name = k_policy if isinstance(k_policy, str) else getattr(k_policy, "name", type(k_policy).__name__)
    extra = {"draft_head": drafter.head_name} if getattr(drafter, "head", None) is not None else {}
    # the `settings` the Run records: these, plus who drafted, the EOS ids and the draft head
    record = replace(settings, k_policy=policy_name).record(drafter=drafter.name, eos_token_id=sorted(eos), **extra)
    sampler = sampler_of(settings)
    max_new_tokens = settings.max_new_tokens
    return DecodeStream(lambda out: _speculative(target, drafter, ids, policy, sampler, vocab, eos, max_new_tokens,
                                                 record, out), runner, SPECULATIVE)


def sampler_of(settings: DecodeSettings) -> Sampler:
    """The Sampler of a run with these settings."""
    return Sampler.create(settings.temperature, settings.top_k, settings.top_p, settings.seed)


def device_of(model):
    return next(model.parameters()).device


def recorded_s(*users) -> float:
    """Seconds the runs' caches spent recording CUDA graphs (lm.StaticLM): one-off setup, not decoding."""
    lms = [getattr(u, "lm", u) for u in users]  # a drafter's cache, or a cache
    return sum(getattr(lm, "recorded_s", 0.0) for lm in lms)


def drive(ids: list[int], n_prompt: int, max_new_tokens: int, one_round, out: DecodeStream):
    """The loop every decoding mode shares: a round at a time, until an end token or the length limit.

    one_round(room, index) -> (round, hit_eos) computes one round and appends its tokens to ids; room is
    how many tokens the run may still add. It may instead return a round_steps generator: its VerifyRequests
    are yielded to the stream, and the time until the pass's result comes back is not decoding, except the
    seconds the round is charged for the pass (VerifyResult.verify_s). Yields each round; returns (rounds,
    stop_reason, busy_s), busy_s being the seconds spent computing rounds, not in the caller between them, not
    waiting in the verify pool, nor while other threads held the cores (each round's stalled_s).
    """
    rounds, stop = [], "max_new_tokens"
    t0, paused = time.perf_counter(), 0.0
    while (room := max_new_tokens - (len(ids) - n_prompt)) > 0:
        done = one_round(room, len(rounds))
        if inspect.isgenerator(done):  # a round that may hand its verify pass to the pool (round_steps)
            done, away = yield from _pooled(done)
            paused += away
        rnd, hit_eos = done
        rounds.append(rnd)
        # the stream queues for the device only while this is set: the last round clears it
        out.model_work_left = not hit_eos and len(ids) - n_prompt < max_new_tokens
        t_out = time.perf_counter()
        yield rnd  # the caller may animate, or wait for the device, here: that time is not decoding
        paused += time.perf_counter() - t_out
        if hit_eos:
            stop = "eos"
            break
    return rounds, stop, time.perf_counter() - t0 - paused - sum(r.stalled_s for r in rounds)


def _pooled(steps):
    """Run one round's steps (round_steps), yielding each VerifyRequest to the stream and sending the result
    back; returns (what the steps return, seconds away in the pool less the pass time charged)."""
    away, got = 0.0, None
    while True:
        try:
            req = steps.send(got)
        except StopIteration as e:
            return e.value, away
        t = time.perf_counter()
        got = yield req
        away += time.perf_counter() - t - got.verify_s


def _speculative(target_model, drafter, prompt, policy, sampler, vocab, eos, max_new_tokens, settings, out):
    target = open_lm(target_model, runner=out.runner)
    try:
        return (yield from _speculative_on(target, target_model, drafter, prompt, policy, sampler, vocab, eos,
                                           max_new_tokens, settings, out))
    finally:
        target.close()  # a static cache goes back to the model's idle ones


def _speculative_on(target, target_model, drafter, prompt, policy, sampler, vocab, eos, max_new_tokens, settings,
                    out):
    ids = list(prompt)
    # no prefill pass: the first round's draft step and target pass read the prompt
    t0 = time.perf_counter()
    drafter.start(ids)
    prefill_s = time.perf_counter() - t0
    kpolicy.prepare(policy, getattr(getattr(drafter, "lm", None), "model", None), target_model, sampler.greedy)

    pool = pool_for(target_model) if VerifyPool.eligible(target) else None  # sessions may share verify passes

    def one_round(room, index):
        k = min(policy.next_k(drafter.asks_keep), room)  # no point drafting past the length limit
        rnd, hit_eos = yield from round_steps(target, drafter, policy, ids, k, sampler, vocab, eos, room, index,
                                              pool)
        policy.observe(rnd)
        return rnd, hit_eos

    rounds, stop, busy_s = yield from drive(ids, len(prompt), max_new_tokens, one_round, out)
    decode_s = busy_s - recorded_s(target, drafter)
    return Run(
        mode=SPECULATIVE, prompt_ids=list(prompt), token_ids=ids[len(prompt):], rounds=rounds,
        settings=settings, stop_reason=stop, prefill_s=prefill_s, decode_s=decode_s,
        target_passes=len(rounds), draft_passes=sum(len(r.drafted) for r in rounds) if drafter.uses_model else 0,
        ks=[r.k for r in rounds], device=str(target.device),
        dtype=str(next(target_model.parameters()).dtype).replace("torch.", ""),
    )


def speculative_decode(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                       vocab: int | None = None, runner: Runner | None = None) -> Run:
    """Speculative decoding to completion; returns the Run (runner: speculative_stream's)."""
    stream = speculative_stream(target, draft, input_ids, settings, eos_token_id=eos_token_id, vocab=vocab,
                                runner=runner)
    for _ in stream:
        pass
    return stream.run


def autoregressive_stream(model, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                          vocab: int | None = None, runner: Runner | None = None) -> DecodeStream:
    """Plain decoding, one token per target pass, with the same cache machinery. The settings' k and k
    policy are not used (the Run records k 0 and policy "none"); runner: as speculative_stream's."""
    runner = runner or devqueue.queue_runner(device_of(model))
    vocab = vocab or default_vocab(model)
    ids = as_id_list(input_ids)
    check_settings(ids, [model], settings, vocab=vocab, chain=False)
    eos = set(eos_ids([model], eos_token_id))
    record = replace(settings, k=0, k_policy="none").record(drafter="none", eos_token_id=sorted(eos))
    sampler = sampler_of(settings)
    max_new_tokens = settings.max_new_tokens
    return DecodeStream(lambda out: _autoregressive(model, ids, sampler, vocab, eos, max_new_tokens, record, out),
                        runner, AUTOREGRESSIVE)


def _autoregressive(model, prompt, sampler, vocab, eos, max_new_tokens, settings, out):
    lm = open_lm(model, runner=out.runner)
    try:
        return (yield from _autoregressive_on(lm, model, prompt, sampler, vocab, eos, max_new_tokens, settings, out))
    finally:
        lm.close()


def _autoregressive_on(lm, model, prompt, sampler, vocab, eos, max_new_tokens, settings, out):
    ids = list(prompt)

    def one_round(room, index):
        t_round = time.perf_counter()
        prefill = len(ids) - 1 - lm.n  # the first pass reads the whole prompt (no separate prefill)
        with lm.runner.watch() as load:
            logits, dt = lm.timed_feed(ids[lm.n:], keep=1)
        logits = logits[:, :vocab].float()  # (1, V)
        p = sampler.probs(logits)  # (1, V)
        am = int(torch.argmax(logits[0]))
        tok = am if sampler.greedy else sampler.pick(logits[0], p[0])
        ids.append(tok)
        rnd = Round(
            index=index, k=0, drafted=[], q_drafted=[], p_drafted=[], u=[], ratio=[], accepted=[],
            n_accepted=0, emitted=[tok], extra_id=tok, extra_kind="target", p_top=[topk_of(p[0])], q_top=[],
            target_argmax=[am], overlap=[], entropy=_entropy(p), residual_top=None,
            greedy=sampler.greedy, draft_s=0.0, verify_s=dt, round_s=load.held_since(t_round),
            prefill_tokens=prefill, **load.record(),
        )
        return rnd, tok in eos

    rounds, stop, busy_s = yield from drive(ids, len(prompt), max_new_tokens, one_round, out)
    decode_s = busy_s - recorded_s(lm)
    return Run(
        mode=AUTOREGRESSIVE, prompt_ids=list(prompt), token_ids=ids[len(prompt):], rounds=rounds,
        settings=settings, stop_reason=stop, prefill_s=0.0, decode_s=decode_s, target_passes=len(rounds),
        draft_passes=0, ks=[0] * len(rounds), device=str(lm.device),
        dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
    )


def autoregressive_decode(model, input_ids, settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None,
                          vocab: int | None = None, runner: Runner | None = None) -> Run:
    """Plain decoding to completion; returns the Run (same shape as speculative; runner: its stream's)."""
    stream = autoregressive_stream(model, input_ids, settings, eos_token_id=eos_token_id, vocab=vocab,
                                   runner=runner)
    for _ in stream:
        pass
    return stream.run


# what warm_up has warmed in this process: model -> the paths warmed on it (warm_path)
_WARMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def warm_path(target, draft=None) -> tuple[object, str]:
    """(model, path): what a warm-up warms. The target alone is warmed per target. A speculative run is warmed
    per draft model and kind of drafter: a drafter's first-time costs are its model's and its head's, so a new
    drafter around a model already warmed the same way (the frequent head's and another tokenizer's are made
    anew for each run) needs none."""
    if draft is None:
        return target, "target alone"
    if not isinstance(draft, Drafter):  # a draft model: the engine drafts with a ModelDrafter around it
        return draft, "ModelDrafter, full"
    model = getattr(getattr(draft, "lm", None), "model", None)  # a ModelDrafter's, a CrossTokenizerDrafter's
    if model is None:
        return draft, type(draft).__name__  # a drafter with no model (prompt lookup): per drafter
    return model, f"{type(draft).__name__}, {getattr(draft, 'head_name', 'full')}"


def warm_up(target, input_ids, draft=None, settings: DecodeSettings = DecodeSettings(), *,
            runner: Runner | None = None, **kw) -> bool:
    """An untimed run of WARM_TOKENS new tokens, of the target alone or (with a draft) speculative, with the
    settings of the run about to be timed (settings; kw: eos_token_id, vocab), so one-time costs (allocations,
    kernel selection) and the change from whatever the models ran before land in no timed run. True when it ran.

    It always runs the first time this process warms that path (warm_path: the target alone, or this draft),
    and after that while no other session holds or waits for the device. With others in line, the timed run's
    passes take turns with their work anyway, so the change a warm-up would absorb comes before each pass, and
    a warm-up would only keep them waiting. runner: as the run's (None: the shared queue's for the target's
    device)."""
    runner = runner or devqueue.queue_runner(device_of(target))
    model, path = warm_path(target, draft)
    if path in _WARMED.get(model, ()) and runner.others():
        return False
    settings = replace(settings, max_new_tokens=WARM_TOKENS)
    kw = {**kw, "runner": runner}
    if draft is None:
        autoregressive_decode(target, input_ids, settings, **kw)
    else:
        speculative_decode(target, draft, input_ids, settings, **kw)
    _WARMED.setdefault(model, set()).add(path)
    return True
