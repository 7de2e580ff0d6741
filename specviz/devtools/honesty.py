"""When a figure measured in a room of sessions still counts as the same figure measured alone: the one bar that
loadtest (browser sessions on a real server) and simload (sessions as threads) judge their sessions by."""

from __future__ import annotations

TOLERANCE = 0.15  # a session's figure at once, within this fraction of the same run alone (the target)


def within(ratio: float | None) -> bool:
    """A figure at once over the same figure alone is within TOLERANCE of 1 (an unknown one is not)."""
    return ratio is not None and 1 - TOLERANCE <= ratio <= 1 + TOLERANCE
