"""Where `execute()` sends a job: the executor the CLI installed, or, under plain
`python`, a local cluster started for the job and stopped after it."""

from __future__ import annotations

from dataclasses import dataclass
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


_executor: JobExecutor | None = None


def install(executor: JobExecutor | None) -> None:
    global _executor
    _executor = executor


def current_executor() -> JobExecutor:
    if _executor is not None:
        return _executor
    # Imported here: the core package does not depend on the client otherwise.
    from yarn_client.executors import StandaloneLocalExecutor
    return StandaloneLocalExecutor()


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
    return cloudpickle.dumps(obj)
