"""Tiny GGUF files written from tiny random models, laid out as llama.cpp's converter writes them.

transformers reads them as it reads a real GGUF: its config, its tokenizer (a byte-level BPE with no
merges) and its tensors. llama's q and k rows are permuted the way llama.cpp permutes them (transformers
undoes it on load); qwen2's are not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# one token per printable byte, as byte-level BPE spells them, plus an end token
_BYTES = [chr(c) for c in range(33, 127)]
TOKENS = ["<eos>"] + _BYTES + ["Ġ", "Ċ", "Ġt"]  # Ġ: a space, Ċ: a newline (GPT-2's byte-to-unicode map)
MERGES = ["Ġ t"]  # one merge: the reader needs a merge list


def tiny_model(arch: str = "qwen2", seed: int = 0, noise: float = 0.0, hidden: int = 64, layers: int = 2,
               heads: int = 4, kv_heads: int = 2, intermediate: int = 128, vocab: int = 128, tie: bool = False):
    """tiny.tiny_lm's model of `arch` (float32) as llama.cpp's converter expects it (eos id 0, rms_norm_eps
    1e-6), its biases and norms random too (a zero bias would hide a bug); noise > 0 perturbs every weight
    (a draft of seed's model)."""
    from tiny import tiny_lm

    model = tiny_lm(seed, vocab, arch=arch, init=0.3, positions=512, hidden=hidden, layers=layers,
                    dtype=torch.float32, num_attention_heads=heads, num_key_value_heads=kv_heads,
                    intermediate_size=intermediate, tie_word_embeddings=tie, rms_norm_eps=1e-6, eos_token_id=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
        if noise > 0:
            g = torch.Generator().manual_seed(seed + 1_000_003)
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return model.eval()


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation of q/k rows (convert_hf_to_gguf.py, LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# the block types gguf-py can write, taken in turn by the 2-D weights of a 'mixed' file
MIXED = ("Q8_0", "Q5_0", "Q4_1", "Q5_1", "Q4_0")
# k-quant blocks: bytes per 256 values, and where each block's float16 scales are (value)
KQUANTS = {"Q4_K": (144, ((0, 0.01), (2, 0.005))), "Q6_K": (210, ((208, 0.002),))}


def _kquant(rows: int, cols: int, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random k-quant blocks (gguf-py cannot write these types) with sane scales: what they dequantize to is
    the tensor's value, read back by both transformers and the int8 cache."""
    size, scales = KQUANTS[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    for at, value in scales:
        raw[:, :, at:at + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return raw.reshape(rows, -1)


def write_gguf(model, path: Path, quant: str = "mixed") -> Path:
    """Write `model` as a GGUF file. quant: 'f32' (every tensor float32); 'mixed' (the 2-D weights in the
    MIXED block types in turn where their rows allow it, else F16; norms and biases float32), as a quantized
    GGUF mixes types; 'kquants' (the 2-D weights whose rows are whole 256-blocks as random Q4_K and Q6_K
    blocks, the types of the real files, whose values then replace the model's)."""
    import gguf

    cfg = model.config
    arch = cfg.model_type
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]))
    if arch == "llama":
        w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "default")
    tokens = TOKENS + [f"<extra_{i}>" for i in range(cfg.vocab_size - len(TOKENS))]
    w.add_token_list(tokens)
    w.add_token_types([3] + [1] * (len(TOKENS) - 1) + [3] * (len(tokens) - len(TOKENS)))
    w.add_token_merges(MERGES)
    w.add_eos_token_id(0)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                 "post_attention_layernorm": "ffn_norm"}
    state = model.state_dict()
    rng = np.random.default_rng(0)
    for n, (hf, t) in enumerate(state.items()):
        if hf == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # a tied head is not in the file: the reader ties it
        if hf in names:
            name = names[hf]
        else:
            _, _, i, *mid, suffix = hf.split(".")
            name = f"blk.{i}.{per_layer['.'.join(mid)]}.{suffix}"
        data = t.detach().float().numpy().copy()
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            data = _permute(data, cfg.num_attention_heads if "attn_q" in name else cfg.num_key_value_heads)
        if quant == "kquants" and data.ndim == 2 and data.shape[1] % 256 == 0:
            kind = ("Q4_K", "Q6_K")[n % 2]
            qtype = gguf.GGMLQuantizationType[kind]
            w.add_tensor(name, _kquant(*data.shape, kind, rng), raw_dtype=qtype)
        elif quant in ("mixed", "kquants") and data.ndim == 2:
            if data.shape[1] % 32 == 0 and name != "token_embd.weight":
                qtype = gguf.GGMLQuantizationType[MIXED[n % len(MIXED)]]
            else:
                qtype = gguf.GGMLQuantizationType.F16
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
