"""The RPC service of one process: a gRPC server hosting its endpoints, and shared
channels to the other processes' servers.

A gateway is a `typing.Protocol` whose public methods are `async def m(self, request: T)
-> R` with msgspec-encodable T and R. The server decodes each request as the declared T
(a malformed one is refused before the endpoint sees it) and the caller gets a proxy
object with the same methods. The wire path of a call is `/<endpoint name>/<method>`.

Threading: everything here runs on the process's asyncio event loop.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import logging
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import grpc
import grpc.aio

from flinkyarn.rpc import codec
from flinkyarn.gateways import may_call
from flinkyarn.rpc.errors import (Forbidden, InvalidRequest, MalformedMessage, NotFound,
                                  Rejected, RpcError, StaleCall, UnknownEndpoint, from_grpc,
                                  status_of)
from flinkyarn.rpc.security import TASKEXECUTOR_NAME, ClusterSecurity, role_of

log = logging.getLogger(__name__)

G = TypeVar("G")


@dataclass(frozen=True)
class GatewayMethod:
    name: str
    request_type: Any
    response_type: Any


@functools.lru_cache(maxsize=None)
def gateway_methods(protocol: type) -> dict[str, GatewayMethod]:
    """The RPC methods a gateway Protocol declares, with their message types."""
    methods = {}
    for name, function in vars(protocol).items():
        if name.startswith("_") or not inspect.iscoroutinefunction(function):
            continue
        hints = typing.get_type_hints(function)
        parameters = [p for p in inspect.signature(function).parameters if p != "self"]
        if len(parameters) != 1 or parameters[0] not in hints or "return" not in hints:
            raise TypeError(f"{protocol.__name__}.{name} must take one typed message "
                            f"and declare its return type")
        methods[name] = GatewayMethod(name, hints[parameters[0]], hints["return"])
    return methods


class GatewayProxy:
    """Base of the generated callers: see `RpcService.connect`."""

    def __init__(self, service: "RpcService", address: str, endpoint: str) -> None:
        self._service = service
        self.address = address
        self.endpoint = endpoint
        self._timeout: float | None = None  # None: the service's ask timeout

    async def _call(self, method: GatewayMethod, request: Any, timeout: float | None) -> Any:
        return await self._service.call(self.address, self.endpoint, method, request,
                                        self._timeout if timeout is None else timeout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.endpoint}@{self.address}>"


@functools.lru_cache(maxsize=None)
def proxy_class(protocol: type) -> type:
    """A class with one async method per gateway method, each a call over the network."""
    namespace: dict[str, Callable[..., Awaitable[Any]]] = {}
    for method in gateway_methods(protocol).values():
        def make(method: GatewayMethod) -> Callable[..., Awaitable[Any]]:
            async def call(self: GatewayProxy, request: Any, *,
                           timeout: float | None = None) -> Any:
                return await self._call(method, request, timeout)
            call.__name__ = call.__qualname__ = method.name
            return call
        namespace[method.name] = make(method)
    return type(f"{protocol.__name__}Proxy", (GatewayProxy,), namespace)


def with_timeout(gateway: G, timeout: float) -> G:
    """`gateway` with calls that time out after `timeout` s instead of the service's ask
    timeout: a copy of a proxy (`RpcService.connect`); anything else (a test's fake) as
    it is."""
    if not isinstance(gateway, GatewayProxy):
        return gateway
    proxy = copy.copy(gateway)
    proxy._timeout = timeout
    return proxy


def _caller_role(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The role in the caller's certificate (TLS checked it against the authority)."""
    certificates = list(context.auth_context().get("x509_pem_cert") or [])
    return role_of(certificates[0]) if certificates else None


async def handle_call(endpoints: Mapping[str, tuple[type, object]], endpoint_name: str,
                      method_name: str, request: bytes, role: str | None) -> bytes:
    """What a server does with one call, whatever carried it (gRPC here; the tests'
    in-process network, tests/harness, calls this too, so the two cannot differ): finds
    the endpoint and its method, checks that a caller of `role` may call it, decodes the
    request as the method's declared type, awaits the endpoint's method and encodes its
    answer. A refused call raises before the endpoint sees it; `answer_to_error` says how
    any error is answered."""
    entry = endpoints.get(endpoint_name)
    if entry is None:
        raise UnknownEndpoint(f"no endpoint {endpoint_name!r} here")
    protocol, endpoint = entry
    method = gateway_methods(protocol).get(method_name)
    if method is None:
        raise UnknownEndpoint(f"{endpoint_name} has no method {method_name!r}")
    if not may_call(protocol, role, method_name):
        raise Forbidden(f"a caller of role {role or 'unknown'} may not call "
                        f"{endpoint_name}.{method_name}")
    message = codec.decode(request, method.request_type)
    result = await getattr(endpoint, method_name)(message)
    return codec.encode(result)


def answer_to_error(error: Exception, endpoint_name: str,
                    method_name: str) -> tuple[grpc.StatusCode, str]:
    """The status and details a call to `endpoint_name.method_name` that raised `error` is
    answered with (the caller gets `errors.from_status` of them), logged once: a refusal
    (the caller's mistake: malformed, invalid, stale, unknown, forbidden, rejected) as
    one line, the endpoint's own failure with its traceback."""
    if isinstance(error, (MalformedMessage, InvalidRequest, StaleCall, UnknownEndpoint,
                          NotFound, Forbidden, Rejected)):
        log.info("refused %s.%s: %s", endpoint_name, method_name, error)
        return status_of(error), str(error)
    if not isinstance(error, RpcError):
        log.error("%s.%s failed", endpoint_name, method_name, exc_info=error)
    # An RpcError is a call this endpoint made that failed: the caller sees it as ours.
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


class _Dispatch(grpc.GenericRpcHandler):
    def __init__(self, service: "RpcService") -> None:
        self._service = service

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        endpoint, _, method = details.method.lstrip("/").rpartition("/")
        return grpc.unary_unary_rpc_method_handler(
            functools.partial(self._service._handle, endpoint, method))


class EndpointRegistry:
    """The endpoints a process hosts, by name, and proxies to other processes' endpoints:
    the part of an RpcService that does not depend on what carries the calls (gRPC in
    RpcService, the in-process network of tests/harness). A subclass carries a proxy's
    calls (`call`)."""

    def __init__(self) -> None:
        self._endpoints: dict[str, tuple[type, object]] = {}

    def register(self, name: str, protocol: type, endpoint: object) -> None:
        if name in self._endpoints:
            raise ValueError(f"endpoint {name!r} already registered")
        gateway_methods(protocol)  # validates the protocol
        self._endpoints[name] = (protocol, endpoint)

    def unregister(self, name: str) -> None:
        self._endpoints.pop(name, None)

    def connect(self, address: str, endpoint: str, protocol: type) -> Any:
        """A proxy for the endpoint `endpoint` at `address`, typed as `protocol`."""
        return proxy_class(protocol)(self, address, endpoint)

    async def call(self, address: str, endpoint: str, method: GatewayMethod, request: Any,
                   timeout: float | None) -> Any:
        raise NotImplementedError


class RpcService(EndpointRegistry):
    """The server and client side of one process's control-plane RPC. A server's
    `security` names `host` (ClusterSecurity.for_host): its clients check that name."""

    def __init__(self, security: ClusterSecurity, host: str = "127.0.0.1", port: int = 0,
                 max_message_size: int = 64 << 20, ask_timeout: float = 10.0) -> None:
        super().__init__()
        self.security = security
        self.host = host
        self.ask_timeout = ask_timeout
        self._port = port
        self._options = [
            ("grpc.max_receive_message_length", max_message_size),
            ("grpc.max_send_message_length", max_message_size),
        ]
        self._channels: dict[tuple[str, str | None], grpc.aio.Channel] = {}
        self._server: grpc.aio.Server | None = None
        self._address: str | None = None

    @property
    def address(self) -> str:
        """host:port of this process's server; RuntimeError before `start`."""
        if self._address is None:
            raise RuntimeError("the RpcService has not started: it has no address yet")
        return self._address

    async def start(self) -> str:
        self._server = grpc.aio.server(options=self._options)
        self._server.add_generic_rpc_handlers((_Dispatch(self),))
        port = self._server.add_secure_port(f"{self.host}:{self._port}",
                                            self.security.server_credentials())
        if port == 0:
            raise OSError(f"cannot listen on {self.host}:{self._port}")
        await self._server.start()
        self._address = f"{self.host}:{port}"
        return self._address

    async def stop(self, grace: float = 1.0) -> None:
        """Closes the channels, then the server: calls still handled after `grace`
        seconds are cancelled (their callers see them fail); grpc logs each such
        cancellation, which `OwnStopCancellations` keeps out of the log."""
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        if self._server is not None:
            await self._server.stop(grace)

    async def call(self, address: str, endpoint: str, method: GatewayMethod, request: Any,
                   timeout: float | None) -> Any:
        """One call of a proxy (`connect`): the request encoded, sent over the shared
        channel, the answer decoded as the method's declared type; a failed call raises
        the RpcError of its status (errors.from_grpc)."""
        # A TaskExecutor's certificate names TASKEXECUTOR_NAME, not its host.
        channel = self.channel(address, TASKEXECUTOR_NAME if endpoint == "taskexecutor" else None)
        stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{endpoint}/{method.name}")
        target = f"{endpoint}.{method.name} at {address}"
        try:
            data = await stub(codec.encode(request),
                              timeout=self.ask_timeout if timeout is None else timeout)
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, target) from None
        return codec.decode(data, method.response_type)

    def channel(self, address: str, server_name: str | None = None) -> grpc.aio.Channel:
        """One shared channel per remote process; its certificate must name the host
        dialed, or `server_name`."""
        channel = self._channels.get((address, server_name))
        if channel is None:
            named = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            channel = grpc.aio.secure_channel(address, self.security.channel_credentials(), options=[
                *self._options, *named,
                # A restarted peer must be reachable again quickly: retry connecting
                # after 100 ms, then at most every 2 s.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
                # gRPC core reads this as the time a connection attempt may take. A
                # busy peer's TLS handshake can take longer than 100 ms: with 100 (as
                # here once) calls to it failed as Unreachable at once, and heartbeats
                # counted a frozen peer as gone (see heartbeat.rpc-failure-threshold).
                # 20 s, gRPC's default; a call's own timeout still bounds its wait.
                ("grpc.min_reconnect_backoff_ms", 20000),
            ])
            self._channels[(address, server_name)] = channel
        return channel

    async def _handle(self, endpoint_name: str, method_name: str, request: bytes,
                      context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        try:
            return await handle_call(self._endpoints, endpoint_name, method_name, request,
                                     _caller_role(context))
        except Exception as error:  # every error is answered: see answer_to_error
            status, details = answer_to_error(error, endpoint_name, method_name)
        await context.abort(status, details)


class OwnStopCancellations(logging.Filter):
    """Drops grpc's log records of a call handler cancelled (a traceback ending in
    CancelledError): that is what stopping our server does to a call still in its
    handler after the grace period, under load a heartbeat's; no error of ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.name.startswith("grpc") and isinstance(error, asyncio.CancelledError))
