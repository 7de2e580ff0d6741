"""Tiny random-weight models with a character tokenizer, built from a config.

They load in milliseconds and need no download, so the app's tests (and a
presenter without the real pair) can exercise every page. Their text is
gibberish: they are for checking the machinery, not for learning what models
say. The draft is the target's weights plus noise, so the two agree often
enough for acceptance to be interesting.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<unk>", "<eos>"]
CHARS = list(string.printable[:95]) + ["\n"]  # letters, digits, punctuation, space, newline
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '\n> ' }}{% endif %}"
)


def other_ids(n: int = len(SPECIALS + CHARS)) -> list[int]:
    """The id each token has in the 'other' vocabulary: the specials keep theirs, the characters are reversed."""
    return [0, 1] + list(range(n - 1, 1, -1))


def char_tokenizer(reversed_ids: bool = False, missing: str = "") -> PreTrainedTokenizerFast:
    """One token per character; `<eos>` ends a text.

    reversed_ids: another vocabulary for the same text (other_ids), as a draft with its own tokenizer has.
    missing: characters left out of the vocabulary (read as <unk>).
    """
    ids = other_ids() if reversed_ids else list(range(len(SPECIALS + CHARS)))
    vocab = {t: ids[i] for i, t in enumerate(SPECIALS + CHARS) if t not in missing or t in SPECIALS}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(seed: int = 0, noise: float = 0.0, vocab: int = 128, hidden: int = 64, layers: int = 2,
               dtype: torch.dtype = torch.float32, reversed_ids: bool = False) -> Qwen2ForCausalLM:
    """A random Qwen2 (seeded); noise > 0 perturbs every weight (a 'draft' of seed's model).

    reversed_ids: the same model behind char_tokenizer(reversed_ids=True): token i's rows move to its other id.
    """
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, initializer_range=0.3, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=SPECIALS.index("<eos>"), pad_token_id=None)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    if noise > 0:
        g = torch.Generator().manual_seed(seed + 1_000_003)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp_min(1e-3))
    if reversed_ids:
        n = len(SPECIALS + CHARS)
        with torch.no_grad():  # row other_ids()[i] of the moved model is row i of the model
            for w in (model.get_input_embeddings().weight, model.lm_head.weight):
                w[other_ids(n)] = w[:n].clone()
    return model.to(dtype).eval().requires_grad_(False)
