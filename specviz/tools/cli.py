"""Command line: `python -m specviz models | prepare | run | bench | record | claims-data`.

    python -m specviz models                      # pairs, available or not, how to get each
    python -m specviz prepare                     # assemble + convert + cache the default pair, as a run loads it
    python -m specviz run --prompt "def fib(n):"  # one speculative run, coloured by round
    python -m specviz run --tree 16 --prompt ...  # the same with a token tree of 16 nodes per round
    python -m specviz bench --tiny                # specviz.tools.bench: every method against the target alone

The development tools' commands (timing, loadtest, laptop: specviz/devtools/cli.py) are added by
specviz/__main__.py through Commands; this module never imports them.

Every SpecvizError is printed as `error: <message>` with exit code 2, never a
traceback. Progress of long work goes to stderr; results go to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from specviz.teaching import explain, render
from specviz.core import limits, prompts
from specviz.data import playback
from specviz.core.errors import InvalidSetting, SpecvizError
from specviz.core.settings import DecodeSettings

RESET = "\x1b[0m"
DIM = "\x1b[2m"
THREADS_MAX = 256  # bench --threads: PyTorch's threads (a machine has far fewer cores)


# -----------------------------------------------------------------------------
# progress on stderr


class ProgressPrinter:
    """progress(stage, fraction) -> one line per stage; live percentages on a terminal."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.stage = None
        self.t0 = time.perf_counter()
        self.last_draw = 0.0

    def __call__(self, stage: str, fraction: float | None = None) -> None:
        now = time.perf_counter()
        if stage != self.stage:
            if self.tty and self.stage is not None:
                self.stream.write("\n")
            self.stage = stage
            self.last_draw = 0.0
            if not self.tty:
                self.stream.write(f"[{now - self.t0:5.1f}s] {stage}\n")
                self.stream.flush()
        if self.tty and (now - self.last_draw > 0.1 or fraction == 1.0):
            pct = f" {fraction * 100:3.0f}%" if fraction is not None else ""
            self.stream.write(f"\r\x1b[K[{now - self.t0:5.1f}s] {stage}{pct}")
            self.stream.flush()
            self.last_draw = now

    def done(self) -> None:
        if self.tty and self.stage is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.stage = None


# -----------------------------------------------------------------------------
# rendering a Run


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """Text of each token such that "".join(pieces) == decode(ids), multi-byte chars kept whole."""
    pieces, shown = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1])
        if text.endswith("\ufffd") and i + 1 < len(ids):
            pieces.append("")  # half a UTF-8 character: its last token carries it
            continue
        pieces.append(text[len(shown):])
        shown = text
    return pieces


def render_text(run, tokenizer, color: bool) -> str:
    """The new text; with colour, each token styled by what its round did (render.ansi_tokens)."""
    pieces = token_pieces(tokenizer, run.token_ids)
    if not color:
        return "".join(pieces)
    return render.ansi_tokens(run, lambda t: tokenizer.decode([t]), texts=pieces)


def stats_lines(run) -> list[str]:
    n = len(run.token_ids)
    corrections = sum(1 for r in run.rounds if r.extra_kind == "correction")
    bonuses = sum(1 for r in run.rounds if r.extra_kind == "bonus")
    return [
        f"tokens          {n} ({run.stop_reason})",
        f"rounds          {len(run.rounds)}  ({corrections} corrections, {bonuses} bonus tokens)",
        f"alpha           {run.alpha:.3f} ± {run.alpha_stderr:.3f}  (accepted / judged drafts)",
        f"accepted/drafted {run.n_accepted}/{run.n_drafted} = {run.acceptance_rate:.3f}",
        f"tokens per pass {run.tokens_per_pass:.2f}  ({run.target_passes} target passes)",
        f"speed           {run.tokens_per_s:.2f} tokens/s  (decode {run.decode_s:.2f} s, the prompt read in "
        f"round 1 included: draft {run.draft_s:.2f} s, verify {run.verify_s:.2f} s)",
    ]


def tree_stats_lines(run) -> list[str]:
    n, rounds = len(run.token_ids), len(run.rounds)
    corrections = sum(1 for r in run.rounds if r.extra_kind == "correction")
    s = run.settings
    if s.get("shape") == "spine":
        shape = (f"spine           a chain ({s.get('k_policy')} k, depth <= {s['max_depth']}), "
                 f"{explain.count(s['branch'] - 1, 'sibling')} where the draft's top probability < {s.get('doubt')}; "
                 f"{run.n_nodes} nodes in all")
    else:
        shape = (f"tree            up to {s['budget']} nodes, {s['branch']} children per node, depth <= "
                 f"{s['max_depth']}; {run.n_nodes} nodes drafted in all")
    return [
        f"tokens          {n} ({run.stop_reason})",
        f"rounds          {rounds}  ({corrections} corrections, {rounds - corrections} bonus tokens or cut)",
        shape,
        f"accepted        {run.n_accepted} drafted tokens ({run.n_accepted / max(rounds, 1):.2f} per round)",
        f"tokens per pass {run.tokens_per_pass:.2f}  ({run.target_passes} target passes, {run.draft_passes} "
        "draft passes)",
        f"speed           {run.tokens_per_s:.2f} tokens/s  (decode {run.decode_s:.2f} s, the prompt read in "
        "round 1 included)",
    ]


# -----------------------------------------------------------------------------
# commands


def cmd_models(args) -> int:
    from specviz.modeling.config import default_registry, load_registry
    from specviz.decoding.models import list_pairs

    reg = load_registry(args.models) if args.models else default_registry()
    for st in list_pairs(reg):
        spec = reg.pairs[st.name]
        mark = " (default)" if st.is_default else ""
        state = "available" if st.available else "unavailable"
        print(f"{st.name}{mark}: {state}")
        print(f"    {spec.draft.label} -> {spec.target.label}")
        if args.verbose or not st.available:
            for part in st.reason.split("; "):
                print(f"    {part}")
        if st.how_to_get:
            print(f"    to get it: {st.how_to_get}")
    return 0


def _flag(flag: str, check):
    """check(), its InvalidSetting said as one line that starts with the flag it is about."""
    try:
        return check()
    except InvalidSetting as e:
        raise InvalidSetting(f"{flag}: {e}") from None


def cmd_prepare(args) -> int:
    from specviz.decoding import models
    from specviz.modeling import quant
    from specviz.modeling.store import prepare

    # the copies a run with these precisions loads (a default run's by default); a bad value names its flag
    device = models.default_device()
    _flag("--draft-precision", lambda: quant.check(args.draft_precision, device))
    _flag("--target-precision",
          lambda: models.check_target_precision(args.target_precision, models.DEFAULT_DTYPE, device))
    precisions = models.cached_precisions(args.pair, registry=args.models, draft_precision=args.draft_precision,
                                          target_precision=args.target_precision)
    progress = ProgressPrinter()
    try:
        out = prepare(args.pair, progress=progress, registry=args.models, verify=args.verify, precisions=precisions)
    finally:
        progress.done()
    for role, what in out.items():
        print(f"{role}: {what}")
    return 0


def _read_stdin() -> str:
    """stdin as UTF-8 text (InvalidSetting for another encoding, e.g. a UTF-16 file piped in)."""
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidSetting(f"--prompt -: stdin is not UTF-8 text (byte {e.start} is {data[e.start]:#04x}); "
                             "convert it, e.g. with iconv -t UTF-8.") from None


def _read_prompt(args) -> str:
    prompt = _read_stdin() if args.prompt == "-" else args.prompt
    if prompt is None or not prompt.strip():
        raise InvalidSetting("The prompt is empty: give one with --prompt \"...\" (or --prompt - to read stdin).")
    return prompt


def decode_settings(args) -> DecodeSettings:
    """The run's decoding settings, checked before any model is loaded (InvalidSetting: a typo costs no load)."""
    from specviz.decoding import engine, kpolicy

    k_policy = args.k_policy or prompts.FIRST_RUN.k_policy  # not given: the main page's first run's
    settings = DecodeSettings(k=args.k, k_policy=k_policy, temperature=args.temperature, top_p=args.top_p,
                              top_k=args.top_k, max_new_tokens=args.max_new_tokens, seed=args.seed)
    engine.check_decoding(settings)
    if (shape := tree_shape(args)) is not None:
        from specviz.decoding.tree import check_tree

        check_tree(shape["budget"], shape["branch"], shape["max_depth"], shape["shape"], shape["doubt"])
    kpolicy.make_k_policy(args.k, k_policy)  # InvalidSetting for an unknown policy
    limits.check_max_new_tokens(args.max_new_tokens)
    return settings


def tree_shape(args) -> dict | None:
    """tree_decode's shape arguments for --tree N or --spine; None for a chain."""
    from specviz.decoding.tree import DOUBT, SPINE

    def given(v, default):
        return default if v is None else v

    if args.spine:
        return dict(shape="spine", budget=given(args.tree, SPINE["budget"]), branch=args.branch,
                    max_depth=given(args.max_depth, SPINE["max_depth"]), doubt=given(args.doubt, DOUBT))
    if args.doubt is not None:
        raise InvalidSetting("--doubt applies to a spine: add --spine.")
    if args.tree is None:
        return None
    return dict(shape="tree", budget=args.tree, branch=args.branch, max_depth=given(args.max_depth, 8), doubt=DOUBT)


def pair_from_args(args):
    """The pair the command's pair options name (add_pair_options), loaded with progress on stderr."""
    from specviz.decoding.models import load_pair

    progress = ProgressPrinter()
    try:
        return load_pair(args.pair, draft=args.draft, target=args.target, dtype=args.dtype, device=args.device,
                         progress=progress, registry=args.models, draft_precision=args.draft_precision,
                         draft_head=args.draft_head, target_precision=args.target_precision)
    finally:
        progress.done()


def _generate(args, pair, input_ids: list[int], decode: DecodeSettings):
    """One run: a token tree with --tree, else a chain drafted by the draft model or prompt lookup."""
    from specviz.decoding import engine
    from specviz.decoding.drafters import PromptLookupDrafter

    # compare only ids both models know (padded embeddings)
    common = dict(eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    lookup = args.drafter == PromptLookupDrafter.name
    if (shape := tree_shape(args)) is not None:
        from specviz.decoding.tree import tree_decode

        if lookup or args.k_policy is not None:
            print("note: --tree and --spine draft with the draft model (a spine with the best-k chooser); "
                  "--drafter and --k-policy apply to chains", file=sys.stderr)
        pair.check_shared_vocab(TREE_WHAT)
        what = (f"a spine with siblings below {shape['doubt']}" if shape["shape"] == "spine"
                else f"a tree of {shape['budget']} nodes")
        print(f"generating with {pair.name}, {pair.draft_label} draft, {pair.target_precision} target ({what}, "
              f"temperature={args.temperature}) ...", file=sys.stderr)
        # a spine is stopped by the best-k chooser (--k-policy applies to chains)
        return tree_decode(pair.target, pair.draft, input_ids, replace(decode, k_policy="best"), **shape, **common)
    drafter = PromptLookupDrafter() if lookup else pair.drafter()
    head = getattr(drafter, "head_name", "full")
    who = "prompt lookup" if lookup else f"{pair.draft_label} draft" + (f", {head} head" if head != "full" else "")
    print(f"generating with {pair.name}, {who}, {pair.target_precision} target (k={decode.k}, k policy {decode.k_policy}, "
          f"temperature={args.temperature}) ...", file=sys.stderr)
    return engine.speculative_decode(pair.target, drafter, input_ids, decode, **common)


def _print_run(args, run, tokenizer) -> None:
    """The Run as JSON (--json), or its text coloured by round, a legend and its numbers."""
    if args.json:
        print(run.to_json())
        return
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    print(render_text(run, tokenizer, color))
    print()
    if color:
        print(render.legend_ansi())
    dim = DIM if color else ""
    end = RESET if color else ""
    for line in (stats_lines if tree_shape(args) is None else tree_stats_lines)(run):
        print(f"{dim}{line}{end}")
    if (note := playback.load_note(run)) is not None:
        print(note.text)  # as the pages say it next to their figures: the speed above may not be this machine's
    if (waited := explain.stalled_note(run.stalled_s, run.rounds_s)) is not None:
        print(waited)


TREE_WHAT = "--tree or --spine (a token tree)"


def cmd_run(args) -> int:
    from specviz.decoding.models import check_device

    prompt = _read_prompt(args)
    decode = decode_settings(args)
    check_device(args.device)  # before a load
    if tree_shape(args) is not None and args.draft is None and args.target is None:
        from specviz.decoding.models import check_spec_shared_vocab

        check_spec_shared_vocab(TREE_WHAT, args.pair, args.models)  # before a load of the pair
    pair = pair_from_args(args)
    tok = pair.tokenizer
    if not args.raw and not getattr(tok, "chat_template", None):
        print("note: this model has no chat template; the prompt is fed as-is", file=sys.stderr)
    input_ids = prompts.encode(tok, prompt, chat=not args.raw)
    run = _generate(args, pair, input_ids, decode)
    _print_run(args, run, tok)
    return 0


def _int_list(text: str, flag: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4] (sorted, no repeats); InvalidSetting naming the flag."""
    try:
        return sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InvalidSetting(f"{flag} must be a comma list of integers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def check_bench_args(a: argparse.Namespace) -> argparse.Namespace:
    """bench's comma lists as lists, checked (InvalidSetting), and `method_names`: the methods to run."""
    from specviz.tools.bench import DEFAULT_DOMAINS, select_methods

    a.ks = _int_list(a.ks, "--ks")
    if not a.ks or min(a.ks) < 1 or max(a.ks) > limits.K_MAX:
        raise InvalidSetting(f"--ks must list integers from 1 to {limits.K_MAX} (the engine's largest k), "
                             f"got {a.ks!r}")
    a.trees = _int_list(a.trees, "--trees")
    a.draft_exits = _int_list(a.draft_exits, "--draft-exits")
    if any(n < 1 for n in a.draft_exits):
        raise InvalidSetting(f"--draft-exits must list layer counts of at least 1, got {a.draft_exits!r}")
    a.modes = _names(a.modes)
    if not a.modes or any(m not in ("greedy", "sample") for m in a.modes):
        raise InvalidSetting(f"--modes must be greedy, sample or both, got {a.modes!r}")
    a.domains = list(DEFAULT_DOMAINS) if a.domains is None else _names(a.domains)
    known = prompts.bench_prompts(a.prompt_set)
    bad = [d for d in a.domains if d not in known]
    if bad or not a.domains:
        raise InvalidSetting(f"unknown domain(s) {bad}; choose from {', '.join(known)}")
    if a.reps < 1 or a.max_new_tokens < 1:
        raise InvalidSetting("--reps and --max-new-tokens must be >= 1")
    if a.cost_reps < 1:
        raise InvalidSetting(f"--cost-reps must be >= 1 (repetitions of the forward-cost measurement), got "
                             f"{a.cost_reps}")
    if a.threads is not None and not 1 <= a.threads <= THREADS_MAX:
        raise InvalidSetting(f"--threads must be from 1 to {THREADS_MAX} (PyTorch's threads), got {a.threads}")
    limits.check_max_new_tokens(a.max_new_tokens)
    for flag, path in (("--out", a.out), ("--figure", a.figure)):
        check_writable(flag, path)  # before the benchmark runs, not after
    if not (a.temperature > 0 and math.isfinite(a.temperature)):
        raise InvalidSetting("--temperature must be > 0 (sample mode); greedy is its own mode")
    a.method_names = select_methods(a.ks, a.trees, _names(a.methods) if a.methods else None, a.draft_exits)
    return a


def check_writable(flag: str, path: str | None) -> None:
    """InvalidSetting naming the flag when a file could not be written at `path` (None: not asked for)."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InvalidSetting(f"{flag} {path!r} is a folder; give a file name")
    if not os.path.isdir(folder):
        raise InvalidSetting(f"{flag} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise InvalidSetting(f"{flag} {path!r}: the folder {folder!r} is not writable")


def parse_bench_args(argv: list[str]) -> argparse.Namespace:
    """`python -m specviz bench` options, parsed and checked (what bench.bench takes)."""
    return check_bench_args(build_parser().parse_args(["bench", *argv]))


def cmd_bench(args) -> int:
    from specviz.tools import bench

    args = check_bench_args(args)
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.batch:
        return _batch_bench(args, say)

    report = bench.bench(args, progress=say)
    text = bench.to_json(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        say(f"wrote {args.out}")
    if args.figure:
        with open(args.figure, "w") as f:
            f.write(bench.figure(report).to_json())
        say(f"wrote {args.figure}")
    if args.json and not args.out:
        print(text)
    else:
        print(bench.markdown(report))
    return 0


def _batch_bench(args, say) -> int:
    """bench --batch: the pair's target, B sessions' verify passes one after another and batched."""
    from specviz.tools import batchbench, bench

    sizes = _int_list(args.batch_sizes, "--batch-sizes")
    if not sizes or min(sizes) < 1 or max(sizes) > 64:
        raise InvalidSetting(f"--batch-sizes must list integers from 1 to 64, got {sizes!r}")
    if not 1 <= args.batch_k <= limits.K_MAX or not 1 <= args.batch_context <= 32768 or args.batch_reps < 1:
        raise InvalidSetting(f"--batch-k must be from 1 to {limits.K_MAX}, --batch-context from 1 to 32768 and "
                             "--batch-reps at least 1")
    pair = bench.load(args)
    points = batchbench.batch_bench(pair.target, sizes, args.batch_k + 1, args.batch_context, args.batch_reps, say)
    device = next(pair.target.parameters()).device
    t_precision = getattr(pair, "target_precision", "float32")  # --tiny's pair has none: float32
    precision = t_precision if t_precision != "float32" else str(pair.dtype).replace("torch.", "")
    about = f"{pair.name}'s target, {precision} on {device}"
    if not all(p.exact for p in points):
        about += batchbench.NOT_EXACT_NOTE
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"about": about, "points": [p.record() for p in points]}, f, indent=1)
        say(f"wrote {args.out}")
    print(batchbench.markdown(points, about))
    return 0


def cmd_record(args) -> int:
    """Make the shipped recorded set again in one sitting, with one profile (specviz.tools.record.record_all)."""
    from specviz.tools import record

    args.draft = args.target = args.device = None
    t0 = time.perf_counter()
    pair = pair_from_args(args)
    record.record_all(pair, progress=lambda msg: print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True))
    return 0


def cmd_claims_data(args) -> int:
    """Rewrite one bench group of specviz/core/measured.json from a bench report (--json --out)."""
    import datetime

    from specviz.core import claims
    from specviz.tools import bench

    try:
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
        if report.get("format") != bench.FORMAT:
            raise ValueError(f"not a bench report ({bench.FORMAT})")
        path = args.data or claims.MEASURED_PATH
        data = claims.update_group(claims.load_measured(path), args.group, bench.claims_figures(report),
                                   bench.command_of(report), args.machine or bench.machine_of(report),
                                   args.date or datetime.date.today().isoformat())
    except (OSError, ValueError, KeyError) as e:
        raise InvalidSetting(f"{args.report}: {e}") from e
    claims.save_measured(data, path)
    print(f"updated {args.group} in {path}: {data['groups'][args.group]['figures']}\n"
          "now: python -m specviz.core.claims > docs/claims.md", file=sys.stderr)
    return 0


# -----------------------------------------------------------------------------
# argument parsing


DTYPES = ("float32", "bfloat16", "float16")


def add_pair_options(p: argparse.ArgumentParser) -> None:
    """Which pair, in which dtype, with which draft precision (run and bench)."""
    from specviz.modeling.quant import PRECISIONS, TARGET_PRECISIONS
    from specviz.modeling.vocabhead import HEADS

    p.add_argument("--pair", help="pair name from `python -m specviz models` (default: the default pair)")
    p.add_argument("--dtype", choices=DTYPES, help="default: the pair's default (float32 on a CPU)")
    p.add_argument("--draft-precision", choices=["auto", *PRECISIONS], default="auto",
                   help="the draft's weights (default auto: int8 on a CPU, the model dtype on a GPU); "
                        "never changes the output, only the draft's cost and its acceptance")
    p.add_argument("--target-precision", choices=TARGET_PRECISIONS, default="float32",
                   help="the target's weights: float32 (the reference) or int8 (a quarter of the weight bytes, "
                        "each token's activations quantized on their own); the text is the int8 target's, and "
                        "speculative text still equals that target alone. Needs --dtype float32 on a CPU")
    p.add_argument("--draft-head", choices=["auto", *HEADS], default="auto",
                   help="the draft's output layer: full, or frequent (only its family's most written tokens, "
                        "the prompt's and the run's: a cheaper step, sometimes a lower acceptance; default auto: "
                        "full, frequent against an int8 target); never changes the output")


# run's and bench's length: longer than a page's run (DecodeSettings.max_new_tokens), so a timing averages more
# rounds; the two share it, as they share every common option
CLI_MAX_NEW_TOKENS = 64
BENCH_SAMPLE_TEMPERATURE = 0.7  # bench's sample mode samples (DecodeSettings' temperature is greedy)


def add_decoding_options(p: argparse.ArgumentParser, temperature: float, temperature_help: str,
                         seed_help: str) -> None:
    """Temperature, length and seed (run and bench; bench's temperature is its sample mode's)."""
    p.add_argument("--temperature", type=float, default=temperature, help=temperature_help)
    p.add_argument("--max-new-tokens", type=int, default=CLI_MAX_NEW_TOKENS, help=f"default {CLI_MAX_NEW_TOKENS}")
    p.add_argument("--seed", type=int, default=DecodeSettings.seed, help=seed_help)


def add_run_parser(sub) -> None:
    from specviz.decoding.drafters import ModelDrafter, PromptLookupDrafter

    r = sub.add_parser("run", help="one speculative decoding run, coloured by what each round did")
    add_pair_options(r)
    r.add_argument("--draft", help="override the draft: a local folder, a hub id (local HF cache only), "
                   "`self` (the target drafts for itself) or `early-exit:L` (its first L layers)")
    r.add_argument("--target", help="override the target: a local folder or a hub id (local HF cache only)")
    r.add_argument("--prompt", required=True, help='the prompt ("-" reads stdin)')
    r.add_argument("--k", type=int, default=prompts.FIRST_RUN.k,
                   help=f"tokens drafted per round (default {prompts.FIRST_RUN.k})")
    r.add_argument("--tree", type=int, metavar="N", help="draft a token tree of N nodes per round instead of a "
                   "chain of k, all verified in one target pass")
    r.add_argument("--branch", type=int, default=2, help="with --tree: children per expanded node; with --spine: 1 + the "
                   "siblings at an unsure node (default 2)")
    r.add_argument("--max-depth", type=int, help="with --tree: deepest path drafted (default 8; with --spine 32)")
    r.add_argument("--spine", action="store_true", help="draft a chain that the best-k chooser stops, with "
                   "--branch - 1 sibling leaves wherever the draft's top probability is below --doubt; all "
                   "verified in one target pass (--tree N: at most N nodes)")
    r.add_argument("--doubt", type=float, help="with --spine: siblings where the draft's top probability is below "
                   "this (default 0.8)")
    add_decoding_options(r, DecodeSettings.temperature, f"0 = greedy (default {DecodeSettings.temperature:g})",
                         f"default {DecodeSettings.seed}")
    r.add_argument("--top-p", type=float, default=DecodeSettings.top_p,
                   help=f"nucleus sampling mass (default {DecodeSettings.top_p} = off)")
    r.add_argument("--top-k", type=int, default=DecodeSettings.top_k,
                   help=f"sample from the k most likely tokens only (default {DecodeSettings.top_k} = off)")
    r.add_argument("--k-policy", metavar="{fixed,adaptive,best}",
                   help="k per round: fixed (--k every round), adaptive (+1 after a fully accepted round, -1 after "
                        "a rejection) or best (the best-k chooser; --k is where it starts). Default "
                        f"{prompts.FIRST_RUN.k_policy}, as on the main page")
    r.add_argument("--drafter", choices=[ModelDrafter.name, PromptLookupDrafter.name], default=ModelDrafter.name,
                   help="who drafts: the pair's draft model (default) or prompt lookup (copies what followed the "
                        "last earlier match of the latest n-gram; no second model)")
    r.add_argument("--raw", action="store_true", help="feed the prompt as-is, without the chat template")
    r.add_argument("--json", action="store_true", help="print the Run as JSON instead of text")
    r.add_argument("--device", metavar="{cpu,cuda,cuda:N,mps}",
                   help="default: cuda if available, else mps (Apple's GPU) if PyTorch reports it, else cpu")
    r.add_argument("--color", choices=["auto", "always", "never"], default="auto", help="colour the text")
    r.set_defaults(func=cmd_run)


def add_bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmarks: every method against the target alone (specviz.tools.bench)",
                       description="Benchmark speculative decoding on the real pair (or --tiny).")
    add_pair_options(b)
    # also accepted after `bench`; SUPPRESS keeps a --models given before it
    b.add_argument("--models", metavar="YAML", default=argparse.SUPPRESS, help="registry file")
    b.add_argument("--tiny", action="store_true", help="the tiny random pair (seconds; for tests)")
    b.add_argument("--fast-linear", action=argparse.BooleanOptionalAction, default=None,
                   help="float32 on CPU: every nn.Linear through oneDNN (specviz.modeling.fastlinear); "
                        "default: as load_pair does (on unless SPECVIZ_FAST_LINEAR=0)")
    b.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    b.add_argument("--ks", default="1,2,3,4,5,6,8", help="fixed k values (default 1,2,3,4,5,6,8)")
    b.add_argument("--trees", default="8,16,32", help="token-tree node budgets (default 8,16,32; '' for none)")
    b.add_argument("--draft-exits", default="", help="draft depths L for the draft-exit-L methods: the draft's "
                                                      "first L layers (default: none)")
    b.add_argument("--methods", help="comma list to run (default: all); names as in the table, "
                                     "e.g. target,k=4,best,hf-assisted")
    b.add_argument("--domains", help="default code,list,factual,creative; 'first-run' is the main page's default "
                                     "prompt")
    b.add_argument("--prompt-set", choices=["bench", "held-out"], default="bench",
                   help="bench: the presets; held-out: other prompts of the same domains")
    b.add_argument("--modes", default="greedy,sample", help="greedy, sample or both (default)")
    add_decoding_options(b, BENCH_SAMPLE_TEMPERATURE, f"for sample mode (default {BENCH_SAMPLE_TEMPERATURE})",
                         "seed of repetition 1 (sample mode); +1 per repetition")
    b.add_argument("--reps", type=int, default=3, help="repetitions; medians are reported (default 3)")
    b.add_argument("--cost-reps", type=int, default=5, help="repetitions of the forward-cost measurement")
    b.add_argument("--no-warmup", action="store_true", help="skip the warm-up round (tests)")
    b.add_argument("--json", action="store_true", help="print JSON instead of the markdown table")
    b.add_argument("--out", metavar="FILE", help="write the JSON here (the table still goes to stdout)")
    b.add_argument("--figure", metavar="FILE.json", help="write the measured-vs-predicted figure (plotly JSON)")
    b.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    bb = b.add_argument_group("--batch: would one target pass for the verify rows of several sessions pay? "
                              "(specviz.tools.batchbench; measures only)")
    bb.add_argument("--batch", action="store_true", help="instead of the methods: time B sessions' R-row passes "
                                                          "one after another against one batched pass")
    bb.add_argument("--batch-sizes", default="1,2,4,8", help="the B values (default 1,2,4,8)")
    bb.add_argument("--batch-k", type=int, default=4, help="k: each session's pass has R = k + 1 rows (default 4)")
    bb.add_argument("--batch-context", type=int, default=256,
                    help="the longest session's context L; the others spread down to L / 2 (default 256)")
    bb.add_argument("--batch-reps", type=int, default=5, help="timed repetitions, medians reported (default 5)")
    b.set_defaults(func=cmd_bench)


def add_record_parser(sub) -> None:
    r = sub.add_parser("record", help="make the shipped recordings again, in one sitting with one profile",
                       description="Time this machine's profile of the pair, then run every main-page recording "
                                   "and every page recording on it, writing specviz/recorded/ (run on a quiet "
                                   "machine: a profile timed under outside load is refused).")
    add_pair_options(r)
    r.add_argument("--models", metavar="YAML", default=argparse.SUPPRESS, help="registry file")
    r.set_defaults(func=cmd_record)


@dataclass(frozen=True)
class Commands:
    """Commands a package above this one adds to the command line (specviz/__main__.py adds specviz.devtools'):
    add(sub) adds their subparsers to build_parser's, and own maps the name of each one that parses its own
    options (its --help too) to its main(argv), which main hands everything after that name."""
    add: Callable[[Any], None] = lambda sub: None
    own: Mapping[str, Callable[[list[str]], int]] = field(default_factory=dict)


def build_parser(more: Commands = Commands()) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding on real models.")
    p.add_argument("--models", metavar="YAML", help="registry file (default: $SPECVIZ_MODELS or models.yaml)")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="list model pairs, whether each is available here, how to get it")
    m.add_argument("-v", "--verbose", action="store_true", help="say where each model comes from")
    m.set_defaults(func=cmd_models)

    pr = sub.add_parser("prepare", help="assemble, convert and cache a pair (default: the embedded pair)")
    pr.add_argument("--pair", help="pair name from `models` (default: the default pair)")
    pr.add_argument("--verify", action="store_true",
                    help="also check the sha256 of every cached file (reads them all) and rebuild a damaged copy")
    pr.add_argument("--draft-precision", default="auto", metavar="PRECISION",
                    help="prepare the copy a run with this draft precision loads (default auto, as `run` and the "
                         "app: int8 on a CPU, from its own int8 copy; float32, bfloat16, float16 and int4 load "
                         "from the float32 copy)")
    pr.add_argument("--target-precision", default="float32", metavar="PRECISION",
                    help="prepare the copy a run with this target precision loads (default float32, as `run` and "
                         "the app; int8 on a CPU loads from its own int8 copy)")
    pr.set_defaults(func=cmd_prepare)

    add_run_parser(sub)
    add_bench_parser(sub)
    add_record_parser(sub)

    cd = sub.add_parser("claims-data", help="rewrite a bench group of the claims' figures (specviz/core/measured.json) "
                                            "from a bench report")
    cd.add_argument("report", help="a report of `bench --json --out FILE`")
    cd.add_argument("--group", required=True, help="the group to rewrite, e.g. bench_int8")
    cd.add_argument("--machine", help="what ran it (default: from the report's config)")
    cd.add_argument("--date", help="when (default: today)")
    cd.add_argument("--data", help="the data file (default: specviz/core/measured.json)")
    cd.set_defaults(func=cmd_claims_data)

    more.add(sub)
    sub.metavar = "{" + ",".join(sub.choices) + "}"  # every command, in the order added, the added ones too
    return p


def main(argv: list[str] | None = None, more: Commands = Commands()) -> int:
    """Runs one command (more: the commands a package above adds); a SpecvizError is one line and exit code 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        from specviz.device import devqueue

        devqueue.concurrency("cpu")  # a bad $SPECVIZ_DEVICE_CONCURRENCY: said now, once, for every command
        devqueue.start()  # the worker gets the cores before this thread computes anything (share_cores)
        if argv and argv[0] in more.own:
            return more.own[argv[0]](argv[1:])  # it parses its own options
        args = build_parser(more).parse_args(argv)
        return args.func(args)
    except SpecvizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `| head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
