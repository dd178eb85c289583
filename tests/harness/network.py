"""An in-process RPC network: one InProcessRpcService per simulated process, all on the
test's loop, each with what endpoints use of flinkyarn's RpcService (address, start,
stop, register, unregister, connect, call, ask_timeout).

A call through a proxy takes the real path minus the socket: the request is encoded with
the real codec; the server's side is `service.handle_call`, the very function the gRPC
server runs (the endpoint and method looked up, `may_call` checked against the calling
process's role, the request decoded and validated as the method's declared type), and
errors are answered by `service.answer_to_error` and raised to the caller by
`errors.from_status`, as over gRPC: a stale call raises StaleCall at the caller and is
logged once at the server. The answer is encoded and decoded too, so no object is
shared between processes.

Faults: a killed process is unreachable (Unreachable at once, as a refused connection);
the calls it was serving end with Unreachable. A frozen process neither answers nor
sends: calls to it and from it wait, and the caller's timeout decides (CallTimeout, on
the network's clock) unless it is thawed first. A `Partition` loses the calls it matches
in the same way, and only those: e.g. only the ResourceManager's heartbeats to one
TaskExecutor, while the JobMaster in the same process still reaches it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

import grpc

from flinkyarn.clock import Clock
from flinkyarn.rpc import codec
from flinkyarn.rpc.errors import RpcError, from_status
from flinkyarn.rpc.service import EndpointRegistry, GatewayMethod, answer_to_error, handle_call

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallRecord:
    """One call that reached its server: who called (the calling process's address),
    what, with which request (as the server decoded it, None if it could not), and the
    error its caller got (None: answered)."""

    caller: str
    address: str
    endpoint: str
    method: str
    request: Any
    error: RpcError | None


@dataclass(eq=False)
class Partition:
    """Calls that match every field given (None: any) are lost until `heal()`."""

    network: "InProcessNetwork"
    caller: str | None = None
    address: str | None = None
    endpoint: str | None = None
    method: str | None = None

    def matches(self, caller: str, address: str, endpoint: str, method: str) -> bool:
        return all(want is None or want == have for want, have in (
            (self.caller, caller), (self.address, address), (self.endpoint, endpoint),
            (self.method, method)))

    def heal(self) -> None:
        self.network.heal(self)


class InProcessNetwork:
    """The simulated processes of one test, by address; call timeouts follow `clock`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[CallRecord] = []
        self._services: dict[str, InProcessRpcService] = {}
        self._partitions: list[Partition] = []
        self._healed = asyncio.Event()
        self._ports = itertools.count(1)

    def service(self, host: str, role: str, ask_timeout: float = 10.0,
                max_message_size: int = 64 << 20) -> "InProcessRpcService":
        """A new process's RPC service; its calls carry `role` (as its certificate would)."""
        return InProcessRpcService(self, f"{host}:{next(self._ports)}", role, ask_timeout,
                                   max_message_size)

    def partition(self, *, caller: str | None = None, address: str | None = None,
                  endpoint: str | None = None, method: str | None = None) -> Partition:
        """From now on, the calls matching every field given are lost (see Partition)."""
        partition = Partition(self, caller, address, endpoint, method)
        self._partitions.append(partition)
        return partition

    def heal(self, partition: Partition) -> None:
        if partition in self._partitions:
            self._partitions.remove(partition)
        self._healed.set()  # calls held by it look again
        self._healed = asyncio.Event()

    def calls_to(self, method: str, endpoint: str | None = None) -> list[CallRecord]:
        return [c for c in self.calls if c.method == method
                and (endpoint is None or c.endpoint == endpoint)]

    def _up(self, address: str) -> "InProcessRpcService | None":
        service = self._services.get(address)
        return service if service is not None and service.up else None

    async def _through_partitions(self, caller: str, address: str, endpoint: str,
                                  method: str) -> None:
        while any(p.matches(caller, address, endpoint, method) for p in self._partitions):
            await self._healed.wait()


class InProcessRpcService(EndpointRegistry):
    """A process's RpcService on the in-process network (see the module docstring)."""

    security = None  # nothing to encrypt in-process

    def __init__(self, network: InProcessNetwork, address: str, role: str, ask_timeout: float,
                 max_message_size: int) -> None:
        super().__init__()
        self.network = network
        self.role = role
        self.ask_timeout = ask_timeout
        self.max_message_size = max_message_size
        self.address: str | None = None
        self._reserved_address = address
        self._serving: set[asyncio.Task[Any]] = set()
        self.up = False
        self.killed = False
        self._thawed = asyncio.Event()
        self._thawed.set()

    # ------------------------------------------------ what endpoints use of RpcService

    async def start(self) -> str:
        self.address = self._reserved_address
        self.network._services[self.address] = self
        self.up = True
        return self.address

    async def stop(self, grace: float = 1.0) -> None:
        self.up = False

    async def call(self, address: str, endpoint: str, method: GatewayMethod, request: Any,
                   timeout: float | None) -> Any:
        target = f"{endpoint}.{method.name} at {address}"
        try:
            return await self.network.clock.wait_for(
                self._deliver(address, endpoint, method, request, target),
                self.ask_timeout if timeout is None else timeout)
        except TimeoutError:
            raise from_status(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded",
                              target) from None

    # ------------------------------------------------------------------------ faults

    def kill(self) -> None:
        """The process is gone: unreachable from now on, the calls it serves fail."""
        self.up = False
        self.killed = True
        self._thawed.set()  # calls waiting for it to thaw find it gone
        for serving in list(self._serving):
            serving.cancel()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    @property
    def frozen(self) -> bool:
        return not self._thawed.is_set()

    # ---------------------------------------------------------------------- the call

    async def _deliver(self, address: str, endpoint: str, method: GatewayMethod, request: Any,
                       target: str) -> Any:
        data = codec.encode(request)
        if len(data) > self.max_message_size:
            raise from_status(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"Sent message larger than max ({len(data)} vs. "
                              f"{self.max_message_size})", target)
        await self._thawed.wait()  # a frozen process sends nothing
        await self.network._through_partitions(self.address or "", address, endpoint,
                                               method.name)
        server = self.network._up(address)
        if server is None:
            raise from_status(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses",
                              target)
        await server._thawed.wait()  # nor does it answer
        if not server.up:
            raise from_status(grpc.StatusCode.UNAVAILABLE, "the server went away", target)
        answer, refusal = await server._serve(endpoint, method.name, data, self.role, target)
        if refusal is not None:
            error = from_status(*refusal, target)
            self.network.calls.append(CallRecord(self.address or "", address, endpoint,
                                                 method.name, _decoded(data, method), error))
            raise error
        self.network.calls.append(CallRecord(self.address or "", address, endpoint,
                                             method.name, _decoded(data, method), None))
        return codec.decode(answer, method.response_type)

    async def _serve(self, endpoint: str, method: str, data: bytes, role: str, target: str
                     ) -> tuple[bytes | None, tuple[grpc.StatusCode, str] | None]:
        """The server's side, in a task of this process (killing it cancels the task);
        the caller's timeout cancels it too, as gRPC's deadline does."""
        serving = asyncio.ensure_future(self._answer(endpoint, method, data, role))
        self._serving.add(serving)
        serving.add_done_callback(self._serving.discard)
        try:
            return await serving
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if serving.cancelled() and self.killed and (current is None or not current.cancelling()):
                raise from_status(grpc.StatusCode.UNAVAILABLE, "the server went away during "
                                  "the call", target) from None
            raise

    async def _answer(self, endpoint: str, method: str, data: bytes, role: str
                      ) -> tuple[bytes | None, tuple[grpc.StatusCode, str] | None]:
        try:
            return await handle_call(self._endpoints, endpoint, method, data, role), None
        except Exception as error:  # answered as the gRPC server answers it
            return None, answer_to_error(error, endpoint, method)

    def __repr__(self) -> str:
        return f"<InProcessRpcService {self.role} {self.address}>"


def _decoded(data: bytes, method: GatewayMethod) -> Any:
    try:
        return codec.decode(data, method.request_type)
    except RpcError:
        return None
