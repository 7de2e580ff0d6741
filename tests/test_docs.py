"""The docs stay true to the code: the README is short and carries the set-up and test commands, every
environment variable the code reads is in docs/configuration.md, every module is in docs/architecture.md, and
the code gives its reasons itself instead of citing the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = [ROOT / "app.py", *(ROOT / "pages").rglob("*.py"), *(ROOT / "specviz").rglob("*.py")]
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(January|February|March|April|May|June|July|August|September|October|"
                   r"November|December) \d{1,2}(, 20\d\d)?\b")


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def env_vars(files) -> set[str]:
    return {m for f in files for m in re.findall(r"SPECVIZ_[A-Z0-9_]+", f.read_text(encoding="utf-8"))}


def undocumented(read: set[str], doc: str) -> list[str]:
    return sorted(v for v in read if not re.search(rf"`{v}`", doc))


def unnamed(modules: list[str], doc: str) -> list[str]:
    return sorted(m for m in modules if not re.search(rf"\b{m}\b", doc))


def test_the_readme_is_short_and_has_the_commands():
    text = readme()
    assert len(text.splitlines()) <= 300
    assert len([line for line in text.splitlines() if DATED.search(line)]) <= 2
    for command in ("pip install -r requirements.txt", "streamlit run app.py", "python -m pytest"):
        assert command in text, command


def test_every_environment_variable_the_code_reads_is_documented():
    read = env_vars([*CODE, *(ROOT / "deploy").glob("*.py")])
    assert len(read) >= 15
    assert undocumented(read, (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")) == []


def test_every_module_is_named_in_the_architecture():
    modules = sorted({p.stem for p in (ROOT / "specviz").rglob("*.py") if p.stem != "__init__"} |
                     {p.stem for p in (ROOT / "pages" / "common").glob("*.py") if p.stem != "__init__"})
    assert unnamed(modules, (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")) == []


def test_the_code_cites_the_readme_at_most_five_times():
    cites = [f"{f.relative_to(ROOT)}:{i}" for f in CODE
             for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if "README" in line]
    assert len(cites) <= 5, cites


def test_the_checks_can_fail():
    assert undocumented({"SPECVIZ_NEW_THING", "SPECVIZ_MODELS"}, "| `SPECVIZ_MODELS` | ... |") == ["SPECVIZ_NEW_THING"]
    assert unnamed(["engine", "newmodule"], "engine (draft / verify)") == ["newmodule"]
    assert DATED.search("Measured on 2026-12-05 here") and DATED.search("on December 5, 2026")
    assert not DATED.search("a 2-core x86 CPU, 48 tokens")
