"""AppTest of the Token tree page (pages/9) on the tiny pair: its tree, node story and chain-vs-tree figures
must be the ones tree_decode / chain_vs_tree give on the same models, prompt and seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from specviz.core.settings import DecodeSettings
from tiny import split_settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages" / "9_Token_tree.py")


@pytest.fixture(scope="module", autouse=True)
def tiny_registry(tiny_app_registry):
    return tiny_app_registry(ROOT / "tests" / "models_tiny.yaml")


def opened(**widgets):
    """The page, run once, with the given (key -> value) widgets set, no exception."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    at.select_slider(key="tree.speed").set_value("instant")
    for key, value in widgets.items():
        at.session_state[key] = value
    at.run()
    return at


def press(at, key):
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def figure(at, start: str) -> dict:
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    found = [f for f in figs if f["layout"]["title"]["text"].startswith(start)]
    assert found, [f["layout"]["title"]["text"] for f in figs]
    return found[0]


def drawn_nodes(fig: dict) -> dict[str, list[int]]:
    return {t["name"]: sorted(t["customdata"]) for t in fig["data"] if t.get("customdata") is not None}


def direct(**kw):
    """The same run, by specviz directly: the page's default prompt and settings unless overridden."""
    from specviz.decoding import models
    from specviz.core import prompts
    from specviz.decoding.tree import tree_decode

    pair = models.load_pair(None)
    p = prompts.preset("Python function")
    ids = prompts.encode(pair.tokenizer, p.text, p.chat)
    settings = dict(budget=16, branch=2, max_depth=8, temperature=0.0, max_new_tokens=32, seed=0) | kw
    decode, shape = split_settings(settings)
    return pair, ids, tree_decode(pair.target, pair.draft, ids, decode, eos_token_id=pair.eos_token_ids,
                                  vocab=pair.shared_vocab, **shape)


def test_rounds_draw_the_engines_tree_and_explain_a_node():
    at = press(opened(), "tree.start")
    _, _, run = direct()
    r = run.rounds[0]
    nodes = drawn_nodes(figure(at, "Round 1: a tree of"))
    assert nodes["accepted path"] == sorted(r.path)
    assert nodes.get("rejected", []) == [i for i, v in enumerate(r.verdict) if v == "rejected"]
    assert nodes.get("never judged (pruned)", []) == [i for i, v in enumerate(r.verdict) if v == "untried"]
    press(at, "tree.next")
    assert figure(at, "Round 2: a tree of")
    # the round in one sentence, with its draft passes' and its one verify pass's own times
    summary = next(m.value for m in at.markdown if m.value.startswith("**Round 2.**"))
    r2 = run.rounds[1]
    assert f"Drafted {r2.n_nodes} nodes in {len(r2.draft_s)} draft passes" in summary
    assert "ms), the target checked every node in **one** pass (" in summary
    # the node picked by default is the end of the path: accepted, in words
    story = " ".join(m.value for m in at.markdown)
    assert "Greedy: the target's top token" in story and "**accepted**" in story
    rejected = next(i for i, v in enumerate(run.rounds[1].verdict) if v == "rejected")
    at.selectbox(key="tree.node.1").set_value(rejected).run()
    assert "**rejected**" in " ".join(m.value for m in at.markdown)
    # the node's default and the picked node share one session-state key cleanly (a tiny pass that ran on one
    # thread can read as outside load now and then: that note is not what this checks)
    assert not [w.value for w in at.warning if not w.value.startswith("Taken under outside load")]
    assert figure(at, f"Round 2, node {rejected}")
    acc = figure(at, "Acceptance in the tree")
    by_rank = [t for t in acc["data"] if t["xaxis"] == "x2"][0]
    assert by_rank["x"][0] == 1  # rank 1 = the first child tried
    assert any("accepted drafted tokens" in i.value for i in at.info)
    # the Python-function preset is a chat message: the text shows the reply on a line of its own, and the
    # prompt the run was started with, whatever the box says now
    text = [m.value for m in at.markdown if 'class="sv-text"' in m.value]
    assert len(text) == 1 and 'class="sv-reply"' in text[0]
    at.text_area(key="tree.text").set_value("something else").run()
    text = [m.value for m in at.markdown if 'class="sv-text"' in m.value]
    assert "something else" not in text[0] and "is_prime" in text[0]
    started = [c.value for c in at.caption if "This run was started with a different" in c.value]
    assert len(started) == 1 and "a different prompt from the one above" in started[0]  # and the page says so


def test_the_spine_shape_drafts_a_chain_with_a_sibling_at_each_unsure_node():
    import re

    at = press(opened(**{"tree.shape": "spine", "tree.doubt": 1.0}), "tree.start")  # doubt 1: a sibling everywhere
    assert at.select_slider(key="tree.budget").disabled and at.slider(key="tree.depth").disabled
    fig = figure(at, "Round 1: a tree of")
    n = int(re.search(r"a tree of (\d+) drafted", fig["layout"]["title"]["text"]).group(1))
    path = drawn_nodes(fig)["accepted path"]
    assert n >= 2 and n % 2 == 0  # node 2j is the chain at depth j + 1, node 2j + 1 its sibling
    assert path and all(i == 2 * j for j, i in enumerate(path[:-1])) and path[-1] in (2 * len(path) - 2,
                                                                                     2 * len(path) - 1)
    press(at, "tree.next")
    assert figure(at, "Round 2: a tree of") and not at.error


def test_chain_against_tree_is_measured_on_the_same_prompt_and_seed():
    from specviz.teaching.tree_lab import chain_vs_tree

    at = opened(**{"tree.budgets": [2, 8], "tree.max_new": 12})
    press(at, "tree.measure")
    fig = figure(at, "Chain against tree")
    pair, ids, _ = direct(max_new_tokens=12)
    cmp = chain_vs_tree(pair.target, pair.draft, ids, DecodeSettings(max_new_tokens=12, seed=0), budgets=[2, 8],
                        eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab, cost_reps=1)
    for shape in ("chain", "tree"):
        tpp = [t for t in fig["data"] if t.get("name") == shape and t["xaxis"] == "x"][0]["y"]
        assert tpp == pytest.approx([cmp.get(shape, b).tokens_per_pass for b in (2, 8)])
    text = " ".join(m.value for m in at.markdown)
    assert "Tokens per target pass: the tree beat the chain at" in text and "Fastest tree:" in text
    assert at.success and "same text" in at.success[0].value  # greedy: chains and trees agree
    marked = lambda: [c.value for c in at.caption if "Measured with a different" in c.value]  # noqa: E731
    assert marked() == []
    at.slider(key="tree.branch").set_value(3).run()  # the comparison stays, and says what it was not measured with
    assert len(marked()) == 1 and "a different b from the one above" in marked()[0] and figure(at, "Chain against")


def test_same_seed_same_sampled_tree_and_bad_input_is_an_error():
    def tree_of(seed):
        at = press(opened(**{"tree.temperature": 1.0, "tree.seed": seed}), "tree.start")
        return at, drawn_nodes(figure(at, "Round 1: a tree of"))

    at, first = tree_of(3)
    assert tree_of(3)[1] == first
    assert "Sampling: accept if u < min(1, p/q)" in " ".join(m.value for m in at.markdown)
    at.text_area(key="tree.text").set_value("").run()
    press(at, "tree.start")
    assert at.error and not at.exception


def test_the_main_page_drafts_its_prompt_as_a_tree_when_asked():
    from streamlit.testing.v1 import AppTest

    from specviz.core import prompts

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception and not any(b.key == "main.tree_run" for b in at.button)  # chain by default
    at.radio(key="main.shape").set_value("token tree").run()
    at.select_slider(key="main.tree_budget").set_value(8)
    press(at, "main.tree_run")
    text, chat = at.session_state["main.prompt"], at.session_state["main.chat"]
    pair, _, _ = direct()
    ids = prompts.encode(pair.tokenizer, text, chat)
    from specviz.decoding.tree import tree_decode

    r = tree_decode(pair.target, pair.draft, ids,
                    DecodeSettings(temperature=at.slider(key="main.temperature").value, seed=0, max_new_tokens=16),
                    budget=8, eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab).rounds[0]
    nodes = drawn_nodes(figure(at, "Round 1: a tree of 8 drafted tokens"))
    assert nodes["accepted path"] == sorted(r.path)


def test_the_main_page_drafts_its_first_round_as_a_spine_when_asked(bytes_only):
    from collections import Counter

    from streamlit.testing.v1 import AppTest

    from specviz.decoding import engine
    from specviz.core import prompts

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.radio(key="main.shape").set_value("spine").run()
    assert not at.exception and at.select_slider(key="main.tree_budget").disabled  # the chooser ends it
    assert any(e.label.startswith("Spine:") for e in at.expander)
    press(at, "main.tree_run")
    rnd, _ = at.session_state["main.spine"]
    # a spine: one chain (one node expanded per depth) with at most one sibling beside each of its tokens
    expanded = Counter(rnd.depths[j] for j in set(rnd.parents) if j >= 0)  # expanded nodes, by depth
    assert set(expanded.values()) == {1}
    per_depth = Counter(rnd.depths)
    assert max(per_depth.values()) <= 2 and min(per_depth) == 1 and max(per_depth) == len(per_depth)
    assert 2 in per_depth.values()  # this tiny draft is unsure somewhere: a sibling is drawn
    nodes = drawn_nodes(figure(at, "Round 1: a tree of"))
    assert nodes["accepted path"] == sorted(rnd.path)
    # greedy (the main page's default): what the round writes is what the target alone writes
    assert at.slider(key="main.temperature").value == 0
    text, chat = at.session_state["main.prompt"], at.session_state["main.chat"]
    pair, _, _ = direct()
    ids = prompts.encode(pair.tokenizer, text, chat)
    alone = engine.autoregressive_decode(pair.target, ids, DecodeSettings(max_new_tokens=len(rnd.emitted)),
                                         eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    assert rnd.emitted == alone.token_ids


@pytest.mark.cores
def test_the_tree_runs_times_say_when_they_were_taken_under_outside_load():
    """A target whose passes lose the CPU for 20 ms (a sleep: wall time, no CPU time), as under another
    program: the round's times are then not the device's speed, and the page says so next to them."""
    from busy import passes_losing_the_cpu
    from specviz.service import pairs
    from specviz.decoding import models

    at = opened()
    pair = pairs.load_pair_cached(models.list_pairs()[0].name, "float32")  # the page's pair, shared by sessions
    with passes_losing_the_cpu(pair.target):
        press(at, "tree.start")
    assert [w for w in at.warning if w.value.startswith("Taken under outside load: 1 of the tree run's 1 rounds")]


@pytest.mark.cores
def test_the_tree_runs_times_leave_out_the_waits_for_a_core_and_say_so():
    """Beside programs busy on every core the model's threads wait for a core; those waits are not counted
    in the round's times, and the page says how much was left out."""
    from busy import busy_programs, team_or_skip

    team_or_skip()
    at = opened()
    with busy_programs(2):
        press(at, "tree.start")
    assert [c for c in at.caption if c.value.startswith("Not counted: ") and "of the tree run" in c.value]
