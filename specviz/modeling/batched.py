"""One forward pass over several sessions' new tokens, each session's result bit for bit its own pass's.

Sessions verifying on the same target each have a CachedLM: the shared model and their own cache.
`feed_many(lms, ids, keeps)` does what `lms[i].feed(ids[i], keeps[i])` does for every i, in one pass:
the rows of all sessions are stacked along the sequence axis ((1, ΣT, H)) for everything that treats
rows one by one (the embedding, the norms, every Linear, the SiLU MLP, the residual adds, the head),
so each weight is read once for all sessions. Attention is the one step that mixes rows: it runs per
session, exactly as that session's own pass runs it (its own positions and rotary angles, its own
causal mask from transformers' own mask function, its own cache, the model's attention function).

That is exact only where every Linear is row-invariant: a row's result must not depend on the other
rows of its call. PyTorch's stock float Linear is not (a call of 1 to 3 rows sums in another order
than a long one), so `can_batch` accepts only a body of fastlinear-packed Linears (oneDNN, one kernel
for every row count) or quant.ExactInt8Linear (each row quantized on fixed qparams). A head that is
not (a tied head fastlinear left plain, a draft's VocabHead) runs per session on its own kept rows.

The pass replicates transformers' Qwen2Model / LlamaModel forward op by op, so only those
architectures (full attention, no sliding window) are accepted.

Bit for bit at the same thread count: a kernel splits its work by the threads it has, so a pass
computed with two threads and one with one may differ in the last bits. The app computes every pass,
shared or not, on the device's worker thread (decoding/pool.py, device/devqueue.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama as llama
from transformers.models.qwen2 import modeling_qwen2 as qwen2

from specviz.modeling import fastlinear, quant
from specviz.modeling.lm import CachedLM, StaticLM


@dataclass(frozen=True)
class _Arch:
    """The classes of one supported architecture, and its own rotary and fallback attention functions."""

    body: type
    layer: type
    attn: type
    mlp: type
    norm: type
    rotary: object  # apply_rotary_pos_emb(q, k, cos, sin)
    eager: object  # eager_attention_forward: the fallback when the config names no registered function


_ARCHS = {
    qwen2.Qwen2ForCausalLM: _Arch(qwen2.Qwen2Model, qwen2.Qwen2DecoderLayer, qwen2.Qwen2Attention, qwen2.Qwen2MLP,
                                  qwen2.Qwen2RMSNorm, qwen2.apply_rotary_pos_emb, qwen2.eager_attention_forward),
    llama.LlamaForCausalLM: _Arch(llama.LlamaModel, llama.LlamaDecoderLayer, llama.LlamaAttention, llama.LlamaMLP,
                                  llama.LlamaRMSNorm, llama.apply_rotary_pos_emb, llama.eager_attention_forward),
}


def row_exact(mod: nn.Module) -> bool:
    """Whether a Linear gives each row the same bits whatever other rows share its call."""
    if isinstance(mod, quant.ExactInt8Linear):
        return True
    return isinstance(mod, nn.Linear) and fastlinear.w_is_packed(mod.weight)  # packed: oneDNN pads and never varies


def _linears(layer) -> list[nn.Module]:
    a, m = layer.self_attn, layer.mlp
    return [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]


def supported(model) -> bool:
    """Whether feed_many's pass replicates `model`'s own: a Qwen2 or Llama causal LM of its stock classes,
    on CPU, full attention only, every Linear of its body row-exact."""
    arch = _ARCHS.get(type(model))
    body = getattr(model, "model", None)
    if arch is None or type(body) is not arch.body or next(model.parameters()).device.type != "cpu":
        return False
    if "sliding_attention" in (getattr(model.config, "layer_types", None) or ()):
        return False
    for layer in body.layers[: model.config.num_hidden_layers]:
        if (type(layer) is not arch.layer or type(layer.self_attn) is not arch.attn or type(layer.mlp) is not arch.mlp
                or type(layer.input_layernorm) is not arch.norm
                or type(layer.post_attention_layernorm) is not arch.norm
                or getattr(layer.self_attn, "sliding_window", None) is not None):
            return False
        if not all(row_exact(lin) for lin in _linears(layer)):
            return False
    return type(body.norm) is arch.norm


def can_batch(lms) -> bool:
    """Whether feed_many can serve these caches together: all plain CachedLM (not StaticLM, the CUDA-graph one),
    each once, the same model object, which `supported` accepts, and no sliding-window cache layer.

    Their heads (lm.head) may differ: a head that is set runs per session on its own rows."""
    lms = list(lms)
    if not lms or any(not isinstance(lm, CachedLM) or isinstance(lm, StaticLM) for lm in lms):
        return False
    model = lms[0].model
    if any(lm.model is not model for lm in lms) or len({id(lm) for lm in lms}) < len(lms):
        return False
    if len({id(lm.cache) for lm in lms}) < len(lms):
        return False
    if any(getattr(layer, "is_sliding", False) for lm in lms for layer in lm.cache.layers):
        return False
    return supported(model)


@dataclass(frozen=True)
class _Session:
    """One session's share of the pass: its rows, and what its own pass would give its attention."""

    lm: CachedLM
    rows: slice  # its rows among the stacked ones
    keep: int | None
    position_ids: torch.Tensor  # (1, T)
    rotary: tuple[torch.Tensor, torch.Tensor]  # cos, sin (1, T, d)
    mask: object  # what create_causal_mask gives its own pass (None, a tensor, a BlockMask)

    @property
    def size(self) -> int:
        return self.rows.stop - self.rows.start


def _sessions(lms, sizes, keeps, embeds: torch.Tensor) -> list[_Session]:
    """Each session's positions (its cache's length on), rotary angles and causal mask, as its own
    Qwen2Model/LlamaModel.forward makes them before the first layer."""
    body = lms[0].model.model
    out, start = [], 0
    for lm, t, keep in zip(lms, sizes, keeps):
        rows = slice(start, start + t)
        x = embeds[:, rows]  # (1, T, H): its own inputs_embeds
        seen = lm.cache.get_seq_length()
        pos = (torch.arange(t, device=x.device) + seen).unsqueeze(0)  # (1, T)
        mask = create_causal_mask(config=body.config, inputs_embeds=x, attention_mask=None,
                                  past_key_values=lm.cache, position_ids=pos)
        out.append(_Session(lm, rows, keep, pos, body.rotary_emb(x, pos), mask))
        start += t
    return out


def _attention(attn, arch: _Arch, h: torch.Tensor, sessions: list[_Session]) -> torch.Tensor:
    """Qwen2Attention/LlamaAttention.forward on the stacked rows: projections once, attention per session."""
    shape = (*h.shape[:-1], -1, attn.head_dim)
    q = attn.q_proj(h).view(shape).transpose(1, 2)  # (1, heads, ΣT, d)
    k = attn.k_proj(h).view(shape).transpose(1, 2)  # (1, kv heads, ΣT, d)
    v = attn.v_proj(h).view(shape).transpose(1, 2)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, arch.eager)
    extra = {"sliding_window": attn.sliding_window} if hasattr(attn, "sliding_window") else {}  # Qwen2 passes it
    outs = []
    for s in sessions:
        cos, sin = s.rotary
        q_s, k_s = arch.rotary(q[:, :, s.rows], k[:, :, s.rows], cos, sin)
        k_s, v_s = s.lm.cache.update(k_s, v[:, :, s.rows], attn.layer_idx)  # its own cache, and all it holds
        out, _ = interface(attn, q_s, k_s, v_s, s.mask, dropout=0.0 if not attn.training else attn.attention_dropout,
                           scaling=attn.scaling, **extra, position_ids=s.position_ids, use_cache=True)
        outs.append(out)  # (1, T, heads, d)
    out = torch.cat(outs, dim=1)  # (1, ΣT, heads, d)
    return attn.o_proj(out.reshape(*h.shape[:-1], -1).contiguous())


def _layer(layer, arch: _Arch, h: torch.Tensor, sessions: list[_Session]) -> torch.Tensor:
    """Qwen2DecoderLayer/LlamaDecoderLayer.forward on the stacked rows."""
    residual = h
    h = residual + _attention(layer.self_attn, arch, layer.input_layernorm(h), sessions)
    return h + layer.mlp(layer.post_attention_layernorm(h))


def _logits(model, h: torch.Tensor, sessions: list[_Session]) -> list[torch.Tensor]:
    """Each session's kept rows through its head, as CachedLM.feed (lm_head) or _feed_head (lm.head) does."""
    # logits_to_keep=keep: the last keep rows (all of them for None, 0, or more than the pass has)
    kept = [slice(s.rows.stop - min(s.keep or s.size, s.size), s.rows.stop) for s in sessions]
    if all(s.lm.head is None for s in sessions) and row_exact(model.lm_head):
        stacked = model.lm_head(torch.cat([h[:, r] for r in kept], dim=1))[0]  # (Σkeep, V): the head read once
        return list(stacked.split([r.stop - r.start for r in kept]))
    out = []
    for s, r in zip(sessions, kept):
        if s.lm.head is None:
            out.append(model.lm_head(h[:, r])[0])  # (keep, V): a head whose bits depend on its call's rows
        else:
            hidden = h[0, s.rows]  # (T, H)
            out.append(s.lm.head(hidden if s.keep is None else hidden[-s.keep:]))
    return out


def _check(lms, ids, keeps) -> None:
    if not len(lms) == len(ids) == len(keeps):
        raise ValueError(f"feed_many takes one ids list and one keep per cache: {len(lms)}, {len(ids)}, {len(keeps)}")
    if len({id(lm) for lm in lms}) < len(lms):
        raise ValueError("feed_many: a cache may appear only once in one pass")
    if any(len(x) == 0 for x in ids):
        raise ValueError("feed_many: every cache needs at least one new token")
    if not can_batch(lms):
        raise ValueError("feed_many: these caches cannot share a pass (can_batch is false)")


@torch.inference_mode()
def feed_many(lms, ids, keeps) -> list[torch.Tensor]:
    """For each i: exactly lms[i].feed(ids[i], keeps[i]) — the returned logits (keeps[i] or len(ids[i]), V) and the
    cache advanced (lm.cache updated, lm.n += len(ids[i])) — computed in ONE pass of the shared layers over all rows.
    Runs in the calling thread (the caller already holds the device and is on its worker); no runner calls.
    ValueError where the caches cannot share a pass (can_batch) or one appears twice. A pass that raises
    leaves every cache as it was, so each session may still run its own pass."""
    lms, ids, keeps = list(lms), [list(x) for x in ids], list(keeps)
    _check(lms, ids, keeps)
    try:
        return _feed_many(lms, ids, keeps)
    except BaseException:
        for lm in lms:
            _restore(lm)
        raise


def _restore(lm: CachedLM) -> None:
    """Each cache layer back to the lm.n tokens it held before a pass that raised (it may have reached some
    layers and not others)."""
    for layer in lm.cache.layers:
        extra = layer.get_seq_length() - lm.n
        if extra > 0:
            layer.crop(-extra)


def _feed_many(lms: list[CachedLM], ids: list[list[int]], keeps: list) -> list[torch.Tensor]:
    model = lms[0].model
    body, arch = model.model, _ARCHS[type(model)]
    x = torch.tensor([[t for row in ids for t in row]], dtype=torch.long, device=lms[0].device)  # (1, ΣT)
    h = body.embed_tokens(x)  # (1, ΣT, H)
    sessions = _sessions(lms, [len(row) for row in ids], keeps, h)
    for layer in body.layers[: model.config.num_hidden_layers]:
        h = _layer(layer, arch, h, sessions)
    h = body.norm(h)
    logits = _logits(model, h, sessions)
    for lm, row in zip(lms, ids):
        lm.n += len(row)
    return logits
