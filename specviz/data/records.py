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

from specviz.core import measure
from specviz.core.settings import DecodeSettings, recorded_eos


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
    draft_s: float  # time of all draft forward passes this round
    verify_s: float  # time of the one target forward pass
    round_s: float  # time of the whole round, bookkeeping included
    prefill_tokens: int = 0  # earlier prompt tokens this round's passes also read (the first round: prompt length - 1)
    outside_load: bool = False  # other programs used the CPU during this round's passes (clock.note_pass)
    stalled_s: float = 0.0  # wall time not counted in the times above: other threads held the passes' cores
    shared: int = 1  # how many sessions the verify pass served (decoding/pool.py); verify_s is a pass of its own
    shared_pass_s: float = 0.0  # the whole shared pass's held seconds; 0 when not shared

    @property
    def rejected(self) -> bool:
        return len(self.accepted) > self.n_accepted


class RunRates:
    """Per-run rates, one definition for a chain Run and a TreeRun (token_ids, rounds, target_passes,
    decode_s; each round's emitted, round_s, prefill_tokens, outside_load and stalled_s)."""

    @property
    def n_accepted(self) -> int:
        return sum(r.n_accepted for r in self.rounds)

    @property
    def tokens_per_pass(self) -> float:
        return len(self.token_ids) / self.target_passes if self.target_passes else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return measure.tokens_per_s(len(self.token_ids), self.decode_s)

    @property
    def outside_load_rounds(self) -> int:
        """Rounds timed while other programs were using the CPU (their timings are not the device's speed)."""
        return sum(r.outside_load for r in self.rounds)

    @property
    def outside_load_s(self) -> float:
        """The time of those rounds."""
        return sum(r.round_s for r in self.rounds if r.outside_load)

    @property
    def stalled_s(self) -> float:
        """Wall time not counted in the rounds' times, because other threads held the cores their passes ran
        on (clock.PassTime.stalled)."""
        return sum(r.stalled_s for r in self.rounds)

    @property
    def rounds_s(self) -> float:
        """Engine time: the rounds' own seconds (Σ round_s), without pauses while a page draws between them."""
        return sum(r.round_s for r in self.rounds)

    @property
    def steady_rounds(self) -> list:
        """The rounds after the prompt was read (prefill_tokens == 0): pure draft-and-verify timings."""
        return [r for r in self.rounds if not r.prefill_tokens]

    @property
    def steady_s_per_token(self) -> float:
        """Decoding seconds per token over steady_rounds (loop overhead included)."""
        first = [r for r in self.rounds if r.prefill_tokens]
        n = len(self.token_ids) - sum(len(r.emitted) for r in first)
        s = self.decode_s - sum(r.round_s for r in first)
        return s / n if n > 0 and s > 0 else float("nan")


SPECULATIVE, AUTOREGRESSIVE = "speculative", "autoregressive"  # a Run's mode
MODES = (SPECULATIVE, AUTOREGRESSIVE)


@dataclass(frozen=True)
class Run(RunRates):
    """A whole generation: settings, new token ids, rounds and timings.

    `mode` is "speculative" or "autoregressive". An autoregressive run has one
    Round per token with k=0 (nothing drafted) and extra_kind "target": the
    token the target chose in its one-token pass.
    """

    mode: str
    prompt_ids: list[int]
    token_ids: list[int]
    rounds: list[Round]
    settings: dict[str, Any]  # DecodeSettings.record(...): read the decoding settings as `decode`
    stop_reason: str  # "eos" or "max_new_tokens"
    prefill_s: float  # seconds before the first round (0: the first round reads the prompt)
    decode_s: float  # wall time of all rounds, reading the prompt included (not time a caller held a Round)
    target_passes: int  # target forward passes, the first round's (which also reads the prompt) included
    draft_passes: int  # draft forward passes (0 for prompt lookup / baseline)
    ks: list[int] = field(default_factory=list)  # k used per round (adaptive k)
    device: str = "cpu"
    dtype: str = "float32"

    # --- the settings it ran with -----------------------------------------
    @property
    def decode(self) -> DecodeSettings:
        """The decoding settings, typed (`settings` holds them plus drafter, eos_token_id, label, ...)."""
        return DecodeSettings.from_record(self.settings)

    @property
    def eos_token_ids(self) -> list[int] | None:
        return recorded_eos(self.settings)

    @property
    def k_per_round(self) -> list[int]:
        """k drafted in each round: `ks` as recorded, else read from the rounds (a file without `ks`)."""
        return list(self.ks) if len(self.ks) == len(self.rounds) else [r.k for r in self.rounds]

    # --- acceptance measures (see module docstring) ---------------------
    @property
    def n_drafted(self) -> int:
        return sum(r.k for r in self.rounds)

    @property
    def n_judged(self) -> int:
        return sum(len(r.accepted) for r in self.rounds)

    @property
    def alpha(self) -> float:
        """Per-token acceptance: accepted / drafted tokens the target judged (measure.alpha)."""
        return measure.alpha(self.n_accepted, self.n_judged)

    @property
    def alpha_stderr(self) -> float:
        return measure.alpha_estimate(self.n_accepted, self.n_judged).stderr

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted, counting drafted tokens discarded after a rejection."""
        return self.n_accepted / self.n_drafted if self.n_drafted else float("nan")

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
        """A Run from parsed JSON; every field is checked first (SpecvizError naming the field)."""
        from specviz.core.errors import SpecvizError

        if not isinstance(d, dict) or d.get("format") != "specviz.run/1":
            raise SpecvizError("This is not a specviz run file (missing format 'specviz.run/1').")
        check_run_dict(d)
        rounds = [_round_from_dict(r) for r in d["rounds"]]
        kw = {f.name: d[f.name] for f in fields(Run) if f.name in d and f.name != "rounds"}
        return Run(rounds=rounds, **kw)

    @staticmethod
    def from_json(text: str) -> "Run":
        return Run.from_dict(parse_json(text))


def json_safe(x: Any) -> Any:
    """x with every nan / inf float as None (JSON has neither), through dicts (keys as str), lists and tuples."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


# --------------------------------------------------------------------------
# reading run files: each check names the field (JSON path) it found wrong

ID_MAX = 2**31 - 1  # token ids: non-negative, within a 32-bit int
LIST_MAX = 100_000  # any list in a file (the app's own limits are tighter: runfile.validate_run)
TOPN_MAX = 100  # entries of one top-N distribution (the engine records 10)
TEXT_MAX = 300  # short strings: names, titles, settings
EXTRA_KINDS = ("correction", "bonus", "target")
STOP_REASONS = ("eos", "max_new_tokens")
# characters that reorder the text around them (U+202E mirrors it): a file's name, title or setting may not hold
# one; token and prompt texts, which a model may write, show each as a visible mark instead (runfile.neutral)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def malformed(path: str, msg: str):
    """The SpecvizError for a bad field: 'The run file is malformed: <path>: <msg>'."""
    from specviz.core.errors import SpecvizError

    return SpecvizError(f"The run file is malformed: {path + ': ' if path else ''}{msg}")


def parse_json(text: str) -> Any:
    """json.loads with clear errors for the inputs it cannot take (deep nesting, huge numbers)."""
    from specviz.core.errors import SpecvizError

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecvizError(f"The run file is not valid JSON: {e}") from None
    except RecursionError:
        raise malformed("", "it is nested too deeply to be a run file") from None
    except ValueError as e:  # an integer of thousands of digits
        raise malformed("", f"a number in it cannot be read ({e})") from None


def kind_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(v), type(v).__name__)


def want_int(v: Any, path: str, lo: int = 0, hi: int = ID_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise malformed(path, f"expected an integer, got {kind_name(v)}")
    if not lo <= v <= hi:
        raise malformed(path, f"must be from {lo} to {hi}")
    return v


def want_num(v: Any, path: str, lo: float = 0.0, hi: float = math.inf, inf_ok: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise malformed(path, f"expected a number, got {kind_name(v)}")
    if isinstance(v, int):
        v = float(v) if abs(v) < 2**64 else math.inf  # no float of thousands of digits
    if not (math.isfinite(v) or (inf_ok and v == math.inf)):
        raise malformed(path, "expected a finite number")
    if not lo <= v <= hi:
        raise malformed(path, f"must be from {lo:g} to {hi:g}")
    return v


def want_bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise malformed(path, f"expected true or false, got {kind_name(v)}")
    return v


def want_str(v: Any, path: str, max_len: int = TEXT_MAX, options: tuple[str, ...] | None = None,
             bidi_ok: bool = False) -> str:
    """A string of at most max_len characters (one of `options` when given); with bidi_ok=False it may hold no
    bidirectional control character."""
    if not isinstance(v, str):
        raise malformed(path, f"expected a string, got {kind_name(v)}")
    if len(v) > max_len:
        raise malformed(path, f"longer than {max_len} characters")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise malformed(path, "not valid text (it holds a lone surrogate)") from None
    if not bidi_ok and (bad := next((ch for ch in v if ch in BIDI_CONTROLS), None)):
        raise malformed(path, f"holds the bidirectional control character U+{ord(bad):04X}, which would reorder "
                              "the text shown")
    if options is not None and v not in options:
        raise malformed(path, f"must be one of {', '.join(options)}, got {v[:40]!r}")
    return v


def want_list(v: Any, path: str, item=None, max_len: int = LIST_MAX) -> list:
    """A list of at most max_len items, each checked with item(value, path) when given."""
    if not isinstance(v, list):
        raise malformed(path, f"expected a list, got {kind_name(v)}")
    if len(v) > max_len:
        raise malformed(path, f"more than {max_len} entries")
    if item is not None:
        for i, x in enumerate(v):
            item(x, f"{path}[{i}]")
    return v


def want_obj(v: Any, path: str, required: tuple[str, ...] = ()) -> dict:
    if not isinstance(v, dict):
        raise malformed(path, f"expected an object, got {kind_name(v)}")
    for key in required:
        if key not in v:
            raise malformed(f"{path}.{key}" if path else key, "missing")
    return v


def want_prob(v: Any, path: str) -> float:
    return want_num(v, path, 0.0, 1.001)  # float32 sums may pass 1 by a rounding


def want_opt(check):
    """check(v, path), or nothing when v is null."""
    return lambda v, path: None if v is None else check(v, path)


def want_topk_dict(v: Any, path: str) -> None:
    want_obj(v, path, ("ids", "probs"))
    ids = want_list(v["ids"], f"{path}.ids", want_int, TOPN_MAX)
    want_list(v["probs"], f"{path}.probs", want_prob, TOPN_MAX)
    if len(v["probs"]) != len(ids):
        raise malformed(path, "ids and probs differ in length")
    if (total := sum(v["probs"])) > 1.01:  # a float32 sum may pass 1 by a rounding, not by a hundredth
        raise malformed(f"{path}.probs", f"they add up to {total:.4g}: the chances of different tokens add up "
                                         "to at most 1")


LOAD_FIELDS = ("outside_load", "stalled_s")  # a round's load record (chain or tree): optional, older files lack it
SHARE_FIELDS = ("shared", "shared_pass_s")  # a chain round's shared verify pass: optional, older files lack it
_OPTIONAL = ("prefill_tokens",) + LOAD_FIELDS + SHARE_FIELDS  # Round fields a file may leave out (older files)


def check_load_fields(d: dict, w: str) -> None:
    """The optional load record of a round dict, chain or tree: absent, a round was not flagged and had
    nothing taken off."""
    if "outside_load" in d:
        want_bool(d["outside_load"], f"{w}.outside_load")
    if "stalled_s" in d:
        want_num(d["stalled_s"], f"{w}.stalled_s")


def _check_round_dict(d: Any, w: str) -> None:
    want_obj(d, w, tuple(f.name for f in fields(Round) if f.name not in _OPTIONAL))
    want_int(d["index"], f"{w}.index", 0, LIST_MAX)
    for name in ("k", "n_accepted"):
        want_int(d[name], f"{w}.{name}", 0, LIST_MAX)
    for name in ("drafted", "emitted", "target_argmax"):
        want_list(d[name], f"{w}.{name}", want_int)
    for name in ("q_drafted", "p_drafted", "u", "overlap"):
        want_list(d[name], f"{w}.{name}", want_prob)
    want_list(d["ratio"], f"{w}.ratio", lambda v, p: want_num(v, p, inf_ok=True))  # p/q: inf when q = 0
    want_list(d["entropy"], f"{w}.entropy", want_num)
    want_list(d["accepted"], f"{w}.accepted", want_bool)
    want_opt(want_int)(d["extra_id"], f"{w}.extra_id")
    want_opt(lambda v, p: want_str(v, p, options=EXTRA_KINDS))(d["extra_kind"], f"{w}.extra_kind")
    for name in ("p_top", "q_top"):
        want_list(d[name], f"{w}.{name}", want_topk_dict)
    want_opt(want_topk_dict)(d["residual_top"], f"{w}.residual_top")
    want_bool(d["greedy"], f"{w}.greedy")
    for name in ("draft_s", "verify_s", "round_s"):
        want_num(d[name], f"{w}.{name}")
    if "prefill_tokens" in d:
        want_int(d["prefill_tokens"], f"{w}.prefill_tokens", 0, LIST_MAX)
    check_load_fields(d, w)
    if "shared" in d:
        want_int(d["shared"], f"{w}.shared", 1, LIST_MAX)
    if "shared_pass_s" in d:
        want_num(d["shared_pass_s"], f"{w}.shared_pass_s")


# settings a run records, and the type of each; other keys may hold a short scalar
_SETTINGS = {
    "k": lambda v, p: want_int(v, p, 0, LIST_MAX),
    "temperature": want_num,
    "top_p": lambda v, p: want_num(v, p, 0.0, 1.0),
    "top_k": lambda v, p: want_int(v, p, 0, ID_MAX),
    "max_new_tokens": lambda v, p: want_int(v, p, 1, LIST_MAX),
    "seed": lambda v, p: want_int(v, p, 0, 2**64 - 1),
    "eos_token_id": lambda v, p: want_int(v, p) if isinstance(v, int) else want_opt(
        lambda x, q: want_list(x, q, want_int, 1000))(v, p),
}


def _setting_scalar(v: Any, path: str) -> None:
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, int):
        want_int(v, path, -(2**63), 2**64)
    elif isinstance(v, str):
        want_str(v, path)
    else:
        want_num(v, path, -math.inf, math.inf)


def check_settings_dict(v: Any, path: str = "settings") -> None:
    want_obj(v, path)
    if len(v) > 100:
        raise malformed(path, "more than 100 settings")
    for key, x in v.items():
        want_str(key, f"{path} (a key)", 100)
        _SETTINGS.get(key, _setting_scalar)(x, f"{path}.{key}")


def check_run_dict(d: Any) -> None:
    """Types and ranges of every field of a specviz.run/1 dict (SpecvizError naming the first bad one).

    Consistency between fields and the app's limits are checked by runfile.validate_run.
    """
    want_obj(d, "", ("mode", "prompt_ids", "token_ids", "rounds", "settings", "stop_reason", "prefill_s",
                     "decode_s", "target_passes", "draft_passes"))
    want_str(d["mode"], "mode", options=MODES)
    want_str(d["stop_reason"], "stop_reason", options=STOP_REASONS)
    for name in ("prompt_ids", "token_ids"):
        want_list(d[name], name, want_int)
    check_settings_dict(d["settings"])
    for name in ("prefill_s", "decode_s"):
        want_num(d[name], name)
    for name in ("target_passes", "draft_passes"):
        want_int(d[name], name, 0, 100 * LIST_MAX)
    if "ks" in d:
        want_list(d["ks"], "ks", lambda v, p: want_int(v, p, 0, LIST_MAX))
    for name in ("device", "dtype"):
        if name in d:
            want_str(d[name], name, 40)
    want_list(d["rounds"], "rounds", _check_round_dict)


def topk_from_dict(d: dict | None) -> TopK | None:
    return None if d is None else TopK(ids=list(d["ids"]), probs=list(d["probs"]))


def _round_from_dict(d: dict[str, Any]) -> Round:
    kw = {f.name: d[f.name] for f in fields(Round) if f.name not in _OPTIONAL}
    kw["prefill_tokens"] = int(d.get("prefill_tokens", 0))  # optional: absent means it read no prompt
    kw["outside_load"] = d.get("outside_load") is True  # optional: absent means not flagged
    kw["stalled_s"] = float(d.get("stalled_s", 0.0))  # optional: absent means nothing was taken off
    kw["shared"] = int(d.get("shared", 1))  # optional: absent means its verify pass was its own
    kw["shared_pass_s"] = float(d.get("shared_pass_s", 0.0))
    kw["p_top"] = [topk_from_dict(t) for t in d["p_top"]]
    kw["q_top"] = [topk_from_dict(t) for t in d["q_top"]]
    kw["residual_top"] = topk_from_dict(d["residual_top"])
    return Round(**kw)
