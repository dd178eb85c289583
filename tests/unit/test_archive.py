"""The archive of ended jobs (flinkyarn/archive.py): the Dispatcher writes each job as it
ends, before anyone waiting hears of it; the history server (yarn_am/history_server.py)
serves the dashboard's pages of it."""

from __future__ import annotations

import asyncio

import aiohttp
import msgspec

from flinkyarn.archive import ArchivedApplication, ArchivedJob, JobArchive
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.ids import JobID
from flinkyarn.jobgraph import JobEdge, JobVertexID, ResultPartitionType, ShipStrategy
from tests.harness import in_process_cluster, job_graph
from yarn_am.history_server import HistoryServer

APP = "application_1_0001"
NO_RESTARTS = {"restart-strategy.type": "none"}


def test_applications_and_jobs_are_read_back_whole_newest_first(tmp_path):
    archive = JobArchive(str(tmp_path))
    older = ArchivedApplication("application_1_0001", "older", "session", "ann", 100.0)
    newer = ArchivedApplication("application_1_0002", "newer", "per-job", "ann", 200.0)
    for application in (older, newer):
        archive.put_application(application)
    archive.put_application(older.ended("FAILED", "job x failed", 2))
    graph = job_graph("wc", ("source", 2), ("count", 1), edges=[
        JobEdge(JobVertexID("wc-source"), JobVertexID("wc-count"),
                partition_type=ResultPartitionType.BLOCKING, partitioner=ShipStrategy.HASH)])
    details = JobDetails(JobID("wc"), "job wc", "FINISHED", 10.0, 12.0, None, [])
    archive.put_job(ArchivedJob.of("application_1_0001", details, graph))
    (tmp_path / "not-an-application").mkdir()  # a folder without an application file

    assert [a.application_id for a in archive.applications()] == [
        "application_1_0002", "application_1_0001"]
    ended = archive.application("application_1_0001")
    assert ended is not None and (ended.status, ended.diagnostics, ended.attempt) == (
        "FAILED", "job x failed", 2) and ended.end_time is not None
    assert archive.application("application_9_0009") is None
    [job] = archive.jobs("application_1_0001")
    assert job.details == details
    assert [(v.name, v.parallelism) for v in job.vertices] == [("source", 2), ("count", 1)]
    assert [(e.source, e.target, e.partitioner, e.blocking) for e in job.edges] == [
        ("wc-source", "wc-count", "hash", True)]
    assert archive.jobs("application_1_0002") == []
    assert not list(tmp_path.rglob(".*"))  # nothing left under a hidden name


def test_ended_jobs_are_archived_before_the_end_is_heard_and_served_by_the_history_server(tmp_path):
    archive = JobArchive(str(tmp_path / "archive"))
    archive.put_application(ArchivedApplication(APP, "flinkyarn session", "session", "ann", 1.0))

    async def main() -> None:
        async with in_process_cluster(task_executors=1, archive=archive) as cluster:
            done = await cluster.submit(job_graph("done"))
            [work] = cluster.tasks.running("work")
            work.finish()
            await cluster.dispatcher.wait_for_result(done)
            # Whoever hears of the end finds the job in the archive already.
            archived = archive.job(APP, done)
            assert archived is not None and archived.details.status == "FINISHED"
            [vertex] = archived.details.vertices
            [subtask] = vertex.subtasks
            assert (subtask.index, subtask.state, subtask.attempt) == (0, "FINISHED", 0)
            assert subtask.task_executor in {str(r) for r in cluster.task_executors}
            assert subtask.start_time is not None and subtask.end_time >= subtask.start_time
            assert archived.vertices[0].name == "work"

            failed = await cluster.submit(job_graph("broken", configuration=NO_RESTARTS))
            [work] = cluster.tasks.running("work")
            work.fail("ValueError: bad record <script>")
            await cluster.dispatcher.wait_for_result(failed)
        archive.put_application(archive.application(APP).ended("SUCCEEDED", "session stopped", 1))

        server = HistoryServer([archive], port=0)
        url = await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(url) as index:
                    assert index.status == 200
                    text = await index.text()
                    assert f'href="applications/{APP}/"' in text and "SUCCEEDED" in text
                async with http.get(f"{url}applications/{APP}/") as page:
                    text = await page.text()
                    assert page.status == 200 and "Content-Security-Policy" in page.headers
                    assert f'id="job-{done}"' in text and f'id="job-{failed}"' in text
                    assert "ValueError: bad record &lt;script&gt;" in text  # escaped
                    assert text.count("<script>") == 1  # the page's own
                async with http.get(f"{url}applications/{APP}/api/overview") as overview:
                    jobs = {j["job_id"]: j for j in (await overview.json())["jobs"]}
                    assert jobs[done]["status"] == "FINISHED" and jobs[failed]["status"] == "FAILED"
                    assert "bad record" in jobs[failed]["root_cause"]
                async with http.get(f"{url}applications/{APP}/jobs/{failed}") as job:
                    assert msgspec.json.decode(await job.read(), type=ArchivedJob).details.job_id == failed
                for missing in ("applications/application_9_0009/", f"applications/{APP}/jobs/nope",
                                "applications/..%2F..%2Fetc/", f"applications/{APP}/jobs/..%2Fapplication.json"):
                    async with http.get(url + missing) as answer:
                        assert answer.status == 404, missing
                async with http.post(url) as post:
                    assert post.status == 405
        finally:
            await server.stop()

    asyncio.run(main())
