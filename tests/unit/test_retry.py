"""The one retry mechanism (flinkyarn.retry): pauses, deadlines and giving up, on a
ManualClock that only the fake sleep moves (nothing here really sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from flinkyarn.clock import ManualClock
from flinkyarn.retry import (Backoff, Deadline, GaveUp, poll_until, poll_until_async, retry,
                             retry_async)


class Flaky(Exception):
    pass


class FakeSleep:
    """Records each pause and moves the clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.clock.advance(seconds)

    async def on_loop(self, seconds: float) -> None:
        self(seconds)


def failing(times: int, result: str = "done", error: type[Exception] = Flaky):
    """An attempt that raises `error` `times` times, then returns `result`."""
    calls = []

    def attempt() -> str:
        calls.append(None)
        if len(calls) <= times:
            raise error(f"failure {len(calls)}")
        return result
    attempt.calls = calls
    return attempt


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sleep(clock) -> FakeSleep:
    return FakeSleep(clock)


def test_a_backoff_multiplies_its_pause_up_to_the_maximum():
    pauses = Backoff(0.1, 1.0).pauses()
    assert [round(next(pauses), 6) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [next(p) for p in [Backoff.fixed(0.5).pauses()] for _ in range(3)] == [0.5] * 3
    assert Backoff(1.0, 10.0, multiplier=3).after(3.0) == 9.0


@pytest.mark.parametrize("initial, maximum, multiplier", [(-1, 1, 2), (2, 1, 2), (1, 2, 0.5)])
def test_a_backoff_that_cannot_be_is_refused(initial, maximum, multiplier):
    with pytest.raises(ValueError):
        Backoff(initial, maximum, multiplier)


def test_a_deadline_counts_on_its_clock(clock):
    deadline = Deadline(10.0, clock)
    clock.advance(4.0)
    assert (deadline.remaining(), deadline.cap(1.0), deadline.cap(60.0)) == (6.0, 1.0, 6.0)
    assert not deadline.passed()
    clock.advance(6.0)
    assert deadline.passed() and deadline.remaining() == 0.0
    assert Deadline(None, clock).cap(60.0) == 60.0


def test_failed_attempts_are_retried_after_the_backoffs_pauses(sleep):
    attempt = failing(3)
    assert retry(attempt, retry_on=Flaky, pauses=Backoff(1.0, 3.0), sleep=sleep) == "done"
    assert len(attempt.calls) == 4 and sleep.pauses == [1.0, 2.0, 3.0]


def test_past_the_deadline_there_is_one_last_attempt_at_it_then_it_gives_up(clock, sleep):
    attempt = failing(100)
    with pytest.raises(GaveUp) as gave_up:
        retry(attempt, retry_on=Flaky, pauses=Backoff.fixed(1.0),
              deadline=Deadline(2.5, clock), sleep=sleep)
    assert sleep.pauses == [1.0, 1.0, 0.5]  # the last pause ends at the deadline
    assert gave_up.value.attempts == 4 == len(attempt.calls)
    assert str(gave_up.value.last_error) == "failure 4"


def test_a_deadline_of_zero_means_one_attempt(clock, sleep):
    with pytest.raises(GaveUp) as gave_up:
        retry(failing(1), retry_on=Flaky, pauses=Backoff.fixed(1.0),
              deadline=Deadline(0, clock), sleep=sleep)
    assert gave_up.value.attempts == 1 and sleep.pauses == []


def test_an_error_it_does_not_retry_on_propagates_at_once(sleep):
    attempt = failing(1, error=KeyError)
    with pytest.raises(KeyError):
        retry(attempt, retry_on=Flaky, pauses=Backoff.fixed(1.0), sleep=sleep)
    assert len(attempt.calls) == 1 and sleep.pauses == []


def test_the_caller_may_give_up_before_the_deadline(clock, sleep):
    attempt = failing(100)
    with pytest.raises(GaveUp) as gave_up:
        retry(attempt, retry_on=Flaky, pauses=Backoff.fixed(1.0), deadline=Deadline(60, clock),
              give_up=lambda error: str(error) == "failure 3", sleep=sleep)
    assert gave_up.value.attempts == 3 and sleep.pauses == [1.0, 1.0]


def test_each_retry_is_told_with_its_attempt_error_and_pause(sleep):
    told = []
    retry(failing(2), retry_on=Flaky, pauses=Backoff(1.0, 10.0), sleep=sleep,
          on_retry=lambda attempt, error, pause: told.append((attempt, str(error), pause)))
    assert told == [(1, "failure 1", 1.0), (2, "failure 2", 2.0)]


def test_the_pause_may_depend_on_the_failure(sleep):
    class Refused(Flaky):
        pass

    errors = iter([Flaky("unreachable"), Refused("no"), Flaky("unreachable")])

    def attempt() -> str:
        error = next(errors, None)
        if error is not None:
            raise error
        return "registered"

    assert retry(attempt, retry_on=Flaky, sleep=sleep,
                 pauses=lambda error: 30.0 if isinstance(error, Refused) else 10.0) == "registered"
    assert sleep.pauses == [10.0, 30.0, 10.0]


def test_a_poll_returns_the_first_value_it_waits_for(sleep):
    states = iter(["ACCEPTED", "ACCEPTED", "RUNNING", "FINISHED"])
    assert poll_until(lambda: next(states), lambda state: state in ("FINISHED", "FAILED"),
                      pauses=Backoff.fixed(0.25), sleep=sleep) == "FINISHED"
    assert sleep.pauses == [0.25] * 3


def test_by_default_a_poll_waits_for_something_other_than_none(sleep):
    answers = iter([None, None, {"address": "host:1"}])
    assert poll_until(lambda: next(answers), pauses=Backoff(0.01, 0.5), sleep=sleep) == \
        {"address": "host:1"}
    assert sleep.pauses == [0.01, 0.02]


def test_a_poll_that_times_out_says_what_it_saw_last(clock, sleep):
    states = iter(["ACCEPTED", "RUNNING", "RUNNING", "RUNNING"])
    with pytest.raises(GaveUp) as gave_up:
        poll_until(lambda: next(states), lambda state: state == "FINISHED",
                   pauses=Backoff.fixed(1.0), deadline=Deadline(2.0, clock), sleep=sleep)
    assert (gave_up.value.last_value, gave_up.value.last_error) == ("RUNNING", None)
    assert gave_up.value.attempts == 3


def test_a_probe_may_end_the_poll_by_raising(sleep):
    def probe():
        raise RuntimeError("the process exited")
    with pytest.raises(RuntimeError, match="exited"):
        poll_until(probe, pauses=Backoff.fixed(1.0), sleep=sleep)


def test_a_coroutine_is_retried_on_the_loop_the_same_way(clock, sleep):
    attempt = failing(100)

    async def attempt_on_loop() -> str:
        return attempt()

    async def main():
        with pytest.raises(GaveUp) as gave_up:
            await retry_async(attempt_on_loop, retry_on=Flaky, pauses=Backoff(1.0, 4.0),
                              deadline=Deadline(10.0, clock), sleep=sleep.on_loop)
        return gave_up.value

    gave_up = asyncio.run(main())
    assert sleep.pauses == [1.0, 2.0, 4.0, 3.0] and gave_up.attempts == 5


def test_a_poll_on_the_loop(clock, sleep):
    ready = iter([False, False, True])
    assert asyncio.run(poll_until_async(lambda: next(ready), bool, pauses=Backoff.fixed(0.05),
                                        deadline=Deadline(1.0, clock), sleep=sleep.on_loop))
    assert sleep.pauses == [0.05, 0.05]
