from specviz.teaching import baseline
from specviz.data import runfile
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.data.playback import Playback
from specviz.data.records import Run
from specviz.core.settings import DecodeSettings, is_greedy
from tiny import tiny_lm


def test_greedy_is_temperature_zero():
    assert DecodeSettings().greedy and is_greedy(0) and is_greedy(0.0)
    assert not DecodeSettings(temperature=0.7).greedy


def test_the_engine_takes_the_settings_and_a_run_gives_them_back():
    target, draft = tiny_lm(100), tiny_lm(200)
    s = DecodeSettings(k=3, k_policy="adaptive", temperature=0.8, top_p=0.9, top_k=20, max_new_tokens=12, seed=5)
    run = speculative_decode(target, draft, [2, 7, 1, 8], s)
    assert DecodeSettings.from_record(run.settings) == s
    base = autoregressive_decode(target, [2, 7, 1, 8], s)
    assert DecodeSettings.from_record(base.settings).temperature == s.temperature
    assert len(base.token_ids) == s.max_new_tokens


def test_missing_recorded_settings_take_the_defaults():
    assert DecodeSettings.from_record({"k": 2, "temperature": None}) == DecodeSettings(k=2)


def test_a_run_reads_its_decoding_settings_typed_and_keeps_the_other_keys():
    target, draft = tiny_lm(100), tiny_lm(200)
    s = DecodeSettings(k=2, k_policy="adaptive", temperature=0.5, top_k=7, max_new_tokens=6, seed=3)
    run = speculative_decode(target, draft, [2, 7, 1, 8], s, eos_token_id=[5])
    assert run.decode == s and run.eos_token_ids == [5] and run.settings["drafter"] == "model"
    # through a run file and back, and into a replay
    back = Run.from_json(run.to_json())
    assert back.decode == s and back.eos_token_ids == [5]
    assert Playback.replay(back, "").decode == s


def test_a_run_file_from_before_typed_settings_loads_with_the_defaults():
    # the old engine's key order, no k_policy / top_k, one EOS id as an int
    old = {"k": 3, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 20, "seed": 1, "eos_token_id": 9}
    d = {"format": "specviz.run/1", "mode": "speculative", "prompt_ids": [1], "token_ids": [], "rounds": [],
         "settings": old, "stop_reason": "eos", "prefill_s": 0.0, "decode_s": 0.0, "target_passes": 0,
         "draft_passes": 0}
    run = Run.from_dict(d)
    assert run.decode == DecodeSettings(k=3, max_new_tokens=20, seed=1) and run.eos_token_ids == [9]
    assert run.settings == old  # the record itself is not rewritten


def test_the_shipped_recordings_read_their_settings():
    recs = runfile.list_recorded()
    assert len(recs) == len(runfile.DEFAULT_RECORDINGS)
    for rec in recs:
        spec = next(r for r in runfile.DEFAULT_RECORDINGS if r.name == rec.name)
        assert rec.run.decode == DecodeSettings(k=spec.k, k_policy=spec.k_policy, temperature=spec.temperature,
                                                top_p=spec.top_p, max_new_tokens=48, seed=spec.seed)


def test_the_target_alone_baseline_of_a_run_without_max_new_tokens_uses_the_one_default():
    target, draft = tiny_lm(100), tiny_lm(200)
    n = DecodeSettings().max_new_tokens
    spec = speculative_decode(target, draft, [2, 7, 1, 8], DecodeSettings(k=3, max_new_tokens=n + 5), eos_token_id=[])
    del spec.settings["max_new_tokens"]  # as in a hand-written file
    base = baseline.target_alone(target, spec, warm=False)
    assert base["base_tokens"] == n and spec.decode.max_new_tokens == n


# Public functions of specviz.decoding and specviz.teaching that may still take a loose decoding keyword, each
# with the reason it is not a place where a run's settings are passed down:
LOOSE_ALLOWED = {
    # the sampler itself: the one place the knobs become a distribution (engine.sampler_of builds it from settings)
    "specviz.decoding.sampling.logits_to_probs", "specviz.decoding.sampling.Sampler.create",
    # the round loop every mode shares (engine, tree): its length limit is the caller's settings.max_new_tokens
    "specviz.decoding.engine.drive",
    # words for a run's k and policy in a caption (a recorded run's, or the sidebar's), no run is made
    "specviz.teaching.explain.k_words",
    # builds the per-run k policy object from settings.k and settings.k_policy (engine and tree call it)
    "specviz.decoding.kpolicy.make_k_policy",
    # a progress total (tokens expected), not a decoding setting: the caller passes settings.max_new_tokens
    "specviz.teaching.lab.stream_run",
    # single-position sampling experiments (no decoding run): the temperature/top-k/top-p of one distribution
    "specviz.teaching.experiments.first_token_trials", "specviz.teaching.experiments.trials_from_logits",
    "specviz.teaching.page_records.exactness_trials",
    "specviz.teaching.experiments.agreement_along", "specviz.teaching.lab.first_position",
    "specviz.teaching.lab.position_from_logits", "specviz.teaching.lab.entropy_verdict",
    "specviz.teaching.rules.compare_rules", "specviz.teaching.rules.first_distributions",
    "specviz.teaching.rules.rule_lab",
    # a temperature used as a key of measured cells (a chart's or summary's column), not passed to a run
    "specviz.teaching.charts.alpha_summary", "specviz.teaching.charts.fig_alpha_by_domain",
    # a lesson step's experiment variable: applied as replace(ctx.settings, temperature=...) to pick its run
    "specviz.teaching.lessons.trial",
}
LOOSE = {"temperature", "top_p", "top_k", "k_policy", "max_new_tokens"}


def _public_functions(package):
    """(qualified name, function) of every public function and public class method defined in `package`."""
    import importlib
    import inspect
    import pkgutil

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj
            elif inspect.isclass(obj):
                for mname, m in vars(obj).items():
                    f = m.__func__ if isinstance(m, (classmethod, staticmethod)) else m
                    if not mname.startswith("_") and inspect.isfunction(f):
                        yield f"{mod.__name__}.{name}.{mname}", f


def test_decoding_entry_points_take_decode_settings_not_loose_keywords():
    """One typed DecodeSettings goes down from a page to the engine: a public function of specviz.decoding or
    specviz.teaching that takes temperature, top_p, top_k, k_policy or max_new_tokens on its own would be a second
    set of defaults (LOOSE_ALLOWED names the inner ones, and why)."""
    import inspect

    import specviz.decoding
    import specviz.teaching

    found = {}
    for package in (specviz.decoding, specviz.teaching):
        for qual, fn in _public_functions(package):
            loose = LOOSE & set(inspect.signature(fn).parameters)
            if loose and qual not in LOOSE_ALLOWED:
                found[qual] = sorted(loose)
    assert not found, f"take a DecodeSettings (settings: DecodeSettings) instead of loose keywords: {found}"
    # the entry points do take one
    from specviz.decoding import engine, tree

    for fn in (engine.speculative_stream, engine.speculative_decode, engine.autoregressive_stream,
               engine.autoregressive_decode, engine.warm_up, tree.tree_stream, tree.tree_decode):
        assert inspect.signature(fn).parameters["settings"].default == DecodeSettings()
