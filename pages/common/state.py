"""What a session keeps across a change of page and a reload of the browser tab.

A widget's own key is dropped from st.session_state when another page runs, and a reload starts a new session.
So a setting that must survive both lives under a key no widget owns (st.session_state["keep.<name>"]) and is
mirrored in the page's address (st.query_params[name]): a reload reads it back from there. Only what is not
personal goes in the address (presenter mode, the source, the lesson and its step), since an address is copied
and projected. A learner's predictions and results stay in their own session (session_store): a change of page
keeps them; a reload, another browser or a copied link starts without them, and nothing in an address reaches them.

    remembered("source", "live", ("live", "recorded"))   # the session's value, else the address's, else the default
    remember("source", "recorded")                      # a widget's on_change: keep it, and show it in the address
    restore_widget("lessons.source", "source", "live", {"live": LIVE, "recorded": RECORDED})
                                                        # before drawing a widget: its remembered value, if it has none
    address_index("step", n)                            # a number 1..n in the address, as an index (else 0)
    session_store("lessons")                            # this session's own dict (survives a change of page)
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import streamlit as st

PREFIX = "keep."
# an older address's token for the server's store of progress, which any browser given the link could read and
# wipe: never read, and dropped from the address
STALE = ("session",)


def remember(name: str, value: str, default: str | None = None) -> None:
    """Keep value for this session and write it into the address (left out there while it is the default)."""
    st.session_state[PREFIX + name] = value
    if value == default:
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != value:
        st.query_params[name] = value


def remembered(name: str, default: str, allowed: Iterable[str] | None = None) -> str:
    """This session's value of name: kept in the session, else read from the address (a reload or a shared
    link; a value not in allowed is ignored), else default. The address shows it again on every page."""
    key = PREFIX + name
    if key not in st.session_state:
        raw = st.query_params.get(name)
        ok = raw is not None and (allowed is None or raw in set(allowed))
        st.session_state[key] = raw if ok else default
    remember(name, st.session_state[key], default)
    return st.session_state[key]


def restore_widget(key: str, name: str, default: str, to_widget: Mapping[str, Any]) -> None:
    """Before the widget called key is drawn: where it has no state (another page ran, or the tab was reloaded),
    give it the remembered value of name (to_widget maps remembered values to the widget's own)."""
    value = remembered(name, default, to_widget)
    if key not in st.session_state:
        st.session_state[key] = to_widget[value]


def keep_widget(name: str, widget_value: Any, to_widget: Mapping[str, Any], default: str) -> str:
    """After the widget is drawn: remember its value under name (the key of to_widget that maps to it)."""
    value = next(k for k, v in to_widget.items() if v == widget_value)
    remember(name, value, default)
    return value


def address_index(name: str, n: int) -> int:
    """The number 1..n the address gives under name, as a 0-based index; 0 when there is none or it is not one."""
    raw = st.query_params.get(name) or ""
    return int(raw) - 1 if len(raw) <= 6 and raw.isascii() and raw.isdigit() and 1 <= int(raw) <= n else 0


def session_store(name: str) -> dict:
    """This session's dict called name, in st.session_state under a key no widget owns: the same dict after a
    change of page, and out of reach of the page's address (a link carries none of it). Its contents are this
    process's objects, never sent."""
    for key in STALE:
        if key in st.query_params:
            del st.query_params[key]
    return st.session_state.setdefault(f"{PREFIX}store.{name}", {})
