from specviz.teaching import baseline
from specviz.data import runfile
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.data.playback import Playback
from specviz.data.records import Run
from specviz.core.settings import DecodeSettings, is_greedy
from tiny import tiny_qwen


def test_greedy_is_temperature_zero():
    assert DecodeSettings().greedy and is_greedy(0) and is_greedy(0.0)
    assert not DecodeSettings(temperature=0.7).greedy


def test_the_engine_takes_the_settings_and_a_run_gives_them_back():
    target, draft = tiny_qwen(100), tiny_qwen(200)
    s = DecodeSettings(k=3, k_policy="adaptive", temperature=0.8, top_p=0.9, top_k=20, max_new_tokens=12, seed=5)
    run = speculative_decode(target, draft, [2, 7, 1, 8], **s.engine_kwargs())
    assert DecodeSettings.from_record(run.settings) == s
    base = autoregressive_decode(target, [2, 7, 1, 8], **s.baseline_kwargs())
    assert DecodeSettings.from_record(base.settings).temperature == s.temperature
    assert len(base.token_ids) == s.max_new_tokens


def test_missing_recorded_settings_take_the_defaults():
    assert DecodeSettings.from_record({"k": 2, "temperature": None}) == DecodeSettings(k=2)


def test_a_run_reads_its_decoding_settings_typed_and_keeps_the_other_keys():
    target, draft = tiny_qwen(100), tiny_qwen(200)
    s = DecodeSettings(k=2, k_policy="adaptive", temperature=0.5, top_k=7, max_new_tokens=6, seed=3)
    run = speculative_decode(target, draft, [2, 7, 1, 8], **s.engine_kwargs(), eos_token_id=[5])
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
    target, draft = tiny_qwen(100), tiny_qwen(200)
    n = DecodeSettings().max_new_tokens
    spec = speculative_decode(target, draft, [2, 7, 1, 8], k=3, max_new_tokens=n + 5, eos_token_id=[])
    del spec.settings["max_new_tokens"]  # as in a hand-written file
    base = baseline.target_alone(target, spec, warm=False)
    assert base["base_tokens"] == n and spec.decode.max_new_tokens == n
