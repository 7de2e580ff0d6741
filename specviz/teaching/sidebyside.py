"""One run for each offline pair on the same prompt, side by side.

An offline pair needs nothing from the model hub: its models ship as PyPI
packages (chunks, or one GGUF file), are made from the target itself (self,
early exit), or are tiny random test models. Each pair runs once next to its own warmed run of
the target alone (experiments.compare_with_baseline), and gives:

  α                Run.alpha of the speculative run
  c                measure.c_from_runs: a draft step over a one-token target pass, in that run
  tokens per pass  Run.tokens_per_pass
  speedup          measure.steady_speedup: over the rounds after the first

Pairs whose draft is made from the target share one load of that target:
load_plan says which pair to load for each, and draft_for builds the draft.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence


from specviz.modeling.config import ChunkSource, DerivedSource, PackagedSource, PairSpec, Registry, TinySource, default_registry
from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings
from specviz.teaching.explain import target_alone

Progress = Callable[[str, float | None], None] | None
OFFLINE_SOURCES = (ChunkSource, PackagedSource, DerivedSource, TinySource)  # nothing to download from the hub


def is_offline(spec: PairSpec) -> bool:
    """Both models install from PyPI or are made on the spot (the target's own layers, tiny test models)."""
    return all(isinstance(m.source, OFFLINE_SOURCES) for m in (spec.draft, spec.target))


def offline_pairs(registry: Registry | None = None) -> list[str]:
    """Names of the registry's offline pairs, the default pair first."""
    reg = registry or default_registry()
    names = [reg.default_pair] + [n for n in reg.pairs if n != reg.default_pair]
    return [n for n in names if is_offline(reg.pairs[n])]


def is_derived(spec: PairSpec) -> bool:
    return isinstance(spec.draft.source, DerivedSource)


def load_plan(names: Sequence[str], registry: Registry | None = None, prefer: str | None = None) -> dict[str, str]:
    """pair -> the pair to load for it.

    A pair whose draft is made from its target reuses the load of a pair with a
    model draft and the same target (`prefer` first, if it is one), so the target
    is loaded once; every other pair loads itself.
    """
    reg = registry or default_registry()
    specs = {n: reg.pair(n) for n in names}
    hosts = [n for n in ([prefer] if prefer in specs else []) + list(specs) if not is_derived(specs[n])]
    plan = {}
    for n, spec in specs.items():
        host = next((h for h in hosts if specs[h].target.name == spec.target.name), n) if is_derived(spec) else n
        plan[n] = host
    return plan


def draft_desc(spec: PairSpec, precision: str) -> str:
    """A short name for a pair's draft: the target itself, its first L layers, or a model in a precision."""
    src = spec.draft.source
    if isinstance(src, DerivedSource):
        return "the target itself" if src.layers is None else f"the target's first {src.layers} layers"
    other = ", another tokenizer, through text" if spec.other_tokenizer else ""
    return f"{spec.draft.label.split(' (')[0]}, {precision}{other}"


def draft_for(spec: PairSpec, loaded) -> Any:
    """What drafts for `spec`, from `loaded`: a loaded pair with the same target (Pair.drafter() when it is
    `spec` itself: the draft model, or a drafter through text for a draft with another tokenizer)."""
    if loaded.spec.target.name != spec.target.name:
        raise InvalidSetting(f"pair '{spec.name}' needs the target {spec.target.name}, "
                             f"not {loaded.spec.target.name}")
    if not is_derived(spec):
        return loaded.drafter()
    from specviz.decoding.selfdraft import derive

    return derive(spec.draft.source, loaded.target)


# -----------------------------------------------------------------------------
# the runs

@dataclass
class Contender:
    """One pair ready to run: models, the prompt in its tokenizer, and how to label it."""

    name: str  # what the table shows
    draft_desc: str  # what the draft is
    target: Any
    draft: Any
    input_ids: list[int]
    vocab: int | None
    eos_token_id: list[int]


@dataclass(frozen=True)
class PairResult:
    name: str
    draft_desc: str
    alpha: float
    c: float
    tokens_per_pass: float
    speedup: float  # measured, over the rounds after the first
    end_to_end: float  # Comparison.speedup: reading the prompt included
    identical: bool | None  # greedy: the same text as the target alone
    new_tokens: int


def compare_pairs(contenders: Sequence[Contender], settings: DecodeSettings = DecodeSettings(), *,
                  progress: Progress = None) -> list[PairResult]:
    """Each contender once on its prompt, next to its own warmed target-alone run, in order."""
    from specviz.core import measure
    from specviz.teaching.experiments import compare_with_baseline

    if not contenders:
        raise InvalidSetting("No offline pair to compare.")
    out = []
    for i, ct in enumerate(contenders):
        if progress is not None:
            progress(f"{ct.name}: the target alone, then speculative ({i + 1}/{len(contenders)})",
                     i / len(contenders))
        cmp = compare_with_baseline(ct.target, ct.draft, ct.input_ids, settings, eos_token_id=ct.eos_token_id,
                                    vocab=ct.vocab)
        out.append(PairResult(ct.name, ct.draft_desc, cmp.spec.alpha, measure.c_from_runs([cmp.spec], [cmp.base]),
                              cmp.spec.tokens_per_pass, measure.steady_speedup(cmp.spec, cmp.base), cmp.speedup,
                              cmp.identical, len(cmp.spec.token_ids)))
    if progress is not None:
        progress("done", 1.0)
    return out


def rows(results: Sequence[PairResult]) -> list[dict]:
    def r(x: float, n: int):
        return round(x, n) if x == x else None  # nan (nothing judged) -> empty cell

    return [{"pair": p.name, "draft": p.draft_desc, "α": r(p.alpha, 3), "c": r(p.c, 3),
             "tokens / pass": r(p.tokens_per_pass, 2), f"speedup over {target_alone({})} (measured)": r(p.speedup, 2),
             "speedup (end to end)": r(p.end_to_end, 2),
             "same text as target alone": {True: "yes", False: "no", None: "sampling"}[p.identical]}
            for p in results]


