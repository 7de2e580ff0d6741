"""specviz.teaching.race on tiny random models: the Speedup page's cost, race and k-policy experiments, without streamlit."""

from __future__ import annotations

import math

import pytest

from specviz import autoregressive_decode, speculative_decode
from specviz.core import measure
from specviz.teaching import race
from tiny import tiny_lm
from specviz.core.settings import DecodeSettings

PROMPT = [3, 17, 5, 42, 8, 11]
N_NEW = 10
RUN_KW = dict(eos_token_id=[])


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0), tiny_lm(1)  # target, draft


def test_measure_cost_times_every_pass_size_and_reports_progress(models):
    target, draft = models
    said = []
    cost = race.measure_cost(target, draft, reps=2, pass_reps=2, sizes=(1, 4), progress=lambda m, f: said.append(f))
    assert cost.c > 0 and math.isfinite(cost.c)
    assert sorted(cost.timings) == [1, 4] and all(len(v) == 2 for v in cost.timings.values())
    assert cost.verify == measure.verify_ratios(cost.timings) and cost.verify[1] == 1.0
    assert said[0] == 0.0 and said[-1] == pytest.approx(1.0)  # the bar runs from the start to the end


def test_race_runs_the_target_alone_and_speculative_with_the_page_settings(models):
    target, draft = models
    seen = {"base": 0, "spec": 0}

    def on_round(who, rounds):
        assert len(rounds) == seen[who] + 1  # every round, in order, as it is computed
        seen[who] = len(rounds)

    r = race.race(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=N_NEW), on_round, **RUN_KW)
    assert r.k == r.spec.settings["k"] == 3 and seen == {"base": len(r.base.rounds), "spec": len(r.spec.rounds)}
    # the same runs as the engine gives: the warm-ups change no token
    assert r.base.token_ids == autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=N_NEW), **RUN_KW).token_ids
    assert r.spec.token_ids == speculative_decode(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=N_NEW), **RUN_KW).token_ids
    assert r.spec.token_ids == r.base.token_ids  # greedy: speculative writes the target's own text
    assert len(r.base.rounds) == N_NEW  # one token per pass for the target alone


def test_replay_schedule_shows_every_round_of_both_runs_in_time_order(models):
    target, draft = models
    r = race.race(target, draft, PROMPT, DecodeSettings(k=2, max_new_tokens=N_NEW), **RUN_KW)
    events = race.replay_schedule(r)
    assert [t for t, _, _ in events] == sorted(t for t, _, _ in events)
    for who, run in (("base", r.base), ("spec", r.spec)):
        mine = [(t, n) for t, w, n in events if w == who]
        assert [n for _, n in mine] == list(range(1, len(run.rounds) + 1))
        assert mine[-1][0] == pytest.approx(sum(x.round_s for x in run.rounds))


def test_compare_policies_runs_each_policy_from_the_same_k(models):
    target, draft = models
    fracs = []
    runs = race.compare_policies(target, draft, PROMPT, DecodeSettings(k=2, max_new_tokens=N_NEW), progress=lambda m, f: fracs.append(f),
                                 **RUN_KW)
    assert list(runs) == list(race.POLICIES)
    assert all(r.settings.get("k_policy") == p for p, r in runs.items())
    assert set(runs["fixed"].ks[:-1]) == {2}  # fixed k never moves (the last round may draft only what is left)
    assert runs["fixed"].ks[0] == runs["adaptive"].ks[0] == 2  # (the best-k chooser picks its own first k)
    assert len({tuple(r.token_ids) for r in runs.values()}) == 1  # greedy: every policy writes the same text
    assert fracs == sorted(fracs) and fracs[-1] == pytest.approx(1.0)


def test_compare_policies_stopped_after_one_policy_keeps_fixed_k_only(models):
    from specviz.core.errors import Stopped

    target, draft = models
    ticks = []

    def stop_after_one(msg, frac):
        ticks.append(msg)
        return msg.done < 1  # False once one policy is done: stop

    with pytest.raises(Stopped) as got:
        race.compare_policies(target, draft, PROMPT, DecodeSettings(k=2, max_new_tokens=N_NEW), progress=stop_after_one,
                              **RUN_KW)
    assert list(got.value.partial) == ["fixed"] and got.value.partial["fixed"].settings.get("k_policy") == "fixed"
    assert ticks[-1].done == 1 and ticks[-1].total == len(race.POLICIES) and ticks[-1].eta_s is not None

def test_a_race_stopped_after_the_target_alone_keeps_it_and_a_stop_while_drawing_too(models):
    from specviz.core.errors import Stopped

    target, draft = models
    settings = DecodeSettings(k=2, max_new_tokens=N_NEW)

    def stop_after_one(msg, frac):
        return msg.done < 1  # False once the target alone is done: stop

    with pytest.raises(Stopped) as got:
        race.race(target, draft, PROMPT, settings, progress=stop_after_one, **RUN_KW)
    part = got.value.partial
    assert part.spec is None and part.k == 2 and len(part.base.token_ids) == N_NEW

    def drawing_stopped(name, rounds):  # a click that streamlit signals while the page draws a speculative round
        if name == "spec":
            raise Stopped()

    with pytest.raises(Stopped) as got:
        race.race(target, draft, PROMPT, settings, drawing_stopped, **RUN_KW)
    assert got.value.partial.spec is None and got.value.partial.base.token_ids == part.base.token_ids

def test_policy_summary_measures_against_fixed_k(models):
    target, draft = models
    runs = race.compare_policies(target, draft, PROMPT, DecodeSettings(k=3, max_new_tokens=N_NEW), **RUN_KW)
    s = race.policy_summary(runs)
    assert s["fixed"].gain is None
    for name, run in runs.items():
        assert s[name].tokens_per_s == measure.engine_rate(run)
        assert s[name].mean_k == pytest.approx(sum(run.ks) / len(run.ks))
        assert s[name].alpha == run.alpha or (math.isnan(s[name].alpha) and math.isnan(run.alpha))
    for name in ("adaptive", "best"):
        assert s[name].gain == pytest.approx(s[name].tokens_per_s / s["fixed"].tokens_per_s - 1)
