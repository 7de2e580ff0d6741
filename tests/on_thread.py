"""A test's function run on a thread of its own (per-thread settings: OpenMP counts, niceness)."""

from __future__ import annotations

import threading


def on_new_thread(fn):
    """fn() on a thread of its own; what it returned, or what it raised."""
    box: dict = {}

    def go():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread
            box["error"] = e

    t = threading.Thread(target=go)
    t.start()
    t.join(60)
    if "error" in box:
        raise box["error"]
    return box["value"]
