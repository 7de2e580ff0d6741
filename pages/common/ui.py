"""Streamlit-only helpers shared by app.py and every page.

Stable API (pages import these):
    page_setup(title, shows=(), words=())
                                        st.set_page_config first, then the title (and links to the claims
                                        shown, and the words it uses); joins the device queue
    words_on_page(names, where=None)    the "Words on this page" expander: each glossary term the page shows
    presenter()                         whether presenter mode is on (large type, thick token boxes, slow animation)
    sidebar_pair_picker(prefix)         -> chosen pair name (unavailable pairs explained)
    dtype_picker(prefix)                -> "float32" | "bfloat16" (default specviz.decoding.models.DEFAULT_DTYPE)
    precision_picker(prefix)            -> the draft's precision (default specviz.modeling.quant.default_precision)
    target_picker(prefix, dtype)        -> the target's precision: float32 (the reference) or int8
    choice_pickers(prefix, ...)         -> (pair, dtype, draft precision, target precision), with memory_note
    load_pair_cached(name, dtype, draft_precision=None, target_precision=None)
                                        -> Pair from specviz.service.pairs (the server's one budgeted store of
                                           models), a status box with a progress bar drawn while it loads
    lease_pair(name, dtype, draft_precision=None, target_precision=None)
                                        -> (Pair, lease), drawn the same: the store never unloads it while the
                                           lease is held
    memory_note(name, dtype, precision, target_precision=None)
                                        what the choice needs of the memory budget, and what each choice needs
    show_device(pair_or_none, dtype)    device + dtype line in the sidebar
    show_chart(fig, name, key=None)     st.plotly_chart with the PNG-download config, drawn in a turn
    presented(fig)                      a figure as this session shows it (grown in presenter mode)
    button_row(), metric_cells(n)       a row of buttons, or of n metrics, that wraps on a narrow screen
    table(data, **kw)                   st.dataframe, missing cells shown as explain.MISSING
    note_other_settings(changed)        a caption under a kept result measured with other settings (by name)
    drawing()                           a turn to draw, apart from the server's model work
    show_error(e)                       a clear message, never a traceback (details in an expander)
    decoder(tokenizer)                  id -> text, memoised per tokenizer
    pair_status(name), list_pairs_safe()

The models live in specviz.service.pairs: one budgeted store per server (however many laptops connect), which
unloads the least recently used pair to make room; this module only draws its loads. Per-user results live in
st.session_state.
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import streamlit as st

from pages.common import nav, state
from specviz.teaching import charts, explain, glossary, render
from specviz.core import claims, limits
from specviz.core.errors import ConfigError, InvalidSetting, SpecvizError
from specviz.service import pairs


# presenter mode: for projecting to a room. Type and token boxes grow; the sidebar starts collapsed.
PRESENTER = state.PREFIX + "presenter"  # "on" or "off", kept across pages and in the address (state.remembered)
ROOT_PX = 16  # the browser's root type size
PRESENTER_ROOT_PX = round(ROOT_PX * charts.PRESENTER_SCALE)  # presenter mode's (21): the page grows as its charts
PRESENTER_CSS = """<style>
html, [data-testid="stAppViewContainer"] { font-size: ROOT_PX; }
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.2rem; }
h1 { font-size: 2.9rem !important; }
.sv-text { font-size: 30px !important; line-height: 2.3 !important; }
.sv-tok { padding: 2px 5px !important; margin: 0 3px !important; border-width: 4px !important; }
.sv-accepted, .sv-bonus { border-bottom-width: 6px !important; }
.sv-legend { font-size: 1.2rem !important; }
.sv-diff { font-size: 1rem !important; }
[data-testid="stMetricValue"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"] p { font-size: inherit !important; }
</style>"""  # the metric rule: a metric's value and label are markdown too, and 1.2rem made values smaller
PRESENTER_CSS = PRESENTER_CSS.replace("ROOT_PX", f"{PRESENTER_ROOT_PX}px")
# every page, in both modes: a metric's label wraps to a second line instead of ending in '…' ("total variation
# dista…" in a quarter of a 1024-pixel laptop's page), and each keeps room for two, so the figures of a row stay
# level. Style tags alone in st.html take no room on the page.
PAGE_CSS = """<style>
[data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"],
[data-testid="stMetricLabel"] [data-testid="stMarkdownContainer"] p { white-space: normal !important; }
[data-testid="stMetricLabel"] { min-height: 2.6em; align-items: flex-start !important; }
</style>"""


# presenter mode's keys, on the page around the component's frame, so that neither is ever dead (README):
# space plays or pauses (or runs): Pause or Resume, else the page's run button, else its first primary button
# (Measure, Compare, Start the race...), else (a page with nothing to run, or its runs greyed out) it scrolls
# the page down by most of a screen; → steps one round (or goes to the next lesson step), and on a page with no
# step button at all (greyed out counts as one: a lesson step not yet measured) it opens the next page of the
# sidebar's list. On the pages that step by hand (Slow motion round, Token tree) both take the next round, or
# the first when there is none yet. Never while typing in a box.
PRESENTER_KEYS = """<script>
const doc = window.parent.document;
{
  const RUNS = ['Run', 'Play recording', 'Run the experiment'];
  const STEPS = ['Step', 'Next step →', 'Next round'];
  const buttons = (labels) => [...doc.querySelectorAll('button')].filter((b) =>
    labels.some((l) => b.innerText.trim().endsWith(l)));
  const click = (labels) => {
    const b = buttons(labels).find((b) => !b.disabled);
    if (b) b.click();
    return Boolean(b);
  };
  const primary = () => {  // the first primary button of the page (not the sidebar's), not a step button
    const b = [...doc.querySelectorAll('[data-testid="stMain"] button[data-testid="stBaseButton-primary"]')]
      .find((b) => !b.disabled && !STEPS.some((l) => b.innerText.trim().endsWith(l)));
    if (b) b.click();
    return Boolean(b);
  };
  const scroll = () => {  // the next screenful of the page
    const m = [doc.querySelector('[data-testid="stMain"]'), doc.scrollingElement]
      .find((e) => e && e.scrollHeight > e.clientHeight + 1);
    if (m) m.scrollBy({top: Math.round(m.clientHeight * 0.8), behavior: 'smooth'});
    return Boolean(m);
  };
  const nextPage = () => {  // the page after this one in the sidebar's list (after the last: the first)
    const links = [...doc.querySelectorAll('[data-testid="stSidebarNav"] a')];
    const here = links.findIndex((a) => new URL(a.href).pathname.replace(/\\/$/, '')
      === window.parent.location.pathname.replace(/\\/$/, ''));
    if (here < 0 || links.length < 2) return false;
    links[(here + 1) % links.length].click();
    return true;
  };
  // one listener at a time, this frame's: a listener made by the frame of a page no longer shown never runs
  // again, so each page's frame replaces the last one's
  if (doc.specvizKeys) doc.removeEventListener('keydown', doc.specvizKeys);
  doc.specvizKeys = (e) => {
    if (!doc.body.innerText.includes('space plays or pauses')) return;  // presenter mode is off now
    const t = e.target, tag = ((t && t.tagName) || '').toLowerCase();
    if (tag === 'input' || tag === 'textarea' || tag === 'select' || (t && t.isContentEditable)) return;
    let done = false;
    if (e.key === ' ' && e.repeat) done = true;  // a held key repeats: act on the first press only
    else if (e.key === ' ') done = click(['Pause', 'Resume']) || click(RUNS) || click(['Next round'])
      || click(['First round']) || primary() || scroll();
    else if (e.key === 'ArrowRight') done = click(STEPS) || click(['First round'])
      || (buttons(STEPS).length === 0 && nextPage());
    if (done) e.preventDefault();
  };
  doc.addEventListener('keydown', doc.specvizKeys);
}
</script>"""


def presenter() -> bool:
    """Whether presenter mode is on in this session (every page shares it)."""
    return state.remembered("presenter", "off", ("on", "off")) == "on"


def _presenter_toggle() -> None:
    def keep() -> None:
        state.remember("presenter", "on" if st.session_state["ui.presenter"] else "off", "off")

    st.sidebar.toggle("Presenter mode", value=presenter(), key="ui.presenter", on_change=keep,
                      help="For a projector: large type, thick token boxes, the sidebar collapsed on each page, "
                           "and a slower animation by default.")
    if presenter():
        st.markdown(PRESENTER_CSS, unsafe_allow_html=True)
        import streamlit.components.v1 as components

        components.html(PRESENTER_KEYS, height=0)
        st.sidebar.caption("Keys: space plays or pauses (or runs; with nothing to run, scrolls down), → steps one "
                           "round (or to the next lesson step; with no step, opens the next page).")


def page_setup(title: str, icon: str = "⚡", layout: str = "wide", shows: tuple[int, ...] = (),
               words: tuple[str, ...] = ()) -> None:
    """Page config (must be the first Streamlit call of a page), the title, links to the claims it shows, the
    words it uses (words_on_page), and the place where this session's wait for the device is shown."""
    nav.own_list()  # a page opened by its address before app.py named the pages: its navigation names them
    st.set_page_config(page_title=f"{title} · specviz", page_icon=icon, layout=layout,
                       initial_sidebar_state="collapsed" if presenter() else "auto")
    st.html(PAGE_CSS)
    _presenter_toggle()
    st.title(title)
    if shows:
        shows_caption(shows)
    if words:
        words_on_page(words)
    _note_new_session()
    try:
        limits.check_all()
    except ConfigError as e:  # a bad limit (core/limits.py): said, and the page stops before it reads one
        st.error(render.md_text(str(e)), icon=":material/settings:")  # it quotes the value: plain text
        st.stop()
    join_device_queue()


def shows_caption(shows: tuple[int, ...]) -> None:
    """The claims a page shows, linked: under the title, or (the main page) in its footer."""
    st.caption("Shows " + ", ".join(claims.link(n) for n in shows)
               + f" of [{claims.PAGE_TITLE.lower()}]({claims.PAGE_PATH}).")


WORDS_TITLE = "Words on this page"


def words_on_page(names, where=None) -> None:
    """A collapsed expander that defines the glossary terms (specviz.teaching.glossary) a page shows, by name,
    alphabetically, and links the Glossary page. A name the glossary lacks is an error (glossary.term)."""
    terms = glossary.alphabetical({glossary.term(n) for n in names})
    box = (where or st).expander(WORDS_TITLE, expanded=False, icon=":material/menu_book:")
    box.markdown("\n".join(f"- {glossary.entry_md(t)}" for t in terms))
    box.caption("Every word the app uses: the [Glossary](./Glossary) page.")


SESSION_SEEN = "ui.session_seen"  # set on a session's first run


def _note_new_session() -> None:
    """On the first run of a session that replaced one its browser had (its server process stopped), say why
    earlier results are gone (explain.NEW_SESSION). Streamlit's client names the session it had in the third
    entry of the websocket's subprotocol header; a page opened afresh names none."""
    if SESSION_SEEN in st.session_state:
        return
    st.session_state[SESSION_SEEN] = True
    entries = (st.context.headers.get("Sec-Websocket-Protocol") or "").split(",")  # None in an AppTest
    if len(entries) >= 3 and entries[2].strip():
        st.warning(explain.NEW_SESSION, icon=":material/sync_problem:")


WAIT_OFFER = "ui.wait_offer"  # markdown the waiting notice adds: what the session may watch meanwhile


def join_device_queue() -> None:
    """This session's model work queues for the device under its session id (specviz.device.devqueue).

    While a round or a measurement waits its turn, a notice under the title says how many sessions
    are ahead, and what st.session_state[WAIT_OFFER] offers to watch meanwhile. Each check while waiting
    is also a point where Streamlit stops the script: a rerun (Run pressed again, any widget) or a closed
    tab drops the queued work instead of waiting on.
    The model work runs on threads of its own; $SPECVIZ_PAGE_NICE may lower the page's priority below
    theirs (by default it does not).
    """
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    from specviz.device import devqueue, tuning

    ctx = get_script_run_ctx()
    notice = st.empty()
    shown: list = [None]

    def on_wait(ahead: int | None) -> None:
        _ = "devqueue" in st.session_state  # Streamlit raises here when this script must stop or rerun
        if ahead == shown[0]:
            return
        shown[0] = ahead
        if ahead is None:
            notice.empty()
        else:
            est = devqueue.QUEUE.wait_estimate(owner) if ahead else None
            offer = st.session_state.get(WAIT_OFFER)  # something to watch meanwhile (the main page's recording)
            notice.info(explain.queue_wait(ahead, est) + (f"\n\n{offer}" if offer else ""),
                        icon=":material/hourglass_top:")

    owner = ctx.session_id if ctx is not None else "no-session"
    devqueue.set_session(owner, on_wait)
    devqueue.start()  # once per server, before lower_page_threads: the device's workers keep the server's priority
    for server_setting in (tuning.lower_page_threads, tuning.handover):
        try:
            server_setting()
        except InvalidSetting as e:  # a bad environment variable of the server: said, and the page goes on
            st.error(f"Server setting ignored: {e}", icon=":material/settings:")


def error_details(e: BaseException) -> str:
    """The error and where it happened, by file name and line only (no server paths)."""
    frames = traceback.extract_tb(e.__traceback__)
    where = [f"  {os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in frames]
    return "\n".join([f"{type(e).__name__}: {e}"] + where)


def show_error(e: BaseException) -> None:
    """A clear message in the page, never a traceback; specviz errors are already written for people.

    Anything else gets a short message and an expander with the details (file names, no paths).
    """
    if isinstance(e, SpecvizError):
        st.error(str(e), icon=":material/error:")
    elif isinstance(e, MemoryError):
        st.error(f"Not enough memory: {e}. Try a smaller pair, bfloat16, or fewer tokens.", icon=":material/error:")
    else:
        st.error("Something went wrong, and what you had on the page is kept. Try again, or report the details "
                 "below.", icon=":material/error:")
        with st.expander("Details"):
            st.code(error_details(e), language=None)


METRIC_PX = 172  # a metric's cell: its label, value and caption fit without being cut


def button_row():
    """A row for buttons, each as wide as its label, that wraps on a narrow screen: in columns of fixed shares a
    1024-pixel laptop with the sidebar open cut them to "First rou…" and "R…"."""
    return st.container(horizontal=True)


def metric_cells(n: int) -> list:
    """n containers for metrics (and their captions) in one row that wraps on a narrow screen: in n equal
    columns a 1024-pixel projector cut the labels to "α (per-toke…"."""
    row = st.container(horizontal=True, wrap=True)
    return [row.container(width=METRIC_PX) for _ in range(n)]


CHAT_LABEL = "chat template"  # the prompt's chat-template checkbox, on every page that has one
CHAT_HELP = ("Wrap the prompt in the model's chat template (instruct models). "
             "Off: the model simply continues the raw text.")


def table_height(n_rows: int, cap: int = 400) -> int:
    """Pixels that show a table's header and n_rows rows (at most `cap`, in normal type) without scrolling:
    Streamlit draws a row in 35 px at the normal 16 px root size, more in presenter mode's larger type."""
    scale = PRESENTER_ROOT_PX / ROOT_PX if presenter() else 1.0
    return round(min(38 + 35 * n_rows, cap) * scale)


def table(data, room_columns: int | None = None, **kw):
    """st.dataframe with missing cells shown as explain.MISSING: a correction row has no q(d), p(d) or
    overlap, and Streamlit writes "None" there by default.

    In presenter mode a table drawn whole (no selection, no fixed height) is an HTML table in the room's type:
    st.dataframe draws on a canvas whose 14-pixel type does not grow with the page's. A table with rows to
    pick, or one that scrolls (a fixed height), stays a dataframe.
    room_columns: a wide table (rows as dicts) shows only its first room_columns columns there, and says which
    the desk view adds: in the room's type it would scroll sideways on a 1024-pixel projector."""
    if presenter() and "on_select" not in kw and "height" not in kw:
        hidden: list[str] = []
        if room_columns is not None:
            rows = [dict(r) for r in data]
            names = list(rows[0]) if rows else []
            hidden = names[room_columns:]
            data = [{c: r.get(c) for c in names[:room_columns]} for r in rows]
        shown = st.table(_cells(data), hide_index=kw.get("hide_index"))
        if hidden:
            st.caption(explain.room_columns_note(hidden))
        return shown
    return st.dataframe(data, placeholder=explain.MISSING, **kw)


def _cells(data):
    """data as st.table shows it like st.dataframe: a float with up to 6 significant digits (not pandas' fixed
    4 decimals, "347.1600"), a missing cell as explain.MISSING, and text as it is. st.table renders its cells as
    markdown, where a drafted "```" would open a code block and a token from an uploaded file could plant a link
    or a remote image, so text is escaped (render.md_text)."""
    import pandas as pd

    def cell(v):
        if isinstance(v, float):
            return f"{v:.6g}"
        return render.md_text(v) if isinstance(v, str) else v

    return pd.DataFrame(data).style.format(cell, na_rep=explain.MISSING)


def note_other_settings(changed, button: str | None = None) -> None:
    """A caption under a kept result, naming the settings above that differ from the ones it was measured with
    (Kept.changed); nothing when none do. The result stays: going back to those settings shows it unmarked.
    button: a run stepped round by round, started anew by that button (explain.other_settings)."""
    if words := explain.other_settings(list(changed), button):
        st.caption(f":material/history: {words}")


def show_chart(fig, name: str, key: str | None = None, **kw):
    """A plotly figure with the light-theme PNG download button (filename `name`); returns what
    st.plotly_chart returns (the selection, with on_select). Drawn apart from model work (drawing()). In
    presenter mode the chart grows with the page's type (presented). theme=None: the chart (and its PNG) is the
    figure charts.py made; Streamlit's theme would set its margins left and right to 0, cutting text at the right
    edge, and swap its type for a web font (tests/test_chart_export.py checks the figure as made)."""
    with drawing():
        return st.plotly_chart(presented(fig), config=charts.plotly_config(name), key=key, theme=None, **kw)


def presented(fig):
    """fig as this session shows it: grown with the room's type in presenter mode (charts.for_presenter)."""
    return charts.for_presenter(fig) if presenter() else fig


def drawing():
    """A turn to draw: the block runs while no model work of this server runs (specviz.device.devqueue).

    Python runs one thread at a time, and a page drawing beside a draft step slows the step several times
    over, so every figure a session measures would read slow while other pages draw. Wrap drawing only:
    model work asked inside it (a round, a load) waits outside the turn."""
    from specviz.device import devqueue

    return devqueue.drawing()


# --- pairs and dtypes -------------------------------------------------------------------------
def list_pairs_safe() -> list:
    """specviz.decoding.models.list_pairs(), or [] after showing the error (a broken models.yaml)."""
    from specviz.decoding import models

    try:
        return models.list_pairs()
    except SpecvizError as e:
        show_error(e)
        return []


def sidebar_pair_picker(prefix: str, where=None) -> str | None:
    """Pair selectbox in the sidebar; returns the chosen name (None if the registry is broken).

    Each pair is marked installed or not; for a missing one the sidebar says why
    and how to get it. The choice is kept in st.session_state[f"{prefix}.pair"].
    """
    where = where or st.sidebar
    pairs = list_pairs_safe()
    if not pairs:
        return None
    by_name = {p.name: p for p in pairs}
    names = list(by_name)

    def label(n: str) -> str:
        p = by_name[n]
        mark = "✓" if p.available else "✗ not installed"
        return f"{n}{' (default)' if p.is_default else ''} · {mark}"

    name = where.selectbox("Model pair (draft → target)", names, format_func=label, key=f"{prefix}.pair",
                                help="A small draft model proposes tokens, the larger target verifies them. "
                                     "Pairs come from models.yaml; both models share one tokenizer.")
    p = by_name[name]
    if p.description:
        where.caption(p.description)
    if not p.available:
        where.warning(f"**{name} is not available here.** {p.reason}\n\n**How to get it:** {p.how_to_get}")
    return name


def pair_status(name: str):
    """PairStatus of one pair (available, reason, how_to_get)."""
    from specviz.decoding import models

    return models.pair_status(name)


def dtype_picker(prefix: str, where=None, default: str | None = None) -> str:
    """The dtype radio (dtype_choices for this device); default from specviz.decoding.models.DEFAULT_DTYPE
    (or `default`, where this device offers it)."""
    from specviz.decoding import models

    where = where or st.sidebar
    choices = pairs.dtype_choices(models.default_device())
    default = default if default in choices else pairs.default_dtype_name()
    return where.radio("dtype", choices, index=choices.index(default) if default in choices else 0,
                       key=f"{prefix}.dtype", horizontal=True,
                       help="float32 is fastest on a CPU; bfloat16 halves the memory (default on a GPU) "
                            "but rounds differently, which can break greedy exactness.")


def precision_picker(prefix: str, where=None, default: str | None = None) -> str:
    """The draft's precision: float32, bfloat16, int8, int4 (those that run on this device)."""
    from specviz.decoding import models
    from specviz.modeling import quant

    where = where or st.sidebar
    device = models.default_device()
    choices = list(quant.supported(device))
    default = default or quant.default_precision(device)
    return where.radio("draft precision", choices, index=choices.index(default) if default in choices else 0,
                       key=f"{prefix}.draft_precision", horizontal=True,
                       help=explain.DRAFT_PRECISION_HELP)


def target_picker(prefix: str, dtype: str, where=None, default: str = "float32") -> str:
    """The target's precision: float32 (the reference) or int8 (target_choices: where it loads), starting at
    `default` (fitting_default's); a choice the dtype no longer offers goes back to the first offered."""
    where = where or st.sidebar
    choices = pairs.target_choices(dtype)
    key = f"{prefix}.target_precision"
    if st.session_state.get(key) not in (None, *choices):
        st.session_state.pop(key)
    return where.radio("target precision", choices, index=choices.index(default) if default in choices else 0,
                       key=key, horizontal=True, disabled=len(choices) < 2,
                       help=explain.TARGET_PRECISION_HELP)


def choice_pickers(prefix: str, dtype: bool = True, draft: bool = True, target: bool = False,
                   where=None) -> tuple[str | None, str, str, str]:
    """(pair, dtype, draft precision, target precision) from the sidebar, starting from the first choice that
    fits the memory budget (said when it is not the default), with what the choice needs under them
    (memory_note). target=False: no target picker, and the target is float32."""
    where = where or st.sidebar
    name = sidebar_pair_picker(prefix, where)
    dt0, p0, t0, why = pairs.fitting_default(name) if dtype else (pairs.default_dtype_name(), None, "float32", None)
    dt = dtype_picker(prefix, where, default=dt0) if dtype else pairs.default_dtype_name()
    precision = precision_picker(prefix, where, default=p0) if draft else dt  # else: the loaded draft as it is
    # no picker: the target precision that fits (float32 unless only an int8 target fits the budget)
    t_precision = target_picker(prefix, dt, where, default=t0) if target else (t0 if dt == dt0 else "float32")
    if why and (dt, precision, t_precision) == (dt0, p0, t0):
        where.info(why, icon=":material/memory:")
    memory_note(name, dt, precision, where, target_precision=t_precision)
    return name, dt, precision, t_precision


def show_device(pair: Any | None = None, dtype: str | None = None, where=None) -> None:
    """One line: the device (cpu/cuda/mps), on a CPU the int8 engine (fbgemm's x86 or ARM's qnnpack), and the dtype."""
    from specviz.decoding import models

    where = where or st.sidebar
    device = getattr(pair, "device", None) or models.default_device()
    dt = str(getattr(pair, "dtype", None) or dtype or pairs.default_dtype_name()).replace("torch.", "")
    extra = ""
    if device.startswith("cuda"):
        import torch

        extra = f" ({torch.cuda.get_device_name(0)})"
    elif device == "cpu":
        from specviz.modeling import quant

        engine = quant.engine_of(pair.draft) if pair is not None else quant.int8_engine()
        extra = f" · int8 engine **{engine}**" if engine else ""
    where.caption(f"device **{device}**{extra} · dtype **{dt}**")


# --- loading: drawn while specviz.service.pairs loads ------------------------------------------------------------
class _LoadView:
    """Draws the waits of one lease: a status box with a progress bar (stage and seconds) for each load or
    draft copy waited for, emptied when the next begins or the lease is given (close)."""

    def __init__(self) -> None:
        self.title, self.box, self.bar = None, None, None

    def __call__(self, step: pairs.Loading) -> None:
        if step.title != self.title:
            self.close()
            self.title, self.box = step.title, st.empty()
            status = self.box.status(f"{step.title}…", expanded=True)
            self.bar = status.progress(0.0, text="waiting for the models")
        self.bar.progress(step.frac, text=f"{step.stage} ({step.seconds:.0f} s)")

    def close(self) -> None:
        if self.box is not None:
            self.box.empty()
        self.title, self.box, self.bar = None, None, None


def lease_pair(name: str, dtype: str, draft_precision: str | None = None, target_precision: str | None = None):
    """pairs.lease_pair, its load (or draft copy) drawn while this page waits for it: (pair, lease)."""
    view = _LoadView()
    try:
        return pairs.lease_pair(name, dtype, draft_precision, target_precision, show=view)
    finally:
        view.close()


def load_pair_cached(name: str, dtype: str, draft_precision: str | None = None,
                     target_precision: str | None = None):
    """pairs.load_pair_cached, its load (or draft copy) drawn while this page waits for it: the pair."""
    pair, lease = lease_pair(name, dtype, draft_precision, target_precision)
    lease.release()
    return pair


# --- memory: what each choice needs -------------------------------------------------------------------------------
def memory_note(name: str | None, dtype: str, precision: str, where=None, target_precision: str | None = None) -> None:
    """Under the pickers: what this choice needs of the memory budget, a warning before Run when it does not
    fit, and what every choice of the pair needs (pairs.memory_note)."""
    where = where or st.sidebar
    if not name:
        return
    try:
        note = pairs.memory_note(name, dtype, precision, target_precision)
    except SpecvizError as e:  # a bad SPECVIZ_MEMORY_GB, a broken registry: said, and the page goes on
        where.error(render.md_text(str(e)), icon=":material/memory:")  # it quotes the value: plain text
        return
    where.caption(note.need)
    if note.refused:
        where.warning(note.refused, icon=":material/memory:")
    with where.expander("What each choice needs"):
        st.markdown("\n".join(note.choices))


# --- text -----------------------------------------------------------------------------------
def decoder(tokenizer) -> Callable[[int], str]:
    """id -> text for one token, memoised (decoding is called per token per rerun)."""
    memo: dict[int, str] = {}

    def decode(t: int) -> str:
        t = int(t)
        if t not in memo:
            memo[t] = tokenizer.decode([t])
        return memo[t]

    return decode
