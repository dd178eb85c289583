"""The InputGate over local channels: all channels at once, bounded, cancellable.

Nothing here waits on the clock: each step waits for the state it needs (a batch read,
a partition asked for, a queue full), with a deadline that only bounds a hang."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from taskexecutor.network import (InputGate, LocalInputChannel, PartitionFailed,
                                  PartitionNotFound, PartitionReleased, ResultPartition,
                                  ResultPartitionID, ResultPartitionManager)
from tests.waiting import wait_for

ROWS = 1000
BATCH_BYTES = ROWS * 8


def ints(i: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())})


def pid(number: int = 0) -> ResultPartitionID:
    return ResultPartitionID("job", "result", number)


class WatchedManager(ResultPartitionManager):
    """Records which partitions were asked for, so that a test can wait until a channel
    is waiting for one."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[ResultPartitionID] = set()

    def get(self, partition_id: ResultPartitionID, timeout: float) -> ResultPartition:
        self.asked.add(partition_id)
        return super().get(partition_id, timeout)


@pytest.fixture
def manager():
    return WatchedManager()


def produce(partition: ResultPartition, count: int, subpartitions=None) -> threading.Thread:
    """A producer thread emitting batch i to every subpartition (broadcast), then finishing."""
    def run():
        try:
            for i in range(count):
                for sub in subpartitions or range(partition.num_subpartitions):
                    partition.emit(sub, ints(i))
            partition.finish()
        except PartitionReleased:
            pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def channels(manager, partition_id, subpartitions, timeout=60.0):
    return [LocalInputChannel(manager, partition_id, sub, timeout) for sub in subpartitions]


class Reader(threading.Thread):
    """Iterates the gate in a thread, so that a deadlock fails the test instead of hanging
    it. `events` fills as they come; `result()` waits for the end and returns them, or
    raises what the iteration raised."""

    def __init__(self, gate: InputGate) -> None:
        super().__init__(daemon=True)
        self.gate = gate
        self.events: list[tuple[int, pa.RecordBatch]] = []
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            for event in self.gate:
                self.events.append(event)
        except BaseException as error:
            self.error = error

    def result(self, timeout: float = 60.0) -> list[tuple[int, pa.RecordBatch]]:
        self.join(timeout)
        if self.is_alive():
            self.gate.close()
            raise AssertionError(f"the gate did not finish within {timeout:g} s: deadlock")
        if self.error is not None:
            raise self.error
        return self.events


def read_all(gate: InputGate) -> list[tuple[int, pa.RecordBatch]]:
    return Reader(gate).result()


def test_sequential_reading_would_deadlock(manager, tmp_path):
    """The premise: one producer feeds two subpartitions of one consumer; reading the
    first to its end never ends, because the producer waits on the unread second."""
    partition = ResultPartition(pid(), "pipelined", 2, tmp_path, 4 * BATCH_BYTES)
    producer = produce(partition, 50)
    first = partition.create_reader(0)
    read: list[pa.RecordBatch] = []

    def read_first():
        with pytest.raises(PartitionReleased):
            for batch in first:
                read.append(batch)
    reader = threading.Thread(target=read_first, daemon=True)
    reader.start()
    # Subpartition 1 takes batches until it holds more than its bound: 5. The producer
    # waits to add the 6th there, after giving it to subpartition 0, whose reader then
    # has everything it will ever get. Neither can go on.
    fits = 4 + 1
    wait_for(lambda: len(read) == fits + 1 and partition.buffered_bytes(1) == fits * BATCH_BYTES,
             60, "the producer stuck on the unread subpartition 1")
    assert reader.is_alive() and producer.is_alive() and not partition.is_finished
    partition.release()


def test_the_gate_reads_all_channels_at_once_so_that_it_does_not_deadlock(manager, tmp_path):
    partition = ResultPartition(pid(), "pipelined", 2, tmp_path, 4 * BATCH_BYTES)
    manager.register(partition)
    produce(partition, 50)
    events = read_all(InputGate(channels(manager, pid(), [0, 1])))
    assert len(events) == 100
    for index in (0, 1):
        got = [batch for i, batch in events if i == index]
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches([ints(i) for i in range(50)]))
    # Interleaved: channel 1 delivered before channel 0 was done.
    order = [i for i, _ in events]
    assert order.index(1) < len(order) - order[::-1].index(0) - 1


def test_the_gate_reads_several_producers_and_a_finished_blocking_partition(manager, tmp_path):
    pipelined = [ResultPartition(pid(n), "pipelined", 1, tmp_path, BATCH_BYTES) for n in (0, 1)]
    blocking = ResultPartition(pid(2), "blocking", 1, tmp_path, 1)
    for partition in (*pipelined, blocking):
        manager.register(partition)
    for partition in pipelined:
        produce(partition, 20)
    gate = InputGate([LocalInputChannel(manager, pid(n), 0, 5) for n in (0, 1, 2)])
    reader = Reader(gate)
    wait_for(lambda: len(reader.events) == 40, 60, "the pipelined partitions' 40 batches")
    assert all(index != 2 for index, _ in reader.events)  # readable once finished
    produce(blocking, 5)
    events = reader.result()
    assert [sum(1 for i, _ in events if i == n) for n in (0, 1, 2)] == [20, 20, 5]


def test_a_channel_waits_for_its_partition_to_be_registered(manager, tmp_path):
    partition = ResultPartition(pid(), "pipelined", 1, tmp_path, BATCH_BYTES)
    reader = Reader(InputGate(channels(manager, pid(), [0])))
    wait_for(lambda: pid() in manager.asked, 60, "the channel to ask for the partition")
    manager.register(partition)
    produce(partition, 3)
    assert len(reader.result()) == 3


def test_a_failed_producer_fails_the_iteration_naming_the_partition(manager, tmp_path):
    healthy = ResultPartition(pid(0), "pipelined", 1, tmp_path, BATCH_BYTES)
    failing = ResultPartition(pid(1), "pipelined", 1, tmp_path, BATCH_BYTES)
    manager.register(healthy)
    manager.register(failing)
    healthy.emit(0, ints(0))  # and never finishes
    failing.emit(0, ints(0))
    gate = InputGate([LocalInputChannel(manager, pid(n), 0, 5) for n in (0, 1)])
    iterator = iter(gate)
    assert {next(iterator)[0], next(iterator)[0]} == {0, 1}  # both channels are reading
    failing.fail("map (2/2) failed: ValueError: bad row")
    with pytest.raises(PartitionFailed, match=r"result#1 of job job failed: .*bad row"):
        for _ in iterator:
            pass
    assert gate.join(60)  # the other channel's thread stopped as well


def test_a_partition_never_registered_fails_after_the_timeout(manager):
    gate = InputGate(channels(manager, pid(7), [0], timeout=0.3))
    started = time.monotonic()
    with pytest.raises(PartitionNotFound, match="subpartition 0 of result partition result#7.*0.3 s"):
        read_all(gate)
    assert time.monotonic() - started >= 0.3  # it waited its timeout out


def test_close_stops_the_reader_threads_promptly(manager, tmp_path):
    """Promptly: nothing else would end them, no data comes and the channels' timeout
    for registration is an hour."""
    partition = ResultPartition(pid(), "pipelined", 2, tmp_path, BATCH_BYTES)
    manager.register(partition)
    gate = InputGate(channels(manager, pid(), [0, 1], timeout=3600)
                     + channels(manager, pid(9), [0], timeout=3600))
    outcome = []

    def consume():
        try:
            list(gate)
        except PartitionReleased as error:
            outcome.append(error)
    consumer = threading.Thread(target=consume)
    consumer.start()
    # Two channels wait for data (a subpartition with a reader is readable at once, but
    # holds nothing), one for registration.
    wait_for(lambda: partition.wait_readable(0, 0) and partition.wait_readable(1, 0)
             and pid(9) in manager.asked, 60, "every channel waiting")
    gate.close()
    consumer.join(60)
    assert gate.join(60), "a reader thread did not stop"
    assert "closed" in str(outcome[0])
    # The consumer went away: the producer is not held back by its subpartitions any more.
    for i in range(20):
        partition.emit(0, ints(i))
    assert partition.buffered_bytes() == 0


def test_a_consumer_that_does_not_read_holds_its_producer_back(manager, tmp_path):
    """The gate's queue is bounded too: memory stays bounded end to end."""
    partition = ResultPartition(pid(), "pipelined", 1, tmp_path, 2 * BATCH_BYTES)
    manager.register(partition)
    emitted = []

    def run():
        try:
            for i in range(100):
                partition.emit(0, ints(i))
                emitted.append(i)
        except PartitionReleased:  # at the end of the test
            pass
    producer = threading.Thread(target=run, daemon=True)
    producer.start()
    gate = InputGate(channels(manager, pid(), [0]), capacity=2)
    iterator = iter(gate)
    next(iterator)  # started; now the task is "busy"
    # 2 in the gate's queue, 1 held by the reader thread, 3 in the subpartition (more than
    # its bound: the next emit waits), 1 taken.
    wait_for(lambda: len(emitted) >= 2 + 1 + 3 + 1
             and partition.buffered_bytes(0) > 2 * BATCH_BYTES, 60, "the pipeline full")
    assert len(emitted) <= 2 + 1 + 3 + 1 + 1
    gate.close()
    partition.release()
    producer.join(2)
