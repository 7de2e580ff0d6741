"""The device queue (specviz/device/devqueue.py): order, fairness, cancellation, honest timings, outside load
seen through the worker (the load rules themselves: tests/test_clock.py).

Holders here are threads that sleep while they hold the device: they take the
device's turn without taking the CPU, so a timing that counts their turn is
the queue's fault, not load.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest
import torch

from busy import busy_programs, passes_losing_the_cpu, team_or_skip
from on_thread import on_new_thread
from specviz.device import clock, devqueue, tuning
from specviz.devtools.loadtest import trace_holds
from specviz.teaching import explain
from specviz.device.devqueue import Cancelled, DeviceQueue
from specviz.core.settings import DecodeSettings


def _wait_until(cond, timeout: float = 10.0) -> None:
    t0 = time.perf_counter()
    while not cond():
        assert time.perf_counter() - t0 < timeout, "timed out"
        time.sleep(0.002)


def _queued(q: DeviceQueue, n: int, device: str = "cpu") -> None:
    _wait_until(lambda: len(q.stats(device)["waiting"]) == n)


def test_the_device_is_granted_in_the_order_it_was_asked_for():
    q = DeviceQueue(poll_s=0.01, env="")
    order: list[str] = []
    gate = threading.Event()

    def first():
        q.call("cpu", lambda: gate.wait(10), owner="first")

    def job(name):
        q.call("cpu", lambda: order.append(name), owner=name)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    _wait_until(lambda: q.stats()["holders"] == ["first"])
    names = [f"s{i}" for i in range(6)]
    for i, name in enumerate(names):  # each one queued before the next asks
        threads.append(threading.Thread(target=job, args=(name,)))
        threads[-1].start()
        _queued(q, i + 1)
    assert q.ahead("s3") == 4 and q.ahead("first") == 0 and q.ahead("nobody") is None
    gate.set()
    for t in threads:
        t.join(10)
    assert order == names
    assert q.stats()["max_holders"] == 1


def test_others_counts_the_other_owners_holding_or_waiting_never_the_asker():
    q = DeviceQueue(poll_s=0.01, env="")
    assert q.others("cpu", "me") == 0
    gate = threading.Event()

    def job(name):
        q.call("cpu", lambda: gate.wait(10), owner=name)

    threads = [threading.Thread(target=job, args=(name,)) for name in ("me", "a", "a", "b")]
    threads[0].start()
    _wait_until(lambda: q.stats()["holders"] == ["me"])
    assert q.others("cpu", "me") == 0  # holding the device itself: nobody else
    for i, t in enumerate(threads[1:]):
        t.start()
        _queued(q, i + 1)
    assert q.others("cpu", "me") == 2 and q.others("cpu", "a") == 2  # owners, not tickets; the holder counts
    with devqueue.session("b"):
        assert q.others("cpu") == 2  # the current session's owner by default
    gate.set()
    for t in threads:
        t.join(10)
    assert q.others("cpu", "me") == 0


def test_a_short_job_is_not_starved_behind_a_long_sweep_that_yields_per_step():
    q = DeviceQueue(poll_s=0.01, env="")
    steps_done = []
    short_done_at: list[int] = []

    def sweep():  # 60 steps of 10 ms, lining up again after each
        for i in range(60):
            q.call("cpu", lambda: (time.sleep(0.01), steps_done.append(i)), owner="sweep")

    def short():
        for _ in range(3):
            q.call("cpu", lambda: time.sleep(0.01), owner="short")
        short_done_at.append(len(steps_done))

    a = threading.Thread(target=sweep)
    a.start()
    _wait_until(lambda: len(steps_done) >= 5)
    b = threading.Thread(target=short)
    b.start()
    b.join(20)
    a.join(20)
    # three steps of its own, each after at most one step of the sweep
    assert short_done_at and short_done_at[0] <= 5 + 3 + 1, short_done_at


def test_concurrency_is_a_setting_and_holders_never_exceed_it():
    assert devqueue.concurrency("cpu", "") == 1
    assert devqueue.concurrency("cpu", "3") == 3
    assert devqueue.concurrency("cuda:0", "cpu=1,cuda=2") == 2 and devqueue.concurrency("cpu", "cuda=2") == 1
    assert devqueue.concurrency("cpu", str(devqueue.MAX_CONCURRENCY)) == devqueue.MAX_CONCURRENCY
    for bad in ("x", "0", "cpu=two", "65", "cpu=1,cuda=65", str(10**30)):
        with pytest.raises(devqueue.InvalidSetting, match="SPECVIZ_DEVICE_CONCURRENCY"):
            devqueue.concurrency("cpu", bad)
    q = DeviceQueue(poll_s=0.01, env="2")
    inside, most = [0], [0]
    lock = threading.Lock()

    def step():
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1

    def job():
        q.call("cpu", step, owner=threading.current_thread().name)

    threads = [threading.Thread(target=job, name=f"t{i}") for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most[0] == 2 and q.stats()["max_holders"] == 2


@pytest.mark.cores
def test_a_handover_wakes_the_next_in_line_at_once_and_a_cancel_wakes_the_cancelled():
    # a poll far longer than the test: every wake-up must come from the queue's own notifications
    q = DeviceQueue(poll_s=60, env="")
    order: list[str] = []
    errors: list[str] = []
    gate = threading.Event()

    def job(owner, wait_gate=False):
        try:
            q.call("cpu", lambda: (order.append(owner), wait_gate and gate.wait(10)), owner=owner)
        except Cancelled:
            errors.append(owner)

    threads = [threading.Thread(target=job, args=("first", True))]
    threads[0].start()
    _wait_until(lambda: q.stats()["holders"] == ["first"])
    for i, owner in enumerate(["a", "gone", "b", "c"]):
        threads.append(threading.Thread(target=job, args=(owner,)))
        threads[-1].start()
        _queued(q, i + 1)
    assert q.cancel("gone") == 1
    _wait_until(lambda: errors == ["gone"], timeout=5)  # woken by its cancel, not by a poll a minute later
    t0 = time.perf_counter()
    gate.set()
    for t in threads:
        t.join(10)
    assert order == ["first", "a", "b", "c"] and not any(t.is_alive() for t in threads)
    assert time.perf_counter() - t0 < 10  # three handovers, none waiting for a poll


@pytest.mark.cores
def test_a_trace_records_each_outer_hold_and_sums_the_time_the_device_was_held(tmp_path):
    trace = tmp_path / "holds.jsonl"
    q = DeviceQueue(poll_s=0.01, env="", trace=str(trace))

    def job(owner):  # a pass inside the round: not a job of its own
        q.call("cpu", lambda: q.call("cpu", lambda: time.sleep(0.05), owner=owner), owner=owner)

    t0 = time.time()
    threads = [threading.Thread(target=job, args=(o,)) for o in ("a", "b", "a")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    t1 = time.time()
    rows = [json.loads(r) for r in trace.read_text().splitlines()]
    assert len(rows) == 3  # outer holds only
    got = trace_holds(str(trace), t0, t1)
    assert got["holds"] == 3 and set(got["owners_held_s"]) == {"a", "b"}
    # one at a time: held time is the sum of the holds, and the wall is at least that
    assert 0.15 <= got["held_s"] <= t1 - t0 + 1e-6
    assert got["owners_held_s"]["a"] == pytest.approx(2 * got["owners_held_s"]["b"], rel=0.5)
    assert got["longest_gap_s"] >= 0.045  # a's second round ended at least one hold after its first
    # a window clips the holds to it; one before every hold sees none
    assert trace_holds(str(trace), t0 - 10, t0 - 5)["holds"] == 0
    first, last = min(r["granted"] for r in rows), max(r["released"] for r in rows)
    mid = (first + last) / 2  # inside the second hold
    half = trace_holds(str(trace), t0, mid)
    assert half["held_s"] == pytest.approx(sum(max(0.0, min(r["released"], mid) - r["granted"]) for r in rows))
    # the last hold's end: the moment the device's work for the window was done, clipped to the window
    assert got["last_released"] == last and half["last_released"] == mid
    assert trace_holds(str(tmp_path / "none"), t0, t1)["last_released"] is None
    assert trace_holds(str(tmp_path / "none"), t0, t1)["holds"] == 0  # no file: nothing held


@pytest.mark.cores
def test_a_trace_labels_each_hold_with_what_it_is_and_sorts_their_times_by_label(tmp_path):
    trace = tmp_path / "holds.jsonl"
    q = DeviceQueue(poll_s=0.01, env="", trace=str(trace))
    t0 = time.time()
    for what, s in (("token", 0.02), (None, 0.01), ("round", 0.05), ("token", 0.03)):
        q.call("cpu", lambda: time.sleep(s), owner="a", what=what)
    t1 = time.time()
    rows = [json.loads(r) for r in trace.read_text().splitlines()]
    assert [r.get("what") for r in rows] == ["token", None, "round", "token"]  # no label: no field
    got = trace_holds(str(trace), t0, t1)["what_s"]
    assert set(got) == {"token", "round"} and len(got["token"]) == 2 and len(got["round"]) == 1
    assert got["token"] == pytest.approx([r["released"] - r["granted"] for r in rows if r.get("what") == "token"])
    assert 0.02 <= got["token"][0] < got["token"][1] and got["round"][0] >= 0.05
    # only holds wholly inside the window: one cut by its edge would read short
    mid = (rows[2]["granted"] + rows[2]["released"]) / 2
    assert trace_holds(str(trace), t0, mid)["what_s"] == {"token": got["token"][:1]}


def test_a_trace_that_cannot_be_written_never_costs_the_work(tmp_path):
    q = DeviceQueue(poll_s=0.01, env="", trace=str(tmp_path / "no-such-folder" / "holds.jsonl"))
    done = q.call("cpu", lambda: True, owner="a")
    assert done and q.trace is None and q.stats()["holders"] == []


def test_a_cancelled_owner_drops_its_queued_work_and_never_holds_the_device():
    q = DeviceQueue(poll_s=0.01, env="")
    gate = threading.Event()
    got: list[str] = []
    errors: dict[str, BaseException] = {}

    def holder():
        q.call("cpu", lambda: gate.wait(10), owner="h")

    def job(owner, tag):
        try:
            q.call("cpu", lambda: got.append(tag), owner=owner)
        except Cancelled as e:
            errors[tag] = e

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    _wait_until(lambda: q.stats()["holders"] == ["h"])
    for i, (owner, tag) in enumerate((("closed", "c1"), ("closed", "c2"), ("other", "o"))):
        threads.append(threading.Thread(target=job, args=(owner, tag)))
        threads[-1].start()
        _queued(q, i + 1)
    assert q.cancel("closed") == 2
    _wait_until(lambda: len(errors) == 2, timeout=5)  # dropped while the device is still busy
    assert q.stats()["waiting"] == ["other"] and q.ahead("other") == 1
    gate.set()
    for t in threads:
        t.join(10)
    assert got == ["o"] and set(errors) == {"c1", "c2"}


def test_a_waiting_page_hears_its_place_and_stopping_drops_its_ticket():
    q = DeviceQueue(poll_s=0.01, env="")
    gate = threading.Event()
    heard: list[int | None] = []

    class Stop(BaseException):  # what Streamlit raises in a script whose tab was closed
        pass

    def on_wait(ahead):
        heard.append(ahead)
        if len(heard) >= 3:
            raise Stop

    def holder():
        q.call("cpu", lambda: gate.wait(10), owner="h")

    def waiter(out):
        try:
            with devqueue.session("w", on_wait):
                q.call("cpu", lambda: out.append("held"))
        except Stop:
            out.append("stopped")

    h = threading.Thread(target=holder)
    h.start()
    _wait_until(lambda: q.stats()["holders"] == ["h"])
    out: list[str] = []
    w = threading.Thread(target=waiter, args=(out,))
    w.start()
    w.join(10)
    assert out == ["stopped"] and heard[:3] == [1, 1, 1]
    assert q.stats()["waiting"] == []  # nothing of the stopped page is left in the line
    gate.set()
    h.join(10)
    # a hold granted after a wait tells the page once, with None, so it can clear its notice
    heard.clear()
    gate.clear()
    h = threading.Thread(target=holder)
    h.start()
    _wait_until(lambda: q.stats()["holders"] == ["h"])
    out.clear()
    with devqueue.session("w", on_wait=lambda a: (heard.append(a), a == 1 and gate.set())):
        q.call("cpu", lambda: out.append("held"))
    h.join(10)
    assert out == ["held"] and heard[0] == 1 and heard[-1] is None


def test_model_work_asked_on_the_worker_runs_there_at_once():
    q = DeviceQueue(poll_s=0.01, env="")
    outer = threading.get_ident

    def round_():  # a round's pass asks for the device it runs on: no job of its own
        return outer(), q.call("cpu", lambda: (outer(), q.stats()["holders"]), owner="a")

    worker, (inner, holders) = q.call("cpu", round_, owner="a")
    assert worker == inner != threading.get_ident() and holders == ["a"]
    assert q.stats()["holders"] == [] and q.stats()["grants"] == 1


# --------------------------------------------------------------------------
# drawing and model work take turns


def _in_thread(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def test_drawing_waits_for_model_work_and_model_work_for_the_drawing_asked_before_it():
    q = DeviceQueue(poll_s=0.01, env="")
    log: list[str] = []
    go = {name: threading.Event() for name in ("m1", "d1", "m2")}

    def model(name):
        q.call("cpu", lambda: (log.append(f"{name} in"), go[name].wait(10), log.append(f"{name} out")), owner=name)

    def draw(name):
        with q.drawing():
            log.append(f"{name} in")
            if name in go:
                go[name].wait(10)
            log.append(f"{name} out")

    threads = [_in_thread(model, "m1")]
    _wait_until(lambda: log == ["m1 in"])
    threads += [_in_thread(draw, "d1"), _in_thread(draw, "d2")]  # both ask while m1 works: both wait
    _wait_until(lambda: q.turns.open()["draw"] == 2)
    time.sleep(0.05)
    assert log == ["m1 in"]
    go["m1"].set()
    _wait_until(lambda: "d2 out" in log and "d1 in" in log)  # the two draws go together
    assert log[1] == "m1 out" and "d1 out" not in log
    threads.append(_in_thread(model, "m2"))  # asks while d1 draws: waits for it
    _wait_until(lambda: q.turns.open()["model"] == 1)
    threads.append(_in_thread(draw, "d3"))  # asks after m2: waits for m2, so drawing never starves model work
    _wait_until(lambda: q.turns.open()["draw"] == 2)
    time.sleep(0.05)
    assert "m2 in" not in log and "d3 in" not in log
    go["d1"].set()
    _wait_until(lambda: "m2 in" in log)
    time.sleep(0.05)
    assert log[-2:] == ["d1 out", "m2 in"]
    go["m2"].set()
    for t in threads:
        t.join(10)
    assert log[-4:] == ["m2 in", "m2 out", "d3 in", "d3 out"]
    assert q.turns.open() == {"model": 0, "draw": 0} and q.turns.waits["model"] == 1


def test_a_page_that_asks_for_model_work_while_it_draws_steps_out_until_it_is_done():
    q = DeviceQueue(poll_s=0.01, env="")
    seen, lock = {}, threading.Lock()

    def round_():  # its own round: it stops drawing, or another page's drawing could never end while this waits
        seen["inside"] = q.turns.open()
        with q.drawing():  # drawing inside model work passes through
            seen["nested"] = True

    def page():
        with q.drawing():
            q.call("cpu", round_, owner="page")
            seen["after"] = q.turns.open()
            with q.paused(), lock:  # waiting on a lock that model work holds: not in a turn
                seen["locked"] = True

    def other():  # holds the lock, then asks for a round
        with lock:
            q.call("cpu", lambda: time.sleep(0.1), owner="other")

    t_other = _in_thread(other)
    t_page = _in_thread(page)
    t_page.join(10)
    t_other.join(10)
    assert not t_page.is_alive() and not t_other.is_alive()
    assert seen["inside"]["model"] >= 1 and seen["inside"]["draw"] == 0 and seen["nested"]
    assert seen["after"]["draw"] == 1 and seen["locked"]
    assert q.turns.open() == {"model": 0, "draw": 0}


def test_pages_go_on_drawing_while_a_model_loads():
    q = DeviceQueue(poll_s=0.01, env="")
    loading, drawn = threading.Event(), threading.Event()

    def load():  # a job without a turn, as models.py loads: it may take minutes
        q.call("cpu", lambda: (loading.set(), drawn.wait(10)), owner="loader", turn=False)

    t = _in_thread(load)
    assert loading.wait(10)
    with q.drawing():
        drawn.set()
    t.join(10)
    assert not t.is_alive() and q.turns.waits["draw"] == 0


def test_a_device_worker_may_draw_inside_model_work():
    def progress():  # a load's progress bar, called on the worker
        with devqueue.drawing():
            return "drawn"

    box = {}
    t = _in_thread(lambda: box.setdefault("got", devqueue.run("cpu", progress)))
    t.join(10)
    assert box.get("got") == "drawn"


# --------------------------------------------------------------------------
# honest timings: waiting for the device is never counted


class SlowHolder:
    """Another session that holds the device in turns of `turn_s`, sleeping (no CPU used)."""

    def __init__(self, turn_s: float = 0.05):
        self.turn_s, self.turns = turn_s, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self.stop.is_set():
            devqueue.QUEUE.call("cpu", self._turn, owner="slow-holder")

    def _turn(self):
        time.sleep(self.turn_s)
        self.turns += 1

    def __enter__(self):
        self.thread.start()
        _wait_until(lambda: self.turns >= 1)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def _best_of(n, fn):
    return min((fn() for _ in range(n)), key=lambda r: r[0])


@pytest.mark.cores
def test_a_run_waiting_behind_another_holder_reports_the_same_times_as_alone(tiny_pair):
    from specviz.decoding.engine import autoregressive_stream, speculative_stream
    from specviz.teaching.experiments import forward_cost

    ids = list(range(2, 14))
    kw = dict(eos_token_id=[], vocab=tiny_pair.shared_vocab)

    def spec():
        s = speculative_stream(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=3, max_new_tokens=16), **kw)
        for _ in s:
            pass
        return s.run.decode_s, s.waited_s, s.run

    def base():
        s = autoregressive_stream(tiny_pair.target, ids, DecodeSettings(max_new_tokens=16), **kw)
        for _ in s:
            pass
        return s.run.decode_s, s.waited_s, s.run

    def passes():
        return min(forward_cost(tiny_pair.target, n_tokens=(1,), reps=8, context=16)[1]), 0.0, None

    spec(), base()  # warm-up
    alone = [_best_of(3, f) for f in (spec, base, passes)]
    with SlowHolder(0.1):
        busy = [_best_of(3, f) for f in (spec, base, passes)]
    for (t_alone, _, run_alone), (t_busy, waited, run_busy), name in zip(alone, busy, ("run", "baseline", "pass")):
        if run_alone is not None:
            assert run_busy.token_ids == run_alone.token_ids
            # the run really waited a turn of 100 ms before most rounds: counted, that would be many times t_alone
            assert waited > 0.1 * len(run_busy.rounds) / 2 and waited > 4 * t_alone, (name, waited, t_alone)
            assert abs(sum(r.round_s for r in run_busy.rounds) - t_busy) < 0.5 * t_alone + 0.01
            # the waits are not counted: counted, t_busy would be t_alone + waited. Half the wait is the
            # margin, since tiny timings on a shared 2-core machine are noisy (waited > 4 t_alone above)
            assert t_busy < t_alone + 0.5 * waited, (name, t_busy, t_alone, waited)
        else:  # a measured pass: its clock starts once the device is held
            assert t_busy < 2.5 * t_alone + 0.02, (name, t_busy, t_alone)


def test_no_model_work_holds_the_device_at_once_from_many_threads(tiny_pair, monkeypatch):
    from specviz.decoding.engine import speculative_decode

    monkeypatch.setenv("SPECVIZ_BATCH_VERIFY", "0")  # a shared verify pass takes a hold of its own (test_pool.py)

    ids = list(range(2, 12))
    before = devqueue.QUEUE.stats("cpu")
    inside, most = [0], [0]
    lock = threading.Lock()
    fwd = tiny_pair.target.forward

    def counting(*a, **kw):  # every target pass counts who else is in a pass right now
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.002)
            return fwd(*a, **kw)
        finally:
            with lock:
                inside[0] -= 1

    tiny_pair.target.forward = counting
    runs = {}

    def job(i):
        runs[i] = speculative_decode(tiny_pair.target, tiny_pair.draft, ids,
                                     DecodeSettings(k=3, max_new_tokens=16, seed=i, temperature=0.7),
                                     eos_token_id=[], vocab=tiny_pair.shared_vocab)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    del tiny_pair.target.forward
    assert most[0] == 1
    # one turn per round (its draft and verify passes inside it), none to collect the Run afterwards
    assert devqueue.QUEUE.stats("cpu")["grants"] - before["grants"] == sum(len(r.rounds) for r in runs.values())
    for i, run in runs.items():  # each as if alone
        ref = speculative_decode(tiny_pair.target, tiny_pair.draft, ids,
                                 DecodeSettings(k=3, max_new_tokens=16, seed=i, temperature=0.7),
                                 eos_token_id=[], vocab=tiny_pair.shared_vocab)
        assert run.token_ids == ref.token_ids


# --------------------------------------------------------------------------
# load from outside: a pass that got little CPU for its wall time


@pytest.mark.cores
def test_rounds_timed_while_the_cpu_was_taken_are_flagged_and_survive_json(tiny_pair):
    from specviz.decoding.engine import autoregressive_decode, speculative_decode
    from specviz.data.records import Run

    ids = list(range(2, 12))
    kw = dict(eos_token_id=[], vocab=tiny_pair.shared_vocab)
    quiet = speculative_decode(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=2, max_new_tokens=8), **kw)
    # a target whose passes lose the CPU for 20 ms (sleep: wall time passes, no CPU time is used),
    # as when another program takes the cores mid-pass
    with passes_losing_the_cpu(tiny_pair.target):
        busy = speculative_decode(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=2, max_new_tokens=8), **kw)
        base = autoregressive_decode(tiny_pair.target, ids, DecodeSettings(max_new_tokens=8), **kw)
    assert busy.token_ids == quiet.token_ids
    assert busy.outside_load_rounds == len(busy.rounds) and base.outside_load_rounds == len(base.rounds)
    back = Run.from_json(busy.to_json())
    assert back.outside_load_rounds == len(busy.rounds)
    d = quiet.to_dict()
    for r in d["rounds"]:
        del r["outside_load"]  # a file saved before the check
    assert Run.from_dict(d).outside_load_rounds == 0


def test_a_watch_sees_the_passes_of_a_measurement(tiny_pair):
    from specviz.teaching.experiments import batch_cost, forward_cost

    with clock.watch() as w:
        forward_cost(tiny_pair.target, n_tokens=(1, 2), reps=2, context=8)
        batch_cost(tiny_pair.target, n_tokens=(1,), batches=(1, 2), reps=1, context=8)
    assert w.passes == 2 * 2 + 1 + 2 * 2  # busy or not depends on this machine's other work
    if not clock.machine_cpu_s() != clock.machine_cpu_s():  # /proc/stat read: every pass saw other programs
        assert w.others_wall_s == pytest.approx(w.wall_s)
    with torch.inference_mode(), clock.watch() as w:
        clock.note_pass("cpu", 0.1, 0.01, 1)
        clock.note_pass("cuda:0", 0.1, 0.01, 1)  # a GPU pass leaves the CPU idle by design
    assert w.passes == 2 and w.busy_passes == 1


@pytest.mark.cores
def test_passes_beside_another_program_are_flagged(tiny_pair):
    """Through the model's own timed passes: a round's passes, beside programs busy on every core, are judged
    on their CPU time, whatever share of the cores the passes got themselves. (Beside one program busy on one
    core, the passes' own busy threads left it under a third of a core in 1 run of 8.)"""
    import os

    from specviz.modeling.lm import open_lm

    lm = open_lm(tiny_pair.target)
    try:
        lm.feed(list(range(2, 10)), keep=1)
        with busy_programs(os.cpu_count() or 2), clock.watch() as w:
            t0 = time.perf_counter()  # each pass is its own job here: its hand-over to the worker is not timed
            while time.perf_counter() - t0 < 10 and (time.perf_counter() - t0 < 0.6 or w.wall_s < 0.4):
                lm.timed_feed([3], keep=1)
                lm.rollback(8)
    finally:
        lm.close()
    assert w.others_wall_s == pytest.approx(w.wall_s) and w.others_wall_s >= clock.OTHERS_MIN_S
    assert w.crowded and w.busy, (w.others_s, w.others_cores_s)


def _parallel_pass() -> clock.PassTime:
    """A pass of parallel work on the CPU's model worker (its whole OpenMP team), timed as passes are."""
    x = torch.rand(1 << 23, generator=torch.Generator().manual_seed(0))  # (8M,)
    y = torch.empty_like(x)

    def work():
        timer = devqueue.queue_runner("cpu").clock()
        for _ in range(40):
            torch.exp(x, out=y)  # (8M,): split across the team's threads (at::parallel_for)
        return timer.stop()
    return devqueue.run("cpu", work)


@pytest.mark.cores
def test_the_model_threads_are_the_workers_openmp_team():
    import os

    team = team_or_skip()
    worker = devqueue.run("cpu", threading.get_native_id)
    python_threads = {t.native_id for t in threading.enumerate()}
    assert worker in team and not (team - {worker}) & python_threads  # the worker and threads Python did not start
    assert len(team) >= devqueue.model_threads("cpu") >= 2
    assert {str(t) for t in team} <= set(os.listdir("/proc/self/task"))
    assert clock.run_delay_s(team) >= 0.0 and clock.run_delay_s([2**31 - 1]) == 0.0  # an ended thread: 0


@pytest.mark.cores
def test_time_another_program_holds_the_cores_is_not_counted():
    """Beside a program busy half the time on one core, a parallel pass takes far longer on the clock; less
    the time its threads waited for a core, most of that is gone (docs/workshop.md, "Honest timings under load").

    Locally the counted time read 1.06-1.13× alone (the clock 1.7-2.0×); in one CI run, after 700 other
    tests in the same process, 1.40× (the clock 1.94×): so the test asks for most of the slowdown to go,
    not all of it, and for no more than all."""
    team_or_skip()
    for _ in range(3):  # the program must slow the pass for the test to say anything: measured again if not
        quiet, loaded = [], []
        for _ in range(5):  # interleaved, so drift hits both alike
            quiet.append(_parallel_pass())
            with busy_programs(1, duty=0.5):
                loaded.append(_parallel_pass())
        alone = statistics.median(t.held for t in quiet)
        wall = statistics.median(t.wall for t in loaded)
        held = statistics.median(t.held for t in loaded)
        if wall > 1.25 * alone:
            break
    # the program did slow it (on the 2-core AMD EPYC the clock read 1.39-1.9× alone, on the Xeon 1.7-2.0×)
    assert wall > 1.25 * alone, (quiet, loaded)
    assert (wall - held) >= 0.4 * (wall - alone), (alone, wall, held)  # most of the slowdown is not counted
    assert held >= 0.8 * alone, (alone, wall, held)  # and no more than the slowdown
    assert statistics.median(t.stalled / t.wall for t in loaded) < clock.MAX_STALL_SHARE  # not the cap's doing
    for t in quiet + loaded:
        assert 0.0 <= t.stalled <= clock.MAX_STALL_SHARE * t.wall and t.held == t.wall - t.stalled


@pytest.mark.cores
def test_time_another_thread_of_this_server_holds_the_cores_is_not_counted_either():
    """Another session's page, drawn by a thread of the same server while this session's pass runs, holds a core
    as another program would: that wait is left out too, which is why the pages' sentence names both (the load
    test, four sessions with the browsers stopped while the server worked: every page left out 1.1-1.3 s)."""
    team_or_skip()
    stop = threading.Event()

    def page():  # busy on a core, as a page being drawn is
        while not stop.is_set():
            sum(range(10_000))

    quiet = [_parallel_pass() for _ in range(3)]
    drawer = threading.Thread(target=page, daemon=True)
    drawer.start()
    try:
        loaded = [_parallel_pass() for _ in range(3)]
    finally:
        stop.set()
        drawer.join()
    alone = statistics.median(t.held for t in quiet)
    wall = statistics.median(t.wall for t in loaded)
    assert wall > 1.2 * alone, (quiet, loaded)  # the thread did slow it
    assert statistics.median(t.stalled for t in loaded) >= 0.4 * (wall - alone), (quiet, loaded)
    assert "other sessions' pages" in explain.stalled_note(1.0, 2.0)


@pytest.mark.cores
def test_a_runs_time_leaves_out_the_waits_for_a_core(tiny_pair):
    """Rounds record the time their passes' threads waited for a core, and neither the rounds' times nor the
    run's decoding time count it."""
    import os

    from specviz.decoding.engine import speculative_decode

    team_or_skip()
    ids = list(range(2, 12))
    kw = dict(eos_token_id=[], vocab=tiny_pair.shared_vocab)
    quiet = speculative_decode(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=2, max_new_tokens=24), **kw)
    with busy_programs(os.cpu_count() or 2):
        t0 = time.perf_counter()
        run = speculative_decode(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=2, max_new_tokens=24), **kw)
        elapsed = time.perf_counter() - t0
    assert run.token_ids == quiet.token_ids
    stalled = run.stalled_s
    assert stalled >= 0.05 * elapsed, (stalled, elapsed)  # each pass's thread waited its turn beside them
    assert all(r.round_s >= 0 and r.stalled_s >= 0 for r in run.rounds)
    assert run.decode_s + stalled <= elapsed + 1e-3 and run.rounds_s + stalled <= elapsed + 1e-3


@pytest.mark.cores
def test_a_short_run_finishes_long_before_a_k_sweep_started_ahead_of_it(tiny_pair):
    """The issue's case, on the engine: a short run is not held up until another session's sweep ends."""
    from specviz.teaching import lab
    from specviz.decoding.engine import speculative_decode

    ids = list(range(2, 12))
    kw = dict(eos_token_id=[], vocab=tiny_pair.shared_vocab)
    handle = tiny_pair.target.register_forward_pre_hook(lambda m, a: time.sleep(0.004))  # slower passes
    done: dict[str, float] = {}
    t0 = time.perf_counter()

    def sweep():
        lab.k_sweep(tiny_pair.target, tiny_pair.draft, ids, [1, 2, 3, 4], DecodeSettings(max_new_tokens=48), **kw)
        done["sweep"] = time.perf_counter() - t0

    def short():
        speculative_decode(tiny_pair.target, tiny_pair.draft, ids, DecodeSettings(k=3, max_new_tokens=8), **kw)
        done["short"] = time.perf_counter() - t0

    try:
        a = threading.Thread(target=sweep)
        a.start()
        _wait_until(lambda: devqueue.QUEUE.stats("cpu")["grants"] > 0 and time.perf_counter() - t0 > 0.2)
        b = threading.Thread(target=short)
        b.start()
        b.join(120)
        a.join(300)
    finally:
        handle.remove()
    assert done["short"] < 0.5 * done["sweep"], done


def test_run_files_without_the_flag_load_and_a_bad_flag_is_named():
    import json

    from specviz.data import runfile
    from specviz.core.errors import SpecvizError

    path = runfile.RECORDED_DIR / "capital-of-france-greedy.json"
    d = json.loads(path.read_text(encoding="utf-8"))
    for r in d["rounds"]:  # as a file recorded before the checks existed
        r.pop("outside_load", None)
        r.pop("stalled_s", None)
    assert runfile.load_export(json.dumps(d)).run.outside_load_rounds == 0
    d["rounds"][0]["outside_load"] = "yes"
    with pytest.raises(SpecvizError, match="outside_load"):
        runfile.load_export(json.dumps(d))
    d["rounds"][0]["outside_load"] = True
    assert runfile.load_export(json.dumps(d)).run.outside_load_rounds == 1
    assert "stalled_s" not in d["rounds"][0] and runfile.load_export(json.dumps(d)).run.stalled_s == 0.0
    for bad in (-1, "x", float("inf")):
        d["rounds"][0]["stalled_s"] = bad
        with pytest.raises(SpecvizError, match="stalled_s"):
            runfile.load_export(json.dumps(d))
    d["rounds"][0]["stalled_s"] = 0.25
    assert runfile.load_export(json.dumps(d)).run.stalled_s == 0.25


# --------------------------------------------------------------------------
# model work on the device's worker: one thread, one team of OpenMP threads, not niced with the pages


def _cores_shared() -> int:
    n = devqueue.QUEUE.threads.get("cpu")
    if not n:
        pytest.skip("one core, or an OpenMP runtime that keeps no per-thread count: share_cores() left it")
    return n


@pytest.mark.cores
def test_the_cores_go_to_the_worker_wherever_pytorch_runs_on_gnu_openmp_with_two_cores():
    import os

    if os.environ.get(devqueue.ENV_SHARE_CORES) == "0" or tuning.libgomp() is None or (os.cpu_count() or 1) < 2:
        pytest.skip("turned off, or not GNU OpenMP, or one core")
    assert devqueue.QUEUE.threads.get("cpu", 0) > 1  # share_cores() did not fall back


@pytest.mark.cores
def test_model_work_from_any_thread_runs_on_one_worker_with_all_the_cores_threads():
    n = _cores_shared()

    def where():
        return threading.get_ident(), torch.get_num_threads()

    seen = {devqueue.run("cpu", where), on_new_thread(lambda: devqueue.run("cpu", where)),
            on_new_thread(lambda: devqueue.run("cpu", where))}
    assert len(seen) == 1, seen  # the same thread, whoever asked
    worker, threads = seen.pop()
    assert worker != threading.get_ident() and threads == n == devqueue.model_threads("cpu") > 1
    assert on_new_thread(torch.get_num_threads) == 1  # a page's own work runs on one core


@pytest.mark.cores
def test_a_float32_product_in_mkl_runs_on_all_the_workers_cores():
    """transformers as shipped sends a float32 Linear to MKL, which keeps its own thread count: on the worker
    it must use the worker's threads, not the one a page gets."""
    n = _cores_shared()
    if tuning.mkl_threads(1) is None:
        pytest.skip("no MKL in this PyTorch build")
    x, w = torch.randn(8, 1024), torch.randn(4096, 1024)  # (8, 1024) @ (1024, 4096): MKL's sgemm

    def cores_used():
        torch.nn.functional.linear(x, w)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(40):
            torch.nn.functional.linear(x, w)
        return (time.process_time() - c0) / (time.perf_counter() - t0)

    assert devqueue.run("cpu", cores_used) > 0.7 * n, n  # the team's threads run (or spin) alongside
    assert cores_used() < 1.3  # a page's thread: one core


def test_run_carries_the_callers_context_and_modes_and_raises_its_errors():
    import contextvars

    var = contextvars.ContextVar("var", default="unset")
    var.set("page's")
    with torch.inference_mode():
        got = devqueue.run("cpu", lambda: (var.get(), torch.is_inference_mode_enabled()))
    assert got == ("page's", True)
    assert devqueue.run("cpu", torch.is_inference_mode_enabled) is False

    def boom():
        raise ValueError("from the worker")

    with pytest.raises(ValueError, match="from the worker"):
        devqueue.run("cpu", boom)
    assert devqueue.QUEUE.stats()["holders"] == []  # an error lets go of the device


def test_model_work_asked_for_by_a_niced_page_runs_at_the_workers_priority():
    def nice_here() -> int:
        return tuning.thread_nice(threading.get_native_id())

    worker_nice = devqueue.run("cpu", nice_here)
    if worker_nice >= 19:
        pytest.skip("the worker is at the lowest priority already")

    def page():  # a page thread (which may start niced: an app test lowers the thread that starts them)
        assert tuning.lower_thread(threading.get_native_id(), min(19, max(nice_here(), worker_nice) + 3))
        return nice_here(), devqueue.run("cpu", nice_here)

    page_nice, work_nice = on_new_thread(page)
    assert page_nice > worker_nice and work_nice == worker_nice


@pytest.mark.cores
def test_a_waiting_session_is_told_its_wait_from_the_last_turns_of_those_ahead():
    """Each owner ahead takes one turn before the waiting one: the estimate adds their last holds' times (one
    never timed counts as the median of those that were)."""
    q = devqueue.DeviceQueue(poll_s=0.01)
    for owner, s in (("a", 0.2), ("b", 0.05)):
        q.call("cpu", lambda: time.sleep(s), owner=owner)
    release = threading.Event()

    def take(owner: str, wait: bool) -> None:
        q.call("cpu", lambda: wait and release.wait(10), owner=owner)

    holder = threading.Thread(target=take, args=("a", True))
    holder.start()
    while q.stats("cpu")["holders"] != ["a"]:
        time.sleep(0.005)
    waiters = []
    for owner in ("b", "new", "c"):  # in this order
        waiters.append(threading.Thread(target=take, args=(owner, False)))
        waiters[-1].start()
        while q.ahead(owner, "cpu") is None:
            time.sleep(0.005)
    try:
        assert q.wait_estimate("a") is None  # it holds the device: not in line
        assert q.wait_estimate("b") == pytest.approx(0.2, abs=0.05)
        est_c = q.wait_estimate("c")  # a's turn, b's, and "new" (never timed: the median of a's and b's)
        assert est_c == pytest.approx(0.2 + 0.05 + (0.2 + 0.05) / 2, abs=0.1)
        assert q.wait_estimate("nobody") is None
    finally:
        release.set()
        for t in (holder, *waiters):
            t.join(10)


def test_a_slow_trace_write_holds_up_no_other_job(tmp_path):
    """A job's trace line is written by its caller, outside the queue's lock: while one job's line cannot be written
    yet (a FIFO no one reads), another thread asks the queue and gets the device at once; the lines arrive once
    read."""
    import os

    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    q = devqueue.DeviceQueue(trace=str(fifo))

    def hold_once(owner, what=None):
        q.call("cpu", lambda: done.append(owner), owner=owner, what=what)

    done: list = []
    writer = threading.Thread(target=hold_once, args=("a", "first"), daemon=True)
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and done == ["a"]  # blocked opening the FIFO for its line, the device let go
    asker = threading.Thread(target=lambda: (done.append(q.stats("cpu")["holders"]), hold_once("b")), daemon=True)
    asker.start()
    for _ in range(200):
        if len(done) == 3:
            break
        time.sleep(0.01)
    assert done == ["a", [], "b"], "the queue waited for a trace line to be written"
    fd, text, deadline = os.open(fifo, os.O_RDONLY), b"", time.monotonic() + 5
    try:  # a reader: the first line goes through, then the second hold's
        while text.count(b"\n") < 2 and time.monotonic() < deadline:
            text += os.read(fd, 4096) or (time.sleep(0.01) or b"")
    finally:
        os.close(fd)
    lines = [json.loads(r) for r in text.decode().splitlines()]
    assert [r["owner"] for r in lines] == ["a", "b"] and lines[0]["what"] == "first"
    writer.join(2.0), asker.join(2.0)
    assert not writer.is_alive() and not asker.is_alive()
