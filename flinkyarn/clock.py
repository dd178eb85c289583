"""Clocks. Components read time, sleep and time out only through a Clock, so tests can
drive it: with a ManualClock, a periodic task or a timeout fires when the test advances
the clock past its deadline, not when real time passes."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Awaitable, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Returns once `seconds` have passed on this clock (on the running loop)."""
        ...

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        """What `awaitable` returns; TimeoutError (and `awaitable` cancelled) once
        `timeout` seconds have passed on this clock first. None: no timeout."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        return await asyncio.wait_for(awaitable, timeout)


class ManualClock:
    """A clock that moves only when a test advances it.

    `sleep` and `wait_for` work on the running loop: a sleeper wakes (its future is
    resolved) when `advance` moves the clock to or past its deadline; it then runs when
    the loop gets to it. `advance` moves in one step however many deadlines it passes;
    a test that wants every periodic task to run at each of its deadlines in turn steps
    from one `next_deadline()` to the next (tests/harness does)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        # (deadline, order of arrival, future of the sleeper); cancelled ones stay until
        # they come to the top.
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.advance_to(self._now + seconds)

    def advance_to(self, when: float) -> None:
        """Moves the clock to `when` exactly (not back) and wakes the sleepers it passes."""
        if when < self._now:
            raise ValueError("a clock does not go back")
        self._now = when
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def next_deadline(self) -> float | None:
        """The earliest deadline a sleeper still waits for; None when none waits."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # still lets the others run, as asyncio.sleep(0) does
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future  # cancelled with the sleeper: `advance` skips it

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        if timeout is None:
            return await awaitable
        work = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self.sleep(timeout))
        try:
            await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            timer.cancel()
            raise
        if work.done():
            timer.cancel()
            return work.result()
        work.cancel()
        try:
            await work
        except asyncio.CancelledError:
            pass
        raise TimeoutError(f"no answer within {timeout:g} s")
