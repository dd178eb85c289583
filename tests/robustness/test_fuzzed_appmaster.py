"""A live AppMaster under a fuzz of malformed REST requests and gRPC calls keeps
answering, refuses each with a caller's-mistake answer (4xx with a JSON error;
INVALID_ARGUMENT and its kin), and keeps every job it accepted.

One cluster for the module, with a running job and two finished ones before the fuzz.
The tests run in file order: the fuzz first, the survivor's check last (it ends the
cluster with DELETE /cluster). Hypothesis is derandomized and keeps no database, so a
run is reproducible and writes nothing into the repository."""

from __future__ import annotations

import collections
import http.client
import itertools
import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkyarn.configuration import Configuration
from flinkyarn.gateways import ACK, may_call
from flinkyarn.gateways.dispatcher import DispatcherGateway, JobList, JobSubmitted
from flinkyarn.gateways.job_master import JobMasterGateway, job_master_endpoint
from flinkyarn.gateways.resource_manager import ResourceManagerGateway
from flinkyarn.job import JobBuilder
from flinkyarn.rpc import codec
from flinkyarn.rpc.security import CLIENT, TASKEXECUTOR, TASKEXECUTOR_DIR, ClusterSecurity
from flinkyarn.rpc.service import gateway_methods
from tests.local import jobs
from tests.local.conftest import FAST
from tests.waiting import wait_for
from tests.robustness.messages import BINARY, SUBMISSIONS, bodies
from yarn_am.jobmaster.execution_graph import JobStatus
from yarn_am.rest import MSGPACK_TYPES
from yarn_client.local_cluster import LocalCluster


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


REFUSED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED,
           grpc.StatusCode.UNIMPLEMENTED,
           grpc.StatusCode.ABORTED}  # Rejected: a registration from no worker of the RM's
"""The statuses of a call refused as the caller's mistake (flinkyarn.rpc.errors)."""

KNOWN_JOB = "{known-job}"
"""Stands for the job running through the fuzz: in a gRPC endpoint name (its JobMaster),
and in the path of a GET or HEAD request; in other requests it stays an unknown id, so
no fuzzed request cancels it."""


@dataclass
class Target:
    cluster: LocalCluster
    folder: Path
    running_job: str
    finished_jobs: list[str]
    security: dict[str, ClusterSecurity]   # by role: the client's and the TaskExecutors'
    accepted: set[str] = field(default_factory=set)   # jobs a fuzzed body submitted
    answers: collections.Counter = field(default_factory=collections.Counter)

    def _repr_pretty_(self, printer, cycle) -> None:  # how Hypothesis shows it
        printer.text(repr(self))

    def __repr__(self) -> str:
        return f"<Target {self.cluster.rest.address} running job {self.running_job}>"

    @property
    def jobs_before(self) -> set[str]:
        return {self.running_job, *self.finished_jobs}


def ended(rest, job_id: str, timeout: float = 60.0):
    terminal = {JobStatus.FINISHED.value, JobStatus.FAILED.value, JobStatus.CANCELED.value}
    return wait_for(lambda: (d := rest.job(job_id)).status in terminal and d, timeout,
                    f"job {job_id} to end")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("fuzzed")
    # At most two TaskExecutors: a fuzzed submission that happens to be valid runs on them.
    # The fuzz keeps the AppMaster's loop busy: on a loaded machine (CI runs this beside
    # the YARN tiers) FAST's 2 s heartbeat timeout took the running job's TaskExecutor
    # for lost, and the job FAILED; heartbeats are not what this module tests.
    conf = Configuration.load(overrides={**FAST, "resourcemanager.max-taskmanagers": "2",
                                         "heartbeat.timeout": "60 s"})
    cluster = LocalCluster(conf, work_dir=work_dir / "cluster")
    try:
        rest = cluster.start()
        folder = work_dir / "markers"
        folder.mkdir()
        finished_jobs = []
        for name in ("first", "second"):
            job = JobBuilder(name)
            job.add_vertex("only", jobs.quick(folder), parallelism=1)
            job_id = rest.submit(job.build())
            assert ended(rest, job_id).status == "FINISHED"
            finished_jobs.append(job_id)
        job = JobBuilder("running through the fuzz")
        job.add_vertex("waits", jobs.wait_for_go(folder, limit=600), parallelism=1)
        running = rest.submit(job.build())
        wait_for(lambda: rest.job(running).status == "RUNNING" and jobs.markers(folder, "started"),
                 30, "the job's task running")
        taskexecutor = ClusterSecurity.load(cluster.work_dir / "security" / TASKEXECUTOR_DIR)
        yield Target(cluster, folder, running, finished_jobs,
                     {CLIENT: cluster.security, TASKEXECUTOR: taskexecutor})
    finally:
        cluster.stop()


# ----------------------------------------------------------------------------- REST


def rest_call(target: Target, method: str, path: str, body: bytes = b"",
              content_type: str | None = None) -> tuple[int, str, bytes]:
    """One request on a fresh connection: (status, Content-Type, body). A dropped
    connection raises."""
    if method in ("GET", "HEAD"):
        path = path.replace(KNOWN_JOB, target.running_job)
    address = urllib.parse.urlsplit(target.cluster.rest.address)
    connection = http.client.HTTPSConnection(
        address.hostname, address.port, timeout=30,
        context=target.security[CLIENT].client_ssl_context())
    try:
        connection.request(method, path, body=body,
                           headers={} if content_type is None else {"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


def check_rest_answer(target: Target, method: str, path: str, answer: tuple[int, str, bytes]):
    status, content_type, body = answer
    target.answers[f"REST {status}"] += 1
    assert status < 500, (status, body[:500])
    if method == "HEAD":
        return
    assert content_type.startswith("application/json"), (status, content_type, body[:500])
    decoded = json.loads(body)
    if status >= 400:
        assert isinstance(decoded, dict) and isinstance(decoded.get("error"), str), decoded
    elif method == "POST" and urllib.parse.urlsplit(path).path == "/jobs":
        assert status == 202, decoded
        target.accepted.add(decoded["job_id"])


PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
MSGPACK_CONTENT_TYPES = st.sampled_from(MSGPACK_TYPES).flatmap(
    lambda kind: st.sampled_from([kind, kind.upper(), f"{kind}; charset=utf-8", f" {kind}"]))
CONTENT_TYPES = st.one_of(
    MSGPACK_CONTENT_TYPES,
    st.sampled_from(["", "application/json", "text/plain", "application/octet-stream",
                     "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                     "application/msgpack;", "msgpack", "*/*"]),
    st.text(PRINTABLE, max_size=40).map(str.strip))


def quoted(text: str) -> str:
    """`text` as a request target would carry it; '%' stays, so bad escapes get through."""
    return urllib.parse.quote(text, safe="/?=&%;:@!$'()*+,-._~")


JOB_IDS = st.one_of(st.just(KNOWN_JOB),
                    st.text(max_size=16).map(lambda t: quoted(t).replace("/", "%2F")))
QUERIES = st.one_of(st.just(""), st.text(max_size=20).map(lambda t: "?" + quoted(t)))
AFTERS = st.one_of(st.integers(-5, 1 << 80).map(str), st.text(max_size=8).map(quoted))
PATHS = st.one_of(
    st.sampled_from(["/", "/overview", "/jobs", "/jobs/", "/cluster", "/jobs//output"]),
    JOB_IDS.map(lambda j: f"/jobs/{j}"),
    st.tuples(JOB_IDS, AFTERS).map(lambda t: f"/jobs/{t[0]}/output?after={t[1]}"),
    JOB_IDS.map(lambda j: f"/jobs/{j}/cancel"),
    st.text(max_size=30).map(lambda t: "/" + quoted(t)),
)


@fuzz(400)
@given(content_type=st.one_of(MSGPACK_CONTENT_TYPES, CONTENT_TYPES), body=SUBMISSIONS)
def test_fuzzed_submissions_are_refused_with_a_json_error(target, content_type, body):
    answer = rest_call(target, "POST", "/jobs", body, content_type)
    check_rest_answer(target, "POST", "/jobs", answer)


# DELETE only in the last test: DELETE /cluster ends the AppMaster.
@fuzz(250)
@given(method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "PATCH", "OPTIONS"]),
       path=st.tuples(PATHS, QUERIES).map("".join),
       body=st.one_of(st.just(b""), BINARY), content_type=st.one_of(st.none(), CONTENT_TYPES))
def test_fuzzed_requests_get_a_json_answer(target, method, path, body, content_type):
    answer = rest_call(target, method, path, body, content_type)
    check_rest_answer(target, method, path, answer)


# ----------------------------------------------------------------------------- gRPC
# Most calls are allowed to their caller, so that most bodies reach the decoder and,
# when they decode, the endpoint; the rest check the refusal before decoding.

ENDPOINTS = {"dispatcher": DispatcherGateway, "resourcemanager": ResourceManagerGateway,
             job_master_endpoint(KNOWN_JOB): JobMasterGateway}
CALLS = [(role, endpoint, method) for role in (CLIENT, TASKEXECUTOR)
         for endpoint, protocol in ENDPOINTS.items() for method in gateway_methods(protocol)]
"""Every method of every endpoint of the AppMaster, by each role that is not the
AppMaster's: those the role may call (`callable_by`) and those it may not."""
ALLOWED = st.sampled_from([c for c in CALLS if may_call(ENDPOINTS[c[1]], c[0], c[2])])
FORBIDDEN = st.sampled_from([c for c in CALLS if not may_call(ENDPOINTS[c[1]], c[0], c[2])])


def grpc_call(target: Target, role: str, endpoint: str, method: str, body: bytes):
    """(status, response) of one unary call as a holder of `role`'s certificate."""
    endpoint = endpoint.replace(KNOWN_JOB, target.running_job)
    with grpc.secure_channel(target.cluster.rpc_address,
                             target.security[role].channel_credentials()) as channel:
        try:
            call = channel.unary_unary(f"/{endpoint}/{method}")
            return grpc.StatusCode.OK, call(body, timeout=30)
        except grpc.RpcError as error:
            target.answers[f"gRPC {error.code().name}"] += 1
            return error.code(), error.details()


def request_type(endpoint: str, method: str):
    return gateway_methods(ENDPOINTS[endpoint])[method].request_type


@fuzz(400)
@given(call_and_body=st.one_of(ALLOWED, ALLOWED, ALLOWED, FORBIDDEN).flatmap(
    lambda call: st.tuples(st.just(call), bodies(request_type(*call[1:])))))
def test_fuzzed_control_plane_calls_are_refused_as_the_callers_mistake(target, call_and_body):
    (role, endpoint, method), body = call_and_body
    status, answer = grpc_call(target, role, endpoint, method, body)
    if not may_call(ENDPOINTS[endpoint], role, method):
        assert status == grpc.StatusCode.PERMISSION_DENIED, (status, answer)
        return
    assert status == grpc.StatusCode.OK or status in REFUSED, (status, answer)
    if (endpoint, method) == ("dispatcher", "submit_job") and status == grpc.StatusCode.OK:
        target.accepted.add(codec.decode(answer, JobSubmitted).job_id)


NAMES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/"),
                max_size=20)


@fuzz(120)
@given(role=st.sampled_from([CLIENT, TASKEXECUTOR]),
       endpoint=st.one_of(st.sampled_from(list(ENDPOINTS)), NAMES,
                          NAMES.map(job_master_endpoint)),
       method=NAMES, body=st.binary(max_size=32))
def test_calls_of_unknown_endpoints_and_methods_are_unimplemented(target, role, endpoint,
                                                                  method, body):
    if endpoint in ENDPOINTS and method in gateway_methods(ENDPOINTS[endpoint]):
        return  # a known method: the test above
    status, answer = grpc_call(target, role, endpoint, method, body)
    assert status == grpc.StatusCode.UNIMPLEMENTED, (status, answer)


# ------------------------------------------------------------------------ afterwards


def test_after_the_fuzz_the_appmaster_answers_and_keeps_every_job(target):
    cluster, rest = target.cluster, target.cluster.rest
    print(f"answers: {dict(sorted(target.answers.items()))}; "
          f"jobs accepted from fuzzed bodies: {len(target.accepted)}")
    assert cluster.process.poll() is None, cluster.log_tail()
    overview = rest.overview()
    listed = {job.job_id: job.status for job in rest.jobs().jobs}
    assert {job.job_id for job in overview.jobs} == set(listed)
    assert target.jobs_before | target.accepted <= set(listed), listed
    assert set(listed.values()) <= {status.value for status in JobStatus}, listed
    assert [listed[j] for j in target.finished_jobs] == ["FINISHED", "FINISHED"]
    assert listed[target.running_job] == "RUNNING"
    status, answer = grpc_call(target, CLIENT, "dispatcher", "list_jobs", codec.encode(ACK))
    assert status == grpc.StatusCode.OK, answer
    assert {j.job_id for j in codec.decode(answer, JobList).jobs} == set(listed)

    # The job that ran through the fuzz still finishes.
    jobs.go(target.folder)
    assert ended(rest, target.running_job).status == "FINISHED"

    # No fuzzed request made the AppMaster log an unhandled exception.
    log = cluster.log_file.read_text(errors="replace").splitlines()
    tracebacks = [log[i - 1] + "\n" + "\n".join(itertools.takewhile(
        lambda line: not line[:1].isdigit(), log[i:])) for i, line in enumerate(log)
        if line.startswith("Traceback")]
    assert not tracebacks, f"{len(tracebacks)} in the AppMaster's log, the first:\n" + \
        "\n\n".join(tracebacks[:3])

    # And it still shuts down on request, cleanly.
    rest.shutdown_cluster()
    assert cluster.process.wait(30) == 0, cluster.log_tail()
