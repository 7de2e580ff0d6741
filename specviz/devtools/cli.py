"""The development tools' commands, which specviz/__main__.py adds to the command line of specviz/tools/cli.py:

    python -m specviz timing                  # every live lesson step and page button, timed (timing)
    python -m specviz loadtest --sessions 4   # browser sessions pressing Run at once on a real server (loadtest)
    python -m specviz laptop --memory-gb 5    # one Run under a memory budget from an empty cache (laptop)

timing takes the shared pair options of tools.cli; loadtest and laptop parse their own options (their --help too).
Each tool is imported only when its command runs.
"""

from __future__ import annotations

import argparse
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


def loadtest_main(argv: list[str]) -> int:
    from specviz.devtools import loadtest

    return loadtest.main(argv)


def laptop_main(argv: list[str]) -> int:
    from specviz.devtools import laptop

    return laptop.main(argv)


def add_parsers(sub) -> None:
    """timing's parser, and loadtest's and laptop's names for the command list (they parse their own options)."""
    add_timing_parser(sub)
    lt = sub.add_parser("loadtest", help="browser sessions pressing Run at once on a real server "
                                         "(specviz.devtools.loadtest)", add_help=False)
    lt.add_argument("rest", nargs=argparse.REMAINDER)
    lt.set_defaults(func=lambda a: loadtest_main(a.rest))
    lp = sub.add_parser("laptop", help="one main-page Run on a server with a small memory budget and an empty cache, "
                                       "timed and weighed (specviz.devtools.laptop)", add_help=False)
    lp.add_argument("rest", nargs=argparse.REMAINDER)
    lp.set_defaults(func=lambda a: laptop_main(a.rest))


COMMANDS = Commands(add=add_parsers, own={"loadtest": loadtest_main, "laptop": laptop_main})
