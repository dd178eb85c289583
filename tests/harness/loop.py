"""The test's event loop made exact: `settle` runs it until nothing is ready to run;
`advance` moves a ManualClock deadline by deadline, settling at each; the LoopExecutor
runs the blocking calls endpoints hand to a thread (`asyncio.to_thread`,
`RpcEndpoint.run_blocking`) on the loop itself, so their results are part of what
`settle` waits for. A fake of a blocking API holds one of its calls until the test
says (`BlockedCall`), which is how a test decides when a skein call returns."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Awaitable, Callable

from flinkyarn.clock import ManualClock

SETTLE_LIMIT = 100_000
"""Turns of the loop after which `settle` gives up: something runs without end."""


async def settle() -> None:
    """Returns once no callback or task of the loop is ready to run: everything that was
    runnable has run, and everything it led to, until all wait for time (a clock), a
    call the test holds, or an event. Reads the loop's ready queue (`_ready` of
    CPython's BaseEventLoop: no public call says whether anything is runnable)."""
    loop = asyncio.get_running_loop()
    for _ in range(SETTLE_LIMIT):
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]
            return
    raise AssertionError(f"the loop did not settle within {SETTLE_LIMIT} turns: "
                         f"something reschedules itself without end")


async def advance(clock: ManualClock, seconds: float,
                  settled: Callable[[], Awaitable[None]] = settle) -> None:
    """Moves `clock` `seconds` on, stopping at every deadline of a sleeper on the way (so
    each periodic task runs at each of its deadlines, in order, as in real time) and
    awaiting `settled()` after each step and at the end."""
    await settled()
    target = clock.monotonic() + seconds
    while (deadline := clock.next_deadline()) is not None and deadline <= target:
        clock.advance_to(max(deadline, clock.monotonic()))
        await settled()
    clock.advance_to(target)
    await settled()


class BlockedCall(Exception):
    """Raised by a fake blocking call, run by the LoopExecutor, that is to block until the
    test releases it: the call's future stays pending until `answer` or `fail`."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self._future: concurrent.futures.Future[Any] | None = None

    def attach(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    @property
    def pending(self) -> bool:
        return self._future is not None and not self._future.done()

    def answer(self, result: Any) -> None:
        """The blocked call returns `result` (its caller resumes when the loop gets to it)."""
        self._pending_future().set_result(result)

    def fail(self, error: BaseException) -> None:
        """The blocked call raises `error`."""
        self._pending_future().set_exception(error)

    def _pending_future(self) -> concurrent.futures.Future[Any]:
        if self._future is None:
            raise RuntimeError(f"{self.what} was not called through the LoopExecutor")
        if self._future.done():
            raise RuntimeError(f"{self.what} has returned already")
        return self._future

    def __repr__(self) -> str:
        return f"<BlockedCall {self.what}>"


class LoopExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor in an in-process cluster: each submitted call runs at
    once on the loop's thread, its future done when `submit` returns, unless it raises
    BlockedCall: then its future stays pending until the test answers the call. A
    ThreadPoolExecutor only because asyncio accepts no other as the default; it never
    starts a thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any,  # type: ignore[override]
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            result = fn(*args, **kwargs)
        except BlockedCall as blocked:
            blocked.attach(future)
        except BaseException as error:  # the call's own error, for its caller
            future.set_exception(error)
        else:
            future.set_result(result)
        return future
