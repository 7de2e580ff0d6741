"""The acceptance-rule lab: which ways of keeping a drafted token preserve the target's distribution.

One position (the first new token), one draft distribution q and one target
distribution p, and four rules for deciding what comes out:

  rejection    keep the drafted d with probability min(1, p(d)/q(d)), else draw
               from norm(max(0, p − q)) (sampling.accept_token / sampling.residual).
               Lossless; it accepts Σ min(p, q), the most any lossless rule can.
  exact-match  sample the target's own token t ~ p; keep d only if d == t, else
               emit t. Lossless (the output is always t), but it accepts only Σ p·q.
  typical      Medusa's typical acceptance: keep d if p(d) > min(ε, δ·exp(−H(p))).
               Lossy.
  threshold    keep d if p(d) ≥ τ. Lossy.

For typical and threshold, a refused draft is replaced by the target's own
token **sampled from p** (not its argmax), so the only thing that bends the
distribution is the acceptance test itself.

Each rule is measured twice: exactly (the output distribution in closed form,
hence its acceptance and its total-variation distance to p) and by sampling
n seeded trials. Plain data out (RuleLab), drawn by charts.fig_rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from specviz.core.errors import InvalidSetting
from specviz.decoding.sampling import accept_token, logits_to_probs, residual
from specviz.core.theory import expected_tv_noise, simulate_tv_noise

KINDS = ("rejection", "exact-match", "typical", "threshold")
LOSSLESS = frozenset({"rejection", "exact-match"})
Residual = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


@dataclass(frozen=True)
class Rule:
    """One acceptance rule and its setting (epsilon, delta for typical; tau for threshold)."""

    kind: str
    epsilon: float = 0.09  # typical: the hard floor of the threshold (Medusa's posterior_threshold)
    delta: float = 0.3  # typical: the entropy-scaled part (Medusa's posterior_alpha)
    tau: float = 0.1  # threshold: keep d if p(d) >= tau

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidSetting(f"acceptance rule {self.kind!r}: expected one of {', '.join(KINDS)}")
        for name in ("epsilon", "delta", "tau"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v <= 1):
                raise InvalidSetting(f"acceptance rule {self.kind}: {name} must be in [0, 1], got {v!r}")

    @property
    def lossless(self) -> bool:
        return self.kind in LOSSLESS

    @property
    def setting(self) -> str:
        if self.kind == "typical":
            return f"ε={self.epsilon:g}, δ={self.delta:g}"
        if self.kind == "threshold":
            return f"τ={self.tau:g}"
        return ""

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.setting})" if self.setting else self.kind


# Medusa's default (ε, δ) = (0.09, 0.3) between a looser and a stricter setting; three thresholds
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("rejection"),
    Rule("exact-match"),
    Rule("typical", epsilon=0.01, delta=0.1),
    Rule("typical", epsilon=0.09, delta=0.3),
    Rule("typical", epsilon=0.25, delta=0.5),
    Rule("threshold", tau=0.01),
    Rule("threshold", tau=0.05),
    Rule("threshold", tau=0.2),
)


@dataclass(frozen=True)
class RuleResult:
    """One rule at one setting: acceptance and TV to p, exact and sampled."""

    label: str
    kind: str
    setting: str
    lossless: bool  # the rule claims to keep p (rejection, exact-match)
    acceptance_exact: float  # P(the drafted token is kept)
    tv_exact: float  # TV(output distribution, p) in closed form
    acceptance_sampled: float  # fraction of n trials that kept the draft
    tv_sampled: float  # TV(empirical output frequencies, p)
    counts: dict[int, int]  # first emitted token -> how often, over n trials


@dataclass(frozen=True)
class RuleLab:
    """Every rule run on the same p and q, with the same seeds."""

    p: dict[int, float]  # the target's distribution (top tokens plus every observed one)
    q: dict[int, float]  # the draft's distribution, same ids
    temperature: float
    n: int
    seed: int
    noise_tv: float  # the expected TV that n exact samples of p give by noise alone, over the whole vocabulary
    results: tuple[RuleResult, ...]
    noise_tv95: float = float("nan")  # the TV noise alone stays under in 95% of such samplings (simulated)


# -----------------------------------------------------------------------------
# closed forms


def entropy(p: torch.Tensor) -> float:
    """H(p) in nats."""
    nz = p[p > 0].double()
    return float(-(nz * nz.log()).sum())


def keep_probability(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(V,) chance that a drafted token x is kept, for the rules whose test looks only at x.

    rejection: min(1, p/q); typical: 1[p > min(ε, δ·e^−H(p))]; threshold: 1[p ≥ τ].
    (exact-match keeps x only when the target's own sample equals it: p(x), see exact_outcome.)
    """
    if rule.kind == "rejection":
        return torch.where(q > 0, torch.clamp(p / q.clamp_min(1e-300), max=1.0), torch.zeros_like(p))
    if rule.kind == "typical":
        thr = min(rule.epsilon, rule.delta * math.exp(-entropy(p)))
        return (p > thr).to(p.dtype)
    if rule.kind == "threshold":
        return (p >= rule.tau).to(p.dtype)
    return p.clone()


def exact_outcome(rule: Rule, p: torch.Tensor, q: torch.Tensor,
                  residual_fn: Residual = residual) -> tuple[float, torch.Tensor]:
    """(acceptance, output distribution (V,)) of one rule, exactly.

    For rejection, typical and threshold: out = q·a + (1 − Σ q·a)·r, where a is
    keep_probability and r what a refusal draws from (the residual for rejection,
    p for the others). exact-match keeps a drafted x when the target's own sample t
    is x (a = p); a refusal emits t, which is y with probability p(y)·(1 − q(y))
    (t = y and the draft was not y), so out = q·p + p·(1 − q): p, with Σ p·q kept.
    """
    a = keep_probability(rule, p, q)  # (V,)
    kept = q * a  # (V,): drafted x and kept
    acc = float(kept.sum())
    if rule.kind == "exact-match":
        return acc, kept + p * (1.0 - q)  # refused: the target's t, where the draft drew something else
    fallback = residual_fn(p, q, 0) if rule.kind == "rejection" else p  # (V,), independent of the draft
    return acc, kept + (1.0 - acc) * fallback


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    """Total variation distance between two full distributions."""
    return 0.5 * float((a.double() - b.double()).abs().sum())


# -----------------------------------------------------------------------------
# sampling


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(n,) ids drawn from a (V,) distribution, one per uniform in u (n,).

    The batched form of sampling.sample: the CDF is summed in float64, and a u
    that rounds up to the total maps to the last token with mass.
    """
    cdf = probs.double().cumsum(-1)  # (V,)
    ids = torch.searchsorted(cdf, u * cdf[-1], right=True)  # (n,)
    last = int(torch.nonzero(probs > 0)[-1])
    return ids.clamp(max=last)


def sample_outcome(rule: Rule, p: torch.Tensor, q: torch.Tensor, n: int, seed: int,
                   residual_fn: Residual = residual) -> tuple[dict[int, int], int]:
    """n seeded trials of one rule: (first emitted token -> count, how many kept the draft).

    Every rule uses the same generator seeded with `seed`, so its drafts are the same
    tokens across rules. Draws per trial: the draft d ~ q, then one uniform for the
    test (rejection) or the target's own token t ~ p, then a refusal's replacement.
    """
    g = torch.Generator().manual_seed(int(seed))
    unif = lambda: torch.rand(n, generator=g, dtype=torch.float64)  # noqa: E731
    d = _inverse_cdf(q, unif())  # (n,) drafted tokens
    if rule.kind == "rejection":
        keep = accept_token(unif(), p[d].double(), q[d].double())  # (n,) u·q(d) < p(d), elementwise
        other = _inverse_cdf(residual_fn(p, q, 0), unif())  # (n,) corrections
    elif rule.kind == "exact-match":
        other = _inverse_cdf(p, unif())  # (n,) the target's own tokens
        keep = d == other
    else:
        keep = keep_probability(rule, p, q)[d] > 0  # (n,) a deterministic test of p(d)
        other = _inverse_cdf(p, unif())  # (n,) the target's own sample replaces a refused draft
    out = torch.where(keep, d, other)  # (n,)
    ids, cnt = torch.unique(out, return_counts=True)
    return {int(i): int(c) for i, c in zip(ids, cnt)}, int(keep.sum())


# -----------------------------------------------------------------------------
# the lab


def _check(p: torch.Tensor, q: torch.Tensor, n: int) -> None:
    if p.ndim != 1 or p.shape != q.shape:
        raise InvalidSetting(f"p and q must be two distributions over the same vocabulary, got {tuple(p.shape)} "
                             f"and {tuple(q.shape)}")
    if not (isinstance(n, int) and n >= 1):
        raise InvalidSetting(f"trials must be a whole number >= 1, got {n!r}")


def compare_rules(p: torch.Tensor, q: torch.Tensor, rules: Sequence[Rule] = DEFAULT_RULES, n: int = 20_000,
                  seed: int = 0, temperature: float = 1.0, top: int = 50,
                  residual_fn: Residual = residual) -> RuleLab:
    """Run every rule on one (p, q): exact acceptance and TV, and n seeded trials each.

    p, q: (V,) distributions over the same ids. `top` tokens of p (plus every
    observed one) are kept in the record; TVs are computed on the full vocabulary.
    residual_fn replaces sampling.residual (tests inject broken ones).
    """
    n = int(n)
    _check(p, q, n)
    p, q = p.double().cpu(), q.double().cpu()
    results = []
    for rule in rules:
        acc, out = exact_outcome(rule, p, q, residual_fn)
        counts, kept = sample_outcome(rule, p, q, n, seed, residual_fn)
        freq = torch.zeros_like(p)
        freq[list(counts)] = torch.tensor(list(counts.values()), dtype=p.dtype) / n
        results.append(RuleResult(rule.label, rule.kind, rule.setting, rule.lossless, acc, tv(out, p),
                                  kept / n, tv(freq, p), counts))
    keep = set(torch.topk(p, min(top, p.numel())).indices.tolist())
    for r in results:
        keep |= set(r.counts)
    ids = sorted(keep, key=lambda i: -float(p[i]))
    pd = {int(i): float(p[i]) for i in ids}
    return RuleLab(pd, {int(i): float(q[i]) for i in ids}, float(temperature), n, int(seed),
                   expected_tv_noise(p.numpy(), n), tuple(results), noise_tv95=simulate_tv_noise(p.numpy(), n).p95)


@torch.inference_mode()
def first_distributions(target, draft, input_ids: Sequence[int], temperature: float = 1.0, top_k: int = 0,
                        top_p: float = 1.0, vocab: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q): the target's and the draft's distributions (V,) for the first token after the prompt."""
    from specviz.teaching.experiments import first_logits

    if not temperature > 0:
        raise InvalidSetting("The rule lab compares sampling rules: pick a temperature above 0.")
    p_logits, q_logits = first_logits(target, draft, list(input_ids), vocab)  # (V,) each, over the shared ids
    return (logits_to_probs(p_logits.double(), temperature, top_k, top_p),
            logits_to_probs(q_logits.double(), temperature, top_k, top_p))


def rule_lab(target, draft, input_ids: Sequence[int], rules: Sequence[Rule] = DEFAULT_RULES, *, n: int = 20_000,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
             vocab: int | None = None, top: int = 50) -> RuleLab:
    """compare_rules on a real draft/target pair at the first position after input_ids."""
    p, q = first_distributions(target, draft, input_ids, temperature, top_k, top_p, vocab)
    return compare_rules(p, q, rules, n=n, seed=seed, temperature=temperature, top=top)


# -----------------------------------------------------------------------------
# chart and words

def rule_rows(lab: RuleLab) -> list[dict]:
    """One table row per rule: acceptance and TV, exact and sampled."""
    return [{"rule": r.kind, "setting": r.setting or "–", "keeps p": "yes" if r.lossless else "no",
             "kept (exact)": round(r.acceptance_exact, 4), "kept (sampled)": round(r.acceptance_sampled, 4),
             "TV to p (exact)": round(r.tv_exact, 4), "TV to p (sampled)": round(r.tv_sampled, 4)}
            for r in lab.results]


def rules_verdict(lab: RuleLab) -> str:
    """In words: which rules kept p here, which bent it and by how much, who accepted most."""
    lossless = [r for r in lab.results if r.lossless]
    lossy = [r for r in lab.results if not r.lossless]
    parts = []
    if lossless:
        parts.append("Lossless: " + "; ".join(f"{r.kind} keeps the draft {r.acceptance_exact:.3f} of the time, "
                                               f"sampled TV {r.tv_sampled:.3f}" for r in lossless)
                     + f" (noise alone: about {lab.noise_tv:.3f}, under {lab.noise_tv95:.3f} in 95 of 100 "
                       f"samplings).")
    if lossy:
        worst = max(lossy, key=lambda r: r.tv_exact)
        parts.append(f"Lossy: the worst here is {worst.label}, TV {worst.tv_exact:.3f} from p: "
                     f"{worst.tv_exact:.1%} of the probability is on the wrong tokens.")
    rej = next((r for r in lossless if r.kind == "rejection"), None)
    em = next((r for r in lossless if r.kind == "exact-match"), None)
    if rej and em:
        parts.append(f"Rejection sampling accepts Σ min(p, q) = {rej.acceptance_exact:.3f}, exact match only "
                     f"Σ p·q = {em.acceptance_exact:.3f}: both are exact, one is faster.")
    return " ".join(parts)
