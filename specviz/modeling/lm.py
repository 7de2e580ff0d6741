"""A causal LM paired with its KV cache, fed incrementally and rolled back.

Both the target and the model drafter use this: `feed(ids)` runs the model on
the ids the cache has not seen yet and returns their logits; `rollback(n)`
crops the cache to its first n tokens after a rejection. transformers 5.x's
DynamicCache.crop takes a negative count (tokens to remove).

Every pass goes through the cache's runner (device/runner.py): it holds the
device (inside a decoding round, which already holds it, this passes straight
through) and runs on the device's thread, and a timed pass is judged for load
from outside the app (runner.note_pass). A cache made without a runner uses
the shared queue's for its model's device (devqueue.queue_runner).

On a GPU a pass of a small model costs mostly its kernel launches and
transformers' Python, not its arithmetic. `static_cache(model)` makes
`open_lm(model)` hand out a `StaticLM` instead: a StaticCache of fixed length
(fixed addresses), on which each pass of T new tokens is recorded once as a
CUDA graph and replayed after. Rolling back only moves the cache's length:
entries past it are hidden by the causal mask until they are overwritten.

Token trees (tree.py) feed many branches at once: `feed_masked` takes which
cached and new entries each new token may see and each token's position
(transformers passes a 4D mask through to attention unchanged), and
`compact(keep)` keeps only the cache entries at the given indices, in order.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
import weakref
from typing import Any
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import StaticLayer

from specviz.device import devqueue
from specviz.device.runner import Runner


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

    recorded_s = 0.0  # one-off time spent recording CUDA graphs since reset() (StaticLM); never timed as decoding
    head = None  # None: the model's own head; else hidden (T, H) -> logits (T, V) (vocabhead.VocabHead.logits)

    def __init__(self, model, runner: Runner | None = None):
        self.model = model
        self.device = next(model.parameters()).device
        self.runner = runner or devqueue.queue_runner(self.device)  # how its passes reach the device
        params = inspect.signature(model.forward).parameters
        self._can_trim_logits = "logits_to_keep" in params
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.n = 0

    def close(self) -> None:
        """Done with this cache (a StaticLM goes back to its model's idle ones)."""

    @torch.inference_mode()
    def feed(self, ids: list[int], keep: int | None = None) -> torch.Tensor:
        """Run the model on `ids` (new to the cache); return logits (keep or len(ids), V)."""
        x = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if self.head is not None:
            return self._feed_head(x, keep)
        kw = {}
        if keep is not None and self._can_trim_logits:
            kw["logits_to_keep"] = keep  # prefill needs no logits for the whole prompt
        out = self.runner.run(lambda: self.model(input_ids=x, past_key_values=self.cache, use_cache=True,
                                                 **kw))  # on the device's own thread
        self.cache = out.past_key_values
        self.n += len(ids)
        logits = out.logits[0]  # (T, V)
        return logits if keep is None else logits[-keep:]

    def _feed_head(self, x: torch.Tensor, keep: int | None) -> torch.Tensor:
        """feed() through self.head: the model's body, then the head on the kept rows only."""
        def forward():
            out = self.model.model(input_ids=x, past_key_values=self.cache, use_cache=True)
            hidden = out.last_hidden_state[0]  # (T, H) after the final norm
            return out.past_key_values, self.head(hidden if keep is None else hidden[-keep:])  # (keep, V)
        self.cache, logits = self.runner.run(forward)  # on the device's own thread
        self.n += x.shape[1]
        return logits

    def rollback(self, n: int) -> None:
        """Keep only the first n cached tokens (drop rejected drafts)."""
        if n < self.n:
            self.cache.crop(n - self.n)  # negative: tokens to remove
            self.n = n

    def timed(self, fn, *args, **kw) -> tuple[Any, float]:
        """fn(*args, **kw), one of this model's passes, and its seconds, with GPU work synchronized; the
        pass is judged for outside load (runner.note_pass).

        The clock starts once the device is held, so waiting for a turn is never timed, nor is recording
        a CUDA graph (a one-off, like loading), nor the time other threads held the cores (PassTime.held).
        """
        out, t = self.runner.timed(lambda: fn(*args, **kw), spent=lambda: self.recorded_s)
        self.runner.note_pass(t)
        return out, t.held

    def timed_feed(self, ids: list[int], keep: int | None = None) -> tuple[torch.Tensor, float]:
        """feed(), returning (logits, seconds): timed()."""
        return self.timed(self.feed, ids, keep)

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
        out = self.runner.run(lambda: self.model(input_ids=x, attention_mask=mask, position_ids=pos,
                                                 past_key_values=self.cache, use_cache=True, **kw))
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


GRAPH_MAX_TOKENS = 16  # passes of up to this many new tokens are replayed from a graph (draft steps, verify passes)


@dataclass
class StaticPlan:
    """How open_lm serves a model: StaticLMs of max_len positions, with CUDA graphs or eager; idle ones kept."""

    max_len: int
    graphs: bool
    idle: list = field(default_factory=list)

    def __deepcopy__(self, memo) -> "StaticPlan":
        return StaticPlan(self.max_len, self.graphs)  # a copy of the model records its own caches and graphs


def static_cache(model, max_len: int, graphs: bool | None = None) -> StaticPlan | None:
    """Serve `model` through StaticLMs of max_len positions (graphs: CUDA graphs; default on CUDA unless
    SPECVIZ_CUDA_GRAPHS=0). None, and nothing changes, for a model whose cache layers are not all full
    attention (a sliding window counts positions differently)."""
    layers = StaticCache(config=model.config, max_cache_len=1).layers
    if not all(type(layer) is StaticLayer for layer in layers):
        return None
    if graphs is None:
        graphs = next(model.parameters()).device.type == "cuda" and os.environ.get("SPECVIZ_CUDA_GRAPHS", "1") != "0"
    model._specviz_static = StaticPlan(max_len=max_len, graphs=graphs)
    return model._specviz_static


def open_lm(model, owner=None, runner: Runner | None = None) -> CachedLM:
    """A cache for one run on `model`: a StaticLM from the model's plan (idle one reused, graphs and all) or a
    CachedLM. Given an owner, the StaticLM goes back to the idle ones when the owner is collected; else call
    close() when done. runner: how its passes reach the device (None: the shared queue's)."""
    plan = getattr(model, "_specviz_static", None)
    if plan is None:
        return CachedLM(model, runner)
    try:
        lm = plan.idle.pop()
        lm.runner = runner or devqueue.queue_runner(lm.device)  # this run's, not the last one's
    except IndexError:
        lm = StaticLM(model, plan, runner)
    lm.reset()
    lm.closed = False
    if owner is not None:
        weakref.finalize(owner, lm.close)
    return lm


class StaticLM(CachedLM):
    """model + StaticCache: `n` is the cache's length; passes of up to GRAPH_MAX_TOKENS tokens replay CUDA graphs."""

    def __init__(self, model, plan: StaticPlan, runner: Runner | None = None):
        self.plan = plan
        self.static = StaticCache(config=model.config, max_cache_len=plan.max_len)
        # (T, keep) -> (graph, ids (1, T), logits (keep, V)), or None where recording failed (then eager)
        self.graphs: dict[tuple[int, int | None], tuple | None] = {}
        self.graph_error: str | None = None  # why the last recording failed, if one did
        self.closed = False
        super().__init__(model, runner)

    def reset(self) -> None:
        self.cache, self.spilled = self.static, False
        self._set_length(0)
        self.n = 0
        self.recorded_s = 0.0

    def close(self) -> None:
        """Hand this cache back to the model's idle ones (once)."""
        if not self.closed:
            self.closed = True
            self.plan.idle.append(self)

    @torch.inference_mode()
    def _set_length(self, n: int) -> None:
        for layer in self.static.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(n)  # the next pass writes from position n

    def _forward(self, x: torch.Tensor, keep: int | None) -> torch.Tensor:
        kw = {"logits_to_keep": keep} if keep is not None and self._can_trim_logits else {}
        if self.static.layers[0].is_initialized:  # after the first pass: the mask is made on the device
            kw["attention_mask"] = self._mask(x.shape[1])
        out = self.model(input_ids=x, past_key_values=self.static, use_cache=True, **kw)
        return out.logits[0]  # (keep or T, V)

    def _mask(self, T: int) -> torch.Tensor:
        """The causal mask of a T-token pass, from the cache's length on the device (no host sync, so a graph
        can record it): new token i sees positions up to length + i; stale entries past them stay hidden."""
        start = self.static.layers[0].cumulative_length  # () on the device: where this pass writes
        q = start + torch.arange(T, device=self.device)  # (T,) positions of the new tokens
        kv = torch.arange(self.plan.max_len, device=self.device)  # (L,)
        dtype = self.model.get_input_embeddings().weight.dtype  # the attention scores' dtype
        zero = torch.zeros((), dtype=dtype, device=self.device)
        low = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        return torch.where(kv[None, :] <= q[:, None], zero, low)[None, None]  # (1, 1, T, L) additive

    @torch.inference_mode()
    def feed(self, ids: list[int], keep: int | None = None) -> torch.Tensor:
        T = len(ids)
        if not self.spilled and self.n + T > self.plan.max_len:
            self._spill()
        if self.spilled:
            return super().feed(ids, keep)
        logits = self.runner.run(lambda: self._pass(ids, keep))  # on the device's own thread
        self.n += T
        return logits if keep is None else logits[-keep:]

    def _pass(self, ids: list[int], keep: int | None) -> torch.Tensor:
        T = len(ids)
        graph = self._graph(T, keep) if self._replayable(T) else None
        if graph is None:
            x = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
            return self._forward(x, keep)
        g, x, out = graph
        x.copy_(torch.tensor([ids], dtype=torch.long))  # (1, T) into the graph's input
        g.replay()
        return out.clone()  # the next replay overwrites out

    def _spill(self) -> None:
        """Go on in a DynamicCache holding what the static one holds: a run longer than max_len."""
        dyn = DynamicCache(config=self.model.config)
        if self.n:
            for layer, held in zip(dyn.layers, self.static.layers):
                layer.update(held.keys[:, :, :self.n].clone(), held.values[:, :, :self.n].clone())  # (B, H, n, D)
        self.cache, self.spilled = dyn, True

    def _replayable(self, T: int) -> bool:
        # the first pass (the prompt) runs eagerly and allocates the cache; graphs need its fixed addresses
        return self.plan.graphs and self.n > 0 and T <= GRAPH_MAX_TOKENS and self.static.layers[0].is_initialized

    def _graph(self, T: int, keep: int | None):
        """The CUDA graph of a T-token pass on this cache, recorded on first use; None if recording failed."""
        key = (T, keep)
        if key in self.graphs:
            return self.graphs[key]
        n, x = self.n, torch.zeros((1, T), dtype=torch.long, device=self.device)  # (1, T)
        t0 = time.perf_counter()
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
                self._forward(x, keep)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._set_length(n)
            g = torch.cuda.CUDAGraph()
            # thread_local: other sessions' threads may allocate or launch on the GPU meanwhile
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                out = self._forward(x, keep)  # recorded, not run
            self.graphs[key] = (g, x, out)
        except Exception as e:  # an op that cannot be recorded: passes of this size run eagerly
            self.graph_error = f"{type(e).__name__}: {e}"
            self.graphs[key] = None
        finally:
            with contextlib.suppress(Exception):
                sync(self.device)  # the warm-up's work is part of recording
            self.recorded_s += time.perf_counter() - t0
            self._set_length(n)  # neither the warm-up nor the recording moved the cache
        return self.graphs[key]

    def rollback(self, n: int) -> None:
        if self.spilled:
            super().rollback(n)
        elif n < self.n:
            self._set_length(n)
            self.n = n

    def feed_masked(self, *args, **kwargs):
        raise NotImplementedError("token trees use CachedLM")

    def compact(self, keep: list[int]) -> None:
        raise NotImplementedError("token trees use CachedLM")
