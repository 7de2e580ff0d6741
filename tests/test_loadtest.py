"""`python -m specviz loadtest` checked on the tiny pair: real server, real browsers, two sessions at once.

The two tests that start Chromium are marked browser (they need /usr/bin/chromium and Playwright);
the rest check the loadtest's parts on plain processes. The figures of the tiny
pair mean nothing (animation dominates); this checks the test's own machinery:
every session finishes, its text equals the solo text, and the figures are read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.browser
def test_loadtest_runs_two_sessions_on_the_tiny_pair(monkeypatch):
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from specviz.devtools import loadtest

    # every run times its own target alone (no reuse across sessions), so its one-token holds are in the trace
    monkeypatch.setenv("SPECVIZ_BASELINE_TTL_S", "0")

    if not Path(loadtest.CHROMIUM).exists():
        pytest.skip(f"{loadtest.CHROMIUM} is missing")
    rep = loadtest.loadtest(sessions=2, models=str(ROOT / "tests" / "models_tiny.yaml"), max_new=12,
                            timeout_s=400, browser_cpu=0.5)
    s = rep.summary()
    assert rep.browser_cpu in (None, 0.5)  # the share asked for, where a cgroup could be made
    assert s["finished"] == 2 and s["errors"] == 0
    assert s["texts_identical_to_solo"] and rep.solo.text, [r.text for r in [rep.solo, *rep.together, *rep.solos]]
    # the reference is the solo run before and after the sessions, both read
    assert len(rep.solos) == 2 and rep.solos[1].text == rep.solo.text
    assert len(s["solo_speedups"]) == 2 and all(s["solo_speedups"])
    assert rep.solo.speedup and all(r.speedup for r in rep.together)
    assert all(r.model_s and r.model_s > 0 for r in [rep.solo, *rep.together])
    assert all(len(r.rounds) >= 2 for r in rep.together)  # rounds were seen appearing one by one
    # the page's split of the decode time, and the tokens each run drafted, were read
    assert all(r.draft_s is not None and r.verify_s is not None and r.drafted > 0 for r in [rep.solo, *rep.together])
    assert all(r.draft_s + r.verify_s <= r.decode_s + 0.02 for r in rep.together)  # parts of it (2 decimals)
    assert len(rep.lines()) == 13 and "main thread" in rep.lines()[-2]  # the server's CPU, read from /proc
    # the target alone's one-token holds were told apart in the trace, at once and in both solo runs
    assert s["target_token_s"][0] and all(s["per_batch"][0]["target_token_alone_s"])
    assert rep.lines()[-1].startswith("one token of the target alone held the device (median): ")
    assert rep.browser_processes_lowered >= 2  # the Playwright driver and Chromium, not the server
    # the server's queue wrote its holds: each session held the device, never more than the wall in all
    assert s["device_holds"] >= sum(len(r.rounds) for r in rep.together)
    assert 0 < s["device_held_s"] <= s["wall_s"] and len(s["sessions_held_s"]) == 2
    # the server was done with the model work after Run, and no later than the browsers showed it
    assert s["device_held_s"] <= s["server_wall_s"] + 1e-6 and s["server_wall_s"] <= s["wall_s"] + 1e-6


@pytest.mark.browser
def test_a_page_is_read_as_its_committed_text_without_refused_drafts_or_bonus_marks():
    """Which drafts a round refused depends on k, and k on the clock: sessions at once draw different
    refused drafts around the same generated text, so only the committed text is compared."""
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from playwright.sync_api import sync_playwright

    from specviz import autoregressive_decode, speculative_decode
    from specviz.teaching import explain
    from specviz.devtools import loadtest
    from specviz.teaching.render import tokens_html
    from tiny import tiny_lm

    if not Path(loadtest.CHROMIUM).exists():
        pytest.skip(f"{loadtest.CHROMIUM} is missing")
    target = tiny_lm(1)
    agrees = speculative_decode(target, target, [1, 2, 3],
                                DecodeSettings(k=3, max_new_tokens=8))  # every round: a bonus
    differs = speculative_decode(target, tiny_lm(2), [1, 2, 3], DecodeSettings(k=3, max_new_tokens=16))
    assert differs.token_ids == autoregressive_decode(target, [1, 2, 3], DecodeSettings(max_new_tokens=16)).token_ids
    rounds = agrees.rounds + differs.rounds  # drawn one after the other: both kinds of mark
    assert {"correction", "bonus"} <= {r.extra_kind for r in rounds}
    decode = lambda t: f"<{t}>"  # noqa: E731
    html = tokens_html("prompt ", rounds, decode)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=loadtest.CHROMIUM, args=loadtest.CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_content(f"<div>✔ finished</div>{html}")
            assert loadtest.read(page)["text"] == "prompt " + "".join(decode(t) for r in rounds for t in r.emitted)
            page.set_content(html)  # not finished: no text is read yet
            assert loadtest.read(page)["text"] == ""
            # the waits for a core the page's times left out, as the page says them (explain's sentence)
            for note, left in ((explain.stalled_note(1.5, 10.0, 0.25, 2.0), 1.75),
                               (explain.stalled_note(0.0, 10.0, 3.0, 20.0), 3.0), ("", 0.0)):
                page.set_content(f"<div>{html}<p>Where the time went: ... {note}</p></div>")
                res = loadtest.SessionResult()
                loadtest.fill_result(res, loadtest.read(page))
                assert res.left_out_s == pytest.approx(left), note
        finally:
            browser.close()


def test_only_the_processes_started_after_the_server_are_lowered():
    import os
    import subprocess

    from specviz.devtools import loadtest

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        before = loadtest.descendants(os.getpid())
        assert server.pid in before
        browser = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])  # a process with a child, like Chromium
        try:
            loadtest.time.sleep(0.3)
            new = loadtest.descendants(os.getpid()) - before
            assert browser.pid in new and len(new) >= 2  # the shell and its sleep
            assert loadtest.lower_started_since(before) == len(new)
            assert all(os.getpriority(os.PRIO_PROCESS, p) == loadtest.BROWSER_NICE for p in new)
            assert os.getpriority(os.PRIO_PROCESS, server.pid) == os.getpriority(os.PRIO_PROCESS, 0) < 19
        finally:
            browser.kill()
    finally:
        server.kill()


def test_every_thread_of_a_started_process_is_lowered_not_only_its_first():
    import os
    import subprocess

    from specviz.devtools import loadtest

    before = loadtest.descendants(os.getpid())
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])  # like a browser: threads that start renderers
    try:
        tids: list[str] = []
        for _ in range(100):
            tids = os.listdir(f"/proc/{child.pid}/task")
            if len(tids) >= 2:
                break
            loadtest.time.sleep(0.05)
        assert len(tids) >= 2
        assert loadtest.lower_started_since(before) == 1
        assert all(os.getpriority(os.PRIO_PROCESS, int(t)) == loadtest.BROWSER_NICE for t in tids)
        if hasattr(os, "SCHED_IDLE"):  # and each runs only where the server leaves a core idle
            assert all(os.sched_getscheduler(int(t)) == os.SCHED_IDLE for t in tids)
    finally:
        child.kill()


def test_a_cpu_cap_holds_a_busy_process_and_what_it_starts_to_its_share():
    import os
    import subprocess

    from specviz.devtools import loadtest

    cap = loadtest.CpuCap.make(0.1)
    if cap is None:
        pytest.skip("no cgroup can be made here (not root, or no cpu controller)")
    # a busy process that starts a busy child after it was put in the cgroup, as a browser starts renderers
    code = ("import subprocess, sys, time; time.sleep(0.3); "
            "subprocess.Popen([sys.executable, '-c', 'while True: pass']); t = time.time()\n"
            "while time.time() - t < 30: pass")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert cap.add([proc.pid]) == 1
        loadtest.time.sleep(1.0)
        kids = loadtest.descendants(proc.pid)
        assert kids, "the child was not started"
        pids = [proc.pid, *kids]

        def cpu_s() -> float:
            return sum(loadtest.cpu_s(p) for p in pids)

        c0, t0 = cpu_s(), loadtest.time.monotonic()
        loadtest.time.sleep(2.0)
        share = (cpu_s() - c0) / (loadtest.time.monotonic() - t0)
        assert share < 0.25, f"two busy processes took {share:.2f} of a core under a cap of 0.10"
    finally:
        for p in loadtest.descendants(proc.pid):
            os.kill(p, 9)
        proc.kill()
        proc.wait()
        path = cap.path
        cap.close()
    assert not path.exists()


@pytest.mark.parametrize("args, wrong", [(["--sessions", "0"], "--sessions"), (["--browser-cpu", "0"], "--browser-cpu"),
                                         (["--browser-cpu", "nan"], "--browser-cpu"), (["--timeout", "0"], "--timeout"),
                                         (["--timeout", "nan"], "--timeout"), (["--fresh", "0"], "--fresh")])
def test_the_loadtests_own_settings_are_checked_before_anything_starts(args, wrong, capsys):
    from specviz.devtools import loadtest

    with pytest.raises(SystemExit):
        loadtest.main(args)
    assert wrong in capsys.readouterr().err


def test_the_time_limit_grows_with_the_batches_unless_given(monkeypatch):
    """A four-batch test on the default pair took 29 minutes: it must not run into a limit set for one batch."""
    from specviz.devtools import loadtest

    seen = []
    monkeypatch.setattr(loadtest, "_loadtest", lambda *a: seen.append(a[4] - time.monotonic()))
    monkeypatch.setattr(loadtest, "CHROMIUM", sys.executable)  # no browser is started here
    for batches in (1, 4):
        loadtest.loadtest(batches=batches)
    loadtest.loadtest(batches=4, timeout_s=60.0)
    loadtest.loadtest(batches=1, fresh_s=60.0)  # and the pause before each of the three runs after the warm-up
    assert seen == pytest.approx([1800.0, 4500.0, 60.0, 1980.0], abs=5.0)


def test_a_pause_waits_its_seconds_after_the_last_phase_ended_and_no_longer():
    from specviz.devtools.loadtest import Pause

    far = time.monotonic() + 60
    pause = Pause(0.4)
    t0 = time.monotonic()
    pause(far)  # nothing ended yet: no wait
    pause.end()
    pause(far)
    waited = time.monotonic() - t0
    assert 0.4 <= waited < 1.0
    pause.end()
    time.sleep(0.2)
    t1 = time.monotonic()
    pause(far)  # 0.2 s of the 0.4 s were already gone
    assert 0.1 <= time.monotonic() - t1 < 0.35
    t2 = time.monotonic()
    Pause(0.0)(far)  # none asked
    Pause(5.0, ended=time.monotonic())(time.monotonic() + 0.1)  # never past the deadline
    assert time.monotonic() - t2 < 0.5


def test_each_batch_is_judged_against_its_own_solo_runs():
    """Solo, at once, solo, at once, solo: a machine whose speed drifts between batches must not make
    the sessions of one batch read off against the solo runs of another."""
    from specviz.devtools.loadtest import Batch, Report, SessionResult

    def run(speedup, model_s=10.0):
        return SessionResult(text="t", decode_s=model_s / 2, base_s=model_s / 2, speedup=speedup, finished_s=5.0)

    s0, s1, s2 = run(2.0), run(2.2), run(3.0, 8.0)  # the machine got faster for the second batch
    first = Batch([run(2.1), run(1.5)], wall_s=24.0, started=100.0, before=s0, after=s1)
    second = Batch([run(2.6), run(2.9)], wall_s=16.0, started=200.0, before=s1, after=s2)
    rep = Report(2, [first, second])
    s = rep.summary()
    assert [r.speedup for r in rep.solos] == [2.0, 2.2, 3.0] and len(rep.together) == 4
    # 2.1 / 2.1 and 1.5 / 2.1 against the first pair of solos; 2.6 / 2.6 and 2.9 / 2.6 against the second
    assert s["speedup_over_solo"] == pytest.approx([1.0, 1.5 / 2.1, 1.0, 2.9 / 2.6])
    assert s["within_tolerance"] == 3
    # the wall over the ideal: 40 s against 2 x 10 s for the first batch and 2 x 9 s for the second
    assert s["wall_over_solo_model_sum"] == pytest.approx(40.0 / 38.0)
    assert s["texts_identical_to_solo"] and s["finished"] == 4
    assert len(rep.lines()) == 12 and rep.lines()[2].startswith("batch 1: ")
    # the room's figure: the last session's figures after 24 s and 16 s, against 5 s for one session alone
    assert s["last_over_solo"] == pytest.approx([24.0 / 5.0, 16.0 / 5.0])
    assert "24.0 s against 5.00 s, 4.80x; 16.0 s against 5.00 s, 3.20x" in rep.lines()[1]
    # the machine alone, judged the same way: the middle solo run against the mean of the two around it
    assert s["solo_over_neighbours"] == pytest.approx([2.2 / 2.5]) and s["solo_within_tolerance"] == 1
    assert rep.lines()[4].endswith("0.88; within 15 %: 1/1")
    one = Report(2, [first]).summary()  # one batch gives that batch's own figures
    assert one["speedup_over_solo"] == first.summary()["speedup_over_solo"] and one["wall_s"] == 24.0
    assert one["solo_over_neighbours"] == [] and len(Report(2, [first]).lines()) == 10  # two solo runs: no line


def test_a_target_alone_token_is_read_from_the_trace_at_once_and_in_the_solo_runs_around():
    """The same work every time, so its time at once against the solo runs' tells a machine whose speed moved
    from a queue that slows the sessions."""
    from specviz.devtools.loadtest import Batch, Report, SessionResult, target_token_s
    from specviz.data.records import AUTOREGRESSIVE, SPECULATIVE

    assert target_token_s({"what_s": {AUTOREGRESSIVE: [0.3, 0.1, 0.2], SPECULATIVE: [5.0]}}) == 0.2  # the median
    assert target_token_s({"what_s": {SPECULATIVE: [5.0]}}) is None and target_token_s({}) is None

    def run(speedup):
        return SessionResult(text="t", decode_s=5.0, base_s=5.0, speedup=speedup, finished_s=5.0)

    a, b, c = run(2.0), run(2.0), run(2.0)
    first = Batch([run(2.0)], wall_s=10.0, started=0.0, before=a, after=b,
                  token_s={"at_once": 0.18, "before": 0.12, "after": 0.12})
    second = Batch([run(2.0)], wall_s=10.0, started=20.0, before=b, after=c,
                   token_s={"at_once": 0.15, "before": 0.12, "after": None})  # the last solo run had no trace
    rep = Report(1, [first, second])
    s = rep.summary()
    assert s["target_token_s"] == [0.18, 0.15]
    assert s["target_token_over_alone"][0] == pytest.approx(1.5) and s["target_token_over_alone"][1] is None
    assert s["per_batch"][0]["target_token_alone_s"] == [0.12, 0.12]
    line = rep.lines()[-1]
    assert line.startswith("one token of the target alone held the device (median): batch 1: 180 ms at once")
    assert "120 ms and 120 ms alone before and after (1.50x their mean); batch 2: 150 ms at once" in line
    assert line.endswith("120 ms and – alone before and after (–x their mean)")
    # no trace read: no line
    assert not any("one token" in v for v in Report(1, [Batch([run(2.0)], 10.0, 0.0, a, b)]).lines())


def test_the_solo_runs_are_judged_against_their_neighbours_as_the_sessions_are():
    """Four batches: five solo runs, the middle three each against the mean of the two around it."""
    from specviz.devtools.loadtest import Batch, Report, SessionResult

    def run(speedup):
        return SessionResult(text="t", decode_s=5.0, base_s=5.0, speedup=speedup, finished_s=5.0)

    solos = [run(v) for v in (2.0, 2.6, 2.2, 2.1, None)]  # the last solo run lost its figures
    rep = Report(1, [Batch([run(2.0)], wall_s=10.0, started=0.0, before=a, after=b)
                     for a, b in zip(solos, solos[1:])])
    s = rep.summary()
    assert s["solo_over_neighbours"][:2] == pytest.approx([2.6 / 2.1, 2.2 / 2.35])
    assert s["solo_over_neighbours"][2] is None
    assert s["solo_within_tolerance"] == 1  # 1.24 is out, 0.94 is in, the unknown one is not counted
    assert "1.24, 0.94, –; within 15 %: 1/3" in "\n".join(rep.lines())


def test_the_server_cpu_is_read_per_process_and_for_its_main_thread():
    """CpuUse on this process: a main thread spinning reads about one core, one that waits on a thread
    that sleeps reads about none."""
    import os
    import threading

    from specviz.devtools.loadtest import CpuUse

    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/stat").exists():
        pytest.skip("no /proc here")

    def spin(s):
        t = time.monotonic()
        while time.monotonic() - t < s:
            pass

    use = CpuUse(os.getpid())
    spin(1.0)
    alone = use.done()
    assert 0.6 <= alone["main_thread"] <= 1.1 and alone["process_cores"] >= alone["main_thread"] - 0.05
    use = CpuUse(os.getpid())
    other = threading.Thread(target=time.sleep, args=(1.0,))  # a thread that only waits: no CPU
    other.start()
    other.join()
    idle = use.done()
    assert idle["main_thread"] <= 0.3 and idle["process_cores"] <= 0.3
    assert CpuUse(None).done() == {"process_cores": None, "main_thread": None}


def test_the_browsers_run_only_while_the_server_is_idle():
    """BrowserGate on real processes: a busy child stands in for a browser and this process for the server.
    While this process spins the child is stopped (its CPU time stands still), while it sleeps the child
    runs; and a child stopped for max_stop_s runs for slice_s, whatever the server does."""
    import os
    import subprocess

    from specviz.devtools import loadtest

    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("no /proc here")
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def spin(s):
        t = time.monotonic()
        while time.monotonic() - t < s:
            pass

    def child_cpu_over(s, work):  # the child's CPU seconds while work(s) runs here
        c0 = loadtest.cpu_s(child.pid)
        work(s)
        return loadtest.cpu_s(child.pid) - c0

    try:
        gate = loadtest.BrowserGate(os.getpid(), lambda: {child.pid}, max_stop_s=60.0)
        spin(0.2)  # the server works
        assert gate.update() is False and gate.stops == 1
        assert child_cpu_over(0.5, time.sleep) <= 0.02  # stopped: it used no CPU
        time.sleep(0.1)  # the server is idle
        assert gate.update() is True
        assert child_cpu_over(0.5, time.sleep) >= 0.2  # it goes on
        # a server busy for longer than max_stop_s: the browsers still get a slice now and then
        always = loadtest.BrowserGate(None, lambda: {child.pid}, busy=lambda: True, max_stop_s=0.3, slice_s=0.4)
        assert always.update() is False
        time.sleep(0.35)
        assert always.update() is True  # stopped too long: it runs ...
        assert child_cpu_over(0.2, time.sleep) >= 0.05 and always.update() is True  # ... for its slice,
        time.sleep(0.25)
        assert always.update() is False and always.stops == 2  # then it is stopped again
        always.close()
        assert child_cpu_over(0.3, time.sleep) >= 0.1  # close() lets it go on
        assert always.stopped_s >= 0.3  # the first stop, at least
    finally:
        child.kill()
        child.wait()


def test_the_gates_own_thread_stops_the_browsers_as_soon_as_the_server_works():
    """start(): the caller does nothing, and a busy child is stopped within a tenth of a second of this
    process starting to spin, and goes on once it sleeps."""
    import os
    import subprocess

    from specviz.devtools import loadtest

    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("no /proc here")
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    gate = loadtest.BrowserGate(os.getpid(), lambda: {child.pid}, max_stop_s=60.0)
    try:
        time.sleep(0.2)
        gate.start()
        time.sleep(0.2)
        assert gate.running
        t = time.monotonic()
        while gate.running and time.monotonic() - t < 2.0:  # the server works
            pass
        assert not gate.running and time.monotonic() - t < 0.1 + 0.05
        time.sleep(0.3)  # and rests
        assert gate.running
    finally:
        gate.close()
        child.kill()
        child.wait()
    assert gate._thread is not None and not gate._thread.is_alive()
