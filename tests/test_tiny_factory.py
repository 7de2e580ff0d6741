"""The tests take their tiny models from one factory, tests/tiny.py's tiny_lm, and `tiny_pair` means one thing.

A second factory (a config built and a model made from it, somewhere else in tests/) drifts from the first: two
"tiny Qwen2" models that differ in an initializer range or a padding row, and a test's numbers that depend on
which one it got. `tiny_pair` is conftest's fixture (two tiny_lm models as a models.Pair); a helper that
loads the registry's pair is named for that (registry_pair).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
FACTORY = TESTS / "tiny.py"
MODEL_CLASS_ENDINGS = ("ForCausalLM", "LMHeadModel")  # Qwen2ForCausalLM, LlamaForCausalLM, GPT2LMHeadModel, ...


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def model_builds(source: str) -> list[str]:
    """'line: name' of each call in source that makes a model from a config: a transformers config class
    (SomethingConfig), a model class called directly (SomethingForCausalLM(...)) or from_config."""
    from transformers import PretrainedConfig

    import transformers

    def is_config_class(name: str) -> bool:
        cls = getattr(transformers, name, None) if name.endswith("Config") else None
        return isinstance(cls, type) and issubclass(cls, PretrainedConfig)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name.endswith(MODEL_CLASS_ENDINGS) or name == "from_config" or is_config_class(name):
                found.append(f"{node.lineno}: {name}")
    return found


def top_level_tiny_pairs(source: str) -> list[int]:
    """Lines where a module defines or assigns `tiny_pair` at its top level."""
    tree = ast.parse(source)
    defs = (n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    lines = [n.lineno for n in defs if n.name == "tiny_pair"]
    targets = (t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets)
    return lines + [t.lineno for t in targets if isinstance(t, ast.Name) and t.id == "tiny_pair"]


def test_the_checks_see_a_factory_and_a_tiny_pair():
    """The checks below can fail: they find a factory and a tiny_pair helper written as the old ones were."""
    old_factory = ("def tiny_qwen2(seed):\n    cfg = Qwen2Config(vocab_size=64)\n    return Qwen2ForCausalLM(cfg)\n"
                   "def gguf(cfg):\n    return AutoModelForCausalLM.from_config(cfg)\n")
    assert model_builds(old_factory) == ["2: Qwen2Config", "3: Qwen2ForCausalLM", "5: from_config"]
    assert model_builds("DecodeSettings(k=3)\nPairSpec(name='x')\n") == []  # not a transformers config
    assert top_level_tiny_pairs("def tiny_pair():\n    return 1\n") == [1]


def test_only_tests_tiny_makes_tiny_models():
    """No test module but tiny.py builds a transformers model from a config: each takes tiny.tiny_lm's."""
    found = {p.name: model_builds(p.read_text()) for p in sorted(TESTS.rglob("*.py")) if p != FACTORY}
    assert {name: calls for name, calls in found.items() if calls} == {}, \
        "a second tiny-model factory: build the model with tests/tiny.py's tiny_lm instead"
    assert model_builds(FACTORY.read_text())  # the factory itself is seen by the check


def test_tiny_pair_is_only_the_conftest_fixture():
    """`tiny_pair` is conftest's fixture; no test module defines another top-level `tiny_pair`."""
    found = {p.name: top_level_tiny_pairs(p.read_text()) for p in sorted(TESTS.rglob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {"conftest.py": found["conftest.py"]}, \
        "a test module defines its own tiny_pair: name it for what it is (e.g. registry_pair)"
    assert len(found["conftest.py"]) == 1
