"""How a registration at the ResourceManager is retried: Flink's RetryingRegistration,
shared by the TaskExecutor and the JobMaster (cluster.registration.* options).

- An attempt that timed out (CallTimeout) is retried at once, its timeout doubled, up to
  cluster.registration.max-timeout.
- An attempt the ResourceManager refused (it answered, and said no: `REFUSALS`) is
  retried after cluster.registration.refused-registration-delay.
- An attempt that failed with any other error (unreachable, the endpoint raised) is
  retried after cluster.registration.error-delay.
After a refusal or an error the attempt timeout starts again from
cluster.registration.initial-timeout. Pure: the caller sleeps and counts.
"""

from __future__ import annotations

from flinkyarn.options import RegistrationConfig
from flinkyarn.rpc.errors import (CallTimeout, Forbidden, InvalidRequest, MalformedMessage,
                                  NotFound, RpcError, StaleCall)

# Answers by which the endpoint turned the registration down on purpose.
REFUSALS = (InvalidRequest, Forbidden, StaleCall, NotFound, MalformedMessage)


def next_attempt(policy: RegistrationConfig, attempt_timeout: float,
                 error: RpcError) -> tuple[float, float]:
    """After an attempt with `attempt_timeout` failed with `error`: the pause before the
    next attempt and that attempt's timeout, both in seconds."""
    if isinstance(error, CallTimeout):
        return 0.0, min(attempt_timeout * 2, policy.max_backoff)
    if isinstance(error, REFUSALS):
        return policy.refused_delay, policy.initial_backoff
    return policy.error_delay, policy.initial_backoff
