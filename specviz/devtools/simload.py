"""python -m specviz loadtest --simulate N: a room of sessions as threads of one process, no browser.

Thirty browsers do not fit on a 2-core machine next to the server, so each simulated session is a thread that
does what one press of a page's button does, through the same specviz functions the page calls, on one loaded
pair and this process's device queue (devqueue.QUEUE) and target-alone store (baseline.STORE):
  main     the main page's Run: engine.speculative_stream with the first run's settings (prompts.FIRST_RUN),
           then its target alone from baseline.shared_target_alone; the result is the measured speedup
  lab      the Acceptance lab's Measure: lab.acceptance_sweep over its default domains at T = 0, then
           lab.agreement_sweep; the result is the α table
  speedup  the Speedup page's k sweep: lab.k_sweep over its default ks, each against the target alone
  lesson   the first lesson's first step (lessons.run_step: greedy identity, a trial against the target alone)
--mix says how many of each (main:20,lab:4,speedup:3,lesson:3); they start at random moments within --spread
seconds. First each kind runs once untimed (loads, warms, and times the target alone the way a room's first
session does), then once alone: the solo reference. Then all sessions run at once, then each kind alone again:
a shared machine's speed drifts, so the reference is the mean of the solo runs before and after, as in the
browser test.

Per session: the wait until its result shows (from its start to its function's return), how much of it was spent
in the device queue (the queue's trace: asked -> granted of each of its holds) and computing (granted ->
released), and whether its figures stayed honest: its target passes' median time (Round.verify_s, as the runs
record them) against the solo runs', within honesty.TOLERANCE, its speedup against the solo speedup, and
the rounds its runs flagged as under outside load. Per kind: the median, 90th percentile and worst of those.
A page also draws between rounds, which these threads do not: the waits here are the model work's alone.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from specviz.core import measure, prompts
from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings
from specviz.data.records import Run
from specviz.decoding.engine import speculative_stream
from specviz.device import devqueue
from specviz.teaching import baseline, lab, lessons
from specviz.devtools.honesty import TOLERANCE, within

KINDS = ("main", "lab", "speedup", "lesson")
SPEEDUP_KS = (1, 2, 4, 6, 8)  # the Speedup page's default k values
LAB_K = 4  # the Acceptance lab's default k (and one of the sweep's)


def parse_mix(text: str) -> dict[str, int]:
    """'main:20,lab:4' -> {'main': 20, 'lab': 4}; InvalidSetting on an unknown kind or a bad count."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, n = part.partition(":")
        if kind not in KINDS:
            raise InvalidSetting(f"--mix: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        try:
            count = int(n)
        except ValueError:
            raise InvalidSetting(f"--mix: {part!r} is not kind:count") from None
        if count < 0:
            raise InvalidSetting(f"--mix: {part!r} has a negative count")
        out[kind] = out.get(kind, 0) + count
    if not sum(out.values()):
        raise InvalidSetting("--mix names no session")
    return out


def default_mix(sessions: int) -> dict[str, int]:
    """A room of `sessions`: two thirds on the main page, the rest spread over the lab, the sweep and a lesson."""
    rest = sessions - round(2 * sessions / 3)
    return {"main": sessions - rest, "lab": (rest + 2) // 3, "speedup": (rest + 1) // 3, "lesson": rest // 3}


def percentile(xs, q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank: a value some session actually had; None for no values."""
    v = sorted(x for x in xs if x is not None)
    if not v:
        return None
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


# --------------------------------------------------------------------------
# what each button does


@dataclass
class Outcome:
    """What one press produced: its runs (speculative and target-alone, for the honesty check) and its
    speedup, where the page shows one."""

    spec_runs: list[Run]
    speedup: float | None = None


def _ids(pair, preset: prompts.Preset) -> list[int]:
    return prompts.encode(pair.tokenizer, preset.text, preset.chat)


def press_main(pair, max_new: int) -> Outcome:
    """The main page's Run with its first-run settings, then the shared target alone (main_controls, main_view)."""
    first = prompts.FIRST_RUN
    decode = DecodeSettings(k=first.k, k_policy=first.k_policy, max_new_tokens=max_new)
    stream = speculative_stream(pair.target, pair.drafter(), _ids(pair, prompts.preset(first.preset)),
                                decode, **pair.run_kw)
    for _ in stream:
        pass
    got = baseline.shared_target_alone(pair.target, stream.run, pair.shared_vocab)
    return Outcome([stream.run], measure.speedup(stream.run, got.run))


def press_lab(pair, max_new: int) -> Outcome:
    """The Acceptance lab's Measure with its defaults (pages/2_Acceptance_lab.py)."""
    presets = prompts.lab_prompts()
    ids = {d: _ids(pair, presets[d]) for d in prompts.LAB_DEFAULT_DOMAINS}
    sweep = lab.acceptance_sweep(pair.target, pair.draft, ids, [0.0], DecodeSettings(k=LAB_K, max_new_tokens=max_new),
                                 **pair.run_kw)
    lab.agreement_sweep(pair.target, pair.draft, ids, sweep, vocab=pair.shared_vocab)
    return Outcome([r for by_t in sweep.values() for r in by_t.values()])


def press_speedup(pair, max_new: int) -> Outcome:
    """The Speedup page's k sweep with its default ks (pages/3_Speedup.py); the speedup judged: at k = LAB_K."""
    ids = _ids(pair, prompts.preset(prompts.FIRST_RUN.preset))
    sweep = lab.k_sweep(pair.target, pair.chain_draft(), ids, SPEEDUP_KS, DecodeSettings(max_new_tokens=max_new),
                        **pair.run_kw)
    return Outcome([c.spec for c in sweep.values()], sweep[LAB_K].speedup)


def press_lesson(pair, max_new: int) -> Outcome:
    """The first lesson's first step on the loaded pair (pages/8_Lessons.py), a fresh session's memo."""
    ctx = lessons.Context(pair=pair, settings=replace(lessons.LESSON_SETTINGS, max_new_tokens=max_new))
    lessons.run_step(lessons.LESSONS[0].steps[0], ctx)
    trials = [v for k, v in ctx.memo.items() if k[0] == "trial"]
    return Outcome([t.run for t in trials], trials[0].baseline.get("speedup") if trials else None)


PRESS: dict[str, Callable[[Any, int], Outcome]] = {"main": press_main, "lab": press_lab,
                                                   "speedup": press_speedup, "lesson": press_lesson}


# --------------------------------------------------------------------------
# sessions


@dataclass
class Session:
    kind: str
    owner: str
    start_at: float = 0.0  # seconds after the room started
    wait_s: float | None = None  # from its start until its result was there
    queue_s: float = 0.0  # of which in the device queue (asked -> granted, over its holds)
    compute_s: float = 0.0  # and holding the device (granted -> released)
    holds: int = 0
    longest_queue_s: float = 0.0  # its longest single wait in the queue
    pass_s: float | None = None  # median target pass of its speculative runs (Round.verify_s)
    pass_over_solo: float | None = None
    speedup: float | None = None
    speedup_over_solo: float | None = None
    outside_load_rounds: int = 0
    stalled_s: float = 0.0  # waits for a core its runs' times left out (Round.stalled_s)
    other_s: float | None = None  # the rest of its wait: another session timing the shared target alone, Python
    rounds: int = 0  # rounds of its speculative runs
    shared_rounds: int = 0  # ... whose verify pass served other sessions too (Round.shared > 1)
    share_s: list = field(default_factory=list)  # each shared steady round's share: the pass ÷ the rounds it served
    error: str | None = None
    outcome: Outcome | None = field(default=None, repr=False)

    @property
    def honest(self) -> bool | None:
        """Its pass times (and speedup, where it has one) within TOLERANCE of the solo run's."""
        ratios = [r for r in (self.pass_over_solo, self.speedup_over_solo) if r is not None]
        return None if not ratios else all(within(r) for r in ratios)

    def record(self) -> dict:
        d = asdict(self)
        d.pop("outcome")
        d["honest"] = self.honest
        return d


def pass_s(runs: list[Run]) -> float | None:
    """The median target pass (verify) of the runs' rounds after the prompt was read."""
    v = [r.verify_s for run in runs for r in run.steady_rounds if r.k]
    return statistics.median(v) if v else None


def owner_times(trace: str) -> dict[str, dict]:
    """Each owner's holds in a queue trace (devqueue.ENV_TRACE lines): how many, seconds queued (asked ->
    granted), seconds held (granted -> released), the longest single queueing."""
    out: dict[str, dict] = {}
    try:
        with open(trace) as f:
            rows = [json.loads(line) for line in f]
    except FileNotFoundError:
        rows = []
    for r in rows:
        o = out.setdefault(r["owner"], {"holds": 0, "queue_s": 0.0, "compute_s": 0.0, "longest_queue_s": 0.0})
        q = max(0.0, r["granted"] - r["asked"])
        o["holds"] += 1
        o["queue_s"] += q
        o["compute_s"] += r["released"] - r["granted"]
        o["longest_queue_s"] = max(o["longest_queue_s"], q)
    return out


def _run_one(s: Session, pair, max_new: int, t0: float) -> None:
    """Wait for the session's moment, press its button under its own owner in the queue, time it."""
    time.sleep(max(0.0, t0 + s.start_at - time.monotonic()))
    started = time.monotonic()
    try:
        with devqueue.session(s.owner):
            s.outcome = PRESS[s.kind](pair, max_new)
        s.wait_s = time.monotonic() - started
    except Exception as e:  # noqa: BLE001 - one session's failure is reported, the room goes on
        s.error = f"{type(e).__name__}: {e}"


def run_sessions(sessions: list[Session], pair, max_new: int, trace: str) -> None:
    """Every session on a thread of its own, started at its start_at; their holds go to `trace`."""
    old, devqueue.QUEUE.trace = devqueue.QUEUE.trace, trace
    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=_run_one, args=(s, pair, max_new, t0), name=f"sim-{s.owner}")
                   for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        devqueue.QUEUE.trace = old
    times = owner_times(trace)
    for s in sessions:
        for k, v in times.get(s.owner, {}).items():
            setattr(s, k, v)
        if s.wait_s is not None:
            s.other_s = max(0.0, s.wait_s - s.queue_s - s.compute_s)
        if s.outcome is not None:
            s.pass_s = pass_s(s.outcome.spec_runs)
            s.speedup = s.outcome.speedup
            s.outside_load_rounds = sum(r.outside_load_rounds for r in s.outcome.spec_runs)
            s.stalled_s = sum(r.stalled_s for r in s.outcome.spec_runs)
            rounds = [r for run in s.outcome.spec_runs for r in run.rounds]
            s.rounds, s.shared_rounds = len(rounds), sum(r.shared > 1 for r in rounds)
            # after the prompt was read, as pass_s: a first round's pass also reads the whole prompt
            s.share_s = [r.shared_pass_s / r.shared for run in s.outcome.spec_runs for r in run.steady_rounds
                         if r.shared > 1]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _mean(xs) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def judge(sessions: list[Session], solo: dict[str, list[Session]]) -> None:
    """Each session's pass time and speedup over the mean of its kind's solo runs'."""
    for s in sessions:
        refs = solo.get(s.kind, [])
        s.pass_over_solo = _ratio(s.pass_s, _mean(r.pass_s for r in refs))
        s.speedup_over_solo = _ratio(s.speedup, _mean(r.speedup for r in refs))


def kind_summary(sessions: list[Session]) -> dict:
    """The figures of a group of sessions: waits (median, p90, worst), queue against compute, honesty."""
    done = [s for s in sessions if s.wait_s is not None]

    def spread(key: str) -> dict:
        v = [getattr(s, key) for s in done]
        return {"median": percentile(v, 50), "p90": percentile(v, 90), "worst": percentile(v, 100)}

    def off_one(key: str) -> dict:  # a ratio to the solo runs: its median and the one furthest from 1
        v = [getattr(s, key) for s in done if getattr(s, key) is not None]
        return {"median": percentile(v, 50), "furthest": max(v, key=lambda x: abs(x - 1), default=None)}

    judged = [s for s in done if s.honest is not None]
    return {"sessions": len(sessions), "finished": len(done), "errors": len(sessions) - len(done),
            "wait_s": spread("wait_s"), "queue_s": spread("queue_s"), "compute_s": spread("compute_s"),
            "other_s": spread("other_s"),
            "longest_queue_s": max((s.longest_queue_s for s in done), default=None),
            "queue_share": (sum(s.queue_s for s in done) / sum(s.wait_s for s in done)
                            if done and sum(s.wait_s for s in done) > 0 else None),
            "pass_over_solo": off_one("pass_over_solo"), "speedup_over_solo": off_one("speedup_over_solo"),
            "honest": sum(bool(s.honest) for s in judged), "judged": len(judged),
            "outside_load_rounds": sum(s.outside_load_rounds for s in done),
            "stalled_s": sum(s.stalled_s for s in done),
            "rounds": sum(s.rounds for s in done), "shared_rounds": sum(s.shared_rounds for s in done),
            "share_s": percentile([v for s in done for v in s.share_s], 50),
            "pass_s": percentile([s.pass_s for s in done if s.pass_s is not None], 50)}


@dataclass
class SimReport:
    pair: str
    mix: dict[str, int]
    spread_s: float
    max_new: int
    solo: dict[str, list[Session]]  # each kind alone, before and after the room
    sessions: list[Session]
    wall_s: float
    device: str = ""

    def summary(self) -> dict:
        kinds = [k for k in KINDS if any(s.kind == k for s in self.sessions)]
        return {"pair": self.pair, "device": self.device, "mix": self.mix, "spread_s": self.spread_s,
                "max_new_tokens": self.max_new, "wall_s": self.wall_s, "tolerance": TOLERANCE,
                "solo": {k: [s.record() for s in v] for k, v in self.solo.items()},
                "per_kind": {k: kind_summary([s for s in self.sessions if s.kind == k]) for k in kinds},
                "all": kind_summary(self.sessions),
                "sessions": [s.record() for s in self.sessions]}

    def markdown(self) -> str:
        s = self.summary()
        f = lambda v, spec=".1f": "–" if v is None else format(v, spec)  # noqa: E731
        lines = [f"# Simulated room: {sum(self.mix.values())} sessions on {self.pair} ({self.device})", "",
                 f"Mix {', '.join(f'{k} {n}' for k, n in self.mix.items())}; started within {self.spread_s:g} s; "
                 f"{self.max_new} new tokens per run; the room took {self.wall_s:.1f} s. Waits are from a "
                 "session's start until its result (the speedup; the lab's α table) was there, in seconds.", "",
                 "| kind | finished | solo wait | wait median | p90 | worst | in queue (median) | computing (median) "
                 "| other (median) | queue share | pass ÷ solo (median, furthest) | speedup ÷ solo (median, furthest) "
                 "| honest |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for k, v in [*s["per_kind"].items(), ("all", s["all"])]:
            solo = _mean(r["wait_s"] for r in s["solo"].get(k, []))
            lines.append(
                f"| {k} | {v['finished']}/{v['sessions']} | {f(solo)} | {f(v['wait_s']['median'])} | "
                f"{f(v['wait_s']['p90'])} | {f(v['wait_s']['worst'])} | {f(v['queue_s']['median'])} | "
                f"{f(v['compute_s']['median'])} | {f(v['other_s']['median'])} | "
                f"{f(v['queue_share'] and 100 * v['queue_share'], '.0f')} % | "
                f"{f(v['pass_over_solo']['median'], '.2f')}, {f(v['pass_over_solo']['furthest'], '.2f')} | "
                f"{f(v['speedup_over_solo']['median'], '.2f')}, {f(v['speedup_over_solo']['furthest'], '.2f')} | "
                f"{v['honest']}/{v['judged']} |")
        lines += ["", f"Honest: the session's median target pass (and its speedup, where it shows one) within "
                      f"{100 * TOLERANCE:.0f} % of the mean of its kind's solo runs before and after. Other: the "
                      "wait outside the queue and the device (another session timing the shared target alone, or a round "
                      "waiting in the verify pool for a shared pass). "
                      "Rounds flagged under outside load: "
                      f"{s['all']['outside_load_rounds']}; waits for a core left out of the runs' times: "
                      f"{s['all']['stalled_s']:.1f} s. Rounds whose verify pass was shared with other sessions: "
                      f"{s['all']['shared_rounds']} of {s['all']['rounds']}"
                      + (f"; after the prompt, a shared pass cost each round {1000 * s['all']['share_s']:.0f} ms "
                         f"(median), which is charged the {1000 * s['all']['pass_s']:.0f} ms of a pass of its own"
                         if s["all"]["share_s"] is not None and s["all"]["pass_s"] is not None else "") + "."]
        errors = [x for x in self.sessions if x.error]
        lines += [f"- {x.owner}: {x.error}" for x in errors[:10]]
        return "\n".join(lines) + "\n"


def simulate(pair, mix: dict[str, int], spread_s: float = 10.0, max_new: int = DecodeSettings.max_new_tokens,
             seed: int = DecodeSettings.seed,
             pair_name: str = "") -> SimReport:
    """A room on a loaded pair: each kind warmed and run solo, then every session at once (see the module)."""
    if spread_s < 0 or not math.isfinite(spread_s):
        raise InvalidSetting("--spread must be a number of seconds >= 0")
    rng = random.Random(seed)
    kinds = [k for k in KINDS if mix.get(k)]
    sessions = [Session(k, f"{k}-{i}", rng.uniform(0, spread_s)) for k in kinds for i in range(mix[k])]
    with tempfile.TemporaryDirectory() as tmp:
        # untimed: loads, warms each path, and times the target alone once, as a room's first sessions do
        run_sessions([Session(k, f"warm-{k}") for k in kinds], pair, max_new, f"{tmp}/warm")
        solo: dict[str, list[Session]] = {k: [] for k in kinds}

        def alone(when: str) -> None:  # one at a time: each kind's reference
            for k in kinds:
                one = Session(k, f"solo-{when}-{k}")
                run_sessions([one], pair, max_new, f"{tmp}/solo-{when}-{k}")
                solo[k].append(one)

        alone("before")
        t = time.monotonic()
        run_sessions(sessions, pair, max_new, f"{tmp}/room")
        wall = time.monotonic() - t
        alone("after")
    judge(sessions, solo)
    return SimReport(pair_name, {k: mix[k] for k in kinds}, spread_s, max_new, solo, sessions, wall,
                     str(getattr(pair, "device", "")))


def report_path(json_path: str | None) -> Path:
    """Where the report goes: --json, else simload-<pid>.json here (the markdown beside it, as .md)."""
    return Path(json_path or f"simload-{os.getpid()}.json")


def main(args) -> int:
    """The --simulate mode of loadtest.main (its parsed arguments)."""
    from specviz.decoding.models import load_pair

    mix = parse_mix(args.mix) if args.mix else default_mix(args.simulate)
    pair = load_pair(args.pair, registry=args.models, target_precision=getattr(args, "target_precision", None))
    name = pair.name if pair.target_precision == "float32" else f"{pair.name}, {pair.target_precision} target"
    rep = simulate(pair, mix, args.spread, args.max_new or prompts.FIRST_RUN.max_new_tokens, args.seed, name)
    md = rep.markdown()
    print(md, end="")
    out = report_path(args.json)
    out.write_text(json.dumps(rep.summary(), indent=1))
    out.with_suffix(".md").write_text(md)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0
