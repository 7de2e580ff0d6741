"""Token trees: draft a tree of alternatives, verify every node in one target pass.

One round (SpecInfer, Miao et al. 2024; the dynamic trees of EAGLE-2):
  1. draft    the root is the last committed token. At each depth the draft
              gives up to `branch` children to each of the `branch` newest
              nodes with the highest cumulative draft probability (the product
              of q along the path), until `budget` nodes or `max_depth`.
              One draft pass per depth feeds the nodes being expanded, under a
              tree attention mask: each sees the committed context and its own
              ancestors, at position (root's position + depth).
  2. verify   one target pass over all nodes with the same kind of mask: p at
              the root and at every node.
  3. accept   walk down from the root.
              greedy: the children are the draft's top-b tokens; follow the
              child equal to the target's argmax while there is one.
              sampling: the children are b distinct tokens drawn from q without
              replacement, tried in the order drawn by recursive rejection
              sampling (Jeon et al. 2024, "Recursive Speculative Decoding"):
                accept child x with min(1, p(x)/q(x));
                after a rejection  p <- norm(max(0, p - q))
                                   q <- q without x, renormalised
                                   (the next child was drawn without x);
                no child accepted: draw from what remains of p.
  4. emit     the accepted path, then one token from the target: a bonus when
              the walk ended at a leaf, else the correction.
  5. compact  both KV caches keep only the committed context and the accepted
              path's entries, selected by index (the tree's entries are not a
              suffix that cropping could remove).

A second shape, the spine (shape="spine"): step 1 drafts a chain, one
draft step per token, stopped by the best-k chooser's rule as a chain round
is (k_policy="best"; "fixed": max_depth tokens every round); a node where
the draft's most likely token has probability below `doubt` also gets
branch - 1 siblings of the chain's token, as leaves (never fed to the draft).
Steps 2-5 are the same. Where the draft is sure this is the chain; where it
is not, the target's token is often the draft's second choice, and a sibling
in the same pass turns that rejection into an accepted token and a bonus
after it.

Why sampling stays exact: which nodes are expanded, and how many children each
gets, is decided from the tree above those children only (never from the
children's own tokens), so once the walk reaches a node its children are a
fresh sample without replacement from q there, and each step of the rule is
Leviathan et al.'s exact step for the distribution that remains. (The spine's
siblings are decided from q at the node; which child the spine goes on from,
the first drawn, and whether it goes on at all, change only what follows an
accepted node, and whatever follows gives the next token from p.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specviz.device import devqueue
from specviz.device.runner import Runner
from specviz.decoding import kpolicy
from specviz.core import measure
from specviz.decoding.engine import DecodeStream, cut_at_eos, device_of, topk_of, topk_rows, as_id_list, check_settings, is_int, drive, \
    pair_vocab, sampler_of
from specviz.core.settings import DecodeSettings
from specviz.core.errors import InvalidSetting
from specviz.modeling.lm import CachedLM, eos_ids
from specviz.decoding.sampling import Sampler, accept_token, residual, sample, uniform
from specviz.data.tree_records import TreeRound, TreeRun

BUDGET_MAX = 64  # nodes per tree
BRANCH_MAX = 8  # children per node (and nodes expanded per depth)
DEPTH_MAX = 32
ROOT = -1  # the parent index of the root's children
DOUBT = 0.8  # the spine: a node whose draft top-1 probability is below this gets siblings (docs/performance.md, Token trees)
SHAPES = ("tree", "spine")
SPINE = dict(budget=BUDGET_MAX, branch=2, max_depth=DEPTH_MAX)  # the spine's usual settings: the chooser's stop ends it


# --------------------------------------------------------------------------
# the tree and its attention masks


@dataclass
class DraftTree:
    """The tree as drafting builds it (working data; TreeRound is the record).

    Nodes are numbered in the order drafted: by depth, then by parent, then by
    the order the parent's children were drawn (the order they are tried in).
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # ROOT for the root's children
    depths: list[int] = field(default_factory=list)  # 1 for the root's children
    q: list[float] = field(default_factory=list)  # q(token) at the parent
    cum: list[float] = field(default_factory=list)  # product of q along the path
    q_rows: dict[int, torch.Tensor] = field(default_factory=dict)  # node (ROOT too) -> (V,) q there, if expanded
    slots: dict[int, int] = field(default_factory=dict)  # node -> its index in the draft's cache, if fed
    step_s: list[float] = field(default_factory=list)  # wall time of each draft pass

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, q: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent == ROOT else self.depths[parent] + 1)
        self.q.append(q)
        self.cum.append(q * (1.0 if parent == ROOT else self.cum[parent]))
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        return [i for i, par in enumerate(self.parents) if par == node]


def lineage(parents: list[int], node: int) -> list[int]:
    """node, its parent, ..., down to the root's child."""
    out = []
    while node != ROOT:
        out.append(node)
        node = parents[node]
    return out


def tree_allowed(parents: list[int], rows: list[int], cols: list[int]) -> torch.Tensor:
    """(len(rows), len(cols)) bool: node cols[j] is node rows[i] or one of its ancestors."""
    out = torch.zeros(len(rows), len(cols), dtype=torch.bool)
    col_of = {c: j for j, c in enumerate(cols)}
    for i, r in enumerate(rows):
        for a in lineage(parents, r):
            if a in col_of:
                out[i, col_of[a]] = True
    return out


def verify_mask(n_cache: int, n_pending: int, parents: list[int]) -> torch.Tensor:
    """Who sees whom in the verify pass over [pending context tokens] + [all nodes].

    The pending tokens (the root last) are causal over the cache and each other;
    node i sees the whole context and its own ancestors. (P + N, n_cache + P + N) bool.
    """
    P, N = n_pending, len(parents)
    top = torch.cat([torch.ones(P, n_cache, dtype=torch.bool), torch.ones(P, P, dtype=torch.bool).tril(),
                     torch.zeros(P, N, dtype=torch.bool)], dim=1)  # (P, n_cache + P + N)
    nodes = list(range(N))
    bottom = torch.cat([torch.ones(N, n_cache + P, dtype=torch.bool), tree_allowed(parents, nodes, nodes)],
                       dim=1)  # (N, n_cache + P + N)
    return torch.cat([top, bottom], dim=0)


def draft_mask(n_ctx: int, cached: list[int], rows: list[int], parents: list[int]) -> torch.Tensor:
    """Who sees whom in a draft pass feeding `rows` to a cache of context + the `cached` nodes.

    (R, n_ctx + len(cached) + R) bool.
    """
    ctx = torch.ones(len(rows), n_ctx, dtype=torch.bool)
    return torch.cat([ctx, tree_allowed(parents, rows, cached + rows)], dim=1)


def as_float(logits: torch.Tensor) -> torch.Tensor:
    """float32 logits (half precision is promoted); float64 stays float64, so tests can be tight."""
    return logits if logits.dtype == torch.float64 else logits.float()


# --------------------------------------------------------------------------
# step 1: draft the tree, one draft pass per depth


def pick_children(logits: torch.Tensor, q: torch.Tensor, m: int, sampler: Sampler) -> list[int]:
    """m distinct children: the draft's top-m (greedy) or m draws from q without replacement."""
    if sampler.greedy:
        return torch.topk(logits, min(m, logits.shape[-1])).indices.tolist()
    left, out = q.clone(), []  # (V,)
    for _ in range(min(m, int((q > 0).sum()))):
        x = sample(left, sampler.generator)
        out.append(x)
        left[x] = 0.0  # without replacement
    return out


def expand(tree: DraftTree, frontier: list[int], logits: torch.Tensor, sampler: Sampler, branch: int,
           budget: int) -> list[int]:
    """Give each frontier node up to `branch` children within the budget; return the new nodes.

    logits: (len(frontier), V), the draft's logits at each frontier node.
    """
    new = []
    for f, row in zip(frontier, logits):
        q = sampler.probs(row)  # (V,) the distribution children are drawn from
        tree.q_rows[f] = q
        m = min(branch, budget - len(tree))  # decided before any of f's children is drawn
        for x in pick_children(row, q, m, sampler) if m > 0 else []:
            new.append(tree.add(x, f, float(q[x])))
    return new


def pick_frontier(tree: DraftTree, new: list[int], eos: set[int], branch: int, budget: int) -> list[int]:
    """The nodes to expand next: the most probable new ones, as many as the budget can give children."""
    room = budget - len(tree)
    n = min(branch, -(-room // branch))  # ceil(room / branch)
    ok = [i for i in new if tree.tokens[i] not in eos]  # nothing can follow an EOS
    return sorted(ok, key=lambda i: -tree.cum[i])[:n]  # stable: ties keep the drafted order


def draft_tree(lm: CachedLM, ids: list[int], sampler: Sampler, vocab: int, eos: set[int], *, budget: int,
               branch: int, max_depth: int) -> DraftTree:
    """Draft a tree below ids[-1]. The draft's cache ends holding ids plus the fed nodes (tree.slots)."""
    tree = DraftTree()
    # pass 0: the committed tokens the draft has not read (the whole prompt in round one); the root's row
    logits, dt = lm.timed_feed(ids[lm.n:], keep=1)
    tree.step_s.append(dt)
    n_ctx = lm.n  # == len(ids)
    frontier, rows = [ROOT], as_float(logits[:, :vocab])  # (1, V)
    for depth in range(1, max_depth + 1):
        new = expand(tree, frontier, rows, sampler, branch, budget)
        if depth == max_depth or len(tree) >= budget:
            break
        frontier = pick_frontier(tree, new, eos, branch, budget)
        if not frontier:
            break
        # one pass feeds the frontier: each node sees the context and its ancestors already cached
        cached = sorted(tree.slots, key=tree.slots.get)
        allowed = draft_mask(n_ctx, cached, frontier, tree.parents)  # (R, n + R)
        positions = [n_ctx - 1 + tree.depths[i] for i in frontier]
        for j, i in enumerate(frontier):
            tree.slots[i] = lm.n + j
        logits, dt = lm.timed(lm.feed_masked, [tree.tokens[i] for i in frontier], allowed, positions)
        tree.step_s.append(dt)
        rows = as_float(logits[:, :vocab])  # (R, V)
    return tree


def draft_spine(lm: CachedLM, ids: list[int], sampler: Sampler, vocab: int, eos: set[int], *, budget: int,
                branch: int, max_depth: int, doubt: float = DOUBT, keep=None) -> DraftTree:
    """Draft a chain below ids[-1], one step per token, with branch - 1 sibling leaves at each node where
    the draft's most likely token has probability below `doubt`.

    keep(confidences, step seconds) -> bool: draft one more chain token? (the k policy's stop rule; None:
    up to max_depth). The draft's cache ends holding ids plus the fed chain nodes (tree.slots).
    """
    tree = DraftTree()
    logits, dt = lm.timed_feed(ids[lm.n:], keep=1)  # what the draft has not read (the prompt in round one)
    tree.step_s.append(dt)
    node, confidences = ROOT, []
    for depth in range(1, max_depth + 1):
        row = as_float(logits[-1, :vocab])  # (V,) the draft's logits at `node`
        q = sampler.probs(row)  # (V,)
        tree.q_rows[node] = q
        m = min(branch if float(q.max()) < doubt else 1, budget - len(tree))  # from q here, not from the children
        kids = [tree.add(x, node, float(q[x])) for x in pick_children(row, q, m, sampler)]
        if not kids:
            break
        chain, token = kids[0], tree.tokens[kids[0]]  # the first drawn goes on; the rest are leaves
        if token in eos or depth == max_depth or len(tree) >= budget:
            break
        confidences.append(float(q[token]))
        if keep is not None and not keep(confidences, tree.step_s):
            break
        tree.slots[chain] = lm.n  # the cache holds the context and the chain so far: a plain causal feed
        logits, dt = lm.timed_feed([token], keep=1)
        tree.step_s.append(dt)
        node = chain
    return tree


def spine(rnd: TreeRound) -> list[int]:
    """The chain of a spine round: from the root, each node's first child."""
    kids, node, out = rnd.children, ROOT, []
    while node in kids:
        node = kids[node][0]
        out.append(node)
    return out


def observe_spine(policy: kpolicy.KPolicy, rnd: TreeRound) -> None:
    """Teach a k policy from a spine round, as from a chain round: the judged chain nodes, one draft
    step's seconds, and the target pass over all the nodes."""
    learn = getattr(policy, "learn", None)
    if learn is None:
        return
    judged = [i for i in spine(rnd) if rnd.verdict[i] != "untried"]
    learn([rnd.q[i] for i in judged], [rnd.verdict[i] == "accepted" for i in judged], measure.draft_step_s(rnd),
          rnd.verify_s, rnd.n_nodes + 1, prompt=rnd.prefill_tokens)


# --------------------------------------------------------------------------
# step 2: verify every node in one target pass


def verify_tree(lm: CachedLM, ids: list[int], tree: DraftTree, vocab: int) -> tuple[torch.Tensor, float]:
    """One target pass over the unread context tokens and every node.

    Returns logits (N+1, V): row 0 at the root, row i+1 at node i; and the pass's seconds.
    """
    pending = ids[lm.n:]  # the root (ids[-1]) and any earlier tokens the target has not read
    allowed = verify_mask(lm.n, len(pending), tree.parents)  # (P + N, n + P + N)
    positions = list(range(lm.n, len(ids))) + [len(ids) - 1 + d for d in tree.depths]
    logits, dt = lm.timed(lm.feed_masked, pending + tree.tokens, allowed, positions, keep=len(tree) + 1)
    return as_float(logits[:, :vocab]), dt


# --------------------------------------------------------------------------
# step 3: walk down the tree


def without(q: torch.Tensor, x: int) -> torch.Tensor:
    """q with x removed, renormalised: the distribution the next child was drawn from."""
    r = q.clone()
    r[x] = 0.0
    total = r.sum()
    return r / total if total > 0 else r


def recursive_rejection(p: torch.Tensor, q: torch.Tensor, children: list[int], sampler: Sampler):
    """Try the children (tokens, in the order drawn) with min(1, p/q); update p and q after each rejection.

    Returns (index of the accepted child or None, the p that remains, us, ratios).
    """
    us, ratios = [], []
    for i, x in enumerate(children):
        p_x, q_x = float(p[x]), float(q[x])
        u = uniform(sampler.generator)
        us.append(u)
        ratios.append(p_x / q_x)
        if accept_token(u, p_x, q_x):
            return i, p, us, ratios
        p = residual(p, q, x)  # norm(max(0, p - q))
        q = without(q, x)
    return None, p, us, ratios


@dataclass
class Walk:
    """The outcome of step 3: the accepted path and the target's own token after it."""

    path: list[int]  # node indices, the root's child first
    extra: int  # the correction or bonus
    kind: str  # "correction" (the last node's children were all rejected) or "bonus" (a leaf)
    verdict: list[str]  # per node: "accepted", "rejected" or "untried"
    u: list[float | None]  # per node: the uniform it was judged with (sampling)
    ratio: list[float | None]  # per node: p/q when it was judged, after earlier siblings' updates (sampling)
    residual: torch.Tensor | None  # (V,) what the correction was drawn from (sampling)


def walk(tree: DraftTree, logits: torch.Tensor, p: torch.Tensor, sampler: Sampler) -> Walk:
    """From the root, accept a child at each node while one passes; logits, p: (N+1, V)."""
    n = len(tree)
    verdict, us, ratios = ["untried"] * n, [None] * n, [None] * n
    argmax = torch.argmax(logits, dim=-1).tolist() if sampler.greedy else None  # (N+1,)
    node, path = ROOT, []
    while True:
        kids, row = tree.children(node), node + 1
        if sampler.greedy:
            for c in kids:
                verdict[c] = "rejected"
            hit = [c for c in kids if tree.tokens[c] == argmax[row]]
            chosen, rest = (hit[0] if hit else None), p[row]
        else:
            i, rest, u, r = recursive_rejection(p[row], tree.q_rows.get(node), [tree.tokens[c] for c in kids],
                                                sampler) if kids else (None, p[row], [], [])
            for c, uc, rc in zip(kids, u, r):
                verdict[c], us[c], ratios[c] = "rejected", uc, rc
            chosen = None if i is None else kids[i]
        if chosen is None:
            kind = "correction" if kids else "bonus"
            extra = sampler.pick(logits[row], rest)  # greedy: the target's argmax
            res = rest if kind == "correction" and not sampler.greedy else None
            return Walk(path, extra, kind, verdict, us, ratios, res)
        verdict[chosen] = "accepted"
        path.append(chosen)
        node = chosen


# --------------------------------------------------------------------------
# the round


def tree_step(target: CachedLM, draft: CachedLM, ids: list[int], sampler: Sampler, vocab: int, eos: set[int],
              room: int, index: int, *, budget: int, branch: int, max_depth: int,
              policy: kpolicy.KPolicy | None = None, doubt: float = DOUBT) -> tuple[TreeRound, bool]:
    """One whole round. Appends to `ids` in place; returns (TreeRound, hit_eos).

    policy None: a tree drafted depth by depth; else a spine whose chain `policy` stops."""
    t0 = time.perf_counter()
    prefill = max(0, len(ids) - 1 - target.n)
    depth = min(max_depth, room)  # a deeper path could not be emitted
    with target.runner.watch() as load:  # did any pass of this round run while other programs used the cores?
        if policy is None:
            tree = draft_tree(draft, ids, sampler, vocab, eos, budget=budget, branch=branch, max_depth=depth)
        else:
            tree = draft_spine(draft, ids, sampler, vocab, eos, budget=budget, branch=branch,
                               max_depth=min(depth, policy.next_k(True)), doubt=doubt,
                               keep=kpolicy.keep_rule(policy, reads_prompt=prefill > 0))
        logits, verify_s = verify_tree(target, ids, tree, vocab)  # (N+1, V)
    p = sampler.probs(logits)  # (N+1, V)
    w = walk(tree, logits, p, sampler)

    # emit, cut at EOS / max_new_tokens, then keep only the path in both caches
    emitted, hit_eos = cut_at_eos([tree.tokens[i] for i in w.path] + [w.extra], eos, room)
    extra, kind = (w.extra, w.kind) if len(emitted) > len(w.path) else (None, None)
    kept = w.path[: len(emitted) - 1]  # the newest token is fed next round
    ctx = len(ids)
    target.compact(list(range(ctx)) + [ctx + i for i in kept])  # node i sits at ctx + i
    fed = []
    for i in kept:  # the draft fed every expanded node; the path's last node may be a leaf
        if i not in tree.slots:
            break
        fed.append(tree.slots[i])
    draft.compact(list(range(ctx)) + fed)
    ids.extend(emitted)

    # record (plain data only)
    rows = [ROOT] + list(range(len(tree)))
    q_top = [topk_of(tree.q_rows[r]) if r in tree.q_rows else None for r in rows]
    p_node = [float(p[par + 1, tok]) for tok, par in zip(tree.tokens, tree.parents)]
    rnd = TreeRound(
        index=index, tokens=list(tree.tokens), parents=list(tree.parents), depths=list(tree.depths),
        q=list(tree.q), cum_q=list(tree.cum), p=p_node, verdict=w.verdict, u=w.u, ratio=w.ratio,
        path=list(w.path), emitted=emitted, extra_id=extra, extra_kind=kind,
        p_top=topk_rows(p), q_top=q_top, target_argmax=torch.argmax(logits, dim=-1).tolist(),
        residual_top=topk_of(w.residual) if w.residual is not None else None, greedy=sampler.greedy,
        draft_s=list(tree.step_s), verify_s=verify_s, round_s=load.held_since(t0),
        prefill_tokens=prefill, **load.record(),
    )
    return rnd, hit_eos


# --------------------------------------------------------------------------
# entry points


def check_tree(budget: int, branch: int, max_depth: int, shape: str = "tree", doubt: float = DOUBT) -> None:
    """The tree's shape settings; InvalidSetting with a message for a person."""
    for name, v, hi in (("budget", budget, BUDGET_MAX), ("branch", branch, BRANCH_MAX),
                        ("max_depth", max_depth, DEPTH_MAX)):
        if not (is_int(v) and 1 <= v <= hi):
            raise InvalidSetting(f"{name} must be an integer from 1 to {hi}, got {v!r}.")
    if shape not in SHAPES:
        raise InvalidSetting(f"shape must be one of {', '.join(SHAPES)}; got {shape!r}.")
    if not (isinstance(doubt, (int, float)) and not isinstance(doubt, bool) and 0.0 <= doubt <= 1.0):
        raise InvalidSetting(f"doubt must be a number from 0 to 1, got {doubt!r}.")


def tree_stream(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(), *, budget: int = 16,
                branch: int = 2, max_depth: int = 8, eos_token_id=None, vocab: int | None = None,
                shape: str = "tree", doubt: float = DOUBT, runner: Runner | None = None) -> DecodeStream:
    """Token-tree speculative decoding, one TreeRound at a time; afterwards `.run` is the TreeRun.

    shape "tree": drafted depth by depth (budget, branch, max_depth); settings.k and k_policy are not used.
    "spine": a chain that the best-k chooser stops (settings.k_policy "best"; "fixed": always max_depth long),
    at most max_depth long, with branch - 1 siblings where the draft's top probability is below `doubt`,
    budget nodes at most (module doc). runner: how every round and pass reaches the device
    (device/runner.py); None: the shared queue's for the target's device."""
    runner = runner or devqueue.queue_runner(device_of(target))
    vocab = pair_vocab(target, draft, vocab)
    ids = as_id_list(input_ids)
    check_settings(ids, [target, draft], settings, vocab=vocab, chain=False)
    check_tree(budget, branch, max_depth, shape, doubt)
    k_policy = settings.k_policy
    if shape == "spine" and k_policy not in ("best", "fixed"):
        raise InvalidSetting(f"a spine's k_policy must be 'best' or 'fixed', got {k_policy!r}.")
    eos = set(eos_ids([target, draft], eos_token_id))
    record = dict(budget=budget, branch=branch, max_depth=max_depth, temperature=settings.temperature,
                  top_p=settings.top_p, top_k=settings.top_k, max_new_tokens=settings.max_new_tokens,
                  seed=settings.seed, eos_token_id=sorted(eos))
    step_kw = dict(budget=budget, branch=branch, max_depth=max_depth)
    if shape == "spine":
        record.update(shape=shape, doubt=doubt, k_policy=k_policy)
        policy = spine_policy(draft, target, greedy=settings.greedy) if k_policy == "best" else \
            kpolicy.FixedK(max_depth)
        step_kw.update(policy=policy, doubt=doubt)
    sampler = sampler_of(settings)
    max_new_tokens = settings.max_new_tokens
    return DecodeStream(lambda out: _tree(target, draft, ids, sampler, vocab, eos, max_new_tokens, record, step_kw,
                                          out), runner)


def spine_policy(draft_model, target_model, greedy: bool) -> kpolicy.KPolicy:
    """The best-k chooser, set up as the chain engine sets it up (engine._speculative_on)."""
    return kpolicy.prepare(kpolicy.make_k_policy(4, "best"), draft_model, target_model, greedy)


def _tree(target_model, draft_model, prompt, sampler, vocab, eos, max_new_tokens, settings, step_kw, out):
    target, draft = CachedLM(target_model, out.runner), CachedLM(draft_model, out.runner)
    ids = list(prompt)
    policy = step_kw.get("policy")

    def one_round(room, index):
        rnd, hit_eos = tree_step(target, draft, ids, sampler, vocab, eos, room, index, **step_kw)
        if policy is not None:
            observe_spine(policy, rnd)
        return rnd, hit_eos

    rounds, stop, busy_s = yield from drive(ids, len(prompt), max_new_tokens, one_round, out)
    return TreeRun(
        prompt_ids=list(prompt), token_ids=ids[len(prompt):], rounds=rounds, settings=settings, stop_reason=stop,
        decode_s=busy_s, target_passes=len(rounds),
        draft_passes=sum(len(r.draft_s) for r in rounds), device=str(target.device),
        dtype=str(next(target_model.parameters()).dtype).replace("torch.", ""),
    )


def tree_decode(target, draft, input_ids, settings: DecodeSettings = DecodeSettings(), *, budget: int = 16,
                branch: int = 2, max_depth: int = 8, eos_token_id=None, vocab: int | None = None,
                shape: str = "tree", doubt: float = DOUBT, runner: Runner | None = None) -> TreeRun:
    """Token-tree speculative decoding to completion; returns the TreeRun (runner: tree_stream's)."""
    stream = tree_stream(target, draft, input_ids, settings, budget=budget, branch=branch, max_depth=max_depth,
                         eos_token_id=eos_token_id, vocab=vocab, shape=shape, doubt=doubt, runner=runner)
    for _ in stream:
        pass
    return stream.run
