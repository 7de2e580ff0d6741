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
                                        -> Pair, shared by every session (one budgeted store of models,
                                           specviz.modeling.memory), with a progress indicator on the first load
    lease_pair(name, dtype, draft_precision=None, target_precision=None)
                                        -> (Pair, lease): the store never unloads it while the lease is held
    fitting_default(name)               -> (dtype, draft precision, target precision, why): the defaults, or
                                           the first that fits
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
    pair_status(name), list_pairs_safe(), default_dtype_name()
    LOAD_CALLS, _slot.clear()           for tests: loads so far; forget the loaded pairs

Models are the only thing cached with st.cache_resource: one budgeted store per server (however many
laptops connect), which unloads the least recently used pair to make room; per-user results live in
st.session_state.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
import weakref
from typing import Any, Callable

import streamlit as st

from pages.common import nav, state
from specviz.teaching import charts, explain, glossary, render
from specviz.core import claims, limits
from specviz.core.errors import ConfigError, InvalidSetting, SpecvizError
from specviz.core.settings import DecodeSettings

DTYPE_CHOICES = ["float32", "bfloat16"]

# how many times the model loader body actually ran (tests assert on this)
LOAD_CALLS = 0
_load_lock = threading.Lock()


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

    from specviz.device import devqueue

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
    for server_setting in (devqueue.lower_page_threads, devqueue.handover):
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


def default_dtype_name() -> str:
    from specviz.decoding import models

    name = str(models.DEFAULT_DTYPE).replace("torch.", "")
    return name if name in DTYPE_CHOICES else "float32"


def dtype_choices(device: str) -> list[str]:
    """The model dtypes offered on `device`: float32 / bfloat16; on mps (Apple's GPU) those it runs
    (quant.dtypes: float32, float16, and bfloat16 from macOS 14)."""
    from specviz.modeling import quant

    return list(quant.dtypes(device)) if device.startswith("mps") else DTYPE_CHOICES


def dtype_picker(prefix: str, where=None, default: str | None = None) -> str:
    """The dtype radio (dtype_choices for this device); default from specviz.decoding.models.DEFAULT_DTYPE
    (or `default`, where this device offers it)."""
    from specviz.decoding import models

    where = where or st.sidebar
    choices = dtype_choices(models.default_device())
    default = default if default in choices else default_dtype_name()
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


def target_choices(dtype: str) -> list[str]:
    """The target precisions a load in `dtype` offers here: float32, and int8 where it runs (a CPU with fbgemm)
    and the target loads in float32 (models.check_target_precision)."""
    from specviz.decoding import models
    from specviz.modeling import quant

    device = models.default_device()
    out = []
    for p in quant.TARGET_PRECISIONS:
        try:
            out.append(models.check_target_precision(p, dtype, device))
        except SpecvizError:
            pass
    return out


def target_picker(prefix: str, dtype: str, where=None, default: str = "float32") -> str:
    """The target's precision: float32 (the reference) or int8 (target_choices: where it loads), starting at
    `default` (fitting_default's); a choice the dtype no longer offers goes back to the first offered."""
    where = where or st.sidebar
    choices = target_choices(dtype)
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
    dt0, p0, t0, why = fitting_default(name) if dtype else (default_dtype_name(), None, "float32", None)
    dt = dtype_picker(prefix, where, default=dt0) if dtype else default_dtype_name()
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
    dt = str(getattr(pair, "dtype", None) or dtype or default_dtype_name()).replace("torch.", "")
    extra = ""
    if device.startswith("cuda"):
        import torch

        extra = f" ({torch.cuda.get_device_name(0)})"
    elif device == "cpu":
        from specviz.modeling import quant

        engine = quant.engine_of(pair.draft) if pair is not None else quant.int8_engine()
        extra = f" · int8 engine **{engine}**" if engine else ""
    where.caption(f"device **{device}**{extra} · dtype **{dt}**")


# --- loading: the server's one budgeted store of models -----------------------------------------------------------
class _Slot:
    """Holds one pair and the thread loading it, so a load outlives the script run that started it.

    A rerun (any click) stops a script run; the first-time conversion (minutes) goes on in
    the loader thread, and the next run shows its progress again instead of starting over.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pair = None  # the pair as loaded (in dtype: the source of the draft precisions copied from it)
        self.loader: threading.Thread | None = None
        self.error: BaseException | None = None
        self.stage, self.frac, self.t0 = "waiting for the models", 0.0, 0.0

    def unload(self) -> None:
        """The store let this pair go to make room: drop it (the store collects the garbage)."""
        self.pair = None

    def progress(self, stage: str, frac: float | None) -> None:
        self.stage, self.frac = stage, 0.0 if frac is None else max(0.0, min(1.0, float(frac)))

    def start(self, load: Callable[[Callable], Any], hold=None) -> None:
        """Start `load(progress)` in a thread unless one is running or the pair is there; the thread releases
        `hold` (a lease on this slot) when it ends, so the load is never unloaded half done."""
        global LOAD_CALLS
        with self.lock:
            if self.pair is not None or (self.loader is not None and self.loader.is_alive()):
                if hold is not None:
                    hold.release()
                return
            with _load_lock:
                LOAD_CALLS += 1
            self.error, self.t0 = None, time.perf_counter()

            def run() -> None:
                try:
                    self.pair = load(self.progress)
                except BaseException as e:  # noqa: BLE001 — handed to the session that waits for it
                    self.error = e
                finally:
                    if hold is not None:
                        hold.release()

            self.loader = threading.Thread(target=run, name="specviz-load", daemon=True)
            self.loader.start()

    def wait(self, show: Callable[[str, float], None], poll_s: float = 0.2):
        """Show progress until the pair is loaded; the load's error is raised here, once."""
        while self.loader is not None and self.loader.is_alive():
            show(self.stage, self.frac)
            self.loader.join(poll_s)
        if self.pair is None:
            err, self.error = self.error, None  # the next request starts a new load
            raise err if err is not None else RuntimeError("the model load ended without a pair")
        return self.pair


@st.cache_resource(show_spinner=False)
def _models():
    """The server's one store of loaded models (specviz.modeling.memory.ModelStore), within the memory budget:
    every session, page, pair and precision loads through it, so the budget holds for the server's life."""
    from specviz.decoding import models
    from specviz.modeling import memory

    device = models.default_device()
    return memory.ModelStore(lambda held: memory.read_budget(held, device=device), explain.over_budget)


class _Slots:
    """For tests: _slot(name, dtype) is the slot of the pair loaded in dtype (None if none); _slot.clear()
    forgets every loaded pair."""

    def __call__(self, name: str, dtype: str, target_precision: str = "float32"):
        return _models().peek(_key(name, dtype, dtype, target_precision))

    def clear(self) -> None:
        _LOADED.clear()
        _models().clear()


_slot = _Slots()


def _key(name: str, dtype: str, precision: str, target_precision: str) -> tuple:
    """A pair's key in the store: (name, dtype, draft precision), and 'int8 target' after it for an int8 target."""
    return (name, dtype, precision) + (() if target_precision == "float32" else (f"{target_precision} target",))


def _spec(name: str):
    from specviz.modeling.config import as_registry

    return as_registry(None).pair(name)


def _precision(spec, dtype: str, draft_precision: str | None, device: str) -> str:
    """The draft precision a configuration really has: a draft made of the target's layers keeps its dtype."""
    from specviz.modeling import quant
    from specviz.modeling.config import DerivedSource

    precision = quant.check(draft_precision, device)
    return dtype if isinstance(spec.draft.source, DerivedSource) else precision


def _warm_up(pair, progress) -> None:
    """A speculative warm-up run (engine.warm_up, which then counts the pair's draft as warmed), so one-time
    costs (allocations, kernel choice) land in no measured run; then what is alive is frozen
    (devqueue.freeze_heap), so no garbage collection walks the new models again."""
    from specviz.device import devqueue
    from specviz.decoding.engine import warm_up

    progress("warming up", 1.0)
    warm_up(pair.target, list(range(1, 9)), pair.drafter(), DecodeSettings(k=2), eos_token_id=[],
            vocab=pair.shared_vocab)
    devqueue.freeze_heap()


def load_pair_cached(name: str, dtype: str, draft_precision: str | None = None,
                     target_precision: str | None = None):
    """The pair, loaded once per server and shared by every session, within the memory budget.

    The first load shows a status box with a progress bar (stage and seconds);
    sessions asking at the same time wait for that one load. A draft that loads straight in its precision
    (an int8 draft from its int8 copy: models.draft_loads_direct) is loaded so, lent the target of a pair
    loaded already; any other draft precision is a copy of the draft loaded in dtype, made once, sharing the
    target. Each target precision (float32, int8) is a
    pair of its own (models.load_pair(target_precision=...)). What was used least recently
    is unloaded to make room; a choice that does not fit is refused before anything loads.
    Raises SpecvizError (PairUnavailable, NotEnoughMemory, ...) for the caller to show.
    """
    pair, lease = lease_pair(name, dtype, draft_precision, target_precision)
    lease.release()
    return pair


def lease_pair(name: str, dtype: str, draft_precision: str | None = None, target_precision: str | None = None):
    """(pair, lease) as load_pair_cached gives the pair; while the lease is held (a live run holds it until it
    ends: Playback.hold), the store never unloads that pair."""
    from specviz.device import devqueue
    from specviz.decoding import models

    device = models.default_device()
    # a draft that loads straight in its precision (an int8 draft from its int8 copy) is loaded so; any other is
    # loaded in dtype, and its precision is a copy of that draft (_variant)
    spec, precision, tp, loaded_as, _ = _base(name, dtype, draft_precision, target_precision)
    store = _models()
    what = explain.config_words(name, dtype, precision, tp)
    with devqueue.QUEUE.paused():  # a load may wait on model work: not while this page holds a turn to draw
        # refused before anything loads: the pair as loaded and the draft's copy must fit at once
        store.check(models.config_parts(spec, dtype, precision, device, tp), what,
                    models.loading_bytes(spec, dtype, precision, tp))
        base_key = _key(name, dtype, loaded_as, tp)
        slot, base = store.lease(base_key, models.pair_parts(spec, dtype, loaded_as, device, target_precision=tp),
                                 _Slot, explain.config_words(name, dtype, loaded_as, tp),
                                 models.loading_bytes(spec, dtype, loaded_as, tp))
        try:
            pair = _load_base(name, dtype, slot, store, base_key, tp, loaded_as)
            if precision == loaded_as:
                return pair, base
            return _variant(pair, precision, store, what)
        except BaseException:
            if slot.pair is None and not (slot.loader is not None and slot.loader.is_alive()):
                store.discard(base_key)  # nothing loaded: nothing to charge
            base.release()
            raise
        finally:
            if precision != loaded_as:
                base.release()  # the variant is made: the dtype pair may go when room is needed


def _variant(base, precision: str, store, what: str):
    """(the pair with its draft in `precision`, a lease on it): a copy of base's draft, made once."""
    from specviz.decoding import models

    tp = base.target_precision
    key = _key(base.name, str(base.dtype).removeprefix("torch."), precision, tp)
    parts = models.pair_parts(base.spec, base.dtype, precision, base.device, target_precision=tp)
    slot, lease = store.lease(key, parts, _Slot, what, models.loading_bytes(base.spec, base.dtype, precision))
    try:
        with slot.lock:
            if slot.pair is None:
                with st.spinner(f"Preparing a {precision} copy of the draft…"):
                    pair = models.with_draft_precision(base, precision)
                    if pair is not base:
                        _warm_up(pair, lambda *_: None)
                    slot.pair = pair
                    _LOADED[key] = pair  # it holds the target too: a pair with the same target may borrow it
            return slot.pair, lease
    except BaseException:
        lease.release()
        store.discard(key)
        raise


_LOADED: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()  # a store key (_key) -> Pair


def _base(name: str, dtype: str, draft_precision: str | None, target_precision: str | None):
    """What lease_pair loads for a choice: (spec, the draft's precision, the target's, the precision the draft
    loads in, the base pair's store key)."""
    from specviz.decoding import models

    device = models.default_device()
    spec = _spec(name)
    precision = _precision(spec, dtype, draft_precision, device)
    tp = models.check_target_precision(target_precision, dtype, device)
    loaded_as = precision if models.draft_loads_direct(spec, dtype, precision) else dtype
    return spec, precision, tp, loaded_as, _key(name, dtype, loaded_as, tp)


def pair_ready(name: str, dtype: str, draft_precision: str | None = None,
               target_precision: str | None = None) -> bool:
    """Whether this choice's pair is loaded (lease_pair then gives it at once, or after a copy of the draft)."""
    try:
        *_, key = _base(name, dtype, draft_precision, target_precision)
    except SpecvizError:
        return False
    slot = _models().peek(key)
    return slot is not None and slot.pair is not None


def _load_base(name: str, dtype: str, slot: _Slot, store, key, target_precision: str = "float32",
               draft_precision: str | None = None):
    """The pair with its draft in draft_precision (None: in dtype), loaded in the slot's thread."""
    from specviz.decoding import models

    if slot.pair is not None:
        return slot.pair
    draft_precision = draft_precision or dtype

    def load(progress):
        # a pair loaded already with the same target lends it: a second pair costs only its draft; the store
        # has made room for this one (check=False: no second check against what is free)
        pair = models.load_pair(name, dtype=dtype, progress=progress, draft_precision=draft_precision,
                                target_precision=target_precision, loaded=list(_LOADED.values()), check=False)
        _LOADED[key] = pair
        _warm_up(pair, progress)
        return pair

    _, hold = store.lease(key, {}, _Slot)  # the loader's own lease: a rerun stops this page, not the load
    slot.start(load, hold)  # another session may have started it: then this one waits for that load
    box = st.empty()
    label = dtype + ("" if draft_precision == dtype else f", {draft_precision} draft") + (
        "" if target_precision == "float32" else f", {target_precision} target")
    with box.status(f"Loading {name} ({label})…", expanded=True) as status:
        bar = st.progress(0.0, text="waiting for the models")
        pair = slot.wait(lambda stage, f: bar.progress(f, text=f"{stage} ({time.perf_counter() - slot.t0:.0f} s)"))
        status.update(label=f"Loaded {name} in {time.perf_counter() - slot.t0:.1f} s", state="complete")
    box.empty()
    return pair


# --- memory: what each choice needs, and the one that fits ------------------------------------------------------
def fitting_default(name: str | None) -> tuple[str, str, str, str | None]:
    """(dtype, draft precision, target precision, why) this session starts with: the defaults, or, when they do
    not fit the memory budget, the first choice of the pair that does (why says which and why; None when the
    defaults fit). Exact choices come first: every target precision of the wanted dtype (float32, then int8)
    before another dtype."""
    return _fitting(name)[:4]


def fits_nowhere(name: str | None) -> str | None:
    """Why no configuration of the pair fits the memory budget (explain.fitting_choice), or None when one does."""
    *_, why, nowhere = _fitting(name)
    return why if nowhere else None


def _fitting(name: str | None) -> tuple[str, str, str, str | None, bool]:
    """fitting_default's answer, and whether no configuration of the pair fits."""
    from specviz.decoding import models
    from specviz.modeling import quant

    device = models.default_device()
    dtype, precision = default_dtype_name(), quant.default_precision(device)
    if not name:
        return dtype, precision, "float32", None, False
    try:
        spec = _spec(name)
        precision = _precision(spec, dtype, precision, device)
        store = _models()
        options = [(d, p, t) for d, ps in _by_dtype(models.choices(DTYPE_CHOICES, quant.supported(device), dtype,
                                                                   precision))
                   for t in target_choices(d) for p in ps]
        chosen = next((o for o in options if store.fits(models.config_parts(spec, o[0], o[1], device, o[2]),
                                                        models.loading_bytes(spec, *o))), None)
    except SpecvizError:  # a broken registry or budget setting is said where the pair is loaded
        return dtype, precision, "float32", None, False
    if chosen == (dtype, precision, "float32"):
        return dtype, precision, "float32", None, False
    need = lambda d, p, t: store.need(models.config_parts(spec, d, p, device, t),
                                      models.loading_bytes(spec, d, p, t))
    why = explain.fitting_choice(explain.config_words(name, dtype, precision), need(dtype, precision, "float32"),
                                 None if chosen is None else explain.config_words(name, *chosen),
                                 0 if chosen is None else need(*chosen), store.budget())
    return (*(chosen or (dtype, precision, "float32")), why, chosen is None)


def _by_dtype(options: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """models.choices' (dtype, precision) list as (dtype, its precisions in order), dtypes in order."""
    out: dict[str, list[str]] = {}
    for d, p in options:
        out.setdefault(d, []).append(p)
    return list(out.items())


def memory_note(name: str | None, dtype: str, precision: str, where=None, target_precision: str | None = None) -> None:
    """Under the pickers: what this choice needs of the memory budget, a warning before Run when it does not
    fit, and what every choice of the pair needs (with the chosen target precision where its dtype offers it)."""
    from specviz.decoding import models
    from specviz.modeling import memory, quant

    where = where or st.sidebar
    if not name:
        return
    device = models.default_device()
    try:
        spec = _spec(name)
        store = _models()
        budget = store.budget()
        precision = _precision(spec, dtype, precision, device)
        tp = target_precision or "float32"
        parts = models.config_parts(spec, dtype, precision, device, tp)
        loading = models.loading_bytes(spec, dtype, precision, tp)
        where.caption(f"Memory: this choice needs about {explain.format_bytes(store.need(parts, loading))} "
                      f"more; the budget is {explain.budget_words(budget)}, and the models loaded hold "
                      f"{explain.format_bytes(store.held())}.")
        try:
            store.check(parts, explain.config_words(name, dtype, precision, tp), loading)
        except memory.OverBudget as e:
            where.warning(str(e), icon=":material/memory:")
        with where.expander("What each choice needs"):
            lines = []
            for d, p0 in models.choices(DTYPE_CHOICES, quant.supported(device), DTYPE_CHOICES[0],
                                       quant.default_precision(device)):
                p = _precision(spec, d, p0, device)
                t = tp if tp in target_choices(d) else "float32"
                each = models.config_parts(spec, d, p, device, t)
                mark = "fits" if store.fits(each, models.loading_bytes(spec, d, p, t)) else "does not fit now"
                need = explain.format_bytes(models.estimate_memory_bytes(spec, d, True, p, t))
                target = "" if t == "float32" else f", {t} target"
                lines.append(f"- {d}, {p} draft{target}: {need} ({mark})")
            st.markdown("\n".join(dict.fromkeys(lines)))  # a draft of the target's layers: one line per dtype
    except SpecvizError as e:  # a bad SPECVIZ_MEMORY_GB, a broken registry: said, and the page goes on
        where.error(render.md_text(str(e)), icon=":material/memory:")  # it quotes the value: plain text


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
