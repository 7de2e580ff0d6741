"""Glossary: every word the pages use, defined once, alphabetically (specviz/teaching/glossary.py). Loads no model.

Each page also defines the words it shows in its own "Words on this page" expander (ui.words_on_page).
"""

import streamlit as st

from pages.common import ui
from specviz.teaching import glossary, render

ui.page_setup("Glossary")

st.markdown("Every word the pages use that a student may not know, in one place. Each page also defines the "
            "ones it shows, in its **Words on this page** expander under the title.")
find = st.text_input("Find a word", key="glossary.find", placeholder="e.g. nats, IQR, KV cache",
                     help="Shows the words whose name, other forms or definition contain this text.")
needle = find.strip().casefold()
shown = [t for t in glossary.alphabetical()
         if not needle or needle in " ".join((t.name, *t.also, t.definition)).casefold()]
if not shown:
    st.info(f"No word here contains {render.md_text(find.strip())!r}.", icon=":material/search_off:")
for t in shown:
    also = [a for a in t.also if a.casefold() != t.name.casefold()]
    st.markdown(glossary.entry_md(t) + (f"  \n*Also written:* {', '.join(also)}" if also else ""))
