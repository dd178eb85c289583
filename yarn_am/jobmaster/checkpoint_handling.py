"""The JobMaster's side of checkpoints and savepoints: it carries out what the
CheckpointCoordinator decides. It triggers periodic checkpoints at the source tasks,
expires the late ones, takes acknowledgements and declines, writes a completed
checkpoint's metadata (or a savepoint's folder), deletes discarded checkpoints, tells
the running tasks a checkpoint completed, takes the user's savepoints and stops the job
after one when asked, fails the job over when checkpoint failures pass the tolerable
count, says what a (re)deployed subtask restores from, and deletes the job's
checkpoints at its end unless their retention keeps them.

Contract: the JobMaster creates it in its constructor, before the Scheduler (which asks
restore_for on every deployment). Every method is called on the JobMaster's loop; the
calls it makes go out as tasks of the JobMaster (its spawn), blocking file work through
its run_blocking. It reads the JobMaster's ExecutionGraph and TaskExecutor records, and
hands the Scheduler's commands (stop, fail over) back to it. A job that takes no
checkpoints (checkpointing off, or a batch job) has no coordinator: every method is then
a no-op or refuses, as described on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from flinkyarn import checkpoints
from flinkyarn.checkpoints import (CheckpointMetadata, SubtaskState, TaskRestore,
                                   TaskStateSnapshot)
from flinkyarn.gateways import task_executor as te
from flinkyarn.gateways.dispatcher import CheckpointView
from flinkyarn.ids import ExecutionAttemptID, ExecutionVertexID
from flinkyarn.jobgraph import JobGraph, ResultPartitionType, ScheduleMode
from flinkyarn.options import CheckpointConfig
from flinkyarn.rpc.errors import RpcError
from flinkyarn.rpc.service import with_timeout
from yarn_am.jobmaster.checkpoint_coordinator import (Aborted, CheckpointCoordinator,
                                                       CompletedCheckpoint, NotTriggered,
                                                       Triggered)
from yarn_am.jobmaster.execution_graph import ExecutionState, JobStatus

if TYPE_CHECKING:  # the JobMaster creates this, and imports it
    from yarn_am.jobmaster.job_master import JobMaster, TaskManagerRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """What a job resumes from: a savepoint's (or retained checkpoint's) id, each
    (vertex id, subtask)'s state in it, and its key groups, which the job keeps."""

    checkpoint_id: int
    restores: dict[tuple[str, int], TaskRestore]
    max_parallelism: int


@dataclass
class _SavepointRequest:
    """A savepoint the user waits for: `done` gets its folder; it goes to `target`; with
    `stop`, the job stops once it is written."""

    done: asyncio.Future[str]
    target: str
    stop: bool

    def fail(self, cause: str) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(cause))


def is_streaming(graph: JobGraph) -> bool:
    """Every task runs at once and every exchange is pipelined: checkpoints can be taken."""
    return graph.schedule_mode is ScheduleMode.EAGER and all(
        edge.partition_type is ResultPartitionType.PIPELINED for edge in graph.edges)


class CheckpointHandling:
    def __init__(self, job_master: JobMaster, job_graph: JobGraph, config: CheckpointConfig,
                 savepoint: Resume | None) -> None:
        """`savepoint`: what the job resumes from (its ids go on after it)."""
        self._job_master = job_master
        self.job_id = job_graph.job_id
        self.config = config
        # Checkpoints, for a streaming job that asks for them (every exchange pipelined:
        # barriers do not cross blocking ones, and Flink takes none in batch mode).
        self.coordinator: CheckpointCoordinator[ExecutionVertexID, TaskStateSnapshot] | None = None
        self.directory = ""
        self.restored_from: int | None = None  # the checkpoint the latest deployment started from
        self._savepoint = savepoint
        self._savepoints: dict[int, _SavepointRequest] = {}  # by checkpoint id
        self._completing: set[asyncio.Task] = set()  # checkpoints whose metadata is being written
        self.stopping_after_savepoint = False  # no more checkpoints or savepoints
        if config.enabled:
            if is_streaming(job_graph):
                self.coordinator = CheckpointCoordinator(config, job_graph.name)
                self.directory = checkpoints.job_directory(config.directory, self.job_id)
                if savepoint is not None:
                    self.coordinator.restore_from(savepoint.checkpoint_id)
            else:
                log.warning("job %s: no checkpoints (execution.checkpointing.interval): it "
                            "is a batch job or has blocking exchanges", self.job_id)

    @property
    def enabled(self) -> bool:
        """The job takes checkpoints."""
        return self.coordinator is not None

    def start(self) -> None:
        """The job starts: periodic checkpoints begin (if it takes any)."""
        if self.coordinator is not None:
            self._job_master.spawn(self._take_checkpoints(), "checkpoints")

    def _now(self) -> float:
        return self._job_master._now()

    # ----------------------------------------------------------------- triggering

    async def _take_checkpoints(self) -> None:
        """Triggers a checkpoint whenever one is due (the coordinator says when), and
        aborts those past their timeout; until the job ends."""
        jm = self._job_master
        coordinator = self.coordinator
        assert coordinator is not None  # started only with one
        while not jm._terminating:
            now = self._now()
            await jm._clock.sleep(min(1.0, max(0.01, coordinator.next_trigger_time(now) - now)))
            if jm._terminating:
                return
            now = self._now()
            for aborted in coordinator.expire(now):
                self._checkpoint_aborted(aborted)
            if now >= coordinator.next_trigger_time(now) and not self.stopping_after_savepoint:
                self._trigger_checkpoint(coordinator)

    def _trigger_checkpoint(self, coordinator: CheckpointCoordinator,
                            savepoint: bool = False) -> Triggered | NotTriggered:
        """A checkpoint (or savepoint) of the running tasks, if the coordinator agrees:
        the source tasks are told to put its barrier into their outputs."""
        jm = self._job_master
        vertices = list(jm.scheduler.execution_graph.execution_vertices())
        running = all(v.current_execution.state is ExecutionState.RUNNING for v in vertices)
        sources = [v for v in vertices if not v.consumed_partitions]
        result = coordinator.trigger(self._now(), int(time.time() * 1000),
                                     [v.id for v in sources],
                                     [v.id for v in vertices] if running else None,
                                     savepoint=savepoint)
        if isinstance(result, NotTriggered):
            log.debug("job %s: no checkpoint now: %s", self.job_id, result.reason)
            return result
        for vertex in sources:
            execution = vertex.current_execution
            record = jm.task_managers.get(execution.slot.resource_id) if execution.slot else None
            jm.spawn(self._send_trigger(record, vertex.id, execution.attempt_id,
                                        result.checkpoint_id, result.timestamp),
                     f"trigger-{result.checkpoint_id}-{execution.attempt_id}")
        return result

    async def _send_trigger(self, record: TaskManagerRecord | None, evid: ExecutionVertexID,
                            attempt_id: ExecutionAttemptID, checkpoint_id: int,
                            timestamp: int) -> None:
        try:
            if record is None:
                raise RpcError("its TaskExecutor is not connected")
            await record.gateway.trigger_checkpoint(te.TriggerCheckpoint(
                self._job_master.job_master_id, attempt_id, checkpoint_id, timestamp))
        except RpcError as error:
            # The task ended meanwhile (a bounded source finished) or its TaskExecutor is
            # gone (the failover follows): not a failure of the checkpoint.
            assert self.coordinator is not None
            aborted = self.coordinator.abort(checkpoint_id, f"the trigger did not reach "
                                             f"source task {attempt_id}: {error}")
            if aborted is not None:
                self._checkpoint_aborted(aborted)

    # ------------------------------------------------ acknowledgement, completion

    def _checkpoint_task(self, attempt_id: ExecutionAttemptID) -> ExecutionVertexID | None:
        """The subtask whose current attempt `attempt_id` is (else None: a stale one)."""
        graph = self._job_master.scheduler.execution_graph
        execution = graph.execution(attempt_id)
        if execution is None or not graph.is_current(execution):
            return None
        return execution.vertex_id

    def acknowledge(self, attempt_id: ExecutionAttemptID, checkpoint_id: int,
                    snapshot: TaskStateSnapshot) -> None:
        """A task's state for the checkpoint is written (the call is fenced already)."""
        evid = self._checkpoint_task(attempt_id)
        completed = None
        if evid is not None and self.coordinator is not None:
            if checkpoint_id not in self.coordinator.pending:
                # Late (it expired, or a newer one completed): what it wrote goes.
                self._job_master.spawn(self._discard_checkpoint(checkpoint_id),
                                       f"discard-{checkpoint_id}")
                return
            completed = self.coordinator.acknowledge(checkpoint_id, evid, snapshot, self._now())
        if completed is not None:
            completing = self._job_master.spawn(self._complete_checkpoint(completed),
                                                f"complete-{completed.checkpoint_id}")
            self._completing.add(completing)
            completing.add_done_callback(self._completing.discard)

    def decline(self, attempt_id: ExecutionAttemptID, checkpoint_id: int, reason: str) -> None:
        """A task could not take its snapshot (the call is fenced already)."""
        evid = self._checkpoint_task(attempt_id)
        if evid is not None and self.coordinator is not None:
            aborted = self.coordinator.decline(checkpoint_id, evid, reason, self._now())
            if aborted is not None:
                self._checkpoint_aborted(aborted)

    async def _complete_checkpoint(self, completed: CompletedCheckpoint) -> None:
        """Every task acknowledged: the metadata is written (then the checkpoint is the
        one to restore from), older ones deleted, the tasks told."""
        jm = self._job_master
        coordinator = self.coordinator
        assert coordinator is not None
        graph = jm.scheduler.execution_graph
        metadata = CheckpointMetadata(self.job_id, completed.checkpoint_id, completed.timestamp, [
            SubtaskState(evid.vertex_id, evid.subtask_index, snapshot,
                         graph.job_vertex(evid.vertex_id).parallelism)
            for evid, snapshot in completed.snapshots.items()], jm.max_parallelism)
        if completed.savepoint:
            await self._complete_savepoint(completed, metadata)
            return
        try:
            await jm.run_blocking(checkpoints.write_metadata, self.directory, metadata)
        except Exception as error:
            self._checkpoint_aborted(coordinator.completed_not_written(
                completed, f"{type(error).__name__}: {error}", self._now()))
            return
        size = sum(snapshot.size for snapshot in completed.snapshots.values())
        log.info("job %s: checkpoint %d completed in %.2f s (%d bytes)", self.job_id,
                 completed.checkpoint_id, completed.duration, size)
        alignment = max((s.alignment for s in completed.snapshots.values()), default=0.0)
        for old in coordinator.completed_written(completed, size, self._now(), alignment):
            await self._discard_checkpoint(old.checkpoint_id)
        if not jm._terminating:
            self._confirm(completed.checkpoint_id)

    def _running_tasks(self) -> Iterator[tuple[ExecutionAttemptID, TaskManagerRecord]]:
        """Each running task's attempt, with the record of its TaskExecutor."""
        jm = self._job_master
        for vertex in jm.scheduler.execution_graph.execution_vertices():
            execution = vertex.current_execution
            record = jm.task_managers.get(execution.slot.resource_id) if execution.slot else None
            if record is not None and execution.state is ExecutionState.RUNNING:
                yield execution.attempt_id, record

    def _confirm(self, checkpoint_id: int) -> None:
        """Tells every running task that the checkpoint completed (its sinks commit)."""
        jm = self._job_master
        for attempt_id, record in self._running_tasks():
            jm.spawn(jm._quietly(record.gateway.confirm_checkpoint(te.ConfirmCheckpoint(
                jm.job_master_id, attempt_id, checkpoint_id))),
                f"confirm-{checkpoint_id}-{attempt_id}")

    async def _confirm_and_wait(self, checkpoint_id: int) -> None:
        """Tells every running task that the checkpoint completed, and waits until each
        took it (or ended), for at most the checkpoint timeout: a task that takes longer
        is cancelled all the same, and what its sinks had not committed is committed by
        a job that resumes from the checkpoint. Returns at once if the job ends
        meanwhile (a lost TaskExecutor's call could take the whole timeout)."""
        jm = self._job_master
        timeout = self.config.timeout
        confirmed: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(
            jm._quietly(with_timeout(record.gateway, timeout).confirm_checkpoint(
                te.ConfirmCheckpoint(jm.job_master_id, attempt_id, checkpoint_id, wait=True)))
            for attempt_id, record in self._running_tasks())))
        ended: asyncio.Future[Any] = asyncio.ensure_future(jm._terminated.wait())
        try:
            await asyncio.wait({confirmed, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            confirmed.cancel()
            ended.cancel()

    # ----------------------------------------------------------------- savepoints

    async def trigger_savepoint(self, target: str, stop: bool) -> str:
        """Takes a savepoint into the folder `target` (empty: state.savepoints.dir) and
        returns its folder once written; with `stop`, the job then stops (FINISHED, as
        Flink's stop-with-savepoint). ValueError (nothing changed) when the job takes
        no checkpoints or not all of its tasks run; RuntimeError when it failed."""
        jm = self._job_master
        coordinator = self.coordinator
        if coordinator is None:
            raise ValueError(f"job {self.job_id} takes no checkpoints (a streaming job with "
                             f"execution.checkpointing.interval takes savepoints)")
        if jm._terminating or jm.status is not JobStatus.RUNNING:
            raise ValueError(f"job {self.job_id} is {jm.status.value}: no savepoint")
        if self.stopping_after_savepoint:
            raise ValueError(f"job {self.job_id} is stopping after a savepoint: no other")
        result = self._trigger_checkpoint(coordinator, savepoint=True)
        if isinstance(result, NotTriggered):
            raise ValueError(f"job {self.job_id}: no savepoint now: {result.reason}")
        # The triggers are on their way: nothing of them runs before this returns.
        request = _SavepointRequest(asyncio.get_running_loop().create_future(),
                                    target or self.config.savepoint_directory, stop)
        self._savepoints[result.checkpoint_id] = request
        log.info("job %s: savepoint %d triggered%s", self.job_id, result.checkpoint_id,
                 " (the job stops after it)" if stop else "")
        return await request.done

    async def _complete_savepoint(self, completed: CompletedCheckpoint,
                                  metadata: CheckpointMetadata) -> None:
        jm = self._job_master
        request = self._savepoints.pop(completed.checkpoint_id, None)
        try:
            folder = await jm.run_blocking(checkpoints.write_savepoint, self.directory,
                                           metadata, request.target if request else "")
        except Exception as error:
            log.warning("job %s: savepoint %d could not be written: %s", self.job_id,
                        completed.checkpoint_id, error)
            if request is not None:
                request.fail(f"the savepoint could not be written: "
                             f"{type(error).__name__}: {error}")
            return
        log.info("job %s: savepoint %d written to %s", self.job_id, completed.checkpoint_id, folder)
        if not jm._terminating and request is not None and request.stop:
            # As Flink's stop-with-savepoint: no checkpoint after it, and the tasks end
            # only once their sinks committed what the savepoint covers.
            self.stopping_after_savepoint = True
            await self._confirm_and_wait(completed.checkpoint_id)
            if not jm._terminating:
                log.info("job %s stops after its savepoint", self.job_id)
                jm._run_scheduler(jm.scheduler.stop(self._now()))
        elif not jm._terminating:
            self._confirm(completed.checkpoint_id)
        if request is not None and not request.done.done():
            request.done.set_result(folder)

    # ------------------------------------------------------------------- failures

    def _checkpoint_aborted(self, aborted: Aborted) -> None:
        jm = self._job_master
        log.log(logging.WARNING if aborted.counted else logging.INFO,
                "job %s: checkpoint %d aborted: %s", self.job_id, aborted.checkpoint_id,
                aborted.reason)
        request = self._savepoints.pop(aborted.checkpoint_id, None)
        if request is not None:
            request.fail(f"the savepoint was aborted: {aborted.reason}")
        jm.spawn(self._discard_checkpoint(aborted.checkpoint_id), f"discard-{aborted.checkpoint_id}")
        coordinator = self.coordinator
        if coordinator is not None and coordinator.must_fail_over is not None:
            cause = coordinator.must_fail_over
            coordinator.failed_over()
            jm._run_scheduler(jm.scheduler.fail_over_all(cause, self._now()))

    def abort_pending(self, reason: str) -> None:
        """The job fails over or ends: the checkpoints in progress are aborted."""
        if self.coordinator is not None:
            for aborted in self.coordinator.abort_pending(reason):
                self._checkpoint_aborted(aborted)

    async def _discard_checkpoint(self, checkpoint_id: int) -> None:
        try:
            await self._job_master.run_blocking(checkpoints.discard, self.directory,
                                                checkpoint_id)
        except Exception as error:  # what is left is never read: no metadata
            log.warning("job %s: could not delete checkpoint %d: %s", self.job_id,
                        checkpoint_id, error)

    # ------------------------------------------------------------ restore and end

    def restore_for(self, evid: ExecutionVertexID) -> TaskRestore | None:
        """What a subtask deployed now starts from: its state in the latest completed
        checkpoint, else in the savepoint the job resumed from, if any."""
        latest = self.coordinator.latest() if self.coordinator is not None else None
        if latest is None:
            if self._savepoint is None:
                return None
            self.restored_from = self._savepoint.checkpoint_id
            return self._savepoint.restores.get((evid.vertex_id, evid.subtask_index))
        self.restored_from = latest.checkpoint_id
        snapshot = latest.snapshots.get(evid)
        return TaskRestore(latest.checkpoint_id, snapshot) if snapshot is not None else None

    async def end(self, status: JobStatus) -> None:
        """The job ended (`status`): once the checkpoints being completed are, its
        checkpoints are deleted, unless execution.checkpointing.externalized-checkpoint-
        retention keeps them for this end. Nothing for a job that takes none."""
        if self.coordinator is None:
            return
        await asyncio.gather(*self._completing, return_exceptions=True)
        retention = self.config.retention
        if (status is JobStatus.FAILED and retention != "NO_EXTERNALIZED_CHECKPOINTS") or (
                status is JobStatus.CANCELED and retention == "RETAIN_ON_CANCELLATION"):
            log.info("job %s: its checkpoints are kept in %s", self.job_id, self.directory)
            return
        try:
            await self._job_master.run_blocking(checkpoints.discard_job, self.directory)
        except Exception as error:
            log.warning("job %s: could not delete its checkpoints in %s: %s", self.job_id,
                        self.directory, error)

    def view(self) -> CheckpointView | None:
        """The job's checkpoint statistics for the REST API (None: it takes none)."""
        coordinator = self.coordinator
        if coordinator is None:
            return None
        stats = coordinator.stats
        return CheckpointView(stats.triggered, stats.completed, stats.failed,
                              len(coordinator.pending), stats.last_completed_id,
                              stats.last_completed_duration, stats.last_completed_size,
                              stats.last_failure, self.restored_from, self.directory,
                              stats.last_completed_alignment)
