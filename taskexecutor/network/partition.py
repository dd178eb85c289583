"""ResultPartitions: what one producer subtask writes for one consumer vertex, one
subpartition per consumer subtask; and the per-TaskExecutor registry of them.

Threading: a partition's producer task calls `emit`, `finish` and `fail` from its own
thread; consumers (local input channels, the data server's gRPC threads) call
`create_reader` / `wait_readable` and read from theirs; `release` may come from any
thread (cancellation, the TaskExecutor releasing a job's partitions) and wakes every
producer and reader waiting on the partition.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from flinkyarn.rpc.security import ticket_admits
from taskexecutor.network.errors import PartitionNotFound
from taskexecutor.network.subpartition import (BlockingSubpartition, PipelinedSubpartition,
                                               StreamEvent, SubpartitionReader)

log = logging.getLogger(__name__)

PARTITION_TYPES = ("pipelined", "blocking")


@dataclass(frozen=True, slots=True, order=True)
class ResultPartitionID:
    """Partition `partition_number` (the producer's subtask index) of intermediate
    result `result_id` of job `job_id`."""

    job_id: str
    result_id: str
    partition_number: int

    def __str__(self) -> str:
        return f"result partition {self.result_id}#{self.partition_number} of job {self.job_id}"


class ResultPartition:
    """One producer subtask's output to one consumer vertex.

    pipelined: each subpartition is a queue bounded to `max_buffered_bytes`; `emit`
      blocks while it holds more (backpressure); read once, while being written.
    blocking: each subpartition is an Arrow IPC stream file in a folder of its own under
      `spill_dir`, written as batches come; readable after `finish`, any number of times,
      until `release` removes the folder.

    End of partition, failure and release are explicit: readers see end of partition
    after the data once `finish` was called, PartitionFailed (instead of more data)
    after `fail`, PartitionReleased after `release`.
    """

    def __init__(self, partition_id: ResultPartitionID, partition_type: str,
                 num_subpartitions: int, spill_dir: Path, max_buffered_bytes: int,
                 data_key: bytes = b"") -> None:
        """`data_key`: the job's (security.partition_ticket); the data server serves a
        subpartition only against the ticket made with it, so without one, to nobody."""
        partition_type = str(getattr(partition_type, "value", partition_type))
        if partition_type not in PARTITION_TYPES:
            raise ValueError(f"{partition_id}: unknown partition type {partition_type!r}; "
                             f"one of {PARTITION_TYPES}")
        if num_subpartitions < 1:
            raise ValueError(f"{partition_id} needs at least one subpartition")
        self.partition_id = partition_id
        self.partition_type = partition_type
        self.data_key = data_key
        self.num_subpartitions = num_subpartitions
        self.max_buffered_bytes = max_buffered_bytes
        self._lock = threading.Lock()
        self._finished = False
        self._released = False
        names = [f"subpartition {i} of {partition_id}" for i in range(num_subpartitions)]
        if partition_type == "pipelined":
            self.spill_directory: Path | None = None
            self._subpartitions: list[PipelinedSubpartition | BlockingSubpartition] = [
                PipelinedSubpartition(name, max_buffered_bytes) for name in names]
        else:
            # A folder per partition object: attempts of one producer share its id.
            self.spill_directory = Path(spill_dir) / (
                f"{partition_id.job_id}-{partition_id.result_id}-"
                f"{partition_id.partition_number}-{uuid.uuid4().hex[:8]}")
            self._subpartitions = [
                BlockingSubpartition(name, self.spill_directory / f"subpartition-{i}.arrow")
                for i, name in enumerate(names)]

    # ------------------------------------------------------------------ producer side

    def emit(self, subpartition: int, batch: pa.RecordBatch) -> None:
        """Appends `batch` to a subpartition; producer thread only. Pipelined: blocks
        while the subpartition holds more than max_buffered_bytes (batch.nbytes), so it
        never holds more than that plus one batch. Blocking: writes to its file.
        Raises PartitionReleased when the partition was released or failed (also when
        that happens while blocked), ValueError when the batch's schema differs from the
        subpartition's earlier batches, RuntimeError after finish(). Batches for a
        pipelined subpartition whose consumer closed its reader are dropped."""
        self._subpartition(subpartition).add(batch)

    def broadcast_event(self, event: StreamEvent) -> None:
        """Puts a barrier or watermark into every subpartition, behind what was emitted
        before it; producer thread only. A blocking partition refuses barriers
        (ValueError) and leaves watermarks out."""
        for sub in self._subpartitions:
            sub.add_event(event)

    def finish(self) -> None:
        """End of partition for every subpartition; idempotent. Pipelined: readers get
        end of partition after the queued data. Blocking: the files are closed and
        readable from now on."""
        for sub in self._subpartitions:
            sub.finish()
        with self._lock:
            self._finished = True

    def fail(self, message: str) -> None:
        """The producer failed: readers, present and future, get PartitionFailed with
        `message` instead of more data; queued data is dropped."""
        for sub in self._subpartitions:
            sub.fail(message)

    def release(self) -> None:
        """Drops queues and removes files; wakes blocked producers and readers, which
        raise PartitionReleased. Idempotent; any thread."""
        with self._lock:
            if self._released:
                return
            self._released = True
        for sub in self._subpartitions:
            sub.release()
        if self.spill_directory is not None:
            shutil.rmtree(self.spill_directory, ignore_errors=True)

    # ------------------------------------------------------------------ consumer side

    def create_reader(self, subpartition: int) -> SubpartitionReader:
        """A reader of one subpartition. Pipelined: one reader only (a second raises
        PartitionReleased). Blocking: any number, but only after finish() (before, it
        raises PartitionNotReady). PartitionFailed / PartitionReleased when failed or
        released."""
        return self._subpartition(subpartition).create_reader()

    def wait_readable(self, subpartition: int, timeout: float) -> bool:
        """Waits up to `timeout` s until a reader's first event would not block: data or
        end of partition queued (pipelined), finished (blocking), or failed/released
        (create_reader or the first read then raises). True if so."""
        return self._subpartition(subpartition).wait_readable(timeout)

    # ---------------------------------------------------------------------- metrics

    def buffered_bytes(self, subpartition: int | None = None) -> int:
        """Bytes held in memory by one subpartition, or by all; always 0 when blocking."""
        if subpartition is not None:
            return self._subpartition(subpartition).buffered_bytes()
        return sum(sub.buffered_bytes() for sub in self._subpartitions)

    @property
    def is_finished(self) -> bool:
        with self._lock:
            return self._finished

    @property
    def is_released(self) -> bool:
        with self._lock:
            return self._released

    def _subpartition(self, index: int) -> PipelinedSubpartition | BlockingSubpartition:
        if not 0 <= index < self.num_subpartitions:
            raise IndexError(f"{self.partition_id} has no subpartition {index}; it has "
                             f"{self.num_subpartitions}")
        return self._subpartitions[index]

    def admits(self, subpartition: int, ticket: bytes) -> bool:
        """Whether `ticket` is the JobMaster's for reading `subpartition` remotely."""
        pid = self.partition_id
        return ticket_admits(self.data_key, ticket, pid.job_id, pid.result_id,
                             pid.partition_number, subpartition)

    def __repr__(self) -> str:
        return (f"ResultPartition({self.partition_id}, {self.partition_type}, "
                f"{self.num_subpartitions} subpartitions)")


class ResultPartitionManager:
    """The ResultPartitions produced in one TaskExecutor, by id. Thread-safe: tasks
    register from their threads, the data server and local channels look up from
    theirs, the TaskExecutor releases from its loop (release only removes files; it
    does not wait for producers or readers)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._partitions: dict[ResultPartitionID, ResultPartition] = {}

    def register(self, partition: ResultPartition) -> None:
        """Makes the partition readable by id and wakes whoever waits for it. A partition
        of an earlier attempt with the same id is released and replaced."""
        with self._cond:
            previous = self._partitions.get(partition.partition_id)
            self._partitions[partition.partition_id] = partition
            self._cond.notify_all()
        if previous is not None and previous is not partition:
            log.info("%s registered again; releasing the earlier one", partition.partition_id)
            previous.release()

    def get(self, partition_id: ResultPartitionID, timeout: float) -> ResultPartition:
        """The partition, waiting up to `timeout` s for it to be registered; else
        PartitionNotFound naming it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (partition := self._partitions.get(partition_id)) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PartitionNotFound(f"{partition_id} is not registered at this "
                                            f"TaskExecutor (waited {timeout:g} s)")
                self._cond.wait(remaining)
            return partition

    def release(self, partition_id: ResultPartitionID) -> bool:
        """Releases and forgets the partition; False if it was not registered."""
        with self._cond:
            partition = self._partitions.pop(partition_id, None)
        if partition is None:
            return False
        partition.release()
        return True

    def release_job(self, job_id: str) -> list[ResultPartitionID]:
        """Releases every partition of the job (files removed); returns their ids."""
        with self._cond:
            ids = [pid for pid in self._partitions if pid.job_id == job_id]
            partitions = [self._partitions.pop(pid) for pid in ids]
        for partition in partitions:
            partition.release()
        return ids

    def release_all(self) -> None:
        """Releases every partition (the TaskExecutor shuts down)."""
        with self._cond:
            partitions = list(self._partitions.values())
            self._partitions.clear()
        for partition in partitions:
            partition.release()

    def partitions_of(self, job_id: str) -> list[ResultPartitionID]:
        with self._cond:
            return sorted(pid for pid in self._partitions if pid.job_id == job_id)

    def __len__(self) -> int:
        with self._cond:
            return len(self._partitions)
