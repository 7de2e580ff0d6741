"""Playback and recordings of runs: what the main page animates, without Streamlit.

Playback reveals Rounds one at a time, either live (pulled from a running
DecodeStream, so a paused page resumes where it stopped) or from a finished
Run (replay: no model needed). Exported / recorded files are ordinary
specviz.run/1 JSON (Run.from_json reads them) plus a "specviz_export" block:
the prompt text and the text of every token id the file mentions, so a run
can be drawn on a laptop that has no model at all.

record_presets(pair, out_dir) regenerates the shipped recordings in
specviz/recorded/ with a real pair.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from . import limits, measure, records
from .devqueue import load_text
from .errors import SpecvizError
from .records import Round, Run, TopK, malformed

EXPORT_FORMAT = "specviz.export/1"
RECORDED_DIR = Path(__file__).parent / "recorded"

# animation speeds: (seconds the drafted tokens stay pending, seconds after the verdict)
SPEEDS: dict[str, tuple[float, float]] = {
    "instant": (0.0, 0.0),
    "fast": (0.15, 0.1),
    "normal": (0.6, 0.35),
    "slow": (1.5, 1.0),
}
DEFAULT_SPEED = "normal"


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

    def decode(self, fallback: Callable[[int], str] | None = None) -> Callable[[int], str]:
        return table_decoder(self.tokens, fallback)


def baseline_summary(spec: Run, base: Run, speedup: float, identical: bool | None) -> dict:
    """Plain numbers of a speculative-vs-target-alone comparison (for files and the page)."""
    return {
        "spec_tokens_per_s": spec.tokens_per_s, "base_tokens_per_s": base.tokens_per_s,
        "speedup": speedup, "identical": identical,
        "spec_target_passes": spec.target_passes, "base_target_passes": base.target_passes,
        "spec_tokens": len(spec.token_ids), "base_tokens": len(base.token_ids),
        "base_token_ids": list(base.token_ids), "base_decode_s": base.decode_s, "spec_decode_s": spec.decode_s,
        # one 1-token target pass, after the prompt was read (None for a one-token answer)
        "base_step_s": base.steady_s_per_token if math.isfinite(base.steady_s_per_token) else None,
        "first_difference": measure.first_difference(spec.token_ids, base.token_ids),
        "base_outside_load": base.outside_load_rounds,  # rounds timed while other programs used the CPU
    }  # fmt: skip


def target_alone(target, spec: Run, vocab: int | None = None, warm: bool = True) -> dict:
    """Time the target alone with the spec run's prompt and settings; return baseline_summary().

    experiments.compare_with_baseline(spec=...), with the settings read back from the Run.
    """
    from .experiments import compare_with_baseline

    s = spec.settings
    cmp = compare_with_baseline(target, None, spec.prompt_ids, k=s.get("k", 4), temperature=s.get("temperature", 0.0),
                                top_p=s.get("top_p", 1.0), top_k=s.get("top_k", 0),
                                max_new_tokens=s.get("max_new_tokens", 64), seed=s.get("seed", 0),
                                eos_token_id=s.get("eos_token_id"), vocab=vocab, spec=spec, warm=warm)
    return baseline_summary(spec, cmp.base, cmp.speedup, cmp.identical)


def export_dict(run: Run, decode: Callable[[int], str], prompt_text: str, pair: str = "", title: str = "",
                baseline: dict | None = None) -> dict:
    d = run.to_dict()
    d["specviz_export"] = {
        "format": EXPORT_FORMAT, "prompt_text": prompt_text, "pair": pair, "title": title,
        "tokens": {str(i): s for i, s in token_table(run, decode).items()},
        "baseline": records.json_safe(baseline) if baseline else None,
    }  # fmt: skip
    return d


def export_json(run: Run, decode: Callable[[int], str], prompt_text: str, pair: str = "", title: str = "",
                baseline: dict | None = None, indent: int | None = None) -> str:
    """The run as specviz.run/1 JSON plus the token texts needed to replay it anywhere."""
    return json.dumps(export_dict(run, decode, prompt_text, pair, title, baseline), indent=indent,
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
    from .engine import K_MAX

    if run.mode not in ("speculative", "autoregressive"):
        raise malformed("mode", f"must be 'speculative' or 'autoregressive', got {run.mode!r}")
    for name in ("prompt_ids", "token_ids"):
        v = getattr(run, name)
        if not isinstance(v, list) or not all(isinstance(t, int) and t >= 0 for t in v):
            raise malformed(name, "must be a list of token ids")
    # the limits a live run has: a file cannot ask the page for more work than Run can
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
    emitted: list[int] = []
    for j, r in enumerate(run.rounds):
        w = f"rounds[{j}]"
        if r.index != j:
            raise malformed(f"{w}.index", f"expected {j}, got {r.index!r}")
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
        for i, t in enumerate(r.p_top):
            _check_topk(t, f"{w}.p_top[{i}]")
        for i, t in enumerate(r.q_top):
            _check_topk(t, f"{w}.q_top[{i}]")
        if r.residual_top is not None:
            _check_topk(r.residual_top, f"{w}.residual_top")
        m = min(r.n_accepted, len(r.emitted))  # EOS / the length limit may cut inside the accepted drafts
        if r.k and r.drafted[:m] != r.emitted[:m]:
            raise malformed(f"{w}.emitted", "the emitted tokens do not start with the accepted drafts")
        if len(r.emitted) > r.n_accepted + 1:
            raise malformed(f"{w}.emitted", f"more than n_accepted + 1 = {r.n_accepted + 1} tokens")
        emitted.extend(r.emitted)
    if emitted != run.token_ids:
        raise malformed("token_ids", "the rounds' emitted tokens do not add up to token_ids")


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
}  # fmt: skip
_BASELINE_REQUIRED = ("spec_tokens_per_s", "base_tokens_per_s", "speedup", "spec_target_passes",
                      "base_target_passes")


def _check_export_block(extra: Any) -> None:
    """Types of the "specviz_export" block: prompt text, title, token texts, baseline."""
    w = "specviz_export"
    records.want_obj(extra, w)
    if extra.get("prompt_text") is not None:
        records.want_str(extra["prompt_text"], f"{w}.prompt_text", limits.max_prompt_chars())
    for name in ("pair", "title", "format"):
        if extra.get(name) is not None:
            records.want_str(extra[name], f"{w}.{name}")
    if extra.get("chat") is not None:
        records.want_bool(extra["chat"], f"{w}.chat")
    tokens = extra.get("tokens")
    if tokens is not None:
        records.want_obj(tokens, f"{w}.tokens")
        for key, text in tokens.items():
            if not (key.isascii() and key.isdigit() and len(key) <= 10):
                raise malformed(f"{w}.tokens", f"keys must be token ids, got {key[:20]!r}")
            records.want_int(int(key), f"{w}.tokens (a key)")
            records.want_str(text, f"{w}.tokens.{key}", 1000)
    base = extra.get("baseline")
    if base is not None:
        records.want_obj(base, f"{w}.baseline", _BASELINE_REQUIRED)
        for name, check in _BASELINE.items():
            if name in base:
                check(base[name], f"{w}.baseline.{name}")


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
    tokens = {int(k): v for k, v in (extra.get("tokens") or {}).items()}
    prompt = extra.get("prompt_text")
    if prompt is None:
        prompt = "".join(table_decoder(tokens)(t) for t in run.prompt_ids)
    return Recording(run=run, tokens=tokens, prompt_text=prompt, pair=extra.get("pair") or "",
                     title=extra.get("title") or "", baseline=extra.get("baseline"))


# --------------------------------------------------------------------------
# shipped recordings


@dataclass(frozen=True)
class RecordSpec:
    name: str  # file stem
    preset: str  # specviz.prompts preset name
    temperature: float = 0.0
    seed: int = 0
    k: int = 4
    top_p: float = 1.0


DEFAULT_RECORDINGS = [
    RecordSpec("capital-of-france-greedy", "The capital of France"),
    RecordSpec("code-greedy", "Python function"),
    RecordSpec("creative-greedy", "Creative story"),
    RecordSpec("creative-sampling-t1", "Creative story", temperature=1.0, seed=1),
]


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


def _round_floats(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return round(x, digits) if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _round_floats(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [_round_floats(v, digits) for v in x]
    return x


def record_presets(pair, out_dir: Path | str = RECORDED_DIR, specs: list[RecordSpec] = DEFAULT_RECORDINGS,
                   max_new_tokens: int = 48, baseline: bool = True,
                   progress: Callable[[str], None] = print) -> list[Path]:
    """Run each spec on a loaded Pair and write <out_dir>/<name>.json (probabilities to 6 digits).

    Regenerate the shipped files with:
      python -c "from specviz import models, replay; replay.record_presets(models.load_pair())"
    """
    from .engine import speculative_decode
    from .prompts import encode, preset

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = pair.tokenizer
    decode = lambda t: tok.decode([int(t)])  # noqa: E731
    written = []
    for s in specs:
        p = preset(s.preset)
        ids = encode(tok, p.text, p.chat)
        kw = dict(k=s.k, temperature=s.temperature, top_p=s.top_p, max_new_tokens=max_new_tokens, seed=s.seed,
                  eos_token_id=pair.eos_token_ids)
        # a short warm-up so one-time costs do not land in the recorded timings
        speculative_decode(pair.target, pair.draft, ids, **{**kw, "max_new_tokens": 2}, vocab=pair.shared_vocab)
        run = speculative_decode(pair.target, pair.draft, ids, **kw, vocab=pair.shared_vocab)
        base = target_alone(pair.target, run, pair.shared_vocab) if baseline else None
        temp = "greedy" if s.temperature == 0 else f"temperature {s.temperature:g}, seed {s.seed}"
        title = f"{p.name} · {temp} · k={s.k} · {pair.name} ({run.device}, {run.dtype})"
        d = _round_floats(export_dict(run, decode, p.text if not p.chat else p.text, pair.name, title, base))
        d["specviz_export"]["chat"] = p.chat
        path = out / f"{s.name}.json"
        path.write_text(json.dumps(d, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        progress(f"{path}: {len(run.token_ids)} tokens, α={run.alpha:.2f}, {path.stat().st_size // 1024} KiB")
        written.append(path)
    return written


# --------------------------------------------------------------------------
# playback: the animation state machine


def partial_run(prompt_ids: list[int], rounds: list[Round], settings: dict, mode: str = "speculative",
                device: str = "cpu", dtype: str = "float32") -> Run:
    """A Run of the rounds so far (for live metrics and charts while a run plays)."""
    tokens = [t for r in rounds for t in r.emitted]
    return Run(
        mode=mode, prompt_ids=list(prompt_ids), token_ids=tokens, rounds=list(rounds), settings=dict(settings),
        stop_reason="running", prefill_s=0.0, decode_s=sum(r.round_s for r in rounds),
        target_passes=len(rounds), draft_passes=sum(r.k for r in rounds), ks=[r.k for r in rounds],
        device=device, dtype=dtype,
    )  # fmt: skip


@dataclass
class Playback:
    """Rounds revealed one at a time, live from a DecodeStream or replayed from a Run.

    `rounds` are the rounds revealed so far; `advance()` reveals one more
    (computing it, when live) and returns it, or None once finished.
    Keep the Playback object between page reruns to pause and resume.
    Two page reruns may call advance() at once (a click while a round is computed):
    a lock makes the second wait for the round in flight, then take the next one.
    """

    prompt_ids: list[int]
    prompt_text: str
    settings: dict
    source: str = "live"  # "live" | "replay"
    meta: dict = field(default_factory=dict)  # pair, dtype, drafter, title, ... for display
    rounds: list[Round] = field(default_factory=list)
    run: Run | None = None  # the finished Run (replay: known from the start)
    error: str | None = None
    _stream: Any = None
    _it: Iterator[Round] | None = None
    _done: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    _lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def live(cls, stream, prompt_ids: list[int], prompt_text: str, settings: dict, meta: dict | None = None,
             device: str = "cpu", dtype: str = "float32") -> "Playback":
        """Wrap a DecodeStream (specviz.engine.speculative_stream); nothing is computed yet.

        settings: at least max_new_tokens and eos_token_id, to notice the last round at once.
        """
        pb = cls(prompt_ids=list(prompt_ids), prompt_text=prompt_text, settings=dict(settings), source="live",
                 meta=dict(meta or {}), device=device, dtype=dtype)
        pb._stream, pb._it = stream, iter(stream)
        return pb

    @classmethod
    def replay(cls, run: Run, prompt_text: str, meta: dict | None = None) -> "Playback":
        """Replay a finished Run from its first round: no model involved."""
        return cls(prompt_ids=list(run.prompt_ids), prompt_text=prompt_text, settings=dict(run.settings),
                   source="replay", meta=dict(meta or {}), run=run, device=run.device, dtype=run.dtype)

    @property
    def done(self) -> bool:
        return self._done or (self.source == "replay" and self.run is not None
                              and len(self.rounds) >= len(self.run.rounds))

    @property
    def waited_s(self) -> float:
        """Seconds this live run's rounds have waited for the device so far (engine.DecodeStream; 0 once done)."""
        return float(getattr(self._stream, "waited_s", 0.0) or 0.0)

    @property
    def total(self) -> int | None:
        """Number of rounds when known (replay, or a finished live run)."""
        return len(self.run.rounds) if self.run is not None else None

    def advance(self) -> Round | None:
        """Reveal the next round (live: compute it). None when there is none left.

        Safe to call from two threads: the second waits for the first's round.
        """
        with self._lock:
            return self._advance()

    def close(self, reason: str = "the run was stopped") -> None:
        """Stop a live run now and let its KV caches go (after the round in flight, if any)."""
        with self._lock:
            if self._it is not None and not self._done:
                self._it.close()
                self._done, self.error = True, self.error or reason
            self._it = self._stream = None

    def _advance(self) -> Round | None:
        if self.done:
            return None
        if self.source == "replay":
            rnd = self.run.rounds[len(self.rounds)]
            self.rounds.append(rnd)
            return rnd
        try:
            rnd = next(self._it)
        except StopIteration:
            self._finish()
            return None
        except Exception as e:  # a failure mid-run ends the stream; keep what was computed
            self._done, self.error = True, (str(e) if isinstance(e, SpecvizError) else f"{type(e).__name__}: {e}")
            self._it = None
            raise
        self.rounds.append(rnd)
        if self._is_last(rnd):
            # the generator ends without more model work: collect the Run now
            try:
                extra = next(self._it)
            except StopIteration:
                self._finish()
            else:  # not expected; keep the round rather than lose it
                self.rounds.append(extra)
        return rnd

    def _is_last(self, rnd: Round) -> bool:
        n = sum(len(r.emitted) for r in self.rounds)
        eos = self.settings.get("eos_token_id") or []
        eos = {eos} if isinstance(eos, int) else set(eos)
        limit = self.settings.get("max_new_tokens")
        return (limit is not None and n >= limit) or bool(rnd.emitted and rnd.emitted[-1] in eos)

    def _finish(self) -> None:
        self._done = True
        self.run = self._stream.run
        self.settings = dict(self.run.settings)
        self._it = self._stream = None  # the generator holds KV caches: let them go

    def restart(self) -> "Playback":
        """A fresh replay of this playback's finished run."""
        if self.run is None:
            raise SpecvizError("Nothing to replay yet: the run has not finished.")
        return Playback.replay(self.run, self.prompt_text, self.meta)

    def current_run(self) -> Run:
        """The finished Run (replay: all rounds up to the revealed ones), or a partial one."""
        if self.run is not None and self.done:
            return self.run
        if self.run is not None:  # replaying: only the revealed rounds
            r = self.run
            return partial_run(r.prompt_ids, self.rounds, r.settings, r.mode, r.device, r.dtype)
        return partial_run(self.prompt_ids, self.rounds, self.settings, device=self.device, dtype=self.dtype)


def play(pb: Playback, steps: int | None = None) -> Iterator[Round]:
    """Advance up to `steps` rounds (None = to the end), yielding each new round."""
    n = 0
    while steps is None or n < steps:
        rnd = pb.advance()
        if rnd is None:
            return
        n += 1
        yield rnd


# --------------------------------------------------------------------------
# text for the page


def load_note(run: Run, baseline: dict | None = None) -> str | None:
    """A warning when some of these timings were taken while other programs were using the CPU, else None."""
    parts = []
    if run.outside_load_rounds:
        parts.append(f"{run.outside_load_rounds} of the run's {len(run.rounds)} rounds")
    b = (baseline or {}).get("base_outside_load")
    if isinstance(b, int) and not isinstance(b, bool) and b > 0:
        parts.append(f"{b} of the target-alone run's {baseline.get('base_target_passes', '?')} passes")
    return load_text(" and ".join(parts)) if parts else None


def now() -> float:
    """A monotonic clock in seconds (time.perf_counter)."""
    return time.perf_counter()


def sleep(seconds: float) -> None:
    """time.sleep, skipped for 0 (kept here so the page stays free of timing logic)."""
    if seconds > 0:
        time.sleep(seconds)
