"""Retrying and polling: the one mechanism behind every retry, reconnect, poll and health
wait of flinkyarn (what Flink's RetryStrategy and FutureUtils.retryWithDelay are to Flink).

- `Backoff`: pauses that start at `initial` and are multiplied by `multiplier` after
  each, up to `maximum` (`Backoff.fixed(p)`: always `p`). Components build theirs from
  Flink's options: cluster.registration.* (flinkyarn.registration), and
  taskmanager.network.request-backoff.* (the TaskExecutor's NetworkConfig).
- `Deadline`: `timeout` seconds from now on a Clock, so tests can drive it.
- `Retrying`: the decisions for one retried operation, and nothing else: after a
  failure, the pause before the next attempt (capped by the deadline), or GaveUp when the
  deadline has passed or the caller gives up. Loops of a special shape use it directly.
- `retry` / `retry_async`: call an attempt until it does not raise one of `retry_on`;
  `poll_until` / `poll_until_async`: call a probe until `until(value)` holds (by
  default: until it returns something other than None).

Sleeping is a parameter (time.sleep, asyncio.sleep, an Event's wait that a close cuts
short, or a test's fake that advances a ManualClock): nothing here sleeps on its own.
No pause runs past the deadline (the last is cut to the time left), and an attempt
that fails once the deadline has passed is the last: a deadline of 0 means "try once".
Exceptions not in `retry_on` propagate at once, as does anything the callbacks raise.

Standard library only: the integration tooling imports this under the system Python.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator, TypeVar, overload

from flinkyarn.clock import Clock, SystemClock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Pauses of `initial`, then each `multiplier` times the one before, never above
    `maximum`, in seconds. Invariants (checked): 0 <= initial <= maximum, multiplier >= 1."""

    initial: float
    maximum: float
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not 0 <= self.initial <= self.maximum:
            raise ValueError(f"a backoff needs 0 <= initial ({self.initial:g} s) <= "
                             f"maximum ({self.maximum:g} s)")
        if self.multiplier < 1:
            raise ValueError(f"a backoff's multiplier ({self.multiplier:g}) must be at least 1")

    @classmethod
    def fixed(cls, pause: float) -> Backoff:
        return cls(pause, pause, 1.0)

    def after(self, pause: float) -> float:
        """The pause that follows `pause`."""
        return min(pause * self.multiplier, self.maximum)

    def pauses(self) -> Iterator[float]:
        """initial, after(initial), ... without end."""
        pause = self.initial
        while True:
            yield pause
            pause = self.after(pause)


class Deadline:
    """`timeout` seconds after its creation on `clock`; None: never."""

    def __init__(self, timeout: float | None, clock: Clock | None = None) -> None:
        self.timeout = timeout
        self._clock = clock or SystemClock()
        self._at = math.inf if timeout is None else self._clock.monotonic() + timeout

    def remaining(self) -> float:
        """Seconds left, never below 0 (inf without a timeout)."""
        return max(0.0, self._at - self._clock.monotonic())

    def passed(self) -> bool:
        return self._clock.monotonic() >= self._at

    def cap(self, seconds: float) -> float:
        """`seconds`, but no further than the deadline."""
        return min(seconds, self.remaining())


class GaveUp(Exception):
    """Retrying ended without success: the deadline passed or the caller gave up.
    `attempts`: how many were made; `last_error`: what the last one raised (None for a
    poll); `last_value`: what a poll's last probe returned (None for a retry)."""

    def __init__(self, attempts: int, last_error: BaseException | None,
                 last_value: object = None) -> None:
        detail = f"; last: {last_error}" if last_error is not None else ""
        super().__init__(f"gave up after {attempts} attempt(s){detail}")
        self.attempts = attempts
        self.last_error = last_error
        self.last_value = last_value


class _NotYet(Exception):
    """A poll's probe returned `value`, which is not what it waits for."""

    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value


class Retrying:
    """The decisions for one retried operation (one instance each: a Backoff's pauses
    grow from one failure to the next).

    `pauses`: a Backoff, or a function of the failure giving the pause after it (the
    registration's rules: flinkyarn.registration). `give_up(error)`, asked after each
    failure before the deadline: True ends the retrying. `on_retry(attempts, error,
    pause)`: told of each retry (for a log line), before its pause.
    """

    def __init__(self, pauses: Backoff | Callable[[BaseException], float], *,
                 deadline: Deadline | None = None,
                 give_up: Callable[[BaseException], bool] | None = None,
                 on_retry: Callable[[int, BaseException, float], None] | None = None) -> None:
        self.attempts = 0
        self.deadline = deadline or Deadline(None)
        if isinstance(pauses, Backoff):
            backoff = pauses.pauses()
            self._pause_after: Callable[[BaseException], float] = lambda _error: next(backoff)
        else:
            self._pause_after = pauses
        self._give_up = give_up
        self._on_retry = on_retry

    def failed(self, error: BaseException) -> float:
        """Attempt number `attempts + 1` failed with `error`: the pause before the next
        attempt; GaveUp (from `error`) if there is none."""
        self.attempts += 1
        if self.deadline.passed() or (self._give_up is not None and self._give_up(error)):
            if isinstance(error, _NotYet):
                raise GaveUp(self.attempts, None, error.value)
            raise GaveUp(self.attempts, error)
        pause = self.deadline.cap(self._pause_after(error))
        if self._on_retry is not None and not isinstance(error, _NotYet):
            self._on_retry(self.attempts, error, pause)
        return pause


def retry(attempt: Callable[[], T], *,
          retry_on: type[BaseException] | tuple[type[BaseException], ...],
          pauses: Backoff | Callable[[BaseException], float],
          deadline: Deadline | None = None,
          give_up: Callable[[BaseException], bool] | None = None,
          on_retry: Callable[[int, BaseException, float], None] | None = None,
          sleep: Callable[[float], object] = time.sleep) -> T:
    """What `attempt()` returns once it does not raise one of `retry_on`; between
    attempts the pause Retrying decides. Raises GaveUp when it decides there is none."""
    retrying = Retrying(pauses, deadline=deadline, give_up=give_up, on_retry=on_retry)
    while True:
        try:
            return attempt()
        except retry_on as error:
            pause = retrying.failed(error)
        sleep(pause)


async def retry_async(attempt: Callable[[], Awaitable[T]], *,
                      retry_on: type[BaseException] | tuple[type[BaseException], ...],
                      pauses: Backoff | Callable[[BaseException], float],
                      deadline: Deadline | None = None,
                      give_up: Callable[[BaseException], bool] | None = None,
                      on_retry: Callable[[int, BaseException, float], None] | None = None,
                      sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    """retry() for a coroutine, pausing with `sleep` (asyncio.sleep) on the loop."""
    retrying = Retrying(pauses, deadline=deadline, give_up=give_up, on_retry=on_retry)
    while True:
        try:
            return await attempt()
        except retry_on as error:
            pause = retrying.failed(error)
        await sleep(pause)


def _is_not_none(value: object) -> bool:
    return value is not None


def _waited_for(value: T, until: Callable[[T], bool]) -> T:
    if not until(value):
        raise _NotYet(value)
    return value


@overload
def poll_until(probe: Callable[[], T | None], *, pauses: Backoff,
               deadline: Deadline | None = None,
               sleep: Callable[[float], object] = time.sleep) -> T:
    ...


@overload
def poll_until(probe: Callable[[], T], until: Callable[[T], bool], *, pauses: Backoff,
               deadline: Deadline | None = None,
               sleep: Callable[[float], object] = time.sleep) -> T:
    ...


def poll_until(probe: Callable[[], Any], until: Callable[[Any], bool] = _is_not_none, *,
               pauses: Backoff, deadline: Deadline | None = None,
               sleep: Callable[[float], object] = time.sleep) -> Any:
    """The first value of `probe()` for which `until` holds, probing again after each
    pause; GaveUp (with the last value) when the deadline has passed. `probe` may raise
    to stop."""
    return retry(lambda: _waited_for(probe(), until), retry_on=_NotYet, pauses=pauses,
                 deadline=deadline, sleep=sleep)


@overload
async def poll_until_async(probe: Callable[[], T | None], *, pauses: Backoff,
                           deadline: Deadline | None = None,
                           sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    ...


@overload
async def poll_until_async(probe: Callable[[], T], until: Callable[[T], bool], *,
                           pauses: Backoff, deadline: Deadline | None = None,
                           sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    ...


async def poll_until_async(probe: Callable[[], Any],
                           until: Callable[[Any], bool] = _is_not_none, *, pauses: Backoff,
                           deadline: Deadline | None = None,
                           sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> Any:
    """poll_until() on the loop; `probe` is a plain function (it must not block). Without
    `until`: the first value that is not None."""
    async def attempt() -> Any:
        return _waited_for(probe(), until)
    return await retry_async(attempt, retry_on=_NotYet, pauses=pauses, deadline=deadline,
                             sleep=sleep)
