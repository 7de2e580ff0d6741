"""specviz main page: watch speculative decoding run, one round at a time.

Thin layer: widgets in, specviz out. The live stream and the rounds so far
are kept in st.session_state["main.job"] (a specviz.replay.Playback), so a
rerun (pause, step, any widget) resumes instead of losing work. Models are
the only thing cached across sessions (pages/common/ui.load_pair_cached).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# `from pages.common import ui` must work under `streamlit run` and AppTest alike
_ROOT = str(Path(__file__).resolve().parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402

from pages.common import ui  # noqa: E402

ui.page_setup("Watch speculative decoding", shows=(3, 4, 5, 6, 8, 13, 14))
T_SCRIPT = time.perf_counter()  # when this rerun began (for the first-round latency)

import pandas as pd  # noqa: E402

from specviz import charts, claims, limits, prompts, render, replay  # noqa: E402
from specviz.drafters import PromptLookupDrafter  # noqa: E402
from specviz.engine import speculative_stream  # noqa: E402
from specviz.errors import SpecvizError  # noqa: E402

S = st.session_state
LIVE, RECORDED = "Live models", "Recorded runs (no model needed)"
DRAFT_MODEL, LOOKUP = "draft model", "prompt lookup (no second model)"
K_POLICIES = {"fixed": "fixed", "adaptive": "adaptive", "best": "best k"}  # engine k_policy -> label
POLICY_NOTE = {"adaptive": " (adaptive)", "best": " (best-k chooser, starting k)"}
FREE = "free text"


def preset_label(p: prompts.Preset) -> str:
    return f"{p.domain} · {p.name}" + ("" if p.chat else " (raw, no chat template)")


PRESETS = {preset_label(p): p for p in prompts.PRESETS}
FIRST = prompts.FIRST_RUN  # what Run does on a fresh page: chosen by measurement (README Performance)
DEFAULT_PRESET = preset_label(prompts.preset(FIRST.preset))


# --- callbacks: they run before the script, so the page draws the new state ------------------
def _request(what: str) -> None:
    S["main.request"] = what


def _toggle_pause() -> None:
    S["main.playing"] = not S.get("main.playing", False)


def _apply_preset() -> None:
    p = PRESETS.get(S["main.preset"])
    if p is not None:
        S["main.prompt"], S["main.chat"] = p.text, p.chat


def _on_log_select() -> None:
    rows = S["main.log"].selection.rows
    if rows:
        S["main.round_no"], S["main.follow"] = rows[0] + 1, False


def _on_round_no() -> None:
    S["main.follow"] = False


def _on_upload() -> None:
    f = S.get("main.upload")
    S["main.upload_error"] = None
    if f is None:
        return
    try:
        rec = replay.load_export(f.getvalue())
    except SpecvizError as e:  # the run on screen stays
        S["main.upload_error"] = f"{f.name}: {e}"
        return
    except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as e:  # a case the checks missed
        S["main.upload_error"] = f"{f.name}: the run file could not be read ({type(e).__name__})."
        return
    _start_replay(rec.run, rec.prompt_text, {
        "origin": f"file {f.name}", "title": rec.title or f.name, "pair": rec.pair, "tokens": rec.tokens,
        "baseline": rec.baseline, "baseline_note": "measured when the file was saved",
    })


def _set_job(job: replay.Playback | None) -> None:
    """Make `job` the session's run; a live run it replaces is stopped, so its KV caches are freed."""
    old = S.get("main.job")
    if old is not None and old is not job:
        old.close("replaced by a new run")
    S["main.job"] = job


def _start_replay(run, prompt_text: str, meta: dict, playing: bool = True) -> None:
    _set_job(replay.Playback.replay(run, prompt_text, meta))
    S["main.playing"], S["main.follow"] = playing, True


def _decoder(job: replay.Playback):
    """id -> text for this job: its tokenizer (live) or its token table (files, recordings)."""
    if "decode" not in job.meta:
        job.meta["decode"] = replay.table_decoder(job.meta.get("tokens") or {})
    return job.meta["decode"]


# --- defaults (set once, before the widgets exist) --------------------------------------------
S.setdefault("main.preset", DEFAULT_PRESET)
if "main.prompt" not in S:
    _apply_preset()
S.setdefault("main.playing", False)
S.setdefault("main.follow", True)

# --- sidebar ----------------------------------------------------------------------------------
sb = st.sidebar
source = sb.radio("Source", [LIVE, RECORDED], key="main.source", horizontal=False,
                  help="Live: run the real models on this machine. Recorded: replay runs recorded with the "
                       "real default pair, instantly, with no model loaded (for weak laptops).")
recording = None
pair_name = dtype = draft_precision = None
if source == LIVE:
    pair_name = ui.sidebar_pair_picker("main")
    dtype = ui.dtype_picker("main")
    draft_precision = ui.precision_picker("main")
    ui.show_device(None, dtype)
else:
    recs = replay.list_recorded()
    if recs:
        by_name = {r.name: r for r in recs}
        chosen = sb.selectbox("Recorded run", list(by_name), key="main.recording",
                              format_func=lambda n: by_name[n].title or n)
        recording = by_name[chosen]
        rs = recording.run
        sb.caption(f"Recorded with {recording.pair} on {rs.device}, {rs.dtype}: k={rs.settings.get('k')}, "
                   f"temperature {rs.settings.get('temperature')}, seed {rs.settings.get('seed')}, "
                   f"{len(rs.token_ids)} tokens. No model is loaded to replay it.")
    else:
        sb.warning("No recorded runs found in specviz/recorded/.")

sb.subheader("Decoding")
live = source == LIVE
drafter_choice = sb.radio("Drafter", [DRAFT_MODEL, LOOKUP], key="main.drafter", disabled=not live,
                          help="The pair's small draft model, or prompt lookup: copy the tokens that followed "
                               f"the last earlier occurrence of the latest n-gram ({claims.link(14)}).")
k = sb.slider("k: tokens drafted per round", 1, 16, FIRST.k, key="main.k",
              help="How many tokens the drafter proposes before the target checks them in one pass.")
k_policy = sb.radio("k per round", list(K_POLICIES), key="main.k_policy", format_func=K_POLICIES.get,
                    index=list(K_POLICIES).index(FIRST.k_policy),
                    disabled=not live, horizontal=True,
                    help="fixed: k every round. adaptive: k grows by 1 after a fully accepted round and shrinks "
                         f"by 1 after a rejection ({claims.link(13)}). best k: the chooser sets k from live "
                         "estimates of "
                         "α, c and the verify cost, and with the draft model ends each round after a doubtful "
                         "draft (k above is then only where it starts; a round may draft up to 32).")
temperature = sb.slider("temperature (0 = greedy)", 0.0, 2.0, FIRST.temperature, 0.05, key="main.temperature",
                        disabled=not live)
top_p = sb.slider("top-p", 0.05, 1.0, 1.0, 0.05, key="main.top_p", disabled=not live or temperature == 0,
                  help="Nucleus sampling: keep the smallest set of tokens whose probability adds up to top-p.")
max_new = int(sb.number_input("max new tokens", 1, limits.max_new_tokens(),
                             min(FIRST.max_new_tokens, limits.max_new_tokens()),
                             key="main.max_new", disabled=not live))
seed = int(sb.number_input("seed", 0, 2**31 - 1, 0, key="main.seed", disabled=not live,
                           help="Same seed and settings → same output, except with the best-k chooser when "
                                "sampling: it sets k from live timings, so the number of random draws, and so "
                                "the text, can change from run to run (the distribution stays the target's)."))
if live and k_policy == "best" and temperature > 0:
    sb.caption("best k while sampling: the same seed can give another text (k follows live timings); "
               "the output distribution is still exactly the target's.")
if S.get("main.speed_for_presenter") != ui.presenter():  # presenter mode switched: back to its default speed
    S.pop("main.speed", None)
    S["main.speed_for_presenter"] = ui.presenter()
speed = sb.select_slider("animation speed", list(replay.SPEEDS), key="main.speed",
                         value="slow" if ui.presenter() else replay.DEFAULT_SPEED,
                         help="How long drafted tokens stay pending before the verdict is drawn.")
baseline_on = sb.checkbox("after each run, time the target alone", True, key="main.baseline", disabled=not live,
                          help="A plain one-token-per-pass run with the same settings, for the measured speedup "
                               "and the greedy identity check. On a CPU it takes as long as the run itself.")

sb.subheader("Prompt")
sb.selectbox("Preset (by domain)", list(PRESETS) + [FREE], key="main.preset", on_change=_apply_preset,
             disabled=not live)
prompt_text = sb.text_area("Prompt", key="main.prompt", height=120, disabled=not live,
                           max_chars=limits.max_prompt_chars())
chat = sb.checkbox("chat template", key="main.chat", disabled=not live,
                   help="Wrap the prompt in the model's chat template (instruct models). "
                        "Off: the model simply continues the raw text.")

# --- main area: controls ----------------------------------------------------------------------
st.caption("A small **draft** model proposes k tokens; the large **target** checks all of them in **one** forward "
           "pass, keeps the agreeing prefix, replaces the first mismatch with its own token (**correction**), "
           "and adds a **bonus** token when all k were accepted. Everything below is computed live on real "
           "models, or replayed from a recorded real run.")

ctrl = st.container()

if live and pair_name:
    status = ui.pair_status(pair_name)
    if not status.available:
        st.warning(f"The pair **{pair_name}** is not installed here: {status.reason}\n\n**How to get it:** "
                   f"{status.how_to_get}\n\nMeanwhile, choose **{RECORDED}** in the sidebar.")

load_box = st.container()
if live and pair_name:  # one run of each offline pair, side by side (pages/common/pairs_ui.py)
    from pages.common.pairs_ui import offline_pairs_section  # noqa: E402

    offline_pairs_section(pair_name, dtype, draft_precision, prompt_text, chat, k=k, temperature=float(temperature),
                          top_p=float(top_p), max_new_tokens=max_new, seed=seed)


def start_live() -> replay.Playback:
    """Load (cached), encode, and open the stream; no round is computed yet."""
    if not pair_name:
        raise SpecvizError("No model pair is available: fix models.yaml (see the error above).")
    t0 = time.perf_counter()
    pair = ui.load_pair_cached(pair_name, dtype, draft_precision)
    load_s = time.perf_counter() - t0
    ids = prompts.encode(pair.tokenizer, prompt_text, chat)
    lookup = drafter_choice == LOOKUP
    kw = dict(k=k, temperature=float(temperature), top_p=float(top_p), max_new_tokens=max_new, seed=seed,
              eos_token_id=pair.eos_token_ids)
    stream = speculative_stream(pair.target, PromptLookupDrafter() if lookup else pair.draft, ids, **kw,
                                k_policy=k_policy, vocab=pair.shared_vocab)
    meta = {"origin": "live", "pair": pair_name, "dtype": dtype, "device": pair.device, "chat": chat,
            "drafter": "prompt lookup" if lookup else f"{pair.draft_precision} draft model", "kw": kw,
            "lookup": lookup, "draft_precision": None if lookup else pair.draft_precision,
            "decode": ui.decoder(pair.tokenizer), "baseline_wanted": baseline_on, "t_run": T_SCRIPT,
            "load_s": load_s}
    settings = {**kw, "k_policy": k_policy}
    return replay.Playback.live(stream, ids, prompt_text, settings, meta, device=pair.device, dtype=dtype)


# --- handle the button pressed (if any) -------------------------------------------------------
job: replay.Playback | None = S.get("main.job")
req = S.pop("main.request", None)
steps: int | None = 0
try:
    with load_box:
        if req == "run" or (req == "step" and job is None):
            if live:
                job = start_live()
            elif recording is not None:
                job = replay.Playback.replay(recording.run, recording.prompt_text, {
                    "origin": "recording", "title": recording.title, "pair": recording.pair,
                    "tokens": recording.tokens, "baseline": recording.baseline,
                    "baseline_note": "measured when it was recorded"})
            _set_job(job)
            S["main.follow"] = True
            S["main.playing"] = req == "run"
            steps = None if req == "run" else 1
        elif req == "step" and job is not None and job.done:
            _start_replay(job.run, job.prompt_text, {kk: v for kk, v in job.meta.items()}, playing=False)
            job, steps = S["main.job"], 1
        elif req == "step":
            S["main.playing"], steps = False, 1
        elif req == "replay" and job is not None and job.run is not None:
            _start_replay(job.run, job.prompt_text, {kk: v for kk, v in job.meta.items()})
            job, steps = S["main.job"], None
        elif S.get("main.playing") and job is not None and not job.done:
            steps = None
except (SpecvizError, MemoryError) as e:
    with load_box:
        ui.show_error(e)

job = S.get("main.job")
with ctrl:
    playing = bool(S.get("main.playing")) and job is not None and not job.done
    b = st.columns([1.7, 1.3, 1.2, 1.3, 3.5])
    b[0].button("Run" if live else "Play recording", type="primary", key="main.run_btn", on_click=_request,
                icon=":material/play_arrow:",
                args=("run",), disabled=not live and recording is None,
                help="Start a new run with the settings in the sidebar." if live else "Replay the chosen recording.")
    b[1].button("Pause" if playing else "Resume", key="main.pause_btn", on_click=_toggle_pause,
                icon=":material/pause:" if playing else ":material/resume:",
                disabled=job is None or job.done, help="Pause or resume the animation; nothing computed is lost.")
    b[2].button("Step", key="main.step_btn", on_click=_request, args=("step",), icon=":material/skip_next:",
                help="Advance one round. With no run in progress: start one, paused after its first round. "
                     "After a run: step through its replay.")
    b[3].button("Replay", key="main.replay_btn", on_click=_request, args=("replay",), icon=":material/replay:",
                disabled=job is None or job.run is None, help="Animate the finished run again (no model needed).")
    if live and job is not None and job.source == "live" and not job.done \
            and (job.meta.get("pair"), job.meta.get("dtype")) != (pair_name, dtype):
        st.info(f"The run in progress uses the pair **{job.meta.get('pair')}** ({job.meta.get('dtype')}), not the "
                f"one now chosen in the sidebar ({pair_name}, {dtype}): Resume and Step continue that run, "
                "Run starts a new one with the sidebar's pair.", icon=":material/info:")

# --- placeholders, filled live and then once more at the end ---------------------------------
st.markdown(render.legend_html(), unsafe_allow_html=True)
head_ph = st.empty()
text_ph = st.empty()
status_ph = st.empty()
metrics_ph = st.empty()
log_ph = st.empty()


def fmt(v: float, spec: str = ".2f") -> str:
    return "–" if v != v or v is None else format(v, spec)


def draw_head(job: replay.Playback) -> None:
    m, s = job.meta, job.settings
    if m.get("origin") == "live":
        where = f"{'live' if job.source == 'live' else 'replay'} · {m['pair']} · {job.device}, {job.dtype}"
    else:  # the title may come from an uploaded file: shown as plain text, never as markdown
        where = f"replay of {render.md_text(m.get('title') or m.get('origin'))} · no model loaded"
    mode = "greedy" if not s.get("temperature") else f"temperature {s.get('temperature')}, top-p {s.get('top_p')}"
    drafter = render.md_text(m.get("drafter") or s.get("drafter", ""))
    kdesc = f"k={s.get('k')}" + POLICY_NOTE.get(s.get("k_policy"), "")
    total = f"/{job.total}" if job.total else ""
    head_ph.caption(f"**{where}** · drafter: {drafter} · {kdesc} · {mode} · seed {s.get('seed')} · "
                    f"round {len(job.rounds)}{total}" + (" · ✔ finished" if job.done else ""))


def draw_metrics(run) -> None:
    with metrics_ph.container():
        c = st.columns(5)
        c[0].metric("α (per-token acceptance)", fmt(run.alpha),
                    help="α = accepted ÷ drafted tokens the target JUDGED. A rejection ends the round, so "
                         "drafts after it are never judged. This is the α of E[tokens] = (1 − α^(k+1)) / (1 − α).")
        c[0].caption(f"α = accepted / judged = {run.n_accepted} / {run.n_judged}")
        c[1].metric("accepted ÷ drafted", fmt(run.acceptance_rate),
                    help="Counts every drafted token, including those thrown away after a rejection: "
                         "always ≤ α.")
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
                     + (f" · ⚠ {run.outside_load_rounds} round{'s' * (run.outside_load_rounds != 1)} under outside "
                        "load" if run.outside_load_rounds else ""))


def draw_text(job: replay.Playback, pending=None) -> None:
    dec = _decoder(job)
    rounds = job.rounds if pending is None else job.rounds[:-1]
    text_ph.markdown(render.tokens_html(job.prompt_text, rounds, dec, pending=pending), unsafe_allow_html=True)


# --- save / load ------------------------------------------------------------------------------
def save_load_section(job: replay.Playback | None) -> None:
    st.subheader("Save or load a run")
    c1, c2 = st.columns(2)
    with c1:
        if job is not None and job.done and job.run is not None:
            data = replay.export_json(job.run, _decoder(job), job.prompt_text, job.meta.get("pair", ""),
                                      job.meta.get("title", ""), job.meta.get("baseline"))
            st.download_button("⬇ Download this run (JSON)", data=data, file_name="specviz-run.json",
                               mime="application/json", key="main.download",
                               help="Everything needed to replay it exactly, on any machine, with no model.")
        else:
            st.caption("The download appears when a run has finished.")
    with c2:
        st.file_uploader("Load a run (JSON) and replay it", type=["json"], key="main.upload", on_change=_on_upload,
                         help="A file saved with the download button (or a shipped recording); "
                              "it replays exactly, with no model loaded.")
        if S.get("main.upload_error"):
            st.error(S["main.upload_error"], icon=":material/error:")


# --- the animation: one round at a time -------------------------------------------------------
pend_s, after_s = replay.SPEEDS.get(speed, replay.SPEEDS[replay.DEFAULT_SPEED])
LOG_TAIL = 30  # rounds in the round log while animating (the whole log is drawn at the end)
advanced = False
if job is not None and steps != 0:
    try:
        drawn_at, draw_cost = -1.0, 0.0
        for rnd in replay.play(job, steps):
            advanced = True
            # with no pause to show ("instant"), skip drawing while the last drawing's cost has not yet
            # passed: drawing takes at most half the time, so a long run renders in linear time
            if pend_s == after_s == 0 and not job.done and replay.now() - drawn_at < draw_cost:
                continue
            t_draw = replay.now()
            # drafted tokens first, pending; then the target's verdict
            draw_head(job)
            if rnd.k and pend_s > 0:
                draw_text(job, pending=rnd)
                if job.source == "live" and "t_first_draw" not in job.meta:
                    job.meta["t_first_draw"], job.meta["first_wait_s"] = replay.now(), job.waited_s
                status_ph.info(f"Round {rnd.index + 1}: the drafter proposed {rnd.k} token"
                               f"{'s' * (rnd.k != 1)} ({rnd.draft_s * 1000:.0f} ms) — pending the target's "
                               f"verdict from one forward pass…", icon=":material/hourglass_top:")
                replay.sleep(pend_s)
            draw_text(job)
            if job.source == "live" and "t_first_draw" not in job.meta:
                job.meta["t_first_draw"], job.meta["first_wait_s"] = replay.now(), job.waited_s
            status_ph.markdown(replay.round_summary(rnd, _decoder(job)))
            partial = job.current_run()
            draw_metrics(partial)
            with log_ph.container():
                st.subheader("Round log")
                rows = render.round_log_rows(partial, _decoder(job), last=LOG_TAIL)
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(38 + 35 * len(rows), 400))
            drawn_at = replay.now()
            draw_cost = drawn_at - t_draw
            replay.sleep(after_s)
    except SpecvizError as e:
        S["main.playing"] = False
        ui.show_error(e)
    except Exception as e:  # noqa: BLE001 — a clear message instead of a traceback
        S["main.playing"] = False
        ui.show_error(e)
    if job.done:
        S["main.playing"] = False
        if advanced:
            st.rerun()  # draw the finished page once more, buttons included (no model work)

# --- final drawing of the current state -------------------------------------------------------
if job is None:
    text_ph.info("Press **Run** to watch the draft propose and the target verify, round by round"
                 + (" (the first run loads the models)." if live else "."))
    save_load_section(job)
    st.stop()

dec = _decoder(job)
run = job.current_run()
draw_head(job)
draw_text(job)
if job.rounds:
    status_ph.markdown(replay.round_summary(job.rounds[-1], dec))
elif job.error is None:
    status_ph.info("Paused before the first round: press Step or Resume.")
if job.error:
    st.error(f"The run stopped early: {job.error}")
draw_metrics(run)

if not job.rounds:
    save_load_section(job)
    st.stop()

# --- round log and the chosen round ------------------------------------------------------------
with log_ph.container():
    st.subheader("Round log")
    st.caption("One row per round: one target forward pass each. Click a row (or type a round number below) to "
               "see that round's probabilities.")
    rows = render.round_log_rows(run, dec)
    st.dataframe(pd.DataFrame(rows), key="main.log", on_select=_on_log_select, selection_mode="single-row",
                 hide_index=True, width="stretch", height=min(38 + 35 * len(rows), 400))

n = len(job.rounds)
if S.get("main.follow", True) or not isinstance(S.get("main.round_no"), int):
    S["main.round_no"] = n
S["main.round_no"] = min(max(int(S["main.round_no"]), 1), n)
sel = int(st.number_input(f"Round to inspect (1–{n})", min_value=1, step=1, key="main.round_no",
                          on_change=_on_round_no))
sel = min(max(sel, 1), n)
r = job.rounds[sel - 1]

st.subheader(f"Round {sel} in detail")
st.markdown(replay.round_summary(r, dec))
st.markdown(render.tokens_html("", [r], dec), unsafe_allow_html=True)
if r.k:
    st.caption("For each drafted position: the target's distribution p against the draft's q. The overlap "
               "Σ min(p, q) is the chance that a sampled draft token is accepted. "
               + ("Greedy (temperature 0): a draft token is kept iff it is the target's argmax."
                  if r.greedy else "Sampling: a draft token is kept iff u ≤ min(1, p/q), u uniform in [0, 1)."))
    st.dataframe(pd.DataFrame(replay.decision_rows(r, dec)), hide_index=True, width="stretch")
    positions = list(range(r.k))
    if ui.presenter() and r.k > 1:  # on a projector: one chart at a time
        positions = [st.select_slider("drafted position", positions, format_func=lambda i: str(i + 1),
                                      key=f"main.pq_pos.{sel}.{r.k}")]
    for i in positions:
        fig = charts.fig_pq(r, i, dec)
        fig.update_layout(height=380)
        ui.show_chart(fig, f"round{sel}-pq-{i + 1}", key=f"main.pq.{i}")
    if r.rejected:
        ui.show_chart(charts.fig_residual(r, dec), f"round{sel}-residual", key="main.residual")
else:
    st.info("The drafter proposed nothing this round (prompt lookup found no match), so the target made one "
            "token on its own: even so, every round makes progress.")

# --- acceptance over the run, and the tokens-per-pass curve -------------------------------------
st.subheader("Acceptance")
if ui.presenter():  # on a projector: one chart at a time, in tabs
    tab_alpha, tab_curve, tab_k = st.tabs(["α over the run", "tokens per pass", "k per round"])
else:
    tab_alpha = tab_curve = tab_k = st.container()
with tab_alpha:
    ui.show_chart(charts.fig_alpha_trace(run), "alpha-trace", key="main.alpha_trace")
run_k = int(run.settings.get("k", k))
fixed = run.settings.get("k_policy", "fixed") == "fixed"
same_k = run_k == k and fixed
varying_k = not fixed or len(set(r_.k for r_ in run.rounds)) > 2
if ui.presenter():
    c1, c2 = tab_curve, (tab_k if varying_k else None)
    if c2 is None:
        tab_k.caption(f"k was {run_k} in every round of this run.")
else:
    c1, c2 = st.columns(2) if varying_k else (st.container(), None)
with c1:
    ui.show_chart(charts.fig_expected_tokens(k, charts.measured_point(run) if same_k else None),
                  "expected-tokens", key="main.expected")
    if not same_k:
        st.caption(f"The measured point is hidden: the last run used k = {run_k}"
                   f"{POLICY_NOTE.get(run.settings.get('k_policy'), '')}, the curve is for k = {k} (sidebar). "
                   f"Press Run with a fixed k to "
                   f"measure at k = {k}.")
    else:
        st.caption(f"Measured at temperature {run.settings.get('temperature', 0)}: α depends on the temperature "
                   "and on the prompt's domain (code and lists accept well, creative text poorly). Change them "
                   "and run again; the curve follows k in the sidebar.")
if c2 is not None:
    with c2:
        ui.show_chart(charts.fig_k_trace(run), "k-trace", key="main.k_trace")

# --- speed against the target alone -----------------------------------------------------------
st.subheader("Speed: speculative vs. the target alone")
if job is not None and job.source == "live" and job.done and job.run is not None \
        and job.meta.get("baseline_wanted") and "baseline" not in job.meta:
    try:
        with st.spinner("Timing the target alone with the same settings (one token per forward pass)…"):
            pair = ui.load_pair_cached(job.meta["pair"], job.meta["dtype"])
            job.meta["baseline"] = replay.target_alone(pair.target, job.run, pair.shared_vocab)
            job.meta["baseline_note"] = "measured right after the run, warmed up, same settings"
    except (SpecvizError, MemoryError) as e:
        job.meta["baseline"] = None
        ui.show_error(e)
base = job.meta.get("baseline")
if job.source == "live" and job.rounds and "t_first_draw" in job.meta:
    first_s = job.meta["t_first_draw"] - job.meta["t_run"]
    work_s = (job.run.prefill_s if job.run else 0.0) + job.rounds[0].round_s
    load_s = job.meta.get("load_s", 0.0)
    st.caption(f"First round on screen {first_s:.1f} s after Run was pressed: {work_s:.1f} s of model work (reading "
               f"the prompt, drafting, one verification pass)"
               + (f" and {load_s:.1f} s loading the models" if load_s >= 0.1 else "") + "."
               + (f" It waited {wait_s:.1f} s for the device while other sessions had their turn."
                  if (wait_s := job.meta.get("first_wait_s", 0.0)) >= 0.1 else ""))
if not job.done:
    st.caption("Shown when the run has finished.")
elif base:
    st.caption(f"Target alone: one token per forward pass, same prompt and settings ({job.meta.get('baseline_note')}).")
    busy = replay.load_note(job.run, base) if job.run is not None else None
    if busy:
        st.warning(busy, icon=":material/warning:")
    c = st.columns(4)
    c[0].metric("speculative tokens/s", fmt(base["spec_tokens_per_s"] or float("nan"), ".1f"))
    c[1].metric("target alone tokens/s", fmt(base["base_tokens_per_s"] or float("nan"), ".1f"))
    c[2].metric("measured speedup", f"{fmt(base['speedup'] or float('nan'))}×",
                help="(time per token of the target alone) ÷ (time per token of speculative decoding). "
                     "Tokens per pass is not speedup: each round also pays for k draft passes.")
    c[3].metric("target forward passes", f"{base['spec_target_passes']} vs {base['base_target_passes']}",
                help="Speculative (one per round) vs. the target alone (one per token).")
    sr = job.run
    steady = sr.steady_rounds if sr is not None else []  # the first round's passes also read the prompt
    if steady and base.get("base_target_passes"):
        v_ms = 1000 * sum(r.verify_s for r in steady) / len(steady)
        b_ms = 1000 * (base.get("base_step_s") or (base.get("base_decode_s") or 0.0) / base["base_target_passes"])
        why = (f"Where the time went, after the first round (whose passes also read the prompt): a verification "
               f"pass (k+1 tokens at once) took {v_ms:.0f} ms on average, a one-token pass of the target alone "
               f"{b_ms:.0f} ms")
        n_draft = sum(r.k for r in steady) if sr.draft_passes else 0
        if n_draft:
            d_ms = 1000 * sum(r.draft_s for r in steady) / n_draft
            prec = job.meta.get("draft_precision")
            why += (f"; each round also ran up to k draft passes of {d_ms:.0f} ms "
                    f"(c = {d_ms / b_ms:.2f} of a target pass{f', {prec} draft' if prec else ''})"
                    if b_ms > 0 else "")
        st.caption(why + ". Tokens per pass is not speedup: see the Speedup page for the cost model.")
    if base.get("identical") is True:
        st.success("Greedy: **identical text** to the target alone, token for token "
                   f"({claims.link(6)}: speculative "
                   "decoding changes the speed, not the output).")
    elif base.get("identical") is False:
        i = base.get("first_difference")
        bt = base.get("base_token_ids") or []
        st.warning(
            f"Greedy, but the text differs from the target alone from token {i + 1 if i is not None else '?'} on. "
            "This is floating-point, not the algorithm: verification scores k+1 tokens in one batched pass, "
            "which adds up the same numbers in a different order than one-token steps. When two candidates "
            f"are nearly tied, the argmax can flip — much more often in bfloat16 (this run: {job.dtype}). "
            "See the Exactness page.")
        if i is not None:
            a = "".join(dec(t) for t in run.token_ids[max(0, i - 8):i + 8])
            z = "".join(dec(t) for t in bt[max(0, i - 8):i + 8])
            st.code(f"speculative : …{a}…\ntarget alone: …{z}…", language=None)
    else:
        st.caption("Sampling mode: the texts differ by design (different random draws); the *distribution* is "
                   "the target's — see the Exactness page.")
elif job.meta.get("origin") == "live" and not job.meta.get("baseline_wanted"):
    st.caption("Timing of the target alone is off (sidebar checkbox).")
else:
    st.caption("No timing of the target alone for this run.")

save_load_section(job)
