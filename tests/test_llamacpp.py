"""specviz.tools.llamacpp and the bench's llama.cpp rows: why the methods are left out, the rows against
llama.cpp's own target alone, and (where llama-cpp-python is installed, on the real pair) its speculative
decoding on the pair's GGUF files."""

from __future__ import annotations

import pytest

from specviz.tools import bench, llamacpp
from specviz.tools.bench import Sample
from specviz.tools.llamacpp import LLAMA_SPEC, LLAMA_TARGET


def test_without_llama_cpp_python_the_methods_are_left_out_with_the_install_command(monkeypatch):
    monkeypatch.setattr(llamacpp, "available", lambda: False)
    pair = bench.tiny_pair()
    out = bench.left_out(pair, bench.method_names([1]))
    assert set(out) == set(llamacpp.METHODS)
    assert all(f"llama-cpp-python=={llamacpp.VERSION}" in why for why in out.values())


def test_a_pair_without_gguf_files_is_left_out_for_that_reason(monkeypatch):
    monkeypatch.setattr(llamacpp, "available", lambda: True)
    out = bench.left_out(bench.tiny_pair(), bench.method_names([1]))
    assert set(out) == set(llamacpp.METHODS) and all("GGUF" in why for why in out.values())


def test_the_registry_pair_is_runnable_where_llama_cpp_python_is(monkeypatch):
    from specviz.modeling.config import load_registry

    monkeypatch.setattr(llamacpp, "available", lambda: True)
    reg = load_registry()
    assert llamacpp.missing_why(reg.pairs[reg.default_pair]) is None


def _rows(walls: dict[str, list[float]], tokens: dict[str, list[list[int]]], passes=None, draft=None):
    """The per-domain rows bench.summarise makes from these generations (one domain, "code")."""
    samples = {("greedy", "code", m): [Sample(t, w, passes=(passes or {}).get(m), draft_s=(draft or {}).get(m))
                                       for t, w in zip(tokens[m], walls[m])] for m in walls}
    rows = [{"mode": "greedy", "domain": "code", **bench.summarise(m, samples[("greedy", "code", m)], {}, (0.1, {}))}
            for m in walls]
    return rows, samples


def test_llama_rows_are_measured_against_llama_cpps_own_target_alone():
    same, other = [[1, 2, 3, 4]] * 2, [[1, 2, 9, 9]] * 2
    rows, samples = _rows({LLAMA_TARGET: [2.0, 2.2], LLAMA_SPEC: [1.0, 1.1]}, {LLAMA_TARGET: same, LLAMA_SPEC: same},
                          passes={LLAMA_TARGET: 4, LLAMA_SPEC: 2}, draft={LLAMA_TARGET: 0.0, LLAMA_SPEC: 0.25})
    bench._own_baseline("greedy", rows, samples)
    spec = next(r for r in rows if r["method"] == LLAMA_SPEC)
    assert spec["own_speedup"] == pytest.approx(2.0)  # median s/token 0.525 against 0.2625
    assert spec["same_as_own_target"] is True
    assert spec["tokens_per_pass"] == pytest.approx(2.0) and spec["draft_pct"] == pytest.approx(100 * 0.5 / 2.1)
    rows, samples = _rows({LLAMA_TARGET: [2.0], LLAMA_SPEC: [1.0]}, {LLAMA_TARGET: same[:1], LLAMA_SPEC: other[:1]})
    bench._own_baseline("greedy", rows, samples)
    assert next(r for r in rows if r["method"] == LLAMA_SPEC)["same_as_own_target"] is False


def test_the_table_shows_both_baselines_and_the_fastest_specviz_method_against_llama_spec():
    rows, samples = _rows({"best": [1.0], LLAMA_TARGET: [4.0], LLAMA_SPEC: [2.0]},
                          {"best": [[1] * 8], LLAMA_TARGET: [[1] * 8], LLAMA_SPEC: [[1] * 8]},
                          passes={LLAMA_TARGET: 8, LLAMA_SPEC: 3}, draft={LLAMA_TARGET: 0.0, LLAMA_SPEC: 0.5})
    summ = [{k: v for k, v in r.items() if k != "domain"} for r in rows]  # the mixed set's rows: no domain
    bench._own_baseline("greedy", rows + summ, samples)
    text = "\n".join(bench.llama_table({r["method"]: r for r in summ}, {("code", r["method"]): r for r in rows},
                                       ["code"]))
    assert "| llama-spec | 2.00 | 4.00 | 2.00 | 2.67 | 25 |" in text
    assert "specviz's fastest method here, best, makes 8.00 tokens/s: 2.00× llama-spec's 4.00" in text
    checks = bench._llama_checks({r["method"]: r for r in summ})
    assert checks["llama_spec_over_llama_target_mixed"] == pytest.approx(2.0)
    assert checks["best_tokens_per_s_over_llama_spec_mixed"] == pytest.approx(2.0)


@pytest.mark.real
@pytest.mark.skipif(not llamacpp.available(), reason=f"llama-cpp-python is not installed: {llamacpp.INSTALL}")
def test_llama_cpp_speculative_decoding_on_the_real_pair_keeps_its_target_text_with_fewer_passes():
    from transformers import AutoTokenizer

    from specviz.core.prompts import bench_prompts, encode
    from specviz.modeling import store
    from specviz.modeling.config import load_registry

    reg = load_registry()
    spec = reg.pairs[reg.default_pair]
    tok = AutoTokenizer.from_pretrained(store.cached_dir(spec.target.source, spec.target.name))
    prompts = {d: encode(tok, p.text, p.chat) for d, p in bench_prompts().items() if d in ("code", "factual")}
    llama = llamacpp.LlamaPair.open(spec, n_ctx=bench.llama_context(prompts, 32), threads=2)
    always = llamacpp.LlamaPair(*llama.paths.values(), n_ctx=bench.llama_context(prompts, 32), threads=2,
                                draft_max=4, p_min=0.0)  # 4 drafts every round, sure or not: some are rejected
    for domain, ids in prompts.items():
        alone = llama.generate(LLAMA_TARGET, ids, 32, [tok.eos_token_id], 0.0, 0)
        assert alone.passes == len(alone.tokens) and alone.draft_s == 0  # one pass per token, the prompt's too
        runs = {p.p_min: p.generate(LLAMA_SPEC, ids, 32, [tok.eos_token_id], 0.0, 0) for p in (llama, always)}
        for p_min, run in runs.items():
            assert run.tokens == alone.tokens, (domain, p_min)
            assert run.draft_s > 0
        if domain == "code":  # llama.cpp's rule: the draft's long, sure guesses are kept whole
            assert len(alone.tokens) / runs[llamacpp.DRAFT_P_MIN].passes > 4
        # always drafting, some drafts were checked and not kept: the rejection path ran
        assert runs[0.0].proposed > len(alone.tokens) - runs[0.0].passes


@pytest.mark.real
@pytest.mark.skipif(not llamacpp.available(), reason=f"llama-cpp-python is not installed: {llamacpp.INSTALL}")
def test_the_bench_asks_llama_cpp_in_a_process_of_its_own_for_the_same_generation():
    import os

    from specviz.modeling.config import load_registry

    reg = load_registry()
    spec = reg.pairs[reg.default_pair]
    ids = list(range(100, 140))
    here = llamacpp.LlamaPair.open(spec, n_ctx=128, threads=2)
    there = llamacpp.LlamaProcess.open(spec, n_ctx=128, threads=2)
    try:
        assert there._proc.pid != os.getpid()
        for method in llamacpp.METHODS:
            g = there.generate(method, ids, 16, [0], 0.0, 0)
            assert g.tokens == here.generate(method, ids, 16, [0], 0.0, 0).tokens
            assert g.cpu_s > 0  # the other process's CPU time, which the bench does not count as outside load
        assert set(there.forward_costs(ids, (1, 2), 1)) == {"target", "draft"}
    finally:
        there.close()
    assert not there._proc.is_alive()


def test_asking_for_llamas_speculative_decoding_also_runs_its_own_target_alone():
    assert bench.select_methods([4], [], ["best", LLAMA_SPEC]) == ["target", "best", LLAMA_TARGET, LLAMA_SPEC]
    assert bench.select_methods([4], [], [LLAMA_TARGET]) == ["target", LLAMA_TARGET]
    assert LLAMA_TARGET not in bench.select_methods([4], [], ["best"])
