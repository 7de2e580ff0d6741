"""Run files: exported and recorded runs, saved, loaded and validated, and the shipped recordings.

Exported / recorded files are ordinary specviz.run/1 JSON (Run.from_json reads
them) plus a "specviz_export" block: the prompt text and the text of every
token id the file mentions, so a run can be drawn on a laptop that has no model
at all. load_export checks a file against the limits of a live run before the
page draws it, and the figures the rounds, the token ids and the times decide
(settings.k, the baseline's identity, speeds and speedup) against them.

tools.record.record_presets(pair, out_dir) regenerates the shipped recordings in
specviz/recorded/ with a real pair.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from specviz.core import limits, markup, measure
from specviz.core.limits import K_MAX
from specviz.data import records
from specviz.core.errors import SpecvizError
from specviz.core.prompts import FIRST_RUN
from specviz.data.records import AUTOREGRESSIVE, BIDI_CONTROLS, MODES, SPECULATIVE, Run, TopK, malformed
from specviz.core.settings import DecodeSettings, is_greedy

EXPORT_FORMAT = "specviz.export/1"
RECORDED_DIR = Path(__file__).parents[1] / "recorded"


# --------------------------------------------------------------------------
# token text tables: decode without a tokenizer


def token_ids_in(run: Run) -> set[int]:
    """Every token id a drawing of this run may need to decode."""
    ids = set(run.prompt_ids) | set(run.token_ids)
    for r in run.rounds:
        ids.update(r.drafted)
        ids.update(r.emitted)
        ids.update(r.target_argmax)
        if r.extra_id is not None:
            ids.add(r.extra_id)
        for t in list(r.p_top) + list(r.q_top) + [r.residual_top]:
            if t is not None:
                ids.update(t.ids)
    return {int(i) for i in ids}


def token_table(run: Run, decode: Callable[[int], str]) -> dict[int, str]:
    return {i: decode(i) for i in sorted(token_ids_in(run))}


def table_decoder(table: dict[int, str], fallback: Callable[[int], str] | None = None) -> Callable[[int], str]:
    """id -> text from a table; unknown ids via `fallback`, else shown as ⟨id⟩."""

    def decode(t: int) -> str:
        t = int(t)
        if t in table:
            return table[t]
        return fallback(t) if fallback is not None else f"⟨{t}⟩"

    return decode


# --------------------------------------------------------------------------
# export / import


@dataclass
class Recording:
    """A run plus what is needed to draw it with no model loaded."""

    run: Run
    tokens: dict[int, str]
    prompt_text: str
    pair: str = ""
    title: str = ""
    baseline: dict | None = None  # summary of the target-only run, when it was measured
    name: str = ""  # file stem, for shipped recordings
    chat: bool | None = None  # the prompt went in through the chat template (None: the file does not say)
    recorded_at: str = ""  # when it was recorded (UTC, minutes), "" when the file does not say

    def decode(self, fallback: Callable[[int], str] | None = None) -> Callable[[int], str]:
        return table_decoder(self.tokens, fallback)


# what the target alone ran in: its dtype, or its weights' precision where they are quantized (an int8 target)
TARGET_NAMES = ("float32", "float64", "bfloat16", "float16", "int8")  # float64: the tests' tiny models


def baseline_summary(spec: Run, base: Run, speedup: float, identical: bool | None, target: str | None = None) -> dict:
    """Plain numbers of a speculative-vs-target-alone comparison (for files and the page); target: what the target
    alone ran in where that is not its dtype (an int8 target's weights)."""
    return {
        "target": target or base.dtype,  # the baseline every speedup of the comparison is against
        "spec_tokens_per_s": spec.tokens_per_s, "base_tokens_per_s": base.tokens_per_s,
        "speedup": speedup, "identical": identical,
        "spec_target_passes": spec.target_passes, "base_target_passes": base.target_passes,
        "spec_tokens": len(spec.token_ids), "base_tokens": len(base.token_ids),
        "base_token_ids": list(base.token_ids), "base_decode_s": base.decode_s, "spec_decode_s": spec.decode_s,
        # one 1-token target pass, after the prompt was read (None for a one-token answer)
        "base_step_s": base.steady_s_per_token if math.isfinite(base.steady_s_per_token) else None,
        "first_difference": measure.first_difference(spec.token_ids, base.token_ids),
        "base_outside_load": base.outside_load_rounds,  # rounds timed while other programs used the CPU
        "base_outside_load_s": base.outside_load_s,  # and their time, a share of base_decode_s
        "base_stalled_s": base.stalled_s,  # wall time not in base_decode_s: other threads held the cores
    }  # fmt: skip


def pass_bound(spec: Run, summary: dict) -> float:
    """The most speedup the passes allow (measure.beyond_pass_bound): spec's tokens per target pass over the
    target alone's, from a baseline_summary (nan when it has no passes)."""
    base_passes = summary.get("base_target_passes") or 0
    base_tpp = (summary.get("base_tokens") or 0) / base_passes if base_passes else float("nan")
    return spec.tokens_per_pass / base_tpp if base_tpp and math.isfinite(base_tpp) else float("nan")


def beyond_pass_bound(spec: Run, summary: dict) -> bool:
    """measure.beyond_pass_bound for a run and its baseline_summary (a saved or recorded comparison)."""
    base_passes = summary.get("base_target_passes") or 0
    base_tpp = (summary.get("base_tokens") or 0) / base_passes if base_passes else 0.0
    return measure.beyond_bound(float(summary.get("speedup", float("nan"))), spec.tokens_per_pass, base_tpp)


def baseline_of(spec: Run, base: Run, target: str | None = None) -> dict:
    """baseline_summary() of a speculative run and its target-alone run (target: as baseline_summary)."""
    identical = spec.token_ids == base.token_ids if is_greedy(spec.decode.temperature) else None
    return baseline_summary(spec, base, measure.speedup(spec, base), identical, target)


def export_dict(run: Run, decode: Callable[[int], str], prompt_text: str, pair: str = "", title: str = "",
                baseline: dict | None = None, chat: bool | None = None, recorded_at: str | None = None) -> dict:
    d = run.to_dict()
    d["specviz_export"] = {
        "format": EXPORT_FORMAT, "prompt_text": prompt_text, "pair": pair, "title": title,
        "tokens": {str(i): s for i, s in token_table(run, decode).items()},
        "baseline": records.json_safe(baseline) if baseline else None, "chat": chat,
    }  # fmt: skip
    if recorded_at:
        d["specviz_export"]["recorded_at"] = recorded_at
    return d


def export_json(run: Run, decode: Callable[[int], str], prompt_text: str, pair: str = "", title: str = "",
                baseline: dict | None = None, indent: int | None = None, chat: bool | None = None) -> str:
    """The run as specviz.run/1 JSON plus the token texts needed to replay it anywhere; chat: whether the prompt
    went in through the chat template."""
    return json.dumps(export_dict(run, decode, prompt_text, pair, title, baseline, chat), indent=indent,
                      ensure_ascii=False)


def _check_topk(t: Any, where: str) -> None:
    if not isinstance(t, TopK):
        raise malformed(where, "expected a top-N list")
    if len(t.ids) != len(t.probs) or not all(isinstance(i, int) for i in t.ids) \
            or not all(isinstance(p, (int, float)) for p in t.probs):
        raise malformed(where, "ids and probs must be lists of numbers of the same length")


def validate_run(run: Run) -> None:
    """Check that a loaded run is self-consistent and within the limits of a live run, so drawing it
    cannot crash or tie up the server (SpecvizError naming the field)."""
    _check_run_fields(run)
    _check_run_limits(run)
    greedy = _run_greedy(run)
    emitted: list[int] = []
    for j, r in enumerate(run.rounds):
        w = f"rounds[{j}]"
        if r.index != j:
            raise malformed(f"{w}.index", f"expected {j}, got {r.index!r}")
        _check_round_types(r, w)
        _check_round_lengths(r, w)
        _check_round_values(r, w)
        _check_round_decisions(r, w, greedy)
        _check_round_extra(r, w, run.mode)
        emitted.extend(r.emitted)
    _check_ks(run)
    if emitted != run.token_ids:
        raise malformed("token_ids", "the rounds' emitted tokens do not add up to token_ids")
    _check_k_setting(run)


def _run_greedy(run: Run) -> bool:
    """Whether the run decoded greedily: its temperature when the settings record one, else its first round."""
    if "temperature" in run.settings:
        return run.decode.greedy
    return bool(run.rounds) and run.rounds[0].greedy is True


def _check_round_decisions(r, w: str, greedy: bool) -> None:
    """The accept decisions as the engine makes them: all accepted up to the first rejection, which ends the
    round; greedy: a draft is kept iff it is the target's argmax; sampling: iff u < min(1, p/q), one u each."""
    if r.greedy is not greedy:
        raise malformed(f"{w}.greedy", f"{str(r.greedy).lower()} in a {'greedy' if greedy else 'sampling'} run "
                                       "(its temperature decides it for every round)")
    if r.accepted != [True] * r.n_accepted + [False] * (len(r.accepted) - r.n_accepted):
        raise malformed(f"{w}.accepted", f"expected {r.n_accepted} accepted, then at most one rejection that "
                                         "ends the round")
    if greedy:
        if r.u:
            raise malformed(f"{w}.u", "a greedy round draws no u")
        for i, ok in enumerate(r.accepted):
            if ok != (r.drafted[i] == r.target_argmax[i]):
                raise malformed(f"{w}.accepted[{i}]", "greedy keeps a draft iff it is the target's argmax "
                                                      "(target_argmax)")
        return
    if len(r.u) != len(r.accepted):
        raise malformed(f"{w}.u", f"{len(r.u)} uniform draws for {len(r.accepted)} decisions (one each)")
    for i, ok in enumerate(r.accepted):
        u, ratio = r.u[i], r.ratio[i]  # written with 6 digits: a tie within them may go either way
        if (u >= ratio + 1e-5) if ok else (u < ratio - 1e-5):
            raise malformed(f"{w}.accepted[{i}]", f"u = {u:g} and p/q = {ratio:g} "
                                                  f"{'reject' if ok else 'accept'} this draft")


def _check_round_extra(r, w: str, mode: str) -> None:
    """The token after the accepted drafts: a correction after a rejection, a bonus after all k, the target's
    own token in an autoregressive run; absent only when EOS or the length limit cut the round before it."""
    if mode == AUTOREGRESSIVE and r.k:
        raise malformed(f"{w}.k", f"an autoregressive run drafts nothing, got k={r.k}")
    if len(r.emitted) <= r.n_accepted:
        if r.extra_kind is not None or r.extra_id is not None:
            raise malformed(f"{w}.extra_kind", "the round emitted no token after its accepted drafts")
        return
    kind = "target" if mode == AUTOREGRESSIVE else "correction" if r.rejected else "bonus"
    if r.extra_kind != kind:
        raise malformed(f"{w}.extra_kind", f"expected {kind!r} in this round, got {r.extra_kind!r}")
    if r.extra_id != r.emitted[-1]:
        raise malformed(f"{w}.extra_id", "is not the last emitted token")


def _check_ks(run: Run) -> None:
    """ks, when a file gives it, is each round's k."""
    if run.ks and run.ks != [r.k for r in run.rounds]:
        raise malformed("ks", "does not match the rounds' k")


# drafters that propose what they find, so fewer than k tokens (drafters.PromptLookupDrafter, xtok's)
SHORT_DRAFTERS = ("prompt-lookup", "other-tokenizer")


def _check_k_setting(run: Run) -> None:
    """settings.k against the rounds. With a fixed or an adaptive k policy, settings.k and the rounds before decide
    each round's k: the engine drafts min(the policy's k, the tokens left to max_new_tokens); a round drafts fewer
    only when a drafted end-of-text token ended it, or with a drafter that proposes what it finds. The best-k
    policy chooses each k from live estimates, so only the engine's range (K_MAX) holds for it."""
    s = run.settings
    policy = s.get("k_policy", "fixed")
    if run.mode != SPECULATIVE or "k" not in s or policy not in ("fixed", "adaptive"):
        return
    k, cap, eos = s["k"], s.get("max_new_tokens"), set(run.eos_token_ids or ())
    want, made = k, 0  # the policy's k for the next round, tokens emitted so far
    for j, r in enumerate(run.rounds):
        room = cap - made if isinstance(cap, int) else r.k
        expect = min(want, room)
        ended = bool(r.drafted) and r.drafted[-1] in eos  # a drafted end-of-text token ends the draft
        if r.k > expect or (r.k < expect and not ended and s.get("drafter") not in SHORT_DRAFTERS):
            raise malformed(f"rounds[{j}].k", f"drafted {r.k}, but settings.k = {k} ({policy} k policy) drafts "
                                              f"{expect} in this round")
        made += len(r.emitted)
        if policy == "adaptive":  # kpolicy.AdaptiveK: -1 after a rejection, +1 after a round of all accepted
            want = max(1, want - 1) if r.rejected else min(max(16, k), want + 1) if r.k else want


def _check_run_fields(run: Run) -> None:
    """The mode, and the prompt and new tokens as lists of token ids."""
    if run.mode not in MODES:
        raise malformed("mode", f"must be {' or '.join(map(repr, MODES))}, got {run.mode!r}")
    for name in ("prompt_ids", "token_ids"):
        v = getattr(run, name)
        if not isinstance(v, list) or not all(isinstance(t, int) and t >= 0 for t in v):
            raise malformed(name, "must be a list of token ids")


def _check_run_limits(run: Run) -> None:
    """The limits a live run has: a file cannot ask the page for more work than Run can."""
    if not run.prompt_ids:
        raise malformed("prompt_ids", "the prompt is empty")
    if len(run.prompt_ids) > limits.max_prompt_tokens():
        raise malformed("prompt_ids", f"{len(run.prompt_ids)} prompt tokens, more than the limit of "
                                      f"{limits.max_prompt_tokens()}")
    if len(run.token_ids) > limits.max_new_tokens():
        raise malformed("token_ids", f"{len(run.token_ids)} new tokens, more than the limit of "
                                     f"{limits.max_new_tokens()}")
    if not isinstance(run.rounds, list):
        raise malformed("rounds", "must be a list")
    if len(run.rounds) > max(1, len(run.token_ids)):
        raise malformed("rounds", f"{len(run.rounds)} rounds for {len(run.token_ids)} tokens (each round "
                                  "emits at least one)")


def _check_round_types(r, w: str) -> None:
    """k within the engine's range, token ids and probabilities of the right types, something emitted."""

    if not isinstance(r.k, int) or not 0 <= r.k <= K_MAX:
        raise malformed(f"{w}.k", f"must be from 0 to {K_MAX} (the engine's largest k), got {r.k!r}")
    ints = (r.drafted, r.emitted, r.target_argmax)
    if not all(isinstance(x, list) and all(isinstance(t, int) for t in x) for x in ints):
        raise malformed(w, "drafted / emitted / target_argmax must be lists of token ids")
    if not r.emitted:
        raise malformed(f"{w}.emitted", "every round emits at least one token")
    floats = (r.q_drafted, r.p_drafted, r.u, r.ratio, r.overlap, r.entropy)
    if not all(isinstance(x, list) and all(isinstance(v, (int, float)) for v in x) for x in floats):
        raise malformed(w, "probabilities must be lists of numbers")


def _check_round_lengths(r, w: str) -> None:
    """Every per-position list as long as k (and the accept decisions) make it."""
    if r.k != len(r.drafted) or len(r.q_drafted) != r.k or len(r.p_drafted) != r.k:
        raise malformed(f"{w}.k", f"k={r.k!r} does not match the {len(r.drafted)} drafted tokens")
    if not isinstance(r.n_accepted, int) or not 0 <= r.n_accepted <= r.k:
        raise malformed(f"{w}.n_accepted", f"{r.n_accepted!r} is not between 0 and k={r.k}")
    if not isinstance(r.accepted, list) or len(r.accepted) not in (r.n_accepted, r.n_accepted + 1) \
            or len(r.accepted) > r.k or any(not isinstance(a, bool) for a in r.accepted):
        raise malformed(f"{w}.accepted", f"the accept decisions do not match n_accepted={r.n_accepted}")
    if len(r.p_top) != (r.k + 1 if r.k else len(r.p_top)) or len(r.q_top) != r.k or len(r.overlap) != r.k:
        raise malformed(w, f"expected {r.k + 1} target and {r.k} draft distributions")
    if not r.p_top or len(r.p_top) > r.k + 1 or len(r.entropy) > r.k + 1:
        raise malformed(f"{w}.p_top", f"expected 1 to {r.k + 1} target distributions")
    if len(r.target_argmax) < min(len(r.p_top), r.k + 1) or len(r.target_argmax) > r.k + 1 \
            or len(r.ratio) != len(r.accepted) or len(r.u) > len(r.accepted):
        raise malformed(w, "per-position lists have the wrong length")


def _check_round_values(r, w: str) -> None:
    """The top-N lists, and the emitted tokens: the accepted drafts first, at most one more."""
    for name in ("p_top", "q_top"):
        for i, t in enumerate(getattr(r, name)):
            _check_topk(t, f"{w}.{name}[{i}]")
    if r.residual_top is not None:
        _check_topk(r.residual_top, f"{w}.residual_top")
    m = min(r.n_accepted, len(r.emitted))  # EOS / the length limit may cut inside the accepted drafts
    if r.k and r.drafted[:m] != r.emitted[:m]:
        raise malformed(f"{w}.emitted", "the emitted tokens do not start with the accepted drafts")
    if len(r.emitted) > r.n_accepted + 1:
        raise malformed(f"{w}.emitted", f"more than n_accepted + 1 = {r.n_accepted + 1} tokens")
    if getattr(r, "shared", 1) != 1 or getattr(r, "shared_pass_s", 0.0):  # a chain round's shared verify pass
        records.want_int(r.shared, f"{w}.shared", 1, records.LIST_MAX)
        records.want_num(r.shared_pass_s, f"{w}.shared_pass_s")


# the baseline block of a file: the fields the page reads, and their types
_NUM_OR_NULL = records.want_opt(records.want_num)
_BASELINE = {
    "spec_tokens_per_s": _NUM_OR_NULL, "base_tokens_per_s": _NUM_OR_NULL, "speedup": _NUM_OR_NULL,
    "spec_target_passes": records.want_int, "base_target_passes": records.want_int,
    "identical": records.want_opt(records.want_bool), "spec_tokens": records.want_int, "base_tokens": records.want_int,
    "base_token_ids": lambda v, p: records.want_list(v, p, records.want_int, records.LIST_MAX),
    "base_decode_s": _NUM_OR_NULL, "spec_decode_s": _NUM_OR_NULL, "base_step_s": _NUM_OR_NULL,
    "first_difference": records.want_opt(records.want_int),
    "base_outside_load": lambda v, p: records.want_int(v, p, 0, records.LIST_MAX),
    "base_outside_load_s": records.want_num, "base_stalled_s": records.want_num,
    "target": lambda v, p: records.want_str(v, p, options=TARGET_NAMES),
}  # fmt: skip
_BASELINE_REQUIRED = ("spec_tokens_per_s", "base_tokens_per_s", "speedup", "spec_target_passes",
                      "base_target_passes")


def _check_export_block(extra: Any) -> None:
    """Types of the "specviz_export" block: prompt text, title, token texts, baseline."""
    w = "specviz_export"
    records.want_obj(extra, w)
    if extra.get("prompt_text") is not None:
        records.want_str(extra["prompt_text"], f"{w}.prompt_text", limits.max_prompt_chars(), bidi_ok=True)
    for name in ("pair", "title", "recorded_at"):
        if extra.get(name) is not None:
            records.want_str(extra[name], f"{w}.{name}")
    if extra.get("format") is not None:
        records.want_str(extra["format"], f"{w}.format", options=(EXPORT_FORMAT,))
    if extra.get("chat") is not None:
        records.want_bool(extra["chat"], f"{w}.chat")
    tokens = extra.get("tokens")
    if tokens is not None:
        records.want_obj(tokens, f"{w}.tokens")
        for key, text in tokens.items():
            if not (key.isascii() and key.isdigit() and len(key) <= 10):
                raise malformed(f"{w}.tokens", f"keys must be token ids, got {key[:20]!r}")
            records.want_int(int(key), f"{w}.tokens (a key)")
            records.want_str(text, f"{w}.tokens.{key}", limits.TOKEN_CHARS_MAX, bidi_ok=True)
    base = extra.get("baseline")
    if base is not None:
        records.want_obj(base, f"{w}.baseline", _BASELINE_REQUIRED)
        for name, check in _BASELINE.items():
            if name in base:
                check(base[name], f"{w}.baseline.{name}")


SPEEDUP_MAX = 1000.0  # no speedup over the target alone comes near this (a round emits at most K_MAX + 1 tokens)
FIGURE_TOLERANCE = 1e-3  # a stored figure may differ this much (relative) from the one its times give (rounding)


def _check_baseline_facts(run: Run, base: dict) -> None:
    """The figures of a file's baseline block (baseline_summary) that the run and the block's own token ids and
    times decide, derived again: a stored figure that differs is refused (the page would show it as fact)."""
    w = "specviz_export.baseline"
    n = len(run.token_ids)
    for name, derived in (("spec_tokens", n), ("spec_target_passes", run.target_passes)):
        if name in base and base[name] != derived:
            raise malformed(f"{w}.{name}", f"{base[name]}, but the run has {derived}")
    ids = base.get("base_token_ids")
    if ids is not None and len(ids) != base["base_tokens"]:
        raise malformed(f"{w}.base_tokens", f"{base['base_tokens']}, but base_token_ids has {len(ids)}")
    _check_identity(run.token_ids, base, w)
    _check_outside_load(base, w)
    _check_times(run, base, w)


def _check_identity(spec_ids: list[int], base: dict, w: str) -> None:
    """identical and first_difference: derived from the token ids where the block has the target alone's, else
    held to what its count allows (a first difference within both runs, and none in identical runs)."""
    same, first, ids = base.get("identical"), base.get("first_difference"), base.get("base_token_ids")
    if ids is not None:
        diff = measure.first_difference(spec_ids, ids)
        says = "match" if diff is None else f"first differ at token {diff}"
        if same is not None and same != (diff is None):
            raise malformed(f"{w}.identical", f"{str(same).lower()}, but the token ids {says}")
        if first != diff:
            raise malformed(f"{w}.first_difference", f"{first}, but the token ids {says}")
        return
    if same is not None and same != (first is None):
        raise malformed(f"{w}.identical", f"{str(same).lower()} with first_difference {first}")
    both = min(len(spec_ids), base["base_tokens"])
    if first is not None and first > both:
        raise malformed(f"{w}.first_difference", f"{first}, beyond the {both} tokens both runs have")
    if same is True and base["base_tokens"] != len(spec_ids):
        raise malformed(f"{w}.identical", f"true, but the runs have {len(spec_ids)} and {base['base_tokens']} tokens")


def _check_outside_load(base: dict, w: str) -> None:
    """The target alone's rounds under outside load: at most its passes (one a token), their seconds at most
    its time."""
    b, passes = base.get("base_outside_load"), base["base_target_passes"]
    if b is not None and b > passes:
        raise malformed(f"{w}.base_outside_load", f"{b}, more than the target-alone run's {passes} passes")
    b_s, total = base.get("base_outside_load_s"), base.get("base_decode_s")
    if b_s is not None and total is not None and b_s > total * (1 + FIGURE_TOLERANCE):
        raise malformed(f"{w}.base_outside_load_s", f"{b_s:.4g} s, more than the target-alone run's {total:.4g} s")


def _check_times(run: Run, base: dict, w: str) -> None:
    """The speeds and the speedup, from the times they come from: the run's decode_s and tokens, and the target
    alone's base_decode_s and base_tokens (measure.speedup); the speedup within (0, SPEEDUP_MAX] in any case."""
    b_s, b_n = base.get("base_decode_s"), base["base_tokens"]
    b_rate = measure.tokens_per_s(b_n, b_s) if b_s is not None else base.get("base_tokens_per_s")
    derived = {"spec_decode_s": run.decode_s, "spec_tokens_per_s": run.tokens_per_s, "base_tokens_per_s": b_rate,
               "speedup": run.tokens_per_s / b_rate if b_rate else None}
    for name, d in derived.items():
        v = base.get(name)
        if v is not None and d is not None and math.isfinite(d) and not math.isclose(v, d, rel_tol=FIGURE_TOLERANCE):
            raise malformed(f"{w}.{name}", f"{v:.4g}, but the times give {d:.4g}")
    v = base.get("speedup")
    if v is not None and not 0 < v <= SPEEDUP_MAX:
        raise malformed(f"{w}.speedup", f"{v:.4g}: a speedup is above 0 and at most {SPEEDUP_MAX:g}")


def neutral(text: str) -> str:
    """text with each bidirectional control character shown as a mark, ⟨U+202E⟩, so none reorders the page."""
    if not BIDI_CONTROLS.intersection(text):
        return text
    return "".join(f"⟨U+{ord(ch):04X}⟩" if ch in BIDI_CONTROLS else ch for ch in text)


def _check_drawn(run: Run, tokens: dict[int, str], prompt: str) -> None:
    """What the page draws, and redraws each round: the prompt and every drafted and emitted token's text,
    counted as the HTML it draws as (markup.drawn_size: a line break is 34 characters of it, not 1)."""
    cap = limits.max_drawn_chars()
    size = {t: markup.drawn_size(text) for t, text in tokens.items()}
    unknown = markup.drawn_size("⟨0000⟩")  # an id not in the table is drawn as ⟨id⟩
    n = markup.drawn_size(prompt)
    for r in run.rounds:
        n += sum(size.get(t, unknown) for t in r.drafted + r.emitted)
        if n > cap:
            raise malformed("rounds", f"its prompt and tokens would draw more than {cap} characters of HTML "
                                      f"(a line break counts as the {len(markup.BREAK)} it draws as; the limit is "
                                      "set by SPECVIZ_MAX_DRAWN_CHARS)")


def load_export(text: str | bytes) -> Recording:
    """Read an exported / recorded run (or a bare specviz.run/1 file); SpecvizError naming the field if bad."""
    cap = limits.max_run_file_bytes()
    if len(text) > cap:
        raise SpecvizError(f"The run file is larger than the limit of {cap // 2**20} MB.")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecvizError("The run file is not UTF-8 text (is it a JSON file from specviz?).") from None
    d = records.parse_json(text)
    run = Run.from_dict(d)
    extra = d.get("specviz_export") or {}
    _check_export_block(extra)
    validate_run(run)
    if extra.get("baseline") is not None:
        _check_baseline_facts(run, extra["baseline"])
    tokens = {int(k): neutral(v) for k, v in (extra.get("tokens") or {}).items()}
    prompt = extra.get("prompt_text")
    if prompt is None:  # rebuilt from the token table: held to the prompt box's limit as well
        prompt = "".join(table_decoder(tokens)(t) for t in run.prompt_ids)
        if len(prompt) > limits.max_prompt_chars():
            raise malformed("specviz_export.tokens", f"the prompt they spell is {len(prompt)} characters long, "
                                                     f"more than the limit of {limits.max_prompt_chars()}")
    prompt = neutral(prompt)
    _check_drawn(run, tokens, prompt)
    return Recording(run=run, tokens=tokens, prompt_text=prompt, pair=extra.get("pair") or "",
                     title=extra.get("title") or "", baseline=extra.get("baseline"), chat=extra.get("chat"),
                     recorded_at=extra.get("recorded_at") or "")


# --------------------------------------------------------------------------
# shipped recordings


SELF_DRAFTER = "the target itself"  # a recording's drafter (run.settings["drafter"]) when the target drafted


@dataclass(frozen=True)
class RecordSpec:
    name: str  # file stem
    preset: str  # specviz.core.prompts preset name
    temperature: float = DecodeSettings.temperature
    seed: int = DecodeSettings.seed
    k: int = DecodeSettings.k
    top_p: float = DecodeSettings.top_p
    k_policy: str = "fixed"  # the lessons read fixed-k rounds (lessons.K) from the other recordings
    self_draft: bool = False  # the target drafts for itself (c = 1): the "When it loses" lesson's run


DEFAULT_RECORDINGS = [
    # the main page's first live run, as Run makes it: its prompt, k policy and length
    RecordSpec("first-run-greedy", FIRST_RUN.preset, k=FIRST_RUN.k, k_policy=FIRST_RUN.k_policy),
    RecordSpec("capital-of-france-greedy", "The capital of France"),
    RecordSpec("code-greedy", "Python function"),
    RecordSpec("creative-greedy", "Creative story"),  # the creative and temperature lessons' story
    RecordSpec("creative-sampling-t1", "Creative story", temperature=1.0, seed=1),
    RecordSpec("code-greedy-self", "Python function", self_draft=True),
]
# what "Recorded runs" plays first: the recording of the main page's first live run
FIRST_RECORDING = next(s.name for s in DEFAULT_RECORDINGS if s.preset == FIRST_RUN.preset and s.temperature == 0
                       and (s.k, s.k_policy) == (FIRST_RUN.k, FIRST_RUN.k_policy))


def same_settings(rec: Recording, prompt_text: str, chat: bool | None, decode: DecodeSettings) -> bool:
    """Whether a recording ran the prompt and settings of a run: the same prompt text (through the chat template
    or not, where both say), k and how it was chosen, and what the text depends on (baseline_ident: sampling,
    new tokens, and the seed when sampling)."""
    want = (decode.k, decode.k_policy, decode.baseline_ident())
    got = rec.run.decode
    return (rec.prompt_text == prompt_text and (rec.chat is None or chat is None or bool(rec.chat) == bool(chat))
            and (got.k, got.k_policy, got.baseline_ident()) == want)


def matching_recording(recordings: Iterable[Recording], prompt_text: str, chat: bool | None,
                       decode: DecodeSettings, pair: str = "") -> Recording | None:
    """The recording of a run's prompt and settings (same_settings) with the pair's own draft, one made on `pair`
    first; None if none is."""
    found = [r for r in recordings if same_settings(r, prompt_text, chat, decode)
             and r.run.settings.get("drafter") != SELF_DRAFTER]  # another drafter's run: not this run's
    return next((r for r in found if r.pair == pair), found[0] if found else None)


def list_recorded(folder: Path | str = RECORDED_DIR) -> list[Recording]:
    """The shipped recordings, sorted by file name (a broken file is skipped)."""
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            rec = load_export(path.read_text(encoding="utf-8"))
        except (OSError, SpecvizError):
            continue
        rec.name = path.stem
        out.append(rec)
    return out
