"""The learning pages' default experiments, run on a pair, as page recordings (specviz.data.pagefile).

Each page that ships a recording has here: its default settings (what the page's widgets start at, by the
page's names), the type of each result it keeps (what pagefile.from_data reads it back as), and a function
that runs the experiment on a loaded pair. tools.record.record_pages writes them; the pages read them with
RESULTS[page]. A page whose default run is already a main-page recording (Slow motion: RECORDED_RUNS) has none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from specviz.core import prompts, theory
from specviz.core.errors import Stopped
from specviz.core.settings import DecodeSettings
from specviz.data import pagefile
from specviz.data.records import Run
from specviz.data.tree_records import TreeRun
from specviz.decoding import selfdraft
from specviz.decoding.tree import tree_decode
from specviz.teaching import early_exit, experiments, lab, race, rules, tree_lab

# pages that replay a main-page recording (specviz/recorded/<name>.json) instead of a page recording
RECORDED_RUNS = {"slow_motion": "capital-of-france-greedy"}

EXACTNESS_PROMPT = "The capital of France"
EXACTNESS = {  # the page's defaults (pages/5_Exactness.py)
    "prompt": EXACTNESS_PROMPT, "k": 4, "new tokens": 32,
    "temperature": 1.0, "trials": 2000, "first seed": 0,
    "rules: temperature": 1.0, "rules: trials": 20_000, "rules: seed": 0, "ε": 0.05, "δ": 0.2, "τ": 0.1,
}  # fmt: skip

ACCEPTANCE_LAB = {  # the page's defaults (pages/2_Acceptance_lab.py)
    "domains": list(prompts.LAB_DEFAULT_DOMAINS), "temperatures": [DecodeSettings.temperature], "k": DecodeSettings.k,
    "new tokens per run": DecodeSettings.max_new_tokens, "seed": DecodeSettings.seed,
}  # fmt: skip

# the lab's recording: the page's defaults at the temperatures its caption names as well, so a class without a
# model sees α against temperature
ACCEPTANCE_LAB_RECORDED = {**ACCEPTANCE_LAB, "temperatures": [0.0, 0.7, 1.2]}

SPEEDUP = {  # the page's defaults (pages/3_Speedup.py, pages/common/speed_ui.py); 1b and 1c: given loaders
    "prompt": "Python function", "temperature": 0.0, "new tokens per run": 24, "seed": 0,
    "k values": [1, 2, 4, 6, 8], "k for the race": 4, "starting k": 4, "early exit k": early_exit.DEFAULT_K,
    "early exit new tokens": early_exit.DEFAULT_TOKENS,
}  # fmt: skip

WHY_FAST = {  # the page's defaults (pages/4_Why_it_is_fast.py); the pair's dtype is the recording's
    "tokens per pass": [1, 2, 4, 8, 16], "repetitions": 5,
    "batch: tokens per sequence": [1, 4, 8], "batch sizes": [1, 2, 4, 8], "batch: repetitions": 3,
}  # fmt: skip

TOKEN_TREE = {  # the page's defaults (pages/9_Token_tree.py)
    "prompt": "Python function", "shape": "tree", "node budget": 16, "b": 2, "max depth": 8,
    "temperature": 0.0, "seed": 0, "max new tokens": 32, "node budgets": list(tree_lab.DEFAULT_BUDGETS),
}  # fmt: skip

RESULTS: dict[str, dict[str, Any]] = {  # page -> result name -> its type
    "acceptance_lab": {"sweep": dict[str, dict[float, Run]], "agree": dict[str, dict[float, experiments.Agreement]]},
    "exactness": {"greedy": experiments.Comparison, "trials": experiments.FirstTokenTrials,
                  "fp": lab.FirstPosition, "rules": rules.RuleLab},
    "speedup": {"cost": race.Cost, "sweep": dict[int, experiments.Comparison], "race": race.Race,
                "policies": dict[str, Run], "early_exit": early_exit.EarlyExitSweep,
                "targets": list[experiments.PrecisionResult], "precisions": list[experiments.PrecisionResult]},
    "why_fast": {"forward": dict[int, list[float]], "bw": experiments.BandwidthCheck,
                 "batch": dict[tuple[int, int], list[float]], "precisions": dict[str, dict[int, list[float]]]},
    "token_tree": {"run": TreeRun, "chain_vs_tree": tree_lab.ChainVsTree},
}


def exactness_rules(epsilon: float, delta: float, tau: float) -> list[rules.Rule]:
    """The rules the Exactness page compares: the defaults plus the learner's own typical and threshold."""
    own = (rules.Rule("typical", epsilon=float(epsilon), delta=float(delta)), rules.Rule("threshold", tau=float(tau)))
    return list(rules.DEFAULT_RULES) + [r for r in own if r not in rules.DEFAULT_RULES]


def _preset_ids(pair, name: str) -> list[int]:
    p = prompts.preset(name)
    return prompts.encode(pair.tokenizer, p.text, p.chat)


# --------------------------------------------------------------------------
# the work behind each page's buttons: the pages call these (or the one specviz function named), the
# recordings below run them at the page's defaults, and devtools.timing times them (BUTTONS)


def exactness_trials(pair, ids, *, n: int, temperature: float, seed: int, progress=None):
    """The Exactness page's "Run n trials": one forward pass of each model, the seeded first-step trials on
    those logits (a stop keeps the blocks of trials done: experiments.trials_from_logits), and the p, q and
    residual of that position. (trials, fp)."""
    logits = experiments.first_logits(pair.target, pair.draft, ids, pair.shared_vocab)
    try:
        trials = experiments.trials_from_logits(*logits, n=n, temperature=temperature, seed=seed,
                                                noise_reps=theory.NOISE_REPS, progress=progress)
    except Stopped as e:
        e.partial = (e.partial, lab.position_from_logits(*logits, temperature=temperature)) if e.partial else None
        raise
    return trials, lab.position_from_logits(*logits, temperature=temperature)


def acceptance_lab(pair, domains, temperatures, settings: DecodeSettings, *, existing=None, existing_agree=None,
                   progress=None):
    """The Acceptance lab's Measure: (sweep, agreement) of each domain's prompt at each temperature
    (lab.acceptance_lab: a stop keeps whole cells)."""
    presets = prompts.lab_prompts()
    ids = {d: prompts.encode(pair.tokenizer, presets[d].text, presets[d].chat) for d in domains}
    return lab.acceptance_lab(pair.target, pair.draft, ids, temperatures, settings, existing=existing,
                              existing_agree=existing_agree, progress=progress, **pair.run_kw)


def first_run(pair, progress=None):
    """The main page's Run at its defaults (prompts.FIRST_RUN): the speculative run through the pair's drafter,
    then the target alone with the same settings, measured once per server (baseline.shared_target_alone). The
    main page makes the same two calls itself (pages/common/main_controls.py, main_view.py), playing the run
    round by round as it comes. (Run, baseline.Measured)."""
    from specviz.decoding.engine import speculative_decode
    from specviz.teaching import baseline

    f = prompts.FIRST_RUN
    decode = DecodeSettings(k=f.k, k_policy=f.k_policy, temperature=f.temperature, max_new_tokens=f.max_new_tokens)
    run = speculative_decode(pair.target, pair.drafter(), _preset_ids(pair, f.preset), decode, **pair.run_kw)
    return run, baseline.shared_target_alone(pair.target, run, pair.shared_vocab)


def _speed_settings(s: dict) -> DecodeSettings:
    return DecodeSettings(temperature=s["temperature"], max_new_tokens=s["new tokens per run"], seed=s["seed"])


def _lab_settings(s: dict) -> DecodeSettings:
    return DecodeSettings(k=s["k"], max_new_tokens=s["new tokens per run"], seed=s["seed"])


def _tree_settings(s: dict) -> DecodeSettings:
    return DecodeSettings(temperature=s["temperature"], max_new_tokens=s["max new tokens"], seed=s["seed"])


@dataclass(frozen=True)
class Button:
    """A page's button and the work behind it at the page's default settings: work(pair, progress)."""

    page: str
    label: str
    work: Callable[[Any, Any], Any]


S, E, L, W, T = SPEEDUP, EXACTNESS, ACCEPTANCE_LAB, WHY_FAST, TOKEN_TREE
BUTTONS: tuple[Button, ...] = (
    Button("Main page", "Run (then the target alone)", first_run),
    Button("Acceptance lab", "Measure", lambda pair, progress: acceptance_lab(
        pair, L["domains"], L["temperatures"], _lab_settings(L), progress=progress)),
    Button("Speedup", "Measure c and the verify cost", lambda pair, progress: race.measure_cost(
        pair.target, pair.chain_draft(), progress=progress)),
    Button("Speedup", "Run the k sweep", lambda pair, progress: lab.k_sweep(
        pair.target, pair.chain_draft(), _preset_ids(pair, S["prompt"]), S["k values"], _speed_settings(S),
        progress=progress, **pair.run_kw)),
    Button("Speedup", "Start the race", lambda pair, progress: race.race(
        pair.target, pair.chain_draft(), _preset_ids(pair, S["prompt"]), replace(_speed_settings(S),
                                                                                 k=S["k for the race"]),
        progress=progress, **pair.run_kw)),
    Button("Speedup", "Run fixed k, adaptive k and the best-k chooser", lambda pair, progress: race.compare_policies(
        pair.target, pair.chain_draft(), _preset_ids(pair, S["prompt"]), replace(_speed_settings(S), k=S["starting k"]),
        progress=progress, **pair.run_kw)),
    Button("Speedup", "Measure α, c and the speedup for each L", lambda pair, progress: early_exit.early_exit_sweep(
        pair.target, _preset_ids(pair, S["prompt"]), early_exit.default_layers(selfdraft.num_layers(pair.target)),
        _early_exit_settings(S), progress=progress, **pair.run_kw)),
    Button("Why it is fast", "Measure forward cost", lambda pair, progress: experiments.forward_cost(
        pair.target, n_tokens=tuple(W["tokens per pass"]), reps=W["repetitions"], progress=progress)),
    Button("Why it is fast", "Check against memory bandwidth",
           lambda pair, progress: experiments.bandwidth_check(pair.target)),
    Button("Why it is fast", "Measure batch cost", lambda pair, progress: experiments.batch_cost(
        pair.target, n_tokens=tuple(W["batch: tokens per sequence"]), batches=tuple(W["batch sizes"]),
        reps=W["batch: repetitions"], progress=progress)),
    Button("Exactness", "Compare with the target alone", lambda pair, progress: lab.compare_with_baseline(
        pair.target, pair.draft, _preset_ids(pair, E["prompt"]),
        DecodeSettings(k=E["k"], temperature=0.0, max_new_tokens=E["new tokens"], seed=0), **pair.run_kw)),
    Button("Exactness", "Run 2000 trials", lambda pair, progress: exactness_trials(
        pair, _preset_ids(pair, E["prompt"]), n=E["trials"], temperature=E["temperature"], seed=E["first seed"],
        progress=progress)),
    Button("Exactness", "Compare the rules", lambda pair, progress: rules.rule_lab(
        pair.target, pair.draft, _preset_ids(pair, E["prompt"]), exactness_rules(E["ε"], E["δ"], E["τ"]),
        n=E["rules: trials"], temperature=E["rules: temperature"], seed=E["rules: seed"], vocab=pair.shared_vocab)),
    Button("Token tree", "Measure chain against tree", lambda pair, progress: tree_lab.chain_vs_tree(
        pair.target, pair.draft, _preset_ids(pair, T["prompt"]), _tree_settings(T), budgets=T["node budgets"],
        progress=progress, **_tree_kw(pair, T))),
)


def _tree_kw(pair, s: dict) -> dict:
    return dict(branch=s["b"], max_depth=s["max depth"], **pair.run_kw)


def button(page: str, label: str) -> Button:
    return next(b for b in BUTTONS if b.page == page and b.label == label)


# --------------------------------------------------------------------------
# the recordings: the pages' default experiments


def record_exactness(pair, s: dict = EXACTNESS, cost=None) -> dict[str, Any]:
    """The Exactness page's three experiments at its defaults: the greedy comparison, the seeded first-step
    trials with the p/q/residual of that position, and the acceptance-rule lab."""
    ids = _preset_ids(pair, s["prompt"])
    greedy = lab.compare_with_baseline(pair.target, pair.draft, ids,
                                       DecodeSettings(k=s["k"], temperature=0.0, max_new_tokens=s["new tokens"],
                                                      seed=0), **pair.run_kw)
    trials, fp = exactness_trials(pair, ids, n=s["trials"], temperature=s["temperature"], seed=s["first seed"])
    rlab = rules.rule_lab(pair.target, pair.draft, ids, exactness_rules(s["ε"], s["δ"], s["τ"]),
                          n=s["rules: trials"], temperature=s["rules: temperature"], seed=s["rules: seed"],
                          vocab=pair.shared_vocab)
    return {"greedy": greedy, "trials": trials, "fp": fp, "rules": rlab}


def record_acceptance_lab(pair, s: dict = ACCEPTANCE_LAB, cost=None) -> dict[str, Any]:
    """The Acceptance lab's default measurement: each domain's run at each temperature, and the agreement along
    each run's text."""
    sweep, agree = acceptance_lab(pair, s["domains"], s["temperatures"], _lab_settings(s))
    return {"sweep": sweep, "agree": agree}


def _early_exit_settings(s: dict) -> DecodeSettings:
    """The early-exit section's settings: the page's, with its own k and new tokens per depth."""
    return replace(_speed_settings(s), k=s["early exit k"], max_new_tokens=s["early exit new tokens"])


def record_targets(pair, load_pair: Callable[[str], Any], s: dict = SPEEDUP) -> list[experiments.PrecisionResult]:
    """The Speedup page's section 1c at its defaults: the pair's draft against its target in each of
    quant.TARGET_PRECISIONS (load_pair(target precision) -> that pair), each against its own target alone, with
    section 5's k (fixed) on the page's prompt and settings (experiments.target_comparison)."""
    from specviz.modeling import quant

    pairs = {tp: load_pair(tp) for tp in quant.TARGET_PRECISIONS}
    return experiments.target_comparison(pairs, _preset_ids(pair, s["prompt"]),
                                         replace(_speed_settings(s), k=s["starting k"]), **pair.run_kw)


DRAFT_PRECISIONS = ("float32", "int8")  # section 1b's recorded precisions: the reference and the CPU's default


def record_precisions(pair, load_draft: Callable[[str], Any], s: dict = SPEEDUP) -> list[experiments.PrecisionResult]:
    """The Speedup page's section 1b at its defaults: the pair's target with its draft in each of DRAFT_PRECISIONS
    (load_draft(draft precision) -> that pair), each against its own target alone, with section 5's k (fixed) on
    the page's prompt and settings (experiments.precision_comparison)."""
    pairs = {dp: load_draft(dp) for dp in DRAFT_PRECISIONS}
    return experiments.precision_comparison(pairs, _preset_ids(pair, s["prompt"]),
                                            replace(_speed_settings(s), k=s["starting k"]), **pair.run_kw)


@dataclass(frozen=True)
class Loaders:
    """What a recording that compares precisions loads beside its pair (tools.record builds them): target(tp) and
    draft(dp), the pair with its target / draft in that precision; target_model(name), the target model in
    another precision or dtype ("bfloat16", "int8 target"). None where the pair cannot have it."""

    target: Callable[[str], Any] | None = None
    draft: Callable[[str], Any] | None = None
    target_model: Callable[[str], Any] | None = None


def record_speedup(pair, s: dict = SPEEDUP, cost=None, loaders: Loaders = Loaders()) -> dict[str, Any]:
    """The Speedup page's default measurements: c and the verify cost (1: the recorded set's profile, cost, when
    given), the k sweep (3), the race (4), the k policies (5) and early exit at the default depths (6); with the
    loaders, the draft in each of DRAFT_PRECISIONS (1b: record_precisions) and the float32 and the int8 target (1c:
    record_targets). Section 2 is drawn from these."""
    ids = _preset_ids(pair, s["prompt"])
    settings, kw = _speed_settings(s), pair.run_kw
    depths = early_exit.default_layers(selfdraft.num_layers(pair.target))
    targets = {"targets": record_targets(pair, loaders.target, s)} if loaders.target is not None else {}
    if loaders.draft is not None:
        targets["precisions"] = record_precisions(pair, loaders.draft, s)
    return {"cost": cost or race.measure_cost(pair.target, pair.chain_draft()),
            "sweep": lab.k_sweep(pair.target, pair.chain_draft(), ids, s["k values"], settings, **kw),
            "race": race.race(pair.target, pair.chain_draft(), ids, replace(settings, k=s["k for the race"]), **kw),
            "policies": race.compare_policies(pair.target, pair.chain_draft(), ids,
                                              replace(settings, k=s["starting k"]), **kw),
            "early_exit": early_exit.early_exit_sweep(pair.target, ids, depths, _early_exit_settings(s),
                                                      **kw), **targets}


WHY_FAST_OTHERS = ("bfloat16", "int8 target")  # the target's other forms the recording times as well


def record_why_fast(pair, s: dict = WHY_FAST, cost=None, loaders: Loaders = Loaders()) -> dict[str, Any]:
    """The Why it is fast page's three measurements of the target at its defaults: forward cost against tokens per
    pass and the 1-token pass against weight bytes ÷ bandwidth (both the recorded set's profile's passes, cost,
    when it timed every size as often as the page), and forward cost against batch × tokens; with
    loaders.target_model, the forward cost of the target in each of WHY_FAST_OTHERS too ("precisions", with the
    pair's own dtype: what the page compares)."""
    sizes = tuple(s["tokens per pass"])
    from_profile = cost is not None and all(len(cost.timings.get(n, ())) == s["repetitions"] for n in sizes)
    forward = ({n: list(cost.timings[n]) for n in sizes} if from_profile else
               experiments.forward_cost(pair.target, n_tokens=sizes, reps=s["repetitions"]))
    others = {}
    for name in WHY_FAST_OTHERS if loaders.target_model is not None else ():
        if (model := loaders.target_model(name)) is not None:
            others[name] = experiments.forward_cost(model, n_tokens=sizes, reps=s["repetitions"])
            del model
    more = {"precisions": {str(pair.dtype).replace("torch.", ""): forward, **others}} if others else {}
    return {"forward": forward,
            "bw": experiments.bandwidth_check(pair.target, pass_s=cost.pass_s(1) if from_profile else None),
            "batch": experiments.batch_cost(pair.target, n_tokens=tuple(s["batch: tokens per sequence"]),
                                            batches=tuple(s["batch sizes"]), reps=s["batch: repetitions"]), **more}


def record_token_tree(pair, s: dict = TOKEN_TREE, cost=None) -> dict[str, Any]:
    """The Token tree page's defaults: a whole tree run (the page steps through its rounds), and chain against tree
    at each node budget."""
    ids = _preset_ids(pair, s["prompt"])
    settings, kw = _tree_settings(s), _tree_kw(pair, s)
    return {"run": tree_decode(pair.target, pair.draft, ids, settings, budget=s["node budget"], **kw),
            "chain_vs_tree": tree_lab.chain_vs_tree(pair.target, pair.draft, ids, settings, budgets=s["node budgets"],
                                                    **kw)}


RECORDERS: dict[str, tuple[Callable[..., dict[str, Any]], dict]] = {  # page -> (recorder, its settings)
    "acceptance_lab": (record_acceptance_lab, ACCEPTANCE_LAB_RECORDED),
    "exactness": (record_exactness, EXACTNESS),
    "speedup": (record_speedup, SPEEDUP),
    "why_fast": (record_why_fast, WHY_FAST),
    "token_tree": (record_token_tree, TOKEN_TREE),
}


COMPARES = ("speedup", "why_fast")  # pages whose recorder takes loaders


def about(pair) -> dict[str, str]:
    """Where a recording is made: the pair, device, dtype, draft precision, and now (UTC, to the minute)."""
    return {"pair": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
            "draft_precision": str(pair.draft_precision),
            "recorded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def record_page(pair, page: str, decode: Callable[[int], str], cost=None,
                loaders: Loaders = Loaders()) -> pagefile.PageRecording:
    """Run page's default experiment on pair: its PageRecording (prompt, settings, results, token texts). cost: the
    recorded set's profile (costs.Cost), which the pages that time c and passes quote instead of timing them;
    loaders: what the pages that compare precisions load beside the pair (COMPARES)."""
    recorder, settings = RECORDERS[page]
    results = recorder(pair, settings, cost=cost, **({"loaders": loaders} if page in COMPARES else {}))
    text = prompts.preset(settings["prompt"]).text if "prompt" in settings else ""  # the lab: one prompt per domain
    return pagefile.make(page, about(pair), text, settings, results, decode)
