"""A local cluster per test: a real AppMaster process whose ResourceManager starts real
TaskExecutor processes, all on loopback with the cluster's TLS. Heartbeats are short so
timeouts are seen in seconds."""

from __future__ import annotations

import os
from pathlib import Path

import cloudpickle
import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.rpc.security import TASKEXECUTOR_DIR, ClusterSecurity
from tests.conftest import SESSION_MARK
from tests.local import jobs
from yarn_client.local_cluster import LocalCluster

cloudpickle.register_pickle_by_value(jobs)

FAST = {
    "heartbeat.interval": "250 ms",
    "heartbeat.timeout": "2 s",
    "taskmanager.numberOfTaskSlots": "2",
    "resourcemanager.taskmanager-timeout": "10 min",
    "slot.idle.timeout": "300 ms",
    "cluster.registration.initial-timeout": "50 ms",
    "cluster.registration.max-timeout": "500 ms",
}


def task_executor_security(cluster: LocalCluster) -> ClusterSecurity:
    """The certificate every TaskExecutor of `cluster` has (role taskexecutor): what a
    test uses to make a TaskExecutor's calls."""
    return ClusterSecurity.load(cluster.security.directory / TASKEXECUTOR_DIR)


@pytest.fixture
def start_cluster(tmp_path):
    clusters = []

    def start(start_workers: int = 0, **overrides) -> LocalCluster:
        conf = Configuration.load(overrides={**FAST, **overrides})
        cluster = LocalCluster(conf, work_dir=tmp_path / f"cluster-{len(clusters)}",
                               start_workers=start_workers)
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def cluster(start_cluster) -> LocalCluster:
    return start_cluster()


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


def task_executor_process(resource_id: str, application: str | None = None) -> int:
    """The pid of TaskExecutor `resource_id` on this machine: of a local cluster of this
    test session (the id in its argv, the session's mark in its environment), or, with
    `application`, in a YARN container of that application (the id in its environment).
    Ids repeat across clusters, and integration/run-tests runs sessions side by side."""
    if application is None:
        wanted = f"{SESSION_MARK}={os.environ.get(SESSION_MARK)}".encode()
    else:
        wanted = f"FLINKYARN_RESOURCE_ID={resource_id}".encode()
        # container_[e<epoch>_]<cluster timestamp>_<application>_<attempt>_<container>
        of_application = f"_{application.removeprefix('application_')}_".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"taskexecutor" not in argv or (application is None and resource_id.encode() not in argv):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
            if wanted in environ and (application is None or any(
                    v.startswith(b"CONTAINER_ID=") and of_application in v for v in environ)):
                return int(proc.name)
        except OSError:
            continue
    raise LookupError(f"no process for TaskExecutor {resource_id}"
                      + (f" of {application}" if application else ""))


def processes_mentioning(text: str, containers: bool = False) -> list[str]:
    """"PID: command line" of each running process of this test session (its mark in the
    environment: tests/conftest.py) whose command line holds `text`; with `containers`,
    of YARN containers too. integration/run-tests runs another session beside this one."""
    mark = f"{SESSION_MARK}={os.environ.get(SESSION_MARK)}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split()[2]
            if text not in cmdline or state == "Z":
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ or (containers and any(v.startswith(b"CONTAINER_ID=") for v in environ)):
            found.append(f"{proc.name}: {cmdline}")
    return found


def children(pid: int) -> list[int]:
    """The processes process `pid` started that run (or are zombies): the children of
    each of its threads."""
    found = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        try:
            found += [int(child) for child in (thread / "children").read_text().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> set[int]:
    """Every process below `pid`."""
    found, todo = set(), [pid]
    while todo:
        below = children(todo.pop())
        found.update(below)
        todo.extend(below)
    return found


def cmdline(pid: int) -> bytes:
    """Process `pid`'s command line, its arguments NUL-separated (b"" if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
