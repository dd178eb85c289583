"""Errors of control-plane calls. gRPC status codes are translated here, in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a client that only speaks REST needs no gRPC
    import grpc


class RpcError(Exception):
    """A control-plane call did not complete."""


class MalformedMessage(RpcError):
    """The receiver could not decode or validate the request; nothing was changed."""


class InvalidRequest(RpcError, ValueError):
    """The endpoint refused a well-formed request as invalid (a job graph it cannot run,
    a job id it knows already, a job it is not the JobMaster of); nothing changed. Also a
    ValueError, the refusal endpoints document."""


class MessageTooLarge(RpcError):
    """The message exceeds rpc.max-message-size."""


class StaleCall(RpcError):
    """The call carried an outdated fencing token (leader id, allocation or attempt id)
    and was dropped without effect."""


class UnknownEndpoint(RpcError):
    """No endpoint (or no such method) of that name on the server."""


class Forbidden(RpcError):
    """The caller's role may not make this call (its certificate says which it has)."""


class NotFound(RpcError):
    """The call named something the endpoint does not have (a job, say); nothing changed."""


class Rejected(RpcError):
    """The endpoint refused the caller itself, for good (Flink's registration rejection:
    a TaskExecutor whose worker the ResourceManager did not start, or whose container
    has ended); the caller must not try again. A TaskExecutor exits."""


class Unreachable(RpcError):
    """The server could not be reached (down, frozen, wrong address, or TLS refused)."""


class CallTimeout(RpcError):
    """No answer within the call's timeout."""


class RemoteError(RpcError):
    """The endpoint's method raised; the message says what."""


# By the name of the gRPC status code (grpc.StatusCode.X.name).
_BY_STATUS: dict[str, type[RpcError]] = {
    "INVALID_ARGUMENT": MalformedMessage,
    "RESOURCE_EXHAUSTED": MessageTooLarge,
    "FAILED_PRECONDITION": StaleCall,
    "UNIMPLEMENTED": UnknownEndpoint,
    "NOT_FOUND": NotFound,
    "PERMISSION_DENIED": Forbidden,
    "UNAVAILABLE": Unreachable,
    "DEADLINE_EXCEEDED": CallTimeout,
    "ABORTED": Rejected,
}

_STATUS_OF: dict[type[RpcError], str] = {
    MalformedMessage: "INVALID_ARGUMENT",
    InvalidRequest: "INVALID_ARGUMENT",
    StaleCall: "FAILED_PRECONDITION",
    UnknownEndpoint: "UNIMPLEMENTED",
    NotFound: "NOT_FOUND",
    Forbidden: "PERMISSION_DENIED",
    Rejected: "ABORTED",
}


def status_of(error: RpcError) -> grpc.StatusCode:
    """The status a refused call answers with, for `error` or a subclass of its kind."""
    import grpc

    for kind in type(error).__mro__:
        if kind in _STATUS_OF:
            return grpc.StatusCode[_STATUS_OF[kind]]
    return grpc.StatusCode.INTERNAL


def from_grpc(error: grpc.aio.AioRpcError, target: str) -> RpcError:
    return from_status(error.code(), error.details(), target)


def from_status(code: grpc.StatusCode, details: str | None, target: str) -> RpcError:
    """The error a caller of `target` sees for a call answered with `code` and `details`."""
    kind = _BY_STATUS.get(code.name, RemoteError)
    return kind(f"{target}: {details or code.name}")
