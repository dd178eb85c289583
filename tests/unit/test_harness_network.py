"""The in-process network of tests/harness answers every call as the gRPC path does.
Both servers run flinkyarn.rpc.service.handle_call and answer errors with
answer_to_error; what could still drift (status codes, their translation back into
errors at the caller, the caller's role) is checked here side by side: each way a call
can be refused or fail gives the caller the same error, with the same message, over
real gRPC on loopback and in-process. Then the faults only the harness simulates: a
killed process, a frozen one, a partition, each against a ManualClock."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol

import msgspec
import pytest

from flinkyarn.clock import ManualClock
from flinkyarn.gateways import ACK, Ack, callable_by
from flinkyarn.rpc.endpoint import check_fencing
from flinkyarn.rpc.errors import (CallTimeout, InvalidRequest, NotFound, RpcError, Unreachable)
from flinkyarn.rpc.security import APPMASTER, CLIENT, ClusterSecurity
from flinkyarn.rpc.service import GatewayMethod, RpcService
from tests.harness import InProcessNetwork, advance, settle


class Add(msgspec.Struct, frozen=True):
    leader_id: str
    amount: int


class Total(msgspec.Struct, frozen=True):
    value: int


@callable_by(client=frozenset({"total"}))
class CounterGateway(Protocol):
    async def add(self, request: Add) -> Total:
        ...

    async def total(self, request: Ack) -> Total:
        ...

    async def fail(self, request: Add) -> Ack:
        ...


class Counter:
    """A fenced counter whose `fail` raises what its amount selects."""

    def __init__(self) -> None:
        self.value = 0
        self.adding = asyncio.Event()  # set while an `add` waits for `go`
        self.go = asyncio.Event()
        self.go.set()

    async def add(self, request: Add) -> Total:
        check_fencing("leader-2", request.leader_id, "leader id")
        self.adding.set()
        await self.go.wait()
        self.value += request.amount
        return Total(self.value)

    async def total(self, request: Ack) -> Total:
        return Total(self.value)

    async def fail(self, request: Add) -> Ack:
        raise [InvalidRequest("no such amount"), NotFound("nothing to fail"),
               RuntimeError("the counter broke"),
               Unreachable("a call it made: no such process")][request.amount]


def unknown(method: str) -> GatewayMethod:
    return GatewayMethod(method, Ack, Ack)


# (caller's role, endpoint, method, request): every way a call is refused or fails.
FAILURES: list[tuple[str, str, GatewayMethod | str, Any]] = [
    (APPMASTER, "counter", "add", Add("leader-1", 1)),           # stale
    (CLIENT, "counter", "add", Add("leader-2", 1)),              # forbidden
    (APPMASTER, "counter", "add", Total(3)),                     # malformed
    (APPMASTER, "counter", unknown("subtract"), ACK),            # unknown method
    (APPMASTER, "nothing", unknown("add"), ACK),                 # unknown endpoint
    *[(APPMASTER, "counter", "fail", Add("leader-2", n)) for n in range(4)],  # raised
]


async def outcome(rpc: Any, address: str, endpoint: str, method: GatewayMethod | str,
                  request: Any) -> tuple[str, str]:
    if isinstance(method, str):
        method = GatewayMethod(method, *{"add": (Add, Total), "fail": (Add, Ack),
                                         "total": (Ack, Total)}[method])
    try:
        answer = await rpc.call(address, endpoint, method, request, None)
    except RpcError as error:
        # Only the server's address differs.
        return type(error).__name__, str(error).replace(address, "<server>")
    return "answered", repr(answer)


def test_every_refusal_and_failure_reaches_the_caller_as_over_grpc(tmp_path) -> None:
    files = ClusterSecurity.generate(tmp_path / "cluster")
    appmaster = files.for_host("127.0.0.1", tmp_path / "appmaster")

    async def over_grpc() -> list[tuple[str, str]]:
        server = RpcService(appmaster)
        await server.start()
        server.register("counter", CounterGateway, Counter())
        callers = {APPMASTER: RpcService(appmaster), CLIENT: RpcService(files)}
        try:
            return [await outcome(callers[role], server.address, *call)
                    for role, *call in FAILURES]
        finally:
            for rpc in (*callers.values(), server):
                await rpc.stop(grace=0)

    async def in_process() -> list[tuple[str, str]]:
        network = InProcessNetwork(ManualClock())
        server = network.service("server", APPMASTER)
        address = await server.start()
        server.register("counter", CounterGateway, Counter())
        callers = {role: network.service(role, role) for role in (APPMASTER, CLIENT)}
        for caller in callers.values():
            await caller.start()
        return [await outcome(callers[role], address, *call) for role, *call in FAILURES]

    grpc_outcomes = asyncio.run(over_grpc())
    assert asyncio.run(in_process()) == grpc_outcomes
    # And they are the refusals and failures meant, not one error nine times.
    assert [kind for kind, _ in grpc_outcomes] == [
        "StaleCall", "Forbidden", "MalformedMessage", "UnknownEndpoint", "UnknownEndpoint",
        "MalformedMessage", "NotFound", "RemoteError", "RemoteError"]
    assert grpc_outcomes[7] == ("RemoteError", "counter.fail at <server>: RuntimeError: the "
                                               "counter broke")


async def network_of_two() -> tuple[ManualClock, Any, Any, Counter, Any]:
    """A ManualClock, a caller process, a server process, its counter, and a proxy."""
    clock = ManualClock()
    network = InProcessNetwork(clock)
    caller, server = network.service("caller", APPMASTER, ask_timeout=10.0), \
        network.service("server", APPMASTER)
    await caller.start()
    await server.start()
    counter = Counter()
    server.register("counter", CounterGateway, counter)
    return clock, caller, server, counter, caller.connect(server.address, "counter",
                                                          CounterGateway)


def test_a_frozen_process_answers_nothing_and_its_callers_time_out_at_their_timeout() -> None:
    async def scenario() -> None:
        clock, caller, server, counter, gateway = await network_of_two()
        server.freeze()
        call = asyncio.ensure_future(gateway.add(Add("leader-2", 1)))
        await advance(clock, 9.999)
        assert not call.done() and counter.value == 0
        await advance(clock, 0.001)
        with pytest.raises(CallTimeout, match=re.escape(
                f"counter.add at {server.address}: Deadline Exceeded")):
            await call
        # Thawed before a call's timeout, it answers it; a call's own timeout counts.
        late = asyncio.ensure_future(gateway.add(Add("leader-2", 2), timeout=30.0))
        await advance(clock, 20.0)
        server.thaw()
        assert await late == Total(2)
    asyncio.run(scenario())


def test_a_killed_process_is_unreachable_also_for_the_calls_it_was_serving() -> None:
    async def scenario() -> None:
        clock, caller, server, counter, gateway = await network_of_two()
        counter.go.clear()
        serving = asyncio.ensure_future(gateway.add(Add("leader-2", 1)))
        await counter.adding.wait()
        server.kill()
        with pytest.raises(Unreachable, match="went away during the call"):
            await serving
        with pytest.raises(Unreachable, match="failed to connect to all addresses"):
            await gateway.total(ACK)
        assert clock.monotonic() == 1000.0  # at once: no timeout involved
    asyncio.run(scenario())


def test_a_partition_loses_only_the_calls_it_matches_until_healed() -> None:
    async def scenario() -> None:
        clock, caller, server, counter, gateway = await network_of_two()
        cut = caller.network.partition(caller=caller.address, method="add")
        lost = asyncio.ensure_future(gateway.add(Add("leader-2", 1)))
        assert await gateway.total(ACK) == Total(0)  # other calls go through
        await settle()
        assert not lost.done()
        cut.heal()
        assert await lost == Total(1)
    asyncio.run(scenario())
