"""Streamlit helpers shared by app.py and the pages (not a page itself)."""
