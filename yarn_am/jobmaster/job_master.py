"""The JobMaster endpoint: runs one job. The decisions are the Scheduler's (over the
ExecutionGraph) and the SlotPool's; this endpoint carries their commands out over RPC
and feeds them the answers.

Connections and heartbeats (seed articles):
- registers at the ResourceManager, retrying; the ResourceManager heartbeats it. On a
  ResourceManager timeout the SlotPool is disconnected (pending requests are resent
  on reconnection) and registration starts again.
- TaskExecutors register here when the ResourceManager gives them a slot of this job;
  the JobMaster heartbeats each. On a TaskExecutor timeout (or heartbeat.rpc-failure-
  threshold calls in a row that cannot reach it, or the ResourceManager reporting its
  process or container ended) its slots are released from the SlotPool, and the tasks in
  them fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator

from flinkyarn import checkpoints, key_groups, options, retry
from flinkyarn.clock import Clock
from flinkyarn.configuration import Configuration
from flinkyarn.gateways import ACK, Ack, HeartbeatRequest
from flinkyarn.gateways.dispatcher import CheckpointView
from flinkyarn.gateways.job_master import (AcceptedSlots, AcknowledgeCheckpoint,
                                           DeclineCheckpoint, DisconnectTaskManager,
                                           FailureKind, JobMasterGateway, OfferSlots,
                                           PartitionLocation, PartitionLocationState,
                                           RegisterTaskManager, ReportTaskOutput,
                                           RequestPartitionLocation,
                                           SlotRequestFailed as SlotRequestFailedCall,
                                           TaskManagerRegistration, TaskState,
                                           UpdateTaskExecutionState, job_master_endpoint)
from flinkyarn.gateways.resource_manager import (BlockTaskExecutors,
                                                 CancelSlotRequest as CancelSlotRequestCall,
                                                 DisconnectJobMaster, RegisterJobMaster,
                                                 RequestSlot as RequestSlotCall,
                                                 ResourceManagerGateway)
from flinkyarn.gateways import task_executor as te
from flinkyarn.heartbeat import HeartbeatManager
from flinkyarn.metrics import TaskIOMetrics
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, InstanceID,
                           JobID, JobMasterId, ResourceID, ResourceManagerId, leader_id,
                           new_id)
from flinkyarn.jobgraph import JobGraph
from flinkyarn import registration as registration_retry
from flinkyarn.options import (CheckpointConfig, HeartbeatConfig, RegistrationConfig,
                               RestartStrategyConfig)
from flinkyarn.rpc.endpoint import RpcEndpoint, check_fencing
from flinkyarn.rpc.errors import InvalidRequest, NotFound, RemoteError, RpcError, Unreachable
from flinkyarn.rpc.service import RpcService
from yarn_am.jobmaster import failover_strategy
from yarn_am.jobmaster.blocklist import Blocklist, BlockedTaskExecutor, BlocklistConfig
from yarn_am.jobmaster.checkpoint_handling import CheckpointHandling, Resume
from yarn_am.jobmaster import scheduler as sch
from yarn_am.jobmaster import slot_pool as sp
from yarn_am.jobmaster.job_output import JobOutput
from yarn_am.jobmaster.output_commit import STATUS_WHILE_FINISHING, finish_outputs
from yarn_am.jobmaster.execution_graph import ExecutionGraph, ExecutionState, JobStatus, SlotInfo
from yarn_am.jobmaster import restart_strategy
from yarn_am.jobmaster.scheduler import Scheduler
from yarn_am.jobmaster.slot_pool import SlotPool, SlotRequestId

if TYPE_CHECKING:  # pyarrow only in an AppMaster whose jobs write files
    from flinkyarn.connectors.output_claims import Claims

log = logging.getLogger(__name__)


SLOT_REQUESTS_IN_FLIGHT = 32
# Seconds the JobMaster keeps asking YARN to kill the Spark application of a driver lost
# with its TaskExecutor; the job's end waits for it.
SPARK_APPLICATION_KILL_TIMEOUT = 30.0


@dataclass(frozen=True)
class JobMasterConfig:
    heartbeat: HeartbeatConfig
    registration: RegistrationConfig
    slot_idle_timeout: float
    slot_request_timeout: float
    failover_strategy: str
    restart_strategy: RestartStrategyConfig
    checkpoint: CheckpointConfig = CheckpointConfig()
    max_parallelism: int = -1  # pipeline.max-parallelism as set (-1: not)
    blocklist: BlocklistConfig = BlocklistConfig()
    mark_success: bool = True  # a finished job's outputs get _SUCCESS

    @classmethod
    def from_configuration(cls, conf: Configuration) -> "JobMasterConfig":
        checkpoint = CheckpointConfig.from_configuration(conf)
        on_yarn = "SKEIN_APPLICATION_ID" in os.environ  # a YARN container has skein's id
        if not checkpoint.directory:
            checkpoint = dataclasses.replace(
                checkpoint, directory=checkpoints.default_directory(on_yarn))
        if not checkpoint.savepoint_directory:
            checkpoint = dataclasses.replace(
                checkpoint, savepoint_directory=checkpoints.default_savepoint_directory(on_yarn))
        return cls(HeartbeatConfig.from_configuration(conf),
                   RegistrationConfig.from_configuration(conf),
                   conf.get(options.SLOT_IDLE_TIMEOUT), conf.get(options.SLOT_REQUEST_TIMEOUT),
                   conf.get(options.FAILOVER_STRATEGY),
                   RestartStrategyConfig.from_configuration(conf), checkpoint,
                   conf.get(options.PIPELINE_MAX_PARALLELISM),
                   BlocklistConfig.from_configuration(conf),
                   conf.get(options.OUTPUT_MARK_SUCCESS))


@dataclass(frozen=True)
class JobResult:
    job_id: JobID
    name: str
    status: JobStatus
    failure_cause: str | None
    start_time: float
    end_time: float


@dataclass
class TaskManagerRecord:
    resource_id: ResourceID
    address: str
    data_address: str
    gateway: te.TaskExecutorGateway
    registration_id: InstanceID


class JobMaster(RpcEndpoint):
    def __init__(self, rpc: RpcService, job_graph: JobGraph, resource_manager_address: str,
                 config: JobMasterConfig, on_terminated: Callable[[JobResult], None],
                 clock: Clock | None = None,
                 savepoint: Resume | None = None, attempt: int = 1,
                 claims: Claims | None = None,
                 commit_starts: Callable[[bool, bool], Awaitable[None]] | None = None) -> None:
        """`savepoint`: what the job resumes from (the Dispatcher read and checked it);
        `attempt`: the AppMaster's YARN application attempt, which its leader id names;
        `claims`: on its output folders, released once its outputs are final;
        `commit_starts(mark_success, checkpointed)`: records, before a finished job's
        outputs are committed, that the next AppMaster attempt is to finish the commit."""
        super().__init__(rpc, job_master_endpoint(job_graph.job_id), JobMasterGateway, clock)
        self.job_graph = job_graph
        self.job_id = job_graph.job_id
        self.config = config
        self.claims = claims
        self._commit_starts = commit_starts
        self.commit_recorded = False
        self._on_terminated = on_terminated
        self.job_master_id = JobMasterId(leader_id(attempt))
        self.resource_id = ResourceID(f"jobmaster-{self.job_id[:8]}-{self.job_master_id[:8]}")
        self.checkpointing = CheckpointHandling(self, job_graph, config.checkpoint, savepoint)
        # The job's key groups: the hash exchanges route by them, keyed state is cut by them.
        self.max_parallelism = savepoint.max_parallelism if savepoint is not None else \
            key_groups.resolve_max_parallelism(config.max_parallelism,
                                               (v.parallelism for v in job_graph.vertices))
        # Raises ValueError (the submission is refused) if the failover strategy cannot
        # serve this job, e.g. restart-individual for a job with exchanges.
        self.scheduler = Scheduler(ExecutionGraph(job_graph),
                                   failover_strategy.create(config.failover_strategy),
                                   restart_strategy.create(config.restart_strategy),
                                   checkpoint_dir=self.checkpointing.directory,
                                   restore_for=self.checkpointing.restore_for,
                                   max_parallelism=self.max_parallelism)
        self.slot_pool = SlotPool(self.job_id, config.slot_idle_timeout, config.slot_request_timeout)
        self.blocklist = Blocklist(config.blocklist)
        # A wide job's requests go out a few at a time, not as thousands of calls at once.
        self._slot_requests_in_flight = asyncio.Semaphore(SLOT_REQUESTS_IN_FLIGHT)
        # Slot requests still waiting for their turn, by allocation id: withdrawn before
        # it comes (a failed wide job withdraws thousands), one is never sent, and needs
        # no cancel at the ResourceManager either.
        self._waiting_requests: set[AllocationID] = set()
        self._rm: ResourceManagerGateway = rpc.connect(resource_manager_address, "resourcemanager",
                                                       ResourceManagerGateway)
        self.resource_manager_id: ResourceManagerId | None = None
        self._rm_resource_id: ResourceID | None = None
        self.task_managers: dict[ResourceID, TaskManagerRecord] = {}
        timeout = config.heartbeat.timeout
        threshold = config.heartbeat.rpc_failure_threshold
        self._tm_heartbeats: HeartbeatManager = HeartbeatManager(
            self.resource_id, timeout, self._clock, on_timeout=self._task_manager_timed_out,
            payload_for=lambda _rid: te.JobHeartbeatRequest(self.resource_id, self.job_id),
            on_payload=self._task_manager_report,
            rpc_failure_threshold=threshold, on_unreachable=self._task_manager_unreachable)
        self._rm_heartbeats: HeartbeatManager = HeartbeatManager(
            self.resource_id, timeout, self._clock, on_timeout=self._resource_manager_timed_out)
        self.start_time = time.time()
        self.end_time: float | None = None
        self._terminated = asyncio.Event()  # the job reached its end (_terminate)
        # Commands of the Scheduler and the SlotPool not yet carried out, innermost last
        # (_carry_out): one's commands feed the other, and a chain as long as the pending
        # slot requests must not become as deep a recursion.
        self._commands: list[tuple[Callable[[object], None], Iterator]] = []
        # Set while OVERWRITE outputs are committed or discarded, until the result is out.
        self._status_while_finishing: JobStatus | None = None
        self.output = JobOutput()
        self.spark_application: tuple[str, str] | None = None  # (id, tracking URL)
        # The Spark application each script attempt reported: its driver (and, as an
        # unmanaged AM, the application's AM) dies with a lost TaskExecutor, and YARN
        # would keep the application RUNNING until its AM expiry (minutes).
        self._spark_applications: dict[ExecutionAttemptID, str] = {}
        # The kills of such applications under way: the job's end waits for them (a
        # stopped JobMaster cancels its tasks, and with them a kill not yet sent).
        self._spark_application_kills: set[asyncio.Task[None]] = set()
        # Each task attempt's latest I/O metrics (heartbeat answers), its final ones once
        # it ended (with its final state: no later heartbeat answer replaces them).
        self.task_metrics: dict[ExecutionAttemptID, TaskIOMetrics] = {}
        self._final_metrics: set[ExecutionAttemptID] = set()

    # ------------------------------------------------------------------ lifecycle

    async def on_start(self) -> None:
        interval = self.config.heartbeat.interval
        self.every(lambda: interval, lambda: self._tm_heartbeats.send_heartbeats(interval),
                   "heartbeats")
        self.every(lambda: min(interval, 1.0), self._housekeeping, "housekeeping")
        self.spawn(self._connect_to_resource_manager(), "rm-registration")
        self.checkpointing.start()
        log.info("job %s (%s) starting", self.job_id, self.job_graph.name)
        self._run_scheduler(self.scheduler.start(self._now()))

    def _now(self) -> float:
        return self._clock.monotonic()

    def _housekeeping(self) -> None:
        self._tm_heartbeats.check_timeouts()
        self._rm_heartbeats.check_timeouts()
        now = self._now()
        for resource_id in self.blocklist.expire(now):
            log.info("job %s: TaskExecutor %s is no longer blocked", self.job_id, resource_id)
            self._run_pool(self.slot_pool.unblock_task_executor(resource_id))
        self._run_pool(self.slot_pool.check_timeouts(now))

    def cancel(self) -> None:
        """The user cancels the job (called on the loop by the Dispatcher)."""
        self._run_scheduler(self.scheduler.cancel(self._now()))

    @property
    def status(self) -> JobStatus:
        return self._status_while_finishing or self.scheduler.job_status

    # --------------------------------------------------------- ResourceManager

    async def _connect_to_resource_manager(self) -> None:
        """Registers until it succeeds, pausing between attempts as flinkyarn.registration
        says. An attempt has rpc.ask-timeout (the ResourceManager is in this process:
        the doubling attempt timeouts are the TaskExecutors')."""
        def retrying(_attempt: int, error: BaseException, pause: float) -> None:
            log.info("job %s: registering at the ResourceManager failed (%s); retrying "
                     "in %g s", self.job_id, error, pause)

        registration = await retry.retry_async(
            lambda: self._rm.register_job_master(RegisterJobMaster(
                self.job_id, self.job_master_id, self.resource_id, self.rpc.address)),
            retry_on=RpcError,
            pauses=registration_retry.RegistrationAttempts(self.config.registration).pause_after,
            on_retry=retrying, sleep=self._clock.sleep)
        self.resource_manager_id = registration.resource_manager_id
        self._rm_resource_id = registration.resource_manager_resource_id
        self._rm_heartbeats.monitor_target(self._rm_resource_id)
        for blocked in self.blocklist.blocked():  # a new ResourceManager knows none
            self._tell_resource_manager_blocked(blocked)
        self._run_pool(self.slot_pool.connect_resource_manager(self._now()))

    def _resource_manager_timed_out(self, resource_id: ResourceID) -> None:
        log.warning("job %s: ResourceManager heartbeat timed out; reconnecting", self.job_id)
        self.resource_manager_id = None
        self._run_pool(self.slot_pool.disconnect_resource_manager(self._now()))
        if not self._terminating:
            self.spawn(self._connect_to_resource_manager(), "rm-reconnect")

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> Ack:
        self._rm_heartbeats.answer_request(ResourceID(request.sender), None)
        return ACK

    async def slot_request_failed(self, request: SlotRequestFailedCall) -> Ack:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        self._run_pool(self.slot_pool.slot_request_failed(request.allocation_id, request.cause,
                                                          self._now()))
        return ACK

    # ------------------------------------------------------------ TaskExecutors

    async def register_task_manager(self, request: RegisterTaskManager) -> TaskManagerRegistration:
        if request.job_id != self.job_id:
            raise InvalidRequest(f"this is the JobMaster of job {self.job_id}, not "
                                 f"{request.job_id}")
        gateway: te.TaskExecutorGateway = self.rpc.connect(request.address, "taskexecutor",
                                                           te.TaskExecutorGateway)
        # A new handle for every registration: the one it replaces becomes stale.
        if request.resource_id in self.task_managers:
            log.info("job %s: TaskExecutor %s registers again", self.job_id, request.resource_id)
        record = TaskManagerRecord(request.resource_id, request.address, request.data_address,
                                   gateway, InstanceID(new_id()))
        self.task_managers[request.resource_id] = record
        self._tm_heartbeats.monitor_target(
            request.resource_id, lambda heartbeat: gateway.heartbeat_from_job_master(heartbeat))
        self._run_pool(self.slot_pool.register_task_executor(request.resource_id))
        return TaskManagerRegistration(self.job_master_id, self.resource_id,
                                       record.registration_id)

    async def offer_slots(self, request: OfferSlots) -> AcceptedSlots:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        accepted, commands = self.slot_pool.offer_slots(request.resource_id, request.offers,
                                                        self._now())
        self._run_pool(commands)
        return AcceptedSlots(accepted)

    async def update_task_execution_state(self, request: UpdateTaskExecutionState) -> Ack:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        if request.metrics is not None:
            self.task_metrics[request.attempt_id] = request.metrics
            self._final_metrics.add(request.attempt_id)
        if request.state is TaskState.FAILED and request.failure_kind is FailureKind.TASK:
            self._count_task_failure(request.attempt_id, request.error or "")
        self._run_scheduler(self.scheduler.task_state_changed(
            request.attempt_id, ExecutionState(request.state.value), request.error, self._now(),
            failure_kind=request.failure_kind, lost_partitions=request.lost_partitions))
        return ACK

    def _count_task_failure(self, attempt_id: ExecutionAttemptID, cause: str) -> None:
        """A current attempt failed on its own: counted against its TaskExecutor, which
        the job blocks once the blocklist says so."""
        graph = self.scheduler.execution_graph
        execution = graph.execution(attempt_id)
        if execution is None or execution.slot is None or not graph.is_current(execution) \
                or execution.state.is_terminal:
            return
        resource_id = execution.slot.resource_id
        blocked = self.blocklist.task_failed(
            resource_id, graph.vertex(execution.vertex_id).task_name, cause, self._now())
        if blocked is None:
            return
        log.warning("job %s: TaskExecutor %s blocked for the job for %g s: %s", self.job_id,
                    resource_id, blocked.until - blocked.since, blocked.cause)
        self._run_pool(self.slot_pool.block_task_executor(resource_id, blocked.cause))
        self._tell_resource_manager_blocked(blocked)

    def _tell_resource_manager_blocked(self, blocked: BlockedTaskExecutor) -> None:
        if self.resource_manager_id is None:
            return  # told when it connects
        self.spawn(self._quietly(self._rm.block_task_executors(BlockTaskExecutors(
            self.resource_manager_id, self.job_master_id, self.job_id, [blocked.resource_id],
            max(0.0, blocked.until - self._now())))), f"block-{blocked.resource_id}")

    def _task_manager_report(self, _resource_id: ResourceID, report: object) -> None:
        """A TaskExecutor's heartbeat answer: its tasks' metrics (of this job, keyed by
        attempts the TaskExecutor runs, so they are this job's)."""
        if not isinstance(report, te.AllocatedSlotReport) or report.job_id != self.job_id:
            return
        for attempt_id, metrics in report.metrics.items():
            if attempt_id not in self._final_metrics and \
                    self.scheduler.execution_graph.execution(attempt_id) is not None:
                self.task_metrics[attempt_id] = metrics

    async def report_task_output(self, request: ReportTaskOutput) -> Ack:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        for chunk in request.chunks:
            self.output.append("stderr" if chunk.stream == "stderr" else "stdout", chunk.text)
        if request.spark_application:
            self.spark_application = (request.spark_application, request.spark_tracking_url or "")
            self._spark_applications[request.attempt_id] = request.spark_application
        return ACK

    async def request_partition_location(self, request: RequestPartitionLocation) -> PartitionLocation:
        """Where a producer's partition is served (receiver-initiated exchange: the
        consumer asks, then requests the data from that TaskExecutor)."""
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        graph = self.scheduler.execution_graph
        try:
            partitions = graph.result(request.result_id).partitions
        except KeyError:
            raise NotFound(f"job {self.job_id} has no result {request.result_id}") from None
        if not 0 <= request.partition_number < len(partitions):
            raise InvalidRequest(f"result {request.result_id} has no partition "
                                 f"{request.partition_number}")
        vertex = graph.vertex(partitions[request.partition_number].producer)
        execution = vertex.current_execution
        if execution.state in (ExecutionState.FAILED, ExecutionState.CANCELED,
                               ExecutionState.CANCELING):
            return PartitionLocation(PartitionLocationState.FAILED,
                                     error=f"producer {vertex.task_name} is "
                                     f"{execution.state.value}: {execution.failure_cause or ''}")
        slot = execution.slot
        record = self.task_managers.get(slot.resource_id) if slot is not None else None
        if execution.state is ExecutionState.FINISHED and record is None:
            # Its TaskExecutor is gone, and the result with it: fail the consumer at once
            # (a partition failure, so region failover re-runs the producer).
            return PartitionLocation(PartitionLocationState.FAILED,
                                     error=f"result partition {request.result_id}"
                                     f"#{request.partition_number} lost with TaskExecutor "
                                     f"{slot.resource_id if slot else '?'}")
        if execution.state in (ExecutionState.CREATED, ExecutionState.SCHEDULED) or record is None:
            return PartitionLocation(PartitionLocationState.PENDING)
        return PartitionLocation(PartitionLocationState.READY, record.resource_id,
                                 record.data_address)

    async def disconnect_task_manager(self, request: DisconnectTaskManager) -> Ack:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        if request.resource_manager_id is not None:
            # The process ended: whichever registration it has here goes with it.
            check_fencing(self.resource_manager_id, request.resource_manager_id,
                          "ResourceManager id")
        else:
            record = self.task_managers.get(request.resource_id)
            check_fencing(record.registration_id if record else None, request.registration_id,
                          f"registration id of TaskExecutor {request.resource_id}")
        self._task_manager_lost(request.resource_id, request.cause)
        return ACK

    def _task_manager_timed_out(self, resource_id: ResourceID) -> None:
        self._task_manager_lost(resource_id, f"heartbeat of TaskExecutor {resource_id} timed out")

    def _task_manager_unreachable(self, resource_id: ResourceID, detail: str) -> None:
        self._task_manager_lost(resource_id, f"TaskExecutor {resource_id} is unreachable: {detail}")

    def _task_manager_lost(self, resource_id: ResourceID, cause: str) -> None:
        record = self.task_managers.pop(resource_id, None)
        if record is None:
            return
        log.warning("job %s: TaskExecutor %s lost: %s", self.job_id, resource_id, cause)
        self._tm_heartbeats.unmonitor_target(resource_id)
        orphans = self._spark_applications_on(resource_id)
        if orphans:
            kill = self.spawn(self._kill_spark_applications(orphans), f"orphans-{resource_id}")
            self._spark_application_kills.add(kill)
            kill.add_done_callback(self._spark_application_kills.discard)
        # Finished tasks' results on it are gone too: region failover re-runs producers.
        self._run_scheduler(self.scheduler.task_executor_lost(resource_id, self._now()))
        self._run_pool(self.slot_pool.release_task_manager(resource_id, cause, self._now()))
        self.spawn(self._quietly(record.gateway.disconnect_job_manager(
            te.DisconnectJobManager(self.job_master_id, self.job_id, cause))),
            f"disconnect-{resource_id}")

    def _spark_applications_on(self, resource_id: ResourceID) -> list[str]:
        """The Spark applications of the attempts running on `resource_id`."""
        found = []
        for vertex in self.scheduler.execution_graph.execution_vertices():
            execution = vertex.current_execution
            if execution.slot is not None and execution.slot.resource_id == resource_id \
                    and not execution.state.is_terminal \
                    and execution.attempt_id in self._spark_applications:
                found.append(self._spark_applications.pop(execution.attempt_id))
        return found

    async def _kill_spark_applications(self, app_ids: list[str]) -> None:
        """Kills the Spark applications whose drivers died with their TaskExecutor, and
        waits until YARN says they ended."""
        from flinkyarn import hadoop

        for app_id in app_ids:
            try:
                report = await self.run_blocking(hadoop.kill_application_until_ended, app_id,
                                                 SPARK_APPLICATION_KILL_TIMEOUT)
                log.info("job %s: Spark application %s, whose driver was lost, is %s",
                         self.job_id, app_id, report["state"])
            except Exception as error:  # the RM may refuse: YARN ends it after its AM expiry
                log.warning("job %s: cannot kill Spark application %s, whose driver was "
                            "lost: %s", self.job_id, app_id, error)

    # -------------------------------------------------------------- checkpoints

    async def acknowledge_checkpoint(self, request: AcknowledgeCheckpoint) -> Ack:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        self.checkpointing.acknowledge(request.attempt_id, request.checkpoint_id,
                                       request.snapshot)
        return ACK

    async def decline_checkpoint(self, request: DeclineCheckpoint) -> Ack:
        check_fencing(self.job_master_id, request.job_master_id, "JobMaster id")
        self.checkpointing.decline(request.attempt_id, request.checkpoint_id, request.reason)
        return ACK

    async def trigger_savepoint(self, target: str, stop: bool) -> str:
        """Takes a savepoint into the folder `target` (empty: state.savepoints.dir) and
        returns its folder once written; with `stop`, the job then stops (FINISHED, as
        Flink's stop-with-savepoint). ValueError (nothing changed) when the job takes
        no checkpoints or not all of its tasks run; RuntimeError when it failed."""
        return await self.checkpointing.trigger_savepoint(target, stop)

    def checkpoint_view(self) -> CheckpointView | None:
        """The job's checkpoint statistics for the REST API (None: it takes none)."""
        return self.checkpointing.view()

    # ----------------------------------------------------------------- commands

    def _run_scheduler(self, commands: list) -> None:
        """Carries out the Scheduler's commands in order (calls go out as tasks)."""
        self._carry_out(self._scheduler_command, commands)

    def _run_pool(self, commands: list) -> None:
        """Carries out the SlotPool's commands in order."""
        self._carry_out(self._pool_command, commands)

    def _carry_out(self, handler: Callable[[object], None], commands: list) -> None:
        """Carries out `commands` with `handler`, depth first as nested calls would: the
        commands a command leads to (the SlotPool's SlotAssigned feeds the Scheduler,
        whose ReleaseSlot feeds the SlotPool, ...) before the rest of its own list; but
        on a stack of its own, not the call stack: the chain through a job's pending slot
        requests can be thousands long."""
        self.assert_on_loop()
        self._commands.append((handler, iter(commands)))
        if len(self._commands) > 1:
            return  # called by a handler: the loop below takes these first
        try:
            while self._commands:
                handler, pending = self._commands[-1]
                command = next(pending, None)
                if command is None:
                    self._commands.pop()
                else:
                    handler(command)
        finally:
            self._commands.clear()  # a handler raised: what it led to goes with it

    def _scheduler_command(self, command) -> None:
        now = self._now()
        match command:
            case sch.RequestSlot(request_id=request_id, profile=profile):
                self._run_pool(self.slot_pool.request_slot(SlotRequestId(request_id), profile, now))
            case sch.CancelSlotRequest(request_id=request_id):
                self._run_pool(self.slot_pool.cancel_request(SlotRequestId(request_id)))
            case sch.ReleaseSlot(request_id=request_id):
                self._run_pool(self.slot_pool.release_slot(SlotRequestId(request_id), now))
            case sch.DeployTask():
                self.spawn(self._deploy(command), f"deploy-{command.descriptor.attempt_id}")
            case sch.CancelTask():
                self.spawn(self._cancel_task(command), f"cancel-{command.attempt_id}")
            case sch.ScheduleRestart(delay=delay, token=token):
                self.checkpointing.abort_pending("the job fails over")
                self.spawn(self._restart_after(delay, token), f"restart-{token}")
            case sch.JobTerminated(status=status, cause=cause):
                self.checkpointing.abort_pending(f"the job is {status.value}")
                self._terminate(status, cause)
            case _:
                raise TypeError(f"unknown Scheduler command {command!r}")

    def _pool_command(self, command) -> None:
        now = self._now()
        match command:
            case sp.SlotAssigned(request_id=request_id, slot=slot):
                record = self.task_managers.get(slot.resource_id)
                address = record.address if record else ""
                self._run_scheduler(self.scheduler.slot_assigned(request_id, SlotInfo(
                    slot.allocation_id, slot.resource_id, slot.slot_index, address), now))
            case sp.SlotRequestFailed(request_id=request_id, cause=cause):
                self._run_scheduler(self.scheduler.slot_request_failed(request_id, cause, now))
            case sp.SlotLost(request_id=request_id, cause=cause):
                self._run_scheduler(self.scheduler.slot_lost(request_id, cause, now))
            case sp.RequestSlotFromResourceManager():
                self.spawn(self._request_slot(command), f"request-{command.allocation_id}")
            case sp.CancelSlotRequest(allocation_id=allocation_id):
                if allocation_id in self._waiting_requests:
                    self._waiting_requests.discard(allocation_id)  # never sent: drop it
                elif self.resource_manager_id is not None:
                    self.spawn(self._quietly(self._rm.cancel_slot_request(
                        CancelSlotRequestCall(self.resource_manager_id, allocation_id))),
                        f"cancel-request-{allocation_id}")
            case sp.FreeSlot():
                self.spawn(self._free_slot(command), f"free-{command.allocation_id}")
            case _:
                raise TypeError(f"unknown SlotPool command {command!r}")

    async def _restart_after(self, delay: float, token: int) -> None:
        """The restart strategy's backoff, then the restart (a stale token does nothing)."""
        await self._clock.sleep(delay)
        if not self._terminating:
            self._run_scheduler(self.scheduler.restart_due(token, self._now()))

    async def _request_slot(self, command: sp.RequestSlotFromResourceManager) -> None:
        self._waiting_requests.add(command.allocation_id)
        try:
            async with self._slot_requests_in_flight:
                if command.allocation_id not in self._waiting_requests:
                    return  # withdrawn while it waited
                self._waiting_requests.discard(command.allocation_id)
                if self.resource_manager_id is None:
                    return  # resent by the SlotPool when the ResourceManager is back
                await self._rm.request_slot(RequestSlotCall(
                    self.resource_manager_id, self.job_master_id, self.job_id,
                    command.allocation_id, command.profile, self.rpc.address))
        except RemoteError as error:
            self._run_pool(self.slot_pool.slot_request_failed(command.allocation_id, str(error),
                                                              self._now()))
        except RpcError as error:
            log.info("job %s: slot request not delivered (%s); resent on reconnection",
                     self.job_id, error)

    async def _deploy(self, command: sch.DeployTask) -> None:
        d = command.descriptor
        record = self.task_managers.get(d.resource_id)
        try:
            if record is None:
                raise RpcError(f"TaskExecutor {d.resource_id} is not connected")
            await record.gateway.submit_task(te.SubmitTask(self.job_master_id, d))
        except RpcError as error:
            if isinstance(error, Unreachable):
                # Refused: the TaskExecutor is gone. Dropping it now, before its heartbeats
                # tell, keeps the restart from reusing its cached slots (and failing again).
                self._task_manager_lost(d.resource_id, f"TaskExecutor {d.resource_id} is "
                                                       f"unreachable: {error}")
            self._run_scheduler(self.scheduler.task_state_changed(
                d.attempt_id, ExecutionState.FAILED,
                f"deploying {d.vertex_name} ({d.subtask_index + 1}/{d.parallelism}) to "
                f"{d.resource_id} failed: {error}", self._now()))

    async def _cancel_task(self, command: sch.CancelTask) -> None:
        record = self.task_managers.get(command.resource_id)
        try:
            if record is None:
                raise RpcError(f"TaskExecutor {command.resource_id} is not connected")
            await record.gateway.cancel_task(te.CancelTask(self.job_master_id, command.attempt_id))
        except RpcError:
            # The TaskExecutor is gone: the task is not running anywhere any more.
            self._run_scheduler(self.scheduler.task_state_changed(
                command.attempt_id, ExecutionState.CANCELED, None, self._now()))

    async def _free_slot(self, command: sp.FreeSlot) -> None:
        record = self.task_managers.get(command.resource_id)
        if record is not None:
            await self._quietly(record.gateway.free_slot(
                te.FreeSlot(self.job_master_id, command.allocation_id, command.cause)))

    async def _quietly(self, call) -> None:
        try:
            await call
        except RpcError as error:
            log.info("job %s: %s", self.job_id, error)

    async def abandon(self, cause: str) -> None:
        """Called by the Dispatcher's supervisor once run() raised (the endpoint has
        stopped): tells every TaskExecutor this JobMaster knew, and the ResourceManager,
        that it is gone, so the job's tasks stop and its slots, partitions and pending
        slot requests go now rather than at their heartbeat timeouts. Best effort: a
        peer it cannot reach finds out by its heartbeat timeout; raises no RpcError."""
        calls = [self._quietly(record.gateway.disconnect_job_manager(
            te.DisconnectJobManager(self.job_master_id, self.job_id, cause)))
            for record in self.task_managers.values()]
        if self.resource_manager_id is not None:
            calls.append(self._quietly(self._rm.disconnect_job_master(DisconnectJobMaster(
                self.job_id, self.job_master_id, cause))))
        await asyncio.gather(*calls)

    # -------------------------------------------------------------- termination

    @property
    def _terminating(self) -> bool:
        return self._terminated.is_set()

    def _terminate(self, status: JobStatus, cause: str | None) -> None:
        self._terminated.set()
        # Terminal to no one until its outputs are final and its result is reported.
        self._status_while_finishing = STATUS_WHILE_FINISHING[status]
        self.end_time = time.time()
        log.info("job %s %s%s", self.job_id, status.value, f": {cause}" if cause else "")
        self.spawn(self._shut_down(status, cause), "shutdown")

    async def _shut_down(self, status: JobStatus, cause: str | None) -> None:
        """Drops the job's partitions, gives every slot back, leaves the ResourceManager,
        then reports the result. Its file outputs are committed or discarded first; a
        failed commit fails the job (output_commit)."""
        checkpointed = self.checkpointing.enabled
        mark_success = self.config.mark_success and not self.checkpointing.stopping_after_savepoint
        if status is JobStatus.FINISHED and self.job_graph.outputs and \
                self._commit_starts is not None:
            try:
                await self._commit_starts(mark_success, checkpointed)
                self.commit_recorded = True
            except Exception as error:  # the commit could not be finished by another attempt
                status, cause = JobStatus.FAILED, (
                    f"recording the start of its output commit failed: {error}")
                log.error("job %s: %s", self.job_id, cause)
        status, cause = await finish_outputs(self.job_graph, status, cause, self.run_blocking,
                                             checkpointed=checkpointed,
                                             mark_success=mark_success)
        if self.claims is not None:  # before the result is out: the next job may claim
            try:
                await self.run_blocking(self.claims.release)
            except Exception as error:  # the next job finds it stale: this job's end stands
                log.warning("job %s: releasing the claims on its output folders failed: %s",
                            self.job_id, error)
        await self.checkpointing.end(status)
        frees = [c for c in self.slot_pool.close(self._now()) if isinstance(c, sp.FreeSlot)]
        releases = [self._quietly(record.gateway.release_partitions(
            te.ReleasePartitions(self.job_master_id, self.job_id)))
            for record in self.task_managers.values()]
        await asyncio.gather(*(self._free_slot(c) for c in frees), *releases)
        if self._spark_application_kills:  # bounded: each gives up after its timeout
            await asyncio.wait(self._spark_application_kills)
        if self.resource_manager_id is not None:
            await self._quietly(self._rm.disconnect_job_master(DisconnectJobMaster(
                self.job_id, self.job_master_id, f"job {status.value}")))
        assert self.end_time is not None  # set by _terminate, which started this
        self._on_terminated(JobResult(self.job_id, self.job_graph.name, status, cause,
                                      self.start_time, self.end_time))
        self.stop()


def _conforms_to_gateway(endpoint: JobMaster) -> JobMasterGateway:
    """Never called: the type checker (integration/run-tests) checks here that the
    JobMaster has every method of its gateway, with compatible types."""
    return endpoint
