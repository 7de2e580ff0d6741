"""The tests' one factory of tiny random causal LMs, built from a config: fast, offline, no hub.

Every test takes its tiny models from tiny_lm (test_tiny_factory.py checks that no other test module builds
one). float64 weights by default so that a batched verify pass and one-token steps agree to the last bit; a
large initializer_range (init) makes the distributions peaky enough that draft and target disagree often.
The product's own tiny models (`bench --tiny`, a registry's `tiny` source) are specviz.modeling.tiny's.
"""

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

from specviz.core.settings import DecodeSettings

# positions each architecture gets unless told: what its tests were written against
POSITIONS = {"qwen2": 256, "llama": 512, "gpt2": 128}


def _config(arch: str, vocab: int, hidden: int, layers: int, positions: int, init: float, config: dict):
    """The architecture's config: a small decoder with no special tokens, overridden by `config`."""
    if arch == "gpt2":  # its own field names; its input and output embeddings are tied (GPT2Config's default)
        base = dict(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=positions,
                    initializer_range=init, bos_token_id=None, eos_token_id=None)
        return GPT2Config(**{**base, **config})
    base = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                initializer_range=init, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                pad_token_id=None)
    return {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch](**{**base, **config})


def tiny_lm(seed: int, vocab: int = 64, *, arch: str = "qwen2", init: float = 0.5, positions: int | None = None,
            hidden: int = 32, layers: int = 2, dtype: torch.dtype = torch.float64, **config):
    """A random causal LM of `arch` ("qwen2", "llama" or "gpt2"), seeded, in eval mode with no gradients.

    config: any further field of the architecture's config (tie_word_embeddings, eos_token_id, pad_token_id,
    num_attention_heads, ...). A pad_token_id zeroes that embedding row, so it changes the weights too.
    """
    cfg = _config(arch, vocab, hidden, layers, positions or POSITIONS[arch], init, config)
    cls = {"qwen2": Qwen2ForCausalLM, "llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}[arch]
    torch.manual_seed(seed)
    return cls(cfg).to(dtype).eval().requires_grad_(False)


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
