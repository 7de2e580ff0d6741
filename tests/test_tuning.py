"""The server's thread settings (specviz/device/tuning.py): niceness, the GIL's switch interval, the frozen heap.
How model work runs at the worker's priority whatever a page's: tests/test_devqueue.py."""

from __future__ import annotations

import threading

import pytest

from on_thread import on_new_thread
from specviz.core.errors import InvalidSetting
from specviz.device import tuning


def test_lowering_a_thread_never_raises_its_priority():
    def go():
        me = threading.get_native_id()
        start = tuning.thread_nice(me)
        if start > 16:
            pytest.skip("this thread is near the lowest priority already")
        assert tuning.lower_thread(me, start + 3) and tuning.thread_nice(me) == start + 3
        assert tuning.lower_thread(me, start) and tuning.thread_nice(me) == start + 3  # left as it is
        return True

    assert on_new_thread(go)  # niceness is per thread: the test's own thread keeps its priority


@pytest.mark.parametrize("raw, want", [("", tuning.PAGE_NICE), ("0", 0), (" 19 ", 19), ("7", 7)])
def test_the_page_niceness_setting(raw, want):
    assert tuning.page_nice(raw) == want


@pytest.mark.parametrize("raw", ["-1", "20", "ten", "1.5"])
def test_a_bad_page_niceness_is_named(raw):
    with pytest.raises(InvalidSetting, match=tuning.ENV_PAGE_NICE):
        tuning.page_nice(raw)


@pytest.mark.parametrize("raw, want", [("", tuning.SWITCH_MS), ("5", 5.0), (" 0.25 ", 0.25)])
def test_the_switch_interval_setting(raw, want):
    assert tuning.switch_ms(raw) == want


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "1000", "nan"])
def test_a_bad_switch_interval_is_named(raw):
    with pytest.raises(InvalidSetting, match=tuning.ENV_SWITCH):
        tuning.switch_ms(raw)


def test_handover_sets_pythons_switch_interval():
    import sys

    was = sys.getswitchinterval()
    try:
        assert tuning.handover(2.0) == pytest.approx(0.002)
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(was)


def test_freeze_heap_takes_what_is_alive_out_of_the_collectors_walk(monkeypatch):
    import gc

    kept = [[i] for i in range(100_000)]  # like a loaded pair: many objects the collector tracks, all kept
    gc.unfreeze()
    try:
        before = len(gc.get_objects())
        assert tuning.freeze_heap() >= len(kept)
        assert len(gc.get_objects()) < before - len(kept)  # a full collection no longer walks them
        frozen = gc.get_freeze_count()
        monkeypatch.setenv(tuning.ENV_GC_FREEZE, "0")
        more = [[i] for i in range(1000)]
        # turned off: nothing new frozen (a frozen object another thread lets go of leaves the count)
        assert tuning.freeze_heap() == 0 and gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    assert kept[-1] == [99_999] and more[0] == [0]  # frozen or not, nothing alive was lost
