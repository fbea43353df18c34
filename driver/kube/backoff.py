"""Capped, jittered exponential backoff for retrying apiserver calls from background loops."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class Backoff:
    """Delays ``initial * factor**n`` capped at ``cap``, each spread by +-``jitter`` (a fraction).

    The jitter keeps a fleet of nodes from hammering a recovering apiserver in lockstep.
    """

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2
    _failures: int = field(default=0, init=False)
    _rng: random.Random = field(default_factory=random.Random, init=False, repr=False)

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one more failure."""
        base = min(self.cap, self.initial * self.factor**self._failures)
        self._failures += 1
        spread = base * self.jitter
        return max(0.0, min(self.cap, base + self._rng.uniform(-spread, spread)))

    def reset(self) -> None:
        """Forget past failures (after a success)."""
        self._failures = 0

    @property
    def failures(self) -> int:
        """Failures since the last reset."""
        return self._failures
