"""Guided lessons: a question, the learner's prediction, an experiment, the measured answer, an explanation.

The lessons are plain data (LESSONS: frozen Lesson and Step records). A Step names its
experiment, a function in EXPERIMENTS that runs on a loaded pair (live) or, with no pair,
from the shipped recorded runs (specviz/recorded/) or from specviz.core.theory alone. Every
experiment returns an Outcome: the measured answer, comparable with the prediction, and the
numbers its explanation quotes. An explanation is a template filled from those numbers, so
every figure and every "higher / lower" in it comes from the data, never written in advance.

  run_step(step, ctx)            -> Outcome (live when ctx.pair is set, else recorded / theory)
  explain(step, outcome)         -> the explanation, filled from the measured numbers
  figure(step, ctx, outcome)     -> the step's chart (plotly) or None
  compare(step, prediction, outcome) -> one sentence: the prediction against the measurement
  lesson(key), LESSONS, EXPERIMENTS, RECORDED

No streamlit here: pages/8_Lessons.py draws the steps.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from specviz.core import measure, prompts, theory
from specviz.core.errors import InvalidSetting, SpecvizError
from specviz.core.progress import Units
from specviz.data.records import Run
from specviz.data.runfile import RecordSpec
from specviz.core.settings import DecodeSettings

# --------------------------------------------------------------------------
# the records


@dataclass(frozen=True)
class Prediction:
    """What the learner predicts: a number on a slider, or one of a few choices."""

    label: str
    kind: str = "slider"  # "slider" | "choice"
    lo: float = 0.0
    hi: float = 1.0
    step: float = 0.05
    default: float | str | None = 0.5  # a slider's value at first; None for a choice
    choices: tuple[str, ...] = ()
    fmt: str = ".2f"  # how a number is shown
    close: float = 0.1  # |prediction - measured| up to this counts as close
    unit: str = ""  # shown after a number: "×", " %"


def choice(label: str, choices: tuple[str, ...]) -> Prediction:
    """A prediction picked from a few answers. None is selected at first: a learner commits to an answer of
    their own, not one put there for them (a room predicting aloud may leave it empty)."""
    return Prediction(label, "choice", choices=tuple(choices), default=None)


@dataclass(frozen=True)
class Link:
    """The page that goes deeper: a path relative to the repository root."""

    page: str
    label: str


@dataclass(frozen=True)
class Step:
    key: str
    question: str  # markdown; {name} is filled from params
    prediction: Prediction
    experiment: str  # a name in EXPERIMENTS
    explanation: str  # str.format template, filled from Outcome.values
    link: Link
    params: tuple[tuple[str, Any], ...] = ()  # fixed inputs of the experiment (also shown in the question)
    figure: str = ""  # a name in FIGURES: the chart drawn next to the measured answer ("" for none)

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def text(self) -> str:
        return self.question.format(**self.args)


@dataclass(frozen=True)
class Lesson:
    key: str
    title: str
    intro: str
    steps: tuple[Step, ...]


MEASURED, FROM_THEORY = "measured", "from theory"  # what a step's answer is, as the page labels it


@dataclass(frozen=True)
class Outcome:
    """The measured answer of one step."""

    measured: float | str  # comparable with the prediction (a number, or one of its choices)
    shown: str  # the measured answer as the page shows it
    values: dict[str, Any]  # every number the explanation quotes
    source: str  # "live: <pair>", "recorded: <file>" or "theory"
    answer: str = MEASURED  # MEASURED, or FROM_THEORY: computed from α and c by the formulas, never timed
    flags: tuple[str, ...] = ()  # a measured figure that contradicts itself, said instead of taught (_timing)
    load: tuple = ()  # clock.LoadNote of each timing behind a figure that ran under outside load (_timing)
    waited: tuple[str, ...] = ()  # what wall time its timings left out: waits for a core (explain.stalled_note)

    def to_dict(self) -> dict:
        return asdict(self)


# a live lesson run: k = K drafted tokens, LESSON_MAX_NEW_TOKENS new tokens
K = RecordSpec.k  # drafted tokens per round in every lesson run: the recordings' k
# fewer than DecodeSettings' default, so a step with a run and its target alone stays within a class's 30 s on a
# 2-core CPU (`python -m specviz timing`)
LESSON_MAX_NEW_TOKENS = 24
LESSON_SETTINGS = DecodeSettings(k=K, max_new_tokens=LESSON_MAX_NEW_TOKENS)


@dataclass
class Context:
    """Where an experiment runs: a loaded pair, or None (recorded runs and theory only).

    `memo` keeps runs between steps (a lesson's second step reuses its first step's run); the
    page keeps one per source in its session state. `progress` gets the steps' units (a k sweep's k values,
    blocks of trials) and may stop them (core.errors.Stopped): the runs finished stay in `memo`.
    """

    pair: Any | None = None  # specviz.decoding.models.Pair
    recordings: dict[str, Any] | None = None  # name -> runfile.Recording; None: the shipped ones
    settings: DecodeSettings = field(default_factory=lambda: LESSON_SETTINGS)  # every live run's; a step
    # varies k or temperature with replace()
    memo: dict = field(default_factory=dict)
    progress: Callable[[str, float | None], Any] | None = None  # the steps of several units report to it (core.progress)
    load_pair: Callable[[str], Any] | None = None  # target precision -> ctx.pair's pair with its target in it (the
    # page's loader); None: the baseline lesson reads the Speedup page's recording
    page_recordings: dict[str, Any] | None = None  # page -> pagefile.PageRecording or None; None: the shipped ones

    @property
    def live(self) -> bool:
        return self.pair is not None

    def recording(self, name: str):
        if self.recordings is None:
            from specviz.data.runfile import list_recorded

            self.recordings = {r.name: r for r in list_recorded()}
        if name not in self.recordings:
            raise SpecvizError(f"The recorded run '{name}' is missing from specviz/recorded/; reinstall specviz "
                               "or load a model to run this step live.")
        return self.recordings[name]

    def page_recording(self, page: str):
        """The page's recording (pagefile.PageRecording), or None when none ships."""
        if self.page_recordings is None:
            self.page_recordings = {}
        if page not in self.page_recordings:
            from specviz.data import pagefile

            self.page_recordings[page] = pagefile.load(page)
        return self.page_recordings[page]


# --------------------------------------------------------------------------
# runs: live on the pair, or recorded

# (preset, temperature) -> the shipped recording of that prompt and temperature (k = 4)
RECORDED: dict[tuple[str, float], str] = {
    ("The capital of France", 0.0): "capital-of-france-greedy",
    ("Python function", 0.0): "code-greedy",
    ("Creative story", 0.0): "creative-greedy",
    ("Creative story", 1.0): "creative-sampling-t1",
}
RECORDED_SELF = {"Python function": "code-greedy-self"}  # preset -> the recording of the target drafting for itself
# The creative and temperature lessons' texts are the acceptance lab's code and creative prompts (the one
# creative text of the app: prompts.PRESETS says why it was chosen).
CODE, STORY = prompts.LAB_PROMPTS["code"], prompts.LAB_PROMPTS["creative"]


@dataclass(frozen=True)
class Trial:
    """A speculative run and the target alone with the same settings."""

    run: Run
    baseline: dict  # runfile.baseline_summary() numbers
    source: str
    decode: Callable[[int], str]  # token id -> text (the pair's tokenizer, or the recording's table)


def _ids(ctx: Context, preset: str) -> list[int]:
    p = prompts.preset(preset)
    return prompts.encode(ctx.pair.tokenizer, p.text, p.chat)


def trial(ctx: Context, preset: str, temperature: float = RecordSpec.temperature, self_draft: bool = False) -> Trial:
    """Live: the pair's speculative run next to its target alone; else the shipped recording."""
    key = ("trial", preset, float(temperature), self_draft)
    if key in ctx.memo:
        return ctx.memo[key]
    if ctx.live:
        from specviz.teaching.experiments import compare_with_baseline
        from specviz.data.runfile import baseline_summary

        pair = ctx.pair
        draft = pair.target if self_draft else pair.draft  # the target drafting for itself: c = 1
        cmp = compare_with_baseline(pair.target, draft, _ids(ctx, preset),
                                    replace(ctx.settings, k=K, temperature=temperature),
                                    eos_token_id=pair.eos_token_ids, vocab=pair.shared_vocab)
        who = "the target drafting for itself" if self_draft else pair.name
        out = Trial(cmp.spec, baseline_summary(cmp.spec, cmp.base, cmp.speedup, cmp.identical),
                    f"live: {who}, {preset}, T = {temperature:g}, seed {ctx.settings.seed}",
                    lambda t: pair.tokenizer.decode([int(t)]))
    else:
        name = RECORDED_SELF.get(preset) if self_draft else RECORDED.get((preset, float(temperature)))
        if name is None:
            raise InvalidSetting(f"No recording of {preset!r} at T = {temperature:g}.")
        rec = ctx.recording(name)
        if not rec.baseline:
            raise SpecvizError(f"The recording '{name}' has no target-alone run to compare with.")
        out = Trial(rec.run, rec.baseline, f"recorded: {name} ({rec.pair})", rec.decode())
    ctx.memo[key] = out
    return out


def trials_of(ctx: Context, *wanted: tuple) -> list[Trial]:
    """trial(ctx, *w) for each w in wanted ((preset, temperature)); live, those not yet in memo are the units
    of ctx.progress (core.progress: an estimate, and a stop between them keeps the finished ones in memo)."""
    todo = [w for w in wanted if ("trial", w[0], float(w[1]), False) not in ctx.memo]
    units = Units(ctx.progress if ctx.live else None, len(todo))
    for preset, temperature in todo:
        units.say(f"{preset}, T = {temperature:g}: the speculative run and the target alone")
        trial(ctx, preset, temperature)
        units.unit_done(f"{preset}, T = {temperature:g}")
    return [trial(ctx, *w) for w in wanted]


def _steady(run: Run) -> list:
    """Rounds after the prompt was read, with the full k drafted."""
    return [r for r in run.rounds if not r.prefill_tokens and r.k == K]


def _cost(ctx: Context):
    """This machine's profile for the pair: the one measurement of c and the pass costs that the Speedup page's
    section 1 reads too (costs.shared_cost), kept on disk under the pair's identity."""
    from specviz.teaching import costs

    return costs.shared_cost(ctx.pair.target, ctx.pair.chain_draft(), ident=costs.identity(ctx.pair))


def _profile(ctx: Context):
    """The costs.Cost every c, pass time and verify cost of a step comes from: live, this machine's profile
    (_cost); recorded, the profile of the sitting the recordings were made in (costs.recorded_profile)."""
    if ctx.live:
        return _cost(ctx)
    from specviz.teaching import costs

    got = costs.recorded_profile()
    if got is None:
        raise SpecvizError("The recordings' profile (specviz/recorded/profile.json) is missing or broken: "
                           "reinstall specviz, or load a model to run this step live.")
    return got


def profile_source(ctx: Context, cost) -> str:
    """Where a profile's figures come from, as a step's source says it."""
    if not ctx.live:
        when = time.strftime("%Y-%m-%d", time.gmtime(cost.at)) if cost.at else "?"
        return f"recorded: the profile of the recorded set ({cost.ident.get('pair', '?')}, {when})"
    return (f"live: {ctx.pair.name}, this machine's profile, {len(cost.timings[1])} repetitions"
            + (", measured earlier" if cost.reused else ""))


def _pass_costs(ctx: Context) -> tuple[float, float, str, Any]:
    """(seconds of a 1-token target pass, seconds of a (K+1)-token pass, source, the costs.Cost they come from):
    the profile's (_profile)."""
    if "costs" not in ctx.memo:
        cost = _profile(ctx)
        ctx.memo["costs"] = (cost.pass_s(1), cost.pass_s(K + 1), profile_source(ctx, cost), cost)
    return ctx.memo["costs"]


def _speedup_recording(ctx: Context) -> dict[str, Any]:
    """The Speedup page's recorded k sweep and k policies (page_records.RESULTS), for the steps that quote them."""
    if "speedup_recording" not in ctx.memo:
        from specviz.teaching import page_records

        rec = ctx.page_recording("speedup")  # the one the baseline lesson reads too
        if rec is None:
            raise SpecvizError("The Speedup page's recording is missing from specviz/recorded/pages/: reinstall "
                               "specviz, or load a model to run this step live.")
        types = page_records.RESULTS["speedup"]
        ctx.memo["speedup_recording"] = {n: rec.result(n, types[n]) for n in ("sweep", "policies")}
    return ctx.memo["speedup_recording"]


def _timing(*sources, speed: bool = True, flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """Outcome's notes on the timed things a step's figures come from (Trials, a sweep's Comparisons, Costs), as
    the main page says them: the outside-load note of each (playback.load_note, a Cost's own) and the waits for a
    core left out of their times (explain.stalled_note). And its flags: with speed (the step shows their
    speedups), a speedup above what its passes allow (runfile.beyond_pass_bound). A live one was already timed
    again (experiments.compare_with_baseline); what stays so is said, not taught. flags: the step's own."""
    from specviz.data import playback, runfile
    from specviz.teaching import explain as say

    flags, load, waited = list(flags), [], []
    for src in sources:
        run, summary = (src.run, src.baseline) if isinstance(src, Trial) else \
            (src.spec, runfile.baseline_of(src.spec, src.base)) if hasattr(src, "spec") else (None, None)
        if run is None:  # a costs.Cost: its passes' own notes
            load.append(src.load)
            waited.append(say.stalled_note(src.stalled_s, src.timed_s, what="the timed passes"))
            continue
        load.append(playback.load_note(run, summary))
        waited.append(say.run_stalled_note(run, summary))
        if speed and runfile.beyond_pass_bound(run, summary):
            flags.append(say.slowed_speedup(float(summary["speedup"]), runfile.pass_bound(run, summary)))
    once = lambda xs: tuple(dict.fromkeys(x for x in xs if x))  # noqa: E731 - in order, each once
    return {"flags": once(flags), "load": tuple({n.text: n for n in load if n is not None}.values()),
            "waited": once(waited)}


# --------------------------------------------------------------------------
# experiments: each takes the Context (and the step's params) and returns an Outcome


def _n(x: float, fmt: str = ".2f") -> str:
    return format(x, fmt)


def _alpha_interval(run: Run) -> tuple[float, float]:
    e = measure.alpha_estimate(run.n_accepted, run.n_judged)
    return e.lo, e.hi


def greedy_identity(ctx: Context) -> Outcome:
    presets = ["The capital of France"] if ctx.live else ["The capital of France", "Python function"]
    trials = trials_of(ctx, *((p, 0.0) for p in presets))
    same = [t.baseline.get("identical") is True for t in trials]
    diffs = [t.baseline.get("first_difference") for t in trials if t.baseline.get("first_difference") is not None]
    tokens = sum(len(t.run.token_ids) for t in trials)
    if all(same):
        measured, detail = "identical", ""
    else:
        first = min(diffs) if diffs else 0
        measured = "a few tokens differ" if first >= len(trials[0].run.token_ids) // 2 else "mostly different"
        detail = (f" The first difference is at token {first + 1}: rounding in a several-token pass can flip a "
                  "near-tie between two tokens, so on this device and dtype the texts part there")
    return Outcome(measured, measured, {
        "verdict": measured, "n_same": sum(same), "n_runs": len(trials), "tokens": tokens, "detail": detail,
        "passes": sum(t.run.target_passes for t in trials),
    }, "; ".join(t.source for t in trials))


def greedy_passes(ctx: Context) -> Outcome:
    t = trial(ctx, "The capital of France")
    spec, base = t.baseline["spec_target_passes"], t.baseline["base_target_passes"]
    share = 100.0 * spec / base
    speedup = float(t.baseline["speedup"])
    why = ("less than the pass count suggests, because the draft's steps and the wider checks cost time too"
           if speedup < base / spec else "as much as the pass count suggests, or more")
    return Outcome(share, f"{share:.0f} %", {"against": _against(ctx, t),
        "share": share, "spec_passes": spec, "base_passes": base, "tokens": len(t.run.token_ids),
        "tpp": t.run.tokens_per_pass, "alpha": t.run.alpha, "speedup": speedup, "fewer": base / spec, "why": why,
    }, t.source, **_timing(t))


def _against(ctx: Context, t: Trial) -> str:
    """What a trial's speedup is over (explain.target_alone): "the float32 target alone", "the int8 target alone"."""
    from specviz.teaching.explain import target_alone

    int8 = ctx.live and getattr(ctx.pair, "target_precision", None) == "int8"  # its runs' dtype says float32
    return target_alone({"target": "int8"} if int8 else t.baseline, t.run.dtype)


def sampling_follows_p(ctx: Context, n: int) -> Outcome:
    import torch

    from specviz.teaching.experiments import first_token_trials, trials_from_logits

    if ctx.live:
        pair = ctx.pair
        tr = first_token_trials(pair.target, pair.draft, _ids(ctx, "The capital of France"), n=n, temperature=1.0,
                                seed=ctx.settings.seed, vocab=pair.shared_vocab, noise_reps=theory.NOISE_REPS,
                                progress=ctx.progress)
        seed = ctx.settings.seed
        src = f"live: {pair.name}, The capital of France, first new token, T = 1, seeds {seed}–{seed + n - 1}"
    else:
        name = RECORDED[(STORY, 1.0)]
        first = ctx.recording(name).run.rounds[0]
        p_top, q_top = dict(zip(first.p_top[0].ids, first.p_top[0].probs)), dict(zip(first.q_top[0].ids,
                                                                                       first.q_top[0].probs))
        ids = sorted(set(p_top) | set(q_top))
        # the recorded top tokens of p and q at the first position, and the rest of each as one "other" token
        pv = [p_top.get(i, 0.0) for i in ids]
        qv = [q_top.get(i, 0.0) for i in ids]
        pv.append(max(0.0, 1.0 - sum(pv)))
        qv.append(max(0.0, 1.0 - sum(qv)))
        logits = [torch.tensor(v, dtype=torch.float64).clamp_min(1e-30).log() for v in (pv, qv)]  # (len(ids)+1,)
        tr = trials_from_logits(*logits, n=n, temperature=1.0, seed=ctx.settings.seed, noise_reps=theory.NOISE_REPS)
        src = (f"recorded: {name}, first position: its top {len(p_top)} of p and q, the rest as one token; "
               f"{n} draws of the rule from seed {ctx.settings.seed}")
    tv_p, tv_q = theory.total_variation(tr.p, tr.counts), theory.total_variation(tr.q, tr.counts)
    noise = tr.noise  # n tokens drawn straight from the same p, over the same tokens as the trials
    if tv_p <= noise.limit:
        measured, lead = "the target's p", "The tokens followed the target's p"
        verdict = "Within sampling noise of p: the output follows the target, and the draft only sets the speed."
    else:
        measured = "the draft's q" if tv_q < tv_p else "in between"
        lead = ("The tokens were closer to the draft's q" if tv_q < tv_p else
                "The tokens were between p and q: closer to p, but further from it than noise reaches")
        verdict = ("Exact sampling almost never lands this far from p: something bends the distribution (check "
                   "the Exactness page, and report it).")
    return Outcome(measured, measured, {"lead": lead, "n": n, "kept": tr.accepted / n, "tv_p": tv_p,
                                        "tv_q": tv_q, "noise": noise.mean, "limit": noise.limit,
                                        "verdict": verdict}, src)


def verify_cost(ctx: Context) -> Outcome:
    t1, t5, src, timed = _pass_costs(ctx)
    ratio = t5 / t1
    if ratio < 1.5:
        verdict = ("About one pass: the weights are read from memory once for all the tokens, and reading them "
                   "is most of the time (memory-bound)")
    elif ratio < 3.0:
        verdict = ("More than one pass but far less than five: part of the time is reading the weights, part is "
                   "arithmetic that grows with the tokens")
    else:
        verdict = ("Close to five passes: the honest exception. Here the arithmetic, not the memory read, is the "
                   "limit, so checking drafts is not free and speculative decoding gains little")
    return Outcome(ratio, f"{ratio:.2f}×", {"ratio": ratio, "t1_ms": t1 * 1000, "t5_ms": t5 * 1000,
                                            "n": K + 1, "verdict": verdict}, src, **_timing(timed, speed=False))


def tokens_per_pass(ctx: Context) -> Outcome:
    t = trial(ctx, "Python function")
    run = t.run
    t1, t5, _, timed = _pass_costs(ctx)
    tpp = run.tokens_per_pass
    return Outcome(tpp, f"{tpp:.2f}", {
        "tpp": tpp, "tokens": len(run.token_ids), "passes": run.target_passes, "alpha": run.alpha,
        "per_token_ms": t5 * 1000 / tpp, "t1_ms": t1 * 1000, "k": K,
    }, t.source, **_timing(timed, speed=False))


def alpha_story(ctx: Context) -> Outcome:
    t = trial(ctx, STORY)
    lo, hi = _alpha_interval(t.run)
    a = t.run.alpha
    return Outcome(a, f"{a:.2f}", {"alpha": a, "lo": lo, "hi": hi, "accepted": t.run.n_accepted,
                                   "judged": t.run.n_judged}, t.source)


def alpha_code(ctx: Context) -> Outcome:
    code, story = trials_of(ctx, (CODE, 0.0), (STORY, 0.0))
    a, b = code.run.alpha, story.run.alpha
    lo, hi = _alpha_interval(code.run)
    plo, phi = _alpha_interval(story.run)
    overlap = not (hi < plo or phi < lo)
    which = "higher than" if a > b else "lower than" if a < b else "the same as"
    caveat = (" The two 95 % intervals overlap, so with this few drafts the difference may be chance."
              if overlap else " The 95 % intervals do not overlap.")
    return Outcome(a, f"{a:.2f}", {"alpha": a, "lo": lo, "hi": hi, "judged": code.run.n_judged, "story": b,
                                   "which": which, "caveat": caveat}, f"{code.source}; {story.source}")


def entropy_story_code(ctx: Context) -> Outcome:
    from specviz.teaching.lab import mean_entropy

    code, story = trials_of(ctx, (CODE, 0.0), (STORY, 0.0))
    hc, hp = mean_entropy(code.run), mean_entropy(story.run)
    if not (math.isfinite(hc) and math.isfinite(hp)):
        raise SpecvizError("A run judged no drafts, so there is no entropy to compare.")
    if abs(hp - hc) <= 0.1 * max(hp, hc, 1e-9):
        measured, lead = "about the same", "Its uncertainty was about the same on both texts"
    else:
        measured = "the story" if hp > hc else "the code"
        lead = f"The target was less sure on {measured}"
    # entropy where drafts were accepted vs rejected on the story alone: the run the chart below draws
    acc, rej = measure.entropy_by_verdict(story.run.rounds)
    if rej and acc:
        hr, ha = statistics.fmean(rej), statistics.fmean(acc)
        rej_text = (f"On the story alone (the chart below), where a draft was rejected the target's entropy averaged "
                    f"{hr:.2f} nats, against {ha:.2f} where it was accepted ({len(rej)} rejections, {len(acc)} "
                    "acceptances). "
                    + ("Where the target hesitates between several tokens, a smaller model rarely picks its choice."
                       if hr > ha else "Here rejections did not come where the target was less sure."))
    else:
        rej_text = "No draft was rejected on the story, so there is nothing to compare the entropy with."
    return Outcome(measured, measured, {"lead": lead, "h_story": hp, "h_code": hc, "alpha_story": story.run.alpha,
                                        "alpha_code": code.run.alpha, "rejections": rej_text},
                   f"{code.source}; {story.source}")


def temperature_alpha(ctx: Context) -> Outcome:
    g, s = trials_of(ctx, (STORY, 0.0), (STORY, 1.0))
    a0, a1 = g.run.alpha, s.run.alpha
    judged = [o for r in s.run.rounds for o in r.overlap[:len(r.accepted)]]
    ov = statistics.fmean(judged) if judged else float("nan")
    change = "fell" if a1 < a0 else "rose" if a1 > a0 else "stayed"
    why = ("sampling spreads both distributions, and where they differ the draft's sample is often refused"
           if a1 < a0 else "here the draft's samples were kept at least as often as its greedy guesses matched")
    return Outcome(a1, f"{a1:.2f}", {"a0": a0, "a1": a1, "change": change, "overlap": ov, "why": why,
                                     "judged": s.run.n_judged}, f"{g.source}; {s.source}")


def temperature_speedup(ctx: Context) -> Outcome:
    g, s = trials_of(ctx, (STORY, 0.0), (STORY, 1.0))
    s0, s1 = float(g.baseline["speedup"]), float(s.baseline["speedup"])
    pays = "faster than" if s1 > 1 else "slower than"
    return Outcome(s1, f"{s1:.2f}×", {"s0": s0, "s1": s1, "tpp0": g.run.tokens_per_pass,
                                      "tpp1": s.run.tokens_per_pass, "pays": pays}, f"{g.source}; {s.source}",
                   **_timing(g, s))


def best_k_theory(ctx: Context, alpha: float, c: float) -> Outcome:
    k, s = theory.best_k(alpha, c, k_max=16)
    s1 = theory.expected_speedup(alpha, 1, c)
    s16 = theory.expected_speedup(alpha, 16, c)
    return Outcome(float(k), str(k), {"k": k, "speedup": s, "s1": s1, "s16": s16, "alpha": alpha, "c": c},
                   "theory", answer=FROM_THEORY)


def best_k_pair(ctx: Context, ks: tuple[int, ...]) -> Outcome:
    """The pair on the code prompt: the model's best k from α (pooled over the sweep's runs) and the profile's c and
    verify cost (lab.model_best_k, as the Speedup page's section 2), against the best k of a measured sweep: live,
    a sweep of ks; recorded, the Speedup page's recorded sweep."""
    from specviz.teaching import lab
    from specviz.teaching.explain import sweep_edge_note as say_edge

    cost, flags = _profile(ctx), []
    if ctx.live:
        from specviz.teaching import costs, explain as say

        t = trial(ctx, "Python function")
        # the profile held against c in the lesson's own run: timed again, or the disagreement said
        steps = [x for r in t.run.rounds if (x := measure.draft_step_s(r)) is not None]
        chk = costs.check_c(ctx.pair.target, ctx.pair.chain_draft(), cost,
                            (steps, [t.baseline.get("base_step_s") or float("nan")]))
        cost = chk.cost
        if not chk.agree:
            flags.append(say.c_disagreement(cost.c, chk.run_c, "this lesson's run against its target alone"))
        pair = ctx.pair
        sweep = lab.k_sweep(pair.target, pair.chain_draft(), _ids(ctx, "Python function"), ks,
                            replace(ctx.settings, temperature=0.0), eos_token_id=pair.eos_token_ids,
                            vocab=pair.shared_vocab, progress=ctx.progress)
        runs, timed = [t.run] + [cmp.spec for cmp in sweep.values()], [t, *sweep.values()]
        src = f"{t.source}; live k sweep of {', '.join(map(str, ks))}; {profile_source(ctx, cost)}"
    else:
        got = _speedup_recording(ctx)
        sweep = got["sweep"]
        runs, timed = [cmp.spec for cmp in sweep.values()] + [got["policies"]["fixed"]], list(sweep.values())
        src = f"recorded: the Speedup page's k sweep of {', '.join(map(str, sweep))}; {profile_source(ctx, cost)}"
    alpha = min(measure.pooled_alpha(runs), 0.999)
    k_pred, s_pred = lab.model_best_k(alpha, cost)
    speed = {int(k): measure.steady_speedup(cmp.spec, cmp.base) for k, cmp in sweep.items()}
    best = max(speed, key=lambda k: (speed[k], -k))
    sweep_text = ("Measured: " + ", ".join(f"k = {k}: {v:.2f}×" for k, v in sorted(speed.items()))
                  + f". The sweep's best is k = {best}.")
    sweep_text = f"{sweep_text} {say_edge(best, max(sweep))}".rstrip()  # a best at the largest k says so
    return Outcome(float(best), str(best), {"k": best, "alpha": alpha, "c": cost.c, "k_pred": k_pred,
                                            "s_pred": s_pred, "sweep": sweep_text, "k_max": lab.MODEL_K_MAX,
                                            "measured": speed, "verify": cost.verify},
                   src, **_timing(*timed, flags=tuple(flags)))


def slow_draft_theory(ctx: Context, k: int, c: float) -> Outcome:
    s = theory.expected_speedup(1.0, k, c)
    grid = [theory.best_k(a / 20, c, k_max=16)[1] for a in range(0, 20)] + [s]
    return Outcome(s, f"{s:.2f}×", {"s": s, "k": k, "c": c, "tokens": theory.expected_tokens(1.0, k),
                                    "cost": 1 + k * c, "best_any": max(grid)}, "theory",
                   answer=FROM_THEORY)


EVEN = 0.02  # a speedup within this of 1× reads as "no faster", not "slower" (0.998 is shown as 1.00×)


def _moral(s: float) -> str:
    if s < 1 - EVEN:
        return "Slower than the target alone: a draft has to be much cheaper than the target, not only right."
    if s <= 1 + EVEN:
        return ("No faster than the target alone: the drafting cost what the kept drafts saved. A draft has to be "
                "much cheaper than the target, not only right.")
    return ("Not slower here, which the cost model does not expect at c = 1: timing noise, or a target-alone run "
            "slowed by other work on this machine. Run it again.")


def self_draft(ctx: Context) -> Outcome:
    """The target drafting for itself on the code prompt, against the target alone: live, or the recording."""
    t = trial(ctx, "Python function", self_draft=True)
    s = float(t.baseline["speedup"])
    return Outcome(s, f"{s:.2f}×", {
        "s": s, "alpha": t.run.alpha, "tpp": t.run.tokens_per_pass, "how": "measured",
        "detail": f"α = {t.run.alpha:.2f} (every draft is the target's own choice) and "
                  f"{t.run.tokens_per_pass:.2f} tokens per target pass, yet each round also paid {K} "
                  "draft steps as costly as target steps", "moral": _moral(s)}, t.source, **_timing(t))


# --------------------------------------------------------------------------
# the baseline: the same draft against a float32 and an int8 target, each against its own target alone

TARGETS = ("speedup", "targets")  # the Speedup page's recording of its section 1c: page, result
CODE_PROMPT = "Python function"  # the Speedup page's prompt (page_records.SPEEDUP), live and recorded
SAME = 0.05  # speedups within this share of each other, or α within this, read as "about the same"
C_MOVES = 0.10  # c moved when it changed by more than this share


def _targets_live(ctx: Context) -> tuple[list, str]:
    """experiments.target_comparison on the code prompt, the pair's draft against its float32 and its int8 target
    (ctx.load_pair), k = K."""
    from specviz.modeling import quant
    from specviz.teaching.experiments import target_comparison

    pairs = {tp: ctx.load_pair(tp) for tp in quant.TARGET_PRECISIONS}
    res = target_comparison(pairs, _ids(ctx, CODE_PROMPT), replace(ctx.settings, k=K, temperature=0.0),
                            progress=ctx.progress, **ctx.pair.run_kw)
    return res, f"live: {ctx.pair.name}, {CODE_PROMPT}, k = {K}, a float32 and an int8 target"


def _targets_recorded(ctx: Context) -> tuple[list | None, str]:
    """The Speedup page's recorded section 1c (None when its recording has none), and its source."""
    from specviz.teaching.page_records import RESULTS

    page, name = TARGETS
    rec = ctx.page_recording(page)
    if rec is None:
        return None, f"no recording of the {page} page"
    a = rec.about
    return rec.result(name, RESULTS[page][name]), (f"recorded: the Speedup page's section 1c ({a['pair']}, "
                                                   f"{a['device']}, {a['recorded_at']})")


NEEDS_INT8 = "This step needs the pair with an int8 target, which {why}: the answer is the Speedup page's recording."


def _targets(ctx: Context) -> tuple[dict | None, str, str]:
    """({"float32": PrecisionResult, "int8": ...} or None when there is none, source, a note said before the
    explanation): live when ctx.load_pair is given, else (or when loading fails) the recording."""
    if "targets" in ctx.memo:
        return ctx.memo["targets"]
    res, note = None, ""
    if ctx.live and ctx.load_pair is not None:
        try:
            res, src = _targets_live(ctx)
        except SpecvizError as e:
            note = NEEDS_INT8.format(why=f"did not load here ({e})") + " "
    elif ctx.live:
        note = NEEDS_INT8.format(why="this device or pair does not offer") + " "
    if res is None:
        res, src = _targets_recorded(ctx)
    by = {r.precision: r for r in res or ()}
    out = (by if {"float32", "int8"} <= set(by) else None), src, note
    ctx.memo["targets"] = out
    return out


NOT_RECORDED = "not recorded"


def _no_targets(src: str, note: str) -> Outcome:
    """The answer when neither a live int8 target nor the recording gives the comparison: said in one line."""
    return Outcome(NOT_RECORDED, NOT_RECORDED, {"said": note + "The Speedup page's recording has no comparison of a "
                                                "float32 and an int8 target yet, so this step is " + NOT_RECORDED
                                                + ": load a model with an int8 target to run it live."},
                   f"{src}: without the float32 and int8 targets")


def _side(r) -> dict[str, Any]:
    """One target's numbers: its speedup over its own target alone, c, α, and its target alone's pass and speed."""
    from specviz.core import measure as m

    spec, base = r.comparison.spec, r.comparison.base
    return {"s": m.steady_speedup(spec, base), "c": r.c, "alpha": spec.alpha, "tpp": spec.tokens_per_pass,
            "pass_ms": 1000 * base.steady_s_per_token, "base_tps": base.tokens_per_s, "spec_tps": spec.tokens_per_s}


def _ms(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _which(new: float, old: float, tol: float) -> str:
    """new against old: "about the same" within tol, else "larger" or "smaller"."""
    return "about the same" if abs(new - old) <= tol else ("larger" if new > old else "smaller")


def target_speedup(ctx: Context) -> Outcome:
    """Lesson "baseline", step 1: the speedup over the int8 target alone against the one over the float32 target
    alone: larger, about the same or smaller."""
    by, src, note = _targets(ctx)
    if by is None:
        return _no_targets(src, note)
    f, q = _side(by["float32"]), _side(by["int8"])
    verdict = _which(q["s"], f["s"], SAME * f["s"])
    why = ("a cheaper target leaves less to save" if q["pass_ms"] < f["pass_ms"] else
           "yet here the int8 target's pass was not the cheaper one, so the usual reason does not apply")
    said = (f"{note}Over the float32 target alone the speculative run was {f['s']:.2f}× ({f['spec_tps']:.1f} "
            f"against {f['base_tps']:.1f} tokens/s); over the int8 target alone {q['s']:.2f}× ({q['spec_tps']:.1f} "
            f"against {q['base_tps']:.1f} tokens/s): {verdict}. A one-token pass of the int8 target took "
            f"{_ms(q['pass_ms'])} ms against {_ms(f['pass_ms'])} ms for float32: {why}. A speedup is always over one "
            "baseline: llama.cpp on a laptop runs a quantized target, so what a student measures there is the "
            "figure over the quantized target alone." + llama_line())
    return Outcome(verdict, verdict, {"said": said, **{f"{k}_f32": v for k, v in f.items()},
                                      **{f"{k}_int8": v for k, v in q.items()}}, src,
                   **_timing(*(r.comparison for r in by.values())))


def llama_line() -> str:
    """What llama.cpp did with this pair on the machine that measured it (specviz/core/measured.json's group
    bench_llamacpp_int8, claim 16), in one sentence: where a laptop running llama.cpp stands. "" without it."""
    from specviz.core import claims

    g = claims.load_measured()["groups"].get("bench_llamacpp_int8")
    if g is None or not g["date"]:
        return ""
    f = g["figures"]
    where = g["machine"].split(", pair ")[0]  # "cpu, 2 CPUs, 2 threads"
    return (f" On the machine that recorded this ({where}; {g['date']}), llama.cpp ran this pair's quantized GGUF "
            f"files at {f['llama_target_tps']:.0f} tokens/s with the target alone and {f['llama_spec_tps']:.0f} with "
            f"its speculative decoding ({f['llama_spec_own']:.2f}× its own target alone); specviz's exact best-k run "
            f"with the int8 target made {f['best_tps']:.0f} tokens/s.")


def target_c_alpha(ctx: Context) -> Outcome:
    """Lesson "baseline", step 2: which of c and α moved from the float32 target to the int8 one."""
    by, src, note = _targets(ctx)
    if by is None:
        return _no_targets(src, note)
    f, q = _side(by["float32"]), _side(by["int8"])
    share, alpha = _which(q["c"], f["c"], C_MOVES * f["c"]), _which(q["alpha"], f["alpha"], SAME)
    moved = (share != "about the same", alpha != "about the same")
    measured = {(True, False): "c", (False, True): "α", (True, True): "both"}.get(moved, "neither")
    k = by["int8"].comparison.spec.decode.k
    lead = {"c": "c, not α", "α": "α, not c", "both": "both c and α", "neither": "neither c nor α"}[measured]
    said = (f"{note}What moved: {lead}. c = {q['c']:.3f} against the int8 target and {f['c']:.3f} against the "
            f"float32 target: the same draft step is a {share} share of the int8 target's pass. "
            f"α = {q['alpha']:.2f} against {f['alpha']:.2f}: {alpha}, since both targets "
            f"choose nearly the same tokens. Speedup ≈ tokens per pass ÷ (1 + k·c): {q['tpp']:.2f} ÷ (1 + {k}·"
            f"{q['c']:.2f}) = {q['tpp'] / (1 + k * q['c']):.2f}× for int8 against {f['tpp']:.2f} ÷ (1 + {k}·"
            f"{f['c']:.2f}) = {f['tpp'] / (1 + k * f['c']):.2f}× for float32, which measured {q['s']:.2f}× and "
            f"{f['s']:.2f}×.")
    return Outcome(measured, measured, {"said": said, "c_f32": f["c"], "c_int8": q["c"], "alpha_f32": f["alpha"],
                                        "alpha_int8": q["alpha"]}, src,
                   **_timing(*(r.comparison for r in by.values()), speed=False))


# --------------------------------------------------------------------------
# charts drawn next to a measured answer, from the runs and numbers the step measured


def draw_entropy_along_story(ctx: Context, outcome: Outcome):
    from specviz.teaching.charts import fig_entropy_acceptance

    t = trial(ctx, STORY)  # the run the step measured (memoised), whose figures the step's text quotes
    return fig_entropy_acceptance(t.run, t.decode, "the story alone")


def draw_speedup_against_k(ctx: Context, outcome: Outcome):
    from specviz.teaching.charts import fig_speedup_model

    v = outcome.values
    return fig_speedup_model(v["alpha"], v["c"], k_max=v.get("k_max", 16), verify_cost=v.get("verify"),
                             measured=v.get("measured"))


FIGURES: dict[str, Callable[[Context, Outcome], Any]] = {f.__name__: f for f in (
    draw_entropy_along_story, draw_speedup_against_k)}


EXPERIMENTS: dict[str, Callable[..., Outcome]] = {f.__name__: f for f in (
    greedy_identity, greedy_passes, sampling_follows_p, verify_cost, tokens_per_pass, alpha_story, alpha_code,
    entropy_story_code,
    temperature_alpha, temperature_speedup, best_k_theory, best_k_pair, slow_draft_theory, self_draft,
    target_speedup, target_c_alpha)}


# --------------------------------------------------------------------------
# the lessons

EXACTNESS = Link("pages/5_Exactness.py", "Exactness: greedy identity and the sampling histogram")
FAST = Link("pages/4_Why_it_is_fast.py", "Why it is fast: forward cost against tokens, on this device")
LAB = Link("pages/2_Acceptance_lab.py", "Acceptance lab: α by domain and temperature, entropy along the text")
SPEEDUP = Link("pages/3_Speedup.py", "Speedup: c measured here, the k sweep, the target drafting for itself")
SPEEDUP_TARGETS = Link("pages/3_Speedup.py", "Speedup, section 1c: the same draft against a float32 and an int8 target")
THEORY = Link("pages/6_Theory.py", "Theory: tokens per pass and speedup, with sliders")

LESSONS: tuple[Lesson, ...] = (
    Lesson("identity", "Speculative decoding does not change the output",
           "A small draft guesses, the target checks. Does the text come out different from the target's own?", (
        Step("same_text",
             "With greedy decoding (T = 0), will the speculative text equal the target alone, token for token?",
             choice("The speculative text is…", ("identical", "a few tokens differ", "mostly different")),
             "greedy_identity",
             "The speculative text was {verdict}: {n_same} of {n_runs} greedy runs gave the same {tokens} tokens as "
             "the target alone.{detail} A drafted "
             "token is kept only when it is the target's own choice at that position, and the first wrong one is "
             "replaced by the target's choice, so the text is the target's; the draft only decides how many "
             "tokens one target pass yields.",
             EXACTNESS),
        Step("passes",
             "The same text: what share of the target's forward passes did the speculative run need?",
             Prediction("Passes needed, % of the target alone", lo=5.0, hi=100.0, step=5.0, default=50.0, fmt=".0f",
                        close=10.0, unit=" %"),
             "greedy_passes",
             "{spec_passes} target passes instead of {base_passes} for {tokens} tokens ({share:.0f} %): "
             "{tpp:.2f} tokens per pass at α = {alpha:.2f}, {fewer:.2f}× fewer passes. The wall-clock speedup over "
             "{against} was {speedup:.2f}×, {why}.",
             EXACTNESS),
        Step("sampling",
             "At T = 1 the draft samples a token x, the target keeps it with probability min(1, p(x) / q(x)) and "
             "otherwise draws from max(0, p − q). Repeat it {n} times at one position: whose distribution do the "
             "tokens follow?",
             choice("The tokens follow…", ("the target's p", "the draft's q", "in between")),
             "sampling_follows_p",
             "{lead}. In {n} seeded draws of the rule the draft's token was kept "
             "{kept:.0%} of the time; otherwise the target drew a correction. The frequencies are {tv_p:.3f} "
             "(total variation) from the target's p and {tv_q:.3f} from the draft's q; drawing as many tokens "
             "straight from p gives {noise:.3f} on average, and noise alone almost never reaches {limit:.3f}. "
             "{verdict}",
             EXACTNESS, (("n", 2000),)),
    )),
    Lesson("one_pass", "Why checking five tokens costs about one pass",
           "The target checks k = 4 drafts plus one more position in one forward pass over 5 tokens.", (
        Step("cost5",
             "A target pass over 5 tokens costs how many 1-token passes?",
             Prediction("cost(5 tokens) ÷ cost(1 token)", lo=1.0, hi=5.0, step=0.1, default=3.0, fmt=".1f",
                        close=0.5, unit="×"),
             "verify_cost",
             "A {n}-token pass took {t5_ms:.1f} ms and a 1-token pass {t1_ms:.1f} ms: {ratio:.2f}×. {verdict}.",
             FAST),
        Step("tpp",
             "With k = 4 on a code prompt, how many tokens does each target pass yield?",
             Prediction("tokens per target pass", lo=1.0, hi=5.0, step=0.1, default=2.0, fmt=".1f", close=0.5),
             "tokens_per_pass",
             "{tokens} tokens in {passes} target passes: {tpp:.2f} per pass (α = {alpha:.2f}, at most {k} + 1). "
             "Each token cost {per_token_ms:.1f} ms of target time, against {t1_ms:.1f} ms for one token from a "
             "1-token pass.",
             FAST),
    )),
    Lesson("creative", "Why creative text accepts poorly",
           "α is the chance that the target accepts a drafted token. Does it depend on what is being written?", (
        Step("story",
             "Greedy, k = 4: what α will the draft reach on a surreal story?",
             Prediction("α on the story", default=0.5),
             "alpha_story",
             "On the story the target accepted {accepted} of {judged} judged drafts: α = {alpha:.2f} "
             "(95 % interval {lo:.2f}–{hi:.2f}).",
             LAB),
        Step("code",
             "And on a short Python function?",
             Prediction("α on the code", default=0.5),
             "alpha_code",
             "On the code α = {alpha:.2f} ({lo:.2f}–{hi:.2f}, {judged} judged drafts), {which} the story's "
             "{story:.2f}.{caveat}",
             LAB),
        Step("entropy",
             "Which text made the target itself less sure of its next token (higher entropy)?",
             choice("Less sure on…", ("the story", "the code", "about the same")),
             "entropy_story_code",
             "{lead}. Mean target entropy where drafts were judged: story {h_story:.2f} nats "
             "(α = {alpha_story:.2f}), code "
             "{h_code:.2f} nats (α = {alpha_code:.2f}). {rejections}",
             LAB, figure="draw_entropy_along_story"),
    )),
    Lesson("temperature", "What temperature does to acceptance",
           "At T = 0 a draft is accepted when it is the target's top token. At T = 1 the draft samples, and "
           "a drafted token x is kept with probability min(1, p(x) / q(x)).", (
        Step("alpha_t1",
             "On the story, what α at T = 1?",
             Prediction("α at T = 1", default=0.5),
             "temperature_alpha",
             "α {change} from {a0:.2f} at T = 0 to {a1:.2f} at T = 1 ({judged} judged drafts). The chance to keep a "
             "sampled draft is Σ min(p, q) over tokens, {overlap:.2f} on average at these positions: {why}.",
             LAB),
        Step("speedup_t1",
             "So what speedup over the target alone at T = 1?",
             Prediction("speedup at T = 1", lo=0.0, hi=3.0, step=0.05, default=1.0, fmt=".2f", close=0.2,
                        unit="×"),
             "temperature_speedup",
             "{s1:.2f}× at T = 1 ({tpp1:.2f} tokens per pass) against {s0:.2f}× at T = 0 ({tpp0:.2f} tokens per "
             "pass): at T = 1 speculative decoding was {pays} the target alone.",
             SPEEDUP),
    )),
    Lesson("choose_k", "Choosing k",
           "More drafts per round can yield more tokens per pass, but each draft step costs c target steps "
           "and a long guess is rarely right to the end.", (
        Step("theory",
             "A textbook pair, not this one: with α = {alpha} and c = {c}, which k gives the largest speedup?",
             Prediction("best k", lo=1, hi=16, step=1, default=8, fmt=".0f", close=1),
             "best_k_theory",
             "The model (1 − α^(k+1)) / ((1 − α)(1 + k c)) peaks at k = {k}: {speedup:.2f}×, against {s1:.2f}× "
             "at k = 1 and {s16:.2f}× at k = 16.",
             THEORY, (("alpha", 0.8), ("c", 0.1)), "draw_speedup_against_k"),
        Step("pair",
             "Now this pair on a code prompt, with its own α and c: which k is best?",
             Prediction("best k", lo=1, hi=12, step=1, default=4, fmt=".0f", close=1),
             "best_k_pair",
             "Here α = {alpha:.2f} and c = {c:.3f}, so the model predicts k = {k_pred} ({s_pred:.2f}×). {sweep}",
             SPEEDUP, (("ks", (1, 2, 4, 8)),), "draw_speedup_against_k"),
    )),
    Lesson("baseline", "What the speedup is measured against",
           "Every speedup is over one baseline: the target alone, in some precision. The same pair and draft, on "
           f"the code prompt with k = {K}, once with a float32 target and once with an int8 target, each against its "
           "own target alone.", (
        Step("shrinks",
             "With the int8 target, the speedup over the int8 target alone will be…",
             choice("Against the float32 target's speedup, it is…", ("larger", "about the same", "smaller")),
             "target_speedup",
             "{said}",
             SPEEDUP_TARGETS),
        Step("moves",
             "From the float32 target to the int8 one, which moved: c (a draft step in target passes) or α (the "
             "share of drafts kept)?",
             choice("What moved…", ("c", "α", "both", "neither")),
             "target_c_alpha",
             "{said}",
             SPEEDUP_TARGETS),
    )),
    Lesson("loses", "When speculative decoding loses",
           "The draft must be cheap as well as good. What if it is perfect but as slow as the target?", (
        Step("theory",
             "A draft that always agrees (α = 1) but costs a whole target pass per token (c = {c}), k = {k}: "
             "what speedup?",
             Prediction("speedup", lo=0.0, hi=5.0, step=0.1, default=2.5, fmt=".1f", close=0.2, unit="×"),
             "slow_draft_theory",
             "{k} + 1 = {tokens:.0f} tokens per round, for 1 + {k}·{c:.0f} = {cost:.0f} passes of work: {s:.2f}×. "
             "At c = 1 no α and no k do better than {best_any:.2f}×, and every real overhead pushes it below 1.",
             THEORY, (("k", 4), ("c", 1.0))),
        Step("self",
             "Now the target drafts for itself (k = 4): what speedup over the target alone?",
             Prediction("speedup", lo=0.0, hi=2.0, step=0.05, default=1.0, fmt=".2f", close=0.15, unit="×"),
             "self_draft",
             "{s:.2f}× ({how}): {detail}. {moral}",
             SPEEDUP),
    )),
)


def lesson(key: str) -> Lesson:
    for les in LESSONS:
        if les.key == key:
            return les
    raise InvalidSetting(f"Unknown lesson {key!r}. Lessons: {', '.join(le.key for le in LESSONS)}.")


# --------------------------------------------------------------------------
# running a step and saying what happened


def run_step(step: Step, ctx: Context) -> Outcome:
    """Run the step's experiment: live on ctx.pair, else from recordings or theory."""
    return EXPERIMENTS[step.experiment](ctx, **step.args)


def figure(step: Step, ctx: Context, outcome: Outcome):
    """The step's chart (a plotly Figure), or None; drawn from what the step measured."""
    return FIGURES[step.figure](ctx, outcome) if step.figure else None


def explain(step: Step, outcome: Outcome) -> str:
    """The step's explanation, filled from the measured numbers."""
    return step.explanation.format(**outcome.values)


NO_PREDICTION = "none picked"


def format_prediction(step: Step, value: float | str | None) -> str:
    pr = step.prediction
    if value is None:  # a choice left empty
        return NO_PREDICTION
    if pr.kind == "choice":
        return str(value)
    return format(float(value), pr.fmt) + pr.unit


def compare(step: Step, prediction: float | str | None, outcome: Outcome) -> str:
    """One sentence: the learner's prediction against the answer, measured or from theory (outcome.answer)."""
    shown, answer = format_prediction(step, prediction), outcome.answer
    if prediction is None:
        return f"No answer was picked before the experiment; {answer}: **{outcome.shown}**."
    if step.prediction.kind == "choice":
        if prediction == outcome.measured:
            return f"You predicted **{shown}**, and that is what {'was measured' if answer == MEASURED else 'theory gives'}."
        return f"You predicted **{shown}**; {answer}: **{outcome.shown}**."
    diff = float(outcome.measured) - float(prediction)
    if abs(diff) <= step.prediction.close:
        how = "close"
    else:
        gap = format(abs(diff), step.prediction.fmt) + step.prediction.unit
        how = f"the answer is {gap} {'higher' if diff > 0 else 'lower'}"
    return f"You predicted **{shown}**; {answer}: **{outcome.shown}** ({how})."
