"""Job executors of the client: submit a JobGraph to a cluster and follow it to its end,
showing progress."""

from __future__ import annotations

import sys
import time
from typing import Callable, Mapping, TextIO

import msgspec

from flinkyarn import options, retry
from flinkyarn.configuration import Configuration
from flinkyarn.environment import JobResult
from flinkyarn.gateways.dispatcher import BlockedView, JobDetails, RestartView
from flinkyarn.jobgraph import JobGraph
from yarn_client.local_cluster import LocalCluster
from yarn_client.rest_client import RestClient

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


def describe(details: JobDetails) -> str:
    parts = []
    for vertex in details.vertices:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(vertex.state_counts.items()))
        parts.append(f"{vertex.name} [{counts}]")
    return f"{details.status}: " + "; ".join(parts)


def describe_restart(restart: RestartView, limit: int | None) -> str:
    """One line: which task failed (or which TaskExecutor was lost), the root cause's
    first line, how many tasks restart, and the attempt against the strategy's limit."""
    cause = (restart.cause.strip().splitlines() or ["unknown cause"])[0]
    attempt = f"attempt {restart.number} of {limit}" if limit else f"attempt {restart.number}"
    if not cause.startswith(restart.failed_task):
        cause = f"{restart.failed_task} failed: {cause}"
    return f"restart ({attempt}): {cause}; {len(restart.restarted)} task(s) restart"


def describe_block(blocked: BlockedView) -> str:
    """One line: which TaskExecutor the job blocked, for how long, and why."""
    until = time.strftime("%H:%M:%S", time.localtime(blocked.until))
    return (f"TaskExecutor {blocked.resource_id} blocked for this job until {until} "
            f"(cluster.resource-blocklist.*): {blocked.cause}")


class OutputPrinter:
    """Writes what the job's tasks print (a PySpark driver's stdout and stderr) to the
    client's own stdout and stderr, unprefixed, in the order it was written."""

    def __init__(self, rest: RestClient, job_id: str, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        self.rest, self.job_id = rest, job_id
        self.stdout, self.stderr = stdout, stderr
        self.after = 0

    def pump(self) -> None:
        while True:
            view = self.rest.output(self.job_id, self.after)
            stdout, stderr = self.stdout or sys.stdout, self.stderr or sys.stderr
            if view.missed:
                print(f"[{view.missed} characters of output were dropped before they could "
                      f"be shown; `flinkyarn logs` has all of it]", file=stderr, flush=True)
            for line in view.lines:
                stream = stderr if line.stream == "stderr" else stdout
                stream.write(line.text)
                stream.flush()
            more = view.next > self.after and view.lines
            self.after = view.next
            if not more:
                return


def follow(rest: RestClient, job_id: str, out: TextIO = sys.stderr, poll: float = 0.2,
           on_change: Callable[[JobDetails], None] | None = None,
           output: OutputPrinter | None = None) -> JobDetails:
    """Polls the job until it is terminal, printing each change of its vertices' states
    and each restart, as it happens, and (with `output`) what its tasks print."""
    last, shown = "", 0  # the number of the last restart printed (the history is capped)
    spark, waiting = None, ""
    blocked_shown: set[str] = set()
    start = time.monotonic()

    def observe() -> JobDetails | None:
        nonlocal last, shown, spark, waiting
        details = rest.job(job_id)
        if output is not None:
            output.pump()
        stamp = f"[{time.monotonic() - start:6.1f} s] job {job_id[:8]}"
        known = (details.spark_application, details.spark_tracking_url)
        if details.spark_application and details.spark_tracking_url and known != spark:
            spark = known
            print(f"{stamp} Spark application {known[0]}: {known[1]}", file=out, flush=True)
        for restart in details.restart_history:
            if restart.number > shown:
                print(f"{stamp} {describe_restart(restart, details.restart_limit)}", file=out,
                      flush=True)
                shown = restart.number
        for blocked in details.blocked:
            if blocked.resource_id not in blocked_shown:
                blocked_shown.add(blocked.resource_id)
                print(f"{stamp} {describe_block(blocked)}", file=out, flush=True)
        if details.waiting != waiting:  # why its slots wait, once they have for a while
            waiting = details.waiting
            if waiting:
                print(f"{stamp} {waiting}", file=out, flush=True)
        line = describe(details)
        if line != last:
            print(f"{stamp} {line}", file=out, flush=True)
            last = line
            if on_change:
                on_change(details)
        return details if details.status in TERMINAL else None

    return retry.poll_until(observe, pauses=retry.Backoff.fixed(poll))


def result_of(details: JobDetails) -> JobResult:
    end = details.end_time or time.time()
    return JobResult(details.job_id, details.status, details.failure_cause,
                     end - details.start_time)


class ClusterExecutor:
    """Submits to a running cluster and waits (attached)."""

    def __init__(self, rest: RestClient, out: TextIO = sys.stderr,
                 job_settings: Mapping[str, str] | None = None) -> None:
        """`job_settings`: job-level options (`-D`) for jobs that do not set them."""
        self.rest = rest
        self.out = out
        self.job_settings = dict(job_settings or {})
        self.submitted: list[str] = []

    def execute(self, graph: JobGraph) -> JobResult:
        if self.job_settings:
            graph = msgspec.structs.replace(
                graph, configuration={**self.job_settings, **graph.configuration})
        job_id = self.rest.submit(graph)
        self.submitted.append(job_id)
        print(f"submitted job {job_id} ({graph.name})", file=self.out, flush=True)
        return result_of(self.follow(job_id))

    def follow(self, job_id: str) -> JobDetails:
        return follow(self.rest, job_id, self.out, output=OutputPrinter(self.rest, job_id))


def check_outputs(graph: JobGraph, resumes: bool) -> None:
    """OutputExistsError for an output that exists, before anything starts (unless the
    job resumes from a checkpoint, which owns its outputs). A graph without outputs (a
    PySpark script's) does not import pyarrow's filesystems: a tenth of a client's start."""
    if graph.outputs and not resumes:
        from flinkyarn.connectors import outputs

        outputs.check(graph.outputs)


class StandaloneLocalExecutor:
    """For plain `python pipeline.py`: a local cluster for each job."""

    def execute(self, graph: JobGraph) -> JobResult:
        check_outputs(graph, options.resumes(graph))  # before a cluster is started
        with LocalCluster(Configuration.load(), start_workers=1) as cluster:
            assert cluster.rest is not None  # started by `with`
            return ClusterExecutor(cluster.rest).execute(graph)
