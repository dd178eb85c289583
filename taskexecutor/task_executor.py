"""The TaskExecutor endpoint: offers slots, runs tasks, and keeps in touch with the
ResourceManager and the JobMasters of the jobs it holds slots for.

Flow (seed article, "Resource Management and Job Dispatching"):
  1. register at the ResourceManager with a slot report, retrying with growing attempt
     timeouts; exit if not registered within taskmanager.registration.timeout, or at
     once if the ResourceManager rejects it (its container has ended);
  2. the ResourceManager gives a slot to a job (`allocate_slot`); if this TaskExecutor
     has no connection to that job's JobMaster yet, it registers there first, then offers
     the job's allocated slots; accepted slots become ACTIVE, rejected ones are freed;
  3. the JobMaster submits tasks into ACTIVE slots; each runs in a thread of its own and
     its state changes go back to the JobMaster in order;
  4. the JobMaster frees slots it no longer needs; the TaskExecutor tells the
     ResourceManager the slot is available again.

Heartbeats (receiving side of both): the ResourceManager's requests are answered with
the slot report, the JobMasters' with the job's allocation ids. On a ResourceManager
timeout the connection is closed and registration starts again, tasks keep running; on
a JobMaster timeout the job's tasks are cancelled and its slots freed.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from flinkyarn import kerberos, options, retry
from flinkyarn.clock import Clock
from flinkyarn.configuration import Configuration
from flinkyarn.gateways import ACK, Ack, HeartbeatRequest
from flinkyarn.checkpoints import TaskStateSnapshot
from flinkyarn.gateways.job_master import (AcknowledgeCheckpoint, DeclineCheckpoint,
                                           DisconnectTaskManager, JobMasterGateway,
                                           OfferSlots, OutputChunk,
                                           PartitionLocation, ReportTaskOutput,
                                           RegisterTaskManager, RequestPartitionLocation,
                                           TaskState, UpdateTaskExecutionState,
                                           job_master_endpoint)
from flinkyarn.gateways.resource_manager import (DisconnectTaskExecutor, NotifySlotAvailable,
                                                 RegisterTaskExecutor,
                                                 RequestApplicationTokens, ResourceManagerGateway,
                                                 TaskExecutorRegistration)
from flinkyarn.gateways.task_executor import (AllocatedSlotReport, AllocateSlot, CancelTask,
                                              ConfirmCheckpoint, DisconnectJobManager,
                                              DisconnectResourceManager, FreeSlot,
                                              JobHeartbeatRequest, ReleasePartitions,
                                              SubmitTask, TaskExecutorGateway,
                                              TriggerCheckpoint, UpdateDelegationTokens)
from flinkyarn.heartbeat import HeartbeatManager
from flinkyarn.metrics import TaskIOMetrics
from flinkyarn.prometheus import TASK_LABELS, io_families
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, InstanceID, IntermediateDataSetID,
                           JobID, JobMasterId, ResourceID, ResourceManagerId, SlotID)
from flinkyarn import registration as registration_retry
from flinkyarn.options import HeartbeatConfig, RegistrationConfig
from flinkyarn.resources import ResourceProfile
from flinkyarn.rpc.endpoint import RpcEndpoint, check_fencing
from flinkyarn.rpc.errors import NotFound, Rejected, RpcError
from flinkyarn.rpc.service import RpcService, with_timeout
from flinkyarn.slots import SlotReport
from taskexecutor.environment import TaskEnvironment
from taskexecutor.slot_table import SlotTaken, TaskSlotTable
from taskexecutor.task import (CheckpointConfirmed, CheckpointControl, Task, TaskFailure,
                               TriggerBarrier)

log = logging.getLogger(__name__)

# The AppMaster obtains them with a JVM of Hadoop's clients: seconds, more on a busy node.
APPLICATION_TOKENS_TIMEOUT = 120.0
# How often a cancelled task's thread is checked for its end.
CANCELLATION_POLL = 0.1
# Seconds between looks at whether a task took a confirmation its JobMaster waits for.
CONFIRMATION_POLL = 0.02


class RegistrationTimeout(Exception):
    """The TaskExecutor could not register at the ResourceManager in time: it exits."""


@dataclass(frozen=True)
class TaskExecutorConfig:
    num_slots: int
    total: ResourceProfile
    heartbeat: HeartbeatConfig
    registration: RegistrationConfig
    cancellation_interval: float = 30.0  # task.cancellation.interval
    cancellation_timeout: float = 30.0  # task.cancellation.timeout; 0: none

    @property
    def slot_profile(self) -> ResourceProfile:
        return ResourceProfile(self.total.cpu_cores / self.num_slots,
                               self.total.memory_mb // self.num_slots)

    @classmethod
    def from_configuration(cls, conf: Configuration) -> "TaskExecutorConfig":
        return cls(
            num_slots=conf.get(options.NUM_TASK_SLOTS),
            total=ResourceProfile(conf.get(options.TASK_MANAGER_CPU_CORES),
                                  conf.get(options.TASK_MANAGER_PROCESS_MEMORY) >> 20),
            heartbeat=HeartbeatConfig.from_configuration(conf),
            registration=RegistrationConfig.from_configuration(conf),
            cancellation_interval=conf.get(options.TASK_CANCELLATION_INTERVAL),
            cancellation_timeout=conf.get(options.TASK_CANCELLATION_TIMEOUT))


@dataclass
class ResourceManagerConnection:
    resource_manager_id: ResourceManagerId
    resource_id: ResourceID
    instance_id: InstanceID


@dataclass
class JobManagerConnection:
    job_id: JobID
    job_master_id: JobMasterId
    resource_id: ResourceID
    gateway: JobMasterGateway
    registration_id: InstanceID  # this TaskExecutor's registration at that JobMaster


def task_execution_state(job_master_id: JobMasterId, attempt_id: ExecutionAttemptID,
                         state: TaskState, failure: TaskFailure | None,
                         metrics: TaskIOMetrics | None = None) -> UpdateTaskExecutionState:
    """The report of a task's new state; a failure's kind and lost partitions travel as
    fields of their own, next to its cause; a final state carries the final metrics."""
    if failure is None:
        return UpdateTaskExecutionState(job_master_id, attempt_id, state, metrics=metrics)
    return UpdateTaskExecutionState(job_master_id, attempt_id, state, failure.cause,
                                    failure.kind, list(failure.lost_partitions), metrics)


ENDED_TASKS_SHOWN = 200


def _task_labels(task: Task) -> list[str]:
    d = task.deployment
    return [str(d.job_id), d.vertex_name, str(d.subtask_index), str(d.attempt_number)]


class TaskExecutor(RpcEndpoint):
    def __init__(self, rpc: RpcService, resource_id: ResourceID, resource_manager_address: str,
                 config: TaskExecutorConfig, environment: TaskEnvironment | None = None,
                 clock: Clock | None = None, task_factory: Callable[..., Task] = Task) -> None:
        """`task_factory` makes each submitted task, with Task's arguments (tests pass
        one whose tasks run on the loop as the test says, without a thread)."""
        super().__init__(rpc, "taskexecutor", TaskExecutorGateway, clock)
        self.resource_id = resource_id
        self.config = config
        self.environment = environment
        self._task_factory = task_factory
        self.data_address = environment.data_address if environment else ""
        self.metrics_address = ""  # its Prometheus endpoint, once started (__main__)
        # The final metrics of tasks that ended here, the newest ENDED_TASKS_SHOWN, for
        # the Prometheus endpoint: (labels, metrics).
        self._ended_metrics: collections.OrderedDict[ExecutionAttemptID, tuple[list[str], TaskIOMetrics]] = \
            collections.OrderedDict()
        self._rm: ResourceManagerGateway = rpc.connect(
            resource_manager_address, "resourcemanager", ResourceManagerGateway)
        self.slot_table = TaskSlotTable(resource_id, config.num_slots, config.slot_profile)
        self.rm_connection: ResourceManagerConnection | None = None
        self.job_connections: dict[JobID, JobManagerConnection] = {}
        self._connecting: dict[JobID, asyncio.Task] = {}
        # The JobMasterId of each job's JobMaster this TaskExecutor last registered at,
        # kept after the connection is released (its partitions may outlive its slots)
        # until the job's partitions go: it fences that JobMaster's disconnect and release.
        self.job_master_ids: dict[JobID, JobMasterId] = {}
        self.tasks: dict[str, Task] = {}
        # The last state update of each task still on its way: the next one waits for it.
        self._updates_in_flight: dict[str, asyncio.Task] = {}
        timeout = config.heartbeat.timeout
        self._rm_heartbeats: HeartbeatManager[None, SlotReport] = HeartbeatManager(
            resource_id, timeout, self._clock, on_timeout=self._resource_manager_timed_out,
            payload_for=lambda _rid: self.slot_table.report())
        self._jm_heartbeats: HeartbeatManager = HeartbeatManager(
            resource_id, timeout, self._clock, on_timeout=self._job_manager_timed_out)
        self.registered = asyncio.Event()
        # Set while no registration attempt waits for its answer (see allocate_slot).
        self._registration_answered = asyncio.Event()
        self._registration_answered.set()
        self._cancellations: set[str] = set()  # attempts whose stop is being watched
        self.fatal_error: str | None = None  # why this TaskExecutor failed and exits

    # ------------------------------------------------------------------ lifecycle

    async def on_start(self) -> None:
        if self.environment is not None:
            loop = asyncio.get_running_loop()
            self.environment.application_tokens = functools.partial(
                self._application_tokens, loop)
            # Spark that cannot start again after its JVM died: this process is unfit.
            self.environment.spark.on_fatal = \
                lambda cause: loop.call_soon_threadsafe(self.fail_fatally, cause)
            if self.environment.warm_drivers is not None:
                self.environment.warm_drivers.free_slots = self.slot_table.free_count
        self.spawn(self._register_at_resource_manager(), "registration")
        check = min(self.config.heartbeat.interval, self.config.heartbeat.timeout / 5)
        self.every(lambda: check, self._check_heartbeats, "heartbeat-timeouts")

    async def on_stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()

    def _check_heartbeats(self) -> None:
        self._rm_heartbeats.check_timeouts()
        self._jm_heartbeats.check_timeouts()

    # ------------------------------------------------------- ResourceManager side

    async def _register_at_resource_manager(self) -> None:
        """Retries as flinkyarn.registration says (attempt timeouts doubling, pauses after
        an error or a refusal); raises RegistrationTimeout (ending the process) after
        taskmanager.registration.timeout."""
        policy = self.config.registration
        attempts = registration_retry.RegistrationAttempts(policy)

        async def register() -> TaskExecutorRegistration:
            answered = self._registration_answered = asyncio.Event()
            try:
                rm = with_timeout(self._rm, attempts.timeout)
                registration = await rm.register_task_executor(RegisterTaskExecutor(
                    self.resource_id, self.rpc.address, self.slot_table.report(),
                    self.config.total, worker_id=self.resource_id,
                    data_address=self.data_address, metrics_address=self.metrics_address))
                self._connected_to_resource_manager(registration)
                return registration
            finally:
                answered.set()

        def retrying(attempt: int, error: BaseException, pause: float) -> None:
            log.info("registration attempt %d failed (%s); retrying in %g s", attempt, error, pause)

        try:
            await retry.retry_async(
                register, retry_on=RpcError, pauses=attempts.pause_after,
                deadline=retry.Deadline(policy.timeout, self._clock), on_retry=retrying,
                give_up=lambda error: isinstance(error, Rejected), sleep=self._clock.sleep)
        except retry.GaveUp as gave_up:
            if isinstance(gave_up.last_error, Rejected):
                # Flink's registration rejection: a fatal error, the process exits.
                self.fail_fatally(f"the ResourceManager rejected its registration: "
                                  f"{gave_up.last_error}")
                return
            raise RegistrationTimeout(
                f"TaskExecutor {self.resource_id} could not register at the "
                f"ResourceManager within {policy.timeout:g} s "
                f"({gave_up.attempts} attempts; last: {gave_up.last_error})") from None

    def _connected_to_resource_manager(self, registration: TaskExecutorRegistration) -> None:
        if registration.delegation_tokens:
            self._install_delegation_tokens(registration.delegation_tokens)
        self.rm_connection = ResourceManagerConnection(
            registration.resource_manager_id, registration.resource_manager_resource_id,
            registration.instance_id)
        self._rm_heartbeats.monitor_target(registration.resource_manager_resource_id)
        self.registered.set()
        log.info("registered at ResourceManager %s as %s",
                 registration.resource_manager_id, registration.instance_id)

    def _close_resource_manager_connection(self, cause: str) -> None:
        if self.rm_connection is None:
            return
        log.warning("closing the ResourceManager connection: %s; registering again", cause)
        self._rm_heartbeats.unmonitor_target(self.rm_connection.resource_id)
        self.rm_connection = None
        self.registered.clear()
        self.spawn(self._register_at_resource_manager(), "re-registration")

    def _resource_manager_timed_out(self, resource_id: ResourceID) -> None:
        self._close_resource_manager_connection(f"heartbeat of ResourceManager {resource_id} timed out")

    async def heartbeat_from_resource_manager(self, request: HeartbeatRequest) -> SlotReport:
        self._rm_heartbeats.answer_request(ResourceID(request.sender), None)
        return self.slot_table.report()

    async def disconnect_resource_manager(self, request: DisconnectResourceManager) -> Ack:
        current = self.rm_connection.resource_manager_id if self.rm_connection else None
        check_fencing(current, request.resource_manager_id, "ResourceManager id")
        self._close_resource_manager_connection(request.cause)
        return ACK

    async def update_delegation_tokens(self, request: UpdateDelegationTokens) -> Ack:
        current = self.rm_connection.resource_manager_id if self.rm_connection else None
        check_fencing(current, request.resource_manager_id, "ResourceManager id")
        self._install_delegation_tokens(request.tokens)
        return ACK

    def _install_delegation_tokens(self, data: bytes) -> None:
        """The AppMaster's newest tokens: for this process's HDFS calls, for the
        processes it starts from now on (a PySpark driver, Spark's JVM) and for the JVM
        already running."""
        tokens = kerberos.read_token_storage(data)
        if self.environment is None:  # the process's own temporary folder (scratch.py)
            kerberos.install_tokens(tokens, Path(tempfile.gettempdir()) / "tokens")
            return
        token_file = kerberos.install_tokens(tokens, self.environment.tmp_dir / "tokens")
        try:
            self.environment.spark.add_credentials(token_file)
        except Exception as error:  # Spark's JVM went away: the next one reads the file
            log.warning("could not hand new delegation tokens to Spark's JVM: %s", error)
        log.info("installed new delegation tokens: %s", ", ".join(t.kind for t in tokens))

    def _application_tokens(self, loop: asyncio.AbstractEventLoop, purpose: str) -> bytes:
        """For task threads: the AppMaster's new tokens for a YARN application a task
        submits; raises RpcError if it has none to give."""
        async def ask() -> bytes:
            connection = self.rm_connection
            if connection is None:
                raise RpcError("this TaskExecutor is not registered at a ResourceManager")
            rm = with_timeout(self._rm, APPLICATION_TOKENS_TIMEOUT)
            answer = await rm.request_application_tokens(
                RequestApplicationTokens(connection.resource_manager_id, self.resource_id, purpose))
            return answer.tokens
        return asyncio.run_coroutine_threadsafe(ask(), loop).result()

    async def allocate_slot(self, request: AllocateSlot) -> Ack:
        # The ResourceManager allocates this TaskExecutor's slots as soon as it has
        # registered them, so its call may overtake the registration's answer (Flink's
        # slot report follows the registration in a call of its own, which rules this
        # out). Refused as stale, the allocation would leave the slot unknown until the
        # next heartbeat and send the request to a new worker: it waits for the answer.
        await self._registration_answered.wait()
        current = self.rm_connection.resource_manager_id if self.rm_connection else None
        check_fencing(current, request.resource_manager_id, "ResourceManager id")
        if request.slot_id.resource_id != self.resource_id:
            raise SlotTaken(f"slot {request.slot_id} is not on {self.resource_id}")
        newly = self.slot_table.allocate(request.slot_id.slot_number, request.job_id,
                                         request.allocation_id)
        if newly:
            log.info("slot %d allocated to job %s (%s)", request.slot_id.slot_number,
                     request.job_id, request.allocation_id)
        self._offer_when_connected(request.job_id, request.job_master_address)
        return ACK

    async def _notify_slot_available(self, slot_index: int, allocation_id: AllocationID) -> None:
        if self.rm_connection is None:
            return  # the next registration's slot report tells the ResourceManager
        try:
            await self._rm.notify_slot_available(NotifySlotAvailable(
                self.rm_connection.instance_id, SlotID(self.resource_id, slot_index), allocation_id))
        except RpcError as error:
            log.info("could not tell the ResourceManager about the free slot: %s", error)

    # ------------------------------------------------------------- JobMaster side

    def _offer_when_connected(self, job_id: JobID, address: str) -> None:
        if job_id in self.job_connections:
            self.spawn(self._offer_slots(job_id), f"offer-{job_id}")
        elif job_id not in self._connecting:
            self._connecting[job_id] = self.spawn(self._connect_to_job_master(job_id, address),
                                                  f"connect-{job_id}")

    async def _connect_to_job_master(self, job_id: JobID, address: str) -> None:
        """Registers at a JobMaster this TaskExecutor has not seen yet, then offers."""
        gateway: JobMasterGateway = self.rpc.connect(address, job_master_endpoint(job_id),
                                                     JobMasterGateway)
        try:
            registration = await retry.retry_async(
                lambda: gateway.register_task_manager(RegisterTaskManager(
                    job_id, self.resource_id, self.rpc.address, self.data_address)),
                retry_on=RpcError,
                pauses=registration_retry.attempt_timeouts(self.config.registration),
                deadline=retry.Deadline(self.config.heartbeat.timeout, self._clock),
                give_up=lambda _error: not self.slot_table.slots_of_job(job_id),
                sleep=self._clock.sleep)
        except retry.GaveUp as gave_up:
            log.warning("giving up on the JobMaster of job %s: %s", job_id, gave_up.last_error)
            await self._free_job_slots(job_id, f"JobMaster unreachable: {gave_up.last_error}")
            return
        finally:
            self._connecting.pop(job_id, None)
        self.job_connections[job_id] = JobManagerConnection(
            job_id, registration.job_master_id, registration.job_master_resource_id, gateway,
            registration.registration_id)
        self.job_master_ids[job_id] = registration.job_master_id
        self._jm_heartbeats.monitor_target(registration.job_master_resource_id)
        await self._offer_slots(job_id)

    async def _offer_slots(self, job_id: JobID) -> None:
        connection = self.job_connections.get(job_id)
        offers = self.slot_table.offers_for(job_id)
        if connection is None or not offers:
            return
        try:
            accepted = await connection.gateway.offer_slots(
                OfferSlots(connection.job_master_id, self.resource_id, offers))
        except RpcError as error:
            log.warning("offering slots to job %s failed: %s", job_id, error)
            return  # the JobMaster heartbeat decides whether the job is gone
        accepted_ids = {offer.allocation_id for offer in accepted.offers}
        for offer in offers:
            if offer.allocation_id in accepted_ids:
                self.slot_table.mark_active(offer.allocation_id)
            else:
                await self._free_slot(offer.allocation_id, "offer rejected by the JobMaster")

    def metric_families(self):
        """For the Prometheus endpoint (its thread): every task running here and the
        last ones that ended here, with their I/O metrics."""
        for _ in range(5):  # the loop may add or drop a task meanwhile: look again
            try:
                running = list(self.tasks.values())
                ended = list(self._ended_metrics.items())
                break
            except RuntimeError:
                continue
        else:
            running, ended = [], []
        measured = {task.attempt_id: (_task_labels(task), task.io.snapshot())
                    for task in running}
        measured.update((attempt, value) for attempt, value in ended if attempt not in measured)
        return io_families("flinkyarn_task", TASK_LABELS, measured.values())

    async def heartbeat_from_job_master(self, request: JobHeartbeatRequest) -> AllocatedSlotReport:
        self._jm_heartbeats.answer_request(ResourceID(request.sender), None)
        return AllocatedSlotReport(request.job_id,
                                   self.slot_table.allocations_of_job(request.job_id),
                                   {task.attempt_id: task.io.snapshot()
                                    for task in self.tasks.values()
                                    if task.deployment.job_id == request.job_id})

    def _job_manager_timed_out(self, resource_id: ResourceID) -> None:
        for job_id, connection in list(self.job_connections.items()):
            if connection.resource_id == resource_id:
                self.spawn(self._close_job_connection(job_id, f"heartbeat of JobMaster "
                                                              f"{resource_id} timed out"),
                           f"close-{job_id}")

    def _job_master_id(self, job_id: JobID) -> JobMasterId | None:
        """What fences the calls of the job's JobMaster: the id of the one connected, or
        after the connection was released, of the last one (until the partitions go)."""
        connection = self.job_connections.get(job_id)
        return connection.job_master_id if connection else self.job_master_ids.get(job_id)

    async def disconnect_job_manager(self, request: DisconnectJobManager) -> Ack:
        check_fencing(self._job_master_id(request.job_id), request.job_master_id,
                      "JobMaster id")
        await self._close_job_connection(request.job_id, request.cause)
        return ACK

    async def _close_job_connection(self, job_id: JobID, cause: str) -> None:
        """The job's JobMaster is gone: its tasks stop, its slots and partitions go."""
        connection = self.job_connections.pop(job_id, None)
        if connection is not None:
            self._jm_heartbeats.unmonitor_target(connection.resource_id)
            log.warning("job %s: connection to its JobMaster closed: %s", job_id, cause)
        await self._free_job_slots(job_id, cause)
        self._release_partitions(job_id)

    async def release_partitions(self, request: ReleasePartitions) -> Ack:
        check_fencing(self._job_master_id(request.job_id), request.job_master_id,
                      "JobMaster id")
        self._release_partitions(request.job_id)
        return ACK

    def _release_partitions(self, job_id: JobID) -> None:
        self.job_master_ids.pop(job_id, None)
        if self.environment is not None:
            self.environment.partition_manager.release_job(job_id)

    async def _free_job_slots(self, job_id: JobID, cause: str) -> None:
        for allocation_id in self.slot_table.allocations_of_job(job_id):
            await self._free_slot(allocation_id, cause)

    # ----------------------------------------------------------------------- slots

    async def free_slot(self, request: FreeSlot) -> Ack:
        slot = self.slot_table.by_allocation(request.allocation_id)
        if slot is None:
            return ACK  # already free: idempotent
        job_id = slot.job_id
        assert job_id is not None  # an allocated slot's
        connection = self.job_connections.get(job_id)
        check_fencing(connection.job_master_id if connection else None, request.job_master_id,
                      "JobMaster id")
        await self._free_slot(request.allocation_id, request.cause)
        if not self.slot_table.slots_of_job(job_id):
            self._release_job_connection(job_id)
        return ACK

    def _release_job_connection(self, job_id: JobID) -> None:
        """The job holds no slot here any more: stop watching its JobMaster."""
        connection = self.job_connections.pop(job_id, None)
        if connection is not None:
            self._jm_heartbeats.unmonitor_target(connection.resource_id)

    async def _free_slot(self, allocation_id: AllocationID, cause: str) -> None:
        freed = self.slot_table.free(allocation_id)
        if freed is None:
            return
        for attempt_id in freed.tasks:
            task = self.tasks.get(attempt_id)
            if task is not None:
                self._cancel(task)
        log.info("slot %d freed (%s): %s", freed.index, allocation_id, cause)
        if self.environment is not None and self.environment.warm_drivers is not None:
            self.environment.warm_drivers.replenish()
        await self._notify_slot_available(freed.index, allocation_id)

    # ----------------------------------------------------------------------- tasks

    async def submit_task(self, request: SubmitTask) -> Ack:
        deployment = request.deployment
        connection = self.job_connections.get(deployment.job_id)
        check_fencing(connection.job_master_id if connection else None, request.job_master_id,
                      "JobMaster id")
        assert connection is not None  # check_fencing refuses a call without one
        if deployment.attempt_id in self.tasks:
            return ACK
        self.slot_table.add_task(deployment.job_id, deployment.allocation_id, deployment.attempt_id)
        loop = asyncio.get_running_loop()
        task = self._task_factory(deployment, lambda t, state, failure: loop.call_soon_threadsafe(
            self._task_state_changed, t, state, failure), self.environment,
            self._partition_locator(connection, loop),
            self._output_reporter(connection, loop, deployment.attempt_id),
            _CheckpointResponder(self, connection, loop, deployment.attempt_id))
        self.tasks[deployment.attempt_id] = task
        task.start()
        return ACK

    async def trigger_checkpoint(self, request: TriggerCheckpoint) -> Ack:
        self._post(request.job_master_id, request.attempt_id,
                   TriggerBarrier(request.checkpoint_id, request.timestamp))
        return ACK

    async def confirm_checkpoint(self, request: ConfirmCheckpoint) -> Ack:
        self._post(request.job_master_id, request.attempt_id,
                   CheckpointConfirmed(request.checkpoint_id))
        task = self.tasks.get(request.attempt_id)
        while request.wait and task is not None and task.is_alive() \
                and task.confirmed < request.checkpoint_id:
            await self._clock.sleep(CONFIRMATION_POLL)  # the caller's timeout bounds it
        return ACK

    def _post(self, job_master_id: JobMasterId, attempt_id: ExecutionAttemptID,
              control: CheckpointControl) -> None:
        task = self.tasks.get(attempt_id)
        if task is None:
            raise NotFound(f"task {attempt_id} does not run on TaskExecutor {self.resource_id}")
        connection = self.job_connections.get(task.deployment.job_id)
        check_fencing(connection.job_master_id if connection else None, job_master_id,
                      "JobMaster id")
        task.post_control(control)

    async def cancel_task(self, request: CancelTask) -> Ack:
        task = self.tasks.get(request.attempt_id)
        if task is None:
            return ACK
        connection = self.job_connections.get(task.deployment.job_id)
        check_fencing(connection.job_master_id if connection else None, request.job_master_id,
                      "JobMaster id")
        self._cancel(task)
        return ACK

    def _cancel(self, task: Task) -> None:
        """Cancels `task` and watches it stop (Flink's task canceler and its watchdog):
        every task.cancellation.interval its thread's stack is logged and it is asked
        again; after task.cancellation.timeout this TaskExecutor fails fatally, since
        only its end frees the slot of a task that ignores cancellation."""
        task.cancel()
        if task.attempt_id in self._cancellations or self.stopping:
            return
        self._cancellations.add(task.attempt_id)
        self.spawn(self._watch_cancellation(task), f"cancel-{task.attempt_id}")

    async def _watch_cancellation(self, task: Task) -> None:
        interval = self.config.cancellation_interval
        timeout = self.config.cancellation_timeout
        cancelled = self._clock.monotonic()
        next_report = cancelled + interval
        try:
            while task.is_alive():
                await asyncio.sleep(CANCELLATION_POLL)
                now = self._clock.monotonic()
                if 0 < timeout <= now - cancelled and task.is_alive():
                    self.fail_fatally(
                        f"task {task.name} did not stop within {timeout:g} s of its "
                        f"cancellation (task.cancellation.timeout); it was at:\n"
                        f"{task.where()}")
                    return
                if now >= next_report and task.is_alive():
                    log.warning("task %s has not stopped %.0f s after its cancellation; "
                                "it is at:\n%s", task.name, now - cancelled, task.where())
                    task.cancel()
                    next_report = now + interval
        finally:
            self._cancellations.discard(task.attempt_id)

    def fail_fatally(self, cause: str) -> None:
        """Flink's fatal error of a TaskExecutor: it tells its JobMasters and the
        ResourceManager why it goes (they free its slots at once, not after a heartbeat
        timeout), then stops; the process exits non-zero (on YARN its container ends and
        the ResourceManager replaces it if slots are still needed)."""
        if self.fatal_error is not None:
            return
        self.fatal_error = cause
        log.error("fatal error, this TaskExecutor exits: %s", cause)
        self.spawn(self._leave(f"TaskExecutor {self.resource_id} failed: {cause}"), "fatal-error")

    async def _leave(self, cause: str) -> None:
        calls = [connection.gateway.disconnect_task_manager(DisconnectTaskManager(
            connection.job_master_id, self.resource_id, cause,
            registration_id=connection.registration_id))
            for connection in self.job_connections.values()]
        if (rm := self.rm_connection) is not None:
            calls.append(self._rm.disconnect_task_executor(DisconnectTaskExecutor(
                rm.resource_manager_id, rm.instance_id, self.resource_id, cause)))
        results = await asyncio.gather(*(self._clock.wait_for(call, 5.0) for call in calls),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("could not say goodbye: %s", result)
        self.stop()

    def _partition_locator(self, connection: JobManagerConnection,
                           loop: asyncio.AbstractEventLoop):
        """For task threads: asks the job's JobMaster where a producer partition is."""
        def locate(result_id: IntermediateDataSetID, partition_number: int) -> PartitionLocation:
            call = connection.gateway.request_partition_location(RequestPartitionLocation(
                connection.job_master_id, result_id, partition_number))
            return asyncio.run_coroutine_threadsafe(call, loop).result()
        return locate

    def _output_reporter(self, connection: JobManagerConnection,
                         loop: asyncio.AbstractEventLoop, attempt_id: ExecutionAttemptID):
        """For task threads: sends what a task printed to the job's JobMaster."""
        def report(chunks: list[OutputChunk], spark_application: str | None,
                   spark_tracking_url: str | None) -> None:
            call = connection.gateway.report_task_output(ReportTaskOutput(
                connection.job_master_id, attempt_id, chunks, spark_application,
                spark_tracking_url))
            asyncio.run_coroutine_threadsafe(call, loop).result()
        return report

    def _task_state_changed(self, task: Task, state: TaskState,
                            failure: TaskFailure | None) -> None:
        """Sends the change to the JobMaster (with `failure` for FAILED): each task's
        changes in order, different tasks' changes independently of each other."""
        self.assert_on_loop()
        attempt_id = task.attempt_id
        if self.stopping:
            # Shutting down: the JobMaster learns from the lost connection instead.
            log.info("not reporting %s %s: this TaskExecutor is stopping",
                     task.deployment.vertex_name, state.value)
            update = None
        else:
            previous = self._updates_in_flight.get(attempt_id)
            final = state in (TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELED)
            metrics = task.io.snapshot() if final else None
            update = self.spawn(self._send_task_update(previous, task.deployment.job_id,
                                                       attempt_id, state, failure, metrics),
                                f"update-{attempt_id}")
        if state in (TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELED):
            self._ended_metrics[attempt_id] = (_task_labels(task), task.io.snapshot())
            while len(self._ended_metrics) > ENDED_TASKS_SHOWN:
                self._ended_metrics.popitem(last=False)
            self.tasks.pop(attempt_id, None)
            self.slot_table.remove_task(attempt_id)
            self._updates_in_flight.pop(attempt_id, None)
        elif update is not None:
            self._updates_in_flight[attempt_id] = update

    async def _send_task_update(self, previous: asyncio.Task | None, job_id: JobID,
                                attempt_id: ExecutionAttemptID, state: TaskState,
                                failure: TaskFailure | None,
                                metrics: TaskIOMetrics | None = None) -> None:
        if previous is not None:
            await previous
        connection = self.job_connections.get(job_id)
        if connection is None:
            return
        try:
            await connection.gateway.update_task_execution_state(
                task_execution_state(connection.job_master_id, attempt_id, state, failure,
                                     metrics))
        except RpcError as error:
            log.warning("could not report %s of %s to its JobMaster: %s", state.value,
                        attempt_id, error)


class _CheckpointResponder:
    """A task's answers about checkpoints, sent to its JobMaster from the TaskExecutor's
    loop (the task thread does not wait for them)."""

    def __init__(self, executor: TaskExecutor, connection: JobManagerConnection,
                 loop: asyncio.AbstractEventLoop, attempt_id: ExecutionAttemptID) -> None:
        self._executor = executor
        self._connection = connection
        self._loop = loop
        self._attempt_id = attempt_id

    def acknowledge(self, checkpoint_id: int, snapshot: TaskStateSnapshot) -> None:
        self._send(self._connection.gateway.acknowledge_checkpoint(AcknowledgeCheckpoint(
            self._connection.job_master_id, self._attempt_id, checkpoint_id, snapshot)),
            checkpoint_id)

    def decline(self, checkpoint_id: int, reason: str) -> None:
        self._send(self._connection.gateway.decline_checkpoint(DeclineCheckpoint(
            self._connection.job_master_id, self._attempt_id, checkpoint_id, reason)),
            checkpoint_id)

    def _send(self, call, checkpoint_id: int) -> None:
        async def send() -> None:
            try:
                await call
            except RpcError as error:  # the checkpoint times out at the JobMaster
                log.warning("could not answer checkpoint %d of task %s: %s", checkpoint_id,
                            self._attempt_id, error)

        self._loop.call_soon_threadsafe(
            lambda: self._executor.spawn(send(), f"checkpoint-{checkpoint_id}-{self._attempt_id}"))


def _conforms_to_gateway(endpoint: TaskExecutor) -> TaskExecutorGateway:
    """Never called: the type checker (integration/run-tests) checks here that the
    TaskExecutor has every method of its gateway, with compatible types."""
    return endpoint
