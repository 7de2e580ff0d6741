"""Several caches' passes on one model as one forward pass (placeholder: one pass per cache, in turn).

    can_batch(lms)            whether feed_many may serve these caches together
    feed_many(lms, ids, keeps) for each i exactly lms[i].feed(ids[i], keeps[i])

feed_many runs in the calling thread (the device's worker, which already holds the device) and makes no
runner calls; the decoding layer's verify pool (decoding/pool.py) times it as one pass.
"""

from __future__ import annotations

import inspect

import torch

from specviz.modeling.lm import CachedLM


def can_batch(lms) -> bool:
    """All plain CachedLMs (no static cache) on the CPU, on the same model, with the same head."""
    lms = list(lms)
    if not lms:
        return False
    first = lms[0]
    return all(type(lm) is CachedLM and lm.model is first.model and lm.device.type == "cpu"
               and lm.head is first.head for lm in lms)


@torch.inference_mode()
def feed_many(lms, ids, keeps) -> list[torch.Tensor]:
    """For each i, what lms[i].feed(ids[i], keeps[i]) returns, each cache advanced the same way."""
    return [_feed(lm, i, keep) for lm, i, keep in zip(lms, ids, keeps)]


def _feed(lm: CachedLM, ids: list[int], keep: int | None) -> torch.Tensor:
    """CachedLM.feed's pass, in this thread (no runner): logits (keep or len(ids), V)."""
    x = torch.tensor([ids], dtype=torch.long, device=lm.device)  # (1, T)
    if lm.head is not None:
        out = lm.model.model(input_ids=x, past_key_values=lm.cache, use_cache=True)
        hidden = out.last_hidden_state[0]  # (T, H) after the final norm
        lm.cache, lm.n = out.past_key_values, lm.n + len(ids)
        return lm.head(hidden if keep is None else hidden[-keep:])  # (keep, V)
    trims = "logits_to_keep" in inspect.signature(lm.model.forward).parameters
    kw = {"logits_to_keep": keep} if keep is not None and trims else {}
    out = lm.model(input_ids=x, past_key_values=lm.cache, use_cache=True, **kw)
    lm.cache, lm.n = out.past_key_values, lm.n + len(ids)
    logits = out.logits[0]  # (T, V)
    return logits if keep is None else logits[-keep:]
