"""Two kinds of log lines that say nothing to a user, dropped where they are logged, and nothing else.

Importing torchao (transformers imports it too, for its torchao quantizer, whenever it is installed)
logs on the `torchao` logger a "Failed to load .../_C_mxfp8...so" line per optional kernel built for a
GPU or another Python, and makes torch's `torch.utils._pytree` logger warn "<enum 'ScaleCalculationMode'>
is an Enum subclass and is now natively supported ..." per Enum it registers. install() puts a filter
on exactly those two loggers that drops exactly those records; every other record, on those loggers
too, goes through. `import specviz` installs it, so the app and the CLI start quietly.
"""

from __future__ import annotations

import logging

NOISE = (("torchao", "Failed to load "), ("torch.utils._pytree", "is an Enum subclass"))


class Drop(logging.Filter):
    """Drops the records whose message contains `text`."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def install() -> None:
    """Filter the NOISE records on their loggers (once: a second call adds nothing)."""
    for name, text in NOISE:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Drop) and f.text == text for f in logger.filters):
            logger.addFilter(Drop(text))
