"""Server limits: one place for the sizes a single session may ask for.

A workshop server is shared, so a run, a prompt and an uploaded run file are
capped. Each limit has a default here and can be changed with an environment
variable (Streamlit's config.toml has no room for an app's own settings):

  SPECVIZ_MAX_NEW_TOKENS     new tokens one run may generate        (default 512)
  SPECVIZ_MAX_PROMPT_TOKENS  tokens a prompt may have                (default 2048)
  SPECVIZ_MAX_PROMPT_CHARS   characters in a prompt box              (default 16000)
  SPECVIZ_MAX_RUN_FILE_MB    size of a run file that may be loaded   (default 2; keep
                             server.maxUploadSize in .streamlit/config.toml above it)
  SPECVIZ_MAX_DRAWN_CHARS    characters of HTML a loaded run file may make the page draw: its
                             prompt and every drafted and emitted token's text, counted as
                             drawn (markup.drawn_size: a line break is 34) (default 200000)
  SPECVIZ_BASELINE_TTL_S     seconds a measured target-alone run is reused by later
                             runs with the same target, prompt and settings
                             (default 600; 0: measured for every run); also how long
                             a verify pass's measured time is kept (decoding/pool.py)
  SPECVIZ_BATCH_VERIFY       1: sessions waiting with verify passes for the same target
                             share one forward pass (default); 0: each runs its own

The app, the pages, the CLI and run-file validation all read them from here.
"""

from __future__ import annotations

import os

from specviz.core.errors import ConfigError, InvalidSetting

K_MAX = 32  # the largest k a round drafts (the engine's input check, and BestK's cap)
TOKEN_CHARS_MAX = 256  # the longest text of one token a run file may give (a real vocabulary's are shorter)


def _env_int(name: str, default: int, lo: int = 1, hi: int = 10**7) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise ConfigError(f"${name} must be an integer, got {raw!r}.") from None
    if not lo <= v <= hi:
        raise ConfigError(f"${name} must be from {lo} to {hi}, got {v}.")
    return v


def max_new_tokens() -> int:
    """The most new tokens one run may generate (live runs and loaded run files)."""
    return _env_int("SPECVIZ_MAX_NEW_TOKENS", 512)


def max_prompt_tokens() -> int:
    """The most tokens a prompt may have (prefill time and KV cache grow with it)."""
    return _env_int("SPECVIZ_MAX_PROMPT_TOKENS", 2048)


def max_prompt_chars() -> int:
    """The most characters a prompt box accepts (a coarse cap before tokenizing)."""
    return _env_int("SPECVIZ_MAX_PROMPT_CHARS", 16000)


def max_run_file_bytes() -> int:
    """The largest run file (JSON) that may be loaded."""
    return _env_int("SPECVIZ_MAX_RUN_FILE_MB", 2, hi=1000) * 1024 * 1024


def max_drawn_chars() -> int:
    """The most characters of HTML a loaded run file may make the page draw (its prompt and every drafted and
    emitted token's text, as markup.drawn_size counts them): the page redraws them each round, so a small file of
    long token texts, or of line breaks, would be a huge page."""
    return _env_int("SPECVIZ_MAX_DRAWN_CHARS", 200_000)


def baseline_ttl_s() -> int:
    """How long a target-alone run measured on this server is reused (teaching.baseline.BaselineStore)."""
    return _env_int("SPECVIZ_BASELINE_TTL_S", 600, lo=0, hi=7 * 24 * 3600)


def batch_verify() -> bool:
    """Whether sessions waiting to verify on the same target share one forward pass (decoding/pool.py):
    $SPECVIZ_BATCH_VERIFY, on unless it is "0" (any other value leaves it on, as the other on/off switches)."""
    return os.environ.get("SPECVIZ_BATCH_VERIFY", "1").strip() != "0"


def check_all() -> None:
    """ConfigError naming the first of these variables whose value is bad: a page says it before it reads any
    (a bad SPECVIZ_MAX_RUN_FILE_MB met first in the upload box was Streamlit's generic error)."""
    for read in (max_new_tokens, max_prompt_tokens, max_prompt_chars, max_run_file_bytes, max_drawn_chars,
                 baseline_ttl_s):
        read()


def check_prompt_tokens(n: int) -> None:
    """InvalidSetting when a prompt of n tokens is longer than this server allows."""
    cap = max_prompt_tokens()
    if n > cap:
        raise InvalidSetting(f"The prompt is {n} tokens long, more than the limit of {cap} tokens here: shorten it "
                             "(the limit is set by SPECVIZ_MAX_PROMPT_TOKENS).")


def check_max_new_tokens(n: int) -> None:
    """InvalidSetting when a run asks for more new tokens than this server allows."""
    cap = max_new_tokens()
    if isinstance(n, int) and n > cap:
        raise InvalidSetting(f"max_new_tokens is {n}, more than the limit of {cap} here "
                             "(the limit is set by SPECVIZ_MAX_NEW_TOKENS).")
