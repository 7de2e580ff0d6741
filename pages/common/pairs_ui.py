"""The main page's side-by-side of the offline pairs (specviz.teaching.sidebyside), drawn in an expander.

    offline_pairs_section(pair_name, dtype, draft_precision, prompt_text, chat, settings)

One run of each offline pair on the page's prompt and settings; the results stay (kept.Kept under
"main.pairs", with the settings they ran with) until the next comparison, and say which settings those were. A pair that cannot load is
reported and left out; the others still run.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages.common import kept, lab_ui, ui
from pages.common.kept import Kept
from specviz.core import prompts
from specviz.modeling import quant
from specviz.teaching import charts, explain, sidebyside
from specviz.core.errors import SpecvizError
from specviz.core.settings import DecodeSettings

KEY = "main.pairs"


def _contenders(names: list[str], registry, prefer: str, dtype: str, precisions: list[str], prompt_text: str,
                chat: bool) -> list[sidebyside.Contender]:
    """Load what the plan needs (cached per server) and pair each offline pair with its models and prompt."""
    plan = sidebyside.load_plan(names, registry, prefer=prefer)
    loaded: dict[tuple[str, str], object] = {}
    out = []
    for name in names:
        spec = registry.pair(name)
        derived = sidebyside.is_derived(spec)
        for precision in precisions[:1] if derived else precisions:  # the target's own layers: its precision
            try:
                host = loaded.get((plan[name], precision)) or ui.load_pair_cached(plan[name], dtype, precision)
                loaded[(plan[name], precision)] = host
                draft = sidebyside.draft_for(spec, host)
            except (SpecvizError, MemoryError) as e:
                st.warning(f"**{name}** is left out:", icon=":material/warning:")
                ui.show_error(e)
                break
            try:
                ids = prompts.encode(host.tokenizer, prompt_text, chat)
            except SpecvizError as e:  # the prompt itself: no pair can run it
                ui.show_error(e)
                return []
            label = name if derived or len(precisions) == 1 else f"{name} · {precision} draft"
            desc = sidebyside.draft_desc(spec, dtype if derived else host.draft_precision)
            out.append(sidebyside.Contender(label, desc, host.target, draft, ids, host.shared_vocab,
                                            list(host.eos_token_ids)))
    return out


def offline_pairs_section(pair_name: str, dtype: str, draft_precision: str, prompt_text: str, chat: bool,
                          settings: DecodeSettings) -> None:
    """An expander: pick draft precisions, press the button, see α, c, tokens per pass and speedup per pair, each
    run with the sidebar's `settings`."""
    from specviz.modeling.config import default_registry
    from specviz.decoding.models import default_device

    with st.expander("Compare the offline pairs on this prompt", expanded=kept.latest(KEY) is not None):
        try:
            registry = default_registry()
        except SpecvizError as e:
            ui.show_error(e)
            return
        statuses = {n: ui.pair_status(n) for n in sidebyside.offline_pairs(registry)}
        names = [n for n, s in statuses.items() if s.available]
        st.caption("One run of each pair that needs no download, on the prompt and settings in the sidebar, each next "
                   "to its own run of the target alone. The target drafting for itself accepts every greedy draft "
                   "(α = 1) and is still slower than the target alone (c ≈ 1); a shallow early exit is cheap but "
                   "drafts poorly; a quantized draft lowers c; a draft with another tokenizer drafts through "
                   "text. Greedy, every pair writes the target's own text.")
        for n, s in statuses.items():
            if not s.available:
                st.caption(f"Not installed: **{n}** ({s.how_to_get or s.reason}).")
        choices = list(quant.supported(default_device()))
        precisions = st.multiselect("draft precisions (for pairs with a draft model)", choices,
                                    default=[draft_precision] if draft_precision in choices else choices[:1],
                                    key="main.pairs_precisions")
        contenders = []
        if st.button("Compare the offline pairs", key="main.pairs_btn", icon=":material/compare_arrows:",
                     disabled=not names or not precisions):
            contenders = _contenders(names, registry, pair_name, dtype, precisions, prompt_text, chat)
        if contenders:
            bar = lab_ui.ProgressBar("comparing the offline pairs…")
            results, note = lab_ui.measure(sidebyside.compare_pairs, contenders, settings, progress=bar)
            bar.done()
            said = (f"{explain.k_words(settings.k, settings.k_policy)}, T = {settings.temperature:g}, "
                    f"{settings.max_new_tokens} new tokens, seed {settings.seed}, {dtype}")
            Kept(KEY, said).put({"results": results, "note": note, "settings": said}
                                if results is not None else None)
        got = kept.latest(KEY)
        if got is None:
            return
        lab_ui.load_warning(got["note"])
        ui.show_chart(charts.fig_pairs(got["results"]), "offline-pairs", key="main.pairs_fig")
        ui.table(pd.DataFrame(sidebyside.rows(got["results"])), hide_index=True, width="stretch")
        st.caption(f"Settings: {got['settings']}. The measured speedup is over the rounds after the first (whose "
                   "passes also read the prompt); c is a draft step over a one-token target step in the same run.")
