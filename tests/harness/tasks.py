"""Tasks that run as the test says, on the loop: no thread, no user code. What a task
does is not what the control-plane tests are about; when it finishes or fails is, and
the test decides that exactly."""

from __future__ import annotations

from typing import Callable

from flinkyarn.metrics import TaskIO
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.gateways.task_executor import TaskDeploymentDescriptor
from flinkyarn.checkpoints import TaskStateSnapshot
from taskexecutor.task import CheckpointConfirmed, CheckpointResponder, TaskFailure

Report = Callable[["ScriptedTask", TaskState, "TaskFailure | None"], None]


class ScriptedTask:
    """What a TaskExecutor uses of taskexecutor.task.Task. Started, it reports
    INITIALIZING and RUNNING; then FINISHED on `finish()`, FAILED on `fail(...)`, or
    CANCELED when cancelled, whichever comes first. Its deployment's invokable is never
    unpickled."""

    def __init__(self, deployment: TaskDeploymentDescriptor, report: Report,
                 _environment: object = None, _locate: object = None, _output: object = None,
                 checkpoints: CheckpointResponder | None = None) -> None:
        self.deployment = deployment
        self.attempt_id = deployment.attempt_id
        self.io = TaskIO()  # counts nothing: it has no data
        self.name = (f"{deployment.vertex_name} ({deployment.subtask_index + 1}/"
                     f"{deployment.parallelism}) #{deployment.attempt_number}")
        self.state: TaskState | None = None
        self.lost = False  # it died with its process: it reports nothing any more
        self._report = report
        self.controls: list[object] = []  # checkpoint triggers and confirmations posted
        self.checkpoints = checkpoints
        self.confirmed = -1  # the newest confirmation taken (take_confirmations)

    @property
    def vertex_name(self) -> str:
        return self.deployment.vertex_name

    @property
    def resource_id(self) -> str:
        return self.deployment.resource_id

    def start(self) -> None:
        self._to(TaskState.INITIALIZING)
        self._to(TaskState.RUNNING)

    def post_control(self, control: object) -> None:
        self.controls.append(control)

    def acknowledge(self, checkpoint_id: int) -> None:
        """Its part of the checkpoint is written (no state)."""
        assert self.checkpoints is not None
        self.checkpoints.acknowledge(checkpoint_id, TaskStateSnapshot())

    def take_confirmations(self) -> None:
        """Its operators take the confirmations posted so far (as a StreamTask's thread
        does between two batches)."""
        self.confirmed = max([self.confirmed] + [c.checkpoint_id for c in self.controls
                                                 if isinstance(c, CheckpointConfirmed)])

    def cancel(self) -> None:
        if self.is_alive():
            self._to(TaskState.CANCELED)

    def finish(self) -> None:
        self._end(TaskState.FINISHED)

    def fail(self, message: str) -> None:
        self._end(TaskState.FAILED, TaskFailure.of(RuntimeError(message), task=self.name))

    def is_alive(self) -> bool:
        return not self.lost and self.state in (TaskState.INITIALIZING, TaskState.RUNNING)

    def die_with_its_process(self) -> None:
        self.lost = True

    def where(self, frames: int = 8) -> str:
        return "(a scripted task: wherever the test has it)"

    def _end(self, state: TaskState, failure: TaskFailure | None = None) -> None:
        if not self.is_alive():
            raise AssertionError(f"{self.name} is {self.state}: it cannot end {state.value}")
        self._to(state, failure)

    def _to(self, state: TaskState, failure: TaskFailure | None = None) -> None:
        if self.lost:
            return
        self.state = state
        self._report(self, state, failure)

    def __repr__(self) -> str:
        return f"<ScriptedTask {self.name} on {self.resource_id}: {self.state}>"


class ScriptedTasks:
    """Every ScriptedTask the TaskExecutors of a cluster made, in order; a TaskExecutor's
    `task_factory`."""

    def __init__(self) -> None:
        self.all: list[ScriptedTask] = []

    def __call__(self, deployment: TaskDeploymentDescriptor, report: Report,
                 *rest: object) -> ScriptedTask:
        task = ScriptedTask(deployment, report, *rest)
        self.all.append(task)
        return task

    def running(self, vertex_name: str | None = None) -> list[ScriptedTask]:
        return [t for t in self.all if t.state is TaskState.RUNNING and not t.lost
                and (vertex_name is None or t.vertex_name == vertex_name)]

    def of(self, vertex_name: str) -> list[ScriptedTask]:
        return [t for t in self.all if t.vertex_name == vertex_name]
