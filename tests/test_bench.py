"""`python -m specviz bench` on the tiny random pair: well-formed outputs, no timed assertions."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specviz.tools import bench, cli, llamacpp
from specviz.teaching import explain
from specviz.modeling import fastlinear
from specviz.core import measure
from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--tiny", "--reps", "1", "--max-new-tokens", "6", "--ks", "1,3", "--domains", "code,creative",
        "--cost-reps", "1", "--no-warmup", "-q"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    out, fig = d / "bench.json", d / "fig.json"
    proc = subprocess.run([sys.executable, "-m", "specviz", "bench", *FAST, "--out", str(out), "--figure", str(fig)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout, json.loads(fig.read_text())


def _numbers(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from _numbers(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield x


def test_json_has_the_expected_keys_and_finite_numbers(outputs):
    report, _, _ = outputs
    assert report["format"] == "specviz.tools.bench/1"
    assert {"config", "prompts", "costs", "results", "summary", "checks", "figure_rows"} <= set(report)
    cfg = report["config"]
    assert cfg["modes"] == ["greedy", "sample"] and cfg["domains"] == ["code", "creative"]
    # every method runs but llama.cpp's, which the tiny pair (no GGUF files) cannot run: said with the reason
    assert cfg["methods"] == [m for m in bench.method_names([1, 3]) if m not in llamacpp.METHODS]
    assert set(cfg["left_out"]) == set(llamacpp.METHODS)
    assert all("GGUF" in why or "llama-cpp-python" in why for why in cfg["left_out"].values())
    assert all(math.isfinite(v) for v in _numbers(report))  # nan/inf are written as null, never as NaN
    assert set(report["costs"]["verify_ratio"]) >= {"1", "2", "4"}
    # the process's peak resident memory, next to what the estimator says the configuration needs
    assert 2**20 < cfg["peak_rss_bytes"] < 2**40  # the bench process's own
    assert cfg["memory_estimate_bytes"] is None  # --tiny: a pair from outside the registry has no estimate
    assert f"Peak resident memory (VmHWM) {cfg['peak_rss_bytes'] / 2**30:.2f} GiB" in outputs[1]
    assert report["costs"]["verify_ratio"]["1"] == 1.0
    # the prior the best-k chooser starts from, next to the c the passes measured
    assert 0 < report["costs"]["c_prior"] and f"(the chooser's prior before any timing, " \
        f"{report['costs']['c_prior']:.3f})" in outputs[1]
    # every (mode, domain, method) has a row
    keys = {(r["mode"], r["domain"], r["method"]) for r in report["results"]}
    assert keys == {(m, d, n) for m in cfg["modes"] for d in cfg["domains"] for n in cfg["methods"]}


def test_speedup_is_baseline_time_over_method_time(outputs):
    report, _, _ = outputs
    base = {(r["mode"], r["domain"]): r for r in report["results"] if r["method"] == "target"}
    for r in report["results"]:
        b = base[(r["mode"], r["domain"])]
        assert r["s_per_token"] > 0 and r["tokens"] >= 1
        assert r["speedup"] == pytest.approx(b["s_per_token"] / r["s_per_token"], rel=1e-9)
        assert r["tokens_per_s"] == pytest.approx(1 / r["s_per_token"], rel=1e-9)
        assert r["s_per_token"] == pytest.approx(r["reps_wall_s"][0] / r["reps_tokens"][0], rel=1e-9)
        if r["method"].startswith("k="):
            assert 0 <= r["alpha"] <= 1 and r["c"] >= 0 and r["predicted"] > 0
            assert r["efficiency"] == pytest.approx(r["decode_speedup"] / r["predicted"], rel=1e-9)
            assert r["mean_k"] <= int(r["method"][2:])
            assert 0 <= r["bookkeeping_pct"] < 100
    for s in report["summary"]:
        rows = [r for r in report["results"] if r["mode"] == s["mode"] and r["method"] == s["method"]]
        assert s["tokens"] == sum(r["tokens"] for r in rows)
        if s["method"] == "target":
            assert s["speedup"] == pytest.approx(1.0)


def test_greedy_specviz_output_equals_the_target_alone(outputs):
    report, _, _ = outputs
    for r in report["results"]:
        if r["mode"] == "greedy" and not r["method"].startswith("hf-"):
            assert r["same_as_baseline"], r["method"]


def test_markdown_table_lists_every_method(outputs):
    report, text, _ = outputs
    assert "| method |" in text
    for mode_title in ("## greedy", "## sampling, temperature 0.7"):
        assert mode_title in text
    for name in report["config"]["methods"]:
        assert text.count(f"| {name} |") == 2  # one row per mode


def test_markdown_marks_the_speedups_taken_under_outside_load(outputs):
    """A cell rests on its method's generations and on the target alone's on the same prompt: either under
    outside load marks it, and a note says how many generations were."""
    import copy

    report = copy.deepcopy(outputs[0])
    for r in report["results"] + report["summary"]:
        r["outside_load_reps"] = 0
    assert "†" not in bench.markdown(report)

    def row(mode, dom, name):
        return next(r for r in report["results"] if (r["mode"], r["domain"], r["method"]) == (mode, dom, name))

    def cells(text, mode_title, name):
        part = text.split(mode_title)[1].split("## ")[0]
        return next(line for line in part.splitlines() if line.startswith(f"| {name} |")).split(" | ")

    row("greedy", "code", "k=1")["outside_load_reps"] = 1
    text = bench.markdown(report)
    k1 = cells(text, "## greedy", "k=1")
    assert k1[1].endswith("†") and not k1[2].endswith("†")  # code marked, creative not
    assert "†" not in "".join(cells(text, "## greedy", "k=3")) and "†" not in "".join(cells(text, "## sampling", "k=1"))
    runs = sum(len(r["reps_wall_s"]) for r in report["results"])
    assert "†: taken under outside load." in text and f"; 1 of the {runs} generations did." in text
    row("greedy", "creative", bench.ENGINE_BASELINE)["outside_load_reps"] = 1  # the baseline: every method's cell
    text = bench.markdown(report)
    assert all(cells(text, "## greedy", n)[2].endswith("†") for n in report["config"]["methods"])


def test_markdown_says_what_the_generations_times_left_out(outputs):
    """The JSON keeps each generation's waits for a core, and the table says how much was left out once it is
    5 % of the time counted."""
    import copy

    report = copy.deepcopy(outputs[0])
    assert all(len(r["reps_stalled_s"]) == len(r["reps_wall_s"]) for r in report["results"])
    for r in report["results"]:
        r["reps_stalled_s"] = [0.01 * w for w in r["reps_wall_s"]]  # 1 %: a quiet machine's own
    assert "Not counted" not in bench.markdown(report)
    counted = sum(sum(r["reps_wall_s"]) for r in report["results"])
    report["results"][0]["reps_stalled_s"] = [0.5 * counted] + [0.0] * (len(report["results"][0]["reps_wall_s"]) - 1)
    left = 0.5 * counted + sum(sum(r["reps_stalled_s"]) for r in report["results"][1:])
    text = bench.markdown(report)
    note = explain.stalled_note(left, counted, what="the generations")  # the sentence the pages use, these totals
    assert note is not None and " of the generations, while other work" in note and note in text


@pytest.mark.cores
def test_a_generation_beside_another_program_is_marked():
    """transformers' generate times no pass of its own: the whole call is judged on other programs' CPU time
    (programs busy on every core: the generation's own busy threads leave one such program less than a core)."""
    import os
    import time
    from types import SimpleNamespace

    from busy import busy_programs

    pair = bench.tiny_pair()

    def slow(module, args):  # a pass that takes 10 ms of this process's CPU, like a real model's
        t0 = time.process_time()
        while time.process_time() - t0 < 0.01:
            pass

    handle = pair.target.register_forward_pre_hook(slow)
    try:
        with busy_programs(os.cpu_count() or 2):
            s = bench.run_method(pair, bench.HF_TARGET, list(range(2, 10)), "greedy",
                                 SimpleNamespace(temperature=0.0, max_new_tokens=40), seed=0)
    finally:
        handle.remove()
    assert s.wall_s > 0 and s.run is None and s.outside_load  # judged on the call's wall (≥ OTHERS_MIN_S)


def test_figure_has_measured_and_predicted_traces(outputs):
    _, _, fig = outputs
    names = {t.get("name") for t in fig["data"]}
    assert {"measured", "predicted"} <= names
    for t in fig["data"]:
        assert list(t["x"]) == [1, 3]
        assert all(y is None or math.isfinite(y) for y in t["y"])


def test_json_to_stdout_and_bad_options(capsys):
    with pytest.raises(InvalidSetting, match="modes"):
        cli.parse_bench_args(["--tiny", "--modes", "greedy,fast"])
    with pytest.raises(InvalidSetting, match="method"):
        cli.parse_bench_args(["--tiny", "--methods", "k=4,warp"])
    with pytest.raises(InvalidSetting, match="domain"):
        cli.parse_bench_args(["--tiny", "--domains", "poetry"])
    a = cli.parse_bench_args(["--tiny", "--methods", "k=2,best", "--ks", "2,4"])
    assert a.method_names == ["target", "k=2", "best"]  # the baseline is always there
    rc = cli.main(["bench", "--tiny", "--json", "--reps", "1", "--max-new-tokens", "3", "--ks", "2", "--methods",
                     "k=2,best,prompt-lookup", "--domains", "list", "--modes", "greedy", "--cost-reps", "1",
                     "--no-warmup", "-q", "--fast-linear"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["method"] for s in report["summary"]] == ["target", "k=2", "best", "prompt-lookup"]
    assert report["config"]["fast_linear"] is fastlinear.available()
    assert all(r["same_as_baseline"] for r in report["results"])


def test_transformers_as_shipped_runs_with_the_fast_path_off_and_restores_it(capsys):
    pair = bench.tiny_pair()
    fastlinear.enable(pair.target)
    fastlinear.enable(pair.draft)
    seen = []
    real = bench._hf_generate

    def spy(target, *a, **kw):
        seen.append((fastlinear.is_enabled(target), fastlinear.is_enabled(kw.get("assistant") or target)))
        return real(target, *a, **kw)

    args = cli.parse_bench_args(["--tiny", "--reps", "1", "--max-new-tokens", "4", "--methods",
                             "hf-target,hf-assisted,hf-target-stock,hf-assisted-stock", "--domains", "code",
                             "--modes", "greedy", "--cost-reps", "1", "--no-warmup", "-q"])
    bench._hf_generate = spy
    try:
        report = bench.bench(args, pair=pair)
    finally:
        bench._hf_generate = real
    on = fastlinear.available()
    assert seen == [(on, on), (on, on), (False, False), (False, False)]
    assert fastlinear.is_enabled(pair.target) is on and fastlinear.is_enabled(pair.draft) is on
    checks = report["checks"]["greedy"]
    assert {"hf_assisted_stock_speedup_code", "hf_assisted_stock_speedup_over_hf_target_stock_code"} <= set(checks)
    tokens = {r["method"]: r["reps_tokens"] for r in report["results"]}
    assert tokens["hf-assisted-stock"] == tokens["hf-assisted"] == tokens["target"]  # greedy: as many tokens


def test_cli_reports_bad_options_as_errors():
    proc = subprocess.run([sys.executable, "-m", "specviz", "bench", "--tiny", "--ks", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:")


def test_steady_figures_leave_out_the_round_that_read_the_prompt():
    """decode speedup, c and the prediction are steady-state figures: the first round's passes also
    read the prompt (no separate prefill), so its times would make drafting and verifying look slow."""
    import statistics
    from types import SimpleNamespace

    from specviz import autoregressive_decode, speculative_decode
    from tiny import tiny_lm

    target, draft = tiny_lm(1), tiny_lm(2)
    prompt = list(range(1, 41))  # a long prompt: the first passes are clearly the slowest
    base = [autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=8)) for _ in range(2)]
    spec = [speculative_decode(target, draft, prompt, DecodeSettings(k=3, max_new_tokens=12)) for _ in range(2)]
    steady_d = [r.draft_s / r.k for run in spec for i, r in enumerate(run.rounds) if i > 0 and r.k]
    steady_t = [r.verify_s for run in base for r in run.rounds[1:]]
    assert measure.c_from_runs(spec, base) == pytest.approx(statistics.median(steady_d) / statistics.median(steady_t))
    row = bench.summarise("k=3", [SimpleNamespace(run=r, tokens=r.token_ids, wall_s=r.decode_s) for r in spec],
                          bench.summarise(bench.ENGINE_BASELINE, [SimpleNamespace(run=r, tokens=r.token_ids,
                                                                                  wall_s=r.decode_s) for r in base],
                                          {}, (0.5, None)),
                          (0.5, None))
    assert row["decode_s_per_token"] == pytest.approx(statistics.median(r.steady_s_per_token for r in spec))
    # the prediction counts the same rounds as the measured decode speedup
    alpha = row["alpha"]
    rounds = [(i == len(run.rounds) - 1, r) for run in spec for i, r in enumerate(run.rounds) if i > 0]
    tokens = sum(len(r.emitted) if last else theory_tokens(alpha, r.k) for last, r in rounds)
    cost = sum(r.k * 0.5 + 1.0 for _, r in rounds)
    assert row["predicted"] == pytest.approx(tokens / cost)


def theory_tokens(alpha, k):
    from specviz.core import theory

    return theory.expected_tokens(alpha, k)


def test_the_prediction_charges_the_draft_re_read_after_a_full_acceptance():
    """After a wholly accepted round the draft's first step reads two tokens (its own last draft and
    the bonus): the expected extra cost is alpha^(k of the previous round) * refeed per round."""
    import dataclasses

    from specviz.data.records import Run
    from test_kpolicy import make_round

    rounds = [dataclasses.replace(make_round(4, 4), prefill_tokens=9), make_round(4, 4), make_round(4, 2),
              make_round(4, 4), make_round(4, 1)]
    run = Run(mode="speculative", prompt_ids=[1] * 10, token_ids=[1] * 18, rounds=rounds, settings={},
              stop_reason="max_new_tokens", prefill_s=0.0, decode_s=1.0, target_passes=5, draft_passes=20)
    alpha, c, refeed = 0.8, 0.3, 0.1
    plain = bench.predicted_speedup([run], alpha, c, None)
    charged = bench.predicted_speedup([run], alpha, c, None, refeed)
    base_cost = 4 * (4 * c + 1.0)  # four steady rounds
    assert plain * base_cost == pytest.approx(charged * (base_cost + 4 * alpha ** 4 * refeed))
    # measured tokens per pass: the re-read only after the rounds that really ended with a bonus
    # (rounds 0, 1 and 3; round 2 ended with a correction, so round 3 does not pay it)
    assert bench.predicted_from_tokens_per_pass([run], c, None, refeed) == pytest.approx(
        (5 + 3 + 5 + 2) / (base_cost + 3 * refeed))


def test_c_from_the_runs_counts_every_round_after_the_prompt_round():
    """After a wholly accepted round the first draft step reads two tokens; c from the runs counts
    those rounds like any other (measure's rule: the cost model has no other term for that extra),
    and never the round that also read the prompt."""
    import dataclasses

    from specviz.data.records import Run
    from test_kpolicy import make_round

    def run_of(rounds):
        return Run(mode="speculative", prompt_ids=[1] * 10, token_ids=[], rounds=rounds, settings={},
                   stop_reason="max_new_tokens", prefill_s=0.0, decode_s=1.0, target_passes=len(rounds),
                   draft_passes=0)

    spec = run_of([dataclasses.replace(make_round(4, 4, draft_step=9.0), prefill_tokens=9),
                   make_round(4, 4, draft_step=0.2),  # after a bonus: counted
                   make_round(4, 2, draft_step=0.3),  # after a bonus: counted
                   make_round(4, 4, draft_step=0.1),  # after a correction: counted
                   make_round(4, 1, draft_step=0.5)])  # after a bonus: counted
    base = run_of([dataclasses.replace(make_round(0, 0, verify=5.0), prefill_tokens=9)]
                  + [make_round(0, 0, verify=1.0) for _ in range(3)])
    assert measure.c_from_runs([spec], [base]) == pytest.approx(0.25)  # median of 0.2, 0.3, 0.1, 0.5


def test_tree_methods_report_tokens_per_pass_and_speedup_against_the_chain(capsys):
    rc = cli.main(["bench", "--tiny", "--json", "--reps", "1", "--max-new-tokens", "8", "--ks", "4", "--trees", "4,8",
                     "--methods", "k=4,best,tree-4,tree-8", "--domains", "code", "--modes", "greedy",
                     "--cost-reps", "1", "--no-warmup", "-q"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in report["results"]}
    summ = {s["method"]: s for s in report["summary"]}
    assert all(rows[t]["same_as_baseline"] and rows[t]["tokens_per_pass"] > 1 for t in ("tree-4", "tree-8"))
    ch = report["checks"]["greedy"]
    top = max(("tree-4", "tree-8"), key=lambda n: rows[n]["tokens_per_pass"])
    assert ch["tree_tokens_per_pass_over_k4_code"] == pytest.approx(rows[top]["tokens_per_pass"]
                                                                    / rows["k=4"]["tokens_per_pass"])
    assert ch["best_tree"] == max(("tree-4", "tree-8"), key=lambda n: summ[n]["speedup"])
    assert ch["best_tree_over_best"] == pytest.approx(summ[ch["best_tree"]]["speedup"] / summ["best"]["speedup"])
    with pytest.raises(InvalidSetting, match="trees"):
        cli.parse_bench_args(["--tiny", "--trees", "8,x"])


def test_the_spine_runs_as_a_method_and_is_compared_with_the_chain_and_transformers(capsys):
    rc = cli.main(["bench", "--tiny", "--json", "--reps", "1", "--max-new-tokens", "8", "--ks", "4",
                   "--methods", "best,spine,hf-target,hf-assisted", "--domains", "code,list", "--modes", "greedy",
                   "--cost-reps", "1", "--no-warmup", "-q"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    rows = {(r["domain"], r["method"]): r for r in report["results"]}
    summ = {s["method"]: s for s in report["summary"]}
    assert rows[("code", "spine")]["same_as_baseline"] and rows[("list", "spine")]["same_as_baseline"]
    ch = report["checks"]["greedy"]
    assert ch["spine_over_best_mixed"] == pytest.approx(summ["spine"]["speedup"] / summ["best"]["speedup"])
    hf_own = summ["hf-assisted"]["speedup"] / summ["hf-target"]["speedup"]
    assert ch["spine_over_hf_own_baseline_mixed"] == pytest.approx(summ["spine"]["speedup"] / hf_own)
    assert ch["spine_over_hf_own_baseline_code"] == pytest.approx(
        rows[("code", "spine")]["speedup"] / ch["hf_assisted_speedup_over_hf_target_code"])


def _self_pair(layers: int = 4):
    """A tiny pair whose draft is its target: the full draft is always accepted, a shallower one is not."""
    from tiny import tiny_lm

    model = tiny_lm(seed=3, layers=layers, dtype=torch.float32)
    return SimpleNamespace(target=model, draft=model, eos_token_ids=[], shared_vocab=64, drafter=lambda: model)


def test_a_draft_exit_drafts_with_the_drafts_first_layers_and_stays_exact():
    from specviz.decoding.engine import autoregressive_decode, speculative_decode
    from specviz.decoding.selfdraft import early_exit

    pair, ids = _self_pair(), [1, 5, 9, 2, 7]
    args = SimpleNamespace(max_new_tokens=24, temperature=0.7)
    best = bench._generate(pair, "best", ids, "greedy", args, 0).run
    shallow = bench._generate(pair, f"{bench.DRAFT_EXIT}1", ids, "greedy", args, 0).run
    settings = DecodeSettings(temperature=0.0, max_new_tokens=24, seed=0, k=4, k_policy="best")
    direct = speculative_decode(pair.target, early_exit(pair.draft, 1), ids, settings, eos_token_id=[], vocab=64)
    alone = autoregressive_decode(pair.target, ids, DecodeSettings(temperature=0.0, max_new_tokens=24),
                                  eos_token_id=[], vocab=64)
    assert best.alpha == 1.0 and shallow.alpha < 1.0  # the exit is the draft's first layer, not the whole draft
    assert [r.accepted for r in shallow.rounds][:3] == [r.accepted for r in direct.rounds][:3]
    assert list(shallow.token_ids) == list(alone.token_ids) == list(best.token_ids)


def test_draft_exits_are_methods_with_their_own_c(capsys):
    rc = cli.main(["bench", "--tiny", "--json", "--reps", "1", "--max-new-tokens", "8", "--ks", "4", "--draft-exits",
                   "1", "--methods", "best,draft-exit-1", "--domains", "code", "--modes", "greedy",
                   "--cost-reps", "1", "--no-warmup", "-q"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    summ = {s["method"]: s for s in report["summary"]}
    assert set(summ) == {"target", "best", "draft-exit-1"}
    assert math.isfinite(summ["draft-exit-1"]["c"]) and summ["draft-exit-1"]["c"] != summ["best"]["c"]
    assert "c of each shallower draft, from its own runs: draft-exit-1 " in bench.markdown(report)
    with pytest.raises(InvalidSetting, match="--draft-exits must list layer counts of at least 1"):
        cli.parse_bench_args(["--tiny", "--draft-exits", "0"])
    with pytest.raises(InvalidSetting, match="unknown method"):
        cli.parse_bench_args(["--tiny", "--methods", "draft-exit-1"])  # not asked for with --draft-exits
