"""The dashboard as an admin's browser shows it: headless Chromium (tests/browser.py)
renders the page, runs its refresh script, and we read the DOM it built.

First against the dashboard of a real local cluster, then against a Dashboard over a
fake Dispatcher behind a path-prefix proxy like YARN's, where the page's refresh and its
escaping are checked in the browser."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp import web

from flinkyarn.job import JobBuilder
from tests.browser import dump_dom, screenshot
from tests.local import jobs
from tests.waiting import wait_for
from tests.unit.test_dashboard import FakeDispatcher, executor, job, vertex
from yarn_am.dashboard import Dashboard

PROXY_PREFIX = "/proxy/application_1700000000000_0001/"


def job_row(dom: str, job_id: str) -> str:
    match = re.search(rf'<tr class="job" id="job-{job_id}">(.*?)</tr>', dom, re.S)
    assert match, f"the page has no row for job {job_id}:\n{dom}"
    return match.group(1)


def running_tasks(rest, job_id: str) -> int:
    return sum(v.state_counts.get("RUNNING", 0) for v in rest.job(job_id).vertices)


def post(url: str) -> int:
    request = urllib.request.Request(url, data=b"{}", method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


# ---- the dashboard of a real local cluster ------------------------------------------------

def test_dashboard_of_a_local_cluster_shows_the_running_job_then_finished(cluster, folder, tmp_path):
    builder = JobBuilder("dashboard <check>")
    builder.add_vertex("waits", jobs.wait_for_go(folder), parallelism=2)
    job_id = cluster.rest.submit(builder.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 2, 30, "2 running tasks")
    [task_executor] = cluster.rest.overview().task_executors
    url = cluster.dashboard_url
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[\w-]{32}/", url), url

    dom = dump_dom(url)

    row = job_row(dom, job_id)
    assert "dashboard &lt;check&gt;" in row and ">RUNNING<" in row
    assert re.search(r"<td>waits</td><td>2</td><td><span[^>]*>RUNNING</span></td>", dom)
    assert task_executor.resource_id in dom and task_executor.address in dom
    assert dom.count("allocated → dashboard &lt;check&gt;") == 2
    png = screenshot(url, tmp_path / "dashboard.png")
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 10_000
    assert post(url) == 405 and post(url + "api/overview") == 405
    assert cluster.rest.job(job_id).status == "RUNNING"   # the POSTs changed nothing

    (folder / "go").touch()
    wait_for(lambda: cluster.rest.job(job_id).status == "FINISHED", 30, "the job to finish")

    row = job_row(dump_dom(url), job_id)
    assert ">FINISHED<" in row and "FINISHED 2" in row
    with urllib.request.urlopen(url + "api/overview", timeout=10) as response:
        overview = msgspec.json.decode(response.read())
    assert [(j["job_id"], j["status"]) for j in overview["jobs"]] == [(job_id, "FINISHED")]


# ---- a Dashboard over a fake Dispatcher, behind a path-prefix proxy -----------------------

class ChangingDispatcher(FakeDispatcher):
    """Each look at the cluster (cluster_overview) moves on to the next of states and
    then stays at the last; a state that is an exception is raised instead."""

    def __init__(self, executors, *states) -> None:
        super().__init__(executors, [])
        self._states = list(states)

    async def cluster_overview(self, request):
        state = self._states.pop(0) if len(self._states) > 1 else self._states[0]
        if isinstance(state, Exception):
            raise state
        self.jobs = state
        return await super().cluster_overview(request)


def get(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def closed_by_server(connection: socket.socket, within: float) -> bool:
    connection.settimeout(within)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_the_dashboard_is_for_its_secret_url_on_loopback_and_outlasts_a_flood(start_cluster):
    """Not on the network, not without the secret path; a flood of idle or never-finished
    connections is capped and timed out, and REST answers all along (the AppMaster's
    open-file limit is raised to the hard limit at start)."""
    cluster = start_cluster(**{"dashboard.max-connections": "8", "dashboard.timeout": "3 s"})
    url = urllib.parse.urlsplit(cluster.dashboard_url)
    root = f"http://127.0.0.1:{url.port}/"
    assert get(cluster.dashboard_url) == 200
    assert get(root) == 404 and get(root + "api/overview") == 404
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", url.port), timeout=5).close()
    limits = Path(f"/proc/{cluster.process.pid}/limits").read_text()
    soft, hard = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits).groups()
    assert soft == hard, limits

    flood = [socket.create_connection(("127.0.0.1", url.port), timeout=5) for _ in range(40)]
    try:
        # Over the cap: closed at once.
        assert sum(closed_by_server(c, 0.05) for c in flood[8:]) == 32
        assert cluster.rest.overview() is not None
        # A request that never completes: its bytes do not keep it open.
        flood[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            time.sleep(0.3)
            flood[0].sendall(b"X-Slow: 1\r\n")
        assert all(closed_by_server(c, 5.0) for c in flood[:8])
    finally:
        for connection in flood:
            connection.close()
    assert get(cluster.dashboard_url) == 200


class BehindProxy:
    """A Dashboard on an event loop in a thread of its own, reached through a proxy that
    forwards only GETs under PROXY_PREFIX, as YARN's web proxy serves it under
    /proxy/<application id>/."""

    def __init__(self, dispatcher) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._dashboard = Dashboard(dispatcher, "127.0.0.1", title="test-cluster")
        self.url = self._call(self._start())

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    async def _start(self) -> str:
        target = await self._dashboard.start()
        self._session = aiohttp.ClientSession()

        async def forward(request: web.Request) -> web.Response:
            async with self._session.get(target + request.match_info["tail"]) as upstream:
                return web.Response(status=upstream.status, body=await upstream.read(),
                                    headers={k: v for k, v in upstream.headers.items()
                                             if k in ("Content-Type", "Content-Security-Policy")})

        app = web.Application()
        app.router.add_get(PROXY_PREFIX + "{tail:.*}", forward)
        self._proxy = web.AppRunner(app, access_log=None)
        await self._proxy.setup()
        site = web.TCPSite(self._proxy, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}{PROXY_PREFIX}"

    async def _stop(self) -> None:
        await self._proxy.cleanup()
        await self._session.close()
        await self._dashboard.stop()

    def close(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def behind_proxy():
    served = []

    def serve(dispatcher) -> str:
        served.append(BehindProxy(dispatcher))
        return served[-1].url

    yield serve
    for proxy in served:
        proxy.close()


RUNNING = [job("j1", "wordcount", "RUNNING", vertices=[vertex("split", 2, "RUNNING", RUNNING=2)])]
FINISHED = [job("j1", "wordcount", "FINISHED", end=1_700_000_100.0,
                vertices=[vertex("split", 2, "FINISHED", FINISHED=2)])]


def test_page_refreshes_itself_through_the_proxy_prefix(behind_proxy):
    url = behind_proxy(ChangingDispatcher([executor("te-1", ("allocated", "j1"))],
                                          RUNNING, FINISHED))

    dom = dump_dom(url, wait_ms=5000)   # the first look saw RUNNING; only a refresh sees this

    row = job_row(dom, "j1")
    assert ">FINISHED<" in row and "FINISHED 2" in row
    assert '<div id="stale" hidden="">' in dom


def test_page_keeps_the_last_state_under_a_banner_when_the_appmaster_stops_answering(behind_proxy):
    url = behind_proxy(ChangingDispatcher([], RUNNING, RuntimeError("AppMaster going away")))

    dom = dump_dom(url, wait_ms=5000)

    assert ">RUNNING<" in job_row(dom, "j1")
    assert re.search(r'<div id="stale">The AppMaster did not answer \(HTTP 500\)', dom)


def test_names_with_markup_stay_text_in_the_browser(behind_proxy):
    evil = '<b id="injected">x</b><img src="x" onerror="document.title=\'pwned\'">'
    url = behind_proxy(ChangingDispatcher([executor("te-1", ("allocated", "j1"))], [
        job("j1", evil, "FAILED", end=1_700_000_001.0, cause=evil,
            vertices=[vertex(evil, 1, "FAILED", FAILED=1)])]))

    dom = dump_dom(url, wait_ms=3000)

    # Chromium writes text nodes back with < and > escaped; elements would come out raw.
    assert "<b " not in dom and "<img" not in dom
    assert "<title>test-cluster</title>" in dom
    assert '&lt;b id="injected"&gt;x&lt;/b&gt;&lt;img' in job_row(dom, "j1")
