"""Attention computed one query row at a time, each over exactly the keys it sees ("row-exact").

Why: PyTorch's scaled_dot_product_attention gives a query row slightly different bits
when it shares the call with other rows (another kernel blocking, another summation
order). A verify pass scores k+1 rows in one call where the target alone scores one,
so the bits differ. In float32 that is a last-bit difference; after an int8 layer it
can flip an activation's rounding and, near a tie, the argmax. Here each row is its
own one-row call over only the keys its mask allows, in their order: the very call
the target alone makes for that token, so its result is the same, bit for bit.

`enable(model)` switches a loaded model to it (its config's attention name becomes
ROW_EXACT). A batch of more than one sequence falls back to the stock sdpa path.
"""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

ROW_EXACT = "specviz_row_exact"


def _visible(mask: torch.Tensor | None, i: int, t: int, s: int) -> torch.Tensor | slice:
    """The keys row i of t sees among s: a prefix slice (a chain) or their indices (a tree)."""
    if mask is None:  # causal: row i is position s - t + i
        return slice(0, s - t + i + 1)
    row = mask[0, 0, i] if mask.dtype == torch.bool else mask[0, 0, i] == 0  # (s,) True where allowed
    idx = row.nonzero().flatten()
    m = idx.numel()
    return slice(0, m) if m and int(idx[-1]) == m - 1 else idx


def row_exact_attention(module, query, key, value, attention_mask, **kwargs):
    """query (B, H, T, d), key/value (B, Hkv, S, d) -> ((B, T, H, d), None), as sdpa_attention_forward."""
    b, _, t, _ = query.shape
    if b != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    s = key.shape[2]
    kwargs.pop("is_causal", None)
    outs = []
    for i in range(t):
        keys = _visible(attention_mask, i, t, s)
        k_i, v_i = key[:, :, keys], value[:, :, keys]  # (1, Hkv, m, d): what a one-token step sees
        out, _ = sdpa_attention_forward(module, query[:, :, i:i + 1], k_i, v_i, None, is_causal=False, **kwargs)
        outs.append(out)  # (1, 1, H, d)
    return torch.cat(outs, dim=1), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ROW_EXACT, row_exact_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ROW_EXACT, sdpa_mask)


def enable(model) -> None:
    """Make `model` attend row by row (in place)."""
    _register()
    model.set_attn_implementation(ROW_EXACT)


def is_enabled(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == ROW_EXACT
