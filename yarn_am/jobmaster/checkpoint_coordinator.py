"""The CheckpointCoordinator of one job (Flink's): when to trigger a checkpoint, which
acknowledgements complete it, which failures abort it, which completed checkpoints to
keep, and when failures in a row are more than the job tolerates.

It decides and remembers; the JobMaster acts: it sends the trigger to the source tasks,
writes a completed checkpoint's metadata, deletes the discarded ones, tells the tasks a
checkpoint completed, fails the job over when told to. Time is what the caller says
(`now`: monotonic seconds, `wall_ms`: milliseconds since the epoch for the barrier).

    trigger(now, wall_ms, to_trigger, to_acknowledge)
                        -> Triggered (send barriers) | NotTriggered (why, try later)
    acknowledge(id, task, snapshot, now)
                        -> Completed (all acknowledged: write, then confirm) | None
    decline(id, task, reason, now)          -> Aborted
    abort(id, reason)                       -> Aborted (a source had ended: not counted)
    expire(now)                             -> the Aborted that timed out
    abort_pending(reason)                   -> the Aborted (a failover: not counted)
    completed_written(completed) / completed_not_written(completed, reason, now)

A checkpoint completes when every task it was triggered for acknowledged it. A
savepoint (the user's, `trigger(..., savepoint=True)`) is one too, taken whatever else
is in progress; it does not subsume checkpoints, and its failure does not count. Failures
in a row (a task declined, it timed out, it could not be written) count toward
execution.checkpointing.tolerable-failed-checkpoints; one more than tolerated sets
`must_fail_over` (Flink: "Exceeded checkpoint tolerable failure threshold"); a completed
checkpoint resets the count. Aborts because the job fails over or ends do not count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Generic, Hashable, TypeVar

from flinkyarn.options import CheckpointConfig

log = logging.getLogger(__name__)

Task = TypeVar("Task", bound=Hashable)  # how the JobMaster names a task (an attempt id)
Snapshot = TypeVar("Snapshot")           # what a task acknowledged with (its state's handles)


@dataclass
class PendingCheckpoint(Generic[Task, Snapshot]):
    checkpoint_id: int
    timestamp: int               # wall-clock ms: the barriers'
    triggered_at: float          # monotonic s
    waiting: set[Task]
    acknowledged: dict[Task, Snapshot] = field(default_factory=dict)
    savepoint: bool = False


@dataclass(frozen=True)
class CompletedCheckpoint(Generic[Task, Snapshot]):
    checkpoint_id: int
    timestamp: int
    duration: float              # s from trigger to the last acknowledgement
    snapshots: dict[Task, Snapshot]
    savepoint: bool = False      # the user's: kept elsewhere, not one to restore from


@dataclass(frozen=True)
class Triggered:
    checkpoint_id: int
    timestamp: int


@dataclass(frozen=True)
class NotTriggered:
    reason: str


@dataclass(frozen=True)
class Aborted:
    checkpoint_id: int
    reason: str
    counted: bool                # toward the tolerable failures


@dataclass
class CheckpointStats:
    """For the REST API and the dashboard."""

    triggered: int = 0
    completed: int = 0
    failed: int = 0
    last_completed_id: int | None = None
    last_completed_duration: float | None = None
    last_completed_size: int | None = None
    last_completed_alignment: float | None = None  # the longest of its tasks', s
    last_failure: str | None = None


class CheckpointCoordinator(Generic[Task, Snapshot]):
    def __init__(self, config: CheckpointConfig, job_name: str = "job") -> None:
        if not config.enabled:
            raise ValueError("a CheckpointCoordinator needs execution.checkpointing.interval > 0")
        self.config = config
        self.job_name = job_name
        self.pending: dict[int, PendingCheckpoint[Task, Snapshot]] = {}
        self.completed: list[CompletedCheckpoint[Task, Snapshot]] = []  # oldest first
        self.stats = CheckpointStats()
        self.failures_in_a_row = 0
        self.must_fail_over: str | None = None  # set when failures pass the tolerable count
        self._next_id = 1
        self._last_end: float | None = None     # when the last checkpoint ended (min-pause)
        self._last_trigger: float | None = None

    # ----------------------------------------------------------------- triggering

    def next_trigger_time(self, now: float) -> float:
        """When trigger() may next succeed as far as timing goes (interval, min-pause)."""
        times = [now]
        if self._last_trigger is not None:
            times.append(self._last_trigger + self.config.interval)
        if self._last_end is not None:
            times.append(self._last_end + self.config.min_pause)
        return max(times)

    def trigger(self, now: float, wall_ms: int, to_trigger: list[Task],
                to_acknowledge: list[Task] | None, savepoint: bool = False
                ) -> Triggered | NotTriggered:
        """A new checkpoint for the running tasks `to_acknowledge` (None: some task of
        the job is not running), started by barriers from `to_trigger` (the sources).
        A savepoint (the user's) is taken whatever else is in progress and however
        recently the last one ended."""
        if to_acknowledge is None:
            return NotTriggered("not all tasks of the job are running")
        if not to_trigger:
            return NotTriggered("no source task is running")
        in_progress = sum(1 for p in self.pending.values() if not p.savepoint)
        if not savepoint and in_progress >= self.config.max_concurrent:
            return NotTriggered(f"{in_progress} checkpoint(s) in progress already "
                                f"(execution.checkpointing.max-concurrent-checkpoints)")
        if not savepoint and self._last_end is not None \
                and now < self._last_end + self.config.min_pause:
            return NotTriggered("within execution.checkpointing.min-pause of the last one")
        checkpoint_id, self._next_id = self._next_id, self._next_id + 1
        self.pending[checkpoint_id] = PendingCheckpoint(checkpoint_id, wall_ms, now,
                                                        set(to_acknowledge), savepoint=savepoint)
        if not savepoint:
            self._last_trigger = now
            self.stats.triggered += 1
        return Triggered(checkpoint_id, wall_ms)

    def restore_from(self, checkpoint_id: int) -> None:
        """Ids go on after a checkpoint the job was restored from (a savepoint, the
        next AppMaster attempt's store): never one the job had before."""
        self._next_id = max(self._next_id, checkpoint_id + 1)

    # ------------------------------------------------------------ acknowledgement

    def acknowledge(self, checkpoint_id: int, task: Task, snapshot: Snapshot,
                    now: float) -> CompletedCheckpoint[Task, Snapshot] | None:
        """A task's state for the checkpoint is written. The completed checkpoint when
        it was the last one missing (not yet kept: see completed_written); None when
        others are missing, or the checkpoint is not pending (aborted, unknown: the
        caller deletes what the task wrote)."""
        pending = self.pending.get(checkpoint_id)
        if pending is None or task not in pending.waiting:
            return None
        pending.waiting.discard(task)
        pending.acknowledged[task] = snapshot
        if pending.waiting:
            return None
        del self.pending[checkpoint_id]
        return CompletedCheckpoint(checkpoint_id, pending.timestamp, now - pending.triggered_at,
                                   dict(pending.acknowledged), pending.savepoint)

    def completed_written(self, completed: CompletedCheckpoint[Task, Snapshot], size: int,
                          now: float, alignment: float = 0.0
                          ) -> list[CompletedCheckpoint[Task, Snapshot]]:
        """The completed checkpoint's metadata is durable: it is the newest to restore
        from. Returns the older ones beyond state.checkpoints.num-retained, to delete."""
        self.completed.append(completed)
        self.completed.sort(key=lambda c: c.checkpoint_id)
        discarded = self.completed[:-self.config.num_retained]
        self.completed = self.completed[-self.config.num_retained:]
        self.failures_in_a_row = 0
        self._last_end = now
        self.stats.completed += 1
        self.stats.last_completed_id = completed.checkpoint_id
        self.stats.last_completed_duration = completed.duration
        self.stats.last_completed_size = size
        self.stats.last_completed_alignment = alignment
        # Older pending checkpoints are subsumed: this one is newer and complete.
        for older in [i for i, p in self.pending.items()
                      if i < completed.checkpoint_id and not p.savepoint]:
            del self.pending[older]
        return discarded

    def completed_not_written(self, completed: CompletedCheckpoint[Task, Snapshot],
                              reason: str, now: float) -> Aborted:
        return self._failed(completed.checkpoint_id, f"its metadata could not be written: "
                                                     f"{reason}", now)

    def latest(self) -> CompletedCheckpoint[Task, Snapshot] | None:
        return self.completed[-1] if self.completed else None

    # ------------------------------------------------------------------ failures

    def decline(self, checkpoint_id: int, task: Task, reason: str,
                now: float) -> Aborted | None:
        """A task could not take its snapshot: the checkpoint is aborted (counted).
        None when it was not pending."""
        pending = self.pending.pop(checkpoint_id, None)
        if pending is None:
            return None
        if pending.savepoint:  # the user hears of it; the job goes on
            return Aborted(checkpoint_id, f"a task declined it: {reason}", counted=False)
        return self._failed(checkpoint_id, f"a task declined it: {reason}", now)

    def expire(self, now: float) -> list[Aborted]:
        """The pending checkpoints older than execution.checkpointing.timeout, aborted
        (counted)."""
        expired = [p for p in self.pending.values()
                   if now - p.triggered_at >= self.config.timeout]
        aborted = []
        for pending in expired:
            del self.pending[pending.checkpoint_id]
            reason = (f"it expired before completing (execution.checkpointing.timeout "
                      f"{self.config.timeout:g} s; {len(pending.waiting)} task(s) had not "
                      f"acknowledged it)")
            aborted.append(Aborted(pending.checkpoint_id, reason, counted=False)
                           if pending.savepoint else
                           self._failed(pending.checkpoint_id, reason, now))
        return aborted

    def abort(self, checkpoint_id: int, reason: str) -> Aborted | None:
        """Aborts a pending checkpoint for a reason that is not a failure of it (not
        counted): a source task ended before its trigger reached it (Flink: not all
        required tasks running). None when it was not pending."""
        if self.pending.pop(checkpoint_id, None) is None:
            return None
        return Aborted(checkpoint_id, reason, counted=False)

    def abort_pending(self, reason: str) -> list[Aborted]:
        """Every pending checkpoint, aborted because the job fails over or ends (not
        counted: the job's own failure is handled as such)."""
        aborted = [Aborted(i, reason, counted=False) for i in sorted(self.pending)]
        self.pending.clear()
        return aborted

    def _failed(self, checkpoint_id: int, reason: str, now: float) -> Aborted:
        self.failures_in_a_row += 1
        self._last_end = now
        self.stats.failed += 1
        self.stats.last_failure = f"checkpoint {checkpoint_id}: {reason}"
        tolerable = self.config.tolerable_failures
        if self.failures_in_a_row > tolerable and self.must_fail_over is None:
            self.must_fail_over = (
                f"exceeded the checkpoint tolerable failure threshold: "
                f"{self.failures_in_a_row} checkpoint failure(s) in a row, {tolerable} "
                f"tolerated (execution.checkpointing.tolerable-failed-checkpoints); the "
                f"last: checkpoint {checkpoint_id}: {reason}")
        return Aborted(checkpoint_id, reason, counted=True)

    def failed_over(self) -> None:
        """The job fails over for `must_fail_over`: it is cleared. Failures in a row go
        on counting until a checkpoint completes (one more fails the job over again)."""
        self.must_fail_over = None
