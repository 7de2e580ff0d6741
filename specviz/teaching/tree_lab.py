"""Token trees measured and explained: acceptance by depth and by branch rank, one node's decision in words,
and a chain against a tree at equal node budgets on the same prompt and seed.

Plain data in, plain data and sentences out; the Token tree page and the bench call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specviz.teaching import explain
from specviz.core import measure, theory
from specviz.core.errors import InvalidSetting
from specviz.core.limits import K_MAX
from specviz.core.progress import Progress, Units
from specviz.decoding.engine import speculative_decode
from specviz.teaching.experiments import forward_cost
from specviz.core.settings import DecodeSettings
from specviz.decoding.tree import tree_decode
from specviz.data.tree_records import TreeRound

FREE_TOL = 1.25  # a verify pass is "nearly free" while it costs at most this × a one-token pass


# --------------------------------------------------------------------------
# acceptance by depth and by branch rank


@dataclass(frozen=True)
class Tally:
    """How often something was tried and how often it was accepted."""

    label: int  # the depth (1 = the root's children) or the branch rank (0 = the first child tried)
    tried: int
    accepted: int

    @property
    def rate(self) -> float:
        return self.accepted / self.tried if self.tried else float("nan")


def ranks(r: TreeRound) -> list[int]:
    """Each node's rank among its parent's children: 0 for the first tried (greedy: the draft's top choice)."""
    out = [0] * r.n_nodes
    for kids in r.children.values():
        for j, c in enumerate(kids):
            out[c] = j
    return out


def by_depth(rounds: Sequence[TreeRound]) -> list[Tally]:
    """Per depth d: rounds whose walk tried a node at depth d, and those whose path went on to depth d."""
    tried: dict[int, int] = {}
    acc: dict[int, int] = {}
    for r in rounds:
        for d in {r.depths[i] for i, v in enumerate(r.verdict) if v != "untried"}:
            tried[d] = tried.get(d, 0) + 1
        for d in range(1, r.n_accepted + 1):
            acc[d] = acc.get(d, 0) + 1
    return [Tally(d, tried[d], acc.get(d, 0)) for d in sorted(tried)]


def by_rank(rounds: Sequence[TreeRound]) -> list[Tally]:
    """Per branch rank: children of that rank the walk tried, and those it accepted."""
    tried: dict[int, int] = {}
    acc: dict[int, int] = {}
    for r in rounds:
        for i, (v, k) in enumerate(zip(r.verdict, ranks(r))):
            if v != "untried":
                tried[k] = tried.get(k, 0) + 1
                acc[k] = acc.get(k, 0) + (v == "accepted")
    return [Tally(k, tried[k], acc.get(k, 0)) for k in sorted(tried)]


def rank_summary(tallies: Sequence[Tally]) -> str:
    """What the side branches added: the share of accepted tokens a chain (rank 0 only) would not have drafted."""
    total = sum(t.accepted for t in tallies)
    if not total:
        return "No drafted token was accepted yet."
    side = sum(t.accepted for t in tallies if t.label > 0)
    return (f"{side} of the {total} accepted drafted tokens ({100 * side / total:.0f}%) came from a branch other "
            "than the first child: a chain, which drafts only the first child, would have lost them.")


# --------------------------------------------------------------------------
# one node, in words


def node_label(r: TreeRound, i: int, decode: Callable[[int], str]) -> str:
    return f"node {i}: depth {r.depths[i]}, {explain.tok(r.tokens[i], decode)} ({r.verdict[i]})"


def node_story(r: TreeRound, i: int, decode: Callable[[int], str]) -> list[str]:
    """The decision at node i: who drafted it, p and q there, and why it was accepted, rejected or never judged."""
    def tok(tid: int) -> str:
        return explain.tok_md(tid, decode)

    par = r.parents[i]
    above = "the committed context" if par < 0 else f"node {par} {tok(r.tokens[par])}"
    rank = ranks(r)[i]
    lines = [f"Node {i} {tok(r.tokens[i])} is child #{rank + 1} of {above}, at depth {r.depths[i]}: "
             f"the draft gave it q = {r.q[i]:.3f} there (q along its path = {r.cum_q[i]:.3f}); the target, "
             f"reading the same ancestors in the one verify pass, gave it p = {r.p[i]:.3f}."]
    if r.verdict[i] == "untried":
        why = ("its parent was not on the accepted path" if par not in [-1, *r.path]
               else "an earlier sibling was accepted first")
        lines.append(f"Never judged: {why}, so this branch was pruned.")
    elif r.greedy:
        a = r.target_argmax[par + 1]
        lines.append(f"Greedy: the target's top token after {above} is {tok(a)}; "
                     + ("it matches, so the node is **accepted**." if r.verdict[i] == "accepted"
                        else "it does not match, so the node is **rejected**."))
    else:
        thr = min(1.0, r.ratio[i])
        lines.append(f"Sampling: accept if u < min(1, p/q) = {thr:.3f} (p and q as updated by the siblings tried "
                     f"before it); u = {r.u[i]:.3f}, so the node is **{r.verdict[i]}**.")
    return lines


# --------------------------------------------------------------------------
# chain against tree at equal node budgets


@dataclass(frozen=True)
class ShapeRun:
    """One measured generation: a chain of k = budget drafts, or a tree of `budget` nodes."""

    shape: str  # "chain" or "tree"
    budget: int  # drafted tokens the target verifies per pass
    tokens: int
    target_passes: int
    tokens_per_pass: float
    tokens_per_s: float
    verify_ms: float  # median verify pass over the rounds after the prompt was read


@dataclass(frozen=True)
class ChainVsTree:
    budgets: list[int]
    runs: list[ShapeRun]
    verify_ratio: dict[int, float]  # tokens in one target pass -> its cost / a one-token pass
    same_output: bool  # greedy: every run produced the same tokens (sampling: not expected)
    greedy: bool

    def get(self, shape: str, budget: int) -> ShapeRun:
        return next(r for r in self.runs if r.shape == shape and r.budget == budget)


def _shape_run(shape: str, budget: int, run) -> ShapeRun:
    steady = [r.verify_s for r in run.steady_rounds] or [r.verify_s for r in run.rounds]
    return ShapeRun(shape, budget, len(run.token_ids), run.target_passes, run.tokens_per_pass, run.tokens_per_s,
                    1000 * measure.median(steady))


DEFAULT_BUDGETS = (4, 8, 16)  # the page's: chain against tree at three widths, within a class's time on a CPU


def chain_vs_tree(target, draft, ids: list[int], settings: DecodeSettings = DecodeSettings(), *,
                  budgets: Sequence[int] = DEFAULT_BUDGETS, branch: int = 2, max_depth: int = 8,
                  eos_token_id=None, vocab: int | None = None, cost_reps: int = 3,
                  progress: Progress = None) -> ChainVsTree:
    """First the target's pass over 1 and N + 1 tokens, timed; then per budget N (a unit of progress): a chain
    drafting k = N (at most K_MAX) and a tree of N nodes, same prompt and seed, one after the other, with
    `settings` (its k replaced by N). A stop (core.errors.Stopped) keeps the budgets finished in its partial
    (a ChainVsTree; None before the first)."""
    budgets = sorted({int(b) for b in budgets})
    if not budgets:
        raise InvalidSetting("Pick at least one node budget.")
    common = dict(eos_token_id=eos_token_id, vocab=vocab)
    runs, outputs, done = [], [], []

    def so_far() -> ChainVsTree | None:
        if not done:
            return None
        sizes = {1} | {b + 1 for b in done}
        return ChainVsTree(list(done), list(runs), {n: r for n, r in ratio.items() if n in sizes},
                           all(o == outputs[0] for o in outputs), settings.greedy)

    units = Units(progress, len(budgets), partial=so_far)
    units.say("the target's pass over 1 and N + 1 tokens")
    ratio = measure.verify_ratios(forward_cost(target, n_tokens=tuple(sorted({1} | {b + 1 for b in budgets})),
                                               reps=cost_reps))
    for b in budgets:
        units.say(f"chain, k = {min(b, K_MAX)}")
        chain = speculative_decode(target, draft, ids, replace(settings, k=min(b, K_MAX), k_policy="fixed"), **common)
        units.say(f"tree of {b} nodes", 0.5)
        tree = tree_decode(target, draft, ids, settings, budget=b, branch=branch, max_depth=max_depth, **common)
        runs += [_shape_run("chain", b, chain), _shape_run("tree", b, tree)]
        outputs += [chain.token_ids, tree.token_ids]
        done.append(b)
        units.unit_done(f"{b} nodes")
    return so_far()


def chain_vs_tree_verdict(cmp: ChainVsTree) -> list[str]:
    """The comparison in sentences, every figure taken from the measurement."""
    tree = {b: cmp.get("tree", b) for b in cmp.budgets}
    chain = {b: cmp.get("chain", b) for b in cmp.budgets}
    more = [b for b in cmp.budgets if tree[b].tokens_per_pass > chain[b].tokens_per_pass]
    out = [f"Tokens per target pass: the tree beat the chain at {len(more)} of {len(cmp.budgets)} budgets"
           + (f" ({', '.join(map(str, more))} nodes)" if more else "") + "; "
           + ", ".join(f"{b} nodes {tree[b].tokens_per_pass:.2f} vs {chain[b].tokens_per_pass:.2f}"
                       for b in cmp.budgets) + "."]
    sizes = sorted(cmp.verify_ratio)
    flat = theory.flat_until(sizes, [cmp.verify_ratio[n] for n in sizes], tol=FREE_TOL)
    costly = [b for b in cmp.budgets if b + 1 > flat]
    best_t = max(cmp.budgets, key=lambda b: tree[b].tokens_per_s)
    best_c = max(cmp.budgets, key=lambda b: chain[b].tokens_per_s)
    out.append(f"Fastest tree: {best_t} nodes, {tree[best_t].tokens_per_s:.1f} tokens/s; fastest chain: "
               f"k = {min(best_c, K_MAX)}, {chain[best_c].tokens_per_s:.1f} tokens/s.")
    if not costly:
        out.append(f"On this device a target pass over up to {sizes[-1]} tokens stays within {FREE_TOL}× the cost "
                   "of a one-token pass: verifying a wide tree is nearly free here, so extra nodes cost little.")
        return out
    b = costly[0]
    # the trees wider than the fastest one that paid for a costlier pass and made fewer tokens/s
    lost = [c for c in costly if c > best_t and tree[c].tokens_per_s < tree[best_t].tokens_per_s]
    out.append(f"The exception, measured here: a target pass stays within {FREE_TOL}× a one-token pass only up "
               f"to {explain.count(flat, 'token')}. A tree of {b} nodes needs a pass over {b + 1} tokens, which costs "
               f"{cmp.verify_ratio[b + 1]:.2f}× a one-token pass"
               + (f" (and {cmp.verify_ratio[costly[-1] + 1]:.2f}× for {costly[-1]} nodes)" if len(costly) > 1
                  else "") + ". "
               + (f"Past that point the wider trees ({', '.join(map(str, lost))} nodes) made fewer tokens/s than "
                  f"the {best_t}-node tree: the extra tokens per pass did not pay for the wider pass."
                  if lost else "Even so, the wider trees here gained enough tokens per pass to pay for it."))
    return out


# --------------------------------------------------------------------------
# the text so far


def text_html(prompt_text: str, rounds: Sequence[TreeRound], decode: Callable[[int], str],
              reply: bool = False) -> str:
    """The text so far as HTML (like render.tokens_html for chains): accepted path tokens, then the target's own;
    reply: the prompt was a chat message (render.text_block)."""
    from specviz.teaching.render import text_block

    toks = []
    for r in rounds:
        for j, tok in enumerate(r.emitted):
            state = "accepted" if j < r.n_accepted else (r.extra_kind or "accepted")
            toks.append((decode(tok), state, f"round {r.index + 1} · {state}"))
    return text_block(prompt_text, toks, reply)
