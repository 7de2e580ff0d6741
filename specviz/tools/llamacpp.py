"""llama.cpp beside specviz in `python -m specviz bench`: the same GGUF files, prompts and token budget.

llama.cpp is what laptop users run. Through llama-cpp-python (an optional extra, never in requirements.txt:
INSTALL) it reads the pair's GGUF files as shipped, in their own quantization, on its own CPU kernels, where
specviz dequantizes them into float32 or int8 torch weights. Two methods:

  llama-target  the target alone: one llama.cpp forward pass per token
  llama-spec    speculative decoding as llama.cpp's speculative-simple example does it: the draft drafts
                greedily, up to DRAFT_MAX tokens, and stops where its top probability falls below DRAFT_P_MIN
                (that example's defaults); the target reads the last token and the drafts in one pass and
                keeps drafts while each equals the token it picks itself at that position

Both loops are a few lines of Python around llama.cpp's decode calls, so a pass computes logits only for
the positions that need them (llama-cpp-python's own draft_model hook computes them for every position, the
prompt's included, and is slower than the target alone here). Each generation reads the whole prompt again,
as specviz's do, so end-to-end times compare. Sampling draws each of the target's tokens from its own softmax
at the temperature and keeps a draft when the two are equal: exact in distribution, with fewer drafts kept
than the min(1, p/q) rule keeps.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specviz.core.errors import PairUnavailable
from specviz.modeling.config import DerivedSource

VERSION = "0.3.36"
INSTALL = (f'CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python=={VERSION} (it builds llama.cpp from '
           "source: several minutes on 2 cores; a C++ compiler and cmake are needed)")
LLAMA_TARGET = "llama-target"
LLAMA_SPEC = "llama-spec"
METHODS = (LLAMA_TARGET, LLAMA_SPEC)
DRAFT_MAX = 16  # llama.cpp's speculative-simple example: --draft-max
DRAFT_P_MIN = 0.75  # ... and --draft-p-min: stop drafting below this top probability
COST_SIZES = (1, 2, 4, 8, 16)  # the target passes forward_costs times, in tokens


def gguf_paths(spec, progress=None) -> dict[str, Path]:
    """{"target", "draft"}: a registry pair's GGUF files (joined once from their chunk packages);
    PairUnavailable where the llama methods cannot run (missing_why)."""
    from specviz.modeling import store

    if (why := missing_why(spec)) is not None:
        raise PairUnavailable(why)
    say = progress or store.quiet
    return {"target": store.gguf_file(spec.target, say), "draft": store.gguf_file(spec.draft, say)}


def available() -> bool:
    """Whether llama-cpp-python is installed (the llama methods run only then)."""
    return importlib.util.find_spec("llama_cpp") is not None


def missing_why(spec) -> str | None:
    """Why the llama methods cannot run for this pair (a models.PairSpec, or None for a pair outside the
    registry), or None when they can."""
    if not available():
        return f"llama-cpp-python is not installed: {INSTALL}"
    if spec is None:
        return "the pair has no GGUF files (llama.cpp reads only GGUF)"
    if spec.other_tokenizer:
        return "the draft has another tokenizer (llama.cpp's speculative decoding needs the target's token ids)"
    if isinstance(spec.draft.source, DerivedSource):
        return "the draft is made from the target's own weights (llama.cpp needs a second GGUF file)"
    return None


class Model:
    """One GGUF model in llama.cpp: the tokens its KV cache holds, and forward passes over new ones. It drives
    llama-cpp-python's context and batch objects (Llama._ctx, Llama._batch) directly, as of VERSION."""

    def __init__(self, path: Path, n_ctx: int, threads: int) -> None:
        from llama_cpp import Llama

        # the whole prompt in one batch; logits_all off: a pass computes the rows that forward() asks for
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                         n_threads_batch=threads, verbose=False)
        self.vocab = self.llm.n_vocab()
        self.ids: list[int] = []
        self.passes = 0

    def rewind(self, n: int) -> None:
        """Keep the first n tokens' cache, drop the rest."""
        self.llm._ctx.kv_cache_seq_rm(-1, n, -1)
        del self.ids[n:]

    def forward(self, tokens: list[int], every: bool = False) -> np.ndarray:
        """Read `tokens` after what the cache holds: the logits at every one of them (every=True), (n, V), or
        at the last, (1, V). A view into llama.cpp's buffer, valid until the next pass."""
        batch = self.llm._batch
        batch.set_batch(batch=tokens, n_past=len(self.ids), logits_all=every)
        self.llm._ctx.decode(batch)
        self.ids += tokens
        self.passes += 1
        rows = len(tokens) if every else 1
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(rows * self.vocab,)).reshape(rows, -1)


def top(logits: np.ndarray) -> tuple[int, float]:
    """The top token of one row of logits, and its probability."""
    tok = int(np.argmax(logits))
    return tok, float(1.0 / np.exp(logits - logits[tok]).sum())


def picker(temperature: float, seed: int):
    """The target's choice from one row of logits: its top token (temperature 0), else a draw from its
    softmax at the temperature."""
    if temperature == 0:
        return lambda logits: int(np.argmax(logits))
    rng = np.random.default_rng(seed)

    def draw(logits: np.ndarray) -> int:
        z = logits.astype(np.float64) / temperature
        p = np.exp(z - z.max())
        return int(np.searchsorted(np.cumsum(p), rng.random() * p.sum()))
    return draw


@dataclass(frozen=True)
class Generation:
    """One llama.cpp generation: its tokens (up to and including the first EOS), its wall time, the target's
    forward passes (the prompt's included) and the time its draft took (0 for the target alone)."""

    tokens: list[int]
    wall_s: float
    passes: int
    draft_s: float
    proposed: int = 0  # drafts the target checked (those kept: tokens less passes, but where it stopped early)
    cpu_s: float = 0.0  # the CPU time llama.cpp's process used meanwhile (LlamaProcess)


class LlamaPair:
    """The pair's two GGUF files open in llama.cpp."""

    def __init__(self, target: Path, draft: Path, n_ctx: int, threads: int, draft_max: int = DRAFT_MAX,
                 p_min: float = DRAFT_P_MIN) -> None:
        self.paths = {"target": target, "draft": draft}
        self.target, self.draft = Model(target, n_ctx, threads), Model(draft, n_ctx, threads)
        self.draft_max, self.p_min = draft_max, p_min

    @classmethod
    def open(cls, spec, n_ctx: int, threads: int, progress=None, **drafting) -> "LlamaPair":
        """Open a registry pair's GGUF files (gguf_paths); drafting: draft_max, p_min (llama.cpp's defaults when
        left out)."""
        paths = gguf_paths(spec, progress)
        return cls(paths["target"], paths["draft"], n_ctx, threads, **drafting)

    def drafts(self, ids: list[int], most: int) -> list[int]:
        """Up to `most` greedy drafts after ids, stopping below p_min; the draft's cache keeps what it shares
        with ids and reads the rest."""
        d = self.draft
        keep = 0
        while keep < min(len(d.ids), len(ids) - 1) and d.ids[keep] == ids[keep]:
            keep += 1
        d.rewind(keep)
        logits = d.forward(ids[keep:])[-1]  # (V,)
        out: list[int] = []
        while len(out) < most:
            tok, p = top(logits)
            if p < self.p_min:
                break
            out.append(tok)
            if len(out) < most:
                logits = d.forward([tok])[-1]
        return out

    def forward_costs(self, ids: list[int], sizes=COST_SIZES, reps: int = 3) -> dict[str, dict[int, float]]:
        """Median seconds of a target pass over n tokens after the prompt, for n in sizes, and of a one-token
        draft step: where llama.cpp's time goes (c and the verify cost, as specviz's bench measures its own)."""
        out: dict[str, dict[int, float]] = {"target": {}, "draft": {}}
        for role, m, ns in (("target", self.target, sizes), ("draft", self.draft, (1,))):
            m.rewind(0)
            m.forward(ids)
            for n in ns:
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    m.forward(ids[:n], every=True)
                    times.append(time.perf_counter() - t0)
                    m.rewind(len(ids))
                out[role][n] = float(np.median(times))
        return out

    def generate(self, method: str, ids: list[int], max_new_tokens: int, eos, temperature: float,
                 seed: int) -> Generation:
        """One generation by `method` (LLAMA_TARGET or LLAMA_SPEC), the prompt read from scratch."""
        t, pick = self.target, picker(temperature, seed)
        for m in (self.target, self.draft):
            m.rewind(0)
            m.passes = 0
        t0 = time.perf_counter()
        out, drafted, proposed = (self._alone if method == LLAMA_TARGET else self._speculative)(
            ids, max_new_tokens, set(eos), pick)
        return Generation(out, time.perf_counter() - t0, t.passes, drafted, proposed)

    def _alone(self, ids, n, eos, pick) -> tuple[list[int], float, int]:
        """(tokens, seconds drafting, drafts checked): one pass per token, no draft."""
        t = self.target
        out = [pick(t.forward(ids)[-1])]
        while out[-1] not in eos and len(out) < n:
            out.append(pick(t.forward(out[-1:])[-1]))
        return out, 0.0, 0

    def _speculative(self, ids, n, eos, pick) -> tuple[list[int], float, int]:
        """(tokens, seconds drafting, drafts checked)."""
        t, drafted, proposed = self.target, 0.0, 0
        out = [pick(t.forward(ids)[-1])]
        while out[-1] not in eos and len(out) < n:
            t0 = time.perf_counter()
            guess = self.drafts(ids + out, min(self.draft_max, n - len(out)))
            drafted += time.perf_counter() - t0
            proposed += len(guess)
            rows = t.forward(out[-1:] + guess, every=True)  # (1 + len(guess), V)
            for i, g in enumerate(guess):
                tok = pick(rows[i])
                out.append(tok)
                if tok != g or tok in eos or len(out) >= n:
                    break
            else:
                out.append(pick(rows[len(guess)]))  # every draft kept: the target's next token (a bonus)
            t.rewind(len(ids) + len(out) - 1)  # the cache holds what was read, less the rejected drafts
        return out, drafted, proposed


class LlamaProcess:
    """A LlamaPair in a process of its own, asked over a pipe: llama.cpp's threads and allocations never share
    a process with torch's. In the bench's process the two slowed each other, and specviz's passes read as under
    outside load, though they never ran at once (docs/performance.md, "Against llama.cpp")."""

    def __init__(self, paths: dict[str, Path], n_ctx: int, threads: int, **drafting) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch, no threads inherited
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, paths, n_ctx, threads, drafting), daemon=True)
        self._proc.start()
        child.close()
        self._ask("ready")

    @classmethod
    def open(cls, spec, n_ctx: int, threads: int, progress=None, **drafting) -> "LlamaProcess":
        """As LlamaPair.open, in a process of its own."""
        return cls(gguf_paths(spec, progress), n_ctx, threads, **drafting)

    def _ask(self, what: str, *args):
        self._conn.send((what, args))
        ok, value = self._conn.recv()
        if not ok:
            raise PairUnavailable(f"llama.cpp: {value}")
        return value

    def generate(self, *args) -> Generation:
        """LlamaPair.generate in the other process; cpu_s is what that process used for it."""
        return self._ask("generate", *args)

    def forward_costs(self, ids: list[int], sizes=COST_SIZES, reps: int = 3) -> dict[str, dict[int, float]]:
        """LlamaPair.forward_costs in the other process."""
        return self._ask("forward_costs", ids, sizes, reps)

    def close(self) -> None:
        if self._proc.is_alive():
            self._conn.send(("stop", ()))
            self._proc.join(timeout=10)


def _serve(conn, paths: dict[str, Path], n_ctx: int, threads: int, drafting: dict) -> None:
    """The llama.cpp process: open the pair, then answer (what, args) until told to stop."""
    try:
        pair = LlamaPair(paths["target"], paths["draft"], n_ctx, threads, **drafting)
    except Exception as e:  # a file llama.cpp cannot read: said to the bench, which says it in one line
        conn.recv()
        conn.send((False, f"{type(e).__name__}: {e}"))
        return
    while True:
        what, args = conn.recv()
        if what == "stop":
            return
        try:
            c0 = time.process_time()
            if what == "generate":
                g = pair.generate(*args)
                conn.send((True, replace(g, cpu_s=time.process_time() - c0)))
            elif what == "forward_costs":
                conn.send((True, pair.forward_costs(*args)))
            else:
                conn.send((True, None))
        except Exception as e:
            conn.send((False, f"{type(e).__name__}: {e}"))
