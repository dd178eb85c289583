"""JobMasterGateway: TaskExecutors connect, offer slots, report task states and acknowledge
checkpoints."""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

from flinkyarn.checkpoints import TaskStateSnapshot
from flinkyarn.gateways import Ack, HeartbeatRequest, callable_by
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, IntermediateDataSetID,
                           InstanceID, IntermediateResultPartitionID, JobID, JobMasterId,
                           ResourceID, ResourceManagerId)
from flinkyarn.metrics import TaskIOMetrics
from flinkyarn.slots import SlotOffer


class TaskState(str, enum.Enum):
    """What a TaskExecutor reports of a task (a subset of the JobMaster's ExecutionState)."""

    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"


class FailureKind(str, enum.Enum):
    """What a task failure was, as its TaskExecutor tells from the exception.

    TASK: the task's own code or environment failed. PARTITION: reading an upstream
    result partition failed (a data-plane PartitionNotFound or PartitionFailed): the
    producer's data is lost or its TaskExecutor gone, so the producer must run again."""

    TASK = "task"
    PARTITION = "partition"


class RegisterTaskManager(msgspec.Struct, frozen=True):
    """A TaskExecutor connects to the JobMaster of a job it was given a slot for."""

    job_id: JobID
    resource_id: ResourceID
    address: str
    data_address: str = ""  # its Arrow Flight data server, host:port


class TaskManagerRegistration(msgspec.Struct, frozen=True):
    job_master_id: JobMasterId
    job_master_resource_id: ResourceID
    # This registration's handle: a new one each time the TaskExecutor registers here.
    registration_id: InstanceID


class OfferSlots(msgspec.Struct, frozen=True):
    job_master_id: JobMasterId
    resource_id: ResourceID
    offers: list[SlotOffer]


class AcceptedSlots(msgspec.Struct, frozen=True):
    offers: list[SlotOffer]


class UpdateTaskExecutionState(msgspec.Struct, frozen=True):
    """A task's new state. For FAILED: `error` is the cause for people, never parsed;
    `failure_kind` and `lost_partitions` (for PARTITION, the upstream partitions it
    could not read, when known) are what the JobMaster's failover decides on."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    state: TaskState
    error: str | None = None
    failure_kind: FailureKind = FailureKind.TASK
    lost_partitions: list[IntermediateResultPartitionID] = []
    metrics: TaskIOMetrics | None = None  # the task's final counts, with a final state


class AcknowledgeCheckpoint(msgspec.Struct, frozen=True):
    """A task's state for checkpoint `checkpoint_id` is written (its barrier passed on)."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    checkpoint_id: int
    snapshot: TaskStateSnapshot


class DeclineCheckpoint(msgspec.Struct, frozen=True):
    """A task could not take its part of checkpoint `checkpoint_id`; `reason` for people."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    checkpoint_id: int
    reason: str


class OutputChunk(msgspec.Struct, frozen=True):
    stream: str           # "stdout" or "stderr"
    text: str


class ReportTaskOutput(msgspec.Struct, frozen=True):
    """What a task printed since its last report (a PySpark driver's output), and the
    Spark application it runs, once known."""

    job_master_id: JobMasterId
    attempt_id: ExecutionAttemptID
    chunks: list[OutputChunk]
    spark_application: str | None = None
    spark_tracking_url: str | None = None


class SlotRequestFailed(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    allocation_id: AllocationID
    cause: str


class DisconnectTaskManager(msgspec.Struct, frozen=True):
    """The TaskExecutor resource_id is gone for this job: its slots are released, its
    tasks fail. Fenced by the JobMasterId the sender addresses, and by the sender's own
    token: the TaskExecutor (it fails fatally) gives `registration_id`, that of its
    registration here, so a disconnect of a registration already replaced changes
    nothing; the ResourceManager (the TaskExecutor's process or container ended, with
    every registration it had) gives `resource_manager_id`, its leader id."""

    job_master_id: JobMasterId
    resource_id: ResourceID
    cause: str
    registration_id: InstanceID | None = None
    resource_manager_id: ResourceManagerId | None = None


class RequestPartitionLocation(msgspec.Struct, frozen=True):
    """A consumer task asks where partition `partition_number` of a result is served."""

    job_master_id: JobMasterId
    result_id: IntermediateDataSetID
    partition_number: int


class PartitionLocationState(str, enum.Enum):
    """READY: served by the TaskExecutor resource_id at data_address; PENDING: its
    producer is not deployed yet, ask again; FAILED: its producer failed or was
    cancelled, or its TaskExecutor is gone with the data; `error` says why."""

    READY = "ready"
    PENDING = "pending"
    FAILED = "failed"


class PartitionLocation(msgspec.Struct, frozen=True):
    """Where a producer's partition is served; see PartitionLocationState."""

    state: PartitionLocationState
    resource_id: ResourceID | None = None
    data_address: str = ""
    error: str | None = None


@callable_by(taskexecutor=frozenset({
    "register_task_manager", "offer_slots", "update_task_execution_state", "report_task_output",
    "disconnect_task_manager", "request_partition_location", "acknowledge_checkpoint",
    "decline_checkpoint"}))
class JobMasterGateway(Protocol):
    async def register_task_manager(self, request: RegisterTaskManager) -> TaskManagerRegistration:
        ...

    async def offer_slots(self, request: OfferSlots) -> AcceptedSlots:
        ...

    async def update_task_execution_state(self, request: UpdateTaskExecutionState) -> Ack:
        ...

    async def slot_request_failed(self, request: SlotRequestFailed) -> Ack:
        ...

    async def report_task_output(self, request: ReportTaskOutput) -> Ack:
        ...

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> Ack:
        ...

    async def disconnect_task_manager(self, request: DisconnectTaskManager) -> Ack:
        ...

    async def request_partition_location(self, request: RequestPartitionLocation) -> PartitionLocation:
        ...

    async def acknowledge_checkpoint(self, request: AcknowledgeCheckpoint) -> Ack:
        ...

    async def decline_checkpoint(self, request: DeclineCheckpoint) -> Ack:
        ...


def job_master_endpoint(job_id: JobID) -> str:
    """The name of a job's JobMaster on the AppMaster's RpcService."""
    return f"jobmaster-{job_id}"
