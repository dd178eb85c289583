"""A job's blocklist (yarn_am/jobmaster/blocklist.py) on an in-process cluster: a
TaskExecutor where the job's tasks keep failing is not given the job again.

Issue 41: a TaskExecutor with a dead Spark failed every Spark stage at once, and the
scheduler, reusing the cached slot, gave it the same task for 14 minutes."""

from __future__ import annotations

from flinkyarn.gateways.dispatcher import JobQuery
from flinkyarn.ids import ResourceID
from tests.harness import Cluster, gen_cluster, job_graph

TE1, TE2 = ResourceID("taskexecutor-1"), ResourceID("taskexecutor-2")
RESTARTS = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "5",
            "restart-strategy.fixed-delay.delay": "1 s",
            "cluster.resource-blocklist.task-failures": "2",
            "cluster.resource-blocklist.item.timeout": "5 min"}


def running(cluster: Cluster) -> list[tuple[str, str]]:
    return [(task.name, task.resource_id) for task in cluster.tasks.running()]


@gen_cluster(RESTARTS, task_executors=1)
async def test_a_task_executor_where_the_jobs_tasks_keep_failing_is_blocked_and_the_job_ends_elsewhere(
        cluster: Cluster) -> None:
    rm = cluster.resource_manager
    job = await cluster.submit(job_graph("job", ("work", 1)))
    assert running(cluster) == [("work (1/1) #0", TE1)]
    [task] = cluster.tasks.running()
    task.fail("operator 'count words': ConnectionRefusedError: [Errno 111] Connection refused")
    await cluster.advance(1.0)  # the restart's delay: the cached slot on TE1 again
    assert running(cluster) == [("work (1/1) #1", TE1)]
    assert cluster.job_master(job).blocklist.blocked() == []

    [task] = cluster.tasks.running()
    task.fail("operator 'count words': ConnectionRefusedError: [Errno 111] Connection refused")
    await cluster.settle()
    [blocked] = cluster.job_master(job).blocklist.blocked()
    assert blocked.resource_id == TE1
    assert blocked.cause.startswith("2 task failures there within 300 s; the last: work (1/1): ")
    # Its slot went back; the ResourceManager gives the job no slot of it and asks the
    # driver for a new worker instead.
    assert [(s.state, s.job_id) for s in rm.slot_manager.slots_of(TE1)] == [("free", None)] * 2
    await cluster.advance(1.0)
    assert cluster.driver.requested == [TE1, TE2]
    assert running(cluster) == [("work (1/1) #2", TE2)]
    assert [s.state for s in rm.slot_manager.slots_of(TE1)] == ["free", "free"]

    details = await cluster.client.job_details(JobQuery(job))
    [view] = details.blocked
    assert (view.resource_id, view.cause) == (TE1, blocked.cause)
    [task] = cluster.tasks.running()
    task.finish()
    await cluster.settle()
    details = await cluster.client.job_details(JobQuery(job))
    assert (details.status, details.restarts) == ("FINISHED", 2)


@gen_cluster({**RESTARTS, "cluster.resource-blocklist.enabled": "false"}, task_executors=1)
async def test_without_the_blocklist_the_job_stays_on_the_task_executor(cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("job", ("work", 1)))
    for attempt in range(3):
        assert running(cluster) == [(f"work (1/1) #{attempt}", TE1)]
        [task] = cluster.tasks.running()
        task.fail("no good")
        await cluster.advance(1.0)
    assert cluster.job_master(job).blocklist.blocked() == []
    assert cluster.driver.requested == [TE1]


@gen_cluster(RESTARTS, task_executors=1)
async def test_a_block_ends_after_its_timeout(cluster: Cluster) -> None:
    rm = cluster.resource_manager
    job = await cluster.submit(job_graph("job", ("work", 1)))
    for _ in range(2):
        [task] = cluster.tasks.running()
        task.fail("no good")
        await cluster.advance(1.0)
    assert running(cluster) == [("work (1/1) #2", TE2)]
    assert cluster.job_master(job).blocklist.is_blocked(TE1)
    await cluster.advance(300.0)
    assert cluster.job_master(job).blocklist.blocked() == []
    assert not rm.slot_manager._blocked_for(job, TE1, cluster.now)
