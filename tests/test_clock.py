"""The pass clock (specviz/device/clock.py): the rules that judge a pass for outside load, the watches that
collect the verdicts, and the machine's CPU time they are judged on."""

from __future__ import annotations

import time

import pytest

from specviz.device import clock


def test_the_share_rule():
    assert clock.outside_load(cpu_s=0.05, wall_s=0.2, threads=2)  # 12 % of two cores
    assert not clock.outside_load(cpu_s=0.38, wall_s=0.2, threads=2)  # 95 %
    assert not clock.outside_load(cpu_s=0.0, wall_s=0.001, threads=1)  # too short to judge


def test_a_watch_note_weighs_the_time_of_its_passes_under_outside_load():
    """One pass under load among many quiet ones is a note, not the warning; its share of the time decides."""
    with clock.watch() as w:
        clock.note_pass("cpu", 0.1, 0.01, 1)  # under load: 10 % of its core
        for _ in range(39):
            clock.note_pass("cpu", 0.1, 0.1, 1)
    note = w.note()
    assert note.what == "1 of 40 timed passes" and note.share == pytest.approx(0.1 / 4.0)
    assert not note.serious and "2.5%" in note.text and "Taken under outside load" not in note.text
    with clock.watch() as w:
        clock.note_pass("cpu", 0.1, 0.01, 1)
        for _ in range(9):
            clock.note_pass("cpu", 0.1, 0.1, 1)
    assert w.note().serious and w.note().text.startswith("Taken under outside load: 1 of 10 timed passes")
    assert clock.LoadNote.of("x", 1.0, 0.0).serious  # nothing timed to weigh it against: unknown, serious
    with clock.watch() as w:
        clock.note_pass("cpu", 0.1, 0.1, 1)
    assert w.note() is None


def test_nested_watches_with_equal_counts_leave_in_order():
    """A measurement around an engine run: both watches start at zero and see the same passes."""
    with clock.watch() as outer:
        with clock.watch() as inner:
            clock.note_pass("cpu", 0.1, 0.1, 1)
        clock.note_pass("cpu", 0.1, 0.1, 1)
    assert (outer.passes, inner.passes) == (2, 1)


def test_the_crowding_rule():
    """Other programs' CPU time, against the cores the passes' threads run on, over enough time to count it."""
    share = clock.OTHERS_SHARE
    assert clock.crowded(others_s=0.5 * 2 * share * 1.1, wall_s=0.5, threads=2)  # a little more than the share
    assert not clock.crowded(others_s=0.5 * 2 * share * 0.6, wall_s=0.5, threads=2)
    assert clock.crowded(others_s=0.5 * 2 * share * 0.6, wall_s=0.5, threads=1)  # the same, beside one thread
    assert not clock.crowded(others_s=0.2, wall_s=0.2, threads=2)  # too short: the kernel counts 10 ms ticks


def test_short_passes_are_judged_on_other_programs_time_together():
    """Draft steps are too short to judge one by one; a round's passes, taken together, are not. A pass whose
    process got its whole share of the cores still ran under outside load when other programs ran beside it
    (PyTorch's threads spin while they wait for each other, so the share alone misses it)."""
    with clock.watch() as w:
        verdicts = [clock.note_pass("cpu", 0.03, 0.06, 2, others_s=0.03 * 2 * clock.OTHERS_SHARE * 1.2)
                    for _ in range(10)]
    assert not any(verdicts) and w.busy_passes == 0  # each too short alone
    assert w.crowded and w.busy and w.others_wall_s == pytest.approx(0.3)
    note = w.note()
    assert note.serious and note.text.startswith("Taken under outside load: the 10 timed passes")
    with clock.watch() as w:  # as many passes, other programs using less than OTHERS_SHARE
        for _ in range(10):
            clock.note_pass("cpu", 0.03, 0.06, 2, others_s=0.03 * 2 * clock.OTHERS_SHARE * 0.5)
    assert not w.busy and w.note() is None
    with clock.watch() as w:  # too little time to judge
        for _ in range(5):
            clock.note_pass("cpu", 0.03, 0.06, 2, others_s=0.03 * 2 * 0.9)
    assert not w.busy
    with clock.watch() as w:  # unknown (no /proc/stat) or a GPU pass: not judged on it
        clock.note_pass("cpu", 0.5, 1.0, 2)
        clock.note_pass("cuda:0", 0.5, 0.01, 2, others_s=1.0)
    assert not w.busy and w.others_wall_s == 0
    with clock.watch() as w:  # a long pass is judged on its own
        assert clock.note_pass("cpu", 0.3, 0.6, 2, others_s=0.3)
    assert w.busy_passes == 1 and w.note().text.startswith("Taken under outside load: 1 of 1 timed passes")


@pytest.mark.cores
def test_other_programs_cpu_time_is_read_from_the_machine(other_program):
    import os

    def idle_s():  # every CPU's idle time, from another file than the one machine_cpu_s reads
        with open("/proc/uptime") as f:
            return float(f.read().split()[1])

    t0, m0, i0, c0 = time.perf_counter(), clock.machine_cpu_s(), idle_s(), time.process_time()
    time.sleep(0.5)
    wall, busy, idle = time.perf_counter() - t0, clock.machine_cpu_s() - m0, idle_s() - i0
    others = busy - (time.process_time() - c0)
    assert others >= 0.3, others  # the other program's half second of a core, give or take ticks
    # busy time and idle time share the CPUs' time: the busy time leaves the idle time out, whatever else runs
    assert busy + idle == pytest.approx(wall * os.cpu_count(), abs=0.03 * os.cpu_count() + 0.03), (busy, idle)
