"""The simulated room (loadtest --simulate): sessions as threads pressing the pages' buttons on the tiny pair."""

import json
from pathlib import Path

import pytest

TINY = str(Path(__file__).parent / "models_tiny.yaml")


@pytest.mark.cores
def test_a_small_room_reports_each_kinds_waits_queue_and_compute(tmp_path, capsys):
    """Five sessions at once on the tiny pair: every one finishes, its wait holds its time in the queue and its
    time computing, some of them queued (one device, one at a time), and every figure is judged against a solo
    run of its kind."""
    from specviz.devtools import loadtest

    out = tmp_path / "room.json"
    assert loadtest.main(["--simulate", "5", "--mix", "main:2,lab:1,speedup:1,lesson:1", "--spread", "0",
                          "--models", TINY, "--max-new", "8", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    md = out.with_suffix(".md").read_text()
    assert md == capsys.readouterr().out.split(f"wrote {out}")[0]
    assert set(rep["per_kind"]) == {"main", "lab", "speedup", "lesson"} and rep["all"]["finished"] == 5
    sessions = rep["sessions"]
    assert [s["kind"] for s in sessions] == ["main", "main", "lab", "speedup", "lesson"]
    for s in sessions:
        assert s["error"] is None and s["holds"] > 0 and s["compute_s"] > 0
        # the queue and the device hold only part of the session's wait, never more
        assert s["queue_s"] + s["compute_s"] <= s["wait_s"] + 0.05, s
        assert s["other_s"] == pytest.approx(max(0.0, s["wait_s"] - s["queue_s"] - s["compute_s"]))
        assert s["pass_s"] > 0 and s["pass_over_solo"] is not None and s["honest"] is not None
        assert (s["speedup"] is None) == (s["kind"] == "lab")
    # five sessions pressed at once on a device that runs one piece of work at a time: some waited their turn
    assert max(s["queue_s"] for s in sessions) > 0.01
    assert sum(s["queue_s"] for s in sessions) == pytest.approx(
        sum(rep["per_kind"][k]["queue_share"] * sum(s["wait_s"] for s in sessions if s["kind"] == k)
            for k in rep["per_kind"]), rel=1e-6)
    for k, v in rep["per_kind"].items():
        w = v["wait_s"]
        assert w["median"] <= w["p90"] <= w["worst"] == max(s["wait_s"] for s in sessions if s["kind"] == k)
        for solo in rep["solo"][k]:  # before and after the room
            assert solo["wait_s"] > 0 and solo["queue_s"] < 0.05  # alone: no one to wait for
    assert "| main | 2/2 |" in md and "| all | 5/5 |" in md


def test_a_kinds_figures_are_the_median_p90_worst_and_honest_count():
    from specviz.devtools.simload import Session, kind_summary, percentile

    assert percentile(range(1, 11), 50) == 5 and percentile(range(1, 11), 90) == 9
    assert percentile([3.0, None, 1.0], 100) == 3.0 and percentile([], 50) is None
    room = [Session("main", f"m{i}", wait_s=w, queue_s=q, compute_s=1.0, pass_over_solo=p, speedup_over_solo=1.0)
            for i, (w, q, p) in enumerate([(2.0, 1.0, 1.0), (4.0, 3.0, 1.1), (10.0, 9.0, 1.3)])]
    room.append(Session("main", "m3", error="boom"))
    v = kind_summary(room)
    assert v["wait_s"] == {"median": 4.0, "p90": 10.0, "worst": 10.0}
    assert v["queue_share"] == pytest.approx(13.0 / 16.0)
    assert (v["honest"], v["judged"], v["finished"], v["errors"]) == (2, 3, 3, 1)  # 1.3 is past the tolerance
    assert v["pass_over_solo"] == {"median": 1.1, "furthest": 1.3}


def test_each_session_is_judged_against_the_mean_of_its_kinds_solo_runs_before_and_after():
    from specviz.devtools.simload import Session, judge

    room = [Session("main", "m", pass_s=1.1, speedup=2.0), Session("lab", "l", pass_s=0.5)]
    judge(room, {"main": [Session("main", "a", pass_s=1.0, speedup=2.0), Session("main", "b", pass_s=1.2,
                                                                                   speedup=None)],
                 "lab": [Session("lab", "c", pass_s=0.5)]})
    assert room[0].pass_over_solo == pytest.approx(1.0) and room[0].speedup_over_solo == 1.0
    assert room[1].pass_over_solo == 1.0 and room[1].speedup_over_solo is None and room[1].honest


@pytest.mark.parametrize("args, wrong", [(["--simulate", "3", "--mix", "main:2"], "--simulate"),
                                         (["--mix", "room:2"], "unknown kind"),
                                         (["--mix", "main:x"], "kind:count"),
                                         (["--simulate", "0"], "--simulate"),
                                         (["--simulate", "2", "--spread", "nan"], "--spread"),
                                         (["--simulate", "2", "--target-precision", "bfloat16"], "--target-precision")])
def test_the_rooms_settings_are_checked_before_anything_loads(args, wrong, capsys):
    from specviz.devtools import loadtest

    with pytest.raises(SystemExit):
        loadtest.main(args)
    assert wrong in capsys.readouterr().err


@pytest.mark.parametrize("extra, wrong", [(["--max-new", "100000"], "--max-new must be from 1 to 512"),
                                          (["--max-new", "-5"], "--max-new must be from 1 to 512"),
                                          (["--json", "{tmp}/missing/room.json"], "the folder '{tmp}/missing' does "
                                                                                  "not exist"),
                                          (["--json", "{tmp}"], "--json '{tmp}' is a folder")])
@pytest.mark.parametrize("room", [["--simulate", "1", "--models", TINY], []], ids=["simulated", "browsers"])
def test_the_length_and_the_report_path_are_checked_before_the_test_runs(extra, wrong, room, tmp_path, capsys,
                                                                          monkeypatch):
    """--json into a missing folder, or onto a folder, was a traceback after the whole room had run; --max-new
    100000 or -5 ran it and said "finished 0/1" with exit 0."""
    from specviz.devtools import loadtest, simload

    def ran(*a, **k):
        raise AssertionError("the test ran before its options were checked")

    monkeypatch.setattr(simload, "simulate", ran)
    monkeypatch.setattr(loadtest, "loadtest", ran)
    with pytest.raises(SystemExit) as stop:
        loadtest.main([*room, *(x.format(tmp=tmp_path) for x in extra)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and wrong.format(tmp=tmp_path) in err and "Traceback" not in err, err


def test_a_default_mix_is_two_thirds_main():
    from specviz.devtools.simload import default_mix

    assert default_mix(30) == {"main": 20, "lab": 4, "speedup": 3, "lesson": 3}
    assert sum(default_mix(7).values()) == 7 and sum(default_mix(1).values()) == 1


def test_a_room_may_run_the_int8_target(tmp_path, capsys):
    """--target-precision int8: the room runs on the int8 target (as a server under a small memory budget does),
    and its report names it."""
    from specviz.devtools import loadtest

    out = tmp_path / "room.json"
    assert loadtest.main(["--simulate", "1", "--mix", "main:1", "--spread", "0", "--models", TINY, "--max-new", "6",
                          "--target-precision", "int8", "--json", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Simulated room: 1 sessions on ") and ", int8 target (" in md.splitlines()[0]
    assert json.loads(out.read_text())["all"]["finished"] == 1


@pytest.mark.parametrize("on", [True, False])
def test_a_room_reports_how_many_rounds_shared_their_verify_pass(on, tmp_path, monkeypatch):
    """Four main-page Runs at once on the tiny pair (its target packed, so it may share): with sharing on, rounds
    shared their verify pass and each shared round's cost is its pass over the rounds it served; off, none did."""
    from specviz.devtools import loadtest

    monkeypatch.setenv("SPECVIZ_BATCH_VERIFY", "1" if on else "0")
    out = tmp_path / "room.json"
    assert loadtest.main(["--simulate", "4", "--mix", "main:4", "--spread", "0", "--models", TINY, "--max-new", "16",
                          "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    sessions = rep["sessions"]
    assert all(s["rounds"] > 0 and len(s["share_s"]) <= s["shared_rounds"] <= s["rounds"] for s in sessions)
    assert rep["all"]["shared_rounds"] == sum(s["shared_rounds"] for s in sessions)
    assert (rep["all"]["shared_rounds"] > 0) is on
    assert f"Rounds whose verify pass was shared with other sessions: {rep['all']['shared_rounds']} of " \
           in out.with_suffix(".md").read_text()
