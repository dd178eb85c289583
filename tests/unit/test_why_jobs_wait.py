"""Why a job waits for slots: what YARN's answers say (yarn_driver.why_containers_wait),
and when the ResourceManager says it, on the in-process cluster's manual clock."""

from __future__ import annotations

from flinkyarn.gateways.dispatcher import JobQuery
from tests.harness import Cluster, gen_cluster, job_graph
from yarn_am.resourcemanager.resource_manager import WAIT_EXPLAINED_AFTER
from yarn_am.resourcemanager.yarn_driver import why_containers_wait

QUEUE = {"resourcesUsed": {"memory": 8192, "vCores": 8},
         "maxEffectiveCapacity": {"memory": 8192, "vCores": 16}}
NODES = [{"nodeHostName": "n1", "availMemoryMB": 512}, {"nodeHostName": "n2", "availMemoryMB": 3072}]


def test_a_full_queue_is_said_first():
    assert why_containers_wait(1024, "etl", QUEUE, NODES) == \
        "queue 'etl' is at its limit (8192 of 8192 MB used)"


def test_a_queue_with_room_but_no_node_with_room():
    queue = {**QUEUE, "resourcesUsed": {"memory": 4096}}
    assert why_containers_wait(4096, "etl", queue, NODES) == \
        "no node has 4096 MB free (the most: 3072 MB on n2)"
    assert why_containers_wait(1024, "etl", queue, []) == "no NodeManager is running"


def test_room_everywhere_means_the_scheduler_has_not_got_to_it():
    queue = {**QUEUE, "resourcesUsed": {"memory": 4096}}
    assert why_containers_wait(1024, "etl", queue, NODES) == \
        "YARN has not allocated them yet (queue 'etl': 4096 of 8192 MB used)"
    # A queue the scheduler does not describe: usage as far as known.
    assert why_containers_wait(1024, "etl", {}, NODES) == \
        "YARN has not allocated them yet (queue 'etl': 0 MB used)"


REASON = "waiting for 1 container(s) of 1024 MB: queue 'etl' is at its limit (8192 of 8192 MB used)"


@gen_cluster()
async def test_a_waiting_job_is_told_why_after_a_few_seconds_and_no_longer_once_served(
        cluster: Cluster) -> None:
    cluster.driver.start_workers = False  # its worker's container never comes...
    cluster.driver.explanation = REASON   # ... and the driver knows why

    job = await cluster.submit(job_graph("job", ("work", 1)))
    details = cluster.dispatcher.job_details
    await cluster.advance(WAIT_EXPLAINED_AFTER - 1)
    assert (await details(JobQuery(job))).waiting == ""  # not for long yet
    await cluster.advance(2.0)
    assert (await details(JobQuery(job))).waiting == REASON

    cluster.driver.start_worker()
    await cluster.advance(1.0)
    assert len(cluster.tasks.running()) == 1
    assert (await details(JobQuery(job))).waiting == ""


@gen_cluster({"resourcemanager.max-taskmanagers": "1", "taskmanager.numberOfTaskSlots": "1"},
             task_executors=1)
async def test_a_job_behind_another_in_a_full_cluster_waits_for_a_free_slot(cluster: Cluster) -> None:
    first = await cluster.submit(job_graph("first", ("work", 1)))
    await cluster.advance(1.0)
    second = await cluster.submit(job_graph("second", ("work", 1)))
    await cluster.advance(WAIT_EXPLAINED_AFTER + 1)

    assert (await cluster.dispatcher.job_details(JobQuery(first))).waiting == ""
    assert (await cluster.dispatcher.job_details(JobQuery(second))).waiting == (
        "waiting for a free slot: all 1 are taken and no more TaskExecutors may start "
        "(resourcemanager.max-taskmanagers = 1)")
