"""The one store of loaded pairs: leases, loader threads, the memory budget.

Every session, page, pair and precision loads through one budgeted store per server
(specviz.modeling.memory.ModelStore), made on first use, which unloads the least recently used pair to make
room. A load, and a copy of a draft in another precision, runs in its slot's own thread, so it outlives the
script run that started it; whoever asks for it meanwhile waits by polling (Slot.wait), holding no lock.

Public API:
    lease_pair(name, dtype, draft_precision=None, target_precision=None, show=None)
                                        -> (Pair, lease): the store never unloads it while the lease is held;
                                           show(Loading) is called while a load or a copy is waited for
    load_pair_cached(...)               -> Pair, the same, its lease released at once
    pair_ready(name, dtype, ...)        whether lease_pair gives this choice's pair without loading it
    fitting_default(name), fits_nowhere(name)
                                        the first choice that fits the budget, or why none does
    memory_note(name, dtype, precision, target_precision)
                                        -> MemoryNote: what the choice needs, and what each choice needs
    DTYPE_CHOICES, default_dtype_name(), dtype_choices(device), target_choices(dtype)
                                        the choices a page offers
    store(), slot(name, dtype, target_precision), clear(), LOAD_CALLS
                                        the store; a loaded pair's slot; forget every pair; loads so far
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from specviz.core.errors import SpecvizError
from specviz.core.settings import DecodeSettings
from specviz.teaching import explain

DTYPE_CHOICES = ["float32", "bfloat16"]

# how many times a pair's loader body actually ran (a draft's copy is no load; tests assert on this)
LOAD_CALLS = 0
_load_lock = threading.Lock()


@dataclass(frozen=True)
class Loading:
    """What a wait shows: which load (title), its stage, the fraction done (0..1), seconds since it started."""

    title: str
    stage: str
    frac: float
    seconds: float


Show = Callable[[Loading], None]


# --- the choices a page offers ------------------------------------------------------------------------------------
def default_dtype_name() -> str:
    """models.DEFAULT_DTYPE by name, where it is one of DTYPE_CHOICES (else float32)."""
    from specviz.decoding import models

    name = str(models.DEFAULT_DTYPE).replace("torch.", "")
    return name if name in DTYPE_CHOICES else "float32"


def dtype_choices(device: str) -> list[str]:
    """The model dtypes offered on `device`: float32 / bfloat16; on mps (Apple's GPU) those it runs
    (quant.dtypes: float32, float16, and bfloat16 from macOS 14)."""
    from specviz.modeling import quant

    return list(quant.dtypes(device)) if device.startswith("mps") else DTYPE_CHOICES


def target_choices(dtype: str) -> list[str]:
    """The target precisions a load in `dtype` offers here: float32, and int8 where it runs (a CPU with fbgemm)
    and the target loads in float32 (models.check_target_precision)."""
    from specviz.decoding import models
    from specviz.modeling import quant

    device = models.default_device()
    out = []
    for p in quant.TARGET_PRECISIONS:
        try:
            out.append(models.check_target_precision(p, dtype, device))
        except SpecvizError:
            pass
    return out


# --- one pair's slot: the pair, and the thread making it ----------------------------------------------------------
class Slot:
    """Holds one pair and the thread loading (or copying) it, so the work outlives the script run that started it.

    A rerun (any click) stops a script run; the first-time conversion (minutes) goes on in the loader thread,
    and the next run shows its progress again instead of starting over. `lock` guards only the check-and-start
    (never model work): waiting is polling the thread.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pair = None  # the pair as loaded (in dtype: the source of the draft precisions copied from it)
        self.loader: threading.Thread | None = None
        self.error: BaseException | None = None
        self.stage, self.frac, self.t0 = "waiting for the models", 0.0, 0.0

    def unload(self) -> None:
        """The store let this pair go to make room: drop it (the store collects the garbage)."""
        self.pair = None

    def progress(self, stage: str, frac: float | None) -> None:
        self.stage, self.frac = stage, 0.0 if frac is None else max(0.0, min(1.0, float(frac)))

    def busy(self) -> bool:
        """Whether a loader thread is running."""
        return self.loader is not None and self.loader.is_alive()

    def start(self, load: Callable[[Callable], Any], hold=None) -> None:
        """Start `load(progress)` in a thread unless one is running or the pair is there; the thread releases
        `hold` (leases on what the load needs) when it ends, so the load is never unloaded half done."""
        with self.lock:
            if self.pair is not None or self.busy():
                if hold is not None:
                    hold.release()
                return
            self.error, self.t0 = None, time.perf_counter()
            self.stage, self.frac = "waiting for the models", 0.0

            def run() -> None:
                try:
                    self.pair = load(self.progress)
                except BaseException as e:  # noqa: BLE001 — handed to the session that waits for it
                    self.error = e
                finally:
                    if hold is not None:
                        hold.release()

            self.loader = threading.Thread(target=run, name="specviz-load", daemon=True)
            self.loader.start()

    def wait(self, show: Callable[[str, float], None], poll_s: float = 0.2, timeout_s: float | None = None):
        """Call show(stage, frac) every poll_s until the pair is made; the load's error is raised here, once.
        timeout_s: raise TimeoutError when the work runs longer (the work goes on)."""
        end = None if timeout_s is None else time.perf_counter() + timeout_s
        loader = self.loader
        while loader is not None and loader.is_alive():
            show(self.stage, self.frac)
            if end is not None and time.perf_counter() >= end:
                raise TimeoutError(f"still {self.stage} after {timeout_s:g} s")
            loader.join(poll_s)
        if self.pair is None:
            err, self.error = self.error, None  # the next request starts a new load
            raise err if err is not None else RuntimeError("the model load ended without a pair")
        return self.pair

    def seconds(self) -> float:
        """Seconds since the slot's load started."""
        return time.perf_counter() - self.t0


class _Holds:
    """Several leases released as one (a loader thread's hold on its pair and on the pair it copies)."""

    def __init__(self, *leases) -> None:
        self.leases = leases

    def release(self) -> None:
        for lease in self.leases:
            lease.release()


# --- the store --------------------------------------------------------------------------------------------------
_STORE = None
_STORE_LOCK = threading.Lock()
_LOADED: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()  # a store key (_key) -> Pair


def store():
    """The server's one store of loaded models (specviz.modeling.memory.ModelStore), within the memory budget,
    made on first use: every session, page, pair and precision loads through it, so the budget holds for the
    server's life."""
    global _STORE
    with _STORE_LOCK:
        if _STORE is None:
            from specviz.decoding import models
            from specviz.modeling import memory

            device = models.default_device()
            _STORE = memory.ModelStore(lambda held: memory.read_budget(held, device=device), explain.over_budget)
        return _STORE


def slot(name: str, dtype: str, target_precision: str = "float32") -> Slot | None:
    """The slot of the pair loaded in dtype (its draft in dtype too), None if none."""
    return store().peek(_key(name, dtype, dtype, target_precision))


def clear() -> None:
    """Forget every loaded pair."""
    _LOADED.clear()
    store().clear()


def _key(name: str, dtype: str, precision: str, target_precision: str) -> tuple:
    """A pair's key in the store: (name, dtype, draft precision), and 'int8 target' after it for an int8 target."""
    return (name, dtype, precision) + (() if target_precision == "float32" else (f"{target_precision} target",))


def _spec(name: str):
    from specviz.modeling.config import as_registry

    return as_registry(None).pair(name)


def _precision(spec, dtype: str, draft_precision: str | None, device: str) -> str:
    """The draft precision a configuration really has: a draft made of the target's layers keeps its dtype."""
    from specviz.modeling import quant
    from specviz.modeling.config import DerivedSource

    precision = quant.check(draft_precision, device)
    return dtype if isinstance(spec.draft.source, DerivedSource) else precision


def _warm_up(pair, progress) -> None:
    """A speculative warm-up run (engine.warm_up, which then counts the pair's draft as warmed), so one-time
    costs (allocations, kernel choice) land in no measured run; then what is alive is frozen
    (tuning.freeze_heap), so no garbage collection walks the new models again."""
    from specviz.decoding.engine import warm_up
    from specviz.device import tuning

    progress("warming up", 1.0)
    warm_up(pair.target, list(range(1, 9)), pair.drafter(), DecodeSettings(k=2), eos_token_id=[],
            vocab=pair.shared_vocab)
    tuning.freeze_heap()


def _waited(slot_: Slot, title: str, show: Show | None):
    """The slot's pair once its thread is done, show(Loading) called meanwhile."""
    if show is None:
        return slot_.wait(lambda *_: None)
    return slot_.wait(lambda stage, frac: show(Loading(title, stage, frac, slot_.seconds())))


# --- leasing a pair ---------------------------------------------------------------------------------------------
def load_pair_cached(name: str, dtype: str, draft_precision: str | None = None,
                     target_precision: str | None = None, show: Show | None = None):
    """The pair, loaded once per server and shared by every session, within the memory budget.

    Sessions asking at the same time wait for that one load (show(Loading) meanwhile). A draft that loads
    straight in its precision (an int8 draft from its int8 copy: sizing.draft_loads_direct) is loaded so, lent
    the target of a pair loaded already; any other draft precision is a copy of the draft loaded in dtype, made
    once, sharing the target. Each target precision (float32, int8) is a pair of its own
    (models.load_pair(target_precision=...)). What was used least recently is unloaded to make room; a choice
    that does not fit is refused before anything loads.
    Raises SpecvizError (PairUnavailable, NotEnoughMemory, ...) for the caller to show.
    """
    pair, lease = lease_pair(name, dtype, draft_precision, target_precision, show)
    lease.release()
    return pair


def lease_pair(name: str, dtype: str, draft_precision: str | None = None, target_precision: str | None = None,
               show: Show | None = None, runner=None):
    """(pair, lease) as load_pair_cached gives the pair; while the lease is held (a live run holds it until it
    ends: Playback.hold), the store never unloads that pair. runner: the device as this caller reaches it, whose
    paused() lets the caller's turn to draw go while it waits (None: the device queue's)."""
    from specviz.device import devqueue
    from specviz.decoding import models
    from specviz.modeling import sizing

    device = models.default_device()
    runner = runner or devqueue.queue_runner(device)
    # a draft that loads straight in its precision (an int8 draft from its int8 copy) is loaded so; any other is
    # loaded in dtype, and its precision is a copy of that draft (_variant)
    spec, precision, tp, loaded_as, base_key = _base(name, dtype, draft_precision, target_precision)
    store_ = store()
    what = explain.config_words(name, dtype, precision, tp)
    with runner.paused():  # a load may wait on model work: not while this page holds a turn to draw
        # refused before anything loads: the pair as loaded and the draft's copy must fit at once
        store_.check(sizing.config_parts(spec, dtype, precision, device, tp), what,
                     sizing.loading_bytes(spec, dtype, precision, tp))
        slot_, base = store_.lease(base_key, sizing.pair_parts(spec, dtype, loaded_as, device, target_precision=tp),
                                   Slot, explain.config_words(name, dtype, loaded_as, tp),
                                   sizing.loading_bytes(spec, dtype, loaded_as, tp))
        try:
            pair = _load_base(name, dtype, slot_, base_key, tp, loaded_as, show)
            if precision == loaded_as:
                return pair, base
            return _variant(pair, base_key, precision, what, show)
        except BaseException:
            if slot_.pair is None and not slot_.busy():
                store_.discard(base_key)  # nothing loaded: nothing to charge
            base.release()
            raise
        finally:
            if precision != loaded_as:
                base.release()  # the variant is made: the dtype pair may go when room is needed


def _variant(base, base_key: tuple, precision: str, what: str, show: Show | None = None):
    """(the pair with its draft in `precision`, a lease on it): a copy of base's draft, made once, in the slot's
    thread (as a load); whoever asks meanwhile polls it, and no lock is held across the copy."""
    from specviz.decoding import models
    from specviz.modeling import sizing

    tp = base.target_precision
    store_ = store()
    key = _key(base.name, str(base.dtype).removeprefix("torch."), precision, tp)
    parts = sizing.pair_parts(base.spec, base.dtype, precision, base.device, target_precision=tp)
    slot_, lease = store_.lease(key, parts, Slot, what, sizing.loading_bytes(base.spec, base.dtype, precision))
    if slot_.pair is not None:
        return slot_.pair, lease

    def copy(progress):
        progress(f"copying the draft in {precision}", 0.0)
        pair = models.with_draft_precision(base, precision)
        if pair is not base:
            _warm_up(pair, progress)
        _LOADED[key] = pair  # it holds the target too: a pair with the same target may borrow it
        return pair

    try:
        # the copy's own leases: on the copy, and on the pair it copies (a rerun stops this page, not the copy)
        slot_.start(copy, _Holds(store_.lease(key, {}, Slot)[1], store_.lease(base_key, {}, Slot)[1]))
        return _waited(slot_, f"Preparing a {precision} copy of the draft", show), lease
    except BaseException:
        lease.release()
        if slot_.pair is None and not slot_.busy():
            store_.discard(key)
        raise


def _base(name: str, dtype: str, draft_precision: str | None, target_precision: str | None):
    """What lease_pair loads for a choice: (spec, the draft's precision, the target's, the precision the draft
    loads in, the base pair's store key)."""
    from specviz.decoding import models
    from specviz.modeling import sizing

    device = models.default_device()
    spec = _spec(name)
    precision = _precision(spec, dtype, draft_precision, device)
    tp = models.check_target_precision(target_precision, dtype, device)
    loaded_as = precision if sizing.draft_loads_direct(spec, dtype, precision) else dtype
    return spec, precision, tp, loaded_as, _key(name, dtype, loaded_as, tp)


def pair_ready(name: str, dtype: str, draft_precision: str | None = None,
               target_precision: str | None = None) -> bool:
    """Whether this choice's pair is loaded (lease_pair then gives it at once, or after a copy of the draft)."""
    try:
        *_, key = _base(name, dtype, draft_precision, target_precision)
    except SpecvizError:
        return False
    slot_ = store().peek(key)
    return slot_ is not None and slot_.pair is not None


def _load_base(name: str, dtype: str, slot_: Slot, key, target_precision: str = "float32",
               draft_precision: str | None = None, show: Show | None = None):
    """The pair with its draft in draft_precision (None: in dtype), loaded in the slot's thread."""
    from specviz.decoding import models

    if slot_.pair is not None:
        return slot_.pair
    draft_precision = draft_precision or dtype

    def load(progress):
        global LOAD_CALLS
        with _load_lock:
            LOAD_CALLS += 1
        # a pair loaded already with the same target lends it: a second pair costs only its draft; the store
        # has made room for this one (check=False: no second check against what is free)
        pair = models.load_pair(name, dtype=dtype, progress=progress, draft_precision=draft_precision,
                                target_precision=target_precision, loaded=list(_LOADED.values()), check=False)
        _LOADED[key] = pair
        _warm_up(pair, progress)
        return pair

    _, hold = store().lease(key, {}, Slot)  # the loader's own lease: a rerun stops this page, not the load
    slot_.start(load, hold)  # another session may have started it: then this one waits for that load
    label = dtype + ("" if draft_precision == dtype else f", {draft_precision} draft") + (
        "" if target_precision == "float32" else f", {target_precision} target")
    return _waited(slot_, f"Loading {name} ({label})", show)


# --- memory: what each choice needs, and the one that fits ------------------------------------------------------
def fitting_default(name: str | None) -> tuple[str, str, str, str | None]:
    """(dtype, draft precision, target precision, why) this session starts with: the defaults, or, when they do
    not fit the memory budget, the first choice of the pair that does (why says which and why; None when the
    defaults fit). Exact choices come first: every target precision of the wanted dtype (float32, then int8)
    before another dtype."""
    return _fitting(name)[:4]


def fits_nowhere(name: str | None) -> str | None:
    """Why no configuration of the pair fits the memory budget (explain.fitting_choice), or None when one does."""
    *_, why, nowhere = _fitting(name)
    return why if nowhere else None


def _fitting(name: str | None) -> tuple[str, str, str, str | None, bool]:
    """fitting_default's answer, and whether no configuration of the pair fits."""
    from specviz.decoding import models
    from specviz.modeling import quant, sizing

    device = models.default_device()
    dtype, precision = default_dtype_name(), quant.default_precision(device)
    if not name:
        return dtype, precision, "float32", None, False
    try:
        spec = _spec(name)
        precision = _precision(spec, dtype, precision, device)
        store_ = store()
        options = [(d, p, t) for d, ps in _by_dtype(_choices(DTYPE_CHOICES, quant.supported(device), dtype,
                                                             precision))
                   for t in target_choices(d) for p in ps]
        chosen = next((o for o in options if store_.fits(sizing.config_parts(spec, o[0], o[1], device, o[2]),
                                                         sizing.loading_bytes(spec, *o))), None)
    except SpecvizError:  # a broken registry or budget setting is said where the pair is loaded
        return dtype, precision, "float32", None, False
    if chosen == (dtype, precision, "float32"):
        return dtype, precision, "float32", None, False
    need = lambda d, p, t: store_.need(sizing.config_parts(spec, d, p, device, t),
                                       sizing.loading_bytes(spec, d, p, t))
    why = explain.fitting_choice(explain.config_words(name, dtype, precision), need(dtype, precision, "float32"),
                                 None if chosen is None else explain.config_words(name, *chosen),
                                 0 if chosen is None else need(*chosen), store_.budget())
    return (*(chosen or (dtype, precision, "float32")), why, chosen is None)


def _choices(dtypes: Iterable[str], precisions: Iterable[str], dtype: str, precision: str) -> list[tuple[str, str]]:
    """Every (dtype, draft precision), the wanted one first, then the rest of its dtype, then the other dtypes."""
    dts = [dtype, *[d for d in dtypes if d != dtype]]
    ps = [precision, *[p for p in precisions if p != precision]]
    return [(d, p) for d in dts for p in ps]


def _by_dtype(options: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """_choices' (dtype, precision) list as (dtype, its precisions in order), dtypes in order."""
    out: dict[str, list[str]] = {}
    for d, p in options:
        out.setdefault(d, []).append(p)
    return list(out.items())


@dataclass(frozen=True)
class MemoryNote:
    """What a choice needs of the memory budget (need), why it does not fit now (refused, None when it fits),
    and one markdown line per choice of the pair: what it needs, and whether it fits now."""

    need: str
    refused: str | None
    choices: tuple[str, ...]


def memory_note(name: str, dtype: str, precision: str, target_precision: str | None = None) -> MemoryNote:
    """The memory note under the pickers (with the chosen target precision where each dtype offers it).
    Raises SpecvizError for a bad budget setting or a broken registry."""
    from specviz.decoding import models
    from specviz.modeling import memory, quant, sizing

    device = models.default_device()
    spec = _spec(name)
    store_ = store()
    budget = store_.budget()
    precision = _precision(spec, dtype, precision, device)
    tp = target_precision or "float32"
    parts = sizing.config_parts(spec, dtype, precision, device, tp)
    loading = sizing.loading_bytes(spec, dtype, precision, tp)
    need = (f"Memory: this choice needs about {explain.format_bytes(store_.need(parts, loading))} "
            f"more; the budget is {explain.budget_words(budget)}, and the models loaded hold "
            f"{explain.format_bytes(store_.held())}.")
    try:
        store_.check(parts, explain.config_words(name, dtype, precision, tp), loading)
        refused = None
    except memory.OverBudget as e:
        refused = str(e)
    lines = []
    for d, p0 in _choices(DTYPE_CHOICES, quant.supported(device), DTYPE_CHOICES[0],
                          quant.default_precision(device)):
        p = _precision(spec, d, p0, device)
        t = tp if tp in target_choices(d) else "float32"
        each = sizing.config_parts(spec, d, p, device, t)
        mark = "fits" if store_.fits(each, sizing.loading_bytes(spec, d, p, t)) else "does not fit now"
        target = "" if t == "float32" else f", {t} target"
        lines.append(f"- {d}, {p} draft{target}: "
                     f"{explain.format_bytes(sizing.estimate_memory_bytes(spec, d, True, p, t))} ({mark})")
    return MemoryNote(need, refused, tuple(dict.fromkeys(lines)))  # a draft of the target's layers: one per dtype
