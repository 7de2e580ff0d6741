"""Many sessions of the main page at once, through the device queue (AppTest, tiny pair)."""

from __future__ import annotations

import re

import threading
import time

import pytest
from specviz.core.settings import DecodeSettings
from test_app import TINY, direct_run, new_app, shared_runtime, start  # noqa: F401 (shared_runtime: a fixture)

pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


@pytest.fixture
def many_sessions(shared_runtime, monkeypatch):
    """shared_runtime, and one more harness race fixed for more than two AppTests at once.

    Every AppTest.run() starts with `PagesManager.uses_pages_directory = None` (a class attribute: one
    for all sessions), and the script runner reads it to choose how to run app.py. A session that reads
    it just after another one's reset runs app.py without its pages/ folder, its widgets get other ids,
    and their values are lost (an empty prompt, KeyErrors). A real server sets it once. Here the script
    runner reads a subclass pinned to the value this app has (it has a pages/ folder).
    """
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.runtime.scriptrunner import script_runner

    pinned = type("PinnedPagesManager", (PagesManager,), {"uses_pages_directory": True})
    monkeypatch.setattr(script_runner, "PagesManager", pinned)
    return shared_runtime


def _sessions(jobs: list[dict], results: dict, errors: list, step: bool = False) -> list[threading.Thread]:
    """A thread per job, each a session pressing Run (or Step: one round, no rerun after it).

    The sessions' first renders take turns (first_render); their Runs overlap. AppTest sessions all share one
    session id, and a widget value set while another session's first render ran was sometimes lost (the page
    then read an empty prompt): a harness race, which a server's distinct sessions do not have.
    """
    first_render = threading.Lock()

    def session(i: int) -> None:
        try:
            if step:
                with first_render:
                    at = new_app()
                for name, value in jobs[i].items():
                    kind = {"prompt": "text_area", "max_new": "number_input", "seed": "number_input"}[name]
                    getattr(at, kind)(key=f"main.{name}").set_value(value)
                at.checkbox(key="main.chat").set_value(False)
                at.button(key="main.step_btn").click().run()
            else:
                with first_render:
                    at = new_app()
                at = start(at, chat=False, **jobs[i])
            assert not at.error, (i, jobs[i], [e.value for e in at.error], at.text_area(key="main.prompt").value)
            results[i] = at
        except BaseException as e:  # noqa: BLE001 — reported by the test
            errors.append(e)

    return [threading.Thread(target=session, args=(i,)) for i in range(len(jobs))]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_eight_sessions_at_once_each_equal_a_solo_run_one_round_at_a_time(many_sessions):
    from specviz.service import pairs
    from specviz.device import devqueue

    pairs.clear()
    calls = pairs.LOAD_CALLS
    jobs = [dict(prompt=f"fish {i} " * (1 + i % 3), seed=i, temperature=(0.0, 0.9)[i % 2], k=2 + i % 3, max_new=20,
                 baseline=i < 2) for i in range(8)]
    before = devqueue.QUEUE.stats("cpu")
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    threads = _sessions(jobs, results, errors)
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    after = devqueue.QUEUE.stats("cpu")
    assert pairs.LOAD_CALLS == calls + 1  # one load for all eight
    assert after["max_holders"] == 1  # never two pieces of model work at once
    runs = {i: at.session_state["main.job"].run for i, at in results.items()}
    # every round went through the queue in its own turn (plus the warm-up and the baselines)
    assert after["grants"] - before["grants"] >= sum(len(r.rounds) for r in runs.values())
    for i, s in enumerate(jobs):
        ref = direct_run(s["prompt"], False, k=s["k"], temperature=s["temperature"], max_new_tokens=20, seed=s["seed"])
        assert runs[i].token_ids == ref.token_ids, i
        base = results[i].session_state["main.job"].meta.get("baseline")
        if s["baseline"]:
            assert base and base["identical"] is (True if s["temperature"] == 0 else None)
            assert "base_outside_load" in base


@pytest.mark.cores
def test_a_session_waiting_for_the_device_knows_its_place_and_then_runs(many_sessions):
    """Another session holds the device: the page's run waits in line, one ahead, then finishes as if alone."""
    from specviz.device import devqueue

    new_app()  # the pair is loaded and warmed before the device is taken
    seen: list[int | None] = []
    release = threading.Event()

    def other_session():
        devqueue.QUEUE.call("cpu", lambda: release.wait(60), owner="another session")

    holder = threading.Thread(target=other_session)
    holder.start()
    while devqueue.QUEUE.stats("cpu")["holders"] != ["another session"]:
        time.sleep(0.01)
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    (page,) = _sessions([dict(prompt="one fish", seed=3, max_new=12)], results, errors, step=True)
    page.start()
    t0 = time.perf_counter()
    while not devqueue.QUEUE.stats("cpu")["waiting"] and time.perf_counter() - t0 < 60:
        time.sleep(0.01)
    (owner,) = devqueue.QUEUE.stats("cpu")["waiting"]
    seen.append(devqueue.QUEUE.ahead(owner, "cpu"))
    time.sleep(0.3)  # the page stays in line while the device is held
    assert page.is_alive() and devqueue.QUEUE.stats("cpu")["waiting"] == [owner]
    release.set()
    holder.join(10)
    page.join(120)
    assert not errors, errors
    assert seen == [1]
    job = results[0].session_state["main.job"]
    ref = direct_run("one fish", False, k=4, max_new_tokens=12, seed=3)
    assert [r.emitted for r in job.rounds] == [ref.rounds[0].emitted]  # its first round, as alone
    assert not [i for i in results[0].info if "Waiting for the device" in i.value]  # granted: the notice is gone
    waited = [c.value for c in results[0].caption if "First round on screen" in c.value]
    assert waited and "for the device while other sessions had their turn" in waited[0], waited
    assert job.meta["first_wait_s"] >= 0.3  # the time the other session held the device after the page asked


def test_the_waiting_notice_says_how_many_sessions_are_ahead():
    from streamlit.testing.v1 import AppTest

    def page():
        from pages.common import ui
        from specviz.device import devqueue

        ui.join_device_queue()
        on_wait = devqueue._owner.get()[1]  # what a hold of this session calls while it waits
        on_wait(2)

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    assert [i.value for i in at.info if "2 sessions ahead of you" in i.value]


@pytest.mark.cores
def test_the_main_page_says_when_its_timings_were_taken_under_outside_load():
    """A target whose passes lose the CPU for 20 ms (a sleep: wall time, no CPU time), as under another program."""
    from busy import passes_losing_the_cpu
    from specviz.service import pairs

    at = start(new_app(), prompt="one fish", chat=False, max_new=6, baseline=True)
    job = at.session_state["main.job"]
    pair = pairs.slot(job.meta["pair"], job.meta["dtype"]).pair
    with passes_losing_the_cpu(pair.target):
        at.button(key="main.run_btn").click().run()
    assert not at.exception, at.exception
    run = at.session_state["main.job"].run
    assert run.outside_load_rounds == len(run.rounds)
    assert [w for w in at.warning if w.value.startswith("Taken under outside load")]
    assert [c for c in at.caption if "under outside load" in c.value and "decode" in c.value]


def test_a_load_note_is_a_warning_only_when_it_can_move_the_figures():
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from pages.common import lab_ui
        from specviz.device.clock import LoadNote

        lab_ui.load_warning(LoadNote.of(st.session_state["what"], st.session_state["busy_s"], 10.0))

    at = AppTest.from_function(page)
    at.session_state["what"], at.session_state["busy_s"] = "1 of 351 timed passes", 0.03
    at.run()
    assert not at.exception and not at.warning
    assert [c for c in at.caption if "Outside load on 1 of 351 timed passes" in c.value and "0.3%" in c.value]
    at.session_state["busy_s"] = 2.0
    at.run()
    assert [w for w in at.warning if w.value.startswith("Taken under outside load: 1 of 351 timed passes")]


def test_a_target_alone_run_cut_by_a_rerun_goes_on_from_the_token_it_reached(tmp_path, monkeypatch):
    """The main page keeps its target-alone run with the job: the next script run resumes it.

    A rerun (a widget touched, a turn lost in the queue) stops the script between two tokens; here the
    first script run is played by hand up to that point: its stream made and 5 tokens taken."""
    from pages.common import main_view
    from specviz.service import pairs
    from specviz.device import devqueue
    from specviz.decoding import engine, models
    from specviz.data import playback
    from specviz.teaching import baseline

    name = models.list_pairs()[0].name  # the tiny registry's default pair
    pair = pairs.load_pair_cached(name, "float32")
    ids, n = [2, 7, 1, 8, 2, 8], 12
    stream = engine.speculative_stream(pair.target, pair.draft, ids, DecodeSettings(k=3, max_new_tokens=n),
                                       eos_token_id=[])
    job = playback.Playback.live(stream, ids, "", {"max_new_tokens": n, "eos_token_id": []},
                                 meta={"pair": name, "dtype": "float32", "baseline_wanted": True})
    while job.advance() is not None:
        pass
    assert job.done and job.run is not None

    cut = baseline.target_alone_stream(pair.target, job.run, pair.shared_vocab)
    for _, _ in zip(range(5), cut):  # the first script run: 5 tokens, then the rerun stopped it
        pass
    job.meta["baseline_stream"] = cut
    trace = tmp_path / "holds.jsonl"
    monkeypatch.setattr(devqueue.QUEUE, "trace", str(trace))
    main_view._baseline(job)  # the next script run
    monkeypatch.setattr(devqueue.QUEUE, "trace", None)

    base = job.meta["baseline"]
    assert base is not None and "baseline_stream" not in job.meta
    assert base["base_tokens"] == n and base["base_target_passes"] == n
    assert len(trace.read_text().splitlines()) == n - 5  # only the tokens left: no warm-up, no new start
    whole = baseline.target_alone(pair.target, job.run, pair.shared_vocab)
    assert base["base_token_ids"] == whole["base_token_ids"] and base["identical"] == whole["identical"]


def test_a_second_session_with_the_same_settings_reuses_the_target_alone_and_says_so(tmp_path, monkeypatch):
    """Two sessions run the same prompt and settings with another k: the second one's target alone is the first
    one's measurement, reused with no model work (no target-alone hold of the device in the queue's trace,
    its warm-up included), and the page says when it was measured and that it was reused. The load check's
    verdict is set (no outside load): this machine is shared, and a baseline under outside load is not kept."""
    import json

    from specviz.device import clock, devqueue
    from specviz.decoding.engine import AUTOREGRESSIVE
    from specviz.teaching import baseline

    monkeypatch.setattr(clock, "outside_load", lambda *a, **kw: False)
    monkeypatch.setattr(clock, "crowded", lambda *a, **kw: False)
    baseline.STORE.clear()
    trace = tmp_path / "holds.jsonl"
    monkeypatch.setattr(devqueue.QUEUE, "trace", str(trace))
    settings = dict(prompt="two fish red fish", chat=False, max_new=10, baseline=True)

    def alone_holds() -> int:
        rows = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
        trace.unlink(missing_ok=True)
        return sum(r.get("what") == AUTOREGRESSIVE for r in rows)

    def note(at) -> str:
        (caption,) = [c.value for c in at.caption if re.match(r"The \w+ target alone:", c.value)]
        return caption

    first = start(new_app(), k=2, **settings)
    assert alone_holds() >= 10 and "measured right after the run" in note(first)
    second = start(new_app(), k=3, **settings)
    assert alone_holds() == 0
    assert "on this server and reused for this run" in note(second), note(second)
    a, b = (at.session_state["main.job"].meta["baseline"] for at in (first, second))
    assert b["base_token_ids"] == a["base_token_ids"] and b["base_decode_s"] == a["base_decode_s"]
    assert b["identical"] is True and [s for s in second.success if "identical text" in s.value]


def test_the_target_alone_is_warmed_up_unless_other_sessions_wait_for_the_device():
    """A shared server times the target alone after every session's Run. Its warm-up (2 tokens, the prompt
    read again) is device time no figure counts. It is always run the first time a process times a target,
    and after that while the device is otherwise idle; with another session in line it is skipped, since
    the timed tokens take turns with that session's rounds anyway. Passes are counted by a forward hook."""
    from specviz.decoding import engine
    from specviz.teaching import baseline
    from tiny import tiny_lm

    ids, n = [2, 7, 1, 8], 6
    target, draft = tiny_lm(300), tiny_lm(301)
    spec = engine.speculative_decode(target, draft, ids, DecodeSettings(k=2, max_new_tokens=n), eos_token_id=[])

    def passes(model, others_waiting: bool) -> int:
        calls, base = _forward_passes(model, lambda: baseline.target_alone(model, spec), others_waiting)
        assert base["base_tokens"] == n and base["identical"]
        return calls

    assert passes(target, others_waiting=True) == n + 2  # the first time: warmed up, whoever waits
    assert passes(target, others_waiting=True) == n  # others in line: straight to the timed tokens
    assert passes(target, others_waiting=False) == n + 2  # the device otherwise idle: warmed up
    assert passes(tiny_lm(300), others_waiting=True) == n + 2  # another model object: its first time


def test_a_labs_warm_ups_follow_the_same_rule_for_each_path():
    """compare_with_baseline (the Speedup page's sweeps and comparisons, the offline pairs) warms the target
    alone and the speculative run before timing them. Each path is warmed the first time this process runs
    it (the target alone per target, speculative per draft) and while the device is otherwise idle; with
    another session in line it goes straight to the timed runs. Target passes are counted by a forward hook."""
    from specviz.teaching import baseline, experiments
    from specviz.decoding.drafters import ModelDrafter
    from tiny import tiny_lm

    ids, n = [2, 7, 1, 8], 6
    target, draft = tiny_lm(310), tiny_lm(311)

    def passes(others_waiting: bool, d=draft, warm: bool = True) -> int:
        baseline.STORE.clear()  # each call times the target alone (reusing it is test_experiments')
        calls, cmp = _forward_passes(target, lambda: experiments.compare_with_baseline(
            target, d, ids, DecodeSettings(k=2, max_new_tokens=n), eos_token_id=[], warm=warm), others_waiting)
        assert cmp.identical and len(cmp.base.token_ids) == n
        return calls

    timed = passes(others_waiting=False, warm=False)  # the timed runs alone
    both = passes(others_waiting=True)  # the first time: both paths warmed, whoever waits
    assert both > timed + 2  # the target alone's warm-up reads the prompt and makes a token, then the speculative
    assert passes(others_waiting=True) == timed  # others in line: straight to the timed runs
    assert passes(others_waiting=False) == both  # the device otherwise idle: both warmed
    # another draft's first time: its speculative path is warmed, the target alone (already warmed) is not
    assert passes(others_waiting=True, d=tiny_lm(311)) == both - 2
    # a new drafter around the warmed draft, as the frequent head's and another tokenizer's are made for each
    # run: the same path on the same model, so it is not warmed again while others wait
    assert passes(others_waiting=True, d=ModelDrafter(draft)) == timed
    assert passes(others_waiting=False, d=ModelDrafter(draft)) == both


def test_loading_a_pair_counts_as_its_speculative_warm_up():
    """Loading a pair ends with a speculative warm-up run (pairs._warm_up, through engine.warm_up), so a lab's
    first timed speculative run, with another session in line, needs no second one. Draft passes are counted
    by a forward hook."""
    from specviz.service import pairs
    from specviz.teaching import experiments
    from specviz.decoding import models

    pair = pairs.load_pair_cached(models.list_pairs()[0].name, "float32")  # the tiny registry's default pair
    ids, n = [2, 7, 1, 8], 6

    def draft_passes(warm: bool) -> int:
        calls, cmp = _forward_passes(pair.draft, lambda: experiments.compare_with_baseline(
            pair.target, pair.drafter(), ids, DecodeSettings(k=2, max_new_tokens=n), warm=warm,
            **{**pair.run_kw, "eos_token_id": []}),
            others_waiting=True)
        assert cmp.identical
        return calls

    assert draft_passes(warm=True) == draft_passes(warm=False)


def _forward_passes(model, fn, others_waiting: bool):
    """(model's forward passes during fn(), what fn returned); others_waiting: fn runs as a job on the device's
    worker while another session waits in line behind it."""
    from specviz.device import devqueue

    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        if not others_waiting:
            out = fn()
        else:
            other = threading.Thread(target=lambda: _hold_as("another session"), daemon=True)

            def behind():  # on the worker: the other session asks now, and waits
                other.start()
                while "another session" not in devqueue.QUEUE.stats("cpu")["waiting"]:
                    time.sleep(0.001)
                return fn()

            out = devqueue.run("cpu", behind)
            other.join(10)
    finally:
        hook.remove()
    return len(calls), out


def _hold_as(owner: str) -> None:
    from specviz.device import devqueue

    with devqueue.session(owner):
        devqueue.run("cpu", lambda: None)


def test_a_target_alone_run_that_failed_in_an_earlier_script_run_is_a_message_not_a_traceback():
    from pages.common import main_view
    from specviz.decoding import engine, models
    from specviz.data import playback
    from tiny import tiny_lm

    name = models.list_pairs()[0].name
    target, draft = tiny_lm(100), tiny_lm(200)
    ids, n = [2, 7, 1, 8], 6
    job = playback.Playback.live(engine.speculative_stream(target, draft, ids, DecodeSettings(k=2, max_new_tokens=n),
                                                           eos_token_id=[]),
                                 ids, "", {"max_new_tokens": n, "eos_token_id": []},
                                 meta={"pair": name, "dtype": "float32", "baseline_wanted": True})
    while job.advance() is not None:
        pass

    def broken():
        raise RuntimeError("out of memory in the middle of a pass")
        yield  # a generator

    dead = engine.DecodeStream(broken())
    with pytest.raises(RuntimeError):
        next(dead)  # the earlier script run, which showed its error
    job.meta["baseline_stream"] = dead
    main_view._baseline(job)  # the next script run
    assert job.meta["baseline"] is None and "baseline_stream" not in job.meta


def test_a_page_hands_the_gil_over_quickly_and_names_a_bad_setting(monkeypatch):
    import sys

    from specviz.device import tuning

    was = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # Python's default
        new_app()
        assert sys.getswitchinterval() == pytest.approx(tuning.SWITCH_MS / 1000)
        sys.setswitchinterval(0.005)
        monkeypatch.setenv(tuning.ENV_SWITCH, "soon")
        at = new_app()  # no exception
        assert any(tuning.ENV_SWITCH in e.value for e in at.error)  # said in the page, not a traceback
        assert sys.getswitchinterval() == 0.005  # and left as it was
    finally:
        sys.setswitchinterval(was)
