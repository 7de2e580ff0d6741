"""What this app demonstrates: the claims about speculative decoding, where each happens live. Loads no model."""

import streamlit as st

from pages.common import ui
from specviz.core import claims
from specviz.teaching import glossary

ui.page_setup(claims.PAGE_TITLE, words=glossary.PAGE_WORDS["0_What_this_app_demonstrates"])

st.markdown(
    """
Introductory material about speculative decoding makes the claims below. specviz shows each one
**happening live on real models**, or the honest exception where it does not hold on the hardware at hand;
nothing is a canned animation. Each claim says where it comes from, which page shows it, and what was measured
on this project's machine. The other pages refer to these claims by number.
"""
)

# the overview: one row per claim, its number linking to the details below
st.markdown("| # | claim | where in the app |\n|---|---|---|\n" + "\n".join(
    f"| [{c.number}](#{claims.anchor(c.number)}) | {c.title} | "
    f"{', '.join(claims.page_link(p) for p in c.pages)} |" for c in claims.CLAIMS))

# the details: one section per claim, anchored so that other pages can link to it
for c in claims.CLAIMS:
    st.subheader(f"{c.number}. {c.title}", anchor=claims.anchor(c.number), divider="gray")
    st.markdown(c.claim)
    st.markdown(f"**Source:** {c.source}")
    st.markdown(f"**Where in the app:** {', '.join(claims.page_link(p) for p in c.pages)}. {c.shows}")
    st.markdown(f"**Measured here:** {c.measured}")
