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

from flinkyarn.gateways import ACK, Ack
from flinkyarn.gateways.dispatcher import (ClusterOverview, JobDetails, JobOverview, JobQuery,
                                           SlotView, TaskExecutorView, VertexDetails)
from yarn_am.dashboard import Dashboard
from yarn_am.pages import duration as _duration
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

    cancelled: list[str] = []

    async def cancel_job(self, request: JobQuery) -> Ack:
        await self.job_details(request)
        self.cancelled = [*self.cancelled, request.job_id]
        return ACK


def two_jobs() -> FakeDispatcher:
    return FakeDispatcher(
        [executor("te-1", ("allocated", "j-run"), ("free", None))],
        [job("j-old", "nightly etl", "FAILED", T0, T0 + 75, cause="ValueError: bad row 7\n  at line 3",
             vertices=[vertex("read", 2, "FAILED", FAILED=1, CANCELED=1)]),
         job("j-run", "wordcount", "RUNNING", T0 + 100,
             vertices=[vertex("split", 2, "RUNNING", RUNNING=2), vertex("count", 1, "CREATED", CREATED=1)])])


def serve(dispatcher, *requests: tuple, **kwargs) -> list[tuple[int, dict, bytes]]:
    """Starts a Dashboard, makes the requests (method, path relative to its URL[,
    body]), stops it."""
    async def run():
        dashboard = Dashboard(dispatcher, "127.0.0.1", **kwargs)
        url = await dashboard.start()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[\w-]{32}/", url)
        try:
            async with aiohttp.ClientSession() as session:
                answers = []
                for method, path, *body in requests:
                    async with session.request(method, url + path,
                                               data=body[0] if body else None) as response:
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
                      "metrics": None, "inputs": []}],
        "restarts": 0, "root_cause": None, "restart_history": [], "restart_limit": None,
        "spark_application": None, "spark_tracking_url": None, "output_tail": "",
        "checkpoints": None, "waiting": "", "blocked": []}
    assert overview["task_executors"] == [{"resource_id": "te-1", "address": "127.0.0.1:4242", "slots": [
        {"index": 0, "state": "allocated", "job_id": "j-run"},
        {"index": 1, "state": "free", "job_id": None}], "metrics_address": "", "container_id": "",
        "host": "", "log_url": ""}]


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

    row = re.search(r'<tr class="executor" id="te-te-1"><td><code>te-1</code></td>(.*?)</tr>',
                    html, re.S).group(1)
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
    # <title>, header, mode, job row, slot, the cause's summary and text, the vertex's
    # row, its box's id and title in the graph, the exception's summary and text
    assert html.count("&lt;img src=x onerror=&#34;alert(1)&#34;&gt;&amp;") == 12


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


# ---- the job graph, subtasks, exceptions, restarts --------------------------------------

def diamond() -> JobDetails:
    """source -> split (hash) -> count, and source -> count (broadcast); count backpressured."""
    from flinkyarn.gateways.dispatcher import RestartView, SubtaskView, VertexInput
    from flinkyarn.metrics import TaskIOMetrics

    source = VertexDetails("v-src", "source", 1, "FINISHED", {"FINISHED": 1},
                           metrics=TaskIOMetrics(records_out=40, backpressured_ms_per_second=20))
    split = VertexDetails(
        "v-split", "split", 2, "RUNNING", {"RUNNING": 2},
        [SubtaskView(0, "RUNNING", 1, "te-1", T0 + 5, None,
                     TaskIOMetrics(records_in=21, records_out=30, busy_ms_per_second=500,
                                   duration=2.0)),
         SubtaskView(1, "RUNNING", 0, "te-gone", T0 + 6, None, None)],
        TaskIOMetrics(records_in=40, backpressured_ms_per_second=300),
        [VertexInput("v-src", "hash (word)")])
    count = VertexDetails("v-count", "count", 1, "RUNNING", {"RUNNING": 1},
                          metrics=TaskIOMetrics(backpressured_ms_per_second=700),
                          inputs=[VertexInput("v-split", "forward"),
                                  VertexInput("v-src", "broadcast")])
    restart = RestartView(1, T0 + 30, "split (1/2) failed: OSError: disk full\n  at write",
                          "split (1/2)", ["split (1/2)"])
    return JobDetails("j-d", "diamond", "RUNNING", T0, None, None, [source, split, count],
                      restarts=1, root_cause=restart.cause, restart_history=[restart])


def test_the_job_graph_is_drawn_with_its_vertices_edges_partitioners_and_backpressure():
    html = page(FakeDispatcher([], [diamond()]), )
    svg = re.search(r'<svg class="job-graph" id="graph-j-d".*?</svg>', html, re.S).group(0)

    boxes = dict(re.findall(r'<g class="vertex (bp-\w+)" data-vertex="(v-\w+)">', svg)[i][::-1]
                 for i in range(3))
    assert boxes == {"v-src": "bp-ok", "v-split": "bp-mid", "v-count": "bp-high"}
    xs = {v: int(x) for v, x in re.findall(r'data-vertex="(v-\w+)"><title>[^<]*</title><rect x="(\d+)"', svg)}
    assert xs["v-src"] < xs["v-split"] < xs["v-count"]  # sources left, by longest path
    edges = re.findall(r'<path class="edge" data-source="(v-\w+)" data-target="(v-\w+)"', svg)
    assert sorted(edges) == [("v-split", "v-count"), ("v-src", "v-count"), ("v-src", "v-split")]
    labels = re.findall(r'<text class="edge-label"[^>]*>([^<]*)</text>', svg)
    assert sorted(labels) == ["broadcast", "forward", "hash (word)"]
    assert "parallelism 2 · RUNNING" in svg and "backpressured 70%" in svg


def test_subtasks_link_their_task_executors_log_and_show_their_metrics():
    te = TaskExecutorView("te-1", "10.0.0.7:4242", [], container_id="container_1_0001_01_000002",
                          host="node7", log_url="http://node7:8042/node/containerlogs/"
                                                "container_1_0001_01_000002/alice")
    html = page(FakeDispatcher([te], [diamond()]))

    table = re.search(r'id="subtasks-j-d-v-split">.*?</details>', html, re.S).group(0)
    rows = re.findall(r'<tr class="subtask">(.*?)</tr>', table, re.S)
    assert len(rows) == 2
    assert ('<a class="log" href="http://node7:8042/node/containerlogs/container_1_0001_01_000002/'
            'alice"><code>te-1</code></a></td><td>node7</td>') in rows[0]
    # 30 records out in 2 s; busy half of each second.
    assert '<td class="records-in">21</td>' in rows[0] and "<td>15</td><td>50%</td>" in rows[0]
    assert "<code>te-gone</code>" in rows[1] and "no metrics yet" in rows[1]
    executor_row = re.search(r'<tr class="executor" id="te-te-1">(.*?)</tr>', html, re.S).group(1)
    assert "<code>container_1_0001_01_000002</code></td><td>node7</td>" in executor_row
    assert 'class="log" href="http://node7:8042/' in executor_row


def test_exceptions_name_the_task_and_mark_the_root_cause_and_restarts_sit_on_a_timeline():
    import msgspec

    failed = msgspec.structs.replace(
        diamond(), status="FAILED", end_time=T0 + 60,
        failure_cause="split (2/2) failed: ValueError: bad row 9",
        root_cause="split (2/2) failed: ValueError: bad row 9")
    html = page(FakeDispatcher([], [failed]))

    rows = re.findall(r'<tr class="exception"><td>([^<]*)</td><td class="task">([^<]*)</td>'
                      r'<td><details><summary>(.*?)</summary>', html, re.S)
    assert rows == [("2023-11-14 22:14:20", "split (2/2)",
                     "split (2/2) failed: ValueError: bad row 9 <strong>(root cause)</strong>"),
                    ("2023-11-14 22:13:50", "split (1/2)", "split (1/2) failed: OSError: disk full")]
    timeline = re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)
    # Restart at 30 s of 60: the middle of the line from 10 to 630.
    assert re.search(r'<circle class="restart" cx="320"', timeline)
    assert "restart #1 at 2023-11-14 22:13:50 UTC after split (1/2) failed" in timeline


# ---- cancelling from the dashboard -------------------------------------------------------

TOKEN = "0123456789abcdef0123456789abcdef"
TOKEN_BODY = b'{"token": "0123456789abcdef0123456789abcdef"}'


def test_cancel_needs_the_sessions_token_and_changes_nothing_without_it():
    fake = two_jobs()
    answers = serve(fake, ("PUT", "api/jobs/j-run/cancel", b"{}"),
                    ("PUT", "api/jobs/j-run/cancel", b'{"token": "guess"}'),
                    ("PUT", "api/jobs/j-run/cancel", b"token=" + TOKEN.encode()),
                    ("PUT", "api/jobs/nobody/cancel", TOKEN_BODY),
                    ("POST", "api/jobs/j-run/cancel", TOKEN_BODY),
                    ("PUT", "api/overview", TOKEN_BODY),
                    ("GET", ""),
                    ("PUT", "api/jobs/j-run/cancel", TOKEN_BODY),
                    cancel_token=TOKEN)
    statuses = [status for status, _, _ in answers]
    assert statuses == [403, 403, 400, 404, 405, 405, 200, 202]
    assert b"flinkyarn session token" in answers[0][2]
    assert b"no job nobody" in answers[3][2]
    assert fake.cancelled == ["j-run"]
    html = answers[6][2].decode()
    # A button on the running job only.
    assert re.findall(r'<button class="cancel" type="button" data-job="([\w-]+)"', html) == ["j-run"]


def test_without_a_token_nobody_can_cancel_and_no_button_is_shown():
    fake = two_jobs()
    [(status, _, _), (_, _, body)] = serve(
        fake, ("PUT", "api/jobs/j-run/cancel", TOKEN_BODY), ("GET", ""))
    assert status == 405 and fake.cancelled == []
    assert b'class="cancel"' not in body


def test_a_waiting_job_says_why():
    import msgspec

    waiting = msgspec.structs.replace(
        job("j-w", "waits", "RUNNING"), waiting="waiting for 2 container(s) of 1024 MB: queue "
                                               "'etl' is at its limit (8192 of 8192 MB used)")
    html = page(FakeDispatcher([], [waiting]))
    assert ('<p class="waiting" id="waiting-j-w">waiting for 2 container(s) of 1024 MB: queue '
            '&#39;etl&#39; is at its limit (8192 of 8192 MB used)</p>') in html


def test_a_job_says_which_task_executors_it_blocked_and_why():
    import msgspec

    from flinkyarn.gateways.dispatcher import BlockedView

    blocked = msgspec.structs.replace(job("j-b", "blocks", "RUNNING"), blocked=[BlockedView(
        "taskexecutor-5-ab", 1_700_000_600.0,
        "2 task failures there within 600 s; the last: count words (1/2): OperatorError")])
    html = page(FakeDispatcher([], [blocked]))
    assert '<ul class="waiting" id="blocked-j-b">' in html
    assert ("TaskExecutor <code>taskexecutor-5-ab</code> blocked for this job until "
            in html)
    assert "2 task failures there within 600 s; the last: count words (1/2): OperatorError" in html
