"""TaskExecutorGateway: slots given to jobs, tasks submitted and cancelled, heartbeats."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flinkyarn.checkpoints import TaskRestore
from flinkyarn.key_groups import DEFAULT_MAX_PARALLELISM
from flinkyarn.gateways import Ack, HeartbeatRequest
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, IntermediateDataSetID, JobID,
                           JobMasterId, JobVertexID, ResourceID, ResourceManagerId, SlotID)
from flinkyarn.jobgraph import ResultPartitionType
from flinkyarn.metrics import TaskIOMetrics
from flinkyarn.resources import ResourceProfile
from flinkyarn.slots import SlotReport


class AllocateSlot(msgspec.Struct, frozen=True):
    """The ResourceManager gives slot `slot_id` to the job; the TaskExecutor then connects
    to that job's JobMaster (if it has not yet) and offers the slot."""

    resource_manager_id: ResourceManagerId
    slot_id: SlotID
    job_id: JobID
    allocation_id: AllocationID
    profile: ResourceProfile
    job_master_address: str


class ConsumedPartition(msgspec.Struct, frozen=True):
    """Subpartition `subpartition_index` of partition `producer_subtask_index` of result
    `result_id`, which a task reads, with the JobMaster's ticket for it (security.
    partition_ticket), which the producer's TaskExecutor wants."""

    result_id: IntermediateDataSetID
    producer_vertex_id: JobVertexID
    producer_subtask_index: int
    partition_type: ResultPartitionType
    subpartition_index: int
    ticket: bytes = b""


class ProducedPartition(msgspec.Struct, frozen=True):
    """A partition a task writes, with one subpartition per consumer subtask it feeds."""

    result_id: IntermediateDataSetID
    partition_type: ResultPartitionType
    number_of_subpartitions: int
    consumer_vertex_id: JobVertexID


class TaskDeploymentDescriptor(msgspec.Struct, frozen=True):
    job_id: JobID
    attempt_id: ExecutionAttemptID
    vertex_id: JobVertexID
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_number: int
    allocation_id: AllocationID
    resource_id: ResourceID  # the TaskExecutor that holds the allocation
    invokable: bytes  # cloudpickled; unpickled only inside the TaskExecutor
    consumed_partitions: list[ConsumedPartition] = []
    produced_partitions: list[ProducedPartition] = []
    data_key: bytes = b""  # the job's, for a task that produces partitions: checks tickets
    checkpoint_dir: str = ""  # the job's checkpoints folder (flinkyarn/checkpoints.py), if any
    restore: TaskRestore | None = None  # the state to start from (a restart, a savepoint)
    max_parallelism: int = DEFAULT_MAX_PARALLELISM  # the job's key groups (flinkyarn/key_groups.py)


class SubmitTask(msgspec.Struct, frozen=True):
    job_master_id: JobMasterId
    deployment: TaskDeploymentDescriptor


class CancelTask(msgspec.Struct, frozen=True):
    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID


class TriggerCheckpoint(msgspec.Struct, frozen=True):
    """A source task puts barrier `checkpoint_id` into its outputs (after its snapshot)."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    checkpoint_id: int
    timestamp: int


class ConfirmCheckpoint(msgspec.Struct, frozen=True):
    """Checkpoint `checkpoint_id` completed: the task's operators may commit what it
    covers (Flink's notifyCheckpointComplete). `wait`: answer only once the task's
    operators took it, or the task ended (a stop-with-savepoint cancels the task next,
    and its sinks must have committed the savepoint's output first)."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    checkpoint_id: int
    wait: bool = False


class FreeSlot(msgspec.Struct, frozen=True):
    job_master_id: JobMasterId
    allocation_id: AllocationID
    cause: str


class AllocatedSlotReport(msgspec.Struct, frozen=True):
    """The TaskExecutor's answer to its JobMaster's heartbeat: the job's slots it holds,
    and the I/O metrics of the job's tasks running here (Flink's heartbeat payload)."""

    job_id: JobID
    allocation_ids: list[AllocationID] = []
    metrics: dict[ExecutionAttemptID, TaskIOMetrics] = {}


class JobHeartbeatRequest(msgspec.Struct, frozen=True):
    sender: str
    job_id: JobID


class DisconnectJobManager(msgspec.Struct, frozen=True):
    """The job's JobMaster dropped this TaskExecutor: the job's tasks stop, its slots and
    partitions go. Fenced by the JobMasterId this TaskExecutor registered with."""

    job_master_id: JobMasterId
    job_id: JobID
    cause: str


class DisconnectResourceManager(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    cause: str


class ReleasePartitions(msgspec.Struct, frozen=True):
    """The job ended: drop every result partition it produced on this TaskExecutor."""

    job_master_id: JobMasterId
    job_id: JobID


class UpdateDelegationTokens(msgspec.Struct, frozen=True):
    """The AppMaster's newest delegation tokens (Hadoop's token storage format): the
    TaskExecutor and what it starts from now on use them."""

    resource_manager_id: ResourceManagerId
    tokens: bytes


class TaskExecutorGateway(Protocol):
    async def allocate_slot(self, request: AllocateSlot) -> Ack:
        """Refused (RemoteError) when the slot is taken by another allocation."""
        ...

    async def submit_task(self, request: SubmitTask) -> Ack:
        ...

    async def cancel_task(self, request: CancelTask) -> Ack:
        ...

    async def trigger_checkpoint(self, request: TriggerCheckpoint) -> Ack:
        """Refused (NotFound) when the task does not run here."""
        ...

    async def confirm_checkpoint(self, request: ConfirmCheckpoint) -> Ack:
        ...

    async def free_slot(self, request: FreeSlot) -> Ack:
        ...

    async def release_partitions(self, request: ReleasePartitions) -> Ack:
        """Refused (StaleCall) unless job_master_id is that of the job's JobMaster this
        TaskExecutor last registered at (also after it gave the job's slots back)."""
        ...

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> SlotReport:
        ...

    async def heartbeat_from_job_master(self, request: JobHeartbeatRequest) -> AllocatedSlotReport:
        ...

    async def disconnect_job_manager(self, request: DisconnectJobManager) -> Ack:
        """Refused (StaleCall) unless job_master_id is that of the job's JobMaster this
        TaskExecutor last registered at."""
        ...

    async def disconnect_resource_manager(self, request: DisconnectResourceManager) -> Ack:
        ...

    async def update_delegation_tokens(self, request: UpdateDelegationTokens) -> Ack:
        """Refused (RemoteError) from a ResourceManager it is not registered at."""
        ...
