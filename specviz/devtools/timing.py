"""`python -m specviz timing`: how long each live lesson step and each page's button takes on this machine.

A class waits for each of them; the target is LIMIT_S (30 s) apiece. Every live lesson step runs as the
Lessons page runs it (lessons.run_step and lessons.figure, a fresh lessons.Context per lesson so a lesson's
steps reuse its runs), and every page button runs the work behind it at the page's default settings
(page_records.BUTTONS, which the pages call too). One process, like one server: the target alone that
baseline.STORE keeps is reused by every item after the first that asks for it (--cold clears it before each).

Each item records its seconds, whether it is within the limit, the machine's 1-minute load average before
and after, and how many forward calls of the target and of the draft it made (a count of work that does not
depend on the machine). The report is JSON (--out) and a markdown table (stdout, --md).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from specviz.core.errors import SpecvizError
from specviz.teaching import baseline, lessons, page_records

LIMIT_S = 30.0
FORMAT = "specviz-timing/1"


@dataclass(frozen=True)
class Item:
    kind: str  # "lesson step" | "button"
    what: str  # "Lessons: identity · same_text", "Speedup: Run the k sweep"
    seconds: float
    within: bool  # seconds <= the limit
    load_before: float  # 1-minute load average
    load_after: float
    target_calls: int  # forward calls of the target model
    draft_calls: int  # forward calls of the draft model
    error: str = ""  # a SpecvizError's message: the step could not run


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # no load average on this system
        return float("nan")


class Calls:
    """Counts forward calls of a model (a pre-hook on its top module) while in use."""

    def __init__(self, model):
        self.n = 0
        self.handle = model.register_forward_pre_hook(self._count) if hasattr(model, "register_forward_pre_hook") \
            else None

    def _count(self, module, args):
        self.n += 1

    def close(self) -> None:
        if self.handle is not None:
            self.handle.remove()


def _time(kind: str, what: str, fn: Callable[[], object], pair, limit_s: float) -> Item:
    """Run fn once, timed, counting the pair's forward calls."""
    before = _load()
    calls = {"target": Calls(pair.target), "draft": Calls(pair.draft)}
    error = ""
    t0 = time.perf_counter()
    try:
        fn()
    except SpecvizError as e:  # an item that cannot run here is reported, and the others still run
        error = str(e)
    seconds = time.perf_counter() - t0
    for c in calls.values():
        c.close()
    return Item(kind, what, seconds, seconds <= limit_s and not error, before, _load(), calls["target"].n,
                calls["draft"].n, error)


def lesson_items(pair, *, seed: int = lessons.LESSON_SETTINGS.seed, limit_s: float = LIMIT_S, cold: bool = False,
                 say: Callable[[str], None] = lambda m: None, only: str | None = None) -> list[Item]:
    """Every live lesson step, in order, a fresh Context per lesson (its steps reuse its runs, as on the page)."""
    out = []
    for les in lessons.LESSONS:
        if only and only not in les.key:
            continue
        ctx = lessons.Context(pair=pair, settings=replace(lessons.LESSON_SETTINGS, seed=seed))
        for step in les.steps:
            if cold:
                baseline.STORE.clear()

            def run(step=step, ctx=ctx):
                outcome = lessons.run_step(step, ctx)
                lessons.figure(step, ctx, outcome)

            say(f"lesson {les.key} · {step.key}")
            out.append(_time("lesson step", f"Lessons: {les.key} · {step.key}", run, pair, limit_s))
    return out


def button_items(pair, *, limit_s: float = LIMIT_S, cold: bool = False, say: Callable[[str], None] = lambda m: None,
                 only: str | None = None) -> list[Item]:
    """The work behind every page button in page_records.BUTTONS, at the page's defaults."""
    out = []
    for b in page_records.BUTTONS:
        what = f"{b.page}: {b.label}"
        if only and only.lower() not in what.lower():
            continue
        if cold:
            baseline.STORE.clear()
        say(what)
        out.append(_time("button", what, lambda b=b: b.work(pair, None), pair, limit_s))
    return out


def timing(pair, *, lessons_too: bool = True, buttons_too: bool = True, seed: int = lessons.LESSON_SETTINGS.seed,
           limit_s: float = LIMIT_S, cold: bool = False,
           only: str | None = None, say: Callable[[str], None] = lambda m: None) -> dict:
    """The report: the machine, the pair, and one Item per lesson step and button (as dicts)."""
    items: list[Item] = []
    if lessons_too:
        items += lesson_items(pair, seed=seed, limit_s=limit_s, cold=cold, say=say, only=only)
    if buttons_too:
        items += button_items(pair, limit_s=limit_s, cold=cold, say=say, only=only)
    return {"format": FORMAT, "limit_s": limit_s, "cold": cold,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "pair": {"name": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
                     "draft_precision": str(pair.draft_precision)},
            "items": [asdict(i) for i in items]}


def to_json(report: dict) -> str:
    return json.dumps(report, indent=1, ensure_ascii=False)


def markdown(report: dict) -> str:
    """The table: what, seconds, within the limit, the load average before and after, forward calls."""
    lim = report["limit_s"]
    p = report["pair"]
    lines = [f"Pair {p['name']} ({p['dtype']}, {p['device']}, draft {p['draft_precision']}); "
             f"{report['machine']['cpus']} CPUs; limit {lim:g} s; "
             + ("target-alone store cleared before each item" if report["cold"] else
                "one process: the target alone measured once is reused, as on one server"), "",
             f"| what | seconds | ≤ {lim:g} s? | load before → after | target calls | draft calls |",
             "|---|---:|:---:|---|---:|---:|"]
    for i in report["items"]:
        ok = "error: " + i["error"] if i["error"] else ("yes" if i["within"] else "**no**")
        lines.append(f"| {i['what']} | {i['seconds']:.1f} | {ok} | {i['load_before']:.2f} → {i['load_after']:.2f} "
                     f"| {i['target_calls']} | {i['draft_calls']} |")
    steps = [i for i in report["items"] if i["kind"] == "lesson step"]
    if steps:
        lines += ["", f"Lesson steps: {sum(i['seconds'] for i in steps):.1f} s in all, the longest "
                      f"{max(i['seconds'] for i in steps):.1f} s; "
                      f"{sum(not i['within'] for i in report['items'])} item(s) over {lim:g} s or failed."]
    return "\n".join(lines)
