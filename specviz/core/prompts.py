"""Preset prompts by domain, and turning text into input ids.

Acceptance depends on how predictable the text is, not on its quality: code,
lists and repetition accept well; open-ended creative text accepts poorly.
The presets cover those domains so a learner can compare them.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.core import limits
from specviz.core.errors import InvalidSetting
from specviz.core.settings import DecodeSettings


@dataclass(frozen=True)
class Preset:
    name: str
    domain: str
    text: str
    chat: bool = True  # wrap in the model's chat template (instruct models)


PRESETS: list[Preset] = [
    Preset("Python function", "code",
           "Write a Python function `is_prime(n)` that returns True if n is prime. Only the code."),
    Preset("List of planets", "list",
           "List the eight planets of the solar system in order from the Sun, one per line, numbered."),
    Preset("Factual answer", "factual",
           "In two sentences, what does the mitochondrion do in a cell?"),
    # the one creative text of the app (main page, lessons, acceptance lab): a continuation in the model's own
    # words does not fall into repeating a line when greedy, as a short poem does (it then accepts like a list),
    # and the answer starts with its content, not a preamble both models share ("Sure! Here is..."), so its α
    # is the domain's
    Preset("Creative story", "creative",
           "Continue this surreal story in your own words: The lighthouse keeper kept a jar of lost echoes, "
           "and one night the jar began to hum."),
    Preset("Repetition", "repetition",
           "Write the same paragraph three times: 'The quick brown fox jumps over the lazy dog. "
           "It does so every morning before breakfast.'"),
    # the textbook example: a raw continuation, no chat template
    Preset("The capital of France", "factual", "The capital of France is", chat=False),
    # for the acceptance lab (see LAB_PROMPTS): answers that run past 48 tokens and start with content
    Preset("Newton's laws", "factual", "State Newton's three laws of motion, one sentence each."),
]

# The acceptance lab's prompt per domain (names of PRESETS). Each answer starts with its content, not a
# preamble both models would share ("Sure! Here is..."), so the measured α reflects the domain.
LAB_PROMPTS: dict[str, str] = {
    "code": "Python function",
    "list": "List of planets",
    "factual": "Newton's laws",
    "creative": "Creative story",
    "repetition": "Repetition",
}
LAB_DEFAULT_DOMAINS = ("code", "list", "factual", "creative")  # about a minute at 48 tokens on a laptop CPU

DOMAINS = ["code", "list", "factual", "creative", "repetition"]


def preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise InvalidSetting(f"Unknown preset {name!r}. Presets: {', '.join(p.name for p in PRESETS)}.")


def domain_prompts() -> dict[str, Preset]:
    """One chat preset per domain (for sweeps and the benchmark)."""
    out: dict[str, Preset] = {}
    for p in PRESETS:
        if p.chat and p.domain not in out:
            out[p.domain] = p
    return out


# Other prompts of the same domains, never shown as presets: the benchmark checks on them that a
# result is not tuned to the presets (`bench --prompt-set held-out`).
HELD_OUT: list[Preset] = [
    Preset("FizzBuzz function", "code",
           "Write a Python function `fizzbuzz(n)` that returns the FizzBuzz strings from 1 to n. Only the code."),
    Preset("Days of the week", "list", "List the seven days of the week, one per line, numbered."),
    Preset("Autumn leaves", "factual", "In two sentences, why do leaves change colour in autumn?"),
    Preset("Lighthouse poem", "creative", "Write a short poem about a lighthouse that dreams of the sea."),
]


@dataclass(frozen=True)
class FirstRun:
    """What the main page runs when a newcomer presses Run without touching anything."""

    preset: str
    k: int
    k_policy: str
    max_new_tokens: int
    temperature: float = DecodeSettings.temperature


# the decoding defaults (DecodeSettings), with the best-k chooser
FIRST_RUN = FirstRun(preset="Python function", k=DecodeSettings.k, k_policy="best",
                     max_new_tokens=DecodeSettings.max_new_tokens)


def bench_prompts(prompt_set: str = "bench") -> dict[str, Preset]:
    """Prompts by name for the benchmark: 'bench', one preset per domain plus 'first-run' (the
    main page's default prompt); 'held-out', the HELD_OUT prompts by domain."""
    if prompt_set == "held-out":
        return {p.domain: p for p in HELD_OUT}
    if prompt_set != "bench":
        raise InvalidSetting(f"prompt set must be 'bench' or 'held-out', got {prompt_set!r}.")
    return {**domain_prompts(), "first-run": preset(FIRST_RUN.preset)}


def lab_prompts() -> dict[str, Preset]:
    """The acceptance lab's prompt per domain."""
    return {d: preset(name) for d, name in LAB_PROMPTS.items()}


def encode(tokenizer, text: str, chat: bool = True) -> list[int]:
    """Token ids for `text`; with chat=True, wrapped in the tokenizer's chat template.

    Raw text (chat=False, or no template) gets the tokenizer's own special tokens (a BOS
    where the model was trained with one), as transformers' text-generation pipeline does;
    a template writes its special tokens itself. The one encoder for the app and the CLI.
    InvalidSetting for an empty prompt, or one longer than specviz.core.limits allows.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidSetting("The prompt is empty: type something for the model to continue.")
    if len(text) > limits.max_prompt_chars():
        raise InvalidSetting(f"The prompt has {len(text)} characters, more than the limit of "
                             f"{limits.max_prompt_chars()} here: shorten it.")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    else:
        ids = tokenizer(text)["input_ids"]
    limits.check_prompt_tokens(len(ids))  # prefill time and the KV cache grow with it
    return [int(t) for t in ids]
