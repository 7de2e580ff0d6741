"""Turning logits into a distribution, sampling from it, and the acceptance rule.

gpt-fast style: small functions that the engine composes.

  logits_to_probs   temperature, top-k and top-p, applied identically to the
                    target's p and the draft's q (the rule is only exact if
                    both sides see the same transformation)
  sample            draw one token id with a seeded CPU generator (the
                    distribution may live on a GPU: only ids come back)
  accept_token      the rule of Leviathan et al. 2023, Algorithm 1
  residual          norm(max(0, p - q)), what a correction is drawn from
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.core.settings import is_greedy


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Softmax of logits/temperature restricted to top-k and the top-p nucleus.

    logits: (..., V). Returns float probabilities of the same shape; rows sum to 1.
    temperature must be > 0 here (temperature 0 means greedy, handled by argmax).
    """
    x = logits.double() if logits.dtype == torch.float64 else logits.float()
    x = x / temperature
    if top_k and top_k < x.shape[-1]:
        # keep the k largest logits, mask the rest
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]  # (..., 1)
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        # keep the smallest set of most likely tokens whose mass reaches top_p
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop_sorted = (cum - sorted_p) >= top_p  # mass before this token already reaches top_p
        drop_sorted[..., 0] = False  # the most likely token always stays (a top_p below float precision kept none)
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token id from a (V,) distribution (need not be normalised), reproducible under `generator` (CPU).

    Inverts the CDF with one uniform: exact (the CDF is summed in float64) and
    ~20x cheaper than torch.multinomial, which draws one exponential per
    vocabulary entry (151,936 of them) for a single sample.
    """
    cdf = probs.double().cumsum(-1)  # (V,), on the distribution's device
    u = torch.rand((), generator=generator, dtype=torch.float64).to(cdf.device) * cdf[-1]
    i = int(torch.searchsorted(cdf, u, right=True))  # first index whose CDF exceeds u
    if i >= cdf.shape[-1] or not probs[i] > 0:  # only when u * total rounds up to total
        i = int(torch.nonzero(probs > 0)[-1])
    return i


def uniform(generator: torch.Generator) -> float:
    """One draw of u ~ U[0, 1) from the run's generator."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def accept_token(u: float, p: float, q: float) -> bool:
    """Speculative sampling acceptance (Leviathan et al. 2023, Algorithm 1).

    Keep the drafted token with probability min(1, p/q). With u in [0, 1), the
    test u < p/q does exactly that and always rejects a token with p = 0.
    """
    return u * q < p  # u < p/q without dividing by a tiny q


def residual(p: torch.Tensor, q: torch.Tensor | None, drafted: int) -> torch.Tensor:
    """norm(max(0, p - q)) over the vocabulary: the distribution of a correction.

    q=None means the draft proposed `drafted` with certainty (a one-hot q, as in
    prompt lookup), so the residual is p with the drafted token removed.
    """
    if q is None:
        r = p.clone()
        r[drafted] = 0.0
    else:
        r = torch.clamp(p - q, min=0.0)  # (V,)
    total = r.sum()
    if not total > 0:  # only reachable through rounding when p == q; p is then right
        return p
    return r / total


@dataclass
class Sampler:
    """The decoding settings of one run plus its seeded random stream.

    temperature 0 means greedy: decisions use argmax, and the distributions
    that are recorded for drawing are the plain softmax at temperature 1.
    """

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator

    @staticmethod
    def create(temperature: float, top_k: int, top_p: float, seed: int) -> "Sampler":
        g = torch.Generator(device="cpu")
        g.manual_seed(int(seed))
        return Sampler(float(temperature), int(top_k), float(top_p), g)

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution decisions are made under (display-only when greedy)."""
        if self.greedy:
            return logits_to_probs(logits, 1.0)
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)

    def pick(self, logits: torch.Tensor, probs: torch.Tensor) -> int:
        """Choose a token: argmax of the logits if greedy, else a sample of probs."""
        if self.greedy:
            return int(torch.argmax(logits, dim=-1))
        return sample(probs, self.generator)
