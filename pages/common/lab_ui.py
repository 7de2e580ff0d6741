"""Streamlit helpers for the learning pages (pages 1-6), on top of pages/common/ui.py.

  pair_for_page(prefix)        sidebar pair + dtype pickers, the loaded Pair or None (error shown)
  prompt_input(prefix, pair)   preset or own prompt -> (input ids or None, text)
  stepping_setup(prefix, prompt) a stepping page's pair, decoder, ident, prompt (left) and settings column (right)
  ProgressBar(text)            a progress bar usable as a specviz progress callback
  decoder(pair)                id -> text
  measure(fn, *a, **kw)        run_guarded inside clock.watch(): (result, outside-load note or None)
  with_bar(fn, *a, text=, **kw) measure(fn, ..., progress=a progress bar), the bar gone after
  keep_measured(kept, measured, settings) keep measure's (result, note) in a kept.Kept unless the result is None
  run_settings(ids, settings, **more)  a run's settings by the names the pages say
  StopBar(text)                a ProgressBar that a Stop click (a rerun of the script) stops between units
  stoppable(fn, *a, key=, unit=, on_round=, **kw) a Stop button, then fn behind a StopBar: a Stoppable (result
                               or the units done before a stop, the outside-load note, the stop's note)
  Stoppable.keep(kept), .go_on() keep its value with the stop's note; then let the Stop click's rerun go on
  stopped_note(kept)           the note of a result kept from a stopped measurement (nothing otherwise)
  load_warning(note)           the outside-load note next to the figures: a warning, or a caption when the
                               passes under load took too little of the time to move them (nothing if None)
  timing_details(notes, waited)  a lesson step's load notes and waits in a collapsed "Timing details" expander
  timing_notes(rounds, what)   next to figures timed from these rounds: load_warning, and what waits for a core
                               were left out of their times
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from pages.common import ui
from specviz.teaching import explain
from specviz.core import limits, prompts
from specviz.data import playback
from specviz.core.errors import SpecvizError, Stopped
from specviz.core.settings import DecodeSettings


def pair_for_page(prefix: str, *, dtype: bool = True, draft: bool = True, shared_vocab: bool = True):
    """Pick and load the pair (cached per server); None after showing why it can't be used.

    draft=False: the page uses only the target, so no draft-precision control is shown.
    shared_vocab: the page compares the draft's q with the target's p token by token, which a draft with
    another tokenizer (drafting through text) cannot give: such a pair is explained, not used.
    """
    name, dt, precision, t_precision = ui.choice_pickers(prefix, dtype=dtype, draft=draft)
    if name is None:
        ui.show_device(None, dt)
        return None
    status = ui.pair_status(name)
    if not status.available:
        ui.show_device(None, dt)
        st.error(f"The pair **{name}** is not installed here: {status.reason}. "
                 f"How to get it: {status.how_to_get}", icon=":material/error:")
        return None
    try:
        pair = ui.load_pair_cached(name, dt, precision, t_precision)
    except (SpecvizError, MemoryError) as e:
        ui.show_device(None, dt)
        ui.show_error(e)
        return None
    ui.show_device(pair, dt)
    if shared_vocab and draft and not pair.shares_vocab:
        st.info(f"**{name}**'s draft has its own tokenizer and drafts through text (see the main page). This page "
                "compares the draft's q with the target's p token by token, which needs one vocabulary: pick a "
                "pair whose draft shares the target's tokenizer.", icon=":material/info:")
        return None
    return pair


def dtype_name(pair) -> str:
    return str(pair.dtype).replace("torch.", "")


def decoder(pair):
    return ui.decoder(pair.tokenizer)


def prompt_input(prefix: str, pair, default: str = "The capital of France", where=None):
    """A preset selectbox and an editable prompt; returns (ids or None, shown text).

    Choosing a preset fills the text box; "chat template" wraps the text as a
    user message for instruct models. An empty prompt shows an error and gives None.
    """
    where = where or st
    names = [p.name for p in prompts.PRESETS]
    key_p, key_t, key_c = f"{prefix}.preset", f"{prefix}.text", f"{prefix}.chat"
    if key_t not in st.session_state:
        p = prompts.preset(default)
        st.session_state[key_t] = p.text
        st.session_state[key_c] = p.chat

    def fill():
        p = prompts.preset(st.session_state[key_p])
        st.session_state[key_t] = p.text
        st.session_state[key_c] = p.chat

    where.selectbox("Preset prompt", names, index=names.index(default), key=key_p, on_change=fill,
                    help="Each preset is a domain: code, list, factual, creative, repetition. "
                         "Pick one, then edit the text if you like.")
    text = where.text_area("Prompt", key=key_t, height=90, max_chars=limits.max_prompt_chars())
    chat = where.checkbox(ui.CHAT_LABEL, key=key_c, help=ui.CHAT_HELP)  # a short label: it fits in presenter type
    try:
        ids = prompts.encode(pair.tokenizer, text, chat)
    except SpecvizError as e:
        ui.show_error(e)
        return None, text
    where.caption(f"{len(ids)} prompt tokens")
    return ids, text


def chat_on(prefix: str) -> bool:
    """Whether prompt_input(prefix, ...)'s chat-template box is ticked: a run started now answers a chat message."""
    return bool(st.session_state.get(f"{prefix}.chat"))


def stepping_setup(prefix: str, default_prompt: str, shared_vocab: bool = True, pair=None):
    """(pair, decode, ident, ids, text, right column) for a page that steps one run round by round.

    Stops the page when no pair can be used (shared_vocab as in pair_for_page; pair: one the page already
    picked). ident is (pair, dtype): a run belongs to those models. The prompt goes in the left column; the page
    puts its settings in the right.
    """
    pair = pair or pair_for_page(prefix, shared_vocab=shared_vocab)
    if pair is None:
        st.stop()
    left, right = st.columns([3, 2])
    with left:
        ids, text = prompt_input(prefix, pair, default=default_prompt)
    return pair, decoder(pair), (pair.name, dtype_name(pair)), ids, text, right


class ProgressBar:
    """st.progress driven by specviz progress callbacks (message, fraction or None)."""

    def __init__(self, text: str = "starting…", where=None):
        self.bar = (where or st).progress(0.0, text=text)
        self.frac = 0.0

    def __call__(self, msg: str, frac: float | None = None) -> None:
        if frac is not None:
            self.frac = max(0.0, min(1.0, float(frac)))
        self.bar.progress(self.frac, text=msg)

    def done(self) -> None:
        self.bar.empty()


class StopBar(ProgressBar):
    """A ProgressBar for a stoppable measurement (core.progress.Units): a Stop click reruns the script, which
    streamlit signals at this bar's next update; the bar keeps that signal (`interrupt`) and stops the
    measurement between units instead, so what was finished can be kept before the rerun goes on."""

    def __init__(self, text: str = "starting…", where=None):
        super().__init__(text, where)
        self.interrupt: ScriptControlException | None = None
        self.tick = None  # the last core.progress.Tick: units done, of how many

    def __call__(self, msg: str, frac: float | None = None) -> None:
        if hasattr(msg, "done"):
            self.tick = msg
        if self.interrupt is not None:
            raise Stopped()
        try:
            super().__call__(msg, frac)
        except ScriptControlException as e:  # a click (Stop, or any widget) while it runs
            self.interrupt = e
            raise Stopped() from None

    def guard(self, draw):
        """draw(...), which draws as the measurement goes: a click that streamlit signals at its update stops
        the measurement, as one at the bar's does."""
        def drawn(*args, **kw):
            if self.interrupt is not None:
                raise Stopped()
            try:
                return draw(*args, **kw)
            except ScriptControlException as e:
                self.interrupt = e
                raise Stopped() from None
        return drawn


@dataclass
class Stoppable:
    """What a stoppable measurement gave: its result (or the units finished before a stop; None when it failed),
    the outside-load note, the stop's note (None: it ran to the end), the units done, and the rerun a click
    asked for."""

    value: Any
    load: Any = None
    stopped: str | None = None
    done: int = 0
    interrupt: ScriptControlException | None = None

    def keep(self, kept, value: Any = None, settings=None) -> Any:
        """Keep `value` (default: self.value) in kept (a kept.Kept) with the stop's note; nothing when it failed
        or stopped before its first unit (what was there stays). Returns what was kept, or None."""
        value = self.value if value is None else value
        if value is None or (self.stopped and self.done == 0):
            return None
        kept.put(value, settings=settings)
        st.session_state[kept.key + STOPPED] = self.stopped
        return value

    def go_on(self) -> None:
        """Let the rerun that the click asked for happen (after the page kept what it needs)."""
        if self.interrupt is not None:
            raise self.interrupt


STOPPED = ".stopped"


def stoppable(fn, *args, key: str, unit: str, plural: str | None = None, text: str = "starting…", on_round=None,
              **kw) -> Stoppable:
    """A Stop button drawn first, then fn(*args, progress=a StopBar, **kw) while watching its passes. A click on
    Stop (or any widget) stops fn between its units: the Stoppable holds the units done and says so. The page
    keeps what it needs (Stoppable.keep), then calls Stoppable.go_on(). on_round: what fn draws with as it goes
    (given to fn as on_round), stopped by a click as the bar is (StopBar.guard)."""
    from specviz.device import clock

    slot = st.empty()
    slot.button(explain.STOP_LABEL, key=key, icon=":material/stop:", help=explain.STOP_HELP)
    bar = StopBar(text)
    stopped, done = None, 0
    if on_round is not None:
        kw = {**kw, "on_round": bar.guard(on_round)}
    with clock.watch() as w:
        try:
            value = fn(*args, progress=bar, **kw)
        except Stopped as e:
            value = e.partial
            done, total = (bar.tick.done, bar.tick.total) if bar.tick is not None else (0, 0)
            stopped = explain.stopped_note(done, total, unit, plural)
        except (SpecvizError, MemoryError) as e:
            value = None
            if bar.interrupt is None:
                ui.show_error(e)
    out = Stoppable(value, w.note(), stopped, done, bar.interrupt)
    if out.interrupt is None:  # on a click, draw nothing more: the rerun comes next
        try:
            bar.done()
            slot.empty()
        except ScriptControlException as e:  # a click that came after the last unit: the result is whole
            out.interrupt = e
    return out


def stopped_note(kept) -> None:
    """The note of a result kept from a stopped measurement, next to it (nothing for a whole one)."""
    note = st.session_state.get(kept.key + STOPPED) if kept.get() is not None else None
    if note:
        st.warning(note, icon=":material/stop_circle:")


def measure(fn, *args, **kw):
    """run_guarded(fn, ...) while watching its timed passes: (result or None, outside-load note or None)."""
    from specviz.device import clock

    with clock.watch() as w:
        out = run_guarded(fn, *args, **kw)
    return out, w.note()


def with_bar(fn, *args, text: str = "starting…", **kw):
    """measure(fn, *args, progress=bar, **kw) behind a progress bar: (result or None, outside-load note or None)."""
    bar = ProgressBar(text)
    out = measure(fn, *args, progress=bar, **kw)
    bar.done()
    return out


def keep_measured(kept, measured, settings=None):
    """Keep the (result, outside-load note) of measure or with_bar in kept (a kept.Kept), with the named settings
    it was measured with (Kept.put); a failed run keeps nothing."""
    result, note = measured
    return kept.put((result, note) if result is not None else None, settings=settings)


def run_settings(ids, settings: DecodeSettings, **more) -> dict:
    """A run's settings (its prompt ids and DecodeSettings) by the names the pages' words give them
    (explain.other_settings): what Kept.put records with a result and Kept.changed compares, and what a kept Run
    is compared on. more: a section's own (k, b)."""
    return {"prompt": list(ids or []), "temperature": float(settings.temperature),
            "number of new tokens": int(settings.max_new_tokens), "seed": int(settings.seed), **more}


def load_warning(note) -> None:
    """A clock.LoadNote next to the figures: a warning when the passes under outside load took enough of
    the timed time to move them, else a caption that says how little; nothing for None."""
    if note is None:
        return
    if note.serious:
        st.warning(note.text, icon=":material/warning:")
    else:
        st.caption(f":material/info: {note.text}")


TIMING_DETAILS = "Timing details"  # the expander that holds a lesson step's timing bookkeeping


def timing_details(notes, waited) -> None:
    """A lesson step's load notes (clock.LoadNote) and waits left out (sentences) in a collapsed "Timing
    details" expander after its answer, never inside the lesson's sentences; its icon warns when a note is
    serious. Nothing when there are none."""
    notes, waited = [n for n in notes if n is not None], [w for w in waited if w]
    if not notes and not waited:
        return
    icon = ":material/warning:" if any(n.serious for n in notes) else ":material/schedule:"
    with st.expander(TIMING_DETAILS, expanded=False, icon=icon):
        for note in notes:
            load_warning(note)
        for w in waited:
            st.caption(w)


def timing_notes(rounds, what: str) -> None:
    """Next to figures timed from these rounds (chain, target-alone or tree rounds, of one run or several):
    the outside-load note (playback.rounds_load_note) and, when the waits for a core left out of their times
    were a noticeable share, the sentence that says how much (explain.stalled_note). what: "the race", ..."""
    rounds = list(rounds)
    load_warning(playback.rounds_load_note(rounds, what))
    waited = explain.stalled_note(sum(r.stalled_s for r in rounds), sum(r.round_s for r in rounds), what=what)
    if waited:
        st.caption(waited)


def run_guarded(fn, *args, **kw):
    """Call fn; on a specviz or memory error show it in the page and return None."""
    try:
        return fn(*args, **kw)
    except (SpecvizError, MemoryError) as e:
        ui.show_error(e)
        return None
