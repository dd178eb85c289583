"""The one way a test waits for something: polls a predicate until its value is true,
or fails naming what it waited for and how long."""

from __future__ import annotations

import asyncio
from typing import Callable, TypeVar

from flinkyarn import retry

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition",
             poll: float = 0.05) -> T:
    """The first true value of `predicate()`, polled every `poll` s for up to `timeout` s;
    AssertionError naming `what` after that."""
    try:
        return retry.poll_until(predicate, bool, pauses=retry.Backoff.fixed(poll),
                                deadline=retry.Deadline(timeout))
    except retry.GaveUp:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None


async def wait_for_async(predicate: Callable[[], T], timeout: float = 30.0,
                         what: str = "condition", poll: float = 0.02) -> T:
    """wait_for on an event loop: the loop runs between the polls."""
    async def first_true() -> T:
        while not (value := predicate()):
            await asyncio.sleep(poll)
        return value
    try:
        return await asyncio.wait_for(first_true(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None
