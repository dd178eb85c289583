"""The Dispatcher: accepts JobGraphs, starts one JobMaster per job, and keeps every
job's status, also after it ended. Several jobs may run at once. Each JobMaster runs on
the cluster's configuration with the job's own fault-tolerance settings on top (a job of
a session may choose its failover and restart strategies); a job whose settings are
wrong is refused and leaves nothing behind.

Isolation: each JobMaster runs under a supervisor (`_supervise`). An unexpected exception
of one JobMaster fails that job alone (FAILED, the error as its cause and root cause);
the Dispatcher, the ResourceManager and every other job go on.

With a job store (flinkyarn/job_store.py: YARN application attempts), every accepted
JobGraph is stored before it is acknowledged and every final result before anyone
waiting for it hears of it; `recover()` takes over what an earlier AppMaster attempt
stored: ended jobs stay listed as they ended, the others run again from the start.

With an archive (flinkyarn/archive.py, Flink's HistoryServerArchivist), every job that
ends is archived with its graph and settings, also before anyone waiting hears of the
end, so that it is there when the application is gone."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

import msgspec
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

from flinkyarn import checkpoints, key_groups, options, retry
from flinkyarn.archive import ArchivedJob, JobArchive
from flinkyarn.clock import Clock
from flinkyarn.configuration import Configuration
from flinkyarn.failures import failure_cause
from flinkyarn.gateways import ACK, Ack
from flinkyarn.gateways.dispatcher import (BlockedView, ClusterOverview, DispatcherGateway,
                                           JobDetails, JobList, JobOutputQuery, JobOutputView,
                                           JobOverview, JobQuery, JobSubmitted, RestartView,
                                           SavepointWritten, SlotView, SubmitJob,
                                           SubtaskView, TaskExecutorView, TokenStatus,
                                           TriggerSavepoint, VertexDetails, VertexInput)
from flinkyarn.ids import ExecutionAttemptID, JobID, JobMasterId
from flinkyarn.job_store import JobStore
from flinkyarn.jobgraph import JobGraph
from flinkyarn.metrics import TaskIOMetrics
from flinkyarn.rpc.endpoint import RpcEndpoint
from flinkyarn.rpc.errors import InvalidRequest, NotFound
from flinkyarn.rpc.service import RpcService
from yarn_am.jobmaster.execution_graph import ExecutionJobVertex, ExecutionState, JobStatus
from yarn_am.jobmaster.checkpoint_handling import Resume
from yarn_am.jobmaster.job_master import JobMaster, JobMasterConfig, JobResult
from yarn_am.jobmaster.job_output import JobOutput
from yarn_am.jobmaster.output_commit import finish_outputs
from yarn_am.jobmaster.scheduler import slots_at_once_from
from yarn_am.resourcemanager.resource_manager import ResourceManager

if TYPE_CHECKING:  # pyarrow only in an AppMaster whose jobs write files
    from flinkyarn.connectors.output_claims import Claims

log = logging.getLogger(__name__)


class UnknownJob(NotFound):
    """No job of that id in this cluster: REST answers 404, gRPC NOT_FOUND."""


@dataclass
class JobRecord:
    """A running job has its JobMaster; an ended one only its final details (the
    JobMaster, its graph and the user's pickled code are dropped)."""

    job_master: JobMaster | None
    output: JobOutput
    result: JobResult | None = None
    final: JobDetails | None = None
    # Set when its JobMaster failed unexpectedly: the root cause its scheduler never saw.
    root_cause: str | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class Dispatcher(RpcEndpoint):
    def __init__(self, rpc: RpcService, resource_manager: ResourceManager,
                 conf: Configuration,
                 token_status: Callable[[], TokenStatus | None] = lambda: None,
                 clock: Clock | None = None, job_store: JobStore | None = None,
                 attempt: int = 1, archive: JobArchive | None = None,
                 application_id: str = "") -> None:
        """`clock`: what the Dispatcher and the JobMasters it starts follow; `attempt`:
        the AppMaster's YARN application attempt (the JobMasters' leader ids name it);
        `archive`: where ended jobs go, under `application_id`."""
        super().__init__(rpc, "dispatcher", DispatcherGateway, clock)
        self._resource_manager = resource_manager
        self._conf = conf
        self._token_status = token_status
        self._store = job_store
        self._attempt = attempt
        self._archive, self._application_id = archive, application_id
        self.metrics_address = ""  # the AppMaster's Prometheus endpoint, once it serves
        JobMasterConfig.from_configuration(conf)  # the cluster's own settings must hold
        self.jobs: dict[JobID, JobRecord] = {}

    async def on_stop(self) -> None:
        for record in self.jobs.values():
            if record.job_master is not None:
                record.job_master.stop()

    async def submit_job(self, request: SubmitJob) -> JobSubmitted:
        try:
            return await self._submit(request.job_graph)
        except InvalidRequest:
            raise
        except ValueError as error:  # the job is refused (the gateway's contract)
            raise InvalidRequest(str(error)) from None

    async def run_own_job(self, graph: JobGraph, again: bool = False) -> JobSubmitted:
        """A per-job application's job. Its graph is a file of the application, there for
        every AppMaster attempt: it is not stored again (an HDFS write before the job
        could start). `again`: an earlier attempt ran it; it goes on from its latest
        completed checkpoint, if it took one. ValueError when it is refused."""
        if again and self._store is not None:
            commits = await self.run_blocking(self._store.commits_started)
            if graph.job_id in commits:
                await self._finish_commit(graph, *commits[graph.job_id])
                return JobSubmitted(graph.job_id)
        if again:
            log.info("job %s (%s) did not end in the previous AppMaster attempt: it runs again",
                     graph.job_id, graph.name)
        return await self._submit(graph, recovered=again, kept=True)

    async def recover(self) -> None:
        """Takes over the jobs an earlier attempt stored: each ended one is listed with its
        final details; each other one runs again from the start (its JobGraph as it was
        accepted). One that cannot run now is recorded FAILED with the reason."""
        if self._store is None:
            return
        results = await self.run_blocking(self._store.results)
        for details in results.values():
            self._add_ended(details)
        pending = [g for g in await self.run_blocking(self._store.graphs)
                   if g.job_id not in results]
        commits = await self.run_blocking(self._store.commits_started) if pending else {}
        for graph in pending:
            if graph.job_id in commits:
                await self._finish_commit(graph, *commits[graph.job_id])
                continue
            log.info("job %s (%s) was running when the previous AppMaster attempt ended: "
                     "it runs again", graph.job_id, graph.name)
            try:
                await self._submit(graph, recovered=True)
            except ValueError as error:
                now = time.time()
                cause = f"the job could not run again in this AppMaster attempt: {error}"
                details = JobDetails(graph.job_id, graph.name, JobStatus.FAILED.value, now, now,
                                     cause, [], root_cause=cause)
                await self.run_blocking(self._store.put_result, details)
                await self._archive_job(details, graph)
                self._add_ended(details)

    async def _finish_commit(self, graph: JobGraph, mark_success: bool,
                             checkpointed: bool) -> None:
        """A job that finished in an earlier attempt, which began committing its outputs
        and ended before its result was stored: this attempt finishes the commit (or,
        failing, puts the outputs back and fails the job) and records the result; the
        job does not run again."""
        assert self._store is not None  # only a stored commit is finished
        log.info("job %s (%s) finished in the previous AppMaster attempt, which began "
                 "committing its outputs: this attempt finishes the commit",
                 graph.job_id, graph.name)
        start = time.time()
        cause: str | None
        try:
            claims = await self._claim_outputs(graph)
        except ValueError as error:
            status, cause = JobStatus.FAILED, str(error)
        else:
            status, cause = await finish_outputs(graph, JobStatus.FINISHED, None,
                                                 self.run_blocking, checkpointed=checkpointed,
                                                 mark_success=mark_success, recovering=True)
            await self._release_claims(claims, graph)
        details = JobDetails(graph.job_id, graph.name, status.value, start, time.time(),
                             cause, [], root_cause=cause)
        await self.run_blocking(self._store.put_result, details)
        await self._forget_commit(graph.job_id)
        await self._archive_job(details, graph)
        self._add_ended(details)

    async def _forget_commit(self, job_id: JobID) -> None:
        assert self._store is not None
        try:
            await self.run_blocking(self._store.forget_commit, job_id)
        except OSError as error:  # its result is stored: a later attempt reads that first
            log.warning("job %s: its record of the output commit cannot be removed from "
                        "%s: %s", job_id, self._store.folder, error)

    def _add_ended(self, details: JobDetails) -> None:
        record = JobRecord(None, JobOutput(), JobResult(
            details.job_id, details.name, JobStatus(details.status), details.failure_cause,
            details.start_time, details.end_time or details.start_time), details)
        record.output.shrink()
        record.ended.set()
        self.jobs[details.job_id] = record

    async def _submit(self, graph: JobGraph, recovered: bool = False,
                      kept: bool = False) -> JobSubmitted:
        """`recovered`: a job an earlier attempt accepted (stored already); a streaming
        one goes on from its latest completed checkpoint, if it took one. `kept`: the
        graph is kept for the next attempt elsewhere; the job store gets none."""
        options.check_job_graph(graph, self._conf)
        if graph.job_id in self.jobs:
            raise ValueError(f"job {graph.job_id} was already submitted")
        config = JobMasterConfig.from_configuration(
            options.job_configuration(self._conf, graph.configuration))
        capacity, bound = await self._resource_manager.slot_capacity()
        # From the graph first: a job far too wide is refused before it costs memory.
        self._check_capacity(graph, slots_at_once_from(graph), capacity, bound)
        savepoint = await self._savepoint_of(graph, config, recovered)
        claims = await self._claim_outputs(graph)
        try:
            job_master = JobMaster(self.rpc, graph, self.rpc.address, config,
                                   on_terminated=self._job_terminated, clock=self._clock,
                                   savepoint=savepoint, attempt=self._attempt, claims=claims,
                                   commit_starts=self._commit_recorder(graph.job_id))
            self._check_capacity(graph, job_master.scheduler.slots_at_once, capacity, bound)
            if self._store is not None and not (recovered or kept):  # accepted: it survives us
                try:
                    await self.run_blocking(self._store.put_graph, graph)
                except OSError as error:
                    raise ValueError(f"job {graph.name!r} cannot be stored in "
                                     f"{self._store.folder}: {error}") from None
            if graph.job_id in self.jobs:  # submitted again while we asked
                raise ValueError(f"job {graph.job_id} was already submitted")
            if self.stopping:  # the AppMaster stops while the graph was stored
                raise ValueError(f"job {graph.name!r} cannot run: the AppMaster is stopping")
        except BaseException:
            await self._release_claims(claims, graph)
            raise
        self.jobs[graph.job_id] = JobRecord(job_master, job_master.output)
        self.spawn(self._supervise(job_master), f"jobmaster-{graph.job_id}")
        log.info("job %s (%s) submitted: %d vertices", graph.job_id, graph.name, len(graph.vertices))
        return JobSubmitted(graph.job_id)

    async def _claim_outputs(self, graph: JobGraph) -> Claims | None:
        """The job's claims on its output folders (output_claims); ValueError naming the
        folder and its holder when another running job holds one."""
        if not graph.outputs:
            return None
        from flinkyarn.connectors import output_claims

        def alive(holder: output_claims.Holder) -> bool:
            return output_claims.holder_alive(holder, self._application_id, self._job_running)
        holder = output_claims.Holder.this_process(graph.job_id, self._application_id)
        try:
            return await self.run_blocking(output_claims.claim_all, graph.outputs, holder, alive)
        except output_claims.OutputBusyError as error:
            raise ValueError(f"job {graph.name!r} cannot run: {error}") from None
        except OSError as error:
            raise ValueError(f"job {graph.name!r} cannot claim its output folders: "
                             f"{error}") from None

    def _commit_recorder(self, job_id: JobID) -> Callable[[bool, bool], Awaitable[None]] | None:
        """What records in the job store that the job's output commit begins (None
        without a store: no later attempt could finish it)."""
        store = self._store
        if store is None:
            return None

        async def record(mark_success: bool, checkpointed: bool) -> None:
            await self.run_blocking(store.put_commit_started, job_id, mark_success, checkpointed)
        return record

    def _job_running(self, job_id: str) -> bool:
        record = self.jobs.get(JobID(job_id))
        return record is not None and record.result is None

    async def _release_claims(self, claims: Claims | None, graph: JobGraph) -> None:
        if claims is None:
            return
        try:
            await self.run_blocking(claims.release)
        except Exception as error:  # stale now: the next job breaks it
            log.warning("job %s: releasing the claims on its output folders failed: %s",
                        graph.job_id, error)

    async def _savepoint_of(self, graph: JobGraph, config: JobMasterConfig,
                            recovered: bool = False) -> Resume | None:
        """What the job resumes from (execution.savepoint.path; for a recovered job its
        latest completed checkpoint, if any); ValueError (the submission is refused)
        when it cannot."""
        path = config.checkpoint.restore_path
        if recovered and config.checkpoint.enabled:
            latest = await self.run_blocking(checkpoints.latest_completed, checkpoints.job_directory(
                config.checkpoint.directory, graph.job_id))
            if latest is not None:
                log.info("job %s goes on from its checkpoint %s", graph.job_id, latest)
                path = latest
        if not path:
            return None
        if not config.checkpoint.enabled:
            raise ValueError(f"job {graph.name!r} resumes from {path} but takes no "
                             f"checkpoints: set execution.checkpointing.interval")
        metadata = await self.run_blocking(checkpoints.read_metadata, path)
        vertices = [(str(v.id), v.parallelism, [op.uid for op in v.operators])
                    for v in graph.vertices]
        try:
            most = key_groups.resolve_max_parallelism(
                config.max_parallelism, (v.parallelism for v in graph.vertices),
                metadata.max_parallelism)
            restores = checkpoints.restores_from(metadata, vertices,
                                                 config.checkpoint.allow_non_restored_state)
        except ValueError as error:
            raise ValueError(f"job {graph.name!r} cannot resume from {path}: {error}") from None
        return Resume(metadata.checkpoint_id, restores, most)

    @staticmethod
    def _check_capacity(graph: JobGraph, needed: int, capacity: int, bound: str) -> None:
        if needed > capacity:
            raise ValueError(f"job {graph.name!r} needs {needed} slots at once (its largest "
                             f"pipelined region), more than this cluster can ever offer: "
                             f"{capacity} ({bound})")

    async def _supervise(self, job_master: JobMaster) -> None:
        """Runs one JobMaster (a task of the Dispatcher's group) so that what goes wrong in
        it stays in its job. When its run() raises, its endpoint has already stopped (its
        gateway unregistered, its tasks cancelled); the job is recorded FAILED with the
        error as cause and root cause, the error is logged once with its traceback, and
        the JobMaster tells its TaskExecutors and the ResourceManager that it is gone
        (JobMaster.abandon; whoever it cannot reach frees the job's slots at its
        heartbeat timeout). Returns normally then: nothing reaches the Dispatcher's task
        group. Cancellation (the Dispatcher stopping) passes through."""
        try:
            await job_master.run()
        except Exception as error:  # not CancelledError: a BaseException
            cause = self._job_master_failed(job_master, error)
            await self._release_claims(job_master.claims, job_master.job_graph)
            try:
                await job_master.abandon(cause.split("\n", 1)[0])
            except Exception:  # its state may be what broke: the heartbeats clean up
                log.exception("job %s: telling its peers that its JobMaster is gone failed",
                              job_master.job_id)

    def _job_master_failed(self, job_master: JobMaster, error: Exception) -> str:
        """Records the FAILED result of the job whose JobMaster raised `error`; returns
        the failure cause (the error's type, message and where it was raised)."""
        origin: BaseException = error
        # A task group wraps what its tasks raised; the first one is what went wrong.
        while isinstance(origin, BaseExceptionGroup) and origin.exceptions:
            origin = origin.exceptions[0]
        cause = f"the JobMaster failed unexpectedly: {failure_cause(origin)}"
        log.error("job %s (%s): its JobMaster failed unexpectedly; the job fails, the session "
                  "goes on", job_master.job_id, job_master.job_graph.name, exc_info=error)
        record = self.jobs.get(job_master.job_id)
        if record is None or record.result is not None:
            return cause  # its result was out before it failed: that result stands
        record.root_cause = cause
        self._job_terminated(JobResult(job_master.job_id, job_master.job_graph.name,
                                       JobStatus.FAILED, cause, job_master.start_time,
                                       job_master.end_time or time.time()))
        return cause

    def _job_terminated(self, result: JobResult) -> None:
        record = self.jobs[result.job_id]
        record.result = result
        assert record.job_master is not None  # dropped here only
        graph = record.job_master.job_graph
        commit_recorded = record.job_master.commit_recorded
        try:
            record.final = self._details(record)
        except Exception:
            if record.root_cause is None:
                raise
            # The JobMaster that failed left its scheduler unreadable: its vertices are
            # lost, its result is not.
            log.exception("job %s: its vertices cannot be read", result.job_id)
            record.final = JobDetails(result.job_id, result.name, result.status.value,
                                      result.start_time, result.end_time, result.failure_cause,
                                      [], root_cause=record.root_cause)
        record.job_master = None
        record.output.shrink()
        if self._store is None and self._archive is None:
            record.ended.set()
        else:  # whoever waits for the result hears of it once it is stored and archived
            try:
                self.spawn(self._store_result(record, graph, commit_recorded),
                           f"store-result-{result.job_id}")
            except RuntimeError:  # the Dispatcher stops: nobody is left to wait
                record.ended.set()

    async def _store_result(self, record: JobRecord, graph: JobGraph,
                            commit_recorded: bool = False) -> None:
        assert record.final is not None  # set before
        try:
            if self._store is not None:
                try:
                    await self.run_blocking(self._store.put_result, record.final)
                except OSError as error:  # the next attempt would run the job again: say so
                    log.error("job %s: its result cannot be stored in %s (a later AppMaster "
                              "attempt would run it again): %s", record.final.job_id,
                              self._store.folder, error)
                else:
                    if commit_recorded:
                        await self._forget_commit(record.final.job_id)
            await self._archive_job(record.final, graph)
        finally:
            record.ended.set()

    async def _archive_job(self, details: JobDetails, graph: JobGraph) -> None:
        if self._archive is None:
            return
        try:
            await self.run_blocking(self._archive.put_job,
                                    ArchivedJob.of(self._application_id, details, graph))
        except OSError as error:  # the job's end stands; its history is what is lost
            log.error("job %s: cannot archive it in %s (it will be missing from the "
                      "history): %s", details.job_id, self._archive.folder, error)

    def job_leader_id(self, job_id: JobID) -> JobMasterId | None:
        """The JobMasterId of the job's running JobMaster (None once the job ended, or
        for a job not known): the ResourceManager registers no other (Flink's
        JobLeaderIdService)."""
        record = self.jobs.get(job_id)
        return record.job_master.job_master_id if record and record.job_master else None

    async def wait_for_result(self, job_id: JobID) -> JobResult:
        """Returns once the job has ended (at once if it has)."""
        record = self._record(job_id)
        await record.ended.wait()
        assert record.result is not None  # set before `ended`
        return record.result

    def _record(self, job_id: JobID) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise UnknownJob(f"no job {job_id} in this cluster")
        return record

    async def cancel_job(self, request: JobQuery) -> Ack:
        record = self._record(request.job_id)
        if record.job_master is not None:
            record.job_master.cancel()
        return ACK

    async def trigger_savepoint(self, request: TriggerSavepoint) -> SavepointWritten:
        record = self._record(request.job_id)
        if record.job_master is None:
            raise InvalidRequest(f"job {request.job_id} has ended: no savepoint")
        try:
            location = await record.job_master.trigger_savepoint(request.target_directory,
                                                                 request.stop)
        except (ValueError, RuntimeError) as error:
            raise InvalidRequest(str(error)) from None
        return SavepointWritten(request.job_id, location)

    async def list_jobs(self, request: Ack) -> JobList:
        return JobList([self._overview(record) for record in self.jobs.values()])

    def _overview(self, record: JobRecord) -> JobOverview:
        if record.result is not None:
            r = record.result
            return JobOverview(r.job_id, r.name, r.status.value, r.start_time, r.end_time)
        jm = record.job_master
        assert jm is not None  # a job without its result still has its JobMaster
        return JobOverview(jm.job_id, jm.job_graph.name, jm.status.value, jm.start_time, None)

    async def job_details(self, request: JobQuery) -> JobDetails:
        return await self.job_details_of(request.job_id)

    async def job_details_of(self, job_id: JobID) -> JobDetails:
        record = self._record(job_id)
        if record.final is not None:
            return msgspec.structs.replace(record.final, output_tail=record.output.tail())
        return self._details(record)

    async def job_output(self, request: JobOutputQuery) -> JobOutputView:
        return self._record(request.job_id).output.read(request.after, time.monotonic())

    async def output_read(self, job_id: JobID, timeout: float, idle: float = 5.0) -> None:
        """Waits (at most `timeout` s) until a reader that follows the job's output has
        read all of it; returns at once when nobody has read it in the last `idle` s
        (a detached submit): so a per-job application does not end under its client."""
        output = self._record(job_id).output

        def read() -> bool:
            return (output.last_read is None or time.monotonic() - output.last_read > idle
                    or output.read_up_to >= output.next_seq)

        with contextlib.suppress(retry.GaveUp):
            await retry.poll_until_async(read, bool, pauses=retry.Backoff.fixed(0.05),
                                         deadline=retry.Deadline(timeout))

    def _details(self, record: JobRecord) -> JobDetails:
        overview = self._overview(record)
        job_master = record.job_master
        assert job_master is not None  # dropped only once the final details are made
        scheduler = job_master.scheduler
        graph = scheduler.execution_graph
        # Execution and restart times are the scheduler's monotonic seconds: shown as
        # wall time.
        offset = time.time() - time.monotonic()
        inputs: dict[str, list[VertexInput]] = {}
        for edge in graph.job_graph.edges:
            partitioner = edge.partitioner.value
            if edge.key_columns:
                partitioner += f" ({', '.join(edge.key_columns)})"
            inputs.setdefault(edge.target, []).append(VertexInput(edge.source, partitioner))
        vertices = []
        for v in scheduler.vertex_summaries():
            subtasks = _subtasks(graph.job_vertex(v.vertex_id), offset, job_master.task_metrics)
            measured = [s.metrics for s in subtasks if s.metrics is not None]
            vertices.append(VertexDetails(
                v.vertex_id, v.name, v.parallelism, v.state.value,
                {s.value: n for s, n in v.state_counts.items() if n}, subtasks,
                functools.reduce(TaskIOMetrics.plus, measured) if measured else None,
                inputs.get(v.vertex_id, [])))
        cause = record.result.failure_cause if record.result else scheduler.failure_cause
        history = [RestartView(r.number, r.at + offset, r.cause, r.failed_task,
                               [graph.vertex(evid).task_name for evid in r.restarted])
                   for r in scheduler.restart_records()]
        spark_id, spark_url = job_master.spark_application or (None, None)
        return JobDetails(overview.job_id, overview.name, overview.status, overview.start_time,
                          overview.end_time, cause, vertices, scheduler.restarts,
                          record.root_cause or scheduler.root_cause, history,
                          job_master.config.restart_strategy.attempt_limit,
                          spark_id, spark_url, record.output.tail(),
                          job_master.checkpoint_view(),
                          self._resource_manager.wait_reason(overview.job_id)
                          if record.result is None else "",
                          [BlockedView(b.resource_id, b.until + offset, b.cause)
                           for b in job_master.blocklist.blocked()])

    async def cluster_overview(self, request: Ack) -> ClusterOverview:
        rm = self._resource_manager
        executors = [TaskExecutorView(record.resource_id, record.address,
                                      [SlotView(s.slot_id.slot_number, s.state, s.job_id) for s in slots],
                                      record.metrics_address, *rm.worker_location(record))
                     for record, slots in rm.task_executor_overview()]
        return ClusterOverview(executors, (await self.list_jobs(ACK)).jobs, self._token_status(),
                               self.metrics_address)


def metric_families(jobs: list[JobDetails], overview: ClusterOverview) -> list:
    """The AppMaster's Prometheus families (flinkyarn/prometheus.py): each job's status
    and restarts, each vertex's I/O summed over its subtasks, the TaskExecutors and slots."""
    from prometheus_client.core import GaugeMetricFamily

    from flinkyarn.prometheus import io_families

    running = GaugeMetricFamily("flinkyarn_job_running", "1 while the job runs, else 0",
                                labels=["job_id", "name", "status"])
    restarts = GaugeMetricFamily("flinkyarn_job_restarts", "Restarts of the job so far",
                                 labels=["job_id", "name"])
    for job in jobs:
        running.add_metric([job.job_id, job.name, job.status], 1 if job.end_time is None else 0)
        restarts.add_metric([job.job_id, job.name], job.restarts)
    executors = GaugeMetricFamily("flinkyarn_taskexecutors", "Registered TaskExecutors")
    executors.add_metric([], len(overview.task_executors))
    slots = GaugeMetricFamily("flinkyarn_slots", "Slots of the registered TaskExecutors",
                              labels=["state"])
    counts: dict[str, int] = {}
    for te in overview.task_executors:
        for slot in te.slots:
            counts[slot.state] = counts.get(slot.state, 0) + 1
    for state, count in sorted(counts.items()):
        slots.add_metric([state], count)
    vertices = [([job.job_id, vertex.name], vertex.metrics) for job in jobs
                for vertex in job.vertices if vertex.metrics is not None]
    return [running, restarts, executors, slots,
            *io_families("flinkyarn_vertex", ["job_id", "vertex"], vertices)]


def _subtasks(vertex: ExecutionJobVertex, offset: float,
              metrics: dict[ExecutionAttemptID, TaskIOMetrics]) -> list[SubtaskView]:
    views = []
    for task in vertex.task_vertices:
        execution = task.current_execution
        times = execution.state_timestamps
        started = times.get(ExecutionState.DEPLOYING)
        ended = times.get(execution.state) if execution.state.is_terminal else None
        views.append(SubtaskView(
            task.id.subtask_index, execution.state.value, execution.attempt_number,
            str(execution.slot.resource_id) if execution.slot is not None else None,
            started + offset if started is not None else None,
            ended + offset if ended is not None else None,
            metrics.get(execution.attempt_id), execution.failure_cause))
    return views


def _conforms_to_gateway(endpoint: Dispatcher) -> DispatcherGateway:
    """Never called: the type checker (integration/run-tests) checks here that the
    Dispatcher has every method of its gateway, with compatible types."""
    return endpoint
