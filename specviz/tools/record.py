"""Regenerate the shipped recordings (specviz/recorded/*.json) from a loaded pair."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from specviz.core.errors import SpecvizError
from specviz.core.prompts import encode, preset
from specviz.core.settings import DecodeSettings, is_greedy
from specviz.data import pagefile
from specviz.data.runfile import DEFAULT_RECORDINGS, RECORDED_DIR, SELF_DRAFTER, RecordSpec, export_dict
from specviz.decoding.engine import speculative_decode, warm_up
from specviz.teaching.baseline import target_alone
from specviz.teaching import costs, page_records
from specviz.teaching.explain import drafter_words, k_words


def round_floats(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return round(x, digits) if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: round_floats(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [round_floats(v, digits) for v in x]
    return x


def record_presets(pair, out_dir: Path | str = RECORDED_DIR, specs: list[RecordSpec] = DEFAULT_RECORDINGS,
                   max_new_tokens: int = DecodeSettings.max_new_tokens, baseline: bool = True,
                   progress: Callable[[str], None] = print) -> list[Path]:
    """Run each spec on a loaded Pair and write <out_dir>/<name>.json (probabilities to 6 digits).

    Regenerate the shipped files with:
      python -c "from specviz.decoding import models; from specviz.tools import record; record.record_presets(models.load_pair())"
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = pair.tokenizer
    decode = lambda t: tok.decode([int(t)])  # noqa: E731
    written = []
    for s in specs:
        p = preset(s.preset)
        ids = encode(tok, p.text, p.chat)
        settings = DecodeSettings(k=s.k, k_policy=s.k_policy, temperature=s.temperature, top_p=s.top_p,
                                  max_new_tokens=max_new_tokens, seed=s.seed)
        kw = dict(eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
        # a short warm-up so one-time costs do not land in the recorded timings
        drafter = pair.target if s.self_draft else pair.drafter()  # self: the target drafts for itself
        warm_up(pair.target, ids, drafter, settings, **kw)
        run = speculative_decode(pair.target, drafter, ids, settings, **kw)
        run.settings["drafter"] = (SELF_DRAFTER if s.self_draft else  # the replay's header
                                   drafter_words(pair.draft_precision, pair.draft_head_name))
        base = target_alone(pair.target, run, pair.shared_vocab) if baseline else None
        temp = "greedy" if is_greedy(s.temperature) else f"temperature {s.temperature:g}, seed {s.seed}"
        who = "the target drafting for itself" if s.self_draft else pair.name
        title = (f"{p.name} · {temp} · {k_words(s.k, s.k_policy)} · {who} "
                 f"({run.device}, {run.dtype}, {pair.draft_precision} draft)")
        when = page_records.about(pair)["recorded_at"]
        d = round_floats(export_dict(run, decode, p.text, pair.name, title, base, chat=p.chat, recorded_at=when))
        path = out / f"{s.name}.json"
        path.write_text(json.dumps(d, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        progress(f"{path}: {len(run.token_ids)} tokens, α={run.alpha:.2f}, {path.stat().st_size // 1024} KiB")
        written.append(path)
    return written


def target_loader(pair) -> Callable[[str], Any] | None:
    """target precision -> the pair with its target in that precision and the same draft (models.load_pair, lent
    pair's target where it is the same), for the Speedup page's section 1c; None where an int8 target does not
    run on the pair's device or the draft is made of the target's own layers."""
    from specviz.decoding import models
    from specviz.modeling.config import DerivedSource

    try:
        models.check_target_precision("int8", "float32", str(pair.device))
    except SpecvizError:
        return None
    if isinstance(pair.spec.draft.source, DerivedSource):
        return None
    return lambda tp: models.load_pair(pair.name, dtype="float32", device=str(pair.device),
                                       draft_precision=pair.draft_precision, target_precision=tp, loaded=[pair])


def draft_loader(pair) -> Callable[[str], Any] | None:
    """draft precision -> the pair with its draft in that precision and the same target (models.load_pair, lent
    the pair's target), for the Speedup page's section 1b; None where the draft is made of the target's layers."""
    from specviz.decoding import models
    from specviz.modeling.config import DerivedSource

    if isinstance(pair.spec.draft.source, DerivedSource):
        return None
    return lambda dp: models.load_pair(pair.name, dtype=str(pair.dtype).replace("torch.", ""), device=str(pair.device),
                                       draft_precision=dp, target_precision=pair.target_precision, loaded=[pair])


def target_model_loader(pair) -> Callable[[str], Any]:
    """name -> the pair's target in another form, for the Why it is fast page's comparison: "bfloat16" (the pair
    as the app loads it in bfloat16) or "int8 target" (target_loader's); None where the pair cannot have it."""
    import torch

    from specviz.decoding import models

    to_int8 = target_loader(pair)

    def load(name: str):
        if name == "bfloat16" and pair.dtype == torch.float32:
            return models.load_pair(pair.name, dtype="bfloat16", device=str(pair.device),
                                    draft_precision="bfloat16").target
        if name == "int8 target" and to_int8 is not None:
            return to_int8("int8").target
        return None

    return load


def loaders_of(pair) -> page_records.Loaders:
    """What the recordings that compare precisions load beside pair."""
    return page_records.Loaders(target_loader(pair), draft_loader(pair), target_model_loader(pair))


def record_pages(pair, out_dir: Path | str | None = None, pages=None, progress: Callable[[str], None] = print,
                 cost=None, loaders: page_records.Loaders | None = None) -> list[Path]:
    """Run each learning page's default experiment on a loaded Pair and write <out_dir>/<page>.json (default
    specviz/recorded/pages/; pages: names in page_records.RECORDERS, default all). cost: the recorded set's
    profile, quoted by the pages that time c and passes; loaders: what the pages that compare precisions load
    beside the pair (default loaders_of(pair); page_records.Loaders() records none of those comparisons).

    Regenerate the shipped files with `python -m specviz record` (record_all).
    """
    tok = pair.tokenizer
    decode = lambda t: tok.decode([int(t)])  # noqa: E731
    loaders = loaders_of(pair) if loaders is None else loaders
    written = []
    for page in pages or list(page_records.RECORDERS):
        rec = page_records.record_page(pair, page, decode, cost=cost, loaders=loaders)
        rec = pagefile.PageRecording(**{**rec.__dict__, "results": round_floats(rec.results)})
        path = pagefile.save(rec, out_dir)
        progress(f"{path}: {page}, {', '.join(rec.results)}, {path.stat().st_size // 1024} KiB")
        written.append(path)
    return written


def record_profile(pair, path: Path | str | None = None, progress: Callable[[str], None] = print,
                   refuse_load: bool = True):
    """Time the recorded set's profile on a loaded Pair (costs.measure_cost at both contexts, with the pair's
    identity, and as many repetitions as the Why it is fast page's) and write it (default
    specviz/recorded/profile.json). A profile timed under outside load is refused (refuse_load): record on a
    quiet machine."""
    reps = page_records.WHY_FAST["repetitions"]
    cost = costs.measure_cost(pair.target, pair.chain_draft(), pass_reps=reps, long_context=costs.LONG_CONTEXT)
    if refuse_load and cost.load is not None:
        raise SpecvizError(f"The profile ran under outside load ({cost.load.what}): record on a quiet machine.")
    cost = replace(cost, ident=costs.identity(pair))
    out = costs.save_profile(cost, costs.RECORDED_PROFILE if path is None else Path(path))
    progress(f"{out}: c = {cost.c:.3f}, 1-token pass {1000 * cost.pass_s(1):.0f} ms")
    return cost


def record_all(pair, progress: Callable[[str], None] = print) -> list[Path]:
    """The whole recorded set in one sitting, with one profile: the profile first, then every main-page
    recording and every page recording, which quote the profile's c and pass costs instead of timing their own.

    Regenerate the shipped files with (on a quiet machine):
      python -c "from specviz.decoding import models; from specviz.tools import record; record.record_all(models.load_pair())"
    """
    cost = record_profile(pair, progress=progress)
    return record_presets(pair, progress=progress) + record_pages(pair, progress=progress, cost=cost)
