"""Plain-data records of a decoding run: a Run made of Rounds.

The engine returns these instead of live tensors so that a run can be drawn,
saved as JSON, loaded back and replayed exactly. Everything here is lists,
floats, ints and strings.

Three acceptance measures that people confuse (all defined on a Run):
  alpha            per-token acceptance: of the drafted tokens the target
                   actually judged, the fraction it accepted. A rejection ends
                   a round, so later drafted tokens are never judged.
                   This is the maximum-likelihood estimate of the alpha in
                   E[tokens per pass] = (1 - alpha^(k+1)) / (1 - alpha).
  acceptance_rate  accepted / drafted, counting the tokens thrown away after
                   a rejection. Always <= alpha.
  tokens_per_pass  new tokens / target forward passes.

There is no separate prefill pass: the first round's passes also read the
prompt (Round.prefill_tokens), as in transformers' assisted generation, so a
Run's decode_s and tokens/s include reading the prompt. Steady-state figures
(the bench's decode speedup, the verify cost per size) use the rounds after it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class TopK:
    """The N most likely tokens of a distribution: ids and their probabilities."""

    ids: list[int]
    probs: list[float]


@dataclass(frozen=True)
class Round:
    """One speculative round: draft k, verify in one target pass, emit.

    Lists indexed by drafted position i (0..k-1) describe drafted token i.
    `p_top` and `entropy` have k+1 entries: the last is the bonus position.
    Decisions stop at the first rejection, so `u`, `ratio` and `accepted`
    have n_accepted (+1 if a token was rejected) entries.
    """

    index: int
    k: int
    drafted: list[int]
    q_drafted: list[float]  # q(d_i): draft probability of each drafted token
    p_drafted: list[float]  # p(d_i): target probability of each drafted token
    u: list[float]  # uniform draw per decision (sampling mode; empty when greedy)
    ratio: list[float]  # p/q per decision
    accepted: list[bool]  # the decision at each judged position
    n_accepted: int
    emitted: list[int]  # tokens this round appends (after EOS / length cut)
    extra_id: int | None  # the correction or bonus token, if emitted
    extra_kind: str | None  # "correction", "bonus", "target" (baseline) or None (cut)
    p_top: list[TopK]  # target distribution, top-N, per position (k+1)
    q_top: list[TopK]  # draft distribution, top-N, per drafted position (k)
    target_argmax: list[int]  # target's argmax per position (k+1)
    overlap: list[float]  # sum_x min(p, q): the chance to accept at position i
    entropy: list[float]  # target entropy (nats) per position (k+1)
    residual_top: TopK | None  # norm(max(0, p - q)) at the rejected position
    greedy: bool
    draft_s: float  # wall time of all draft forward passes this round
    verify_s: float  # wall time of the one target forward pass
    round_s: float  # wall time of the whole round, bookkeeping included
    prefill_tokens: int = 0  # earlier prompt tokens this round's passes also read (the first round: prompt length - 1)
    outside_load: bool = False  # a pass of this round got well under its share of the CPU: other programs were busy

    @property
    def rejected(self) -> bool:
        return len(self.accepted) > self.n_accepted


@dataclass(frozen=True)
class Run:
    """A whole generation: settings, new token ids, rounds and timings.

    `mode` is "speculative" or "autoregressive". An autoregressive run has one
    Round per token with k=0 (nothing drafted) and extra_kind "target": the
    token the target chose in its one-token pass.
    """

    mode: str
    prompt_ids: list[int]
    token_ids: list[int]
    rounds: list[Round]
    settings: dict[str, Any]
    stop_reason: str  # "eos" or "max_new_tokens"
    prefill_s: float  # seconds before the first round (0 now: the first round reads the prompt)
    decode_s: float  # wall time of all rounds, reading the prompt included (not time a caller held a Round)
    target_passes: int  # target forward passes, the first round's (which also reads the prompt) included
    draft_passes: int  # draft forward passes (0 for prompt lookup / baseline)
    ks: list[int] = field(default_factory=list)  # k used per round (adaptive k)
    device: str = "cpu"
    dtype: str = "float32"

    # --- acceptance measures (see module docstring) ---------------------
    @property
    def n_drafted(self) -> int:
        return sum(r.k for r in self.rounds)

    @property
    def n_accepted(self) -> int:
        return sum(r.n_accepted for r in self.rounds)

    @property
    def n_judged(self) -> int:
        return sum(len(r.accepted) for r in self.rounds)

    @property
    def alpha(self) -> float:
        """Per-token acceptance: accepted / drafted tokens the target judged."""
        return self.n_accepted / self.n_judged if self.n_judged else float("nan")

    @property
    def alpha_stderr(self) -> float:
        n = self.n_judged
        a = self.alpha
        return math.sqrt(a * (1 - a) / n) if n else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted, counting drafted tokens discarded after a rejection."""
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        return len(self.token_ids) / self.target_passes if self.target_passes else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def steady_rounds(self) -> list[Round]:
        """The rounds after the prompt was read (prefill_tokens == 0): pure draft-and-verify timings."""
        return [r for r in self.rounds if not r.prefill_tokens]

    @property
    def steady_s_per_token(self) -> float:
        """Decoding seconds per token over steady_rounds (loop overhead included)."""
        first = [r for r in self.rounds if r.prefill_tokens]
        n = len(self.token_ids) - sum(len(r.emitted) for r in first)
        s = self.decode_s - sum(r.round_s for r in first)
        return s / n if n > 0 and s > 0 else float("nan")

    @property
    def outside_load_rounds(self) -> int:
        """Rounds timed while other programs were using the CPU (their timings are not the device's speed)."""
        return sum(r.outside_load for r in self.rounds)

    @property
    def draft_s(self) -> float:
        return sum(r.draft_s for r in self.rounds)

    @property
    def verify_s(self) -> float:
        return sum(r.verify_s for r in self.rounds)

    # --- serialization ---------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = "specviz.run/1"
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Run":
        from .errors import SpecvizError

        if not isinstance(d, dict) or d.get("format") != "specviz.run/1":
            raise SpecvizError("This is not a specviz run file (missing format 'specviz.run/1').")
        try:
            rounds = [_round_from_dict(r) for r in d["rounds"]]
            kw = {f.name: d[f.name] for f in fields(Run) if f.name in d and f.name != "rounds"}
            return Run(rounds=rounds, **kw)
        except (KeyError, TypeError) as e:
            raise SpecvizError(f"The run file is incomplete or malformed: {e!r}") from None

    @staticmethod
    def from_json(text: str) -> "Run":
        from .errors import SpecvizError

        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecvizError(f"The run file is not valid JSON: {e}") from None
        return Run.from_dict(d)


def _topk(d: dict | None) -> TopK | None:
    return None if d is None else TopK(ids=list(d["ids"]), probs=list(d["probs"]))


def _round_from_dict(d: dict[str, Any]) -> Round:
    kw = {f.name: d[f.name] for f in fields(Round) if f.name not in ("prefill_tokens", "outside_load")}
    kw["prefill_tokens"] = int(d.get("prefill_tokens", 0))  # runs saved before the prefill was merged
    kw["outside_load"] = d.get("outside_load") is True  # runs saved before the load check
    kw["p_top"] = [_topk(t) for t in d["p_top"]]
    kw["q_top"] = [_topk(t) for t in d["q_top"]]
    kw["residual_top"] = _topk(d["residual_top"])
    return Round(**kw)
