"""A learning page's source: live on a loaded pair, or its default experiment from a shipped recording.

  recorded_source(prefix)               the sidebar's Live / Recorded choice, the same remembered value on every page
  pair_or_page_recording(prefix, page)  (pair, None) live; (None, PageRecording) from specviz/recorded/pages/<page>.json
  pair_or_main_recording(prefix, name)  (pair, None) live; (None, runfile.Recording) from specviz/recorded/<name>.json
  notice(about, settings, fell_back)    the notice that the page shows a recording: pair, device, settings, when

A live page whose pair cannot be used here (not installed, no registry, an error) falls back to its recording, after
saying why; with no recording shipped it stops as it did.
"""

from __future__ import annotations

import streamlit as st

from pages.common import lab_ui, state, ui
from specviz.core.errors import SpecvizError
from specviz.data import pagefile, runfile
from specviz.teaching import explain

LIVE, RECORDED = "Live, on the loaded pair", "Recorded (no model needed)"
SOURCES = {"live": LIVE, "recorded": RECORDED}  # the remembered "source", shared with the main page and Lessons


def recorded_source(prefix: str) -> bool:
    """The sidebar's source radio (its remembered value first); True when Recorded is chosen."""
    state.restore_widget(f"{prefix}.source", "source", "live", SOURCES)
    source = st.sidebar.radio("Source", [LIVE, RECORDED], key=f"{prefix}.source",
                              help="Live runs this page's experiments on the pair chosen below. Recorded shows its "
                                   "default experiment as it ran on the real pair, with no model loaded.")
    return state.keep_widget("source", source, SOURCES, "live") == "recorded"


def notice(about, settings, fell_back: bool) -> None:
    st.info(explain.recording_words(about, settings, fell_back), icon=":material/history:")


def _live_pair(prefix: str, pair_kw: dict):
    """(pair or None, recorded chosen): the loaded pair when the source is live and one can be used."""
    if recorded_source(prefix):
        return None, True
    return lab_ui.pair_for_page(prefix, **pair_kw), False


def pair_or_page_recording(prefix: str, page: str, **pair_kw):
    """(pair, None) when live on a usable pair; else (None, the page's PageRecording), its notice shown; (None, None)
    when there is neither (the reason shown)."""
    pair, chosen = _live_pair(prefix, pair_kw)
    if pair is not None:
        return pair, None
    try:
        rec = pagefile.load(page)
    except SpecvizError as e:
        ui.show_error(e)
        return None, None
    if rec is None:
        if chosen:
            st.warning(f"No recording of this page ships here (specviz/recorded/pages/{page}.json): choose **Live**.",
                       icon=":material/warning:")
        return None, None
    notice(rec.about, rec.settings, fell_back=not chosen)
    return None, rec


def main_about(rec: runfile.Recording) -> dict[str, str]:
    """A main-page recording's pair, device, dtype, drafter and date, as a page recording's about names them."""
    run = rec.run
    return {"pair": rec.pair, "device": run.device, "dtype": run.dtype,
            "draft_precision": str(run.settings.get("drafter", "")).removesuffix(" draft model"),
            "recorded_at": rec.recorded_at}


def pair_or_main_recording(prefix: str, name: str, settings_of, **pair_kw):
    """(pair, None) when live on a usable pair; else (None, the main page's recording called name), with its notice
    (settings_of(recording) -> the settings it names); (None, None) when there is neither (the reason shown)."""
    pair, chosen = _live_pair(prefix, pair_kw)
    if pair is not None:
        return pair, None
    rec = next((r for r in runfile.list_recorded() if r.name == name), None)
    if rec is None:
        if chosen:
            st.warning(f"The recording specviz/recorded/{name}.json is missing or broken: choose **Live**.",
                       icon=":material/warning:")
        return None, None
    notice(main_about(rec), settings_of(rec), fell_back=not chosen)
    return None, rec


def results(rec: pagefile.PageRecording, types: dict) -> dict | None:
    """The recording's results, read back as types (name -> type); None after showing why a file is broken."""
    try:
        return {name: rec.result(name, tp) for name, tp in types.items()}
    except SpecvizError as e:
        ui.show_error(e)
        return None
