"""A client of the AppMaster's REST API, over HTTPS with the cluster's certificate; the
AppMaster's certificate must name the host of `address`.
Answers are decoded into the Dispatcher's message types, with validation."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Callable

import msgspec

from flinkyarn.gateways.dispatcher import (ClusterOverview, JobDetails, JobList, JobOutputView,
                                           JobSubmitted, SavepointWritten, SubmitJob)
from flinkyarn.jobgraph import JobGraph
from flinkyarn.rpc import codec
from flinkyarn.rpc.security import ClusterSecurity


class RestError(RuntimeError):
    """The AppMaster refused the request (the message is its explanation) or was unreachable."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RestClient:
    def __init__(self, address: str, security: ClusterSecurity, timeout: float = 30.0,
                 attempt: int = 1, relocate: Callable[[], tuple[str, int] | None] | None = None
                 ) -> None:
        """`attempt`: the YARN application attempt whose AppMaster serves at `address`.
        `relocate`: asked once when the AppMaster cannot be reached; (address, attempt)
        of a newer AppMaster attempt, where the request is sent again, or None."""
        self.address = address.rstrip("/")
        self.security = security
        self.timeout = timeout
        self.attempt = attempt
        self.relocate = relocate
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=security.client_ssl_context()))

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str = "application/json", timeout: float | None = None) -> bytes:
        try:
            return self._send(method, path, body, content_type, timeout)
        except RestError as error:
            if error.status is not None or self.relocate is None:
                raise
            newer = self.relocate()
            if newer is None or newer[1] <= self.attempt:
                raise
            self.address, self.attempt = newer[0].rstrip("/"), newer[1]
            return self._send(method, path, body, content_type, timeout)

    def _send(self, method: str, path: str, body: bytes | None, content_type: str,
              timeout: float | None) -> bytes:
        request = urllib.request.Request(self.address + path, data=body, method=method,
                                         headers={"Content-Type": content_type})
        try:
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            raise RestError(_error_text(error.read()) or str(error), error.code) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RestError(f"cannot reach the AppMaster at {self.address}: {reason}") from None

    def _get(self, path: str, kind: Any, timeout: float | None = None) -> Any:
        return msgspec.json.decode(self._request("GET", path, timeout=timeout), type=kind)

    def submit(self, graph: JobGraph) -> str:
        data = self._request("POST", "/jobs", codec.encode(SubmitJob(graph)), "application/msgpack")
        return msgspec.json.decode(data, type=JobSubmitted).job_id

    def jobs(self) -> JobList:
        return self._get("/jobs", JobList)

    def job(self, job_id: str, timeout: float | None = None) -> JobDetails:
        return self._get(f"/jobs/{job_id}", JobDetails, timeout)

    def output(self, job_id: str, after: int = 0) -> JobOutputView:
        return self._get(f"/jobs/{job_id}/output?after={after}", JobOutputView)

    def overview(self) -> ClusterOverview:
        return self._get("/overview", ClusterOverview)

    def cancel(self, job_id: str, timeout: float | None = None) -> None:
        self._request("POST", f"/jobs/{job_id}/cancel", b"", timeout=timeout)

    def savepoint(self, job_id: str, directory: str = "", stop: bool = False,
                  timeout: float | None = None) -> str:
        """Takes a savepoint of the job (and stops it); returns its folder once written."""
        body = msgspec.json.encode({"target_directory": directory, "stop": stop})
        data = self._request("POST", f"/jobs/{job_id}/savepoints", body, timeout=timeout)
        return msgspec.json.decode(data, type=SavepointWritten).location

    def shutdown_cluster(self) -> None:
        self._request("DELETE", "/cluster", timeout=10)


def _error_text(body: bytes) -> str:
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")[:500]
