"""Tiny random causal LMs built from a config: fast, offline, no hub.

float64 weights so that a batched verify pass and one-token steps agree to the
last bit; a large initializer_range makes the distributions peaky enough that
draft and target disagree often.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from specviz.core.settings import DecodeSettings


def tiny_qwen(seed: int, vocab: int = 64, init: float = 0.5, positions: int = 256):
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                      initializer_range=init, tie_word_embeddings=False, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    return Qwen2ForCausalLM(cfg).double().eval()


def tiny_gpt2(seed: int, vocab: int = 64, init: float = 0.5, positions: int = 128):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=positions,
                     initializer_range=init, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg).double().eval()


def hf_greedy(model, prompt, n, eos=None):
    """The reference: transformers' own greedy generate."""
    x = torch.tensor([prompt])
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                         min_new_tokens=0 if eos is not None else n, eos_token_id=eos,
                         pad_token_id=0, repetition_penalty=1.0)
    return out[0, len(prompt):].tolist()


def split_settings(kw: dict) -> tuple[DecodeSettings, dict]:
    """A test helper's keywords: (a DecodeSettings of those that are decoding settings, the rest)."""
    names = DecodeSettings.__dataclass_fields__
    return DecodeSettings(**{n: v for n, v in kw.items() if n in names}), {n: v for n, v in kw.items() if n not in names}
