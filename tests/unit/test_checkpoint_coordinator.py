"""The CheckpointCoordinator's decisions, on a clock the test moves (seconds)."""

from __future__ import annotations

import pytest

from flinkyarn.options import CheckpointConfig
from yarn_am.jobmaster.checkpoint_coordinator import (Aborted, CheckpointCoordinator,
                                                       NotTriggered, Triggered)

TASKS = ["source-0", "source-1", "sink-0"]
SOURCES = TASKS[:2]


def coordinator(**settings) -> CheckpointCoordinator[str, str]:
    return CheckpointCoordinator(CheckpointConfig(**{"interval": 1.0, **settings}))


def complete(c: CheckpointCoordinator, checkpoint_id: int, now: float, size: int = 10):
    """Every task acknowledges; the metadata is written. Returns what was discarded."""
    completed = None
    for task in TASKS:
        completed = c.acknowledge(checkpoint_id, task, f"{task}@{checkpoint_id}", now)
    assert completed is not None
    return c.completed_written(completed, size, now)


def test_no_coordinator_without_an_interval():
    with pytest.raises(ValueError, match="execution.checkpointing.interval > 0"):
        CheckpointCoordinator(CheckpointConfig(interval=0))


def test_a_checkpoint_needs_every_task_running_and_a_source():
    c = coordinator()
    assert c.trigger(0, 1000, SOURCES, None) == NotTriggered("not all tasks of the job are running")
    assert c.trigger(0, 1000, [], TASKS) == NotTriggered("no source task is running")
    assert c.trigger(0, 1000, SOURCES, TASKS) == Triggered(1, 1000)
    assert c.stats.triggered == 1


def test_it_completes_when_the_last_task_acknowledged_and_keeps_what_each_wrote():
    c = coordinator()
    c.trigger(0.0, 1000, SOURCES, TASKS)
    assert c.acknowledge(1, "source-0", "a", 0.1) is None
    assert c.acknowledge(1, "source-0", "again", 0.2) is None   # twice: nothing changes
    assert c.acknowledge(1, "stranger", "x", 0.2) is None       # not one of its tasks
    assert c.acknowledge(1, "source-1", "b", 0.3) is None
    completed = c.acknowledge(1, "sink-0", "c", 0.5)
    assert completed is not None and completed.snapshots == {
        "source-0": "a", "source-1": "b", "sink-0": "c"}
    assert completed.duration == pytest.approx(0.5) and completed.timestamp == 1000
    assert c.latest() is None  # not before its metadata is written
    assert c.completed_written(completed, 123, 0.6) == []
    assert c.latest() is completed
    assert (c.stats.completed, c.stats.last_completed_id, c.stats.last_completed_size) == (1, 1, 123)


def test_only_the_newest_completed_checkpoints_are_kept():
    c = coordinator(num_retained=2)
    discarded = []
    for n in (1, 2, 3):
        assert c.trigger(float(n), 1000 * n, SOURCES, TASKS) == Triggered(n, 1000 * n)
        discarded += complete(c, n, n + 0.5)
    assert [d.checkpoint_id for d in discarded] == [1]
    assert [k.checkpoint_id for k in c.completed] == [2, 3]


def test_at_most_max_concurrent_are_pending_and_a_completed_one_subsumes_older_ones():
    c = coordinator(max_concurrent=2)
    assert isinstance(c.trigger(0, 1, SOURCES, TASKS), Triggered)
    assert isinstance(c.trigger(1, 2, SOURCES, TASKS), Triggered)
    refused = c.trigger(2, 3, SOURCES, TASKS)
    assert isinstance(refused, NotTriggered) and "2 checkpoint(s) in progress" in refused.reason
    complete(c, 2, 2.5)
    assert c.pending == {}  # checkpoint 1 will never be needed
    assert c.acknowledge(1, "source-0", "late", 3) is None


def test_min_pause_keeps_a_gap_after_the_end_of_the_last_one():
    c = coordinator(min_pause=5.0)
    c.trigger(0, 1, SOURCES, TASKS)
    complete(c, 1, 2.0)
    assert c.next_trigger_time(2.0) == 7.0
    assert isinstance(c.trigger(6.9, 2, SOURCES, TASKS), NotTriggered)
    assert c.trigger(7.0, 3, SOURCES, TASKS) == Triggered(2, 3)


def test_the_interval_counts_from_the_last_trigger():
    c = coordinator(interval=10.0)
    c.trigger(3.0, 1, SOURCES, TASKS)
    assert c.next_trigger_time(4.0) == 13.0
    assert c.next_trigger_time(20.0) == 20.0


def test_a_decline_and_a_timeout_abort_and_count_and_past_the_tolerable_count_the_job_fails_over():
    c = coordinator(timeout=10.0, tolerable_failures=1)
    c.trigger(0, 1, SOURCES, TASKS)
    c.acknowledge(1, "source-0", "a", 1)
    assert c.expire(9.9) == []
    (aborted,) = c.expire(10.0)
    assert aborted.checkpoint_id == 1 and aborted.counted
    assert "expired before completing" in aborted.reason and "2 task(s)" in aborted.reason
    assert c.must_fail_over is None  # one tolerated
    c.trigger(11, 2, SOURCES, TASKS)
    declined = c.decline(2, "sink-0", "OSError: disk full", 12)
    assert declined == Aborted(2, "a task declined it: OSError: disk full", True)
    assert c.must_fail_over is not None
    assert "2 checkpoint failure(s) in a row, 1 tolerated" in c.must_fail_over
    assert "disk full" in c.must_fail_over
    assert c.stats.failed == 2 and "checkpoint 2" in (c.stats.last_failure or "")
    assert c.decline(2, "sink-0", "again", 13) is None  # no longer pending


def test_a_completed_checkpoint_resets_the_failures_in_a_row():
    c = coordinator(tolerable_failures=1)
    c.trigger(0, 1, SOURCES, TASKS)
    c.decline(1, "sink-0", "once", 0.5)
    c.trigger(1, 2, SOURCES, TASKS)
    complete(c, 2, 1.5)
    c.trigger(2, 3, SOURCES, TASKS)
    c.decline(3, "sink-0", "once more", 2.5)
    assert c.failures_in_a_row == 1 and c.must_fail_over is None


def test_aborts_for_a_failover_do_not_count_and_ids_go_on():
    c = coordinator()
    c.trigger(0, 1, SOURCES, TASKS)
    assert c.abort_pending("the job fails over") == [Aborted(1, "the job fails over", False)]
    assert c.failures_in_a_row == 0 and c.must_fail_over is None
    assert c.trigger(1, 2, SOURCES, TASKS) == Triggered(2, 2)


def test_ids_go_on_after_the_checkpoint_a_job_was_restored_from():
    c = coordinator()
    c.restore_from(41)
    assert c.trigger(0, 1, SOURCES, TASKS) == Triggered(42, 1)


def test_metadata_that_cannot_be_written_fails_the_checkpoint():
    c = coordinator()
    c.trigger(0, 1, SOURCES, TASKS)
    completed = None
    for task in TASKS:
        completed = c.acknowledge(1, task, "s", 0.5)
    assert completed is not None
    aborted = c.completed_not_written(completed, "hdfs unreachable", 0.6)
    assert aborted.counted and "metadata could not be written: hdfs unreachable" in aborted.reason
    assert c.latest() is None and c.must_fail_over is not None


def test_a_trigger_that_finds_its_source_ended_aborts_without_counting():
    c = coordinator()
    c.trigger(0, 1, SOURCES, TASKS)
    assert c.abort(1, "source-0 ended") == Aborted(1, "source-0 ended", False)
    assert c.abort(1, "again") is None
    assert c.failures_in_a_row == 0 and c.must_fail_over is None and c.pending == {}


def test_a_savepoint_is_taken_beside_a_checkpoint_and_its_failure_does_not_count():
    c = coordinator(timeout=10.0)
    assert c.trigger(0, 1, SOURCES, TASKS) == Triggered(1, 1)
    assert c.trigger(0.5, 2, SOURCES, TASKS, savepoint=True) == Triggered(2, 2)
    assert c.stats.triggered == 1  # the statistics are the checkpoints'
    assert c.decline(2, "sink-0", "disk full", 1) == Aborted(2, "a task declined it: disk full", False)
    c.trigger(2, 3, SOURCES, TASKS, savepoint=True)
    assert [a.counted for a in c.expire(12.5)] == [True, False]  # checkpoint 1, savepoint 3
    assert c.failures_in_a_row == 1


def test_a_completed_savepoint_does_not_subsume_a_pending_checkpoint():
    c = coordinator()
    c.trigger(0, 1, SOURCES, TASKS, savepoint=True)
    c.trigger(0, 2, SOURCES, TASKS)
    complete(c, 2, 1)
    assert list(c.pending) == [1]
    completed = None
    for task in TASKS:
        completed = c.acknowledge(1, task, "s", 2)
    assert completed is not None and completed.savepoint
