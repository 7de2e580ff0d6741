"""Streamlit-only helpers shared by app.py and every page.

Stable API (pages import these):
    page_setup(title)                   st.set_page_config first, then the title; joins the device queue
    sidebar_pair_picker(prefix)         -> chosen pair name (unavailable pairs explained)
    dtype_picker(prefix)                -> "float32" | "bfloat16" (default specviz.models.DEFAULT_DTYPE)
    load_pair_cached(name, dtype)       -> Pair, shared by every session (st.cache_resource),
                                           with a progress indicator on the first load
    show_device(pair_or_none, dtype)    device + dtype line in the sidebar
    show_chart(fig, name, key=None)     st.plotly_chart with the PNG-download config
    show_error(e)                       st.error(str(e)), never a traceback
    decoder(tokenizer)                  id -> text, memoised per tokenizer
    pair_status(name), list_pairs_safe(), default_dtype_name()
    LOAD_CALLS, _slot.clear()           for tests: loads so far; forget the loaded pairs

Models are the only thing cached with st.cache_resource (one copy per server,
however many laptops connect); per-user results live in st.session_state.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import streamlit as st

from specviz import charts
from specviz.errors import SpecvizError

DTYPE_CHOICES = ["float32", "bfloat16"]

# how many times the model loader body actually ran (tests assert on this)
LOAD_CALLS = 0
_load_lock = threading.Lock()


def page_setup(title: str, icon: str = "⚡", layout: str = "wide") -> None:
    """Page config (must be the first Streamlit call of a page), then the title and the queue notice."""
    st.set_page_config(page_title=f"{title} · specviz", page_icon=icon, layout=layout)
    st.title(title)
    join_device_queue()


def join_device_queue() -> None:
    """This session's model work queues for the device under its session id (specviz.devqueue).

    While a round or a measurement waits its turn, a notice under the title says how many sessions
    are ahead. Each check while waiting is also a point where Streamlit stops the script: a rerun
    (Run pressed again, any widget) or a closed tab drops the queued work instead of waiting on.
    """
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    from specviz import devqueue

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
            who = f"{ahead} session{'s' * (ahead != 1)} ahead of you" if ahead else "the device is busy"
            notice.info(f"Waiting for the device: {who}. The device runs one piece of model work at a time, "
                        "in turn, so every figure here counts only this session's own time on it.",
                        icon=":material/hourglass_top:")

    devqueue.set_session(ctx.session_id if ctx is not None else "no-session", on_wait)


def show_error(e: BaseException) -> None:
    """A clear message in the page; specviz errors are already written for people."""
    if isinstance(e, SpecvizError):
        st.error(str(e), icon=":material/error:")
    elif isinstance(e, MemoryError):
        st.error(f"Not enough memory: {e}. Try a smaller pair, bfloat16, or fewer tokens.", icon=":material/error:")
    else:
        st.error(f"Something went wrong: {type(e).__name__}: {e}", icon=":material/error:")


def show_chart(fig, name: str, key: str | None = None, **kw) -> None:
    """A plotly figure with the light-theme PNG download button (filename `name`)."""
    st.plotly_chart(fig, config=charts.plotly_config(name), key=key, **kw)


# --- pairs and dtypes -------------------------------------------------------------------------
def list_pairs_safe() -> list:
    """specviz.models.list_pairs(), or [] after showing the error (a broken models.yaml)."""
    from specviz import models

    try:
        return models.list_pairs()
    except SpecvizError as e:
        show_error(e)
        return []


def sidebar_pair_picker(prefix: str) -> str | None:
    """Pair selectbox in the sidebar; returns the chosen name (None if the registry is broken).

    Each pair is marked installed or not; for a missing one the sidebar says why
    and how to get it. The choice is kept in st.session_state[f"{prefix}.pair"].
    """
    pairs = list_pairs_safe()
    if not pairs:
        return None
    by_name = {p.name: p for p in pairs}
    names = list(by_name)

    def label(n: str) -> str:
        p = by_name[n]
        mark = "✓" if p.available else "✗ not installed"
        return f"{n}{' (default)' if p.is_default else ''} · {mark}"

    name = st.sidebar.selectbox("Model pair (draft → target)", names, format_func=label, key=f"{prefix}.pair",
                                help="A small draft model proposes tokens, the larger target verifies them. "
                                     "Pairs come from models.yaml; both models share one tokenizer.")
    p = by_name[name]
    if p.description:
        st.sidebar.caption(p.description)
    if not p.available:
        st.sidebar.warning(f"**{name} is not available here.** {p.reason}\n\n**How to get it:** {p.how_to_get}")
    return name


def pair_status(name: str):
    """PairStatus of one pair (available, reason, how_to_get)."""
    from specviz import models

    return models.pair_status(name)


def default_dtype_name() -> str:
    from specviz import models

    name = str(models.DEFAULT_DTYPE).replace("torch.", "")
    return name if name in DTYPE_CHOICES else "float32"


def dtype_picker(prefix: str, where=None) -> str:
    """float32 / bfloat16 radio; default from specviz.models.DEFAULT_DTYPE."""
    where = where or st.sidebar
    return where.radio("dtype", DTYPE_CHOICES, index=DTYPE_CHOICES.index(default_dtype_name()),
                       key=f"{prefix}.dtype", horizontal=True,
                       help="float32 is fastest on a CPU; bfloat16 halves the memory (default on a GPU) "
                            "but rounds differently, which can break greedy exactness.")


def show_device(pair: Any | None = None, dtype: str | None = None, where=None) -> None:
    """One line: the device (cpu/cuda) and the dtype in use."""
    from specviz import models

    where = where or st.sidebar
    device = getattr(pair, "device", None) or models.default_device()
    dt = str(getattr(pair, "dtype", None) or dtype or default_dtype_name()).replace("torch.", "")
    extra = ""
    if device.startswith("cuda"):
        import torch

        extra = f" ({torch.cuda.get_device_name(0)})"
    where.caption(f"device **{device}**{extra} · dtype **{dt}**")


# --- loading (the one st.cache_resource) ------------------------------------------------------
class _Slot:
    """Holds one loaded pair; the lock makes concurrent sessions wait for a single load."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pair = None


@st.cache_resource(show_spinner=False, max_entries=2)
def _slot(name: str, dtype: str) -> _Slot:
    # the cached object is the slot, filled outside: Streamlit elements drawn while loading
    # (the progress box) must not be recorded and replayed by the cache
    return _Slot()


def _warm_up(pair, progress) -> None:
    """A 2-token run, so one-time costs (allocations, kernel choice) land in no measured run."""
    from specviz.engine import speculative_decode

    progress("warming up", 1.0)
    ids = list(range(1, 9))
    speculative_decode(pair.target, pair.draft, ids, k=2, max_new_tokens=2, eos_token_id=[],
                       vocab=pair.shared_vocab)


def load_pair_cached(name: str, dtype: str):
    """The pair, loaded once per server and shared by every session.

    The first load shows a status box with a progress bar (stage and seconds);
    sessions asking at the same time wait for that one load. Raises
    SpecvizError (PairUnavailable, NotEnoughMemory, ...) for the caller to show.
    """
    global LOAD_CALLS
    from specviz import models

    slot = _slot(name, dtype)
    if slot.pair is not None:
        return slot.pair
    box = st.empty()
    t0 = time.perf_counter()
    with box.status(f"Loading {name} ({dtype})…", expanded=True) as status:
        bar = st.progress(0.0, text="waiting for the models")

        def progress(stage: str, frac: float | None) -> None:
            f = 0.0 if frac is None else max(0.0, min(1.0, float(frac)))
            bar.progress(f, text=f"{stage} ({time.perf_counter() - t0:.0f} s)")

        with slot.lock:  # another session may be loading the same pair: wait for it
            if slot.pair is None:
                with _load_lock:
                    LOAD_CALLS += 1
                pair = models.load_pair(name, dtype=dtype, progress=progress)
                _warm_up(pair, progress)
                slot.pair = pair
        status.update(label=f"Loaded {name} in {time.perf_counter() - t0:.1f} s", state="complete")
    box.empty()
    return slot.pair


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
