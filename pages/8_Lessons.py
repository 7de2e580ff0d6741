"""Lessons: predict, run the experiment, compare, read why. The lessons are data in specviz/teaching/lessons.py.

Each step: a question, the learner's prediction (slider or choice), the experiment (live on the
loaded pair, or from the shipped recorded runs and theory when no model is loaded), the measured
answer next to the prediction with an explanation filled from the data, and a link to the page
that goes deeper. The lesson, its step and the source survive a change of page and a reload; the predictions and
results are the session's own, kept across a change of page, never in the address (pages/common/state.py).
"""

from dataclasses import replace

import streamlit as st

from pages.common import lab_ui, lesson_ui, state, ui
from pages.common.kept import Kept
from specviz.modeling.config import DerivedSource
from specviz.service.pairs import target_choices
from specviz.teaching import explain, glossary, lessons

ui.page_setup("Lessons: predict, measure, explain")
words_box = st.container()  # "Words on this page": filled at the end, from what this step showed (said)
LIVE, RECORDED = "Live, on the loaded pair", "Recorded runs and theory (no model needed)"
SOURCES = {"live": LIVE, "recorded": RECORDED}  # shared with the main page's source (state.remembered)

GUIDE = ("Pick a lesson. Each step asks a question: **predict** the answer first, then run the experiment and compare. "
         "The explanation is written from what was measured.")
presenting = ui.presenter()  # a projected 1024×768 screen: the question comes first (under the lesson's name),
# and the guide, the lesson's intro, its progress and any note go below it
if not presenting:
    st.markdown(GUIDE)

# --- which lesson, and where its experiments run ------------------------------------------------
titles = {les.key: les.title for les in lessons.LESSONS}
state.restore_widget("lessons.lesson", "lesson", lessons.LESSONS[0].key, titles)
les = lessons.lesson(state.keep_widget("lesson", st.selectbox("Lesson", list(titles.values()), key="lessons.lesson"),
                                       titles, lessons.LESSONS[0].key))
state.restore_widget("lessons.source", "source", "live", SOURCES)
source = st.sidebar.radio("Run the experiments", [LIVE, RECORDED], key="lessons.source",
                          help="Live runs on the pair chosen below. Recorded runs ship with specviz, so every "
                               "lesson also works on a laptop with no model.")
state.keep_widget("source", source, SOURCES, "live")
seed = int(st.sidebar.number_input("seed", 0, 2**31 - 1, 0, 1, key="lessons.seed",
                                   help="Live sampling runs use it: the same seed gives the same run."))
pair, no_model = None, None
if source == LIVE:
    pair = lab_ui.pair_for_page("lessons")
    if pair is None:
        no_model = "No model is loaded, so the steps run from the recorded runs and theory."
where = (f"live:{pair.name}:{lab_ui.dtype_name(pair)}:{pair.draft_precision}:{seed}" if pair is not None
         else "recorded")

progress = state.session_store("lessons")  # lesson key -> {"step": i, "done": {step key: result}}: this session's
n = len(les.steps)
if les.key not in progress:  # the session's first lesson (a reload, a link) starts at the step its address names
    progress[les.key] = {"step": 0 if progress else state.address_index("step", n), "done": {}}
mine = progress[les.key]
memo = Kept("lessons.memo", where).setdefault({})  # runs shared by the steps, until the source changes
i = min(mine["step"], n - 1)
state.remember("step", str(i + 1), "1")  # the step, not its results, is in the address
step = les.steps[i]
done = mine["done"].get(step.key)


def target_loader(pair):
    """The baseline lesson's loader: target precision -> this pair with its target in it (ui.load_pair_cached, as
    the Speedup page's section 1c loads it); None where an int8 target does not run here or the draft is made of
    the target's own layers (the step then says so and reads the recording)."""
    if pair is None or "int8" not in target_choices("float32") or isinstance(pair.spec.draft.source, DerivedSource):
        return None
    return lambda tp: ui.load_pair_cached(pair.name, "float32", pair.draft_precision, tp)


def intro() -> None:
    """The note that no model is loaded (if so), the lesson's intro and the step's progress."""
    if no_model:
        st.info(no_model, icon=":material/info:")
    st.markdown(f"*{les.intro}*")
    st.progress((i + 1) / n, text=f"step {i + 1} of {n}")


def go_to(lesson_key: str, to: int) -> None:
    progress[lesson_key]["step"] = max(0, min(n - 1, to))


def restart() -> None:
    progress[les.key] = {"step": 0, "done": {}}


def redo() -> None:
    mine["done"].pop(step.key, None)


said = [*titles.values(), les.intro, step.text, step.prediction.label, *(step.prediction.choices or ()),
        step.link.label]  # the lesson's own text on the page; the measured answer's is added below
if not presenting:
    intro()
st.subheader(step.text)
if presenting:
    intro()

# --- the prediction ------------------------------------------------------------------------------
pkey = f"lessons.{les.key}.{step.key}.prediction"
prediction = lesson_ui.prediction(step, pkey) if done is None else None  # once measured, shown next to the answer

# --- the experiment ------------------------------------------------------------------------------
if done is None:
    if st.button("Run the experiment", type="primary", key="lessons.run",
                 help="Live on the loaded pair, or from the recorded runs and theory; the answer says which."):
        def measure_step(progress):
            ctx = lessons.Context(pair=pair, settings=replace(lessons.LESSON_SETTINGS, seed=seed), memo=memo,
                                  progress=progress, load_pair=target_loader(pair))
            got = lessons.run_step(step, ctx)
            return got, lessons.figure(step, ctx, got)

        with st.spinner("Measuring…"):
            run = lab_ui.stoppable(measure_step, key="lessons.stop", unit="part", text="measuring…")
        measured = run.value is not None and not run.stopped
        if measured:
            outcome, fig = run.value
            mine["done"][step.key] = {"prediction": prediction, "outcome": outcome, "figure": fig}
            st.session_state.pop("lessons.stopped", None)
        elif run.stopped:
            st.session_state["lessons.stopped"] = les.key, step.key  # the runs finished stay in memo
        run.go_on()
        if measured:
            st.rerun()  # draw the step as measured: the prediction next to the answer
    if st.session_state.get("lessons.stopped") == (les.key, step.key):
        st.warning(explain.LESSON_STOPPED, icon=":material/stop_circle:")

# --- the measured answer next to the prediction ------------------------------------------------
if done is not None:
    said += lesson_ui.answer(les.key, step, done)
    st.button("Predict again", key="lessons.redo", on_click=redo)
lesson_ui.go_deeper(step.link)

# --- moving between steps ------------------------------------------------------------------------
lesson_ui.step_buttons(les.key, i, n, done, len(mine["done"]), go_to, restart)
if presenting:
    st.markdown(GUIDE)
ui.words_on_page(glossary.PAGE_WORDS["8_Lessons"] + tuple(t.name for t in glossary.found_in("\n".join(said))),
                 where=words_box)
