"""bench --batch: B sessions' verify passes one after another against one batched pass (tiny pair)."""

import json


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


def test_a_target_with_row_exact_attention_is_named_in_the_report():
    """The int8 target attends row by row alone and with stock attention in a batch: its figures favour batching."""
    from specviz.modeling import rowattn
    from specviz.modeling.tiny import tiny_model
    from specviz.tools.batchbench import row_exact

    model = tiny_model()
    assert not row_exact(model)
    rowattn.enable(model)
    assert row_exact(model)
