"""What specviz demonstrates: the claims about speculative decoding, each with where it happens live.

Introductory material on speculative decoding makes a handful of claims. This
module is the one list of them: each with the paper or material it comes from,
the pages of the app that show it happening on real models, and what was
measured on this project's machine. The measured figures are not in this file: they are in
`measured.json` beside it, each group with the command that produced it, the machine and the date, and the
texts here are templates filled from it (`{bench_int8.best_code:.2f}`; a list joins with "/", or with the
separator after a "|": `{lab_defaults.counted:.2f|, }`, `|and` for "a, b and c"). `python -m specviz
claims-data REPORT.json --group NAME` rewrites a bench group from a bench report. The app's
page "What this app demonstrates" renders it, `docs/claims.md` is generated
from it (`python -m specviz.core.claims > docs/claims.md`; a test checks they agree),
and the other pages link to a claim with `link(n)`.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from specviz.core import theory

# page title in the sidebar -> its URL path ("" is the main page); file pages/N_<path>.py
PAGES: dict[str, str] = {
    "Main page": "",
    "Slow motion round": "Slow_motion_round",
    "Acceptance lab": "Acceptance_lab",
    "Speedup": "Speedup",
    "Why it is fast": "Why_it_is_fast",
    "Exactness": "Exactness",
    "Theory": "Theory",
}
PAGE_PATH = "What_this_app_demonstrates"  # this list's own page: pages/0_What_this_app_demonstrates.py
PAGE_TITLE = "What this app demonstrates"

LEVIATHAN = "Leviathan, Kalman & Matias 2023, *Fast Inference from Transformers via Speculative Decoding*"
CHEN = "Chen et al. 2023, *Accelerating Large Language Model Decoding with Speculative Sampling*"


@dataclass(frozen=True)
class Claim:
    number: int
    title: str  # a few words, the claim's heading
    claim: str  # what the material says, in this project's words
    source: str  # where the claim comes from
    pages: tuple[str, ...]  # keys of PAGES where it happens live
    shows: str  # what a learner sees there
    measured: str  # what was measured on this project's machine

    def to_dict(self) -> dict:
        return {"number": self.number, "title": self.title, "claim": self.claim, "source": self.source,
                "pages": list(self.pages), "shows": self.shows, "measured": self.measured}


MEASURED_PATH = Path(__file__).with_name("measured.json")  # the figures the claims state, with their provenance
MEASURED_FORMAT = "specviz.core.measured/1"
TEXTBOOK_K, TEXTBOOK_ALPHAS = 4, (0.5, 0.7, 0.8, 0.9)  # claim 8's example: the inputs the material quotes


def load_measured(path: Path = MEASURED_PATH) -> dict:
    """The data file: {"format", "about", "groups": {name: {command, machine, date, update, figures}}}."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != MEASURED_FORMAT:
        raise ValueError(f"{path}: not a {MEASURED_FORMAT} file")
    return data


def update_group(data: dict, name: str, figures: dict, command: str, machine: str, date: str) -> dict:
    """A copy of the data file with group `name`'s figures, command, machine and date replaced by a fresh
    measurement's; ValueError when the group is unknown, not rewritten by a command, or a figure is missing."""
    group = data["groups"].get(name)
    if group is None:
        raise ValueError(f"no group {name!r}; groups: {', '.join(data['groups'])}")
    if not group.get("update"):
        raise ValueError(f"group {name!r} is measured by hand ({group['command']}); edit {MEASURED_PATH.name}")
    missing = sorted(set(group["figures"]) - set(figures))
    if missing:
        raise ValueError(f"the measurement lacks {', '.join(missing)} for group {name!r} ({group['command']})")
    new = {**group, "command": command, "machine": machine, "date": date,
           "figures": {k: figures[k] for k in group["figures"]}}
    return {**data, "groups": {**data["groups"], name: new}}


def save_measured(data: dict, path: Path = MEASURED_PATH) -> None:
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


class _Figures(string.Formatter):
    """str.format, where a list's items are formatted one by one and joined: "/" by default, else the text
    after a "|" in the spec ("|and" joins "a, b and c")."""

    def format_field(self, value, format_spec):
        spec, _, sep = format_spec.partition("|")
        if not isinstance(value, (list, tuple)):
            return format(value, spec)
        items = [format(v, spec) for v in value]
        if sep == "and":
            return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)
        return (sep or "/").join(items)


def fill(template: str, data: dict) -> str:
    """One claim text with its figures from the data file (and the few that follow from them)."""
    groups = {name: SimpleNamespace(**g["figures"]) for name, g in data["groups"].items()}
    stock = data["groups"]["cpu_passes"]["figures"]["stock_ms"]
    derived = {"stock_2_over_1": stock[1] / stock[0], "textbook_k": TEXTBOOK_K, "textbook_alphas": TEXTBOOK_ALPHAS,
               "textbook_tokens": [float(theory.expected_tokens(a, TEXTBOOK_K)) for a in TEXTBOOK_ALPHAS]}
    return _Figures().vformat(template, (), {**groups, **derived})


def build_claims(data: dict) -> tuple[Claim, ...]:
    """The claims with their texts filled from a data file's figures."""
    return tuple(replace(c, claim=fill(c.claim, data), measured=fill(c.measured, data)) for c in _TEMPLATES)


_TEMPLATES: tuple[Claim, ...] = (
    Claim(1, "One token at a time is memory-bound",
          "Generating one token means reading every weight of the model from memory; the arithmetic is small "
          "next to that. So the time per token is roughly the bytes of the weights divided by the memory "
          "bandwidth.",
          f"{LEVIATHAN} (introduction); the general argument of Pope et al. 2022, *Efficiently Scaling "
          "Transformer Inference*.",
          ("Why it is fast",),
          "The target's weight bytes, a copy benchmark of this device's bandwidth, their ratio as a predicted "
          "time per token, and the measured 1-token forward pass beside it.",
          "A 1-token pass of the 1.5B target in float32 on the project's 2-core CPU: "
          "{cpu_passes.one_token_ms:d|–} ms with its weights packed for oneDNN, the default (docs/precision.md)."),
    Claim(2, "Checking five tokens costs about one pass",
          "Because the weights are read once per pass, a forward pass over 5 tokens takes about as long as a "
          "pass over 1. That spare capacity is what verification uses.",
          f"{LEVIATHAN}; {CHEN} (scoring K tokens in parallel costs about as much as sampling one).",
          ("Why it is fast",),
          "Target forward time for 1, 2, 4, 8 and 16 new tokens on your own device, with a verdict computed "
          "from the measurement, including the exception where it does not hold.",
          "Target passes of {cpu_passes.tokens:d} tokens: {cpu_passes.packed_ms:d} ms (float32, weights packed "
          "for oneDNN, the default); 1 to {cpu_passes.flat_up_to_tokens} tokens cost the same. The exceptions are "
          "kernels, not the hardware: on the plain weight the same passes took {cpu_passes.plain_ms:d} ms, and "
          "stock PyTorch float32 took {cpu_passes.stock_ms[0]} ms for 1 token and {cpu_passes.stock_ms[1]} ms for "
          "2 ({stock_2_over_1:.1f}×); bfloat16 took {cpu_passes.bfloat16_ms:d} ms (docs/precision.md)."),
    Claim(3, "Draft, verify, keep the agreeing prefix",
          "A small draft model proposes k tokens. The target checks all k in one pass, keeps the prefix it "
          "agrees with, replaces the first disagreement with its own token, and adds a bonus token when all k "
          "were kept.",
          f"{LEVIATHAN}, Algorithm 1; {CHEN}.",
          ("Main page", "Slow motion round"),
          "Every round drawn token by token: accepted, rejected, correction or bonus, each with its colour "
          "and a second cue; the slow-motion page writes out each decision's arithmetic.",
          "The engine's greedy output is checked against transformers' own `generate` on tiny models "
          "(test suite)."),
    Claim(4, "The textbook example: “The capital of France is”",
          "The usual illustration: the draft proposes “ Paris”, “,”, “ a”, “ city”; the target keeps three and "
          "replaces “ city” with its own choice, giving four tokens for one target pass.",
          "Introductory tutorials and blog posts on speculative decoding.",
          ("Main page", "Slow motion round"),
          "A preset that runs this exact prompt (no chat template) on the real pair. Whatever the real models "
          "do is what is shown, which need not be the textbook's tokens.",
          "Not a measurement: the run is live, and its tokens depend on the pair."),
    Claim(5, "Every round makes progress",
          "Even when the very first draft is wrong, the target's pass still yields one token, so a round never "
          "emits nothing.",
          f"{LEVIATHAN} (each run of the target produces at least one token).",
          ("Slow motion round", "Main page"),
          "A note on each round that accepted no draft yet emitted the target's correction.",
          "A test forces zero acceptances and checks that each round emits exactly one token (test suite)."),
    Claim(6, "Greedy output is exactly the target's",
          "With greedy decoding, the speculative text is token for token what the target alone would write.",
          f"{LEVIATHAN}; {CHEN}.",
          ("Exactness", "Main page"),
          "A side-by-side check against a plain target-only run, with the first difference and its cause when "
          "floating point breaks a near tie (bfloat16).",
          "Greedy speculative output equalled plain greedy output on all {real_greedy.prompts} test prompts in "
          "float32; on a lent H200, {gpu_identity.identical} of {gpu_identity.runs} times on tiny models in "
          "float32 and bfloat16 (scripts/gpu_check.py)."),
    Claim(7, "Sampling keeps the target's distribution",
          "When sampling, a drafted token is kept with probability min(1, p/q); after a rejection the "
          "replacement is drawn from norm(max(0, p − q)). The output is distributed exactly as the target's.",
          f"{LEVIATHAN} (speculative sampling); {CHEN} (modified rejection sampling, with proof).",
          ("Exactness", "Slow motion round", "Main page"),
          "p and q bars and the residual at any position, and a histogram of many seeded trials against p with "
          "their total-variation distance next to the distance sampling noise alone gives.",
          "The sampling distribution matches the exactly enumerated one on tiny models, on the CPU and on a "
          "lent CUDA GPU (the test suite)."),
    Claim(8, "Tokens per target pass: (1 − α^(k+1)) / (1 − α)",
          "If each draft is accepted with chance α, a round yields (1 − α^(k+1)) / (1 − α) tokens on "
          "average. At k = {textbook_k} that is about {textbook_tokens:.1f|and} for α = {textbook_alphas:g|and}.",
          f"{LEVIATHAN} (expected tokens per run of the target).",
          ("Theory", "Main page"),
          "The curve with sliders, the quoted numbers recomputed from the formula, and each live run's "
          "measured point on it.",
          "The quoted values follow from the formula: {textbook_tokens:.2f|, } (Theory page)."),
    Claim(9, "Tokens per pass is not speedup",
          "Drafting costs time too. With c the cost of a draft step relative to a target step, the speedup "
          "is about E[tokens per pass] / (1 + k·c); a draft about a tenth of the target's size with k of 4 "
          "or 5 is often said to give 2–3×.",
          f"{LEVIATHAN} (walltime improvement with the cost coefficient c).",
          ("Speedup", "Theory"),
          "c measured on your device, the predicted speedup against k with the best k, a measured k sweep "
          "and a race against the target alone.",
          "Here the draft has a third of the target's parameters. In float32 a draft step costs "
          "c = {bench_float32.c:.2f} of a target pass and the best-k chooser gave {bench_float32.best_mixed:.2f}× "
          "over {bench_float32.prompts} prompts; in int8 (the default draft precision on a CPU) "
          "c = {bench_int8.c:.2f}, and it gave {bench_int8.best_mixed:.2f}× over {bench_int8.prompts} prompts, "
          "{bench_int8.best_code:.2f}× on code, {bench_int8.k4_mixed:.2f}× with k = 4 (greedy; python -m "
          "specviz bench). The output is the same either way. Each speedup is over the float32 target alone."),
    Claim(10, "Acceptance depends on agreement, not quality",
          "α measures how often the small model guesses the big one's choice. Code, lists, boilerplate and "
          "well-known facts accept well; open-ended creative text accepts poorly. Higher temperatures lower "
          "acceptance.",
          f"{LEVIATHAN} (α differs by task); {CHEN} (higher acceptance on code than on summaries).",
          ("Acceptance lab",),
          "α by domain and temperature, counted over the judged drafts and as the expected acceptance "
          "Σ min(p, q) at every position of the text; acceptance by draft position; the target's entropy "
          "along the text.",
          "The Acceptance lab's defaults (T = {lab_defaults.temperature}, k = {lab_defaults.k}, "
          "{lab_defaults.new_tokens} new tokens, the int8 draft) on the default pair, in {lab_defaults.seconds} s: "
          "expected α at every position {lab_defaults.expected[0]:.2f} for a list, {lab_defaults.expected[1]:.2f} "
          "for code, {lab_defaults.expected[2]:.2f} for Newton's laws, {lab_defaults.expected[3]:.2f} for a "
          "surreal story (counted α {lab_defaults.counted:.2f|, }; with the float32 draft "
          "{lab_defaults.expected_float32_draft:.2f|, } expected). The earlier defaults, {lab_poem.new_tokens} "
          "tokens of a four-line poem, could not show it: greedy, the poem repeats its first line and accepts "
          "like a list ({lab_poem.alpha:.2f} over its {lab_poem.tokens} tokens)."),
    Claim(11, "The draft must share the tokenizer",
          "Draft and target must use the same tokenizer, and work best from one family or with the draft "
          "distilled from the target.",
          f"{LEVIATHAN} (one shared vocabulary); transformers' assisted generation documentation.",
          ("Main page",),
          "Pairs in models.yaml from one family, and a tokenizer check that explains why a pair is refused.",
          "The default pair is Qwen2.5-Coder 0.5B Instruct drafting for Qwen2.5-Coder 1.5B Instruct, one "
          "family and one tokenizer (models.yaml)."),
    Claim(12, "Large batches shrink the gain",
          "Serving many sequences at once fills the spare arithmetic that verification relies on: at large "
          "batch sizes the target is compute-bound and extra tokens stop being free.",
          "Introductory material and serving practice (a consequence of claims 1 and 2).",
          ("Why it is fast",),
          "Verify cost against tokens × batch size on your device, with where the flat part ends.",
          "Measured live on the page; docs/ record no figure for it."),
    Claim(13, "Adaptive schemes change k as they go",
          "The number of drafted tokens can follow the observed acceptance: longer drafts while they are "
          "accepted, shorter after rejections.",
          "transformers' assisted generation (its heuristic schedule of assistant tokens); later papers on "
          "dynamic draft lengths.",
          ("Speedup", "Main page"),
          "Adaptive k and a best-k chooser next to fixed k, with the trace of k over the rounds.",
          "Greedy, int8 draft: the best-k chooser {bench_int8.best_code:.2f}× on code against "
          "{bench_int8.k4_code:.2f}× for fixed k = 4; over the bench's prompts, the main page's default run "
          "included, it beat k = 4 by {bench_int8_first_run.best_over_k4_mixed:.2f}× (python -m specviz bench; "
          "speedups over the float32 target alone)."),
    Claim(14, "Variants need no second model",
          "Drafts can come from elsewhere: n-grams of the context (prompt lookup), extra prediction heads "
          "(Medusa), or a subset of the target's own layers (self-speculative decoding).",
          "Saxena 2023, prompt lookup decoding; Cai et al. 2024, *Medusa*; Zhang et al. 2023, *Draft & Verify*.",
          ("Main page",),
          "The prompt-lookup drafter running live with the same engine.",
          "Prompt lookup: {bench_prompt_lookup.prompt_lookup_code:.2f}× on code and "
          "{bench_prompt_lookup.prompt_lookup_mixed:.2f}× over {bench_prompt_lookup.prompts} prompts, greedy "
          "(python -m specviz bench), over the float32 target alone: about break-even on prompts that rarely "
          "repeat their context."),
    Claim(15, "Only the speed changes",
          "Speculative decoding changes how fast the model writes, never what it knows or says: the same text "
          "when greedy, the same distribution when sampling.",
          f"{LEVIATHAN}; {CHEN}.",
          ("Exactness",),
          "Claims 6 and 7 together: the identity check and the sampling histogram.",
          "As claims 6 and 7."),
    Claim(16, "What laptops run gains less",
          "Speculative decoding is usually reported against a full-precision target. Laptops run quantized "
          "models in llama.cpp, whose target alone is already cheap, so a draft has less to save there: public "
          "CPU figures stay under 2×, and its greedy output is not always the target's own.",
          "llama.cpp's speculative examples and public reports (the best found: a 3B Qwen2.5-Coder target with a "
          "0.5B draft on an i7-8700).",
          ("Speedup",),
          "Section 1c: the same draft against a float32 and an int8 target, each speedup over its own target "
          "alone; the lesson \"What the speedup is measured against\".",
          "On the project's 2-core CPU, with the pair's GGUF files as shipped (python -m specviz bench, methods "
          "llama-target and llama-spec, llama-cpp-python installed): llama.cpp made "
          "{bench_llamacpp.llama_target_tps:.1f} tokens/s with the target alone and "
          "{bench_llamacpp.llama_spec_tps:.1f} with its speculative decoding, {bench_llamacpp.llama_spec_own:.2f}× "
          "its own target alone (greedy text equal to its target's on {bench_llamacpp.llama_same_texts} of "
          "{bench_llamacpp.prompts} prompts). specviz's exact best-k chooser made {bench_llamacpp.best_tps:.1f} "
          "tokens/s with the float32 target ({bench_llamacpp.best_over_llama_spec:.2f}× llama.cpp's speculative "
          "tokens/s) and {bench_llamacpp_int8.best_tps:.1f} with the int8 target "
          "({bench_llamacpp_int8.best_over_llama_spec:.2f}×; llama.cpp there: "
          "{bench_llamacpp_int8.llama_spec_tps:.1f} tokens/s speculative, "
          "{bench_llamacpp_int8.llama_target_tps:.1f} its target alone, "
          "{bench_llamacpp_int8.llama_spec_own:.2f}×, {bench_llamacpp_int8.llama_same_texts} of "
          "{bench_llamacpp_int8.prompts} texts equal)."),
)

CLAIMS: tuple[Claim, ...] = build_claims(load_measured())


def claim(n: int) -> Claim:
    for c in CLAIMS:
        if c.number == n:
            return c
    raise KeyError(f"no claim {n}: claims are numbered 1–{len(CLAIMS)}")


def anchor(n: int) -> str:
    """The heading anchor of claim n on the claims page (and in docs/claims.md)."""
    return f"claim-{claim(n).number}"


def link(n: int, text: str | None = None) -> str:
    """A markdown link to claim n on the in-app page, relative so it works from any page."""
    return f"[{text or f'claim {n}'}]({PAGE_PATH}#{anchor(n)})"


def page_link(page: str) -> str:
    """A markdown link to one of the app's pages by its sidebar title."""
    return f"[{page}](./{PAGES[page]})"


def markdown() -> str:
    """docs/claims.md: the same list as the in-app page, for readers of the repository."""
    out = [f"# {PAGE_TITLE}",
           "",
           "Introductory material about speculative decoding makes the claims below. specviz shows each one "
           "happening live on real models, or the honest exception where it does not hold on the hardware at "
           "hand. Nothing is a canned animation. In the app this list is the page "
           f"*{PAGE_TITLE}*; this file is generated from `specviz/core/claims.py` "
           "(`python -m specviz.core.claims > docs/claims.md`).",
           "",
           "| # | claim | where in the app |",
           "|---|---|---|"]
    for c in CLAIMS:
        out.append(f"| [{c.number}](#{anchor(c.number)}) | {c.title} | {', '.join(c.pages)} |")
    for c in CLAIMS:
        out += ["", f'<a id="{anchor(c.number)}"></a>', "", f"## {c.number}. {c.title}", "", c.claim, "",
                f"- **Source:** {c.source}",
                f"- **Where in the app:** {', '.join(c.pages)}. {c.shows}",
                f"- **Measured here:** {c.measured}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
