"""The code's shape stays readable: app.py within 300 lines, each page within 200, and no function longer than
70 lines (specviz/, pages/, app.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_LINES, PAGE_LINES, APP_LINES = 70, 200, 300


def long_functions(files, limit: int = FUNCTION_LINES) -> list[str]:
    out = []
    for f in files:
        for node in ast.walk(ast.parse(Path(f).read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{Path(f).name}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_app_and_pages_stay_short():
    assert len((ROOT / "app.py").read_text(encoding="utf-8").splitlines()) <= APP_LINES
    long = {p.name: n for p in (ROOT / "pages").glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > PAGE_LINES}
    assert long == {}


def test_no_function_is_longer_than_70_lines():
    files = [ROOT / "app.py", *(ROOT / "pages").rglob("*.py"), *(ROOT / "specviz").rglob("*.py")]
    assert long_functions(files) == []


def test_the_function_check_can_fail(tmp_path):
    f = tmp_path / "long.py"
    f.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 70)
    assert long_functions([f]) == ["long.py:5 long (71 lines)"]
