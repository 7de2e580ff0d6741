"""The engine on the real embedded pair (Qwen2.5-Coder 0.5B drafting for 1.5B).

Greedy speculative output must equal transformers' own greedy generate of the
target alone, in float32, on a few prompts; the sampling rule must reproduce
the target's first-token distribution; the textbook preset must run for real.
"""

import pytest
import torch

from specviz import autoregressive_decode, speculative_decode
from specviz.teaching.experiments import first_token_trials
from specviz.core.prompts import encode, preset
from specviz.core.theory import expected_tv_noise, total_variation
from specviz.core.settings import DecodeSettings

pytestmark = pytest.mark.real

PROMPTS = [
    ("Write a Python function `fib(n)` that returns the n-th Fibonacci number.", True),
    ("List three primary colors, one per line.", True),
    ("The capital of France is", False),
]
N_NEW = 24


@pytest.fixture(scope="module")
def fp32_pair(default_pair):
    if default_pair.dtype == torch.float32:
        return default_pair
    from specviz import load_pair

    return load_pair(dtype="float32")


@pytest.mark.parametrize("text,chat", PROMPTS)
def test_real_greedy_equals_target_generate(fp32_pair, text, chat):
    pair = fp32_pair
    ids = encode(pair.tokenizer, text, chat=chat)
    x = torch.tensor([ids])
    ref = pair.target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=N_NEW,
                               eos_token_id=pair.eos_token_ids, pad_token_id=pair.eos_token_ids[0],
                               repetition_penalty=1.0, top_k=None, top_p=None, temperature=None)
    ref = ref[0, len(ids):].tolist()
    run = speculative_decode(pair.target, pair.draft, ids, DecodeSettings(k=4, temperature=0, max_new_tokens=N_NEW),
                             eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    assert run.token_ids == ref, (pair.tokenizer.decode(run.token_ids), pair.tokenizer.decode(ref))
    base = autoregressive_decode(pair.target, ids, DecodeSettings(temperature=0, max_new_tokens=N_NEW),
                                 eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    assert base.token_ids == ref
    # the draft really drafted, and the rounds account for every token
    assert run.n_drafted > 0 and run.target_passes < len(run.token_ids) + 1
    assert [t for r in run.rounds for t in r.emitted] == run.token_ids


def test_real_sampling_first_token_matches_p(fp32_pair):
    pair = fp32_pair
    ids = encode(pair.tokenizer, "Write a surreal poem about a clock that eats clouds.", chat=True)
    n = 2000
    trials = first_token_trials(pair.target, pair.draft, ids, n=n, temperature=1.0, seed=0)
    tv = total_variation(trials.p, trials.counts)
    noise = expected_tv_noise(trials.p, n)
    assert tv < 3 * noise + 0.01, (tv, noise)
    # the draft's own distribution is measurably different, so this is not trivially true
    assert total_variation(trials.q, {k: v * n for k, v in trials.p.items()}) > tv


def test_real_capital_of_france_preset_runs(default_pair):
    pair = default_pair
    p = preset("The capital of France")
    ids = encode(pair.tokenizer, p.text, chat=p.chat)
    run = speculative_decode(pair.target, pair.draft, ids, DecodeSettings(k=4, temperature=0, max_new_tokens=8),
                             eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    assert len(run.token_ids) == 8
    assert run.rounds[0].k == 4 and len(run.rounds[0].p_top) == 5
    # whatever the models do is what is recorded: the first drafted token is the draft's argmax
    assert run.rounds[0].drafted[0] == run.rounds[0].q_top[0].ids[0]


@pytest.fixture(scope="module")
def domain_baselines(default_pair_fp32):
    """The target alone on each domain prompt: what every draft precision must reproduce."""
    from specviz.core.prompts import domain_prompts

    pair, out = default_pair_fp32, {}
    for dom, p in domain_prompts().items():
        ids = encode(pair.tokenizer, p.text, chat=p.chat)
        out[dom] = ids, autoregressive_decode(pair.target, ids, DecodeSettings(temperature=0, max_new_tokens=16),
                                              eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab).token_ids
    return out


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8", "int4"])
def test_real_greedy_is_the_target_alone_with_every_draft_precision(default_pair_fp32, domain_baselines,
                                                                     precision):
    from specviz.modeling import quant
    from specviz.decoding.models import with_draft_precision

    if precision not in quant.supported(default_pair_fp32.device):
        pytest.skip(f"{precision} does not run on {default_pair_fp32.device} here")
    pair = with_draft_precision(default_pair_fp32, precision)
    assert pair.target is default_pair_fp32.target
    for dom, (ids, ref) in domain_baselines.items():
        run = speculative_decode(pair.target, pair.draft, ids, DecodeSettings(k=4, temperature=0, max_new_tokens=16),
                                 eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
        assert run.token_ids == ref, (precision, dom, pair.tokenizer.decode(run.token_ids))
        assert run.n_accepted > 0, (precision, dom)  # the draft is still a useful draft


def test_the_creative_lesson_lands_its_point_live(default_pair):
    """The creative lesson with its defaults, live on the default pair: the code's α is well above the story's
    (test_lessons checks the same on the shipped recordings)."""
    from specviz.teaching import lessons
    from test_lessons import LANDS

    ctx = lessons.Context(pair=default_pair)
    story, code = (lessons.run_step(s, ctx) for s in lessons.lesson("creative").steps[:2])
    assert code.measured - story.measured >= LANDS, (code.measured, story.measured)

