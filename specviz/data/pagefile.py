"""Page recordings: a learning page's default experiment, run once on a real pair, saved as JSON.

A page recording lets a page draw its default experiment with no model loaded. The file
(specviz/recorded/pages/<page>.json) is

    {"format": "specviz.page/1", "page": "exactness",
     "pair": ..., "device": ..., "dtype": ..., "draft_precision": ..., "recorded_at": "2025-01-31 14:02 UTC",
     "prompt_text": ..., "settings": {what the experiment ran with, by the page's own widget names},
     "tokens": {"<id>": "<text>", ...},       # every token the figures name, so no tokenizer is needed
     "results": {"<name>": <a result as plain JSON>, ...}}

Results are the experiments' own frozen dataclasses (and dicts / lists / tuples of them, Runs and TreeRuns), turned into
plain JSON by to_data and read back, typed, by from_data(type, data) from the dataclasses' type hints: a page's
recording names the type of each result it keeps (the caller passes it; this module knows no teaching type).
tools.record.record_pages(pair, out_dir) writes the files.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from specviz.core import limits
from specviz.core.errors import SpecvizError
from specviz.data import records
from specviz.data.records import Run
from specviz.data.runfile import RECORDED_DIR, table_decoder, token_ids_in
from specviz.data.tree_records import TreeRun

PAGE_FORMAT = "specviz.page/1"
PAGES_DIR = RECORDED_DIR / "pages"
# what a page recording says about where it was made (all strings, shown as they are)
ABOUT = ("pair", "device", "dtype", "draft_precision", "recorded_at")


# --------------------------------------------------------------------------
# results <-> plain JSON


def to_data(x: Any) -> Any:
    """A result as plain JSON: dataclasses as objects (a Run as its specviz.run/1 dict), tuples as lists, dict keys
    as strings (from_data turns them back into the key type)."""
    if isinstance(x, (Run, TreeRun)):
        return x.to_dict()
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_data(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {(repr(k) if isinstance(k, float) else str(k)): to_data(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_data(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return records.json_safe(x)
    raise TypeError(f"to_data: cannot write a {type(x).__name__}")


def _key(tp: Any, s: str, where: str) -> Any:
    """A dict key read back as its declared type (int, float, str, or a tuple of them: "(4, 8)")."""
    try:
        if typing.get_origin(tp) is tuple:
            parts = [x.strip() for x in s.strip("()").split(",") if x.strip()]
            kinds = typing.get_args(tp)
            return tuple(_key(kinds[0] if kinds[-1] is Ellipsis else kinds[i], x, where) for i, x in enumerate(parts))
        return tp(s) if tp in (int, float) else s
    except (ValueError, IndexError):
        raise records.malformed(where, f"the key {s[:20]!r} is not a {tp!r}") from None


def from_data(tp: Any, d: Any, where: str = "results") -> Any:
    """to_data's JSON read back as type tp (a dataclass, Run, dict[K, V], list[T], tuple[T, ...], T | None, a scalar);
    SpecvizError naming the field when it does not fit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return d
    if origin in (typing.Union, types.UnionType):
        if d is None and type(None) in args:
            return None
        return from_data(next(a for a in args if a is not type(None)), d, where)
    if tp in (Run, TreeRun):
        return tp.from_dict(d)
    if dataclasses.is_dataclass(tp):
        records.want_obj(d, where)
        hints = typing.get_type_hints(tp)
        kw = {f.name: from_data(hints[f.name], d[f.name], f"{where}.{f.name}")
              for f in dataclasses.fields(tp) if f.init and f.name in d}
        try:
            return tp(**kw)
        except TypeError as e:
            raise records.malformed(where, str(e)) from None
    if origin in (dict, Mapping) or tp is dict:
        kt, vt = args or (str, Any)
        records.want_obj(d, where)
        return {_key(kt, k, where): from_data(vt, v, f"{where}.{k}") for k, v in d.items()}
    if origin in (list, tuple) or tp in (list, tuple):
        records.want_list(d, where)
        item = args[0] if args else Any
        out = [from_data(item, v, f"{where}[{i}]") for i, v in enumerate(d)]
        return tuple(out) if (origin or tp) is tuple else out
    return _scalar(tp, d, where)


def _scalar(tp: Any, d: Any, where: str) -> Any:
    if tp is bool:
        return records.want_bool(d, where)
    if tp is int:
        if isinstance(d, bool) or not isinstance(d, int):
            raise records.malformed(where, f"expected a whole number, got {records.kind_name(d)}")
        return d
    if tp is float:
        return float(records.want_num(d, where, -float("inf"), float("inf"), inf_ok=True))
    if tp is str:
        return records.want_str(d, where)
    raise records.malformed(where, f"cannot read a {tp!r}")


def token_ids_of(x: Any) -> set[int]:
    """The token ids a result names: its Runs' tokens, its int-keyed dicts' keys, and its token_ids lists."""
    if isinstance(x, Run):
        return token_ids_in(x)
    if isinstance(x, TreeRun):
        return _tree_token_ids(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = set()
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if f.name == "token_ids" and isinstance(v, (list, tuple)):
                out.update(int(t) for t in v)
            out |= token_ids_of(v)
        return out
    if isinstance(x, Mapping):
        keys = {int(k) for k in x if isinstance(k, int) and not isinstance(k, bool)}
        return keys.union(*(token_ids_of(v) for v in x.values()))
    if isinstance(x, (list, tuple)):
        return set().union(*(token_ids_of(v) for v in x))
    return set()


def _tree_token_ids(run: TreeRun) -> set[int]:
    """Every token id a drawing of a token-tree run may name: its text, nodes, choices and top-N lists."""
    ids = set(run.prompt_ids) | set(run.token_ids)
    for r in run.rounds:
        ids.update(r.tokens, r.emitted, r.target_argmax, [r.extra_id] if r.extra_id is not None else [])
        ids.update(i for t in (*r.p_top, *r.q_top, r.residual_top) if t is not None for i in t.ids)
    return {int(i) for i in ids}


# --------------------------------------------------------------------------
# the file


@dataclass(frozen=True)
class PageRecording:
    """One page's recorded default experiment: where it was made, its settings, its results and token texts."""

    page: str
    about: dict[str, str]  # ABOUT: the pair, device, dtype, draft precision and when
    prompt_text: str
    settings: dict[str, Any]  # the widget settings it was made with, by name
    tokens: dict[int, str]
    results: dict[str, Any] = field(default_factory=dict)  # name -> plain JSON (read it with result())

    def result(self, name: str, tp: Any) -> Any:
        """The result called name, read back as tp (None if the recording has none)."""
        if self.results.get(name) is None:
            return None
        return from_data(tp, self.results[name], f"results.{name}")

    def decode(self, fallback: Callable[[int], str] | None = None) -> Callable[[int], str]:
        return table_decoder(self.tokens, fallback)


def page_dict(rec: PageRecording) -> dict:
    return {"format": PAGE_FORMAT, "page": rec.page, **rec.about, "prompt_text": rec.prompt_text,
            "settings": records.json_safe(rec.settings), "tokens": {str(i): s for i, s in sorted(rec.tokens.items())},
            "results": rec.results}


def make(page: str, about: Mapping[str, str], prompt_text: str, settings: Mapping[str, Any],
         results: Mapping[str, Any], decode: Callable[[int], str]) -> PageRecording:
    """A PageRecording of these results (dataclasses, Runs, ...): each turned into JSON, every token they name
    decoded into the table."""
    ids = set().union(*(token_ids_of(v) for v in results.values())) if results else set()
    return PageRecording(page=page, about={k: str(about.get(k, "")) for k in ABOUT}, prompt_text=prompt_text,
                         settings=dict(settings), tokens={i: decode(i) for i in sorted(ids)},
                         results={k: to_data(v) for k, v in results.items()})


def save(rec: PageRecording, out_dir: Path | str | None = None) -> Path:
    out = Path(out_dir or PAGES_DIR)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{rec.page}.json"
    path.write_text(json.dumps(page_dict(rec), ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    return path


def loads(text: str | bytes) -> PageRecording:
    """A page recording from its JSON text; SpecvizError naming the field when it is not one."""
    if len(text) > limits.max_run_file_bytes():
        raise SpecvizError("The page recording is larger than the limit of a run file.")
    d = records.parse_json(text.decode("utf-8") if isinstance(text, bytes) else text)
    if not isinstance(d, dict) or d.get("format") != PAGE_FORMAT:
        raise SpecvizError(f"This is not a specviz page recording (missing format {PAGE_FORMAT!r}).")
    records.want_obj(d, "page recording", ("page", "settings", "tokens", "results"))
    for name in ("page", "prompt_text", *ABOUT):
        records.want_str(d.get(name, ""), name, limits.max_prompt_chars())
    _check_settings(d["settings"])
    tokens = from_data(dict[int, str], d["tokens"], "tokens")
    records.want_obj(d["results"], "results")
    return PageRecording(page=d["page"], about={k: d.get(k, "") for k in ABOUT}, prompt_text=d.get("prompt_text", ""),
                         settings=d["settings"], tokens=tokens, results=d["results"])


def _check_settings(v: Any) -> None:
    """Settings by name: scalars, or lists of them (the domains, the temperatures)."""
    records.want_obj(v, "settings")
    for key, x in v.items():
        records.want_str(key, "settings (a key)", 100)
        for i, item in enumerate(x if isinstance(x, list) else [x]):
            if not (item is None or isinstance(item, (bool, int, float, str))):
                raise records.malformed(f"settings.{key}", f"expected numbers or text, got {records.kind_name(item)}")
            if isinstance(item, str):
                records.want_str(item, f"settings.{key}[{i}]")


def load(page: str, folder: Path | str | None = None) -> PageRecording | None:
    """The shipped recording of a page (in folder, else PAGES_DIR), or None when there is none (a broken file
    raises SpecvizError)."""
    path = Path(folder or PAGES_DIR) / f"{page}.json"
    if not path.is_file():
        return None
    return loads(path.read_text(encoding="utf-8"))
