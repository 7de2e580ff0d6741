"""specviz/teaching/costs.py: c and the pass costs are measured once per server and shared (the Speedup page's
section 1 and the lessons read the same Cost), and two measurements of one draft's c that disagree beyond their
noise are measured again, then flagged. Also measure.c_disagree and the lessons' flags on a speedup above what
its passes allow. On the tiny random pair.

Whether a pass ran under outside load is set by each test (`machine`, as in tests/test_baseline.py): this machine
is shared, and the store's decisions, not the load check, are under test here."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from specviz.core import measure
from specviz.core.settings import DecodeSettings
from specviz.teaching import costs, explain, lessons, race


class Machine:
    """The load check's verdict on every CPU pass: busy (other programs using the cores) or not."""

    busy = False


@pytest.fixture(autouse=True)
def machine(monkeypatch):
    from specviz.device import clock

    m = Machine()
    monkeypatch.setattr(clock, "outside_load", lambda *a, **kw: m.busy)
    monkeypatch.setattr(clock, "OTHERS_SHARE", float("inf"))  # busy passes only, never a crowded machine
    return m


@pytest.fixture(autouse=True)
def empty_store():
    costs.STORE.clear()
    yield
    costs.STORE.clear()


@pytest.fixture
def timed_passes(monkeypatch):
    """How many forward_cost calls ran (each a set of timed passes): wraps the real one."""
    from specviz.teaching import experiments

    calls = []
    real = experiments.forward_cost

    def counted(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)

    monkeypatch.setattr(experiments, "forward_cost", counted)
    return calls


def test_the_speedup_page_and_the_lessons_read_one_measurement_of_c(tiny_pair, timed_passes):
    """Section 1's Cost (race.measure_cost), then the lessons' verify cost and best k on the same pair: no second
    timing; the lessons quote its figures. (Seen failing with lessons._pass_costs timing forward_cost itself.)"""
    cost = race.measure_cost(tiny_pair.target, tiny_pair.chain_draft())
    n = len(timed_passes)
    assert n > 0 and not cost.reused and measure.c_ratio(cost.draft_s, cost.target_s) == cost.c
    ctx = lessons.Context(pair=tiny_pair, settings=DecodeSettings(k=4, max_new_tokens=8))
    out = lessons.verify_cost(ctx)
    assert len(timed_passes) == n, "the lesson timed the passes again"
    assert out.values["t1_ms"] == pytest.approx(1000 * statistics.median(cost.timings[1]))
    assert out.values["t5_ms"] == pytest.approx(1000 * statistics.median(cost.timings[lessons.K + 1]))
    assert "this machine's profile" in out.source and "measured earlier" in out.source
    best = lessons.best_k_pair(ctx, ks=(1, 2))
    kept = costs.STORE.get(tiny_pair.target, tiny_pair.draft, costs.CostKey.of(tiny_pair.target, tiny_pair.draft))
    assert best.values["c"] == kept.c  # the shared c (timed again only if the lesson's own run contradicted it)
    assert race.measure_cost(tiny_pair.target, tiny_pair.chain_draft()).at == kept.at  # the page again: shared


def test_the_store_keeps_a_cost_for_its_ttl_and_per_draft(tiny_pair, tiny_models, timed_passes):
    now = [1000.0]
    store = costs.CostStore(ttl_s=60, clock=lambda: now[0])
    first = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1)
    n = len(timed_passes)
    again = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1)
    assert again.reused and again.at == first.at and len(timed_passes) == n
    other = tiny_models()[0]  # another draft model (the same weights, its own object): its own timing
    costs.shared_cost(tiny_pair.target, other, store=store, reps=2, pass_reps=1)  # another draft: its own timing
    assert len(timed_passes) > n
    n = len(timed_passes)
    now[0] += 61  # past the TTL: timed again
    late = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1)
    assert not late.reused and len(timed_passes) > n


def test_a_cost_timed_under_outside_load_is_not_kept(tiny_pair, machine):
    store = costs.CostStore()
    machine.busy = True
    loaded = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1)
    assert loaded.load is not None and loaded.load.serious
    machine.busy = False
    again = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1)
    assert not again.reused and again.load is None
    assert costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=store, reps=2, pass_reps=1).reused


def test_c_disagree_is_beyond_the_timings_spread():
    steps, target = [0.010, 0.011, 0.012, 0.010], [0.20, 0.21, 0.19, 0.20]
    assert not measure.c_disagree((steps, target), (steps, target))
    assert not measure.c_disagree((steps, target), ([s * 1.3 for s in steps], target))  # within the slack
    assert measure.c_disagree((steps, target), ([s * 3 for s in steps], target))  # 0.051 against 0.135, as filed
    assert not measure.c_disagree((steps, target), ([], target))  # no timing: nothing to judge
    lo, hi = measure.c_range(steps, target)
    assert lo <= measure.c_ratio(steps, target) <= hi


def test_a_disagreeing_c_is_measured_again_once_then_flagged(tiny_pair, timed_passes):
    """c from runs far from section 1's: the Cost is timed once more, and the disagreement stays and is said.
    (Seen failing with check_c returning the first verdict without timing again, and with c_disagree False.)"""
    cost = costs.shared_cost(tiny_pair.target, tiny_pair.draft, reps=3, pass_reps=1)
    own = (cost.draft_s, cost.target_s)
    ok = costs.check_c(tiny_pair.target, tiny_pair.draft, cost, own)
    assert ok.agree and not ok.remeasured and ok.cost is cost
    n = len(timed_passes)
    # 1000 times section 1's draft steps: far beyond what timing noise on a loaded machine moves a second timing
    far = ([s * 1000 for s in cost.draft_s], cost.target_s)
    chk = costs.check_c(tiny_pair.target, tiny_pair.draft, cost, far)
    assert chk.remeasured and len(timed_passes) > n and chk.cost.at >= cost.at and not chk.cost.reused
    assert not chk.agree and chk.run_c == pytest.approx(1000 * cost.c, rel=1e-6)
    said = explain.c_disagreement(chk.cost.c, chk.run_c, "the runs of sections 1b and 1c")
    assert f"{chk.cost.c:.3f}" in said and f"{chk.run_c:.3f}" in said
    assert costs.STORE.get(tiny_pair.target, tiny_pair.draft, costs.CostKey.of(tiny_pair.target, tiny_pair.draft)) \
        .at == chk.cost.at  # the new timing replaced the old one for every later reader


def test_a_recorded_speedup_above_what_its_passes_allow_is_flagged_not_taught():
    """A recording whose target alone was slowed (speedup 5× its pass bound): the lesson steps that show its
    speedup carry the flag; the shipped recordings carry none. (Seen failing with _timing ignoring the bound.)"""
    from specviz.data import runfile

    shipped = {r.name: r for r in runfile.list_recorded()}
    ctx = lessons.Context(recordings=shipped)
    step = next(s for le in lessons.LESSONS for s in le.steps if s.experiment == "greedy_passes")
    assert lessons.run_step(step, ctx).flags == ()
    name = lessons.RECORDED[("The capital of France", 0.0)]
    rec = shipped[name]
    bound = runfile.pass_bound(rec.run, rec.baseline)
    slowed = dataclasses.replace(rec, baseline={**rec.baseline, "speedup": 5 * bound})
    out = lessons.run_step(step, lessons.Context(recordings={**shipped, name: slowed}))
    assert len(out.flags) == 1 and f"{5 * bound:.2f}×" in out.flags[0] and "not a result" in out.flags[0]


# --- this machine's profile: kept on disk under the identity of the machine and the models ---------------------


def test_a_profile_is_kept_on_disk_and_given_back_to_a_new_server(tiny_pair, timed_passes):
    """With the pair's identity, a Cost is also kept on disk (at both contexts) and a new process (a new store)
    gets it back without timing; another identity, a week-old profile or a request to measure again (fresh) time
    anew. (Seen failing with shared_cost not reading load_profile: the new store timed again.)"""
    ident = costs.identity(tiny_pair)
    first = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=costs.CostStore(), reps=2, pass_reps=1,
                              ident=ident)
    assert first.ident == ident and set(first.long) == set(first.timings) and costs.profile_path(ident).is_file()
    n = len(timed_passes)
    back = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=costs.CostStore(), reps=2, pass_reps=1,
                             ident=ident)
    assert back.reused and back.at == first.at and back.c == first.c and len(timed_passes) == n
    assert back.timings == first.timings and back.long == first.long
    other = {**ident, "draft_precision": "int4"}  # another identity: never given this machine's other profile
    assert costs.load_profile(other) is None
    assert costs.load_profile(ident, now=first.at + costs.PROFILE_TTL_S + 1) is None  # stale
    anew = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=costs.CostStore(), reps=2, pass_reps=1,
                             ident=ident, fresh=True)
    assert not anew.reused and len(timed_passes) > n and costs.load_profile(ident).at == anew.at


def test_a_profile_timed_under_outside_load_is_not_kept_on_disk(tiny_pair, machine):
    ident = {**costs.identity(tiny_pair), "pair": "loaded"}
    machine.busy = True
    got = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=costs.CostStore(), reps=2, pass_reps=1,
                            ident=ident)
    assert got.load is not None and not costs.profile_path(ident).exists()


def test_a_broken_profile_file_is_measured_again_not_a_traceback(tiny_pair):
    ident = {**costs.identity(tiny_pair), "pair": "broken"}
    path = costs.profile_path(ident)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json", encoding="utf-8")
    assert costs.load_profile(ident) is None
    got = costs.shared_cost(tiny_pair.target, tiny_pair.draft, store=costs.CostStore(), reps=2, pass_reps=1,
                            ident=ident)
    assert not got.reused and costs.load_profile(ident).at == got.at


def test_the_profile_note_names_a_run_whose_c_parts_from_the_profile(tiny_pair):
    """The main page's note: silent when the run's own c agrees with the profile's, said with the figures when
    it parts by more than their spread. (Seen failing with the check on c_ratio equality instead of c_disagree.)"""
    from specviz.data import runfile

    from specviz.teaching import experiments

    cmp = experiments.compare_with_baseline(tiny_pair.target, tiny_pair.draft, [1, 2, 3],
                                            DecodeSettings(k=3, max_new_tokens=12), vocab=tiny_pair.shared_vocab)
    base = runfile.baseline_of(cmp.spec, cmp.base)
    steps, step = costs.run_samples([cmp.spec], [cmp.base])
    same = dataclasses.replace(costs.measure_cost(tiny_pair.target, tiny_pair.draft, reps=2, pass_reps=1),
                               draft_s=list(steps), target_s=list(step))
    assert explain.profile_note(cmp.spec, base, same) is None
    far = dataclasses.replace(same, draft_s=[s * 1000 for s in steps],
                              c=measure.c_ratio([s * 1000 for s in steps], base["base_step_s"]))
    said = explain.profile_note(cmp.spec, base, far)
    assert said is not None and f"{far.c:.2f}" in said and "profile" in said
    assert explain.profile_note(cmp.spec, base, None) is None
