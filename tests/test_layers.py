"""specviz/ is the pure layer (no module imports streamlit; only app.py and pages/ do), and its folders are layers."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

# Imports every module of specviz/ in one fresh interpreter and names the first that pulls in
# streamlit. specviz.__main__ runs the CLI only as `python -m specviz`; it is imported with --help all the same
# (exit 0), should that ever change.
_WALK = """
import importlib, json, pkgutil, sys
import specviz

names = sorted(m.name for m in pkgutil.walk_packages(specviz.__path__, "specviz."))
culprit = "specviz" if "streamlit" in sys.modules else None
for name in names:
    if culprit:
        break
    if name == "specviz.__main__":
        sys.argv = ["specviz", "--help"]
        try:
            importlib.import_module(name)
        except SystemExit:
            pass
    else:
        importlib.import_module(name)
    if "streamlit" in sys.modules:
        culprit = name
print(json.dumps({"modules": names, "culprit": culprit}))
"""


def test_no_specviz_module_imports_streamlit():
    out = subprocess.run([sys.executable, "-c", _WALK], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    # the walk really covers the package: the top layer and the leaves are all in it
    assert {"specviz.__main__", "specviz.decoding.engine", "specviz.decoding.models", "specviz.teaching.charts",
            "specviz.tools.cli", "specviz.devtools.loadtest"} <= set(found["modules"])
    assert len(found["modules"]) >= 30
    assert found["culprit"] is None, f"{found['culprit']} imports streamlit; specviz/ must stay free of it"


# --- folders are layers -------------------------------------------------------------------------------------------
# specviz/'s subpackages, lowest first. A module may import its own layer and the layers below it, never one above.
# devtools (development-only tools) is the top one; below, nothing but specviz/__main__.py imports it.
LAYERS = ("core", "device", "data", "modeling", "decoding", "teaching", "service", "tools", "devtools")
PKG = Path(__file__).resolve().parents[1] / "specviz"


def _imports(tree: ast.AST):
    """Every specviz module an AST imports, anywhere in it (lazy imports inside functions too), with its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specviz"):
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("specviz"):
                    yield node.lineno, a.name, []


def _layer_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        yield path, ".".join(rel.parts)


def layer_violations(modules) -> list[str]:
    """'module:line imports higher' for each import that climbs a layer (the checker the test below runs)."""
    bad = []
    for path, name in modules:
        own = _layer_of(name)
        if own is None:  # specviz/__init__ and __main__ sit above every layer
            continue
        for line, mod, names in _imports(ast.parse(path.read_text())):
            # 'from specviz.decoding import engine' names its modules; 'from specviz.decoding.engine import x' its module
            targets = [f"{mod}.{n}" for n in names] if mod.count(".") < 2 and names else [mod]
            for t in targets:
                layer = _layer_of(t)
                if layer is None:
                    bad.append(f"{name}:{line} imports {t}, which is above every layer")
                elif LAYERS.index(layer) > LAYERS.index(own):
                    bad.append(f"{name}:{line} ({own}) imports {t} ({layer})")
    return bad


def private_imports(modules) -> list[str]:
    """'module:line name' for each private name (a leading underscore) taken from another specviz module."""
    bad = []
    for path, name in modules:
        tree = ast.parse(path.read_text())
        aliases = {}
        for line, mod, names in _imports(tree):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {mod}.{n}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specviz"):
                aliases.update({(a.asname or a.name): a.name for a in node.names})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                bad.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return bad


def test_specviz_is_split_into_layer_folders():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert top == ["__init__.py", "__main__.py"], f"modules outside the layer folders: {top}"
    assert sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").exists()) == sorted(LAYERS)


def test_no_import_climbs_a_layer():
    assert layer_violations(_modules()) == []


def test_no_module_imports_another_modules_private_names():
    assert private_imports(_modules()) == []


def test_the_layer_checks_can_fail(tmp_path):
    # a core module that imports the engine, and a teaching module that reaches into a private helper
    (tmp_path / "specviz" / "core").mkdir(parents=True)
    (tmp_path / "specviz" / "teaching").mkdir(parents=True)
    low = tmp_path / "specviz" / "core" / "low.py"
    low.write_text("def f():\n    from specviz.decoding import engine\n")
    high = tmp_path / "specviz" / "teaching" / "high.py"
    high.write_text("from specviz.teaching import charts\nfrom specviz.core.measure import _x\ny = charts._fig\n")
    mods = [(low, "specviz.core.low"), (high, "specviz.teaching.high")]
    assert layer_violations(mods) == ["specviz.core.low:2 (core) imports specviz.decoding.engine (decoding)"]
    assert private_imports(mods) == ["specviz.teaching.high:2 imports specviz.core.measure._x",
                                     "specviz.teaching.high:3 uses charts._fig"]


def _imported_modules(modules) -> dict[str, set[str]]:
    """Each module's name -> the modules among `modules` it imports (lazy imports too)."""
    modules = list(modules)  # read twice
    names = {name for _, name in modules}
    found = {}
    for path, name in modules:
        found[name] = {t for _, mod, imported in _imports(ast.parse(path.read_text()))
                       for t in (mod, *(f"{mod}.{n}" for n in imported)) if t in names and t != name}
    return found


def import_cycles(modules) -> list[str]:
    """The modules that reach themselves through their imports (lazy ones too), sorted: each is on a cycle."""
    graph = _imported_modules(modules)
    on_cycle = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        if start in seen:
            on_cycle.append(start)
    return sorted(on_cycle)


def test_no_module_imports_itself_through_others():
    """Each module's imports form no cycle, lazy imports included (loadtest and simload once imported each other)."""
    assert import_cycles(_modules()) == []


def test_the_cycle_check_can_fail(tmp_path):
    files = {"a": "from specviz.x import b\n", "b": "def f():\n    from specviz.x import c\n",
             "c": "import specviz.x.a\n", "d": "from specviz.x.a import thing\n"}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    mods = [(tmp_path / f"{name}.py", f"specviz.x.{name}") for name in files]
    assert import_cycles(mods) == ["specviz.x.a", "specviz.x.b", "specviz.x.c"]


# --- the development tools: nothing the app or the library runs imports them -------------------------------------
# specviz/devtools (loadtest, simload, timing, laptop) is the top layer, so no specviz layer may import it; this
# check covers the rest: specviz/'s own modules, the pages and app.py. The one exception is the command line's entry
# point, specviz/__main__.py, which adds the development tools' commands to specviz/tools/cli.py's.
DEVTOOLS = "specviz.devtools"
ENTRY = PKG / "__main__.py"


def _names_devtools(dotted: str) -> bool:
    return dotted == DEVTOOLS or dotted.startswith(DEVTOOLS + ".")


def devtools_importers(files) -> list[str]:
    """'name:line imports what' for each import of specviz.devtools (lazy ones, and import_module("...") too)."""
    bad = []
    for path, name in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, mod, names in _imports(tree):
            if any(_names_devtools(t) for t in (mod, *(f"{mod}.{n}" for n in names))):
                bad.append(f"{name}:{line} imports {mod}" + (f" ({', '.join(names)})" if names else ""))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and _names_devtools(node.args[0].value)):
                bad.append(f"{name}:{node.lineno} imports {node.args[0].value}")
    return bad


def _runtime_files():
    """Every module of specviz/ outside specviz/devtools but the entry point, every page, and app.py."""
    root = PKG.parent
    devtools = PKG / "devtools"
    files = [p for p in sorted(PKG.rglob("*.py")) if not p.is_relative_to(devtools) and p != ENTRY]
    files += [*sorted((root / "pages").rglob("*.py")), root / "app.py"]
    return [(p, str(p.relative_to(root))) for p in files]


def test_nothing_but_the_entry_point_imports_the_development_tools():
    files = _runtime_files()
    assert len(files) >= 60 and any(n == "app.py" for _, n in files) and any(n.startswith("pages/") for _, n in files)
    assert devtools_importers(files) == []
    assert devtools_importers([(ENTRY, "specviz/__main__.py")]) != []  # the check sees the one import there is


def test_the_devtools_check_can_fail(tmp_path):
    page = tmp_path / "page.py"
    page.write_text("from specviz.tools import cli\nfrom specviz.devtools import loadtest\n"
                    "def f():\n    import specviz.devtools.timing as t\n    from specviz import devtools, core\n"
                    "    return importlib.import_module('specviz.devtools.laptop')\n")
    assert devtools_importers([(page, "page")]) == [
        "page:2 imports specviz.devtools (loadtest)", "page:4 imports specviz.devtools.timing",
        "page:5 imports specviz (devtools, core)", "page:6 imports specviz.devtools.laptop"]


# --- the device is reached through a runner ----------------------------------------------------------------------
# Every module outside the device layer (specviz/device) does its model work through a runner passed in
# (specviz/device/runner.py), never through the queue itself, and times and judges its passes through that runner,
# never through the pass clock itself (specviz/device/clock.py). The uses of devqueue and clock allowed there:
#  - the default for a runner the caller did not pass, written `runner or devqueue.queue_runner(...)` in a function
#    that takes a `runner` parameter (an entry point: CachedLM, open_lm, the engine's streams, load_pair, ...);
#  - devqueue.start(), which starts the layer (a program's entry point);
#  - type names (TYPES): a LoadNote built or annotated, a PassTime, an OnWait callback (of either module);
# The process's own settings (specviz/device/tuning.py: thread priority, the GIL, the heap) are not the device,
# and the check leaves them alone.
# Imported as `from specviz.device import devqueue` (or clock), or the type names
# `from specviz.device.devqueue import ...` (or specviz.device.clock).
# Left out: specviz/devtools (development tools that drive the queue itself: load tests, timing studies) and
# specviz/tools, the command line's programs, which own their process as the app's pages do: they start the layer
# (cli), set its model threads (bench --threads), and time the device themselves (bench's transformers baseline,
# judged by clock.crowded; batchbench's raw batched passes).
TYPES = frozenset({"LoadNote", "LoadWatch", "OnWait", "PassTime"})
ALLOWED = frozenset({"start"}) | TYPES
OUTSIDE = ("device", "devtools", "tools")  # the layers the check leaves out (above)
CHECKED = ("devqueue", "clock")  # the modules of specviz/device the check covers the uses of


def _runner_users():
    """(path, name) of every module the devqueue check covers: all of specviz/ outside OUTSIDE."""
    return [(p, n) for p, n in _modules() if _layer_of(n) not in OUTSIDE]


def _default_runner_calls(tree: ast.AST) -> set[int]:
    """ids of the `devqueue` names in `runner or devqueue.queue_runner(...)` inside a function taking `runner`."""
    ok = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if "runner" not in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}:
            continue
        for node in ast.walk(fn):
            if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2):
                continue
            first, call = node.values
            if (isinstance(first, ast.Name) and first.id == "runner" and isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute) and call.func.attr == "queue_runner"
                    and isinstance(call.func.value, ast.Name)):
                ok.add(id(call.func.value))
    return ok


def devqueue_uses(modules, allowed=frozenset()) -> list[str]:
    """'module:line what' for each use of devqueue or clock (CHECKED) other than the default runner and the
    `allowed` names (the rule above), in line order."""
    bad = []
    full = {f"specviz.device.{m}" for m in CHECKED}
    for path, name in modules:
        tree = ast.parse(path.read_text())
        ok = _default_runner_calls(tree)
        attrs = {id(n.value): n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        # devqueue by name; clock only where the module imports it (elsewhere `clock` is a runner's clock)
        named = {"devqueue"} | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                                and n.module == "specviz.device" for a in n.names if a.name in CHECKED}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in named and id(node) not in ok:
                if attrs.get(id(node)) not in allowed:
                    bad.append(f"{name}:{node.lineno} {node.id}.{attrs.get(id(node), '')}".rstrip("."))
            elif isinstance(node, ast.ImportFrom) and node.module in full:
                bad += [f"{name}:{node.lineno} imports {a.name} from {node.module}" for a in node.names
                        if not (a.name in TYPES and a.name in allowed)]
            elif isinstance(node, ast.ImportFrom) and node.module == "specviz.device":
                bad += [f"{name}:{node.lineno} imports {a.name} as {a.asname}" for a in node.names
                        if a.name in CHECKED and a.asname]
            elif isinstance(node, ast.Import):
                bad += [f"{name}:{node.lineno} imports {a.name}" for a in node.names
                        if any(m in a.name for m in CHECKED)]
    return sorted(bad, key=lambda s: (s.split(":")[0], int(s.split(":")[1].split()[0])))


def test_every_module_reaches_the_device_through_a_runner():
    mods = _runner_users()
    names = {n for _, n in mods}
    # the check covers the engine, the caches, the model loading, the pool, the measurements and the playback
    assert {"specviz.modeling.lm", "specviz.decoding.engine", "specviz.decoding.tree", "specviz.decoding.models",
            "specviz.decoding.pool", "specviz.teaching.experiments", "specviz.teaching.costs",
            "specviz.data.playback"} <= names
    assert not any(n.startswith(("specviz.device.", "specviz.devtools.", "specviz.tools.")) for n in names)
    assert devqueue_uses(mods, ALLOWED) == []


def test_the_runner_check_can_fail(tmp_path):
    src = tmp_path / "eng.py"
    src.write_text(
        "from specviz.device import devqueue\n"
        "from specviz.device.devqueue import run, LoadNote\n"
        "def stream(model, runner=None):\n"
        "    runner = runner or devqueue.queue_runner(model.device)\n"  # the allowed default
        "    with devqueue.watch():\n"
        "        return runner\n"
        "def step(lm):\n"
        "    return lm.runner or devqueue.queue_runner(lm.device)\n"  # a default outside an entry point
        "def feed(lm, runner=None) -> devqueue.PassTime:\n"  # a type name: allowed
        "    devqueue.start()\n"  # allowed
        "    return devqueue.run(lm.device, lm.model), devqueue.QUEUE.paused()\n"
        "from specviz.device import clock\n"
        "from specviz.device.clock import note_pass, PassTime\n"
        "def time_it(lm) -> clock.LoadNote:\n"  # a type name: allowed
        "    with clock.watch():\n"  # timing outside the runner
        "        return clock.PassClock(lm.device)\n"
    )
    assert devqueue_uses([(src, "eng")], ALLOWED) == [
        "eng:2 imports run from specviz.device.devqueue", "eng:5 devqueue.watch", "eng:8 devqueue.queue_runner",
        "eng:11 devqueue.run", "eng:11 devqueue.QUEUE", "eng:13 imports note_pass from specviz.device.clock",
        "eng:15 clock.watch", "eng:16 clock.PassClock"]
    # the allowed names are the only ones let through: with none allowed, the type names and start() are reported
    assert devqueue_uses([(src, "eng")]) == [
        "eng:2 imports run from specviz.device.devqueue", "eng:2 imports LoadNote from specviz.device.devqueue",
        "eng:5 devqueue.watch", "eng:8 devqueue.queue_runner", "eng:9 devqueue.PassTime", "eng:10 devqueue.start",
        "eng:11 devqueue.run", "eng:11 devqueue.QUEUE", "eng:13 imports note_pass from specviz.device.clock",
        "eng:13 imports PassTime from specviz.device.clock", "eng:14 clock.LoadNote", "eng:15 clock.watch",
        "eng:16 clock.PassClock"]


# Imports every module of specviz/ (but __main__, which runs the CLI) in a fresh interpreter, after torch, and
# reports the threads and PyTorch's thread count before and after; then starts the device layer.
_IMPORT_ALL = """
import importlib, json, pkgutil, threading, torch
before = {"threads": sorted(t.name for t in threading.enumerate()), "torch": torch.get_num_threads()}
import specviz
for m in sorted(m.name for m in pkgutil.walk_packages(specviz.__path__, "specviz.")):
    if m != "specviz.__main__":
        importlib.import_module(m)
after = {"threads": sorted(t.name for t in threading.enumerate()), "torch": torch.get_num_threads()}
from specviz.device import devqueue
devqueue.start()
started = {"threads": sorted(t.name for t in threading.enumerate()), "torch": torch.get_num_threads()}
print(json.dumps({"before": before, "after": after, "started": started}))
"""


def test_importing_any_module_starts_no_thread_and_changes_no_torch_setting():
    """The device layer starts when first asked (devqueue.start), never at import."""
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "2"}  # two threads: share_cores has a count to change
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, check=True, env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["after"] == got["before"]
    # the check sees what starting does: the workers' maker, and the worker's own thread count apart
    assert "specviz-device-maker" in got["started"]["threads"]
    assert got["started"]["torch"] == 1 or got["before"]["torch"] == 1
    light = subprocess.run([sys.executable, "-c", "import sys, threading, specviz.core.settings; "
                            "print(threading.active_count(), 'torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.split() == ["1", "False"]  # the settings alone: no thread, not even torch
