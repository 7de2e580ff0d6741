"""Drafters: whatever proposes the k tokens that the target then verifies.

One small interface, like transformers' CandidateGenerator:

  start(prompt_ids)         prepare for a new sequence (reset a cache)
  propose(ids, k, sampler)  up to k candidate ids, and q: the distribution each
                            was drawn from (None = proposed with certainty)
  update(ids, n_accepted)   learn how many were kept (roll a cache back)
  use_vocab(vocab)          the width of the run's p (a q on the target's ids must match it)

A drafter with asks_keep = True also takes propose(..., keep=keep): after each
drafted token it calls keep(confidences, step_s) (the draft's probability of
each token so far, the seconds of each step so far) and ends the round when it
says False. The engine builds keep from the k policy's keep_drafting.

ModelDrafter runs a small LM with its own KV cache. PromptLookupDrafter needs
no model: it copies the tokens that followed the last matching n-gram of the
context (Saxena 2023, "prompt lookup decoding").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from specviz.modeling.lm import CachedLM, open_lm
from specviz.decoding.sampling import Sampler
from specviz.modeling.vocabhead import FrequentRows, VocabHead


@dataclass
class Proposal:
    """What a drafter proposes for one round."""

    tokens: list[int]
    q: torch.Tensor | None  # (k, V) decision distributions; None = one-hot on tokens
    q_display: torch.Tensor | None  # (k, V) distributions to draw (greedy: softmax at T=1)
    step_s: list[float] = field(default_factory=list)  # wall time of each draft forward


class Drafter:
    """Base class: propose candidates, optionally learn from what was accepted."""

    name = "drafter"
    uses_model = False
    asks_keep = False  # propose takes keep= and asks it after each drafted token

    def start(self, prompt_ids: list[int]) -> float:
        """Prepare for a new sequence; return seconds spent."""
        return 0.0

    def use_vocab(self, vocab: int) -> None:
        """The run compares p and q over the ids below `vocab` (the engine says so before the first round)."""

    def use_runner(self, runner) -> None:
        """The run's model passes go through `runner` (device/runner.py; the engine says so before the first
        round). A drafter without a model has none."""

    def propose(self, ids: list[int], k: int, sampler: Sampler) -> Proposal:
        raise NotImplementedError

    def update(self, ids: list[int], n_accepted: int) -> None:
        """ids is the committed sequence after the round (accepted + correction/bonus)."""


class ModelDrafter(Drafter):
    """A small causal LM that drafts autoregressively with its own KV cache."""

    name = "model"
    uses_model = True
    asks_keep = True

    def __init__(self, model, vocab: int | None = None, eos: set[int] | frozenset[int] = frozenset(),
                 rows: FrequentRows | None = None):
        self.lm = open_lm(model, owner=self)
        self.vocab = vocab  # compare only the ids both models share
        self.eos = eos  # a drafted EOS ends the round: nothing after it can be emitted
        self.head = None  # a VocabHead: the draft proposes only among its rows (specviz/modeling/vocabhead.py)
        if rows is not None and type(self.lm) is CachedLM:
            self.head = VocabHead(model, rows)
            self.lm.head = self.head.logits

    @property
    def head_name(self) -> str:
        """'full', or 'frequent-N': the draft's head over N ranked tokens (plus the prompt's and the run's)."""
        return "full" if self.head is None else f"frequent-{self.head.rows.size}"

    def use_runner(self, runner) -> None:
        self.lm.runner = runner

    def start(self, prompt_ids: list[int]) -> float:
        self.lm.reset()  # the first draft step reads the whole prompt (no separate prefill pass)
        if self.head is not None:
            self.head.start(prompt_ids)
        return 0.0

    def propose(self, ids: list[int], k: int, sampler: Sampler,
                keep: Callable[[list[float], list[float]], bool] | None = None) -> Proposal:
        """Up to k tokens, one forward each; a drafted EOS, or keep(confidences so far, step times
        so far) saying False, ends the round early.

        Distributions stay on the model's device (a GPU round moves only ids and scalars).
        """
        def pick(logits: torch.Tensor) -> tuple[int, torch.Tensor]:
            probs = sampler.probs(logits[: self.vocab])  # (V,) q for this position
            return sampler.pick(logits[: self.vocab], probs), probs

        pending = ids[self.lm.n:]  # tokens the cache has not seen (1 or 2; the whole prompt in round one)
        tokens, q, step_s = draft_steps(self.lm, pending, k, pick, self.eos, keep)
        qs = torch.stack(q)  # (k, V)
        # greedy proposals are certain; q (at T=1) is only recorded for drawing
        return Proposal(tokens, None if sampler.greedy else qs, qs, step_s)

    def update(self, ids: list[int], n_accepted: int) -> None:
        # the cache may hold rejected drafts: keep only what is still in ids
        # (ids[-1], the correction/bonus, is fed with the next proposal)
        self.lm.rollback(min(self.lm.n, len(ids) - 1))
        if self.head is not None:
            self.head.add(ids[-(n_accepted + 1):])  # the round's committed tokens may be proposed from now on


def draft_steps(lm: CachedLM, pending: list[int], k: int, pick: Callable, eos,
                keep: Callable[[list[float], list[float]], bool] | None = None) -> tuple[list[int], list, list[float]]:
    """Up to k draft steps on lm's cache, fed `pending` first. pick(logits (V,)) -> (token, q (V,) or None).

    A drafted EOS, or keep(confidences so far, step times so far) saying False, ends early (confidence:
    q[token]). Returns (tokens, q per token, seconds per step).
    """
    tokens, qs, step_s, conf = [], [], [], []
    for j in range(k):
        logits, dt = lm.timed_feed(pending, keep=1)
        tok, q = pick(logits[-1].float())
        tokens.append(tok)
        qs.append(q)
        step_s.append(dt)
        pending = [tok]
        if tok in eos:
            break
        if keep is not None and j + 1 < k:
            conf.append(float(q[tok]))
            if not keep(conf, step_s):
                break
    return tokens, qs, step_s


class PromptLookupDrafter(Drafter):
    """Draft by copying what followed the most recent earlier match of the last n-gram."""

    name = "prompt-lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, ids: list[int], k: int, sampler: Sampler) -> Proposal:
        tokens = self.lookup(ids, k)
        return Proposal(tokens, None, None, [])

    def lookup(self, ids: list[int], k: int) -> list[int]:
        n_ids = len(ids)
        for n in range(min(self.max_ngram, n_ids - 1), self.min_ngram - 1, -1):
            tail = ids[-n:]
            # latest earlier occurrence of the tail n-gram
            for start in range(n_ids - n - 1, -1, -1):
                if ids[start:start + n] == tail:
                    cont = ids[start + n:start + n + k]
                    if cont:
                        return cont
        return []
