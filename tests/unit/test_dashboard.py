"""The dashboard over a fake Dispatcher, in-process: what it serves, what it escapes,
and that it only reads."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re

import aiohttp
import msgspec
import pytest

from flinkyarn.gateways import Ack
from flinkyarn.gateways.dispatcher import (ClusterOverview, JobDetails, JobOverview, JobQuery,
                                           SlotView, TaskExecutorView, VertexDetails)
from yarn_am.dashboard import Dashboard, _duration
from yarn_am.dispatcher import UnknownJob

T0 = 1_700_000_000.0


def job(job_id: str, name: str, status: str, start: float = T0, end: float | None = None,
        cause: str | None = None, vertices: list[VertexDetails] | None = None) -> JobDetails:
    return JobDetails(job_id, name, status, start, end, cause, vertices or [])


def vertex(name: str, parallelism: int, state: str, **counts: int) -> VertexDetails:
    return VertexDetails(f"v-{name}", name, parallelism, state, counts)


def executor(resource_id: str, *slots: tuple[str, str | None]) -> TaskExecutorView:
    return TaskExecutorView(resource_id, "127.0.0.1:4242",
                            [SlotView(i, state, job_id) for i, (state, job_id) in enumerate(slots)])


class FakeDispatcher:
    """The two read calls of the DispatcherGateway that the dashboard makes, answering
    from `executors` and `jobs` as they are at the call."""

    def __init__(self, executors: list[TaskExecutorView], jobs: list[JobDetails]) -> None:
        self.executors = executors
        self.jobs = jobs

    async def cluster_overview(self, request: Ack) -> ClusterOverview:
        return ClusterOverview(list(self.executors), [
            JobOverview(j.job_id, j.name, j.status, j.start_time, j.end_time) for j in self.jobs])

    async def job_details(self, request: JobQuery) -> JobDetails:
        for details in self.jobs:
            if details.job_id == request.job_id:
                return details
        raise UnknownJob(f"no job {request.job_id} in this cluster")


def two_jobs() -> FakeDispatcher:
    return FakeDispatcher(
        [executor("te-1", ("allocated", "j-run"), ("free", None))],
        [job("j-old", "nightly etl", "FAILED", T0, T0 + 75, cause="ValueError: bad row 7\n  at line 3",
             vertices=[vertex("read", 2, "FAILED", FAILED=1, CANCELED=1)]),
         job("j-run", "wordcount", "RUNNING", T0 + 100,
             vertices=[vertex("split", 2, "RUNNING", RUNNING=2), vertex("count", 1, "CREATED", CREATED=1)])])


def serve(dispatcher, *requests: tuple[str, str], **kwargs) -> list[tuple[int, dict, bytes]]:
    """Starts a Dashboard, makes the requests (method, path relative to its URL), stops it."""
    async def run():
        dashboard = Dashboard(dispatcher, "127.0.0.1", **kwargs)
        url = await dashboard.start()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[\w-]{32}/", url)
        try:
            async with aiohttp.ClientSession() as session:
                answers = []
                for method, path in requests:
                    async with session.request(method, url + path) as response:
                        answers.append((response.status, dict(response.headers), await response.read()))
                return answers
        finally:
            await dashboard.stop()
    return asyncio.run(run())


def page(dispatcher, **kwargs) -> str:
    [(status, headers, body)] = serve(dispatcher, ("GET", ""), **kwargs)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    return body.decode()


def job_row(html: str, job_id: str) -> str:
    match = re.search(rf'<tr class="job" id="job-{job_id}">(.*?)</tr>', html, re.S)
    assert match, f"no row of job {job_id}"
    return match.group(1)


def test_api_overview_is_the_cluster_overview_with_each_jobs_details_newest_first():
    [(status, headers, body)] = serve(two_jobs(), ("GET", "api/overview"))

    assert status == 200 and headers["Content-Type"].startswith("application/json")
    overview = msgspec.json.decode(body)
    assert [j["job_id"] for j in overview["jobs"]] == ["j-run", "j-old"]
    assert overview["jobs"][1] == {
        "job_id": "j-old", "name": "nightly etl", "status": "FAILED", "start_time": T0,
        "end_time": T0 + 75, "failure_cause": "ValueError: bad row 7\n  at line 3",
        "vertices": [{"vertex_id": "v-read", "name": "read", "parallelism": 2, "state": "FAILED",
                      "state_counts": {"FAILED": 1, "CANCELED": 1}, "subtasks": [],
                      "metrics": None}],
        "restarts": 0, "root_cause": None, "restart_history": [], "restart_limit": None,
        "spark_application": None, "spark_tracking_url": None, "output_tail": "",
        "checkpoints": None}
    assert overview["task_executors"] == [{"resource_id": "te-1", "address": "127.0.0.1:4242", "slots": [
        {"index": 0, "state": "allocated", "job_id": "j-run"},
        {"index": 1, "state": "free", "job_id": None}], "metrics_address": ""}]


def test_page_lists_jobs_with_status_times_vertices_and_failure_cause():
    html = page(two_jobs(), title="etl-session", mode="session on YARN")

    assert "<title>etl-session</title>" in html
    assert re.search(r"<h1>etl-session <span class=\"mode\">session on YARN</span></h1>", html)
    running, failed = job_row(html, "j-run"), job_row(html, "j-old")
    assert html.index('id="job-j-run"') < html.index('id="job-j-old"')
    assert "wordcount" in running and '<span class="state s-running">RUNNING</span>' in running
    assert "2023-11-14 22:15:00" in running          # T0 + 100, UTC
    assert '<span class="state s-failed">FAILED</span>' in failed
    assert "1 min 15 s" in failed                    # end - start of an ended job
    assert "FAILED 1" in failed and "CANCELED 1" in failed
    assert "<summary>ValueError: bad row 7</summary>" in html
    assert "<pre>ValueError: bad row 7\n  at line 3</pre>" in html
    assert re.search(r"<td>split</td><td>2</td><td><span[^>]*>RUNNING</span></td>", html)


def test_page_shows_each_task_executor_with_free_and_allocated_slots():
    html = page(two_jobs())

    row = re.search(r"<tr><td><code>te-1</code></td>(.*?)</tr>", html, re.S).group(1)
    assert "127.0.0.1:4242" in row
    assert re.search(r'class="slot slot-allocated" title="job j-run">0: allocated → wordcount', row)
    assert 'class="slot slot-free">1: free</span>' in row


def test_empty_cluster_says_so():
    html = page(FakeDispatcher([], []))
    assert "No jobs yet." in html and "No TaskExecutors." in html


def test_everything_users_named_is_escaped():
    evil = '<img src=x onerror="alert(1)">&'
    fake = FakeDispatcher(
        [executor("te-1", ("allocated", "j1"))],
        [job("j1", evil, "FAILED", end=T0 + 1, cause=evil, vertices=[vertex(evil, 1, "FAILED", FAILED=1)])])
    html = page(fake, title=evil, mode=evil)

    assert "<img" not in html and 'onerror="' not in html
    # <title>, header, mode, job row, slot, the cause's summary and text, the vertex
    assert html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;") == 8


def test_page_refers_to_nothing_by_absolute_path():
    """Behind the YARN web proxy the page lives under /proxy/<application>/...: an
    absolute path would leave it."""
    html = page(two_jobs())

    assert not re.search(r'(href|src|action)\s*=\s*["\']?/', html)
    assert "fetch(location.href" in html
    assert not re.search(r"(https?:)?//", html.replace("http-equiv", ""))


def test_content_security_policy_admits_exactly_the_pages_own_script_and_style():
    [(_, headers, body)] = serve(two_jobs(), ("GET", ""))
    html = body.decode()
    policy = headers["Content-Security-Policy"]

    for tag in ("script", "style"):
        inline = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.S).group(1)
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy
    assert headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ["", "api/overview", "jobs", "cluster"])
def test_every_method_but_get_is_refused_on_every_path(method, path):
    fake = two_jobs()
    [(status, headers, _)] = serve(fake, (method, path))

    assert status == 405
    assert headers["Allow"] in ("GET,HEAD", "GET, HEAD")


def test_unknown_path_is_not_found():
    [(status, _, _)] = serve(two_jobs(), ("GET", "jobs"))
    assert status == 404


def test_head_is_answered_like_get_without_a_body():
    [(status, _, body)] = serve(two_jobs(), ("HEAD", ""))
    assert status == 200 and body == b""


def test_stop_is_idempotent_and_frees_the_port():
    async def run():
        dashboard = Dashboard(two_jobs(), "127.0.0.1")
        url = await dashboard.start()
        await dashboard.stop()
        await dashboard.stop()
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get(url)
    asyncio.run(run())


@pytest.mark.parametrize("seconds, text", [
    (0.42, "0.4 s"), (59.94, "59.9 s"), (75, "1 min 15 s"), (3600 + 125, "1 h 02 min"),
    (3 * 86400 + 7200, "3 d 02 h"), (-1, "0.0 s")])
def test_durations_read_like_a_clock(seconds, text):
    assert _duration(seconds) == text


def test_a_pyspark_job_shows_its_spark_application_and_the_tail_of_its_output():
    import msgspec

    script = msgspec.structs.replace(
        job("j-py", "PySpark script pi.py", "RUNNING", T0),
        spark_application="application_1_0002",
        spark_tracking_url="http://rm:8088/proxy/application_1_0002/",
        output_tail="Pi is roughly 3.14\n<script>alert(1)</script>")
    html = page(FakeDispatcher([], [script]))

    assert re.search(r'id="spark-j-py">Spark application <a href="http://rm:8088/proxy/'
                     r'application_1_0002/">application_1_0002</a>', html)
    assert "Pi is roughly 3.14\n&lt;script&gt;alert(1)&lt;/script&gt;</pre>" in html
    assert "<script>alert(1)" not in html


def test_a_streaming_job_shows_its_checkpoints():
    import msgspec

    from flinkyarn.gateways.dispatcher import CheckpointView

    streaming = msgspec.structs.replace(
        job("j-st", "counts", "RUNNING", T0),
        checkpoints=CheckpointView(triggered=9, completed=7, failed=1, in_progress=1,
                                   last_completed_id=8, last_completed_duration=0.125,
                                   last_completed_size=2048, restored_from=5,
                                   last_completed_alignment=0.0125,
                                   last_failure="checkpoint 3: it expired <late>\nmore"))
    html = page(FakeDispatcher([], [streaming]))

    assert ('id="checkpoints-j-st">checkpoints: 7 completed, 1 failed, 1 in progress; last #8 '
            '(125 ms, 2048 bytes, aligned in 12 ms); restored from #5; last failure: checkpoint 3: it expired '
            '&lt;late&gt;</p>') in html
