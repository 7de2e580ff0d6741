"""Why it is fast (claims 1, 2, 12): forward cost vs tokens, weight bytes vs bandwidth, and batch size."""

import streamlit as st

from pages.common import lab_ui, recorded_ui, ui
from pages.common.kept import Kept
from specviz.service.pairs import DTYPE_CHOICES
from specviz.teaching import charts, experiments, explain, glossary, page_records

ui.page_setup("Why it is fast: one pass, many tokens", shows=(1, 2, 12), words=glossary.PAGE_WORDS["4_Why_it_is_fast"])

st.markdown(
    """
Generating one token means one forward pass of the whole model, and every pass reads **all the weights**
from memory. For a small batch the arithmetic is quick; moving the bytes is slow. Roughly:

> time per token ≈ bytes of weights ÷ memory bandwidth

So a pass over **5 tokens** should cost about the same as a pass over **1**: the weights are read once
either way. That is the trick speculative decoding uses: the target checks k drafted tokens in **one** pass.

Measure it here, on **your** device, and see where it holds and where it does not. Pick the dtype in
the sidebar (float32 or bfloat16) and measure again to compare: results for each dtype are kept.
"""
)

pair, rec = recorded_ui.pair_or_page_recording("fast", "why_fast", draft=False)
got = recorded_ui.results(rec, page_records.RESULTS["why_fast"]) if rec is not None else None
if pair is None and got is None:
    st.stop()
off = rec is not None  # a recording: its settings are shown, nothing runs
dt, device = (rec.about["dtype"], rec.about["device"]) if off else (lab_ui.dtype_name(pair), pair.device)
# each measurement is kept for each dtype until the pair changes: the dtypes are compared side by side
kept = {what: Kept(f"fast.{what}.{dt}", "recorded" if off else pair.name) for what in ("forward", "bw", "batch")}


def result(what: str):
    """(the section's result, its outside-load note): the recording's, else the one kept from a live run."""
    return (got[what], None) if off else kept[what].get()


# --- 1. forward cost vs tokens per pass ------------------------------------------------------
st.subheader("1 · Target forward time for 1, 2, 4, 8 and 16 tokens")
c1, c2 = st.columns([3, 1])
sizes = c1.multiselect("Tokens per pass", [1, 2, 3, 4, 5, 6, 8, 12, 16, 32], default=[1, 2, 4, 8, 16],
                       key="fast.sizes", disabled=off)
reps = c2.number_input("repetitions", 1, 50, 5, 1, key="fast.reps", disabled=off)
if st.button("Measure forward cost", type="primary", key="fast.run_forward", disabled=off):
    if 1 not in sizes or len(sizes) < 2:
        st.error("Pick 1 and at least one larger size.", icon=":material/error:")
    else:
        run = lab_ui.stoppable(experiments.forward_cost, pair.target, n_tokens=tuple(sorted(sizes)), reps=int(reps),
                               text="warming up…", key="fast.stop_forward", unit="repetition")
        run.keep(kept["forward"], (run.value, run.load) if run.value is not None else None)
        run.go_on()
if result("forward") is not None:
    forward, note = result("forward")
    if not off:
        lab_ui.stopped_note(kept["forward"])
    lab_ui.load_warning(note)
    ui.show_chart(charts.fig_forward_cost(forward), f"forward_cost_{dt}", key="fast.fig_forward")
    v = explain.forward_cost_verdict(forward, device, dt)
    m1, m2 = st.columns(2)
    m1.metric("cost(2 tokens) ÷ cost(1 token)", f"{v.value:.2f}×")
    m2.metric("this device here is", v.kind)
    (st.warning if v.kind == "compute-bound" else st.success if v.kind == "memory-bound" else st.info)(v.text)
    other = (got.get("precisions") or {}) if off else {
        d: m[0] for d in DTYPE_CHOICES if (m := Kept(f"fast.forward.{d}", pair.name).get())}
    cmp = explain.dtype_comparison(other)
    if off and cmp:
        st.markdown("**The target in each precision, recorded on the same machine.** " + cmp)
    elif off:
        st.caption(f"Recorded in {dt} only: choose **Live** to measure and compare the other dtype.")
    elif cmp:
        st.markdown("**float32 vs bfloat16 on this device.** " + cmp)
    else:
        st.caption("Switch the dtype in the sidebar and measure again to compare.")

# --- 2. bytes of weights vs bandwidth --------------------------------------------------------
st.subheader("2 · Time per token ≈ bytes of weights ÷ memory bandwidth?")
if st.button("Check against memory bandwidth", key="fast.run_bw", disabled=off):
    with st.spinner("Copying 256 MiB a few times to measure bandwidth, then timing 1-token passes…"):
        lab_ui.keep_measured(kept["bw"], lab_ui.measure(experiments.bandwidth_check, pair.target))
if result("bw") is not None:
    chk, note = result("bw")
    lab_ui.load_warning(note)
    v = explain.bandwidth_verdict(chk, dt)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("weights", explain.format_bytes(chk.weight_bytes))
    m2.metric("bandwidth", f"{chk.bandwidth / 1e9:.1f} GB/s")
    m3.metric("predicted 1-token pass", f"{chk.predicted_s * 1000:.1f} ms")
    m4.metric("measured 1-token pass", f"{chk.measured_s * 1000:.1f} ms", f"{v.value:.2f}× predicted",
              delta_color="off")
    (st.success if v.kind == "close" else st.info)(v.text)

# --- 3. tokens × batch ------------------------------------------------------------------------
st.subheader("3 · The larger the batch, the smaller the gain")
st.markdown("A server answering many users already puts many sequences in one pass. Once tokens × batch is "
            "large, the pass becomes **compute-bound**: extra drafted tokens are no longer free.")
b1, b2, b3 = st.columns(3)
b_tokens = b1.multiselect("Tokens per sequence", [1, 2, 4, 8, 16], default=[1, 4, 8], key="fast.b_tokens",
                          disabled=off)
b_batches = b2.multiselect("Batch sizes", [1, 2, 4, 8, 16, 32], default=[1, 2, 4, 8], key="fast.b_batches",
                           disabled=off)
b_reps = b3.number_input("repetitions", 1, 20, 3, 1, key="fast.b_reps", disabled=off,
                         help="Each point is the median of these passes: with 3 or more, one slow pass cannot "
                              "move it.")
if st.button("Measure batch cost", key="fast.run_batch", disabled=off):
    if not b_tokens or not b_batches:
        st.error("Pick at least one size of each.", icon=":material/error:")
    else:
        run = lab_ui.stoppable(experiments.batch_cost, pair.target, n_tokens=tuple(sorted(b_tokens)),
                               batches=tuple(sorted(b_batches)), reps=int(b_reps), key="fast.stop_batch",
                               unit="batch size")
        run.keep(kept["batch"], (run.value, run.load) if run.value is not None else None)
        run.go_on()
if result("batch") is not None:
    batch, note = result("batch")
    if not off:
        lab_ui.stopped_note(kept["batch"])
    lab_ui.load_warning(note)
    ui.show_chart(charts.fig_batch_cost(batch), f"batch_cost_{dt}", key="fast.fig_batch")
    st.info(explain.batch_verdict(batch).text)
