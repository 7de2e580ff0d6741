"""Drafts made from the target itself (specviz/decoding/selfdraft.py): the target for itself, and early exit.

On the tiny registry (tests/models_tiny.yaml): tiny-self and tiny-early-exit
load through load_pair, share the target's weights, are greedy-identical to
the target alone, keep p under the lossless rules, and show in the pair
control and in `python -m specviz run`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from specviz.decoding import engine, models, selfdraft
from specviz.modeling import fastlinear, tiny
from specviz.teaching import charts, early_exit, rules
from specviz.modeling.config import parse_registry
from specviz.core.errors import ConfigError, InvalidSetting
from stats import passes, total_variation
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
DERIVED_PAIRS = ["tiny-self", "tiny-early-exit"]


def _reference_target(name: str):
    """The pair's target built independently from its tiny spec (not through load_pair)."""
    return tiny.tiny_model(0, layers=4 if name == "tiny-early-exit" else 2)


def _storages(model) -> set[int]:
    # a weight packed for oneDNN (specviz.modeling.fastlinear, the target's) has no storage to point at: it counts as itself
    return {id(t) if fastlinear.w_is_packed(t) else t.untyped_storage().data_ptr()
            for t in [*model.parameters(), *model.buffers()]}


@pytest.mark.parametrize("name", DERIVED_PAIRS)
def test_derived_draft_pairs_are_greedy_identical_to_the_target_alone(name):
    pair = models.load_pair(name, registry=TINY)
    tok = pair.tokenizer
    for text in ("The capital of France is", "def f(x):\n    return", "1, 2, 3,"):
        ids = tok(text)["input_ids"]
        base = engine.autoregressive_decode(_reference_target(name), ids,
                                            DecodeSettings(max_new_tokens=40, temperature=0.0),
                                            eos_token_id=[], vocab=pair.shared_vocab)
        spec = engine.speculative_decode(pair.target, pair.draft, ids,
                                         DecodeSettings(k=4, max_new_tokens=40, temperature=0.0),
                                         eos_token_id=[], vocab=pair.shared_vocab)
        assert spec.token_ids == base.token_ids, text
        if name == "tiny-self":
            assert spec.alpha == 1.0  # the target agrees with itself every time


@pytest.mark.parametrize("name", DERIVED_PAIRS)
def test_derived_draft_pairs_keep_p_under_the_lossless_rules(name):
    pair = models.load_pair(name, registry=TINY)
    ids = pair.tokenizer("The capital of France is")["input_ids"]
    lab = rules.rule_lab(pair.target, pair.draft, ids, [rules.Rule("rejection"), rules.Rule("exact-match")],
                         n=20_000, seed=1, vocab=pair.shared_vocab, top=pair.shared_vocab)
    for r in lab.results:
        assert passes(r.counts, lab.p, lab.n), r.label


def test_the_drafts_share_the_targets_weights():
    self_pair = models.load_pair("tiny-self", registry=TINY)
    assert self_pair.draft is self_pair.target
    pair = models.load_pair("tiny-early-exit", registry=TINY)
    t, d = pair.target, pair.draft
    assert d is not t and _storages(d) <= _storages(t)  # no tensor of its own
    assert len(d.model.layers) == 2 and all(a is b for a, b in zip(d.model.layers, t.model.layers[:2]))
    assert d.lm_head is t.lm_head and d.model.norm is t.model.norm and d.model.embed_tokens is t.model.embed_tokens
    assert t.config.num_hidden_layers == 4 and d.config.num_hidden_layers == 2  # the target's config untouched
    assert "first 2 of 4 layers" in pair.sources["draft"]


def test_early_exit_is_the_first_layers_then_norm_and_head():
    t = tiny.tiny_model(0, layers=4)
    x = torch.tensor([[5, 6, 7, 8, 9]])
    hidden = t(x, output_hidden_states=True).hidden_states  # (embeddings, after layer 1, ..., normed last)
    for L in (1, 2, 3):
        want = t.lm_head(t.model.norm(hidden[L]))
        assert torch.allclose(selfdraft.early_exit(t, L)(x).logits, want, atol=1e-5), L


def test_early_exit_layers_out_of_range_are_clear_errors():
    t = tiny.tiny_model(0, layers=4)
    for bad in (0, 4, 7, 1.5, True):
        with pytest.raises(InvalidSetting, match="from 1 to 3 \\(the model has 4\\)"):
            selfdraft.early_exit(t, bad)
    # a depth the registry cannot check is checked at load, naming the pair and the draft
    with pytest.raises(InvalidSetting, match="pair 'custom': draft: early exit: layers must be"):
        models.load_pair("tiny-random", draft="early-exit:5", registry=TINY)
    with pytest.raises(InvalidSetting, match="early-exit:L needs a layer count"):
        models.load_pair("tiny-random", draft="early-exit:x", registry=TINY)


def _registry_with(pair: dict, models_extra: dict | None = None):
    data = yaml.safe_load(TINY.read_text())
    data["pairs"]["p"] = pair
    data["models"].update(models_extra or {})
    return parse_registry(data, label="models_tiny.yaml")


@pytest.mark.parametrize("pair,message", [
    ({"draft": {"early-exit": {"layers": 2}}, "target": "tiny-target", "description": "d"},
     "pairs.p.draft.early-exit.layers: must be below the target's 2 layers, got 2"),
    ({"draft": {"early-exit": {"layers": 0}}, "target": "tiny-target", "description": "d"},
     "pairs.p.draft.early-exit.layers: must be >= 1"),
    ({"draft": {"early-exit": {}}, "target": "tiny-target", "description": "d"},
     "pairs.p.draft.early-exit.layers: missing required field"),
    ({"draft": {"early_exit": {"layers": 1}}, "target": "tiny-target", "description": "d"},
     "pairs.p.draft.early_exit: unknown key"),
    ({"draft": "tiny-draft", "target": "self", "description": "d"},
     "pairs.p.target: unknown model 'self' ('self' and early-exit are drafts only)"),
])
def test_registry_mistakes_in_derived_drafts_name_the_field(pair, message):
    with pytest.raises(ConfigError, match=message.replace("(", "\\(").replace(")", "\\)")):
        _registry_with(pair)


def test_self_is_a_reserved_model_name():
    spec = {"label": "x", "family": "tiny", "tokenizer": "tiny-chars", "params": 1, "source": {"tiny": {}}}
    with pytest.raises(ConfigError, match="models.self: the name 'self' is reserved"):
        _registry_with({"draft": "tiny-draft", "target": "tiny-target", "description": "d"}, {"self": spec})


def test_cli_runs_the_derived_draft_pairs():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in DERIVED_PAIRS:
        r = subprocess.run([sys.executable, "-m", "specviz", "--models", str(TINY), "run", "--pair", name,
                            "--prompt", "hello", "--max-new-tokens", "8"],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        assert f"generating with {name}" in r.stderr
    r = subprocess.run([sys.executable, "-m", "specviz", "--models", str(TINY), "models"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0 and all(f"{n}: available" in r.stdout for n in DERIVED_PAIRS), r.stdout


def test_the_pair_control_lists_and_loads_the_derived_draft_pairs(tiny_app_registry):
    from streamlit.testing.v1 import AppTest

    tiny_app_registry(TINY)
    at = AppTest.from_file(str(ROOT / "pages" / "5_Exactness.py"), default_timeout=120)
    at.run()
    shown = [o.split(" · ")[0] for o in at.selectbox(key="exact.pair").options]  # "name · ✓"
    assert set(DERIVED_PAIRS) <= set(shown) and all(f"{n} · ✓" in at.selectbox(key="exact.pair").options
                                                     for n in DERIVED_PAIRS)
    for name in DERIVED_PAIRS:
        at.selectbox(key="exact.pair").set_value(name).run()
        at.number_input(key="exact.max_new").set_value(10)
        at.button(key="exact.run_greedy").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert {m.label: m.value for m in at.metric}["identical"] == "yes", name


def test_early_exit_sweep_alpha_c_and_speedup_against_l():
    t = tiny.tiny_model(0, layers=4)
    ids = [5, 6, 7, 8, 9]
    assert early_exit.default_layers(4, 3) == [1, 2, 4] and early_exit.default_layers(28) == [7, 14, 28]
    sweep = early_exit.early_exit_sweep(t, ids, [3, 1, 4, 3], DecodeSettings(k=3, max_new_tokens=16))
    assert [pt.layers for pt in sweep.points] == [1, 3, 4] and sweep.n_layers == 4
    for pt in sweep.points:
        direct = engine.speculative_decode(t, selfdraft.draft_at(t, pt.layers), ids,
                                           DecodeSettings(k=3, max_new_tokens=16, temperature=0.0))
        assert pt.alpha == direct.alpha and pt.tokens_per_pass == direct.tokens_per_pass
        assert pt.c > 0 and pt.speedup > 0 and pt.predicted > 0
    assert sweep.points[-1].alpha == 1.0  # L = 4: the target itself
    fig = charts.fig_early_exit(sweep).to_dict()
    assert [d["name"] for d in fig["data"]] == ["α (drafts accepted)", "c (draft step / target step)",
                                               "speedup, measured", "speedup, predicted from α and c"]
    assert list(fig["data"][0]["y"]) == [pt.alpha for pt in sweep.points]
    assert list(fig["data"][2]["y"]) == [pt.speedup for pt in sweep.points]
    with pytest.raises(InvalidSetting, match="at least one"):
        early_exit.early_exit_sweep(t, ids, [])



def _target_calls(t, fn) -> int:
    """Forward calls of the target's top module while fn runs (devtools.timing's counter)."""
    from specviz.devtools.timing import Calls

    calls = Calls(t)
    try:
        fn()
    finally:
        calls.close()
    return calls.n


def test_early_exit_sweep_times_the_target_alone_and_warms_up_once_for_every_depth(monkeypatch):
    """A second depth costs the target exactly its own speculative run: no second target-alone run, no second
    warm-up (the store keeps nothing here, so only the sweep's own reuse can spare them)."""
    from specviz.teaching import baseline

    monkeypatch.setattr(baseline.STORE, "ttl_s", 0.0)
    t = tiny.tiny_model(0, layers=4)
    ids, settings = [5, 6, 7, 8, 9], DecodeSettings(k=3, max_new_tokens=16)
    one = _target_calls(t, lambda: early_exit.early_exit_sweep(t, ids, [1], settings))
    two = _target_calls(t, lambda: early_exit.early_exit_sweep(t, ids, [1, 2], settings))
    spec2 = _target_calls(t, lambda: engine.speculative_decode(t, selfdraft.draft_at(t, 2), ids, settings))
    assert two - one == spec2


def test_early_exit_sweep_stopped_after_one_depth_keeps_that_depth():
    from specviz.core.errors import Stopped

    t = tiny.tiny_model(0, layers=4)
    ticks = []

    def stop_after_one(msg, frac):
        ticks.append(msg)
        return msg.done < 1  # False once one depth is done: stop

    with pytest.raises(Stopped) as got:
        early_exit.early_exit_sweep(t, [5, 6, 7], [1, 2, 4], DecodeSettings(k=2, max_new_tokens=8),
                                    progress=stop_after_one)
    part = got.value.partial
    assert [pt.layers for pt in part.points] == [1] and part.n_layers == 4 and part.k == 2
    assert ticks[-1].done == 1 and ticks[-1].total == 3 and ticks[-1].eta_s is not None

# --- sampling: the target's distribution, with the target drafting for itself and with early exit ---------------

N_SAMPLED = 1000  # a q that is not the one drawn from misses by a TV of 0.1 or more


@pytest.fixture(scope="module")
def small_vocab_deep_target():
    """A 4-layer tiny target over 6 tokens (float64): whole distributions are enumerable, and its first 2
    layers make a draft that overlaps it without being it."""
    return tiny.tiny_model(11, vocab=6, layers=4, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["self", "early-exit"])
def test_sampling_with_a_draft_made_of_the_target_keeps_its_distribution(small_vocab_deep_target, kind):
    """Three tokens at k = 2 (a bonus fits after two accepted drafts), over seeded runs, against the enumerated p.
    The self draft shares the target's model object and the early-exit draft its modules: each must keep
    its own cache and report the q of its own pass."""
    from test_engine import PROMPT, exact_distribution

    target = small_vocab_deep_target
    draft = target if kind == "self" else selfdraft.early_exit(target, 2)
    exact = exact_distribution(target, 1.0, top_k=4, top_p=0.95)
    counts, rounds = {}, []
    for seed in range(N_SAMPLED):
        run = engine.speculative_decode(target, draft, PROMPT,
                                        DecodeSettings(k=2, temperature=1.0, top_k=4, top_p=0.95, max_new_tokens=3,
                                                       seed=seed), eos_token_id=[])
        counts[tuple(run.token_ids)] = counts.get(tuple(run.token_ids), 0) + 1
        rounds += run.rounds
    assert passes(counts, exact, N_SAMPLED), total_variation(counts, exact, N_SAMPLED)
    kinds = [r.extra_kind for r in rounds]
    assert kinds.count("bonus") > N_SAMPLED / 10  # two drafts accepted, then the target's own token
    if kind == "self":
        assert all(all(r.accepted) for r in rounds)  # p = q: nothing is ever refused
    else:
        assert kinds.count("correction") > N_SAMPLED / 5
        q_exact = exact_distribution(draft, 1.0, top_k=4, top_p=0.95)  # and the draft is not the target
        assert 0.5 * sum(abs(exact.get(x, 0.0) - q_exact.get(x, 0.0)) for x in exact.keys() | q_exact.keys()) > 0.1
