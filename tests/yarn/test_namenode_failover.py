"""Issue 42 on the two-node Hadoop, whose HDFS is an HA nameservice: the active NameNode
fails over in the middle of jobs, and nothing is lost.

One parametrized scenario. A per-job word count (batch, its Spark stage running) and a
checkpointed stream (rows to an exactly-once sink, sums through a Spark stage; tests/chaos.py)
run; once the stream has committed a checkpoint, the active NameNode fails over:
- "haadmin": `hdfs haadmin -failover` to the other, as an admin does;
- "sigkill": the active NameNode's process SIGKILLed, then the other made active (what
  ZooKeeper's failover controller does), the killed one started again as standby;
- "session": in a session whose AppMaster is SIGKILLed at the same time, so that YARN's
  next attempt recovers the stream from the job store on HDFS, through the new active
  NameNode.
The word count's output is exact and it did not fail; every record of the stream is in
its sink once and its sums whole, after at most one restart.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

import local_hadoop
from tests import chaos
from tests.yarn.test_on_yarn import REPO, TAG, flinkyarn
from yarn_client import yarn_cluster

pytestmark = pytest.mark.usefixtures("hadoop")

MEGABYTES = 5  # per file, two files


@pytest.fixture(scope="module")
def corpus(hadoop, tmp_path_factory):
    folder, expected = chaos.put_corpus(REPO, tmp_path_factory.mktemp("corpus"), MEGABYTES)
    yield folder, expected
    chaos.remove(folder)


@pytest.fixture
def namenodes_restored():
    """Whatever a scenario did, afterwards both NameNodes run, nn1 active."""
    yield
    for namenode in local_hadoop.NAMENODES:
        local_hadoop.start_namenode(namenode.id)
    if local_hadoop.active_namenode() != "nn1":
        local_hadoop.failover(local_hadoop.active_namenode(), "nn1")


def fail_over(how: str) -> str:
    """Makes the other NameNode active, as `how` says; returns its id."""
    active = local_hadoop.active_namenode()
    other = next(n.id for n in local_hadoop.NAMENODES if n.id != active)
    if how == "sigkill":
        local_hadoop.kill_namenode(active)
        time.sleep(2)  # calls meanwhile find no active NameNode, and wait
    local_hadoop.failover(active, other)
    if how == "sigkill":
        local_hadoop.start_namenode(active)  # back, as standby
    assert local_hadoop.active_namenode() == other
    return other


def restarts(said: str) -> int:
    """How many restarts of its job an attached client printed."""
    return len(re.findall(r"restart \(attempt \d+", said))


@pytest.mark.parametrize("how", ["haadmin", "sigkill", "session"])
def test_a_namenode_failover_mid_job_loses_nothing(corpus, how, tmp_path, namenodes_restored):
    folder = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    stream_args = [f"{folder}/records", f"{folder}/sums", f"{folder}/checkpoints",
                   str(chaos.STREAM_ROWS)]
    session = None
    clients: dict[str, subprocess.Popen] = {}
    said: dict[str, list[str]] = {"wordcount": [], "stream": []}
    try:
        if how == "session":
            started = flinkyarn("session", "start", *chaos.OPTIONS, "--tags", f"{TAG}-nn-session")
            assert started.returncode == 0, started.stderr[-3000:]
            session = started.stdout.strip().splitlines()[-1]
            (tmp_path / "stream.py").write_text(chaos.STREAM_PROGRAM)
            clients["stream"] = subprocess.Popen(
                [sys.executable, "-m", "yarn_client", "run", "-t", "yarn-session",
                 "--application-id", session, str(tmp_path / "stream.py"), *stream_args],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        else:
            clients["wordcount"] = chaos.start(REPO, tmp_path / "wordcount.py",
                                               [corpus[0], f"{folder}/counts"], f"{TAG}-nn")
            clients["stream"] = chaos.start(REPO, tmp_path / "stream.py", stream_args,
                                            f"{TAG}-nn", chaos.STREAM_PROGRAM)
            app_id = chaos.application_id(clients["wordcount"], said["wordcount"], timeout=300)
            chaos.wait_while_running(clients, lambda: chaos.of_kind(app_id, "spark-worker"), 300,
                                     "the word count's Spark stage")
        chaos.wait_while_running(clients, lambda: chaos.committed(f"{folder}/records"), 300,
                                 "a checkpoint of the stream committed")
        if session is not None:  # its AppMaster lost at the same time
            master = f"container_{session.removeprefix('application_')}_01_000001"
            for process in chaos.container_processes(master):
                os.kill(process.pid, signal.SIGKILL)
        fail_over(how)
        for job, client in clients.items():
            _, rest = client.communicate(timeout=600)
            said[job].append(rest)
    finally:
        for client in clients.values():
            if client.poll() is None:
                client.kill()
        if session is not None:
            flinkyarn("session", "stop", session)
    for job, client in clients.items():
        text = "".join(said[job])
        assert client.returncode == 0, f"{job} after a {how} failover:\n{text[-4000:]}"
    chaos.check_stream(f"{folder}/records", f"{folder}/sums")
    assert restarts("".join(said["stream"])) <= 1, "".join(said["stream"])[-4000:]
    if "wordcount" in clients:
        assert chaos.counts_of(f"{folder}/counts") == corpus[1]
        assert restarts("".join(said["wordcount"])) <= 1, "".join(said["wordcount"])[-4000:]
        report = yarn_cluster.application_report(app_id)
        assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED"), report
    chaos.remove(folder)
