"""Failover on a local cluster of real processes: TaskExecutors killed and frozen in the
middle of jobs without losing or duplicating a record, lost blocking partitions, and a
TaskExecutor whose Spark cannot start again. The scenarios are
tests/failover_scenarios.py's, which run on YARN too. Restart strategies, region
failover and each job's own settings are control-plane decisions, tested exactly on the
in-process cluster (tests/unit/test_failover_control_plane.py)."""

from __future__ import annotations

import os
import signal

import pyarrow.parquet as pq
import pytest

from flinkyarn import Pipeline
from tests import failover_scenarios as scenarios
from tests.local.conftest import children, cmdline, task_executor_process
from tests.waiting import wait_for
from tests.local.jobs import N, interval_sums, slow_numbers


@pytest.fixture
def target(tmp_path):
    """Makes the scenarios' Target of a local cluster; jobs write under tmp_path/out."""
    def on(cluster) -> scenarios.Target:
        (tmp_path / "out").mkdir(exist_ok=True)
        return scenarios.Target(cluster.rest, task_executor_process,
                                str(tmp_path / "out"), str(tmp_path))
    return on


def test_killing_a_task_executor_mid_job_loses_and_duplicates_nothing(cluster, target):
    on = target(cluster)
    for run_number in range(10):  # each at another point of the job
        details, victim = scenarios.harm_a_task_executor_mid_job(
            on, signal.SIGKILL, at_batch=1 + 2 * run_number)
        # The driver saw the process end; the ResourceManager told the JobMaster.
        assert f"TaskExecutor {victim} process killed by SIGKILL" in details.root_cause, run_number


def test_frozen_task_executor_is_declared_dead_and_the_job_still_finishes(cluster, target):
    details, victim = scenarios.harm_a_task_executor_mid_job(target(cluster), signal.SIGSTOP)

    # Alive to the kernel and to the driver: only the heartbeat timeout tells.
    assert f"heartbeat of TaskExecutor {victim} timed out" in details.root_cause
    # Thawed, it drops the job it was cut off from and registers again.
    wait_for(lambda: victim in {te.resource_id for te in cluster.rest.overview().task_executors},
             60, "the thawed TaskExecutor to register again")


@pytest.mark.parametrize("exchange, deterministic", [("key_by", True), ("rebalance", False)])
def test_a_lost_blocking_partition_reruns_its_producer_and_reuses_the_others(
        start_cluster, target, exchange, deterministic):
    cluster = start_cluster(**{"taskmanager.numberOfTaskSlots": "1"})
    scenarios.lost_blocking_partition_reruns_its_producer(target(cluster), exchange, deterministic)


BROKEN_JAVA = """#!/bin/sh
# java, but not for a TaskExecutor named in $1's file: its command line is one of the
# launching processes' (the JVM is the TaskExecutor's child, Spark's launcher its grandchild).
p=$PPID
for _ in 1 2 3; do
  if [ -s "{marks}" ] && grep -qaF -- "$(cat "{marks}")" /proc/$p/cmdline 2>/dev/null; then
    echo "java: broken on this TaskExecutor (a test's)" >&2
    exit 1
  fi
  p=$(cut -d' ' -f4 /proc/$p/stat 2>/dev/null) || break
done
exec {java} "$@"
"""


def test_a_task_executor_whose_spark_cannot_start_again_ends_itself_and_the_job_ends_on_another(
        start_cluster, tmp_path, monkeypatch):
    """Issue 41: its Spark JVM killed, a TaskExecutor starts a new one for the next Spark
    stage; where that fails (here: java refuses to run there) the TaskExecutor fails
    fatally and exits, and the job finishes on the other one."""
    import shutil

    from tests.local.test_cluster import finished

    marks, bin_dir = tmp_path / "broken-on", tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(BROKEN_JAVA.format(marks=marks, java=shutil.which("java")))
    java.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    cluster = start_cluster(start_workers=2, **{
        "taskmanager.numberOfTaskSlots": "1", "taskmanager.spark.start-eagerly": "true",
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "100 ms"})
    out = tmp_path / "sums"
    p = Pipeline("spark sums", parallelism=1)
    p.from_generator(slow_numbers).key_by("k").spark(interval_sums).write_parquet(str(out))
    job_id = cluster.rest.submit(p.job_graph())
    victim = wait_for(lambda: next((te.resource_id for te in cluster.rest.overview().task_executors
                                    if any(s.job_id == job_id for s in te.slots)), None),
                      30, "the TaskExecutor with the job's slot")
    te = task_executor_process(victim)
    jvm = wait_for(lambda: next((c for c in children(te) if b"SparkSubmit" in cmdline(c)), None),
                   120, "its Spark JVM")
    marks.write_text(victim)
    os.kill(jvm, signal.SIGKILL)

    details = finished(cluster.rest, job_id, timeout=180)
    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts >= 1
    log = (cluster.work_dir / "logs" / f"{victim}.log").read_text()
    assert "fatal error, this TaskExecutor exits: Spark could not start again after" in log, \
        log[-3000:]
    wait_for(lambda: victim not in {t.resource_id for t in cluster.rest.overview().task_executors},
             60, "the failed TaskExecutor to be gone")
    sums = pq.read_table(str(out)).to_pydict()
    assert sum(sums["n"]) == N * (N + 1) // 2

