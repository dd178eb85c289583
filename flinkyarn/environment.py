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
