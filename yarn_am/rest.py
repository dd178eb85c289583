"""The REST API of the AppMaster: the Dispatcher's front end for clients.

    GET    /overview              ClusterOverview (TaskExecutors with slots, jobs)
    GET    /jobs                  JobList
    POST   /jobs                  SubmitJob as MessagePack -> 202 JobSubmitted
    GET    /jobs/{job_id}         JobDetails
    GET    /jobs/{job_id}/output?after=N
                                  JobOutputView: what the job's tasks printed, from N on
    POST   /jobs/{job_id}/cancel  202
    POST   /jobs/{job_id}/savepoints  JSON {"target_directory": DIR, "stop": BOOL}
                                  -> SavepointWritten once written (400: none taken)
    DELETE /cluster               202; the AppMaster shuts down

Served over HTTPS that requires a certificate of the cluster, of role client (403 for
another role: a TaskExecutor's, which the code of tasks could use). Errors are JSON
`{"error": "..."}` with 400 (bad request, nothing changed), 404 (unknown job), 413
(body over rpc.max-message-size), 415 (a submission that is not MessagePack), 403.
"""

from __future__ import annotations

import logging
from typing import Callable

import msgspec
from aiohttp import web

from flinkyarn.gateways import ACK
from flinkyarn.gateways.dispatcher import JobOutputQuery, JobQuery, SubmitJob, TriggerSavepoint
from flinkyarn.ids import JobID
from flinkyarn.rpc import codec
from flinkyarn.rpc.errors import InvalidRequest, MalformedMessage
from flinkyarn.rpc.security import CLIENT, ClusterSecurity, role_of
from yarn_am.dispatcher import Dispatcher, UnknownJob

log = logging.getLogger(__name__)

MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")


def _json(message: object, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(message), status=status,
                        content_type="application/json")


def _error(status: int, text: str) -> web.Response:
    return _json({"error": text}, status)


@web.middleware
async def _clients_only(request: web.Request, handler):
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    role = role_of(certificate) if certificate else None
    if role != CLIENT:
        log.warning("refused %s %s from a caller of role %s", request.method, request.path,
                    role or "unknown")
        return _error(403, f"the REST API is for the cluster's clients, not a caller of role "
                           f"{role or 'unknown'}")
    return await handler(request)


class RestServer:
    def __init__(self, dispatcher: Dispatcher, security: ClusterSecurity, host: str, port: int,
                 max_body: int, shutdown: Callable[[], None]) -> None:
        self._dispatcher = dispatcher
        self._security = security
        self._host, self._port = host, port
        self._shutdown = shutdown
        self._app = web.Application(client_max_size=max_body,
                                    middlewares=[_clients_only, self._errors])
        self._app.add_routes([
            web.get("/overview", self.overview),
            web.get("/jobs", self.list_jobs),
            web.post("/jobs", self.submit_job),
            web.get("/jobs/{job_id}", self.job_details),
            web.get("/jobs/{job_id}/output", self.job_output),
            web.post("/jobs/{job_id}/cancel", self.cancel_job),
            web.post("/jobs/{job_id}/savepoints", self.trigger_savepoint),
            web.delete("/cluster", self.shutdown_cluster),
        ])
        self._runner: web.AppRunner | None = None
        self.address: str | None = None

    async def start(self) -> str:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port,
                           ssl_context=self._security.server_ssl_context())
        await site.start()
        port = self._runner.addresses[0][1]
        self.address = f"https://{self._host}:{port}"
        return self.address

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except UnknownJob as error:
            return _error(404, error.args[0])
        except (MalformedMessage, ValueError) as error:
            return _error(400, str(error))
        except web.HTTPRequestEntityTooLarge as error:
            return _error(413, f"request body too large: {error.text}")
        except web.HTTPException as error:  # aiohttp's own: no such route, method not allowed
            if error.status < 400:
                raise
            return _error(error.status, f"{error.reason}: {request.method} {request.path}")

    async def overview(self, request: web.Request) -> web.Response:
        return _json(await self._dispatcher.cluster_overview(ACK))

    async def list_jobs(self, request: web.Request) -> web.Response:
        return _json(await self._dispatcher.list_jobs(ACK))

    async def submit_job(self, request: web.Request) -> web.Response:
        if request.content_type not in MSGPACK_TYPES:
            return _error(415, f"POST /jobs takes a SubmitJob as MessagePack (Content-Type: "
                               f"{MSGPACK_TYPES[0]}), not {request.content_type!r}")
        body = await request.read()
        submission = codec.decode(body, SubmitJob)
        return _json(await self._dispatcher.submit_job(submission), 202)

    async def job_details(self, request: web.Request) -> web.Response:
        return _json(await self._dispatcher.job_details(
            JobQuery(JobID(request.match_info["job_id"]))))

    async def job_output(self, request: web.Request) -> web.Response:
        after = request.query.get("after", "0")
        if not after.isdigit():
            raise ValueError(f"after must be a number of 0 or more, not {after!r}")
        return _json(await self._dispatcher.job_output(
            JobOutputQuery(JobID(request.match_info["job_id"]), int(after))))

    async def cancel_job(self, request: web.Request) -> web.Response:
        await self._dispatcher.cancel_job(JobQuery(JobID(request.match_info["job_id"])))
        return _json({"job_id": request.match_info["job_id"], "cancelling": True}, 202)

    async def trigger_savepoint(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            fields = msgspec.json.decode(body or b"{}", type=dict[str, object])
            trigger = msgspec.convert({**fields, "job_id": request.match_info["job_id"]},
                                      TriggerSavepoint)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise ValueError(f"a savepoint request is JSON {{\"target_directory\": DIR, "
                             f"\"stop\": BOOL}}: {error}") from None
        try:
            return _json(await self._dispatcher.trigger_savepoint(trigger))
        except InvalidRequest as error:
            return _error(400, str(error))

    async def shutdown_cluster(self, request: web.Request) -> web.Response:
        self._shutdown()
        return _json({"shutting_down": True}, 202)
