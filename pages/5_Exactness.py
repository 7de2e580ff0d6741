"""Exactness (claims 6, 7, 15): the same text in greedy mode, the same distribution when sampling.

And the acceptance-rule lab: which ways of keeping a draft keep that distribution (specviz.teaching.rules).
"""

import streamlit as st

from pages.common import exactness_ui, lab_ui, recorded_ui, ui
from pages.common.kept import Kept
from specviz.teaching import glossary, lab, page_records, rules
from specviz.core import claims, limits
from specviz.core.settings import DecodeSettings

ui.page_setup("Exactness: faster, not different", shows=(6, 7, 15), words=glossary.PAGE_WORDS["5_Exactness"])

st.markdown(
    """
Speculative decoding changes **only the speed**, never what the model writes or knows.

* **Greedy** (temperature 0): a drafted token is kept only if it is the target's own top choice, and a
  refused one is replaced by that top choice. So the text must be **identical** to the target decoding
  alone. Check it below, token for token.
* **Sampling**: a drafted token d is kept with probability min(1, p(d)/q(d)); if refused, the replacement is
  drawn from norm(max(0, p − q)). Together these give exactly the target's distribution p, whatever the draft
  proposes. Check it below by repeating the first step thousands of times with different seeds.
"""
)

pair, rec = recorded_ui.pair_or_page_recording("exact", "exactness")
got = recorded_ui.results(rec, page_records.RESULTS["exactness"]) if rec is not None else None
if pair is None and got is None:
    st.stop()
off = rec is not None  # a recording: its settings are shown, nothing runs
if off:
    decode, dt, ids, text = rec.decode(), rec.about["dtype"], got["greedy"].spec.prompt_ids, rec.prompt_text
    st.markdown(f"**Prompt** (recorded): {text}")
    shown = {"greedy": {"cmp": got["greedy"], "dtype": dt, "draft": rec.about["draft_precision"]},
             "trials": {"trials": got["trials"], "fp": got["fp"]}, "rules": got["rules"]}
else:
    decode, dt = lab_ui.decoder(pair), lab_ui.dtype_name(pair)
    ids, text = lab_ui.prompt_input("exact", pair, default=page_records.EXACTNESS_PROMPT)
# the results stay until another pair is picked (the greedy check names its dtype, so it stays across dtypes);
# one measured with other settings than those above says which
kept = {what: Kept(f"exact.{what}", "recorded" if off else pair.name) for what in ("greedy", "trials", "rules")}


def result(what: str):
    """The section's result: the recording's, else the one kept from a live run."""
    return shown[what] if off else kept[what].get()


def changed(what: str, now: dict) -> list[str]:
    return [] if off else kept[what].changed(now)

prompt = {"prompt": list(ids or [])}

# --- greedy: identical text -------------------------------------------------------------------
st.subheader(f"Greedy: the same text as the target alone ({claims.link(6)})")
c1, c2, c3 = st.columns(3)
k = c1.slider("k", 1, 12, 4, key="exact.k", disabled=off)
cap = limits.max_new_tokens()
max_new = c2.number_input("new tokens", 1, cap, min(32, cap), 1, key="exact.max_new", disabled=off)
c3.caption(f"dtype **{dt}** (change it in the sidebar: in bfloat16 a near-tie can flip the argmax)")
greedy_now = {**prompt, "k": int(k), "number of new tokens": int(max_new)}
greedy_settings = DecodeSettings(k=int(k), temperature=0.0, max_new_tokens=int(max_new), seed=0)
if st.button("Compare with the target alone", type="primary", key="exact.run_greedy", disabled=off) \
        and ids is not None:
    bar = lab_ui.ProgressBar("target alone, then speculative…")
    cmp = lab_ui.run_guarded(lab.compare_with_baseline, pair.target, pair.draft, ids, greedy_settings,
                             **pair.run_kw)
    bar.done()
    kept["greedy"].put({"cmp": cmp, "dtype": dt, "draft": pair.draft_precision} if cmp is not None else None,
                       settings=greedy_now)
if (g := result("greedy")) is not None:
    ui.note_other_settings(changed("greedy", greedy_now))
    exactness_ui.greedy_result(g, decode)

# --- sampling: the same distribution ------------------------------------------------------------
st.subheader(f"Sampling: the same distribution as the target ({claims.link(7)})")
s1, s2, s3 = st.columns(3)
temperature = s1.number_input("temperature", 0.05, 2.0, 1.0, 0.05, key="exact.temperature", disabled=off)
n = s2.number_input("trials", 100, 100_000, 2000, 100, key="exact.n", disabled=off)
seed = s3.number_input("first seed", 0, 2**31 - 1, 0, 1, key="exact.seed", disabled=off)
st.caption("Each trial is one seeded speculative first step with the engine's own acceptance rule: the draft "
           "samples d from q, the rule keeps it or draws a correction. It is fast because both models' forward "
           "passes for this prompt are computed **once**; only the random draws change between trials.")
trials_now = {**prompt, "temperature": float(temperature), "number of trials": int(n), "seed": int(seed)}
if st.button(f"Run {int(n)} trials", type="primary", key="exact.run_trials", disabled=off) and ids is not None:
    # one forward pass of each model; the trials and the p/q/residual chart both read these logits
    run = lab_ui.stoppable(page_records.exactness_trials, pair, ids, n=int(n), temperature=float(temperature),
                           seed=int(seed), key="exact.stop_trials", unit="block of trials", plural="blocks of trials",
                           text=f"{int(n)} seeded trials…")
    run.keep(kept["trials"], {"trials": run.value[0], "fp": run.value[1]} if run.value else None, settings=trials_now)
    run.go_on()
if (res := result("trials")) is not None:
    if not off:
        lab_ui.stopped_note(kept["trials"])
    ui.note_other_settings(changed("trials", trials_now))
    exactness_ui.trials_result(res["trials"], res["fp"], decode)

# --- acceptance rules: which keep p ---------------------------------------------------------------
exactness_ui.rules_intro()
r1, r2, r3, r4 = st.columns(4)
r_temp = r1.number_input("temperature", 0.05, 2.0, 1.0, 0.05, key="exact.rules.temperature", disabled=off)
r_n = r2.number_input("trials per rule", 100, 200_000, 20_000, 1000, key="exact.rules.n", disabled=off)
r_seed = r3.number_input("seed", 0, 2**31 - 1, 0, 1, key="exact.rules.seed", disabled=off)
r4.caption("Add your own settings to the defaults (Medusa's ε = 0.09, δ = 0.3 among them):")
r5, r6, r7 = st.columns(3)
eps = r5.number_input("typical: ε", 0.0, 1.0, 0.05, 0.01, key="exact.rules.epsilon", disabled=off)
delta = r6.number_input("typical: δ", 0.0, 1.0, 0.2, 0.05, key="exact.rules.delta", disabled=off)
tau = r7.number_input("threshold: τ", 0.0, 1.0, 0.1, 0.01, key="exact.rules.tau", disabled=off)
rules_now = {**prompt, "temperature": float(r_temp), "number of trials": int(r_n), "seed": int(r_seed),
             "ε": float(eps), "δ": float(delta), "τ": float(tau)}
if st.button("Compare the rules", type="primary", key="exact.run_rules", disabled=off) and ids is not None:
    chosen = page_records.exactness_rules(eps, delta, tau)
    with st.spinner("every rule, exactly and on seeded trials…"):
        rlab = lab_ui.run_guarded(rules.rule_lab, pair.target, pair.draft, ids, chosen, n=int(r_n),
                                  temperature=float(r_temp), seed=int(r_seed), vocab=pair.shared_vocab)
    kept["rules"].put(rlab, settings=rules_now)
if (rlab := result("rules")) is not None:
    ui.note_other_settings(changed("rules", rules_now))
    exactness_ui.rules_result(rlab)
