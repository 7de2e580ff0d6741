"""pyproject.toml makes specviz an installable package: its package data covers every data file specviz reads from
its own folders, a wheel built from it carries models.yaml and an install of it reads that copy, its console script
names a real function, and app.py leaves sys.path to Streamlit (and pytest.ini)."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from specviz.core import claims
from specviz.data import pagefile, runfile
from specviz.modeling.config import load_registry
from specviz.modeling import vocabhead
from specviz.teaching import costs

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "specviz"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _data_files() -> set[Path]:
    """Every file under specviz/ that is not Python source or its bytecode."""
    return {p for p in PKG.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}


def _packaged(patterns: list[str]) -> set[Path]:
    """The files the package-data globs take (setuptools globs them relative to the package folder)."""
    return {p for pattern in patterns for p in PKG.glob(pattern) if p.is_file()}


def test_package_data_covers_every_data_file():
    files = _data_files()
    # the data the readers name are among them: the walk really finds the shipped files
    readers = {claims.MEASURED_PATH, costs.RECORDED_PROFILE, vocabhead.VOCAB_DIR / "qwen2.5.txt.gz",
               *runfile.RECORDED_DIR.glob("*.json"), *pagefile.PAGES_DIR.glob("*.json")}
    assert readers <= files and len(readers) >= 10
    packaged = _packaged(PYPROJECT["tool"]["setuptools"]["package-data"]["specviz"])
    assert sorted(str(p.relative_to(PKG)) for p in files - packaged) == []


def test_data_readers_read_inside_the_package():
    """A reader that looks outside specviz/ would find nothing once the package is installed."""
    for path in (claims.MEASURED_PATH, runfile.RECORDED_DIR, pagefile.PAGES_DIR, vocabhead.VOCAB_DIR,
                 costs.RECORDED_PROFILE):
        assert Path(path).resolve().is_relative_to(PKG), path


def test_packages_and_console_script():
    assert PYPROJECT["project"]["name"] == "specviz"
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["specviz", "specviz.*"]
    module, _, name = PYPROJECT["project"]["scripts"]["specviz"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    # the README's commands stay the way in: no second pytest config beside pytest.ini
    assert "pytest" not in PYPROJECT.get("tool", {})


def _edits_sys_path(source: str) -> list[int]:
    """Lines that touch sys.path (sys.path.insert / append / assignment, or `from sys import path`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_app_and_pages_leave_sys_path_alone():
    """`streamlit run app.py` puts app.py's folder on sys.path and pytest.ini does for AppTest: no page adds it."""
    scripts = [ROOT / "app.py", *sorted((ROOT / "pages").rglob("*.py"))]
    assert len(scripts) > 10
    found = {str(p.relative_to(ROOT)): lines for p in scripts if (lines := _edits_sys_path(p.read_text()))}
    assert found == {}


def test_the_sys_path_check_sees_an_edit():
    assert _edits_sys_path("import sys\nsys.path.insert(0, 'x')\n") == [2]
    assert _edits_sys_path("from sys import path\n") == [1]
    assert _edits_sys_path("import sys\nprint(sys.argv)\n") == []


def test_an_installed_wheel_reads_its_own_models_yaml(tmp_path):
    """Built and installed elsewhere, specviz still finds the registry of models: the wheel carries models.yaml."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info",
                                                             "__pycache__", "tests", "docs", ".pytest_cache"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                   check=True, cwd=tmp_path, capture_output=True)
    wheel, = (tmp_path / "dist").glob("specviz-*.whl")
    prefix = tmp_path / "prefix"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--prefix", str(prefix), str(wheel)],
                   check=True, cwd=tmp_path, capture_output=True)
    site, = prefix.glob("lib/python*/site-packages")
    code = ("from specviz.modeling import config; r = config.load_registry(); "
            "print(config.DEFAULT_PATH); print(r.default_pair)")
    env = {k: v for k, v in os.environ.items() if k != "SPECVIZ_MODELS"} | {"PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    path, default = out.stdout.split()
    assert Path(path).is_relative_to(prefix) and Path(path).read_bytes() == (ROOT / "models.yaml").read_bytes()
    assert default == load_registry(ROOT / "models.yaml").default_pair
