"""`python -m specviz`: models lists pairs; bad input exits 2 with a message, no traceback."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.tools import cli
from specviz.decoding import models
from specviz.core import prompts
from specviz.teaching import render
from specviz.data.records import Run
from specviz.core.settings import DecodeSettings

ROOT = Path(__file__).resolve().parent.parent
TINY_REGISTRY = ROOT / "tests" / "models_tiny.yaml"


def specviz(*args: str, stdin: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, input=stdin, timeout=timeout)


def test_models_lists_the_default_pair():
    status = models.pair_status(None)
    r = specviz("models")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("qwen2.5-coder-embedded (default): ")
    if not status.available:
        pytest.skip(f"default pair not installed here: {status.how_to_get}")
    assert first.endswith(": available")
    assert "smollm2-135m-360m: " in r.stdout and "hf download" in r.stdout  # how to get the others


@pytest.mark.parametrize("args,message", [
    (["run", "--prompt", "   "], "The prompt is empty"),
    (["run", "--prompt", "hi", "--pair", "nope"], "unknown pair 'nope'"),
    (["run", "--prompt", "hi", "--draft", "/nonexistent/d", "--target", "/nonexistent/t"], "not found"),
    (["--models", "/nonexistent/models.yaml", "models"], "file not found"),
    (["--models", "/dev/zero", "models"], "/dev/zero: not a regular file"),
])
def test_bad_input_exits_2_without_traceback(args, message):
    r = specviz(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") or "\nerror: " in r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_bench_help_prints_its_options():
    r = specviz("bench", "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:") and "--tiny" in r.stdout
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize("command,option", [("timing", "--limit"), ("loadtest", "--simulate"),
                                            ("laptop", "--memory-gb"), ("servicecost", "--spawns")])
def test_the_development_tools_are_commands_of_python_m_specviz(command, option):
    """specviz/__main__.py adds specviz.devtools' commands to tools.cli's: each is listed and has its --help."""
    listed = specviz("--help")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^    {command} ", listed.stdout, re.M), listed.stdout
    r = specviz(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m specviz {command}") and option in r.stdout
    assert "Traceback" not in r.stderr + r.stdout


# -----------------------------------------------------------------------------
# `run` on a tiny pair (in process): the engine validates, the CLI prints


@pytest.fixture
def tiny_cli(monkeypatch, tiny_pair):
    pytest.importorskip("specviz.decoding.engine")
    monkeypatch.setattr(models, "load_pair", lambda *a, **k: tiny_pair)
    return tiny_pair


@pytest.mark.parametrize("extra,message", [
    (["--k", "0"], "k (tokens drafted per round)"),
    (["--k", "33"], "k (tokens drafted per round)"),
    (["--temperature", "-1"], "temperature"),
    (["--top-p", "0"], "top_p"),
    (["--top-p", "1.5"], "top_p"),
    (["--max-new-tokens", "300"], "context"),
    (["--max-new-tokens", "100000"], "more than the limit of 512"),
    (["--top-k", "-1"], "top_k"),
    (["--k-policy", "greedy-ish"], "k_policy must be"),
    (["--device", "bogus"], "device 'bogus': use cpu, cuda, cuda:N or mps"),
    (["--device", "meta"], "device 'meta': use cpu"),
])
def test_run_bad_settings(tiny_cli, capsys, extra, message):
    rc = cli.main(["run", "--prompt", "w1 w2 w3", "--raw", *extra])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err
    assert "Traceback" not in out + err


def test_run_prints_coloured_text_and_stats(tiny_cli, capsys):
    rc = cli.main(["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "12", "--k", "3", "--color", "always"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    style = {s: f"\x1b[{render.ANSI_STYLES[s]}m" for s in ("accepted", "correction", "bonus")}
    assert style["accepted"] in out  # accepted or ...
    assert style["correction"] in out or style["bonus"] in out  # ... a correction (reversed) or bonus (bold)
    for stat in ("tokens", "rounds", "alpha", "accepted/drafted", "tokens per pass", "tokens/s"):
        assert stat in out


@pytest.mark.cores
def test_run_says_when_its_speed_was_taken_under_outside_load(tiny_cli, capsys):
    """The CLI prints its speed, so it says, as the pages do, when other programs took the CPU during it."""
    from busy import passes_losing_the_cpu

    args = ["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "6", "--k", "2", "--k-policy", "fixed"]
    # passes that lose the CPU for 20 ms (sleep: wall time passes, no CPU time is used), as under another program
    with passes_losing_the_cpu(tiny_cli.target):
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    n = int(out.split("rounds          ")[1].split()[0])
    assert f"Taken under outside load: {n} of the run's {n} rounds ran while other programs" in out
    assert out.index("tokens/s") < out.index("Taken under outside load")


@pytest.mark.cores
def test_run_says_what_waits_for_a_core_it_left_out(tiny_cli, capsys):
    """Beside programs busy on every core, the passes' threads wait for a core; the speed leaves that out, and
    the CLI says how much."""
    import os

    from busy import busy_programs, team_or_skip

    team_or_skip()
    args = ["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "24", "--k", "2", "--k-policy", "fixed"]
    with busy_programs(os.cpu_count() or 2):
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "Not counted: " in out and " of the run, while other work held the cores" in out
    assert out.index("tokens/s") < out.index("Not counted")


def test_run_json_round_trips(tiny_cli, capsys):
    rc = cli.main(["run", "--prompt", "w5 w6", "--raw", "--max-new-tokens", "8", "--json", "--temperature", "0.8"])
    out, _ = capsys.readouterr()
    assert rc == 0
    run = Run.from_dict(json.loads(out))
    assert len(run.token_ids) == 8 and run.settings["k"] == 4


def test_run_tree_prints_the_targets_own_text_and_tree_stats(tiny_cli, capsys):
    from specviz.decoding.engine import autoregressive_decode
    from specviz.data.tree_records import TreeRun

    args = ["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "12", "--tree", "8"]
    assert cli.main([*args, "--json"]) == 0
    run = TreeRun.from_dict(json.loads(capsys.readouterr().out))
    ids = list(tiny_cli.tokenizer("w1 w2 w3")["input_ids"])
    alone = autoregressive_decode(tiny_cli.target, ids, DecodeSettings(max_new_tokens=12),
                                  eos_token_id=tiny_cli.eos_token_ids,
                                  vocab=tiny_cli.shared_vocab)
    assert run.token_ids == alone.token_ids and run.settings["budget"] == 8 and run.n_nodes > len(run.rounds)
    assert cli.main([*args, "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(tiny_cli.tokenizer.decode(alone.token_ids))
    assert "up to 8 nodes, 2 children per node" in out and "tokens per pass" in out
    assert cli.main([*args[:-1], "0"]) == 2 and "budget must be an integer from 1" in capsys.readouterr().err


def test_run_spine_prints_the_targets_own_text_and_its_shape(tiny_cli, capsys):
    from specviz.decoding.engine import autoregressive_decode
    from specviz.data.tree_records import TreeRun

    args = ["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "12", "--spine", "--doubt", "1.0"]
    assert cli.main([*args, "--json"]) == 0
    run = TreeRun.from_dict(json.loads(capsys.readouterr().out))
    ids = list(tiny_cli.tokenizer("w1 w2 w3")["input_ids"])
    alone = autoregressive_decode(tiny_cli.target, ids, DecodeSettings(max_new_tokens=12),
                                  eos_token_id=tiny_cli.eos_token_ids,
                                  vocab=tiny_cli.shared_vocab)
    assert run.token_ids == alone.token_ids
    assert run.settings["shape"] == "spine" and run.settings["doubt"] == 1.0 and run.settings["k_policy"] == "best"
    assert all(len(r.children[-1]) == 2 for r in run.rounds)  # doubt 1: a sibling at every node
    assert cli.main([*args, "--color", "never"]) == 0
    assert "1 sibling where the draft's top probability < 1.0" in capsys.readouterr().out
    assert cli.main([*args[:-1], "1.5"]) == 2 and "doubt must be a number from 0 to 1" in capsys.readouterr().err
    assert cli.main([*args[:-2], "--max-depth", "0"]) == 2 and "max_depth must be" in capsys.readouterr().err
    assert cli.main([*args[:-3], "--doubt", "0.5"]) == 2 and "add --spine" in capsys.readouterr().err


def _run_json(capsys, *extra) -> Run:
    rc = cli.main(["run", "--prompt", "w5 w6", "--raw", "--max-new-tokens", "12", "--json", *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return Run.from_dict(json.loads(out))


@pytest.mark.parametrize("policy", ["fixed", "adaptive", "best"])
def test_run_takes_the_apps_k_policies(tiny_cli, capsys, policy):
    run = _run_json(capsys, "--k", "2", "--k-policy", policy)
    assert run.settings["k_policy"] == policy
    assert (set(run.ks[:-1]) == {2}) == (policy == "fixed")  # only fixed keeps k=2 every round


def test_run_defaults_to_the_main_pages_first_run(tiny_cli, capsys):
    """Without --k and --k-policy, run drafts as the main page's first run does (prompts.FIRST_RUN)."""
    from specviz.core import prompts

    run = _run_json(capsys)
    assert (run.settings["k"], run.settings["k_policy"]) == (prompts.FIRST_RUN.k, prompts.FIRST_RUN.k_policy)
    # a tree says that --k-policy applies to chains only when one was given
    tree = ["run", "--prompt", "w1 w2", "--raw", "--max-new-tokens", "4", "--tree", "4", "--json"]
    assert cli.main(tree) == 0 and "note:" not in capsys.readouterr().err
    assert cli.main([*tree, "--k-policy", "fixed"]) == 0 and "--k-policy apply to chains" in capsys.readouterr().err


def test_run_drafts_by_prompt_lookup(tiny_cli, capsys):
    run = _run_json(capsys, "--drafter", "prompt-lookup")
    assert run.settings["drafter"] == "prompt-lookup" and run.draft_passes == 0
    assert run.token_ids == _run_json(capsys).token_ids  # greedy: the same text, whoever drafts
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--prompt", "w1", "--drafter", "ngram"])
    assert e.value.code == 2 and "ngram" in capsys.readouterr().err


def test_run_takes_top_k(tiny_cli, capsys):
    run = _run_json(capsys, "--temperature", "1", "--top-k", "1", "--seed", "4")
    assert run.settings["top_k"] == 1
    # top-k 1 leaves one token to sample: the target's argmax, as greedy picks
    assert run.token_ids == _run_json(capsys).token_ids


def test_run_without_chat_template_says_so(tiny_cli, capsys):
    assert cli.main(["run", "--prompt", "w1", "--max-new-tokens", "4"]) == 0
    assert "no chat template" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# rendering helpers


@pytest.mark.real
def test_token_pieces_keep_multibyte_characters_whole(default_pair):
    tok = default_pair.tokenizer
    text = "naïve 🚀 код"
    ids = tok(text)["input_ids"]
    pieces = cli.token_pieces(tok, ids)
    assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)


@pytest.mark.real
def test_encode_prompt_uses_the_chat_template(default_pair):
    tok = default_pair.tokenizer
    ids = prompts.encode(tok, "hi", chat=True)
    assert tok.decode(ids).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert prompts.encode(tok, "hi", chat=False) == tok("hi")["input_ids"]


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_run_puts_the_draft_in_the_asked_precision(precision, capsys):
    from specviz.tools.cli import main

    tiny = str(ROOT / "tests" / "models_tiny.yaml")
    rc = main(["--models", tiny, "run", "--pair", "tiny-random", "--prompt", "ab", "--max-new-tokens", "4",
               "--draft-precision", precision, "--json"])
    assert rc == 0
    from specviz.modeling import quant

    label = f"int8 ({quant.int8_engine()})" if precision == "int8" else precision  # int8 names its engine
    assert f"{label} draft" in capsys.readouterr().err


def test_run_refuses_an_unknown_draft_precision(capsys):
    from specviz.tools.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", "--prompt", "ab", "--draft-precision", "int3"])
    assert e.value.code == 2 and "int3" in capsys.readouterr().err


def test_bench_takes_the_registry_before_or_after_its_name():
    assert cli.parse_bench_args(["--tiny", "--models", "after.yaml"]).models == "after.yaml"
    args = cli.check_bench_args(cli.build_parser().parse_args(["--models", "before.yaml", "bench", "--tiny"]))
    assert args.models == "before.yaml" and args.method_names[0] == "target"


def test_run_and_bench_share_one_definition_of_their_common_options():
    run = cli.build_parser().parse_args(["run", "--prompt", "x", "--pair", "p", "--seed", "3", "--dtype",
                                         "bfloat16", "--draft-precision", "int8"])
    bench = cli.parse_bench_args(["--pair", "p", "--seed", "3", "--dtype", "bfloat16", "--draft-precision", "int8"])
    for name in ("pair", "seed", "dtype", "draft_precision", "max_new_tokens"):
        assert getattr(run, name) == getattr(bench, name)
    assert (run.temperature, bench.temperature) == (0.0, 0.7)  # greedy by default; bench's sample mode's T


def test_run_colours_a_tree_run_with_the_same_terminal_renderer(tiny_cli, capsys):
    args = ["run", "--prompt", "w1 w2 w3", "--raw", "--max-new-tokens", "12", "--tree", "8"]
    assert cli.main([*args, "--color", "never"]) == 0
    plain = capsys.readouterr().out
    assert cli.main([*args, "--color", "always"]) == 0
    out = capsys.readouterr().out
    text = re.sub(r"\x1b\[[0-9;:]*m", "", out.split("\n\n")[0]).replace("⏎", "").replace("⁺", "")
    assert text == plain.split("\n\n")[0]  # the same text, styled by what each round did
    assert f"\x1b[{render.ANSI_STYLES['correction']}m" in out or f"\x1b[{render.ANSI_STYLES['bonus']}m" in out


def test_run_tree_on_a_pair_that_drafts_through_text_is_refused_before_any_load(monkeypatch, capsys):
    def no_load(*a, **k):
        raise AssertionError("the pair was loaded before --tree was refused")

    monkeypatch.setattr(models, "load_pair", no_load)
    rc = cli.main(["--models", "models.yaml", "run", "--prompt", "hi", "--tree", "8",
                   "--pair", "smollm2-135m-coder-1.5b"])
    out, err = capsys.readouterr()
    assert rc == 2 and "--tree or --spine (a token tree) needs a draft that shares the target's vocabulary" in err
    assert "Traceback" not in out + err


def test_run_with_a_top_p_below_float_precision_keeps_the_most_likely_token(tiny_cli, capsys):
    """top_p 1e-300 is 0 in float32: every token was masked and sampling raised an IndexError."""
    rc = cli.main(["run", "--prompt", "w1 w2", "--raw", "--temperature", "1", "--top-p", "1e-300",
                   "--max-new-tokens", "6", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert len(Run.from_json(out).token_ids) == 6


def _specviz_bytes(*args: str, stdin: bytes, env: dict | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True, cwd=ROOT, input=stdin,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=timeout)


def test_a_utf16_prompt_on_stdin_is_a_clear_error():
    r = _specviz_bytes("--models", str(TINY_REGISTRY), "run", "--prompt", "-", stdin="hello".encode("utf-16"))
    err = r.stderr.decode()
    assert r.returncode == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: --prompt -: stdin is not UTF-8 text"), err


@pytest.mark.parametrize("value", ["-3", "cpu=1,cuda=-3", "100000", str(10**30), "cpu=1,cuda=100000"])
def test_a_bad_device_concurrency_is_one_line_for_every_command(value):
    """A thread is made per holder a device admits, at import where PyTorch has more than one thread
    (devqueue.share_cores): 100000 of them hung every command, `models` too."""
    env = {"SPECVIZ_DEVICE_CONCURRENCY": value, "OMP_NUM_THREADS": "2"}
    r = _specviz_bytes("models", stdin=b"", env=env, timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 2 and "Traceback" not in err, err
    assert err.strip() == f"error: SPECVIZ_DEVICE_CONCURRENCY must be from 1 to 64, got {value!r}."


@pytest.mark.parametrize("extra, message", [
    (["--ks", "1000000"], "--ks must list integers from 1 to 32"),
    (["--max-new-tokens", "1000"], "max_new_tokens is 1000, more than the limit of 512"),
    (["--out", "{tmp}/missing/bench.json"], "--out '{tmp}/missing/bench.json': the folder '{tmp}/missing' does "
                                            "not exist"),
    (["--figure", "{tmp}"], "--figure '{tmp}' is a folder"),
    (["--threads", "-1"], "--threads must be from 1 to 256 (PyTorch's threads), got -1"),
    (["--threads", "0"], "--threads must be from 1 to 256"),
    (["--cost-reps", "0"], "--cost-reps must be >= 1 (repetitions of the forward-cost measurement), got 0"),
])
def test_bench_refuses_bad_options_before_it_runs(tmp_path, capsys, monkeypatch, extra, message):
    from specviz.tools import bench

    ran = []
    monkeypatch.setattr(bench, "bench", lambda *a, **k: ran.append(a))  # the check comes first: nothing runs
    extra = [x.format(tmp=tmp_path) for x in extra]
    rc = cli.main(["--models", str(TINY_REGISTRY), "bench", "--tiny", "-q", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and not ran and "Traceback" not in err
    assert err.strip().startswith("error: ") and message.format(tmp=tmp_path) in err, err


@pytest.mark.parametrize("limit", ["nan", "inf", "-1", "0"])
def test_timing_refuses_a_limit_that_is_not_a_finite_number_above_0(monkeypatch, capsys, limit):
    """--limit nan was accepted (every comparison with nan is false, so no item was ever over it)."""
    def load_pair(*a, **k):
        raise AssertionError("the pair was loaded before --limit was checked")

    monkeypatch.setattr(models, "load_pair", load_pair)
    from specviz.devtools.cli import COMMANDS

    rc = cli.main(["--models", str(TINY_REGISTRY), "timing", "-q", "--limit", limit], COMMANDS)
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and lines == [f"error: --limit must be a finite number of seconds above 0, got {float(limit):g}"]


# -----------------------------------------------------------------------------
# prepare: the copies a run loads


@pytest.fixture
def chunked_registry(tmp_path, monkeypatch):
    """A registry file whose pair 'p' is a tiny GGUF draft and target shipped as fake chunk packages; cache in
    tmp."""
    import yaml
    from test_models import chunk_source_dict, fake_chunks, registry_data
    from tiny_gguf import tiny_model, write_gguf

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    srcs = {}
    for name, noise in (("d", 0.05), ("t", 0.0)):
        data = write_gguf(tiny_model("qwen2", seed=3, noise=noise, vocab=128), tmp_path / f"{name}.gguf").read_bytes()
        half = len(data) // 2
        srcs[name] = chunk_source_dict(fake_chunks(tmp_path, monkeypatch, [data[:half], data[half:]]))
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(registry_data(srcs, {"p": ("d", "t")})))
    return path


def _cached(tmp_path) -> list[str]:
    """The cache's folders, as model[-int8]."""
    return sorted(p.name.split("-")[0] + ("-int8" if p.name.endswith("-int8") else "")
                  for p in (tmp_path / "cache").iterdir())


def test_prepare_caches_the_copies_a_default_run_loads_and_the_ones_asked_for(chunked_registry, tmp_path):
    from specviz.modeling import quant
    from specviz.tools.cli import main

    if models.default_device() != "cpu" or "int8" not in quant.supported("cpu"):
        pytest.skip("a default run here does not load an int8 draft")
    assert main(["--models", str(chunked_registry), "prepare"]) == 0
    assert _cached(tmp_path) == ["d-int8", "t"]  # a default run on a CPU: an int8 draft, a float32 target
    stages = []
    models.load_pair("p", registry=chunked_registry, progress=lambda s, f=None: stages.append(s))  # as `run` does
    assert _cached(tmp_path) == ["d-int8", "t"] and not any("convert" in s for s in stages)
    assert main(["--models", str(chunked_registry), "prepare", "--draft-precision", "float32",
                 "--target-precision", "int8"]) == 0
    assert _cached(tmp_path) == ["d", "d-int8", "t", "t-int8"]


@pytest.mark.parametrize("where", ["the file", "under the file"])
def test_prepare_with_the_cache_at_a_file_says_so_in_one_line(chunked_registry, tmp_path, monkeypatch, capsys, where):
    """SPECVIZ_CACHE pointing at a file was a FileExistsError traceback (under it: NotADirectoryError)."""
    from specviz.tools.cli import main

    file = tmp_path / "not-a-folder"
    file.write_text("x")
    cache = file if where == "the file" else file / "cache"
    monkeypatch.setenv("SPECVIZ_CACHE", str(cache))
    assert main(["--models", str(chunked_registry), "prepare"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"error: The cache folder {cache} cannot be made: {file} is a file. Set SPECVIZ_CACHE to a "
                     "folder."], lines
    assert file.read_text() == "x"


@pytest.mark.parametrize("args,flag", [
    (["--draft-precision", "int3"], "--draft-precision"),
    (["--target-precision", "bfloat16"], "--target-precision"),
    (["--target-precision", "int4"], "--target-precision"),
])
def test_prepare_refuses_a_bad_precision_in_one_line_naming_its_flag(args, flag, capsys):
    from specviz.tools.cli import main

    assert main(["--models", str(TINY_REGISTRY), "prepare", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and args[1] in lines[0], lines
    assert main(["--models", str(TINY_REGISTRY), "prepare"]) == 0  # the tiny pair needs nothing prepared
