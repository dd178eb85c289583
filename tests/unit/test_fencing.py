"""Fencing of the disconnects and of JobMaster registration, per endpoint, in-process.

Each endpoint runs on the test's loop with an RpcService stand-in whose `connect` hands
out the test's fakes of its peers (they satisfy the same gateways), so the handlers are
called as the RpcService would call them, without a network. A stale call raises
StaleCall (the RpcService answers it with FAILED_PRECONDITION and logs it once) and
changes nothing; a current one is applied."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
import pytest

from flinkyarn.clock import ManualClock
from flinkyarn.gateways import ACK, Ack, HeartbeatRequest
from flinkyarn.gateways.job_master import (AcceptedSlots, DisconnectTaskManager, OfferSlots,
                                           RegisterTaskManager, TaskManagerRegistration)
from flinkyarn.gateways.resource_manager import (DisconnectTaskExecutor, JobMasterRegistration,
                                                 NotifySlotAvailable, RegisterJobMaster,
                                                 RegisterTaskExecutor, RequestSlot,
                                                 TaskExecutorRegistration)
from flinkyarn.gateways.task_executor import (AllocateSlot, AllocatedSlotReport,
                                              DisconnectJobManager, DisconnectResourceManager,
                                              FreeSlot, JobHeartbeatRequest, ReleasePartitions)
from flinkyarn.ids import (AllocationID, InstanceID, JobID, JobMasterId, ResourceID,
                           ResourceManagerId, SlotID)
from flinkyarn.jobgraph import JobGraph, JobVertex
from flinkyarn.options import HeartbeatConfig, RegistrationConfig, RestartStrategyConfig
from flinkyarn.resources import ResourceProfile
from flinkyarn.rpc.errors import Rejected, StaleCall
from flinkyarn.slots import SlotReport, SlotStatus
from taskexecutor.task_executor import TaskExecutor, TaskExecutorConfig
from yarn_am.jobmaster.job_master import JobMaster, JobMasterConfig
from yarn_am.resourcemanager.resource_manager import ResourceManager, ResourceManagerConfig
from yarn_am.resourcemanager.slot_manager import WorkerSpec

# Long enough that no heartbeat or timeout happens while a test runs.
QUIET = HeartbeatConfig(interval=3600.0, timeout=7200.0)
PROFILE = ResourceProfile(1.0, 512)
JOB = JobID("job-1")
TE = ResourceID("te-1")


class InProcessRpc:
    """What an endpoint uses of its RpcService: `connect` returns the test's fake of
    the endpoint named there (by endpoint name), not a network proxy."""

    address = "in-process:1"

    def __init__(self, **fakes: object) -> None:
        self.fakes = fakes
        self.connected: list[tuple[str, str]] = []

    def register(self, name: str, protocol: type, endpoint: object) -> None:
        pass

    def unregister(self, name: str) -> None:
        pass

    def connect(self, address: str, endpoint: str, protocol: type):
        self.connected.append((address, endpoint))
        return self.fakes[endpoint.split("-", 1)[0]]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def of(self, kind: type) -> list:
        return [call for call in self.calls if isinstance(call, kind)]


class FakeJobMaster(Recorder):
    """A JobMaster as the ResourceManager and a TaskExecutor see it."""

    def __init__(self) -> None:
        super().__init__()
        self.job_master_id = JobMasterId("jm-current")
        self.registration_id = InstanceID("tm-registration-1")

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> Ack:
        return ACK

    async def disconnect_task_manager(self, request: DisconnectTaskManager) -> Ack:
        self.calls.append(request)
        return ACK

    async def register_task_manager(self, request: RegisterTaskManager) -> TaskManagerRegistration:
        self.calls.append(request)
        return TaskManagerRegistration(self.job_master_id, ResourceID("jm-resource"),
                                       self.registration_id)

    async def offer_slots(self, request: OfferSlots) -> AcceptedSlots:
        self.calls.append(request)
        return AcceptedSlots(request.offers)


class FakeTaskExecutor(Recorder):
    """A TaskExecutor as the ResourceManager and a JobMaster see it."""

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> SlotReport:
        return SlotReport()

    async def heartbeat_from_job_master(self, request: JobHeartbeatRequest) -> AllocatedSlotReport:
        return AllocatedSlotReport(request.job_id)

    async def disconnect_resource_manager(self, request: DisconnectResourceManager) -> Ack:
        self.calls.append(request)
        return ACK

    async def disconnect_job_manager(self, request: DisconnectJobManager) -> Ack:
        self.calls.append(request)
        return ACK


class FakeResourceManager(Recorder):
    """A ResourceManager as a JobMaster and a TaskExecutor see it."""

    def __init__(self) -> None:
        super().__init__()
        self.resource_manager_id = ResourceManagerId("rm-current")
        self.instance_id = InstanceID("te-instance-1")

    async def register_job_master(self, request: RegisterJobMaster) -> JobMasterRegistration:
        return JobMasterRegistration(self.resource_manager_id, ResourceID("rm-resource"))

    async def request_slot(self, request: RequestSlot) -> Ack:
        return ACK

    async def register_task_executor(self, request: RegisterTaskExecutor, *,
                                     timeout: float | None = None) -> TaskExecutorRegistration:
        return TaskExecutorRegistration(self.resource_manager_id, ResourceID("rm-resource"),
                                        self.instance_id)

    async def notify_slot_available(self, request: NotifySlotAvailable) -> Ack:
        self.calls.append(request)
        return ACK

    async def disconnect_task_executor(self, request: DisconnectTaskExecutor) -> Ack:
        self.calls.append(request)
        return ACK


class FakeDriver:
    def __init__(self, workers: list[str] = ()) -> None:
        self.workers = list(workers)

    async def initialize(self, handler, resource_manager_address, spawn) -> list[str]:
        return self.workers

    def request_worker(self, spec: WorkerSpec) -> str:
        return "requested-worker"

    def release_worker(self, worker_id: str, cause: str) -> None:
        pass

    async def max_workers(self, spec: WorkerSpec):
        return None

    def location(self, worker_id: str) -> None:
        return None

    async def explain_wait(self, worker_ids: list[str]) -> None:
        return None

    async def terminate(self) -> None:
        pass


@contextlib.asynccontextmanager
async def running(endpoint):
    task = asyncio.create_task(endpoint.run())
    await endpoint.running.wait()
    try:
        yield endpoint
    finally:
        endpoint.stop()
        await task


async def until(predicate, what: str) -> None:
    """Lets the endpoint's tasks run until `predicate()` holds (a generous bound)."""
    try:
        async with asyncio.timeout(10):
            while not predicate():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def run(scenario) -> None:
    asyncio.run(scenario())


# ------------------------------------------------------------------ ResourceManager


def resource_manager(workers: list[str] = (TE,)) -> tuple[ResourceManager, FakeTaskExecutor, FakeJobMaster]:
    """A ResourceManager whose driver started `workers` (TE's, by default)."""
    te, jm = FakeTaskExecutor(), FakeJobMaster()
    config = ResourceManagerConfig(WorkerSpec(2, PROFILE), QUIET, taskmanager_timeout=3600.0,
                                   slot_request_timeout=3600.0, max_workers=4)
    rpc = InProcessRpc(taskexecutor=te, jobmaster=jm)
    return ResourceManager(rpc, config, FakeDriver(workers), ManualClock()), te, jm


def registration_of(resource_id: ResourceID = TE) -> RegisterTaskExecutor:
    slots = [SlotStatus(SlotID(resource_id, i), PROFILE) for i in range(2)]
    return RegisterTaskExecutor(resource_id, "te-address", SlotReport(slots),
                                ResourceProfile(2.0, 1024), worker_id=resource_id)


def test_a_task_executors_stale_disconnect_at_the_resource_manager_changes_nothing():
    async def scenario():
        rm, _te, _jm = resource_manager()
        async with running(rm):
            first = await rm.register_task_executor(registration_of())
            current = await rm.register_task_executor(registration_of())  # registers again
            assert first.instance_id != current.instance_id

            stale = [DisconnectTaskExecutor(rm.resource_manager_id, first.instance_id, TE, "old"),
                     DisconnectTaskExecutor(ResourceManagerId("rm-before"), current.instance_id,
                                            TE, "from before a restart"),
                     DisconnectTaskExecutor(rm.resource_manager_id, InstanceID(""), TE, "forged")]
            for request in stale:
                with pytest.raises(StaleCall):
                    await rm.disconnect_task_executor(request)
            assert rm.task_executors[TE].instance_id == current.instance_id
            assert len(rm.slot_manager.slots_of(TE)) == 2
    run(scenario)


def test_a_task_executors_current_disconnect_closes_its_registration_at_the_resource_manager():
    async def scenario():
        rm, _te, _jm = resource_manager()
        async with running(rm):
            registration = await rm.register_task_executor(registration_of())
            assert await rm.disconnect_task_executor(DisconnectTaskExecutor(
                registration.resource_manager_id, registration.instance_id, TE, "fatal")) == ACK
            assert TE not in rm.task_executors
            assert rm.slot_manager.slots_of(TE) == []
            # Gone already: a second one is stale too.
            with pytest.raises(StaleCall):
                await rm.disconnect_task_executor(DisconnectTaskExecutor(
                    registration.resource_manager_id, registration.instance_id, TE, "again"))
    run(scenario)


def test_only_a_running_worker_of_the_resource_managers_own_registers():
    """Flink's registration rejection: a TaskExecutor no running worker stands for (its
    container ended, or the driver never started it) is refused for good, and nothing
    of it is registered; one naming another worker than itself too."""
    async def scenario():
        rm, _te, _jm = resource_manager(workers=[TE])
        async with running(rm):
            stranger = ResourceID("te-stranger")
            for refused in (registration_of(stranger),
                            msgspec.structs.replace(registration_of(stranger), worker_id=TE)):
                with pytest.raises(Rejected, match="not a running worker"):
                    await rm.register_task_executor(refused)
            assert rm.task_executors == {} and rm.slot_manager.slots_of(stranger) == []
            await rm.register_task_executor(registration_of())
            assert list(rm.task_executors) == [TE]
    run(scenario)


def test_a_worker_that_ended_registered_is_asked_to_reconnect_and_rejected_when_it_does():
    """A TaskExecutor that outlives its container (its launch script killed): the
    ResourceManager drops it and asks it to reconnect, so that it learns at once, from
    the rejection of its new registration, that it must exit."""
    async def scenario():
        rm, te, _jm = resource_manager(workers=[TE])
        async with running(rm):
            await rm.register_task_executor(registration_of())
            rm.on_worker_terminated(TE, "container FAILED: exit code 137")
            await until(lambda: te.of(DisconnectResourceManager), "the TaskExecutor asked")
            [asked] = te.of(DisconnectResourceManager)
            assert asked.resource_manager_id == rm.resource_manager_id
            with pytest.raises(Rejected):
                await rm.register_task_executor(registration_of())
            assert rm.task_executors == {} and rm.slot_manager.slots_of(TE) == []
    run(scenario)


def register_job_master(job_master_id: str, job_id: JobID = JOB) -> RegisterJobMaster:
    return RegisterJobMaster(job_id, JobMasterId(job_master_id),
                             ResourceID(f"jm-resource-{job_master_id}"), "jm-address")


def request_slot(rm: ResourceManager, job_master_id: str, allocation_id: str) -> RequestSlot:
    return RequestSlot(rm.resource_manager_id, JobMasterId(job_master_id), JOB,
                       AllocationID(allocation_id), PROFILE, "jm-address")


def test_the_same_job_master_registering_again_is_idempotent(caplog):
    async def scenario():
        rm, _te, _jm = resource_manager()
        async with running(rm):
            await rm.register_job_master(register_job_master("jm-1"))
            record = rm.job_masters[JOB]
            await rm.request_slot(request_slot(rm, "jm-1", "a1"))

            with caplog.at_level(logging.INFO, logger="yarn_am.resourcemanager.resource_manager"):
                answer = await rm.register_job_master(register_job_master("jm-1"))

            assert answer.resource_manager_id == rm.resource_manager_id
            assert rm.job_masters[JOB] is record
            assert rm.slot_manager.pending_request_count() == 1  # its request stays
            assert "JobMaster jm-1 of job job-1 registers again" in caplog.text
    run(scenario)


def test_a_new_job_master_of_the_job_replaces_the_old_registration(caplog):
    async def scenario():
        rm, _te, _jm = resource_manager()
        async with running(rm):
            await rm.register_job_master(register_job_master("jm-1"))
            await rm.request_slot(request_slot(rm, "jm-1", "a1"))

            with caplog.at_level(logging.INFO, logger="yarn_am.resourcemanager.resource_manager"):
                await rm.register_job_master(register_job_master("jm-2"))

            assert rm.job_masters[JOB].job_master_id == "jm-2"
            assert "JobMaster jm-2 of job job-1 replaces JobMaster jm-1" in caplog.text
            # The old one's connection is closed: its requests dropped, its calls stale.
            assert rm.slot_manager.pending_request_count() == 0
            assert not rm._jm_heartbeats.is_monitored(ResourceID("jm-resource-jm-1"))
            with pytest.raises(StaleCall):
                await rm.request_slot(request_slot(rm, "jm-1", "a2"))
            await rm.request_slot(request_slot(rm, "jm-2", "a3"))
            assert rm.slot_manager.pending_request_count() == 1
    run(scenario)


def test_with_a_job_leader_id_service_only_the_jobs_current_job_master_registers():
    async def scenario():
        rm, _te, _jm = resource_manager()
        leaders = {JOB: JobMasterId("jm-2")}
        rm.job_leader_id = leaders.get
        async with running(rm):
            await rm.register_job_master(register_job_master("jm-2"))
            for stale in (register_job_master("jm-1"),  # an old JobMaster of the job
                          register_job_master("jm-9", JobID("job-unknown"))):
                with pytest.raises(StaleCall, match="JobMaster id of job"):
                    await rm.register_job_master(stale)
            assert list(rm.job_masters) == [JOB]
            assert rm.job_masters[JOB].job_master_id == "jm-2"
    run(scenario)


def test_the_resource_manager_tells_job_masters_of_an_ended_worker_with_its_tokens():
    async def scenario():
        rm, _te, jm = resource_manager(workers=[TE])
        async with running(rm):
            await rm.register_job_master(register_job_master("jm-1"))
            await rm.register_task_executor(registration_of())
            rm.on_worker_terminated(TE, "exited with code 1")
            await until(lambda: jm.of(DisconnectTaskManager), "the JobMaster told")
            [told] = jm.of(DisconnectTaskManager)
            assert (told.job_master_id, told.resource_id, told.resource_manager_id) == \
                ("jm-1", TE, rm.resource_manager_id)
    run(scenario)


# ------------------------------------------------------------------------ JobMaster


def job_master() -> tuple[JobMaster, FakeResourceManager, FakeTaskExecutor]:
    rm, te = FakeResourceManager(), FakeTaskExecutor()
    graph = JobGraph(JOB, "one task", [JobVertex("v", "vertex", 1, b"never unpickled here")])
    config = JobMasterConfig(QUIET, RegistrationConfig(0.01, 0.1, 0.1, 60.0),
                             slot_idle_timeout=3600.0, slot_request_timeout=3600.0,
                             failover_strategy="full", restart_strategy=RestartStrategyConfig())
    rpc = InProcessRpc(resourcemanager=rm, taskexecutor=te)
    return JobMaster(rpc, graph, "rm-address", config, on_terminated=lambda result: None,
                     clock=ManualClock()), rm, te


def register_task_manager() -> RegisterTaskManager:
    return RegisterTaskManager(JOB, TE, "te-address")


def test_a_stale_disconnect_of_a_task_executor_at_the_job_master_changes_nothing():
    async def scenario():
        jm, rm, te = job_master()
        async with running(jm):
            await until(lambda: jm.resource_manager_id is not None, "registered at the RM")
            first = await jm.register_task_manager(register_task_manager())
            current = await jm.register_task_manager(register_task_manager())  # again
            assert first.registration_id != current.registration_id

            stale = [
                # From the registration it replaced.
                DisconnectTaskManager(jm.job_master_id, TE, "old", registration_id=first.registration_id),
                # For another JobMaster of the job.
                DisconnectTaskManager(JobMasterId("jm-before"), TE, "other",
                                      registration_id=current.registration_id),
                # With no token of its sender at all.
                DisconnectTaskManager(jm.job_master_id, TE, "forged"),
                # From a ResourceManager this JobMaster is not registered at.
                DisconnectTaskManager(jm.job_master_id, TE, "old RM",
                                      resource_manager_id=ResourceManagerId("rm-before")),
            ]
            for request in stale:
                with pytest.raises(StaleCall):
                    await jm.disconnect_task_manager(request)
            assert jm.task_managers[TE].registration_id == current.registration_id
            assert jm._tm_heartbeats.is_monitored(TE)
            assert te.of(DisconnectJobManager) == []
    run(scenario)


def test_a_task_executors_current_disconnect_at_the_job_master_drops_it():
    async def scenario():
        jm, rm, te = job_master()
        async with running(jm):
            await until(lambda: jm.resource_manager_id is not None, "registered at the RM")
            registration = await jm.register_task_manager(register_task_manager())
            assert await jm.disconnect_task_manager(DisconnectTaskManager(
                registration.job_master_id, TE, "fatal",
                registration_id=registration.registration_id)) == ACK
            assert TE not in jm.task_managers
            await until(lambda: te.of(DisconnectJobManager), "the TaskExecutor told")
            assert te.of(DisconnectJobManager) == [
                DisconnectJobManager(jm.job_master_id, JOB, "fatal")]
    run(scenario)


def test_the_resource_managers_disconnect_of_an_ended_task_executor_drops_it():
    async def scenario():
        jm, rm, te = job_master()
        async with running(jm):
            await until(lambda: jm.resource_manager_id is not None, "registered at the RM")
            await jm.register_task_manager(register_task_manager())
            assert await jm.disconnect_task_manager(DisconnectTaskManager(
                jm.job_master_id, TE, "process ended",
                resource_manager_id=rm.resource_manager_id)) == ACK
            assert TE not in jm.task_managers
    run(scenario)


# --------------------------------------------------------------------- TaskExecutor


def task_executor() -> tuple[TaskExecutor, FakeResourceManager, FakeJobMaster]:
    rm, jm = FakeResourceManager(), FakeJobMaster()
    config = TaskExecutorConfig(2, ResourceProfile(2.0, 1024), QUIET,
                                RegistrationConfig(0.01, 0.1, 0.1, 60.0))
    rpc = InProcessRpc(resourcemanager=rm, jobmaster=jm)
    return TaskExecutor(rpc, TE, "rm-address", config, clock=ManualClock()), rm, jm


async def with_a_slot_of_the_job(executor: TaskExecutor, rm: FakeResourceManager) -> AllocationID:
    await until(executor.registered.is_set, "registered at the ResourceManager")
    allocation = AllocationID("a1")
    await executor.allocate_slot(AllocateSlot(rm.resource_manager_id, SlotID(TE, 0), JOB,
                                              allocation, PROFILE, "jm-address"))
    await until(lambda: JOB in executor.job_connections and
                executor.slot_table.by_allocation(allocation).state.value == "active",
                "the slot offered and accepted")
    return allocation


def test_a_stale_disconnect_of_a_job_manager_at_the_task_executor_changes_nothing():
    async def scenario():
        executor, rm, jm = task_executor()
        async with running(executor):
            allocation = await with_a_slot_of_the_job(executor, rm)
            with pytest.raises(StaleCall):
                await executor.disconnect_job_manager(DisconnectJobManager(
                    JobMasterId("jm-before"), JOB, "an old JobMaster of the job"))
            assert executor.job_connections[JOB].job_master_id == jm.job_master_id
            assert executor.slot_table.by_allocation(allocation) is not None
    run(scenario)


def test_a_current_disconnect_of_a_job_manager_at_the_task_executor_frees_the_jobs_slots():
    async def scenario():
        executor, rm, jm = task_executor()
        async with running(executor):
            allocation = await with_a_slot_of_the_job(executor, rm)
            assert await executor.disconnect_job_manager(DisconnectJobManager(
                jm.job_master_id, JOB, "TaskExecutor lost")) == ACK
            assert JOB not in executor.job_connections
            assert executor.slot_table.by_allocation(allocation) is None
            assert [n.allocation_id for n in rm.of(NotifySlotAvailable)] == [allocation]
    run(scenario)


def test_release_partitions_is_fenced_also_after_the_jobs_slots_are_given_back():
    async def scenario():
        executor, rm, jm = task_executor()
        async with running(executor):
            allocation = await with_a_slot_of_the_job(executor, rm)
            await executor.free_slot(FreeSlot(jm.job_master_id, allocation, "idle"))
            assert JOB not in executor.job_connections  # its partitions may still be read

            with pytest.raises(StaleCall):
                await executor.release_partitions(ReleasePartitions(JobMasterId("jm-before"), JOB))
            assert JOB in executor.job_master_ids
            assert await executor.release_partitions(ReleasePartitions(jm.job_master_id, JOB)) == ACK
            assert JOB not in executor.job_master_ids
    run(scenario)


def test_a_failing_task_executor_says_goodbye_with_its_registrations_tokens():
    async def scenario():
        executor, rm, jm = task_executor()
        task = asyncio.create_task(executor.run())
        await executor.running.wait()
        await with_a_slot_of_the_job(executor, rm)
        executor.fail_fatally("out of memory")
        await task  # it stops itself once it has said goodbye
        [to_jm] = jm.of(DisconnectTaskManager)
        assert (to_jm.job_master_id, to_jm.resource_id, to_jm.registration_id) == \
            (jm.job_master_id, TE, jm.registration_id)
        [to_rm] = rm.of(DisconnectTaskExecutor)
        assert (to_rm.resource_manager_id, to_rm.instance_id, to_rm.resource_id) == \
            (rm.resource_manager_id, rm.instance_id, TE)
    run(scenario)
