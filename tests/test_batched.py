"""batched.feed_many: one pass over several sessions' new tokens gives each session, bit for bit, its own pass.

Each session is fed twice from the same prompt: one copy on its own (CachedLM.feed), one with the other sessions
in one feed_many call. The logits must be torch.equal, and so must the caches after (a further separate feed on
both gives equal logits).
"""

import pytest
import torch
from tiny import tiny_lm

from specviz.device import devqueue
from specviz.modeling import batched, fastlinear, quant, vocabhead
from specviz.modeling import lm as L
from specviz.modeling.tiny import tiny_model

needs_fastlinear = pytest.mark.skipif(not fastlinear.available(), reason="no oneDNN linear in this PyTorch build")
needs_int8 = pytest.mark.skipif("int8" not in quant.supported("cpu"), reason="no fbgemm int8 on this CPU")

# three sessions: different prompts (context lengths), then verify rows of different counts
PROMPTS = ([3, 9, 4, 22, 7, 31, 5, 8, 40], [60, 2, 17], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 90, 33])
ROWS = ([44, 45, 46], [50, 51, 52, 53, 54], [70, 71, 72, 73, 74])
NEXT = ([5, 6], [7], [8, 9, 10])


def packed(model):
    return fastlinear.enable(model, pack=True)


def qwen(tied: bool = False, **extra):
    return tiny_lm(4, 128, hidden=64, init=0.3, positions=512, dtype=torch.float32, tie_word_embeddings=tied, **extra)


def llama():
    return tiny_lm(5, 128, arch="llama", hidden=64, init=0.3, positions=512, dtype=torch.float32)


def int8_target():
    return quant.apply_target(tiny_model(seed=2), "int8")


def frequent_head(model):
    rows = vocabhead.FrequentRows(model, ranked=list(range(0, 128, 3)), rows=30, always=[1])
    head = vocabhead.VocabHead(model, rows)
    head.start([60, 2, 17])
    return head.logits


def check_bit_identical(model, sessions: int, keeps=(None, 5, 2), head=None, rows=ROWS):
    """Feed sessions' prompts to two caches each, then their rows separately on one and together on the other."""
    alone = [L.CachedLM(model) for _ in range(sessions)]
    together = [L.CachedLM(model) for _ in range(sessions)]
    for a, b, prompt in zip(alone, together, PROMPTS):
        a.head = b.head = head
        a.feed(prompt, keep=1)
        b.feed(prompt, keep=1)
    assert batched.can_batch(together)
    want = [a.feed(r, keep) for a, r, keep in zip(alone, rows, keeps)]
    # on the device's worker, as the pool runs it: the separate feeds ran there too, and a pass's bits depend
    # on how many threads compute it (the worker has all the cores, other threads one)
    got = devqueue.run("cpu", lambda: batched.feed_many(together, rows[:sessions], keeps[:sessions]))
    for i in range(sessions):
        assert got[i].shape == want[i].shape
        assert torch.equal(got[i], want[i]), f"session {i}: max diff {(got[i] - want[i]).abs().max()}"
        assert together[i].n == alone[i].n == len(PROMPTS[i]) + len(rows[i])
        assert together[i].cache.get_seq_length() == alone[i].n
        for layer_a, layer_b in zip(alone[i].cache.layers, together[i].cache.layers):
            assert torch.equal(layer_a.keys, layer_b.keys) and torch.equal(layer_a.values, layer_b.values)
        # the caches go on alike
        assert torch.equal(alone[i].feed(NEXT[i]), together[i].feed(NEXT[i]))


@needs_fastlinear
@pytest.mark.parametrize("sessions", [1, 2, 3])
def test_packed_float32_target_is_bit_identical(sessions):
    check_bit_identical(packed(tiny_model(seed=1)), sessions)


@needs_int8
@pytest.mark.parametrize("sessions", [1, 2, 3])
def test_int8_target_with_row_attention_is_bit_identical(sessions):
    model = int8_target()
    assert model.config._attn_implementation == "specviz_row_exact"
    check_bit_identical(model, sessions)


EQUAL_ROWS = ([44, 45, 46], [50, 51, 52], [70, 71, 72])  # sessions of one shape: only their contents tell them apart


@pytest.mark.parametrize("target", [pytest.param("packed", marks=needs_fastlinear),
                                    pytest.param("int8", marks=needs_int8)])
def test_sessions_of_one_shape_each_get_their_own_rows(target):
    """Three sessions of 3 rows each, every row kept: a pass that swapped two sessions' rows, attention or
    logits would still hand each the right shape."""
    model = packed(tiny_model(seed=1)) if target == "packed" else int8_target()
    check_bit_identical(model, 3, keeps=(3, 3, 3), rows=EQUAL_ROWS)


@needs_fastlinear
def test_a_tied_head_left_plain_runs_per_session_and_stays_bit_identical():
    model = packed(qwen(tied=True))
    assert not batched.row_exact(model.lm_head)  # fastlinear leaves a shared weight plain
    check_bit_identical(model, 3, keeps=(1, 1, 3))


@needs_fastlinear
def test_a_llama_target_is_bit_identical():
    check_bit_identical(packed(llama()), 3)


@needs_fastlinear
def test_a_vocab_head_is_bit_identical():
    model = packed(tiny_model(seed=3))
    check_bit_identical(model, 3, head=frequent_head(model))


@needs_int8
def test_every_keep_is_what_feed_keeps():
    model = int8_target()
    check_bit_identical(model, 3, keeps=(0, 9, 1))  # 0: all rows, as logits_to_keep=0; 9 > 5 rows: all rows


def test_a_stock_float_linear_is_not_row_exact_so_cannot_batch():
    model = tiny_model(seed=1)
    lin = model.model.layers[0].mlp.up_proj
    x = torch.randn(40, lin.in_features)
    with torch.inference_mode():
        # why: a stock Linear's row depends on its call's row count (1 to 3 rows sum in another order here)
        varies = any(not torch.equal(lin(x[:r]), lin(x)[:r]) for r in (1, 2, 3))
    assert not batched.row_exact(lin)
    assert not batched.can_batch([L.CachedLM(model), L.CachedLM(model)])
    if not varies:
        pytest.skip("this CPU's stock Linear happens to be row-invariant here")


@needs_fastlinear
def test_can_batch_refuses_what_the_pass_cannot_replicate():
    model = packed(tiny_model(seed=1))
    assert batched.can_batch([L.CachedLM(model), L.CachedLM(model)])
    assert not batched.can_batch([])
    assert not batched.can_batch([L.CachedLM(model), L.CachedLM(packed(tiny_model(seed=1)))])  # two models
    gpt2 = fastlinear.enable(tiny_lm(0, arch="gpt2").float(), pack=True)
    assert not batched.can_batch([L.CachedLM(gpt2)])  # another architecture
    sliding = packed(qwen(use_sliding_window=True, sliding_window=4, max_window_layers=0))
    assert "sliding_attention" in sliding.config.layer_types
    assert not batched.can_batch([L.CachedLM(sliding)])
    L.static_cache(model, 64, graphs=False)
    static = L.open_lm(model)
    assert isinstance(static, L.StaticLM)
    assert not batched.can_batch([static, L.CachedLM(model)])


@needs_fastlinear
def test_the_same_cache_twice_is_refused():
    model = packed(tiny_model(seed=1))
    a, b = L.CachedLM(model), L.CachedLM(model)
    with pytest.raises(ValueError, match="only once"):
        batched.feed_many([a, b, a], [[1, 2], [3], [4]], [None, None, None])
    with pytest.raises(ValueError, match="can_batch"):
        batched.feed_many([a, L.CachedLM(tiny_model(seed=1))], [[1], [2]], [None, None])
    assert a.n == b.n == 0 and a.cache.get_seq_length() == 0  # nothing fed
