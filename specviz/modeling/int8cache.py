"""A GGUF model cached in int8, written a block of rows at a time, and loaded with no float32 weights made.

write(gguf, out) reads one tensor of the GGUF at a time (the gguf package's reader maps the file), dequantizes
a block of its rows, renames it to transformers' name (transformers' own GGUF name map, and its tensor
processor: llama's q and k rows are un-permuted as transformers does; qwen2 has none), quantizes a linear's
rows as quant.Int8Linear does (quant.int8_weight) and appends them to one safetensors file. What it holds at
once is one block of float rows and its int8 copy, not the model. The file holds, for each linear NAME:
NAME.weight (int8), NAME.weight_scale (float64, one per row), NAME.weight_row_sums (float32) and NAME.bias;
an embedding as the GGUF's own blocks (uint8 rows of its GGUF type, named with its shape in the file's
metadata: a Q4_K embedding takes 4.5 bits a weight, not 32); every other tensor (norms, biases) in float32, as
the float32 path keeps them. A head tied to the embedding is quantized from the embedding, as apply_target does.

load(folder, target=...) builds the model's skeleton with its parameters on the meta device, puts an int8
linear in place of each nn.Linear (quant.ExactInt8Linear for a target, quant.Int8Linear for a draft) and
reads the float tensors; an embedding becomes a GGUFEmbedding, which keeps the GGUF's blocks and dequantizes
only the rows a call looks up (gguf-py's dequantize, as the float32 path does: the same float32 rows). Its
logits are bit-identical to a float32 load put into int8 by apply_target (or, for a draft, quant.apply).

Public API: write, load, GGUFEmbedding, SUPPORTED, WEIGHTS.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

import numpy as np
import torch
from torch import nn

from specviz.core.errors import PairUnavailable
from specviz.modeling import memory, quant

SUPPORTED = ("qwen2", "llama")  # GGUF architectures whose tensors map one to one onto transformers' names
WEIGHTS = "model.safetensors"
BLOCK_BYTES = 8 << 20  # float32 bytes of one block of rows dequantized at once
_DTYPES = {torch.int8: "I8", torch.uint8: "U8", torch.float32: "F32", torch.float64: "F64"}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}

Progress = Callable[[str, "float | None"], None]


def _quiet(stage: str, fraction: float | None = None) -> None:
    pass


def _skeleton(config) -> nn.Module:
    """The causal LM of `config` with its parameters on the meta device (its buffers, such as rotary
    frequencies, made as usual)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval().requires_grad_(False)


def _linears(model: nn.Module) -> dict[str, nn.Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


def _embeddings(model: nn.Module) -> dict[str, nn.Embedding]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Embedding)}


# -----------------------------------------------------------------------------
# the embedding in the GGUF's own blocks


class GGUFEmbedding(nn.Module):
    """nn.Embedding's lookup over a table kept in a GGUF type's blocks (`raw`: one row of blocks per token, as
    uint8): a call dequantizes only the rows it looks up, with gguf-py's dequantize, into the float32 values
    the whole table dequantized would hold there.

    `weight` is a meta tensor of the table's shape and dtype (float32), for what reads only those
    (get_input_embeddings().weight.shape, .dtype); full_weight() dequantizes the whole table."""

    def __init__(self, raw: torch.Tensor, qtype: str, shape: tuple[int, int]) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(shape[0]), int(shape[1])
        self.qtype = qtype
        self.padding_idx = None
        self.register_buffer("raw", raw, persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        return torch.empty((self.num_embeddings, self.embedding_dim), dtype=torch.float32, device="meta")

    @property
    def nbytes(self) -> int:
        """Bytes the table holds (its blocks)."""
        return self.raw.numel()

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        from gguf import GGMLQuantizationType, dequantize

        raw = self.raw[ids.cpu()].numpy()  # (n, bytes of a row): indexing copies just these rows
        return torch.from_numpy(_writable(dequantize(raw, GGMLQuantizationType[self.qtype])))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # each distinct id is dequantized once (a prompt repeats tokens), then spread to its positions
        uniq, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        rows = self._rows(uniq).to(self.raw.device)
        return rows[inverse].reshape(*ids.shape, self.embedding_dim)

    def full_weight(self) -> torch.Tensor:
        """The whole table in float32 (num_embeddings x embedding_dim float32 bytes: only where the matrix is
        truly needed)."""
        return self._rows(torch.arange(self.num_embeddings)).to(self.raw.device)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.qtype}"


# -----------------------------------------------------------------------------
# write


class _Plan:
    """What the file will hold, in order: (name, dtype, shape) of every entry; header() is the safetensors header."""

    def __init__(self):
        self.entries: list[tuple[str, torch.dtype, tuple[int, ...]]] = []
        self.metadata: dict[str, str] = {"format": "pt"}

    def add(self, name: str, dtype: torch.dtype, shape) -> None:
        self.entries.append((name, dtype, tuple(int(s) for s in shape)))

    def header(self) -> bytes:
        table, at = {}, 0
        for name, dtype, shape in self.entries:
            n = int(np.prod(shape, dtype=np.int64)) * torch.tensor([], dtype=dtype).element_size()
            table[name] = {"dtype": _DTYPES[dtype], "shape": list(shape), "data_offsets": [at, at + n]}
            at += n
        table["__metadata__"] = self.metadata
        raw = json.dumps(table, separators=(",", ":")).encode()
        return raw + b" " * (-len(raw) % 8)  # the data starts 8-byte aligned


def _blocks(tensor, cols: int, processor, whole: bool) -> Iterator[np.ndarray]:
    """The dequantized float32 rows of one GGUF tensor of `cols` columns, about BLOCK_BYTES at a time (the
    whole tensor when `whole`: the processor reorders its rows)."""
    from gguf import dequantize

    data = tensor.data
    if whole or data.ndim < 2:
        w = dequantize(data, tensor.tensor_type)
        yield _writable(processor.process(weights=w, name=tensor.name).weights)
        return
    step = max(1, BLOCK_BYTES // (4 * cols))
    for start in range(0, data.shape[0], step):
        yield _writable(dequantize(data[start:start + step], tensor.tensor_type))


def _writable(a: np.ndarray) -> np.ndarray:
    """float32 rows torch can own: a float32 tensor's rows are a view of the read-only mapped file."""
    a = np.asarray(a, dtype=np.float32)
    return a if a.flags.writeable else a.copy()


def _bytes(t: torch.Tensor) -> memoryview:
    return memoryview(t.contiguous().numpy()).cast("B")


def _raw(tensor, rows: int) -> np.ndarray:
    """The GGUF tensor's bytes as `rows` rows of uint8 (a view of the mapped file): one row's blocks each."""
    return np.asarray(tensor.data).reshape(-1).view(np.uint8).reshape(rows, -1)


def _kind(name: str, linears, embeddings) -> str:
    """How the cache holds the HF tensor `name`: 'linear' (int8 rows, scales, sums), 'raw' (an embedding's GGUF
    blocks) or 'float' (float32)."""
    owner, _, attr = name.rpartition(".")
    if attr != "weight":
        return "float"
    return "linear" if owner in linears else "raw" if owner in embeddings else "float"


def _plan(reader, to_hf: dict, linears, embeddings, shapes: dict, gguf: Path) -> tuple["_Plan", list]:
    """Every entry of the cache before any data, so the header can go first and each block be written as it is
    made: (the plan, [(GGUF tensor, the HF names it fills)])."""
    plan, jobs, written = _Plan(), [], set()
    in_gguf = {x.name for x in reader.tensors}
    for t in reader.tensors:
        hf = to_hf.get(t.name)
        if hf is None:
            continue
        targets = [hf]
        if hf == "model.embed_tokens.weight" and "lm_head" in linears and "output.weight" not in in_gguf:
            targets.append("lm_head.weight")  # a head tied to the embedding: quantized from it
        for name in targets:
            kind = _kind(name, linears, embeddings)
            if kind == "linear":
                plan.add(name, torch.int8, shapes[name])
                plan.add(name + "_scale", torch.float64, shapes[name][:1])
                plan.add(name + "_row_sums", torch.float32, shapes[name][:1])
            elif kind == "raw":  # the GGUF's blocks, and what they are
                plan.add(name, torch.uint8, _raw(t, shapes[name][0]).shape)
                plan.metadata[name] = json.dumps({"gguf_type": t.tensor_type.name, "shape": list(shapes[name])})
            else:
                plan.add(name, torch.float32, shapes[name])
            written.add(name)
        jobs.append((t, targets))
    missing = sorted(set(shapes) - written)
    if missing:
        raise PairUnavailable(f"{gguf.name}: the GGUF has no tensor for {missing[0]} (and {len(missing) - 1} more)")
    return plan, jobs


def _write_entry(f, t, name: str, shape, kind: str, processor, reorder: bool) -> None:
    """One entry from one pass over the GGUF tensor t, a block of rows at a time. kind: 'linear' (its int8
    rows, then its per-row scales and sums), 'raw' (the GGUF's bytes as they are) or 'float' (float32)."""
    if kind == "raw":
        raw = _raw(t, shape[0])
        step = max(1, BLOCK_BYTES // raw.shape[1])
        for start in range(0, raw.shape[0], step):
            f.write(memoryview(np.ascontiguousarray(raw[start:start + step])).cast("B"))
        return
    is_linear = kind == "linear"
    parts: list[list[torch.Tensor]] = [[], []]
    cols = int(np.prod(shape[1:], dtype=np.int64))
    for block in _blocks(t, cols, processor, reorder):
        w = torch.from_numpy(block).reshape(-1, *shape[1:])
        if is_linear:
            q, scale, sums = quant.int8_weight(w)
            f.write(_bytes(q))
            parts[0].append(scale)
            parts[1].append(sums)
        else:
            f.write(_bytes(w))
        del w, block
        memory.trim()  # glibc keeps freed blocks in its heap: without this it grows block by block
    if is_linear:  # the small per-row tensors follow the int8 rows
        f.write(_bytes(torch.cat(parts[0])))
        f.write(_bytes(torch.cat(parts[1])))


def write(gguf: Path, out: Path, progress: Progress = _quiet, stage: str = "converting") -> None:
    """Write the int8 cache of `gguf` into the folder `out`: config, tokenizer and WEIGHTS (see the module)."""
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
        read_field,
    )

    gguf, out = Path(gguf), Path(out)
    reader = GGUFReader(str(gguf))
    arch = read_field(reader, "general.architecture")[0]
    if arch not in SUPPORTED:
        raise PairUnavailable(f"an int8 cache is made for GGUF architectures {', '.join(SUPPORTED)}, not {arch}; "
                              f"load it in float32.")
    parsed = load_gguf_checkpoint(str(gguf), return_tensors=False)["config"]
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=parsed)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.dtype = torch.float32
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = _skeleton(config)
    linears, embeddings = _linears(model), _embeddings(model)
    shapes = {n: p.shape for n, p in model.named_parameters(remove_duplicate=False)}
    plan, jobs = _plan(reader, get_gguf_hf_weights_map(model, processor), linears, embeddings, shapes, gguf)

    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    tok.save_pretrained(out)
    del tok, parsed  # the vocabulary's Python objects are not needed while the tensors are written
    header = plan.header()
    whole = arch == "llama"  # llama's q and k rows are un-permuted over the whole tensor
    with open(out / WEIGHTS, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for i, (t, targets) in enumerate(jobs):
            # one pass over the GGUF tensor per entry it fills (the embedding twice for a tied head)
            for name in targets:
                reorder = whole and (".attn_q." in t.name or ".attn_k." in t.name)
                _write_entry(f, t, name, shapes[name], _kind(name, linears, embeddings), processor, reorder)
            progress(stage, (i + 1) / len(jobs))
        f.flush()
    del model


# -----------------------------------------------------------------------------
# load


class _Reader:
    """The cache file read one tensor at a time with plain reads into a tensor of its own, not mapped.

    A mapped file's pages stay in the resident set until it closes, beside the int8 modules made from them:
    the model counted twice at the load's peak. Read, the file passes through the page cache only, which the
    kernel reclaims."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "rb")  # noqa: SIM115 - closed by __exit__
        try:
            n = int.from_bytes(self._f.read(8), "little")
            self._table = json.loads(self._f.read(n))
        except (ValueError, UnicodeDecodeError) as e:
            self._f.close()
            raise PairUnavailable(f"{path}: not a safetensors file ({e})") from None
        self._meta = self._table.pop("__metadata__", None) or {}
        self._base = 8 + n

    def keys(self):
        return self._table.keys()

    def metadata(self) -> dict:
        return self._meta

    def get_tensor(self, name: str) -> torch.Tensor:
        h = self._table[name]
        start, end = h["data_offsets"]
        t = torch.empty(h["shape"], dtype=_TORCH_DTYPES[h["dtype"]])
        if end > start:
            self._f.seek(self._base + start)
            if self._f.readinto(memoryview(t.view(-1).numpy()).cast("B")) != end - start:
                raise PairUnavailable(f"{self.path}: tensor {name} is cut short")
        return t

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def load(folder: Path, target: bool, engine: str | None = None) -> nn.Module:
    """The model in `folder` (written by write) with int8 linears: quant.ExactInt8Linear for a target (and
    row-by-row attention), quant.Int8Linear packed for `engine` (None: quant.int8_engine()) for a draft."""
    from transformers import AutoConfig, GenerationConfig

    folder = Path(folder)
    model = _skeleton(AutoConfig.from_pretrained(folder))
    engine = engine or quant.int8_engine()
    cls = quant.ExactInt8Linear if target else quant.Int8Linear
    with _Reader(folder / WEIGHTS) as f:
        names, meta = set(f.keys()), f.metadata()
        for name in _embeddings(model):  # the GGUF's blocks in place of the float32 table
            if name + ".weight" in meta:
                about = json.loads(meta[name + ".weight"])
                parent, _, attr = name.rpartition(".")
                emb = GGUFEmbedding(f.get_tensor(name + ".weight"), about["gguf_type"], tuple(about["shape"]))
                setattr(model.get_submodule(parent) if parent else model, attr, emb)
        for name, lin in _linears(model).items():
            parent, _, attr = name.rpartition(".")
            bias = f.get_tensor(name + ".bias") if lin.bias is not None else None
            layer = cls.from_int8(f.get_tensor(name + ".weight"), f.get_tensor(name + ".weight_scale"),
                                  f.get_tensor(name + ".weight_row_sums"), bias, engine)
            setattr(model.get_submodule(parent) if parent else model, attr, layer)
            del layer
            memory.trim()  # the int8 rows read and the quantized copy, freed once packed, go back to the system
        for name, p in list(model.named_parameters()):
            if name not in names:
                raise PairUnavailable(f"{folder}: {WEIGHTS} has no tensor {name}")
            owner, _, attr = name.rpartition(".")
            module = model.get_submodule(owner)
            module._parameters[attr] = nn.Parameter(f.get_tensor(name), requires_grad=False)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return quant.mark_int8(model, target=target, engine=engine)
