"""The words a student meets on the pages, each defined once: the Glossary page lists them all, and each page's
"Words on this page" expander lists the ones that page shows (pages/common/ui.words_on_page).

A Term is found in a text by its name or any of its other forms (`also`), as a whole word: "c" is found in
"k·c" but not in "cost". Forms are matched ignoring case unless the term says `case=True` (single letters and
symbols: "T" is a temperature, "t" is not). `found_in(text)` is what the pages' tests use to check that every
term a page shows is defined on it, and what the Lessons page uses to list a step's words from its own text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Term:
    """A word (name), what it means in this app (definition), and the other ways the pages write it (also)."""

    name: str
    definition: str
    also: tuple[str, ...] = ()
    case: bool = False  # match the forms with their case as written

    @cached_property
    def pattern(self) -> re.Pattern:
        """Any form as a whole word: a form that starts (ends) with a letter or digit must not follow (precede)
        one; a form that starts or ends with a symbol ("±", "E[") needs no such edge there."""
        parts = []
        for form in sorted((self.name, *self.also), key=len, reverse=True):
            head = r"(?<!\w)" if re.match(r"\w", form) else ""
            tail = r"(?!\w)" if re.search(r"\w$", form) else ""
            parts.append(head + re.escape(form) + tail)
        return re.compile("|".join(parts), 0 if self.case else re.IGNORECASE)

    def found_in(self, text: str) -> bool:
        return self.pattern.search(text) is not None


def _t(name: str, definition: str, *also: str, case: bool = False) -> Term:
    return Term(name, definition, tuple(also), case)


TERMS: tuple[Term, ...] = (
    # --- the method ---------------------------------------------------------------------------------------------
    _t("token", "A piece of text the model reads or writes in one step: a word, part of a word, or a sign. "
       "A reply is written one token at a time.", "tokens"),
    _t("draft model", "The small, fast model that guesses (drafts) the next few tokens. Also called the draft or "
       "the drafter.", "draft", "drafts", "drafted", "drafting", "drafter"),
    _t("target model", "The large model whose text we want. It checks the draft's guesses; what it would not have "
       "written itself is never kept. Also called the target.", "target"),
    _t("speculative decoding", "Writing with two models: the draft guesses a few tokens, the target checks them "
       "all in one pass and keeps the ones it agrees with. Same text (or distribution), fewer target passes.",
       "speculative", "speculation"),
    _t("round", "One cycle of speculative decoding: the draft proposes k tokens, the target checks them in one "
       "pass, the agreeing ones are kept.", "rounds"),
    _t("forward pass", "One run of a model over its input, giving a prediction for the next token at each "
       "position. Its cost is mostly reading the model's weights from memory.", "pass", "passes",
       "forward passes", "forward time"),
    _t("verify", "The target's pass over the drafted tokens that decides which to keep. The verify cost is "
       "its time next to a pass over one token.", "verifies", "verified", "verifying", "verification",
       "verify cost"),
    _t("judged", "A drafted token the target has ruled on. Drafts after the first rejection in a round are "
       "thrown away unjudged, so counted α is accepted ÷ judged."),
    _t("k", "How many tokens the draft proposes in a round (the draft length). A page says whether a k is the "
       "setting, where a chooser starts, or the mean drafted.", case=True),
    _t("accepted token", "A drafted token the target agrees with: it is kept, and costs no extra target pass.",
       "accepted", "accept", "accepts", "acceptance", "kept"),
    _t("rejected token", "A drafted token the target does not keep. It and every draft after it in the round "
       "are thrown away.", "rejected", "reject", "rejects", "rejection", "rejections", "refused"),
    _t("correction token", "The target's own token put in place of the first rejected draft; a round always "
       "makes at least this one token.", "correction", "corrections"),
    _t("bonus token", "When the target accepts all k drafts, its same pass already predicts one token more: "
       "that free extra token is the bonus.", "bonus"),
    _t("α", "The acceptance rate: the chance that the target accepts a drafted token. Counted α is accepted ÷ "
       "judged drafts; expected α is Σ min(p, q), the chance computed from the two models' probabilities.",
       "alpha", case=True),
    _t("c", "The cost ratio: the time of one draft step divided by the time of one target pass. Small c means "
       "drafting is cheap.", "cost ratio", case=True),
    _t("tokens per pass", "How many tokens one target pass yields on average: the accepted drafts plus the "
       "correction or bonus. (1 − α^(k+1)) / (1 − α) in theory.", "tokens per target pass", "tokens/pass",
       "tokens / pass"),
    _t("E[…]", "The expected value: the average you would get over very many repeats. E[tokens per pass] is "
       "the average number of tokens per target pass.", "E[", case=True),
    _t("speedup", "How many times faster speculative decoding wrote the same text than the target alone "
       "(2× = half the time). 1× means no gain.", "speedups"),
    _t("target alone", "The baseline: the target writing by itself, one token per pass, with no draft. "
       "Speedups are measured against it.", "target-alone", "target-only", "baseline"),
    _t("tokens per second", "How many tokens a run writes per second of wall time.", "tokens/s", "tok/s"),
    _t("end-to-end", "Counting every part of the run, the first round (which also reads the prompt) included.",),
    _t("adaptive k", "A k policy that drafts one more token after a round where all were accepted and one "
       "fewer after a rejection.", "adaptive"),
    _t("best-k chooser", "A k policy that estimates α, c and the verify cost as it runs and drafts while one "
       "more draft is expected to pay.", "best k", "best-k"),
    _t("prompt", "The text the model is asked to continue or answer.", "prompts"),
    _t("prompt lookup", "A draft with no model: it proposes the tokens that followed the last few tokens "
       "where they appeared earlier in the prompt or reply (n-grams).", "prompt-lookup", "n-grams", "n-gram"),
    _t("early exit", "Self-speculation: the draft is the target's own first L layers, with no second model. "
       "Deeper exits draft better but cost more.", "early-exit", "self-speculation", "self-speculative"),
    _t("layer", "One of the stacked blocks a model runs in turn; L counts them for an early exit.", "layers"),
    _t("LM head", "The model's last layer: it turns the final hidden state into a score (logit) for every "
       "token of the vocabulary.", "final norm"),
    _t("token tree", "A draft of alternatives: at each depth the draft proposes several children, so one "
       "target pass checks many branches and keeps the longest accepted path.", "tree", "trees"),
    _t("chain", "The usual draft: one guess per position, one after another. When a guess is wrong, "
       "everything after it is lost.", "chains"),
    _t("node budget", "How many drafted tokens (nodes) a token tree or chain sends to one target pass.",
       "nodes", "node"),
    _t("Medusa", "A speculative method that drafts with extra prediction heads on the target itself, and uses "
       "the lossy typical-acceptance rule."),
    # --- probabilities and sampling -----------------------------------------------------------------------------
    _t("probability distribution", "The model's chance for every possible next token; the chances add up "
       "to 1.", "distribution", "distributions", "probability", "probabilities"),
    _t("logits", "The raw scores a model gives every token before they are turned into probabilities "
       "(softmax).", "logit", "softmax"),
    _t("p", "The target's probability distribution for the next token (p(x): its chance for token x).",
       case=True),
    _t("q", "The draft's probability distribution for the next token (q(x): its chance for token x).",
       case=True),
    _t("argmax", "The token with the highest probability: the model's top choice."),
    _t("greedy decoding", "Always writing the top choice (argmax); temperature 0. The same prompt always gives "
       "the same text.", "greedy"),
    _t("sampling", "Drawing the next token at random according to the probabilities, instead of always the top "
       "one.", "sampled", "sample", "samples", "samplings"),
    _t("temperature", "Sharpens (below 1) or flattens (above 1) the probabilities before sampling; 0 means "
       "greedy.", "temperatures"),
    _t("T", "Short for temperature: T = 0 is greedy decoding.", case=True),
    _t("top-p", "Sampling only from the most likely tokens whose chances add up to p (1 = all tokens)."),
    _t("seed", "The number that starts the random draws: the same seed gives the same sampled run.",
       "seeds", "seeded"),
    _t("rejection sampling", "The rule that keeps a drafted token x with chance min(1, p(x)/q(x)) and, after a "
       "rejection, draws from the residual. It leaves the output distributed exactly as the target's.",
       "speculative sampling"),
    _t("residual", "norm(max(0, p − q)): what the target wanted more than the draft offered, rescaled to add up "
       "to 1. After a rejection the correction is drawn from it.", "norm(max(0, p − q))"),
    _t("lossless", "An acceptance rule that keeps the target's output exactly (same text, or same "
       "distribution)."),
    _t("lossy", "An acceptance rule that keeps more drafts but changes what the target would have written."),
    _t("exact-match rule", "Keep a drafted token only if the target, sampling on its own with the same random "
       "draw, would have written it.", "exact-match"),
    _t("typical acceptance", "A lossy rule (Medusa's): keep a draft the target finds plausible enough, set by "
       "ε and δ.", "typical"),
    _t("threshold rule", "A lossy rule: keep a draft whenever the target gives it at least chance τ.",
       "threshold"),
    _t("entropy", "How unsure a distribution is: 0 when one token is certain, larger when many are plausible."),
    _t("nats", "The unit of entropy when it is computed with the natural logarithm (1 nat ≈ 1.44 bits).",
       "nat"),
    # --- statistics ---------------------------------------------------------------------------------------------
    _t("total variation distance", "How far apart two distributions are: half the sum of their differences "
       "over all tokens. 0 = identical, 1 = nothing in common.", "total variation", "total-variation", "TV",
       "TV distance"),
    _t("±", "Plus or minus. In \"16.00 ± 5.51\" 16.00 is the measured mean and 5.51 its standard error: "
       "how much the mean would typically move if the run were repeated. The true value is usually within "
       "two of these of the mean.", "standard error", "stderr"),
    _t("95% interval", "A range that would hold the true value in 95 of 100 repeats of the measurement; error "
       "bars show it.", "confidence interval", "error bars", "error bar", "interval"),
    _t("Wilson interval", "A 95% interval for a fraction (accepted ÷ judged) that stays inside 0–1 and works "
       "for few samples.", "Wilson"),
    _t("truncated geometric", "The law α^n(1 − α) of how many drafts a round accepts when each is accepted "
       "independently with chance α; truncated because a round cannot accept more than k.",
       "geometric"),
    _t("Σ", "Sum: Σ min(p, q) adds min(p(x), q(x)) over every token x.", case=True),
    _t("wall time", "Time as a clock on the wall measures it: what a person waiting sees.", "wall-clock"),
    _t("median", "The middle value of repeated measurements: half are below, half above. Unlike the mean, one "
       "slow outlier does not move it."),
    _t("IQR", "Interquartile range: the middle half of the measurements, from the 25th to the 75th "
       "percentile. The IQR bars show how much repeated timings spread.", "interquartile range"),
    _t("noise", "The spread a measurement shows by chance alone, with nothing wrong."),
    _t("correlate", "Move together: a correlation of −1 means one goes down exactly as the other goes up, 0 "
       "means no linear relation.", "correlation", "correlates"),
    # --- the machine --------------------------------------------------------------------------------------------
    _t("weights", "The model's learned numbers (its parameters). Every forward pass reads all of them.",
       "weight", "parameters"),
    _t("memory bandwidth", "How many bytes per second the device can read from memory (GB/s).",
       "bandwidth"),
    _t("memory-bound", "Limited by reading the weights from memory, not by arithmetic: a pass over a few "
       "tokens costs about the same as over one.", "memory bound"),
    _t("compute-bound", "Limited by arithmetic: each extra token in a pass costs extra time.",
       "compute bound"),
    _t("batch", "Several sequences (users) processed in one forward pass. Batch size: how many.",
       "batches", "batch size", "batch sizes"),
    _t("KV cache", "What a model keeps of the text so far (keys and values) so each pass reads only the new "
       "tokens. KV-cache rollback: after a rejection, the cached rejected drafts are dropped again.",
       "KV-cache", "KV-cache rollback", "rollback"),
    _t("oneDNN", "Intel's library of fast CPU routines that PyTorch uses; weights packed for it are read faster."),
    _t("dtype", "The number format of the model's weights and arithmetic: float32, bfloat16, int8.",
       "precision", "precisions"),
    _t("float32", "32-bit floating point: the reference precision, 4 bytes per weight."),
    _t("bfloat16", "16-bit floating point with float32's range: half the bytes, fewer digits, so near-ties can "
       "flip."),
    _t("int8", "8-bit integer weights with a scale: a quarter of float32's bytes; a quantized model."),
    _t("int4", "4-bit integer weights: an eighth of float32's bytes; slow on a CPU without special kernels."),
    _t("quantized", "Stored in fewer bits per weight (int8, int4): smaller and often faster, slightly "
       "different numbers.", "quantization", "quantize"),
    _t("GiB", "Gibibyte: 2^30 bytes (about 1.07 billion). GB/s is billions of bytes per second.", "MiB",
       "GB/s", case=True),
    _t("tokenizer", "The code that cuts text into tokens; draft and target must share it to compare tokens.",
       "tokenizers", "vocabulary"),
    _t("chat template", "The wrapping that marks a prompt as a user's message, so an instruct model answers "
       "it instead of continuing it.", "chat"),
    _t("outside load", "Other programs using the CPU while a timing ran; such timings may be slower than the "
       "device can do."),
    _t("recording", "A real run saved with its tokens and timings, replayed with no model loaded (the "
       "Recorded source).", "recordings", "recorded"),
)

BY_NAME: dict[str, Term] = {t.name: t for t in TERMS}


def term(name: str) -> Term:
    """The term of this name; a name the glossary lacks is an error (a page that lists a word it never defines)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in the glossary (specviz/teaching/glossary.py)") from None


def alphabetical(terms=TERMS) -> list[Term]:
    """Terms as a glossary lists them: by name, ignoring case and symbols' places (α and ± sort with the letters
    a and p they stand for: "alpha", "plus-minus")."""
    spelled = {"α": "alpha", "±": "plus minus", "E[…]": "expected value"}
    return sorted(terms, key=lambda t: (spelled.get(t.name, t.name).casefold(), t.name))


def found_in(text: str) -> list[Term]:
    """The terms this text uses, in glossary order."""
    return [t for t in TERMS if t.found_in(text)]


def entry_md(t: Term) -> str:
    """One term as markdown: its name in bold, then its definition."""
    return f"**{t.name}**: {t.definition}"


def figure_text(spec: dict) -> str:
    """What a chart says in words, from its plotly JSON (fig.to_plotly_json()): title, subtitle, axis titles,
    annotations and legend names."""
    lay = spec.get("layout", {})

    def title(v) -> str:
        return str(v.get("text") or "") if isinstance(v, dict) else str(v or "")

    out = [title(lay.get("title"))]
    if isinstance(lay.get("title"), dict):
        out.append(title(lay["title"].get("subtitle")))
    out += [title(axis.get("title")) for key, axis in lay.items()
            if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict)]
    out += [str(a.get("text") or "") for a in lay.get("annotations", ())]
    out += [str(t.get("name") or "") for t in spec.get("data", ())]
    return "\n".join(s for s in out if s)


# --- the words each page shows (its "Words on this page"), by page file; tests/test_glossary.py checks each list
# against the page's text in recorded mode, so a page that gains a word fails until the word is listed here
_ROUND = ("token", "draft model", "target model", "speculative decoding", "round", "forward pass", "verify",
          "judged", "k", "accepted token", "rejected token", "correction token", "bonus token")
_SAMPLING = ("prompt", "probability distribution", "p", "q", "greedy decoding", "sampling", "temperature", "T",
             "seed")
_SPEED = ("α", "c", "tokens per pass", "E[…]", "speedup", "target alone")
_MACHINE = ("dtype", "float32", "bfloat16", "int8", "quantized", "weights", "recording")

PAGE_WORDS: dict[str, tuple[str, ...]] = {
    "app": (*_ROUND, *_SAMPLING, *_SPEED, *_MACHINE, "top-p", "argmax", "±", "Σ", "median", "tokens per second",
            "adaptive k", "best-k chooser", "prompt lookup", "token tree", "chain", "node budget", "chat template",
            "KV cache", "outside load", "wall time", "end-to-end", "int4"),
    "0_What_this_app_demonstrates": (*_ROUND, *_SAMPLING, *_SPEED, *_MACHINE, "adaptive k", "best-k chooser",
                                     "tokens per second",
                                     "prompt lookup", "early exit", "layer", "Medusa", "rejection sampling",
                                     "residual", "entropy", "total variation distance", "Σ", "noise",
                                     "memory bandwidth", "memory-bound", "compute-bound", "batch", "oneDNN",
                                     "tokenizer", "chat template"),
    "1_Slow_motion_round": (*_ROUND, *_SAMPLING, *_MACHINE, "argmax", "residual", "logits", "Σ", "α"),
    "2_Acceptance_lab": (*_ROUND, *_SAMPLING, *_MACHINE, "α", "tokens per pass", "entropy", "nats",
                         "95% interval", "Wilson interval", "truncated geometric", "Σ", "correlate"),
    "3_Speedup": (*_ROUND, *_SAMPLING, *_SPEED, *_MACHINE, "tokens per second", "end-to-end", "adaptive k",
                  "best-k chooser", "early exit", "layer", "LM head", "wall time", "KV cache", "outside load"),
    "4_Why_it_is_fast": (*_ROUND, *_MACHINE, "tokens per pass", "median", "IQR", "memory bandwidth",
                         "memory-bound", "compute-bound", "batch", "GiB", "oneDNN", "outside load"),
    "5_Exactness": (*_ROUND, *_SAMPLING, *_MACHINE, "speedup", "target alone", "Medusa", "argmax",
                    "rejection sampling", "residual", "lossless", "lossy", "exact-match rule", "typical acceptance",
                    "threshold rule", "total variation distance", "Σ", "noise"),
    "6_Theory": (*_ROUND, *_SPEED, "best-k chooser", "probability distribution"),
    # the Lessons page adds the words of the step on screen (glossary.found_in of its text); these are its own,
    # the live sidebar's (pair picker, precisions, memory note) included
    "8_Lessons": ("token", "draft model", "target model", "speculative decoding", "prompt", "seed", "recording",
                  "dtype", "float32", "bfloat16", "int8", "int4", "quantized", "GiB", "early exit", "tokenizer"),
    "9_Token_tree": (*_ROUND, *_SAMPLING, *_MACHINE, "tokens per pass", "tokens per second", "best-k chooser",
                     "token tree", "chain", "node budget", "Medusa", "rejection sampling", "verify"),
}
