"""bench --batch: B sessions' verify passes one after another against one batched pass (tiny pair)."""

import json

import pytest


@pytest.mark.cores
def test_the_batch_bench_runs_on_the_tiny_pair_and_the_batch_computes_what_the_sessions_do(tmp_path, capsys):
    from specviz.tools import cli

    out = tmp_path / "batch.json"
    assert cli.main(["bench", "--tiny", "--batch", "--batch-sizes", "1,2,4", "--batch-k", "4",
                     "--batch-context", "24", "--batch-reps", "2", "-q", "--out", str(out)]) == 0
    points = json.loads(out.read_text())["points"]
    assert [p["sessions"] for p in points] == [1, 2, 4] and {p["rows"] for p in points} == {5}
    for p in points:
        assert 0 < p["one_s"] < 1 and 0 < p["batched_s"] < 1
        # the B separate passes take about B passes, and a session's share is the batched pass over B
        assert 0.3 * p["sessions"] < p["separate_s"] / p["one_s"] < 3 * p["sessions"]
        assert abs(p["share_s"] * p["sessions"] - p["batched_s"]) < 1e-12
        assert abs(p["batched_over_one"] - p["batched_s"] / p["one_s"]) < 1e-9
        # padded, masked and at its own positions, each session's rows in the batch are its rows alone
        assert p["max_logit_diff"] < 1e-4, p
    assert "| 4 | 5 |" in capsys.readouterr().out


def test_the_sessions_contexts_spread_from_half_to_the_longest():
    from specviz.tools.batchbench import context_lengths

    assert context_lengths(1, 256) == [256]
    assert context_lengths(2, 256) == [128, 256]
    assert context_lengths(4, 24) == [12, 16, 20, 24]
    assert context_lengths(3, 1) == [1, 1, 1]


def test_a_packed_target_is_timed_on_the_apps_exact_pass_and_its_rows_are_bit_for_bit_their_own(tmp_path, capsys):
    """With fast-linear the tiny target's Linears are packed (row-exact), so the bench times the app's own batched
    pass (batched.feed_many): every session's logits in it equal its own pass's exactly. The stock target, which
    the app does not batch, is timed with transformers' padded batch, and the report says so."""
    from specviz.tools import batchbench, cli

    out = tmp_path / "batch.json"
    for extra, exact in (([], False), (["--fast-linear"], True)):
        assert cli.main(["bench", "--tiny", "--batch", "--batch-sizes", "2,3", "--batch-k", "3", "--batch-context", "20",
                         "--batch-reps", "1", "-q", "--out", str(out), *extra]) == 0
        rep = json.loads(out.read_text())
        assert all(p["exact"] is exact for p in rep["points"])
        assert (batchbench.NOT_EXACT_NOTE in rep["about"]) is not exact
        if exact:
            assert all(p["max_logit_diff"] == 0.0 for p in rep["points"]), rep["points"]
    capsys.readouterr()
