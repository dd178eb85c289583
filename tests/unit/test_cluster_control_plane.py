"""A cluster's control plane, as a user of the Dispatcher's gateway sees it (what the REST
API shows): TaskExecutors registering with their slots, slots allocated to jobs, shared
by a slot sharing group and released, jobs scheduled, cancelled, failed and refused, and
idle TaskExecutors released, on an in-process cluster with a ManualClock (these were
tests/local/test_cluster.py's, on real processes with real sleeps).

Timing (the harness's defaults): heartbeat.interval 10 s, heartbeat.timeout 50 s,
resourcemanager.taskmanager-timeout 30 s; the cluster starts at t = 1000 s."""

from __future__ import annotations

import logging

import msgspec
import pytest

from flinkyarn.gateways import Ack
from flinkyarn.gateways.dispatcher import ClusterOverview, JobDetails, JobQuery
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.gateways.resource_manager import DisconnectTaskExecutor, ResourceManagerGateway
from flinkyarn.ids import InstanceID, ResourceID
from flinkyarn.jobgraph import (DistributionPattern, JobEdge, JobGraph, JobVertexID,
                                ResultPartitionType, ScheduleMode)
from flinkyarn.rpc.errors import MalformedMessage, StaleCall
from tests.harness import Cluster, gen_cluster, job_graph

TE1, TE2 = ResourceID("taskexecutor-1"), ResourceID("taskexecutor-2")
TIMEOUT = 50.0  # heartbeat.timeout
CHECK = 10.0    # a TaskExecutor checks its heartbeat timeouts this often


async def overview(cluster: Cluster) -> ClusterOverview:
    return await cluster.client.cluster_overview(Ack())


async def details(cluster: Cluster, job_id: str) -> JobDetails:
    return await cluster.client.job_details(JobQuery(job_id))


async def slots_of_job(cluster: Cluster, job_id: str) -> int:
    """The job's slots in the cluster's overview (the ResourceManager's view)."""
    return sum(1 for te in (await overview(cluster)).task_executors for s in te.slots
               if s.job_id == job_id)


def running(cluster: Cluster) -> list[tuple[str, str]]:
    return [(task.name, task.resource_id) for task in cluster.tasks.running()]


def edge(job: str, source: str, target: str, **kwargs: object) -> JobEdge:
    return JobEdge(JobVertexID(f"{job}-{source}"), JobVertexID(f"{job}-{target}"), **kwargs)


async def finish_all(cluster: Cluster) -> None:
    for task in cluster.tasks.running():
        task.finish()
    await cluster.settle()


@gen_cluster()
async def test_task_executors_register_with_their_slots_and_stop_watching_an_ended_job(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    job = await cluster.submit(job_graph("one", ("only", 1)))
    te = cluster.task_executor()
    [executor] = (await overview(cluster)).task_executors
    assert (executor.resource_id, executor.address) == (TE1, te.rpc.address)
    assert [(s.index, s.state, s.job_id) for s in executor.slots] == [
        (0, "allocated", job), (1, "free", None)]
    job_master = cluster.job_master(job).resource_id
    assert te._jm_heartbeats.is_monitored(job_master)

    await finish_all(cluster)
    assert (await details(cluster, job)).status == "FINISHED"
    # The job ended cleanly: its slot is free and its TaskExecutor no longer watches
    # its JobMaster, so no heartbeat timeout follows, however long it checks.
    assert not te._jm_heartbeats.is_monitored(job_master) and te.job_connections == {}
    [executor] = (await overview(cluster)).task_executors
    assert [(s.index, s.state) for s in executor.slots] == [(0, "free"), (1, "free")]
    with caplog.at_level(logging.INFO):
        await cluster.advance(TIMEOUT + 2 * CHECK)
    assert [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()] == []
    assert te.rm_connection is not None


@gen_cluster(task_executors=1)
async def test_a_cluster_started_for_a_job_has_its_first_task_executor_before_the_job(
        cluster: Cluster) -> None:
    # As the local target starts it: its job need not wait for a TaskExecutor's start.
    before = await overview(cluster)
    assert before.jobs == []
    assert [(te.resource_id, [s.index for s in te.slots]) for te in before.task_executors] == [
        (TE1, [0, 1])]
    job = await cluster.submit(job_graph("two", ("only", 2)))
    assert running(cluster) == [("only (1/2) #0", TE1), ("only (2/2) #0", TE1)]
    await finish_all(cluster)
    assert (await details(cluster, job)).status == "FINISHED"
    # Its slots served the job: no other TaskExecutor was started for it.
    assert cluster.driver.requested == [TE1]
    assert [te.resource_id for te in (await overview(cluster)).task_executors] == [TE1]


@gen_cluster()
async def test_lazy_from_sources_runs_a_blocking_consumer_once_its_producers_finished(
        cluster: Cluster) -> None:
    graph = msgspec.structs.replace(job_graph(
        "three", ("a", 3), ("b", 3), ("c", 2), edges=[
            edge("three", "a", "b", distribution=DistributionPattern.POINTWISE),
            edge("three", "b", "c", partition_type=ResultPartitionType.BLOCKING)]),
        schedule_mode=ScheduleMode.LAZY_FROM_SOURCES)
    job = await cluster.submit(graph)
    assert sorted(name for name, _ in running(cluster)) == [
        f"{v} ({i}/3) #0" for v in "ab" for i in (1, 2, 3)]
    assert cluster.tasks.of("c") == []

    for task in cluster.tasks.running("a") + cluster.tasks.running("b")[:2]:
        task.finish()
    await cluster.settle()
    assert cluster.tasks.of("c") == []  # one producer of its blocking input still runs
    await finish_all(cluster)
    assert sorted(name for name, _ in running(cluster)) == ["c (1/2) #0", "c (2/2) #0"]
    await finish_all(cluster)

    result = await details(cluster, job)
    assert result.status == "FINISHED", result.failure_cause
    assert {v.name: v.state_counts for v in result.vertices} == {
        "a": {"FINISHED": 3}, "b": {"FINISHED": 3}, "c": {"FINISHED": 2}}
    assert sorted(t.name for t in cluster.tasks.all if t.state is TaskState.FINISHED) == [
        f"{v} ({i + 1}/{n}) #0" for v, n in (("a", 3), ("b", 3), ("c", 2)) for i in range(n)]


def two_connected(name: str, sharing: str | None = "default") -> JobGraph:
    graph = job_graph(name, ("a", 2), ("b", 2), edges=[edge(name, "a", "b")])
    a, b = graph.vertices
    return msgspec.structs.replace(
        graph, vertices=[a, msgspec.structs.replace(b, slot_sharing_group=sharing)])


@gen_cluster()
async def test_vertices_in_one_slot_sharing_group_share_slots(cluster: Cluster) -> None:
    job = await cluster.submit(two_connected("shared"))
    # Four tasks of two vertices in two slots: one subtask of each vertex per slot.
    assert len(running(cluster)) == 4
    assert await slots_of_job(cluster, job) == 2
    by_slot = {}
    for task in cluster.tasks.running():
        by_slot.setdefault(task.deployment.allocation_id, []).append(task.vertex_name)
    assert sorted(by_slot.values()) == [["a", "b"], ["a", "b"]]
    assert cluster.driver.requested == [TE1]
    await finish_all(cluster)
    assert (await details(cluster, job)).status == "FINISHED"


@gen_cluster()
async def test_a_vertex_without_a_sharing_group_gets_slots_of_its_own(cluster: Cluster) -> None:
    job = await cluster.submit(two_connected("separate", sharing=None))
    assert len(running(cluster)) == 4
    assert await slots_of_job(cluster, job) == 4
    assert len({t.deployment.allocation_id for t in cluster.tasks.running()}) == 4
    assert len((await overview(cluster)).task_executors) == 2  # two slots each
    await finish_all(cluster)
    assert (await details(cluster, job)).status == "FINISHED"


@gen_cluster()
async def test_cancel_stops_every_task_ends_canceled_and_frees_the_jobs_slots(
        cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("to-cancel", ("waits", 3)))
    assert len(running(cluster)) == 3
    assert (await details(cluster, job)).status == "RUNNING"

    await cluster.client.cancel_job(JobQuery(job))
    await cluster.settle()  # no time passes

    assert (await details(cluster, job)).status == "CANCELED"
    assert [t.state for t in cluster.tasks.all] == [TaskState.CANCELED] * 3
    assert await slots_of_job(cluster, job) == 0
    assert all(te.slot_table.free_count() == 2 for te in
               (cluster.task_executor(rid) for rid in (TE1, TE2)))


@gen_cluster()
async def test_two_jobs_run_at_once(cluster: Cluster) -> None:
    ids = [await cluster.submit(job_graph(name, (name, 2))) for name in ("first", "second")]
    assert sorted(name for name, _ in running(cluster)) == [
        "first (1/2) #0", "first (2/2) #0", "second (1/2) #0", "second (2/2) #0"]
    assert {j.status for j in (await overview(cluster)).jobs} == {"RUNNING"}
    await finish_all(cluster)
    assert [(await details(cluster, j)).status for j in ids] == ["FINISHED", "FINISHED"]


@gen_cluster()
async def test_a_failing_task_fails_the_job_with_its_error(cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("fails", ("boom", 2), ("bystander", 1)))
    [boom, _] = cluster.tasks.running("boom")
    boom.fail("ValueError: no such column 'x'")
    await cluster.settle()

    result = await details(cluster, job)
    assert result.status == "FAILED"
    assert "boom (1/2)" in result.failure_cause
    assert "no such column 'x'" in result.failure_cause
    # The others were cancelled, not left running.
    assert sorted((t.name, t.state) for t in cluster.tasks.all) == [
        ("boom (1/2) #0", TaskState.FAILED), ("boom (2/2) #0", TaskState.CANCELED),
        ("bystander (1/1) #0", TaskState.CANCELED)]


@gen_cluster({"resourcemanager.taskmanager-timeout": "30 s"})
async def test_an_idle_task_executor_is_released_after_the_taskmanager_timeout(
        cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("short", ("only", 1)))
    process = cluster.task_executors[TE1]
    await finish_all(cluster)
    assert (await details(cluster, job)).status == "FINISHED"
    idle_since = cluster.now

    await cluster.advance_to(idle_since + 29.0)
    assert [te.resource_id for te in (await overview(cluster)).task_executors] == [TE1]
    assert cluster.driver.released == [] and process.exit is None
    await cluster.advance_to(idle_since + 30.0)
    assert (await overview(cluster)).task_executors == []
    assert cluster.driver.released == [(TE1, f"TaskExecutor {TE1} was idle for 30 s")]
    assert process.exit == "process exited with code 0"


@gen_cluster()
async def test_a_task_executor_that_loses_only_its_resource_manager_registers_again_and_keeps_its_tasks(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    rm = cluster.resource_manager
    job = await cluster.submit(job_graph("long", ("waits", 1)))
    te = cluster.task_executor()
    registration = te.rm_connection
    assert registration is not None
    # What the ResourceManager does on its side of a network partition: it forgets the
    # registration and stops sending heartbeats. A TaskExecutor's process says so.
    gateway = cluster.task_executors[TE1].rpc.connect(
        cluster.appmaster.address, "resourcemanager", ResourceManagerGateway)

    def disconnect(instance_id: str) -> DisconnectTaskExecutor:
        return DisconnectTaskExecutor(rm.resource_manager_id, InstanceID(instance_id), TE1,
                                      "partitioned")

    # A disconnect of a registration it does not have (any more) is refused, changing
    # nothing; the refusal is logged once, and no error.
    with caplog.at_level(logging.INFO):
        with pytest.raises(StaleCall, match=f"stale instance id of TaskExecutor {TE1}"):
            await gateway.disconnect_task_executor(disconnect("an-older-registration"))
        await cluster.settle()
    assert [te.resource_id for te in (await overview(cluster)).task_executors] == [TE1]
    assert te.rm_connection == registration
    assert len([r for r in caplog.records if r.getMessage().startswith(
        "refused resourcemanager.disconnect_task_executor")]) == 1
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

    await gateway.disconnect_task_executor(disconnect(registration.instance_id))
    await cluster.settle()
    assert (await overview(cluster)).task_executors == []
    dropped_at = cluster.now
    heard = te._rm_heartbeats.last_heard(registration.resource_id)

    # Its ResourceManager heartbeat times out; it registers again with a slot report
    # that still holds the job's slot, and the task never stops.
    await cluster.advance_to(heard + TIMEOUT)
    assert te.rm_connection == registration
    await cluster.advance(CHECK)
    assert te.rm_connection is not None and te.rm_connection != registration
    assert cluster.now - dropped_at <= TIMEOUT + CHECK
    assert [te.resource_id for te in (await overview(cluster)).task_executors] == [TE1]
    assert await slots_of_job(cluster, job) == 1
    [task] = cluster.tasks.all
    assert task.state is TaskState.RUNNING
    task.finish()
    await cluster.settle()
    result = await details(cluster, job)
    assert (result.status, result.restarts) == ("FINISHED", 0)
    assert await slots_of_job(cluster, job) == 0


@gen_cluster()
async def test_a_job_the_cluster_can_never_run_is_refused_at_submit(cluster: Cluster) -> None:
    """Too wide for pipeline.max-parallelism, or a pipelined region needing more slots
    than the ResourceManager may ever start: refused naming the bound, nothing started."""
    def wide(parallelism: int) -> JobGraph:
        return job_graph("wide", ("src", parallelism), ("sink", parallelism),
                         edges=[edge("wide", "src", "sink")])

    # Both answered INVALID_ARGUMENT (a caller sees MalformedMessage), as the REST API
    # answers them: with the message.
    with pytest.raises(MalformedMessage, match=r"'src': parallelism 40000 is above the maximum "
                                             r"parallelism 32768 \(pipeline.max-parallelism\)"):
        await cluster.submit(wide(40000))
    with pytest.raises(MalformedMessage, match=(
            r"job 'job wide' needs 17 slots at once \(its largest pipelined region\), more "
            r"than this cluster can ever offer: 16 \(8 TaskExecutors of 2 slots "
            r"\(taskmanager.numberOfTaskSlots\); resourcemanager.max-taskmanagers = 8\)")):
        await cluster.submit(wide(17))
    assert (await overview(cluster)) == ClusterOverview([], [])
    assert cluster.driver.requested == [] and cluster.tasks.all == []
