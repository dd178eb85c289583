"""Stale fencing tokens on every real endpoint, through the codec path: each call below
goes through a proxy of the caller's process, is encoded, decoded and checked at the
receiving process exactly as over gRPC (flinkyarn.rpc.service.handle_call), and carries
a token that is not the current one. Each is refused (the caller sees StaleCall, as it
would over gRPC), logged once by the receiving server, and changes nothing anywhere in
the cluster, then or after."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import msgspec
import pytest

from flinkyarn.gateways.job_master import (DisconnectTaskManager, JobMasterGateway,
                                           UpdateTaskExecutionState, TaskState,
                                           job_master_endpoint)
from flinkyarn.gateways.resource_manager import (DisconnectJobMaster, DisconnectTaskExecutor,
                                                 NotifySlotAvailable, ResourceManagerGateway)
from flinkyarn.gateways.task_executor import (AllocateSlot, CancelTask, DisconnectJobManager,
                                              DisconnectResourceManager, FreeSlot,
                                              ReleasePartitions, SubmitTask, TaskExecutorGateway)
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, InstanceID, JobID, JobMasterId,
                           ResourceID, ResourceManagerId, SlotID)
from flinkyarn.rpc.errors import StaleCall
from tests.harness import Cluster, ScriptedTask, gen_cluster, job_graph
from taskexecutor.task_executor import TaskExecutor
from yarn_am.jobmaster.job_master import JobMaster

TE1 = ResourceID("taskexecutor-1")
JOB = JobID("job")
OLD_JOB_MASTER = JobMasterId("a-jobmaster-of-before")
OLD_RESOURCE_MANAGER = ResourceManagerId("a-resourcemanager-of-before")
OLD_REGISTRATION = InstanceID("a-registration-of-before")


@dataclass(frozen=True)
class Running:
    """A job of one task on TE1 (which has a second, free slot), as the calls see it."""

    cluster: Cluster
    job_master: JobMaster
    task_executor: TaskExecutor
    task: ScriptedTask

    @property
    def allocation(self) -> AllocationID:
        return self.task.deployment.allocation_id


async def one_task_running(cluster: Cluster) -> Running:
    await cluster.submit(job_graph("job", ("work", 1)))
    [task] = cluster.tasks.running()
    return Running(cluster, cluster.job_master(JOB), cluster.task_executor(), task)


def state_of(cluster: Cluster) -> Any:
    """Everything a call could change, in every endpoint of the cluster."""
    rm, te, jm = cluster.resource_manager, cluster.task_executor(), cluster.job_master(JOB)
    return (
        te.rm_connection, sorted((job, c.job_master_id, c.registration_id)
                                 for job, c in te.job_connections.items()),
        dict(te.job_master_ids), te.slot_table.report(), sorted(te.tasks),
        [(t.attempt_id, t.state) for t in cluster.tasks.all],
        sorted((r.resource_id, r.instance_id) for r in rm.task_executors.values()),
        [rm.slot_manager.slots_of(rid) for rid in rm.task_executors],
        sorted((job, r.job_master_id) for job, r in rm.job_masters.items()),
        rm.slot_manager.pending_request_count(), sorted(cluster.driver.requested),
        sorted((r.resource_id, r.registration_id) for r in jm.task_managers.values()),
        {req: slot.allocation_id for req, slot in jm.slot_pool.assigned_slots().items()},
        jm.status, jm.resource_manager_id)


@dataclass(frozen=True)
class StaleCallCase:
    """`method` of `endpoint(run)` called by the process `caller` ("appmaster" or
    "taskexecutor": who makes that call in a cluster) with `request(run)`."""

    caller: str
    endpoint: Callable[[Running], tuple[str, str, type]]  # address, endpoint name, gateway
    method: str
    request: Callable[[Running], Any]
    refusal: Callable[[Running], str]  # what the receiving endpoint says


def at_task_executor(run: Running) -> tuple[str, str, type]:
    return run.task_executor.rpc.address, "taskexecutor", TaskExecutorGateway


def at_resource_manager(run: Running) -> tuple[str, str, type]:
    return run.cluster.appmaster.address, "resourcemanager", ResourceManagerGateway


def at_job_master(run: Running) -> tuple[str, str, type]:
    return run.cluster.appmaster.address, job_master_endpoint(JOB), JobMasterGateway


def stale_job_master_id(run: Running) -> str:
    return (f"stale JobMaster id: the call carries {OLD_JOB_MASTER!r}, current is "
            f"{run.job_master.job_master_id!r}")


def stale_resource_manager_id(run: Running) -> str:
    return (f"stale ResourceManager id: the call carries {OLD_RESOURCE_MANAGER!r}, current "
            f"is {run.cluster.resource_manager.resource_manager_id!r}")


CASES = {
    # A task of an old JobMaster of the job, for a slot the job holds.
    "submit_task": StaleCallCase(
        "appmaster", at_task_executor, "submit_task",
        lambda run: SubmitTask(OLD_JOB_MASTER, msgspec.structs.replace(
            run.task.deployment, attempt_id=ExecutionAttemptID("an-attempt-of-before"))),
        stale_job_master_id),
    "free_slot": StaleCallCase(
        "appmaster", at_task_executor, "free_slot",
        lambda run: FreeSlot(OLD_JOB_MASTER, run.allocation, "no longer needed"),
        stale_job_master_id),
    "cancel_task": StaleCallCase(
        "appmaster", at_task_executor, "cancel_task",
        lambda run: CancelTask(OLD_JOB_MASTER, run.task.attempt_id), stale_job_master_id),
    "release_partitions": StaleCallCase(
        "appmaster", at_task_executor, "release_partitions",
        lambda run: ReleasePartitions(OLD_JOB_MASTER, JOB), stale_job_master_id),
    # The free slot, for another job, from a ResourceManager of before.
    "allocate_slot": StaleCallCase(
        "appmaster", at_task_executor, "allocate_slot",
        lambda run: AllocateSlot(OLD_RESOURCE_MANAGER, SlotID(TE1, 1), JobID("another-job"),
                                 AllocationID("an-allocation-of-before"),
                                 run.task_executor.config.slot_profile,
                                 run.cluster.appmaster.address),
        stale_resource_manager_id),
    "disconnect_job_manager": StaleCallCase(
        "appmaster", at_task_executor, "disconnect_job_manager",
        lambda run: DisconnectJobManager(OLD_JOB_MASTER, JOB, "replaced"), stale_job_master_id),
    "disconnect_resource_manager": StaleCallCase(
        "appmaster", at_task_executor, "disconnect_resource_manager",
        lambda run: DisconnectResourceManager(OLD_RESOURCE_MANAGER, "heartbeat timed out"),
        stale_resource_manager_id),
    "disconnect_task_executor": StaleCallCase(
        "taskexecutor", at_resource_manager, "disconnect_task_executor",
        lambda run: DisconnectTaskExecutor(run.cluster.resource_manager.resource_manager_id,
                                           OLD_REGISTRATION, TE1, "fatal error"),
        lambda run: (f"stale instance id of TaskExecutor {TE1}: the call carries "
                     f"{OLD_REGISTRATION!r}, current is "
                     f"{run.task_executor.rm_connection.instance_id!r}")),
    "notify_slot_available": StaleCallCase(
        "taskexecutor", at_resource_manager, "notify_slot_available",
        lambda run: NotifySlotAvailable(OLD_REGISTRATION, SlotID(TE1, 0), run.allocation),
        lambda run: (f"stale TaskExecutor instance id: the call carries {OLD_REGISTRATION!r}, "
                     f"current is {run.task_executor.rm_connection.instance_id!r}")),
    "disconnect_job_master": StaleCallCase(
        "appmaster", at_resource_manager, "disconnect_job_master",
        lambda run: DisconnectJobMaster(JOB, OLD_JOB_MASTER, "job ended"), stale_job_master_id),
    "disconnect_task_manager": StaleCallCase(
        "taskexecutor", at_job_master, "disconnect_task_manager",
        lambda run: DisconnectTaskManager(run.job_master.job_master_id, TE1, "fatal error",
                                          registration_id=OLD_REGISTRATION),
        lambda run: (f"stale registration id of TaskExecutor {TE1}: the call carries "
                     f"{OLD_REGISTRATION!r}, current is "
                     f"{run.job_master.task_managers[TE1].registration_id!r}")),
    "update_task_execution_state": StaleCallCase(
        "taskexecutor", at_job_master, "update_task_execution_state",
        lambda run: UpdateTaskExecutionState(OLD_JOB_MASTER, run.task.attempt_id,
                                             TaskState.FAILED, "from before"),
        lambda run: (f"stale JobMaster id: the call carries {OLD_JOB_MASTER!r}, current is "
                     f"{run.job_master.job_master_id!r}")),
}


@pytest.mark.parametrize("name", list(CASES))
@gen_cluster(task_executors=1)
async def test_a_call_with_a_stale_token_is_refused_logged_and_changes_nothing(
        cluster: Cluster, name: str, caplog: pytest.LogCaptureFixture) -> None:
    case = CASES[name]
    run = await one_task_running(cluster)
    caller = cluster.appmaster if case.caller == "appmaster" else cluster.task_executors[TE1]
    address, endpoint, gateway = case.endpoint(run)
    proxy = caller.rpc.connect(address, endpoint, gateway)
    before = state_of(cluster)
    expected = case.refusal(run)

    with caplog.at_level(logging.INFO, logger="flinkyarn.rpc.service"):
        with pytest.raises(StaleCall) as refused:
            await getattr(proxy, case.method)(case.request(run))
        await cluster.settle()

    assert str(refused.value) == f"{endpoint}.{case.method} at {address}: {expected}"
    assert [r.getMessage() for r in caplog.records if r.name == "flinkyarn.rpc.service"] == [
        f"refused {endpoint}.{case.method}: {expected}"]
    assert state_of(cluster) == before
    await cluster.advance(5.0)  # nothing it set off comes later either
    assert state_of(cluster) == before
    assert run.task.state is TaskState.RUNNING


@gen_cluster(task_executors=1)
async def test_the_same_calls_with_the_current_tokens_are_applied(cluster: Cluster) -> None:
    """The counterpart: what makes the calls above stale is their token alone."""
    run = await one_task_running(cluster)
    jm, te = run.job_master, run.task_executor
    gateway = cluster.appmaster.rpc.connect(te.rpc.address, "taskexecutor", TaskExecutorGateway)
    profile = te.config.slot_profile

    await gateway.allocate_slot(AllocateSlot(
        cluster.resource_manager.resource_manager_id, SlotID(TE1, 1), JobID("another-job"),
        AllocationID("another-allocation"), profile, cluster.appmaster.address))
    assert te.slot_table.by_allocation(AllocationID("another-allocation")) is not None

    await gateway.free_slot(FreeSlot(jm.job_master_id, run.allocation, "no longer needed"))
    await cluster.settle()
    assert te.slot_table.by_allocation(run.allocation) is None
    assert run.task.state is TaskState.CANCELED  # its task went with its slot
