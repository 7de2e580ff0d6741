"""Other programs on this machine, busy while a test measures (outside load)."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager

_DUTY = """import sys, time
duty = float(sys.argv[1])
while True:  # busy for duty of every 10 ms
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duty * 0.01:
        pass
    time.sleep((1 - duty) * 0.01)
"""


@contextmanager
def busy_programs(n: int, duty: float = 1.0):
    """n other programs on this machine, each busy on a core (for `duty` of the time) while the block runs."""
    code = "while True: pass" if duty >= 1 else _DUTY
    procs = [subprocess.Popen([sys.executable, "-c", code, str(duty)]) for _ in range(n)]
    time.sleep(0.3)  # started and spinning
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextmanager
def passes_losing_the_cpu(model, seconds: float = 0.02):
    """While the block runs, each forward pass of `model` first loses the CPU for `seconds` (a sleep: wall time
    passes, no CPU time is used), as when another program takes the cores mid-pass: outside load."""
    handle = model.register_forward_pre_hook(lambda m, a: time.sleep(seconds))
    try:
        yield
    finally:
        handle.remove()


def team_or_skip() -> frozenset:
    """The CPU worker's team (devqueue.team), or skip: there is none with one core, another OpenMP runtime,
    or no /proc schedstat, and then no waits are taken off."""
    import pytest

    from specviz.device import devqueue

    team = devqueue.team("cpu")
    if not team:
        pytest.skip("no worker team here (one core, another OpenMP runtime, or no /proc schedstat)")
    return team
