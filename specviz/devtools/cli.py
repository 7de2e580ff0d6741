"""The development tools' commands, which specviz/__main__.py adds to the command line of specviz/tools/cli.py:

    python -m specviz timing                  # every live lesson step and page button, timed (timing)
    python -m specviz loadtest --sessions 4   # browser sessions pressing Run at once on a real server (loadtest)
    python -m specviz laptop --memory-gb 5    # one Run under a memory budget from an empty cache (laptop)
    python -m specviz servicecost             # the model service as a thread or a process: GIL, memory, start-up

timing takes the shared pair options of tools.cli; loadtest and laptop parse their own options (their --help too).
Each tool is imported only when its command runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings
from specviz.tools.cli import Commands, add_pair_options, check_writable, pair_from_args


def cmd_timing(args) -> int:
    """Time every live lesson step and every page button (specviz.devtools.timing)."""
    from specviz.devtools import timing

    if not 0 < args.limit < math.inf:  # nan and inf too: every item would be within it
        raise InvalidSetting(f"--limit must be a finite number of seconds above 0, got {args.limit:g}")
    check_writable("--out", args.out)
    check_writable("--md", args.md)
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    args.draft = args.target = args.device = None
    pair = pair_from_args(args)
    report = timing.timing(pair, lessons_too=args.what in ("all", "lessons"),
                           buttons_too=args.what in ("all", "buttons"), seed=args.seed, limit_s=args.limit,
                           cold=args.cold, only=args.only, say=say)
    table = timing.markdown(report)
    for path, text in ((args.out, timing.to_json(report)), (args.md, table)):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            say(f"wrote {path}")
    print(table)
    return 0


def add_timing_parser(sub) -> None:
    t = sub.add_parser("timing", help="seconds of every live lesson step and page button (specviz.devtools.timing)",
                       description="Time every live lesson step and the work behind every page button, at the "
                                   "pages' defaults, on one loaded pair.")
    add_pair_options(t)
    t.add_argument("--models", metavar="YAML", default=argparse.SUPPRESS, help="registry file")
    t.add_argument("--what", choices=["all", "lessons", "buttons"], default="all", help="default: all")
    t.add_argument("--only", help="only the items whose name contains this (a lesson key, a page's name)")
    t.add_argument("--limit", type=float, default=30.0, help="seconds one item may take (default 30)")
    t.add_argument("--cold", action="store_true",
                   help="clear the shared target-alone store before each item (every item measures its own)")
    t.add_argument("--seed", type=int, default=DecodeSettings.seed,
                   help=f"the lessons' seed (default {DecodeSettings.seed}, as on the page)")
    t.add_argument("--out", metavar="FILE.json", help="write the JSON report here")
    t.add_argument("--md", metavar="FILE.md", help="write the markdown table here (it also goes to stdout)")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    t.set_defaults(func=cmd_timing)


def cmd_servicecost(args) -> int:
    """A draft step beside a drawing page, in-process and in a service process; that process's memory and
    start-up (specviz.devtools.servicecost)."""
    from specviz.devtools import servicecost

    if min(args.steps, args.reps, args.spawns) < 1:
        raise InvalidSetting("--steps, --reps and --spawns must be at least 1")
    check_writable("--out", args.out)
    report = servicecost.servicecost(args.draft, steps=args.steps, reps=args.reps, spawns=args.spawns)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    print(servicecost.markdown(report))
    return 0


def add_servicecost_parser(sub) -> None:
    s = sub.add_parser("servicecost", help="the model service as a thread or a process: GIL contention, memory, "
                                           "start-up (specviz.devtools.servicecost)",
                       description="Time a draft step alone, next to a drawing page thread, and in a service "
                                   "process (arms interleaved); weigh and time that process's start.")
    s.add_argument("--draft", choices=["real", "tiny"], default="real",
                   help="real: the default pair's int8 draft (default); tiny: random weights")
    s.add_argument("--steps", type=int, default=15, help="steps per arm and repetition (default 15)")
    s.add_argument("--reps", type=int, default=5, help="repetitions of the interleaved arms (default 5)")
    s.add_argument("--spawns", type=int, default=3, help="service processes started, for start-up (default 3)")
    s.add_argument("--out", metavar="FILE.json", help="write the JSON report here")
    s.set_defaults(func=cmd_servicecost)


def loadtest_main(argv: list[str]) -> int:
    from specviz.devtools import loadtest

    return loadtest.main(argv)


def laptop_main(argv: list[str]) -> int:
    from specviz.devtools import laptop

    return laptop.main(argv)


def add_parsers(sub) -> None:
    """timing's and servicecost's parsers, and loadtest's and laptop's names for the command list (they parse
    their own options)."""
    add_timing_parser(sub)
    add_servicecost_parser(sub)
    lt = sub.add_parser("loadtest", help="browser sessions pressing Run at once on a real server "
                                         "(specviz.devtools.loadtest)", add_help=False)
    lt.add_argument("rest", nargs=argparse.REMAINDER)
    lt.set_defaults(func=lambda a: loadtest_main(a.rest))
    lp = sub.add_parser("laptop", help="one main-page Run on a server with a small memory budget and an empty cache, "
                                       "timed and weighed (specviz.devtools.laptop)", add_help=False)
    lp.add_argument("rest", nargs=argparse.REMAINDER)
    lp.set_defaults(func=lambda a: laptop_main(a.rest))


COMMANDS = Commands(add=add_parsers, own={"loadtest": loadtest_main, "laptop": laptop_main})
