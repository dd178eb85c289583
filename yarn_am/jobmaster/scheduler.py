"""The JobMaster's scheduler: which subtasks to deploy when, into which shared slot, and
how the job ends.

A pure state machine over an ExecutionGraph: each input method takes an event (and
`now`, monotonic seconds) and returns the commands the JobMaster endpoint must carry
out, in order. No I/O, no clock; the endpoint calls it on its own loop only, after
start(). Reports from TaskExecutors are fenced by execution attempt id: a report about
an attempt that is not current, or already terminal, returns no commands.

Slot sharing: subtask i of every vertex in slot sharing group G runs in shared slot
(G, i), requested as "G/i"; a vertex without a group gets a slot per subtask, requested
as "<vertex id>#i". Two subtasks of one vertex therefore never share a slot. The
profile asked for is the sum of the profiles of the vertices using the slot, UNKNOWN if
any of them is unknown. A shared slot lives through

    UNREQUESTED -> PENDING (RequestSlot) -> ALLOCATED (slot_assigned) -> RELEASED
    PENDING -> RELEASED (request failed, or CancelSlotRequest)
    ALLOCATED -> RELEASED (ReleaseSlot once all its subtasks are terminal, or slot lost)
    RELEASED -> PENDING (a subtask of it not yet run is scheduled after a slot loss, or
                         the slot was lost while a subtask of it waited to be deployed)

and stays ALLOCATED while any of its subtasks is not terminal, so with lazy scheduling
a consumer is deployed straight into the slot its producer finished in. Slot events
name requests by id; an id the scheduler never issued raises KeyError (a caller bug).

Deployment is per pipelined region, in bulk (Flink's DefaultScheduler waits for all
slots of what it schedules before deploying any of it): a subtask goes

    CREATED -> SCHEDULED (its region is scheduled: every region at start() with EAGER;
                          with LAZY_FROM_SOURCES once its blocking inputs are complete;
                          after a restart as at start; missing shared slots requested)
    SCHEDULED -> DEPLOYING (DeployTask) only together with every other SCHEDULED
                          subtask of its region, once all their shared slots are
                          ALLOCATED (whichever region asked for a slot; a slot still
                          held counts), in topological order, producers first
    SCHEDULED -> FAILED   (the request of its own slot failed: one failure, as below;
                          the failover cancels the rest of its region with it)
    SCHEDULED -> CANCELED (cancelled before deployment: at once)

so the consumers of a pipelined region never run while a producer of it waits for a
TaskExecutor that is still starting. A slot lost while subtasks of it wait leaves them
SCHEDULED and is requested again; their region waits for it like for the others.

Failures and restarts. A task failure is a FAILED report (also a failed deployment,
which the JobMaster reports as FAILED), a lost slot with tasks deployed in it, or a
failed slot request with tasks waiting for it; the tasks failed by one event are one
failure. For each failure, while the job is RUNNING:

    1. root_cause becomes "<task> failed: <error>"; the restart strategy is notified.
    2. The strategy says no: today's path. The job goes FAILING with this cause, every
       task is cancelled, FAILED once all are terminal.
    3. It says yes: the failover strategy names the subtasks to restart (those still
       CREATED are left alone); a RestartRecord is kept. Their tasks are cancelled
       (CancelTask; never deployed ones at once), and ScheduleRestart(delay, token) is
       emitted. The JobMaster calls restart_due(token, now) `delay` seconds later; the
       restart happens then, or when the last of the subtasks becomes terminal if that
       is later (Flink's DefaultScheduler: the delay runs while the tasks cancel). The
       subtasks get new attempts (reset_for_new_execution: new attempt id, attempt
       number + 1), and are scheduled as at start: EAGER at once, LAZY region by region
       once their blocking inputs are complete again. Their shared slots are requested
       again if they were released meanwhile, and a restarted region is deployed only
       once all of them are allocated again (slots still held count at once).

The job stays RUNNING through restarts (JobStatus.RESTARTING is not used: the pending
restarts are this Scheduler's state, see pending_restarts). A later failure whose set
overlaps a pending restart takes its subtasks over (Flink's vertex versioning): the
older restart, when due, restarts only the subtasks still its own. A FAILED report of
kind PARTITION (FailureKind: the task could not read an upstream partition, as its
TaskExecutor tells from the exception; the error text is never parsed) marks the
partitions in its `lost_partitions` lost; so does task_executor_lost for the finished
subtasks whose output that TaskExecutor kept. Lost outputs make the region strategy
re-run their producers. Every other failure (a lost slot, a failed deployment or slot
request, the task's own error) is of kind TASK. cancel() and a job failure
drop every pending restart: a restart_due for it afterwards returns nothing.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flinkyarn.checkpoints import TaskRestore
from flinkyarn.key_groups import DEFAULT_MAX_PARALLELISM
from flinkyarn.gateways.job_master import FailureKind
from flinkyarn.gateways.task_executor import (ConsumedPartition, ProducedPartition,
                                              TaskDeploymentDescriptor)
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, ExecutionVertexID,
                           IntermediateDataSetID, IntermediateResultPartitionID, JobVertexID,
                           ResourceID)
from flinkyarn.jobgraph import DistributionPattern, JobGraph, ResultPartitionType, ScheduleMode
from flinkyarn.resources import UNKNOWN, ResourceProfile
from flinkyarn.rpc.security import partition_ticket
from yarn_am.jobmaster import failover_strategy
from yarn_am.jobmaster.execution_graph import (DEPLOYMENT_CHAIN, ExecutionGraph,
                                               ExecutionState, ExecutionVertex,
                                               IntermediateResult, JobStatus, SlotInfo)
from yarn_am.jobmaster.failover_strategy import FailoverStrategy
from yarn_am.jobmaster.restart_strategy import (NoRestartBackoffTimeStrategy,
                                                RestartBackoffTimeStrategy)

__all__ = ["CancelSlotRequest", "CancelTask", "Command", "ConsumedPartition", "DeployTask",
           "JobTerminated", "ProducedPartition", "ReleaseSlot", "RequestSlot",
           "RestartRecord", "ScheduleRestart", "Scheduler", "SlotInfo", "SlotRequestId",
           "TaskDeploymentDescriptor", "VertexSummary"]

RESTART_HISTORY_SIZE = 16
"""How many RestartRecords a Scheduler keeps (the latest); as Flink's default
web.exception-history-size. `restarts` counts them all."""

SlotRequestId = str

_S = ExecutionState
_REPORTABLE = frozenset({_S.INITIALIZING, _S.RUNNING, _S.FINISHED, _S.FAILED, _S.CANCELED})
_ON_TASK_EXECUTOR = frozenset({_S.DEPLOYING, _S.INITIALIZING, _S.RUNNING})


# ---- commands ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RequestSlot:
    """Ask the SlotPool for a slot; answer with slot_assigned or slot_request_failed."""

    request_id: SlotRequestId
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class CancelSlotRequest:
    """The pending request is no longer wanted; no answer is expected."""

    request_id: SlotRequestId


@dataclass(frozen=True, slots=True)
class ReleaseSlot:
    """The slot of this request is no longer used; the SlotPool may cache it."""

    request_id: SlotRequestId


@dataclass(frozen=True, slots=True)
class DeployTask:
    """Submit the task to the TaskExecutor at task_executor_address; its state changes
    come back as task_state_changed (a failed submission: report it as FAILED)."""

    descriptor: TaskDeploymentDescriptor
    task_executor_address: str


@dataclass(frozen=True, slots=True)
class CancelTask:
    """Ask the TaskExecutor to cancel the attempt; it answers with a CANCELED report.
    If the TaskExecutor is gone, report the slot lost instead."""

    attempt_id: ExecutionAttemptID
    resource_id: ResourceID
    allocation_id: AllocationID
    task_executor_address: str


@dataclass(frozen=True, slots=True)
class ScheduleRestart:
    """Call restart_due(token, now) on the JobMaster's loop `delay` seconds from now
    (no earlier). Drop the timer when the job terminates; a stale token is harmless."""

    delay: float
    token: int


@dataclass(frozen=True, slots=True)
class JobTerminated:
    """The job reached a globally terminal status; always the last command."""

    status: JobStatus
    cause: str | None


Command = (RequestSlot | CancelSlotRequest | ReleaseSlot | DeployTask | CancelTask
           | ScheduleRestart | JobTerminated)


@dataclass(frozen=True, slots=True)
class RestartRecord:
    """One restart decided after a failure, as the REST API shows it.

    `at` is the Scheduler's `now` of the failure (monotonic seconds: convert to wall
    time where it is shown); `restarted` the subtasks restarted, in topological order;
    `failed_task` the task name of the (first) failed subtask, "NAME (i/n)"."""

    number: int
    at: float
    cause: str
    restarted: tuple[ExecutionVertexID, ...]
    failed_task: str
    delay: float


@dataclass(frozen=True, slots=True)
class VertexSummary:
    """One job vertex as the REST API shows it."""

    vertex_id: JobVertexID
    name: str
    parallelism: int
    state: ExecutionState
    state_counts: dict[ExecutionState, int]


class _SlotState(enum.Enum):
    UNREQUESTED = "unrequested"
    PENDING = "pending"
    ALLOCATED = "allocated"
    RELEASED = "released"


@dataclass(eq=False, slots=True)
class _SharedSlot:
    request_id: SlotRequestId
    members: list[ExecutionVertexID]  # at most one subtask per job vertex
    profile: ResourceProfile
    state: _SlotState = _SlotState.UNREQUESTED
    slot: SlotInfo | None = None


@dataclass(eq=False, slots=True)
class _PendingRestart:
    token: int
    vertices: list[ExecutionVertexID]  # topological order; some may be taken over later
    due: bool = False  # restart_due came; waits for the last subtask to be terminal


def slots_at_once_from(graph: JobGraph) -> int:
    """What Scheduler.slots_at_once will be, from the job graph alone (cheap: no
    ExecutionGraph, whose ALL_TO_ALL edges cost parallelism squared). Vertices joined by
    PIPELINED edges of which one is ALL_TO_ALL form one region of all their subtasks:
    per slot sharing group the largest parallelism, per vertex without a group all of it;
    other regions hold one subtask per vertex."""
    parent = {vertex.id: vertex.id for vertex in graph.vertices}

    def find(vid):
        while parent[vid] != vid:
            parent[vid] = parent[parent[vid]]
            vid = parent[vid]
        return vid

    wide = set()
    for edge in graph.edges:
        if edge.partition_type is ResultPartitionType.PIPELINED:
            parent[find(edge.source)] = find(edge.target)
    for edge in graph.edges:
        if (edge.partition_type is ResultPartitionType.PIPELINED
                and edge.distribution is DistributionPattern.ALL_TO_ALL):
            wide.add(find(edge.source))
    groups: dict[object, dict[object, int]] = {}
    for vertex in graph.vertices:
        root = find(vertex.id)
        width = vertex.parallelism if root in wide else 1
        group = vertex.slot_sharing_group or ("vertex", vertex.id)
        slots = groups.setdefault(root, {})
        slots[group] = max(slots.get(group, 0), width)
    return max((sum(slots.values()) for slots in groups.values()), default=0)


class Scheduler:
    """Schedules one job's ExecutionGraph; see the module docstring for the contract.

    Lifecycle decisions (JobStatus): start() RUNNING; all subtasks FINISHED -> FINISHED;
    a task failure the restart strategy does not allow to restart -> FAILING, every
    other task cancelled, FAILED once all are terminal; a failure it allows: restart
    (module docstring), the job stays RUNNING; cancel() -> CANCELLING, CANCELED once
    all are terminal. JobTerminated is emitted exactly once.

    `failover` is a failover strategy or its option value (full, region,
    restart-individual); it is validated here, so a job it cannot serve is refused with
    ValueError when the JobMaster builds its Scheduler. `restart_strategy` is this job's
    own (strategies keep failure history); the default never restarts.
    """

    def __init__(self, execution_graph: ExecutionGraph,
                 failover: str | FailoverStrategy = "full",
                 restart_strategy: RestartBackoffTimeStrategy | None = None,
                 data_key: bytes | None = None, checkpoint_dir: str = "",
                 restore_for: Callable[[ExecutionVertexID], TaskRestore | None] | None = None,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> None:
        self._graph = execution_graph
        self._max_parallelism = max_parallelism  # the job's key groups, for every task
        # Checkpoints: where a task writes its state, and what a (re)deployed subtask
        # starts from (the latest completed checkpoint's, when there is one).
        self._checkpoint_dir = checkpoint_dir
        self._restore_for = restore_for
        # The job's data-plane key (security.partition_ticket): producers get it, each
        # consumer the tickets of what it reads.
        self._data_key = data_key or secrets.token_bytes(32)
        self._failover = (failover_strategy.create(failover) if isinstance(failover, str)
                          else failover)
        self._failover.validate(execution_graph)
        self._restart_strategy = restart_strategy or NoRestartBackoffTimeStrategy()
        self._slots: dict[SlotRequestId, _SharedSlot] = {}
        self._slot_of: dict[ExecutionVertexID, _SharedSlot] = {}
        self._assign_shared_slots()
        self._order = {v.id: n for n, v in enumerate(execution_graph.execution_vertices())}
        self._regions = execution_graph.pipelined_regions()
        self._region_index = {evid: n for n, region in enumerate(self._regions)
                              for evid in region}
        self._region_order = [sorted(region, key=self._order.__getitem__)
                              for region in self._regions]
        self._region_slots = [list(dict.fromkeys(self._slot_of[evid] for evid in order))
                              for order in self._region_order]
        self._region_cursor = [0] * len(self._regions)  # see _region_waits_for_a_slot
        self._region_inputs = [self._blocking_inputs(region) for region in self._regions]
        self._scheduled_regions: set[int] = set()
        self._pending: dict[int, _PendingRestart] = {}
        self._restart_owner: dict[ExecutionVertexID, int] = {}  # subtask -> its token
        self._next_token = 1
        self._lost_outputs: set[ExecutionVertexID] = set()
        self._restarts = 0
        self._restart_records: list[RestartRecord] = []
        self._root_cause: str | None = None
        self._stopping = False  # stop(): a cancellation that ends the job FINISHED

    # ---- inputs -------------------------------------------------------------------------

    def start(self, now: float) -> list[Command]:
        """Job CREATED -> RUNNING; request slots for what the ScheduleMode says to run."""
        self._graph.transition_to(JobStatus.RUNNING, now)
        if self._graph.schedule_mode is ScheduleMode.EAGER:
            self._scheduled_regions = set(range(len(self._regions)))
            return self._schedule([v.id for v in self._graph.execution_vertices()], now)
        return self._schedule_ready_regions(now)

    def slot_assigned(self, request_id: SlotRequestId, slot: SlotInfo,
                      now: float) -> list[Command]:
        """The SlotPool fulfilled a RequestSlot: deploy the regions of the subtasks
        waiting for it whose other slots are all allocated too (nothing while one is
        missing). A slot for a request no longer wanted is given straight back
        (ReleaseSlot)."""
        shared = self._slots[request_id]
        if shared.state is _SlotState.ALLOCATED:
            raise ValueError(f"slot request {request_id} was already fulfilled")
        if shared.state is not _SlotState.PENDING:
            return [ReleaseSlot(request_id)]
        shared.state, shared.slot = _SlotState.ALLOCATED, slot
        return self._deploy_ready_regions(
            [m for m in shared.members if self._graph.vertex(m).state is _S.SCHEDULED], now)

    def slot_request_failed(self, request_id: SlotRequestId, cause: str,
                            now: float) -> list[Command]:
        """A RequestSlot cannot be fulfilled: the subtasks waiting for it fail."""
        shared = self._slots[request_id]
        if shared.state is not _SlotState.PENDING:
            return []  # cancelled meanwhile
        shared.state = _SlotState.RELEASED
        waiting = [m for m in shared.members if self._graph.vertex(m).state is _S.SCHEDULED]
        return self._fail_tasks(waiting, f"no slot for request {request_id}: {cause}", now)

    def slot_lost(self, request_id: SlotRequestId, cause: str, now: float) -> list[Command]:
        """An allocated slot is gone (TaskExecutor lost, slot taken back): the subtasks
        deployed in it fail (one failure). Its subtasks waiting for the rest of their
        region's slots (SCHEDULED, not failed over by that failure) stay waiting, and
        the slot is requested again at once; its subtasks not yet scheduled will ask for
        it when they are. Outputs of finished subtasks lost with their TaskExecutor are
        task_executor_lost's business: call it first."""
        shared = self._slots[request_id]
        if shared.state is not _SlotState.ALLOCATED:
            return []
        shared.state, shared.slot = _SlotState.RELEASED, None
        deployed = [m for m in shared.members
                    if self._graph.vertex(m).state in _ON_TASK_EXECUTOR | {_S.CANCELING}]
        commands = self._fail_tasks(deployed, f"slot {request_id} lost: {cause}", now)
        if shared.state is _SlotState.RELEASED and any(
                self._graph.vertex(m).state is _S.SCHEDULED for m in shared.members):
            shared.state = _SlotState.PENDING
            commands.append(RequestSlot(shared.request_id, shared.profile))
        return commands

    def task_state_changed(self, attempt_id: ExecutionAttemptID, state: ExecutionState,
                           error: str | None, now: float, *,
                           failure_kind: FailureKind = FailureKind.TASK,
                           lost_partitions: Sequence[IntermediateResultPartitionID] = (),
                           ) -> list[Command]:
        """A TaskExecutor reports an attempt INITIALIZING, RUNNING, FINISHED, FAILED or
        CANCELED. Stale attempts, reports after a terminal state and progress older than
        what is known are dropped. A terminal report for a CANCELING attempt completes
        its cancellation; CANCELED without being asked counts as a failure (of kind
        TASK). For FAILED, `failure_kind` and `lost_partitions` (this job's partitions
        the task could not read; others are ignored) steer the failover, `error` is
        only shown."""
        if state not in _REPORTABLE:
            raise ValueError(f"a TaskExecutor cannot report {state.value}")
        execution = self._graph.execution(attempt_id)
        if execution is None or not self._graph.is_current(execution) \
                or execution.state.is_terminal:
            return []
        if execution.state is _S.CANCELING:
            if not state.is_terminal:
                return []
            execution.transition(_S.CANCELED, now)
            return self._settle(now, execution.vertex_id)
        if state is _S.CANCELED:
            state, error = _S.FAILED, error or "canceled without the JobMaster asking"
            failure_kind, lost_partitions = FailureKind.TASK, ()
        if state is _S.FAILED:
            return self._fail_tasks([execution.vertex_id], error or "unknown error", now,
                                    failure_kind, lost_partitions)
        if DEPLOYMENT_CHAIN.index(state) <= DEPLOYMENT_CHAIN.index(execution.state):
            return []
        execution.transition(state, now)
        if not state.is_terminal:
            # INITIALIZING, RUNNING: nothing _settle looks at became possible (it waits
            # for terminal subtasks); skipping it keeps a start of n subtasks O(n).
            return []
        commands: list[Command] = []
        if state is _S.FINISHED and self._graph.status is JobStatus.RUNNING:
            commands += self._schedule_ready_regions(now)
        return commands + self._settle(now, execution.vertex_id)

    def stop(self, now: float) -> list[Command]:
        """The job stops after its savepoint (Flink's stop-with-savepoint): as cancel(),
        but it ends FINISHED."""
        self._stopping = True
        return self.cancel(now)

    def cancel(self, now: float) -> list[Command]:
        """The user cancels the job: every task is cancelled, pending restarts are
        dropped; CANCELED once all are terminal. Idempotent; a job already terminal
        stays as it is."""
        if self._graph.status.is_terminal or self._graph.status is JobStatus.CANCELLING:
            return []
        self._graph.transition_to(JobStatus.CANCELLING, now)
        self._drop_pending_restarts()
        return self._cancel_all(now) + self._settle(now)

    def restart_due(self, token: int, now: float) -> list[Command]:
        """The delay of ScheduleRestart(token) has passed: restart its subtasks (new
        attempts, scheduled as at start) once all of them are terminal; at once if they
        are. A token that is not pending (job cancelled or failed meanwhile, already
        due) returns nothing."""
        pending = self._pending.get(token)
        if pending is None or pending.due:
            return []
        pending.due = True
        return self._settle(now)

    def task_executor_lost(self, resource_id: ResourceID, now: float) -> list[Command]:
        """The TaskExecutor is gone, and with it the blocking partitions it kept for
        FINISHED subtasks: they are marked lost, so a region restart re-runs their
        producers. Call it before the slot losses of that TaskExecutor. Restarts nothing
        by itself (as Flink, the consumers that need the data fail reading it): returns
        no commands today."""
        for vertex in self._graph.execution_vertices():
            execution = vertex.current_execution
            if execution.state is _S.FINISHED and execution.slot is not None \
                    and execution.slot.resource_id == resource_id \
                    and vertex.produced_partitions:
                self._lost_outputs.add(vertex.id)
        return []

    # ---- queries ------------------------------------------------------------------------

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self._graph

    @property
    def job_status(self) -> JobStatus:
        return self._graph.status

    @property
    def slots_at_once(self) -> int:
        """The most slots the job holds at one time for a single pipelined region (whose
        subtasks are deployed together): fewer, and the job could never run."""
        return max((len(slots) for slots in self._region_slots), default=0)

    @property
    def failure_cause(self) -> str | None:
        """Why the job FAILED (set when it starts FAILING)."""
        return self._graph.failure_cause

    @property
    def root_cause(self) -> str | None:
        """The latest failure handled while RUNNING, "<task> failed: <error>"; None
        before any. Failures while FAILING or CANCELLING are consequences, not causes."""
        return self._root_cause

    @property
    def restarts(self) -> int:
        """How many restarts were decided (Flink's numRestarts)."""
        return self._restarts

    def restart_records(self) -> list[RestartRecord]:
        """The latest RESTART_HISTORY_SIZE restarts, oldest first."""
        return list(self._restart_records)

    @property
    def pending_restarts(self) -> int:
        """Restarts decided and not yet carried out (the job is restarting)."""
        return len(self._pending)

    def vertex_states(self) -> dict[JobVertexID, dict[ExecutionState, int]]:
        return {v.id: v.state_counts() for v in self._graph.vertices_in_topological_order()}

    def vertex_summaries(self) -> list[VertexSummary]:
        return [VertexSummary(v.id, v.name, v.parallelism, v.aggregate_state(),
                              v.state_counts())
                for v in self._graph.vertices_in_topological_order()]

    def slot_request_id(self, evid: ExecutionVertexID) -> SlotRequestId:
        """The shared slot subtask `evid` runs in."""
        return self._slot_of[evid].request_id

    # ---- decisions ----------------------------------------------------------------------

    def _assign_shared_slots(self) -> None:
        for ejv in self._graph.vertices_in_topological_order():
            group = ejv.job_vertex.slot_sharing_group
            for vertex in ejv.task_vertices:
                index = vertex.id.subtask_index
                request_id = f"{group}/{index}" if group is not None else str(vertex.id)
                # Unambiguous: the index after the last "/" or "#" ends every id.
                shared = self._slots.setdefault(request_id,
                                                _SharedSlot(request_id, [], UNKNOWN))
                shared.members.append(vertex.id)
                self._slot_of[vertex.id] = shared
        for shared in self._slots.values():
            profiles = [self._graph.vertex(m).job_vertex.resources for m in shared.members]
            if not any(p.is_unknown() for p in profiles):
                shared.profile = ResourceProfile(sum(p.cpu_cores for p in profiles),
                                                 sum(p.memory_mb for p in profiles))

    def _blocking_inputs(self, region: frozenset[ExecutionVertexID]) -> set[IntermediateDataSetID]:
        return {p.result.id for evid in region
                for p in self._graph.vertex(evid).consumed_partitions
                if p.result.partition_type is ResultPartitionType.BLOCKING
                and p.producer not in region}

    def _schedule_ready_regions(self, now: float) -> list[Command]:
        ready: set[ExecutionVertexID] = set()
        for index, region in enumerate(self._regions):
            if index not in self._scheduled_regions and all(
                    self._result_ready(self._graph.result(r))
                    for r in self._region_inputs[index]) and all(
                    self._graph.vertex(evid).state is _S.CREATED for evid in region):
                self._scheduled_regions.add(index)
                ready |= region
        return self._schedule([v.id for v in self._graph.execution_vertices() if v.id in ready],
                              now)

    def _result_ready(self, result: IntermediateResult) -> bool:
        """Every producer FINISHED and none about to re-run."""
        return all(self._graph.vertex(p.producer).state is _S.FINISHED
                   and p.producer not in self._restart_owner for p in result.partitions)

    def _schedule(self, evids: list[ExecutionVertexID], now: float) -> list[Command]:
        """CREATED -> SCHEDULED for whole regions; request their missing slots, deploy
        the regions whose slots are all held already."""
        commands: list[Command] = []
        for evid in evids:
            self._graph.vertex(evid).current_execution.transition(_S.SCHEDULED, now)
        for evid in evids:
            shared = self._slot_of[evid]
            if shared.state in (_SlotState.UNREQUESTED, _SlotState.RELEASED):
                shared.state = _SlotState.PENDING
                commands.append(RequestSlot(shared.request_id, shared.profile))
        return commands + self._deploy_ready_regions(evids, now)

    def _deploy_ready_regions(self, evids: Iterable[ExecutionVertexID],
                              now: float) -> list[Command]:
        """Deploy, all at once, the SCHEDULED subtasks of each region of `evids` whose
        SCHEDULED subtasks all have an ALLOCATED shared slot; topological order."""
        ready: list[ExecutionVertexID] = []
        for index in sorted({self._region_index[evid] for evid in evids}):
            if not self._region_waits_for_a_slot(index):
                ready += [evid for evid in self._region_order[index]
                          if self._graph.vertex(evid).state is _S.SCHEDULED]
        commands: list[Command] = []
        for evid in sorted(ready, key=self._order.__getitem__):
            slot = self._slot_of[evid].slot
            assert slot is not None
            commands.append(self._deploy(self._graph.vertex(evid), slot, now))
        return commands

    def _region_waits_for_a_slot(self, index: int) -> bool:
        """A SCHEDULED subtask of region `index` has no ALLOCATED shared slot. Exact; the
        scan starts at the slot that held the region up last time, so that the n slots
        of a region arriving one by one cost O(n) in all rather than O(n^2)."""
        slots, region = self._region_slots[index], self._regions[index]
        start = self._region_cursor[index]
        for k in range(len(slots)):
            shared = slots[(start + k) % len(slots)]
            if shared.state is not _SlotState.ALLOCATED and any(
                    m in region and self._graph.vertex(m).state is _S.SCHEDULED
                    for m in shared.members):
                self._region_cursor[index] = (start + k) % len(slots)
                return True
        return False

    def _deploy(self, vertex: ExecutionVertex, slot: SlotInfo, now: float) -> DeployTask:
        execution = vertex.current_execution
        execution.deploy(slot, now)
        job_vertex = vertex.job_vertex
        descriptor = TaskDeploymentDescriptor(
            job_id=self._graph.job_id, attempt_id=execution.attempt_id,
            vertex_id=job_vertex.id, vertex_name=job_vertex.name,
            subtask_index=vertex.id.subtask_index, parallelism=job_vertex.parallelism,
            attempt_number=execution.attempt_number, allocation_id=slot.allocation_id,
            resource_id=slot.resource_id, invokable=job_vertex.invokable,
            consumed_partitions=[self._consumed(p, vertex.id) for p in vertex.consumed_partitions],
            produced_partitions=list(
                ProducedPartition(p.result.id, p.result.partition_type, len(p.consumers),
                                  p.result.consumer)
                for p in vertex.produced_partitions),
            data_key=self._data_key if vertex.produced_partitions else b"",
            checkpoint_dir=self._checkpoint_dir,
            restore=self._restore_for(vertex.id) if self._restore_for is not None else None,
            max_parallelism=self._max_parallelism)
        return DeployTask(descriptor, slot.task_executor_address)

    def _consumed(self, partition, consumer: ExecutionVertexID) -> ConsumedPartition:
        subpartition = partition.subpartition_of(consumer)
        return ConsumedPartition(
            partition.result.id, partition.result.producer, partition.partition_number,
            partition.result.partition_type, subpartition,
            partition_ticket(self._data_key, self._graph.job_id, partition.result.id,
                             partition.partition_number, subpartition))

    def _fail_tasks(self, evids: list[ExecutionVertexID], error: str, now: float,
                    kind: FailureKind = FailureKind.TASK,
                    lost_partitions: Sequence[IntermediateResultPartitionID] = (),
                    ) -> list[Command]:
        """The attempts of `evids` failed with `error`: one failure of `kind`, handled as
        the module docstring says. An attempt being cancelled just ends CANCELED."""
        failed: list[ExecutionVertex] = []
        for evid in evids:
            vertex = self._graph.vertex(evid)
            if vertex.state is _S.CANCELING:
                vertex.current_execution.transition(_S.CANCELED, now)
                continue
            vertex.current_execution.transition(_S.FAILED, now, failure_cause=error)
            failed.append(vertex)
        if not failed or self._graph.status is not JobStatus.RUNNING:
            return self._settle(now)
        cause = f"{failed[0].task_name} failed: {error}"
        self._root_cause = cause
        self._restart_strategy.notify_failure(now)
        if not self._restart_strategy.can_restart():
            return self._fail_job(cause, now)
        if kind is FailureKind.PARTITION:
            self._mark_partitions_lost(lost_partitions)
        to_restart: set[ExecutionVertexID] = set()
        for vertex in failed:
            if vertex.id not in to_restart:
                to_restart |= self._failover.tasks_to_restart(
                    self._graph, vertex.id, kind, self._lost_outputs)
        return self._restart_later(to_restart, cause, failed[0].task_name, now)

    def fail_over_all(self, cause: str, now: float) -> list[Command]:
        """A failure of the job rather than of a task (Flink's global failover, e.g.
        more checkpoint failures in a row than tolerated): every subtask restarts, as the
        restart strategy allows; else the job fails with `cause`."""
        if self._graph.status is not JobStatus.RUNNING:
            return []
        self._root_cause = cause
        self._restart_strategy.notify_failure(now)
        if not self._restart_strategy.can_restart():
            return self._fail_job(cause, now)
        return self._restart_later({v.id for v in self._graph.execution_vertices()}, cause,
                                   "the job", now)

    def _restart_later(self, to_restart: set[ExecutionVertexID], cause: str, failed: str,
                       now: float) -> list[Command]:
        """Cancels `to_restart` (what is not CREATED) and schedules its restart."""
        restarted = sorted((evid for evid in to_restart
                            if self._graph.vertex(evid).state is not _S.CREATED),
                           key=self._order.__getitem__)
        delay = self._restart_strategy.backoff_time()
        token, self._next_token = self._next_token, self._next_token + 1
        self._pending[token] = _PendingRestart(token, restarted)
        for evid in restarted:
            self._restart_owner[evid] = token
        self._restarts += 1
        self._restart_records.append(RestartRecord(
            self._restarts, now, cause, tuple(restarted), failed, delay))
        del self._restart_records[:-RESTART_HISTORY_SIZE]
        commands = self._cancel([self._graph.vertex(evid) for evid in restarted], now)
        return commands + self._settle(now) + [ScheduleRestart(delay, token)]

    def _mark_partitions_lost(self, lost: Sequence[IntermediateResultPartitionID]) -> None:
        for partition_id in lost:
            try:
                partitions = self._graph.result(partition_id.result_id).partitions
            except KeyError:
                continue  # not this job's: nothing to re-run
            if 0 <= partition_id.partition_number < len(partitions):
                self._lost_outputs.add(partitions[partition_id.partition_number].producer)

    def _restart(self, pending: _PendingRestart, now: float) -> list[Command]:
        """New attempts for the subtasks still owned by `pending` (all terminal), then
        schedule them as start() would."""
        del self._pending[pending.token]
        evids = [e for e in pending.vertices if self._restart_owner.get(e) == pending.token]
        for evid in evids:
            del self._restart_owner[evid]
            self._lost_outputs.discard(evid)
            self._graph.reset_for_new_execution(evid)
        if self._graph.schedule_mode is ScheduleMode.EAGER:
            return self._schedule(evids, now)
        self._scheduled_regions -= {self._region_index[evid] for evid in evids}
        return self._schedule_ready_regions(now)

    def _drop_pending_restarts(self) -> None:
        self._pending.clear()
        self._restart_owner.clear()

    def _fail_job(self, cause: str, now: float) -> list[Command]:
        """RUNNING -> FAILING: drop pending restarts, cancel everything else. Later
        failures keep the first cause."""
        if self._graph.status is not JobStatus.RUNNING:
            return self._settle(now)
        self._graph.transition_to(JobStatus.FAILING, now, failure_cause=cause)
        self._drop_pending_restarts()
        return self._cancel_all(now) + self._settle(now)

    def _cancel_all(self, now: float) -> list[Command]:
        return self._cancel(self._graph.execution_vertices(), now)

    def _cancel(self, vertices: Iterable[ExecutionVertex], now: float) -> list[Command]:
        """Never deployed: CANCELED at once. On a TaskExecutor: CANCELING + CancelTask.
        Terminal or already CANCELING: nothing."""
        commands: list[Command] = []
        for vertex in vertices:
            execution = vertex.current_execution
            if execution.state in (_S.CREATED, _S.SCHEDULED):
                execution.transition(_S.CANCELED, now)
            elif execution.state in _ON_TASK_EXECUTOR:
                assert execution.slot is not None
                execution.transition(_S.CANCELING, now)
                commands.append(CancelTask(execution.attempt_id, execution.slot.resource_id,
                                           execution.slot.allocation_id,
                                           execution.slot.task_executor_address))
        return commands

    def _settle(self, now: float, changed: ExecutionVertexID | None = None) -> list[Command]:
        """Carry out due restarts whose subtasks are all terminal; give back slots whose
        subtasks are all terminal; end the job when it is over. `changed`: the one
        subtask that became terminal since the last settling, so only its slot can be
        given back (a report's settling stays O(1), a job's n reports O(n))."""
        commands: list[Command] = []
        for pending in [p for p in self._pending.values() if p.due]:
            if all(self._graph.vertex(evid).state.is_terminal for evid in pending.vertices
                   if self._restart_owner.get(evid) == pending.token):
                commands += self._restart(pending, now)
        # Pending requests are withdrawn before slots are given back: the SlotPool serves a
        # slot given back to its oldest pending request, which must not be one withdrawn
        # here (it would come straight back, then go to the next: a chain through all).
        releases: list[Command] = []
        candidates = self._slots.values() if changed is None \
            else [self._slot_of[changed]]
        for shared in candidates:
            if shared.state in (_SlotState.PENDING, _SlotState.ALLOCATED) and all(
                    self._graph.vertex(m).state.is_terminal for m in shared.members):
                if shared.state is _SlotState.ALLOCATED:
                    releases.append(ReleaseSlot(shared.request_id))
                else:
                    commands.append(CancelSlotRequest(shared.request_id))
                shared.state, shared.slot = _SlotState.RELEASED, None
        commands += releases
        status = self._graph.status
        if status is JobStatus.RUNNING and not self._pending and self._graph.all_finished():
            self._graph.transition_to(JobStatus.FINISHED, now)
            commands.append(JobTerminated(JobStatus.FINISHED, None))
        elif status in (JobStatus.FAILING, JobStatus.CANCELLING) and self._graph.all_terminal():
            final = JobStatus.FAILED if status is JobStatus.FAILING else (
                JobStatus.FINISHED if self._stopping else JobStatus.CANCELED)
            self._graph.transition_to(final, now)
            commands.append(JobTerminated(
                final, self._graph.failure_cause if final is JobStatus.FAILED else None))
        return commands
