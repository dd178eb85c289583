"""Subpartitions (Flink's ResultSubpartitions): the part of a ResultPartition destined
for one consumer subtask, and the readers that consume it.

PipelinedSubpartition: a queue in memory, bounded in bytes; read once, while written.
BlockingSubpartition: an Arrow IPC stream file, written as batches come; read any number
of times, only after the producer finished it.

Threading: `add` and `finish` are called by the producer task's thread; a reader is used
by one consumer thread at a time; `fail`, `release` and a reader's `close` may be called
from any thread and wake whoever waits. Each subpartition has its own lock, so producers
and consumers of different subpartitions never contend.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pyarrow as pa

from flinkyarn.pipeline.operator import Watermark
from taskexecutor.network.errors import (PartitionFailed, PartitionNotReady,
                                         PartitionReleased)


class EndOfPartition:
    """The event after a subpartition's last batch."""

    def __repr__(self) -> str:
        return "END_OF_PARTITION"


END_OF_PARTITION = EndOfPartition()


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    """Flink's CheckpointBarrier: everything before it in a stream belongs to checkpoint
    `checkpoint_id`, everything after it to the next. Sources put it into their outputs
    when the CheckpointCoordinator triggers the checkpoint (`timestamp`: its time, ms
    since the epoch); a task with several input channels passes it on once it came on
    every channel (alignment, see input_gate.py). Only pipelined subpartitions carry it:
    a job with blocking exchanges takes no checkpoints."""

    checkpoint_id: int
    timestamp: int


# A watermark (flinkyarn/pipeline/event_time.py) travels like a barrier, unaligned.
StreamEvent: TypeAlias = CheckpointBarrier | Watermark
Event: TypeAlias = pa.RecordBatch | EndOfPartition | StreamEvent


class SubpartitionReader(ABC):
    """Reads one subpartition. Iterating yields its batches and stops at end of
    partition; `next_event(timeout)` is the same with a timeout, for callers that must
    stay responsive (the data server). Both raise PartitionFailed when the producer
    failed, PartitionReleased when the subpartition was released or the reader closed.
    """

    def __iter__(self) -> "SubpartitionReader":
        return self

    def __next__(self) -> pa.RecordBatch | StreamEvent:
        event = self.next_event()
        if event is END_OF_PARTITION:
            raise StopIteration
        return event

    @abstractmethod
    def next_event(self, timeout: float | None = None) -> Event | None:
        """The next batch or barrier, or END_OF_PARTITION (again on every later call), or
        None when `timeout` seconds passed without either. Blocks while a pipelined
        queue is empty."""

    @abstractmethod
    def close(self) -> None:
        """The consumer is done (or cancelled); idempotent, callable from any thread."""

    def __enter__(self) -> "SubpartitionReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Subpartition:
    def __init__(self, name: str) -> None:
        self.name = name
        self._schema: pa.Schema | None = None
        self._finished = False
        self._failure: str | None = None
        self._released = False

    def _check_schema(self, batch: pa.RecordBatch) -> None:
        if self._schema is None:
            self._schema = batch.schema
        elif not batch.schema.equals(self._schema, check_metadata=False):
            raise ValueError(f"{self.name}: all batches of a subpartition must share one schema;"
                             f" got\n{batch.schema}\nafter\n{self._schema}")

    def _check_writable(self) -> None:
        if self._released:
            raise PartitionReleased(f"{self.name} was released")
        if self._failure is not None:
            raise PartitionReleased(f"{self.name} was failed: {self._failure}")
        if self._finished:
            raise RuntimeError(f"{self.name} is finished; nothing can be added")

    def _check_readable(self) -> None:
        if self._released:
            raise PartitionReleased(f"{self.name} was released")
        if self._failure is not None:
            raise PartitionFailed(f"{self.name} failed: {self._failure}")


class PipelinedSubpartition(_Subpartition):
    """Batches in memory until read; `add` blocks while more than `max_buffered_bytes`
    are queued (backpressure). A consumer closing its reader early releases the queue;
    later batches for it are dropped, as Flink does, and the producer carries on.
    `add_event` queues a barrier or watermark behind the batches before it, at once (it
    holds no data)."""

    def __init__(self, name: str, max_buffered_bytes: int) -> None:
        super().__init__(name)
        self._max = max_buffered_bytes
        self._cond = threading.Condition()
        self._queue: deque[pa.RecordBatch | StreamEvent] = deque()
        self._bytes = 0
        self._reader_state = "none"  # none -> open -> closed

    def add(self, batch: pa.RecordBatch) -> None:
        with self._cond:
            self._check_schema(batch)
            while (self._bytes > self._max and self._reader_state != "closed"
                   and not self._released and self._failure is None):
                self._cond.wait()
            self._check_writable()
            if self._reader_state == "closed":
                return
            self._queue.append(batch)
            self._bytes += batch.nbytes
            self._cond.notify_all()

    def add_event(self, event: StreamEvent) -> None:
        with self._cond:
            self._check_writable()
            if self._reader_state != "closed":
                self._queue.append(event)
                self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def fail(self, message: str) -> None:
        with self._cond:
            self._failure = message
            self._drop()

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._drop()

    def _drop(self) -> None:
        self._queue.clear()
        self._bytes = 0
        self._cond.notify_all()

    def buffered_bytes(self) -> int:
        with self._cond:
            return self._bytes

    def _readable(self) -> bool:
        return bool(self._queue or self._finished or self._released
                    or self._failure is not None or self._reader_state != "none")

    def wait_readable(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(self._readable, timeout)

    def create_reader(self) -> SubpartitionReader:
        with self._cond:
            self._check_readable()
            if self._reader_state != "none":
                raise PartitionReleased(f"{self.name} is pipelined and was already consumed; "
                                        "it can be read only once")
            self._reader_state = "open"
            return _PipelinedReader(self)

    def _poll(self, timeout: float | None) -> Event | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_readable()
                if self._reader_state == "closed":
                    raise PartitionReleased(f"the reader of {self.name} was closed")
                if self._queue:
                    event = self._queue.popleft()
                    if isinstance(event, pa.RecordBatch):
                        self._bytes -= event.nbytes
                        self._cond.notify_all()
                    return event
                if self._finished:
                    return END_OF_PARTITION
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def _close_reader(self) -> None:
        with self._cond:
            self._reader_state = "closed"
            self._drop()


class _PipelinedReader(SubpartitionReader):
    def __init__(self, subpartition: PipelinedSubpartition) -> None:
        self._subpartition = subpartition

    def next_event(self, timeout: float | None = None) -> Event | None:
        return self._subpartition._poll(timeout)

    def close(self) -> None:
        self._subpartition._close_reader()


class BlockingSubpartition(_Subpartition):
    """Batches appended to an Arrow IPC stream file at `path` as they come, so memory
    stays bounded; the file is created with the first batch (a subpartition that got
    none has no file and reads as empty). Readable after `finish`, any number of times."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name)
        self.path = path
        self._lock = threading.Lock()
        self._sink: pa.NativeFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._finished_cond = threading.Condition(self._lock)

    def add(self, batch: pa.RecordBatch) -> None:
        with self._lock:
            self._check_writable()
            self._check_schema(batch)
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._sink = pa.OSFile(str(self.path), "wb")
                self._writer = pa.ipc.new_stream(self._sink, batch.schema)
            self._writer.write_batch(batch)

    def add_event(self, event: StreamEvent) -> None:
        """A watermark is left out (its consumer reads after the end: all of event time
        has passed by then); a barrier is refused."""
        if isinstance(event, CheckpointBarrier):
            raise ValueError(f"{self.name} is blocking: checkpoint barriers travel through "
                             f"pipelined exchanges only")

    def finish(self) -> None:
        with self._lock:
            self._close_file()
            self._finished = True
            self._finished_cond.notify_all()

    def fail(self, message: str) -> None:
        with self._lock:
            self._failure = message
            self._close_file()
            self._finished_cond.notify_all()

    def release(self) -> None:
        """Closes the file; the ResultPartition removes its folder."""
        with self._lock:
            self._released = True
            self._close_file()
            self._finished_cond.notify_all()

    def _close_file(self) -> None:
        if self._writer is not None:
            assert self._sink is not None  # opened together with the writer
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def buffered_bytes(self) -> int:
        return 0

    def _readable(self) -> bool:
        return self._finished or self._released or self._failure is not None

    def wait_readable(self, timeout: float) -> bool:
        with self._lock:
            return self._finished_cond.wait_for(self._readable, timeout)

    def create_reader(self) -> SubpartitionReader:
        with self._lock:
            self._check_readable()
            if not self._finished:
                raise PartitionNotReady(f"{self.name} is blocking and not finished yet")
            return _BlockingReader(self, self.path if self._schema is not None else None)

    def _check_still_readable(self) -> None:
        with self._lock:
            self._check_readable()


class _BlockingReader(SubpartitionReader):
    """Reads the file memory-mapped: batches point into the page cache, not our heap."""

    def __init__(self, subpartition: BlockingSubpartition, path: Path | None) -> None:
        self._subpartition = subpartition
        self._path = path
        self._lock = threading.Lock()
        self._source: pa.MemoryMappedFile | None = None
        self._stream: pa.ipc.RecordBatchStreamReader | None = None
        self._done = path is None
        self._closed = False

    def next_event(self, timeout: float | None = None) -> Event | None:
        with self._lock:
            self._subpartition._check_still_readable()
            if self._closed:
                raise PartitionReleased(f"the reader of {self._subpartition.name} was closed")
            if self._done:
                return END_OF_PARTITION
            if self._stream is None:
                self._source = pa.memory_map(str(self._path))
                self._stream = pa.ipc.open_stream(self._source)
            try:
                return self._stream.read_next_batch()
            except StopIteration:
                self._done = True
                self._close_file()
                return END_OF_PARTITION

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_file()

    def _close_file(self) -> None:
        if self._source is not None:
            self._source.close()  # batches still referenced keep their mapping alive
            self._source = self._stream = None
