"""The main page's sidebar: every widget in, one MainSettings out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from pages.common import state, tree_ui, ui
from specviz.core import claims, limits, prompts
from specviz.teaching import explain
from specviz.data import playback, runfile
from specviz.core.settings import DecodeSettings, is_greedy

S = st.session_state
LIVE, RECORDED = "Live models", "Recorded runs (no model needed)"
SOURCES = {"live": LIVE, "recorded": RECORDED}  # the source, as every page remembers it (state.remembered)
DRAFT_MODEL, LOOKUP = "draft model", "prompt lookup (no second model)"
K_POLICIES = {"fixed": "fixed", "adaptive": "adaptive", "best": "best k"}  # engine k_policy -> label
FREE = "free text"
MORE = "More settings"  # the expander with every control the first Run can leave as it is
WATCH = "watch"  # the address's key of a recording to play at once (main_controls.offer_recording links it)
FIRST = prompts.FIRST_RUN  # what Run does on a fresh page: chosen by measurement (docs/performance.md)


def preset_label(p: prompts.Preset) -> str:
    return f"{p.domain} · {p.name}" + ("" if p.chat else " (raw, no chat template)")


PRESETS = {preset_label(p): p for p in prompts.PRESETS}
DEFAULT_PRESET = preset_label(prompts.preset(FIRST.preset))


@dataclass(frozen=True)
class MainSettings:
    """What the sidebar says: where the run comes from, how to decode, and how to show it."""

    live: bool
    recording: Any  # a runfile.Recording when replaying one, else None
    pair_name: str | None
    dtype: str | None
    draft_precision: str | None
    target_precision: str | None  # float32 (the reference) or int8; None when no live pair is chosen
    lookup: bool  # prompt lookup instead of the draft model
    decode: DecodeSettings
    speed: str
    baseline_on: bool
    prompt_text: str
    chat: bool
    shape: str  # the drafter shape of the main page's tree panel (tree_ui.shape_picker)
    tree_budget: int  # the tree panel's node budget (tree_ui.budget_picker)


def _apply_preset() -> None:
    p = PRESETS.get(S["main.preset"])
    if p is not None:
        S["main.prompt"], S["main.chat"] = p.text, p.chat


def _source(sb) -> tuple[bool, Any]:
    """Live or recorded, and (recorded) which recording: what the first press of the main button needs."""
    state.restore_widget("main.source", "source", "live", SOURCES)
    source = sb.radio("Source", [LIVE, RECORDED], key="main.source", horizontal=False,
                      help="Live: run the real models on this machine. Recorded: replay runs recorded with the "
                           "real default pair, instantly, with no model loaded (for weak laptops).")
    state.keep_widget("source", source, SOURCES, "live")
    if source == LIVE:
        return True, None
    recs = runfile.list_recorded()
    if not recs:
        sb.warning("No recorded runs found in specviz/recorded/.")
        return False, None
    by_name = {r.name: r for r in recs}
    names = list(by_name)
    first = runfile.FIRST_RECORDING
    watch = st.query_params.get(WATCH)  # a waiting session's link (main_controls.offer_recording): play it once
    if watch is not None:  # a new tab, so a new session: its selectbox takes the index
        del st.query_params[WATCH]
        if watch in by_name:
            first, S["main.request"] = watch, "run"
    chosen = sb.selectbox("Recorded run", names, key="main.recording", format_func=lambda n: by_name[n].title or n,
                          index=names.index(first) if first in names else 0)
    recording = by_name[chosen]
    rs = recording.run
    sb.caption(f"Recorded with {recording.pair} on {rs.device}, {rs.dtype}: "
               f"{explain.k_words(rs.decode.k, rs.decode.k_policy)}, "
               f"temperature {rs.decode.temperature}, seed {rs.decode.seed}, "
               f"{len(rs.token_ids)} tokens. No model is loaded to replay it.")
    return False, recording


def _models(more) -> tuple[str | None, str | None, str | None, str | None]:
    """The pair, its dtype, the draft's and the target's precision (live only), in the expander: the defaults
    fit the budget."""
    pair_name, dtype, draft_precision, target_precision = ui.choice_pickers("main", where=more, target=True)
    ui.show_device(None, dtype, where=more)
    return pair_name, dtype, draft_precision, target_precision


def _first(sb, live: bool) -> tuple[int, str, float]:
    """What the first Run needs besides the prompt preset: k, how k is chosen per round, and the temperature."""
    k_policy = sb.radio("k per round", list(K_POLICIES), key="main.k_policy", format_func=K_POLICIES.get,
                        index=list(K_POLICIES).index(FIRST.k_policy), disabled=not live, horizontal=True,
                        help="fixed: k every round. adaptive: k grows by 1 after a fully accepted round and "
                             f"shrinks by 1 after a rejection ({claims.link(13)}). best k: the chooser sets k from "
                             "live estimates of α, c and the verify cost, and with the draft model ends each "
                             "round after a doubtful draft (a round may draft up to "
                             f"{limits.K_MAX}). When sampling it takes c from the models' weight sizes, not "
                             "from this run's timings, so that a seed gives the same text.")
    chosen_live = live and k_policy == "best"
    label, help_k = ((explain.K_CHOSEN_LIVE_LABEL, explain.K_CHOSEN_LIVE_HELP) if chosen_live else
                     ("k: tokens drafted per round",
                      "How many tokens the drafter proposes before the target checks them in one pass."))
    if not live:  # a recording replays with its own k: the live setting is set aside, visibly
        label, help_k = explain.K_SET_ASIDE_LABEL, explain.K_SET_ASIDE_HELP
    k = sb.slider(label, 1, 16, FIRST.k, key="main.k", help=help_k, disabled=not live)
    temperature = sb.slider("temperature (0 = greedy)", 0.0, 2.0, FIRST.temperature, 0.05, key="main.temperature",
                            disabled=not live)
    return k, k_policy, float(temperature)


def _decoding(more, live: bool, k: int, k_policy: str, temperature: float) -> tuple[bool, DecodeSettings]:
    more.subheader("Decoding")
    drafter = more.radio("Drafter", [DRAFT_MODEL, LOOKUP], key="main.drafter", disabled=not live,
                         help="The pair's small draft model, or prompt lookup: copy the tokens that followed "
                              f"the last earlier occurrence of the latest n-gram ({claims.link(14)}).")
    top_p = more.slider("top-p", 0.05, 1.0, DecodeSettings.top_p, 0.05, key="main.top_p",
                        disabled=not live or is_greedy(temperature),
                        help="Nucleus sampling: keep the smallest set of tokens whose probability adds up to top-p.")
    max_new = int(more.number_input("max new tokens", 1, limits.max_new_tokens(),
                                    min(FIRST.max_new_tokens, limits.max_new_tokens()),
                                    key="main.max_new", disabled=not live))
    seed = int(more.number_input("seed", 0, 2**31 - 1, DecodeSettings.seed, key="main.seed", disabled=not live,
                                 help="Same seed and settings → same output, with every k policy."))
    return drafter == LOOKUP, DecodeSettings(k=k, k_policy=k_policy, temperature=temperature,
                                             top_p=float(top_p), max_new_tokens=max_new, seed=seed)


def _showing(sb, live: bool) -> tuple[str, bool]:
    if S.get("main.speed_for_presenter") != ui.presenter():  # presenter mode switched: back to its default speed
        S.pop("main.speed", None)
        S["main.speed_for_presenter"] = ui.presenter()
    speed = sb.select_slider("animation speed", list(playback.SPEEDS), key="main.speed",
                             value="slow" if ui.presenter() else playback.DEFAULT_SPEED,
                             help="How long drafted tokens stay pending before the verdict is drawn.")
    baseline_on = sb.checkbox("after each run, time the target alone", True, key="main.baseline",
                              disabled=not live,
                              help="A plain one-token-per-pass run with the same settings, for the measured "
                                   "speedup and the greedy identity check. On a CPU it takes as long as the run "
                                   "itself.")
    return speed, baseline_on


def _preset(sb, live: bool) -> None:
    sb.selectbox("Prompt preset (by domain)", list(PRESETS) + [FREE], key="main.preset", on_change=_apply_preset,
                 disabled=not live, help="Fills the prompt (under More settings, where it can be edited).")


def _prompt(more, live: bool) -> tuple[str, bool]:
    more.subheader("Prompt")
    text = more.text_area("Prompt", key="main.prompt", height=120, disabled=not live,
                          max_chars=limits.max_prompt_chars())
    chat = more.checkbox(ui.CHAT_LABEL, key="main.chat", disabled=not live, help=ui.CHAT_HELP)
    return text, chat


def sidebar() -> MainSettings:
    """Draw the sidebar (defaults set once, before the widgets exist) and return what it says.

    What the first Run needs is drawn first (source, prompt preset, k and its policy, temperature); the rest
    sits in the MORE expander, collapsed: its defaults run as they are."""
    S.setdefault("main.preset", DEFAULT_PRESET)
    if "main.prompt" not in S:
        _apply_preset()
    sb = st.sidebar
    live, recording = _source(sb)
    _preset(sb, live)
    k, k_policy, temperature = _first(sb, live)
    more = sb.expander(MORE)
    pair_name = dtype = draft_precision = target_precision = None
    if live:
        more.subheader("Models")
        pair_name, dtype, draft_precision, target_precision = _models(more)
    lookup, decode = _decoding(more, live, k, k_policy, temperature)
    text, chat = _prompt(more, live)
    more.subheader("Showing")
    speed, baseline_on = _showing(more, live)
    shape = tree_ui.shape_picker(more, live)
    tree_budget = tree_ui.budget_picker(more, live, shape)
    return MainSettings(live=live, recording=recording, pair_name=pair_name, dtype=dtype,
                        draft_precision=draft_precision, target_precision=target_precision, lookup=lookup,
                        decode=decode, speed=speed, baseline_on=baseline_on, prompt_text=text, chat=chat,
                        shape=shape, tree_budget=tree_budget)
