"""The target's precision in the app: the main page's sidebar select, the memory estimator, and the Speedup
page's float32-against-int8 section (experiments.target_comparison, explain.target_verdict), on the tiny pair."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.modeling import quant
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
pytestmark = [pytest.mark.skipif(not TINY.exists(), reason="tests/models_tiny.yaml is missing"),
              pytest.mark.skipif("int8" not in quant.supported("cpu"), reason="no fbgemm int8 here")]


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def _app(path: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / path), default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_sidebar_target_precision_reaches_the_run_and_its_baseline():
    """Choose int8, Run: the run's target is int8, the target alone it is compared with is the same int8 target
    (no float32 pair is loaded for it), and greedy text is identical to it."""
    from specviz.service import pairs

    pairs.clear()
    at = _app("app.py")
    assert at.radio(key="main.target_precision").options == ["float32", "int8"]
    assert at.radio(key="main.target_precision").value == "float32"  # the reference, unless chosen
    at.radio(key="main.target_precision").set_value("int8")
    at.select_slider(key="main.speed").set_value("instant")
    at.radio(key="main.k_policy").set_value("fixed")
    at.number_input(key="main.max_new").set_value(8)
    at.button(key="main.run_btn").click().run()
    assert not at.exception, at.exception
    job = at.session_state["main.job"]
    assert job.meta["target_precision"] == "int8" and job.meta["dtype"] == "float32"
    pair = pairs.slot(job.meta["pair"], "float32", "int8").pair  # the run's pair, in the store under its target
    assert pair.target_precision == "int8" and pair.target.config.specviz_precision == "int8"
    assert pairs.slot(job.meta["pair"], "float32") is None  # the baseline did not load the float32 target
    assert job.meta["baseline"]["identical"] is True
    assert any("identical text" in s.value for s in at.success)


@pytest.fixture(scope="module")
def compared():
    """experiments.target_comparison on the tiny pair: the same draft against a float32 and an int8 target."""
    from specviz.decoding import models
    from specviz.teaching import experiments

    pairs = {tp: models.load_pair("tiny-random", registry=TINY, device="cpu", dtype="float32",
                                  draft_precision="float32", target_precision=tp) for tp in ("float32", "int8")}
    ids = list(range(3, 19))
    res = experiments.target_comparison(pairs, ids, DecodeSettings(k=4, max_new_tokens=16), **pairs["float32"].run_kw)
    return pairs, res


def test_target_comparison_runs_each_target_against_its_own_target_alone(compared):
    from specviz import autoregressive_decode
    from specviz.core import measure

    pairs, res = compared
    assert [r.precision for r in res] == ["float32", "int8"]
    for r in res:
        pair, spec = pairs[r.precision], r.comparison.spec
        alone = autoregressive_decode(pair.target, spec.prompt_ids, DecodeSettings(max_new_tokens=16), **pair.run_kw)
        assert r.comparison.base.token_ids == alone.token_ids  # the target alone is its own target's
        assert r.comparison.identical is True  # greedy: each equals its own target alone
        assert r.c == measure.c_from_runs([spec], [r.comparison.base])
    assert res[0].comparison.base is not res[1].comparison.base


def test_target_comparison_refuses_two_drafts(compared):
    import dataclasses

    from specviz.core.errors import InvalidSetting
    from specviz.teaching import experiments

    pairs, _ = compared
    other = {"float32": pairs["float32"], "int8": dataclasses.replace(pairs["int8"], draft_precision="int8")}
    with pytest.raises(InvalidSetting, match="same draft"):
        experiments.target_comparison(other, [3, 4, 5], DecodeSettings(k=2, max_new_tokens=4))


def test_the_verdict_quotes_the_comparisons_own_numbers(compared):
    import dataclasses

    from specviz.core import measure
    from specviz.teaching import explain

    _, res = compared
    for c8 in (res[0].c * 2, res[0].c / 2):  # a dearer draft step against the int8 target, and a cheaper one
        got = [res[0], dataclasses.replace(res[1], c=c8)]
        text = explain.target_verdict(got)
        assert f"c = {c8:.2f} against {res[0].c:.2f}" in text
        for r in got:
            spec, k = r.comparison.spec, r.comparison.spec.decode.k
            pred = spec.tokens_per_pass / (1 + k * r.c)
            assert (f"{spec.tokens_per_pass:.2f} / (1 + {k}·{r.c:.2f}) = {pred:.2f}× (measured "
                    f"{measure.steady_speedup(spec, r.comparison.base):.2f}×)") in text
        assert ("passes are faster" in text) == (c8 > res[0].c)
    assert "both targets" in explain.target_verdict(res[:1])


def test_the_speedup_page_shows_both_targets_side_by_side():
    at = _app("pages/3_Speedup.py")
    at.number_input(key="speed.max_new").set_value(8).run()
    at.button(key="speed.run_targets").click().run()
    assert not at.exception, at.exception
    res = at.session_state["speed.target"]
    table = next(d.value for d in at.dataframe if "target precision" in d.value.columns)
    assert list(table["target precision"]) == ["float32", "int8"]
    for col in ("c", "α", "tokens per pass", "measured speedup over its target alone"):
        assert table[col].notna().all() and (table[col] != "–").all(), col
    assert [float(x) for x in table["c"]] == pytest.approx([r.c for r in res], abs=6e-4)
    assert [float(x) for x in table["α"]] == pytest.approx([r.comparison.spec.alpha for r in res], abs=6e-4)
    assert (table["same text as target alone"] == "yes").all()
    verdict = next(m.value for m in at.markdown if "Speedup ≈ E[tokens]" in m.value)
    assert float(re.search(r"c = ([\d.]+) against", verdict).group(1)) == pytest.approx(res[1].c, abs=0.006)
