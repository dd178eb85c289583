"""A Task: one execution attempt of one subtask, run in a thread of its own.

The user's invokable (a cloudpickled callable taking a TaskContext) is unpickled and run
in the task's thread; the only way back to the TaskExecutor's loop is the `report`
callback, which the TaskExecutor makes thread-safe. Cancellation is cooperative: the
context's `cancelled` event is set and `ctx.sleep` / `ctx.check_cancelled` raise.
"""

from __future__ import annotations

import threading
import traceback
from typing import Callable

import cloudpickle

from flinkyarn.gateways.job_master import TaskState
from flinkyarn.gateways.task_executor import TaskDeploymentDescriptor


class TaskCancelled(Exception):
    """Raised inside a task's thread when the task was asked to stop."""


class TaskContext:
    """What a running subtask knows about itself."""

    def __init__(self, deployment: TaskDeploymentDescriptor, cancelled: threading.Event) -> None:
        self.job_id = deployment.job_id
        self.vertex_name = deployment.vertex_name
        self.subtask_index = deployment.subtask_index
        self.parallelism = deployment.parallelism
        self.attempt_number = deployment.attempt_number
        self._cancelled = cancelled

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise TaskCancelled()

    def sleep(self, seconds: float) -> None:
        """Sleeps, but wakes and raises TaskCancelled as soon as the task is cancelled."""
        if self._cancelled.wait(seconds):
            raise TaskCancelled()


class Task:
    def __init__(self, deployment: TaskDeploymentDescriptor,
                 report: Callable[["Task", TaskState, str | None], None]) -> None:
        self.deployment = deployment
        self.attempt_id = deployment.attempt_id
        self._report = report
        self._cancelled = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"{deployment.vertex_name} ({deployment.subtask_index + 1}/"
                 f"{deployment.parallelism}) #{deployment.attempt_number}")

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        name = self._thread.name
        self._report(self, TaskState.INITIALIZING, None)
        try:
            invokable = cloudpickle.loads(self.deployment.invokable)
            context = TaskContext(self.deployment, self._cancelled)
            context.check_cancelled()
            self._report(self, TaskState.RUNNING, None)
            invokable(context)
            context.check_cancelled()
        except TaskCancelled:
            self._report(self, TaskState.CANCELED, None)
        except BaseException as error:  # the user's error, reported as the task's failure
            if self._cancelled.is_set():
                self._report(self, TaskState.CANCELED, None)
            else:
                detail = "".join(traceback.format_exception(error)[-6:])
                self._report(self, TaskState.FAILED,
                             f"{type(error).__name__}: {error} (in task {name})\n{detail}")
        else:
            self._report(self, TaskState.FINISHED, None)
