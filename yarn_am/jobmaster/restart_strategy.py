"""Restart strategies: whether a job may restart after a failure, and after what pause.

Flink's RestartBackoffTimeStrategy. The Scheduler calls, for each failure it handles,
notify_failure(now) once, then can_restart(), then (if it may) backoff_time(); nothing
else calls them. Pure: no clock is read, `now` is the caller's monotonic seconds, so a
test walks a strategy through a failure history with plain numbers.

    none               never restart
    fixed-delay        restart `attempts` times, each after `delay`
    exponential-delay  always restart; the pause starts at `initial_backoff` and is
                       multiplied by `multiplier` with each failure, up to `max_backoff`;
                       back to `initial_backoff` after a quiet `reset_threshold`
    failure-rate       restart while at most `max_failures_per_interval` failures fall in
                       any `interval`, each after `delay`

Build one from the configuration with `from_configuration(conf)`, or from a checked
`flinkyarn.options.RestartStrategyConfig` with `create(config)`.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from flinkyarn.configuration import Configuration
from flinkyarn.options import RestartStrategyConfig

__all__ = ["ExponentialDelayRestartBackoffTimeStrategy",
           "FailureRateRestartBackoffTimeStrategy", "FixedDelayRestartBackoffTimeStrategy",
           "NoRestartBackoffTimeStrategy", "RestartBackoffTimeStrategy",
           "create", "from_configuration"]


class RestartBackoffTimeStrategy(Protocol):
    """Decides whether to restart after a failure and how long to wait first.

    Contract: the Scheduler calls notify_failure(now) exactly once per failure it
    handles, before asking can_restart() and backoff_time() about that failure; `now`
    never decreases. can_restart() and backoff_time() do not change the strategy.
    """

    def notify_failure(self, now: float) -> None:
        """A failure happened at `now` (monotonic seconds)."""

    def can_restart(self) -> bool:
        """Whether the job may restart after the failures notified so far."""

    def backoff_time(self) -> float:
        """Seconds to wait before the restart (only asked when can_restart())."""


class NoRestartBackoffTimeStrategy:
    """The first failure fails the job."""

    def notify_failure(self, now: float) -> None:
        pass

    def can_restart(self) -> bool:
        return False

    def backoff_time(self) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "NoRestartBackoffTimeStrategy()"


class FixedDelayRestartBackoffTimeStrategy:
    """Restarts `attempts` times, each after `delay` seconds; failure attempts+1 fails
    the job. The count never resets (as Flink's)."""

    def __init__(self, attempts: int, delay: float) -> None:
        if attempts < 0 or delay < 0:
            raise ValueError(f"attempts ({attempts}) and delay ({delay}) must be >= 0")
        self.attempts = attempts
        self.delay = delay
        self._failures = 0

    def notify_failure(self, now: float) -> None:
        self._failures += 1

    def can_restart(self) -> bool:
        return self._failures <= self.attempts

    def backoff_time(self) -> float:
        return self.delay

    def __repr__(self) -> str:
        return (f"FixedDelayRestartBackoffTimeStrategy(attempts={self.attempts}, "
                f"delay={self.delay:g})")


class ExponentialDelayRestartBackoffTimeStrategy:
    """Always restarts. The first failure waits `initial_backoff`; each further one
    multiplies the pause by `multiplier`, capped at `max_backoff`. A failure that comes
    `reset_threshold` or more after the previous one's pause ended (now - last failure
    >= reset_threshold + current pause, as Flink measures it: the job was not running
    during the pause) starts again at `initial_backoff`.

    Flink also adds a random jitter (exponential-delay.jitter-factor); this one is
    deterministic, so that it stays pure and testable.
    """

    def __init__(self, initial_backoff: float, max_backoff: float, multiplier: float,
                 reset_threshold: float) -> None:
        if not 0 < initial_backoff <= max_backoff:
            raise ValueError(f"need 0 < initial backoff ({initial_backoff}) <= "
                             f"max backoff ({max_backoff})")
        if multiplier < 1:
            raise ValueError(f"the backoff multiplier ({multiplier}) must be >= 1")
        if reset_threshold <= 0:
            raise ValueError(f"the reset threshold ({reset_threshold}) must be > 0")
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.multiplier = multiplier
        self.reset_threshold = reset_threshold
        self._backoff = initial_backoff
        self._last_failure: float | None = None

    def notify_failure(self, now: float) -> None:
        last = self._last_failure
        if last is None or now - last >= self.reset_threshold + self._backoff:
            self._backoff = self.initial_backoff
        else:
            self._backoff = min(self._backoff * self.multiplier, self.max_backoff)
        self._last_failure = now

    def can_restart(self) -> bool:
        return True

    def backoff_time(self) -> float:
        return self._backoff

    def __repr__(self) -> str:
        return (f"ExponentialDelayRestartBackoffTimeStrategy(initial={self.initial_backoff:g}, "
                f"max={self.max_backoff:g}, multiplier={self.multiplier:g}, "
                f"reset_threshold={self.reset_threshold:g})")


class FailureRateRestartBackoffTimeStrategy:
    """Restarts, after `delay`, as long as no `interval` holds more than
    `max_failures_per_interval` failures: failure n fails the job when failure
    n - max_failures_per_interval happened `interval` or less before it.

    That is Flink's strategy as fixed by FLINK-20752 (max failures per interval really
    allows that many restarts; before, it allowed one less). The window is closed: two
    failures exactly `interval` apart are in the same window.
    """

    def __init__(self, max_failures_per_interval: int, interval: float, delay: float) -> None:
        if max_failures_per_interval < 1 or interval <= 0 or delay < 0:
            raise ValueError(f"need max failures per interval ({max_failures_per_interval}) "
                             f">= 1, interval ({interval}) > 0, delay ({delay}) >= 0")
        self.max_failures_per_interval = max_failures_per_interval
        self.interval = interval
        self.delay = delay
        # The latest max+1 failure times: enough to tell whether max+1 fall in a window.
        self._failures: deque[float] = deque(maxlen=max_failures_per_interval + 1)

    def notify_failure(self, now: float) -> None:
        self._failures.append(now)

    def can_restart(self) -> bool:
        if len(self._failures) <= self.max_failures_per_interval:
            return True
        return self._failures[-1] - self._failures[0] > self.interval

    def backoff_time(self) -> float:
        return self.delay

    def __repr__(self) -> str:
        return (f"FailureRateRestartBackoffTimeStrategy(max_failures_per_interval="
                f"{self.max_failures_per_interval}, interval={self.interval:g}, "
                f"delay={self.delay:g})")


def create(config: RestartStrategyConfig) -> RestartBackoffTimeStrategy:
    """A new strategy of `config.type`, with no failure history (strategies keep per-job
    failure history, so never share one)."""
    if config.type == "fixed-delay":
        return FixedDelayRestartBackoffTimeStrategy(config.fixed_delay_attempts,
                                                    config.fixed_delay_delay)
    if config.type == "exponential-delay":
        return ExponentialDelayRestartBackoffTimeStrategy(
            config.initial_backoff, config.max_backoff, config.backoff_multiplier,
            config.reset_backoff_threshold)
    if config.type == "failure-rate":
        return FailureRateRestartBackoffTimeStrategy(
            config.max_failures_per_interval, config.failure_rate_interval,
            config.failure_rate_delay)
    return NoRestartBackoffTimeStrategy()


def from_configuration(conf: Configuration) -> RestartBackoffTimeStrategy:
    """A fresh strategy for one job, as restart-strategy.type and its options say."""
    return create(RestartStrategyConfig.from_configuration(conf))
