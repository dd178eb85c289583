"""Stop-with-savepoint (Flink's `stop`), on an in-process cluster with a ManualClock: once
the savepoint completed, each task is told so and the job cancels its tasks only after
each took that confirmation (a StreamTask's sinks then commit the savepoint's output),
or after the checkpoint timeout. Before, the cancellation went out right behind the
confirmation, and a task that had not yet taken it left the savepoint's output staged:
visible only once a job resumed from the savepoint."""

from __future__ import annotations

import asyncio
import pathlib

from flinkyarn.gateways.job_master import TaskState
from tests.harness import Cluster, gen_cluster, job_graph
from tests.harness.tasks import ScriptedTask
from taskexecutor.task import CheckpointConfirmed, TriggerBarrier


def streaming(folder: pathlib.Path, timeout: str, interval: str) -> dict[str, str]:
    return {"execution.checkpointing.interval": interval,
            "execution.checkpointing.timeout": timeout,
            "state.checkpoints.dir": str(folder / "checkpoints")}


async def stop_with_savepoint(cluster: Cluster, folder: pathlib.Path, timeout: str,
                              interval: str = "1 h"
                              ) -> tuple[str, list[ScriptedTask], asyncio.Task[str], int]:
    """Submits a job of a source and a sink, stops it with a savepoint, and has both
    tasks take their part of it: returns once the savepoint completed."""
    job = await cluster.submit(job_graph("stream", ("source", 1), ("sink", 1),
                                         configuration=streaming(folder, timeout, interval)))
    jm = cluster.job_master(job)
    stop = asyncio.create_task(jm.trigger_savepoint(str(folder / "savepoints"), stop=True))
    await cluster.settle()
    tasks = cluster.tasks.running()
    [trigger] = [c for c in tasks[0].controls if isinstance(c, TriggerBarrier)]
    for task in tasks:
        task.acknowledge(trigger.checkpoint_id)
    await cluster.settle()
    assert (folder / "savepoints").is_dir()  # written
    return job, tasks, stop, trigger.checkpoint_id


@gen_cluster(task_executors=1)
async def test_a_stopping_job_cancels_its_tasks_once_each_took_the_savepoints_confirmation(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    job, (source, sink), stop, savepoint = await stop_with_savepoint(cluster, tmp_path, "10 min",
                                                                     interval="2 s")
    for task in (source, sink):
        assert CheckpointConfirmed(savepoint) in task.controls
    await cluster.advance(5.0)
    # The sink has not taken it (its thread is busy): nothing is cancelled, no other
    # checkpoint starts, the job runs, the user still waits.
    assert cluster.network.calls_to("cancel_task") == []
    assert cluster.job_master(job).status.value == "RUNNING" and not stop.done()
    source.take_confirmations()
    await cluster.advance(1.0)
    assert cluster.network.calls_to("cancel_task") == []
    sink.take_confirmations()
    await cluster.advance(0.1)
    assert sorted(c.request.attempt_id for c in cluster.network.calls_to("cancel_task")) == \
        sorted([source.attempt_id, sink.attempt_id])
    assert (source.state, sink.state) == (TaskState.CANCELED, TaskState.CANCELED)
    assert stop.done() and stop.result().startswith(str(tmp_path / "savepoints"))
    assert cluster.dispatcher.jobs[job].result.status.value == "FINISHED"
    # No checkpoint was triggered after the savepoint, though 6 s passed (interval 2 s).
    assert [c.checkpoint_id for c in source.controls if isinstance(c, TriggerBarrier)] == \
        [savepoint]


@gen_cluster(task_executors=1)
async def test_a_task_that_does_not_take_the_confirmation_is_cancelled_after_the_checkpoint_timeout(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    job, (source, sink), stop, _ = await stop_with_savepoint(cluster, tmp_path, "30 s")
    source.take_confirmations()
    await cluster.advance(29.0)
    assert cluster.network.calls_to("cancel_task") == []
    await cluster.advance(1.5)
    assert (source.state, sink.state) == (TaskState.CANCELED, TaskState.CANCELED)
    assert stop.done() and cluster.dispatcher.jobs[job].result.status.value == "FINISHED"


@gen_cluster(task_executors=1)
async def test_a_job_that_fails_while_it_waits_for_the_confirmations_ends_at_once(
        cluster: Cluster, tmp_path: pathlib.Path) -> None:
    """Its TaskExecutor does not answer (the confirmations are lost on the way) and a
    task fails: the job ends now, not at the checkpoint timeout."""
    lost = cluster.network.partition(method="confirm_checkpoint")
    job, (source, _), stop, _ = await stop_with_savepoint(cluster, tmp_path, "10 min")
    source.fail("the source broke")
    await cluster.settle()
    result = cluster.dispatcher.jobs[job].result
    assert result is not None and result.status.value == "FAILED"
    assert "the source broke" in (result.failure_cause or "")
    assert stop.done()  # the savepoint was written: its folder
    lost.heal()
