"""How a registration at the ResourceManager is retried: Flink's RetryingRegistration,
shared by the TaskExecutor and the JobMaster (cluster.registration.* options).

- An attempt that timed out (CallTimeout) is retried at once, its timeout doubled, up to
  cluster.registration.max-timeout.
- An attempt the ResourceManager refused (it answered, and said no: `REFUSALS`) is
  retried after cluster.registration.refused-registration-delay.
- An attempt that failed with any other error (unreachable, the endpoint raised) is
  retried after cluster.registration.error-delay.
After a refusal or an error the attempt timeout starts again from
cluster.registration.initial-timeout. `next_attempt` is pure; `RegistrationAttempts`
keeps the attempt timeout of one registration and gives flinkyarn.retry its pauses.
"""

from __future__ import annotations

from flinkyarn.options import RegistrationConfig
from flinkyarn.retry import Backoff
from flinkyarn.rpc.errors import (CallTimeout, Forbidden, InvalidRequest, MalformedMessage,
                                  NotFound, RpcError, StaleCall)

# Answers by which the endpoint turned the registration down on purpose.
REFUSALS = (InvalidRequest, Forbidden, StaleCall, NotFound, MalformedMessage)


def next_attempt(policy: RegistrationConfig, attempt_timeout: float,
                 error: RpcError) -> tuple[float, float]:
    """After an attempt with `attempt_timeout` failed with `error`: the pause before the
    next attempt and that attempt's timeout, both in seconds."""
    if isinstance(error, CallTimeout):
        return 0.0, attempt_timeouts(policy).after(attempt_timeout)
    if isinstance(error, REFUSALS):
        return policy.refused_delay, policy.initial_backoff
    return policy.error_delay, policy.initial_backoff


def attempt_timeouts(policy: RegistrationConfig) -> Backoff:
    """cluster.registration.initial-timeout, doubling up to cluster.registration.max-timeout:
    the attempt timeouts of a registration, and the pauses between the TaskExecutor's
    attempts to register at a JobMaster."""
    return Backoff(policy.initial_backoff, policy.max_backoff)


class RegistrationAttempts:
    """One registration's attempts: `timeout` is the next attempt's timeout; `pause_after`
    is the `pauses` of flinkyarn.retry (it moves `timeout` on as next_attempt says)."""

    def __init__(self, policy: RegistrationConfig) -> None:
        self.policy = policy
        self.timeout = policy.initial_backoff

    def pause_after(self, error: BaseException) -> float:
        if not isinstance(error, RpcError):
            raise TypeError(f"a registration is retried after an RpcError, not {error!r}")
        pause, self.timeout = next_attempt(self.policy, self.timeout, error)
        return pause
