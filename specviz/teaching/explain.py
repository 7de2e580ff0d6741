"""What the app says in words: one owner for every sentence built from a measurement.

Round stories and decision tables, verdicts on measured figures, the time
breakdown of a run and THE acceptance-rule wording. The pages, the app and the
charts call these; each is written once and tested once (tests/test_explain.py).
Every sentence is built from the numbers it is given, never canned. Pure: no
streamlit, no models.

  ACCEPT_TEST, ACCEPT_RULE, accept_check   the sampling acceptance test, as sampling.accept_token does it
  num, tok, tok_md, format_bytes, count    numbers, tokens (tok_md inside markdown), byte counts, "3 rounds"
  rounds_are_passes                        "3 rounds = 3 target passes"
  round_summary, tree_round_summary        one round, chain or tree, in one sentence (main page, Token tree)
  round_story, zero_accept_note            one round told decision by decision (slow motion)
  round_rows                               one round's decisions as a table, arithmetic written out
  time_breakdown                           where a run's time went, against the target alone
  target_alone, BASELINE_MATTERS           what a speedup is against ("the float32 target alone"), and why it matters
  stalled_note                             the wall time left out because other threads held the cores
  shared_note                              verify passes shared with other sessions, and what each is charged
  slowed_speedup, c_disagreement           a measurement that contradicts itself: said, never taught from
  speedup_verdict, theory_summary          the cost model's prediction against a measurement
  best_k_words                             the model's best k, said to be the bound when it is
  sweep_edge_note                          a sweep's best k that is its largest: the best may lie beyond
  forward_cost_verdict, dtype_comparison, bandwidth_verdict, batch_verdict   why it is fast
  exactness_verdict, tv_verdict            greedy identity and the sampled distribution
  precision_rows, precision_verdict        draft precisions side by side (precision_rows: target precisions too)
  target_verdict, TARGET_PRECISION_HELP   a float32 and an int8 target side by side: why the int8 one gains little
  drafter_words, k_words                   the draft, and how a run chose k, as headers and captions say them
  k_used, K_DRAFTED_NOTE, K_SET_ASIDE_*    k as set against k as drafted; a recording's k against the sidebar's
  said_once                                a run's settings for its header, leaving out those its title names
  other_settings                           a kept result measured with other settings than those on screen
  gpu_advice                               a pair too small to win on a GPU, and a pair that can
  ago, baseline_note                       how long ago; where the target-alone timing came from
  shared_cost_note                         c and the pass costs given back from this server's measurement
  queue_wait                               a session's place in the device's line and its likely wait
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specviz.core import claims, measure
from specviz.core.errors import InvalidSetting
from specviz.core.limits import K_MAX
from specviz.data.records import Round, Run
from specviz.data.tree_records import TreeRound
from specviz.teaching.render import md_code, md_text, visible
from specviz.core.theory import (NOISE_SPREADS, TVNoise, expected_speedup, expected_tokens, expected_tokens_over,
                                 flat_until, round_cost)

Decode = Callable[[int], str]

# --- the acceptance rule, said one way ----------------------------------------------
# sampling.accept_token keeps a draft token d iff u·q(d) < p(d), u uniform in [0, 1): strictly less,
# the same as u < p/q without dividing by a tiny q, and (u < 1) the same as u < min(1, p/q).
ACCEPT_TEST = "u < min(1, p/q)"
ACCEPT_RULE = f"a drafted token d is kept iff **{ACCEPT_TEST}**, with u uniform in [0, 1)"
GREEDY_RULE = "a drafted token is kept iff it is the target's argmax"
# a page whose server process stopped (a replica behind nginx, or the one server restarted) reconnects as a
# new session: Streamlit's client sends its widgets' values again, nothing else of the old session survives
NEW_SESSION = ("The server this page was on stopped, so the page goes on in a new session (on another server of "
               "this room, or the same one restarted). Your settings are kept; runs and results from before are "
               "not: press Run again.")
# the sidebar's draft-precision help: what each precision did to c on a CPU (docs/precision.md, docs/performance.md)
DRAFT_PRECISION_HELP = (
    "The draft model's weights. It never changes the output (the target decides every token); it changes c, the "
    "cost of a draft step next to a target pass, and may lower α a little. On a CPU, int8 (the default there) "
    "is the cheap one: a draft step of the 0.5B draft took about 40 ms against 130–180 ms in float32 (c ≈ 0.1). "
    "int4 does the opposite here: it streams fewer bytes, but torchao's CPU int4 kernel is slow, so a draft "
    "step took about 840 ms, more than a whole target pass (c ≈ 2), and runs took 4–5 times as long as the "
    "target alone (0.20–0.26×). Fewer bytes are not faster without a fast kernel.")
MISSING = "–"  # a number that does not exist here: a cell of a row with nothing to show, a missing figure


def accept_check(u: float, ratio: float, accepted: bool, named: bool = False) -> str:
    """One sampling decision with its numbers: "0.412 < min(1, p/q) = 0.870" (≥ for a rejection)."""
    lhs = "u" if named else f"{u:.3f}"
    return f"{lhs} {'<' if accepted else '≥'} min(1, p/q) = {num(min(1.0, ratio))}"


def tok(tid: int | None, decode: Decode) -> str:
    """A token id as quoted, whitespace-visible text: ‘␣Paris’, ‘␣×12’ for twelve spaces."""
    return "∅" if tid is None else f"‘{visible(decode(int(tid)), runs=True)}’"


def tok_md(tid: int | None, decode: Decode) -> str:
    """tok for a markdown sentence: a token such as ‘**’, ‘_’, ‘`’ or ‘$’ shows as itself, not as formatting."""
    return md_text(tok(tid, decode))


def count(n: float, noun: str, plural: str | None = None) -> str:
    """A count and its noun, plural unless it is one: "1 round", "3 rounds", "2 target passes"."""
    n_text = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{n_text} {noun if n == 1 else plural or noun + 's'}"


def and_list(words: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1]))) if words else ""


def other_settings(changed: Sequence[str], button: str | None = None) -> str | None:
    """Under a kept result: the settings on screen that differ from those it was measured with (None: none do).
    button: the result is a run stepped round by round, which that button starts anew."""
    if not changed:
        return None
    which = f"a different {and_list(changed)} from the one{'s' if len(changed) > 1 else ''} above"
    if button:
        return f"This run was started with {which}; press **{button}** to start one with these."
    return f"Measured with {which}; press the button again to measure with these."


def room_columns_note(hidden: Sequence[str]) -> str:
    """Under a table that presenter mode draws with its first columns only: which columns the desk view adds."""
    names = and_list([f"“{h}”" for h in hidden])
    return f"Presenter mode shows this table's first columns, in the room's type; turn it off to see the rest: {names}."


def rounds_are_passes(n: int) -> str:
    """"3 rounds = 3 target passes": one verifying pass per round, as the step-by-step pages count them."""
    return f"{count(n, 'round')} = {count(n, 'target pass', 'target passes')}"


def num(x: float | None, spec: str = ".3f") -> str:
    """A number for the page in `spec` (3 decimals by default), 2 significant digits when tiny; ∞ / – when
    infinite or missing."""
    if x is None or not math.isfinite(x):
        return "∞" if x == math.inf else MISSING
    return f"{x:.1e}" if 0 < abs(x) < 5e-4 else format(x, spec)


CHANCE = "Σ min(p, q) = chance to accept"  # a sampling round's column


def round_rows(r: Round, decode: Decode, extra: bool = True) -> list[dict]:
    """One table row per drafted position, plus (extra=True) the token the target adds.

    q(d) and p(d). Sampling: Σ min(p, q), the chance to accept, p/q, u and the
    test u < min(1, p/q). Greedy: the target's argmax and the test draft ==
    argmax (no chance: a match is accepted for certain). Positions after the first rejection were never judged and say so.
    """
    rows = []
    for i, d in enumerate(r.drafted):
        row = {"position": i + 1, "drafted": tok(d, decode),
               "q(d)": round(r.q_drafted[i], 4), "p(d)": round(r.p_drafted[i], 4)}
        if not r.greedy:  # greedy accepts an argmax match for certain: no chance to show
            row[CHANCE] = round(r.overlap[i], 4) if i < len(r.overlap) else None
        judged = i < len(r.accepted)
        if r.greedy:
            a = r.target_argmax[i]
            row["target argmax"] = tok(a, decode)
            row["test"] = (f"draft == argmax? {'yes' if d == a else 'no'}" if judged else "not judged")
        else:
            ratio = r.ratio[i] if i < len(r.ratio) else (r.p_drafted[i] / r.q_drafted[i] if r.q_drafted[i] > 0
                                                          else math.inf)
            row["p/q"] = round(ratio, 4) if math.isfinite(ratio) else math.inf
            if judged:
                u = r.u[i]
                row["u"] = round(u, 4)
                row["test"] = accept_check(u, ratio, r.accepted[i])
            else:
                row["u"] = None
                row["test"] = "not judged"
        row["decision"] = ("accept ✓" if r.accepted[i] else "reject ✗") if judged else \
            "discarded"  # after a rejection, as the round story says
        rows.append(row)
    if extra and r.extra_kind is not None and r.extra_id is not None:
        j = r.n_accepted
        row = {"position": j + 1, "drafted": MISSING, "q(d)": None, "p(d)": None}
        if r.greedy:
            row["target argmax"] = tok(r.extra_id, decode)
        else:
            row[CHANCE] = None
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
    out.append(f"**Round {r.index + 1}** ({mode}): the draft proposed k = {count(r.k, 'token')} "
               f"{' '.join(tok_md(d, decode) for d in r.drafted) or '(none)'}; the target scored all "
               f"{r.k + 1} positions in **one** forward pass ({r.verify_s * 1000:.1f} ms; drafting took "
               f"{r.draft_s * 1000:.1f} ms)."
               + (f" This first round's passes also read the prompt ({r.prefill_tokens} earlier tokens): "
                  f"there is no separate prefill pass, so its times include that." if r.prefill_tokens else ""))
    for i, ok in enumerate(r.accepted):
        d, p, q = r.drafted[i], r.p_drafted[i], r.q_drafted[i]
        head = f"Draft #{i + 1} {tok_md(d, decode)}: q(d) = {num(q)}, p(d) = {num(p)}"
        if r.greedy:
            a = r.target_argmax[i]
            out.append(f"{head}. Greedy test: draft token == target argmax? {tok_md(d, decode)} vs "
                       f"{tok_md(a, decode)} → {'yes → **accept**' if ok else 'no → **reject**'}.")
        else:
            ratio = r.ratio[i]
            out.append(f"{head}, p/q = {num(ratio)}. Draw u = {r.u[i]:.3f}; "
                       f"{accept_check(r.u[i], ratio, ok, named=True)} → "
                       f"{'**accept**' if ok else '**reject**'}"
                       + (" (p ≥ q: always accepted)." if ok and ratio >= 1 else "."))
    if r.rejected:
        j = r.n_accepted
        left = r.k - j - 1
        if left > 0:
            out.append(f"The {left} drafts after the rejection are discarded without being judged: they were built "
                       "on a token the target refused." if left > 1 else "The draft after the rejection is discarded "
                       "without being judged: it was built on a token the target refused.")
        if r.extra_kind == "correction":
            c = r.extra_id
            if r.greedy:
                out.append(f"Correction: the target's own argmax at that position, {tok_md(c, decode)}, "
                           "read from the same pass.")
            else:
                top = r.residual_top
                shown = ", ".join(f"{tok_md(i, decode)} {p:.3f}" for i, p in zip(top.ids[:5], top.probs[:5])) \
                    if top else "–"
                rc = _prob_in(top, c)
                out.append("Correction: sampled from the residual norm(max(0, p − q)), the probability the "
                           f"target wanted more than the draft gave. Residual top: {shown}. Sampled "
                           f"{tok_md(c, decode)}" + (f" (residual probability {rc:.3f})." if rc is not None else "."))
        else:
            out.append("The correction was cut: the text reached EOS or the length limit.")
    elif r.extra_kind == "bonus":
        pb = _prob_in(r.p_top[r.k], r.extra_id) if r.k < len(r.p_top) else None
        how = "its argmax" if r.greedy else "a sample from p"
        out.append(f"All {r.k} drafts accepted: the same pass also gives the target's distribution after the "
                   f"last draft, so a **bonus** token comes free: {how}, {tok_md(r.extra_id, decode)}"
                   + (f" (p = {pb:.3f})." if pb is not None else "."))
    out.append(f"This round emitted **{len(r.emitted)}** token{'s' * (len(r.emitted) != 1)} for one target pass: "
               f"{' '.join(tok_md(t, decode) for t in r.emitted)}.")
    return out


def zero_accept_note(r: Round, decode: Decode) -> str | None:
    """Claim 5, when it happens: no draft accepted, yet the round still emits one token."""
    if r.k == 0 or r.n_accepted > 0 or len(r.emitted) == 0:
        return None
    return (f"**Zero drafts accepted, still one token ({claims.link(5)}).** "
            f"The first draft {tok_md(r.drafted[0], decode)} "
            f"was rejected, yet the round emitted {tok_md(r.emitted[0], decode)}: the pass that judged the drafts "
            "also computed the target's own distribution at that position, so the correction costs nothing "
            "extra. Every round makes progress; the worst case is one token per target pass, like plain "
            + (f"decoding, plus the {r.draft_s * 1000:.1f} ms of drafting that was wasted." if not r.prefill_tokens
               else "decoding, plus the drafting that was wasted (this first round's draft time, "
                    f"{r.draft_s * 1000:.1f} ms, also includes reading the prompt)."))


def speedup_verdict(measured: float, predicted: float | None, c: float, alpha: float) -> str:
    """Compare a measured speedup with the model's prediction, in words."""
    s = f"Measured {measured:.2f}× over {target_alone({})} at α = {alpha:.2f} and c = {c:.3f}"
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


def format_bytes(n: int) -> str:
    """Bytes in the largest unit that keeps the number >= 1: 1.4 GiB, 380 MiB, 97 KiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Verdict:
    """A measured ratio and the explanation it calls for."""

    value: float
    kind: str  # a short label such as "memory-bound"
    text: str


def forward_cost_verdict(timings: Mapping[int, Sequence[float]], device: str = "cpu",
                         dtype: str = "float32") -> Verdict:
    """cost(2 tokens)/cost(1 token) and what it means on this device (claim 2 or its exception)."""
    t = {int(n): measure.median(v) for n, v in timings.items() if len(np.atleast_1d(v))}
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
    rows = {d: {int(n): measure.median(v) for n, v in t.items()} for d, t in results.items()}
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
    pts = sorted((int(n) * int(b), measure.median(v)) for (n, b), v in timings.items())
    flat = flat_until([p[0] for p in pts], [p[1] for p in pts], tol=tol)
    (n0, t0), (n1, t1) = pts[0], pts[-1]
    grow = t1 / t0
    text = (f"{count(n0, 'token')} per pass took {t0 * 1000:.1f} ms; {n1} took {t1 * 1000:.1f} ms "
            f"({grow:.1f}× the time "
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
    i = measure.first_difference(spec_ids, base.token_ids)
    n = len(base.token_ids)
    if i is None:
        return Verdict(1.0, "identical", f"Identical: all {n} tokens match the target-only run, id for id. "
                       "Speculative decoding changed the speed, not the text.")
    if i >= min(len(spec_ids), n):
        return Verdict(0.0, "length", f"The first {i} tokens match; one run stopped earlier "
                       f"({len(spec_ids)} vs {n} tokens), at an end-of-text token or the length limit.")
    a, b = spec_ids[i], base.token_ids[i]
    m = _margin(base, i)
    s = (f"The texts match for {count(i, 'token')}, then differ at token {i + 1}: speculative {tok_md(a, decode)}, "
         f"target alone {tok_md(b, decode)}. ")
    if m is not None:
        gap, t1, t2 = m
        s += (f"There the target's top two were {tok_md(t1, decode)} and {tok_md(t2, decode)}, "
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


def tv_verdict(tv: float, noise: TVNoise, accepted: int | None = None, overlap: float | None = None) -> Verdict:
    """A measured total variation against what sampling noise alone gives with as many samples (noise:
    theory.simulate_tv_noise): kind "within noise", or "more than noise" beyond noise.limit."""
    n, reps = noise.n, len(noise.tvs)
    s = (f"Over {n} seeded trials, the total variation distance between the emitted first tokens and the target's "
         f"p is {tv:.3f}. Drawing {n} tokens straight from p, {reps} times, gives {noise.mean:.3f} on average, "
         f"give or take {noise.sd:.3f}")
    share = noise.share_at_least(tv)
    s += f" ({share:.0%} of those samplings reached {tv:.3f}). " if share >= 0.005 else ". "
    ok = tv <= noise.limit
    if tv <= noise.p95:
        s += "They agree within noise: the speculative output has the target's distribution, not the draft's."
    elif ok:
        s += ("That is higher than 95% of the samplings, as one run in 20 of a correct sampler is, and still within "
              f"noise: a wrong rule lands far beyond {noise.limit:.3f} ({NOISE_SPREADS:g} times the give-or-take "
              "above the average). Another first seed gives another draw.")
    else:
        far = (f"{(tv - noise.mean) / noise.sd:.0f} times the give-or-take above the average" if noise.sd > 0
               else "above every sampling")
        s += (f"That is {far}, beyond the {noise.limit:.3f} that noise alone almost never reaches: a real difference "
              "(check top-k/top-p settings, or report it).")
    if accepted is not None and overlap is not None and n:
        s += (f" The draft's token was kept in {accepted}/{n} = {accepted / n:.3f} of the trials; the theory says "
              f"Σ min(p, q) = {overlap:.3f}.")
    return Verdict(tv, "within noise" if ok else "more than noise", s)


def best_k_words(best: tuple[int, float], k_max: int) -> str:
    """'**5** (2.46×)'; at k_max, also that it is only the best k tried: the prediction still rises there."""
    kb, sb = best
    edge = f", the largest k tried here: the prediction still rises at k = {kb}" if kb == k_max else ""
    return f"**{kb}** ({sb:.2f}×{edge})"


def sweep_edge_note(best_k: int, k_max: int) -> str:
    """One sentence when a sweep's best k is the largest k it tried (the best may lie beyond it); else ""."""
    if best_k < k_max:
        return ""
    return (f"k = {k_max} is the largest k this sweep tried, so the best k may lie beyond it: a sweep that "
            "peaks at its edge has not shown where the speedup turns down.")


def theory_summary(alpha: float, k: int, c: float, best: tuple[int, float], k_max: int = 16) -> str:
    """The slider values in words: tokens per pass, speedup, and the best k (of 1..k_max)."""
    e = expected_tokens(alpha, k)
    s = expected_speedup(alpha, k, c)
    kb, sb = best
    out = (f"With α = {alpha:.2f} and k = {k}, each target pass yields {e:.2f} tokens on average, but a round also "
           f"costs k·c = {k * c:.2f} target passes of drafting, so the speedup over {target_alone({})} is "
           f"{e:.2f} / (1 + {k * c:.2f}) = "
           f"**{s:.2f}×**. ")
    out += f"The best k at these α and c is {best_k_words(best, k_max)}."
    if sb < 1:
        out += " Below 1×: a draft this costly or this inaccurate makes decoding slower."
    return out


def run_curve_note(k: int, ks: Sequence[int], policy: str, point: Mapping, k_from: str = "sidebar") -> str:
    """The caption under the tokens-per-pass chart when a run did not draft the k set in `k_from` in every
    round: what the dashed curve is (the formula averaged over the rounds' ks), and on which side of it the
    run's measured point (charts.measured_point: alpha, tpp, tpp_err) fell."""
    who = {"best": ", whose k the best-k chooser set", "adaptive": ", whose k the adaptive rule set"}.get(policy, "")
    lo, hi = min(ks), max(ks)
    kd = f"k = {lo} in each" if lo == hi else f"k from {lo} to {hi}, {sum(ks) / len(ks):.1f} on average"
    note = (f"The dashed curve is the same formula averaged over this run's rounds{who} ({kd}). "
            f"The solid curve is for k = {k} ({k_from}).")
    a, t, err = point["alpha"], point["tpp"], point["tpp_err"]
    if not (math.isfinite(a) and math.isfinite(t)):
        return note + " The run goes on the dashed curve once a drafted token has been judged."
    note += " The diamond is what the run measured."
    if t - (err if math.isfinite(err) else 0.0) > expected_tokens_over(min(max(a, 0.0), 1.0), ks):
        note += (" It kept more than the formula says: acceptance comes in streaks, not token by token "
                 "independently as the formula assumes"
                 + (", and k was longest where the drafts were sure." if policy != "fixed" else "."))
    return note


def precision_rows(results, label: str = "draft precision") -> list[dict]:
    """One row per draft precision (experiments.precision_comparison), or per target precision with
    label='target precision' (experiments.target_comparison)."""
    return [{label: r.precision, "c": num(r.c, ".3f"), "α": num(r.comparison.spec.alpha, ".3f"),
             "tokens per pass": num(r.comparison.spec.tokens_per_pass, ".2f"),
             "measured speedup over its target alone":
                 f"{num(measure.steady_speedup(r.comparison.spec, r.comparison.base), '.2f')}×",
             "same text as target alone": {True: "yes", False: "no", None: "sampling"}[r.comparison.identical]}
            for r in results]


def precision_verdict(results) -> str:
    """What the comparison shows, from its own numbers: the cheapest draft against the costliest."""
    ok = [r for r in results if math.isfinite(r.c)]
    if len(ok) < 2:
        return "Run at least two draft precisions to compare them."
    cheap, dear = min(ok, key=lambda r: r.c), max(ok, key=lambda r: r.c)
    s_cheap, s_dear = (measure.steady_speedup(x.comparison.spec, x.comparison.base) for x in (cheap, dear))
    a_cheap, a_dear = cheap.comparison.spec.alpha, dear.comparison.spec.alpha
    alpha = ("the same α" if abs(a_cheap - a_dear) < 0.005 else
             f"α {'lower' if a_cheap < a_dear else 'higher'} by {abs(a_cheap - a_dear):.2f}")
    faster = "faster" if s_cheap > s_dear else "not faster"
    return (f"The {cheap.precision} draft costs c = {cheap.c:.2f} of a target pass against {dear.c:.2f} for "
            f"{dear.precision}, with {alpha}: it measured {s_cheap:.2f}× against {s_dear:.2f}×, {faster}. "
            f"Each draft step is paid k times per round, so c weighs as much as α.")


def target_verdict(results) -> str:
    """Why a quantized target often shows little gain, from experiments.target_comparison's own numbers: the
    same draft costs more of a faster target's pass (c up), and speedup ≈ E[tokens] / (1 + k·c)."""
    by = {r.precision: r for r in results if math.isfinite(r.c)}
    if "float32" not in by or len(by) < 2:
        return "Run the same draft against both targets to compare them."
    ref, q = by["float32"], next(r for p, r in by.items() if p != "float32")

    def model(r) -> str:  # E[tokens] / (1 + k·c) with this run's numbers, and what it measured
        spec, k = r.comparison.spec, r.comparison.spec.decode.k
        pred = spec.tokens_per_pass / round_cost(k, r.c)
        return (f"{spec.tokens_per_pass:.2f} / (1 + {k}·{r.c:.2f}) = {pred:.2f}× "
                f"(measured {measure.steady_speedup(spec, r.comparison.base):.2f}×)")

    why = ("its passes are faster, so the same draft step costs more of one" if q.c > ref.c else
           "here its passes were not faster than the float32 target's, so the draft did not cost more of one")
    return (f"Against the {q.precision} target, {why}: c = {q.c:.2f} against {ref.c:.2f}. Speedup ≈ E[tokens] / "
            f"(1 + k·c): {model(q)} for the {q.precision} target, {model(ref)} for float32. A quantized target is "
            f"already fast, so each draft step weighs more and speculation has less left to win.")


def code_tok(tid: int, decode: Decode) -> str:
    """A token as inline code in a markdown sentence (the round summaries)."""
    return md_code(visible(decode(tid)))


def _also_read(prefill_tokens: int) -> str:
    """After a verify pass's time: that the pass also read the prompt (the first round)."""
    return f", a pass that also read the prompt's {count(prefill_tokens, 'earlier token')}" if prefill_tokens else ""


def _round_end(r: Round | TreeRound, decode: Decode, correction: str, bonus: str) -> str:
    """How a round's sentence ends: its correction or bonus token (in the words given), if it made one, and
    how many new tokens its one target pass gave."""
    words = {"correction": correction, "bonus": bonus}.get(r.extra_kind)
    extra = f", {words} {code_tok(r.extra_id, decode)}" if words else ""
    return f"{extra} → **{count(len(r.emitted), 'new token')}** for one target pass."


def round_summary(r: Round, decode: Decode) -> str:
    """One sentence on what happened in a round (markdown)."""
    if r.k == 0:
        lead = "The drafter found nothing to propose, so the target made one token itself"
        tail = f": {code_tok(r.extra_id, decode)}." if r.extra_id is not None else "."
        return f"**Round {r.index + 1}.** {lead}{tail}"
    parts = [f"**Round {r.index + 1}.** Drafted {count(r.k, 'token')} "
             f"({r.draft_s * 1000:.0f} ms), the target checked {'them all' if r.k > 1 else 'it'} in **one** pass "
             f"({r.verify_s * 1000:.0f} ms{_also_read(r.prefill_tokens)}): {r.n_accepted} accepted"]
    if r.rejected:
        parts.append(f", {code_tok(r.drafted[r.n_accepted], decode)} rejected")
    parts.append(_round_end(r, decode, "the target's correction", "all accepted so the target adds a bonus token"))
    return "".join(parts)


def tree_round_summary(r: TreeRound, decode: Decode) -> str:
    """One sentence on a tree round (markdown): what was drafted and in how many draft passes, the one
    verify pass over every node, and what it kept; with each step's time, as round_summary gives a chain's."""

    checked = "every node" if r.n_nodes > 1 else "it"
    parts = [f"**Round {r.index + 1}.** Drafted {count(r.n_nodes, 'node')} in "
             f"{count(len(r.draft_s), 'draft pass', 'draft passes')} ({sum(r.draft_s) * 1000:.0f} ms), the target "
             f"checked {checked} in **one** pass ({r.verify_s * 1000:.0f} ms{_also_read(r.prefill_tokens)}): "
             + (f"a path of {r.n_accepted} accepted" if r.n_accepted else "no node accepted")]
    parts.append(_round_end(r, decode, "then the target's correction", "to a leaf, so the target adds a bonus token"))
    return "".join(parts)


def drafter_words(precision: str, head: str = "full") -> str:
    """How the pages name the draft: its precision, and its head when the head is not the whole vocabulary
    (vocabhead's 'frequent-N')."""
    words = f"{precision} draft model"
    if head.startswith("frequent-"):
        words += (f", proposing among its {int(head.split('-', 1)[1]):,} most written tokens and the "
                  f"prompt's and the reply's own")
    return words


# the k slider's label and help while the best-k chooser picks k (the main page's sidebar)
K_CHOSEN_LIVE_LABEL = f"k per round: chosen live each round (up to {K_MAX}) · starting k"
K_CHOSEN_LIVE_HELP = ("The best-k chooser picks k live, each round, from its estimates of α, c and the verify cost, "
                      "and with the draft model it ends a round early after a doubtful draft: a round may draft 1 "
                      f"token or {K_MAX}. This slider sets only the first round's k, where the chooser starts. The "
                      "round log's 'k this round' column shows what each round drafted; choose 'fixed' above for "
                      "the same k every round.")
K_POLICY_WORDS = {"adaptive": " (adaptive)", "best": " (best-k chooser, starting k)"}  # engine k_policy -> words


K_SET_ASIDE_LABEL = "k: the live runs' setting (a recording replays with its own)"
K_SET_ASIDE_HELP = ("A recording replays exactly as it was recorded, with its own k and k policy (the caption under "
                    "the recording names them; the round log shows what each round drafted). This setting is for "
                    "live runs.")


K_DRAFTED_NOTE = ("The charts show what each round drafted: a round near the length limit, or one whose draft hit an "
                  "end token, drafts fewer than its k.")


def k_used(policy: str, k: int, mean_drafted: float) -> str:
    """A k policy's k beside its result: the setting (fixed k) or where it starts (adaptive, best k), and what a
    round drafted on average, below a fixed k where rounds met the length limit or an end token."""
    start = f"k = {k} set" if policy == "fixed" else f"k starts at {k}"
    return f"{start} · {mean_drafted:.1f} drafted a round on average"


def k_words(k: int, k_policy: str) -> str:
    """How a run's k is named in headers and captions: "k=4", or "k=4 (best-k chooser, starting k)"."""
    return f"k={k}" + K_POLICY_WORDS.get(k_policy, "")


def said_once(parts: Sequence[str], title: str = "") -> list[str]:
    """A run's settings as its header says them (["drafter: …", "k=4", "greedy", "seed 0"]), each said once: a
    replayed run's title already names some (a recording's "Python function · greedy · k=4 · <pair> (…)"), and a
    part that is one of the title's " · " pieces is left out."""
    named = {piece.strip() for piece in title.split(" · ")} if title else set()
    return [p for p in parts if p not in named]


MEASURED_TITLE = "How these figures were measured"  # the expander with the timings' bookkeeping (main page)


def run_stalled_note(run: Run, baseline: Mapping) -> str | None:
    """stalled_note for a run and its target-alone run (runfile.baseline_summary)."""
    return stalled_note(run.stalled_s, run.rounds_s, baseline.get("base_stalled_s"), baseline.get("base_decode_s"))


BASELINE_MATTERS = ("A speedup is against one baseline: against a cheaper target (an int8 one, or llama.cpp's "
                    "quantized ones on a laptop) the same draft saves less, since its steps weigh more next to a "
                    "cheaper target pass.")


def target_alone(baseline: Mapping, dtype: str | None = None) -> str:
    """What a comparison's speedups are against: "the float32 target alone" (runfile.baseline_summary's target; a
    file that does not say: the run's dtype)."""
    name = baseline.get("target") or dtype
    return f"the {name} target alone" if name else "the target alone"


def time_breakdown(run: Run, baseline: Mapping, precision: str | None = None, waits: bool = True,
                   profile_c: float | None = None) -> str | None:
    """Where the time went after the first round (whose passes also read the prompt), against the target
    alone (runfile.baseline_summary): verify pass, one-token pass, draft step and this run's c (measure's), beside
    the profile's c (profile_c: single steps timed apart, what the lessons and the Speedup page quote) where
    given. None when there is nothing to break down. waits: end with the waits left out (run_stalled_note); the main page
    draws those apart, with the rest of its bookkeeping."""
    steady = run.steady_rounds
    passes = baseline.get("base_target_passes")
    if not steady or not passes:
        return None
    v_ms = 1000 * measure.median(r.verify_s for r in steady)
    b_ms = 1000 * (baseline.get("base_step_s") or (baseline.get("base_decode_s") or 0.0) / passes)
    out = (f"Where the time went, after the first round (whose passes also read the prompt): a verification "
           f"pass (k+1 tokens at once) took {v_ms:.0f} ms (median), a one-token pass of the target alone "
           f"{b_ms:.0f} ms")
    steps = [s for r in steady if (s := measure.draft_step_s(r)) is not None] if run.draft_passes else []
    if steps and b_ms > 0:
        d_ms = 1000 * measure.median(steps)
        c = measure.c_ratio(steps, b_ms / 1000)
        beside = "" if profile_c is None else f"; the profile's c, from single steps timed apart: {profile_c:.2f}"
        out += (f"; each round also ran up to k draft passes of {d_ms:.0f} ms "
                f"(this run's c = {c:.2f} of a target pass{f', {precision} draft' if precision else ''}{beside})")
    out += ". Tokens per pass is not speedup: see the Speedup page for the cost model."
    waited = run_stalled_note(run, baseline) if waits else None
    return out + (f" {waited}" if waited else "")


def profile_note(run: Run, baseline: Mapping, profile, load=None) -> str | None:
    """Where this run's own c (its draft steps against its target-alone one-token passes) parts from the
    profile's (teaching.costs.Cost) by more than both timings' spread allows (measure.c_disagree): the sentence
    that says so, and the likeliest cause; None when they agree or either is missing. load: the run's
    outside-load note (data.playback.load_note)."""
    steps = [s for r in run.steady_rounds if (s := measure.draft_step_s(r)) is not None] if run.draft_passes else []
    step = baseline.get("base_step_s")
    if profile is None or not steps or not step or not profile.draft_s:
        return None
    if not measure.c_disagree((profile.draft_s, profile.target_s), (steps, [float(step)])):
        return None
    run_c = measure.c_ratio(steps, float(step))
    context = len(run.prompt_ids) + len(run.token_ids) // 2
    if load is not None:
        cause = "part of this run ran under outside load"
    elif context > 2 * profile.context:
        cause = (f"this run read about {context} tokens of context, the profile's passes {profile.context}: "
                 "longer contexts cost more per pass")
    else:
        cause = ("a run's draft steps also carry what single timed steps leave out (choosing the token, the "
                 "queue between steps), and a short run's first steps are still warming up")
    return (f"This run's c = {run_c:.2f} differs from the profile's c = {profile.c:.2f} (single steps timed "
            f"apart) by more than their timings' spread: {cause}. The lessons and the Speedup page quote the "
            "profile's.")


STALLED_SHARE = 0.05  # waits for a core are mentioned once they were this share of the time counted


def stalled_note(run_s: float, run_timed_s: float, base_s=None, base_timed_s=None, *,
                 what: str = "the run") -> str | None:
    """The sentence that says how much wall time was left out of a run's times (and its target-alone run's)
    because other threads held the cores (clock.PassTime.stalled); None when it was under STALLED_SHARE of
    the time counted. `what` names the timed work (the bench: "the generations")."""
    def num(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def secs(v: float) -> str:
        return f"{v:.1f} s" if v >= 1 else f"{1000 * v:.0f} ms"

    parts = []
    if num(run_s) and num(run_timed_s) and run_s >= STALLED_SHARE * run_timed_s and run_s > 0:
        parts.append(f"{secs(run_s)} of {what}")
    if num(base_s) and num(base_timed_s) and base_s >= STALLED_SHARE * base_timed_s and base_s > 0:
        parts.append(f"{secs(base_s)} of the target alone")
    if not parts:
        return None
    return (f"Not counted: {' and '.join(parts)}, while other work held the cores the model's threads were "
            "waiting for (other programs on this machine, or other sessions' pages drawn by this server). The "
            "times shown are what the passes took less those waits.")


def shared_note(rounds: Sequence) -> str | None:
    """The sentence that says how many of a run's verify passes were shared with other sessions in one forward
    pass (decoding/pool.py) and what each was charged; None when none was (tree rounds never are)."""
    shared = [n for r in rounds if (n := getattr(r, "shared", 1)) > 1]
    if not shared:
        return None
    return (f"{len(shared)} of this run's {len(rounds)} verify passes were shared with other sessions in one "
            f"forward pass (up to {max(shared)} at once); each is charged the measured time of a pass of its "
            "own on this device.")


def gpu_advice(device: str, speedup: float | None, suggestion=None) -> str | None:
    """Why a pair lost on a GPU and which pair to try (suggestion: a config.PairSpec, models.gpu_suggestion);
    None off a GPU or when speculation paid."""
    if not str(device).startswith("cuda") or speedup is None or not math.isfinite(speedup) or speedup >= 1:
        return None
    text = (f"**On a GPU this pair is too small to win** ({speedup:.2f}× {target_alone({})} here). A small model's "
            "pass on a GPU is "
            "bound by launching its few hundred kernels one after another, not by reading its weights, so a "
            "draft step costs nearly as much as a target pass whatever their sizes, and k of them eat the gain.")
    if suggestion is None:
        return text + " A draft pays on a GPU when its target is many times larger: add such a pair to models.yaml."
    return (text + f" A draft pays when its target is many times larger: try the pair **{suggestion.name}** "
            f"({suggestion.draft.label} drafting for {suggestion.target.label}), whose target's pass is long "
            "enough for the draft's to be cheap beside it.")


def ago(seconds: float) -> str:
    """A time before now in words: "just now", "40 s ago", "2 min ago", "1 h ago"."""
    if seconds < 5:
        return "just now"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def slowed_speedup(speedup: float, bound: float) -> str:
    """A speedup above what its passes allow (measure.beyond_pass_bound), still so when timed again."""
    return (f"This speedup ({speedup:.2f}×) is more than the passes allow: with {bound:.2f}× fewer target passes "
            f"than the target alone, it can be at most about {bound:.2f}×. One of the two timings was slowed, most "
            "often the target alone by other work on this machine, and it stayed so when timed again: it is a "
            "faulty measurement, not a result to learn from. Run it again when the machine is quieter.")


def c_disagreement(c_steps: float, c_runs: float, where_runs: str = "the runs") -> str:
    """Two measurements of one draft's c, on one device a moment apart, that part by more than their timings
    allow (measure.c_disagree), still so after the single steps were timed again."""
    return (f"Two measurements of c for the same draft disagree: {c_steps:.3f} from single steps timed apart, "
            f"{c_runs:.3f} from {where_runs}, further apart than their timings' spread allows even after the "
            "single steps were timed again. One of them was slowed by other work on this machine: neither is "
            "this draft's cost, and the figures built on c here are not a result to learn from. Measure again "
            "when the machine is quieter.")


def live_follows(title: str) -> str:
    """The line over the recording a Run shows while its models load: the live run follows, and about when."""
    return (f"While the models load, the recording of these settings made with this pair: {title}. The live run "
            "follows here on its own: loading from the cache takes under a minute; the first start prepares the "
            "models once, about three minutes to the first live round on a 2-core CPU (docs/performance.md).")


def recorded_speedup(baseline: Mapping, dtype: str | None, recorded_at: str) -> str:
    """That recording's speedup, said as recorded (the live run measures its own)."""
    return (f"Recorded speedup over {target_alone(baseline, dtype)}: {float(baseline['speedup']):.2f}×"
            + (f" ({recorded_at})" if recorded_at else "") + ".")


def shared_cost_note(age_s: float) -> str:
    """Section 1's c and pass costs given back from this machine's profile (teaching.costs: kept in this
    server, or on disk for the same machine and models)."""
    return (f"This machine's profile, measured {ago(age_s)} for this target and draft and kept: the lessons and "
            "this page quote the same timing of c, so they cannot disagree about it. It is measured again after a "
            "week, or now with **Measure again**.")


def recorded_profile_note(ident: Mapping[str, str]) -> str:
    """A recorded page's c and pass costs: the profile of the sitting its recordings were made in."""
    where = ", ".join(v for v in (ident.get("cpu"), ident.get("cores") and f"{ident['cores']} cores",
                                  ident.get("target_precision") and f"{ident['target_precision']} target") if v)
    return ("The profile of the recorded set: c and the pass costs timed once, in the sitting that made every "
            f"recording{f' ({where})' if where else ''}. Every recorded page and lesson quotes it.")


def baseline_note(reused_age_s: float | None) -> str:
    """Where a run's target-alone timing came from: measured right after it, or (reused_age_s: its age)
    measured earlier on this server for a run with the same target, prompt and settings, and reused."""
    if reused_age_s is None:
        return "measured right after the run, warmed up, same settings"
    return (f"measured {ago(reused_age_s)} on this server and reused for this run: the same target, prompt and "
            "settings give the same text, so this device's timing of it is not repeated")


def queue_wait(ahead: int, estimate_s: float | None = None) -> str:
    """The notice of a session waiting for the device: its place (ahead: other sessions before it; 0, the
    device is busy) and, when known, the wait: one turn of each before it, as long as their last ones
    (devqueue.DeviceQueue.wait_estimate)."""
    who = f"{count(ahead, 'session')} ahead of you" if ahead else "the device is busy"
    wait = (f", about {estimate_s:.1f} s by their last turns on the device" if estimate_s is not None and ahead
            else "")
    return (f"Waiting for the device: {who}{wait}. The device runs one piece of model work at a time, in turn, "
            "so every figure here counts only this session's own time on it.")


def recording_offer(title: str, pair: str, href: str) -> str:
    """What a session waiting for the device may watch meanwhile: the shipped recording of its run's prompt and
    settings (runfile.matching_recording), opened in a new tab, while the live run keeps its place."""
    made = f", recorded on {md_text(pair)}" if pair else ""
    return (f"Meanwhile, [watch the recorded run of these settings]({href}) ({md_text(title)}{made}) in a "
            "new tab, with no model. This run keeps its place in line and goes on here.")


def recording_words(about: Mapping[str, str], settings: Mapping, fell_back: bool = False) -> str:
    """The notice above a page drawn from a recording: that it is one, made on which pair and device, with which
    settings, and when (all from the file). fell_back: the source was live, but no model could be used here."""
    why = "No model can be used here, so this page" if fell_back else "This page"
    where = ", ".join(v for v in (about.get("device"), about.get("dtype")) if v)
    draft = f", {about['draft_precision']} draft" if about.get("draft_precision") else ""
    when = f", recorded {about['recorded_at']}" if about.get("recorded_at") else ""
    made = f"{about.get('pair') or 'an unnamed pair'} ({where}{draft}){when}"
    shown = "; ".join(f"{k} {_setting_text(v)}" for k, v in settings.items())
    return (f"{why} shows a **recording** of its default experiment, made on {made}. Settings: {shown}. "
            "Nothing is computed now: choose **Live** in the sidebar to run it on a loaded pair.")


def not_recorded(why: str) -> str:
    """A section a page recording leaves out, and why (why: a sentence)."""
    return f"Recorded mode does not cover this section: {why} Choose **Live** in the sidebar to run it."


def _setting_text(v) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(_setting_text(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


# --- the memory budget ------------------------------------------------------------------------------------------------
def budget_words(budget) -> str:
    """Where the memory budget (memory.Budget) comes from, e.g. '7.2 GiB (the cgroup limit; 12.0 GiB available)'."""
    size = format_bytes(budget.bytes)
    if budget.source == "SPECVIZ_MEMORY_GB":
        return f"{size} (set by SPECVIZ_MEMORY_GB)"
    if budget.source == "cgroup limit":
        return f"{size} (the container's memory limit; {format_bytes(budget.available)} is available on the machine)"
    return f"{size} ({budget.source})"


def over_budget(refusal) -> str:
    """Why a model load is refused (memory.Refusal): it does not fit the budget, even with every unused model
    unloaded; what holds the rest, and what to do."""
    text = (f"Not loaded: {refusal.what} needs about {format_bytes(refusal.need)} more, and the memory budget is "
            f"{budget_words(refusal.budget)}, of which the models loaded already hold {format_bytes(refusal.held)}.")
    if refusal.in_use:
        text += (f" {and_list(list(refusal.in_use))} {'is' if len(refusal.in_use) == 1 else 'are'} in use by a "
                 f"running session, so {'it stays' if len(refusal.in_use) == 1 else 'they stay'} loaded until "
                 f"that run ends.")
    return text + (" Pick a smaller choice (bfloat16, an int8 draft, a smaller pair), or set SPECVIZ_MEMORY_GB "
                   "higher if this machine has the memory.")


def config_words(pair: str, dtype: str, precision: str, target_precision: str = "float32") -> str:
    """A configuration as the app names it: 'qwen2.5-coder-embedded (float32, int8 draft)', and ', int8 target'
    inside the brackets for an int8 target."""
    target = "" if target_precision == "float32" else f", {target_precision} target"
    return f"{pair} ({dtype}, {precision} draft{target})"


TARGET_PRECISION_HELP = ("The target's weights. float32 is the reference. int8 holds a quarter of the weight "
                         "bytes and makes each target pass faster; it is exact too (each token's activations are "
                         "quantized on their own), so speculative text equals this int8 target's own text, which "
                         "may differ from the float32 target's. It needs dtype float32 on a CPU.")


def fitting_choice(wanted: str, wanted_need: int, chosen: str | None, chosen_need: int, budget) -> str:
    """Why the page starts with another configuration than the default: the default does not fit the budget."""
    head = f"{wanted} needs about {format_bytes(wanted_need)}, more than the memory budget of {budget_words(budget)}"
    if chosen is None:
        return head + "; no configuration of this pair fits. Pick a smaller pair, or set SPECVIZ_MEMORY_GB."
    return head + f", so this page starts with {chosen} (about {format_bytes(chosen_need)})."


STOP_LABEL = "Stop"
STOP_HELP = ("Stop after the step running now. What was finished before it is kept and shown; the rest is not "
             "measured.")


def stopped_note(done: int, total: int, unit: str, plural: str | None = None) -> str:
    """What a page says next to a measurement stopped part way (core.progress: its units done of total)."""
    if done <= 0:
        return f"Stopped before the first {unit} was finished: nothing was measured."
    return (f"Stopped after {count(done, unit, plural)} of {total}: what is shown below is what was finished "
            "before the stop.")

LESSON_STOPPED = ("Stopped before the answer was measured. The runs this step finished are kept: **Run the "
                  "experiment** goes on from them.")
