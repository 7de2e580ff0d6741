"""The learning pages' recorded mode: with the source "recorded" (or no usable model) each page draws its default
experiment from a shipped recording, loads no model, and says it shows a recording (pair, device, settings, when).

Page recordings (specviz/recorded/pages/<page>.json) are written by tools.record.record_pages: here on the tiny
pair into a temporary folder, read back, and drawn by the page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
PAGES = {p.name.split("_", 1)[0]: str(p) for p in sorted((ROOT / "pages").glob("[0-9]_*.py"))}


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def recorded_page(n: str, by: str = "address"):
    """Page n with the source set to recorded, by the address (?source=recorded) or the session's kept value."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGES[n], default_timeout=120)
    if by == "address":
        at.query_params["source"] = "recorded"
    else:
        at.session_state["keep.source"] = "recorded"
    at.run()
    ok(at)
    return at


def ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def press(at, key: str):
    at.button(key=key).click().run()
    ok(at)
    return at


def notices(at) -> list[str]:
    return [i.value for i in at.info if "**recording**" in i.value]


# --- 1 · slow motion: a round of the main page's recording -------------------------------------------------------
@pytest.mark.parametrize("by", ["address", "session"])
def test_slow_motion_replays_the_recording_round_by_round_with_no_model(by, no_model):
    from specviz.data.runfile import list_recorded
    from specviz.teaching import explain

    rec = next(r for r in list_recorded() if r.name == "capital-of-france-greedy")
    decode, run = rec.decode(), rec.run
    at = recorded_page("1", by)
    [note] = notices(at)
    assert rec.pair in note and run.device in note and f"k {run.decode.k}" in note and rec.prompt_text in note
    assert at.sidebar.radio(key="slow.source").value.startswith("Recorded")
    press(at, "slow.start")
    story = [m.value for m in at.markdown if m.value.startswith("**Round 1**")]
    drafted = " ".join(explain.tok_md(t, decode) for t in run.rounds[0].drafted)
    assert story and drafted in story[0]  # the recording's own first round, its tokens from the file
    assert len(at.dataframe[0].value) == len(explain.round_rows(run.rounds[0], decode))
    assert at.get("plotly_chart")
    # step to the end: every round of the recording, and no more
    for _ in range(len(run.rounds) - 1):
        press(at, "slow.next")
    assert [s.value for s in at.selectbox if s.label == "Round to inspect"] == [len(run.rounds)]
    assert any("run finished" in c.value for c in at.caption)


# --- page recordings: record on the tiny pair, read back, drawn by the page ---------------------------------------
@pytest.fixture(scope="module")
def tiny_recordings(tmp_path_factory, tiny_registry):
    """record_pages on the tiny pair into a temporary folder (the command that writes the shipped files)."""
    from specviz.decoding import models
    from specviz.tools import record

    out = tmp_path_factory.mktemp("pages")
    pair = models.load_pair(None)
    # one sitting, as `python -m specviz record`: the profile first, which the pages' recordings quote
    cost = record.record_profile(pair, out / "profile.json", progress=lambda m: None, refuse_load=False)
    written = record.record_pages(pair, out, progress=lambda m: None, cost=cost)
    assert {p.stem for p in written} == {"exactness", "acceptance_lab", "speedup", "why_fast", "token_tree"}
    return out


@pytest.fixture
def shipped(tiny_recordings, monkeypatch):
    """The pages read their recordings, and the profile of their sitting, from the tiny ones."""
    from specviz.data import pagefile
    from specviz.teaching import costs

    monkeypatch.setattr(pagefile, "PAGES_DIR", tiny_recordings)
    monkeypatch.setattr(costs, "RECORDED_PROFILE", tiny_recordings / "profile.json")
    costs.recorded_profile.cache_clear()
    yield tiny_recordings
    costs.recorded_profile.cache_clear()


def test_page_recordings_round_trip_every_result_exactly(tiny_recordings):
    from specviz.data import pagefile
    from specviz.teaching import page_records

    rec = pagefile.load("exactness", tiny_recordings)
    assert rec.about["pair"] == "tiny-random" and rec.about["recorded_at"] and rec.settings["k"] == 4
    for name, tp in page_records.RESULTS["exactness"].items():
        value = rec.result(name, tp)
        assert isinstance(value, tp)
        # written again and read again: the same JSON, so nothing is lost on the way back
        assert pagefile.to_data(pagefile.from_data(tp, pagefile.to_data(value))) == pagefile.to_data(value)
        assert pagefile.to_data(value) == rec.results[name]
    trials = rec.result("trials", page_records.RESULTS["exactness"]["trials"])
    assert all(isinstance(t, int) for t in trials.counts) and sum(trials.counts.values()) == trials.n
    assert isinstance(trials.noise.tvs, tuple) and set(trials.counts) <= set(rec.tokens)


def test_a_broken_page_recording_is_a_clear_error():
    from specviz.core.errors import SpecvizError
    from specviz.data import pagefile

    with pytest.raises(SpecvizError, match="page recording"):
        pagefile.loads('{"format": "specviz.run/1"}')
    good = {"format": pagefile.PAGE_FORMAT, "page": "x", "settings": {}, "tokens": {"5": "a"}, "results": {}}
    bad = {**good, "tokens": {"five": "a"}}
    import json

    assert pagefile.loads(json.dumps(good)).tokens == {5: "a"}
    with pytest.raises(SpecvizError, match="tokens"):
        pagefile.loads(json.dumps(bad))
    with pytest.raises(SpecvizError, match="results.trials.n"):
        from specviz.teaching.experiments import FirstTokenTrials

        pagefile.from_data(FirstTokenTrials, {"counts": {}, "p": {}, "q": {}, "n": "many", "accepted": 0},
                           "results.trials")


# --- 5 · exactness ---------------------------------------------------------------------------------------------
def test_exactness_draws_its_three_experiments_from_the_recording(shipped, no_model):
    from specviz.core import theory
    from specviz.data import pagefile
    from specviz.teaching import page_records

    rec = pagefile.load("exactness")
    got = {n: rec.result(n, tp) for n, tp in page_records.RESULTS["exactness"].items()}
    at = recorded_page("5")
    [note] = notices(at)
    assert "tiny-random" in note and rec.about["recorded_at"] in note and "trials 2000" in note
    assert all(at.button(key=k).disabled for k in ("exact.run_greedy", "exact.run_trials", "exact.run_rules"))
    m = {x.label: x.value for x in at.metric}
    assert m["identical"] == ("yes" if got["greedy"].identical else "no")
    assert m["tokens compared"] == str(len(got["greedy"].base.token_ids))
    assert m["speedup over the target alone (this run)"] == f"{got['greedy'].speedup:.2f}×"
    assert m["total variation distance"] == f"{theory.total_variation(got['trials'].p, got['trials'].counts):.3f}"
    titles = [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]
    assert any(t.startswith("Acceptance rules") for t in titles) and len(titles) == 3
    assert len(at.dataframe[0].value) == len(got["rules"].results)


def test_a_page_without_its_recording_says_so(no_model, tmp_path, monkeypatch):
    from specviz.data import pagefile

    monkeypatch.setattr(pagefile, "PAGES_DIR", tmp_path)
    at = recorded_page("5")
    assert any("No recording of this page" in w.value for w in at.warning) and not at.get("plotly_chart")


# --- 2 · acceptance lab ----------------------------------------------------------------------------------------
def test_acceptance_lab_draws_the_recorded_sweep(shipped, no_model):
    from specviz.data import pagefile
    from specviz.teaching import lab, page_records

    rec = pagefile.load("acceptance_lab")
    got = {n: rec.result(n, tp) for n, tp in page_records.RESULTS["acceptance_lab"].items()}
    temps = page_records.ACCEPTANCE_LAB_RECORDED["temperatures"]  # the page's default and its caption's two
    assert list(got["sweep"]) == list(page_records.ACCEPTANCE_LAB["domains"]) and list(got["agree"]["code"]) == temps
    at = recorded_page("2", by="session")
    # the widgets show the recording's own settings, set aside (disabled), and α against temperature is drawn
    assert at.multiselect(key="lab.temps.recorded").value == temps and at.multiselect(key="lab.temps.recorded").disabled
    assert not any("Add a temperature" in c.value for c in at.caption)
    [note] = notices(at)
    assert "tiny-random" in note and "new tokens per run 48" in note
    assert at.button(key="lab.run").disabled and not any("No measurements yet" in i.value for i in at.info)
    table = at.dataframe[0].value
    rows = lab.sweep_rows(got["sweep"], got["agree"])
    assert list(table["domain"]) == [r["domain"] for r in rows]
    assert list(table["counted α"]) == [r["counted α"] for r in rows]
    assert list(table["new tokens"]) == [len(got["sweep"][d][t].token_ids) for d in got["sweep"] for t in temps]
    assert len(at.get("plotly_chart")) >= 3


# --- 3 · speedup -----------------------------------------------------------------------------------------------
def test_speedup_draws_its_recorded_sections_and_says_which_it_does_not_cover(shipped, no_model):
    from specviz.data import pagefile
    from specviz.teaching import early_exit, explain, page_records, race

    rec = pagefile.load("speedup")
    got = {n: rec.result(n, tp) for n, tp in page_records.RESULTS["speedup"].items()}
    at = recorded_page("3")
    [note] = notices(at)
    assert "tiny-random" in note and "k values 1, 2, 4, 6, 8" in note and "Python function" in rec.prompt_text
    assert all(at.button(key=k).disabled for k in ("speed.run_cost", "speed.run_sweep", "speed.run_race",
                                                   "speed.run_adaptive", "speed.run_early_exit"))
    covers = [i.value for i in at.info if "Recorded mode does not cover this section" in i.value]
    assert not covers, covers  # 1b and 1c were recorded: the draft in each precision, the float32 and int8 target
    drafts_table = at.dataframe[0].value  # 1b: the recording's two draft precisions, each against its target alone
    assert list(drafts_table["draft precision"]) == [r.precision for r in got["precisions"]] == ["float32", "int8"]
    assert list(drafts_table["c"]) == [f"{r.c:.3f}" for r in got["precisions"]]
    assert explain.precision_verdict(got["precisions"]) in [x.value for x in at.markdown]
    targets_table = at.dataframe[1].value  # 1c: the recording's two targets, each against its own target alone
    assert list(targets_table["target precision"]) == [r.precision for r in got["targets"]] == ["float32", "int8"]
    assert list(targets_table["c"]) == [f"{r.c:.3f}" for r in got["targets"]]
    assert explain.target_verdict(got["targets"]) in [x.value for x in at.markdown]
    m = {x.label: x.value for x in at.metric}
    assert m["c = draft step ÷ target step"] == f"{got['cost'].c:.3f}"
    stats = race.policy_summary(got["policies"])
    assert m["adaptive k: tokens/s"] == f"{stats['adaptive'].tokens_per_s:.1f}"
    sweep_table, ee_table = at.dataframe[2].value, at.dataframe[3].value
    assert list(sweep_table["k"]) == list(got["sweep"])
    # the sweep says the best may lie beyond its largest k exactly when its best measured k is that k
    best = int(sweep_table["k"][sweep_table["measured speedup"].idxmax()])
    edge = explain.sweep_edge_note(max(got["sweep"]), max(got["sweep"]))
    assert any(edge in x.value for x in at.markdown) == (best == max(got["sweep"]))
    assert len(ee_table) == len(early_exit.early_exit_rows(got["early_exit"])) == len(got["early_exit"].points)
    assert f"k = {got['race'].spec.decode.k}" in " ".join(x.value for x in at.markdown)
    titles = [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]
    assert len(titles) >= 5  # the model, the sweep, the race, two k traces, early exit


# --- 4 · why it is fast ----------------------------------------------------------------------------------------
def test_why_it_is_fast_draws_its_three_recorded_measurements(shipped, no_model):
    from specviz.data import pagefile
    from specviz.teaching import explain, page_records

    rec = pagefile.load("why_fast")
    got = {n: rec.result(n, tp) for n, tp in page_records.RESULTS["why_fast"].items()}
    assert list(got["forward"]) == [1, 2, 4, 8, 16] and (8, 4) in got["batch"]  # int and (tokens, batch) keys back
    # the target in its other forms, timed in the same sitting: the page compares them as its live dtypes
    assert set(got["precisions"]) == {"float32", *page_records.WHY_FAST_OTHERS}
    assert got["precisions"]["float32"] == got["forward"]
    at = recorded_page("4")
    [note] = notices(at)
    assert "tiny-random" in note and "tokens per pass 1, 2, 4, 8, 16" in note
    assert all(at.button(key=k).disabled for k in ("fast.run_forward", "fast.run_bw", "fast.run_batch"))
    m = {x.label: x.value for x in at.metric}
    v = explain.forward_cost_verdict(got["forward"], rec.about["device"], rec.about["dtype"])
    assert m["cost(2 tokens) ÷ cost(1 token)"] == f"{v.value:.2f}×"
    assert m["weights"] == explain.format_bytes(got["bw"].weight_bytes)
    assert m["measured 1-token pass"] == f"{got['bw'].measured_s * 1000:.1f} ms"
    assert any(i.value == explain.batch_verdict(got["batch"]).text for i in at.info)
    assert len(at.get("plotly_chart")) == 2
    compared = explain.dtype_comparison(got["precisions"]).strip()
    assert any(compared in x.value for x in at.markdown) and not any("Recorded in" in c.value for c in at.caption)


# --- 9 · token tree --------------------------------------------------------------------------------------------
def test_token_tree_steps_through_the_recorded_tree_run_and_draws_chain_against_tree(shipped, no_model):
    from specviz.data import pagefile
    from specviz.teaching import explain, page_records, tree_lab

    rec = pagefile.load("token_tree")
    got = {n: rec.result(n, tp) for n, tp in page_records.RESULTS["token_tree"].items()}
    run, cmp = got["run"], got["chain_vs_tree"]
    assert {t for r in run.rounds for t in r.tokens} <= set(rec.tokens)  # every node's text is in the file
    at = recorded_page("9")
    [note] = notices(at)
    assert "tiny-random" in note and "node budget 16" in note
    assert at.button(key="tree.measure").disabled and at.radio(key="tree.shape").disabled
    # chain against tree: the recorded comparison, drawn with no button pressed
    lines = [m.value for m in at.markdown]
    assert all(line in lines for line in tree_lab.chain_vs_tree_verdict(cmp))
    at.select_slider(key="tree.speed").set_value("instant")
    press(at, "tree.start")
    summary = explain.tree_round_summary(run.rounds[0], rec.decode())
    assert summary in [m.value for m in at.markdown]  # the recording's own first round
    for _ in range(len(run.rounds) - 1):
        press(at, "tree.next")
    # every round of the recording, and no more: its tokens, and the run finished
    assert any(f", {len(run.token_ids)} new tokens, {run.n_nodes} nodes drafted · run finished" in c.value
               for c in at.caption)
