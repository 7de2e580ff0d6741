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
from specviz.data.records import Round, Run, TopK  # noqa: F401, E402
from specviz.decoding.drafters import Drafter, ModelDrafter, PromptLookupDrafter  # noqa: F401, E402
from specviz.decoding.engine import (  # noqa: F401, E402
    autoregressive_decode,
    autoregressive_stream,
    speculative_decode,
    speculative_stream,
)


def __getattr__(name):
    # model loading (transformers' GGUF path, yaml) is imported on first use
    if name in ("Pair", "load_pair"):
        from specviz.decoding import models

        return getattr(models, name)
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")
