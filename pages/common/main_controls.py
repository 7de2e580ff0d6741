"""The main page's controls: Run / Pause / Step / Replay, what a press does to the session's run, and saving
or loading a run. The run lives in st.session_state["main.job"] (a playback.Playback), so a rerun resumes it."""

from __future__ import annotations

import time

import streamlit as st

from pages.common import state, ui
from pages.common.main_sidebar import RECORDED, WATCH, MainSettings
from pages.common.main_view import decoder
from specviz.core import limits
from specviz.teaching import costs, explain, render
from specviz.data import playback, runfile
from specviz.core import prompts
from specviz.decoding.drafters import PromptLookupDrafter
from specviz.decoding.engine import speculative_stream
from specviz.core.errors import SpecvizError
from specviz.core.settings import DecodeSettings
from specviz.service import pairs

S = st.session_state
RUN, PLAY = "Run", "Play recording"  # the main button's label: live models, or a recorded run
# the uploader's own line ("4MB per file • JSON") states server.maxUploadSize, which stays above the app's limit
# so that a file a little over it reaches the app and gets its reason; hidden, so the only limit shown is the
# label's "at most 2 MB" (and the label says JSON too)
UPLOAD_CSS = """<style>
.st-key-main-upload [data-testid="stFileUploaderDropzoneInstructions"] { display: none !important; }
</style>"""


# --- callbacks: they run before the script, so the page draws the new state ------------------
def _request(what: str) -> None:
    S["main.request"] = what


def _set_playing(playing: bool) -> None:
    S["main.playing"] = playing


def set_job(job: playback.Playback | None) -> None:
    """Make `job` the session's run; a live run it replaces is stopped, so its KV caches are freed."""
    old = S.get("main.job")
    if old is not None and old is not job:
        old.close("replaced by a new run")
    S["main.job"] = job


def _start_replay(run, prompt_text: str, meta: dict, playing: bool = True) -> None:
    set_job(playback.Playback.replay(run, prompt_text, meta))
    S["main.playing"], S["main.follow"] = playing, True


def _on_upload() -> None:
    f = S.get("main.upload")
    S["main.upload_error"] = None
    if f is None:
        return
    try:
        rec = runfile.load_export(f.getvalue())
    except SpecvizError as e:  # the run on screen stays
        S["main.upload_error"] = f"{f.name}: {e}"
        return
    except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as e:  # a case the checks missed
        S["main.upload_error"] = f"{f.name}: the run file could not be read ({type(e).__name__})."
        return
    _start_replay(rec.run, rec.prompt_text, {
        "origin": f"file {f.name}", "title": rec.title or f.name, "pair": rec.pair, "tokens": rec.tokens,
        "baseline": rec.baseline, "baseline_note": "measured when the file was saved", "chat": rec.chat,
    })


# --- starting a run ---------------------------------------------------------------------------
def start_live(ms: MainSettings, t_script: float) -> playback.Playback:
    """Load (cached), encode, and open the stream; no round is computed yet."""
    if not ms.pair_name:
        raise SpecvizError("No model pair is available: fix models.yaml (see the error above).")
    t0 = time.perf_counter()
    pair, lease = ui.lease_pair(ms.pair_name, ms.dtype, ms.draft_precision, ms.target_precision)  # held till it ends
    try:
        return _open_live(ms, t_script, pair, lease, time.perf_counter() - t0)
    except BaseException:
        lease.release()
        raise


def _open_live(ms: MainSettings, t_script: float, pair, lease, load_s: float) -> playback.Playback:
    ids = prompts.encode(pair.tokenizer, ms.prompt_text, ms.chat)
    kw = ms.decode.record(eos_token_id=pair.eos_token_ids)
    drafter = PromptLookupDrafter() if ms.lookup else pair.drafter()
    stream = speculative_stream(pair.target, drafter, ids, ms.decode, **pair.run_kw)
    meta = {"origin": "live", "pair": ms.pair_name, "dtype": ms.dtype, "device": pair.device, "chat": ms.chat,
            "drafter": "prompt lookup" if ms.lookup else explain.drafter_words(pair.draft_precision,
                                                                                getattr(drafter, "head_name", "full")),
            "kw": kw,
            "lookup": ms.lookup, "draft_precision": None if ms.lookup else pair.draft_precision,
            "target_precision": pair.target_precision, "profile_ident": costs.identity(pair),
            "decode": ui.decoder(pair.tokenizer), "baseline_wanted": ms.baseline_on, "t_run": t_script,
            "load_s": load_s}
    pb = playback.Playback.live(stream, ids, ms.prompt_text, kw, meta, device=pair.device, dtype=ms.dtype)
    pb.hold = lease  # the store keeps this pair loaded while the run goes on
    return pb


def _start_recording(recording) -> playback.Playback:
    return playback.Playback.replay(recording.run, recording.prompt_text, {
        "origin": "recording", "title": recording.title, "pair": recording.pair, "tokens": recording.tokens,
        "baseline": recording.baseline, "baseline_note": "measured when it was recorded", "chat": recording.chat})


def handle_request(ms: MainSettings, t_script: float) -> int | None:
    """Act on the button pressed since the last rerun (if any): how many rounds to play now (None: all)."""
    job: playback.Playback | None = S.get("main.job")
    req = S.pop("main.request", None)
    if req == "run" or (req == "step" and job is None):
        if ms.live:
            shown = _while_loading(ms) if req == "run" else None
            try:
                job = start_live(ms, t_script)  # waits on the load, the recording on screen meanwhile
            finally:
                if shown is not None:
                    shown.empty()  # the live run draws below, or the load's error is shown instead
        elif ms.recording is not None:
            job = _start_recording(ms.recording)
        set_job(job)
        S["main.follow"], S["main.playing"] = True, req == "run"
        return None if req == "run" else 1
    if req == "step" and job is not None and job.done:  # step through the finished run's replay
        _start_replay(job.run, job.prompt_text, dict(job.meta), playing=False)
        return 1
    if req == "step":
        S["main.playing"] = False
        return 1
    if req == "replay" and job is not None and job.run is not None:
        _start_replay(job.run, job.prompt_text, dict(job.meta))
        return None
    if S.get("main.playing") and job is not None and not job.done:
        return None
    return 0


def _while_loading(ms: MainSettings):
    """The shipped recording of a Run's prompt and settings made with its pair, drawn at once while the pair
    loads (start_live then waits on the load as before): its text, coloured, and its recorded speedup, under one
    line that the live run follows. The element to clear once the live run draws, or None where the pair is
    loaded or no recording matches."""
    if ms.lookup or not ms.pair_name or pairs.pair_ready(ms.pair_name, ms.dtype, ms.draft_precision,
                                                        ms.target_precision):
        return None
    rec = runfile.matching_recording(runfile.list_recorded(), ms.prompt_text, ms.chat, ms.decode, ms.pair_name)
    if rec is None or rec.pair != ms.pair_name:
        return None
    box = st.empty()
    with box.container():
        st.info(explain.live_follows(render.md_text(rec.title or rec.name)), icon=":material/hourglass_top:")
        html = render.tokens_html(rec.prompt_text, rec.run.rounds, runfile.table_decoder(rec.tokens),
                                  reply=bool(rec.chat))
        st.markdown(f'<div class="{WHILE_LOADING}">{html}</div>', unsafe_allow_html=True)
        if rec.baseline:
            st.caption(explain.recorded_speedup(rec.baseline, rec.run.dtype, rec.recorded_at))
    S[SHOWN_WHILE_LOADING] = rec.name
    return box


SHOWN_WHILE_LOADING = "main.shown_while_loading"  # session key: the recording last drawn while a Run's pair loaded
WHILE_LOADING = "sv-while-loading"  # the class around that recording's text: not the live run's (devtools.laptop)


def offer_recording(job: playback.Playback | None) -> None:
    """While a live run goes on, the device queue's waiting notice offers the shipped recording of its prompt and
    settings (runfile.matching_recording), as a link that plays it in a new tab: this run keeps its place."""
    offer = None
    if job is not None and job.source == "live" and not job.done:
        if "recording_offer" not in job.meta:  # the recordings are read once per run, not at every rerun
            rec = runfile.matching_recording(runfile.list_recorded(), job.prompt_text, job.meta.get("chat"),
                                             DecodeSettings.from_record(job.meta.get("kw") or {}),
                                             job.meta.get("pair") or "")
            job.meta["recording_offer"] = None if rec is None else explain.recording_offer(
                rec.title or rec.name, rec.pair, f"?source=recorded&{WATCH}={rec.name}")
        offer = job.meta["recording_offer"]
    S[ui.WAIT_OFFER] = offer


def buttons(ms: MainSettings, job: playback.Playback | None) -> None:
    playing = bool(S.get("main.playing")) and job is not None and not job.done
    row = ui.button_row()
    row.button(RUN if ms.live else PLAY, type="primary", key="main.run_btn", on_click=_request,
               icon=":material/play_arrow:", args=("run",), disabled=not ms.live and ms.recording is None,
               help="Start a new run with the settings in the sidebar." if ms.live
               else "Replay the chosen recording.")
    # Pause and Resume are two buttons, each setting its own state, so a second press of Pause that lands before
    # the browser redraws it as Resume (a double click, a busy server) pauses again instead of resuming
    pause_help = "Pause or resume the animation; nothing computed is lost."
    if playing:
        row.button("Pause", key="main.pause_btn", on_click=_set_playing, args=(False,), icon=":material/pause:",
                   help=pause_help)
    else:
        row.button("Resume", key="main.resume_btn", on_click=_set_playing, args=(True,), icon=":material/resume:",
                   disabled=job is None or job.done, help=pause_help)
    row.button("Step", key="main.step_btn", on_click=_request, args=("step",), icon=":material/skip_next:",
               help="Advance one round. With no run in progress: start one, paused after its first round. "
                    "After a run: step through its replay.")
    row.button("Replay", key="main.replay_btn", on_click=_request, args=("replay",), icon=":material/replay:",
               disabled=job is None or job.run is None, help="Animate the finished run again (no model needed).")
    if ms.live and job is not None and job.source == "live" and not job.done \
            and (job.meta.get("pair"), job.meta.get("dtype")) != (ms.pair_name, ms.dtype):
        st.info(f"The run in progress uses the pair **{job.meta.get('pair')}** ({job.meta.get('dtype')}), not the "
                f"one now chosen in the sidebar ({ms.pair_name}, {ms.dtype}): Resume and Step continue that run, "
                "Run starts a new one with the sidebar's pair.", icon=":material/info:")


def pair_missing(ms: MainSettings) -> None:
    """The way in on a laptop that cannot run the pair (not installed, or no configuration of it fits the memory
    budget): said on the first screen, with one click to the recorded runs."""
    if not (ms.live and ms.pair_name):
        return
    status = ui.pair_status(ms.pair_name)
    if not status.available:
        st.warning(f"The pair **{ms.pair_name}** is not installed here: {status.reason}\n\n**How to get it:** "
                   f"{status.how_to_get}\n\nMeanwhile, watch the recorded runs.")
    elif (why := pairs.fits_nowhere(ms.pair_name)) is not None:
        st.warning(f"{why} Meanwhile, watch the recorded runs: real runs of this pair, replayed with no model "
                   "loaded.", icon=":material/memory:")
    else:
        return
    st.button("Watch the recorded runs (no model needed)", type="primary", key="main.to_recorded",
              on_click=_to_recorded)


def _to_recorded() -> None:
    state.remember("source", "recorded", "live")
    S["main.source"] = RECORDED


# --- save / load ------------------------------------------------------------------------------
def save_load(job: playback.Playback | None) -> None:
    st.subheader("Save or load a run")
    c1, c2 = st.columns(2)
    with c1:
        if job is not None and job.done and job.run is not None:
            data = runfile.export_json(job.run, decoder(job), job.prompt_text, job.meta.get("pair", ""),
                                      job.meta.get("title", ""), job.meta.get("baseline"), chat=job.meta.get("chat"))
            st.download_button("⬇ Download this run (JSON)", data=data, file_name="specviz-run.json",
                               mime="application/json", key="main.download",
                               help="Everything needed to replay it exactly, on any machine, with no model.")
        else:
            st.caption("The download appears when a run has finished.")
    with c2:
        mb = limits.max_run_file_bytes() // 2**20
        st.html(UPLOAD_CSS)  # the label states the app's limit; the widget's own line would state the browser's
        st.file_uploader(f"Load a run (JSON, at most {mb} MB) and replay it", type=["json"], key="main.upload",
                         on_change=_on_upload, help="A file saved with the download button (or a shipped "
                                                    "recording); it replays exactly, with no model loaded.")
        if st.get_option("server.maxUploadSize") <= mb:  # the browser refuses a file just over it with no word
            st.caption(f"A file over {st.get_option('server.maxUploadSize')} MB is refused by the browser: set "
                       "server.maxUploadSize above SPECVIZ_MAX_RUN_FILE_MB.")
        if S.get("main.upload_error"):  # it quotes the file's name and fields: plain text, never markdown
            st.error(render.md_text(S["main.upload_error"]), icon=":material/error:")
