"""Retrying a registration at the ResourceManager (Flink's RetryingRegistration)."""

from __future__ import annotations

import pytest

from flinkyarn.options import RegistrationConfig
from flinkyarn.registration import next_attempt
from flinkyarn.rpc.errors import CallTimeout, Forbidden, InvalidRequest, RemoteError, Unreachable

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
