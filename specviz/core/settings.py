"""Decoding settings as one typed value: the sidebar builds it, the engine reads it, a Run records it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

K_POLICIES = ("fixed", "adaptive", "best")


def is_greedy(temperature: float | None) -> bool:
    """Greedy decoding is temperature 0 (DecodeSettings.greedy)."""
    return not temperature


@dataclass(frozen=True)
class DecodeSettings:
    """What a speculative run is asked to do. The engine checks the values (InvalidSetting on bad ones)."""

    k: int = 4
    k_policy: str = "fixed"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 48  # also the value for a recorded run that lacks it (see from_record)
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    def baseline_ident(self) -> tuple[tuple[str, Any], ...]:
        """What a target-alone run with these settings depends on (the settings, sorted): not k, the k
        policy or the drafter. Greedy takes the argmax, with no draw and no truncated distribution, so its
        seed, top-p and top-k are left out; a sampling run's are kept."""
        d = asdict(self)
        del d["k"], d["k_policy"]
        if self.greedy:
            d.update(temperature=0.0, seed=0, top_p=1.0, top_k=0)
        return tuple(sorted(d.items()))

    def record(self, **extra: Any) -> dict[str, Any]:
        """The `settings` dict a Run records: these settings plus `extra` (drafter, eos_token_id, label, ...)."""
        return {**asdict(self), **extra}

    @classmethod
    def from_record(cls, settings: dict[str, Any]) -> "DecodeSettings":
        """The settings a Run recorded (a run file's `settings`), with the defaults for any it lacks."""
        names = cls.__dataclass_fields__
        return cls(**{n: settings[n] for n in names if settings.get(n) is not None})


def recorded_eos(settings: dict[str, Any]) -> list[int] | None:
    """The end-of-sequence ids a Run recorded (`eos_token_id`: one id or a list); None when it recorded none
    (the engine then takes the model's own)."""
    eos = settings.get("eos_token_id")
    if eos is None:
        return None
    return [eos] if isinstance(eos, int) else list(eos)
