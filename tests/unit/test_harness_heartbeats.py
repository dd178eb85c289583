"""Heartbeat timeouts and their consequences (seeds/flink-heartbeat-mechanism.txt, 3.1 to
3.3), exactly, on an in-process cluster whose ManualClock every periodic task follows:
at heartbeat.timeout after the last heartbeat nothing has happened yet (the manager
declares a target dead only when it has been silent for longer), one housekeeping tick
later every consequence has.

Timing (the harness's defaults): heartbeat.interval 10 s, heartbeat.timeout 50 s; the
ResourceManager and the JobMasters check their timeouts every second, TaskExecutors
every 10 s. The cluster starts at t = 1000 s; a job submitted then is heartbeaten at
1010, 1020, ..."""

from __future__ import annotations

import pytest

from flinkyarn import hadoop
from flinkyarn.gateways.dispatcher import JobQuery
from flinkyarn.gateways.job_master import ReportTaskOutput, TaskState, job_master_endpoint
from flinkyarn.ids import ResourceID
from tests.harness import BlockedCall, Cluster, gen_cluster, job_graph

TIMEOUT = 50.0
TICK = 1.0  # the ResourceManager's and the JobMaster's housekeeping
TE1, TE2 = ResourceID("taskexecutor-1"), ResourceID("taskexecutor-2")
RESTARTS = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "2",
            "restart-strategy.fixed-delay.delay": "1 s"}


def slots_at_resource_manager(cluster: Cluster, resource_id: str) -> list[tuple[str, str | None]]:
    return [(slot.state, slot.job_id)
            for slot in cluster.resource_manager.slot_manager.slots_of(ResourceID(resource_id))]


def running(cluster: Cluster) -> list[tuple[str, str]]:
    return [(task.name, task.resource_id) for task in cluster.tasks.running()]


@gen_cluster(task_executors=1)
async def test_a_task_executor_silent_at_the_resource_manager_loses_its_slots_there_and_registers_again(
        cluster: Cluster) -> None:
    rm = cluster.resource_manager
    job = await cluster.submit(job_graph("job", ("work", 2)))
    te = cluster.task_executor()
    await cluster.advance(25.0)  # heartbeats at 1010 and 1020 answered
    registration = te.rm_connection
    assert registration is not None
    allocations = sorted(slot.allocation_id for slot in rm.slot_manager.slots_of(TE1))
    # The ResourceManager's heartbeats no longer reach it; its re-registration waits.
    cluster.network.partition(address=te.rpc.address, method="heartbeat_from_resource_manager")
    registering = cluster.network.partition(caller=te.rpc.address,
                                            method="register_task_executor")
    heard = rm._te_heartbeats.last_heard(TE1)
    assert heard == 1020.0

    await cluster.advance_to(heard + TIMEOUT)
    assert rm.task_executors[TE1].instance_id == registration.instance_id
    assert slots_at_resource_manager(cluster, TE1) == [("allocated", job)] * 2
    assert cluster.network.calls_to("disconnect_resource_manager") == []

    await cluster.advance(TICK)
    # Closed at the ResourceManager: its slots leave the SlotManager, it is asked to
    # reconnect (it does: it is alive), and nothing else happens to it.
    assert TE1 not in rm.task_executors
    assert slots_at_resource_manager(cluster, TE1) == []
    assert not rm._te_heartbeats.is_monitored(TE1)
    [told] = cluster.network.calls_to("disconnect_resource_manager")
    assert (told.request.resource_manager_id, told.request.cause, told.error) == \
        (rm.resource_manager_id, "heartbeat timed out", None)
    assert te.rm_connection is None
    # A TaskExecutor that lost only its ResourceManager connection keeps its tasks: the
    # JobMaster is not told, the worker is not released.
    assert cluster.network.calls_to("disconnect_task_manager") == []
    assert running(cluster) == [("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]
    assert cluster.driver.released == []

    registering.heal()
    await cluster.settle()
    # Registered again: a new registration, its slots reported again as the job's.
    assert te.rm_connection is not None
    assert te.rm_connection.instance_id != registration.instance_id
    assert rm.task_executors[TE1].instance_id == te.rm_connection.instance_id
    assert slots_at_resource_manager(cluster, TE1) == [("allocated", job)] * 2
    assert sorted(slot.allocation_id for slot in rm.slot_manager.slots_of(TE1)) == allocations
    assert cluster.job_master(job).status.value == "RUNNING"


@gen_cluster(task_executors=1, conf={"resourcemanager.max-taskmanagers": "2"})
async def test_a_frozen_task_executor_is_declared_dead_by_its_job_master_and_the_job_fails_over(
        cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("job", ("work", 2), configuration=RESTARTS))
    jm, rm = cluster.job_master(job), cluster.resource_manager
    await cluster.advance(25.0)
    frozen = cluster.task_executors[TE1]
    frozen.freeze()
    heard = jm._tm_heartbeats.last_heard(TE1)
    assert heard == 1020.0

    await cluster.advance_to(heard + TIMEOUT)
    assert TE1 in jm.task_managers and TE1 in rm.task_executors
    assert running(cluster) == [("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]

    await cluster.advance(TICK)
    # The JobMaster drops it and fails its tasks (their restart waits the 1 s delay); the
    # ResourceManager, which heard it last at the same time, drops its slots.
    assert TE1 not in jm.task_managers
    assert not jm.slot_pool.assigned_slots()
    assert TE1 not in rm.task_executors and slots_at_resource_manager(cluster, TE1) == []
    assert running(cluster) == [("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]  # frozen

    await cluster.advance(1.0)
    # Restarted on a new worker, which the SlotManager asked the driver for.
    assert cluster.driver.requested == [TE1, TE2]
    assert running(cluster)[-2:] == [("work (1/2) #1", TE2), ("work (2/2) #1", TE2)]

    frozen.thaw()
    await cluster.settle()
    # Thawed, it gets what was said to it meanwhile: the JobMaster dropped it (its old
    # tasks stop, their slots go) and the ResourceManager asks it to register again.
    assert [task.state for task in cluster.tasks.of("work")[:2]] == [TaskState.CANCELED] * 2
    assert slots_at_resource_manager(cluster, TE1) == [("free", None)] * 2

    for task in cluster.tasks.running():
        task.finish()
    await cluster.settle()
    details = await cluster.client.job_details(JobQuery(job))
    assert (details.status, details.restarts) == ("FINISHED", 2)
    assert [restart.cause for restart in details.restart_history] == [
        f"work ({n + 1}/2) failed: slot default/{n} lost: heartbeat of TaskExecutor {TE1} "
        f"timed out" for n in (0, 1)]


@gen_cluster()
async def test_a_resource_manager_and_a_job_master_that_stop_hearing_each_other_part_and_reconnect(
        cluster: Cluster) -> None:
    rm = cluster.resource_manager
    cluster.driver.start_workers = False  # the job's slot requests wait at the ResourceManager
    job = await cluster.submit(job_graph("job", ("work", 2)))
    jm = cluster.job_master(job)
    await cluster.advance(25.0)
    assert rm.slot_manager.pending_request_count() == 2
    # Every call between the two is lost, both ways (they share the AppMaster's process).
    lost = [cluster.network.partition(endpoint=job_master_endpoint(job)),
            cluster.network.partition(caller=cluster.appmaster.address,
                                      endpoint="resourcemanager")]
    heard = rm._jm_heartbeats.last_heard(jm.resource_id)
    assert heard == jm._rm_heartbeats.last_heard(rm.resource_id) == 1020.0

    await cluster.advance_to(heard + TIMEOUT)
    assert rm.job_masters[job].job_master_id == jm.job_master_id
    assert jm.resource_manager_id == rm.resource_manager_id

    await cluster.advance(TICK)
    # The ResourceManager closes the JobMaster's connection and drops its requests; the
    # JobMaster disconnects its SlotPool and registers again (its attempts are lost).
    assert job not in rm.job_masters
    assert rm.slot_manager.pending_request_count() == 0
    assert not rm._jm_heartbeats.is_monitored(jm.resource_id)
    assert jm.resource_manager_id is None
    assert len(jm.slot_pool.pending_requests()) == 2

    for partition in lost:
        partition.heal()
    await cluster.settle()
    # Registered again; its requests sent again; no second worker asked for them.
    assert rm.job_masters[job].job_master_id == jm.job_master_id
    assert jm.resource_manager_id == rm.resource_manager_id
    assert rm.slot_manager.pending_request_count() == 2
    assert cluster.driver.requested == [TE1]
    # The worker they wait for serves them.
    cluster.driver.start_worker(TE1)
    await cluster.settle()
    assert running(cluster) == [("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]
    assert jm.status.value == "RUNNING"


@gen_cluster(task_executors=1, conf={"resourcemanager.max-taskmanagers": "2"})
async def test_a_worker_whose_process_ends_is_dropped_and_its_job_masters_are_told_at_once(
        cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("job", ("work", 2), configuration=RESTARTS))
    jm, rm = cluster.job_master(job), cluster.resource_manager

    cluster.task_executors[TE1].kill()
    await cluster.settle()  # no time passes: no heartbeat timeout is involved
    assert TE1 not in rm.task_executors and slots_at_resource_manager(cluster, TE1) == []
    [told] = cluster.network.calls_to("disconnect_task_manager")
    assert (told.request.job_master_id, told.request.resource_id, told.request.cause,
            told.request.resource_manager_id) == (
        jm.job_master_id, TE1, f"TaskExecutor {TE1} process killed by SIGKILL",
        rm.resource_manager_id)
    assert TE1 not in jm.task_managers

    await cluster.advance(1.0)  # the restart delay
    assert running(cluster)[-2:] == [("work (1/2) #1", TE2), ("work (2/2) #1", TE2)]


@gen_cluster(task_executors=1)
async def test_a_lost_drivers_spark_application_is_killed_before_its_job_ends(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PySpark driver lost with its TaskExecutor leaves its Spark application RUNNING at
    YARN (its AM was the driver): the JobMaster kills it, and the job, failed at once
    (no restarts), ends only once YARN says the application ended. Before, the job's end
    stopped the JobMaster, which cancelled a kill not yet sent: on a busy AppMaster the
    application ran on for YARN's AM expiry."""
    kills: list[tuple[str, BlockedCall]] = []

    def kill_until_ended(app_id: str, timeout: float) -> dict[str, str]:
        call = BlockedCall(f"kill {app_id}")
        kills.append((app_id, call))
        raise call
    monkeypatch.setattr(hadoop, "kill_application_until_ended", kill_until_ended)
    job = await cluster.submit(job_graph("script", ("driver", 1)))
    jm = cluster.job_master(job)
    [task] = cluster.tasks.running("driver")
    await jm.report_task_output(ReportTaskOutput(jm.job_master_id, task.attempt_id, [],
                                                 "application_9_0001", "http://node:4040"))

    cluster.task_executors[TE1].kill()
    await cluster.settle()
    [(app_id, kill)] = kills
    assert app_id == "application_9_0001" and kill.pending
    assert cluster.dispatcher.jobs[job].result is None  # waits for YARN
    kill.answer({"state": "KILLED"})
    await cluster.settle()
    result = cluster.dispatcher.jobs[job].result
    assert result is not None and result.status.value == "FAILED"
    assert f"TaskExecutor {TE1}" in (result.failure_cause or "")
