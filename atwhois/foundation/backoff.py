"""Waiting before trying again."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Full jitter: a random wait up to base·2ⁿ (capped), so that many daemons that lost the
    same relay do not come back at the same instant."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        return self.rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.failures = 0
