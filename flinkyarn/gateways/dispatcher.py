"""DispatcherGateway: jobs in and out of the cluster. The REST API is its front end;
these messages are also the REST API's JSON (clients decode them with validation)."""

from __future__ import annotations

from typing import Protocol

import msgspec

from flinkyarn.gateways import ALL_METHODS, Ack, callable_by
from flinkyarn.ids import JobID
from flinkyarn.jobgraph import JobGraph
from flinkyarn.metrics import TaskIOMetrics


class SubmitJob(msgspec.Struct, frozen=True):
    job_graph: JobGraph


class JobSubmitted(msgspec.Struct, frozen=True):
    job_id: JobID


class JobQuery(msgspec.Struct, frozen=True):
    job_id: JobID


class JobOverview(msgspec.Struct, frozen=True):
    job_id: JobID
    name: str
    status: str           # JobStatus value: CREATED, RUNNING, FINISHED, FAILED, ...
    start_time: float     # seconds since the epoch
    end_time: float | None = None


class JobList(msgspec.Struct, frozen=True):
    jobs: list[JobOverview]


class SubtaskView(msgspec.Struct, frozen=True):
    """A subtask's current (latest) attempt."""

    index: int
    state: str
    attempt: int                       # 0 for the first, one more for each restart
    task_executor: str | None = None   # the resource id of the TaskExecutor it was deployed to
    start_time: float | None = None    # when it was deployed (seconds since the epoch)
    end_time: float | None = None      # when it reached a final state
    metrics: TaskIOMetrics | None = None  # as its TaskExecutor last reported them
    failure_cause: str | None = None   # why this attempt failed


class VertexInput(msgspec.Struct, frozen=True):
    """An edge of the job graph, seen from its consumer."""

    source: str        # the producing vertex's id
    partitioner: str   # how the producer picks a consumer: forward, hash, rebalance, ...


class VertexDetails(msgspec.Struct, frozen=True):
    vertex_id: str
    name: str
    parallelism: int
    state: str
    state_counts: dict[str, int]
    subtasks: list[SubtaskView] = []
    metrics: TaskIOMetrics | None = None  # its subtasks' summed (rates: the busiest's)
    inputs: list[VertexInput] = []


class RestartView(msgspec.Struct, frozen=True):
    """One restart: after which failure, of which task, and which tasks it re-ran."""

    number: int
    time: float           # seconds since the epoch
    cause: str
    failed_task: str
    restarted: list[str]  # task names, "NAME (i/n)"


class BlockedView(msgspec.Struct, frozen=True):
    """A TaskExecutor the job takes no new slots from (its blocklist), until when
    (seconds since the epoch), and why."""

    resource_id: str
    until: float
    cause: str


class CheckpointView(msgspec.Struct, frozen=True):
    """A streaming job's checkpoints (Flink's checkpoint statistics): counts, the last
    completed one (its duration in s, size in bytes and the longest barrier alignment of
    its tasks in s), the last failure, and the checkpoint the latest (re)start restored
    from."""

    triggered: int = 0
    completed: int = 0
    failed: int = 0
    in_progress: int = 0
    last_completed_id: int | None = None
    last_completed_duration: float | None = None
    last_completed_size: int | None = None
    last_failure: str | None = None
    restored_from: int | None = None
    directory: str = ""
    last_completed_alignment: float | None = None

    def summary(self) -> str:
        """One line for people: `flinkyarn list` and the dashboard."""
        parts = [f"checkpoints: {self.completed} completed, {self.failed} failed, "
                 f"{self.in_progress} in progress"]
        if self.last_completed_id is not None:
            parts.append(f"last #{self.last_completed_id} "
                         f"({(self.last_completed_duration or 0) * 1000:.0f} ms, "
                         f"{self.last_completed_size or 0} bytes, aligned in "
                         f"{(self.last_completed_alignment or 0) * 1000:.0f} ms)")
        if self.restored_from is not None:
            parts.append(f"restored from #{self.restored_from}")
        if self.last_failure:
            parts.append(f"last failure: {self.last_failure.splitlines()[0]}")
        return "; ".join(parts)


class TriggerSavepoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A savepoint of a running streaming job into `target_directory` (empty: the job's
    state.savepoints.dir); with `stop`, the job then stops."""

    job_id: JobID
    target_directory: str = ""
    stop: bool = False


class SavepointWritten(msgspec.Struct, frozen=True):
    job_id: JobID
    location: str  # the savepoint's folder


class JobDetails(msgspec.Struct, frozen=True):
    job_id: JobID
    name: str
    status: str
    start_time: float
    end_time: float | None
    failure_cause: str | None
    vertices: list[VertexDetails]
    restarts: int = 0
    root_cause: str | None = None
    restart_history: list[RestartView] = []
    restart_limit: int | None = None  # restarts the job's strategy allows in all, if it says
    spark_application: str | None = None   # a PySpark script's Spark application on YARN
    spark_tracking_url: str | None = None  # ... and its tracking URL through YARN's proxy
    output_tail: str = ""                  # the last lines its tasks printed
    checkpoints: CheckpointView | None = None  # a job that takes checkpoints
    waiting: str = ""  # why its slot requests wait, once they have waited a few seconds
    blocked: list[BlockedView] = []  # TaskExecutors the job takes no new slots from


class OutputLine(msgspec.Struct, frozen=True):
    """A piece of what a task printed (a PySpark driver's stdout or stderr), numbered in
    the order the JobMaster received it."""

    seq: int
    stream: str           # "stdout" or "stderr"
    text: str


class JobOutputQuery(msgspec.Struct, frozen=True):
    job_id: JobID
    after: int = 0        # the first number wanted: 0, then the last answer's `next`


class JobOutputView(msgspec.Struct, frozen=True):
    lines: list[OutputLine]
    next: int             # ask with this next time
    missed: int = 0       # characters dropped (the output's bound) before they were read


class SlotView(msgspec.Struct, frozen=True):
    index: int
    state: str
    job_id: str | None = None


class TaskExecutorView(msgspec.Struct, frozen=True):
    resource_id: str
    address: str
    slots: list[SlotView]
    metrics_address: str = ""  # its Prometheus endpoint, host:port ("": none)
    container_id: str = ""     # its YARN container ("": not on YARN)
    host: str = ""             # the node it runs on
    log_url: str = ""          # its container's logs in the NodeManager's web UI ("": none)


class TokenStatus(msgspec.Struct, frozen=True):
    """What an AppMaster on a Kerberos-secured cluster says of its delegation tokens."""

    renewing: bool              # from a keytab: the application outlives any one token
    expires: float | None       # when the tokens in use expire (seconds since the epoch)
    message: str
    warning: bool = False       # the user must know: the message says what to do


class ClusterOverview(msgspec.Struct, frozen=True):
    task_executors: list[TaskExecutorView]
    jobs: list[JobOverview]
    delegation_tokens: TokenStatus | None = None  # on a secure cluster
    metrics_address: str = ""  # the AppMaster's Prometheus endpoint, host:port


@callable_by(client=ALL_METHODS)
class DispatcherGateway(Protocol):
    async def submit_job(self, request: SubmitJob) -> JobSubmitted:
        """Refused (ValueError) for an invalid JobGraph or a job id already known."""
        ...

    async def list_jobs(self, request: Ack) -> JobList:
        ...

    async def job_details(self, request: JobQuery) -> JobDetails:
        ...

    async def trigger_savepoint(self, request: TriggerSavepoint) -> SavepointWritten:
        """Returns once the savepoint is written; InvalidRequest (nothing changed) when
        the job cannot take one now, or it failed."""
        ...

    async def cancel_job(self, request: JobQuery) -> Ack:
        ...

    async def cluster_overview(self, request: Ack) -> ClusterOverview:
        ...

    async def job_output(self, request: JobOutputQuery) -> JobOutputView:
        ...
