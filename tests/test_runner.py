"""The engine takes the device as a runner (specviz/device/runner.py): every model pass of a run goes through
the runner it was given, and running inline (no queue, no worker thread) gives the same tokens as the queue."""

from __future__ import annotations

import time

import pytest

from specviz.core.settings import DecodeSettings
from specviz.decoding import engine, tree
from specviz.device import devqueue
from specviz.device.runner import InlineRunner, Runner
from specviz.modeling import lm as L
from tiny import tiny_lm

PROMPT = [2, 7, 1, 8, 2, 8]


class RecordingRunner(InlineRunner):
    """An inline runner that counts what goes through it: jobs submitted, calls run, and the passes noted."""

    def __init__(self):
        super().__init__()
        self.in_job = self.inside = 0  # how deep in submitted jobs and in run() the caller is now
        self.submits = self.runs = self.noted = 0

    def submit(self, fn, what=None, together=None, item=None, most=1):
        self.submits += 1
        self.in_job += 1
        try:
            return super().submit(fn, what, together, item, most)
        finally:
            self.in_job -= 1

    def run(self, fn, turn=True):
        self.runs += 1
        self.inside += 1
        try:
            return fn()
        finally:
            self.inside -= 1

    def note_pass(self, t):
        self.noted += 1
        return super().note_pass(t)


def forwards(model, runner: RecordingRunner) -> list[int]:
    """One entry per forward pass of `model` from now on: how deep in submitted jobs and in runner.run it ran
    (jobs, runs). A pass in a round runs in the round's job (DecodeStream) and in two run()s (through())."""
    seen: list[tuple[int, int]] = []
    model.register_forward_pre_hook(lambda m, a: seen.append((runner.in_job, runner.inside)))
    return seen


def through(seen: list[int]) -> bool:
    """Every pass ran inside its round's job, in two run()s: the timed pass's (runner.timed) and, inside it, the
    cache's own (CachedLM.feed)."""
    return all(jobs == 1 and runs == 2 for jobs, runs in seen)


def test_both_runners_are_runners():
    assert isinstance(InlineRunner(), Runner)
    assert isinstance(devqueue.queue_runner("cpu"), Runner)
    assert devqueue.queue_runner("cuda") == devqueue.QueueRunner("cuda:0")  # one runner per physical device


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_pass_of_a_speculative_run_goes_through_its_runner(cache, temperature):
    target, draft = tiny_lm(11), tiny_lm(12)
    if cache == "static":  # StaticLM's own pass (eager here; CUDA graphs on a GPU)
        for m in (target, draft):
            assert L.static_cache(m, 64, graphs=False) is not None
    rec = RecordingRunner()
    t_seen, d_seen = forwards(target, rec), forwards(draft, rec)
    settings = DecodeSettings(k=3, k_policy="best", temperature=temperature, max_new_tokens=12)
    run = engine.speculative_decode(target, draft, PROMPT, settings, eos_token_id=[], runner=rec)
    assert run.target_passes == len(run.rounds) and run.draft_passes > 0
    # each model's forwards are its Run's passes, and every one ran in the runner's run()
    assert (len(t_seen), len(d_seen)) == (run.target_passes, run.draft_passes)
    assert through(t_seen) and through(d_seen), (t_seen, d_seen)
    # every pass was run, timed and judged through the runner, and every round was one job of it
    passes = run.target_passes + run.draft_passes
    assert rec.noted == passes and rec.runs == 2 * passes
    assert rec.submits == len(run.rounds)


def test_every_pass_of_the_target_alone_and_of_a_tree_goes_through_its_runner():
    target, draft = tiny_lm(11), tiny_lm(12)
    rec = RecordingRunner()
    t_seen, d_seen = forwards(target, rec), forwards(draft, rec)
    base = engine.autoregressive_decode(target, PROMPT, DecodeSettings(max_new_tokens=6), eos_token_id=[], runner=rec)
    assert len(t_seen) == base.target_passes == rec.noted == 6 and through(t_seen) and not d_seen
    del t_seen[:]
    for shape in ("tree", "spine"):
        rec.noted = 0
        t0, d0 = len(t_seen), len(d_seen)
        run = tree.tree_decode(target, draft, PROMPT, DecodeSettings(max_new_tokens=8), budget=6, branch=2,
                               max_depth=3, eos_token_id=[], shape=shape, runner=rec)
        assert (len(t_seen) - t0, len(d_seen) - d0) == (run.target_passes, run.draft_passes), shape
        assert rec.noted == run.target_passes + run.draft_passes, shape
    assert through(t_seen) and through(d_seen)


def test_a_drafter_made_before_the_run_passes_through_the_runs_runner():
    from specviz.decoding.drafters import ModelDrafter

    target, draft = tiny_lm(11), tiny_lm(12)
    drafter = ModelDrafter(draft)  # its cache opened with the queue's runner, before any run
    rec = RecordingRunner()
    d_seen = forwards(draft, rec)
    run = engine.speculative_decode(target, drafter, PROMPT, DecodeSettings(k=2, max_new_tokens=6), eos_token_id=[], runner=rec)
    assert len(d_seen) == run.draft_passes > 0 and through(d_seen)


@pytest.mark.parametrize("mode", ["chain greedy", "chain sampled", "target alone", "tree sampled"])
def test_inline_gives_the_tokens_the_queue_gives(mode):
    target, draft = tiny_lm(21), tiny_lm(22)

    def decode(runner):
        if mode == "target alone":
            return engine.autoregressive_decode(target, PROMPT, DecodeSettings(temperature=1.0, seed=3, max_new_tokens=10),
                                                eos_token_id=[], runner=runner)
        if mode == "tree sampled":
            return tree.tree_decode(target, draft, PROMPT, DecodeSettings(temperature=1.0, seed=3, max_new_tokens=10),
                                    budget=6, branch=2, max_depth=3, eos_token_id=[], runner=runner)
        return engine.speculative_decode(target, draft, PROMPT, DecodeSettings(
            k=3, temperature=1.0 if "sampled" in mode else 0.0, seed=3, max_new_tokens=10), eos_token_id=[], runner=runner)

    queued, inline = decode(None), decode(InlineRunner())  # None: the shared queue's, on the CPU's worker
    assert len(queued.token_ids) == 10
    assert inline.token_ids == queued.token_ids
    assert [r.emitted for r in inline.rounds] == [r.emitted for r in queued.rounds]


def test_a_stream_queues_through_its_runner_and_a_bare_one_runs_inline():
    target, draft = tiny_lm(11), tiny_lm(12)
    assert engine.speculative_stream(target, draft, PROMPT, DecodeSettings(max_new_tokens=2)).runner == devqueue.queue_runner("cpu")
    rec = RecordingRunner()
    stream = engine.speculative_stream(target, draft, PROMPT, DecodeSettings(max_new_tokens=2), runner=rec)
    assert stream.runner is rec and stream.device == "cpu"
    stream.close()
    assert isinstance(engine.DecodeStream(iter(())).runner, InlineRunner)


def test_a_measurement_times_its_passes_through_the_runner_it_is_given():
    """batch_cost and memory_bandwidth run, time and (batch_cost) judge every pass through their runner's timed()
    and note_pass(), never through the queue."""
    from specviz.teaching import experiments

    model = tiny_lm(13)
    rec = RecordingRunner()
    seen = forwards(model, rec)
    with rec.watch() as w:
        out = experiments.batch_cost(model, n_tokens=(1, 2), batches=(1, 2), reps=1, context=4, runner=rec)
    assert set(out) == {(1, 1), (2, 1), (1, 2), (2, 2)} and all(len(v) == 1 and v[0] > 0 for v in out.values())
    passes = 2 * 2 * 2  # batches × sizes × (reps + the warm-up)
    assert rec.noted == w.passes == passes and rec.runs == 2 + passes  # each batch's context, then its passes
    assert len(seen) == 2 + passes and all(s == (0, 1) for s in seen)  # every forward inside the runner's run()
    before = rec.runs
    assert experiments.memory_bandwidth("cpu", megabytes=1, reps=2, runner=rec) > 0
    assert rec.runs == before + 3
    value, t = InlineRunner().timed(lambda: 7)
    assert value == 7 and t.wall >= 0 and t.held == t.wall


@pytest.mark.parametrize("runner", [InlineRunner(), devqueue.queue_runner("cpu")], ids=["inline", "queue"])
def test_a_timed_pass_leaves_out_what_its_spent_counter_grew_by(runner):
    """timed(fn, spent=): seconds fn spent on something that is not the pass (a CUDA graph's recording, counted in
    the cache's recorded_s) are taken off the pass's time."""
    spent = [0.0]

    def fn():
        time.sleep(0.05)
        spent[0] += 0.045  # all but about 5 ms of it was not the pass

    _, t = runner.timed(fn, spent=lambda: spent[0])
    _, whole = runner.timed(lambda: time.sleep(0.05))
    assert whole.wall >= 0.05 and t.wall < 0.03
