"""The target alone, timed with a speculative run's prompt and settings: the baseline of every speedup."""

from __future__ import annotations

from specviz.data.records import Run
from specviz.data.runfile import baseline_of
from specviz.decoding.engine import autoregressive_stream, warm_up


def target_alone(target, spec: Run, vocab: int | None = None, warm: bool = True) -> dict:
    """Time the target alone with the spec run's prompt and settings; return baseline_summary()."""
    stream = target_alone_stream(target, spec, vocab, warm)
    for _ in stream:
        pass
    return baseline_of(spec, stream.run)


def target_alone_stream(target, spec: Run, vocab: int | None = None, warm: bool = True):
    """The target alone with the spec run's prompt and settings (Run.decode), one token per round, as an
    engine.DecodeStream: a page keeps it across reruns and goes on where it stopped. Its Run goes to
    baseline_of().

    `warm` first decodes a few tokens (engine.warm_up), so one-time costs (allocations, kernel selection) and
    the change from the speculative run's passes land in neither run; while other sessions are in line for
    the device, only the first time this process times this target alone."""
    kw = dict(spec.decode.baseline_kwargs(), eos_token_id=spec.eos_token_ids, vocab=vocab)
    if warm:
        warm_up(target, spec.prompt_ids, **kw)
    return autoregressive_stream(target, spec.prompt_ids, **kw)
