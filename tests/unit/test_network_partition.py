"""ResultPartitions and their manager: backpressure, spilling, end of partition,
failure and release."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from taskexecutor.network import (END_OF_PARTITION, PartitionFailed, PartitionNotFound,
                                  PartitionNotReady, PartitionReleased, ResultPartition,
                                  ResultPartitionID, ResultPartitionManager)
from tests.waiting import wait_for

ROWS = 1000
BATCH_BYTES = ROWS * 8


def ints(i: int, rows: int = ROWS) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})


def pid(result: str = "result", number: int = 0, job: str = "job") -> ResultPartitionID:
    return ResultPartitionID(job, result, number)


class Producer(threading.Thread):
    """Emits `count` batches into subpartition 0, then finishes; records what happened."""

    def __init__(self, partition: ResultPartition, count: int) -> None:
        super().__init__(daemon=True)
        self.partition, self.count = partition, count
        self.emitted = 0
        self.max_buffered = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(self.count):
                self.partition.emit(0, ints(i))
                self.emitted += 1
                self.max_buffered = max(self.max_buffered, self.partition.buffered_bytes(0))
            self.partition.finish()
        except BaseException as error:
            self.error = error

    def stalled(self, quiet: float = 0.3) -> bool:
        before = self.emitted
        time.sleep(quiet)
        return self.emitted == before and self.is_alive()


@pytest.fixture
def pipelined(tmp_path):
    def make(bound: int = 10 * BATCH_BYTES, subpartitions: int = 1) -> ResultPartition:
        return ResultPartition(pid(), "pipelined", subpartitions, tmp_path, bound)
    return make


@pytest.fixture
def blocking(tmp_path):
    def make(subpartitions: int = 1) -> ResultPartition:
        return ResultPartition(pid(), "blocking", subpartitions, tmp_path / "spill", 1)
    return make


# ------------------------------------------------------------------- pipelined


def test_a_pipelined_reader_gets_the_batches_then_end_of_partition(pipelined):
    partition = pipelined()
    reader = partition.create_reader(0)
    assert reader.next_event(timeout=0.05) is None  # nothing yet: the reader waits
    for i in range(3):
        partition.emit(0, ints(i))
    partition.finish()
    assert [b.equals(ints(i)) for i, b in enumerate(reader)] == [True] * 3
    assert reader.next_event() is END_OF_PARTITION
    assert partition.is_finished and partition.buffered_bytes() == 0


def test_a_producer_nobody_reads_stops_at_the_bound_and_a_slow_consumer_lets_it_go_on(pipelined):
    bound = 10 * BATCH_BYTES
    partition = pipelined(bound)
    producer = Producer(partition, 100)
    producer.start()
    wait_for(lambda: producer.emitted >= 10, what="the first batches")
    assert wait_for(producer.stalled, what="the producer to block")
    assert bound < partition.buffered_bytes(0) <= bound + BATCH_BYTES
    assert producer.emitted == 11

    received, max_buffered = [], 0
    for batch in partition.create_reader(0):
        received.append(batch)
        max_buffered = max(max_buffered, partition.buffered_bytes(0))
        time.sleep(0.002)
    producer.join(10)
    assert producer.error is None and producer.emitted == 100
    assert max(max_buffered, producer.max_buffered) <= bound + BATCH_BYTES
    assert pa.Table.from_batches(received).equals(
        pa.Table.from_batches([ints(i) for i in range(100)]))


def test_release_wakes_a_blocked_producer_with_partition_released(pipelined):
    partition = pipelined(bound=0)
    producer = Producer(partition, 10)
    producer.start()
    assert wait_for(producer.stalled, what="the producer to block")
    partition.release()
    producer.join(5)
    assert isinstance(producer.error, PartitionReleased)
    assert "result partition result#0 of job job" in str(producer.error)
    assert partition.buffered_bytes() == 0


def test_release_wakes_a_waiting_reader(pipelined):
    partition = pipelined()
    reader = partition.create_reader(0)
    threading.Timer(0.1, partition.release).start()
    with pytest.raises(PartitionReleased, match="released"):
        next(reader)


def test_a_consumer_closing_its_reader_drops_the_data_and_frees_the_producer(pipelined):
    partition = pipelined(bound=0)
    reader = partition.create_reader(0)
    producer = Producer(partition, 50)
    producer.start()
    assert wait_for(producer.stalled, what="the producer to block")
    reader.close()
    producer.join(5)
    assert producer.error is None and producer.emitted == 50
    assert partition.buffered_bytes() == 0
    with pytest.raises(PartitionReleased, match="closed"):
        next(reader)


def test_a_pipelined_subpartition_is_read_once(pipelined):
    partition = pipelined(subpartitions=2)
    partition.create_reader(0)
    with pytest.raises(PartitionReleased, match="read only once"):
        partition.create_reader(0)
    partition.create_reader(1)  # the others are unaffected


def test_fail_reaches_readers_instead_of_more_data(pipelined):
    partition = pipelined(subpartitions=2)
    waiting = partition.create_reader(1)
    partition.emit(0, ints(0))
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(pytest.raises(
        PartitionFailed, next, waiting)))
    thread.start()
    time.sleep(0.05)
    partition.fail("map (1/2) failed: ZeroDivisionError: division by zero")
    thread.join(5)
    assert "ZeroDivisionError" in str(outcome[0].value)
    with pytest.raises(PartitionFailed, match="subpartition 0 of result partition .*division"):
        next(partition.create_reader(0))  # the queued batch is not delivered
    with pytest.raises(PartitionReleased, match="failed"):
        partition.emit(0, ints(1))


def test_batches_of_a_subpartition_must_share_a_schema(pipelined):
    partition = pipelined()
    partition.emit(0, ints(0))
    with pytest.raises(ValueError, match="share one schema"):
        partition.emit(0, pa.record_batch({"y": ["a"]}))
    partition.finish()
    with pytest.raises(RuntimeError, match="finished"):
        partition.emit(0, ints(1))


# -------------------------------------------------------------------- blocking


def test_a_blocking_partition_is_written_to_disk_as_it_comes(blocking, tmp_path):
    partition = blocking(subpartitions=2)
    allocated_before = pa.total_allocated_bytes()
    for i in range(100):
        partition.emit(i % 2, ints(i, rows=10_000))  # 80 kB each, dropped at once
    files = sorted((tmp_path / "spill").rglob("*.arrow"))
    assert [f.name for f in files] == ["subpartition-0.arrow", "subpartition-1.arrow"]
    assert sum(f.stat().st_size for f in files) >= 100 * 80_000
    assert partition.buffered_bytes() == 0
    assert pa.total_allocated_bytes() - allocated_before < 2 * 80_000  # not held in memory


def test_a_blocking_partition_is_readable_only_after_finish_and_then_any_number_of_times(blocking):
    partition = blocking(subpartitions=2)
    for i in range(6):
        partition.emit(i % 2, ints(i))
    with pytest.raises(PartitionNotReady, match="subpartition 0 of result partition result#0"):
        partition.create_reader(0)
    assert not partition.wait_readable(0, 0.01)
    partition.finish()
    assert partition.wait_readable(0, 0)
    first = pa.Table.from_batches(list(partition.create_reader(0)))
    second = pa.Table.from_batches(list(partition.create_reader(0)))
    assert first.equals(second)
    assert first.equals(pa.Table.from_batches([ints(0), ints(2), ints(4)]))
    assert [b.column("x")[0].as_py() for b in partition.create_reader(1)] == [1000, 3000, 5000]


def test_an_empty_blocking_subpartition_reads_as_empty(blocking):
    partition = blocking(subpartitions=2)
    partition.emit(0, ints(0))
    partition.finish()
    assert list(partition.create_reader(1)) == []


def test_release_removes_a_blocking_partitions_files_and_stops_its_readers(blocking, tmp_path):
    partition = blocking()
    partition.emit(0, ints(0))
    partition.emit(0, ints(1))
    partition.finish()
    reader = partition.create_reader(0)
    next(reader)
    partition.release()
    assert list((tmp_path / "spill").rglob("*.arrow")) == []
    with pytest.raises(PartitionReleased):
        next(reader)
    with pytest.raises(PartitionReleased):
        partition.create_reader(0)
    with pytest.raises(PartitionReleased):
        partition.emit(0, ints(2))


def test_a_failed_blocking_partition_gives_its_failure_to_readers(blocking):
    partition = blocking()
    partition.emit(0, ints(0))
    partition.fail("boom")
    with pytest.raises(PartitionFailed, match="boom"):
        partition.create_reader(0)


# --------------------------------------------------------------------- manager


def test_the_manager_waits_for_a_partition_to_be_registered(pipelined):
    manager = ResultPartitionManager()
    partition = pipelined()
    threading.Timer(0.1, manager.register, (partition,)).start()
    assert manager.get(pid(), timeout=5) is partition


def test_the_manager_names_a_partition_it_does_not_have():
    with pytest.raises(PartitionNotFound, match="result partition result#3 of job job"):
        ResultPartitionManager().get(pid(number=3), timeout=0.05)


def test_releasing_a_job_releases_its_partitions_and_removes_their_files(tmp_path):
    manager = ResultPartitionManager()
    mine = [ResultPartition(pid(number=i), "blocking", 1, tmp_path, 1) for i in range(2)]
    other = ResultPartition(pid(job="other"), "blocking", 1, tmp_path, 1)
    for partition in (*mine, other):
        manager.register(partition)
        partition.emit(0, ints(0))
        partition.finish()
    assert manager.partitions_of("job") == [pid(number=0), pid(number=1)]
    assert sorted(manager.release_job("job")) == [pid(number=0), pid(number=1)]
    assert all(p.is_released for p in mine) and not other.is_released
    assert [f.parent for f in tmp_path.rglob("*.arrow")] == [other.spill_directory]
    assert manager.partitions_of("job") == [] and manager.partitions_of("other") == [pid(job="other")]
    assert manager.release(pid(job="other")) and not manager.release(pid(job="other"))


def test_a_new_attempt_replaces_and_releases_the_earlier_partition(pipelined):
    manager = ResultPartitionManager()
    first, second = pipelined(), pipelined()
    manager.register(first)
    manager.register(second)
    assert first.is_released and manager.get(pid(), 0) is second
