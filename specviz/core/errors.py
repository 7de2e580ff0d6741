"""Errors that specviz raises for bad input or a missing resource.

Every error a user can cause is a SpecvizError with a message written for a
person: the app and the CLI print `str(err)` and never a traceback.
"""


class SpecvizError(Exception):
    """Base class: a clear, user-facing problem (bad input, missing model...)."""


class InvalidSetting(SpecvizError, ValueError):
    """A decoding setting (k, temperature, top_p, prompt, ...) is out of range."""


class ConfigError(SpecvizError, ValueError):
    """models.yaml (or a custom pair) is malformed; the message names the field."""


class PairUnavailable(SpecvizError):
    """A model pair can't be loaded here; the message says how to get it."""


class ChecksumMismatch(SpecvizError):
    """The joined chunk file does not have the expected sha256."""


class TokenizerMismatch(SpecvizError):
    """Draft and target do not share a tokenizer, so drafted ids mean nothing."""


class NotEnoughMemory(SpecvizError, MemoryError):
    """The estimated memory for a pair exceeds what this machine has free."""


class Stopped(SpecvizError):
    """A long measurement was stopped between its units (its progress callback raised it or returned False).

    `partial` holds the units finished before the stop, in the shape the measurement returns (core.progress)."""

    def __init__(self, message: str = "Stopped before the end.", partial=None):
        super().__init__(message)
        self.partial = partial
