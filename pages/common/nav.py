"""The app's page list, with the main page named for what it does (Streamlit would call it "app", from app.py).

app.py calls `main_page()` first. The first call in a script run is app.py as the entry: it hands Streamlit the
page list (app.py itself, titled MAIN_TITLE, then every pages/*.py as the pages/ folder lists them) and runs the
chosen page. When that page is the main one, Streamlit runs app.py again inside that call; that second call
returns True and app.py draws the page. So every page keeps its file and its address, `st.page_link` and
`st.switch_page` take the same paths, and AppTest runs app.py or a page file as before.

Until a script run of this server calls st.navigation, Streamlit lists a pages/ folder itself and runs a page
opened by its address (/Lessons) without app.py: `page_setup` then calls `own_list()`, which hands Streamlit this
list in that run, and from then on every run goes through app.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState
from streamlit.source_util import page_sort_key

# the sidebar's names, short enough to stay whole in its default width in presenter mode's larger type at
# 1024×768 (tests/test_browser_class.py): the main page's, and those of the pages whose file name is too long
MAIN_TITLE = "Draft and verify"
SHORT_TITLES = {"0_What_this_app_demonstrates.py": "The claims"}  # the page's own heading keeps its full title
ROOT = Path(__file__).resolve().parents[2]
_inside = threading.local()  # this script run's thread is inside the entry's call: app.py now runs as the page


def pages() -> list:
    """The navigation: the main page (app.py, at the app's root address), then pages/N_Title.py in order, each
    named for its file (Streamlit's own naming) or by SHORT_TITLES; every page keeps its file's address."""
    # url_path "app" is the name Streamlit gives app.py's page anyway: its id stays the same either way
    main = st.Page(ROOT / "app.py", title=MAIN_TITLE, url_path="app", default=True)
    found = sorted((ROOT / "pages").glob("*.py"), key=page_sort_key)  # as Streamlit lists a pages/ folder
    return [main, *(st.Page(p, title=SHORT_TITLES.get(p.name)) for p in found)]


def own_list() -> None:
    """In a page that Streamlit ran from its own listing of pages/ (app.py is the entry, but this run did not come
    through main_page), send this list instead: the page stays, and its navigation names the main page."""
    ctx = get_script_run_ctx()
    if ctx is None or getattr(_inside, "on", False) or Path(ctx.main_script_path).resolve() != ROOT / "app.py":
        return
    was = ThreadState.get().active_script_hash  # st.navigation sets it to app.py's: the page's widgets would
    st.navigation(pages())  # change their ids for this one run. The page running is the one it chooses
    ThreadState.update(active_script_hash=was)  # and it goes on as itself (streamlit 1.67's own way, internal)


def main_page() -> bool:
    """True when app.py should draw the main page now; False when this call was the entry and the chosen page
    has already run (app.py then stops)."""
    if getattr(_inside, "on", False):
        return True
    _inside.on = True
    try:
        st.navigation(pages()).run()
    finally:
        _inside.on = False
    return False
