"""The main page's drawing: the run's head line, text, metrics and round log (live while it animates),
then the chosen round, acceptance and speed. Reads a playback.Playback; computes nothing itself."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from pages.common import lab_ui, ui
from specviz.teaching import baseline, charts, costs, explain, render
from specviz.core import claims, measure
from specviz.decoding import models
from specviz.data import playback, runfile
from specviz.core.errors import SpecvizError

S = st.session_state
LOG_TAIL = 30  # rounds in the round log while animating (the whole log is drawn at the end)
# presenter mode draws the round log in the room's type (ui.table), its last this many rows: a dataframe's canvas
# scrolls, but its 14-pixel type does not grow, and any round can be picked by number below the log
PRESENTER_LOG_ROWS = 50


def fmt(v: float | None, spec: str = ".2f") -> str:
    """A metric's number: explain.num, two decimals unless told."""
    return explain.num(v, spec)


def decoder(job: playback.Playback):
    """id -> text for this job: its tokenizer (live) or its token table (files, recordings)."""
    if "decode" not in job.meta:
        job.meta["decode"] = runfile.table_decoder(job.meta.get("tokens") or {})
    return job.meta["decode"]


def _on_log_select() -> None:
    rows = S["main.log"].selection.rows
    if rows:
        S["main.round_no"], S["main.follow"] = rows[0] + 1, False


def _on_round_no() -> None:
    S["main.follow"] = False


@dataclass
class Placeholders:
    """The places the animation redraws after every round."""

    head: Any
    text: Any
    status: Any
    metrics: Any
    log: Any

    @classmethod
    def create(cls) -> "Placeholders":
        st.markdown(render.legend_html(), unsafe_allow_html=True)
        return cls(st.empty(), st.empty(), st.empty(), st.empty(), st.empty())

    def head_line(self, job: playback.Playback) -> None:
        m, s = job.meta, job.decode
        title = "" if m.get("origin") == "live" else (m.get("title") or m.get("origin"))
        if m.get("origin") == "live":
            where = f"{'live' if job.source == 'live' else 'replay'} · {m['pair']} · {job.device}, {job.dtype}"
        else:  # the title may come from an uploaded file: shown as plain text, never as markdown
            where = f"replay of {render.md_text(title)} · no model loaded"
        mode = "greedy" if s.greedy else f"temperature {s.temperature}, top-p {s.top_p}"
        drafter = render.md_text(m.get("drafter") or job.settings.get("drafter", ""))
        settings = explain.said_once([f"drafter: {drafter}", explain.k_words(s.k, s.k_policy), mode,
                                      f"seed {s.seed}"], title)  # what a replay's title names is said once
        total = f"/{job.total}" if job.total else ""
        self.head.caption(f"**{where}** · " + " · ".join(settings) + f" · round {len(job.rounds)}{total}"
                          + (" · ✔ finished" if job.done else ""))

    def tokens(self, job: playback.Playback, pending=None) -> None:
        rounds = job.rounds if pending is None else job.rounds[:-1]
        self.text.markdown(render.tokens_html(job.prompt_text, rounds, decoder(job), pending=pending,
                                              reply=job.reply), unsafe_allow_html=True)

    def numbers(self, run) -> None:
        with self.metrics.container():
            metrics(run)

    def round_log(self, run, job: playback.Playback, last: int | None = None) -> None:
        with self.log.container():
            st.subheader("Round log")
            rows = render.round_log_rows(run, decoder(job), last=last)
            if ui.presenter():  # on a projector: the room's type
                shown = rows[-PRESENTER_LOG_ROWS:]
                part = (f" The last {len(shown)} of {len(rows)} rounds (rounds {shown[0]['round']}–"
                        f"{shown[-1]['round']})." if len(shown) < len(rows) else "")
                # the notes (round 1 read the prompt) go above the table: as a column in the room's type they
                # would run past a 1024-pixel projector's edge
                notes = "".join(f" Round {r['round']}: {note}." for r in shown if (note := r.pop("note")))
                pick = " Type a round number below to see that round's probabilities." if last is None else ""
                st.caption("One row per round: one target forward pass each." + part + pick + notes)
                ui.table(pd.DataFrame(shown), hide_index=True)
            elif last is None:  # the finished log: a row can be chosen
                st.caption("One row per round: one target forward pass each. Click a row (or type a round number "
                           "below) to see that round's probabilities.")
                ui.table(pd.DataFrame(rows), key="main.log", on_select=_on_log_select,
                         selection_mode="single-row", hide_index=True, width="stretch",
                         height=ui.table_height(len(rows)))
            else:
                ui.table(pd.DataFrame(rows), hide_index=True, width="stretch", height=ui.table_height(len(rows)))


def metrics(run) -> None:
    c = ui.metric_cells(5)
    c[0].metric("α (per-token acceptance)", fmt(run.alpha),
                help="α = accepted ÷ drafted tokens the target JUDGED. A rejection ends the round, so "
                     "drafts after it are never judged. This is the α of E[tokens] = (1 − α^(k+1)) / (1 − α).")
    c[0].caption(f"α = accepted / judged = {run.n_accepted} / {run.n_judged}")
    c[1].metric("accepted ÷ drafted", fmt(run.acceptance_rate),
                help="Counts every drafted token, including those thrown away after a rejection: always ≤ α.")
    c[1].caption(f"accepted / drafted = {run.n_accepted} / {run.n_drafted}")
    c[2].metric("tokens per target pass", fmt(run.tokens_per_pass),
                help="New tokens ÷ target forward passes (one per round; the first round's pass also reads "
                     "the prompt). Plain decoding gets exactly 1.")
    c[2].caption(f"new tokens / target passes = {len(run.token_ids)} / {run.target_passes}")
    c[3].metric("new tokens", len(run.token_ids))
    c[3].caption(f"{len(run.rounds)} rounds" + (f", stopped by {run.stop_reason}"
                                               if run.stop_reason != "running" else ""))
    c[4].metric("tokens / s", fmt(run.tokens_per_s, ".1f"),
                help="Wall-clock speed of this run, reading the prompt included (the first round's passes "
                     "do it; replays show the recorded timings).")
    c[4].caption(f"decode {run.decode_s:.2f} s (draft {run.draft_s:.2f} s, verify {run.verify_s:.2f} s)"
                 + (f" · ⚠ {explain.count(run.outside_load_rounds, 'round')} under outside "
                    "load" if run.outside_load_rounds else ""))


def _first_drawn(job: playback.Playback) -> None:
    if job.source == "live" and "t_first_draw" not in job.meta:
        job.meta["t_first_draw"], job.meta["first_wait_s"] = playback.now(), job.waited_s


def animate(job: playback.Playback, steps: int | None, speed: str, ph: Placeholders) -> bool:
    """Advance `job` by `steps` rounds (None: to the end), drawing each; True if any round was drawn."""
    pend_s, after_s = playback.SPEEDS.get(speed, playback.SPEEDS[playback.DEFAULT_SPEED])
    advanced, drawn_at, draw_cost = False, -1.0, 0.0
    for rnd in playback.play(job, steps):
        advanced = True
        # with no pause to show ("instant"), skip drawing while the last drawing's cost has not yet
        # passed: drawing takes at most half the time, so a long run renders in linear time
        if pend_s == after_s == 0 and not job.done and playback.now() - drawn_at < draw_cost:
            continue
        # drafted tokens first, pending; then the target's verdict (each drawn in a turn, apart from
        # other sessions' model work; the pauses between are not)
        if rnd.k and pend_s > 0:
            with ui.drawing():
                ph.head_line(job)
                ph.tokens(job, pending=rnd)
                _first_drawn(job)
                ph.status.info(f"Round {rnd.index + 1}: the drafter proposed {explain.count(rnd.k, 'token')} "
                               f"({rnd.draft_s * 1000:.0f} ms) — pending the target's verdict from one forward "
                               "pass…", icon=":material/hourglass_top:")
            playback.sleep(pend_s)
        with ui.drawing():
            t_draw = playback.now()
            ph.head_line(job)
            ph.tokens(job)
            _first_drawn(job)
            ph.status.markdown(explain.round_summary(rnd, decoder(job)))
            partial = job.current_run()
            ph.numbers(partial)
            ph.round_log(partial, job, last=LOG_TAIL)
            drawn_at = playback.now()
            draw_cost = drawn_at - t_draw
        playback.sleep(playback.after_pause(rnd.index, after_s))
    return advanced


PQ_HEIGHT = 400  # p-vs-q charts a little shorter than the theme's, as up to PQ_CHARTS_MAX stand one under another
PQ_CHARTS_MAX = 6  # a round that drafted more shows one position at a time: a best-k round of 27 drew 27 charts


def round_detail(job: playback.Playback) -> None:
    """The round chosen in the log (or by number): its decisions and p against q at each drafted position."""
    dec, n = decoder(job), len(job.rounds)
    if S.get("main.follow", True) or not isinstance(S.get("main.round_no"), int):
        S["main.round_no"] = n
    S["main.round_no"] = min(max(int(S["main.round_no"]), 1), n)
    sel = int(st.number_input(f"Round to inspect (1–{n})", min_value=1, step=1, key="main.round_no",
                              on_change=_on_round_no))
    sel = min(max(sel, 1), n)
    r = job.rounds[sel - 1]
    st.subheader(f"Round {sel} in detail")
    st.markdown(explain.round_summary(r, dec))
    st.markdown(render.tokens_html("", [r], dec), unsafe_allow_html=True)
    if not r.k:
        st.info("The drafter proposed nothing this round (prompt lookup found no match), so the target made one "
                "token on its own: even so, every round makes progress.")
        return
    st.caption("For each drafted position: the target's distribution p against the draft's q. The overlap "
               "Σ min(p, q) is the chance that a sampled draft token is accepted. "
               + (f"Greedy (temperature 0): {explain.GREEDY_RULE}." if r.greedy
                  else f"Sampling: {explain.ACCEPT_RULE}."))
    ui.table(pd.DataFrame(explain.round_rows(r, dec, extra=False)), hide_index=True, width="stretch")
    positions = list(range(r.k))
    if (ui.presenter() and r.k > 1) or r.k > PQ_CHARTS_MAX:  # one chart at a time, from the decisive one
        first = r.n_accepted if r.rejected else r.k - 1  # the first refused draft, or the last one drafted
        positions = [st.select_slider("drafted position", positions, value=first, format_func=lambda i: str(i + 1),
                                      key=f"main.pq_pos.{sel}.{r.k}",
                                      help="p against q at one drafted position; it starts at the first refused "
                                           "draft (or the last one, when all were kept).")]
    for i in positions:
        ui.show_chart(charts.fig_pq(r, i, dec, height=PQ_HEIGHT), f"round{sel}-pq-{i + 1}", key=f"main.pq.{i}")
    if r.rejected:
        ui.show_chart(charts.fig_residual(r, dec), f"round{sel}-residual", key="main.residual")


def acceptance(run, k: int) -> None:
    """α over the run, the expected-tokens curve for the sidebar's k, and k per round when it varied."""
    st.subheader("Acceptance")
    if ui.presenter():  # on a projector: one chart at a time, in tabs
        tab_alpha, tab_curve, tab_k = st.tabs(["α over the run", "tokens per pass", "k per round"])
    else:
        tab_alpha = tab_curve = tab_k = st.container()
    with tab_alpha:
        ui.show_chart(charts.fig_alpha_trace(run), "alpha-trace", key="main.alpha_trace")
    run_k = run.decode.k
    fixed = run.decode.k_policy == "fixed"
    same_k = run_k == k and fixed
    run_ks = [] if same_k else run.k_per_round  # the dashed curve: the formula over these rounds
    varying_k = not fixed or len(set(run.k_per_round)) > 2
    if ui.presenter():
        c1, c2 = tab_curve, (tab_k if varying_k else None)
        if c2 is None:
            tab_k.caption(f"k was {run_k} in every round of this run.")
    else:
        c1, c2 = st.columns(2) if varying_k else (st.container(), None)
    width = charts.HALF_WIDTH if varying_k and not ui.presenter() else charts.SUBTITLE_WIDTH  # the titles' lines
    with c1:
        point = charts.measured_point(run)
        ui.show_chart(charts.fig_expected_tokens(k, point, run_ks=run_ks, width=width), "expected-tokens",
                      key="main.expected")
        if run_ks:
            st.caption(explain.run_curve_note(k, run_ks, run.decode.k_policy, point))
        else:
            st.caption(f"Measured at temperature {run.decode.temperature}: α depends on the "
                       "temperature and on the prompt's domain (code and lists accept well, creative text "
                       "poorly). Change them and run again; the curve follows k in the sidebar.")
    if c2 is not None:
        with c2:
            ui.show_chart(charts.fig_k_trace(run, width), "k-trace", key="main.k_trace")


def _baseline(job: playback.Playback) -> None:
    """Time the target alone once, after a finished live run that asked for it.

    The target-alone run is a stream kept with the run: a rerun in the middle of it (a widget touched,
    another session's turn) goes on from the token it reached instead of starting again. One this server
    measured for the same target, prompt and settings is reused instead (baseline.shared_target_alone)."""
    if not (job.source == "live" and job.done and job.run is not None and job.meta.get("baseline_wanted")
            and "baseline" not in job.meta):
        return
    lock = job.meta.setdefault("baseline_lock", threading.Lock())  # one script thread at a time
    try:
        with st.spinner("Timing the target alone with the same settings (one token per forward pass)…"), lock:
            if "baseline" in job.meta:  # another script thread finished it while this one waited
                return
            # the run's own pair (loaded already), its target in the run's precision; after prompt lookup, the
            # pair in its dtype: no draft copy
            pair = ui.load_pair_cached(job.meta["pair"], job.meta["dtype"],
                                       job.meta.get("draft_precision") or job.meta["dtype"],
                                       job.meta.get("target_precision"))
            # a run this server measured with the same target, prompt and settings is reused (no model work)
            got = baseline.shared_target_alone(pair.target, job.run, pair.shared_vocab,
                                               stream=job.meta.get("baseline_stream"),
                                               started=lambda s: job.meta.__setitem__("baseline_stream", s))
            if measure.beyond_pass_bound(job.run, got.run):  # a slowed timing, the target alone's most often
                got = baseline.shared_target_alone(pair.target, job.run, pair.shared_vocab, warm=False, fresh=True)
            job.meta["baseline"] = runfile.baseline_of(job.run, got.run, job.meta.get("target_precision"))
            job.meta["baseline_note"] = explain.baseline_note(got.age_s() if got.reused else None)
            job.meta.pop("baseline_stream", None)
    except (SpecvizError, MemoryError) as e:
        job.meta.pop("baseline_stream", None)
        job.meta["baseline"] = None
        ui.show_error(e)


def _latency(job: playback.Playback) -> None:
    if not (job.source == "live" and job.rounds and "t_first_draw" in job.meta):
        return
    first_s = job.meta["t_first_draw"] - job.meta["t_run"]
    work_s = (job.run.prefill_s if job.run else 0.0) + job.rounds[0].round_s
    load_s = job.meta.get("load_s", 0.0)
    wait_s = job.meta.get("first_wait_s", 0.0)
    st.caption(f"First round on screen {first_s:.1f} s after Run was pressed: {work_s:.1f} s of model work "
               f"(reading the prompt, drafting, one verification pass)"
               + (f" and {load_s:.1f} s loading the models" if load_s >= 0.1 else "") + "."
               + (f" It waited {wait_s:.1f} s for the device while other sessions had their turn."
                  if wait_s >= 0.1 else ""))


def _bookkeeping(job: playback.Playback, base: dict, load) -> None:
    """What the timings left out (waits for a core), a light outside load and the verify passes shared with
    other sessions, in a collapsed expander: still on the page, out of the way of the figures."""
    waited = explain.run_stalled_note(job.run, base) if job.run is not None else None
    shared = explain.shared_note(job.run.rounds) if job.run is not None else None  # verify passes shared
    if waited is None and load is None and shared is None:
        return
    with st.expander(explain.MEASURED_TITLE):
        lab_ui.load_warning(load)
        for note in (waited, shared):
            if note:
                st.caption(note)


def _identity(job: playback.Playback, base: dict) -> None:
    if base.get("identical") is True:
        st.success("Greedy: **identical text** to the target alone, token for token "
                   f"({claims.link(6)}: speculative decoding changes the speed, not the output).")
    elif base.get("identical") is False:
        i = base.get("first_difference")
        bt = base.get("base_token_ids") or []
        st.warning(
            f"Greedy, but the text differs from the target alone from token {i + 1 if i is not None else '?'} on. "
            "This is floating-point, not the algorithm: verification scores k+1 tokens in one batched pass, "
            "which adds up the same numbers in a different order than one-token steps. When two candidates "
            f"are nearly tied, the argmax can flip — much more often in bfloat16 (this run: {render.md_text(job.dtype)}). "
            "See the Exactness page.")
        if i is not None:
            dec = decoder(job)
            a = "".join(dec(t) for t in job.current_run().token_ids[max(0, i - 8):i + 8])
            z = "".join(dec(t) for t in bt[max(0, i - 8):i + 8])
            st.code(f"speculative : …{a}…\ntarget alone: …{z}…", language=None)
    else:
        st.caption("Sampling mode: the texts differ by design (different random draws); the *distribution* is "
                   "the target's — see the Exactness page.")


def speed(job: playback.Playback) -> None:
    """The run against the target alone: tokens/s, measured speedup, where the time went, identity.

    The target alone is timed first (model work), then the rest is drawn in a turn (ui.drawing())."""
    st.subheader("Speed: speculative vs. the target alone")
    _baseline(job)
    with ui.drawing():
        _speed_figures(job)


def _profile(job: playback.Playback):
    """The profile a run's c is held against: this machine's kept one for a live run's pair (never timed here),
    the recorded set's for a shipped recording of its pair; else None."""
    if job.meta.get("origin") == "live":
        return costs.load_profile(job.meta["profile_ident"]) if job.meta.get("profile_ident") else None
    got = costs.recorded_profile() if job.meta.get("origin") == "recording" else None
    return got if got is not None and got.ident.get("pair") == job.meta.get("pair") else None


def _speed_figures(job: playback.Playback) -> None:
    base = job.meta.get("baseline")
    _latency(job)
    if not job.done:
        st.caption("Shown when the run has finished.")
        return
    if not base:
        st.caption("Timing of the target alone is off (sidebar checkbox)."
                   if job.meta.get("origin") == "live" and not job.meta.get("baseline_wanted")
                   else "No timing of the target alone for this run.")
        return
    against = explain.target_alone(base, job.run.dtype if job.run is not None else job.meta.get("dtype"))
    st.caption(f"{against[0].upper()}{against[1:]}: one token per forward pass, same prompt and settings "
               f"({job.meta.get('baseline_note')}).")
    load = playback.load_note(job.run, base) if job.run is not None else None
    if load is not None and load.serious:  # the figures moved: said before them
        lab_ui.load_warning(load)
    if job.run is not None and runfile.beyond_pass_bound(job.run, base):  # still so when timed again: said
        st.warning(explain.slowed_speedup(base["speedup"], runfile.pass_bound(job.run, base)),
                   icon=":material/warning:")
    c = ui.metric_cells(4)
    c[0].metric("speculative tokens/s", fmt(base["spec_tokens_per_s"], ".1f"))
    c[1].metric("target alone tokens/s", fmt(base["base_tokens_per_s"], ".1f"))
    c[2].metric(f"measured speedup over {against}", f"{fmt(base['speedup'])}×",
                help="(time per token of the target alone) ÷ (time per token of speculative decoding). "
                     "Tokens per pass is not speedup: each round also pays for k draft passes. "
                     + explain.BASELINE_MATTERS)
    c[3].metric("target forward passes", f"{base['spec_target_passes']} vs {base['base_target_passes']}",
                help="Speculative (one per round) vs. the target alone (one per token).")
    profile = _profile(job)
    why = explain.time_breakdown(job.run, base, job.meta.get("draft_precision"), waits=False,
                                 profile_c=None if profile is None else profile.c) if job.run is not None else None
    if why:
        st.caption(why)
    if job.run is not None and (note := explain.profile_note(job.run, base, profile, load)):
        st.caption(note)
    _bookkeeping(job, base, None if load is None or load.serious else load)
    if job.run is not None and (tip := explain.gpu_advice(job.run.device, base.get("speedup"),
                                                          models.gpu_suggestion(job.meta.get("pair")))):
        st.info(tip, icon=":material/lightbulb:")
    _identity(job, base)
