"""specviz: see speculative decoding happen, on real models, with real timings.

Public API (other code depends on these names):
    load_pair(name=None)                 -> Pair with .draft, .target, .tokenizer
    DecodeSettings(k=, k_policy=, temperature=, top_p=, top_k=, max_new_tokens=, seed=)
    speculative_decode(target, draft, input_ids, settings=DecodeSettings(), *, eos_token_id, vocab) -> Run
    speculative_stream(...)              -> iterable of Rounds, then .run
    autoregressive_decode(model, input_ids, settings=DecodeSettings(), *, eos_token_id, vocab) -> Run
    Run, Round                           -> plain-data records (JSON round-trip)

This package never imports streamlit: the app and pages are thin layers on top.
"""

from specviz.core import quiet

quiet.install()  # before anything imports transformers or torchao: their noise at import is dropped

from specviz.core.errors import (  # noqa: F401, E402
    ChecksumMismatch,
    ConfigError,
    InvalidSetting,
    NotEnoughMemory,
    PairUnavailable,
    SpecvizError,
    TokenizerMismatch,
)
from specviz.core.settings import DecodeSettings  # noqa: F401, E402

_LAZY = {  # imported on first use, so importing any specviz module starts nothing (device/devqueue.start)
    "Round": "specviz.data.records", "Run": "specviz.data.records", "TopK": "specviz.data.records",
    "Drafter": "specviz.decoding.drafters", "ModelDrafter": "specviz.decoding.drafters",
    "PromptLookupDrafter": "specviz.decoding.drafters",
    "autoregressive_decode": "specviz.decoding.engine", "autoregressive_stream": "specviz.decoding.engine",
    "speculative_decode": "specviz.decoding.engine", "speculative_stream": "specviz.decoding.engine",
    "Pair": "specviz.decoding.models", "load_pair": "specviz.decoding.models",  # transformers' GGUF path, yaml
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")
