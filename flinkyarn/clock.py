"""Clocks. Components read time only through a Clock, so tests can drive it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when a test advances it."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
