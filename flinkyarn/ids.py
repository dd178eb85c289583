"""Identifiers of the runtime, in Flink's vocabulary.

All are strings on the wire (hex of a random UUID unless said otherwise); the NewTypes
keep them apart in signatures and in msgspec validation of messages.
"""

from __future__ import annotations

import uuid
from typing import NewType

import msgspec

# A process offering resources (a TaskExecutor) or a master component instance.
ResourceID = NewType("ResourceID", str)
JobID = NewType("JobID", str)
JobVertexID = NewType("JobVertexID", str)
IntermediateDataSetID = NewType("IntermediateDataSetID", str)
# One allocation of one slot to one job; the fencing token of slot messages.
AllocationID = NewType("AllocationID", str)
# One attempt to run one subtask; the fencing token of task messages.
ExecutionAttemptID = NewType("ExecutionAttemptID", str)
# Leader ids: a new one for every (re)start of the component, fencing its calls.
ResourceManagerId = NewType("ResourceManagerId", str)
JobMasterId = NewType("JobMasterId", str)
# The handle of one registration of a TaskExecutor, at the ResourceManager or at a
# JobMaster: a new one for every registration, fencing the TaskExecutor's disconnect.
InstanceID = NewType("InstanceID", str)


def new_id() -> str:
    return uuid.uuid4().hex


def leader_id(attempt: int = 1) -> str:
    """A new leader id of a component of the AppMaster's attempt `attempt` (YARN's
    application attempt): `a<attempt>-<hex>`, so that a call fenced off as stale says
    which attempt it was meant for."""
    return f"a{attempt}-{new_id()}"


class SlotID(msgspec.Struct, frozen=True, order=True):
    """The slot_number-th slot of the TaskExecutor resource_id."""

    resource_id: ResourceID
    slot_number: int

    def __str__(self) -> str:
        return f"{self.resource_id}_{self.slot_number}"


class ExecutionVertexID(msgspec.Struct, frozen=True, order=True):
    """Subtask subtask_index of job vertex vertex_id."""

    vertex_id: JobVertexID
    subtask_index: int

    def __str__(self) -> str:
        return f"{self.vertex_id}#{self.subtask_index}"


class IntermediateResultPartitionID(msgspec.Struct, frozen=True, order=True):
    """Partition `partition_number` (its producer's subtask index) of intermediate
    result `result_id`, within one job."""

    result_id: IntermediateDataSetID
    partition_number: int

    def __str__(self) -> str:
        return f"{self.result_id}#{self.partition_number}"
