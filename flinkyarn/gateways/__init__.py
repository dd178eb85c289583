"""The gateways: what each endpoint can be asked over the network, with its messages.

One module per endpoint. A gateway is a `typing.Protocol`; the endpoint, the network
proxy (`RpcService.connect`) and test fakes all satisfy it. Every call that changes
state carries the fencing token of its sender's current leadership or allocation.
Who may call: the AppMaster any method; other roles (flinkyarn.rpc.security) only the
methods a gateway grants them with `@callable_by`; the RpcService refuses the rest.
"""

from collections.abc import Callable
from typing import TypeVar

import msgspec

from flinkyarn.rpc.security import APPMASTER

ALL_METHODS = "*"

P = TypeVar("P", bound=type)


def callable_by(**roles: str | frozenset[str]) -> Callable[[P], P]:
    """Grants roles other than the AppMaster the methods named (or ALL_METHODS), e.g.
    `@callable_by(taskexecutor=frozenset({"offer_slots"}))`."""
    def grant(protocol: P) -> P:
        # setattr: `type` declares no __callers__ for the type checker.
        setattr(protocol, "__callers__", dict(roles))  # noqa: B010
        return protocol
    return grant


def may_call(protocol: type, role: str | None, method: str) -> bool:
    """Whether a caller of `role` may call `method` of an endpoint of `protocol`."""
    if role == APPMASTER:
        return True
    methods = getattr(protocol, "__callers__", {}).get(role)
    return methods is not None and (methods == ALL_METHODS or method in methods)


class Ack(msgspec.Struct, frozen=True):
    """The call was accepted (or, for idempotent calls, had already been applied)."""


ACK = Ack()


class HeartbeatRequest(msgspec.Struct, frozen=True):
    sender: str  # ResourceID of the component sending the heartbeat
