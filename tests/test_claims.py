"""The project's own list of claims (specviz/core/claims.py): complete, in agreement with docs/claims.md,
and every page it names, or that names a claim, exists."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from specviz.core import claims, theory
from specviz.tools import cli

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


# ---------------------------------------------------------------------------
# the figures: specviz/core/measured.json, each group with its command, machine and date


def _bumped(value):
    """A value no claim text holds, of the same shape (int stays int)."""
    if isinstance(value, list):
        return [_bumped(v) for v in value]
    return value + 111 if isinstance(value, int) else value + 11.11


def test_every_figure_of_the_data_file_reaches_a_claim_text():
    data = claims.load_measured()
    before = [c.to_dict() for c in claims.build_claims(data)]
    assert before == [c.to_dict() for c in claims.CLAIMS]
    for name, group in data["groups"].items():
        assert group["command"] and group["machine"] and re.fullmatch(r"\d{4}-\d\d-\d\d", group["date"]), name
        for key, value in group["figures"].items():
            copy = json.loads(json.dumps(data))
            copy["groups"][name]["figures"][key] = _bumped(value)
            after = [c.to_dict() for c in claims.build_claims(copy)]
            assert after != before, f"{name}.{key} appears in no claim text"


def test_a_changed_figure_changes_the_text_that_quotes_it():
    copy = json.loads(json.dumps(claims.load_measured()))
    copy["groups"]["bench_int8"]["figures"]["best_code"] = 9.87
    copy["groups"]["lab_defaults"]["figures"]["counted"] = [0.1, 0.2, 0.3, 0.4]
    texts = {c.number: c.measured for c in claims.build_claims(copy)}
    assert "9.87× on code" in texts[9] and "9.87× on code" in texts[13] and "2.62" not in texts[9] + texts[13]
    assert "counted α 0.10, 0.20, 0.30, 0.40;" in texts[10]


def test_claims_py_holds_no_literal_figures():
    """Every measured figure is a template field: no decimal (2.05×, 0.96), 'N ms', 'N s', 'N of M' or 'N/M'
    in claims.py's strings (a model's name, as Qwen2.5 or 0.5B, is not a figure; nor the literature's 2–3×)."""
    figure = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])|\b\d+ (?:ms|s)\b|\b\d+ of \d+\b|\d+/\d+")
    tree = ast.parse((ROOT / "specviz" / "core" / "claims.py").read_text(encoding="utf-8"))
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    found = [(m.group(0), s[:60]) for s in strings for m in figure.finditer(s)]
    assert found == []
    assert figure.search("gave 2.05× over") and figure.search("in 44 s") and figure.search("16 of 16")
    assert not figure.search("Qwen2.5-Coder 0.5B Instruct") and not figure.search("{bench.c:.2f}×")


def test_the_formula_values_of_claim_8_are_computed():
    text = claims.claim(8).claim + claims.claim(8).measured
    for a in claims.TEXTBOOK_ALPHAS:
        assert f"{theory.expected_tokens(a, claims.TEXTBOOK_K):.2f}" in text


def test_a_bench_report_rewrites_a_group_of_the_data_file(tmp_path, capsys):
    report_path, data_path = tmp_path / "report.json", tmp_path / "measured.json"
    data_path.write_text(claims.MEASURED_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    assert cli.main(["bench", "--tiny", "--json", "--out", str(report_path), "--reps", "1", "--max-new-tokens", "8",
                     "--ks", "4", "--methods", "k=4,best,prompt-lookup", "--domains", "code,list",
                     "--modes", "greedy", "--cost-reps", "1", "--no-warmup", "-q"]) == 0
    report = json.loads(report_path.read_text(encoding="utf-8"))
    for group in ("bench_int8", "bench_prompt_lookup", "bench_int8_first_run"):
        assert cli.main(["claims-data", str(report_path), "--group", group, "--data", str(data_path),
                         "--date", "2031-02-03"]) == 0
    data = claims.load_measured(data_path)
    g = data["groups"]["bench_int8"]
    summ = {s["method"]: s for s in report["summary"]}
    code = {r["method"]: r for r in report["results"] if r["domain"] == "code"}
    assert g["figures"] == {"c": round(summ["best"]["c_runs"], 2), "best_mixed": round(summ["best"]["speedup"], 2),
                            "best_code": round(code["best"]["speedup"], 2), "k4_mixed": round(summ["k=4"]["speedup"], 2),
                            "k4_code": round(code["k=4"]["speedup"], 2), "prompts": 2}
    assert g["date"] == "2031-02-03" and g["command"].startswith("python -m specviz bench --tiny ")
    assert "--domains code,list" in g["command"] and "pair tiny" in g["machine"]
    assert data["groups"]["bench_prompt_lookup"]["figures"]["prompt_lookup_code"] == round(
        code["prompt-lookup"]["speedup"], 2)
    assert data["groups"]["bench_int8_first_run"]["figures"]["best_over_k4_mixed"] == round(
        report["checks"]["greedy"]["best_over_k4_mixed"], 2)
    assert data["groups"]["lab_defaults"] == claims.load_measured()["groups"]["lab_defaults"]  # untouched
    text = {c.number: c.measured for c in claims.build_claims(data)}[9]
    assert f"{g['figures']['best_code']:.2f}× on code" in text and "over 2 prompts" in text
    # a group measured by hand, and a report that lacks a group's figures, are refused with a message
    capsys.readouterr()
    assert cli.main(["claims-data", str(report_path), "--group", "lab_defaults", "--data", str(data_path)]) == 2
    assert "by hand" in capsys.readouterr().err
    with pytest.raises(ValueError, match="lacks best_code"):
        claims.update_group(data, "bench_int8", {"c": 0.1}, "cmd", "machine", "2031-02-03")
