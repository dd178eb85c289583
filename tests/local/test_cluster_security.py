"""Only holders of the cluster's certificate get in, only a server named for the host
dialed is trusted; bad input changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import ipaddress
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import cloudpickle
import grpc
import pytest
from cryptography import x509

from flinkyarn.gateways.dispatcher import DispatcherGateway, JobQuery
from flinkyarn.gateways.resource_manager import RegisterTaskExecutor, ResourceManagerGateway
from flinkyarn.ids import new_id
from flinkyarn.job import JobBuilder
from flinkyarn.jobgraph import JobEdge, JobGraph, JobVertex
from flinkyarn.resources import ResourceProfile
from flinkyarn.rpc import codec
from flinkyarn.rpc.errors import NotFound, Rejected, Unreachable
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.rpc.service import RpcService
from flinkyarn.slots import SlotReport
from tests.local import intruder, jobs
from tests.local.conftest import task_executor_security
from tests.waiting import wait_for
from yarn_client.rest_client import RestClient, RestError

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


@pytest.fixture
def stranger(tmp_path):
    return ClusterSecurity.generate(tmp_path / "another-cluster")


def test_rest_client_without_the_clusters_certificate_is_refused(cluster, stranger):
    intruder = RestClient(cluster.rest.address, stranger, timeout=5)
    with pytest.raises(RestError, match="cannot reach"):
        intruder.jobs()
    graph = JobGraph(new_id(), "intruder", [JobVertex("v", "v", 1, b"")])
    with pytest.raises(RestError):
        intruder.submit(graph)
    # Nor without any certificate at all.
    plain = urllib.request.Request(cluster.rest.address.replace("https", "http") + "/jobs")
    with pytest.raises(OSError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(plain, timeout=5)
    assert cluster.rest.jobs().jobs == []


def test_the_appmaster_presents_its_own_certificate_for_its_host(cluster):
    url = urllib.parse.urlsplit(cluster.rest.address)
    context = cluster.security.client_ssl_context()
    with socket.create_connection((url.hostname, url.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=url.hostname) as tls:
        presented = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
    presented.verify_directly_issued_by(x509.load_pem_x509_certificate(cluster.security.ca))
    assert presented != x509.load_pem_x509_certificate(cluster.security.cert)
    names = presented.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


@contextlib.contextmanager
def https_server(security):
    """An HTTPS server on 127.0.0.1 presenting `security`'s certificate; it answers
    every request 501."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    server.socket = security.server_ssl_context().wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_rest_client_refuses_a_server_whose_certificate_names_another_host(tmp_path):
    cluster_files = ClusterSecurity.generate(tmp_path / "cluster")
    elsewhere = cluster_files.for_host("10.1.2.3", tmp_path / "elsewhere")
    with https_server(elsewhere) as address:
        with pytest.raises(RestError, match="cannot reach.*(match|mismatch)"):
            RestClient(address, cluster_files, timeout=5).jobs()
    # The same authority's certificate for the host dialed is trusted.
    here = cluster_files.for_host("127.0.0.1", tmp_path / "here")
    with https_server(here) as address:
        with pytest.raises(RestError) as answered:
            RestClient(address, cluster_files, timeout=5).jobs()
        assert answered.value.status == 501


def test_task_executor_without_the_certificate_cannot_register(cluster, stranger):
    async def register():
        rpc = RpcService(stranger)
        try:
            await rpc.connect(cluster.rpc_address, "resourcemanager", ResourceManagerGateway) \
                .register_task_executor(RegisterTaskExecutor(
                    "intruder", "127.0.0.1:1", SlotReport([]), ResourceProfile(1, 1024)), timeout=5)
        finally:
            await rpc.stop()

    with pytest.raises(Unreachable):
        asyncio.run(register())

    # A real TaskExecutor process with the wrong files gives up and exits 1.
    process = subprocess.run(
        [sys.executable, "-m", "taskexecutor", "--resource-id", "intruder",
         "--resource-manager", cluster.rpc_address, "--security-dir", str(stranger.directory),
         "-D", "taskmanager.registration.timeout=2 s"],
        capture_output=True, text=True, timeout=60)
    assert process.returncode == 1
    assert "could not register at the ResourceManager within 2 s" in process.stderr
    assert cluster.rest.overview().task_executors == []


def test_garbled_and_invalid_submissions_are_refused_and_change_nothing(cluster):
    rest = cluster.rest
    with pytest.raises(RestError, match="malformed SubmitJob") as error:
        rest._request("POST", "/jobs", b"\x93\xff garbage", "application/msgpack")
    assert error.value.status == 400
    for content_type in ("application/json", "application/octet-stream", ""):
        with pytest.raises(RestError, match="MessagePack") as error:
            rest._request("POST", "/jobs", b'{"graph": {}}', content_type)
        assert error.value.status == 415, content_type

    cyclic = JobGraph(new_id(), "cycle", [JobVertex("a", "a", 1, b""), JobVertex("b", "b", 1, b"")],
                      [JobEdge("a", "b"), JobEdge("b", "a")])
    with pytest.raises(RestError, match="has a cycle"):
        rest.submit(cyclic)
    zero = JobGraph(new_id(), "zero", [JobVertex("a", "source", 0, b"")])
    with pytest.raises(RestError, match="vertex 'source': parallelism must be >= 1"):
        rest.submit(zero)
    with pytest.raises(RestError, match="no job") as error:
        rest.job("does-not-exist")
    assert error.value.status == 404
    assert rest.jobs().jobs == []


def test_garbled_control_plane_message_is_refused_and_changes_nothing(cluster):
    async def send_garbage():
        # The TaskExecutors' certificate: the role that may register one.
        rpc = RpcService(task_executor_security(cluster))
        try:
            call = rpc.channel(cluster.rpc_address).unary_unary(
                "/resourcemanager/register_task_executor")
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call(codec.encode({"resource_id": 7, "address": None}), timeout=5)
            return error.value
        finally:
            await rpc.stop()

    error = asyncio.run(send_garbage())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed RegisterTaskExecutor" in error.details()
    assert cluster.rest.overview().task_executors == []


def test_a_phantom_task_executor_with_the_task_executors_certificate_is_rejected(cluster):
    """Every task's process holds the TaskExecutors' certificate; registering a
    TaskExecutor no worker of the ResourceManager stands for (a phantom, or one whose
    container ended) is rejected for good, and nothing of it is registered."""
    async def register(resource_id: str, worker_id: str | None):
        rpc = RpcService(task_executor_security(cluster))
        try:
            await rpc.connect(cluster.rpc_address, "resourcemanager", ResourceManagerGateway) \
                .register_task_executor(RegisterTaskExecutor(
                    resource_id, "127.0.0.1:1", SlotReport([]), ResourceProfile(1, 1024),
                    worker_id=worker_id), timeout=5)
        finally:
            await rpc.stop()

    running = [te.resource_id for te in cluster.rest.overview().task_executors]
    for resource_id, worker_id in (("phantom", "phantom"), ("phantom", None),
                                   *(("phantom", te) for te in running)):
        with pytest.raises(Rejected, match="not a running worker"):
            asyncio.run(register(resource_id, worker_id))
    assert [te.resource_id for te in cluster.rest.overview().task_executors] == running


def test_an_unknown_job_over_grpc_is_not_found_without_a_traceback(cluster):
    async def ask():
        rpc = RpcService(cluster.security)
        try:
            dispatcher = rpc.connect(cluster.rpc_address, "dispatcher", DispatcherGateway)
            with pytest.raises(NotFound, match="no job nope in this cluster"):
                await dispatcher.job_details(JobQuery("nope"))
            call = rpc.channel(cluster.rpc_address).unary_unary("/dispatcher/cancel_job")
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call(codec.encode(JobQuery("nope")), timeout=5)
            return error.value
        finally:
            await rpc.stop()

    error = asyncio.run(ask())
    assert error.code() == grpc.StatusCode.NOT_FOUND
    log = cluster.log_file.read_text()
    assert "no job nope" in log and "Traceback" not in log, log[-3000:]


def test_oversized_submission_is_refused(start_cluster):
    cluster = start_cluster(**{"rpc.max-message-size": "256 kb"})
    big = JobGraph(new_id(), "big", [JobVertex("a", "a", 1, b"x" * (1 << 20))])
    with pytest.raises(RestError) as error:
        cluster.rest.submit(big)
    assert error.value.status == 413
    assert cluster.rest.jobs().jobs == []


def test_a_tasks_code_cannot_act_as_the_client_with_what_its_task_executor_holds(cluster, folder):
    """Issue 12, finding 7: code running in a task has its TaskExecutor's files: the
    TaskExecutors' certificate only (no authority key, no client certificate), which the
    REST API refuses (403) and the Dispatcher's submit and cancel refuse (PERMISSION_
    DENIED); the other job runs on, the cluster serves on."""
    cloudpickle.register_pickle_by_value(intruder)
    victim = JobBuilder("victim")
    victim.add_vertex("waits", jobs.wait_for_go(folder), parallelism=1)
    victim_id = cluster.rest.submit(victim.build())
    wait_for(lambda: jobs.markers(folder, "started"), 60, "the victim to run")

    attack = JobBuilder("intruder")
    attack.add_vertex("tries", intruder.try_the_keys(
        cluster.rest.address, cluster.rpc_address, victim_id, str(folder)), parallelism=1)
    attack_id = cluster.rest.submit(attack.build())
    details = wait_for(lambda: (d := cluster.rest.job(attack_id)).status in TERMINAL and d,
                       90, "the intruder's job to end")

    assert intruder.read_report(str(folder)) == intruder.EXPECTED
    assert details.status == "FINISHED", details.failure_cause
    assert cluster.rest.job(victim_id).status == "RUNNING"
    assert [j.name for j in cluster.rest.jobs().jobs if j.name == "intruder's"] == []
    jobs.go(folder)
    wait_for(lambda: cluster.rest.job(victim_id).status == "FINISHED", 60, "the victim to finish")
    log = cluster.log_file.read_text()
    assert "refused GET /jobs from a caller of role taskexecutor" in log
    assert "may not call dispatcher.cancel_job" in log


def test_what_the_fuzz_found_is_refused_as_the_callers_mistake(cluster):
    """Found by tests/robustness: each was INTERNAL with a traceback in the AppMaster's
    log (or plain text over REST); each is the caller's mistake, answered as such."""
    async def calls():
        answers = {}
        rpc = RpcService(cluster.security)
        try:
            dispatcher = rpc.channel(cluster.rpc_address)
            for name, path, body in (
                    ("invalid UTF-8", "/dispatcher/job_details", b"\x81\xa6job_id\xa1\x80"),
                    ("invalid job graph", "/dispatcher/submit_job", codec.encode(
                        {"job_graph": {"job_id": "x", "name": "", "vertices": []}}))):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await dispatcher.unary_unary(path)(body, timeout=10)
                answers[name] = (error.value.code(), error.value.details())
        finally:
            await rpc.stop()
        return answers

    answers = asyncio.run(calls())
    assert answers["invalid UTF-8"][0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed JobQuery" in answers["invalid UTF-8"][1]
    assert answers["invalid job graph"] == (grpc.StatusCode.INVALID_ARGUMENT,
                                            "job '' has no vertices")
    for method, path, status in (("GET", "/nope", 404), ("PUT", "/overview", 405)):
        with pytest.raises(RestError) as error:
            cluster.rest._request(method, path)
        assert error.value.status == status
        assert f"{method} {path}" in str(error.value)  # the JSON error, read by the client
    assert "Traceback" not in cluster.log_file.read_text()
