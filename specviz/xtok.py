"""A draft with another tokenizer: universal assisted generation.

The draft reads the context as TEXT, in its own tokens, and drafts a few tokens
(the idea of transformers' AssistedCandidateGeneratorDifferentTokenizers and
UniversalSpeculativeDecodingGenerator). The target verifies the candidates as it
verifies any draft, so the output is exactly the target's: a bad conversion costs
acceptance, never correctness.

  greedy    the drafted text is re-encoded in the target's tokens
  sampling  the draft samples only among the tokens both vocabularies spell the
            same way, so each draw is one target token, and its distribution q,
            moved onto the target's ids, is what min(1, p/q) needs
"""

from __future__ import annotations

import torch

from .drafters import Drafter, Proposal
from .lm import CachedLM
from .sampling import Sampler

LOOKBEHIND = 8  # target tokens re-encoded with the drafted text, so a word split at the boundary re-joins


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def shared_tokens(draft_tokenizer, target_tokenizer, d_vocab: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft ids, target ids) of the tokens both vocabularies spell the same way, one-to-one."""
    t_vocab = target_tokenizer.get_vocab()
    both = sorted((d, t_vocab[s]) for s, d in draft_tokenizer.get_vocab().items()
                  if s in t_vocab and d < d_vocab and t_vocab[s] < vocab)
    return torch.tensor([d for d, _ in both], dtype=torch.long), torch.tensor([t for _, t in both], dtype=torch.long)


class CrossTokenizerDrafter(Drafter):
    """A causal LM with its own tokenizer drafting for a target with another one."""

    name = "other-tokenizer"
    uses_model = True

    def __init__(self, model, draft_tokenizer, target_tokenizer, vocab: int | None = None,
                 lookbehind: int = LOOKBEHIND):
        self.lm = CachedLM(model)
        self.d_tok, self.t_tok = draft_tokenizer, target_tokenizer
        self.lookbehind = lookbehind
        self.d_vocab = min(len(draft_tokenizer), int(model.get_input_embeddings().weight.shape[0]))
        self.vocab = len(target_tokenizer) if vocab is None else vocab  # the width of the target's p
        self.d_eos = {i for i in [draft_tokenizer.eos_token_id] if isinstance(i, int)}
        self.d_ids: list[int] = []  # the draft tokens its cache holds
        self._shared: tuple[torch.Tensor, torch.Tensor] | None = None  # built on the first sampled round

    def start(self, prompt_ids: list[int]) -> float:
        self.lm.reset()
        self.d_ids = []
        return 0.0

    def shared(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(draft ids, target ids) of the shared tokens (shared_tokens, cached)."""
        if self._shared is None:
            self._shared = shared_tokens(self.d_tok, self.t_tok, self.d_vocab, self.vocab)
        return self._shared

    def _context(self, ids: list[int]) -> list[int]:
        """The context as text, in the draft's tokens; the cache keeps the prefix that did not change.
        Returns the draft tokens its cache has not read yet."""
        d_ids = self.d_tok.encode(self.t_tok.decode(ids), add_special_tokens=False)
        self.lm.rollback(min(common_prefix(self.d_ids, d_ids), len(d_ids) - 1))
        self.d_ids = d_ids
        return d_ids[self.lm.n:]

    def propose(self, ids: list[int], k: int, sampler: Sampler) -> Proposal:
        pending = self._context(ids)
        if sampler.greedy:
            return self._greedy(ids, pending, k)
        return self._sampled(pending, k, sampler)

    def _greedy(self, ids: list[int], pending: list[int], k: int) -> Proposal:
        # 1. up to k greedy draft steps, in the draft's tokens
        new, step_s = [], []
        for _ in range(k):
            logits, dt = self.lm.timed_feed(pending, keep=1)
            tok = int(torch.argmax(logits[-1, :self.d_vocab]))  # ids that are tokens
            new.append(tok)
            step_s.append(dt)
            pending = [tok]
            if tok in self.d_eos:
                break
        self.d_ids += new[:-1]  # the last drafted token is not in the cache yet
        # 2. the drafted text in the target's tokens: re-encode it after a few context tokens
        tail = ids[-self.lookbehind:]
        enc = self.t_tok.encode(self.t_tok.decode(tail) + self.d_tok.decode(new), add_special_tokens=False)
        cands = enc[len(tail):][:k] if enc[:len(tail)] == tail else []  # the boundary re-split: no candidates
        return Proposal(cands, None, None, step_s)

    def _sampled(self, pending: list[int], k: int, sampler: Sampler) -> Proposal:
        d_shared, t_shared = self.shared()
        new, cands, qs, step_s = [], [], [], []
        for _ in range(k):
            logits, dt = self.lm.timed_feed(pending, keep=1)
            tok, q_t = self.draw(logits[-1].float(), sampler)
            new.append(tok)
            cands.append(int(t_shared[torch.searchsorted(d_shared, torch.tensor(tok))]))
            qs.append(q_t)
            step_s.append(dt)
            pending = [tok]
            if tok in self.d_eos:
                break
        self.d_ids += new[:-1]  # the last drafted token is not in the cache yet
        q = torch.stack(qs)  # (k, V)
        return Proposal(cands, q, q, step_s)

    def draw(self, logits: torch.Tensor, sampler: Sampler) -> tuple[int, torch.Tensor]:
        """One draft token among the shared ones, and q: the distribution it was drawn from, on the target's ids."""
        d_shared, t_shared = (x.to(logits.device) for x in self.shared())
        # 1. the draft's logits on the shared tokens only: every draw is one target token
        row = torch.full((self.d_vocab,), -torch.inf, device=logits.device)  # (Vd,)
        row[d_shared] = logits[d_shared]
        q_d = sampler.probs(row)  # (Vd,)
        tok = sampler.pick(row, q_d)
        # 2. q on the target's ids: the same numbers, moved from draft ids to target ids
        q_t = torch.zeros(self.vocab, device=logits.device)  # (V,)
        q_t[t_shared] = q_d[d_shared]
        return tok, q_t
