"""A Task: one execution attempt of one subtask, run in a thread of its own.

The deployment's invokable is unpickled and run in the task's thread: a pipeline vertex's
StreamTaskSpec (flinkyarn/pipeline/task_spec.py) as this TaskExecutor's StreamTask, any
other invokable (a cloudpickled callable taking a TaskContext) by calling it with the
task's context. The only way back to the TaskExecutor's loop is the `report`
callback, which the TaskExecutor makes thread-safe. Cancellation is cooperative: the
context's `cancelled` event is set and `ctx.sleep` / `ctx.check_cancelled` raise.
"""

from __future__ import annotations

import queue
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, TypeAlias

import cloudpickle

from flinkyarn import options
from flinkyarn.checkpoints import TaskStateSnapshot
from flinkyarn.failures import failure_cause
from flinkyarn.gateways.job_master import FailureKind, OutputChunk, PartitionLocation, TaskState
from flinkyarn.gateways.task_executor import TaskDeploymentDescriptor
from flinkyarn.ids import IntermediateDataSetID, IntermediateResultPartitionID
from flinkyarn.metrics import TaskIO, UncountedTaskIO
from flinkyarn.pipeline.task_spec import StreamTaskSpec
from taskexecutor.network.errors import PartitionFailed, PartitionNotFound

if TYPE_CHECKING:
    from taskexecutor.environment import TaskEnvironment


# Held by a TaskExecutor's threads while they may import a package for the first time:
# a task unpickling its code (which imports the modules it refers to), the SparkSession's
# start (pyspark). Python locks each module while importing it, a submodule before its
# package; two threads importing a package whose modules import each other (pyspark's
# __init__ imports pyspark.sql, which imports pyspark) can take those locks in opposite
# orders, and Python breaks that deadlock by handing one of them the half-initialised
# module: an ImportError naming a "partially initialized module". So one at a time.
IMPORTING = threading.RLock()


class TaskCancelled(Exception):
    """Raised inside a task's thread when the task was asked to stop."""


# Reading an input failed because the producer's data is gone or unreachable: the
# producer must run again. (PartitionReleased reaches a consumer only when its own gate
# was closed, PartitionNotReady never: both are the task's own business.)
_LOST_INPUT = (PartitionNotFound, PartitionFailed)


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """Why a task failed, as its TaskExecutor reports it to the JobMaster: `cause` for
    people (flinkyarn.failures.failure_cause), `kind` and `lost_partitions` for the
    failover, which never reads `cause`."""

    cause: str
    kind: FailureKind = FailureKind.TASK
    lost_partitions: tuple[IntermediateResultPartitionID, ...] = ()

    @classmethod
    def of(cls, error: BaseException, task: str | None = None) -> "TaskFailure":
        """PARTITION when `error`, or an exception it was raised from (`__cause__`,
        as Flink looks for a PartitionException among the causes), is a PartitionNotFound
        or PartitionFailed; the partition it carries, when it does, is lost. Anything
        else is the task's own failure: TASK."""
        cause = failure_cause(error, task=task)
        seen: set[int] = set()
        link: BaseException | None = error
        while link is not None and id(link) not in seen:
            seen.add(id(link))
            if isinstance(link, _LOST_INPUT):
                pid = link.partition_id
                lost = () if pid is None else (
                    IntermediateResultPartitionID(IntermediateDataSetID(pid.result_id),
                                                  pid.partition_number),)
                return cls(cause, FailureKind.PARTITION, lost)
            link = link.__cause__
        return cls(cause)


@dataclass(frozen=True, slots=True)
class TriggerBarrier:
    """The JobMaster triggers checkpoint `checkpoint_id` at this source task."""

    checkpoint_id: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CheckpointConfirmed:
    """Checkpoint `checkpoint_id` completed (every task acknowledged it)."""

    checkpoint_id: int


CheckpointControl: TypeAlias = TriggerBarrier | CheckpointConfirmed


class CheckpointResponder(Protocol):
    """How a task answers its JobMaster about checkpoints (any thread, not blocking)."""

    def acknowledge(self, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        ...

    def decline(self, checkpoint_id: int, reason: str) -> None:
        ...


class TaskContext:
    """What a running subtask knows about itself, and what it may use of its
    TaskExecutor: the environment (data plane, Spark), `locate`, which asks the
    JobMaster where a producer partition is served, and `report_output`, which sends
    it what the task printed (both blocking; any thread)."""

    def __init__(self, deployment: TaskDeploymentDescriptor, cancelled: threading.Event,
                 environment: "TaskEnvironment | None" = None,
                 locate: Callable[[IntermediateDataSetID, int], PartitionLocation] | None = None,
                 report_output: Callable[[list[OutputChunk], str | None, str | None], None]
                 | None = None) -> None:
        self.deployment = deployment
        self.job_id = deployment.job_id
        self.vertex_name = deployment.vertex_name
        self.subtask_index = deployment.subtask_index
        self.parallelism = deployment.parallelism
        self.attempt_number = deployment.attempt_number
        self.task_name = f"{deployment.vertex_name} ({deployment.subtask_index + 1}/{deployment.parallelism})"
        self.environment = environment
        self.locate = locate
        self._report_output = report_output
        self._cancelled = cancelled
        self._cancel_hooks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.checkpoints: CheckpointResponder | None = None
        self._controls: queue.SimpleQueue[CheckpointControl] = queue.SimpleQueue()
        self._wake: Callable[[], None] | None = None
        # The newest checkpoint whose confirmation the task's operators took (its sinks
        # committed what it covers); written by the task thread only.
        self.confirmed = -1
        # What the task counts (a stream task: flinkyarn/metrics.py), unless told not to.
        conf = environment.conf if environment is not None else None
        self.io = TaskIO() if conf is None or conf.get(options.METRICS_TASK_IO) \
            else UncountedTaskIO()

    def post_control(self, control: CheckpointControl) -> None:
        """From the TaskExecutor's loop: a checkpoint trigger or confirmation for the task
        thread, which takes it between two batches (it is woken if it waits for input)."""
        self._controls.put(control)
        with self._lock:
            wake = self._wake
        if wake is not None:
            wake()

    def on_control(self, wake: Callable[[], None]) -> None:
        """`wake` (any thread) makes the task thread look at its controls soon."""
        with self._lock:
            self._wake = wake

    def take_controls(self) -> list[CheckpointControl]:
        """The controls posted since the last call, in order (task thread; after every
        batch, so the usual empty queue costs no exception)."""
        if self._controls.empty():
            return []
        taken = []
        while True:
            try:
                taken.append(self._controls.get_nowait())
            except queue.Empty:
                return taken

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Runs `hook` (from the cancelling thread) when the task is cancelled, e.g. to
        wake the task's thread from a blocking read or write. At once if already cancelled."""
        with self._lock:
            if not self._cancelled.is_set():
                self._cancel_hooks.append(hook)
                return
        hook()

    def _run_cancel_hooks(self) -> None:
        with self._lock:
            hooks, self._cancel_hooks = self._cancel_hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook must not stop the others
                pass

    def report_output(self, chunks: list[OutputChunk], spark_application: str | None = None,
                      spark_tracking_url: str | None = None) -> None:
        """Sends what the task printed to its JobMaster; returns once it has it."""
        if self._report_output is not None:
            self._report_output(chunks, spark_application, spark_tracking_url)

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise TaskCancelled()

    def sleep(self, seconds: float) -> None:
        """Sleeps, but wakes and raises TaskCancelled as soon as the task is cancelled."""
        if self._cancelled.wait(seconds):
            raise TaskCancelled()


def _invoke(invokable: StreamTaskSpec | Callable[[TaskContext], object],
            context: TaskContext) -> None:
    """Runs an unpickled invokable in the calling task thread, to its end."""
    if isinstance(invokable, StreamTaskSpec):
        # Imported here: stream_task imports this module (TaskContext, TaskCancelled).
        from taskexecutor.stream_task import run_stream_task
        run_stream_task(invokable, context)
    else:
        invokable(context)


class Task:
    def __init__(self, deployment: TaskDeploymentDescriptor,
                 report: Callable[["Task", TaskState, TaskFailure | None], None],
                 environment: "TaskEnvironment | None" = None,
                 locate: Callable[[IntermediateDataSetID, int], PartitionLocation] | None = None,
                 report_output: Callable[[list[OutputChunk], str | None, str | None], None]
                 | None = None, checkpoints: CheckpointResponder | None = None) -> None:
        self.deployment = deployment
        self.attempt_id = deployment.attempt_id
        self._report = report
        self._cancelled = threading.Event()
        self.context = TaskContext(deployment, self._cancelled, environment, locate,
                                   report_output)
        self.context.checkpoints = checkpoints
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"{deployment.vertex_name} ({deployment.subtask_index + 1}/"
                 f"{deployment.parallelism}) #{deployment.attempt_number}")

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()
        self.context._run_cancel_hooks()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def post_control(self, control: CheckpointControl) -> None:
        """A checkpoint trigger or confirmation for the task's thread (any thread)."""
        self.context.post_control(control)

    @property
    def confirmed(self) -> int:
        """The newest checkpoint whose confirmation the task's operators took."""
        return self.context.confirmed

    @property
    def name(self) -> str:
        return self._thread.name

    @property
    def io(self) -> TaskIO:
        """What the task counts (flinkyarn/metrics.py)."""
        return self.context.io

    def where(self, frames: int = 8) -> str:
        """The innermost frames of the task's thread: where it is now."""
        ident = self._thread.ident
        frame = sys._current_frames().get(ident) if ident is not None else None
        return "".join(traceback.format_stack(frame)[-frames:]) if frame else "(not running)"

    def _run(self) -> None:
        name = self._thread.name
        self._report(self, TaskState.INITIALIZING, None)
        try:
            with IMPORTING:
                invokable = cloudpickle.loads(self.deployment.invokable)
            context = self.context
            context.check_cancelled()
            self._report(self, TaskState.RUNNING, None)
            try:
                _invoke(invokable, context)
            finally:
                context.io.end()  # its final counts go with its final state
            context.check_cancelled()
        except TaskCancelled:
            self._report(self, TaskState.CANCELED, None)
        except BaseException as error:  # the user's error, reported as the task's failure
            if self._cancelled.is_set():
                self._report(self, TaskState.CANCELED, None)
            else:
                self._report(self, TaskState.FAILED, TaskFailure.of(error, task=name))
        else:
            self._report(self, TaskState.FINISHED, None)
