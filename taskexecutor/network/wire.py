"""What the data server and its clients exchange over Arrow Flight.

DoGet ticket: JSON of SubpartitionRequest. DoAction "cancel" with the same body: the
consumer gives up a request it was told to repeat. In a stream, a batch with
app_metadata is a marker (JSON of StreamMarker), not data: a checkpoint barrier, a
watermark, or "more", which ends a stream that began before the subpartition's schema was known (with
a barrier): the rest follows in the stream of the next request. Errors: a FlightServerError whose
extra_info is JSON of DataPlaneError (kind = the exception's class name), turned back
into that exception at the client by `partition_error`; so a consumer sees the same
exceptions, with the same messages, whether its producer is local or remote.
"""

from __future__ import annotations

import msgspec
import pyarrow.flight as flight

from taskexecutor.network.errors import (PartitionException, PartitionFailed,
                                         PartitionNotFound, PartitionNotReady,
                                         PartitionReleased)
from taskexecutor.network.partition import ResultPartitionID

CANCEL_ACTION = "cancel"

_ERRORS = {cls.__name__: cls for cls in
           (PartitionNotFound, PartitionNotReady, PartitionFailed, PartitionReleased)}


class SubpartitionRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Subpartition `subpartition` of a partition, with the JobMaster's ticket for it
    (security.partition_ticket); the server may wait up to `wait` seconds for it to be
    registered and to have data before answering."""

    job_id: str
    result_id: str
    partition_number: int
    subpartition: int
    ticket: bytes = b""
    wait: float = 0.0

    @property
    def partition_id(self) -> ResultPartitionID:
        return ResultPartitionID(self.job_id, self.result_id, self.partition_number)

    @classmethod
    def of(cls, partition_id: ResultPartitionID, subpartition: int, ticket: bytes,
           wait: float = 0.0) -> "SubpartitionRequest":
        return cls(partition_id.job_id, partition_id.result_id, partition_id.partition_number,
                   subpartition, ticket, wait)

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> "SubpartitionRequest":
        """Raises a FlightServerError (kind BadTicket) for anything malformed."""
        try:
            return msgspec.json.decode(data, type=cls)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise server_error("BadTicket", f"malformed data-plane ticket: {error}") from None

    def __str__(self) -> str:
        return f"subpartition {self.subpartition} of {self.partition_id}"


class StreamMarker(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A barrier (`barrier`: its checkpoint id, `timestamp`), a watermark (`watermark`:
    its event time), or `more`: this stream ends and the subpartition goes on in the
    next request's."""

    barrier: int | None = None
    timestamp: int = 0
    more: bool = False
    watermark: int | None = None

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, data: bytes, what: str) -> "StreamMarker":
        """PartitionFailed naming `what` for anything malformed."""
        try:
            marker = msgspec.json.decode(data, type=cls)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise PartitionFailed(f"{what}: a malformed marker in the stream: {error}") from None
        if (marker.barrier is not None) + (marker.watermark is not None) + marker.more != 1:
            raise PartitionFailed(f"{what}: a marker must be one of a barrier, a watermark "
                                  f"and 'more'")
        return marker


class DataPlaneError(msgspec.Struct, frozen=True):
    kind: str
    message: str


def server_error(kind: str, message: str) -> flight.FlightServerError:
    return flight.FlightServerError(
        message, extra_info=msgspec.json.encode(DataPlaneError(kind, message)))


def to_server_error(error: PartitionException) -> flight.FlightServerError:
    return server_error(type(error).__name__, str(error))


def partition_error(error: Exception, what: str, where: str) -> PartitionException:
    """The data-plane exception for a Flight error while reading `what` from the
    TaskExecutor `where` ("at host:port", or "<resource id> at host:port"):
    the server's own exception when it sent one, else PartitionFailed (unreachable
    TaskExecutor, refused handshake, broken stream)."""
    info = getattr(error, "extra_info", None)
    if info:
        try:
            detail = msgspec.json.decode(info, type=DataPlaneError)
        except msgspec.DecodeError:
            detail = None
        if detail is not None:
            return _ERRORS.get(detail.kind, PartitionFailed)(detail.message)
    first_line = str(error).split(". Detail:")[0].split("\n")[0]
    if isinstance(error, flight.FlightUnavailableError):
        return PartitionFailed(f"{what}: the producer's TaskExecutor {where} is "
                               f"unreachable: {first_line}")
    return PartitionFailed(f"{what}: reading from the TaskExecutor {where} failed: "
                           f"{type(error).__name__}: {first_line}")
