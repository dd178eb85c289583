"""The dashboard: a web page of the cluster for people, reached from the YARN UI.

    GET  /                          the page (yarn_am/templates/dashboard.html): each job
                                    with its graph, vertices, subtasks, exceptions,
                                    restarts, output; the TaskExecutors with their
                                    containers, hosts, slots and log links
    GET  /api/overview              the same as JSON: `DashboardOverview`
    PUT  /api/jobs/{job_id}/cancel  cancels the job, as the REST API's cancel does, for a
                                    caller that sends the session's token (JSON
                                    {"token": ...}) -> 202; else 403, nothing done

Plain HTTP, because the YARN web proxy that forwards the admin's browser to it cannot
present the cluster's client certificate. So it reads, and does one thing more: cancel a
job, for whoever shows the session's token (`flinkyarn session token`, derived from the
cluster's authority key, which only the client that made the cluster and its AppMaster
hold: `ClusterSecurity.dashboard_token`). The cancel is a PUT with the token in its body
because YARN's web proxy forwards only GET and PUT, and of the headers only a fixed few.
Every other method on every path is answered 405: nothing here submits or shuts down.

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

The page is rendered from templates with autoescape (yarn_am/pages.py), under a
Content-Security-Policy that lets only the page's own script and style run. That script
refreshes the page every two seconds by fetching the page's own URL and swapping in its
`<main>`. The page uses no absolute path of its own: behind the YARN web proxy it lives
under `/proxy/<application id>/...`, and it must not leave that prefix (its only
absolute links are to other servers: NodeManagers' log pages, Spark's UI).

Runs on the AppMaster's event loop and calls the Dispatcher directly on that loop
(`cluster_overview`, `job_details`, `cancel_job`; no other method).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from typing import Callable, cast

import msgspec
from aiohttp import web

from flinkyarn.gateways import ACK
from flinkyarn.gateways.dispatcher import DispatcherGateway, JobDetails, JobQuery, TaskExecutorView
from flinkyarn.ids import JobID
from flinkyarn.rpc.errors import NotFound
from yarn_am import pages
from yarn_am.pages import NO_CACHE, PAGE_HEADERS

log = logging.getLogger(__name__)


class DashboardOverview(msgspec.Struct, frozen=True):
    """`GET api/overview`: the ClusterOverview with each job's details, newest job first."""

    task_executors: list[TaskExecutorView]
    jobs: list[JobDetails]
    notice: str = ""  # what the cluster's user must know (tokens that will run out)


class CancelRequest(msgspec.Struct, frozen=True):
    """The body of a cancel: the session's token (`flinkyarn session token`)."""

    token: str = ""


class Dashboard:
    def __init__(self, dispatcher: DispatcherGateway, host: str = "127.0.0.1", port: int = 0, *,
                 title: str = "flinkyarn", mode: str | None = None,
                 max_connections: int = 64, timeout: float = 10.0,
                 cancel_token: str | None = None) -> None:
        """title names the cluster in the page's header; mode (e.g. "session on YARN"),
        when given, is shown next to it; with `cancel_token`, a caller that sends it may
        cancel jobs (without, nobody can)."""
        self._dispatcher = dispatcher
        self._host, self._port = host, port
        self._title, self._mode = title, mode
        self._max_connections, self._timeout = max_connections, timeout
        self._cancel_token = cancel_token
        self._secret = secrets.token_urlsafe(24)
        pages_app = web.Application(middlewares=[read_only("dashboard", (self.cancel,))])
        pages_app.add_routes([web.get("/", self.page), web.get("/api/overview", self.overview)])
        if cancel_token:
            pages_app.add_routes([web.put("/api/jobs/{job_id}/cancel", self.cancel)])
        self._app = web.Application()
        self._app.add_subapp(f"/{self._secret}/", pages_app)
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
        body = render_page(await self.snapshot(), self._title, self._mode, time.time(),
                           cancellable=self._cancel_token is not None)
        return web.Response(text=body, content_type="text/html", headers=PAGE_HEADERS)

    async def overview(self, request: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(await self.snapshot()),
                            content_type="application/json", headers=NO_CACHE)

    async def cancel(self, request: web.Request) -> web.Response:
        assert self._cancel_token is not None  # the route exists only then
        job_id = request.match_info["job_id"]
        try:
            given = msgspec.json.decode(await request.read(), type=CancelRequest).token
        except msgspec.DecodeError as error:
            return _json_error(400, f"a cancel is a JSON object {{\"token\": \"...\"}}: {error}")
        if not hmac.compare_digest(given.encode(), self._cancel_token.encode()):
            log.warning("refused to cancel job %s from the dashboard: %s", job_id,
                        "a wrong token" if given else "no token")
            return _json_error(403, "cancelling a job needs the session's token "
                                    "(flinkyarn session token)")
        try:
            await self._dispatcher.cancel_job(JobQuery(JobID(job_id)))
        except NotFound as error:
            return _json_error(404, str(error))
        log.info("job %s cancelled from the dashboard", job_id)
        return web.Response(body=msgspec.json.encode({"cancelling": job_id}), status=202,
                            content_type="application/json", headers=NO_CACHE)


def _json_error(status: int, text: str) -> web.Response:
    return web.Response(body=msgspec.json.encode({"error": text}), status=status,
                        content_type="application/json", headers=NO_CACHE)


def read_only(what: str, writers: tuple[Callable, ...] = ()):
    """An aiohttp middleware that answers every method but GET and HEAD with 405, except
    on the routes of the handlers `writers`."""
    @web.middleware
    async def middleware(request: web.Request, handler):
        if request.method not in ("GET", "HEAD") and \
                not any(request.match_info.handler == writer for writer in writers):
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

def render_page(overview: DashboardOverview, title: str, mode: str | None, now: float, *,
                cancellable: bool = False, show_executors: bool = True) -> str:
    """The whole HTML page for overview as of now (seconds since the epoch); with a
    Cancel button on each job not ended if `cancellable`."""
    return pages.render(
        "dashboard.html", title, mode, overview=overview, now=now, cancellable=cancellable,
        show_executors=show_executors,
        executors={te.resource_id: te for te in overview.task_executors},
        job_names={job.job_id: job.name for job in overview.jobs})
