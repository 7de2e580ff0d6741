"""A causal LM paired with its KV cache, fed incrementally and rolled back.

Both the target and the model drafter use this: `feed(ids)` runs the model on
the ids the cache has not seen yet and returns their logits; `rollback(n)`
crops the cache to its first n tokens after a rejection. transformers 5.x's
DynamicCache.crop takes a negative count (tokens to remove).

Every pass holds the device (devqueue.QUEUE; inside a decoding round, which
already holds it, this passes straight through), and a timed pass is judged
for load from outside the app by its process CPU time (devqueue.note_pass).
"""

from __future__ import annotations

import inspect
import time

import torch
from transformers import DynamicCache

from . import devqueue


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock timings are real."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def max_positions(model) -> int | None:
    """The longest context a model accepts, if its config says."""
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(cfg, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def vocab_size(model) -> int:
    """Rows of the output head: how many logits the model produces."""
    head = model.get_output_embeddings()
    return int(getattr(head, "out_features", None) or head.weight.shape[0])


class CachedLM:
    """model + DynamicCache; `n` is how many tokens the cache holds."""

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._can_trim_logits = "logits_to_keep" in params
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.n = 0

    @torch.inference_mode()
    def feed(self, ids: list[int], keep: int | None = None) -> torch.Tensor:
        """Run the model on `ids` (new to the cache); return logits (keep or len(ids), V)."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        kw = {}
        if keep is not None and self._can_trim_logits:
            kw["logits_to_keep"] = keep  # prefill needs no logits for the whole prompt
        with devqueue.hold(self.device):
            out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True, **kw)
        self.cache = out.past_key_values
        self.n += len(ids)
        logits = out.logits[0]  # (T, V)
        return logits if keep is None else logits[-keep:]

    def rollback(self, n: int) -> None:
        """Keep only the first n cached tokens (drop rejected drafts)."""
        if n < self.n:
            self.cache.crop(n - self.n)  # negative: tokens to remove
            self.n = n

    def timed_feed(self, ids: list[int], keep: int | None = None) -> tuple[torch.Tensor, float]:
        """feed(), returning (logits, wall seconds) with GPU work synchronized.

        The clock starts once the device is held, so waiting for a turn is never timed.
        """
        with devqueue.hold(self.device):
            sync(self.device)
            t0, c0 = time.perf_counter(), time.process_time()
            logits = self.feed(ids, keep)
            sync(self.device)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        devqueue.note_pass(self.device, dt, cpu, torch.get_num_threads())
        return logits, dt
