"""The history server (Flink's HistoryServer): the dashboard's pages of applications that
ended, from the archive their AppMasters wrote (flinkyarn/archive.py), for as long as
the archive keeps them. Started by `flinkyarn history-server`; read-only.

    GET /                                        every archived application, newest first
    GET /applications/<app id>/                  the application's dashboard page: its
                                                 jobs as they ended
    GET /applications/<app id>/api/overview      the same as JSON (DashboardOverview)
    GET /applications/<app id>/jobs/<job id>     one ArchivedJob as JSON (graph, settings)

It reads the archive at each request (a listing and a few small files; the archive is
the truth, nothing to keep in step). An AppMaster started with `historyserver.web.address`
set gives YARN the application's page here as its final tracking URL. Ids in paths are
checked before any path is made of them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import msgspec
from aiohttp import web

from flinkyarn.archive import ArchivedApplication, JobArchive, find_application, history_page
from yarn_am import pages
from yarn_am.dashboard import DashboardOverview, read_only, render_page
from yarn_am.pages import PAGE_HEADERS

log = logging.getLogger(__name__)

APPLICATION_ID = re.compile(r"application_\d+_\d+")
JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")  # no dots, no slashes


class HistoryServer:
    def __init__(self, archives: list[JobArchive], host: str = "127.0.0.1", port: int = 8082
                 ) -> None:
        self._archives = archives
        self._host, self._port = host, port
        app = web.Application(middlewares=[read_only("history server")])
        app.add_routes([
            web.get("/", self.index),
            web.get("/applications/{app}/", self.application_page),
            web.get("/applications/{app}/api/overview", self.application_overview),
            web.get("/applications/{app}/jobs/{job}", self.job),
        ])
        self._runner = web.AppRunner(app, access_log=None)
        self.url: str | None = None

    async def start(self) -> str:
        """Serves; returns the root URL, ending in "/"."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        assert server is not None and isinstance(server, asyncio.Server)  # started
        port = server.sockets[0].getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"http://{host}:{port}/"
        return self.url

    async def stop(self) -> None:
        await self._runner.cleanup()

    # ---------------------------------------------------------------- pages

    async def index(self, request: web.Request) -> web.Response:
        applications = [(a, history_page("", a.application_id))
                        for a in await asyncio.to_thread(self._applications)]
        body = pages.render("history_index.html", "flinkyarn history",
                            applications=applications, now=time.time(),
                            folders=[a.folder for a in self._archives])
        return web.Response(text=body, content_type="text/html", headers=PAGE_HEADERS)

    async def application_page(self, request: web.Request) -> web.Response:
        application, overview = await self._overview(request)
        ended = pages.timestamp(application.end_time) if application.end_time else "not ended yet"
        mode = f"{application.mode}, {application.status} ({ended})"
        body = render_page(overview, f"{application.name} ({application.application_id})", mode,
                           application.end_time or time.time())
        return web.Response(text=body, content_type="text/html", headers=PAGE_HEADERS)

    async def application_overview(self, request: web.Request) -> web.Response:
        _, overview = await self._overview(request)
        return web.Response(body=msgspec.json.encode(overview), content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    async def job(self, request: web.Request) -> web.Response:
        app_id, job_id = _checked(request.match_info["app"], APPLICATION_ID, "application"), \
            _checked(request.match_info["job"], JOB_ID, "job")
        found = await asyncio.to_thread(find_application, self._archives, app_id)
        job = await asyncio.to_thread(found[0].job, app_id, job_id) if found else None
        if job is None:
            raise web.HTTPNotFound(text=f"no archived job {job_id} of {app_id}\n")
        return web.Response(body=msgspec.json.encode(job), content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    # ---------------------------------------------------------------- reading

    def _applications(self) -> list[ArchivedApplication]:
        found: dict[str, ArchivedApplication] = {}
        for archive in self._archives:
            try:
                for application in archive.applications():
                    found.setdefault(application.application_id, application)
            except OSError as error:
                log.warning("cannot read the archive %s: %s", archive.folder, error)
        return sorted(found.values(), key=lambda a: a.start_time, reverse=True)

    async def _overview(self, request: web.Request
                        ) -> tuple[ArchivedApplication, DashboardOverview]:
        app_id = _checked(request.match_info["app"], APPLICATION_ID, "application")

        def read() -> tuple[ArchivedApplication, DashboardOverview] | None:
            found = find_application(self._archives, app_id)
            if found is None:
                return None
            archive, application = found
            return application, DashboardOverview(
                [], [job.details for job in archive.jobs(app_id)],
                "" if application.status in ("SUCCEEDED", "RUNNING") else application.diagnostics)

        result = await asyncio.to_thread(read)
        if result is None:
            raise web.HTTPNotFound(text=f"no archived application {app_id}\n")
        return result


def _checked(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.fullmatch(value):
        raise web.HTTPNotFound(text=f"not a{'n' if what[0] in 'aeiou' else ''} {what} id\n")
    return value

