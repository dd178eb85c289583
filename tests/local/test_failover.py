"""Failover on a local cluster of real processes: restart strategies, region failover,
and a TaskExecutor killed in the middle of a job without losing or duplicating a record."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import time

import cloudpickle
import msgspec
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from flinkyarn import Pipeline
from flinkyarn.pipeline.operator import Operator
from tests.local.conftest import task_executor_pid, wait_for
from tests.local.jobs import N, slow_numbers, summing_pipeline
from yarn_client.executors import ClusterExecutor
from yarn_client.rest_client import RestError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RESTARTING = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
              "restart-strategy.fixed-delay.delay": "200 ms"}


def run(cluster, pipeline, timeout=120):
    rest = cluster.rest
    job_id = rest.submit(pipeline.job_graph())
    return job_id, wait_for(lambda: (d := rest.job(job_id)).status in ("FINISHED", "FAILED", "CANCELED") and d,
                            timeout, "the job to end")


def test_killing_a_task_executor_mid_job_loses_and_duplicates_nothing(start_cluster, tmp_path):
    cluster = start_cluster(**RESTARTING)
    for run_number in range(20):
        out = tmp_path / f"out-{run_number}"
        job_id = cluster.rest.submit(summing_pipeline(out).job_graph())
        wait_for(lambda: all(v.state_counts.get("RUNNING") == v.parallelism
                             for v in cluster.rest.job(job_id).vertices), 60, "every task running")
        time.sleep(0.3 + 0.05 * (run_number % 10))  # somewhere in the middle
        victim = cluster.rest.overview().task_executors[0].resource_id
        os.kill(task_executor_pid(cluster, victim), signal.SIGKILL)

        details = wait_for(lambda: (d := cluster.rest.job(job_id)).status in
                           ("FINISHED", "FAILED", "CANCELED") and d, 120, "the job to end")

        assert details.status == "FINISHED", (run_number, details.failure_cause)
        assert details.restarts >= 1 and victim in (details.root_cause or "")
        table = pq.read_table(out)
        assert pc.sum(table.column("n_sum")).as_py() == N * (N + 1) // 2, run_number
        assert sorted(table.column("k").to_pylist()) == [0, 1, 2, 3]


def always_fails(batch):
    raise ValueError("column n has a negative value")


def test_failing_udf_exhausts_the_fixed_delay_strategy_and_fails_with_its_error(start_cluster, tmp_path):
    cluster = start_cluster(**{**RESTARTING, "restart-strategy.fixed-delay.attempts": "2"})
    p = Pipeline("always failing", parallelism=1)
    p.from_generator(slow_numbers).map(always_fails, name="check").write_parquet(str(tmp_path / "o"))

    _, details = run(cluster, p)

    assert details.status == "FAILED"
    assert details.restarts == 2
    assert "operator 'check': ValueError: column n has a negative value" in details.failure_cause
    assert len(details.restart_history) == 2


class FailOnce:
    """A map that fails on the first attempt of its subtask 0, then works."""

    def __init__(self, marker):
        self.marker = marker

    def __call__(self, batch):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("transient failure")
        return batch


def test_a_failure_in_one_of_two_regions_restarts_only_that_region(start_cluster, tmp_path):
    cluster = start_cluster(**{**RESTARTING, "jobmanager.execution.failover-strategy": "region"})
    p = Pipeline("two regions", parallelism=1)
    p.from_generator(slow_numbers, name="left source").map(lambda b: b, name="left") \
        .write_parquet(str(tmp_path / "left"))
    p.from_generator(slow_numbers, name="right source") \
        .map(FailOnce(str(tmp_path / "failed-once")), name="right") \
        .write_parquet(str(tmp_path / "right"))

    _, details = run(cluster, p)

    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts == 1
    [restart] = details.restart_history
    assert restart.restarted and all("right" in task for task in restart.restarted)
    for side in ("left", "right"):
        assert pc.sum(pq.read_table(tmp_path / side).column("n")).as_py() == N * (N + 1) // 2


def test_frozen_task_executor_is_declared_dead_and_the_job_still_finishes(start_cluster,
                                                                            tmp_path):
    cluster = start_cluster(**RESTARTING)
    out = tmp_path / "out"
    job_id = cluster.rest.submit(summing_pipeline(out).job_graph())
    wait_for(lambda: all(v.state_counts.get("RUNNING") == v.parallelism
                         for v in cluster.rest.job(job_id).vertices), 60, "every task running")
    victim = cluster.rest.overview().task_executors[0].resource_id
    pid = task_executor_pid(cluster, victim)

    os.kill(pid, signal.SIGSTOP)  # alive to the kernel and to YARN: only heartbeats tell
    try:
        details = wait_for(lambda: (d := cluster.rest.job(job_id)).status in
                           ("FINISHED", "FAILED", "CANCELED") and d, 120, "the job to end")
    finally:
        os.kill(pid, signal.SIGCONT)

    assert details.status == "FINISHED", details.failure_cause
    assert f"heartbeat of TaskExecutor {victim} timed out" in details.root_cause
    assert pc.sum(pq.read_table(out).column("n_sum")).as_py() == N * (N + 1) // 2
    # Thawed, the frozen TaskExecutor drops the job it was cut off from and registers again.
    wait_for(lambda: victim in {te.resource_id for te in cluster.rest.overview().task_executors},
             20, "the thawed TaskExecutor to register again")


class SlowOnSubtaskZero(Operator):
    """Passes batches on; subtask 0 records its TaskExecutor's pid and dawdles, so the
    test can kill it in the middle while subtask 1 runs ahead."""

    name = "consume"

    def __init__(self, folder):
        self.folder = folder

    def open(self, context):
        super().open(context)
        if context.subtask_index == 0:
            with open(os.path.join(self.folder, f"pid-{context.attempt_number}"), "w") as f:
                f.write(str(os.getpid()))

    def process(self, batch, input_index):
        if self.context.subtask_index == 0:
            time.sleep(0.1)
        return (batch,)


def restarted_tasks(details) -> set[str]:
    return {task for restart in details.restart_history for task in restart.restarted}


@pytest.mark.parametrize("exchange, deterministic", [("key_by", True), ("rebalance", False)])
def test_a_lost_blocking_partition_reruns_its_producer_and_reuses_the_others(
        start_cluster, tmp_path, exchange, deterministic):
    """Batch job, one slot per TaskExecutor: producer i and consumer i share slot i on
    TaskExecutor i. TaskExecutor 0 is killed while consumer 0 reads, after consumer 1 is
    done. The blocking result of producer 0 is lost with it: producer 0 runs again,
    producer 1's result on the surviving TaskExecutor is read again, not recomputed.
    Consumer 1 runs again only behind a non-deterministic exchange (rebalance), whose
    re-run producer may send it different records."""
    cluster = start_cluster(**{**RESTARTING, "jobmanager.execution.failover-strategy": "region",
                               "taskmanager.numberOfTaskSlots": "1"})
    folder, out = tmp_path / "pids", tmp_path / "out"
    folder.mkdir()
    p = Pipeline("lost partition", parallelism=2, batch_mode=True)
    numbers = p.from_generator(slow_numbers, name="numbers")
    exchanged = numbers.key_by("k") if exchange == "key_by" else numbers.rebalance()
    exchanged.transform(SlowOnSubtaskZero(str(folder)), name="consume").write_parquet(str(out))
    job_id = cluster.rest.submit(p.job_graph())

    def consumers():
        [vertex] = [v for v in cluster.rest.job(job_id).vertices if "consume" in v.name]
        return vertex.state_counts
    wait_for(lambda: consumers().get("FINISHED") == 1 and consumers().get("RUNNING") == 1,
             60, "consumer 1 finished while consumer 0 reads")
    os.kill(int((folder / "pid-0").read_text()), signal.SIGKILL)  # first attempt
    details = wait_for(lambda: (d := cluster.rest.job(job_id)).status in
                       ("FINISHED", "FAILED", "CANCELED") and d, 120, "the job to end")

    assert details.status == "FINISHED", details.failure_cause
    restarted = restarted_tasks(details)
    assert any(t.startswith("Source: numbers") and "(1/2)" in t for t in restarted), restarted
    assert not any(t.startswith("Source: numbers") and "(2/2)" in t for t in restarted), restarted
    assert any("consume" in t and "(1/2)" in t for t in restarted), restarted
    assert any("consume" in t and "(2/2)" in t for t in restarted) is not deterministic, restarted
    assert pc.sum(pq.read_table(out).column("n")).as_py() == N * (N + 1) // 2
    assert pq.read_table(out).num_rows == N


def test_each_job_of_a_cluster_chooses_its_own_restart_strategy(start_cluster, tmp_path):
    cluster = start_cluster()  # the cluster's default: no restarts
    restarting = {"restart-strategy.type": "fixed-delay",
                  "restart-strategy.fixed-delay.delay": "100 ms"}

    def failing_once(name, **settings):
        p = Pipeline(name, parallelism=1, **settings)
        p.from_generator(slow_numbers).map(FailOnce(str(tmp_path / f"{name}-failed"))) \
            .write_parquet(str(tmp_path / name))
        return p

    _, restarted = run(cluster, failing_once("own settings", configuration=restarting))
    _, failed = run(cluster, failing_once("cluster settings"))
    # As `flinkyarn run -D` does for a session: the client's job-level settings go with
    # each job that has none of its own.
    result = ClusterExecutor(cluster.rest, io.StringIO(), job_settings=restarting) \
        .execute(failing_once("client settings").job_graph())

    assert (restarted.status, restarted.restarts) == ("FINISHED", 1)
    assert (failed.status, failed.restarts) == ("FAILED", 0)
    assert "transient failure" in failed.failure_cause
    assert result.status == "FINISHED"


def test_a_job_with_bad_settings_is_refused_and_leaves_nothing_behind(cluster):
    graph = summing_pipeline("/tmp/never").job_graph()
    for settings, message in [
            ({"taskmanager.numberOfTaskSlots": "8"},
             "a job cannot set option 'taskmanager.numberOfTaskSlots': it is the cluster's"),
            ({"restart-strategy.type": "sometimes"}, "restart-strategy.type"),
            ({"restart-strategy.fixed-delay.atempts": "3"}, "unknown option"),
            ({"jobmanager.execution.failover-strategy": "restart-individual"},
             "restart-individual")]:
        with pytest.raises(RestError, match=re.escape(message)):
            cluster.rest.submit(msgspec.structs.replace(graph, configuration=settings))
    assert cluster.rest.jobs().jobs == []
