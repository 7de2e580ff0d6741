"""lm.py: the static cache that CUDA graphs replay on, checked eagerly on the CPU against the dynamic one.

The graph recording itself needs a GPU (docs/performance.md, On a GPU); everything it relies on (fixed-length cache,
rollback by moving the length, masking what lies past it, spilling a long run, the idle pool) runs here.
"""

import copy

import pytest
import torch

from specviz.decoding import engine
from specviz.modeling import lm as L
from specviz.modeling.tiny import tiny_model
from specviz.core.settings import DecodeSettings

PROMPT = [5, 6, 7, 8, 9, 10, 11]


def pair():
    return tiny_model(seed=0, layers=2), tiny_model(seed=0, noise=0.3)


def make_static(*models, max_len=64):
    for m in models:
        assert L.static_cache(m, max_len, graphs=False) is not None


def test_static_feed_matches_dynamic_after_rollbacks():
    model = tiny_model(seed=1)
    dyn = L.CachedLM(model)
    make_static(model)
    st = L.open_lm(model)
    assert isinstance(st, L.StaticLM)
    ids = list(range(3, 40))
    for lm in (dyn, st):  # the same schedule of feeds and rollbacks on each
        lm.feed(ids[:10], keep=1)
    outs = {id(dyn): [], id(st): []}
    for n_keep, new in [(10, 5), (12, 3), (11, 6), (17, 1), (14, 8)]:
        for lm in (dyn, st):
            lm.rollback(n_keep)
            outs[id(lm)].append(lm.feed(ids[n_keep:n_keep + new], keep=new))
            assert lm.n == n_keep + new
    for a, b in zip(outs[id(dyn)], outs[id(st)]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_static_engine_output_equals_dynamic_greedy_and_sampling():
    t, d = pair()
    runs = [engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=40)),
            engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=3, max_new_tokens=60, temperature=0.8, seed=3)),
            engine.autoregressive_decode(t, PROMPT, DecodeSettings(max_new_tokens=30))]
    make_static(t, d)
    again = [engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=40)),
             engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=3, max_new_tokens=60, temperature=0.8, seed=3)),
             engine.autoregressive_decode(t, PROMPT, DecodeSettings(max_new_tokens=30))]
    for a, b in zip(runs, again):
        assert a.token_ids == b.token_ids
        assert [r.accepted for r in a.rounds] == [r.accepted for r in b.rounds]


def test_a_run_longer_than_the_static_cache_spills_into_a_dynamic_one():
    t, d = pair()
    want = engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=50))
    make_static(t, d, max_len=24)  # the prompt and 50 tokens do not fit
    got = engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=50))
    assert got.token_ids == want.token_ids
    assert all(lm.spilled for lm in t._specviz_static.idle)


def test_caches_go_back_to_the_idle_pool_and_are_reused():
    t, d = pair()
    make_static(t, d)
    engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=20))
    (first,) = t._specviz_static.idle
    (draft_lm,) = d._specviz_static.idle  # the drafter's cache went back when the drafter was collected
    engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=20))
    assert t._specviz_static.idle == [first] and d._specviz_static.idle == [draft_lm]
    a, b = L.open_lm(t), L.open_lm(t)  # two runs at once get two caches
    assert a is first and b is not a
    a.close(), b.close(), a.close()  # closing twice returns it once
    assert len(t._specviz_static.idle) == 2


def test_graphs_are_off_on_a_cpu_and_trees_keep_the_dynamic_cache():
    model = tiny_model(seed=2)
    plan = L.static_cache(model, 32)
    assert plan.graphs is False  # CUDA graphs only on CUDA
    lm = L.open_lm(model)
    lm.feed([3, 4, 5])
    assert lm.graphs == {}
    try:
        lm.compact([0, 1])
    except NotImplementedError:
        pass
    else:
        raise AssertionError("a static cache cannot compact a tree's path")


def test_a_pass_that_cannot_be_recorded_runs_eagerly_with_the_same_output():
    # on a CPU, recording a CUDA graph fails at once: the same fallback as an op a graph cannot record
    t, d = pair()
    make_static(t, d)
    want = _runs(t, d)
    for m in (t, d):
        L.static_cache(m, 64, graphs=True)
    got = _runs(t, d)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    lm = t._specviz_static.idle[0]
    assert lm.graph_error and lm.graphs and all(g is None for g in lm.graphs.values())


def test_a_copied_model_gets_its_own_empty_plan():
    model = tiny_model(seed=3)
    make_static(model)
    L.open_lm(model).close()
    twin = copy.deepcopy(model)  # as with_draft_precision copies a draft
    assert twin._specviz_static is not model._specviz_static
    assert twin._specviz_static.idle == [] and twin._specviz_static.max_len == 64
    assert len(model._specviz_static.idle) == 1


def _runs(t, d):
    return [engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=4, max_new_tokens=40)),
            engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=2, k_policy="best", max_new_tokens=40)),
            engine.speculative_decode(t, d, PROMPT, DecodeSettings(k=3, max_new_tokens=60, temperature=0.8, seed=3)),
            engine.autoregressive_decode(t, PROMPT, DecodeSettings(max_new_tokens=40))]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graph_replays_equal_eager_passes():
    t, d = (m.cuda() for m in pair())
    make_static(t, d)  # eager passes on the static cache
    want = _runs(t, d)
    assert want[0].token_ids == want[3].token_ids  # greedy: speculative == the target alone
    for m in (t, d):
        L.static_cache(m, 64, graphs=True)
    for i in range(2):  # the first runs record the graphs, the second replay them from the idle caches
        got = _runs(t, d)
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
        recorded = [lm.recorded_s for lm in t._specviz_static.idle]  # since each cache's last reset
        assert all(r > 0 for r in recorded) if i == 0 else all(r == 0 for r in recorded), recorded
    lms = t._specviz_static.idle + d._specviz_static.idle
    assert all(lm.graph_error is None and None not in lm.graphs.values() for lm in lms), [lm.graph_error for lm in lms]
    assert {key[0] for lm in t._specviz_static.idle for key in lm.graphs} >= {1, 4, 5}  # T = 1, k + 1
