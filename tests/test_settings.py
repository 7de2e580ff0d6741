from specviz.engine import autoregressive_decode, speculative_decode
from specviz.settings import DecodeSettings, is_greedy
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
