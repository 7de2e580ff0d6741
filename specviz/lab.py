"""Logic behind the learning pages: round arithmetic, sweeps and verdicts.

The pages (slow-motion round, acceptance lab, speedup, why it is fast,
exactness, theory) stay thin: they read widgets, call these functions and
render. Everything here is pure (no streamlit) and works on any draft/target
models the engine accepts. Explanations are built from the measured numbers,
so a learner reads what happened on this device, not canned text.

  round_rows / round_story      one round's decisions with the arithmetic written out
  acceptance_sweep / alpha_table  alpha by domain and temperature
  agreement_sweep / expected_table  the lower-variance α: Σ min(p, q) along each run's own text
  compare_with_baseline         speculative vs a warmed target-only run, both on the shared vocabulary
  k_sweep / k_sweep_rows        measured speedup per k against the cost model
  race_points                   cumulative (seconds, tokens) of a run, for the race
  forward_cost_verdict, bandwidth_verdict, batch_verdict, dtype_comparison
  first_difference, exactness_verdict, diff_html
  first_position, fig_first_position, tv_verdict
  seed_table
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from . import charts, claims
from .errors import InvalidSetting
from .experiments import Agreement, agreement_along
from .experiments import compare_with_baseline  # noqa: F401 - pages call it as lab.compare_with_baseline
from .records import Round, Run
from .render import visible
from .theory import alpha_from_counts, expected_speedup, expected_tokens, flat_until, verify_ratios_from_timings

Progress = Callable[[str, "float | None"], None] | None
Decode = Callable[[int], str]


def _say(progress: Progress, msg: str, frac: float | None = None) -> None:
    if progress is not None:
        progress(msg, None if frac is None else min(max(frac, 0.0), 1.0))


def tok(tid: int | None, decode: Decode) -> str:
    """A token id as quoted, whitespace-visible text: ‘␣Paris’."""
    return "∅" if tid is None else f"‘{visible(decode(int(tid)))}’"


def _f(x: float, spec: str = ".3f") -> str:
    """A probability-like number: 3 decimals, or 2 significant digits when tiny; ∞ / – when not finite."""
    if x is None or not math.isfinite(x):
        return "∞" if x == math.inf else "–"
    return f"{x:.1e}" if 0 < abs(x) < 5e-4 else format(x, spec)


# ---------------------------------------------------------------------------
# page 1: one round in slow motion


def round_rows(r: Round, decode: Decode) -> list[dict]:
    """One table row per drafted position, plus the token the target adds.

    Sampling: q(d), p(d), p/q, u and the test u < min(1, p/q). Greedy: the
    target's argmax and the test draft == argmax. Positions after the first
    rejection were never judged and say so.
    """
    rows = []
    for i, d in enumerate(r.drafted):
        row = {"position": i + 1, "drafted": tok(d, decode),
               "q(d)": round(r.q_drafted[i], 4), "p(d)": round(r.p_drafted[i], 4)}
        judged = i < len(r.accepted)
        if r.greedy:
            a = r.target_argmax[i]
            row["target argmax"] = tok(a, decode)
            row["test"] = (f"draft == argmax? {'yes' if d == a else 'no'}" if judged else "not judged")
        else:
            ratio = r.ratio[i] if i < len(r.ratio) else (r.p_drafted[i] / r.q_drafted[i] if r.q_drafted[i] > 0
                                                          else math.inf)
            thr = min(1.0, ratio)
            row["p/q"] = round(ratio, 4) if math.isfinite(ratio) else math.inf
            if judged:
                u = r.u[i]
                row["u"] = round(u, 4)
                row["test"] = f"{u:.3f} {'<' if r.accepted[i] else '≥'} min(1, p/q) = {_f(thr)}"
            else:
                row["u"] = None
                row["test"] = "not judged"
        row["decision"] = ("accept ✓" if r.accepted[i] else "reject ✗") if judged else \
            "discarded (after a rejection)"
        rows.append(row)
    if r.extra_kind is not None and r.extra_id is not None:
        j = r.n_accepted
        row = {"position": j + 1, "drafted": "—", "q(d)": None, "p(d)": None}
        if r.greedy:
            row["target argmax"] = tok(r.extra_id, decode)
        else:
            row["p/q"] = None
            row["u"] = None
        row["test"] = ("sampled from norm(max(0, p − q))" if r.extra_kind == "correction" and not r.greedy
                       else "target argmax" if r.greedy else "sampled from p")
        row["decision"] = f"{r.extra_kind} {tok(r.extra_id, decode)}"
        rows.append(row)
    return rows


def _prob_in(top, tid: int) -> float | None:
    if top is None:
        return None
    for i, p in zip(top.ids, top.probs):
        if i == tid:
            return float(p)
    return None


def round_story(r: Round, decode: Decode) -> list[str]:
    """The round told step by step, one markdown paragraph per decision, with numbers.

    The claim-5 note for a round with nothing accepted is separate: zero_accept_note.
    """
    out = []
    mode = "greedy (temperature 0)" if r.greedy else "sampling"
    out.append(f"**Round {r.index + 1}** ({mode}): the draft proposed k = {r.k} token(s) "
               f"{' '.join(tok(d, decode) for d in r.drafted) or '(none)'}; the target scored all "
               f"{r.k + 1} positions in **one** forward pass ({r.verify_s * 1000:.1f} ms; drafting took "
               f"{r.draft_s * 1000:.1f} ms)."
               + (f" This first round's passes also read the prompt ({r.prefill_tokens} earlier tokens): "
                  f"there is no separate prefill pass, so its times include that." if r.prefill_tokens else ""))
    for i, ok in enumerate(r.accepted):
        d, p, q = r.drafted[i], r.p_drafted[i], r.q_drafted[i]
        head = f"Draft #{i + 1} {tok(d, decode)}: q(d) = {_f(q)}, p(d) = {_f(p)}"
        if r.greedy:
            a = r.target_argmax[i]
            out.append(f"{head}. Greedy test: draft token == target argmax? {tok(d, decode)} vs "
                       f"{tok(a, decode)} → {'yes → **accept**' if ok else 'no → **reject**'}.")
        else:
            ratio = r.ratio[i]
            thr = min(1.0, ratio)
            out.append(f"{head}, p/q = {_f(ratio)}. Draw u = {r.u[i]:.3f}; "
                       f"u {'<' if ok else '≥'} min(1, p/q) = {_f(thr)} → "
                       f"{'**accept**' if ok else '**reject**'}"
                       + (" (p ≥ q: always accepted)." if ok and ratio >= 1 else "."))
    if r.rejected:
        j = r.n_accepted
        left = r.k - j - 1
        if left > 0:
            out.append(f"The {left} draft(s) after the rejection are discarded without being judged: "
                       "they were built on a token the target refused.")
        if r.extra_kind == "correction":
            c = r.extra_id
            if r.greedy:
                out.append(f"Correction: the target's own argmax at that position, {tok(c, decode)}, "
                           "read from the same pass.")
            else:
                top = r.residual_top
                shown = ", ".join(f"{tok(i, decode)} {p:.3f}" for i, p in zip(top.ids[:5], top.probs[:5])) \
                    if top else "–"
                rc = _prob_in(top, c)
                out.append("Correction: sampled from the residual norm(max(0, p − q)), the probability the "
                           f"target wanted more than the draft gave. Residual top: {shown}. Sampled "
                           f"{tok(c, decode)}" + (f" (residual probability {rc:.3f})." if rc is not None else "."))
        else:
            out.append("The correction was cut: the text reached EOS or the length limit.")
    elif r.extra_kind == "bonus":
        pb = _prob_in(r.p_top[r.k], r.extra_id) if r.k < len(r.p_top) else None
        how = "its argmax" if r.greedy else "a sample from p"
        out.append(f"All {r.k} drafts accepted: the same pass also gives the target's distribution after the "
                   f"last draft, so a **bonus** token comes free: {how}, {tok(r.extra_id, decode)}"
                   + (f" (p = {pb:.3f})." if pb is not None else "."))
    out.append(f"This round emitted **{len(r.emitted)}** token(s) for one target pass: "
               f"{' '.join(tok(t, decode) for t in r.emitted)}.")
    return out


def zero_accept_note(r: Round, decode: Decode) -> str | None:
    """Claim 5, when it happens: no draft accepted, yet the round still emits one token."""
    if r.k == 0 or r.n_accepted > 0 or len(r.emitted) == 0:
        return None
    return (f"**Zero drafts accepted, still one token ({claims.link(5)}).** "
            f"The first draft {tok(r.drafted[0], decode)} "
            f"was rejected, yet the round emitted {tok(r.emitted[0], decode)}: the pass that judged the drafts "
            "also computed the target's own distribution at that position, so the correction costs nothing "
            "extra. Every round makes progress; the worst case is one token per target pass, like plain "
            + (f"decoding, plus the {r.draft_s * 1000:.1f} ms of drafting that was wasted." if not r.prefill_tokens
               else "decoding, plus the drafting that was wasted (this first round's draft time, "
                    f"{r.draft_s * 1000:.1f} ms, also includes reading the prompt)."))


# ---------------------------------------------------------------------------
# page 2: acceptance by domain and temperature


def stream_run(stream, max_new_tokens: int, progress: Progress = None, label: str = "") -> Run:
    """Consume a DecodeStream, reporting tokens done / max_new_tokens; return its Run."""
    done = 0
    for rnd in stream:
        done += len(rnd.emitted)
        _say(progress, f"{label}{done}/{max_new_tokens} tokens", done / max_new_tokens)
    return stream.run


def acceptance_sweep(target, draft, prompts: Mapping[str, Sequence[int]], temperatures: Sequence[float], *,
                     k: int = 4, max_new_tokens: int = 24, seed: int = 0, eos_token_id=None,
                     vocab: int | None = None, existing: Mapping[str, Mapping[float, Run]] | None = None,
                     progress: Progress = None) -> dict[str, dict[float, Run]]:
    """One speculative run per (domain, temperature); cells already in `existing` are kept.

    Returns {domain: {temperature: Run}}; each Run's settings get "label" = domain.
    """
    from .engine import speculative_stream

    if not prompts:
        raise InvalidSetting("Pick at least one domain.")
    temps = sorted({float(t) for t in temperatures})
    if not temps:
        raise InvalidSetting("Pick at least one temperature.")
    out: dict[str, dict[float, Run]] = {d: dict(existing.get(d, {})) if existing else {} for d in prompts}
    todo = [(d, t) for d in prompts for t in temps if t not in out[d]]
    for j, (dom, t) in enumerate(todo):
        def sub(msg, frac, j=j, dom=dom, t=t):
            _say(progress, f"run {j + 1}/{len(todo)}: {dom}, T = {t:g}: {msg}",
                 (j + (frac or 0.0)) / len(todo))
        stream = speculative_stream(target, draft, list(prompts[dom]), k=k, temperature=t,
                                    max_new_tokens=max_new_tokens, seed=seed, eos_token_id=eos_token_id,
                                    vocab=vocab)
        run = stream_run(stream, max_new_tokens, sub)
        run.settings["label"] = dom
        out[dom][t] = run
    _say(progress, "done", 1.0)
    return out


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
    return _estimate_table(sweep, lambda run: alpha_from_counts(run.n_accepted, run.n_judged))


def expected_table(agree: Mapping[str, Mapping[float, Agreement]]) -> dict[str, dict[float, tuple[float, float]]]:
    """The expected α at every position of each run's text (Agreement.estimate), with its stderr."""
    return _estimate_table(agree, Agreement.estimate)


def mean_entropy(run: Run) -> float:
    """Mean target entropy (nats) at the positions where the target judged a draft."""
    vals = [e for r in run.rounds for e in r.entropy[:len(r.accepted)]]
    return float(np.mean(vals)) if vals else float("nan")


def sweep_rows(sweep: Mapping[str, Mapping[float, Run]],
               agree: Mapping[str, Mapping[float, Agreement]] | None = None) -> list[dict]:
    """A summary row per (domain, temperature): counted α, expected α along the text, tokens/pass, entropy."""
    rows = []
    for dom, by_t in sweep.items():
        for t, run in sorted(by_t.items()):
            e = alpha_from_counts(run.n_accepted, run.n_judged)
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
            rows.append(row)
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


def k_sweep(target, draft, input_ids: Sequence[int], ks: Sequence[int], *, temperature: float = 0.0,
            max_new_tokens: int = 24, seed: int = 0, eos_token_id=None, vocab: int | None = None,
            progress: Progress = None) -> dict:
    """compare_with_baseline for each k: {k: Comparison}, each with its own warmed baseline."""
    ks = sorted({int(k) for k in ks})
    if not ks:
        raise InvalidSetting("Pick at least one k.")
    out = {}
    for j, k in enumerate(ks):
        _say(progress, f"k = {k}: baseline and speculative run ({j + 1}/{len(ks)})", j / len(ks))
        out[k] = compare_with_baseline(target, draft, list(input_ids), k=k, temperature=temperature,
                                       max_new_tokens=max_new_tokens, seed=seed, eos_token_id=eos_token_id,
                                       vocab=vocab)
    _say(progress, "done", 1.0)
    return out


def pooled_alpha(runs: Sequence[Run]) -> float:
    """α over several runs: all accepted / all judged drafts."""
    judged = sum(r.n_judged for r in runs)
    return sum(r.n_accepted for r in runs) / judged if judged else float("nan")


def measured_speedup(cmp) -> float:
    """A Comparison's speedup over the rounds after the first (whose passes also read the prompt):
    what the cost model describes. End to end if there are no such rounds."""
    steady = cmp.base.steady_s_per_token / cmp.spec.steady_s_per_token
    return steady if math.isfinite(steady) else cmp.speedup


def k_sweep_rows(sweep: Mapping[int, object], c: float | None, verify_cost=None) -> list[dict]:
    """Per k: measured α, tokens/pass, measured speedup and the model's prediction from that α.

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
        rows.append({"k": k, "α": round(a, 3), "tokens/pass": round(run.tokens_per_pass, 2),
                     "baseline tok/s": round(cmp.base.tokens_per_s, 2), "speculative tok/s": round(run.tokens_per_s, 2),
                     "measured speedup": round(measured_speedup(cmp), 2),
                     "end-to-end speedup": round(cmp.speedup, 2),
                     "predicted speedup": round(pred, 2) if math.isfinite(pred) else None})
    return rows


def verify_cost_from(timings: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """{n_tokens: cost(n)/cost(1)} from forward_cost timings (for the speedup model)."""
    return verify_ratios_from_timings({int(n): v for n, v in timings.items()})


def decode_rate(run: Run) -> float:
    """Tokens per second of engine time (sum of round times): excludes pauses while a page draws between rounds."""
    t = sum(r.round_s for r in run.rounds)
    return len(run.token_ids) / t if t > 0 else float("nan")


def race_points(run: Run) -> list[tuple[float, int]]:
    """Cumulative (seconds since decoding began, tokens so far) after each round.

    The first round's time includes reading the prompt, for both runs of a race."""
    t, n, out = 0.0, 0, []
    for r in run.rounds:
        t += r.round_s
        n += len(r.emitted)
        out.append((t, n))
    return out


def speedup_verdict(measured: float, predicted: float | None, c: float, alpha: float) -> str:
    """Compare a measured speedup with the model's prediction, in words."""
    s = f"Measured {measured:.2f}× at α = {alpha:.2f} and c = {c:.3f}"
    if predicted is None or not math.isfinite(predicted):
        return s + "."
    s += f"; the model predicts {predicted:.2f}×. "
    gap = measured / predicted if predicted > 0 else float("nan")
    if 0.8 <= gap <= 1.25:
        s += "Close: the cost model explains the measurement."
    elif gap < 0.8:
        s += ("Slower than predicted: the model ignores per-round bookkeeping (sampling, KV-cache rollback, "
              "Python overhead), which matters when forward passes are short.")
    else:
        s += "Faster than predicted: timing noise on short runs, or a baseline slowed by other work on this machine."
    if measured < 1:
        s += " Below 1×: on this device and settings speculation does not pay."
    return s


# ---------------------------------------------------------------------------
# page 4: why it is fast


def format_bytes(n: int) -> str:
    """Bytes in the largest unit that keeps the number >= 1: 1.4 GiB, 380 MiB, 97 KiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def _med(v) -> float:
    return float(statistics.median(list(np.atleast_1d(np.asarray(v, dtype=float)))))


@dataclass(frozen=True)
class Verdict:
    """A measured ratio and the explanation it calls for."""

    value: float
    kind: str  # a short label such as "memory-bound"
    text: str


def forward_cost_verdict(timings: Mapping[int, Sequence[float]], device: str = "cpu",
                         dtype: str = "float32") -> Verdict:
    """cost(2 tokens)/cost(1 token) and what it means on this device (claim 2 or its exception)."""
    t = {int(n): _med(v) for n, v in timings.items() if len(np.atleast_1d(v))}
    if 1 not in t or len(t) < 2:
        raise InvalidSetting("Need timings for 1 token and at least one larger pass.")
    n2 = 2 if 2 in t else min(n for n in t if n > 1)
    r2 = t[n2] / t[1]
    nmax = max(t)
    rmax = t[nmax] / t[1]
    flat = flat_until(list(t), [t[n] for n in t])
    base = (f"One target pass over 1 token took {t[1] * 1000:.1f} ms; over {n2} tokens {t[n2] * 1000:.1f} ms "
            f"({r2:.2f}×); over {nmax} tokens {t[nmax] * 1000:.1f} ms ({rmax:.2f}×), on {device} in {dtype}. ")
    cpu = not str(device).startswith("cuda")
    # a larger pass clearly cheaper than the n2-token one means the jump was noise, not the hardware
    cheaper = [n for n in t if n > n2 and t[n] < 0.8 * t[n2]]
    if r2 < 1.3:
        kind = "memory-bound"
        text = (base + f"The extra token{'s' if n2 > 2 else ''} came almost free: the pass is dominated by reading "
                "the weights, and the arithmetic for one more token hides under that read. "
                f"Costs stay within 1.25× of the 1-token pass up to about {flat:g} tokens"
                + (", so the flat part ends there: beyond it the arithmetic shows." if flat < nmax else ".")
                + " This is why the target can check k drafts in one pass for about the price of one token.")
    elif r2 >= 1.7 and not cheaper:
        kind = "compute-bound"
        why = ("On a CPU in float32, a 1-token pass is a matrix–vector product that streams the weights at "
               "memory speed, but 2 or more tokens switch to matrix–matrix kernels whose arithmetic on a few "
               "CPU cores, not the memory read, is the limit." if cpu and dtype == "float32" else
               "On this device the pass is limited by arithmetic (or by fixed per-token work) rather than by "
               "reading the weights, so extra tokens are not free."
               if cpu else
               "On a GPU this usually means the model is so small that kernel launches and per-token work "
               "dominate, or the batch is already large.")
        growth = (f" Beyond {n2} tokens the cost grew more slowly ({rmax:.2f}× at {nmax}): bigger matrix products "
                  "use the cores better." if rmax < 0.6 * nmax / n2 * r2 else "")
        text = (base + f"**The honest exception:** {n2} tokens cost about {r2:.1f}× one token instead of about 1×. "
                f"{why}{growth} Verifying k drafts then costs several 1-token passes, so speculative decoding gains "
                "much less here than the textbook says; "
                + ("try bfloat16 to compare." if dtype == "float32" else "compare with float32."))
    elif r2 >= 1.7:
        kind = "irregular"
        m = max(cheaper)
        text = (base + f"Irregular: the {n2}-token pass jumped to {r2:.2f}×, yet {m} tokens cost only "
                f"{t[m] / t[1]:.2f}×, so the jump is not the hardware. It is a one-off (a kernel chosen for a new "
                "shape, other work on this machine); measure again with more repetitions.")
    else:
        kind = "partly memory-bound"
        text = (base + "In between: an extra token is cheaper than a whole pass but not free. Part of the time "
                "is reading weights, part is arithmetic that grows with the tokens. Verification of k drafts costs "
                f"more than one pass, and the speedup model uses these measured ratios (flat up to ≈ {flat:g} "
                "tokens).")
    return Verdict(r2, kind, text)


def dtype_comparison(results: Mapping[str, Mapping[int, Sequence[float]]]) -> str:
    """Compare forward-cost timings measured in several dtypes (e.g. float32 vs bfloat16)."""
    rows = {d: {int(n): _med(v) for n, v in t.items()} for d, t in results.items()}
    rows = {d: t for d, t in rows.items() if 1 in t and len(t) > 1}
    if len(rows) < 2:
        return ""
    parts = []
    for d, t in rows.items():
        n2 = 2 if 2 in t else min(n for n in t if n > 1)
        parts.append(f"{d}: 1 token {t[1] * 1000:.1f} ms, cost({n2})/cost(1) = {t[n2] / t[1]:.2f}×")
    fastest = min(rows, key=lambda d: rows[d][1])
    slowest = max(rows, key=lambda d: rows[d][1])
    gain = rows[slowest][1] / rows[fastest][1]
    out = "; ".join(parts) + f". The 1-token pass was fastest in {fastest} ({gain:.2f}× quicker than {slowest}). "
    half = {"bfloat16", "float16"}
    if fastest in half and slowest == "float32":
        out += ("Half-size weights mean half the bytes to read, and the pass got quicker: the read is what costs.")
    elif slowest in half and fastest == "float32":
        out += ("Half-size weights halve the bytes to read, yet the pass got slower: this device lacks fast "
                "16-bit arithmetic, so converting the weights costs more than the memory saved.")
    return out


def bandwidth_verdict(check, dtype: str = "float32") -> Verdict:
    """Claim 1 checked: weight bytes ÷ bandwidth against the measured 1-token pass."""
    ratio = check.measured_s / check.predicted_s if check.predicted_s > 0 else float("nan")
    base = (f"The target's weights are {format_bytes(check.weight_bytes)} ({dtype}); this device copies memory "
            f"at {check.bandwidth / 1e9:.1f} GB/s, so reading them once should take {check.predicted_s * 1000:.1f} ms. "
            f"One 1-token forward pass measured {check.measured_s * 1000:.1f} ms: {ratio:.2f}× the prediction. ")
    small = check.weight_bytes < 64 * 2**20
    if 0.67 <= ratio <= 1.5:
        kind, text = "close", base + ("Close: time per token ≈ bytes of weights ÷ memory bandwidth holds here; "
                                      "the pass is limited by reading the weights.")
    elif ratio > 1.5:
        kind = "slower"
        why = ("The model is small enough that fixed per-layer work (Python, kernel launches) dominates, not the "
               "weight read." if small else
               "Reading the weights is not the only cost here: the arithmetic (especially float32 on a few CPU "
               "cores), attention over the cache and framework overhead add to it, and a copy benchmark is a "
               "best case that a forward pass's access pattern does not reach.")
        text = base + f"Slower than the memory bound. {why} The prediction is a lower bound, honest but not tight."
    else:
        kind = "faster"
        why = ("A model this small fits largely in the CPU caches, which are faster than main memory."
               if small else "The copy benchmark underestimated the bandwidth the model's reads get "
               "(a copy also writes, and caches or prefetching favour the model's layout).")
        text = base + f"Faster than the memory bound. {why}"
    return Verdict(ratio, kind, text)


def batch_verdict(timings: Mapping[tuple[int, int], Sequence[float]], tol: float = 1.25) -> Verdict:
    """Where the flat part of verify cost vs tokens × batch ends (claim 12)."""
    if not timings:
        raise InvalidSetting("No batch timings.")
    pts = sorted((int(n) * int(b), _med(v)) for (n, b), v in timings.items())
    flat = flat_until([p[0] for p in pts], [p[1] for p in pts], tol=tol)
    (n0, t0), (n1, t1) = pts[0], pts[-1]
    grow = t1 / t0
    text = (f"{n0} token(s) per pass took {t0 * 1000:.1f} ms; {n1} took {t1 * 1000:.1f} ms ({grow:.1f}× the time "
            f"for {n1 / n0:.0f}× the tokens). Cost stays within {tol:.2f}× of the smallest pass up to ≈ {flat:g} "
            "tokens × batch. ")
    if flat >= n1:
        text += ("All measured sizes are still in the flat part: a bigger batch would be needed to reach the point "
                 "where the target becomes compute-bound.")
    elif flat <= n0:
        text += ("There is no flat part on this device: every extra token costs time, so the target is already "
                 "compute-bound at batch 1 and speculative verification is not free here.")
    else:
        text += (f"Beyond ≈ {flat:g} tokens the pass is compute-bound: when a server already batches many users, "
                 "the drafted tokens no longer ride for free, so the larger the batch, the smaller the gain.")
    return Verdict(flat, "flat_until", text)


# ---------------------------------------------------------------------------
# page 5: exactness


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where a and b differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin(run: Run, i: int) -> tuple[float, int, int] | None:
    """Target's top-1 minus top-2 probability where token i of an autoregressive run was chosen."""
    if i >= len(run.rounds):
        return None
    top = run.rounds[i].p_top[0]
    if len(top.probs) < 2:
        return None
    return float(top.probs[0] - top.probs[1]), int(top.ids[0]), int(top.ids[1])


def exactness_verdict(spec_ids: Sequence[int], base: Run, dtype: str, decode: Decode) -> Verdict:
    """Greedy: are the speculative and target-only texts identical, and if not, why (claim 6)."""
    i = first_difference(spec_ids, base.token_ids)
    n = len(base.token_ids)
    if i is None:
        return Verdict(1.0, "identical", f"Identical: all {n} tokens match the target-only run, id for id. "
                       "Speculative decoding changed the speed, not the text.")
    if i >= min(len(spec_ids), n):
        return Verdict(0.0, "length", f"The first {i} tokens match; one run stopped earlier "
                       f"({len(spec_ids)} vs {n} tokens), at an end-of-text token or the length limit.")
    a, b = spec_ids[i], base.token_ids[i]
    m = _margin(base, i)
    s = (f"The texts match for {i} token(s), then differ at token {i + 1}: speculative {tok(a, decode)}, "
         f"target alone {tok(b, decode)}. ")
    if m is not None:
        gap, t1, t2 = m
        s += (f"There the target's top two were {tok(t1, decode)} and {tok(t2, decode)}, "
              f"{gap:.2e} apart in probability. ")
        near = gap < (2e-2 if dtype in ("bfloat16", "float16") else 1e-4)
    else:
        near = False
    s += ("This is floating point, not the algorithm: batched verification computes the k+1 positions in one "
          "matrix product, which sums in a different order than one-token steps, so logits differ in the last bits. ")
    if dtype in ("bfloat16", "float16"):
        s += (f"In {dtype} only about 3 significant digits survive, so a near-tie argmax can flip; after that the "
              "two texts continue from different tokens. In float32 this rarely happens.")
    else:
        s += ("In float32 the difference is around one part in a million, so only an almost exact tie flips.")
    if m is not None and not near:
        s += (" But this margin is not a near-tie, so rounding does not explain it: this would be a bug worth "
              "reporting.")
    return Verdict(0.0, "near-tie" if near else "differs", s)


def diff_html(ids: Sequence[int], other: Sequence[int], decode: Decode) -> str:
    """The text of `ids` as HTML with the first token that differs from `other` highlighted."""
    i = first_difference(ids, other)
    parts = []
    for j, t in enumerate(ids):
        s = html.escape(decode(int(t)), quote=False).replace("\n", "⏎<br>")
        if i is not None and j == i:
            parts.append('<span data-state="first-difference" style="background:rgba(213,94,0,0.18);'
                         'border:2px solid #D55E00;font-weight:700;border-radius:3px">'
                         f"{s or '∅'}</span>")
        elif i is not None and j > i:
            parts.append(f'<span style="color:#777">{s}</span>')
        else:
            parts.append(s)
    return ('<div style="white-space:pre-wrap;line-height:1.9;font-size:16px;'
            'font-family:ui-monospace,Menlo,Consolas,monospace">' + "".join(parts) + "</div>")


@dataclass(frozen=True)
class FirstPosition:
    """Target p, draft q and the residual at the first new position, over the whole vocabulary."""

    p: dict[int, float]  # top tokens of each, and their union
    q: dict[int, float]
    residual: dict[int, float]  # norm(max(0, p - q))
    overlap: float  # Σ min(p, q): the chance the drafted token is accepted
    temperature: float
    noise_tv: tuple[float, float] | None = None  # (mean, 95th percentile) TV of n direct samples from p


def simulate_tv_noise(p, n: int, reps: int = 200, seed: int = 12345) -> tuple[float, float]:
    """TV between p and the frequencies of n samples drawn from p itself: (mean, 95th percentile).

    This is the honest yardstick for an observed TV over a large vocabulary: the
    normal approximation behind theory.expected_tv_noise undercounts the long tail
    of rare tokens that happen to be drawn once.
    """
    import torch

    p = torch.as_tensor(p, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    tvs = []
    for _ in range(reps):
        f = torch.bincount(torch.multinomial(p, n, replacement=True, generator=g), minlength=p.numel()) / n
        tvs.append(0.5 * float((p - f).abs().sum()))
    tvs.sort()
    return float(np.mean(tvs)), float(tvs[min(len(tvs) - 1, int(0.95 * len(tvs)))])


def first_position(target, draft, input_ids: Sequence[int], temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, vocab: int | None = None, top: int = 12,
                   noise_n: int | None = None) -> FirstPosition:
    """p, q and norm(max(0, p − q)) for the first token after the prompt, under the run's settings.

    With noise_n, also the TV that noise_n direct samples from p give (simulate_tv_noise).
    """
    import torch

    from .lm import CachedLM, vocab_size
    from .sampling import logits_to_probs

    ids = list(input_ids)
    if not ids:
        raise InvalidSetting("The prompt is empty: type something for the model to continue.")
    v = vocab or min(vocab_size(target), vocab_size(draft))
    t = temperature if temperature > 0 else 1.0
    p = logits_to_probs(CachedLM(target).feed(ids, keep=1)[-1, :v].double().cpu(), t, top_k, top_p)
    q = logits_to_probs(CachedLM(draft).feed(ids, keep=1)[-1, :v].double().cpu(), t, top_k, top_p)
    r = torch.clamp(p - q, min=0.0)
    r = r / r.sum() if r.sum() > 0 else p.clone()
    keep = set()
    for x in (p, q, r):
        keep |= set(torch.topk(x, min(top, v)).indices.tolist())
    as_d = lambda x: {int(i): float(x[i]) for i in sorted(keep, key=lambda i: -float(p[i]))}  # noqa: E731
    noise = simulate_tv_noise(p, noise_n) if noise_n else None
    return FirstPosition(as_d(p), as_d(q), as_d(r), float(torch.minimum(p, q).sum()), float(temperature), noise)


def fig_first_position(fp: FirstPosition, decode: Decode, top_n: int = 12) -> go.Figure:
    """Bars of p, q and the residual at the first new position (claim 7), in the charts theme."""
    ids = sorted(set(fp.p) | set(fp.q) | set(fp.residual),
                 key=lambda i: -max(fp.p.get(i, 0), fp.q.get(i, 0), fp.residual.get(i, 0)))[:top_n]
    labels = charts._labels(ids, decode)
    fig = go.Figure()
    fig.update_layout(template=charts.TEMPLATE, barmode="group",
                      title=dict(text=f"First new token: target p, draft q and the residual "
                                      f"(chance to accept Σ min(p, q) = {fp.overlap:.2f})",
                                 subtitle=dict(text="a drafted d is kept with probability min(1, p/q); "
                                                    "otherwise the correction is drawn from norm(max(0, p − q))")),
                      xaxis_title="token (top candidates)", yaxis_title="probability",
                      meta={"overlap": fp.overlap})
    for name, m, col, pat in (("target p", fp.p, charts.P_COLOR, ""), ("draft q", fp.q, charts.Q_COLOR, ""),
                              ("residual norm(max(0, p − q))", fp.residual, charts.R_COLOR, "x")):
        fig.add_bar(x=labels, y=[m.get(i, 0.0) for i in ids], name=name, marker_color=col,
                    marker_pattern=dict(shape=pat, fillmode="overlay", fgcolor="#fff"), customdata=ids,
                    hovertemplate=f"%{{x}} (id %{{customdata}})<br>{name} = %{{y:.4f}}<extra></extra>")
    return fig


def tv_verdict(tv: float, noise: float, n: int, accepted: int | None = None, overlap: float | None = None,
               simulated: tuple[float, float] | None = None) -> str:
    """Total variation against what sampling noise alone gives with n samples.

    noise: the normal-approximation estimate (theory.expected_tv_noise);
    simulated: (mean, 95th percentile) from drawing n samples from p directly,
    which decides the verdict when given.
    """
    s = (f"Over {n} seeded trials, the total variation distance between the emitted first tokens and the target's "
         f"p is {tv:.3f}. ")
    if simulated is not None:
        mean, hi = simulated
        s += (f"Drawing {n} tokens straight from p gives {mean:.3f} on average (95% of draws below {hi:.3f}); "
              f"the quick formula says about {noise:.3f}")
        s += (", an underestimate here because many rare tokens each show up once. " if mean > 1.3 * noise else ". ")
        ok = tv <= hi
    else:
        s += f"Sampling noise alone, sampling the target directly {n} times, gives about {noise:.3f}. "
        ok = tv <= 2.0 * noise + 0.01
    if ok:
        s += "They agree within noise: the speculative output has the target's distribution, not the draft's."
    else:
        s += ("That is more than noise explains: with this many samples a gap this large points to a real "
              "difference (check top-k/top-p settings, or report it).")
    if accepted is not None and overlap is not None and n:
        s += (f" The draft's token was kept in {accepted}/{n} = {accepted / n:.3f} of the trials; the theory says "
              f"Σ min(p, q) = {overlap:.3f}.")
    return s


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


def theory_summary(alpha: float, k: int, c: float, best: tuple[int, float]) -> str:
    """The slider values in words: tokens per pass, speedup, and the best k."""
    e = expected_tokens(alpha, k)
    s = expected_speedup(alpha, k, c)
    kb, sb = best
    out = (f"With α = {alpha:.2f} and k = {k}, each target pass yields {e:.2f} tokens on average, but a round also "
           f"costs k·c = {k * c:.2f} target passes of drafting, so the speedup is {e:.2f} / (1 + {k * c:.2f}) = "
           f"**{s:.2f}×**. ")
    out += f"The best k at these α and c is **{kb}** ({sb:.2f}×)."
    if sb < 1:
        out += " Below 1×: a draft this costly or this inaccurate makes decoding slower."
    return out


def precision_rows(results) -> list[dict]:
    """One row per draft precision (experiments.precision_comparison)."""
    return [{"draft precision": r.precision, "c": _f(r.c, ".3f"), "α": _f(r.comparison.spec.alpha, ".3f"),
             "tokens per pass": _f(r.comparison.spec.tokens_per_pass, ".2f"),
             "measured speedup": f"{_f(measured_speedup(r.comparison), '.2f')}×",
             "same text as target alone": {True: "yes", False: "no", None: "sampling"}[r.comparison.identical]}
            for r in results]


def precision_verdict(results) -> str:
    """What the comparison shows, from its own numbers: the cheapest draft against the costliest."""
    ok = [r for r in results if math.isfinite(r.c)]
    if len(ok) < 2:
        return "Run at least two draft precisions to compare them."
    cheap, dear = min(ok, key=lambda r: r.c), max(ok, key=lambda r: r.c)
    s_cheap, s_dear = measured_speedup(cheap.comparison), measured_speedup(dear.comparison)
    a_cheap, a_dear = cheap.comparison.spec.alpha, dear.comparison.spec.alpha
    alpha = ("the same α" if abs(a_cheap - a_dear) < 0.005 else
             f"α {'lower' if a_cheap < a_dear else 'higher'} by {abs(a_cheap - a_dear):.2f}")
    faster = "faster" if s_cheap > s_dear else "not faster"
    return (f"The {cheap.precision} draft costs c = {cheap.c:.2f} of a target pass against {dear.c:.2f} for "
            f"{dear.precision}, with {alpha}: it measured {s_cheap:.2f}× against {s_dear:.2f}×, {faster}. "
            f"Each draft step is paid k times per round, so c weighs as much as α.")
