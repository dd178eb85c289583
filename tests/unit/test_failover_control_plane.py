"""Restart decisions of a job, end to end through its JobMaster, on an in-process cluster
with a ManualClock: a restart strategy exhausted, region failover, each job's own
restart settings (and a client's, which go with each job), and job settings refused at
submit. These were tests/local/test_failover.py's; what a killed or frozen process, lost
partitions and Spark do stays there, and the scenarios run on YARN too."""

from __future__ import annotations

import io

import pytest

from flinkyarn.gateways.dispatcher import JobDetails, JobQuery
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.ids import JobVertexID, ResourceID
from flinkyarn.jobgraph import JobEdge, JobGraph, ShipStrategy
from flinkyarn.rpc.errors import MalformedMessage
from tests.harness import Cluster, gen_cluster, job_graph
from yarn_client.executors import ClusterExecutor

TE1 = ResourceID("taskexecutor-1")
RESTARTING = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "2",
              "restart-strategy.fixed-delay.delay": "1 s"}
ERROR = "operator 'check': ValueError: column n has a negative value"


async def details(cluster: Cluster, job_id: str) -> JobDetails:
    return await cluster.client.job_details(JobQuery(job_id))


def running(cluster: Cluster) -> list[str]:
    return [task.name for task in cluster.tasks.running()]


@gen_cluster()
async def test_a_task_that_always_fails_exhausts_the_fixed_delay_strategy_and_fails_the_job(
        cluster: Cluster) -> None:
    job = await cluster.submit(job_graph("always", ("check", 1), configuration=RESTARTING))
    for attempt in (0, 1):
        assert running(cluster) == [f"check (1/1) #{attempt}"]
        [task] = cluster.tasks.running()
        task.fail(ERROR)
        await cluster.advance(0.999)  # the delay, to the millisecond
        assert running(cluster) == []
        await cluster.advance(0.001)
    assert running(cluster) == ["check (1/1) #2"]

    [task] = cluster.tasks.running()
    task.fail(ERROR)
    await cluster.settle()  # no restart left: failed at once
    result = await details(cluster, job)
    assert result.status == "FAILED"
    assert (result.restarts, len(result.restart_history), result.restart_limit) == (2, 2, 2)
    assert ERROR in result.failure_cause
    await cluster.advance(10.0)
    assert running(cluster) == [] and len(cluster.tasks.all) == 3


async def two_regions_one_failed(cluster: Cluster, strategy: str):
    """A job of two regions (`left`, `right`) under the failover strategy `strategy`,
    one second after `right` failed: (the job, left's task)."""
    config = {**RESTARTING, "jobmanager.execution.failover-strategy": strategy}
    job = await cluster.submit(job_graph("two-regions", ("left", 1), ("right", 1),
                                         configuration=config))
    [left] = cluster.tasks.running("left")
    [right] = cluster.tasks.running("right")
    right.fail("transient failure")
    await cluster.advance(1.0)
    return job, left


@gen_cluster()
async def test_a_failure_in_one_of_two_regions_restarts_only_that_region(cluster: Cluster) -> None:
    job, left = await two_regions_one_failed(cluster, "region")

    assert running(cluster) == ["left (1/1) #0", "right (1/1) #1"]
    assert left.state is TaskState.RUNNING  # never stopped
    for task in cluster.tasks.running():
        task.finish()
    await cluster.settle()
    result = await details(cluster, job)
    assert (result.status, result.restarts) == ("FINISHED", 1), result.failure_cause
    [restart] = result.restart_history
    assert restart.restarted == ["right (1/1)"]


@gen_cluster()
async def test_a_full_restart_restarts_the_other_region_too(cluster: Cluster) -> None:
    """The counterpart: what spares `left` above is the region strategy."""
    job, left = await two_regions_one_failed(cluster, "full")
    assert left.state is TaskState.CANCELED
    assert running(cluster) == ["left (1/1) #1", "right (1/1) #1"]
    [restart] = (await details(cluster, job)).restart_history
    assert sorted(restart.restarted) == ["left (1/1)", "right (1/1)"]


@gen_cluster()  # the cluster's default: no restarts
async def test_each_job_of_a_cluster_chooses_its_own_restart_strategy(cluster: Cluster) -> None:
    own = await cluster.submit(job_graph("own", ("own", 1), configuration=RESTARTING))
    default = await cluster.submit(job_graph("default", ("default", 1)))
    for task in cluster.tasks.running():
        task.fail("transient failure")
    await cluster.advance(1.0)

    assert running(cluster) == ["own (1/1) #1"]
    cluster.tasks.running()[0].finish()
    await cluster.settle()
    restarted, failed = await details(cluster, own), await details(cluster, default)
    assert (restarted.status, restarted.restarts) == ("FINISHED", 1)
    assert (failed.status, failed.restarts) == ("FAILED", 0)
    assert "transient failure" in failed.failure_cause


@pytest.mark.parametrize("settings, message", [
    ({"taskmanager.numberOfTaskSlots": "8"},
     "a job cannot set option 'taskmanager.numberOfTaskSlots': it is the cluster's"),
    ({"restart-strategy.type": "sometimes"}, "restart-strategy.type"),
    ({"restart-strategy.fixed-delay.atempts": "3"}, "unknown option"),
    ({"jobmanager.execution.failover-strategy": "restart-individual"}, "restart-individual")])
@gen_cluster()
async def test_a_job_with_bad_settings_is_refused_and_leaves_nothing_behind(
        cluster: Cluster, settings: dict[str, str], message: str) -> None:
    # Two vertices and an exchange (restart-individual cannot serve that).
    graph = job_graph("bad", ("a", 1), ("b", 1), configuration=settings, edges=[
        JobEdge(JobVertexID("bad-a"), JobVertexID("bad-b"), partitioner=ShipStrategy.HASH)])
    with pytest.raises(MalformedMessage) as refused:
        await cluster.submit(graph)
    assert message in str(refused.value)
    assert cluster.dispatcher.jobs == {}
    assert cluster.driver.requested == [] and cluster.tasks.all == []


class Submitted(Exception):
    """What the fake REST client raises once it has the graph: the test is done."""


class CapturingRest:
    graph: JobGraph | None = None

    def submit(self, graph: JobGraph) -> str:
        self.graph = graph
        raise Submitted


def test_a_clients_job_settings_go_with_each_job_under_its_own():
    """As `flinkyarn run -D` does for a session: the client's job-level settings go with
    each job, and a job's own settings win."""
    rest = CapturingRest()
    executor = ClusterExecutor(rest, io.StringIO(),  # type: ignore[arg-type]
                               job_settings={**RESTARTING, "pipeline.max-parallelism": "64"})
    with pytest.raises(Submitted):
        executor.execute(job_graph("own", configuration={
            "restart-strategy.fixed-delay.attempts": "5"}))
    assert rest.graph is not None and rest.graph.configuration == {
        **RESTARTING, "pipeline.max-parallelism": "64", "restart-strategy.fixed-delay.attempts": "5"}
