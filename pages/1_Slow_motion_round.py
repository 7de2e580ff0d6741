"""Slow motion (claims 3, 4, 5, 7): one speculative round at a time, with the arithmetic written out."""

import streamlit as st

from pages.common import lab_ui, recorded_ui, round_ui, ui
from pages.common.kept import Kept
from specviz.teaching import explain, glossary
from specviz.core import limits
from specviz.data import playback
from specviz.decoding.drafters import PromptLookupDrafter
from specviz.core.limits import K_MAX
from specviz.core.settings import DecodeSettings
from specviz.decoding.engine import speculative_stream

DEFAULT = DecodeSettings()  # the widgets start at the decoding defaults

ui.page_setup("Slow motion: one round at a time", shows=(3, 4, 5, 7), words=glossary.PAGE_WORDS["1_Slow_motion_round"])

st.markdown(
    f"""
A **round** of speculative decoding has four steps: (1) the small **draft** model proposes k tokens,
one after another; (2) the large **target** model scores all k positions, plus one more, in a **single**
forward pass; (3) the drafted tokens are checked left to right and the first refused one ends the checking;
(4) the target adds one token of its own: a **correction** where it refused, or a **bonus** if it accepted
all k.

The check depends on the mode. **Greedy** (temperature 0): {explain.GREEDY_RULE}. **Sampling**: with q(d)
the draft's and p(d) the target's probability of the drafted token d, {explain.ACCEPT_RULE}. A refused token
is replaced by a sample of
**norm(max(0, p − q))**: the probability the target wanted more than the draft gave. This makes the output
follow the target's distribution exactly.

Press **First round**, then **Next round** to step through a real run on real models.
"""
)


def recorded_settings(r) -> dict:
    """What the recording ran with, by the names of this page's settings."""
    d = r.run.decode
    return {"prompt": r.prompt_text, "k": d.k, "temperature": d.temperature, "seed": d.seed,
            "new tokens": len(r.run.token_ids), "drafter": r.run.settings.get("drafter", "draft model")}


# the default run: live on the loaded pair, or the main page's recording of the same prompt and settings
RECORDING = "capital-of-france-greedy"
pair, rec = recorded_ui.pair_or_main_recording("slow", RECORDING, recorded_settings, shared_vocab=False)
if rec is not None:
    d = rec.run.decode
    decode, ident, ids, text = rec.decode(), ("recorded", rec.name), rec.run.prompt_ids, rec.prompt_text
    k, temperature, seed, max_new = d.k, d.temperature, d.seed, d.max_new_tokens
    drafter_name = rec.run.settings.get("drafter", "draft model")
else:
    if pair is None:  # no model, and no recording: the reason is shown
        st.stop()
    pair, decode, ident, ids, text, right = lab_ui.stepping_setup("slow", "The capital of France", pair=pair)
    with right:
        k = st.slider("k: tokens drafted per round", 1, min(K_MAX, 12), DEFAULT.k, key="slow.k")
        temperature = st.number_input("temperature (0 = greedy)", 0.0, 2.0, DEFAULT.temperature, 0.1,
                                      key="slow.temperature",
                                      help="0 shows the greedy test; above 0 shows u, p/q and the residual.")
        seed = st.number_input("seed", 0, 2**31 - 1, DEFAULT.seed, 1, key="slow.seed")
        max_new = st.number_input("max new tokens (whole run)", 1, limits.max_new_tokens(),
                                  min(DEFAULT.max_new_tokens, limits.max_new_tokens()), 1, key="slow.max_new")
        drafter_name = st.radio("drafter", ["draft model", "prompt lookup (no model)"], horizontal=True,
                                key="slow.drafter",
                                help="Prompt lookup copies what followed an earlier match of the last tokens.")


settings = DecodeSettings(k=int(k), temperature=float(temperature), max_new_tokens=int(max_new), seed=int(seed))

# the page's run, until the pair or dtype changes; a run that is replaced is stopped, so its KV caches are freed
kept = Kept("slow.state", ident, close=lambda old: old["pb"].close("replaced"))


def start():
    """A new run with the current settings (or the recording's replay); None (error shown) on bad input."""
    if rec is not None:
        return {"pb": playback.Playback.replay(rec.run, rec.prompt_text, {"chat": rec.chat}), "prompt_text": text,
                "settings": dict(k=int(k), temperature=float(temperature), seed=int(seed), max_new=int(max_new),
                                 drafter=drafter_name)}
    if ids is None:
        return None
    draft = pair.drafter() if drafter_name == "draft model" else PromptLookupDrafter()
    stream = lab_ui.run_guarded(speculative_stream, pair.target, draft, ids, settings, **pair.run_kw)
    if stream is None:
        return None
    # a Playback: two reruns at once (a click while a round is computed) wait for each other
    pb = playback.Playback.live(stream, ids, text, settings.record(eos_token_id=pair.eos_token_ids),
                                {"chat": lab_ui.chat_on("slow")})
    return {"pb": pb, "prompt_text": text,
            "settings": dict(k=int(k), temperature=float(temperature), seed=int(seed), max_new=int(max_new),
                             drafter=drafter_name)}


def take(n: int = 1, until_zero: bool = False, bar=None) -> None:
    """Advance the kept run by up to n rounds (stopping early at a zero-accept round if asked)."""
    try:
        for j, rnd in enumerate(playback.play(kept.get()["pb"], n)):
            if bar is not None:
                bar(f"round {rnd.index + 1}", (j + 1) / n)
            if until_zero and rnd.k > 0 and rnd.n_accepted == 0:
                break
    except Exception as e:  # noqa: BLE001 — the rounds so far are kept; the error is shown
        ui.show_error(e)


# the settings a run is started with, kept with it: the page says which differ when the widgets change
run_now = lab_ui.run_settings(ids, settings, k=int(k), drafter=drafter_name)
row = ui.button_row()
if row.button("First round", icon=":material/play_arrow:", type="primary", key="slow.start",
              help="Start a new run and take its first round") and kept.put(start(), settings=run_now) is not None:
    take()
next_ok = kept.get() is not None and not kept.get()["pb"].done
if row.button("Next round", icon=":material/skip_next:", key="slow.next", disabled=not next_ok):
    take()
if row.button("Run until a round accepts nothing", key="slow.until_zero", disabled=not next_ok,
              help="Claim 5: step until the target refuses the very first draft, then stop there."):
    bar = lab_ui.ProgressBar("stepping…")
    take(n=10_000, until_zero=True, bar=bar)
    bar.done()
if row.button("Reset", key="slow.reset"):
    kept.clear()

state = kept.get()
if state is None or not state["pb"].rounds:
    st.info("No round yet: press **First round**.")
    st.stop()

# --- the text so far, then one round in detail -------------------------------------------------
round_ui.text_so_far(state, decode, kept.changed(run_now))
round_ui.round_detail(state["pb"].rounds, decode)
