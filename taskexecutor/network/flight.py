"""The TaskExecutor's Arrow Flight data server and client pool: how subpartitions
travel between TaskExecutors, with mutual TLS on both sides (the cluster's certificates).

Receiver-initiated: a consumer's DoGet names one subpartition (wire.SubpartitionRequest);
the server streams its batches, and the end of the stream is the end of the partition.
A request is served only with the JobMaster's ticket for that subpartition (security.
partition_ticket; else the error kind "Forbidden"): the TaskExecutors' certificate alone,
which the code of every job's tasks can read, opens nothing.
A subpartition that ends before any batch is a stream with an empty schema.
Checkpoint barriers and watermarks travel as empty batches with a marker (wire.StreamMarker) in their
app_metadata. A stream's schema is its first batch's; one that begins with a barrier
(its producer had no data yet) has an empty schema and ends, with a "more" marker, where
the first batch comes: the client asks again, and the next stream starts with it.

Flight sends a stream's schema before its first batch, and a client cannot cancel a
DoGet before that first message arrives. So a request is a long poll: the server waits
at most the request's `wait` for the partition to be registered and to have data, and
otherwise answers PartitionNotFound / PartitionNotReady, on which the client asks again.
A pipelined subpartition's reader, once created, is kept ("parked") between such polls,
so that the subpartition counts as requested: if the consumer goes away (DoAction
"cancel", or no new poll within `park_timeout`), the reader is closed, which drops the
subpartition's data and frees its producer.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight

from flinkyarn import retry
from flinkyarn.pipeline.operator import Watermark
from flinkyarn.rpc.security import TASKEXECUTOR_NAME, ClusterSecurity
from taskexecutor.network.errors import (PartitionException, PartitionFailed,
                                         PartitionNotFound, PartitionNotReady,
                                         PartitionReleased)
from taskexecutor.network.partition import ResultPartitionManager
from taskexecutor.network.subpartition import (CheckpointBarrier, EndOfPartition, Event,
                                               SubpartitionReader)
from taskexecutor.network.wire import (CANCEL_ACTION, StreamMarker, SubpartitionRequest,
                                       server_error, to_server_error)

log = logging.getLogger(__name__)


class DataServer(flight.FlightServerBase):  # type: ignore[misc]  # pyarrow is untyped
    """Serves the subpartitions of `manager` over Flight DoGet. A client without the
    cluster's certificate is refused during the TLS handshake. `security`'s certificate
    must name TASKEXECUTOR_NAME (the TaskExecutors' one): clients check it.

    Listens from construction on. `serve()` starts a background thread that waits in
    Flight's serve loop and returns at once; `shutdown()` (any thread) closes the open
    readers, so streams in progress end with an error, and stops the server. Handlers
    run on gRPC's threads and never wait longer than `poll_interval` without checking
    whether their client cancelled or the server shuts down.
    """

    def __init__(self, manager: ResultPartitionManager, security: ClusterSecurity,
                 host: str = "127.0.0.1", port: int = 0, *, advertised_host: str | None = None,
                 max_request_wait: float = 10.0, poll_interval: float = 0.2,
                 park_timeout: float = 5.0) -> None:
        super().__init__(f"grpc+tls://{host}:{port}",
                         tls_certificates=[flight.CertKeyPair(security.cert, security.key)],
                         verify_client=True, root_certificates=security.ca)
        self._manager = manager
        self._host = advertised_host or host
        self._max_wait = max_request_wait
        self._poll = poll_interval
        self._park_timeout = park_timeout
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._readers: set[_HeldReader] = set()
        self._parked: dict[tuple, tuple[_HeldReader, float]] = {}
        self._thread: threading.Thread | None = None
        self._janitor = threading.Thread(target=self._expire_parked, daemon=True,
                                         name=f"flight-data-server-{self.port}-janitor")
        self._janitor.start()

    @property
    def address(self) -> str:
        """"host:port" that consumers connect to."""
        return f"{self._host}:{self.port}"

    def serve(self) -> None:
        """Starts the background serving thread (idempotent) and returns at once."""
        with self._lock:
            if self._thread is None and not self._closing.is_set():
                self._thread = threading.Thread(
                    target=flight.FlightServerBase.serve, args=(self,), daemon=True,
                    name=f"flight-data-server-{self.port}")
                self._thread.start()

    def shutdown(self) -> None:
        """Closes every open reader, stops the server, joins its threads. Idempotent."""
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
            readers, self._readers, self._parked = list(self._readers), set(), {}
        for reader in readers:
            reader.close()
        super().shutdown()
        for thread in (self._thread, self._janitor):
            if thread is not None:
                thread.join(timeout=10)

    def __enter__(self) -> "DataServer":
        self.serve()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ------------------------------------------------------------- gRPC threads

    def do_get(self, context, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = SubpartitionRequest.decode(ticket.ticket)
        deadline = retry.Deadline(max(0.0, min(request.wait, self._max_wait)))
        try:
            reader = self._unpark(request) or self._open(context, request, deadline)
        except PartitionException as error:
            raise to_server_error(error) from None
        except IndexError as error:  # no such subpartition
            raise server_error("BadTicket", str(error)) from None
        try:
            first = self._first(context, reader, request, deadline)
        except PartitionException as error:
            self._forget(reader)
            raise to_server_error(error) from None
        if first is None:
            self._park(request, reader)
            raise to_server_error(PartitionNotReady(f"{request} has no data yet"))
        if isinstance(first, EndOfPartition):
            self._forget(reader)
            return flight.GeneratorStream(pa.schema([]), iter(()))
        schema = first.schema if isinstance(first, pa.RecordBatch) else pa.schema([])
        return flight.GeneratorStream(schema, self._stream(context, reader, request, first,
                                                           schema))

    def do_action(self, context, action: flight.Action):
        """"cancel": the consumer of a parked request went away."""
        if action.type != CANCEL_ACTION:
            raise server_error("BadTicket", f"unknown data-plane action {action.type!r}")
        reader = self._unpark(SubpartitionRequest.decode(action.body.to_pybytes()))
        if reader is not None:
            self._forget(reader)
        return []

    def _open(self, context, request: SubpartitionRequest,
              deadline: retry.Deadline) -> "_HeldReader":
        pid, sub = request.partition_id, request.subpartition
        partition = None
        while partition is None:
            try:
                partition = self._manager.get(pid, deadline.cap(self._poll))
            except PartitionNotFound:
                if deadline.passed() or self._stopped(context):
                    raise PartitionNotFound(f"{pid} is not registered at the TaskExecutor "
                                            f"at {self.address}") from None
        if not partition.admits(sub, request.ticket):
            log.warning("refused %s: not the JobMaster's ticket for it", request)
            raise server_error("Forbidden", f"{request}: the ticket is not the JobMaster's "
                                            f"for it")
        while True:
            try:
                reader = partition.create_reader(sub)
                break
            except PartitionNotReady:  # a blocking partition not finished yet
                if (not partition.wait_readable(sub, deadline.cap(self._poll))
                        and (deadline.passed() or self._stopped(context))):
                    raise
        held = _HeldReader(reader)
        with self._lock:
            if not self._closing.is_set():
                self._readers.add(held)
                return held
        reader.close()
        raise PartitionReleased(f"{request}: the data server at {self.address} shuts down")

    def _first(self, context, reader: SubpartitionReader, request: SubpartitionRequest,
               deadline: retry.Deadline):
        """The first event, or None when there is none by the deadline."""
        while (event := reader.next_event(deadline.cap(self._poll))) is None:
            self._check_stopped(context, request)
            if deadline.passed():
                return None
        return event

    def _stream(self, context, reader: "_HeldReader", request: SubpartitionRequest,
                first: Event, schema: pa.Schema):
        """Pulled by Flight on a gRPC thread. gRPC flow control stops the pulling while
        the client is behind, so the subpartition's queue fills up and its producer
        waits: backpressure across TaskExecutors. Closes the reader however it ends,
        unless the client is to ask again for the rest (then it is parked)."""
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        parked = False
        try:
            event = first
            while not isinstance(event, EndOfPartition):
                if isinstance(event, CheckpointBarrier):
                    yield empty, StreamMarker(event.checkpoint_id, event.timestamp).encode()
                elif isinstance(event, Watermark):
                    yield empty, StreamMarker(watermark=event.timestamp).encode()
                elif event.schema.equals(schema, check_metadata=False):
                    yield event
                elif not schema.names:  # the first batch, after barriers: a new stream
                    reader.hold(event)
                    self._park(request, reader)
                    parked = True
                    yield empty, StreamMarker(more=True).encode()
                    return
                else:
                    raise PartitionFailed(f"{request}: its batches differ in schema")
                while (event := reader.next_event(self._poll)) is None:
                    self._check_stopped(context, request)
        except PartitionException as error:
            raise to_server_error(error) from None
        finally:
            if not parked:
                self._forget(reader)

    def _check_stopped(self, context, request: SubpartitionRequest) -> None:
        if self._stopped(context):
            raise PartitionReleased(f"{request}: the consumer went away or the data server "
                                    f"at {self.address} shut down")

    def _stopped(self, context) -> bool:
        return self._closing.is_set() or context.is_cancelled()

    # ------------------------------------------------------------ reader tracking

    @staticmethod
    def _parking_key(request: SubpartitionRequest) -> tuple:
        """With the ticket: a request without the one that parked a reader cannot take
        it over, nor cancel it."""
        return request.partition_id, request.subpartition, request.ticket

    def _park(self, request: SubpartitionRequest, reader: "_HeldReader") -> None:
        key = self._parking_key(request)
        with self._lock:
            if reader in self._readers:
                self._parked[key] = (reader, time.monotonic())

    def _unpark(self, request: SubpartitionRequest) -> "_HeldReader | None":
        with self._lock:
            parked = self._parked.pop(self._parking_key(request), None)
        return None if parked is None else parked[0]

    def _forget(self, reader: SubpartitionReader) -> None:
        with self._lock:
            self._readers.discard(reader)
        reader.close()

    def _expire_parked(self) -> None:
        """The janitor thread: closes readers whose consumer stopped polling."""
        while not self._closing.wait(max(0.05, self._park_timeout / 4)):
            now = time.monotonic()
            with self._lock:
                expired = [key for key, (_, since) in self._parked.items()
                           if now - since > self._park_timeout]
                readers = [self._parked.pop(key)[0] for key in expired]
            for reader in readers:
                log.info("closing a parked reader whose consumer went away")
                self._forget(reader)


class _HeldReader(SubpartitionReader):
    """A subpartition's reader with room for one event read ahead: the first batch of
    the stream that the next request gets."""

    def __init__(self, reader: SubpartitionReader) -> None:
        self._reader = reader
        self._held: Event | None = None

    def hold(self, event: Event) -> None:
        self._held = event

    def next_event(self, timeout: float | None = None) -> Event | None:
        if self._held is not None:
            event, self._held = self._held, None
            return event
        return self._reader.next_event(timeout)

    def close(self) -> None:
        self._reader.close()


class DataClientPool:
    """One Flight client per remote data server address, shared by all tasks of a
    TaskExecutor (gRPC multiplexes their streams over one connection per pair of
    TaskExecutors). Thread-safe.

    Each stream's HTTP/2 receive window is fixed at `receive_window_bytes`: gRPC would
    otherwise grow it to many megabytes, all of it data a slow consumer has not asked
    for yet. So what a remote channel holds in flight is bounded by the producer's
    subpartition bound plus this window (plus a batch or two in the transport).
    """

    def __init__(self, security: ClusterSecurity, receive_window_bytes: int = 1 << 20) -> None:
        self._security = security
        self._grpc_options = [("grpc.http2.bdp_probe", 0),
                              ("grpc.http2.lookahead_bytes", receive_window_bytes)]
        self._lock = threading.Lock()
        self._clients: dict[str, flight.FlightClient] = {}
        self._closed = False

    def client(self, address: str) -> flight.FlightClient:
        """The client for "host:port"; it connects lazily."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the data client pool is closed")
            client = self._clients.get(address)
            if client is None:
                client = self._clients[address] = flight.FlightClient(
                    f"grpc+tls://{address}", tls_root_certs=self._security.ca,
                    cert_chain=self._security.cert, private_key=self._security.key,
                    override_hostname=TASKEXECUTOR_NAME, generic_options=self._grpc_options)
            return client

    def close(self) -> None:
        """Closes every client (streams in progress fail); idempotent."""
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                client.close()
            except Exception:  # best effort: the process may be going away
                log.debug("closing a Flight client failed", exc_info=True)
