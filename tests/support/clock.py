"""A clock a test sets: `clock.now += 3600` and an hour has passed for whatever reads it."""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now
