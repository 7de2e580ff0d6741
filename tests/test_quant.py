"""Draft precision (specviz/modeling/quant.py): a cheaper draft, the same output.

Greedy output must equal the target alone with every draft precision, and in
sampling mode the first two tokens must follow the target's exact
distribution with a quantized draft, bonus tokens included; a broken residual
must fail the same check. The int8 layer must match the float layer it
replaces to int8 rounding, and stream a quarter of the bytes.
"""

import collections
import copy

import pytest
import torch

import specviz.decoding.engine as engine
from specviz import InvalidSetting, autoregressive_decode, speculative_decode
from specviz.core import measure
from specviz.modeling import quant
from specviz.decoding.models import with_draft_precision
from specviz.decoding.sampling import logits_to_probs
from stats import passes, total_variation
from tiny import hf_greedy, tiny_lm
from specviz.core.settings import DecodeSettings

CPU_PRECISIONS = quant.supported("cpu")


def draft_of(target_seed: int, precision: str, vocab: int = 64):
    """The target's own weights (a draft that agrees often), in `precision`."""
    return quant.apply(tiny_lm(target_seed, vocab=vocab).float(), precision)


def test_every_cpu_precision_is_offered_and_int8_is_the_cpu_default():
    assert {"float32", "bfloat16", "int8"} <= set(CPU_PRECISIONS)
    assert quant.default_precision("cpu") in CPU_PRECISIONS
    assert quant.check(None, "cpu") == quant.check("auto", "cpu") == quant.default_precision("cpu")
    assert "int8" not in quant.supported("cuda")  # the int8/int4 kernels used here are CPU kernels


@pytest.mark.parametrize("bad", ["int3", "fp8", "", 8])
def test_an_unknown_precision_is_a_clear_error(bad):
    with pytest.raises(InvalidSetting, match="draft precision"):
        quant.check(bad, "cpu")


def test_int8_linear_matches_the_float_layer_to_int8_rounding():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=True)
    q = quant.Int8Linear(lin)
    x = torch.randn(5, 64)  # (T, K): a verify pass of 5 tokens
    ref, out = lin(x), q(x)
    assert out.shape == ref.shape and out.dtype == torch.float32
    # weights and activations are rounded to int8 (activations to 7 bits): a few per cent of the range
    err = (out - ref).abs().max() / ref.abs().max()
    assert 0 < err < 0.03  # really rounded, not a float copy; and close
    assert q(x[None]).shape == (1, 5, 48)  # (B, T, N) inputs keep their shape
    assert q.weight_nbytes < 64 * 48 * 4 / 3  # int8 weights, not float32


def test_int8_linear_quantizes_each_row_as_if_it_came_alone():
    """A prompt's rows in one call: a row of huge activations must not coarsen the others' rounding."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(64, 48, bias=True)
    with torch.no_grad():
        lin.bias.mul_(20)  # a bias as large as the products: scaling it with the row would show
    q = quant.Int8Linear(lin)
    x = torch.randn(6, 64)  # (T, K)
    x[0] *= 500  # the first token: activations hundreds of times the others' (as in Qwen's prompts)
    x[2] = x[2].abs() + 3  # a row far from centred on zero: its own range is [3, 6], not [-6, 6]
    ref, out = lin(x), q(x)  # (T, N)
    err = ((out - ref).abs().amax(1) / ref.abs().amax(1)).tolist()  # (T,) relative to each row's range
    alone = [((q(x[i:i + 1]) - ref[i]).abs().max() / ref[i].abs().max()).item() for i in range(6)]
    assert max(err) < 0.03, err  # under one scale for all rows, the small rows would keep a level or two
    assert max(alone) < 0.03, alone


def planted_outlier_qwen(seed: int, token: int, vocab: int = 64):
    """A tiny float32 Qwen whose first MLP makes `token`'s down_proj inputs ~100x everyone else's."""
    model = tiny_lm(seed, vocab=vocab).float()
    with torch.no_grad():
        emb, mlp = model.model.embed_tokens.weight, model.model.layers[0].mlp
        emb[:, 3] = 0.0
        emb[token, 3] = 30.0  # only `token` has hidden channel 3
        for lin in (mlp.gate_proj, mlp.up_proj):
            lin.weight[0].zero_()
            lin.weight[0, 3] = 20.0  # gate and up unit 0 read channel 3: silu(g) * u is huge for `token` alone
    return model


def test_an_int8_draft_reads_a_prompt_in_one_call_as_well_as_token_by_token():
    """The draft reads the prompt in one call; that call must not spoil the cache the steps build on."""
    from specviz.modeling.lm import CachedLM

    target = planted_outlier_qwen(5, token=7)
    draft = quant.apply(planted_outlier_qwen(5, token=7), "int8")
    prompt = [7, 3, 9, 12, 5, 40, 22, 8, 19, 33]
    with torch.no_grad():
        ref = target(torch.tensor([prompt])).logits[0, 1:]  # (T-1, V): the positions after the outlier
        one_call = draft(torch.tensor([prompt])).logits[0, 1:]  # (T-1, V)
    lm = CachedLM(draft)
    steps = torch.stack([lm.feed([t], keep=1)[-1] for t in prompt])[1:]  # (T-1, V)

    def err(logits):
        return ((logits - ref).abs().amax(1) / ref.abs().amax(1)).max().item()

    assert err(one_call) < 2 * err(steps), (err(one_call), err(steps))
    assert (one_call.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_quantized_draft_streams_fewer_weight_bytes(precision):
    if precision not in CPU_PRECISIONS:
        pytest.skip(f"{precision} is not available here")
    from specviz.modeling.tiny import tiny_model

    target = tiny_model(3, hidden=128)  # int4 packs 128 inputs at a time: no padding at this width
    draft = quant.apply(tiny_model(3, hidden=128), precision)
    fp32, small = measure.weight_bytes(target), measure.weight_bytes(draft)
    assert small < fp32 * (0.3 if precision == "int8" else 0.5)  # int4 keeps the biased q/k/v in float32
    assert quant.precision_of(draft) == precision
    assert measure.c_prior(draft, target) == pytest.approx(measure.prior_c(small, 2, fp32, 2, "cpu"))


@pytest.mark.parametrize("precision", CPU_PRECISIONS)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_the_target_alone_with_every_draft_precision(precision, k):
    target = tiny_lm(5)
    draft = draft_of(5, precision)  # agrees often: long accepted runs and bonuses
    for prompt in ([3, 4, 5], [9, 1, 7, 7, 2]):
        run = speculative_decode(target, draft, prompt, DecodeSettings(k=k, max_new_tokens=24))
        assert run.token_ids == hf_greedy(target, prompt, 24)
        assert run.token_ids == autoregressive_decode(target, prompt, DecodeSettings(max_new_tokens=24)).token_ids
    assert run.n_accepted > 0  # the draft's proposals were used, not just corrected


# --------------------------------------------------------------------------
# sampling: the rule stays exact for the q the quantized draft actually sampled from

VOCAB, PROMPT, N_RUNS = 6, [1, 3], 3000


def exact_two_token_distribution(target, temperature=1.0):
    dist = {}
    with torch.no_grad():
        p1 = logits_to_probs(target(torch.tensor([PROMPT])).logits[0, -1, :VOCAB], temperature)
        for x1 in range(VOCAB):
            p2 = logits_to_probs(target(torch.tensor([PROMPT + [x1]])).logits[0, -1, :VOCAB], temperature)
            for x2 in range(VOCAB):
                dist[(x1, x2)] = float(p1[x1] * p2[x2])
    return dist


def two_token_counts(target, draft, k, n=N_RUNS):
    counts, kinds = collections.Counter(), collections.Counter()
    for seed in range(n):
        run = speculative_decode(target, draft, PROMPT,
                                 DecodeSettings(k=k, temperature=1.0, max_new_tokens=2, seed=seed))
        counts[tuple(run.token_ids)] += 1
        kinds.update(r.extra_kind for r in run.rounds)
    return counts, kinds


@pytest.fixture(scope="module")
def sampling_pair():
    # the draft is a perturbed, int8-rounded copy of the target: it overlaps the target
    # (many acceptances, bonus tokens at k=1) without being it
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    draft = tiny_lm(11, vocab=VOCAB, init=1.0).float()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.6 * p.std())
    return target, quant.apply(draft, "int8")


@pytest.mark.parametrize("k", [1, 2])
def test_sampling_with_a_quantized_draft_matches_the_target_distribution(sampling_pair, k):
    target, draft = sampling_pair
    exact = exact_two_token_distribution(target)
    counts, kinds = two_token_counts(target, draft, k)
    assert passes(counts, exact, N_RUNS), total_variation(counts, exact, N_RUNS)
    if k == 1:
        assert kinds["bonus"] > N_RUNS // 10  # the bonus token is exercised, not cut by max_new_tokens
    assert kinds["correction"] > N_RUNS // 10


def test_a_broken_residual_fails_the_check_with_a_quantized_draft(sampling_pair, monkeypatch):
    """Corrections drawn from p instead of norm(max(0, p - q)): the same check must fail."""
    target, draft = sampling_pair
    exact = exact_two_token_distribution(target)
    monkeypatch.setattr(engine, "residual", lambda p, q, d: p)
    counts, _ = two_token_counts(target, draft, 2)
    assert not passes(counts, exact, N_RUNS)


def int4_copy(target):
    """The target's own weights in int4, its 6-row head padded to 16 rows (int4 packs 16 rows at a time);
    the padding's logits lie past the run's vocabulary and are never read."""
    draft = copy.deepcopy(target).float()
    head = torch.nn.Linear(draft.lm_head.in_features, 16, bias=False)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[:VOCAB] = draft.lm_head.weight
    draft.lm_head = head
    return quant.apply(draft, "int4")


def test_sampling_with_an_int4_draft_matches_the_target_distribution():
    """int4 rounding alone moves the draft's two-token distribution ~0.3 from the target's (TV): the rule must
    divide by the q the int4 draft drew from, not by a float copy's (which would accept nearly everything)."""
    if "int4" not in CPU_PRECISIONS:
        pytest.skip("int4 is not available here")
    target = tiny_lm(11, vocab=VOCAB, init=1.0)
    draft = int4_copy(target)
    assert "Int4" in type(draft.lm_head).__name__  # really packed, not left in float
    exact = exact_two_token_distribution(target)
    n = 1000  # a float copy's q misses by a TV of ~0.3: far outside the chi-square bound at this n
    counts, kinds = two_token_counts(target, draft, 1, n)
    assert passes(counts, exact, n), total_variation(counts, exact, n)
    assert kinds["bonus"] > n // 10 and kinds["correction"] > n // 10  # both outcomes were judged
    # and the int4 draft is not the target: its own distribution is clearly apart
    assert 0.5 * sum(abs(p - q) for p, q in zip(exact.values(), exact_two_token_distribution(draft).values())) > 0.1


def test_int4_on_a_head_it_cannot_pack_is_a_clear_error_and_changes_nothing():
    if "int4" not in CPU_PRECISIONS:
        pytest.skip("int4 is not available here")
    draft = tiny_lm(11, vocab=VOCAB).float()  # a head of 6 rows: int4 packs 16 at a time
    before = {k: v.clone() for k, v in draft.state_dict().items()}
    with pytest.raises(InvalidSetting, match=r"int4 .* lm_head has 6 rows"):
        quant.apply(draft, "int4")
    assert quant.precision_of(draft) == "float32"  # untouched: neither converted nor marked int4
    assert all(torch.equal(before[k], v) for k, v in draft.state_dict().items())


# --------------------------------------------------------------------------
# a pair with another draft precision shares the target


def test_with_draft_precision_copies_the_draft_and_shares_the_target(tiny_pair):
    int8 = with_draft_precision(tiny_pair, "int8")
    assert int8.target is tiny_pair.target and int8.tokenizer is tiny_pair.tokenizer
    assert int8.draft is not tiny_pair.draft and int8.draft_precision == "int8"
    assert quant.precision_of(tiny_pair.draft) != "int8"  # the source draft is untouched
    assert with_draft_precision(tiny_pair, "float32") is tiny_pair
    with pytest.raises(InvalidSetting, match="made from a float32"):
        with_draft_precision(int8, "int4")


@pytest.mark.parametrize("name", ["tiny-self", "tiny-early-exit"])
def test_a_draft_made_of_the_targets_layers_is_never_quantized(name):
    """Quantizing such a draft would quantize the target it shares its modules with."""
    from pathlib import Path

    from specviz.decoding import models

    reg = Path(__file__).resolve().parent / "models_tiny.yaml"
    pair = models.load_pair(name, registry=reg, draft_precision="int8")
    assert not any(isinstance(m, quant.Int8Linear) for m in pair.target.modules())
    assert pair.draft_precision == "float32"
    assert with_draft_precision(pair, "int8") is pair
    run = speculative_decode(pair.target, pair.draft, [5, 6, 7], DecodeSettings(k=3, max_new_tokens=12))
    assert run.token_ids == autoregressive_decode(pair.target, [5, 6, 7], DecodeSettings(max_new_tokens=12)).token_ids


# --------------------------------------------------------------------------
# the int8 engine: fbgemm's (x86) where the build has it, else qnnpack (ARM); forced here through the engine


@pytest.fixture
def qnnpack():
    """PyTorch's quantized engine set to qnnpack, the ARM one (x86 builds ship it too); restored after."""
    if "qnnpack" not in torch.backends.quantized.supported_engines:
        pytest.skip("this PyTorch has no qnnpack")
    was = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    yield "qnnpack"
    torch.backends.quantized.engine = was


@pytest.fixture
def only_engines(monkeypatch):
    """only_engines(names): a PyTorch whose quantized engines are `names` (an ARM build: qnnpack, none)."""
    def set_(names):
        monkeypatch.setattr(type(torch.backends.quantized), "supported_engines", property(lambda self: list(names)))
    return set_


def test_the_int8_engine_is_the_one_in_force_else_the_best_one_the_build_has(qnnpack, only_engines):
    assert quant.int8_engine() == "qnnpack"  # chosen: kept
    if "onednn" in torch.backends.quantized.supported_engines:  # another engine in force: the preferred one
        torch.backends.quantized.engine = "onednn"
        assert quant.int8_engine() == next(e for e in quant.INT8_ENGINES if e in torch.backends.quantized.supported_engines)
    only_engines(["qnnpack", "none"])  # an ARM build: no fbgemm, no x86
    assert quant.int8_engine() == "qnnpack" and "int8" in quant.supported("cpu")
    only_engines(["none"])  # no quantized engine at all: int8 is not offered, and asking is a clear error
    assert quant.int8_engine() is None and "int8" not in quant.supported("cpu")
    with pytest.raises(InvalidSetting, match="int8"):
        quant.check("int8", "cpu")
    with pytest.raises(InvalidSetting, match="quantized engine"):
        quant.apply(tiny_lm(5).float(), "int8")


def test_an_int8_layer_runs_its_own_engines_kernel_whatever_engine_is_in_force(qnnpack):
    if not {"x86", "fbgemm"} & set(torch.backends.quantized.supported_engines):
        pytest.skip("no x86 engine to compare with")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=True)
    x = torch.randn(5, 64)  # (T, K)
    arm = quant.Int8Linear(lin)  # packed for the engine in force: qnnpack
    x86 = quant.Int8Linear(lin, "fbgemm")
    assert arm.engine == "qnnpack" and torch.backends.quantized.engine == "qnnpack"  # packing restored it
    torch.backends.quantized.engine = "fbgemm"
    again = quant.Int8Linear(lin, "qnnpack")  # packed for qnnpack while fbgemm is in force
    for rows in (x[:1], x):  # a draft step, and a prompt's rows
        assert torch.equal(again(rows), arm(rows))
        assert not torch.equal(arm(rows), x86(rows))  # another kernel: other rounding
        err = (arm(rows) - lin(rows)).abs().max() / lin(rows).abs().max()
        assert err < 0.03  # and as close to the float layer
    sub = arm.rows(torch.tensor([1, 5, 7]))  # a frequent-token head over some rows keeps the engine, bit for bit
    assert sub.engine == "qnnpack" and torch.equal(sub(x), arm(x)[:, [1, 5, 7]])


@pytest.mark.parametrize("k", [1, 4])
def test_an_int8_draft_on_qnnpack_keeps_greedy_text_the_target_alone(qnnpack, k):
    from pathlib import Path

    from specviz.decoding import models

    reg = Path(__file__).resolve().parent / "models_tiny.yaml"
    pair = models.load_pair("tiny-random", registry=reg, draft_precision="int8")
    assert pair.draft_precision == "int8" and pair.draft_label == "int8 (qnnpack)"
    layers = [m for m in pair.draft.modules() if isinstance(m, quant.Int8Linear)]
    assert layers and {m.engine for m in layers} == {"qnnpack"}
    prompt = pair.tokenizer.encode("the cat sat on")
    run = speculative_decode(pair.target, pair.drafter(), prompt, DecodeSettings(k=k, max_new_tokens=24))
    assert run.token_ids == autoregressive_decode(pair.target, prompt, DecodeSettings(max_new_tokens=24)).token_ids
    assert run.n_accepted > 0  # the int8 draft's proposals were used
    sampled = speculative_decode(pair.target, pair.drafter(), prompt,
                                 DecodeSettings(k=k, temperature=1.0, max_new_tokens=16, seed=3))
    assert len(sampled.token_ids) == 16 and sampled.rounds  # the sampling path runs on qnnpack too
    assert sampled.token_ids == speculative_decode(pair.target, pair.drafter(), prompt,
                                                   DecodeSettings(k=k, temperature=1.0, max_new_tokens=16, seed=3)).token_ids


def test_parse_dtype():
    assert quant.parse_dtype("bf16") is torch.bfloat16
    assert quant.parse_dtype(torch.float16) is torch.float16
    with pytest.raises(InvalidSetting, match="int8"):
        quant.parse_dtype("int8")
