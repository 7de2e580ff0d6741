"""A draft head over the frequent tokens: a draft step without most of its output layer.

A small draft's LM head is a large share of its step: Qwen2.5's has 151,936 rows of 896, 136 MB in
int8, about a quarter of the bytes an int8 step of the 0.5B draft reads. The draft rarely writes
most of those tokens. Following FR-Spec (Zhao et al. 2025, "Frequency-ranked speculative
sampling"), the draft proposes only among

  - the tokens it writes most often: a ranked list shipped per tokenizer family (specviz/vocab/),
    built by scripts/frequent_vocab.py;
  - every end-of-reply id, and the prompt's tokens;
  - every token the run has committed so far (a name the draft could not propose once, it can next time).

Its logits for those rows are the full head's (the same weights, row by row: bit for bit in int8, to
float rounding in float32); every other token gets -inf. Exactness is untouched: greedy output is
the target's argmax, and in sampling mode q is the distribution actually drawn from (zero outside
the rows), for which min(1, p/q) with the residual norm(max(0, p - q)) is exact. What it can cost
is α: a token outside the rows is one the draft cannot propose.

Only a CPU draft whose head is a plain or int8 Linear can have one; it is off unless asked for
(default_head).
"""

from __future__ import annotations

import gzip
import threading
import weakref
from pathlib import Path

import torch
from torch import nn

from specviz.modeling import fastlinear, quant
from specviz.core.errors import InvalidSetting

VOCAB_DIR = Path(__file__).parents[1] / "vocab"
DEFAULT_ROWS = 49152  # how many of the ranked tokens the head keeps (more rows cost a step more; fewer cost α)
HEADS = ("full", "frequent")


def default_head(device: str, target_precision: str = "float32") -> str:
    """The draft head for `device` and the target's precision unless asked.

    Against a float32 target, the full one: the frequent head's cheaper step gained at most a few per cent end
    to end, inside the noise, and a token outside its rows cost α (docs/precision.md). Against an int8 target,
    the frequent one: that target's pass is about 4x cheaper, so the draft's step weighs more (c 0.39 with the
    full head, 0.33 with the frequent one), and the main page's first run went from 1.60x to 1.76x with the same
    text; on the held-out prompts the geometric mean was 1.30x and 1.31x (docs/performance.md)."""
    return "frequent" if target_precision == "int8" else "full"


def check(head: str | None, device: str, target_precision: str = "float32") -> str:
    """A valid draft head for `device` (None or 'auto': the default for the target's precision); InvalidSetting
    otherwise."""
    if head is None or head == "auto":
        return default_head(device, target_precision)
    if head not in HEADS:
        raise InvalidSetting(f"draft head must be one of auto, {', '.join(HEADS)}; got {head!r}.")
    return head


_lock = threading.Lock()
_shared: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def ranked_path(family: str) -> Path:
    return VOCAB_DIR / f"{family}.txt.gz"


def ranked_ids(family: str) -> list[int] | None:
    """The tokenizer family's token ids, most frequent first; None when none is shipped."""
    path = ranked_path(family)
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="ascii") as f:
        return [int(line) for line in f if line.strip() and not line.startswith("#")]


def supports(model) -> bool:
    """Can `model` draft through a frequent head: a CPU causal LM with a decoder body and a plain or
    int8 Linear head."""
    head = getattr(model, "lm_head", None)
    body = getattr(model, "model", None)
    device = next(model.parameters()).device
    return (device.type == "cpu" and body is not None and isinstance(head, (nn.Linear, quant.Int8Linear))
            and getattr(model.config, "final_logit_softcapping", None) is None)


def head_rows(head: nn.Module, ids: torch.Tensor) -> nn.Module:
    """A head over the rows `ids` of `head` (nn.Linear or quant.Int8Linear) that computes the same logits
    for those rows (int8: bit for bit; float: to rounding, a smaller product may sum in another order)."""
    if isinstance(head, quant.Int8Linear):
        return head.rows(ids)
    w = fastlinear.plain(head.weight.detach())[ids]  # (n, H): indexing copies the rows
    sub = nn.Linear(w.shape[1], w.shape[0], bias=head.bias is not None, dtype=w.dtype)
    sub.weight = nn.Parameter(w, requires_grad=False)
    if head.bias is not None:
        sub.bias = nn.Parameter(head.bias.detach()[ids], requires_grad=False)
    return sub


class FrequentRows:
    """The ranked rows of one model's head, built once and shared by every session drafting with it."""

    def __init__(self, model, ranked: list[int], rows: int, always: list[int]):
        vocab = model.lm_head.out_features
        keep = [i for i in ranked[:rows] if i < vocab]
        self.ids = torch.tensor(sorted(set(keep) | {i for i in always if 0 <= i < vocab}), dtype=torch.long)
        self.vocab = vocab
        self.head = head_rows(model.lm_head, self.ids)
        self.members = set(self.ids.tolist())
        self.size = len(keep)  # the ranked tokens kept (ids also holds the end-of-reply ids)


def frequent_rows(model, family: str, rows: int = DEFAULT_ROWS, always: list[int] = ()) -> FrequentRows | None:
    """The shared FrequentRows of `model` for `rows` ranked tokens; None when the model cannot have one or
    its tokenizer family has no ranked list."""
    if not supports(model):
        return None
    ranked = ranked_ids(family)
    if ranked is None:
        return None
    key = (family, rows, tuple(sorted(always)))
    with _lock:
        per_model = _shared.setdefault(model, {})
        if key not in per_model:
            per_model[key] = FrequentRows(model, ranked, rows, list(always))
        return per_model[key]


class VocabHead:
    """One drafting session's head: the shared frequent rows, plus the prompt's and the run's own tokens."""

    def __init__(self, model, rows: FrequentRows):
        self.model, self.rows = model, rows
        self.extra: list[int] = []
        self._extra_head: nn.Module | None = None
        self._ids = rows.ids

    @property
    def size(self) -> int:
        """How many tokens the draft may propose now."""
        return len(self._ids)

    def start(self, prompt_ids: list[int]) -> None:
        """A new sequence: only the prompt's tokens join the frequent ones."""
        self.extra = []
        self._extra_head = None
        self.add(prompt_ids)

    def add(self, ids: list[int]) -> None:
        """Let the draft propose `ids` too (those it cannot already)."""
        new = sorted({i for i in ids if 0 <= i < self.rows.vocab and i not in self.rows.members} - set(self.extra))
        if not new:
            return
        self.extra += new
        extra = torch.tensor(self.extra, dtype=torch.long)
        self._extra_head = head_rows(self.model.lm_head, extra)
        self._ids = torch.cat((self.rows.ids, extra))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(T, H) final hidden states -> (T, V) logits: the head's own on the allowed rows, -inf elsewhere."""
        sub = self.rows.head(hidden)  # (T, n)
        if self._extra_head is not None:
            sub = torch.cat((sub, self._extra_head(hidden)), dim=-1)  # (T, n + extra)
        out = sub.new_full((hidden.shape[0], self.rows.vocab), float("-inf"))  # (T, V)
        out[:, self._ids] = sub
        return out
