"""The checkpoint decisions of a job's JobMaster, on an in-process cluster with a
ManualClock: checkpoints that expire are tolerated up to
execution.checkpointing.tolerable-failed-checkpoints, then the job fails over; a
savepoint needs a job that takes checkpoints. These were tests/local/test_checkpoints.py's;
what a restarted job's state and output are stays there."""

from __future__ import annotations

import pathlib
from typing import Awaitable, Callable

import pytest

from flinkyarn.gateways.dispatcher import JobDetails, JobQuery, TriggerSavepoint
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.rpc.errors import MalformedMessage
from taskexecutor.task import TriggerBarrier
from tests.harness import Cluster, ScriptedTask, gen_cluster, job_graph

TIMEOUT = 0.3  # execution.checkpointing.timeout
LOOK = 0.01    # the JobMaster looks for due and expired checkpoints at least this often
THRESHOLD = ("exceeded the checkpoint tolerable failure threshold: 2 checkpoint failure(s) "
             "in a row, 1 tolerated")


async def details(cluster: Cluster, job_id: str) -> JobDetails:
    return await cluster.client.job_details(JobQuery(job_id))


def triggered(task: ScriptedTask) -> list[int]:
    return [c.checkpoint_id for c in task.controls if isinstance(c, TriggerBarrier)]


async def when(cluster: Cluster, happened: Callable[[], Awaitable[bool]],
               within: float = 1.0) -> float:
    """Moves the clock on a millisecond at a time until `happened()`; returns when."""
    deadline = cluster.now + within
    while not await happened():
        assert cluster.now < deadline, "it did not happen in time"
        await cluster.advance(0.001)
    return cluster.now


@gen_cluster()
async def test_checkpoints_that_expire_are_tolerated_up_to_the_limit_then_the_job_fails_over(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """Checkpoints 1 and 2 expire (the task never acknowledges them; the timeout is
    300 ms): the first is tolerated, the second fails the job over; the next one, on the
    restarted task, completes. The JobMaster looks for expired checkpoints at least every
    LOOK seconds, so an expiry is found within LOOK of the timeout."""
    job = await cluster.submit(job_graph("slow-snapshots", ("work", 1), configuration={
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "200 ms",
        "execution.checkpointing.interval": "100 ms", "execution.checkpointing.timeout": "300 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1",
        "state.checkpoints.dir": str(tmp_path / "checkpoints")}))
    [first] = cluster.tasks.running()

    async def failed(n: int) -> bool:
        return (await details(cluster, job)).checkpoints.failed == n

    async def of_first() -> bool:
        return triggered(first) == [1]
    triggered_at = await when(cluster, of_first)
    expired_at = await when(cluster, lambda: failed(1))
    assert TIMEOUT <= expired_at - triggered_at <= TIMEOUT + LOOK
    result = await details(cluster, job)
    assert result.restarts == 0  # tolerated
    assert "checkpoint 1: it expired before completing" in result.checkpoints.last_failure
    assert first.state is TaskState.RUNNING and triggered(first) == [1, 2]  # the next at once

    failed_over_at = await when(cluster, lambda: failed(2))
    assert TIMEOUT <= failed_over_at - expired_at <= TIMEOUT + LOOK
    result = await details(cluster, job)
    assert result.restarts == 1 and first.state is TaskState.CANCELED
    assert THRESHOLD in result.root_cause and "expired before completing" in result.root_cause

    await cluster.advance(0.199)
    assert cluster.tasks.running() == []
    await cluster.advance(0.001)  # the restart's delay
    [second] = cluster.tasks.running()
    assert second.name == "work (1/1) #1"

    async def of_second() -> bool:
        return triggered(second) == [3]
    await when(cluster, of_second)
    second.acknowledge(3)
    await cluster.settle()
    second.finish()
    await cluster.settle()
    result = await details(cluster, job)
    assert (result.status, result.restarts) == ("FINISHED", 1), result.failure_cause
    assert (result.checkpoints.completed, result.checkpoints.failed) == (1, 2)
    assert result.checkpoints.last_completed_id == 3


@gen_cluster()
async def test_a_savepoint_needs_a_job_that_takes_checkpoints(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    job = await cluster.submit(job_graph("no-checkpoints", ("work", 1)))
    with pytest.raises(MalformedMessage, match="takes no checkpoints"):
        await cluster.client.trigger_savepoint(TriggerSavepoint(job, str(tmp_path / "savepoints")))
    await cluster.settle()
    assert not (tmp_path / "savepoints").exists()
    [task] = cluster.tasks.running()  # the job runs on, untouched
    assert triggered(task) == []
    task.finish()
    await cluster.settle()
    assert (await details(cluster, job)).status == "FINISHED"
