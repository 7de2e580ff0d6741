"""The target alone, measured once per server and reused (teaching.baseline.BaselineStore), on tiny models.

The target's forward passes are counted by a forward hook: a reused baseline makes none, its warm-up included.
Whether a pass ran under outside load is set by each test (`machine`): this machine is shared, and the
store's decisions, not the load check (tests/test_clock.py), are under test here."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from tiny import split_settings, tiny_lm

from specviz.decoding import engine
from specviz.device import clock
from specviz.teaching import baseline
from specviz.core.settings import DecodeSettings

IDS, N = [2, 7, 1, 8], 8


@pytest.fixture(scope="module")
def models():
    return tiny_lm(410), tiny_lm(411)


class Machine:
    """The load check's verdict on every CPU pass: busy (other programs using the cores) or not."""

    busy = False


@pytest.fixture(autouse=True)
def machine(monkeypatch):
    m = Machine()
    monkeypatch.setattr(clock, "outside_load", lambda *a, **kw: m.busy)
    monkeypatch.setattr(clock, "crowded", lambda *a, **kw: m.busy)
    return m


class Clock:
    """time.time for a store, moved by hand."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@contextmanager
def counted(model):
    """The list that gets one entry per forward pass of `model` while the block runs."""
    calls: list[int] = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        yield calls
    finally:
        hook.remove()


def spec(models, ids=IDS, draft=None, **kw):
    target, d = models
    kw = {"k": 2, "max_new_tokens": N, "eos_token_id": [], **kw}
    settings, rest = split_settings(kw)
    return engine.speculative_decode(target, draft or d, ids, settings, **rest)


def passes(models, store, run, vocab=None) -> tuple[int, baseline.Measured]:
    """(target passes, what shared_target_alone gave) for the target alone with `run`'s prompt and settings."""
    target = models[0]
    with counted(target) as calls:
        got = baseline.shared_target_alone(target, run, vocab, store=store)
    return len(calls), got


def test_a_second_run_with_the_same_target_prompt_and_settings_reuses_the_baseline(models):
    """Another k, k policy and drafter share the target alone: it depends on none of them."""
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    first_run = spec(models)
    n1, first = passes(models, store, first_run)
    assert n1 >= N and not first.reused and len(first.run.token_ids) == N
    n2, again = passes(models, store, spec(models, k=3, k_policy="adaptive", draft=tiny_lm(412)))
    assert n2 == 0  # no warm-up, no timed token
    assert again.reused and again.run is first.run and again.at == first.at
    # greedy: the reused tokens are the target's own, so the identity check still holds
    assert again.run.token_ids == engine.autoregressive_decode(models[0], IDS, DecodeSettings(max_new_tokens=N),
                                                               eos_token_id=[]).token_ids == first_run.token_ids


def test_greedy_ignores_the_seed_and_truncation_and_sampling_does_not(models):
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    passes(models, store, spec(models, seed=1))
    assert passes(models, store, spec(models, seed=2, top_p=0.5, top_k=3))[0] == 0  # greedy: the argmax
    sampled = dict(temperature=0.9, seed=5)
    n, first = passes(models, store, spec(models, **sampled))
    assert n > 0 and not first.reused  # greedy's run is not a sampling run's
    assert passes(models, store, spec(models, **sampled, k=4))[0] == 0
    n, other = passes(models, store, spec(models, **{**sampled, "seed": 6}))
    assert n > 0 and not other.reused and other.run.settings["seed"] == 6


@pytest.mark.parametrize("change", [dict(ids=[2, 7, 1, 9]), dict(max_new_tokens=N - 2), dict(eos_token_id=[5]),
                                    dict(temperature=0.9), dict(vocab=60)], ids=lambda c: next(iter(c)))
def test_a_different_prompt_or_setting_is_measured_again(models, change):
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    passes(models, store, spec(models))
    vocab = change.pop("vocab", None)
    n, got = passes(models, store, spec(models, **change, **({"vocab": vocab} if vocab else {})), vocab)
    assert n > 0 and not got.reused


def test_another_target_object_is_measured_again(models):
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    passes(models, store, spec(models))
    other = (tiny_lm(410), models[1])  # the same weights, another model object
    assert passes(other, store, spec(other))[0] > 0


def test_a_baseline_older_than_the_ttl_is_measured_again(models):
    fake = Clock()
    store = baseline.BaselineStore(ttl_s=600, clock=fake)
    passes(models, store, spec(models))
    fake.t += 600
    n, at_ttl = passes(models, store, spec(models))
    assert n == 0 and at_ttl.reused and at_ttl.age_s(fake.t) == 600
    fake.t += 1
    n, again = passes(models, store, spec(models))
    assert n > 0 and not again.reused and again.at == fake.t
    assert passes(models, store, spec(models))[0] == 0  # the new one is kept in its place


def test_the_ttl_comes_from_the_environment_and_zero_turns_reuse_off(models, monkeypatch):
    store = baseline.BaselineStore(clock=Clock())
    monkeypatch.setenv("SPECVIZ_BASELINE_TTL_S", "0")
    passes(models, store, spec(models))
    assert passes(models, store, spec(models))[0] > 0
    monkeypatch.delenv("SPECVIZ_BASELINE_TTL_S")
    assert store.ttl() == 600
    passes(models, store, spec(models))
    assert passes(models, store, spec(models))[0] == 0


def test_a_baseline_timed_under_outside_load_is_not_kept(models, machine):
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    run = spec(models)
    machine.busy = True
    _, loaded = passes(models, store, run)
    machine.busy = False
    assert loaded.run.outside_load_rounds > 0 and not loaded.reused
    n, again = passes(models, store, run)
    assert n > 0 and not again.reused and again.run.outside_load_rounds == 0
    assert passes(models, store, run)[0] == 0  # a clean one is kept


def test_a_baseline_with_a_minor_share_under_outside_load_is_kept_and_a_serious_one_is_not(models):
    """As the page judges it (playback.load_note): flagged passes under 5 % of the run's time leave it this
    device's speed, so the sessions waiting for it reuse it instead of each timing their own."""
    import dataclasses

    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    run = spec(models)
    _, clean = passes(models, store, run)
    key = baseline.BaselineKey.of(models[0], run)
    rounds = list(clean.run.rounds)
    total = sum(r.round_s for r in rounds)
    for share, kept in ((0.01, True), (0.5, False)):
        store.clear()
        flagged = dataclasses.replace(rounds[0], outside_load=True, round_s=share * total / (1 - share))
        measured = dataclasses.replace(clean.run, rounds=[flagged, *rounds[1:]])
        assert measured.outside_load_rounds == 1
        store.put(models[0], key, measured)
        assert (store.get(models[0], key) is not None) is kept, share


def test_sessions_asking_at_once_share_one_measurement(models):
    """A room presses Run together: their runs end together, and one of them times the target alone while
    the others wait for its run instead of each timing their own."""
    store = baseline.BaselineStore(ttl_s=600, clock=Clock())
    runs = [spec(models, k=2 + i) for i in range(4)]
    got: dict[int, baseline.Measured] = {}
    go = threading.Barrier(len(runs))

    def session(i: int) -> None:
        go.wait()
        got[i] = baseline.shared_target_alone(models[0], runs[i], store=store)

    with counted(models[0]) as calls:
        threads = [threading.Thread(target=session, args=(i,)) for i in range(len(runs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(m.reused for m in got.values()) == [False, True, True, True]
    assert len({id(m.run) for m in got.values()}) == 1
    alone, _ = passes(models, baseline.BaselineStore(ttl_s=600), runs[0])
    assert len(calls) == alone
