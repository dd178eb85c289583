"""The InputGate over local channels: all channels at once, bounded, cancellable."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from taskexecutor.network import (InputGate, LocalInputChannel, PartitionFailed,
                                  PartitionNotFound, PartitionReleased, ResultPartition,
                                  ResultPartitionID, ResultPartitionManager)

ROWS = 1000
BATCH_BYTES = ROWS * 8


def ints(i: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())})


def pid(number: int = 0) -> ResultPartitionID:
    return ResultPartitionID("job", "result", number)


@pytest.fixture
def manager():
    return ResultPartitionManager()


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


def channels(manager, partition_id, subpartitions, timeout=5.0):
    return [LocalInputChannel(manager, partition_id, sub, timeout) for sub in subpartitions]


def read_all(gate: InputGate, timeout: float = 20.0) -> list[tuple[int, pa.RecordBatch]]:
    """Iterates the gate in a thread, so that a deadlock fails the test instead of hanging it."""
    result: list = []
    thread = threading.Thread(target=lambda: result.extend(gate), daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        gate.close()
        raise AssertionError("the gate did not finish: deadlock")
    return result


def test_sequential_reading_would_deadlock(manager, tmp_path):
    """The premise: one producer feeds two subpartitions of one consumer; reading the
    first to its end never ends, because the producer waits on the unread second."""
    partition = ResultPartition(pid(), "pipelined", 2, tmp_path, 4 * BATCH_BYTES)
    producer = produce(partition, 50)
    first = partition.create_reader(0)
    def read_first():
        with pytest.raises(PartitionReleased):
            list(first)
    reader = threading.Thread(target=read_first, daemon=True)
    reader.start()
    reader.join(0.5)
    assert reader.is_alive() and producer.is_alive()
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
    threading.Timer(0.3, lambda: produce(blocking, 5)).start()  # readable once finished
    events = read_all(gate)
    assert [sum(1 for i, _ in events if i == n) for n in (0, 1, 2)] == [20, 20, 5]


def test_a_channel_waits_for_its_partition_to_be_registered(manager, tmp_path):
    partition = ResultPartition(pid(), "pipelined", 1, tmp_path, BATCH_BYTES)
    gate = InputGate(channels(manager, pid(), [0]))

    def later():
        manager.register(partition)
        produce(partition, 3)
    threading.Timer(0.3, later).start()
    assert len(read_all(gate)) == 3


def test_a_failed_producer_fails_the_iteration_naming_the_partition(manager, tmp_path):
    healthy = ResultPartition(pid(0), "pipelined", 1, tmp_path, BATCH_BYTES)
    failing = ResultPartition(pid(1), "pipelined", 1, tmp_path, BATCH_BYTES)
    manager.register(healthy)
    manager.register(failing)
    healthy.emit(0, ints(0))  # and never finishes
    failing.emit(0, ints(0))
    gate = InputGate([LocalInputChannel(manager, pid(n), 0, 5) for n in (0, 1)])
    iterator = iter(gate)
    threading.Timer(0.2, failing.fail, ("map (2/2) failed: ValueError: bad row",)).start()
    with pytest.raises(PartitionFailed, match=r"result#1 of job job failed: .*bad row"):
        for _ in iterator:
            pass
    assert gate.join(2)  # the other channel's thread stopped as well


def test_a_partition_never_registered_fails_after_the_timeout(manager):
    gate = InputGate(channels(manager, pid(7), [0], timeout=0.3))
    started = time.monotonic()
    with pytest.raises(PartitionNotFound, match="subpartition 0 of result partition result#7.*0.3 s"):
        list(gate)
    assert time.monotonic() - started < 3


def test_close_stops_the_reader_threads_promptly(manager, tmp_path):
    partition = ResultPartition(pid(), "pipelined", 2, tmp_path, BATCH_BYTES)
    manager.register(partition)
    gate = InputGate(channels(manager, pid(), [0, 1]) + channels(manager, pid(9), [0]))
    outcome = []

    def consume():
        try:
            list(gate)
        except PartitionReleased as error:
            outcome.append(error)
    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.2)  # one channel waits for data, one for registration
    started = time.monotonic()
    gate.close()
    consumer.join(2)
    assert gate.join(2) and time.monotonic() - started < 1
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
    time.sleep(0.5)
    # 2 in the gate's queue, 1 held by the reader thread, 3 in the subpartition, 1 taken.
    assert len(emitted) <= 2 + 1 + 3 + 1 + 1
    gate.close()
    partition.release()
    producer.join(2)
