"""The dashboard: a read-only web page of the cluster for people, reached from the YARN UI.

    GET /              the page: jobs (status, times, failure cause, vertices with their
                       task states) and TaskExecutors with their slots
    GET /api/overview  the same as JSON: `DashboardOverview`

Plain HTTP, because the YARN web proxy that forwards the admin's browser to it cannot
present the cluster's client certificate; so it only reads. Every method but GET (and
HEAD) is answered 405 on every path: nothing here submits, cancels or shuts down.

Who may read it: job names, addresses and failure causes (which can hold user data) are
not for anyone on the network. The dashboard binds to loopback only, and serves only
under a secret first path segment, made at start (`http://127.0.0.1:PORT/SECRET/`): on
YARN that URL is registered with skein's web UI in the same container, which YARN's web
proxy reaches (the RM's AmIpFilter rule guards skein's UI), so people get the page only
through the proxy; locally the URL goes only into the owner-only work folder. Guards
for the AppMaster's sake (it shares the process's descriptors with REST and RPC): at
most `dashboard.max-connections` connections (more are closed as they come), and a
connection not answered within `dashboard.timeout` of its opening or its last answer
(idle, or a request that never completes) is closed.

The page is rendered here, with every value from users (job and vertex names, failure
causes) escaped, and a Content-Security-Policy that lets only the page's own script and
style run. That script refreshes the page every two seconds by fetching the page's own
URL and swapping in its `<main>`. The page uses no absolute path: behind the YARN web
proxy it lives under `/proxy/<application id>/...`, and it must not leave that prefix.

Runs on the AppMaster's event loop and calls the Dispatcher directly on that loop
(`cluster_overview`, `job_details`; no other method).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import logging
import secrets
import time
from typing import Callable, cast

import msgspec
from aiohttp import web

from flinkyarn.gateways import ACK
from flinkyarn.gateways.dispatcher import (DispatcherGateway, JobDetails, JobQuery,
                                           TaskExecutorView)
from flinkyarn.metrics import TaskIOMetrics

log = logging.getLogger(__name__)

REFRESH_MS = 2000


class DashboardOverview(msgspec.Struct, frozen=True):
    """`GET api/overview`: the ClusterOverview with each job's details, newest job first."""

    task_executors: list[TaskExecutorView]
    jobs: list[JobDetails]
    notice: str = ""  # what the cluster's user must know (tokens that will run out)


class Dashboard:
    def __init__(self, dispatcher: DispatcherGateway, host: str = "127.0.0.1", port: int = 0, *,
                 title: str = "flinkyarn", mode: str | None = None,
                 max_connections: int = 64, timeout: float = 10.0) -> None:
        """title names the cluster in the page's header; mode (e.g. "session on YARN"),
        when given, is shown next to it."""
        self._dispatcher = dispatcher
        self._host, self._port = host, port
        self._title, self._mode = title, mode
        self._max_connections, self._timeout = max_connections, timeout
        self._secret = secrets.token_urlsafe(24)
        pages = web.Application(middlewares=[read_only("dashboard")])
        pages.add_routes([web.get("/", self.page), web.get("/api/overview", self.overview)])
        self._app = web.Application()
        self._app.add_subapp(f"/{self._secret}/", pages)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.url: str | None = None

    async def start(self) -> str:
        """Serves; returns the base URL, ending in "/" (e.g.
        "http://127.0.0.1:8081/SECRET/")."""
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        assert self._runner.server is not None  # made by setup()
        connections = _Connections(self._runner.server, self._max_connections, self._timeout)
        self._server = await asyncio.get_running_loop().create_server(
            connections.protocol, self._host, self._port)
        port = self._server.sockets[0].getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"http://{host}:{port}/{self._secret}/"
        log.info("dashboard at http://%s:%d/ (under its secret path)", host, port)
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def snapshot(self) -> DashboardOverview:
        cluster = await self._dispatcher.cluster_overview(ACK)
        jobs = [await self._dispatcher.job_details(JobQuery(job.job_id)) for job in
                sorted(cluster.jobs, key=lambda job: job.start_time, reverse=True)]
        tokens = cluster.delegation_tokens
        notice = tokens.message if tokens is not None and tokens.warning else ""
        return DashboardOverview(cluster.task_executors, jobs, notice)

    async def page(self, request: web.Request) -> web.Response:
        body = render_page(await self.snapshot(), self._title, self._mode, time.time())
        return web.Response(text=body, content_type="text/html", headers=PAGE_HEADERS)

    async def overview(self, request: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(await self.snapshot()),
                            content_type="application/json", headers=_NO_CACHE)


def read_only(what: str):
    """An aiohttp middleware that answers every method but GET and HEAD with 405."""
    @web.middleware
    async def middleware(request: web.Request, handler):
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "HEAD"],
                                           text=f"the {what} is read-only\n")
        return await handler(request)
    return middleware


class _Connections:
    """The dashboard's connections: aiohttp's protocol for each, inside a guard that
    counts them and closes the ones over `most` at once, and each one not answered
    within `timeout` s of its opening or its last answer."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], most: int, timeout: float) -> None:
        self._factory = factory
        self._most, self._timeout = most, timeout
        self.live = 0
        self._refused = 0

    def protocol(self) -> asyncio.Protocol:
        return _Guarded(self)


class _Guarded(asyncio.Protocol):
    def __init__(self, connections: _Connections) -> None:
        self._connections = connections
        self._inner: asyncio.Protocol | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a TCP server's
        connections = self._connections
        if connections.live >= connections._most:
            connections._refused += 1
            if connections._refused in (1, 10, 100) or connections._refused % 1000 == 0:
                log.warning("dashboard: %d connections open, the most it takes; closed %d "
                            "more", connections.live, connections._refused)
            transport.abort()
            return
        connections.live += 1
        self._transport = transport
        self._inner = connections._factory()
        self._answered()
        # _Answering passes everything else through to the transport.
        self._inner.connection_made(cast(asyncio.Transport, _Answering(transport, self._answered)))

    def _answered(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = asyncio.get_running_loop().call_later(
            self._connections._timeout, self._expire)

    def _expire(self) -> None:
        if self._transport is not None:
            self._transport.abort()  # connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:
            return
        if self._deadline is not None:
            self._deadline.cancel()
        self._connections.live -= 1
        inner, self._inner, self._transport = self._inner, None, None
        inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class _Answering:
    """The transport as aiohttp's protocol sees it: each write (an answer going out)
    moves the connection's deadline."""

    def __init__(self, transport: asyncio.Transport, answered: Callable[[], None]) -> None:
        self._transport = transport
        self._answered = answered

    def write(self, data: bytes) -> None:
        self._answered()
        self._transport.write(data)

    def writelines(self, lines) -> None:
        self._answered()
        self._transport.writelines(lines)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


# ---- the page ---------------------------------------------------------------------------

def render_page(overview: DashboardOverview, title: str, mode: str | None, now: float) -> str:
    """The whole HTML page for overview as of now (seconds since the epoch)."""
    return render_document(title, mode, _main(overview, now))


def render_document(title: str, mode: str | None, main: str) -> str:
    """A page of the dashboard's look around `main` (HTML, a <main> element, its values
    escaped by the caller), refreshing itself; served with PAGE_HEADERS."""
    heading = _e(title) + (f' <span class="mode">{_e(mode)}</span>' if mode else "")
    return _PAGE.format(title=_e(title), heading=heading, style=_STYLE, script=_SCRIPT,
                        main=main)


def _main(overview: DashboardOverview, now: float) -> str:
    names: dict[str, str] = {job.job_id: job.name for job in overview.jobs}
    jobs = "".join(_job_rows(job, now) for job in overview.jobs) or \
        '<tr><td colspan="6" class="none">No jobs yet.</td></tr>'
    executors = "".join(_executor_row(te, names) for te in overview.task_executors) or \
        '<tr><td colspan="3" class="none">No TaskExecutors.</td></tr>'
    notice = f'<p class="notice">{_e(overview.notice)}</p>\n' if overview.notice else ""
    return (f'<main>\n{notice}<h2>Jobs</h2>\n<table class="jobs">\n'
            f"<thead><tr><th>Name</th><th>Job ID</th><th>Status</th><th>Start time (UTC)</th>"
            f"<th>Duration</th><th>Tasks</th></tr></thead>\n<tbody>{jobs}</tbody>\n</table>\n"
            f"<h2>TaskExecutors</h2>\n<table>\n<thead><tr><th>TaskExecutor</th><th>Address</th>"
            f"<th>Slots</th></tr></thead>\n<tbody>{executors}</tbody>\n</table>\n"
            f'<p class="updated">Updated {_timestamp(now)} UTC</p>\n</main>')


def _job_rows(job: JobDetails, now: float) -> str:
    end = job.end_time if job.end_time is not None else now
    totals: dict[str, int] = {}
    for vertex in job.vertices:
        for state, count in vertex.state_counts.items():
            totals[state] = totals.get(state, 0) + count
    vertices = "".join(
        f'<tr class="vertex"><td>{_e(v.name)}</td><td>{v.parallelism}</td><td>{_state(v.state)}</td>'
        f"<td>{_counts(v.state_counts)}</td>{_io_cells(v.metrics)}</tr>" for v in job.vertices)
    cause = ""
    if job.failure_cause:
        first_line = (job.failure_cause.strip().splitlines() or [""])[0]
        cause = (f'<details class="cause" id="cause-{_e(job.job_id)}"><summary>'
                 f"{_e(first_line)}</summary><pre>{_e(job.failure_cause)}</pre></details>")
    if job.restarts:
        root = (job.root_cause or "").strip().splitlines()[:1]
        restarts = "".join(
            f"<li>#{r.number} after {_e(r.failed_task)} failed: "
            f"{_e(r.cause.strip().splitlines()[0] if r.cause.strip() else '')}"
            f" &mdash; restarted {len(r.restarted)} task(s): {_e(', '.join(r.restarted))}</li>"
            for r in job.restart_history)
        cause += (f'<details class="cause" id="restarts-{_e(job.job_id)}"><summary>'
                  f"{job.restarts} restart(s); root cause: {_e(root[0] if root else '')}</summary>"
                  f"<ul>{restarts}</ul></details>")
    if job.checkpoints is not None:
        cause += (f'<p class="checkpoints" id="checkpoints-{_e(job.job_id)}">'
                  f"{_e(job.checkpoints.summary())}</p>")
    if job.spark_application:
        url = job.spark_tracking_url or ""
        link = (f'<a href="{_e(url)}">{_e(job.spark_application)}</a>'
                if url.startswith(("http://", "https://")) else _e(job.spark_application))
        cause += f'<p class="spark" id="spark-{_e(job.job_id)}">Spark application {link}</p>'
    if job.output_tail:
        cause += (f'<details class="output" id="output-{_e(job.job_id)}" open><summary>Output '
                  f"(last lines)</summary><pre>{_e(job.output_tail)}</pre></details>")
    return (f'<tr class="job" id="job-{_e(job.job_id)}"><td class="name">{_e(job.name)}</td>'
            f"<td><code>{_e(job.job_id)}</code></td><td>{_state(job.status)}</td>"
            f"<td>{_timestamp(job.start_time)}</td><td>{_duration(end - job.start_time)}</td>"
            f"<td>{_counts(totals)}</td></tr>\n"
            f'<tr class="detail"><td colspan="6">{cause}<table class="vertices"><thead><tr>'
            f"<th>Vertex</th><th>Parallelism</th><th>State</th><th>Tasks</th><th>Records in</th>"
            f"<th>Records out</th><th>Bytes in</th><th>Bytes out</th><th>Backpressured</th>"
            f"</tr></thead>"
            f"<tbody>{vertices}</tbody></table></td></tr>\n")


def _io_cells(metrics: TaskIOMetrics | None) -> str:
    """A vertex's records and bytes, and its busiest subtask's backpressure (share of
    time waiting for room in its outputs)."""
    if metrics is None:
        return '<td colspan="5" class="none">no metrics yet</td>'
    return (f'<td class="records-in">{metrics.records_in}</td>'
            f'<td class="records-out">{metrics.records_out}</td>'
            f"<td>{_bytes(metrics.bytes_in)}</td><td>{_bytes(metrics.bytes_out)}</td>"
            f"<td>{metrics.backpressured_ms_per_second / 10:.0f}%</td>")


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _executor_row(te: TaskExecutorView, job_names: dict[str, str]) -> str:
    slots = []
    for slot in te.slots:
        text = f"{slot.index}: {_e(slot.state)}"
        hint = ""
        if slot.job_id is not None:
            name = job_names.get(slot.job_id, "?")
            text += f" → {_e(name)} <code>{_e(slot.job_id[:8])}</code>"
            hint = f' title="job {_e(slot.job_id)}"'
        slots.append(f'<span class="slot slot-{_css(slot.state)}"{hint}>{text}</span>')
    return (f"<tr><td><code>{_e(te.resource_id)}</code></td><td>{_e(te.address)}</td>"
            f'<td>{"".join(slots)}</td></tr>\n')


def _state(state: str) -> str:
    return f'<span class="state s-{_css(state)}">{_e(state)}</span>'


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f'<span class="count s-{_css(state)}">{_e(state)} {n}</span>'
                    for state, n in counts.items() if n)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _css(state: str) -> str:
    """A CSS class name part for a state, whatever characters the state has."""
    return "".join(c for c in state.lower() if c.isascii() and c.isalnum()) or "unknown"


def _timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


# Colours by state: blue running, green finished, red failed, grey canceled, amber in between.
_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; align-items: baseline; gap: 16px; }
header h1 { font-size: 20px; margin: 0; }
header .mode { font-size: 14px; font-weight: normal; color: #b8c0d0; margin-left: 8px; }
#stale { background: #fbe3e3; color: #8a1f1f; padding: 6px 20px; }
main { padding: 4px 20px 20px; }
h2 { font-size: 16px; margin: 18px 0 6px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #e3e6ec; vertical-align: top; }
th { background: #eceff4; font-weight: 600; }
tr.job td { border-bottom: none; }
tr.job td.name { font-weight: 600; }
tr.detail > td { padding: 0 8px 10px 28px; }
table.vertices { width: 70%; }
table.vertices th { background: #f5f6f8; font-weight: normal; color: #4a5263; }
code { font: 12px ui-monospace, monospace; color: #4a5263; }
.none { color: #777; font-style: italic; }
.notice { background: #fff4e5; border: 1px solid #f0b35b; padding: 6px 10px; }
.state, .count, .slot { display: inline-block; border-radius: 3px; padding: 0 6px; margin: 1px 2px;
  font-size: 12px; white-space: nowrap; background: #e3e6ec; }
.state { font-weight: 600; }
.s-running, .s-deploying, .s-initializing, .s-scheduled { background: #d8e6fb; color: #1f4f96; }
.s-finished { background: #d9f2dd; color: #1f6b2c; }
.s-failed, .s-failing { background: #fbdcdc; color: #8a1f1f; }
.s-canceled, .s-cancelling, .s-canceling { background: #e3e3e3; color: #555; }
.s-created, .s-restarting { background: #fbeccf; color: #7a5200; }
.slot-free { background: #eef7ef; color: #1f6b2c; }
.slot-allocated { background: #d8e6fb; color: #1f4f96; }
.slot-pending { background: #fbeccf; color: #7a5200; }
details.cause { margin: 6px 0; color: #8a1f1f; overflow-wrap: anywhere; }
details.cause pre { white-space: pre-wrap; background: #fff5f5; border: 1px solid #f0c8c8; padding: 8px;
  max-height: 300px; overflow: auto; color: #1d2330; }
.updated { color: #777; font-size: 12px; }
"""

# Refreshes by fetching this page's own URL (whatever proxy prefix it has) and swapping
# in its <main>; opened failure causes stay open. If the AppMaster is gone (the cluster
# ended), the last state stays on screen under a banner.
_SCRIPT = """
(function () {
  var banner = document.getElementById("stale");
  function refresh() {
    fetch(location.href, {cache: "no-store", headers: {Accept: "text/html"}})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var current = document.querySelector("main");
        current.querySelectorAll("details[open]").forEach(function (d) {
          var same = d.id && fresh.querySelector("#" + CSS.escape(d.id));
          if (same) same.open = true;
        });
        current.replaceWith(fresh);
        banner.hidden = true;
      })
      .catch(function (error) {
        banner.textContent = "The AppMaster did not answer (" + error.message +
          "); showing its last known state.";
        banner.hidden = false;
      })
      .finally(function () { setTimeout(refresh, %d); });
  }
  setTimeout(refresh, %d);
})();
""" % (REFRESH_MS, REFRESH_MS)

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<noscript><meta http-equiv="refresh" content="5"></noscript>
<style>{style}</style>
</head>
<body>
<header><h1>{heading}</h1></header>
<div id="stale" hidden></div>
{main}
<script>{script}</script>
</body>
</html>
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


_NO_CACHE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
# Only the page's own script and style run, even if something slipped past escaping.
PAGE_HEADERS = {**_NO_CACHE, "Content-Security-Policy": (
    f"default-src 'none'; script-src {_csp_hash(_SCRIPT)}; style-src {_csp_hash(_STYLE)}; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'")}
