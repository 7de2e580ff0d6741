"""Settings that used to pass the checks and then crash, and the server's limits (specviz.core.limits)."""

from __future__ import annotations

import pytest

from specviz import InvalidSetting, speculative_decode
from specviz.tools import cli
from specviz.decoding import models
from specviz.core import prompts
from specviz.decoding.engine import SEED_MAX, TEMPERATURE_MIN
from tiny import split_settings, tiny_lm
from specviz.core.settings import DecodeSettings


@pytest.fixture(scope="module")
def qwen():
    return tiny_lm(0), tiny_lm(1)


def decode(pair, ids=(1, 2, 3), **kw):
    draft, target = pair
    args = dict(k=4, temperature=0.0, max_new_tokens=8, eos_token_id=[])
    args.update(kw)
    settings, rest = split_settings(args)
    return speculative_decode(target, draft, list(ids), settings, **rest)


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, TEMPERATURE_MIN / 2, True])
def test_a_temperature_too_small_for_the_softmax_is_refused(qwen, temperature):
    with pytest.raises(InvalidSetting, match="temperature must be 0 .greedy. or from 0.001 up"):
        decode(qwen, temperature=temperature)


def test_the_smallest_temperature_allowed_samples_cleanly(qwen):
    run = decode(qwen, temperature=TEMPERATURE_MIN, max_new_tokens=12)
    assert len(run.token_ids) == 12
    assert all(p == p for r in run.rounds for p in r.p_drafted + r.q_drafted)  # no NaN


@pytest.mark.parametrize("seed", [-1, SEED_MAX + 1, 2**70, True, 1.0])
def test_a_seed_outside_0_to_2_63_is_refused(qwen, seed):
    with pytest.raises(InvalidSetting, match="seed must be an integer from 0 to 2..63-1"):
        decode(qwen, seed=seed, temperature=1.0)


def test_the_largest_seed_works_and_is_reproducible(qwen):
    a = decode(qwen, seed=SEED_MAX, temperature=1.0)
    assert a.token_ids == decode(qwen, seed=SEED_MAX, temperature=1.0).token_ids


def test_a_run_may_fill_the_context_exactly_drafts_included():
    """GPT-2 has learned positions: a draft or verify pass past n_positions would fail with an IndexError."""
    target, draft = tiny_lm(1, arch="gpt2"), tiny_lm(0, arch="gpt2")  # 128 positions each
    prompt = list(range(1, 9))
    run = speculative_decode(target, draft, prompt, DecodeSettings(k=8, max_new_tokens=120), eos_token_id=[])
    assert len(prompt) + len(run.token_ids) == 128
    with pytest.raises(InvalidSetting, match="lower max_new_tokens to at most 120"):
        speculative_decode(target, draft, prompt, DecodeSettings(k=8, max_new_tokens=121), eos_token_id=[])


@pytest.mark.parametrize("n", [128, 200])
def test_a_prompt_that_alone_fills_the_context_says_shorten_it(n):
    target, draft = tiny_lm(1, arch="gpt2"), tiny_lm(0, arch="gpt2")
    with pytest.raises(InvalidSetting) as err:
        speculative_decode(target, draft, [1] * n, DecodeSettings(k=2, max_new_tokens=1))
    msg = str(err.value)
    assert "shorten the prompt" in msg and "max_new_tokens" not in msg and "at most 0" not in msg


def test_a_prompt_over_the_token_limit_is_refused(make_tokenizer, monkeypatch):
    tok = make_tokenizer([f"w{i}" for i in range(20)])
    text = " ".join(f"w{i}" for i in range(12))
    assert len(prompts.encode(tok, text, chat=False)) == 12
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "10")
    with pytest.raises(InvalidSetting, match="12 tokens long, more than the limit of 10"):
        prompts.encode(tok, text, chat=False)
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_CHARS", "20")
    with pytest.raises(InvalidSetting, match="more than the limit of 20 here"):
        prompts.encode(tok, text, chat=False)


def test_a_bad_limit_in_the_environment_is_a_clear_error(monkeypatch):
    from specviz import ConfigError
    from specviz.core import limits

    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "lots")
    with pytest.raises(ConfigError, match=r"\$SPECVIZ_MAX_NEW_TOKENS must be an integer"):
        limits.max_new_tokens()


@pytest.mark.parametrize("extra, message", [
    (["--k", "0"], "k (tokens drafted per round)"),
    (["--temperature", "1e-45"], "temperature"),
    (["--seed", str(2**70)], "seed"),
    (["--max-new-tokens", "100000"], "limit of 512"),
])
def test_cli_run_checks_its_settings_before_loading_the_models(monkeypatch, capsys, extra, message):
    def load_pair(*a, **k):
        raise AssertionError("the models were loaded before the settings were checked")

    monkeypatch.setattr(models, "load_pair", load_pair)
    rc = cli.main(["run", "--prompt", "hello", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_PROMPT_CHARS",
                                  "SPECVIZ_MAX_RUN_FILE_MB", "SPECVIZ_MAX_DRAWN_CHARS", "SPECVIZ_BASELINE_TTL_S"])
def test_check_all_names_each_bad_limit(monkeypatch, name):
    """What a page checks before it reads any limit (ui.page_setup)."""
    from specviz import ConfigError
    from specviz.core import limits

    limits.check_all()
    monkeypatch.setenv(name, "-1")
    with pytest.raises(ConfigError, match=rf"\${name} must be from"):
        limits.check_all()
