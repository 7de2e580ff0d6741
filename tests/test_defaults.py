"""One default per decoding setting: DecodeSettings (specviz/core/settings.py) owns k, temperature, top-p, top-k,
max_new_tokens and seed; the first run, the recordings, the CLI, the tools and the pages' widgets read it, and the
values that differ on purpose (a lesson's length, the CLI's length, bench's sample temperature) are named
constants."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

from specviz.core import prompts
from specviz.core.settings import DecodeSettings
from specviz.data.runfile import RecordSpec
from specviz.teaching import lessons, page_records
from specviz.devtools import simload
from specviz.tools import cli, record

ROOT = Path(__file__).resolve().parents[1]
# the places that once wrote a setting's default as a literal of their own
UNIFIED = ["specviz/core/prompts.py", "specviz/data/runfile.py", "specviz/teaching/lessons.py",
           "specviz/teaching/page_records.py", "specviz/tools/cli.py", "specviz/devtools/cli.py",
           "specviz/tools/record.py", "specviz/devtools/simload.py", "specviz/devtools/timing.py",
           "pages/1_Slow_motion_round.py", "pages/2_Acceptance_lab.py", "pages/common/main_sidebar.py"]
NAMES = {"k", "temperature", "top_p", "top_k", "max_new_tokens", "max_new", "seed"}
FLAGS = {"--k", "--temperature", "--top-p", "--top-k", "--max-new-tokens", "--seed"}
WIDGETS = ("k:", "temperature", "top-p", "seed", "max new tokens", "new tokens per run")  # labels the pages start
LAB_KEYS = {"k", "temperatures", "new tokens per run", "seed"}  # page_records.ACCEPTANCE_LAB's decoding settings


def _literal(node: ast.AST | None) -> bool:
    """A number written in place (or a list of them, or min/max of one): a default that reads no owner."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.List):
        return any(_literal(e) for e in node.elts)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("min", "max"):
        return any(_literal(a) for a in node.args)
    return False


def _param_defaults(fn: ast.FunctionDef) -> list[tuple[str, ast.AST]]:
    a = fn.args
    pos = a.posonlyargs + a.args
    return list(zip([p.arg for p in pos[len(pos) - len(a.defaults):]], a.defaults)) + [
        (p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]


def _call_defaults(call: ast.Call) -> list[ast.AST]:
    """An argparse flag's default, or a page widget's starting value (its 4th argument)."""
    first = call.args[0] if call.args and isinstance(call.args[0], ast.Constant) else None
    label = first.value if first is not None and isinstance(first.value, str) else ""
    what = getattr(call.func, "attr", "")
    if what == "add_argument" and label in FLAGS:
        return [kw.value for kw in call.keywords if kw.arg == "default"]
    if what in ("slider", "number_input") and label.lower().startswith(WIDGETS) and len(call.args) > 3:
        return [call.args[3]]
    return []


def _module_level(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Settings written at module level: keywords of a constant made by one call (FIRST_RUN = FirstRun(k=...); a
    list of particular runs, such as the recordings', is not a default), and the acceptance lab's defaults."""
    found = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign):
            continue
        if isinstance(stmt.value, ast.Call):
            found += [(kw.arg, kw.value) for kw in stmt.value.keywords if kw.arg in NAMES]
        if any(getattr(t, "id", None) == "ACCEPTANCE_LAB" for t in stmt.targets) and isinstance(stmt.value, ast.Dict):
            found += [(k.value, v) for k, v in zip(stmt.value.keys, stmt.value.values)
                      if isinstance(k, ast.Constant) and k.value in LAB_KEYS]
    return found


def literal_defaults(source: str) -> list[str]:
    """'line: name' for every default of a decoding setting written as a number instead of read from its owner."""
    tree = ast.parse(source)
    found = _module_level(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [(n, d) for n, d in _param_defaults(node) if n in NAMES]
        elif isinstance(node, ast.ClassDef):
            found += [(s.target.id, s.value) for s in node.body if isinstance(s, ast.AnnAssign)
                      and isinstance(s.target, ast.Name) and s.target.id in NAMES]
        elif isinstance(node, ast.Call):
            found += [(ast.unparse(node.args[0]), d) for d in _call_defaults(node)]
    return sorted(f"{v.lineno}: {n}" for n, v in found if _literal(v))


def test_no_second_literal_default():
    found = {f: hits for f in UNIFIED if (hits := literal_defaults((ROOT / f).read_text()))}
    assert found == {}


def test_the_check_sees_each_kind_of_default():
    assert literal_defaults("FIRST = FirstRun(k=4, max_new_tokens=48)\n") == ["1: k", "1: max_new_tokens"]
    assert literal_defaults("def f(a, max_new_tokens: int = 48, *, seed=0):\n    pass\n") == [
        "1: max_new_tokens", "1: seed"]
    assert literal_defaults("class S:\n    temperature: float = 0.0\n    k: int = K\n") == ["2: temperature"]
    assert literal_defaults('p.add_argument("--max-new-tokens", type=int, default=64)\n') == ["1: '--max-new-tokens'"]
    assert literal_defaults('k = st.slider("k: tokens", 1, 12, 4, key="x")\n'
                            'n = st.number_input("max new tokens", 1, cap, min(48, cap), 1)\n') == [
        "1: 'k: tokens'", "2: 'max new tokens'"]
    assert literal_defaults('ACCEPTANCE_LAB = {"k": 4, "domains": ["code"], "temperatures": [0.0]}\n') == [
        "1: k", "1: temperatures"]
    assert literal_defaults("LESSON_MAX_NEW_TOKENS = 24\nS = DecodeSettings(max_new_tokens=LESSON_MAX_NEW_TOKENS)\n"
                            "def f(seed=DecodeSettings.seed):\n    return g(k=4)\n"
                            "RUNS = [RecordSpec('t1', 'story', temperature=1.0)]\n") == []


def test_the_readers_take_the_owners_values():
    d = DecodeSettings()
    assert (prompts.FIRST_RUN.k, prompts.FIRST_RUN.max_new_tokens, prompts.FIRST_RUN.temperature) == (
        d.k, d.max_new_tokens, d.temperature)
    assert inspect.signature(record.record_presets).parameters["max_new_tokens"].default == d.max_new_tokens
    assert inspect.signature(simload.simulate).parameters["max_new"].default == d.max_new_tokens
    spec = RecordSpec("x", "Python function")
    assert (spec.k, spec.temperature, spec.seed, spec.top_p) == (d.k, d.temperature, d.seed, d.top_p)
    lab = page_records.ACCEPTANCE_LAB
    assert (lab["k"], lab["new tokens per run"], lab["seed"], lab["temperatures"]) == (
        d.k, d.max_new_tokens, d.seed, [d.temperature])
    # the values that differ on purpose are their own constants
    assert lessons.LESSON_SETTINGS.max_new_tokens == lessons.LESSON_MAX_NEW_TOKENS != d.max_new_tokens


def _defaults(command: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(command)


def test_the_cli_defaults():
    d = DecodeSettings()
    run = _defaults(["run", "--prompt", "x"])
    assert (run.temperature, run.top_p, run.top_k, run.seed) == (d.temperature, d.top_p, d.top_k, d.seed)
    bench = _defaults(["bench"])
    assert (bench.temperature, bench.seed) == (cli.BENCH_SAMPLE_TEMPERATURE, d.seed)
    assert run.max_new_tokens == bench.max_new_tokens == cli.CLI_MAX_NEW_TOKENS
