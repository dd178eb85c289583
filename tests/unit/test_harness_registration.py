"""A TaskExecutor and its ResourceManager: registration, and registering again after the
connection is lost (seeds/flink-heartbeat-mechanism.txt 3.2: "Taskmanager will try to re
register with ResourceManager"), on an in-process cluster with a ManualClock.

Timing: heartbeat.interval 10 s, heartbeat.timeout 50 s; the ResourceManager checks its
timeouts every second, a TaskExecutor every 10 s (from its start, t = 1000 s)."""

from __future__ import annotations

from flinkyarn.gateways.dispatcher import JobQuery
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.ids import ResourceID
from tests.harness import Cluster, gen_cluster, job_graph

TE1 = ResourceID("taskexecutor-1")
TIMEOUT = 50.0


def slots_at_resource_manager(cluster: Cluster) -> list[tuple[str, str | None, str | None]]:
    return [(slot.state, slot.job_id, slot.allocation_id)
            for slot in cluster.resource_manager.slot_manager.slots_of(TE1)]


@gen_cluster(task_executors=1)
async def test_a_task_executor_that_stops_hearing_its_resource_manager_registers_again_with_its_slots(
        cluster: Cluster) -> None:
    rm = cluster.resource_manager
    job = await cluster.submit(job_graph("job", ("work", 2)))
    te = cluster.task_executor()
    await cluster.advance(25.0)
    first = te.rm_connection
    assert first is not None
    slots = slots_at_resource_manager(cluster)
    assert [(state, job_id) for state, job_id, _ in slots] == [("allocated", job)] * 2
    # A partition between the ResourceManager and it: the heartbeats and the request to
    # reconnect are lost; the JobMaster, in the same process as the ResourceManager,
    # still reaches it, and it still reaches the ResourceManager.
    lost = [cluster.network.partition(address=te.rpc.address, method=method)
            for method in ("heartbeat_from_resource_manager", "disconnect_resource_manager")]
    assert te._rm_heartbeats.last_heard(first.resource_id) == 1020.0

    await cluster.advance_to(1071.0)  # the ResourceManager's timeout: it drops it
    assert TE1 not in rm.task_executors and slots_at_resource_manager(cluster) == []
    await cluster.advance_to(1079.0)
    assert te.rm_connection == first  # it does not know yet
    assert len(cluster.network.calls_to("register_task_executor")) == 1

    await cluster.advance(1.0)  # its check at 1080 finds the ResourceManager silent > 50 s
    assert len(cluster.network.calls_to("register_task_executor")) == 2
    assert te.rm_connection is not None and te.rm_connection.instance_id != first.instance_id
    assert rm.task_executors[TE1].instance_id == te.rm_connection.instance_id
    # Its slot report puts the job's slots back as they were.
    assert slots_at_resource_manager(cluster) == slots
    # Its tasks never stopped; the JobMaster never noticed.
    assert [task.state for task in cluster.tasks.all] == [TaskState.RUNNING] * 2
    assert cluster.network.calls_to("disconnect_task_manager") == []

    for partition in lost:
        partition.heal()
    for task in cluster.tasks.running():
        task.finish()
    await cluster.settle()
    details = await cluster.client.job_details(JobQuery(job))
    assert (details.status, details.restarts) == ("FINISHED", 0)
    # The slots it freed are announced under its new registration: free at the
    # ResourceManager at once.
    assert [state for state, _, _ in slots_at_resource_manager(cluster)] == ["free", "free"]


@gen_cluster()
async def test_a_new_task_executor_takes_the_requests_waiting_for_it_at_its_registration(
        cluster: Cluster) -> None:
    """The ResourceManager allocates a new TaskExecutor's slots as soon as it has
    registered them, so its AllocateSlot can overtake the registration's answer. Refused
    as stale, each allocation would leave its slot unknown until the next heartbeat and
    ask the driver for another worker, whose registration would race the same way."""
    job = await cluster.submit(job_graph("job", ("work", 2)))
    assert cluster.driver.requested == [TE1]
    assert [(task.name, task.resource_id) for task in cluster.tasks.running()] == [
        ("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]
    allocations = cluster.network.calls_to("allocate_slot")
    assert [call.error for call in allocations] == [None, None]
    assert cluster.task_executor().rm_connection is not None
    assert [(state, job_id) for state, job_id, _ in slots_at_resource_manager(cluster)] == [
        ("allocated", job)] * 2
