"""Exactness (claims 6, 7, 15): the same text in greedy mode, the same distribution when sampling.

And the acceptance-rule lab: which ways of keeping a draft keep that distribution (specviz.teaching.rules).
"""

import streamlit as st

from pages.common import lab_ui, recorded_ui, ui
from pages.common.kept import Kept
from specviz.teaching import charts, explain, glossary, lab, page_records, rules
from specviz.core import claims, limits, theory
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
    cmp = g["cmp"]
    ui.note_other_settings(changed("greedy", greedy_now))
    v = explain.exactness_verdict(cmp.spec.token_ids, cmp.base, g["dtype"], decode)
    (st.success if v.kind == "identical" else st.warning)(v.text)
    m1, m2, m3 = st.columns(3)
    m1.metric("identical", "yes" if cmp.identical else "no")
    m2.metric("tokens compared", f"{len(cmp.base.token_ids)}")
    m3.metric(f"speedup over {explain.target_alone({})} (this run)", f"{cmp.speedup:.2f}×")
    left, right = st.columns(2)
    with left:
        # the draft's precision, when it is not the target's: a cheaper draft, the same text
        draft = f", {g['draft']} draft" if g["draft"] != g["dtype"] else ""
        st.markdown(f"**Speculative** (k = {cmp.spec.decode.k}, {g['dtype']}{draft})")
        st.markdown(lab.diff_html(cmp.spec.token_ids, cmp.base.token_ids, decode), unsafe_allow_html=True)
    with right:
        st.markdown(f"**Target alone** ({g['dtype']})")
        st.markdown(lab.diff_html(cmp.base.token_ids, cmp.spec.token_ids, decode), unsafe_allow_html=True)

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
    trials, fp = res["trials"], res["fp"]
    if not off:
        lab_ui.stopped_note(kept["trials"])
    ui.note_other_settings(changed("trials", trials_now))
    tv, noise = theory.total_variation(trials.p, trials.counts), trials.noise
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("total variation distance", f"{tv:.3f}")
    m2.metric("expected from noise alone", f"{noise.expected:.3f}",
              help=f"The expected TV of {trials.n} tokens drawn straight from p, over the whole vocabulary "
                   "(theory.expected_tv_noise); a simulation of it gives the give-or-take.")
    m3.metric("more than noise beyond", f"{noise.limit:.3f}",
              help=f"TV of {trials.n} tokens drawn straight from p, {len(noise.tvs)} times: the average plus "
                   f"{theory.NOISE_SPREADS:g} times its spread, which noise alone almost never reaches. 95% of those "
                   f"samplings were below {noise.p95:.3f}.")
    m4.metric("draft token kept", f"{trials.accepted / trials.n:.3f}", f"theory {fp.overlap:.3f}", delta_color="off")
    v = explain.tv_verdict(tv, noise, trials.accepted, fp.overlap)
    (st.success if v.kind == "within noise" else st.warning)(v.text)
    ui.show_chart(charts.fig_exactness(trials.counts, trials.p, decode, noise=noise.expected), "exactness_histogram",
                  key="exact.fig_hist")
    st.caption("How often each token came out of the speculative step, next to the target's p.")
    ui.show_chart(charts.fig_first_position(fp, decode), "first_token_p_q_residual", key="exact.fig_pq")
    st.caption("Where that comes from: the draft's q, the target's p, and the residual the corrections are drawn "
               "from. Tokens where q > p are partly refused; the residual fills exactly what is missing.")

# --- acceptance rules: which keep p ---------------------------------------------------------------
st.subheader("Which acceptance rules keep the distribution?")
st.markdown(
    """
The rule above is not the only way to decide whether to keep a drafted token. Four rules, one position:

* **Rejection sampling** (the engine's rule): keep d with probability min(1, p(d)/q(d)), else draw from
  norm(max(0, p − q)). A token x comes out as a kept draft with probability q(x)·min(1, p(x)/q(x)) = min(p(x), q(x)),
  and the residual adds exactly the missing max(0, p(x) − q(x)): together **p(x)**. Lossless, and it keeps the draft
  Σ min(p, q) of the time, the most any lossless rule can.
* **Exact match at T > 0**: sample the target's own token t ~ p and keep d only if d = t. The output is always t,
  so it is **lossless** too, but it keeps the draft only Σ p·q of the time: two independent draws must collide.
  This is why llama.cpp and mlx-lm moved to rejection sampling.
* **Typical acceptance** (Medusa): keep d if p(d) > min(ε, δ·exp(−H(p))). **Lossy**: the test looks at p(d) alone,
  so a token the draft likes and the target merely tolerates comes out with the draft's frequency q, not p.
* **Naive threshold**: keep d if p(d) ≥ τ. **Lossy** for the same reason.

For the two lossy rules a refused draft is replaced by the target's own token **sampled from p** (not its argmax),
so the only thing that bends the distribution is the acceptance test. Each rule is computed exactly (its output
distribution in closed form) and run on the same seeded trials.
"""
)
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
    st.info(rules.rules_verdict(rlab))
    ui.show_chart(charts.fig_rules(rlab), "acceptance_rules", key="exact.fig_rules")
    st.caption("Up is faster (more drafts kept), left is more faithful. The lossless rules sit on the left edge, "
               "inside the grey noise band; the lossy ones buy acceptance with distance from p. A lossy point "
               "inside the band is wrong too, only by less than this many trials can show.")
    ui.table(rules.rule_rows(rlab), hide_index=True)
