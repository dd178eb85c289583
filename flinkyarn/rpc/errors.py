"""Errors of control-plane calls. gRPC status codes are translated here, in one place."""

from __future__ import annotations

import grpc


class RpcError(Exception):
    """A control-plane call did not complete."""


class MalformedMessage(RpcError):
    """The receiver could not decode or validate the request; nothing was changed."""


class MessageTooLarge(RpcError):
    """The message exceeds rpc.max-message-size."""


class StaleCall(RpcError):
    """The call carried an outdated fencing token (leader id, allocation or attempt id)
    and was dropped without effect."""


class UnknownEndpoint(RpcError):
    """No endpoint (or no such method) of that name on the server."""


class Unreachable(RpcError):
    """The server could not be reached (down, frozen, wrong address, or TLS refused)."""


class CallTimeout(RpcError):
    """No answer within the call's timeout."""


class RemoteError(RpcError):
    """The endpoint's method raised; the message says what."""


_BY_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: MalformedMessage,
    grpc.StatusCode.RESOURCE_EXHAUSTED: MessageTooLarge,
    grpc.StatusCode.FAILED_PRECONDITION: StaleCall,
    grpc.StatusCode.UNIMPLEMENTED: UnknownEndpoint,
    grpc.StatusCode.UNAVAILABLE: Unreachable,
    grpc.StatusCode.DEADLINE_EXCEEDED: CallTimeout,
}

STATUS_OF = {
    MalformedMessage: grpc.StatusCode.INVALID_ARGUMENT,
    StaleCall: grpc.StatusCode.FAILED_PRECONDITION,
    UnknownEndpoint: grpc.StatusCode.UNIMPLEMENTED,
}


def from_grpc(error: grpc.aio.AioRpcError, target: str) -> RpcError:
    kind = _BY_STATUS.get(error.code(), RemoteError)
    return kind(f"{target}: {error.details() or error.code().name}")
