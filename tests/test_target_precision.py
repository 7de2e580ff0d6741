"""Target precision (quant.apply_target, load_pair(target_precision=...)): float32 or int8, both exact.

The target decides every token, so speculative text must be the same target's text alone in
every precision offered. A verify pass scores k+1 rows in one call, the target alone 1: the int8
layer must give a row the same bits whatever rows share its call. bfloat16 is refused.
"""

from pathlib import Path

import pytest
import torch

from specviz import InvalidSetting, autoregressive_decode, speculative_decode
from specviz.core import measure
from specviz.decoding import models
from specviz.modeling import quant
from specviz.core.settings import DecodeSettings

REG = Path(__file__).resolve().parent / "models_tiny.yaml"
pytestmark = pytest.mark.skipif("int8" not in quant.supported("cpu"), reason="no fbgemm int8 here")


def _rows(k_in: int, t: int, seed: int) -> torch.Tensor:
    """t rows of activations on very different scales, a constant row and an outlier among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, k_in, generator=g) * torch.logspace(-2, 2, t)[:, None]  # (t, K)
    if t > 2:
        x[1] = 0.37  # a constant row
    x[-1, 3] = 900.0  # one huge activation, as a prompt's first token has
    return x


@pytest.mark.parametrize("k_in,n_out,bias", [(96, 80, True), (1536, 1536, False), (256, 600, True)])
def test_an_int8_target_row_has_the_same_bits_alone_and_among_others(k_in, n_out, bias):
    torch.manual_seed(0)
    lin = quant.ExactInt8Linear(torch.nn.Linear(k_in, n_out, bias=bias))
    for t in (2, 3, 5, 8, 17, 33):  # verify passes of k+1 rows, and prompts
        x = _rows(k_in, t, seed=t)
        many = lin(x)  # (t, N)
        for i in range(t):
            assert torch.equal(lin(x[i:i + 1])[0], many[i]), (t, i)  # bit for bit
        assert torch.equal(lin(x[None])[0], many)  # (B, T, K) inputs: the same rows


def test_the_draft_int8_kernel_alone_is_not_row_exact():
    """Why the target needs its own layer: fbgemm's dynamic linear takes one activation scale per call."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128, bias=False)
    w = lin.weight.detach()
    scale = (w.abs().amax(dim=1) / 127.0).double()
    qw = torch.quantize_per_channel(w, scale, torch.zeros(128, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qw, None)
    x = _rows(256, 5, seed=1)
    one = torch.ops.quantized.linear_dynamic(x[:1], packed, quant.REDUCE_RANGE)
    many = torch.ops.quantized.linear_dynamic(x, packed, quant.REDUCE_RANGE)
    assert not torch.equal(one[0], many[0])


def test_an_int8_target_is_close_to_float32_and_a_quarter_of_the_bytes():
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 384)
    x = torch.randn(5, 512)
    ref, out = lin(x), quant.ExactInt8Linear(lin)(x)
    assert 0 < ((out - ref).abs().max() / ref.abs().max()) < 0.03
    f32 = models.load_pair("tiny-random", registry=REG, device="cpu").target
    i8 = models.load_pair("tiny-random", registry=REG, device="cpu", target_precision="int8").target
    assert measure.weight_bytes(i8) < 0.35 * measure.weight_bytes(f32)
    assert quant.precision_of(i8) == "int8"


@pytest.fixture(scope="module")
def int8_pair():
    return models.load_pair("tiny-random", registry=REG, device="cpu", target_precision="int8")


def test_load_pair_puts_the_target_in_int8_and_leaves_float32_alone(int8_pair):
    assert int8_pair.target_precision == "int8"
    assert any(isinstance(m, quant.ExactInt8Linear) for m in int8_pair.target.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in int8_pair.target.modules())
    f32 = models.load_pair("tiny-random", registry=REG, device="cpu")
    assert f32.target_precision == "float32"
    assert not any(isinstance(m, quant.ExactInt8Linear) for m in f32.target.modules())


@pytest.mark.parametrize("name", ["tiny-random", "tiny-early-exit"])
def test_an_int8_target_gives_every_token_the_same_logits_in_any_chunking(name):
    """Bit for bit: one token per pass (the target alone) and k+1 per pass (verify), chains and a tree mask."""
    from specviz.modeling.lm import CachedLM

    pair = models.load_pair(name, registry=REG, device="cpu", target_precision="int8")
    prompt, rest = [8, 9, 10, 11], [(7 * i + 3) % 60 + 2 for i in range(24)]
    with torch.inference_mode():
        alone = CachedLM(pair.target)
        alone.feed(prompt)
        ref = torch.cat([alone.feed([t]) for t in rest])  # (24, V)
        for k1 in (2, 4, 6):
            lm = CachedLM(pair.target)
            lm.feed(prompt)
            got = torch.cat([lm.feed(rest[i:i + k1]) for i in range(0, len(rest), k1)])
            assert torch.equal(got, ref), k1
        tree = CachedLM(pair.target)  # a tree pass: the chain's next 3 tokens and a sibling of the first
        tree.feed(prompt)
        n = len(prompt)
        allowed = torch.zeros(4, n + 4, dtype=torch.bool)
        allowed[:, :n] = True
        allowed[0, n], allowed[1, n:n + 2], allowed[2, n:n + 3], allowed[3, n + 3] = True, True, True, True
        got = tree.feed_masked([*rest[:3], 50], allowed, [n, n + 1, n + 2, n])
        assert torch.equal(got[:3], ref[:3])


PROMPTS = ([5, 6, 7], [12, 40, 3, 3, 9, 21], [30])


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_greedy_speculative_text_is_the_int8_target_alone(int8_pair, k):
    target, accepted = int8_pair.target, 0
    for prompt in PROMPTS:
        alone = autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=40), **int8_pair.run_kw)
        run = speculative_decode(target, int8_pair.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=40),
                                 **int8_pair.run_kw)
        assert run.token_ids == alone.token_ids, (prompt, k)
        accepted += run.n_accepted
    assert accepted > 0  # whole drafts were verified in one multi-row pass, not just corrected


@pytest.mark.parametrize("name", ["tiny-self", "tiny-early-exit", "tiny-other-tokenizer"])
def test_greedy_identity_holds_for_every_tiny_pair_with_an_int8_target(name):
    pair = models.load_pair(name, registry=REG, device="cpu", target_precision="int8")
    prompt = [8, 9, 10, 11]
    alone = autoregressive_decode(pair.target, prompt, DecodeSettings(max_new_tokens=30), **pair.run_kw)
    for k in (2, 5):
        run = speculative_decode(pair.target, pair.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=30),
                                 **pair.run_kw)
        assert run.token_ids == alone.token_ids, k


def test_a_sampling_run_with_an_int8_target_completes_and_follows_its_seed(int8_pair):
    s = DecodeSettings(k=3, temperature=0.8, top_p=0.95, max_new_tokens=30, seed=3)
    a = speculative_decode(int8_pair.target, int8_pair.drafter(), [5, 6, 7], s, **int8_pair.run_kw)
    b = speculative_decode(int8_pair.target, int8_pair.drafter(), [5, 6, 7], s, **int8_pair.run_kw)
    assert len(a.token_ids) > 0 and a.token_ids == b.token_ids
    assert all(0 <= t < int8_pair.shared_vocab for t in a.token_ids)


@pytest.mark.parametrize("bad", ["bfloat16"])
def test_bfloat16_is_refused_as_an_exact_target(bad):
    with pytest.raises(InvalidSetting, match="bfloat16 is not offered.*differ from the target alone"):
        models.load_pair("tiny-random", registry=REG, device="cpu", target_precision=bad)


@pytest.mark.parametrize("bad", ["int4", "fp8", ""])
def test_an_unknown_target_precision_is_a_clear_error(bad):
    with pytest.raises(InvalidSetting, match="target precision must be one of float32, int8"):
        quant.check_target(bad, "cpu")


def test_an_int8_target_needs_float32_weights():
    with pytest.raises(InvalidSetting, match="made from float32"):
        models.load_pair("tiny-random", registry=REG, device="cpu", dtype="bfloat16", target_precision="int8")


def test_a_pair_lends_its_target_only_in_the_same_precision(int8_pair):
    again = models.load_pair("tiny-random", registry=REG, device="cpu", target_precision="int8", loaded=[int8_pair])
    assert again.target is int8_pair.target
    f32 = models.load_pair("tiny-random", registry=REG, device="cpu", loaded=[int8_pair])
    assert f32.target is not int8_pair.target and f32.target_precision == "float32"


@pytest.mark.real
def test_real_default_pair_with_an_int8_target_is_greedy_identical_to_it_alone():
    """The real default pair (int8 draft, int8 target): speculative text == the int8 target alone."""
    pair = models.load_pair(device="cpu", target_precision="int8")
    assert pair.target_precision == "int8"
    for text in ("The capital of France is", "def fibonacci(n):"):
        ids = pair.tokenizer(text)["input_ids"]
        alone = autoregressive_decode(pair.target, ids, DecodeSettings(max_new_tokens=48), **pair.run_kw)
        for k in (2, 5):
            run = speculative_decode(pair.target, pair.drafter(), ids, DecodeSettings(k=k, max_new_tokens=48),
                                     **pair.run_kw)
            assert run.token_ids == alone.token_ids, (text, k)
