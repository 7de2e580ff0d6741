"""What a session keeps across a change of page and a reload of the browser tab.

A widget's own key is dropped from st.session_state when another page runs, and a reload starts a new session.
So a setting that must survive both lives under a key no widget owns (st.session_state["keep.<name>"]) and is
mirrored in the page's address (st.query_params[name]): a reload reads it back from there. Larger things (a
lesson's progress and results) stay on the server, in a store of this process, under a token in the address.

    remembered("source", "live", ("live", "recorded"))   # the session's value, else the address's, else the default
    remember("source", "recorded")                      # a widget's on_change: keep it, and show it in the address
    restore_widget("lessons.source", "source", "live", {"live": LIVE, "recorded": RECORDED})
                                                        # before drawing a widget: its remembered value, if it has none
    session_store("lessons")                            # this session's dict in the server's store (survives a reload)
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

import streamlit as st

PREFIX = "keep."
TOKEN = "session"  # the address's key for the session's token in the store
STORE_SESSIONS = 200  # sessions the store keeps (the least recently used goes first)

_store: OrderedDict[str, dict] = OrderedDict()
_store_lock = threading.Lock()


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


def session_store(name: str) -> dict:
    """This session's dict called name in the server's store: the same dict after a change of page and after a
    reload (the address carries the session's token). Its contents are this process's objects, never sent."""
    token = remembered(TOKEN, "")
    if not token:
        token = secrets.token_urlsafe(9)
        remember(TOKEN, token)
    with _store_lock:
        own = _store.pop(token, None) or {}
        _store[token] = own  # now the most recently used
        while len(_store) > STORE_SESSIONS:
            _store.popitem(last=False)
        return own.setdefault(name, {})
