"""The job-level output commit and who hears "FINISHED" when, on an in-process cluster:
while the JobMaster commits a finished job's outputs, every reader (the JobMaster, the
Dispatcher's overview and details, which REST and the client poll) still sees the job
RUNNING, and nothing waits on its result; it turns FINISHED only once the commit is done.
Before, FINISHED showed from the Scheduler's transition on, while the part files were
not yet in place."""

from __future__ import annotations

import asyncio
import pathlib

import msgspec

from flinkyarn.gateways import Ack
from flinkyarn.gateways.dispatcher import JobQuery
from flinkyarn.jobgraph import FileOutput
from tests.harness import Cluster, gen_cluster, job_graph
from yarn_am.jobmaster import job_master as job_master_module


async def finish_with_a_held_commit(cluster: Cluster, tmp_path: pathlib.Path, monkeypatch,
                                    fail: str | None = None):
    """Runs a one-task job with one output to its end, the commit held: returns the job's
    id, the event that lets the commit go on, and what the commit was called with."""
    release, calls = asyncio.Event(), []

    async def held_commit(graph, status, cause, run_blocking, **options):
        calls.append((status, options))
        await release.wait()
        return status, cause
    monkeypatch.setattr(job_master_module, "finish_outputs", held_commit)
    graph = msgspec.structs.replace(job_graph("commit"), outputs=[
        FileOutput(str(tmp_path / "out"), "parquet", staging=str(tmp_path / ".out.staging-1"))])
    job = await cluster.submit(graph)
    await cluster.settle()
    [task] = cluster.tasks.running()
    if fail:
        task.fail(fail)
    else:
        task.finish()
    await cluster.settle()
    return job, release, calls


async def statuses(cluster: Cluster, job: str) -> tuple[str, str, str]:
    """The job's status as the JobMaster, the Dispatcher's overview and its details say."""
    overview = {o.job_id: o.status for o in (await cluster.dispatcher.list_jobs(Ack())).jobs}
    details = await cluster.dispatcher.job_details(JobQuery(job))
    record = cluster.dispatcher.jobs[job]
    own = record.job_master.status if record.job_master else record.result.status
    return own.value, overview[job], details.status


@gen_cluster(task_executors=1)
async def test_a_finished_job_is_running_to_everyone_until_its_outputs_are_committed(
        cluster: Cluster, tmp_path: pathlib.Path, monkeypatch) -> None:
    job, release, calls = await finish_with_a_held_commit(cluster, tmp_path, monkeypatch)

    await cluster.advance(30.0)
    assert [status.value for status, _ in calls] == ["FINISHED"]
    assert calls[0][1] == {"checkpointed": False, "mark_success": True}
    assert await statuses(cluster, job) == ("RUNNING", "RUNNING", "RUNNING")
    assert cluster.dispatcher.jobs[job].result is None
    release.set()
    await cluster.settle()
    assert cluster.dispatcher.jobs[job].result.status.value == "FINISHED"
    assert await statuses(cluster, job) == ("FINISHED", "FINISHED", "FINISHED")


@gen_cluster(task_executors=1, conf={"restart-strategy.type": "none"})
async def test_a_failed_job_is_failing_until_its_staging_folders_are_gone(
        cluster: Cluster, tmp_path: pathlib.Path, monkeypatch) -> None:
    job, release, calls = await finish_with_a_held_commit(cluster, tmp_path, monkeypatch,
                                                          fail="boom")
    assert [status.value for status, _ in calls] == ["FAILED"]
    assert await statuses(cluster, job) == ("FAILING", "FAILING", "FAILING")
    release.set()
    await cluster.settle()
    assert await statuses(cluster, job) == ("FAILED", "FAILED", "FAILED")
