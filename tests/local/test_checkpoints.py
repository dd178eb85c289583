"""Checkpoints on a local cluster of real processes: a streaming job restarted after a
lost TaskExecutor goes on from its latest completed checkpoint, exactly (the scenario is
tests/failover_scenarios.py's). When checkpoints are triggered, expire and fail a job
over, and when a savepoint is refused, is decided by the JobMaster alone: tested exactly
on the in-process cluster (tests/unit/test_checkpoints_control_plane.py)."""

from __future__ import annotations

import os
import signal

import pyarrow.compute as pc
import pytest

from flinkyarn import Pipeline
from tests import failover_scenarios as scenarios
from tests.local import jobs
from tests.local.conftest import task_executor_process
from tests.waiting import wait_for
from tests.local.jobs import SlowSnapshots, slow_numbers


def test_a_killed_streaming_job_goes_on_from_its_latest_checkpoint_exactly(cluster, tmp_path):
    (tmp_path / "out").mkdir()
    target = scenarios.Target(cluster.rest, task_executor_process, str(tmp_path / "out"),
                              str(tmp_path))
    details = scenarios.killed_streaming_job_goes_on_from_its_checkpoint(target)
    checkpoints = details.checkpoints
    assert checkpoints is not None and checkpoints.completed >= 2
    # Every restarted subtask took its state back (the sum alone would also be exact
    # if every task started from scratch).
    logs = "".join(log.read_text() for log in (cluster.work_dir / "logs").glob("*.log"))
    restored = f"restored from checkpoint {checkpoints.restored_from}"
    assert logs.count(restored) >= 4, restored


def test_a_job_failed_over_by_expiring_checkpoints_still_writes_each_record_once(
        cluster, tmp_path):
    """Checkpoints 1 and 2 expire (a snapshot takes 1 s, the timeout is 300 ms): the job
    fails over once, from no checkpoint, and its output is still exact (which checkpoint
    fails when, and why the job fails over, is the harness's test)."""
    out = tmp_path / "out"
    p = Pipeline("slow snapshots", parallelism=1, configuration={
        **scenarios.RESTARTING, "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.timeout": "300 ms",
        "execution.checkpointing.tolerable-failed-checkpoints": "1",
        "state.checkpoints.dir": str(tmp_path / "checkpoints")})
    p.from_generator(slow_numbers).transform(SlowSnapshots(slow=2, seconds=1.0)) \
        .key_by("k").sum("n").write_parquet(str(out))
    details = scenarios.Target(cluster.rest, task_executor_process, str(out), str(tmp_path)) \
        .result(cluster.rest.submit(p.job_graph()))
    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts == 1
    assert "checkpoint tolerable failure threshold" in (details.root_cause or "")
    assert pc.sum(scenarios.read(str(out)).column("n_sum")).as_py() == scenarios.TOTAL


def test_a_watched_folder_job_killed_twice_keeps_every_record_once(cluster, tmp_path):
    """Ten times (issue 14), each kill at another point of the input's timing."""
    (tmp_path / "out").mkdir()
    target = scenarios.Target(cluster.rest, task_executor_process, str(tmp_path / "out"),
                              str(tmp_path))
    for run in range(10):
        details = scenarios.watched_folder_job_killed_twice_keeps_every_record_once(target)
        assert details.checkpoints is not None and details.checkpoints.restored_from, run


def test_a_rate_limited_data_generator_killed_once_then_stopped_keeps_every_row_once(
        cluster, tmp_path):
    """An unbounded data generator (2000 rows/s over two subtasks) into the exactly-once
    sink; a TaskExecutor is SIGKILLed after two checkpoints, the job goes on from its
    checkpoint and is stopped with a savepoint: each subtask's numbers (n % 2) are there
    from the first without a gap, and none twice."""
    out = str(tmp_path / "out")
    p = Pipeline("generated", parallelism=2, configuration={
        **scenarios.RESTARTING, "execution.checkpointing.interval": "100 ms",
        "state.checkpoints.dir": str(tmp_path / "checkpoints")})
    p.from_data_generator(jobs.as_rows, rows_per_second=2000).write_parquet(out)
    job = cluster.rest.submit(p.job_graph())
    wait_for(lambda: (v := cluster.rest.job(job).checkpoints) and v.completed >= 2, 60,
             "two checkpoints")
    victim = cluster.rest.overview().task_executors[0].resource_id
    os.kill(task_executor_process(victim), signal.SIGKILL)
    wait_for(lambda: (v := cluster.rest.job(job).checkpoints) and v.restored_from is not None
             and v.completed >= 4, 120, "checkpoints after the restart")
    cluster.rest.savepoint(job, str(tmp_path / "savepoints"), stop=True, timeout=60)
    target = scenarios.Target(cluster.rest, task_executor_process, out, str(tmp_path))
    details = target.result(job)
    assert details.status == "FINISHED" and details.restarts >= 1, details.failure_cause
    numbers = scenarios.read(out).column("n").to_pylist()
    assert len(numbers) == len(set(numbers)) > 100
    for subtask in (0, 1):
        mine = sorted(n for n in numbers if n % 2 == subtask)
        assert mine == list(range(subtask, 2 * len(mine), 2)), subtask


def test_a_spark_stage_in_a_stream_killed_twice_gives_each_intervals_result_once(
        cluster, tmp_path):
    (tmp_path / "out").mkdir()
    target = scenarios.Target(cluster.rest, task_executor_process, str(tmp_path / "out"),
                              str(tmp_path))
    scenarios.watched_folder_job_killed_twice_keeps_every_record_once(target, files=12,
                                                                      spark=True)


@pytest.mark.parametrize("parallelism", [(2, 3), (3, 1)])
def test_stop_with_a_savepoint_then_resume_from_it_at_another_parallelism_keeps_every_record_once(
        cluster, tmp_path, parallelism):
    (tmp_path / "out").mkdir()
    target = scenarios.Target(cluster.rest, task_executor_process, str(tmp_path / "out"),
                              str(tmp_path))
    details = scenarios.stop_with_savepoint_and_resume(
        target, lambda job, folder: cluster.rest.savepoint(job, folder, stop=True, timeout=60),
        parallelism=parallelism)
    assert {v.parallelism for v in details.vertices} == {parallelism[1]}
