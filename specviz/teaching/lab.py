"""Logic behind the learning pages: sweeps, tables and the figures they need.

The pages (slow-motion round, acceptance lab, speedup, why it is fast,
exactness, theory) stay thin: they read widgets, call these functions and
render. Everything here is pure (no streamlit) and works on any draft/target
models the engine accepts. The words the pages show (round stories, verdicts)
are explain.py's; the figures (α, c, speedup) are measure.py's.

  acceptance_sweep / alpha_table  alpha by domain and temperature
  acceptance_lab                the Acceptance lab's Measure: each cell's run and its agreement, stoppable between cells
  agreement_sweep / expected_table  the lower-variance α: Σ min(p, q) along each run's own text
  compare_with_baseline         speculative vs a warmed target-only run, both on the shared vocabulary
  k_sweep / k_sweep_rows        measured speedup per k against the cost model
  race_points                   cumulative (seconds, tokens) of a run, for the race
  diff_html                     a text with its first difference from another marked
  first_position                p, q and the residual at the first new position (drawn: charts.fig_first_position)
  position_from_logits          the same from logits already computed (experiments.first_logits)
  entropy_verdict               which domain the target was least sure on, against α
  seed_table
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specviz.core import markup, measure
from specviz.core.errors import InvalidSetting
from specviz.core.progress import Units
from specviz.teaching.experiments import Agreement, agreement_along, first_logits
from specviz.teaching.experiments import compare_with_baseline  # noqa: F401 - pages call it as lab.compare_with_baseline
from specviz.data.records import Run
from specviz.core.settings import DecodeSettings, is_greedy
from specviz.core.theory import best_k, expected_speedup, expected_tokens

Progress = Callable[[str, "float | None"], None] | None
Decode = Callable[[int], str]


def _say(progress: Progress, msg: str, frac: float | None = None) -> None:
    if progress is not None:
        progress(msg, None if frac is None else min(max(frac, 0.0), 1.0))


# ---------------------------------------------------------------------------
# page 2: acceptance by domain and temperature


def stream_run(stream, max_new_tokens: int, progress: Progress = None, label: str = "") -> Run:
    """Consume a DecodeStream, reporting tokens done / max_new_tokens; return its Run."""
    done = 0
    for rnd in stream:
        done += len(rnd.emitted)
        _say(progress, f"{label}{done}/{max_new_tokens} tokens", done / max_new_tokens)
    return stream.run


def acceptance_sweep(target, draft, prompts: Mapping[str, Sequence[int]], temperatures: Sequence[float],
                     settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None, vocab: int | None = None,
                     existing: Mapping[str, Mapping[float, Run]] | None = None,
                     progress: Progress = None) -> dict[str, dict[float, Run]]:
    """One speculative run per (domain, temperature); cells already in `existing` are kept.

    Returns {domain: {temperature: Run}}; each Run's settings get "label" = domain. Each run takes
    `settings` with that temperature.
    """
    if not prompts:
        raise InvalidSetting("Pick at least one domain.")
    temps = sorted({float(t) for t in temperatures})
    if not temps:
        raise InvalidSetting("Pick at least one temperature.")
    out: dict[str, dict[float, Run]] = {d: dict(existing.get(d, {})) if existing else {} for d in prompts}
    todo = [(d, t) for d in prompts for t in temps if t not in out[d]]
    # a stop keeps the cells finished before it
    units = Units(progress, len(todo), partial=lambda: {d: dict(by_t) for d, by_t in out.items()})
    for dom, t in todo:
        out[dom][t] = _lab_run(target, draft, prompts[dom], dom, t, units, settings, eos_token_id=eos_token_id,
                               vocab=vocab)
        units.unit_done(f"{dom}, T = {t:g}")
    return out


def _lab_run(target, draft, ids, dom: str, t: float, units: Units, settings: DecodeSettings, **kw) -> Run:
    """One acceptance-lab cell: a speculative run on the domain's prompt with `settings` at temperature t,
    labelled."""
    from specviz.decoding.engine import speculative_stream

    stream = speculative_stream(target, draft, list(ids), replace(settings, temperature=t), **kw)
    run = stream_run(stream, settings.max_new_tokens,
                     lambda msg, frac: units.say(f"{dom}, T = {t:g}: {msg}", frac))
    run.settings["label"] = dom
    return run


def acceptance_lab(target, draft, prompts: Mapping[str, Sequence[int]], temperatures: Sequence[float],
                   settings: DecodeSettings = DecodeSettings(), *, eos_token_id=None, vocab: int | None = None,
                   existing: Mapping[str, Mapping[float, Run]] | None = None,
                   existing_agree: Mapping[str, Mapping[float, Agreement]] | None = None,
                   progress: Progress = None) -> tuple[dict, dict]:
    """The Acceptance lab's Measure button: acceptance_sweep and agreement_sweep cell by cell, so a stop
    (core.errors.Stopped, whose partial is (sweep, agreement) of the cells finished) keeps whole cells.

    Cells in `existing` (and their agreement in `existing_agree`) are kept, and so are domains not picked now."""
    if not prompts:
        raise InvalidSetting("Pick at least one domain.")
    temps = sorted({float(t) for t in temperatures})
    if not temps:
        raise InvalidSetting("Pick at least one temperature.")
    sweep = {d: dict(by_t) for d, by_t in (existing or {}).items()}
    agree = {d: dict(by_t) for d, by_t in (existing_agree or {}).items()} if existing else {}
    for d in prompts:
        sweep.setdefault(d, {})
        agree.setdefault(d, {})
    todo = [(d, t) for d in prompts for t in temps if t not in sweep[d]]
    units = Units(progress, len(todo), partial=lambda: ({d: dict(v) for d, v in sweep.items() if v},
                                                         {d: dict(v) for d, v in agree.items() if v}))
    for dom, t in todo:
        run = _lab_run(target, draft, prompts[dom], dom, t, units, settings, eos_token_id=eos_token_id, vocab=vocab)
        units.say(f"{dom}, T = {t:g}: agreement along the text", 1.0)
        agree[dom][t] = agreement_along(target, draft, list(prompts[dom]), run.token_ids, t, vocab)
        sweep[dom][t] = run
        units.unit_done(f"{dom}, T = {t:g}")
    # kept cells read along another text than their run's get read again (one pass of each model)
    for dom in prompts:
        for t, run in sweep[dom].items():
            old = agree[dom].get(t)
            if old is None or old.token_ids != list(run.token_ids):
                agree[dom][t] = agreement_along(target, draft, list(prompts[dom]), run.token_ids, t, vocab)
    return {d: v for d, v in sweep.items() if v}, {d: v for d, v in agree.items() if v}


def agreement_sweep(target, draft, prompts: Mapping[str, Sequence[int]], sweep: Mapping[str, Mapping[float, Run]],
                    *, vocab: int | None = None, existing: Mapping[str, Mapping[float, Agreement]] | None = None,
                    progress: Progress = None) -> dict[str, dict[float, Agreement]]:
    """agreement_along each sweep run's own text: one target and one draft pass per cell, no decoding.

    A speculative run's text is the target's text (identical when greedy, the
    same distribution when sampling), so it serves as the text to read p and q
    along. Cells in `existing` read along the same text are kept.
    """
    out: dict[str, dict[float, Agreement]] = {}
    todo = []
    for dom, by_t in sweep.items():
        out[dom] = {}
        for t, run in by_t.items():
            old = (existing or {}).get(dom, {}).get(t)
            if old is not None and old.token_ids == list(run.token_ids):
                out[dom][t] = old
            elif dom in prompts:
                todo.append((dom, t, run))
    for j, (dom, t, run) in enumerate(todo):
        _say(progress, f"agreement along the text {j + 1}/{len(todo)}: {dom}, T = {t:g}", j / len(todo))
        out[dom][t] = agreement_along(target, draft, list(prompts[dom]), run.token_ids, t, vocab)
    _say(progress, "done", 1.0)
    return out


def _estimate_table(cells: Mapping[str, Mapping[float, object]], estimate) -> dict[str, dict[float, tuple]]:
    """{domain: {temperature: (value, stderr)}} of estimate(cell), for the α charts; empty cells left out."""
    out = {}
    for dom, by_t in cells.items():
        row = {}
        for t, cell in sorted(by_t.items()):
            e = estimate(cell)
            if math.isfinite(e.value):
                row[t] = (e.value, e.stderr if math.isfinite(e.stderr) else 0.0)
        if row:
            out[dom] = row
    return out


def alpha_table(sweep: Mapping[str, Mapping[float, Run]]) -> dict[str, dict[float, tuple[float, float]]]:
    """The counted α: accepted ÷ judged drafts of each run, with its stderr."""
    return _estimate_table(sweep, lambda run: measure.alpha_estimate(run.n_accepted, run.n_judged))


def expected_table(agree: Mapping[str, Mapping[float, Agreement]]) -> dict[str, dict[float, tuple[float, float]]]:
    """The expected α at every position of each run's text (Agreement.estimate), with its stderr."""
    return _estimate_table(agree, Agreement.estimate)


def mean_entropy(run: Run) -> float:
    """Mean target entropy (nats) at the positions where the target judged a draft."""
    vals = [e for r in run.rounds for e in r.entropy[:len(r.accepted)]]
    return float(np.mean(vals)) if vals else float("nan")


# the lesson's figures first (α both ways, and the target's uncertainty beside them), then the detail: a table
# wider than a laptop's page hid the entropy and tokens per pass behind its intervals
SWEEP_COLUMNS = ("domain", "temperature", "expected α (every position)", "counted α", "mean target entropy (nats)",
                 "tokens/pass", "its 95% interval", "counted 95% interval", "positions", "judged drafts",
                 "new tokens")
SWEEP_ROOM_COLUMNS = 6  # presenter mode's: the lesson's figures, up to tokens/pass (wider scrolls on a projector)


def sweep_rows(sweep: Mapping[str, Mapping[float, Run]],
               agree: Mapping[str, Mapping[float, Agreement]] | None = None) -> list[dict]:
    """A summary row per (domain, temperature): counted α, expected α along the text, tokens/pass, entropy
    (SWEEP_COLUMNS, without the expected α's when `agree` is not given)."""
    rows = []
    for dom, by_t in sweep.items():
        for t, run in sorted(by_t.items()):
            e = measure.alpha_estimate(run.n_accepted, run.n_judged)
            row = {"domain": dom, "temperature": t}
            a = (agree or {}).get(dom, {}).get(t)
            if agree is not None:
                x = a.estimate() if a is not None else None
                row["expected α (every position)"] = round(x.value, 3) if x and x.n else None
                row["its 95% interval"] = f"{x.lo:.2f}–{x.hi:.2f}" if x and x.n else "–"
                row["positions"] = x.n if x else 0
            row.update({"counted α": round(e.value, 3),
                        "counted 95% interval": f"{e.lo:.2f}–{e.hi:.2f}" if e.n else "–",
                        "judged drafts": run.n_judged, "tokens/pass": round(run.tokens_per_pass, 2),
                        "mean target entropy (nats)": round(_cell_entropy(run, a), 2),
                        "new tokens": len(run.token_ids)})
            rows.append({**{name: row[name] for name in SWEEP_COLUMNS if name in row}, **row})  # any other last
    return rows


def _cell_entropy(run: Run, a: Agreement | None) -> float:
    """Mean target entropy over every text position when known, else over the judged ones."""
    if a is not None and a.entropy:
        return float(np.mean(a.entropy))
    return mean_entropy(run)


def entropy_verdict(sweep: Mapping[str, Mapping[float, Run]], temperature: float,
                    agree: Mapping[str, Mapping[float, Agreement]] | None = None) -> str:
    """Which domain had the most uncertain target and how that lined up with α.

    With `agree`, entropy and α are taken over every position of each text (the
    expected α); otherwise over the judged drafts (the counted α).
    """
    pts = []
    for dom, by_t in sweep.items():
        run = by_t.get(temperature)
        a = (agree or {}).get(dom, {}).get(temperature)
        if a is not None and a.token_ids:
            pts.append((dom, _cell_entropy(run, a), a.expected_alpha))
        elif run is not None and run.n_judged:
            pts.append((dom, mean_entropy(run), run.alpha))
    if len(pts) < 2:
        return ""
    pts.sort(key=lambda x: x[1])
    lo, hi = pts[0], pts[-1]
    ents = np.array([p[1] for p in pts])
    als = np.array([p[2] for p in pts])
    corr = float(np.corrcoef(ents, als)[0, 1]) if ents.std() > 0 and als.std() > 0 else float("nan")
    s = (f"At T = {temperature:g}, the target was least sure on **{hi[0]}** (mean entropy {hi[1]:.2f} nats, "
         f"α = {hi[2]:.2f}) and most sure on **{lo[0]}** ({lo[1]:.2f} nats, α = {lo[2]:.2f}). ")
    if math.isfinite(corr):
        s += (f"Across domains, entropy and α correlate at {corr:+.2f}"
              + (": where the target itself hesitates, a smaller model rarely guesses its choice."
                 if corr < -0.3 else ": here the link is weak; more tokens or other prompts may show it."))
    return s


# ---------------------------------------------------------------------------
# page 3: speedup


MODEL_K_MAX = 12  # the largest k the cost model's best k is searched over (and the Speedup page's sliders reach)


def model_best_k(alpha: float, cost, k_max: int = MODEL_K_MAX) -> tuple[int, float]:
    """The cost model's best k and its predicted speedup at α, with a profile's c and measured verify cost
    (costs.Cost): what the Speedup page's section 2 and the "Choosing k" lesson both call the model's best k."""
    return best_k(alpha, cost.c, cost.verify, k_max=k_max)


def k_sweep(target, draft, input_ids: Sequence[int], ks: Sequence[int], settings: DecodeSettings = DecodeSettings(),
            *, eos_token_id=None, vocab: int | None = None, progress: Progress = None) -> dict:
    """compare_with_baseline for each k (`settings` with that k): {k: Comparison}, each with its own warmed
    baseline. A stop (core.errors.Stopped) keeps the k values finished in its partial."""
    ks = sorted({int(k) for k in ks})
    if not ks:
        raise InvalidSetting("Pick at least one k.")
    out = {}
    units = Units(progress, len(ks), partial=lambda: dict(out))  # a stop keeps the k values finished
    for k in ks:
        units.say(f"k = {k}: target alone and speculative run")
        out[k] = compare_with_baseline(target, draft, list(input_ids), replace(settings, k=k),
                                       eos_token_id=eos_token_id, vocab=vocab)
        units.unit_done(f"k = {k}")
    return out


def k_sweep_rows(sweep: Mapping[int, object], c: float | None, verify_cost=None) -> list[dict]:
    """Per k: measured α, target passes (rounds), tokens/pass, measured speedup and the model's prediction
    from that α.

    The model describes rounds of drafting and verifying, so "measured speedup" is taken over the
    rounds after the first, whose passes also read the prompt (the bench's decode speedup);
    "end-to-end speedup" includes it.
    """
    rows = []
    for k, cmp in sorted(sweep.items()):
        run = cmp.spec
        a = run.alpha
        pred = (expected_speedup(min(max(a, 0.0), 1.0), k, c, verify_cost)
                if c is not None and math.isfinite(a) else float("nan"))
        rows.append({"k": k, "α": round(a, 3), "target passes": len(run.rounds),
                     "tokens/pass": round(run.tokens_per_pass, 2),
                     "baseline tok/s": round(cmp.base.tokens_per_s, 2), "speculative tok/s": round(run.tokens_per_s, 2),
                     "measured speedup": round(measure.steady_speedup(cmp.spec, cmp.base), 2),
                     "end-to-end speedup": round(cmp.speedup, 2),
                     "predicted speedup": round(pred, 2) if math.isfinite(pred) else None})
    return rows


def race_points(run: Run) -> list[tuple[float, int]]:
    """Cumulative (seconds since decoding began, tokens so far) after each round.

    The first round's time includes reading the prompt, for both runs of a race."""
    t, n, out = 0.0, 0, []
    for r in run.rounds:
        t += r.round_s
        n += len(r.emitted)
        out.append((t, n))
    return out


# ---------------------------------------------------------------------------
# page 4: why it is fast


# ---------------------------------------------------------------------------
# page 5: exactness


def diff_html(ids: Sequence[int], other: Sequence[int], decode: Decode) -> str:
    """The text of `ids` as HTML with the first token that differs from `other` highlighted."""
    i = measure.first_difference(ids, other)
    parts = []
    for j, t in enumerate(ids):
        s = markup.html_text(decode(int(t)))
        if i is not None and j == i:
            parts.append('<span data-state="first-difference" style="background:rgba(213,94,0,0.18);'
                         'border:2px solid #D55E00;font-weight:700;border-radius:3px">'
                         f"{s or '∅'}</span>")
        elif i is not None and j > i:
            parts.append(f'<span style="color:#777">{s}</span>')
        else:
            parts.append(s)
    return ('<div class="sv-diff" style="white-space:pre-wrap;line-height:1.9;font-size:16px;'
            'font-family:ui-monospace,Menlo,Consolas,monospace;margin-bottom:1rem">' + "".join(parts) + "</div>")


@dataclass(frozen=True)
class FirstPosition:
    """Target p, draft q and the residual at the first new position, over the whole vocabulary."""

    p: dict[int, float]  # top tokens of each, and their union
    q: dict[int, float]
    residual: dict[int, float]  # norm(max(0, p - q))
    overlap: float  # Σ min(p, q): the chance the drafted token is accepted
    temperature: float


def first_position(target, draft, input_ids: Sequence[int], temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, vocab: int | None = None, top: int = 12) -> FirstPosition:
    """p, q and norm(max(0, p − q)) for the first token after the prompt, under the run's settings."""
    p_logits, q_logits = first_logits(target, draft, list(input_ids), vocab)  # (V,) each
    return position_from_logits(p_logits, q_logits, temperature, top_k, top_p, top)


def position_from_logits(p_logits, q_logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                         top: int = 12) -> FirstPosition:
    """first_position from the target's and the draft's logits (V,) (experiments.first_logits): no model needed."""
    import torch

    from specviz.decoding.sampling import logits_to_probs

    v = p_logits.shape[-1]
    t = 1.0 if is_greedy(temperature) else temperature
    p = logits_to_probs(p_logits.double(), t, top_k, top_p)  # (V,)
    q = logits_to_probs(q_logits.double(), t, top_k, top_p)  # (V,)
    r = torch.clamp(p - q, min=0.0)
    r = r / r.sum() if r.sum() > 0 else p.clone()  # (V,) the residual corrections are drawn from
    keep = set()
    for x in (p, q, r):
        keep |= set(torch.topk(x, min(top, v)).indices.tolist())
    as_d = lambda x: {int(i): float(x[i]) for i in sorted(keep, key=lambda i: -float(p[i]))}  # noqa: E731
    return FirstPosition(as_d(p), as_d(q), as_d(r), float(torch.minimum(p, q).sum()), float(temperature))


# ---------------------------------------------------------------------------
# page 6: theory

# the numbers claim 8 quotes (k = 4)
CLAIMED_K4 = {0.5: 1.9, 0.7: 2.8, 0.8: 3.4, 0.9: 4.1}


def seed_table(k: int = 4) -> list[dict]:
    """E[tokens per pass] at α = 0.5, 0.7, 0.8, 0.9 from the formula, next to the quoted values."""
    rows = []
    for a, claimed in CLAIMED_K4.items():
        v = expected_tokens(a, k)
        row = {"α": a, "k": k, "(1 − α^(k+1)) / (1 − α)": round(v, 3)}
        if k == 4:
            row["quoted in claim 8"] = f"≈ {claimed}"
            row["matches (to 0.05)"] = "yes" if abs(v - claimed) <= 0.05 else "no"
        rows.append(row)
    return rows

