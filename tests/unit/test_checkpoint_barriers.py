"""Checkpoint barriers in the data plane: queued in order in pipelined subpartitions,
refused by blocking ones, and aligned by the InputGate (the seed's barrier handler):
nothing that follows a barrier on one channel reaches the task before the barrier came
on every channel.

Nothing here waits on the clock: each step waits for the state it needs, with a
deadline that only bounds a hang."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from taskexecutor.network import (END_OF_PARTITION, CheckpointAborted, CheckpointBarrier,
                                  InputGate, LocalInputChannel, ResultPartition,
                                  ResultPartitionID, ResultPartitionManager)
from tests.waiting import wait_for
from tests.unit.test_network_input_gate import Reader


def batch(value: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array([value], pa.int64())})


def barrier(n: int) -> CheckpointBarrier:
    return CheckpointBarrier(n, 1000 * n)


def value(event) -> object:
    """What a test compares: a batch's value, a barrier or an abort as such."""
    if isinstance(event, pa.RecordBatch):
        return event.column(0)[0].as_py()
    return event


@pytest.fixture
def manager() -> ResultPartitionManager:
    return ResultPartitionManager()


def partitions(manager, tmp_path, count: int) -> list[ResultPartition]:
    made = []
    for number in range(count):
        partition = ResultPartition(ResultPartitionID("job", "result", number), "pipelined", 1,
                                    tmp_path, 1 << 20)
        manager.register(partition)
        made.append(partition)
    return made


def gate_of(manager, count: int) -> InputGate:
    return InputGate([LocalInputChannel(manager, ResultPartitionID("job", "result", n), 0, 30)
                      for n in range(count)])


def test_a_pipelined_subpartition_keeps_barriers_in_order_and_counts_no_bytes_for_them(tmp_path):
    partition = ResultPartition(ResultPartitionID("job", "result", 0), "pipelined", 2,
                                tmp_path, 1 << 20)
    partition.emit(0, batch(1))
    partition.broadcast_event(barrier(1))
    partition.emit(1, batch(2))
    partition.finish()
    assert partition.buffered_bytes() == 2 * batch(1).nbytes
    assert [value(e) for e in partition.create_reader(0)] == [1, barrier(1)]
    reader = partition.create_reader(1)
    assert [value(reader.next_event()) for _ in range(3)] == [barrier(1), 2, END_OF_PARTITION]


def test_a_blocking_partition_refuses_barriers(tmp_path):
    partition = ResultPartition(ResultPartitionID("job", "result", 0), "blocking", 1,
                                tmp_path, 1)
    with pytest.raises(ValueError, match="blocking: checkpoint barriers travel through "
                                         "pipelined exchanges only"):
        partition.broadcast_event(barrier(1))


def test_a_channel_past_its_barrier_is_held_back_until_the_barrier_came_on_every_channel(
        manager, tmp_path):
    fast, slow = partitions(manager, tmp_path, 2)
    gate = gate_of(manager, 2)
    reader = Reader(gate)
    fast.emit(0, batch(10))
    first_barrier = time.monotonic()
    fast.broadcast_event(barrier(1))
    fast.emit(0, batch(11))  # after the barrier: checkpoint 2's
    slow.emit(0, batch(20))
    wait_for(lambda: sorted(value(b) for _, b in reader.events) == [10, 20], 30,
             "the batches before the barrier")
    # However long the slow channel takes, batch 11 waits behind the fast one's barrier.
    slow.emit(0, batch(21))
    wait_for(lambda: len(reader.events) == 3, 30, "the slow channel's second batch")
    assert [value(b) for _, b in reader.events][2] == 21
    wait_for(lambda: gate.aligning == 1, 30, "the gate aligning barrier 1")
    time.sleep(0.2)  # what the alignment statistic must show at least
    slow.broadcast_event(barrier(1))
    wait_for(lambda: len(reader.events) == 5, 30, "the aligned barrier and batch 11")
    assert 0.2 <= gate.last_alignment <= time.monotonic() - first_barrier
    assert [value(b) for _, b in reader.events][3:] == [barrier(1), 11]
    for partition in (fast, slow):
        partition.finish()
    assert len(reader.result()) == 5


def test_a_newer_barrier_abandons_the_one_being_aligned(manager, tmp_path):
    first, second = partitions(manager, tmp_path, 2)
    gate = gate_of(manager, 2)
    reader = Reader(gate)
    first.broadcast_event(barrier(1))
    first.emit(0, batch(1))
    wait_for(lambda: gate.aligning == 1, 30, "the gate to take barrier 1")
    second.broadcast_event(barrier(2))  # checkpoint 1 never came on this channel
    wait_for(lambda: len(reader.events) == 2, 30, "the abort and the held-back batch")
    (_, aborted), (_, held) = reader.events
    assert isinstance(aborted, CheckpointAborted) and aborted.checkpoint_id == 1
    assert "barrier 2 came on input channel 1 before barrier 1 came on all" in aborted.reason
    assert value(held) == 1
    first.broadcast_event(barrier(2))
    first.broadcast_event(barrier(1))  # late, and older than the newest: dropped
    for partition in (first, second):
        partition.finish()
    assert [value(e) for _, e in reader.result()[2:]] == [barrier(2)]


def test_a_channel_that_ended_counts_as_aligned(manager, tmp_path):
    ended, going = partitions(manager, tmp_path, 2)
    reader = Reader(gate_of(manager, 2))
    ended.finish()
    going.broadcast_event(barrier(1))
    going.emit(0, batch(5))
    going.finish()
    assert [value(e) for _, e in reader.result()] == [barrier(1), 5]


def test_a_barrier_on_the_only_channel_passes_at_once(manager, tmp_path):
    (only,) = partitions(manager, tmp_path, 1)
    for event in (batch(1), barrier(1), batch(2), barrier(2)):
        if isinstance(event, CheckpointBarrier):
            only.broadcast_event(event)
        else:
            only.emit(0, event)
    only.finish()
    assert [value(e) for _, e in Reader(gate_of(manager, 1)).result()] == [
        1, barrier(1), 2, barrier(2)]
