"""Progress, estimate and stop of the long measurements (specviz.core.progress), on tiny random models.

A measurement counts its units (runs, repetitions, blocks of trials) for its progress callback: the count
only grows, the estimate of the seconds left is finite once a unit is done, and a callback that stops it
after n units gets exactly those n units back in Stopped.partial.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from specviz.core.errors import Stopped
from specviz.core.settings import DecodeSettings
from specviz.core.progress import Tick, Units, eta_words
from specviz.teaching import experiments, lab
from tiny import tiny_lm

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 11]


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=VOCAB), tiny_lm(1, vocab=VOCAB)  # target, draft


class Recorder:
    """A progress callback that keeps each Tick and stops after `stop_after` units (None: never)."""

    def __init__(self, stop_after: int | None = None, how: str = "raise"):
        self.ticks: list[Tick] = []
        self.fracs: list[float] = []
        self.stop_after, self.how = stop_after, how

    def __call__(self, msg, frac):
        assert isinstance(msg, Tick)
        self.ticks.append(msg)
        self.fracs.append(frac)
        if self.stop_after is not None and msg.done >= self.stop_after:
            if self.how == "raise":
                raise Stopped()
            return False
        return None


def check_monotone(rec: Recorder, total: int) -> None:
    done = [t.done for t in rec.ticks]
    assert done == sorted(done) and done[-1] <= total
    assert rec.fracs == sorted(rec.fracs) and all(0.0 <= f <= 1.0 for f in rec.fracs)
    assert all(t.total == total for t in rec.ticks)
    after = [t.eta_s for t in rec.ticks if t.done > 0]
    assert after and all(e is not None and math.isfinite(e) and e >= 0 for e in after)
    assert all(t.eta_s is None for t in rec.ticks if t.done == 0)


def test_units_estimate_from_the_measured_cost_of_the_units_done():
    now = [0.0]
    rec = Recorder()
    u = Units(rec, 4, clock=lambda: now[0])
    for _ in range(2):
        now[0] += 3.0  # each unit takes 3 s
        u.unit_done("x")
    assert rec.ticks[-1].done == 2 and rec.ticks[-1].eta_s == pytest.approx(6.0)  # 2 left × 3 s
    assert "about 6 s left" in rec.ticks[-1]
    assert eta_words(None) == "" and eta_words(300) == "about 5 min left"


@pytest.mark.parametrize("how", ["raise", "false"])
def test_k_sweep_reports_monotone_progress_and_stops_with_the_ks_done(models, how):
    target, draft = models
    settings, kw = DecodeSettings(temperature=0.0, max_new_tokens=8, seed=0), dict(eos_token_id=[])
    rec = Recorder()
    full = lab.k_sweep(target, draft, PROMPT, [1, 2, 3], settings, progress=rec, **kw)
    check_monotone(rec, 3)
    assert sorted(full) == [1, 2, 3]
    with pytest.raises(Stopped) as e:
        lab.k_sweep(target, draft, PROMPT, [1, 2, 3], settings, progress=Recorder(stop_after=2, how=how), **kw)
    assert sorted(e.value.partial) == [1, 2]  # exactly the two k values finished
    assert e.value.partial[2].spec.token_ids == full[2].spec.token_ids


def test_acceptance_lab_stops_with_whole_cells(models):
    target, draft = models
    prompts = {"a": PROMPT, "b": PROMPT[::-1]}
    settings, kw = DecodeSettings(k=3, max_new_tokens=8, seed=0), dict(eos_token_id=[])
    rec = Recorder()
    sweep, agree = lab.acceptance_lab(target, draft, prompts, [0.0, 1.0], settings, progress=rec, **kw)
    check_monotone(rec, 4)
    assert {d: sorted(v) for d, v in sweep.items()} == {"a": [0.0, 1.0], "b": [0.0, 1.0]}
    assert {d: sorted(v) for d, v in agree.items()} == {"a": [0.0, 1.0], "b": [0.0, 1.0]}
    with pytest.raises(Stopped) as e:
        lab.acceptance_lab(target, draft, prompts, [0.0, 1.0], settings, progress=Recorder(stop_after=3), **kw)
    part_sweep, part_agree = e.value.partial
    cells = sorted((d, t) for d, v in part_sweep.items() for t in v)
    assert cells == [("a", 0.0), ("a", 1.0), ("b", 0.0)]  # three cells, each with its agreement
    assert sorted((d, t) for d, v in part_agree.items() for t in v) == cells
    assert part_sweep["a"][1.0].token_ids == sweep["a"][1.0].token_ids


def test_forward_cost_stops_with_whole_repetitions(models):
    target, _ = models
    rec = Recorder()
    experiments.forward_cost(target, n_tokens=(1, 2), reps=3, context=8, progress=rec)
    check_monotone(rec, 3)
    with pytest.raises(Stopped) as e:
        experiments.forward_cost(target, n_tokens=(1, 2), reps=3, context=8, progress=Recorder(stop_after=1))
    assert {n: len(v) for n, v in e.value.partial.items()} == {1: 1, 2: 1}


def test_trials_stop_with_the_blocks_done():
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(32, generator=g), torch.randn(32, generator=g)
    block = experiments.TRIAL_BLOCK
    rec = Recorder()
    full = experiments.trials_from_logits(p, q, n=3 * block, seed=5, noise_reps=4, progress=rec)
    check_monotone(rec, 3)
    with pytest.raises(Stopped) as e:
        experiments.trials_from_logits(p, q, n=3 * block, seed=5, noise_reps=4, progress=Recorder(stop_after=2))
    part = e.value.partial
    assert part.n == 2 * block and sum(part.counts.values()) == 2 * block and part.noise.n == 2 * block
    # the same seeds as the first 2 blocks of the full run
    again = experiments.trials_from_logits(p, q, n=2 * block, seed=5, noise_reps=4)
    assert part.counts == again.counts and part.accepted == again.accepted
    assert sum(full.counts.values()) == 3 * block


def test_a_lesson_step_of_two_runs_counts_them_and_a_stop_keeps_the_first_for_the_next_press(monkeypatch):
    from pathlib import Path

    from specviz.decoding import models
    from specviz.teaching import lessons

    monkeypatch.setenv("SPECVIZ_MODELS", str(Path(__file__).parent / "models_tiny.yaml"))
    pair = models.load_pair(None, draft_precision="float32")
    EIGHT = dataclasses.replace(lessons.LESSON_SETTINGS, max_new_tokens=8)
    step = lessons.lesson("temperature").steps[0]  # α at T = 0 and at T = 1: two runs, each with its target alone
    memo: dict = {}
    with pytest.raises(Stopped):
        lessons.run_step(step, lessons.Context(pair=pair, settings=EIGHT, memo=memo, progress=Recorder(stop_after=1)))
    assert [k[2] for k in memo if k[0] == "trial"] == [0.0]  # the first run is kept, the second was not begun
    rec = Recorder()
    out = lessons.run_step(step, lessons.Context(pair=pair, settings=EIGHT, memo=memo, progress=rec))
    check_monotone(rec, 1)  # the next press runs only the run left
    fresh = lessons.run_step(step, lessons.Context(pair=pair, settings=EIGHT))
    assert {k: out.values[k] for k in ("a0", "a1", "judged")} == {k: fresh.values[k] for k in ("a0", "a1", "judged")}
