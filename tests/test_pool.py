"""Verify passes of several sessions shared in one forward pass (specviz/decoding/pool.py), on tiny models.

Sessions are threads, each a distinct owner of the real device queue (devqueue.session).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import statistics
import threading
import time

import pytest
import torch
from tiny import tiny_lm

from specviz.core.errors import SpecvizError
from specviz.core.settings import DecodeSettings
from specviz.data import runfile
from specviz.data.records import Run
from specviz.decoding import engine
from specviz.decoding import pool as pool_mod
from specviz.decoding.pool import VerifyPool, VerifyRequest, solo_key
from specviz.device import devqueue
from specviz.device.runner import InlineRunner
from specviz.modeling import batched
from specviz.modeling.lm import CachedLM
from specviz.teaching import explain

PROMPTS = ([1, 2, 3], [5, 6, 7, 8], [9, 10])
SETTINGS = (DecodeSettings(k=4, max_new_tokens=40), DecodeSettings(k=4, max_new_tokens=40),
            DecodeSettings(k=4, max_new_tokens=40, temperature=1.0, seed=7))


def _packed_target(**kw):
    """A tiny target whose Linears are packed (fastlinear), as the float32 target is: row-exact, so it may share."""
    from specviz.modeling import fastlinear

    if not fastlinear.available():
        pytest.skip("oneDNN's linear is not available here: no target can share its passes")
    target = fastlinear.enable(tiny_lm(0, **kw).float(), pack=True)  # float32: what fastlinear packs
    assert batched.can_batch([CachedLM(target)])
    return target


@pytest.fixture(scope="module")
def pair():
    """A packed target (_packed_target) and a float32 draft."""
    return _packed_target(), tiny_lm(1).float()


@pytest.fixture(autouse=True)
def _pooling_on(monkeypatch):
    monkeypatch.setenv("SPECVIZ_BATCH_VERIFY", "1")
    monkeypatch.setattr(pool_mod, "SOLO_KEPT", 100_000)  # keep every solo timing: each median can be checked


def _in_sessions(fns: dict) -> dict:
    """Run each fn in its own thread as its own queue owner; {owner: what it returned or raised}."""
    out = {}

    def go(owner, fn):
        with devqueue.session(owner):
            try:
                out[owner] = fn()
            except BaseException as e:  # noqa: BLE001 - the test looks at it
                out[owner] = e

    threads = [threading.Thread(target=go, args=item, daemon=True) for item in fns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def _decode(target, draft, i):
    return engine.speculative_decode(target, draft, PROMPTS[i], SETTINGS[i])


def _medians(table, key) -> set[float]:
    """Every median the table could have given for key: its entries are only ever appended, and its first is
    left out once there are others."""
    e = table.entries(key, steady=False)
    return {e[0]} | {statistics.median(e[1:j]) for j in range(2, len(e) + 1)} if e else set()


@pytest.mark.cores
def test_sessions_share_verify_passes_with_the_tokens_of_each_run_alone(pair):
    target, draft = pair
    alone = [_decode(target, draft, i) for i in range(3)]
    assert all(r.shared == 1 for run in alone for r in run.rounds)  # one session: never pooled
    shared = 0
    for _ in range(3):  # a few tries: sharing needs the threads to meet at verify
        runs = _in_sessions({f"s{i}": (lambda i=i: _decode(target, draft, i)) for i in range(3)})
        runs = [runs[f"s{i}"] for i in range(3)]
        for run, ref in zip(runs, alone):
            assert isinstance(run, Run), run
            assert run.token_ids == ref.token_ids  # greedy and sampling alike: sharing changes no token
        shared += sum(r.shared > 1 for run in runs for r in run.rounds)
        if shared:
            break
    assert shared
    table = pool_mod.pool_for(target).solo
    for run in runs:
        for r in run.rounds:
            if r.shared > 1:
                key = (r.prefill_tokens + 1 + r.k, 0)  # rows fed, context bucket (the prompts are short)
                assert r.verify_s in _medians(table, key)  # a pass of its own, measured: never its share
                assert r.shared_pass_s > 0
        # the wait in the pool is not decoding: the run's time is its rounds' (and the loop's own bit)
        assert run.decode_s <= 1.25 * run.rounds_s + 0.02, (run.decode_s, run.rounds_s)
    note = explain.shared_note(runs[0].rounds + runs[1].rounds + runs[2].rounds)
    assert note is not None and "shared with other sessions" in note


def _rounds(run: Run) -> list[tuple]:
    """What each round decided and recorded, its timings left out."""
    return [(r.drafted, r.u, r.p_drafted, r.emitted, r.p_top, r.residual_top) for r in run.rounds]


def test_shared_passes_cut_a_wider_targets_logits_to_the_runs_vocabulary():
    """A real target scores more ids than the tokenizer has (its head is padded): a run decodes over the ids
    both models share, and a shared pass's logits must be cut to them as a pass of its own is. Here the target
    scores 72 ids, the draft and the runs 64."""
    target, draft = _packed_target(vocab=72), tiny_lm(1).float()

    def decode(i):
        return engine.speculative_decode(target, draft, PROMPTS[i], SETTINGS[i], vocab=64)

    alone = [decode(i) for i in range(3)]
    shared = 0
    for _ in range(3):  # a few tries: sharing needs the threads to meet at verify
        runs = _in_sessions({f"v{i}": (lambda i=i: decode(i)) for i in range(3)})
        runs = [runs[f"v{i}"] for i in range(3)]
        for run, ref in zip(runs, alone):
            assert isinstance(run, Run), run
            assert run.token_ids == ref.token_ids and _rounds(run) == _rounds(ref)
        shared += sum(r.shared > 1 for run in runs for r in run.rounds)
        if shared:
            break
    assert shared


def _long_prompt(n: int) -> list[int]:
    return [(7 * i + 3) % 64 for i in range(n)]


def _crossing_run(target, draft) -> tuple[Run, collections.Counter, collections.Counter, bool]:
    """A run whose context crosses a CONTEXT_BUCKET boundary in a round of a few rows: (the run, how many of
    its verify passes had each key before the pass, how many of those the table must have kept (their rounds
    not under outside load), whether the round that crossed was kept)."""
    prompt = _long_prompt(pool_mod.CONTEXT_BUCKET - 6)
    run = engine.speculative_decode(target, draft, prompt, DecodeSettings(k=2, max_new_tokens=16))
    fed, kept, crossed, n = collections.Counter(), collections.Counter(), False, len(prompt)
    for r in run.rounds:
        rows, before = r.prefill_tokens + 1 + r.k, n - 1 - r.prefill_tokens  # the target's cache held `before`
        key = (rows, before // pool_mod.CONTEXT_BUCKET)
        fed[key] += 1
        kept[key] += not r.outside_load
        if (before + rows) // pool_mod.CONTEXT_BUCKET > key[1] and r.prefill_tokens == 0:
            crossed = not r.outside_load
        n += len(r.emitted)
    return run, fed, kept, crossed


def test_an_unshared_pass_is_kept_under_the_context_the_cache_had_before_it():
    """A round's verify pass of its own is kept in the SoloCost table under the context the target's cache held
    when the pass began, not after it: the round whose pass takes the context past CONTEXT_BUCKET tokens is
    kept in the bucket below."""
    for _ in range(5):  # a round under outside load is not kept: try until the one that crosses is
        target, draft = _packed_target(positions=512), tiny_lm(0, positions=512).float()
        run, fed, kept, crossed = _crossing_run(target, draft)
        if crossed:
            break
    assert crossed
    table = pool_mod.pool_for(target).solo
    for key in fed:
        assert kept[key] <= len(table.entries(key, steady=False)) <= fed[key], key


def test_a_pools_own_pass_is_kept_under_the_context_the_cache_had_before_it():
    """The same for a request the pool runs on its own (its key had no measured pass): a cache of 254 tokens
    fed 4 more."""
    model, before = _packed_target(positions=512), _long_prompt(pool_mod.CONTEXT_BUCKET - 2)
    for _ in range(5):  # a pass under outside load is not kept: try until one is not
        lm, box = CachedLM(model), []
        lm.feed(before)
        gen = _member(lm, [5, 6, 7, 8], box)
        next(gen)
        pool = VerifyPool()
        assert pool.verify(VerifyRequest(lm, [5, 6, 7, 8], keep=3, gen=gen)) == ("round", len(before) + 4)
        assert pool.solo.entries((4, 1), steady=False) == []
        if not box[0].outside_load:
            break
    assert not box[0].outside_load
    assert pool.solo.entries((4, 0), steady=False) == [box[0].verify_s]


def test_a_session_alone_verifies_inline_in_its_round_s_job(pair):
    """Alone, a round's verify pass runs in the round's own job: one grant of the device per round, as
    without pooling (a pooled pass would take a second one)."""
    target, draft = pair
    before = devqueue.QUEUE.stats("cpu")["grants"]
    run = _decode(target, draft, 0)
    assert devqueue.QUEUE.stats("cpu")["grants"] - before == len(run.rounds)
    assert all(r.shared == 1 and r.shared_pass_s == 0 for r in run.rounds)


def test_no_sharing_when_turned_off(pair, monkeypatch):
    monkeypatch.setenv("SPECVIZ_BATCH_VERIFY", "0")
    target, draft = pair
    runs = _in_sessions({f"o{i}": (lambda i=i: _decode(target, draft, i)) for i in range(3)})
    assert all(isinstance(r, Run) for r in runs.values()), runs
    assert all(r.shared == 1 and r.shared_pass_s == 0 for run in runs.values() for r in run.rounds)
    assert explain.shared_note(runs["o0"].rounds) is None


def _member(lm: CachedLM, ids: list[int], box: list):
    """A round suspended at its verify request, as the engine's is: it takes the result and yields a value."""
    got = yield
    box.append(got)
    yield ("round", lm.n)


def _reference(model, prompt: list[int], ids: list[int], keep: int) -> torch.Tensor:
    lm = CachedLM(model)  # on the device's worker, as the shared pass: a pass's bits depend on its thread count
    lm.feed(prompt)
    return lm.feed(ids, keep)


def _requests(model, n: int):
    """n requests on their own caches of model, each after its own prompt: (requests, boxes, references)."""
    reqs, boxes, refs = [], [], []
    for i in range(n):
        prompt, ids = [1 + i, 2, 3 + 2 * i], [7 + i, 4, 9, 11 - i]
        lm = CachedLM(model)  # the queue's runner
        lm.feed(prompt)
        box: list = []
        gen = _member(lm, ids, box)
        next(gen)
        reqs.append(VerifyRequest(lm, ids, keep=3, gen=gen))
        boxes.append(box)
        refs.append(_reference(model, prompt, ids, 3))
    return reqs, boxes, refs


def _priced(model, n: int, seconds: float):
    """A pool and n requests (as _requests) whose keys each have one measured pass of `seconds`."""
    reqs, boxes, refs = _requests(model, n)
    pool = VerifyPool()
    for req in reqs:
        pool.solo.add(req.key, seconds)
    return pool, reqs, boxes, refs


class _Holder:
    """Another session holding the device until released."""

    def __init__(self):
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        assert self.held.wait(10)

    def _hold(self):
        with devqueue.session("holder"):
            devqueue.run("cpu", lambda: (self.held.set(), self.release.wait(30)))


def _wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def _start(pool, reqs, owners):
    out, threads = {}, []
    for req, owner in zip(reqs, owners):
        def go(req=req, owner=owner):
            with devqueue.session(owner):
                try:
                    out[owner] = pool.verify(req)
                except BaseException as e:  # noqa: BLE001
                    out[owner] = e
        threads.append(threading.Thread(target=go, daemon=True))
        threads[-1].start()
        n = len(threads)
        _wait_for(lambda n=n: len(devqueue.QUEUE.stats("cpu")["waiting"]) == n)  # in line in this order
    return out, threads


def test_one_shared_pass_gives_each_its_own_logits_and_charges_its_measured_solo_time(pair):
    pool, reqs, boxes, refs = _priced(pair[0], 3, 0.123)
    holder = _Holder()
    out, threads = _start(pool, reqs, ["a", "b", "c"])
    _wait_for(lambda: devqueue.QUEUE.stats("cpu")["waiting"] == ["a", "b", "c"])  # each request a job in line
    grants = devqueue.QUEUE.stats("cpu")["grants"]
    holder.release.set()
    for t in threads:
        t.join(30)
    assert devqueue.QUEUE.stats("cpu")["grants"] == grants + 1  # one grant, one pass, for the three
    for owner, req, box, ref in zip("abc", reqs, boxes, refs):
        assert out[owner] == ("round", req.lm.n)
        got = box[0]
        assert torch.equal(got.logits, ref)  # its own rows, not a neighbour's
        assert (got.shared, got.verify_s) == (3, 0.123)  # charged its measured solo cost, not the pass / 3
        assert got.shared_pass_s > 0


def test_a_request_with_no_measured_cost_runs_its_own_pass_and_fills_the_table(pair):
    model = pair[0]
    reqs, boxes, refs = _requests(model, 2)
    pool = VerifyPool()
    holder = _Holder()
    _, threads = _start(pool, reqs, ["a", "b"])
    holder.release.set()
    for t in threads:
        t.join(30)
    for req, box, ref in zip(reqs, boxes, refs):
        got = box[0]
        assert torch.equal(got.logits, ref)
        assert got.shared == 1 and got.shared_pass_s == 0 and got.verify_s > 0
    kept = sum(not box[0].outside_load for box in boxes)  # a pass under outside load is not this device's speed
    assert len(pool.solo.entries(reqs[0].key, steady=False)) == kept


def test_a_keys_first_pass_is_left_out_of_what_rounds_are_charged_once_it_has_others():
    """A row count's first pass also sets up its kernels: a one-off, not what a pass of its own costs."""
    from specviz.decoding.pool import SoloCost

    table = SoloCost()
    assert table.median((5, 0)) is None
    table.add((5, 0), 0.5)
    assert table.median((5, 0)) == 0.5  # nothing else measured yet: the one pass there is
    table.add((5, 0), 0.1)
    table.add((5, 0), 0.2)
    table.add((9, 0), 0.3)
    assert table.median((5, 0)) == pytest.approx(0.15) and table.median((9, 0)) == 0.3
    assert table.entries((5, 0), steady=False) == [0.5, 0.1, 0.2]


def test_a_cancelled_request_leaves_the_line_and_the_others_share_their_pass(pair):
    pool, reqs, boxes, refs = _priced(pair[0], 3, 0.05)
    n_before = reqs[0].lm.n
    holder = _Holder()
    out, threads = _start(pool, reqs, ["a", "b", "c"])
    _wait_for(lambda: "a" in devqueue.QUEUE.stats("cpu")["waiting"])
    assert devqueue.QUEUE.cancel("a") == 1
    threads[0].join(10)
    assert isinstance(out["a"], devqueue.Cancelled)
    holder.release.set()
    for t in threads:
        t.join(30)
    assert not boxes[0] and reqs[0].lm.n == n_before  # the dropped round was never resumed
    for owner, box, ref in zip("bc", boxes[1:], refs[1:]):
        assert out[owner][0] == "round"
        assert torch.equal(box[0].logits, ref) and box[0].shared == 2


def test_a_pool_shares_only_caches_of_one_model_and_keys_passes_by_rows_and_context(pair):
    model = pair[0]
    lms = [CachedLM(model, runner=InlineRunner()) for _ in range(2)]
    assert batched.can_batch(lms)
    assert not batched.can_batch([lms[0], CachedLM(pair[1], runner=InlineRunner())])
    assert solo_key(lms[0], [1, 2]) == (2, 0)


def _run_with_shared(pair) -> Run:
    target, draft = pair
    run = engine.speculative_decode(target, draft, PROMPTS[0], SETTINGS[0])
    rounds = list(run.rounds)
    rounds[0] = dataclasses.replace(rounds[0], shared=3, shared_pass_s=0.0125)
    return dataclasses.replace(run, rounds=rounds)


def test_run_files_keep_the_sharing_and_refuse_a_bad_one(pair):
    run = _run_with_shared(pair)
    back = Run.from_json(run.to_json())
    assert (back.rounds[0].shared, back.rounds[0].shared_pass_s) == (3, 0.0125)
    assert back.rounds[1].shared == 1
    runfile.validate_run(back)
    d = json.loads(run.to_json())
    for r in d["rounds"]:  # an older file: no sharing recorded
        del r["shared"], r["shared_pass_s"]
    old = Run.from_dict(d)
    assert all(r.shared == 1 and r.shared_pass_s == 0.0 for r in old.rounds)
    d["rounds"][0]["shared"] = "x"
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.shared"):
        Run.from_dict(d)
    d["rounds"][0]["shared"] = 0
    with pytest.raises(SpecvizError, match=r"rounds\[0\]\.shared"):
        Run.from_dict(d)


class _Raises:
    """A head that raises: one session's pass fails (its own, or the shared one at its rows)."""

    def __call__(self, hidden):
        raise RuntimeError("this session's head broke")


def test_one_sessions_failure_fails_its_round_alone_in_a_shared_pass(pair):
    """The shared pass raises at one session's head, after every layer has appended to every cache: the caches
    are as they were, the others' rounds get their own logits, and only the broken session fails."""
    pool, reqs, boxes, refs = _priced(pair[0], 3, 0.05)
    n_before = reqs[1].lm.n
    reqs[1].lm.head = _Raises()
    holder = _Holder()
    out, threads = _start(pool, reqs, ["a", "b", "c"])
    holder.release.set()
    for t in threads:
        t.join(30)
    assert isinstance(out["b"], RuntimeError) and "head broke" in str(out["b"])
    assert not boxes[1] and reqs[1].lm.n == n_before
    for owner, req, box, ref in zip("ac", (reqs[0], reqs[2]), (boxes[0], boxes[2]), (refs[0], refs[2])):
        assert out[owner] == ("round", req.lm.n)
        assert torch.equal(box[0].logits, ref)  # its cache had no rows of the failed pass left in it


def test_one_sessions_failure_fails_its_round_alone_in_passes_of_their_own(pair):
    reqs, boxes, refs = _requests(pair[0], 3)  # no measured cost: each runs its own pass
    reqs[0].lm.head = _Raises()
    pool = VerifyPool()
    holder = _Holder()
    out, threads = _start(pool, reqs, ["a", "b", "c"])
    holder.release.set()
    for t in threads:
        t.join(30)
    assert isinstance(out["a"], RuntimeError)
    for owner, box, ref in zip("bc", boxes[1:], refs[1:]):
        assert out[owner][0] == "round" and torch.equal(box[0].logits, ref)


class _Stop(Exception):
    """What Streamlit raises in a page's on_wait when the script must stop (a rerun, a closed tab)."""


def test_a_waiting_round_leaves_the_pool_within_a_second_of_its_page_stopping(pair):
    pool, reqs, boxes, _ = _priced(pair[0], 2, 0.05)
    n_before = reqs[1].lm.n
    holder = _Holder()
    stop, heard, out = threading.Event(), [], {}

    def on_wait(ahead):
        heard.append(ahead)
        if stop.is_set():
            raise _Stop

    def go(owner, req, hook):
        with devqueue.session(owner, hook):
            try:
                out[owner] = pool.verify(req)
            except BaseException as e:  # noqa: BLE001
                out[owner] = e

    lead = threading.Thread(target=go, args=("a", reqs[0], None), daemon=True)
    lead.start()
    _wait_for(lambda: "a" in devqueue.QUEUE.stats("cpu")["waiting"])  # the leader queues for the device
    follower = threading.Thread(target=go, args=("b", reqs[1], on_wait), daemon=True)
    follower.start()
    _wait_for(lambda: devqueue.QUEUE.stats("cpu")["waiting"] == ["a", "b"] and heard)
    assert heard[0] >= 1  # its page is told that others hold or wait for the device
    t0 = time.monotonic()
    stop.set()
    follower.join(5)
    assert not follower.is_alive() and time.monotonic() - t0 < 1.0
    assert isinstance(out["b"], _Stop) and devqueue.QUEUE.stats("cpu")["waiting"] == ["a"]  # its place is free
    holder.release.set()
    lead.join(30)
    assert out["a"][0] == "round"
    assert not boxes[1] and reqs[1].lm.n == n_before  # the stopped round was never resumed


def test_a_run_whose_pool_wait_was_stopped_goes_on_from_its_round_with_the_tokens_of_a_run_alone(pair, monkeypatch):
    """A page stopped while its round waits for a shared pass (a rerun) calls next() again on its next run: the
    round goes on from its verify request, and the run writes what it writes alone."""
    target, draft = pair
    alone = _decode(target, draft, 0)
    holders, stop = [], threading.Event()

    def others_arrive(self, lm):  # another session asks for the device while this round drafts
        if stop.is_set() and not holders:
            holders.append(_Asking())
            _wait_for(lambda: "holder" in devqueue.QUEUE.stats("cpu")["waiting"])
        return VerifyPool.eligible(lm)

    def on_wait(ahead):
        if stop.is_set():
            raise _Stop

    monkeypatch.setattr(VerifyPool, "wanted", others_arrive)
    with devqueue.session("page", on_wait):
        stream = engine.speculative_stream(target, draft, PROMPTS[0], SETTINGS[0])
        first = next(stream)
        stop.set()
        with pytest.raises(_Stop):
            next(stream)  # its round waits for the device behind the other session, and its page stops
        stop.clear()
        holders[0].release.set()
        rounds = [first] + list(stream)
    assert stream.run.token_ids == alone.token_ids
    assert len(rounds) == len(alone.rounds)


class _Asking(_Holder):
    """Another session that asks for the device now and holds it, once granted, until released."""

    def __init__(self):
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()


def test_a_round_granted_just_as_its_page_stops_is_kept_for_the_next_call(pair, monkeypatch):
    """A page that stops while its round waits for the device cancels the round's job; one granted at that very
    moment has run: the next next() takes that round, and the run writes what it writes alone."""
    monkeypatch.setenv("SPECVIZ_BATCH_VERIFY", "0")  # each round one job of its own
    target, draft = pair
    alone = _decode(target, draft, 0)
    holder = _Holder()

    def on_wait(ahead):
        if ahead is None or holder.release.is_set():
            return
        grants = devqueue.QUEUE.stats("cpu")["grants"]
        holder.release.set()  # the device frees, and this round is granted while its page stops
        _wait_for(lambda: devqueue.QUEUE.stats("cpu")["grants"] > grants)
        raise _Stop

    with devqueue.session("page", on_wait):
        stream = engine.speculative_stream(target, draft, PROMPTS[0], SETTINGS[0])
        with pytest.raises(_Stop):
            next(stream)
        rounds = list(stream)
    assert stream.run.token_ids == alone.token_ids
    assert len(rounds) == len(alone.rounds)
