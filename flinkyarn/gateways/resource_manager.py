"""ResourceManagerGateway: registration of TaskExecutors and JobMasters, slot requests."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flinkyarn.gateways import Ack, callable_by
from flinkyarn.ids import (AllocationID, InstanceID, JobID, JobMasterId, ResourceID,
                           ResourceManagerId, SlotID)
from flinkyarn.resources import ResourceProfile
from flinkyarn.slots import SlotReport


class RegisterTaskExecutor(msgspec.Struct, frozen=True):
    resource_id: ResourceID
    address: str            # the TaskExecutor's RPC address, host:port
    slot_report: SlotReport
    total_resources: ResourceProfile
    # Set when the TaskExecutor runs in a YARN container (or a local process of the driver).
    worker_id: str | None = None
    data_address: str = ""  # its Arrow Flight data server, host:port
    metrics_address: str = ""  # its Prometheus endpoint, host:port ("": none)


class TaskExecutorRegistration(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    resource_manager_resource_id: ResourceID
    instance_id: InstanceID
    # On a secure cluster, the AppMaster's newest delegation tokens (Hadoop's token
    # storage format); empty while the application's own from YARN are the newest.
    delegation_tokens: bytes = b""


class RegisterJobMaster(msgspec.Struct, frozen=True):
    job_id: JobID
    job_master_id: JobMasterId
    job_master_resource_id: ResourceID
    address: str


class JobMasterRegistration(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    resource_manager_resource_id: ResourceID


class RequestSlot(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    job_master_id: JobMasterId
    job_id: JobID
    allocation_id: AllocationID
    profile: ResourceProfile
    job_master_address: str


class BlockTaskExecutors(msgspec.Struct, frozen=True):
    """The job's blocklist grew (yarn_am/jobmaster/blocklist.py): give the job no slot
    of these TaskExecutors for `duration` seconds."""

    resource_manager_id: ResourceManagerId
    job_master_id: JobMasterId
    job_id: JobID
    resource_ids: list[ResourceID]
    duration: float


class CancelSlotRequest(msgspec.Struct, frozen=True):
    resource_manager_id: ResourceManagerId
    allocation_id: AllocationID


class NotifySlotAvailable(msgspec.Struct, frozen=True):
    """A TaskExecutor freed the slot that allocation_id held."""

    instance_id: InstanceID
    slot_id: SlotID
    allocation_id: AllocationID


class DisconnectTaskExecutor(msgspec.Struct, frozen=True):
    """The TaskExecutor resource_id leaves (it fails fatally). Fenced by the
    ResourceManager it registered at and the InstanceID that registration got: a
    disconnect of a registration already replaced changes nothing."""

    resource_manager_id: ResourceManagerId
    instance_id: InstanceID
    resource_id: ResourceID
    cause: str


class DisconnectJobMaster(msgspec.Struct, frozen=True):
    job_id: JobID
    job_master_id: JobMasterId
    cause: str


class RequestApplicationTokens(msgspec.Struct, frozen=True):
    """A task of the TaskExecutor is about to submit a YARN application of its own (a
    PySpark script's Spark on YARN). That application needs delegation tokens of its
    own: YARN cancels an application's tokens when it ends, and the TaskExecutor's must
    outlive it."""

    resource_manager_id: ResourceManagerId
    resource_id: ResourceID
    purpose: str  # what they are for, for the AppMaster's log


class ApplicationTokens(msgspec.Struct, frozen=True):
    # Hadoop's token storage format; empty when the application's own tokens serve (those
    # from YARN, which it cancels only when the last application using them ends).
    tokens: bytes = b""


@callable_by(taskexecutor=frozenset({
    "register_task_executor", "notify_slot_available", "disconnect_task_executor",
    "request_application_tokens"}))
class ResourceManagerGateway(Protocol):
    async def register_task_executor(self, request: RegisterTaskExecutor) -> TaskExecutorRegistration:
        """Registers (or re-registers) a TaskExecutor; its previous slots are dropped first.
        Rejected (for good: it exits) unless `worker_id` is its resource id and names a
        worker this ResourceManager started that has not ended."""
        ...

    async def register_job_master(self, request: RegisterJobMaster) -> JobMasterRegistration:
        """Registers the JobMaster of a job. Contract (Flink's, with the Dispatcher as the
        job leader id service): refused (StaleCall) unless job_master_id is the job's
        current JobMaster, where the ResourceManager is told who that is; the same
        JobMaster registering again is idempotent (its record and slot requests stay);
        a new JobMaster of the job replaces the registration of the old one, whose
        connection is closed (its pending slot requests dropped, no more heartbeats),
        and the replacement is logged."""
        ...

    async def request_slot(self, request: RequestSlot) -> Ack:
        """Asks for a slot; answered later by the TaskExecutor's offer to the JobMaster,
        or by `slot_request_failed` on the JobMaster."""
        ...

    async def cancel_slot_request(self, request: CancelSlotRequest) -> Ack:
        ...

    async def block_task_executors(self, request: BlockTaskExecutors) -> Ack:
        """Refused (StaleCall) unless from this ResourceManager's registered JobMaster of
        the job; its blocks end with `duration` or when the JobMaster disconnects."""
        ...

    async def notify_slot_available(self, request: NotifySlotAvailable) -> Ack:
        ...

    async def disconnect_task_executor(self, request: DisconnectTaskExecutor) -> Ack:
        """Closes the TaskExecutor's registration; refused (StaleCall) unless the
        request names this ResourceManager and that registration's InstanceID."""
        ...

    async def disconnect_job_master(self, request: DisconnectJobMaster) -> Ack:
        """Closes the job's JobMaster registration; refused (StaleCall) unless
        job_master_id is the registered one's."""
        ...

    async def request_application_tokens(self, request: RequestApplicationTokens) -> ApplicationTokens:
        """New delegation tokens for a YARN application a task submits (from a keytab:
        takes a second or two); raises if they cannot be had."""
        ...
