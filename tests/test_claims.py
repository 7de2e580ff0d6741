"""The project's own list of claims (specviz/core/claims.py): complete, in agreement with docs/claims.md,
and every page it names, or that names a claim, exists."""

from __future__ import annotations

import re
from pathlib import Path

from specviz.core import claims

ROOT = Path(__file__).resolve().parents[1]


def test_docs_claims_md_is_generated_from_the_module():
    text = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    assert text == claims.markdown(), "docs/claims.md is stale: python -m specviz.core.claims > docs/claims.md"


def test_claims_are_numbered_one_to_n_and_complete():
    assert [c.number for c in claims.CLAIMS] == list(range(1, len(claims.CLAIMS) + 1))
    for c in claims.CLAIMS:
        assert all(str(v).strip() for v in c.to_dict().values()), c.number
        assert c.pages and set(c.pages) <= set(claims.PAGES), c.number
        assert claims.link(c.number) == f"[claim {c.number}]({claims.PAGE_PATH}#claim-{c.number})"


def test_every_page_named_exists_under_its_url_path():
    files = {p.stem.split("_", 1)[1]: p for p in (ROOT / "pages").glob("[0-9]_*.py")}
    for title, path in claims.PAGES.items():
        assert path == "" and (ROOT / "app.py").exists() or path in files, title
    assert claims.PAGE_PATH in files


def test_every_claim_the_app_mentions_exists_and_nothing_points_outside_the_repository():
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "app.py",
               *sorted((ROOT / "pages").rglob("*.py")), *sorted((ROOT / "specviz").rglob("*.py"))]
    numbers = {c.number for c in claims.CLAIMS}
    for f in sources:
        text = f.read_text(encoding="utf-8")
        assert "../shared" not in text, f
        for m in re.finditer(r"claims? (\d+)((?:, \d+)*)", text):
            for n in [m.group(1), *re.findall(r"\d+", m.group(2))]:
                assert int(n) in numbers, (f, m.group(0))
