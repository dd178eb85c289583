"""InputGate and InputChannels: how a consumer task reads the subpartitions meant for it.

A LocalInputChannel reads a partition of its own TaskExecutor straight from the
ResultPartitionManager; a RemoteInputChannel asks the producer's TaskExecutor with a
Flight DoGet. Both are receiver-initiated: nothing is sent before the consumer asks.
The InputGate reads all its channels at once, one reader thread each, into a small
bounded queue; reading them one after the other could deadlock, since a producer
blocked on one consumer's full subpartition stops feeding the others.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeAlias

import pyarrow as pa
import pyarrow.flight as flight

from flinkyarn import retry
from taskexecutor.network.errors import (PartitionException, PartitionNotFound,
                                         PartitionNotReady, PartitionReleased)
from taskexecutor.network.flight import DataClientPool
from taskexecutor.network.partition import ResultPartitionID, ResultPartitionManager
from flinkyarn.pipeline.operator import MIN_TIMESTAMP, Watermark
from taskexecutor.network.subpartition import (END_OF_PARTITION, CheckpointBarrier,
                                               StreamEvent, SubpartitionReader)
from taskexecutor.network.wire import (CANCEL_ACTION, StreamMarker, SubpartitionRequest,
                                       partition_error)

_POLL = 0.1  # how often a waiting local channel checks whether it was closed
# Between requests for a partition not registered at its TaskExecutor yet: the defaults
# of taskmanager.network.request-backoff.initial / .max.
_BACKOFF = retry.Backoff(0.02, 1.0)


GateEvent: TypeAlias = "pa.RecordBatch | CheckpointBarrier | CheckpointAborted | Watermark | Wakeup"


class Wakeup:
    """What an input gate yields (channel -1) after wake(): the reader has other work."""

    def __repr__(self) -> str:
        return "WAKEUP"


WAKEUP = Wakeup()


@dataclass(frozen=True, slots=True)
class CheckpointAborted:
    """What an input gate yields for a barrier it stopped aligning (see InputGate)."""

    checkpoint_id: int
    reason: str


class InputChannel(ABC):
    """Reads subpartition `subpartition` of producer partition `partition_id`.

    `read()` is called once, by the thread that consumes the channel: it requests the
    subpartition, yields its batches and barriers and returns at end of partition. It raises
    PartitionNotFound when the partition is not registered within `timeout` seconds
    (once registered, it waits as long as the producer takes), PartitionFailed when the
    producer failed or its TaskExecutor cannot be reached. `close()` may be called from
    any thread, never blocks, and makes a waiting read() raise PartitionReleased soon.
    """

    def __init__(self, partition_id: ResultPartitionID, subpartition: int,
                 timeout: float) -> None:
        self.partition_id = partition_id
        self.subpartition = subpartition
        self.timeout = timeout
        self._closed = threading.Event()
        self._lock = threading.Lock()

    @abstractmethod
    def read(self) -> Iterator[pa.RecordBatch | StreamEvent]:
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise PartitionReleased(f"the channel reading {self} was closed")

    def __str__(self) -> str:
        return f"subpartition {self.subpartition} of {self.partition_id}"


class LocalInputChannel(InputChannel):
    """A partition of this TaskExecutor, read in-process (no copy, no Flight)."""

    def __init__(self, manager: ResultPartitionManager, partition_id: ResultPartitionID,
                 subpartition: int, timeout: float) -> None:
        super().__init__(partition_id, subpartition, timeout)
        self._manager = manager
        self._reader: SubpartitionReader | None = None

    def read(self) -> Iterator[pa.RecordBatch | StreamEvent]:
        reader = self._request()
        try:
            while (event := reader.next_event()) is not END_OF_PARTITION:
                yield event
        except PartitionReleased:
            self._check_open()
            raise
        finally:
            reader.close()

    def _request(self) -> SubpartitionReader:
        deadline = retry.Deadline(self.timeout)
        while True:
            self._check_open()
            try:
                partition = self._manager.get(self.partition_id, deadline.cap(_POLL))
                break
            except PartitionNotFound:
                if deadline.passed():
                    raise PartitionNotFound(f"{self}: the partition was not registered at "
                                            f"this TaskExecutor within {self.timeout:g} s") from None
        while True:  # a blocking partition is readable once finished
            with self._lock:
                self._check_open()
                try:
                    self._reader = partition.create_reader(self.subpartition)
                    return self._reader
                except PartitionNotReady:
                    pass
            partition.wait_readable(self.subpartition, _POLL)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            reader = self._reader
        if reader is not None:
            reader.close()


class RemoteInputChannel(InputChannel):
    """A partition of another TaskExecutor, read with a Flight DoGet through the shared
    client pool. `locate()` returns the producer TaskExecutor's data address "host:port";
    it is called before each request until the partition is found there (it may block;
    close() does not interrupt it). `ticket`: the JobMaster's for this subpartition
    (security.partition_ticket), without which the producer serves nothing. `backoff`:
    the pauses between requests while the partition is not registered there
    (taskmanager.network.request-backoff.*). `producer`: the producing TaskExecutor's
    resource id, named beside its address in errors (so a failure caused by its loss
    says which TaskExecutor was lost).
    Requests are long polls of up to `poll_wait` seconds (see flight.py), so close()
    takes effect within about that long while the partition is missing or has no data
    yet, and at once during the stream; either way the server then closes its reader.
    """

    def __init__(self, pool: DataClientPool, locate: Callable[[], str],
                 partition_id: ResultPartitionID, subpartition: int, timeout: float,
                 *, ticket: bytes, producer: str = "", poll_wait: float = 0.5,
                 backoff: retry.Backoff = _BACKOFF) -> None:
        super().__init__(partition_id, subpartition, timeout)
        self._pool = pool
        self._ticket = ticket
        self._producer = producer
        self._locate = locate
        self._poll_wait = poll_wait
        self._backoff = backoff
        self._stream = None

    def read(self) -> Iterator[pa.RecordBatch | StreamEvent]:
        more = True
        while more:  # a stream that ends with a "more" marker goes on in the next one
            stream, address = self._request()
            more = ended = False
            try:
                while True:
                    try:
                        chunk = stream.read_chunk()
                    except StopIteration:
                        ended = True
                        break
                    except pa.ArrowException as error:
                        ended = True
                        self._check_open()
                        raise partition_error(error, str(self), self._where(address)) from None
                    if chunk.app_metadata is None:
                        yield chunk.data
                        continue
                    marker = StreamMarker.decode(chunk.app_metadata.to_pybytes(), str(self))
                    if marker.more:
                        more = True
                    elif marker.barrier is not None:
                        yield CheckpointBarrier(marker.barrier, marker.timestamp)
                    elif marker.watermark is not None:
                        yield Watermark(marker.watermark)
            finally:
                with self._lock:
                    self._stream = None
                if not ended:  # the consumer stopped early: tell the producer's server
                    stream.cancel()

    def _request(self):
        deadline = retry.Deadline(self.timeout)
        not_found = retry.Retrying(self._backoff, deadline=deadline)
        parked_at = None
        while True:
            if self._closed.is_set() and parked_at is not None:
                self._cancel(parked_at)
            self._check_open()
            # The server keeps a parked reader only a few seconds: ask again at once.
            address = parked_at or self._locate()
            # Once registered, the partition may take as long as its producer needs.
            wait = self._poll_wait if parked_at else deadline.cap(self._poll_wait)
            request = SubpartitionRequest.of(self.partition_id, self.subpartition, self._ticket,
                                             wait)
            try:
                stream = self._pool.client(address).do_get(flight.Ticket(request.encode()))
            except pa.ArrowException as failure:
                error = partition_error(failure, str(self), self._where(address))
                if isinstance(error, PartitionNotReady):  # the server keeps our reader
                    parked_at = address
                    continue
                self._check_open()
                if not isinstance(error, PartitionNotFound):
                    raise error from None
                try:
                    pause = not_found.failed(error)
                except retry.GaveUp:
                    raise PartitionNotFound(
                        f"{self}: the partition was not registered at the TaskExecutor "
                        f"{self._where(address)} within {self.timeout:g} s") from None
                self._closed.wait(pause)  # close() cuts the pause short
                continue
            with self._lock:
                if self._closed.is_set():
                    stream.cancel()
                    self._check_open()
                self._stream = stream
            return stream, address

    def _where(self, address: str) -> str:
        return f"{self._producer} at {address}" if self._producer else f"at {address}"

    def _cancel(self, address: str) -> None:
        """Tells the server to drop the reader it keeps for us (best effort: it drops
        it anyway when we stop polling)."""
        body = SubpartitionRequest.of(self.partition_id, self.subpartition, self._ticket).encode()
        try:
            list(self._pool.client(address).do_action(
                flight.Action(CANCEL_ACTION, body), flight.FlightCallOptions(timeout=2)))
        except (pa.ArrowException, RuntimeError):
            pass

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.cancel()


class InputGate:
    """Every channel of one task's input. Iterating yields `(channel_index, event)` from
    all channels as their data arrives, and ends when every channel reached end of
    partition; a failing channel's error (PartitionFailed, PartitionNotFound, ...) is
    raised from the iteration and closes the gate, its `partition_id` set to the
    channel's partition.

    Barriers are aligned (the seed's barrier handler, Flink's aligned checkpoints): a
    channel that delivered barrier n is blocked, its reader thread holding back what
    follows, until n came on every channel that has not ended; then the gate yields
    `(index, barrier n)` once, and the channels go on. A barrier n+k on a channel while
    n is aligned abandons n: the gate yields `(index, CheckpointAborted(n))`, the
    blocked channels go on, and n+k is aligned. A barrier older than the newest seen
    is dropped. A channel that ended counts as aligned, for every later barrier too.

    Watermarks are combined (Flink's StatusWatermarkValve): each channel's is the
    greatest it sent; whenever the least of those of the channels not ended grows, the
    gate yields `(index, Watermark(least))`.
    `wake()` (any thread) makes the iteration yield `(-1, WAKEUP)` soon, for a task that
    has something else to do (a checkpoint's confirmation) while no data comes.

    Threading: the task thread iterates (once); one daemon reader thread per channel,
    started by the first iteration, feeds a queue of at most `capacity` events (default
    two per channel), so a slow task holds back its channels, and they their producers.
    `close()` may be called from any thread (the task's cancellation) and never blocks:
    it closes the channels, which stops their threads soon; an iteration in progress
    raises PartitionReleased.
    """

    def __init__(self, channels: Sequence[InputChannel], capacity: int | None = None) -> None:
        self.channels = list(channels)
        self._capacity = capacity or max(2, 2 * len(self.channels))
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, object]] = deque()
        self._active = len(self.channels)
        self._closed = False
        self._started = False
        self._threads: list[threading.Thread] = []
        # Alignment (task thread, under _cond): the barrier aligned and the channels it
        # came on; per channel, the id of the barrier it waits behind (reader threads).
        self._aligning: CheckpointBarrier | None = None
        self._aligning_since = 0.0   # when its first barrier came (monotonic)
        self.last_alignment = 0.0    # how long the last aligned barrier took to come on all, s
        self._arrived: set[int] = set()
        self._ended: set[int] = set()
        self._newest = -1
        self._blocked: list[int | None] = [None] * len(self.channels)
        # Watermarks (task thread): per channel, and the least of the open ones, yielded.
        self._watermarks = [MIN_TIMESTAMP] * len(self.channels)
        self._watermark = MIN_TIMESTAMP


    def fill(self) -> float:
        """How full the queue is, 0 to 1 (any thread; a moment's look)."""
        return min(1.0, len(self._queue) / self._capacity)

    def __iter__(self) -> Iterator[tuple[int, GateEvent]]:
        with self._cond:
            if self._started:
                raise RuntimeError("an input gate can be iterated only once")
            self._started = True
            for index, channel in enumerate(self.channels):
                thread = threading.Thread(target=self._read, args=(index, channel), daemon=True,
                                          name=f"input channel {index}: {channel}")
                self._threads.append(thread)
                thread.start()
        return self._events()

    def _events(self) -> Iterator[tuple[int, GateEvent]]:
        while True:
            with self._cond:
                while not self._queue and self._active and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise PartitionReleased("the input gate was closed while being read")
                if not self._queue:
                    return
                index, event = self._queue.popleft()
                aligned: list[GateEvent] = []
                if event is END_OF_PARTITION:
                    self._active -= 1
                    self._ended.add(index)
                    aligned = [*self._check_aligned(), *self._advance()]
                elif isinstance(event, CheckpointBarrier):
                    aligned = [*self._barrier(index, event)]
                elif isinstance(event, Watermark):
                    self._watermarks[index] = max(self._watermarks[index], event.timestamp)
                    aligned = [*self._advance()]
                self._cond.notify_all()
            if isinstance(event, BaseException):
                self.close()
                raise event
            for done in aligned:
                yield index, done
            if isinstance(event, (pa.RecordBatch, Wakeup)):
                yield index, event

    def _advance(self) -> list[Watermark]:
        """The combined watermark, if it grew (under _cond)."""
        open_channels = [w for i, w in enumerate(self._watermarks) if i not in self._ended]
        if not open_channels or min(open_channels) <= self._watermark:
            return []
        self._watermark = min(open_channels)
        return [Watermark(self._watermark)]

    @property
    def aligning(self) -> int | None:
        """The id of the checkpoint whose barrier is being aligned, if one is."""
        with self._cond:
            return None if self._aligning is None else self._aligning.checkpoint_id

    def _barrier(self, index: int, barrier: CheckpointBarrier) -> list[CheckpointBarrier | CheckpointAborted]:
        """Barrier `barrier` came on channel `index` (under _cond): what to yield."""
        if barrier.checkpoint_id <= self._newest and (
                self._aligning is None or barrier.checkpoint_id != self._aligning.checkpoint_id):
            self._release(index)  # older than one aligned or abandoned
            return []
        yielded: list[CheckpointBarrier | CheckpointAborted] = []
        if self._aligning is not None and barrier.checkpoint_id > self._aligning.checkpoint_id:
            yielded.append(CheckpointAborted(self._aligning.checkpoint_id, (
                f"barrier {barrier.checkpoint_id} came on input channel {index} before "
                f"barrier {self._aligning.checkpoint_id} came on all")))
            self._aligning = None
            self._release_all()
        if self._aligning is None:
            self._aligning, self._arrived = barrier, set()
            self._aligning_since = time.monotonic()
            self._newest = barrier.checkpoint_id
        self._arrived.add(index)
        return yielded + self._check_aligned()

    def _check_aligned(self) -> list[CheckpointBarrier | CheckpointAborted]:
        if self._aligning is None or len(self._arrived | self._ended) < len(self.channels):
            return []
        barrier, self._aligning = self._aligning, None
        self.last_alignment = time.monotonic() - self._aligning_since
        self._release_all()
        return [barrier]

    def _release(self, index: int) -> None:
        self._blocked[index] = None

    def _release_all(self) -> None:
        self._blocked = [None] * len(self.channels)
        self._arrived = set()

    def _read(self, index: int, channel: InputChannel) -> None:
        """A channel's reader thread."""
        try:
            for event in channel.read():
                with self._cond:
                    while len(self._queue) >= self._capacity and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._queue.append((index, event))
                    self._cond.notify_all()
                    if isinstance(event, CheckpointBarrier):
                        # Nothing more from this channel until the barrier is aligned.
                        self._blocked[index] = event.checkpoint_id
                        while self._blocked[index] == event.checkpoint_id and not self._closed:
                            self._cond.wait()
            self._put_final(index, END_OF_PARTITION)
        except BaseException as error:  # handed to the task thread, which raises it
            if isinstance(error, PartitionException) and error.partition_id is None:
                error.partition_id = channel.partition_id
            self._put_final(index, error)

    def _put_final(self, index: int, event: object) -> None:
        with self._cond:
            if not self._closed:
                self._queue.append((index, event))  # past capacity: it carries no data
                self._cond.notify_all()

    def wake(self) -> None:
        """Makes the iteration yield (-1, WAKEUP) after what is queued; any thread."""
        self._put_final(-1, WAKEUP)

    def close(self) -> None:
        """Stops reading: queued batches are dropped, channels closed. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        for channel in self.channels:
            channel.close()

    def join(self, timeout: float | None = None) -> bool:
        """Waits up to `timeout` s for the reader threads to end; True if they did."""
        deadline = retry.Deadline(timeout)
        for thread in self._threads:
            thread.join(None if timeout is None else deadline.remaining())
        return not any(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> "InputGate":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
