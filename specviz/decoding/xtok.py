"""A draft with another tokenizer: universal assisted generation.

The draft reads the context as TEXT, in its own tokens, and drafts a few tokens
(the idea of transformers' AssistedCandidateGeneratorDifferentTokenizers and
UniversalSpeculativeDecodingGenerator). The target verifies the candidates as it
verifies any draft, so the output is exactly the target's: a bad conversion costs
acceptance, never correctness.

  greedy    the drafted text is re-encoded in the target's tokens
  sampling  the draft samples only among the tokens both vocabularies share
            (the same bytes: spellings), so each draw is one target token, and
            its distribution q, moved onto the target's ids, is what min(1, p/q)
            needs
"""

from __future__ import annotations

import torch

from specviz.decoding.drafters import Drafter, Proposal, draft_steps
from specviz.modeling.lm import open_lm
from specviz.decoding.sampling import Sampler

LOOKBEHIND = 8  # target tokens re-encoded with the drafted text, so a word split at the boundary re-joins


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte (GPT-2's table), inverted: character -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{chr(b): b for b in keep}, **{chr(256 + n): b for n, b in enumerate(moved)}}


def spellings(tokenizer, n: int) -> dict[bytes, int]:
    """The bytes each token id below n stands for, for the ids no other id spells the same way.

    Byte-level BPE (Qwen, SmolLM2) writes bytes as printable stand-ins ("Ġ" for a space); SentencePiece
    (Gemma, Llama 2) writes a space as "▁" and odd bytes as "<0xNN>". Both come down to the same bytes.
    """
    vocab = {t: i for t, i in tokenizer.get_vocab().items() if i < n}
    alphabet = _byte_alphabet()
    byte_level = sum(t.startswith("Ġ") for t in vocab) > sum(t.startswith("▁") for t in vocab)

    def to_bytes(t: str) -> bytes:
        if byte_level and all(ch in alphabet for ch in t):
            return bytes(alphabet[ch] for ch in t)
        if not byte_level and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            return bytes([int(t[3:5], 16)])
        return (t if byte_level else t.replace("▁", " ")).encode()

    by_bytes: dict[bytes, list[int]] = {}
    for t, i in vocab.items():
        by_bytes.setdefault(to_bytes(t), []).append(i)
    return {b: ids[0] for b, ids in by_bytes.items() if len(ids) == 1}


def shared_tokens(draft_tokenizer, target_tokenizer, d_vocab: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft ids, target ids) of the tokens both vocabularies spell the same way, one-to-one, by draft id."""
    t_ids = spellings(target_tokenizer, vocab)
    both = sorted((d, t_ids[b]) for b, d in spellings(draft_tokenizer, d_vocab).items() if b in t_ids)
    return torch.tensor([d for d, _ in both], dtype=torch.long), torch.tensor([t for _, t in both], dtype=torch.long)


class CrossTokenizerDrafter(Drafter):
    """A causal LM with its own tokenizer drafting for a target with another one."""

    name = "other-tokenizer"
    uses_model = True

    def __init__(self, model, draft_tokenizer, target_tokenizer, vocab: int | None = None,
                 lookbehind: int = LOOKBEHIND, tables: dict | None = None):
        self.lm = open_lm(model, owner=self)
        self.d_tok, self.t_tok = draft_tokenizer, target_tokenizer
        self.lookbehind = lookbehind
        self.d_vocab = min(len(draft_tokenizer), int(model.get_input_embeddings().weight.shape[0]))
        # the width of the target's p; a run sets it to its own (use_vocab)
        self.vocab = len(target_tokenizer) if vocab is None else vocab
        self.d_eos = {i for i in [draft_tokenizer.eos_token_id] if isinstance(i, int)}
        self.d_ids: list[int] = []  # the draft tokens its cache holds
        # shared_tokens for these tokenizers, built on the first sampled round; `tables` (one dict per pair of
        # tokenizers, e.g. Pair's) keeps it for the next drafter, since building it reads both vocabularies
        self.tables = {} if tables is None else tables

    def use_vocab(self, vocab: int) -> None:
        self.vocab = vocab  # q goes onto the target's ids: as wide as the run's p

    def use_runner(self, runner) -> None:
        self.lm.runner = runner

    def start(self, prompt_ids: list[int]) -> float:
        self.lm.reset()
        self.d_ids = []
        return 0.0

    def shared(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(draft ids, target ids) of the shared tokens (shared_tokens, kept in `tables`)."""
        key = (self.d_vocab, self.vocab)
        if key not in self.tables:
            self.tables[key] = shared_tokens(self.d_tok, self.t_tok, self.d_vocab, self.vocab)
        return self.tables[key]

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

    def _steps(self, pending: list[int], k: int, pick) -> tuple[list[int], list, list[float]]:
        """drafters.draft_steps in the draft's tokens, stopping at its EOS; the cache's tokens are noted."""
        new, picked, step_s = draft_steps(self.lm, pending, k, pick, self.d_eos)
        self.d_ids += new[:-1]  # the last drafted token is not in the cache yet
        return new, picked, step_s

    def _greedy(self, ids: list[int], pending: list[int], k: int) -> Proposal:
        # 1. up to k greedy draft steps, in the draft's tokens (ids below d_vocab are tokens)
        new, _, step_s = self._steps(pending, k, lambda row: (int(torch.argmax(row[:self.d_vocab])), None))
        # 2. the drafted text in the target's tokens: re-encode it after a few context tokens
        tail = ids[-self.lookbehind:]
        enc = self.t_tok.encode(self.t_tok.decode(tail) + self.d_tok.decode(new), add_special_tokens=False)
        cands = enc[len(tail):][:k] if enc[:len(tail)] == tail else []  # the boundary re-split: no candidates
        return Proposal(cands, None, None, step_s)

    def _sampled(self, pending: list[int], k: int, sampler: Sampler) -> Proposal:
        # 1. up to k draws among the shared tokens, each with q on the target's ids
        new, qs, step_s = self._steps(pending, k, lambda row: self.draw(row, sampler))
        # 2. each draft token is one target token
        d_shared, t_shared = self.shared()
        cands = t_shared[torch.searchsorted(d_shared, torch.tensor(new))].tolist()
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
