"""Data exchange over Arrow Flight between TaskExecutors: real servers with the cluster's
TLS on loopback, producers in this process or in another one. Tests wait for what the
consumer was answered (WatchedPool) or for the producer's state, never for time."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from flinkyarn.pipeline.operator import Watermark
from flinkyarn.rpc.security import TASKEXECUTOR_DIR, ClusterSecurity, partition_ticket
from taskexecutor.network import (CheckpointBarrier, DataClientPool, DataServer, InputGate,
                                  PartitionFailed, PartitionNotFound, PartitionReleased,
                                  RemoteInputChannel, ResultPartition, ResultPartitionID,
                                  ResultPartitionManager, make_partitioner)
from taskexecutor.network.wire import StreamMarker, SubpartitionRequest, partition_error
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
DATA_KEY = bytes(range(32))  # the job's, as its JobMaster would make it


def make_batch(i: int, rows: int = 500) -> pa.RecordBatch:
    """Batch i of a known sequence; the producer process has this very function."""
    values = range(i * rows, (i + 1) * rows)
    return pa.record_batch({"i": pa.array(values, pa.int64()),
                            "s": pa.array([f"row-{v}" for v in values])})


def expected(first: int, count: int) -> pa.Table:
    return pa.Table.from_batches([make_batch(i) for i in range(first, first + count)])


PRODUCER_LOOP = """
import json, sys
from pathlib import Path
import pyarrow as pa
from flinkyarn.rpc.security import ClusterSecurity
from taskexecutor.network import (DataServer, ResultPartition, ResultPartitionID,
                                  ResultPartitionManager)

manager = ResultPartitionManager()
security = ClusterSecurity.load(Path(sys.argv[1]))
server = DataServer(manager, security, "127.0.0.1")
server.serve()
print(json.dumps({"address": server.address}), flush=True)
partitions = {}
for line in sys.stdin:
    command = json.loads(line)
    op, result = command["op"], command.get("result")
    try:
        if op == "register":
            partitions[result] = ResultPartition(
                ResultPartitionID("job", result, 0), command["type"], command["subpartitions"],
                Path(sys.argv[2]), command.get("bound", 1 << 20), bytes.fromhex(sys.argv[3]))
            manager.register(partitions[result])
        elif op == "emit":
            for i in range(command["first"], command["first"] + command["count"]):
                partitions[result].emit(command["subpartition"], make_batch(i))
        elif op == "finish":
            partitions[result].finish()
        elif op == "fail":
            partitions[result].fail(command["message"])
        reply = {"ok": True}
    except Exception as error:
        reply = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(reply), flush=True)
server.shutdown()
"""


class ProducerProcess:
    """A separate Python process with a ResultPartitionManager and a DataServer, driven
    by JSON commands on its stdin. It has the TaskExecutors' certificate, as a
    TaskExecutor does, and its partitions the job's DATA_KEY."""

    def __init__(self, cluster_files: ClusterSecurity, spill_dir: Path) -> None:
        script = "import pyarrow as pa\n" + inspect.getsource(make_batch) + PRODUCER_LOOP
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, str(cluster_files.directory / TASKEXECUTOR_DIR),
             str(spill_dir), DATA_KEY.hex()],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.address = json.loads(self.process.stdout.readline())["address"]

    def send(self, op: str, **arguments) -> None:
        self.process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        assert reply.get("ok"), reply

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def cluster_files(tmp_path) -> ClusterSecurity:
    return ClusterSecurity.generate(tmp_path / "security")


@pytest.fixture
def security(cluster_files) -> ClusterSecurity:
    """The TaskExecutors' certificate, as every TaskExecutor has it."""
    return ClusterSecurity.load(cluster_files.directory / TASKEXECUTOR_DIR)


@pytest.fixture
def producer_process(cluster_files, tmp_path):
    producer = ProducerProcess(cluster_files, tmp_path / "producer-spill")
    yield producer
    producer.stop()


@pytest.fixture
def manager() -> ResultPartitionManager:
    return ResultPartitionManager()


@pytest.fixture
def server(manager, security):
    with DataServer(manager, security, "127.0.0.1") as server:
        yield server


@pytest.fixture
def pool(security):
    pool = DataClientPool(security)
    yield pool
    pool.close()


class WatchedPool(DataClientPool):
    """A DataClientPool that records how the data server answered each DoGet of the
    channels using it: (result id, "stream" or the data-plane exception's name), e.g.
    PartitionNotFound (not registered yet) or PartitionNotReady (no data yet: the server
    parked a reader for the consumer)."""

    def __init__(self, security: ClusterSecurity) -> None:
        super().__init__(security)
        self.answers: list[tuple[str, str]] = []

    def client(self, address: str):
        return _WatchedClient(super().client(address), self.answers)

    def count(self, result: str, answer: str) -> int:
        return self.answers.count((result, answer))


class _WatchedClient:
    def __init__(self, client: flight.FlightClient, answers: list[tuple[str, str]]) -> None:
        self._client = client
        self._answers = answers

    def do_get(self, ticket: flight.Ticket, *args, **kwargs):
        result = SubpartitionRequest.decode(ticket.ticket).result_id
        try:
            stream = self._client.do_get(ticket, *args, **kwargs)
        except pa.ArrowException as error:
            self._answers.append((result, type(partition_error(error, "", "")).__name__))
            raise
        self._answers.append((result, "stream"))
        return stream

    def __getattr__(self, name: str):
        return getattr(self._client, name)


@pytest.fixture
def watched_pool(security):
    pool = WatchedPool(security)
    yield pool
    pool.close()


def pid(result: str = "result") -> ResultPartitionID:
    return ResultPartitionID("job", result, 0)


def ticket(result: str = "result", subpartition: int = 0) -> bytes:
    """The JobMaster's ticket for reading `subpartition` of pid(result)."""
    return partition_ticket(DATA_KEY, "job", result, 0, subpartition)


def keyed_partition(partition_type: str, subpartitions: int, spill_dir: Path, bound: int,
              result: str = "result") -> ResultPartition:
    return ResultPartition(pid(result), partition_type, subpartitions, spill_dir, bound,
                           data_key=DATA_KEY)


def remote(pool, address: str, subpartition: int = 0, result: str = "result",
           timeout: float = 10.0, with_ticket: bytes | None = None,
           producer: str = "") -> RemoteInputChannel:
    return RemoteInputChannel(pool, lambda: address, pid(result), subpartition, timeout,
                              ticket=ticket(result, subpartition) if with_ticket is None
                              else with_ticket, producer=producer)


def read_table(channel: RemoteInputChannel) -> pa.Table:
    batches = list(channel.read())
    return pa.Table.from_batches(batches) if batches else pa.table({})


def test_a_consumer_reads_exactly_what_a_producer_in_another_process_emitted(
        producer_process, pool):
    producer_process.send("register", result="result", type="pipelined", subpartitions=2)
    producer_process.send("emit", result="result", subpartition=0, first=0, count=10)
    producer_process.send("emit", result="result", subpartition=1, first=10, count=5)
    producer_process.send("finish", result="result")
    gate = InputGate([remote(pool, producer_process.address, sub) for sub in (0, 1)])
    events = list(gate)
    for sub, (first, count) in enumerate([(0, 10), (10, 5)]):
        got = pa.Table.from_batches([batch for index, batch in events if index == sub])
        assert got.equals(expected(first, count))


def test_a_blocking_partition_in_another_process_can_be_read_twice(producer_process, pool):
    producer_process.send("register", result="kept", type="blocking", subpartitions=2)
    producer_process.send("emit", result="kept", subpartition=1, first=0, count=4)
    producer_process.send("finish", result="kept")
    for _ in range(2):
        assert read_table(remote(pool, producer_process.address, 1, "kept")).equals(expected(0, 4))
    assert read_table(remote(pool, producer_process.address, 0, "kept")).num_rows == 0


def test_a_consumer_that_asks_before_the_partition_exists_gets_it_once_it_appears(
        producer_process, watched_pool):
    gate = InputGate([remote(watched_pool, producer_process.address, timeout=60)])
    events: list = []
    reader = threading.Thread(target=lambda: events.extend(gate))
    reader.start()
    wait_for(lambda: watched_pool.count("result", "PartitionNotFound") >= 2, 60,
             "the consumer to ask, and ask again, for the missing partition")
    producer_process.send("register", result="result", type="pipelined", subpartitions=1)
    wait_for(lambda: watched_pool.count("result", "PartitionNotReady") >= 1, 60,
             "the consumer to be told that the registered partition has no data yet")
    producer_process.send("emit", result="result", subpartition=0, first=0, count=3)
    producer_process.send("finish", result="result")
    reader.join(60)
    assert not reader.is_alive()
    assert pa.Table.from_batches([batch for _, batch in events]).equals(expected(0, 3))


@pytest.mark.parametrize("partition_type", ["pipelined", "blocking"])
def test_hash_partitioned_rows_arrive_exactly(manager, server, pool, tmp_path, partition_type):
    """Hash routing emits slices of one reordered batch; each travels as just its rows."""
    rows = pa.record_batch({"key": [f"key-{i % 13}" for i in range(5000)], "v": list(range(5000))})
    routed = make_partitioner("hash", 3, ("key",)).route(rows)
    partition = keyed_partition(partition_type, 3, tmp_path, 1 << 20)
    manager.register(partition)
    for sub, part in routed:
        partition.emit(sub, part)
    partition.finish()
    for sub, part in routed:
        assert read_table(remote(pool, server.address, sub)).equals(pa.Table.from_batches([part]))


def test_barriers_and_watermarks_travel_in_order_also_before_the_first_batch(manager, server, pool, tmp_path):
    """A stream that starts with barriers (no schema known yet) goes on, with its first
    batch, in the stream of the client's next request; a barrier between batches is an
    empty batch with a marker. Two gates over it see the same order as the producer."""
    partition = keyed_partition("pipelined", 1, tmp_path, 1 << 20)
    manager.register(partition)
    sent = [Watermark(7), CheckpointBarrier(1, 1), CheckpointBarrier(2, 2), make_batch(0),
            CheckpointBarrier(3, 3), make_batch(1), Watermark(9), make_batch(2),
            CheckpointBarrier(4, 4)]
    for event in sent:
        if isinstance(event, pa.RecordBatch):
            partition.emit(0, event)
        else:
            partition.broadcast_event(event)
    partition.finish()
    got = list(remote(pool, server.address).read())
    assert [e.num_rows if isinstance(e, pa.RecordBatch) else e for e in got] == [
        e.num_rows if isinstance(e, pa.RecordBatch) else e for e in sent]
    assert pa.Table.from_batches([e for e in got if isinstance(e, pa.RecordBatch)]).equals(
        expected(0, 3))


def test_a_malformed_marker_fails_the_channel_naming_it():
    with pytest.raises(PartitionFailed, match="subpartition 0 of .*: a malformed marker"):
        StreamMarker.decode(b'{"barrier": "one"}', "subpartition 0 of result#0")
    with pytest.raises(PartitionFailed, match="one of a barrier, a watermark and 'more'"):
        StreamMarker.decode(b'{}', "subpartition 0 of result#0")


def test_a_failed_partition_surfaces_its_failure_message_at_the_consumer(producer_process, pool):
    producer_process.send("register", result="result", type="pipelined", subpartitions=1)
    producer_process.send("emit", result="result", subpartition=0, first=0, count=2)
    producer_process.send("fail", result="result", message="map (1/1) failed: ValueError: bad row 7")
    with pytest.raises(PartitionFailed, match=r"result#0 of job job failed: .*bad row 7"):
        list(InputGate([remote(pool, producer_process.address)]))


def test_a_failure_in_the_middle_of_a_stream_ends_it_with_the_message(manager, server, pool, tmp_path):
    partition = keyed_partition("pipelined", 1, tmp_path, 1 << 20)
    manager.register(partition)
    partition.emit(0, make_batch(0))
    batches = remote(pool, server.address).read()
    assert next(batches).equals(make_batch(0))
    partition.fail("reduce (1/1) failed: OSError: disk full")
    with pytest.raises(PartitionFailed, match="disk full"):
        next(batches)


def test_a_client_without_the_cluster_certificate_is_refused(manager, server, pool, security,
                                                           tmp_path):
    partition = keyed_partition("blocking", 1, tmp_path, 1)
    manager.register(partition)
    partition.emit(0, make_batch(0))
    partition.finish()
    stranger = ClusterSecurity.generate(tmp_path / "another-cluster")
    location = f"grpc+tls://{server.address}"
    intruders = {
        "another cluster's files": dict(tls_root_certs=stranger.ca, cert_chain=stranger.cert,
                                        private_key=stranger.key),
        "another cluster's certificate": dict(tls_root_certs=security.ca,
                                              cert_chain=stranger.cert, private_key=stranger.key),
        "no certificate": dict(tls_root_certs=security.ca),
    }
    ticket = flight.Ticket(b'{"job_id":"job","result_id":"result","partition_number":0,'
                           b'"subpartition":0}')
    for credentials in intruders.values():
        client = flight.FlightClient(location, **credentials)
        with pytest.raises(flight.FlightUnavailableError):
            client.do_get(ticket).read_all()
        client.close()
    stranger_pool = DataClientPool(stranger)
    with pytest.raises(PartitionFailed, match="unreachable"):
        list(remote(stranger_pool, server.address).read())
    stranger_pool.close()
    # With the cluster's files the same request is served.
    assert read_table(remote(pool, server.address)).equals(expected(0, 1))


def test_a_subpartition_is_served_only_with_the_job_masters_ticket_for_it(manager, server, pool,
                                                                          watched_pool, tmp_path):
    """All TaskExecutors share a certificate, which the code of any job's tasks can read:
    without the ticket the JobMaster gave the consumer, it reads nothing, not even a
    reader parked for the rightful consumer."""
    partition = keyed_partition("pipelined", 2, tmp_path, 1 << 20)
    manager.register(partition)
    rightful = remote(watched_pool, server.address, 0, timeout=60)
    polling = threading.Thread(target=lambda: rightful_rows.append(read_table(rightful)))
    rightful_rows: list[pa.Table] = []
    polling.start()
    wait_for(lambda: watched_pool.count("result", "PartitionNotReady") >= 1, 60,
             "a reader parked for the rightful consumer: there is no data yet")
    other_key = partition_ticket(b"another job's key".ljust(32, b"-"), "job", "result", 0, 0)
    forged = {"no ticket": b"", "another job's key": other_key,
              "subpartition 1's": ticket("result", 1), "garbage": b"\x00" * 32}
    for wrong in forged.values():
        with pytest.raises(PartitionFailed, match="ticket is not the JobMaster's"):
            list(remote(pool, server.address, 0, with_ticket=wrong).read())
    partition.emit(0, make_batch(0))
    partition.emit(1, make_batch(1))
    partition.finish()
    polling.join(60)
    assert [t.equals(expected(0, 1)) for t in rightful_rows] == [True]
    assert read_table(remote(pool, server.address, 1)).equals(expected(1, 1))
    # A partition made without the job's key is served to nobody.
    keyless = ResultPartition(pid("keyless"), "blocking", 1, tmp_path / "keyless", 1)
    manager.register(keyless)
    keyless.finish()
    with pytest.raises(PartitionFailed, match="ticket is not the JobMaster's"):
        list(remote(pool, server.address, 0, "keyless", with_ticket=b"").read())


def test_a_server_whose_certificate_names_another_host_is_refused(manager, pool, cluster_files,
                                                                  tmp_path):
    """Consumers check the name: a data server of the cluster whose certificate does not
    name the TaskExecutors (TASKEXECUTOR_NAME; here one of the AppMaster's kind, naming
    another host) is unreachable."""
    partition = keyed_partition("blocking", 1, tmp_path, 1)
    manager.register(partition)
    partition.emit(0, make_batch(0))
    partition.finish()
    elsewhere = cluster_files.for_host("10.1.2.3", tmp_path / "elsewhere")
    with DataServer(manager, elsewhere, "127.0.0.1") as server:
        with pytest.raises(PartitionFailed, match="unreachable"):
            list(remote(pool, server.address).read())


def test_backpressure_across_flight_keeps_the_producers_buffer_bounded(manager, server, pool, tmp_path):
    bound = 256 * 1024
    big = pa.record_batch({"x": pa.array(range(8192), pa.int64())})  # 64 KiB
    partition = keyed_partition("pipelined", 1, tmp_path, bound)
    manager.register(partition)
    emitted, max_buffered, last_seen = [0], [0], [-1]

    def produce():
        for _ in range(300):
            partition.emit(0, big)
            emitted[0] += 1
        partition.finish()

    def held_back() -> bool:
        """The producer ran ahead as far as it can: its subpartition holds more than its
        bound, so its next emit waits, and it emitted nothing since the last look, so
        the server takes nothing either: the stream in between is full. Or it is done."""
        buffered = partition.buffered_bytes(0)
        max_buffered[0] = max(max_buffered[0], buffered)
        moved, last_seen[0] = emitted[0] != last_seen[0], emitted[0]
        return (buffered > bound and not moved) or emitted[0] == 300

    threading.Thread(target=produce, daemon=True).start()
    consumed, ahead = 0, []
    for _ in remote(pool, server.address).read():
        consumed += 1
        if consumed <= 60:  # a slow consumer: it reads on once the producer is held back
            wait_for(held_back, 60, "the producer held back by the consumer", poll=0.005)
        ahead.append(emitted[0] - consumed)
    assert consumed == emitted[0] == 300
    assert max_buffered[0] <= bound + big.nbytes
    # The slow consumer held the producer back: it ran ahead by no more than its bound,
    # the stream's 1 MiB receive window and a few batches in transit (20 + a few
    # batches), although it could have emitted everything at once.
    assert max(ahead[:60]) < 60


def test_a_partition_that_never_appears_fails_after_the_timeout(server, pool):
    started = time.monotonic()
    with pytest.raises(PartitionNotFound, match=rf"result#0 of job job.*{server.address}.*1 s"):
        list(remote(pool, server.address, timeout=1.0).read())
    assert time.monotonic() - started >= 1.0  # it asked until its timeout


def test_an_unreachable_task_executor_fails_the_channel_at_once_naming_it(watched_pool):
    """The error names the producer's TaskExecutor, not only its address: a job whose
    failover began here tells which TaskExecutor was lost."""
    with pytest.raises(PartitionFailed, match=r"result#0 of job job.*TaskExecutor "
                       r"taskexecutor-7 at 127.0.0.1:1 is unreachable"):
        list(remote(watched_pool, "127.0.0.1:1", producer="taskexecutor-7").read())
    # At once: after its one request, not after asking again until its timeout.
    assert watched_pool.answers == [("result", "PartitionFailed")]


def test_a_malformed_ticket_gets_a_clear_error(server, pool):
    with pytest.raises(flight.FlightServerError, match="malformed data-plane ticket"):
        pool.client(server.address).do_get(flight.Ticket(b"not json")).read_all()


def test_closing_a_gate_cancels_remote_reads_and_frees_the_producer(manager, security,
                                                                   watched_pool, tmp_path):
    """Nothing but the close ends the reads and frees the producers: no partition ends,
    and the server keeps a parked reader for an hour."""
    waiting = keyed_partition("pipelined", 1, tmp_path, 1024, "waiting")
    streaming = keyed_partition("pipelined", 1, tmp_path, 1024, "streaming")
    for partition in (waiting, streaming):
        manager.register(partition)
    streaming.emit(0, make_batch(0))
    with DataServer(manager, security, "127.0.0.1", park_timeout=3600) as server:
        gate = InputGate([remote(watched_pool, server.address, result=r)
                          for r in ("waiting", "streaming")])
        read, outcome = [], []

        def consume():
            try:
                for event in gate:
                    read.append(event)
            except PartitionReleased as error:
                outcome.append(error)
        consumer = threading.Thread(target=consume)
        consumer.start()
        wait_for(lambda: watched_pool.count("waiting", "PartitionNotReady") >= 1 and read, 60,
                 "one channel polling an empty partition, one streaming")
        gate.close()
        consumer.join(60)
        assert outcome, "the consumer's iteration did not end"
        assert gate.join(60), "a channel's thread did not stop"
        # The server let go of both subpartitions: emitting no longer waits for anyone.
        for partition in (waiting, streaming):
            for i in range(10):
                emitter = threading.Thread(target=partition.emit, args=(0, make_batch(i)),
                                           daemon=True)
                emitter.start()
                emitter.join(60)
                assert not emitter.is_alive(), f"{partition} still holds its producer back"
            assert partition.buffered_bytes() == 0


def park_a_reader(pool, server: DataServer, result: str) -> None:
    """One poll of a consumer for subpartition 0 of pid(result), which has no data: the
    server answers so and keeps a reader for the consumer's next poll."""
    request = SubpartitionRequest.of(pid(result), 0, ticket(result), wait=0.1)
    with pytest.raises(flight.FlightServerError, match="has no data yet"):
        pool.client(server.address).do_get(flight.Ticket(request.encode()))


def test_a_consumer_that_stops_polling_lets_go_of_its_subpartition(manager, security, pool,
                                                                  tmp_path):
    # While the server keeps the reader (its park timeout far off), the reader holds the
    # data for its consumer, as a reading consumer would: the producer's next emit waits.
    held = keyed_partition("pipelined", 1, tmp_path, 0, "held")
    manager.register(held)
    with DataServer(manager, security, "127.0.0.1", park_timeout=3600) as server:
        park_a_reader(pool, server, "held")
        held.emit(0, make_batch(0))
        assert held.buffered_bytes() == make_batch(0).nbytes  # more than its bound of 0
    # Once the consumer stops polling, the server gives up on it (park_timeout) and
    # closes the reader: the data goes and the producer is free.
    partition = keyed_partition("pipelined", 1, tmp_path, 0)
    manager.register(partition)
    with DataServer(manager, security, "127.0.0.1", park_timeout=0.3) as server:
        park_a_reader(pool, server, "result")
        partition.emit(0, make_batch(0))
        blocked = threading.Thread(target=partition.emit, args=(0, make_batch(1)), daemon=True)
        blocked.start()
        blocked.join(60)
        assert not blocked.is_alive() and partition.buffered_bytes() == 0


def test_shutting_the_server_down_ends_its_streams(manager, security, pool, tmp_path):
    partition = keyed_partition("pipelined", 1, tmp_path, 1 << 20)
    manager.register(partition)
    partition.emit(0, make_batch(0))
    server = DataServer(manager, security, "127.0.0.1")
    server.serve()
    batches = remote(pool, server.address).read()
    next(batches)
    server.shutdown()
    with pytest.raises((PartitionReleased, PartitionFailed)):
        next(batches)
    # It closed the stream's reader: what the producer emits now is dropped.
    partition.emit(0, make_batch(1))
    assert partition.buffered_bytes() == 0


def test_one_client_per_task_executor_is_shared(pool, server):
    assert pool.client(server.address) is pool.client(server.address)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.client(server.address)
