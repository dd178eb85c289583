"""Retrying a registration at the ResourceManager (Flink's RetryingRegistration)."""

from __future__ import annotations

import asyncio

import pytest

from flinkyarn.clock import ManualClock
from flinkyarn.options import RegistrationConfig
from flinkyarn.registration import RegistrationAttempts, next_attempt
from flinkyarn.retry import Deadline, GaveUp, retry_async
from flinkyarn.rpc.errors import (CallTimeout, Forbidden, InvalidRequest, RemoteError, RpcError,
                                  Unreachable)

POLICY = RegistrationConfig(initial_backoff=0.1, max_backoff=0.5, error_delay=10.0,
                            timeout=300.0, refused_delay=30.0)


def test_a_timed_out_attempt_is_retried_at_once_with_double_the_timeout_up_to_the_max():
    assert next_attempt(POLICY, 0.1, CallTimeout("rm")) == (0.0, 0.2)
    assert next_attempt(POLICY, 0.4, CallTimeout("rm")) == (0.0, 0.5)


@pytest.mark.parametrize("error", [InvalidRequest("no"), Forbidden("not you")])
def test_a_refused_registration_waits_the_refused_delay_then_starts_over(error):
    assert next_attempt(POLICY, 0.4, error) == (30.0, 0.1)


@pytest.mark.parametrize("error", [Unreachable("down"), RemoteError("it raised")])
def test_an_attempt_that_failed_with_an_error_waits_the_error_delay_then_starts_over(error):
    assert next_attempt(POLICY, 0.4, error) == (10.0, 0.1)


def test_a_registration_retries_with_doubling_attempt_timeouts_until_the_registration_timeout():
    clock, pauses, timeouts = ManualClock(), [], []
    attempts = RegistrationAttempts(POLICY)

    async def register():
        timeouts.append(attempts.timeout)
        clock.advance(attempts.timeout)  # the attempt times out
        raise CallTimeout("rm")

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock.advance(seconds)

    async def main():
        with pytest.raises(GaveUp) as gave_up:
            await retry_async(register, retry_on=RpcError, pauses=attempts.pause_after,
                              deadline=Deadline(1.0, clock), sleep=sleep)
        return gave_up.value

    gave_up = asyncio.run(main())
    assert timeouts == [0.1, 0.2, 0.4, 0.5] and set(pauses) == {0.0}
    assert gave_up.attempts == 4 and isinstance(gave_up.last_error, CallTimeout)


def test_after_a_refusal_the_attempt_timeout_starts_over():
    attempts = RegistrationAttempts(POLICY)
    assert [attempts.pause_after(error) for error in
            (CallTimeout("rm"), CallTimeout("rm"), Forbidden("no"), Unreachable("down"))] == \
        [0.0, 0.0, 30.0, 10.0]
    assert attempts.timeout == 0.1
