"""python -m specviz bench --batch: does batching the verify passes of sessions in line pay?

Sessions waiting in the device queue with verify passes for the same target share one forward pass in the app
(decoding/pool.py, through modeling/batched.feed_many): the R = k + 1 rows of each of B sessions at once, each
session on its own context. This times that pass: for each B (--batch-sizes), B sessions each with its own
context (lengths spread from L / 2 to L) and its own KV cache, and
  separate  each session's R-row pass on its own cache, one after another (a pass of its own)
  batched   one feed_many pass over the B × R rows: every weight read once, attention per session
timed alternately, --batch-reps times after a warm-up, each pass on the device's worker
(devqueue.run, PassTime.held). Reported per B: the batched pass against one R-row pass (the median of
the separate passes), against the sum of the B separate passes, and each session's share (the batched
pass ÷ B) against its own pass alone: below 1, batching pays. It also checks that the batched pass computes
what the separate ones do: the largest difference of the rows' logits, 0 for feed_many (bit for bit).
A target feed_many cannot serve (batched.can_batch: a stock float Linear, another architecture, a GPU) is
timed with transformers' own batched forward instead, padded and masked, whose rows differ in their last
bits: the report says so (NOT_EXACT_NOTE), as the app never batches such a target.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch

from specviz.device import devqueue
from specviz.modeling.lm import sync, vocab_size

SIZES = (1, 2, 4, 8)
NOT_EXACT_NOTE = (" (a target the app does not batch, batched.can_batch: timed with transformers' padded batch, whose "
                  "rows differ from a pass of their own in the last bits)")


@dataclass(frozen=True)
class BatchPoint:
    """One batch size's timings (seconds, medians over the repetitions)."""

    sessions: int  # B
    rows: int  # R per session
    context: int  # the longest context L
    one_s: float  # one session's R-row pass alone (median over the sessions and repetitions)
    separate_s: float  # the B separate passes, one after another
    batched_s: float  # one pass of B × R rows
    max_logit_diff: float  # the largest |batched - separate| of the rows' logits
    exact: bool = True  # the app's own batched pass (feed_many); False: transformers' padded batch (NOT_EXACT_NOTE)

    @property
    def batched_over_one(self) -> float:
        """The batched pass in units of one session's pass: B would mean no gain at all."""
        return self.batched_s / self.one_s

    @property
    def batched_over_separate(self) -> float:
        return self.batched_s / self.separate_s

    @property
    def share_s(self) -> float:
        """Each session's attributed share of the batched pass (equal shares)."""
        return self.batched_s / self.sessions

    @property
    def share_over_one(self) -> float:
        """A session's share against its own pass alone: below 1, batching pays."""
        return self.share_s / self.one_s

    def record(self) -> dict:
        return {**asdict(self), "batched_over_one": self.batched_over_one,
                "batched_over_separate": self.batched_over_separate, "share_s": self.share_s,
                "share_over_one": self.share_over_one}


def context_lengths(sessions: int, longest: int) -> list[int]:
    """Each session's context length: spread evenly from longest / 2 to longest (one session: longest)."""
    if sessions == 1:
        return [longest]
    lo = max(1, longest // 2)
    return [lo + round(i * (longest - lo) / (sessions - 1)) for i in range(sessions)]


def _timed_pass(device, fn) -> tuple[float, torch.Tensor]:
    """fn() on the device's worker, timed there once the device is held: (held seconds, fn's result)."""
    def job():
        sync(device)
        clock = devqueue.queue_runner(device).clock()
        out = fn()
        sync(device)
        return clock.stop().held, out

    return devqueue.run(device, job)


def _exact(model, ctxs: list[torch.Tensor], new: torch.Tensor):
    """The app's path: each session a CachedLM on its own cache; (one(i), batched(), undo()), or None where
    batched.can_batch refuses the target. Each pass leaves the caches as it found them (undo)."""
    from specviz.device.runner import InlineRunner
    from specviz.modeling import batched as bt
    from specviz.modeling.lm import CachedLM

    device = next(model.parameters()).device
    lms = [CachedLM(model, InlineRunner(device)) for _ in ctxs]  # passes run where called: on the worker here
    if not bt.can_batch(lms):
        return None
    for lm, c in zip(lms, ctxs):
        devqueue.run(device, lambda lm=lm, c=c: lm.feed(c.tolist(), keep=1))  # its context, untimed
    rows = new.shape[1]
    lens = [lm.n for lm in lms]
    rows_of = [new[i].tolist() for i in range(len(lms))]

    def undo() -> None:
        for lm, n in zip(lms, lens):
            lm.rollback(n)

    return ((lambda i: lms[i].feed(rows_of[i], keep=rows)),
            (lambda: torch.stack(bt.feed_many(lms, rows_of, [rows] * len(lms)))), undo)


def _padded(model, ctxs: list[torch.Tensor], new: torch.Tensor):
    """transformers' own batch (a target the app does not batch): contexts left-padded to the longest, a mask
    that hides the padding, each row at its own positions; (one(i), batched(), undo())."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    sessions, rows = new.shape
    lens = [len(c) for c in ctxs]
    width = max(lens)
    caches = []
    for c in ctxs:
        cache = DynamicCache(config=model.config)
        devqueue.run(device, lambda c=c, cache=cache: model(input_ids=c[None].to(device), past_key_values=cache,
                                                           use_cache=True, logits_to_keep=1))
        caches.append(cache)
    own_mask = [torch.ones(1, n + rows, dtype=torch.long, device=device) for n in lens]
    own_pos = [torch.arange(n, n + rows, device=device)[None] for n in lens]
    pad = torch.zeros(sessions, width, dtype=torch.long)
    mask = torch.zeros(sessions, width + rows, dtype=torch.long)
    for i, c in enumerate(ctxs):
        pad[i, width - len(c):] = c
        mask[i, width - len(c):] = 1
    positions = torch.stack([torch.arange(n, n + rows) for n in lens])
    ctx_pos = (mask[:, :width].cumsum(-1) - 1).clamp_min(0)
    pad, mask, positions, ctx_pos = (t.to(device) for t in (pad, mask, positions, ctx_pos))
    batched_cache = DynamicCache(config=model.config)
    devqueue.run(device, lambda: model(input_ids=pad, attention_mask=mask[:, :width], position_ids=ctx_pos,
                                       past_key_values=batched_cache, use_cache=True, logits_to_keep=1))

    def one(i: int):
        return model(input_ids=new[i:i + 1].to(device), attention_mask=own_mask[i], position_ids=own_pos[i],
                     past_key_values=caches[i], use_cache=True, logits_to_keep=rows).logits[0]

    def batched():
        return model(input_ids=new.to(device), attention_mask=mask, position_ids=positions,
                     past_key_values=batched_cache, use_cache=True, logits_to_keep=rows).logits

    def undo() -> None:  # each cache back to its context
        for cache, n in zip([*caches, batched_cache], [*lens, width]):
            if cache.get_seq_length() > n:
                cache.crop(n - cache.get_seq_length())

    return one, batched, undo


@torch.inference_mode()
def measure_batch(model, sessions: int, rows: int = 5, context: int = 128, reps: int = 5, seed: int = 0,
                  ) -> BatchPoint:
    """Time `sessions` R-row passes one after another and as one batched pass (see the module)."""
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed + sessions)
    vocab = min(vocab_size(model), 1000)
    ctxs = [torch.randint(0, vocab, (n,), generator=g) for n in context_lengths(sessions, context)]
    new = torch.randint(0, vocab, (sessions, rows), generator=g)
    paths = _exact(model, ctxs, new)
    exact = paths is not None
    one, batched, undo = paths if exact else _padded(model, ctxs, new)

    ones, separates, batches, diff = [], [], [], 0.0
    for r in range(reps + 1):  # the first is a warm-up
        each = []
        if r % 2:  # every other repetition the batched pass first, so neither order favours one side
            tb, logits_b = _timed_pass(device, batched)
            undo()
        for i in range(sessions):
            t, logits_i = _timed_pass(device, lambda i=i: one(i))
            undo()
            each.append((t, logits_i))
        if not r % 2:
            tb, logits_b = _timed_pass(device, batched)
            undo()
        diff = max(diff, max(float((logits_b[i].float() - li.float()).abs().max()) for i, (_, li) in enumerate(each)))
        if r:
            ones += [t for t, _ in each]
            separates.append(sum(t for t, _ in each))
            batches.append(tb)
    return BatchPoint(sessions, rows, context, statistics.median(ones), statistics.median(separates),
                      statistics.median(batches), diff, exact)


def batch_bench(model, sizes=SIZES, rows: int = 5, context: int = 128, reps: int = 5, say=None) -> list[BatchPoint]:
    out = []
    for b in sizes:
        if say is not None:
            say(f"batch of {b} session(s) × {rows} rows, contexts up to {context}")
        out.append(measure_batch(model, b, rows, context, reps))
    return out


def markdown(points: list[BatchPoint], about: str = "") -> str:
    lines = [f"Batched verify passes{': ' + about if about else ''}", "",
             "| sessions B | rows R | one R-row pass | B separate passes | one batched pass | batched ÷ one | "
             "batched ÷ separate | each session's share ÷ its own pass | max logit diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p.sessions} | {p.rows} | {1000 * p.one_s:.2f} ms | {1000 * p.separate_s:.2f} ms | "
                     f"{1000 * p.batched_s:.2f} ms | {p.batched_over_one:.2f} | {p.batched_over_separate:.2f} | "
                     f"{p.share_over_one:.2f} | {p.max_logit_diff:.1e} |")
    lines += ["", "A session's share below 1 (batched ÷ one below B) means one pass for B sessions costs less than "
                  "their passes one after another, by that factor: what the app's shared verify passes save the "
                  "room (decoding/pool.py), where each session is still charged a pass of its own."]
    return "\n".join(lines)
