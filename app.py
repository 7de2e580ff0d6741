"""specviz main page: watch speculative decoding run, one round at a time.

Widgets in (pages/common/main_sidebar), specviz out, drawn by pages/common/main_view. The live stream and
the rounds so far are kept in st.session_state["main.job"] (a specviz.data.playback.Playback), so a rerun (pause,
step, any widget) resumes instead of losing work. Models are the only thing kept across sessions
(specviz/service/pairs.py, loaded through pages/common/ui.load_pair_cached).
"""

from __future__ import annotations

import time

import streamlit as st

# `streamlit run app.py` puts this folder on sys.path (as pytest.ini does for AppTest), so `pages` imports as is
from pages.common import nav, ui
from specviz.teaching import glossary

# app.py is the entry: it names the pages and runs the chosen one, which may be app.py itself, run again inside
# this call (pages/common/nav.py); only that inner run draws the main page
if nav.main_page():
    ui.page_setup("Watch speculative decoding", words=glossary.PAGE_WORDS["app"])
    SHOWS = (3, 4, 5, 6, 8, 13, 14)  # the claims this page shows: said in its footer, after what it shows
    T_SCRIPT = time.perf_counter()  # when this rerun began (for the first-round latency)

    from pages.common import main_controls as controls  # noqa: E402
    from pages.common import main_view as view  # noqa: E402
    from pages.common import pairs_ui  # noqa: E402
    from pages.common import tree_ui  # noqa: E402
    from pages.common.main_sidebar import sidebar  # noqa: E402
    from specviz.teaching import explain  # noqa: E402
    from specviz.data import playback  # noqa: E402
    from specviz.core.errors import SpecvizError  # noqa: E402

    S = st.session_state
    S.setdefault("main.playing", False)
    S.setdefault("main.follow", True)
    ms = sidebar()

    # --- controls ---------------------------------------------------------------------------------
    st.caption("A small **draft** model proposes k tokens; the large **target** checks all of them in **one** forward "
               "pass, keeps the agreeing prefix, replaces the first mismatch with its own token (**correction**), "
               "and adds a **bonus** token when all k were accepted. Everything below is computed live on real "
               "models, or replayed from a recorded real run.")
    ctrl = st.container()
    controls.pair_missing(ms)
    load_box = st.container()
    tree_ui.main_page_tree(ms.pair_name, ms.dtype, ms.draft_precision, ms.prompt_text, ms.chat, ms.decode,
                           live=ms.live, shape=ms.shape, budget=ms.tree_budget)
    if ms.live and ms.pair_name:  # one run of each offline pair, side by side
        pairs_ui.offline_pairs_section(ms.pair_name, ms.dtype, ms.draft_precision, ms.prompt_text, ms.chat,
                                       ms.decode)
    elif not ms.live:  # the comparison loads every pair: said in one line, not left out unsaid
        st.caption(explain.not_recorded("comparing the offline pairs loads each of them."))
    steps: int | None = 0
    with load_box:
        try:
            steps = controls.handle_request(ms, T_SCRIPT)
        except (SpecvizError, MemoryError) as e:
            ui.show_error(e)
    job: playback.Playback | None = S.get("main.job")
    controls.offer_recording(job)  # what the waiting notice offers to watch while this run waits for the device
    with ctrl:
        controls.buttons(ms, job)

    # --- the animation: one round at a time, then the page drawn once more -------------------------
    ph = view.Placeholders.create()
    # everything under the animation is one element: while a new run animates, it is this run's (empty until the
    # animation ends), never the last run's figures left on screen, faded, until the script reaches them
    below = st.empty()
    if job is not None and steps != 0:
        advanced = False
        try:
            advanced = view.animate(job, steps, ms.speed, ph)
        except Exception as e:  # noqa: BLE001 — a clear message instead of a traceback
            S["main.playing"] = False
            ui.show_error(e)
        if job.done:
            S["main.playing"] = False
            if advanced:
                st.rerun()  # draw the finished page once more, buttons included (no model work)

    if job is None:
        ph.text.info((f"Press **{controls.RUN}** to watch the draft propose and the target verify, round by round "
                      "(the first run loads the models)." if ms.live else
                      f"Press **{controls.PLAY}** to replay the chosen recorded run, round by round: the draft "
                      "proposing and the target verifying, with the timings it was recorded with."))
        with below.container():
            controls.save_load(job)
            ui.shows_caption(SHOWS)
        st.stop()

    with ui.drawing():  # the page as it stands, drawn apart from other sessions' model work
        run = job.current_run()
        ph.head_line(job)
        ph.tokens(job)
        if job.rounds:
            ph.status.markdown(explain.round_summary(job.rounds[-1], view.decoder(job)))
        elif job.error is None:
            ph.status.info("Paused before the first round: press Step or Resume.")
        ph.numbers(run)
        if job.rounds:
            ph.round_log(run, job)
    with below.container():
        with ui.drawing():
            if job.error:
                st.error(f"The run stopped early: {job.error}")
            if job.rounds:
                view.round_detail(job)
                view.acceptance(run, ms.decode.k if ms.live else run.decode.k)  # a recording: its own k
        if job.rounds:
            view.speed(job)  # times the target alone first, when the run asked for it
        controls.save_load(job)
        ui.shows_caption(SHOWS)
