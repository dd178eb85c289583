"""Heartbeats, as in Flink's HeartbeatManager (see seeds/flink-heartbeat-mechanism.txt).

Who heartbeats whom:
    ResourceManager -> JobMaster         (payload: none)
    ResourceManager -> TaskExecutor      (the TaskExecutor answers with its SlotReport)
    JobMaster       -> TaskExecutor      (the TaskExecutor answers with its allocated slots)

The sending side calls `request_heartbeat` on each monitored target every
heartbeat.interval; the target's manager records the request (`answer_request`) and
answers with its own payload, which the sender records (`receive_heartbeat`). Each side
declares the other dead when it has heard nothing for heartbeat.timeout, and tells its
listener, which carries out the consequences the article lists. The sending side also
declares a target dead after heartbeat.rpc-failure-threshold consecutive calls that could
not reach it (Flink's rule: a killed process refuses connections at once, so waiting for
the timeout only delays recovery); a call that reaches a frozen process and times out
does not count, so freezing is still found by the timeout.

The manager is bookkeeping over a Clock, which also times its heartbeat calls out: tests
drive time with a ManualClock and call `check_timeouts()`; endpoints call
`send_heartbeats()` and `check_timeouts()` from periodic tasks on their loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, TypeVar

from flinkyarn.clock import Clock
from flinkyarn.ids import ResourceID
from flinkyarn.rpc.errors import Unreachable

log = logging.getLogger(__name__)

In = TypeVar("In")    # payload we receive
Out = TypeVar("Out")  # payload we send


def _no_payload(_resource_id: ResourceID) -> Any:
    """The default `payload_for`: a manager made without one sends None (its Out)."""
    return None


@dataclass
class _Target:
    last_heard: float
    # Sender side only: sends our payload, returns the target's answer payload.
    request: Callable[[Any], Awaitable[Any]] | None
    in_flight: bool = False
    failed_calls: int = 0  # consecutive calls that could not reach the target


class HeartbeatManager(Generic[In, Out]):
    """Tracks the liveness of the components one endpoint exchanges heartbeats with.

    Listener callbacks (all called on the endpoint's loop):
      on_timeout(resource_id)            the target was silent for `timeout`; it is no
                                         longer monitored when this is called
      on_unreachable(resource_id, error) `rpc_failure_threshold` calls in a row could
                                         not reach it; no longer monitored either
      on_payload(resource_id, payload)   a heartbeat (request or answer) arrived
      payload_for(resource_id) -> Out    what to send to (or answer) that target
    """

    def __init__(self, owner: ResourceID, timeout: float, clock: Clock,
                 on_timeout: Callable[[ResourceID], None],
                 on_payload: Callable[[ResourceID, In], None] = lambda _r, _p: None,
                 payload_for: Callable[[ResourceID], Out] = _no_payload,
                 rpc_failure_threshold: int | None = None,
                 on_unreachable: Callable[[ResourceID, str], None] | None = None) -> None:
        self.owner = owner
        self.timeout = timeout
        self._clock = clock
        self._on_timeout = on_timeout
        self._rpc_failure_threshold = rpc_failure_threshold
        self._on_unreachable = on_unreachable or (lambda rid, _error: on_timeout(rid))
        self._on_payload = on_payload
        self._payload_for = payload_for
        self._targets: dict[ResourceID, _Target] = {}

    def monitor_target(self, resource_id: ResourceID,
                       request: Callable[[Out], Awaitable[In]] | None = None) -> None:
        """Starts (or restarts) monitoring; `request` is given on the sending side."""
        self._targets[resource_id] = _Target(self._clock.monotonic(), request)

    def unmonitor_target(self, resource_id: ResourceID) -> None:
        self._targets.pop(resource_id, None)

    def is_monitored(self, resource_id: ResourceID) -> bool:
        return resource_id in self._targets

    def targets(self) -> list[ResourceID]:
        return list(self._targets)

    def last_heard(self, resource_id: ResourceID) -> float | None:
        target = self._targets.get(resource_id)
        return None if target is None else target.last_heard

    def receive_heartbeat(self, resource_id: ResourceID, payload: In) -> None:
        """An answer (or a heartbeat) from a target; ignored for unmonitored ones."""
        target = self._targets.get(resource_id)
        if target is None:
            return
        target.last_heard = self._clock.monotonic()
        self._on_payload(resource_id, payload)

    def answer_request(self, resource_id: ResourceID, payload: In) -> Out:
        """Receiving side: a heartbeat request arrived; record it and return our payload."""
        self.receive_heartbeat(resource_id, payload)
        return self._payload_for(resource_id)

    def check_timeouts(self) -> list[ResourceID]:
        now = self._clock.monotonic()
        expired = [rid for rid, t in self._targets.items() if now - t.last_heard > self.timeout]
        for resource_id in expired:
            del self._targets[resource_id]
            log.warning("%s: heartbeat of %s timed out after %.1f s", self.owner, resource_id,
                        self.timeout)
            self._on_timeout(resource_id)
        return expired

    async def send_heartbeats(self, call_timeout: float) -> None:
        """Sending side: one request to every target not still answering the last one.

        A failed or unanswered request is not an error here: silence is what the timeout
        measures. Calls that could not reach the target are counted; at the threshold it
        is declared dead at once."""
        async def one(resource_id: ResourceID, target: _Target,
                      request: Callable[[Out], Awaitable[In]]) -> None:
            target.in_flight = True
            try:
                answer = await self._clock.wait_for(request(self._payload_for(resource_id)),
                                                    call_timeout)
            except Unreachable as error:
                self._call_failed(resource_id, target, str(error))
                return
            except Exception as error:  # frozen, slow, refused by the target: the timeout's
                log.debug("heartbeat to %s failed: %s", resource_id, error)
                return
            finally:
                target.in_flight = False
            if self._targets.get(resource_id) is target:
                target.failed_calls = 0
                self.receive_heartbeat(resource_id, answer)

        await asyncio.gather(*(one(rid, t, t.request) for rid, t in list(self._targets.items())
                               if t.request is not None and not t.in_flight))

    def _call_failed(self, resource_id: ResourceID, target: _Target, error: str) -> None:
        if self._targets.get(resource_id) is not target:
            return  # no longer monitored, or monitored anew meanwhile
        target.failed_calls += 1
        log.debug("heartbeat %d to %s could not reach it: %s", target.failed_calls,
                  resource_id, error)
        if self._rpc_failure_threshold is None or target.failed_calls < self._rpc_failure_threshold:
            return
        del self._targets[resource_id]
        log.warning("%s: %s unreachable (%d heartbeat calls in a row failed: %s)", self.owner,
                    resource_id, target.failed_calls, error)
        self._on_unreachable(resource_id, f"{target.failed_calls} heartbeat calls in a row "
                                          f"could not reach it: {error}")
