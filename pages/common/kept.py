"""Keep a result in st.session_state until its settings change: the one pattern every page uses.

    box = Kept("speed.sweep", ident)   # ident: the settings the result came from (anything comparable with ==)
    box.put(result)                    # keep it, with this ident (None: a failed run, what is kept stays)
    box.get()                          # the result kept with this ident, else None
    box.setdefault(value)              # the result kept with this ident, else value (now kept)
    box.stale()                        # a result kept with other settings (a page may show it with a warning)
    box.clear()                        # forget it
    latest("speed.sweep")              # the result, whatever its settings (another page reading it)

The result lives in st.session_state[key] and its ident in st.session_state[key + ".ident"]. A result kept
with other settings stays until the next put, so going back to those settings shows it again. With close
given (a live playback, which holds its models' caches), a result that is replaced, cleared or found with
other settings is closed and dropped at once.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import streamlit as st

IDENT = ".ident"


def latest(key: str) -> Any:
    """The result kept under key, whatever settings it came from; None if there is none."""
    return st.session_state.get(key)


class Kept:
    """One result in st.session_state, with the settings (ident) it came from."""

    def __init__(self, key: str, ident: Hashable, close: Callable[[Any], None] | None = None):
        self.key, self.ident, self.close = key, ident, close
        if close is not None and self.stale() is not None:
            self.clear()  # it belongs to other models: let it go now

    def _kept(self) -> bool:
        return self.key in st.session_state and (self.key + IDENT) in st.session_state

    def get(self) -> Any:
        """The result kept with this ident, else None."""
        s = st.session_state
        return s[self.key] if self._kept() and s[self.key + IDENT] == self.ident else None

    def stale(self) -> Any:
        """A result kept with other settings, else None."""
        s = st.session_state
        return s[self.key] if self._kept() and s[self.key + IDENT] != self.ident else None

    def setdefault(self, value: Any) -> Any:
        """The result kept with this ident; else keep value and return it."""
        got = self.get()
        return got if got is not None else self.put(value)

    def put(self, value: Any) -> Any:
        """Keep value with this ident (closing the one it replaces); returns value.

        None (a run that failed, its error already shown) keeps what is there: nothing done is lost.
        """
        if value is None:
            return None
        old = st.session_state.get(self.key)
        if self.close is not None and old is not None and old is not value:
            self.close(old)
        st.session_state[self.key] = value
        st.session_state[self.key + IDENT] = self.ident
        return value

    def clear(self) -> None:
        """Forget the result (closing it)."""
        old = st.session_state.pop(self.key, None)
        st.session_state.pop(self.key + IDENT, None)
        if self.close is not None and old is not None:
            self.close(old)
