"""The Exactness page's results, drawn: the greedy comparison, the sampling trials and the acceptance-rule lab.

  greedy_result(g, decode)          the speculative text against the target alone's, token for token
  trials_result(trials, fp, decode) the seeded first steps' distribution against p: distance, noise, charts
  rules_intro()                     what the four acceptance rules are, and which keep p
  rules_result(rlab)                each rule's acceptance against its distance from p (specviz.teaching.rules)
"""

from __future__ import annotations

import streamlit as st

from pages.common import ui
from specviz.core import theory
from specviz.teaching import charts, explain, lab, rules


RULES = """
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
"""  # the four acceptance rules, and why each keeps p or not


def greedy_result(g: dict, decode) -> None:
    """The greedy check kept as {"cmp": the comparison with the target alone, "dtype": the target's, "draft": the
    draft's precision}: the verdict, the metrics and the two texts with their differences marked."""
    cmp = g["cmp"]
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


def trials_result(trials, fp, decode) -> None:
    """The sampling trials (page_records.exactness_trials: the counts, and fp, the first position's p, q and
    residual): their distance from p against noise alone, how often the draft was kept, and the charts."""
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


def rules_intro() -> None:
    """The acceptance rules' section heading and what each rule does."""
    st.subheader("Which acceptance rules keep the distribution?")
    st.markdown(RULES)


def rules_result(rlab) -> None:
    """The rule lab's result: the verdict, each rule's acceptance against its distance from p, and the table."""
    st.info(rules.rules_verdict(rlab))
    ui.show_chart(charts.fig_rules(rlab), "acceptance_rules", key="exact.fig_rules")
    st.caption("Up is faster (more drafts kept), left is more faithful. The lossless rules sit on the left edge, "
               "inside the grey noise band; the lossy ones buy acceptance with distance from p. A lossy point "
               "inside the band is wrong too, only by less than this many trials can show.")
    ui.table(rules.rule_rows(rlab), hide_index=True)
