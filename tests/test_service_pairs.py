"""The server's store of loaded pairs (specviz.service.pairs), without streamlit: a draft's copy in another
precision is made in its slot's thread, like a load, so a second session asking for it meanwhile polls its
progress instead of waiting on a lock, and gets the same pair."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

TINY = Path(__file__).resolve().parent / "models_tiny.yaml"
pytestmark = pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml (the tiny test registry) is missing")


@pytest.fixture(autouse=True)
def tiny_store(monkeypatch):
    """The store pointed at the tiny registry, empty before and after."""
    from specviz.service import pairs

    monkeypatch.setenv("SPECVIZ_MODELS", str(TINY))
    pairs.clear()
    yield pairs
    pairs.clear()


def test_a_second_caller_polls_a_draft_copy_in_progress_and_gets_the_same_pair(monkeypatch, tiny_store):
    from specviz.decoding import models

    pairs = tiny_store
    pairs.load_pair_cached("tiny-random", "float32", "float32")  # the base pair: its float32 draft is copied
    real, gate, copying, copies = models.with_draft_precision, threading.Event(), threading.Event(), []

    def slow_copy(pair, precision, runner=None):  # the copy, held until the second caller has seen it run
        copies.append(precision)
        copying.set()
        assert gate.wait(20), "the copy was never let go"
        return real(pair, precision, runner)

    monkeypatch.setattr(models, "with_draft_precision", slow_copy)
    got, seen = {}, []

    def ask(who: str, show=None):
        try:
            pair, lease = pairs.lease_pair("tiny-random", "float32", "bfloat16", show=show)
            lease.release()
            got[who] = pair
        except BaseException as e:  # noqa: BLE001 — the assertions below say what went wrong
            got[who] = e

    def second_show(step):
        seen.append((step.title, step.stage, gate.is_set()))

    first = threading.Thread(target=ask, args=("first",), daemon=True)
    first.start()
    assert copying.wait(10), "the first caller never started the copy"
    second = threading.Thread(target=ask, args=("second", second_show), daemon=True)
    second.start()
    for _ in range(100):  # up to 10 s for the second caller to show the copy's progress
        if seen:
            break
        second.join(0.1)
    polled = list(seen)
    gate.set()
    first.join(20)
    second.join(20)
    assert polled, "the second caller was blocked while the copy ran: it never showed its progress"
    assert polled[0][0] == "Preparing a bfloat16 copy of the draft" and not polled[0][2]
    assert not isinstance(got["first"], BaseException), got["first"]
    assert got["second"] is got["first"] and got["first"].draft_precision == "bfloat16"
    assert copies == ["bfloat16"]  # one copy for both callers
    assert pairs.pair_ready("tiny-random", "float32", "bfloat16")


def test_a_wait_times_out_while_the_work_goes_on(tiny_store):
    pairs = tiny_store
    slot, gate = pairs.Slot(), threading.Event()
    slot.start(lambda progress: (progress("copying", 0.5), gate.wait(10), "pair")[-1])
    seen = []
    with pytest.raises(TimeoutError):
        slot.wait(lambda stage, frac: seen.append((stage, frac)), poll_s=0.01, timeout_s=0.1)
    assert ("copying", 0.5) in seen
    gate.set()
    assert slot.wait(lambda *_: None) == "pair"
