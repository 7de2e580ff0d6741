"""The Lessons page's step, drawn: the prediction widget, the measured answer next to it, the link deeper and the
buttons between steps (pages/8_Lessons.py keeps the lesson's progress and runs the experiment).

  prediction(step, key)                    the learner's prediction: a choice or a slider, as the step asks
  answer(lesson_key, step, done)           the prediction next to the measured answer, explained; the text it said
  go_deeper(link)                          the link to the page that goes deeper (a caption without app.py)
  step_buttons(lesson_key, i, n, done, measured, go_to, restart)  previous / next / start again
"""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from pages.common import lab_ui, ui
from specviz.teaching import glossary, lessons


def prediction(step, key: str):
    """The prediction widget for `step` (a lessons.Step), under widget key `key`: a radio for a choice, else an
    integer or a float slider; its value (None until a choice is picked)."""
    pr = step.prediction
    if pr.kind == "choice":
        return st.radio(pr.label, list(pr.choices), index=None, key=key, horizontal=True,
                        help="Pick your answer before the experiment: the measurement is shown next to it.")
    if isinstance(pr.step, int) and isinstance(pr.lo, int):
        return st.slider(pr.label, pr.lo, pr.hi, int(pr.default), pr.step, key=key)
    return st.slider(pr.label, float(pr.lo), float(pr.hi), float(pr.default), float(pr.step), key=key)


def answer(lesson_key: str, step, done: dict) -> list[str]:
    """The measured step (done: {"prediction", "outcome", "figure"}): the prediction next to the answer, its flags,
    the comparison, the explanation, the figure and the timings' bookkeeping; the sentences it showed (for the
    page's "Words on this page")."""
    said = []
    outcome = done["outcome"]
    c1, c2 = st.columns(2)
    c1.metric("your prediction", lessons.format_prediction(step, done["prediction"]))
    c2.metric(outcome.answer, outcome.shown)  # "measured", or "from theory": never a formula called measured
    for flag in outcome.flags:  # a figure that contradicts itself: said before anything is read from it
        st.warning(flag, icon=":material/warning:")
    compared, explained = lessons.compare(step, done["prediction"], outcome), lessons.explain(step, outcome)
    st.info(compared, icon=":material/compare_arrows:")
    st.markdown(explained)
    if done.get("figure") is not None:
        ui.show_chart(done["figure"], f"lesson_{lesson_key}_{step.key}", key=f"lessons.fig.{lesson_key}.{step.key}")
        said.append(glossary.figure_text(done["figure"].to_plotly_json()))
    # the timings' bookkeeping (outside load, waits for a core) in its own expander, out of the lesson's flow
    lab_ui.timing_details(outcome.load, outcome.waited)
    st.caption(f"Source: {outcome.source}")
    said += [outcome.answer, outcome.shown, *outcome.flags, compared, explained, outcome.source,
             *(n.text for n in outcome.load), *outcome.waited]
    return said


def go_deeper(link) -> None:
    """The link to the page that goes deeper (a lessons link: page and label)."""
    try:
        st.page_link(link.page, label=f"Go deeper: {link.label}", icon=":material/arrow_forward:")
    except StreamlitAPIException:  # the page was started on its own, without app.py's page list
        st.caption(f"Go deeper: {link.label}")


def step_buttons(lesson_key: str, i: int, n: int, done, measured: int, go_to, restart) -> None:
    """The buttons between steps of lesson `lesson_key` at step i of n: go_to(lesson_key, step) and restart() are
    the page's callbacks; done is this step's result (None until measured), measured the steps measured so far."""
    # each button as wide as its label: thirds would cut "Start the lesson again" in presenter type
    row = ui.button_row()
    # each button goes to the step it named when it was drawn, and its key names that step, so a second press
    # that lands before the browser redraws the buttons (a double click, a busy server) moves no further
    row.button("← Previous step", key=f"lessons.prev.{lesson_key}.{i}", on_click=go_to, args=(lesson_key, i - 1),
               disabled=i == 0)
    if i < n - 1:
        row.button("Next step →", key=f"lessons.next.{lesson_key}.{i}", on_click=go_to, args=(lesson_key, i + 1),
                   disabled=done is None, type="primary")
    elif done is not None:
        row.success(f"Lesson complete: {measured} of {n} steps measured.")
    row.button("Start the lesson again", key="lessons.restart", on_click=restart)
