"""Plain-data records of a token-tree run: a TreeRun made of TreeRounds.

Like records.py for chains: lists, floats, ints and strings only, so a run can
be drawn, saved as JSON, loaded back (every field checked) and replayed.

Nodes are indexed 0..N-1 in drafted order; `parents[i]` is -1 for the root's
children (the root is the last committed token). Per-parent lists (`p_top`,
`q_top`, `target_argmax`) have N+1 entries: index 0 is the root, i+1 node i.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from specviz.data.records import (LOAD_FIELDS, RunRates, TopK, kind_name, topk_from_dict, want_prob, want_topk_dict, check_load_fields,
                      check_settings_dict, malformed, parse_json, want_bool, want_int, want_list, want_num,
                      want_obj, want_opt, want_str, LIST_MAX, STOP_REASONS)

FORMAT = "specviz.treerun/1"
VERDICTS = ("accepted", "rejected", "untried")
TREE_KINDS = ("correction", "bonus")


@dataclass(frozen=True)
class TreeRound:
    """One tree round: draft a tree, verify all its nodes in one target pass, walk, emit."""

    index: int
    tokens: list[int]  # node tokens
    parents: list[int]  # parent node per node; -1 = the root
    depths: list[int]  # 1 for the root's children
    q: list[float]  # q(token) at the parent: the draft's probability of each node
    cum_q: list[float]  # product of q along the path: what drafting ranks nodes by
    p: list[float]  # p(token) at the parent: the target's probability of each node
    verdict: list[str]  # "accepted" (on the path), "rejected" (judged and refused) or "untried"
    u: list[float | None]  # the uniform each judged node was tested with (sampling; null when greedy)
    ratio: list[float | None]  # p/q when judged, after earlier siblings' rejections updated both (sampling)
    path: list[int]  # node indices of the accepted path, the root's child first
    emitted: list[int]  # tokens this round appends (after EOS / length cut)
    extra_id: int | None  # the correction or bonus token, if emitted
    extra_kind: str | None  # "correction", "bonus" or None (cut)
    p_top: list[TopK]  # target distribution, top-N, at the root then at each node (N+1)
    q_top: list[TopK | None]  # draft distribution at the root and at each expanded node; null if not expanded
    target_argmax: list[int]  # target's argmax at the root and at each node (N+1)
    residual_top: TopK | None  # what remained of p when the correction was drawn (sampling)
    greedy: bool
    draft_s: list[float]  # wall time of each draft pass (one per depth)
    verify_s: float  # wall time of the one target pass
    round_s: float
    prefill_tokens: int = 0  # earlier prompt tokens this round's passes also read
    outside_load: bool = False  # other programs used the CPU during this round's passes (clock.note_pass)
    stalled_s: float = 0.0  # wall time not counted in the times above: other threads held the passes' cores

    @property
    def n_nodes(self) -> int:
        return len(self.tokens)

    @property
    def n_accepted(self) -> int:
        return len(self.path)

    @property
    def children(self) -> dict[int, list[int]]:
        """parent (-1 = root) -> its children, in the order tried."""
        out: dict[int, list[int]] = {}
        for i, par in enumerate(self.parents):
            out.setdefault(par, []).append(i)
        return out


@dataclass(frozen=True)
class TreeRun(RunRates):
    """A whole token-tree generation: settings, new token ids, rounds and timings."""

    prompt_ids: list[int]
    token_ids: list[int]
    rounds: list[TreeRound]
    settings: dict[str, Any]
    stop_reason: str  # "eos" or "max_new_tokens"
    decode_s: float  # wall time of all rounds (not time a caller held a round)
    target_passes: int
    draft_passes: int
    device: str = "cpu"
    dtype: str = "float32"
    mode: str = "tree"

    @property
    def n_nodes(self) -> int:
        return sum(r.n_nodes for r in self.rounds)


    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = FORMAT
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "TreeRun":
        """A TreeRun from parsed JSON; every field is checked first (SpecvizError naming the field)."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise malformed("", f"missing format {FORMAT!r}")
        check_tree_run_dict(d)
        kw = {f.name: d[f.name] for f in fields(TreeRun) if f.name in d and f.name != "rounds"}
        return TreeRun(rounds=[_round(r) for r in d["rounds"]], **kw)

    @staticmethod
    def from_json(text: str) -> "TreeRun":
        return TreeRun.from_dict(parse_json(text))


# --------------------------------------------------------------------------
# reading tree run files


def _check_round(d: Any, w: str) -> None:
    want_obj(d, w, tuple(f.name for f in fields(TreeRound) if f.name not in LOAD_FIELDS))
    check_load_fields(d, w)
    for name in ("index", "prefill_tokens"):
        want_int(d[name], f"{w}.{name}", 0, LIST_MAX)
    for name in ("tokens", "emitted", "target_argmax", "path"):
        want_list(d[name], f"{w}.{name}", want_int)
    n = len(d["tokens"])
    want_list(d["parents"], f"{w}.parents", lambda v, p: want_int(v, p, -1, n - 1))
    want_list(d["depths"], f"{w}.depths", lambda v, p: want_int(v, p, 1, LIST_MAX))
    for name in ("q", "cum_q", "p"):
        want_list(d[name], f"{w}.{name}", want_prob)
    want_list(d["u"], f"{w}.u", want_opt(want_prob))
    want_list(d["ratio"], f"{w}.ratio", want_opt(lambda v, p: want_num(v, p, inf_ok=True)))
    want_list(d["verdict"], f"{w}.verdict", lambda v, p: want_str(v, p, options=VERDICTS))
    for name in ("parents", "depths", "q", "cum_q", "p", "verdict", "u", "ratio"):
        if len(d[name]) != n:
            raise malformed(f"{w}.{name}", f"has {len(d[name])} entries for {n} nodes")
    want_list(d["path"], f"{w}.path", lambda v, p: want_int(v, p, 0, max(n - 1, 0)))
    _check_shape(d, w, n)
    want_opt(want_int)(d["extra_id"], f"{w}.extra_id")
    want_opt(lambda v, p: want_str(v, p, options=TREE_KINDS))(d["extra_kind"], f"{w}.extra_kind")
    want_list(d["p_top"], f"{w}.p_top", want_topk_dict)
    want_list(d["q_top"], f"{w}.q_top", want_opt(want_topk_dict))
    want_opt(want_topk_dict)(d["residual_top"], f"{w}.residual_top")
    want_bool(d["greedy"], f"{w}.greedy")
    want_list(d["draft_s"], f"{w}.draft_s", want_num)
    for name in ("verify_s", "round_s"):
        want_num(d[name], f"{w}.{name}")


def _check_shape(d: dict, w: str, n: int) -> None:
    """The nodes form a tree drawn in order (a parent before its children, so no cycle) and the path is a
    chain down from the root; per-parent lists have N+1 entries."""
    for i, (par, depth) in enumerate(zip(d["parents"], d["depths"])):
        if par >= i:
            raise malformed(f"{w}.parents[{i}]", "a node's parent must come before it")
        if depth != (1 if par == -1 else d["depths"][par] + 1):
            raise malformed(f"{w}.depths[{i}]", "must be one more than its parent's depth")
    if d["path"] and not n:
        raise malformed(f"{w}.path", "a tree with no nodes has no path")
    above = -1
    for j, node in enumerate(d["path"]):
        if d["parents"][node] != above:
            raise malformed(f"{w}.path[{j}]", "the path must go from each node to one of its children")
        above = node
    for name in ("p_top", "q_top", "target_argmax"):
        if len(d[name]) != n + 1:
            raise malformed(f"{w}.{name}", f"has {len(d[name])} entries for the root and {n} nodes")


def check_tree_run_dict(d: Any) -> None:
    """Types and ranges of every field of a specviz.treerun/1 dict (SpecvizError naming the first bad one)."""
    want_obj(d, "", ("prompt_ids", "token_ids", "rounds", "settings", "stop_reason", "decode_s",
                     "target_passes", "draft_passes"))
    if d.get("mode", "tree") != "tree":
        raise malformed("mode", f"must be 'tree', got {kind_name(d['mode'])}")
    want_str(d["stop_reason"], "stop_reason", options=STOP_REASONS)
    for name in ("prompt_ids", "token_ids"):
        want_list(d[name], name, want_int)
    check_settings_dict(d["settings"])
    want_num(d["decode_s"], "decode_s")
    for name in ("target_passes", "draft_passes"):
        want_int(d[name], name, 0, 100 * LIST_MAX)
    for name in ("device", "dtype"):
        if name in d:
            want_str(d[name], name, 40)
    want_list(d["rounds"], "rounds", _check_round)


def _round(d: dict[str, Any]) -> TreeRound:
    kw = {f.name: d[f.name] for f in fields(TreeRound) if f.name in d}
    kw["p_top"] = [topk_from_dict(t) for t in d["p_top"]]
    kw["q_top"] = [topk_from_dict(t) for t in d["q_top"]]
    kw["residual_top"] = topk_from_dict(d["residual_top"])
    return TreeRound(**kw)
