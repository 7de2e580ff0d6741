"""The offline pairs side by side (specviz.teaching.sidebyside, pages/common/pairs_ui.py) on the tiny registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
TINY_NAMES = ["tiny-random", "tiny-self", "tiny-early-exit", "tiny-other-tokenizer"]


@pytest.fixture(scope="module")
def reg():
    from specviz.modeling.config import load_registry

    return load_registry(TINY)


def test_offline_pairs_are_those_that_need_no_hub(reg):
    from specviz.teaching import sidebyside
    from specviz.modeling.config import load_registry

    assert sidebyside.offline_pairs(reg) == TINY_NAMES
    real = sidebyside.offline_pairs(load_registry(ROOT / "models.yaml"))
    assert real[0] == "qwen2.5-coder-embedded"
    assert {"qwen2.5-coder-1.5b-self", "qwen2.5-coder-1.5b-early-exit-14", "smollm2-135m-coder-1.5b"} <= set(real)
    # hub or local folders: not offline (the packaged SmolLM2 is)
    assert not any(n.startswith(("smollm2", "qwen2.5-0.5b", "custom")) for n in real if n != "smollm2-135m-coder-1.5b")


def test_derived_drafts_reuse_the_load_of_a_pair_with_the_same_target(reg):
    from specviz.teaching import sidebyside

    plan = sidebyside.load_plan(TINY_NAMES, reg, prefer="tiny-self")
    # tiny-self's target is tiny-random's: one load; tiny-early-exit has its own (deeper) target
    assert plan == {"tiny-random": "tiny-random", "tiny-self": "tiny-random", "tiny-early-exit": "tiny-early-exit",
                    "tiny-other-tokenizer": "tiny-other-tokenizer"}


def contenders(reg, names):
    from specviz.decoding import models
    from specviz.core import prompts
    from specviz.teaching import sidebyside

    plan = sidebyside.load_plan(names, reg)
    hosts = {h: models.load_pair(h, registry=reg, draft_precision="float32") for h in set(plan.values())}
    out = []
    for n in names:
        host, spec = hosts[plan[n]], reg.pair(n)
        ids = prompts.encode(host.tokenizer, "the cat sat on the mat and the cat", False)
        out.append(sidebyside.Contender(n, sidebyside.draft_desc(spec, "float32"), host.target,
                                        sidebyside.draft_for(spec, host), ids, host.shared_vocab,
                                        list(host.eos_token_ids)))
    return out


def test_each_pair_runs_greedy_exact_and_self_accepts_everything(reg):
    from specviz.teaching import charts, sidebyside

    cts = contenders(reg, TINY_NAMES)
    assert cts[1].draft is cts[1].target  # the target drafting for itself: no copy
    res = {r.name: r for r in sidebyside.compare_pairs(cts, DecodeSettings(k=3, max_new_tokens=12, seed=0))}
    assert list(res) == TINY_NAMES
    assert all(r.identical is True for r in res.values())  # greedy: the target's own text, every pair
    assert res["tiny-self"].alpha == 1.0 and res["tiny-self"].tokens_per_pass == 4.0  # k + 1 every round
    assert res["tiny-random"].alpha < 1.0  # a noisy copy of the target is rejected sometimes
    assert all(r.c > 0 for r in res.values())
    rows = sidebyside.rows(list(res.values()))
    assert [r["pair"] for r in rows] == TINY_NAMES and rows[1]["draft"] == "the target itself"
    fig = charts.fig_pairs(list(res.values()))
    assert [list(t.x) for t in fig.data] == [TINY_NAMES] * 4
    assert list(fig.data[0].y) == [r.alpha for r in res.values()]


def test_a_draft_with_another_tokenizer_drafts_through_text_in_the_comparison(reg):
    from specviz.teaching import sidebyside
    from specviz.decoding.xtok import CrossTokenizerDrafter

    (ct,) = contenders(reg, ["tiny-other-tokenizer"])
    assert isinstance(ct.draft, CrossTokenizerDrafter) and "another tokenizer" in ct.draft_desc
    (res,) = sidebyside.compare_pairs([ct], DecodeSettings(k=3, max_new_tokens=12, seed=0))
    assert res.identical is True and 0 < res.alpha < 1.0  # the noisy draft, reached through text


def test_a_draft_for_another_target_is_refused(reg):
    from specviz.decoding import models
    from specviz.teaching import sidebyside
    from specviz.core.errors import InvalidSetting

    host = models.load_pair("tiny-random", registry=reg)
    with pytest.raises(InvalidSetting, match="needs the target tiny-target-deep"):
        sidebyside.draft_for(reg.pair("tiny-early-exit"), host)


# --- the main page ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(TINY)


def test_main_page_compares_the_offline_pairs(tiny_registry):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    at.slider(key="main.k").set_value(3)
    at.number_input(key="main.max_new").set_value(12)
    at.button(key="main.pairs_btn").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    df = at.dataframe[0].value
    assert list(df["pair"]) == TINY_NAMES
    assert list(df["same text as target alone"]) == ["yes"] * 4
    assert df.set_index("pair").loc["tiny-self", "α"] == 1.0
    # the results stay through a rerun (any other widget)
    at.number_input(key="main.seed").set_value(1).run()
    assert list(at.dataframe[0].value["pair"]) == TINY_NAMES


def test_main_page_reports_a_bad_prompt_without_a_traceback(tiny_registry):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.text_area(key="main.prompt").set_value("")
    at.button(key="main.pairs_btn").click().run()
    assert not at.exception, at.exception
    assert at.error  # the empty prompt, said in the page
