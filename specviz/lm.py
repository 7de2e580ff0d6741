"""A causal LM paired with its KV cache, fed incrementally and rolled back.

Both the target and the model drafter use this: `feed(ids)` runs the model on
the ids the cache has not seen yet and returns their logits; `rollback(n)`
crops the cache to its first n tokens after a rejection. transformers 5.x's
DynamicCache.crop takes a negative count (tokens to remove).

Every pass holds the device (devqueue.QUEUE; inside a decoding round, which
already holds it, this passes straight through), and a timed pass is judged
for load from outside the app by its process CPU time (devqueue.note_pass).

Token trees (tree.py) feed many branches at once: `feed_masked` takes which
cached and new entries each new token may see and each token's position
(transformers passes a 4D mask through to attention unchanged), and
`compact(keep)` keeps only the cache entries at the given indices, in order.
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


END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>")


def eos_ids(models, eos_token_id=None, tokenizer=None, vocab: int | None = None) -> list[int]:
    """The ids that end a reply, in first-seen order (may be empty).

    eos_token_id given (an id or a list): exactly those. Otherwise the tokenizer's eos, each
    model's generation-config eos (its config's when that has none), and the known end-of-turn
    tokens in the tokenizer's vocabulary. vocab: keep only the ids below it (ids both models score).
    """
    ids: list[int] = []

    def add(x):
        if isinstance(x, int):
            ids.append(x)
        elif isinstance(x, (list, tuple, set, frozenset)):
            ids.extend(i for i in x if isinstance(i, int))

    if eos_token_id is not None:
        add(eos_token_id if isinstance(eos_token_id, int) else list(eos_token_id))
    else:
        if tokenizer is not None:
            add(getattr(tokenizer, "eos_token_id", None))
        for m in models:
            e = getattr(getattr(m, "generation_config", None), "eos_token_id", None)
            add(e if e is not None else getattr(m.config, "eos_token_id", None))
        if tokenizer is not None:
            tv = tokenizer.get_vocab()
            for t in END_TOKENS:
                add(tv.get(t))
    return [i for i in dict.fromkeys(ids) if vocab is None or 0 <= i < vocab]


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

    @torch.inference_mode()
    def feed_masked(self, ids: list[int], allowed: torch.Tensor, positions: list[int],
                    keep: int | None = None) -> torch.Tensor:
        """Run the model on `ids` where new token i sees entry j (cached, then new) iff allowed[i, j].

        allowed: (T, n + T) bool; positions: (T,) position ids. Returns logits (keep or T, V).
        """
        T = len(ids)
        assert allowed.shape == (T, self.n + T), (tuple(allowed.shape), T, self.n)
        x = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        pos = torch.tensor([positions], dtype=torch.long, device=self.device)  # (1, T)
        dtype = self.model.get_input_embeddings().weight.dtype  # the attention scores' dtype
        # additive mask (0 where allowed, the dtype's minimum elsewhere): eager attention adds it to the
        # scores and sdpa takes it as is; a bool mask would be added as 1/0 by eager attention
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask = mask.masked_fill(~allowed.to(self.device), torch.finfo(dtype).min)[None, None]  # (1, 1, T, n+T)
        kw = {"logits_to_keep": keep} if keep is not None and self._can_trim_logits else {}
        with devqueue.hold(self.device):
            out = self.model(input_ids=x, attention_mask=mask, position_ids=pos, past_key_values=self.cache,
                             use_cache=True, **kw)
        self.cache = out.past_key_values
        self.n += T
        logits = out.logits[0]  # (T, V)
        return logits if keep is None else logits[-keep:]

    def compact(self, keep: list[int]) -> None:
        """Keep only the cache entries at indices `keep` (in that order): a tree's accepted path."""
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)  # (n',)
        for layer in self.cache.layers:
            if getattr(layer, "is_sliding", False):  # a window layer counts tokens it no longer holds
                raise ValueError("compacting a sliding-window cache is not supported")
            if getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, idx.to(layer.keys.device))  # (B, H, n', D)
                layer.values = layer.values.index_select(-2, idx.to(layer.values.device))
        self.n = len(keep)
