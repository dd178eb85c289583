"""The control-plane RPC over loopback: real gRPC, real TLS."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc
import msgspec
import pytest

from flinkyarn.gateways import ACK, Ack, callable_by
from flinkyarn.rpc import codec
from flinkyarn.rpc.endpoint import RpcEndpoint, check_fencing
from flinkyarn.rpc.errors import (Forbidden, MessageTooLarge, StaleCall, UnknownEndpoint,
                                  Unreachable)
from flinkyarn.rpc.security import TASKEXECUTOR_DIR, ClusterSecurity
from flinkyarn.rpc.service import RpcService


class Add(msgspec.Struct, frozen=True):
    leader_id: str
    amount: int
    note: str = ""


class Total(msgspec.Struct, frozen=True):
    value: int


@callable_by(client=frozenset({"ping"}))
class CounterGateway(Protocol):
    async def add(self, request: Add) -> Total:
        ...

    async def ping(self, request: Ack) -> Ack:
        ...


class Counter(RpcEndpoint):
    def __init__(self, rpc):
        super().__init__(rpc, "counter", CounterGateway)
        self.leader_id = "leader-2"
        self.value = 0

    async def add(self, request: Add) -> Total:
        check_fencing(self.leader_id, request.leader_id, "leader id")
        self.assert_on_loop()
        self.value += request.amount
        return Total(self.value)

    async def ping(self, request: Ack) -> Ack:
        return ACK


@pytest.fixture
def cluster_files(tmp_path):
    return ClusterSecurity.generate(tmp_path / "cluster")


@pytest.fixture
def security(cluster_files, tmp_path):
    """What a process of the cluster on 127.0.0.1 uses: its own certificate."""
    return cluster_files.for_host("127.0.0.1", tmp_path / "process")


def run(scenario):
    asyncio.run(asyncio.wait_for(scenario(), 20))


async def serve(security, host="127.0.0.1", **options):
    server = RpcService(security, host,
                        max_message_size=options.get("max_message_size", 64 << 20))
    await server.start()
    counter = Counter(server)
    task = asyncio.create_task(counter.run())
    await counter.running.wait()
    return server, counter, task


async def shutdown(server, counter, task, *clients):
    counter.stop()
    await task
    for client in clients:
        await client.stop()
    await server.stop()


def test_call_round_trip_changes_state_on_the_endpoint(security):
    async def scenario():
        server, counter, task = await serve(security)
        client = RpcService(security)
        gateway = client.connect(server.address, "counter", CounterGateway)
        assert await gateway.add(Add("leader-2", 5)) == Total(5)
        assert await gateway.add(Add("leader-2", 2)) == Total(7)
        await shutdown(server, counter, task, client)
    run(scenario)


def test_each_caller_may_call_only_what_its_gateway_grants_its_role(cluster_files, security):
    """The AppMaster's certificate may call everything; the client's reaches the process
    but only the methods granted to role client (ping); the TaskExecutors' none here.
    A refused call changes nothing."""
    executors = ClusterSecurity.load(cluster_files.directory / TASKEXECUTOR_DIR)

    async def scenario():
        server, counter, task = await serve(security)
        clients = {role: RpcService(files) for role, files in
                   (("appmaster", security), ("client", cluster_files),
                    ("taskexecutor", executors))}
        gateways = {role: client.connect(server.address, "counter", CounterGateway)
                    for role, client in clients.items()}
        assert await gateways["client"].ping(ACK) == ACK
        for role in ("client", "taskexecutor"):
            with pytest.raises(Forbidden, match=f"a caller of role {role} may not call "
                                                f"counter.add"):
                await gateways[role].add(Add("leader-2", 5))
        with pytest.raises(Forbidden, match="counter.ping"):
            await gateways["taskexecutor"].ping(ACK)
        assert counter.value == 0
        assert await gateways["appmaster"].add(Add("leader-2", 5)) == Total(5)
        await shutdown(server, counter, task, *clients.values())
    run(scenario)


def test_a_server_whose_certificate_names_another_host_is_refused(cluster_files, security,
                                                                  tmp_path):
    """The client checks the name: a certificate of the cluster for another host (as a
    process that took over a port on this one would present) does not do."""
    elsewhere = cluster_files.for_host("10.1.2.3", tmp_path / "elsewhere")

    async def scenario():
        server, counter, task = await serve(elsewhere)
        client = RpcService(security)
        gateway = client.connect(server.address, "counter", CounterGateway)
        with pytest.raises(Unreachable):
            await gateway.add(Add("leader-2", 5), timeout=5)
        assert counter.value == 0
        await shutdown(server, counter, task, client)
    run(scenario)


def test_a_process_certificate_names_the_host_dialed_not_a_nearby_one(cluster_files, tmp_path):
    """localhost and 127.0.0.1 are different names: a certificate for one is refused
    when the other is dialed."""
    named_localhost = cluster_files.for_host("localhost", tmp_path / "localhost")

    async def scenario():
        server, counter, task = await serve(named_localhost, host="127.0.0.1")
        client = RpcService(cluster_files)
        with pytest.raises(Unreachable):
            await client.connect(server.address, "counter", CounterGateway).ping(ACK, timeout=5)
        port = server.address.rsplit(":", 1)[1]
        assert await client.connect(f"localhost:{port}", "counter",
                                    CounterGateway).ping(ACK, timeout=5) == ACK
        await shutdown(server, counter, task, client)
    run(scenario)


def test_process_without_the_clusters_certificate_is_refused(security, tmp_path):
    stranger = ClusterSecurity.generate(tmp_path / "other-cluster")

    async def scenario():
        server, counter, task = await serve(security)
        client = RpcService(stranger)
        gateway = client.connect(server.address, "counter", CounterGateway)
        with pytest.raises(Unreachable):
            await gateway.add(Add("leader-2", 5), timeout=5)
        # Nor does a plaintext client get through.
        async with grpc.aio.insecure_channel(server.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await channel.unary_unary("/counter/add")(codec.encode(Add("leader-2", 1)), timeout=5)
        assert counter.value == 0
        await shutdown(server, counter, task, client)
    run(scenario)


def test_garbled_and_mistyped_messages_are_refused_and_change_nothing(security):
    async def scenario():
        server, counter, task = await serve(security)
        client = RpcService(security)
        channel = client.channel(server.address)
        add = channel.unary_unary("/counter/add")
        for junk in (b"\xc1\xff\x00garbage", codec.encode({"leader_id": "leader-2", "amount": "5"}),
                     codec.encode(Total(3))):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await add(junk, timeout=5)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed Add" in error.value.details()
        assert counter.value == 0
        await shutdown(server, counter, task, client)
    run(scenario)


def test_oversized_message_is_refused(security):
    async def scenario():
        server, counter, task = await serve(security, max_message_size=64 * 1024)
        client = RpcService(security)
        gateway = client.connect(server.address, "counter", CounterGateway)
        with pytest.raises(MessageTooLarge):
            await gateway.add(Add("leader-2", 1, note="x" * 200_000))
        assert counter.value == 0
        assert await gateway.add(Add("leader-2", 1)) == Total(1)
        await shutdown(server, counter, task, client)
    run(scenario)


def test_stale_fencing_token_is_dropped(security, caplog):
    async def scenario():
        server, counter, task = await serve(security)
        client = RpcService(security)
        gateway = client.connect(server.address, "counter", CounterGateway)
        with pytest.raises(StaleCall, match="stale leader id"):
            await gateway.add(Add("leader-1", 5))
        assert counter.value == 0
        await shutdown(server, counter, task, client)
    with caplog.at_level(logging.INFO, logger="flinkyarn.rpc.service"):
        run(scenario)
    # The refusal is logged once, as the caller's mistake: no traceback.
    [refusal] = [r for r in caplog.records if "stale leader id" in r.getMessage()]
    assert refusal.getMessage().startswith("refused counter.add: stale leader id")
    assert refusal.exc_info is None and refusal.levelno == logging.INFO


def test_unknown_endpoint_and_method(security):
    async def scenario():
        server, counter, task = await serve(security)
        client = RpcService(security)
        with pytest.raises(UnknownEndpoint, match="no endpoint 'nobody'"):
            await client.connect(server.address, "nobody", CounterGateway).ping(ACK)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await client.channel(server.address).unary_unary("/counter/drop_tables")(b"", timeout=5)
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
        await shutdown(server, counter, task, client)
    run(scenario)

