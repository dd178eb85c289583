"""The ResourceManager endpoint: registrations, heartbeats, and the SlotManager's
decisions carried out over RPC and through the resource-manager driver.

It is the heartbeat sender towards TaskExecutors (their answer is a SlotReport, which
reconciles the SlotManager) and towards JobMasters. Consequences of a timeout, per the
heartbeat article:
- TaskExecutor: its slots are removed from the SlotManager (in-flight requests go back
  to pending), and it is told to reconnect; a live one registers again.
- JobMaster: its pending slot requests are dropped; a live one registers again.
A target that heartbeat.rpc-failure-threshold calls in a row cannot reach is treated as
timed out, at once.
A worker whose process or container ends is treated like a TaskExecutor timeout, at
once (whichever comes first), and every JobMaster is told the TaskExecutor is gone
(`disconnect_task_manager`), so its tasks are failed and rescheduled without waiting for
the JobMaster's own heartbeat timeout. A heartbeat timeout alone does not tell the
JobMasters: a TaskExecutor that only lost its ResourceManager connection keeps its tasks
and registers again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from flinkyarn import options
from flinkyarn.clock import Clock
from flinkyarn.configuration import Configuration
from flinkyarn.gateways import ACK, Ack, HeartbeatRequest
from flinkyarn.gateways.job_master import (DisconnectTaskManager, JobMasterGateway,
                                           SlotRequestFailed, job_master_endpoint)
from flinkyarn.gateways.resource_manager import (ApplicationTokens, BlockTaskExecutors,
                                                 CancelSlotRequest,
                                                 DisconnectJobMaster, DisconnectTaskExecutor,
                                                 JobMasterRegistration, NotifySlotAvailable,
                                                 RegisterJobMaster, RegisterTaskExecutor,
                                                 RequestApplicationTokens, RequestSlot,
                                                 ResourceManagerGateway, TaskExecutorRegistration)
from flinkyarn.gateways.task_executor import (AllocateSlot as AllocateSlotCall,
                                              DisconnectResourceManager, TaskExecutorGateway,
                                              UpdateDelegationTokens)
from flinkyarn.heartbeat import HeartbeatManager
from flinkyarn.ids import InstanceID, JobID, JobMasterId, ResourceID, ResourceManagerId, leader_id, new_id
from flinkyarn.options import HeartbeatConfig
from flinkyarn.resources import ResourceProfile
from flinkyarn.rpc.endpoint import RpcEndpoint, check_fencing
from flinkyarn.rpc.errors import Rejected, RpcError
from flinkyarn.rpc.service import RpcService
from flinkyarn.slots import SlotReport
from yarn_am.resourcemanager.driver import ResourceManagerDriver, WorkerLocation
from yarn_am.resourcemanager.slot_manager import (AllocateSlot, FailSlotRequest, ReleaseWorker,
                                                  RequestWorker, SlotManager, SlotRequest,
                                                  TaskManagerSlotInfo, WorkerSpec)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResourceManagerConfig:
    worker: WorkerSpec
    heartbeat: HeartbeatConfig
    taskmanager_timeout: float
    slot_request_timeout: float
    max_workers: int

    @classmethod
    def from_configuration(cls, conf: Configuration) -> "ResourceManagerConfig":
        slots = conf.get(options.NUM_TASK_SLOTS)
        return cls(
            worker=WorkerSpec(slots, ResourceProfile(
                conf.get(options.TASK_MANAGER_CPU_CORES) / slots,
                (conf.get(options.TASK_MANAGER_PROCESS_MEMORY) >> 20) // slots)),
            heartbeat=HeartbeatConfig.from_configuration(conf),
            taskmanager_timeout=conf.get(options.TASK_MANAGER_TIMEOUT),
            slot_request_timeout=conf.get(options.SLOT_REQUEST_TIMEOUT),
            max_workers=conf.get(options.MAX_TASK_MANAGERS))


@dataclass
class TaskExecutorRecord:
    resource_id: ResourceID
    instance_id: InstanceID
    address: str
    gateway: TaskExecutorGateway
    resources: ResourceProfile
    metrics_address: str = ""  # its Prometheus endpoint


@dataclass
class JobMasterRecord:
    job_id: JobID
    job_master_id: JobMasterId
    resource_id: ResourceID
    address: str
    gateway: JobMasterGateway


WAIT_EXPLAINED_AFTER = 3.0
"""Seconds a slot request waits before the ResourceManager says why (and how often it
asks its driver again)."""


class ResourceManager(RpcEndpoint):
    def __init__(self, rpc: RpcService, config: ResourceManagerConfig,
                 driver: ResourceManagerDriver, clock: Clock | None = None,
                 attempt: int = 1) -> None:
        """`attempt`: the AppMaster's YARN application attempt, which its leader id names."""
        super().__init__(rpc, "resourcemanager", ResourceManagerGateway, clock)
        self.config = config
        self.driver = driver
        self.resource_manager_id = ResourceManagerId(leader_id(attempt))
        self.resource_id = ResourceID(f"resourcemanager-{self.resource_manager_id[:8]}")
        self.slot_manager = SlotManager(config.worker, config.taskmanager_timeout,
                                        config.slot_request_timeout, config.max_workers)
        self.task_executors: dict[ResourceID, TaskExecutorRecord] = {}
        self.job_masters: dict[JobID, JobMasterRecord] = {}
        # Workers requested from the driver and not yet terminated; True once registered.
        self.workers: dict[str, bool] = {}
        # Why the pending workers do not run yet, as the driver last said ("": nothing to say).
        self._containers_wait = ""
        self._explaining: float | None = None  # when the driver was last asked
        self.delegation_tokens = b""  # the AppMaster's newest, for every TaskExecutor
        # Set by the AppMaster where it obtains tokens from a keytab: a new set, for `purpose`.
        self.obtain_application_tokens: Callable[[str], Awaitable[bytes]] | None = None
        # Flink's JobLeaderIdService, set by the AppMaster (the Dispatcher knows): the
        # JobMasterId of the job's current JobMaster, None if it has none. Unset, every
        # registering JobMaster counts as its job's leader.
        self.job_leader_id: Callable[[JobID], JobMasterId | None] | None = None
        timeout = config.heartbeat.timeout
        threshold = config.heartbeat.rpc_failure_threshold
        # When each TaskExecutor was last asked for a heartbeat: its answer's slot report
        # was made after that, and may predate an allocation acknowledged since.
        self._te_asked: dict[ResourceID, float] = {}
        self._te_heartbeats: HeartbeatManager[SlotReport, HeartbeatRequest] = HeartbeatManager(
            self.resource_id, timeout, self._clock, on_timeout=self._task_executor_timed_out,
            on_payload=self._slot_report_received, payload_for=self._heartbeat_request,
            rpc_failure_threshold=threshold, on_unreachable=self._task_executor_unreachable)
        self._jm_heartbeats: HeartbeatManager[Ack, HeartbeatRequest] = HeartbeatManager(
            self.resource_id, timeout, self._clock, on_timeout=self._job_master_timed_out,
            payload_for=lambda _rid: HeartbeatRequest(self.resource_id),
            rpc_failure_threshold=threshold)

    async def slot_capacity(self) -> tuple[int, str]:
        """The most slots this cluster could ever offer at once, and what bounds it: the
        workers it may start (resourcemanager.max-taskmanagers, and what the driver's
        platform could hold), or the slots registered now if more."""
        worker = self.config.worker
        count = self.config.max_workers
        bound = f"{options.MAX_TASK_MANAGERS.key} = {count}"
        platform = await self.driver.max_workers(worker)
        if platform is not None and platform[0] < count:
            count, bound = platform
        slots = count * worker.num_slots
        registered = self.slot_manager.registered_slot_count()
        if registered > slots:
            return registered, f"{registered} slots registered"
        return slots, (f"{count} TaskExecutors of {worker.num_slots} slots "
                       f"({options.NUM_TASK_SLOTS.key}); {bound}")

    async def on_start(self) -> None:
        for worker_id in await self.driver.initialize(self, self.rpc.address, self.spawn) or []:
            # Started with the application: its slots serve the first requests.
            self.workers[worker_id] = False
            self.slot_manager.add_pending_worker()
            log.info("worker %s started with the application", worker_id)
        interval = self.config.heartbeat.interval
        self.every(lambda: interval, self._send_heartbeats, "heartbeats")
        self.every(lambda: min(interval, 1.0), self._housekeeping, "housekeeping")

    async def on_stop(self) -> None:
        await self.driver.terminate()

    async def _send_heartbeats(self) -> None:
        interval = self.config.heartbeat.interval
        await self._te_heartbeats.send_heartbeats(call_timeout=interval)
        await self._jm_heartbeats.send_heartbeats(call_timeout=interval)

    def _housekeeping(self) -> None:
        self._te_heartbeats.check_timeouts()
        self._jm_heartbeats.check_timeouts()
        now = self._clock.monotonic()
        self._execute(self.slot_manager.check_timeouts(now))
        self._ask_why_workers_wait(now)

    # ------------------------------------------------------------- why jobs wait

    def wait_reason(self, job_id: JobID) -> str:
        """Why the job's slot requests are not served, once the oldest has waited
        WAIT_EXPLAINED_AFTER: its TaskExecutors' containers wait (the driver's reason), or
        no more TaskExecutors may start. "" when it waits for nothing, or not for long."""
        since = self.slot_manager.waiting_since(job_id)
        if since is None or self._clock.monotonic() - since < WAIT_EXPLAINED_AFTER:
            return ""
        pending = self.slot_manager.pending_worker_count()
        if pending:
            return self._containers_wait or f"waiting for {pending} TaskExecutor(s) to start"
        return (f"waiting for a free slot: all {self.slot_manager.registered_slot_count()} "
                f"are taken and no more TaskExecutors may start "
                f"({options.MAX_TASK_MANAGERS.key} = {self.config.max_workers})")

    def _ask_why_workers_wait(self, now: float) -> None:
        """Asks the driver why workers wait, every WAIT_EXPLAINED_AFTER from a second
        before a slot request has waited that long, while workers wait (a container
        that comes at once costs no question)."""
        pending = [worker for worker, registered in self.workers.items() if not registered]
        since = self.slot_manager.waiting_since()
        if not pending or since is None:
            self._containers_wait = ""
            return
        if now - since < WAIT_EXPLAINED_AFTER - 1 or (
                self._explaining is not None and now - self._explaining < WAIT_EXPLAINED_AFTER):
            return
        self._explaining = now

        async def ask() -> None:
            try:
                reason = await self.driver.explain_wait(pending) or ""
            except Exception as error:  # noqa: BLE001  only an explanation: never fatal
                log.warning("the driver could not say why workers wait: %s", error)
                return
            if reason and reason != self._containers_wait:
                log.info("%s", reason)
            self._containers_wait = reason
        self.spawn(ask(), "why-workers-wait")

    # ------------------------------------------------------------- TaskExecutors

    async def register_task_executor(self, request: RegisterTaskExecutor) -> TaskExecutorRegistration:
        """Refused for good (Rejected: the TaskExecutor exits) unless it runs as a worker
        the driver started for this ResourceManager and still runs as far as the
        platform says: a TaskExecutor orphaned by its container's end, or one no worker
        of this attempt stands for, gets no slot to offer. Answered once the
        ResourceManager has started: a worker the driver adopts then (a per-job
        application's first container) may register as soon as it is published."""
        await self.running.wait()
        resource_id = request.resource_id
        if request.worker_id != resource_id or request.worker_id not in self.workers:
            raise Rejected(f"TaskExecutor {resource_id} is not a running worker of "
                           f"ResourceManager {self.resource_manager_id}: its container or "
                           f"process has ended, or this ResourceManager did not start it")
        if resource_id in self.task_executors:
            log.info("TaskExecutor %s registers again; its old slots are dropped", resource_id)
        gateway: TaskExecutorGateway = self.rpc.connect(request.address, "taskexecutor",
                                                        TaskExecutorGateway)
        record = TaskExecutorRecord(resource_id, InstanceID(new_id()), request.address, gateway,
                                    request.total_resources, request.metrics_address)
        self.task_executors[resource_id] = record
        if request.worker_id in self.workers:
            self.workers[request.worker_id] = True
        self._te_heartbeats.monitor_target(
            resource_id, lambda heartbeat: gateway.heartbeat_from_resource_manager(heartbeat))
        log.info("TaskExecutor %s registered from %s with %d slots", resource_id, request.address,
                 len(request.slot_report.slots))
        self._execute(self.slot_manager.register_task_executor(
            resource_id, request.slot_report, self._clock.monotonic()))
        return TaskExecutorRegistration(self.resource_manager_id, self.resource_id,
                                        record.instance_id, self.delegation_tokens)

    async def hand_over_delegation_tokens(self, tokens: bytes) -> None:
        """The AppMaster obtained new delegation tokens: every registered TaskExecutor
        gets them now, every one registering later with its registration."""
        self.delegation_tokens = tokens
        for record in list(self.task_executors.values()):
            self.spawn(self._send_delegation_tokens(record, tokens), f"tokens-{record.resource_id}")

    async def _send_delegation_tokens(self, record: TaskExecutorRecord, tokens: bytes) -> None:
        try:
            await record.gateway.update_delegation_tokens(
                UpdateDelegationTokens(self.resource_manager_id, tokens))
            log.info("new delegation tokens handed to TaskExecutor %s", record.resource_id)
        except RpcError as error:  # it registers again, and gets them with its registration
            log.warning("could not hand new delegation tokens to TaskExecutor %s: %s",
                        record.resource_id, error)

    async def request_application_tokens(self, request: RequestApplicationTokens) -> ApplicationTokens:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        check_fencing(request.resource_id if request.resource_id in self.task_executors else None,
                      request.resource_id, "TaskExecutor")
        if self.obtain_application_tokens is None:
            return ApplicationTokens()
        purpose = f"{request.purpose} (TaskExecutor {request.resource_id})"
        return ApplicationTokens(await self.obtain_application_tokens(purpose))

    def _heartbeat_request(self, resource_id: ResourceID) -> HeartbeatRequest:
        self._te_asked[resource_id] = self._clock.monotonic()
        return HeartbeatRequest(self.resource_id)

    def _slot_report_received(self, resource_id: ResourceID, report: SlotReport) -> None:
        if resource_id in self.task_executors:
            self._execute(self.slot_manager.report_slot_status(
                resource_id, report, self._clock.monotonic(),
                requested_at=self._te_asked.get(resource_id)))

    def _task_executor_timed_out(self, resource_id: ResourceID) -> None:
        self._close_task_executor_connection(resource_id, "heartbeat timed out", reconnect=True)

    def _task_executor_unreachable(self, resource_id: ResourceID, detail: str) -> None:
        self._close_task_executor_connection(resource_id, f"unreachable: {detail}", reconnect=True)

    def _close_task_executor_connection(self, resource_id: ResourceID, cause: str,
                                        reconnect: bool) -> None:
        record = self.task_executors.pop(resource_id, None)
        if record is None:
            return
        log.warning("closing the connection to TaskExecutor %s: %s", resource_id, cause)
        self._te_heartbeats.unmonitor_target(resource_id)
        self._te_asked.pop(resource_id, None)
        self._execute(self.slot_manager.unregister_task_executor(resource_id, cause,
                                                                 self._clock.monotonic()))
        if reconnect:
            self.spawn(self._ask_to_reconnect(record, cause), f"disconnect-{resource_id}")

    async def _ask_to_reconnect(self, record: TaskExecutorRecord, cause: str) -> None:
        try:
            await record.gateway.disconnect_resource_manager(
                DisconnectResourceManager(self.resource_manager_id, cause))
        except RpcError:
            pass  # gone or frozen: it finds out through its own heartbeat timeout

    async def notify_slot_available(self, request: NotifySlotAvailable) -> Ack:
        record = self.task_executors.get(request.slot_id.resource_id)
        check_fencing(record.instance_id if record else None, request.instance_id,
                      "TaskExecutor instance id")
        self._execute(self.slot_manager.free_slot(request.slot_id, request.allocation_id,
                                                  self._clock.monotonic()))
        return ACK

    async def disconnect_task_executor(self, request: DisconnectTaskExecutor) -> Ack:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        record = self.task_executors.get(request.resource_id)
        check_fencing(record.instance_id if record else None, request.instance_id,
                      f"instance id of TaskExecutor {request.resource_id}")
        self._close_task_executor_connection(request.resource_id, request.cause, reconnect=False)
        return ACK

    # ----------------------------------------------------------------- workers

    def on_worker_started(self, worker_id: str) -> None:
        log.info("worker %s started", worker_id)

    def on_worker_terminated(self, worker_id: str, cause: str) -> None:
        registered = self.workers.pop(worker_id, None)
        if registered is None:
            return
        log.warning("worker %s terminated: %s", worker_id, cause)
        if worker_id in self.task_executors:
            # Asked to reconnect, a TaskExecutor that outlived its container (orphaned by
            # its launch script's end) registers again at once, is rejected and exits.
            self._close_task_executor_connection(ResourceID(worker_id), f"worker {cause}",
                                                 reconnect=True)
        elif not registered:
            self._execute(self.slot_manager.worker_failed_to_start(
                f"worker {worker_id} {cause} before registering", self._clock.monotonic()))
        if registered:
            for record in self.job_masters.values():
                lost = DisconnectTaskManager(record.job_master_id, ResourceID(worker_id),
                                             f"TaskExecutor {worker_id} {cause}",
                                             resource_manager_id=self.resource_manager_id)
                self.spawn(self._tell_job_master(record, lost), f"lost-{worker_id}-{record.job_id}")

    async def _tell_job_master(self, record: JobMasterRecord, lost: DisconnectTaskManager) -> None:
        try:
            await record.gateway.disconnect_task_manager(lost)
        except RpcError as error:
            log.info("could not tell job %s that %s is gone: %s", record.job_id,
                     lost.resource_id, error)

    # ---------------------------------------------------------------- JobMasters

    async def register_job_master(self, request: RegisterJobMaster) -> JobMasterRegistration:
        """See the gateway's contract: refused unless from the job's leader; idempotent
        for the registered JobMaster; a new leader replaces the old registration."""
        job_id = request.job_id
        if self.job_leader_id is not None:
            check_fencing(self.job_leader_id(job_id), request.job_master_id,
                          f"JobMaster id of job {job_id} (its current JobMaster's)")
        old = self.job_masters.get(job_id)
        if old is not None and old.job_master_id == request.job_master_id:
            log.info("JobMaster %s of job %s registers again", request.job_master_id, job_id)
            self._monitor_job_master(old)
            return JobMasterRegistration(self.resource_manager_id, self.resource_id)
        if old is not None:
            log.warning("JobMaster %s of job %s replaces JobMaster %s", request.job_master_id,
                        job_id, old.job_master_id)
            self._close_job_master_connection(
                job_id, f"replaced by JobMaster {request.job_master_id} of the job")
        gateway: JobMasterGateway = self.rpc.connect(request.address, job_master_endpoint(job_id),
                                                     JobMasterGateway)
        record = JobMasterRecord(job_id, request.job_master_id, request.job_master_resource_id,
                                 request.address, gateway)
        self.job_masters[job_id] = record
        self._monitor_job_master(record)
        log.info("JobMaster %s of job %s registered", request.job_master_id, job_id)
        return JobMasterRegistration(self.resource_manager_id, self.resource_id)

    def _monitor_job_master(self, record: JobMasterRecord) -> None:
        gateway = record.gateway
        self._jm_heartbeats.monitor_target(
            record.resource_id, lambda heartbeat: gateway.heartbeat_from_resource_manager(heartbeat))

    def _job_master_timed_out(self, resource_id: ResourceID) -> None:
        for job_id, record in list(self.job_masters.items()):
            if record.resource_id == resource_id:
                self._close_job_master_connection(job_id, "heartbeat timed out")

    def _close_job_master_connection(self, job_id: JobID, cause: str) -> None:
        record = self.job_masters.pop(job_id, None)
        if record is None:
            return
        log.info("closing the connection to the JobMaster of job %s: %s", job_id, cause)
        self._jm_heartbeats.unmonitor_target(record.resource_id)
        self._execute(self.slot_manager.unregister_job(job_id))

    async def disconnect_job_master(self, request: DisconnectJobMaster) -> Ack:
        record = self.job_masters.get(request.job_id)
        check_fencing(record.job_master_id if record else None, request.job_master_id,
                      "JobMaster id")
        self._close_job_master_connection(request.job_id, request.cause)
        return ACK

    async def request_slot(self, request: RequestSlot) -> Ack:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        record = self.job_masters.get(request.job_id)
        check_fencing(record.job_master_id if record else None, request.job_master_id,
                      "JobMaster id")
        self._execute(self.slot_manager.request_slot(
            SlotRequest(request.job_id, request.allocation_id, request.profile,
                        request.job_master_address), self._clock.monotonic()))
        return ACK

    async def block_task_executors(self, request: BlockTaskExecutors) -> Ack:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        record = self.job_masters.get(request.job_id)
        check_fencing(record.job_master_id if record else None, request.job_master_id,
                      "JobMaster id")
        log.warning("job %s blocks TaskExecutor(s) %s for %g s", request.job_id,
                    ", ".join(request.resource_ids), request.duration)
        self._execute(self.slot_manager.block_task_executors(
            request.job_id, request.resource_ids, self._clock.monotonic() + request.duration))
        return ACK

    async def cancel_slot_request(self, request: CancelSlotRequest) -> Ack:
        check_fencing(self.resource_manager_id, request.resource_manager_id, "ResourceManager id")
        self._execute(self.slot_manager.cancel_slot_request(request.allocation_id))
        return ACK

    # ---------------------------------------------------------------- commands

    def _execute(self, commands: list) -> None:
        """Carries out the SlotManager's commands, in order; calls go out as tasks."""
        self.assert_on_loop()
        for command in commands:
            match command:
                case AllocateSlot():
                    self.spawn(self._allocate(command), f"allocate-{command.allocation_id}")
                case RequestWorker(spec=spec):
                    worker_id = self.driver.request_worker(spec)
                    self.workers[worker_id] = False
                    log.info("requested worker %s (%d slots of %s)", worker_id, spec.num_slots,
                             spec.slot_profile)
                case ReleaseWorker(resource_id=resource_id, cause=cause):
                    self.task_executors.pop(resource_id, None)
                    self._te_heartbeats.unmonitor_target(resource_id)
                    self._te_asked.pop(resource_id, None)
                    self.driver.release_worker(resource_id, cause)
                case FailSlotRequest():
                    self.spawn(self._fail_request(command), f"fail-{command.allocation_id}")
                case _:
                    raise TypeError(f"unknown SlotManager command {command!r}")

    async def _allocate(self, command: AllocateSlot) -> None:
        record = self.task_executors.get(command.resource_id)
        try:
            if record is None:
                raise RpcError(f"TaskExecutor {command.resource_id} is gone")
            await record.gateway.allocate_slot(AllocateSlotCall(
                self.resource_manager_id, command.slot_id, command.job_id, command.allocation_id,
                command.profile, command.job_master_address))
        except RpcError as error:
            log.info("slot %s for allocation %s not allocated: %s", command.slot_id,
                     command.allocation_id, error)
            self._execute(self.slot_manager.allocation_rejected(command.allocation_id, str(error),
                                                                self._clock.monotonic()))
        else:
            self._execute(self.slot_manager.allocation_acknowledged(command.allocation_id,
                                                                    self._clock.monotonic()))

    async def _fail_request(self, command: FailSlotRequest) -> None:
        record = self.job_masters.get(command.job_id)
        if record is None:
            return
        try:
            await record.gateway.slot_request_failed(SlotRequestFailed(
                self.resource_manager_id, command.allocation_id, command.cause))
        except RpcError as error:
            log.info("could not tell job %s its slot request failed: %s", command.job_id, error)

    # ------------------------------------------------------------------ queries

    def task_executor_overview(self) -> list[tuple[TaskExecutorRecord, list[TaskManagerSlotInfo]]]:
        return [(record, self.slot_manager.slots_of(rid)) for rid, record in self.task_executors.items()]

    def worker_location(self, record: TaskExecutorRecord) -> tuple[str, str, str]:
        """A registered TaskExecutor's container id, host and log page ("" when unknown;
        the host then from the address it registered with)."""
        where = self.driver.location(record.resource_id) or WorkerLocation()
        return (where.container_id, where.host or record.address.rpartition(":")[0],
                where.log_url)


def _conforms_to_gateway(endpoint: ResourceManager) -> ResourceManagerGateway:
    """Never called: the type checker (integration/run-tests) checks here that the
    ResourceManager has every method of its gateway, with compatible types."""
    return endpoint
