"""Keep a result in st.session_state until its settings change: the one pattern every page uses.

    box = Kept("speed.sweep", ident)   # ident: the settings the result came from (anything comparable with ==)
    box.put(result)                    # keep it, with this ident (None: a failed run, what is kept stays)
    box.put(result, settings=now)      # ... and the settings shown next to it, by name (a dict)
    box.changed(now)                   # the names of those settings that differ now ([] if none do)
    box.get()                          # the result kept with this ident, else None
    box.setdefault(value)              # the result kept with this ident, else value (now kept)
    box.stale()                        # a result kept with other settings (a page may show it with a warning)
    box.clear()                        # forget it
    latest("speed.sweep")              # the result, whatever its settings (another page reading it)

The result lives in st.session_state[key] and its ident in st.session_state[key + ".ident"]. The ident
decides whether a result belongs here at all (the models it came from); the settings, whether it came from the
widgets as they are now: a result measured with another prompt or seed stays, and the page says so. A result kept
with other settings stays until the next put, so going back to those settings shows it again. With close
given (a live playback, which holds its models' caches), a result that is replaced, cleared or found with
other settings is closed and dropped at once.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping

import streamlit as st

IDENT = ".ident"
SETTINGS = ".settings"


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

    def put(self, value: Any, settings: Mapping[str, Any] | None = None) -> Any:
        """Keep value with this ident, and the named settings it was made with (closing the one it replaces);
        returns value.

        None (a run that failed, its error already shown) keeps what is there: nothing done is lost.
        """
        if value is None:
            return None
        old = st.session_state.get(self.key)
        if self.close is not None and old is not None and old is not value:
            self.close(old)
        st.session_state[self.key] = value
        st.session_state[self.key + IDENT] = self.ident
        st.session_state[self.key + SETTINGS] = dict(settings or {})
        return value

    def changed(self, now: Mapping[str, Any]) -> list[str]:
        """The names of the settings in now that differ from those the kept result was made with, in now's order
        ([] when nothing is kept, or a setting was not recorded with it)."""
        then = (st.session_state.get(self.key + SETTINGS) or {}) if self._kept() else {}
        return [name for name, value in now.items() if name in then and then[name] != value]

    def clear(self) -> None:
        """Forget the result (closing it)."""
        old = st.session_state.pop(self.key, None)
        st.session_state.pop(self.key + IDENT, None)
        st.session_state.pop(self.key + SETTINGS, None)
        if self.close is not None and old is not None:
            self.close(old)
