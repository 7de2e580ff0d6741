"""Theory (claims 8, 9): tokens per pass and the speedup model, with sliders. Loads no model."""

import streamlit as st

from pages.common import kept, ui
from specviz.teaching import charts, explain, glossary, lab
from specviz.core import claims, theory

ui.page_setup("Theory: tokens per pass and speedup", shows=(8, 9), words=glossary.PAGE_WORDS["6_Theory"])

st.markdown(
    """
Each round the draft proposes **k** tokens and the target checks them in **one** pass. If each drafted
token is accepted with probability **α** (independently), the round yields on average

$$E[\\text{tokens per target pass}] = \\frac{1 - \\alpha^{k+1}}{1 - \\alpha}$$

(the accepted prefix, plus the correction or bonus token the target always adds). But **tokens per pass
is not speedup**: drafting costs time too. If one draft step costs **c** target steps, a round costs about
1 + k·c target passes, so

$$\\text{speedup} \\approx \\frac{E[\\text{tokens}]}{1 + k\\,c}.$$

Move the sliders: a larger k helps only while the draft keeps being right. This page loads no model;
the other pages measure α and c on real models.
"""
)

# sliders
K_MAX = 16  # the largest k the slider and the model try
c1, c2, c3 = st.columns(3)
alpha = c1.slider("α: chance the target accepts a drafted token", 0.0, 0.99, 0.8, 0.01, key="theory.alpha")
k = c2.slider("k: tokens drafted per round", 1, K_MAX, 4, key="theory.k")
c = c3.slider("c: draft step cost ÷ target step cost", 0.0, 1.0, 0.1, 0.01, key="theory.c")

best = theory.best_k(alpha, c, k_max=K_MAX)
m1, m2, m3 = st.columns(3)
m1.metric("E[tokens per target pass]", f"{theory.expected_tokens(alpha, k):.2f}")
m2.metric(f"predicted speedup over {explain.target_alone({})}", f"{theory.expected_speedup(alpha, k, c):.2f}×")
m3.metric("best k", f"{best[0]}", f"{best[1]:.2f}×", delta_color="off")
st.markdown(explain.theory_summary(alpha, k, c, best, K_MAX))

# runs measured on the other pages of this session can be put on the curve (no model is used here)
measured = {}
main_job = st.session_state.get("main.job")  # the main page's run, once it has finished
if main_job is not None and main_job.done and main_job.run is not None and main_job.run.rounds:
    measured[f"Main page: the last run ({main_job.run.decode.k_policy} k, {len(main_job.run.rounds)} rounds)"] = (
        main_job.run)
for dom, by_t in (kept.latest("lab.sweep") or {}).items():
    for t, run in sorted(by_t.items()):
        measured[f"Acceptance lab: {dom}, T = {t:g}, k = {run.decode.k}"] = run
for kk, cmp in (kept.latest("speed.sweep") or {}).items():
    measured[f"Speedup k sweep: k = {kk}"] = cmp.spec
point, k_curve, run_ks = None, k, []
if measured:
    pick = st.selectbox("Put a run measured on another page on the curve", ["none"] + list(measured),
                        key="theory.measured")
    if pick != "none":
        picked = measured[pick]
        point = charts.measured_point(picked)
        ks = picked.k_per_round
        if len(set(ks)) == 1:
            k_curve = ks[0]
            st.caption(f"The curve is drawn for that run's k = {k_curve}; its point is α measured and tokens per "
                       "pass measured, with error bars.")
        else:  # k changed from round to round: the formula over its rounds, dashed
            run_ks = ks
            st.caption(explain.run_curve_note(k, ks, picked.decode.k_policy, point, k_from="the slider above"))
else:
    st.caption("Run the main page, or measure acceptance on the Acceptance lab or Speedup page, to put a real run "
               "on the curve.")

# charts
ui.show_chart(charts.fig_expected_tokens(k_curve, measured=point, run_ks=run_ks), "expected_tokens",
              key="theory.fig_tokens")
ui.show_chart(charts.fig_speedup_model(alpha, c, k_max=16), "speedup_model", key="theory.fig_speedup")

# the worked numbers of claim 8
st.subheader(f"The numbers people quote ({claims.link(8)})")
st.markdown("At k = 4 introductions quote about 1.9, 2.8, 3.4 and 4.1 tokens per pass for α = 0.5, 0.7, "
            "0.8 and 0.9. Here they are, computed by the formula:")
ui.table(lab.seed_table(4), hide_index=True)
st.caption("A draft about a tenth the size (c ≈ 0.1) with k = 4–5 and α ≈ 0.8 gives "
           f"{theory.expected_speedup(0.8, 4, 0.1):.1f}–{theory.expected_speedup(0.8, 5, 0.1):.1f}× over the "
           "target alone by this model; "
           "the Speedup page measures c and the real speedup on your device.")
