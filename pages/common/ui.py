"""Streamlit-only helpers shared by app.py and every page.

Stable API (pages import these):
    page_setup(title)                   st.set_page_config first, then the title
    sidebar_pair_picker(prefix)         -> chosen pair name (unavailable pairs explained)
    dtype_picker(prefix)                -> "float32" | "bfloat16" (default specviz.models.DEFAULT_DTYPE)
    load_pair_cached(name, dtype)       -> Pair, shared by every session (st.cache_resource),
                                           with a progress indicator on the first load
    show_device(pair_or_none, dtype)    device + dtype line in the sidebar
    show_chart(fig, name, key=None)     st.plotly_chart with the PNG-download config
    show_error(e)                       st.error(str(e)), never a traceback
    decoder(tokenizer)                  id -> text, memoised per tokenizer

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
    """Page config (must be the first Streamlit call of a page), then the title."""
    st.set_page_config(page_title=f"{title} · specviz", page_icon=icon, layout=layout)
    st.title(title)


def show_error(e: BaseException) -> None:
    """A clear message in the page; specviz errors are already written for people."""
    if isinstance(e, SpecvizError):
        st.error(str(e), icon="⚠️")
    elif isinstance(e, MemoryError):
        st.error(f"Not enough memory: {e}. Try a smaller pair, bfloat16, or fewer tokens.", icon="⚠️")
    else:
        st.error(f"Something went wrong: {type(e).__name__}: {e}", icon="⚠️")


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
    where.caption(f"🖥️ device **{device}**{extra} · dtype **{dt}**")


# --- loading (the one st.cache_resource) ------------------------------------------------------
@st.cache_resource(show_spinner=False, max_entries=2)
def _load(name: str, dtype: str, _progress: Callable[[str, float | None], None] | None = None):
    """The only cached resource: a loaded pair, shared by every session."""
    global LOAD_CALLS
    from specviz import models

    with _load_lock:
        LOAD_CALLS += 1
    return models.load_pair(name, dtype=dtype, progress=_progress)


def load_pair_cached(name: str, dtype: str):
    """The pair, loaded once per server; a status box with progress while it loads.

    Raises SpecvizError (PairUnavailable, NotEnoughMemory, ...) for the caller to show.
    """
    box = st.empty()
    t0 = time.perf_counter()
    state = {"status": None, "bar": None}

    def progress(stage: str, frac: float | None) -> None:
        # the status box appears only when the loader really runs (the first load)
        if state["status"] is None:
            state["status"] = box.status(f"Loading {name} ({dtype})…", expanded=True)
            state["bar"] = state["status"].progress(0.0, text="starting")
        f = 0.0 if frac is None else max(0.0, min(1.0, float(frac)))
        state["bar"].progress(f, text=f"{stage} ({time.perf_counter() - t0:.0f} s)")

    try:
        pair = _load(name, dtype, progress)
    finally:
        box.empty()
    return pair


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
