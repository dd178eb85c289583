"""Failures of the data plane, as producers and consumers see them.

Every message names the result partition (and subpartition) concerned, so a task's
failure cause says which producer it could not read; a consumer's error also carries
that partition as data (`partition_id`), from which its TaskExecutor reports the
failure's kind and lost partitions (taskexecutor.task.TaskFailure). Messages are for
people: no decision reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskexecutor.network.partition import ResultPartitionID


class PartitionException(Exception):
    """Base of the data plane's partition errors. `partition_id`: the partition that
    could not be read; set where a consumer reads its inputs (the StreamTask locating a
    producer, the InputGate for whatever a channel raises), None elsewhere."""

    def __init__(self, message: str = "", partition_id: ResultPartitionID | None = None) -> None:
        super().__init__(message)
        self.partition_id = partition_id


class PartitionNotFound(PartitionException):
    """The partition was not registered at its TaskExecutor within the request timeout."""


class PartitionNotReady(PartitionException):
    """The partition exists but cannot be read yet: a blocking partition before its
    producer finished it (or, over Flight, a pipelined one that has no data yet)."""


class PartitionFailed(PartitionException):
    """The producer failed the partition, or the connection to its TaskExecutor broke;
    the message says which, and the producer's own message when it gave one."""


class PartitionReleased(PartitionException):
    """The partition, or one consumer's subpartition of it, was released: its data is
    gone. Raised to a producer blocked in emit() when its partition is released, and to
    a reader whose subpartition was released or which was closed meanwhile."""
