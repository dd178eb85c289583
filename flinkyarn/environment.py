"""Where `execute()` sends a job: the executor the running command installed, or, under
plain `python`, the one registered for that.

The core knows no executor. A command of the client (`flinkyarn run`, `flinkyarn info`)
`install()`s its executor around the program it runs. A program started as plain
`python pipeline.py` has no command around it: `current_executor()` then makes one with
the factory registered as entry point `local` of group `flinkyarn.executors` (setup.cfg
registers the client's StandaloneLocalExecutor, a local cluster started for each job and
stopped after it) -- as Flink's PipelineExecutorServiceLoader finds the executor
factories of its client modules without the core depending on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Protocol

from flinkyarn.jobgraph import JobGraph


@dataclass(frozen=True)
class JobResult:
    job_id: str
    status: str  # FINISHED, FAILED or CANCELED
    failure_cause: str | None
    duration: float

    @property
    def succeeded(self) -> bool:
        return self.status == "FINISHED"


class JobExecutor(Protocol):
    def execute(self, graph: JobGraph) -> JobResult:
        """Runs the job to a terminal state and returns how it ended."""
        ...


EXECUTOR_ENTRY_POINTS = "flinkyarn.executors"
DEFAULT_EXECUTOR = "local"  # the entry point a plain `python` run uses


class NoExecutorError(RuntimeError):
    """`execute()` was called with no executor installed and none registered."""


_executor: JobExecutor | None = None


def install(executor: JobExecutor | None) -> None:
    """Makes `executor` the one `execute()` uses, until the next call (None: none)."""
    global _executor
    _executor = executor


def current_executor() -> JobExecutor:
    """The installed executor; else a new one from the factory registered as entry point
    DEFAULT_EXECUTOR of group EXECUTOR_ENTRY_POINTS; else NoExecutorError."""
    if _executor is not None:
        return _executor
    registered = entry_points(group=EXECUTOR_ENTRY_POINTS, name=DEFAULT_EXECUTOR)
    if not registered:
        raise NoExecutorError(
            "no job executor: run the program with `flinkyarn run PROGRAM ARGS`, or install "
            "flinkyarn (pip install -e .) so that a plain `python PROGRAM` finds the local "
            f"executor it registers as entry point {DEFAULT_EXECUTOR!r} of group "
            f"{EXECUTOR_ENTRY_POINTS!r}")
    factory: Callable[[], JobExecutor] = next(iter(registered)).load()
    return factory()


_RUNTIME_PACKAGES = ("flinkyarn", "yarn_am", "yarn_client", "taskexecutor", "tests")


def pickle_user_code(obj: object) -> bytes:
    """cloudpickles `obj` so that a TaskExecutor can load it without the user's files:
    besides the program itself (`__main__`, always by value), the modules the program
    imported from its own folder travel by value too."""
    import os
    import sys

    import cloudpickle

    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        root = os.path.dirname(os.path.abspath(main_file)) + os.sep
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if (path and os.path.abspath(path).startswith(root)
                    and name.split(".")[0] not in _RUNTIME_PACKAGES
                    and "site-packages" not in path and name != "__main__"):
                cloudpickle.register_pickle_by_value(module)
    data: bytes = cloudpickle.dumps(obj)
    return data
