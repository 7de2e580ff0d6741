"""Preset prompts by domain, and turning text into input ids.

Acceptance depends on how predictable the text is, not on its quality: code,
lists and repetition accept well; open-ended creative text accepts poorly.
The presets cover those domains so a learner can compare them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidSetting


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
    Preset("Creative story", "creative",
           "Write a surreal four-line poem about a clock that eats clouds."),
    Preset("Repetition", "repetition",
           "Write the same paragraph three times: 'The quick brown fox jumps over the lazy dog. "
           "It does so every morning before breakfast.'"),
    # the textbook example: a raw continuation, no chat template
    Preset("The capital of France", "factual", "The capital of France is", chat=False),
    # for the acceptance lab (see LAB_PROMPTS): answers that run past 48 tokens and start with content
    Preset("Newton's laws", "factual", "State Newton's three laws of motion, one sentence each."),
    Preset("Surreal story", "creative",
           "Continue this surreal story in your own words: The lighthouse keeper kept a jar of lost echoes, "
           "and one night the jar began to hum."),
]

# The acceptance lab's prompt per domain (names of PRESETS). Each answer starts with its content, not a
# preamble both models would share ("Sure! Here is..."), and the creative one does not fall into repeating
# a line, as the four-line poem does when greedy, so the measured α reflects the domain.
LAB_PROMPTS: dict[str, str] = {
    "code": "Python function",
    "list": "List of planets",
    "factual": "Newton's laws",
    "creative": "Surreal story",
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


def lab_prompts() -> dict[str, Preset]:
    """The acceptance lab's prompt per domain."""
    return {d: preset(name) for d, name in LAB_PROMPTS.items()}


def encode(tokenizer, text: str, chat: bool = True) -> list[int]:
    """Token ids for `text`; with chat=True, wrapped in the tokenizer's chat template."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSetting("The prompt is empty: type something for the model to continue.")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]
