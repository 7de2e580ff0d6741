"""Shared fixtures: a tiny random Qwen2 pair (fast, float64) and the real default pair.

tiny_pair      two tiny random Qwen2 models (tiny.tiny_lm) + a 64-word tokenizer, as a Pair
make_tokenizer factory: words -> PreTrainedTokenizerFast (WordLevel, no hub)
default_pair   the real embedded pair via load_pair(), once per session; skipped
               only when its chunk packages are not installed
no_model       a test of a recorded page: loading a model fails it

Threads: the device's model work runs on one thread in tests (pytest_runtest_setup), except in those marked
`cores` (they measure time or CPU use, or check the cores), `real` or `browser`, which keep the worker's own
count. A tiny model's pass is too small to share out: with all the cores, PyTorch's OpenMP threads spin
between passes and burn many times the CPU time of one thread for no gain.
"""

from __future__ import annotations

import pytest
import torch

TINY_VOCAB = 64
# tiny_pair's models: tiny.tiny_lm's Qwen2 at transformers' own initializer_range, with the pair's special ids
# (bos 0, eos 1, pad 0: row 0 of their embeddings is zero)
TINY_PAIR_MODEL = dict(init=0.02, bos_token_id=0, eos_token_id=1, pad_token_id=0)
OWN_THREADS = ("cores", "real", "browser")  # markers of the tests that keep the device worker's thread count
_WORKER_THREADS: dict = {}  # "cpu": the worker's thread count before the first test; "apart": whether it has its own


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: the CPU worker's model work on one thread, or on its own count for a test
    marked with one of OWN_THREADS. Only where share_cores() gave the worker threads of its own (every other
    thread has one already); set with devqueue.set_model_threads, as `bench --threads` sets them."""
    from specviz.device import devqueue

    if not _WORKER_THREADS:
        _WORKER_THREADS["cpu"] = devqueue.model_threads("cpu")
        _WORKER_THREADS["apart"] = _WORKER_THREADS["cpu"] > torch.get_num_threads()  # this thread: one
    if not _WORKER_THREADS["apart"]:
        return
    own = any(item.get_closest_marker(m) for m in OWN_THREADS)
    want = _WORKER_THREADS["cpu"] if own else 1
    if devqueue.model_threads("cpu") != want:
        devqueue.set_model_threads(want)


def pytest_configure(config):
    """The device layer starts before any test computes, as in the app and the command line (devqueue.start)."""
    import tempfile
    from pathlib import Path

    from specviz.device import devqueue

    devqueue.start()
    from specviz.teaching import costs  # after start: it imports the model code

    profiles = Path(tempfile.mkdtemp(prefix="specviz-profiles-"))  # the machine's profiles the tests keep: not
    costs.profile_root = lambda: profiles  # in the user's cache


def _tokenizer(words: list[str], specials=("<|endoftext|>", "<|im_end|>")):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(list(specials) + [w for w in words if w not in specials])}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=specials[0]))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=specials[-1], unk_token=specials[0])


@pytest.fixture
def bytes_only(monkeypatch):
    """A device where a step costs its weight bytes only: a float32 draft of a float64 tiny target is then
    primed at c = 0.5. With the CPU's fixed cost per layer, a model of a few kilobytes is all layer cost
    (c about 1), and the best-k chooser would draft one token a round."""
    from specviz.core import measure

    monkeypatch.setitem(measure.LAYER_COST_BYTES, "cpu", 0.0)


@pytest.fixture
def make_tokenizer():
    """make_tokenizer(words, specials=...) -> a real fast tokenizer built offline."""
    return _tokenizer


@pytest.fixture
def tiny_models():
    """tiny_models(vocab_draft=64, vocab_target=64) -> (draft, target), float64, seeded."""
    from tiny import tiny_lm

    return lambda vd=TINY_VOCAB, vt=TINY_VOCAB, dtype=torch.float64: (
        tiny_lm(0, vd, dtype=dtype, **TINY_PAIR_MODEL), tiny_lm(1, vt, dtype=dtype, **TINY_PAIR_MODEL))


@pytest.fixture
def tiny_pair():
    """A Pair of two tiny random Qwen2 models (float64, CPU) sharing a 64-word tokenizer."""
    from specviz.modeling.config import ModelSpec, PairSpec, PathSource
    from specviz.decoding.models import Pair
    from tiny import tiny_lm

    tok = _tokenizer([f"w{i}" for i in range(TINY_VOCAB - 2)])
    assert len(tok) == TINY_VOCAB
    draft, target = tiny_lm(0, **TINY_PAIR_MODEL), tiny_lm(1, **TINY_PAIR_MODEL)
    spec_of = lambda n: ModelSpec(name=n, label=n, family="tiny", tokenizer="tiny", params=0,  # noqa: E731
                                  source=PathSource(path=__import__("pathlib").Path("/nonexistent") / n))
    spec = PairSpec(name="tiny", draft=spec_of("tiny-draft"), target=spec_of("tiny-target"), description="tiny")
    return Pair(name="tiny", draft=draft, target=target, tokenizer=tok, dtype=torch.float64, device="cpu",
                spec=spec, eos_token_ids=[1], shared_vocab=TINY_VOCAB)


@pytest.fixture(scope="session")
def default_pair_load():
    """(pair, progress stages) of the real default pair, loaded once per session.

    prepare() runs first (it converts and caches on a first run, ~2 min), so the
    load itself is always the warm load from the cache.
    """
    from specviz.decoding import models
    from specviz.modeling import store

    status = models.pair_status(None)
    if not status.available:
        pytest.skip(f"default pair not installed: {status.reason} (get it: {status.how_to_get})")
    store.prepare(None)
    stages: list[str] = []
    pair = models.load_pair(progress=lambda s, f=None: stages.append(s) if s not in stages else None,
                            draft_precision="float32")
    return pair, stages


@pytest.fixture(scope="session")
def default_pair_fp32(default_pair_load):
    """The real pair with its float32 draft."""
    return default_pair_load[0]


@pytest.fixture(scope="session")
def default_pair(default_pair_load):
    """The real pair as the app runs it: the draft in the device's default precision (same target)."""
    from specviz.decoding import models

    return models.with_draft_precision(default_pair_load[0], None)


@pytest.fixture
def no_model(monkeypatch):
    """A recorded page must not load a model: loading one fails the test."""
    from specviz.decoding import models

    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pytest.fail("a recorded page loaded a model"))


@pytest.fixture(scope="module")
def tiny_app_registry():
    """use(path): point specviz (and the server's store of loaded pairs) at a test registry for one module.

    The app's pages read $SPECVIZ_MODELS; the store (specviz.service.pairs) is emptied before
    and after, so each module starts with no model loaded. The old value returns.
    """
    import os

    from specviz.service import pairs

    old = os.environ.get("SPECVIZ_MODELS")
    used = []

    def use(path):
        os.environ["SPECVIZ_MODELS"] = str(path)
        pairs.clear()
        used.append(path)
        return path

    yield use
    if used:
        pairs.clear()
    if old is None:
        os.environ.pop("SPECVIZ_MODELS", None)
    else:
        os.environ["SPECVIZ_MODELS"] = old


@pytest.fixture
def other_program():
    """Another program on this machine, busy on one core until the test ends (outside load)."""
    import subprocess
    import sys
    import time

    from specviz.device import clock

    if clock.machine_cpu_s() != clock.machine_cpu_s():  # NaN: no /proc/stat here
        pytest.skip("this machine does not say how much CPU time its programs use")
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.2)  # started and spinning
    yield proc
    proc.kill()
    proc.wait()
