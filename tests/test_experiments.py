"""specviz/teaching/experiments.py: compare_with_baseline reads this server's one timing of the target alone,
and times it again when the speedup it gives is beyond what the passes allow."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.core import measure
from specviz.teaching import baseline, experiments
from tiny import tiny_lm
from specviz.core.settings import DecodeSettings

IDS, N = [2, 7, 1, 8], 8


@pytest.fixture
def store(monkeypatch):
    own = baseline.BaselineStore(ttl_s=600)
    monkeypatch.setattr(baseline, "STORE", own)
    return own


def target_passes(target, fn):
    calls = []
    hook = target.register_forward_hook(lambda *_: calls.append(1))
    try:
        out = fn()
    finally:
        hook.remove()
    return len(calls), out


def compare(target, draft, k):
    return experiments.compare_with_baseline(target, draft, IDS, DecodeSettings(k=k, max_new_tokens=N), eos_token_id=[],
                                             warm=False)


def quiet(run):
    """run as if no round ran under outside load (this shared machine's load must not decide what is kept)."""
    return dataclasses.replace(run, rounds=[dataclasses.replace(r, outside_load=False) for r in run.rounds])


def test_pages_and_lessons_read_one_timing_of_the_target_alone(store, monkeypatch):
    target, draft = tiny_lm(410), tiny_lm(411)
    first = compare(target, draft, 2)
    assert not first.base_reused and first.identical
    if first.base.outside_load_rounds:  # timed under outside load here: kept as a quiet run for the test
        store.put(target, baseline.BaselineKey.of(target, first.spec, None), quiet(first.base))
    spec_only, _ = target_passes(target, lambda: experiments.speculative_decode(
        target, draft, IDS, DecodeSettings(k=4, max_new_tokens=N), eos_token_id=[]))
    calls, again = target_passes(target, lambda: compare(target, draft, 4))  # another k: the same target alone
    assert again.base_reused and again.identical and calls == spec_only  # no target-alone pass at all
    assert again.base.token_ids == first.base.token_ids and again.base_at == pytest.approx(first.base_at)


@pytest.mark.cores
def test_a_speedup_beyond_the_passes_is_timed_again(store):
    target, draft = tiny_lm(420), tiny_lm(421)
    first = compare(target, draft, 3)
    key = baseline.BaselineKey.of(target, first.spec, None)
    # the kept target alone, slowed (another program took the cores while it ran): twice past the bound
    bound = first.spec.tokens_per_pass / first.base.tokens_per_pass
    slow = quiet(dataclasses.replace(first.base, decode_s=first.base.decode_s * 2 * bound / first.speedup))
    store.put(target, key, slow)
    assert measure.beyond_pass_bound(first.spec, slow)
    calls, cmp = target_passes(target, lambda: compare(target, draft, 3))
    assert not cmp.base_reused and calls > len(cmp.spec.rounds)  # timed again: the target alone's passes too
    assert cmp.base.decode_s < slow.decode_s and cmp.slowed == measure.beyond_pass_bound(cmp.spec, cmp.base)


def test_the_pass_bound():
    target, draft = tiny_lm(430), tiny_lm(431)
    cmp = experiments.compare_with_baseline(target, draft, IDS, DecodeSettings(k=3, max_new_tokens=N), eos_token_id=[],
                                            warm=False)
    spec, base = cmp.spec, cmp.base
    bound = spec.tokens_per_pass / base.tokens_per_pass
    # a spec run as fast as its passes allow is fine; 20 % faster than that is not

    def paced(speedup: float):
        """spec retimed so that measure.speedup(spec, base) == speedup."""
        per_token = base.decode_s / len(base.token_ids) / speedup
        return dataclasses.replace(spec, decode_s=per_token * len(spec.token_ids))

    assert measure.speedup(paced(bound), base) == pytest.approx(bound, rel=1e-6)
    assert not measure.beyond_pass_bound(paced(bound), base)
    assert not measure.beyond_pass_bound(paced(bound * 1.05), base)  # within timing noise
    assert measure.beyond_pass_bound(paced(bound * 1.2), base)
