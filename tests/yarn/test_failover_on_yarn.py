"""Failover on the real local Hadoop, with the scenarios of tests/failover_scenarios.py
(which run locally too) in YARN sessions, outputs on HDFS. A TaskExecutor's process is
killed inside its YARN container in the middle of a job: YARN reports the container's
end, the ResourceManager tells the JobMaster and asks YARN for a replacement container,
and the job finishes with every record counted once. A frozen one is found by heartbeat
timeout."""

from __future__ import annotations

import contextlib
import functools
import html
import re
import signal
import urllib.request
import uuid

import pytest

import local_hadoop
from flinkyarn.configuration import Configuration
from tests import failover_scenarios as scenarios
from tests.local.conftest import task_executor_process
from tests.yarn.test_on_yarn import TAG, flinkyarn
from yarn_client import yarn_cluster
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions

pytestmark = pytest.mark.usefixtures("hadoop")


def containers(app_id: str) -> list:
    from yarn_client import skein_agent

    with skein_agent.client(log=False) as client:
        return client.connect(app_id).get_containers(
            ["taskexecutor"], ["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"])


@contextlib.contextmanager
def session(name: str, **overrides: str):
    """A YARN session with test-sized heartbeats, as a scenario Target; stopped after.
    Jobs write, and tasks and the test share scratch files, on HDFS: the containers see
    none of the client's files."""
    conf = Configuration.load(overrides={"heartbeat.interval": "1 s", "heartbeat.timeout": "10 s",
                                         **overrides})
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(f"{TAG}-failover",), name=name)) \
        .deploy("session")
    outputs = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    try:
        pid_of = functools.partial(task_executor_process, application=deployment.app_id)
        yield deployment, scenarios.Target(deployment.rest, pid_of, outputs, f"{outputs}/scratch")
    finally:
        result = flinkyarn("session", "stop", deployment.app_id)
    assert result.returncode == 0, result.stderr
    report = yarn_cluster.application_report(deployment.app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")


@pytest.fixture(scope="module")
def one_slot_session(hadoop):
    """(deployment, Target) of a session shared by the module's scenarios. One slot per
    TaskExecutor container, so a job of parallelism 2 spans two."""
    with session("failover scenarios", **{"taskmanager.numberOfTaskSlots": "1"}) \
            as (deployment, target):
        yield deployment, target


@pytest.fixture
def target(one_slot_session) -> scenarios.Target:
    return one_slot_session[1]


def test_killed_task_executor_container_is_replaced_and_the_sum_stays_exact(hadoop):
    # A heartbeat timeout far longer than the job, and no heartbeat.rpc-failure-threshold:
    # only YARN's report of the container's end can explain a quick recovery. Two slots:
    # the replacement is a new container.
    with session("failover test", **{"heartbeat.timeout": "120 s",
                                               "heartbeat.rpc-failure-threshold": "-1",
                                               "taskmanager.numberOfTaskSlots": "2"}) \
            as (deployment, target):
        details, victim = scenarios.harm_a_task_executor_mid_job(target, signal.SIGKILL)

        assert f"TaskExecutor {victim} container" in details.root_cause
        assert "timed out" not in details.root_cause
        # The killed container ended FAILED; the job finished in a replacement.
        states = sorted(str(c.state) for c in containers(deployment.app_id))
        assert states.count("FAILED") == 1 and len(states) >= 2, states
        assert victim not in {te.resource_id for te in target.rest.overview().task_executors}


def test_killed_task_executor_is_found_by_whichever_comes_first(one_slot_session):
    deployment, target = one_slot_session
    # Heartbeat calls refused twice (1 s apart), YARN's report of the container's end, or
    # a consumer whose stream from the victim broke: each names the victim.
    details, victim = scenarios.harm_a_task_executor_mid_job(target, signal.SIGKILL)
    assert re.search(rf"TaskExecutor {victim}( at \S+)? is unreachable"
                     rf"|TaskExecutor {victim} container", details.root_cause), details.root_cause

    # What an operator sees: the restarts and their root cause, in the shell and on the
    # dashboard (the page the YARN UI's tracking URL leads to).
    listed = flinkyarn("list", deployment.app_id)
    assert listed.returncode == 0, listed.stderr
    assert f"{details.job_id}  FINISHED   sum  {details.restarts} restart(s)" in listed.stdout
    assert f"root cause: {details.root_cause.splitlines()[0]}" in listed.stdout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    page = html.unescape(opener.open(deployment.dashboard_url, timeout=30).read().decode())
    assert f"{details.restarts} restart(s); root cause: {details.root_cause.splitlines()[0]}" in page
    assert "restarted 4 task(s)" in page  # one pipelined region: 2 sources, 2 sums


def test_a_killed_streaming_job_goes_on_from_its_latest_checkpoint_on_hdfs(target):
    """Two TaskExecutor containers (one slot each, on either node) write their state to
    HDFS; the AppMaster writes the checkpoint's metadata there; the restarted tasks read
    their state back from it."""
    details = scenarios.killed_streaming_job_goes_on_from_its_checkpoint(target)
    view = details.checkpoints
    assert view is not None and view.directory.startswith("hdfs://"), view


def test_a_watched_folder_on_hdfs_job_killed_twice_keeps_every_record_once(one_slot_session):
    deployment, target = one_slot_session
    details = scenarios.watched_folder_job_killed_twice_keeps_every_record_once(target)
    view = details.checkpoints
    assert view is not None and view.restored_from is not None
    # What an operator sees of them.
    listed = flinkyarn("list", deployment.app_id)
    assert listed.returncode == 0, listed.stderr
    # (A checkpoint may complete while the finished job's AppMaster side winds down.)
    assert re.search(r"checkpoints: \d+ completed, \d+ failed, 0 in progress; last #\d+ "
                     r"\(\d+ ms, \d+ bytes, aligned in \d+ ms\); restored from #\d+",
                     listed.stdout), listed.stdout


def test_stop_with_a_savepoint_on_hdfs_then_resume_from_it(one_slot_session):
    """`flinkyarn stop --savepoint` (the CLI, as a user) writes the savepoint to HDFS; a
    job resuming from it reads the rest of the input, every record once."""
    deployment, target = one_slot_session

    def stop(job_id: str, folder: str) -> str:
        result = flinkyarn("stop", "--savepoint", "--savepoint-dir", folder,
                           deployment.app_id, job_id)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().rsplit("savepoint written to ", 1)[-1]

    scenarios.stop_with_savepoint_and_resume(target, stop)


def test_frozen_task_executor_is_declared_dead_and_the_job_still_finishes(target):
    details, victim = scenarios.harm_a_task_executor_mid_job(target, signal.SIGSTOP)
    assert f"heartbeat of TaskExecutor {victim} timed out" in details.root_cause


def test_failing_udf_exhausts_the_fixed_delay_strategy(target):
    scenarios.failing_udf_exhausts_fixed_delay(target)


def test_a_failure_in_one_of_two_regions_restarts_only_that_region(target):
    scenarios.failure_in_one_of_two_regions_restarts_only_that_region(target)


@pytest.mark.parametrize("exchange, deterministic", [("key_by", True), ("rebalance", False)])
def test_a_lost_blocking_partition_reruns_its_producer(target, exchange, deterministic):
    scenarios.lost_blocking_partition_reruns_its_producer(target, exchange,
                                                          deterministic)


FAILS_ONCE = """
import sys
import pyarrow as pa
import pyarrow.fs as pafs
from flinkyarn import Pipeline
from flinkyarn.connectors.filesystems import resolve

marker = sys.argv[1]  # an hdfs:// URL: the TaskExecutors' containers see it

def numbers(subtask, parallelism):
    yield pa.record_batch([pa.array([1, 2, 3])], names=["n"])

def fail_once(batch):
    filesystem, path = resolve(marker)
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        filesystem.open_output_stream(path).close()
        raise RuntimeError("transient failure")
    return batch

p = Pipeline("fails once", parallelism=1)
p.from_generator(numbers).map(fail_once, name="flaky").write_parquet(sys.argv[2])
p.execute()
"""


def test_run_into_a_session_gives_the_jobs_its_restart_settings(one_slot_session, tmp_path):
    deployment, target = one_slot_session
    program = tmp_path / "fails_once.py"
    program.write_text(FAILS_ONCE)

    def run(name, *properties):
        return flinkyarn("run", "-t", "yarn-session", "--application-id", deployment.app_id,
                         *properties, str(program), target.output(f"{name}.marker"),
                         target.output(name))

    plain = run("plain")  # the session's own configuration: no restarts
    restarting = run("restarting", "-D", "restart-strategy.type=fixed-delay",
                     "-D", "restart-strategy.fixed-delay.delay=100 ms",
                     "-D", "taskmanager.numberOfTaskSlots=4")

    assert plain.returncode == 1 and "transient failure" in plain.stdout + plain.stderr
    assert restarting.returncode == 0, restarting.stderr[-3000:]
    assert ("a session keeps its own configuration; ignored: taskmanager.numberOfTaskSlots"
            in restarting.stderr)
    [job] = [j for j in target.rest.jobs().jobs if j.status == "FINISHED" and j.name == "fails once"]
    assert target.rest.job(job.job_id).restarts == 1
