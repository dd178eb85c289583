"""User code that tries to use what its TaskExecutor holds against the cluster (issue 12,
finding 7): the task function `try_the_keys` runs inside a TaskExecutor (local process
or YARN container), loads the security files that TaskExecutor was started with, and
calls what a job's code must not: the REST API (the client's), the Dispatcher's submit
and cancel over gRPC. It records each answer in `report.json` of a folder (local path or
hdfs://) and fails the task if anything was let through, so a test checks both.
Tests register this module for pickling by value."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

REPORT = "report.json"


def _own_security_dir() -> Path:
    """The folder its TaskExecutor loaded: `--security-dir` of the process (a task runs
    in the TaskExecutor's process, so sys.argv is the TaskExecutor's)."""
    argv = sys.argv
    if "--security-dir" in argv:
        return Path(argv[argv.index("--security-dir") + 1]).resolve()
    raise RuntimeError(f"no --security-dir in {argv}")


def try_the_keys(rest_address: str, rpc_address: str, victim_job_id: str, folder: str):
    def run(ctx) -> None:
        from flinkyarn.gateways.dispatcher import DispatcherGateway, JobQuery, SubmitJob
        from flinkyarn.ids import new_id
        from flinkyarn.jobgraph import JobGraph, JobVertex
        from flinkyarn.rpc.errors import Forbidden
        from flinkyarn.rpc.security import CA_KEY_FILE, ClusterSecurity, role_of
        from flinkyarn.rpc.service import RpcService
        from flinkyarn.connectors.filesystems import resolve
        from taskexecutor.__main__ import resource_manager_address
        from yarn_client.rest_client import RestClient, RestError

        directory = _own_security_dir()
        report: dict[str, object] = {
            "authority key": (directory / CA_KEY_FILE).exists(),
            "roles of the certificates at hand": sorted(
                {role_of(path.read_bytes()) or "none" for path in directory.glob("*.pem")
                 if b"BEGIN CERTIFICATE" in path.read_bytes()})}
        security = ClusterSecurity.load(directory)
        rest = RestClient(rest_address, security, timeout=20)
        for name, call in (("GET /jobs", rest.jobs),
                           ("POST /jobs/{id}/cancel", lambda: rest.cancel(victim_job_id)),
                           ("DELETE /cluster", rest.shutdown_cluster)):
            try:
                call()
                report[name] = "allowed"
            except RestError as error:
                report[name] = error.status

        async def dispatcher_calls() -> dict[str, str]:
            rpc = RpcService(security)
            answers = {}
            try:
                dispatcher = rpc.connect(resource_manager_address(rpc_address), "dispatcher",
                                         DispatcherGateway)
                graph = JobGraph(new_id(), "intruder's", [JobVertex("v", "v", 1, b"")])
                for name, call in (
                        ("cancel_job", lambda: dispatcher.cancel_job(JobQuery(victim_job_id))),
                        ("submit_job", lambda: dispatcher.submit_job(SubmitJob(graph)))):
                    try:
                        await call()
                        answers[name] = "allowed"
                    except Forbidden:
                        answers[name] = "forbidden"
            finally:
                await rpc.stop()
            return answers

        report.update(asyncio.run(dispatcher_calls()))
        filesystem, path = resolve(f"{folder.rstrip('/')}/{REPORT}")  # no tests package here
        with filesystem.open_output_stream(path) as out:
            out.write(json.dumps(report).encode())
        allowed = [name for name, answer in report.items() if answer == "allowed"]
        if allowed:
            raise AssertionError(f"a task's code was allowed: {', '.join(allowed)}")
    return run


def read_report(folder: str) -> dict:
    from tests.local import jobs

    return json.loads(jobs.read_text(jobs.join(folder, REPORT)))


EXPECTED = {"authority key": False,
            # ca.pem (the authority's own certificate has no role) and the TaskExecutors'
            "roles of the certificates at hand": ["none", "taskexecutor"],
            "GET /jobs": 403, "POST /jobs/{id}/cancel": 403, "DELETE /cluster": 403,
            "cancel_job": "forbidden", "submit_job": "forbidden"}
"""What try_the_keys reports when the TaskExecutor holds only its own certificate and
every call is refused for its role."""
