"""Failover on the real local Hadoop: a TaskExecutor's process is killed inside its YARN
container in the middle of a job. YARN reports the container's end, the ResourceManager
tells the JobMaster and asks YARN for a replacement container, and the job finishes with
every record counted once."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import local_hadoop
from flinkyarn.configuration import Configuration
from flinkyarn.connectors.filesystems import resolve
from tests.local.conftest import wait_for
from tests.local.jobs import N, summing_pipeline
from tests.yarn.test_on_yarn import TAG, flinkyarn
from yarn_client import yarn_cluster
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions

pytestmark = pytest.mark.usefixtures("hadoop")


def task_executor_process(resource_id: str) -> int:
    """The pid of the process a YARN container runs TaskExecutor `resource_id` in (it
    reaches the container as FLINKYARN_RESOURCE_ID; this is a single-node cluster)."""
    wanted = f"FLINKYARN_RESOURCE_ID={resource_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ and b"taskexecutor" in argv:
            return int(proc.name)
    raise LookupError(f"no process for TaskExecutor {resource_id}")


def containers(app_id: str) -> list:
    import skein

    from yarn_client.skein_jar import use_flinkyarn_jar

    use_flinkyarn_jar()
    with skein.Client(log=False) as client:
        return client.connect(app_id).get_containers(
            ["taskexecutor"], ["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"])


def test_killed_task_executor_container_is_replaced_and_the_sum_stays_exact():
    # A heartbeat timeout far longer than the job: only YARN's report of the container's
    # end can explain a quick recovery.
    conf = Configuration.load(overrides={
        "heartbeat.interval": "1 s", "heartbeat.timeout": "120 s",
        "taskmanager.numberOfTaskSlots": "2",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "200 ms"})
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(TAG,), name="failover test")) \
        .deploy("session")
    rest, app_id = deployment.rest, deployment.app_id
    out = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}/sums"
    try:
        job_id = rest.submit(summing_pipeline(out).job_graph())
        wait_for(lambda: all(v.state_counts.get("RUNNING") == v.parallelism
                             for v in rest.job(job_id).vertices), 180, "every task running")
        [victim] = [te.resource_id for te in rest.overview().task_executors]
        os.kill(task_executor_process(victim), signal.SIGKILL)
        details = wait_for(lambda: (d := rest.job(job_id)).status in
                           ("FINISHED", "FAILED", "CANCELED") and d, 110, "the job to end")

        assert details.status == "FINISHED", details.failure_cause
        assert details.restarts >= 1
        assert f"TaskExecutor {victim} container" in details.root_cause
        assert "timed out" not in details.root_cause
        filesystem, path = resolve(out)
        table = pq.read_table(path, filesystem=filesystem)
        assert pc.sum(table.column("n_sum")).as_py() == N * (N + 1) // 2
        assert sorted(table.column("k").to_pylist()) == [0, 1, 2, 3]
        # The killed container ended FAILED; the job finished in a replacement.
        states = sorted(str(c.state) for c in containers(app_id))
        assert states.count("FAILED") == 1 and len(states) >= 2, states
        assert victim not in {te.resource_id for te in rest.overview().task_executors}
    finally:
        result = flinkyarn("session", "stop", app_id)
    assert result.returncode == 0, result.stderr
    report = yarn_cluster.application_report(app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")
