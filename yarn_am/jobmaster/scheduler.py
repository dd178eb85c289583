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
    RELEASED -> PENDING (a subtask of it not yet run is scheduled after a slot loss)

and stays ALLOCATED while any of its subtasks is not terminal, so with lazy scheduling
a consumer is deployed straight into the slot its producer finished in. Slot events
name requests by id; an id the scheduler never issued raises KeyError (a caller bug).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flinkyarn.gateways.task_executor import (ConsumedPartition, ProducedPartition,
                                              TaskDeploymentDescriptor)
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, ExecutionVertexID,
                           IntermediateDataSetID, JobVertexID, ResourceID)
from flinkyarn.jobgraph import ResultPartitionType, ScheduleMode
from flinkyarn.resources import UNKNOWN, ResourceProfile
from yarn_am.jobmaster.execution_graph import (DEPLOYMENT_CHAIN, ExecutionGraph,
                                               ExecutionState, ExecutionVertex, JobStatus,
                                               SlotInfo)

__all__ = ["CancelSlotRequest", "CancelTask", "Command", "ConsumedPartition", "DeployTask",
           "JobTerminated", "ProducedPartition", "ReleaseSlot", "RequestSlot", "Scheduler",
           "SlotInfo", "SlotRequestId", "TaskDeploymentDescriptor", "VertexSummary"]

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
class JobTerminated:
    """The job reached a globally terminal status; always the last command."""

    status: JobStatus
    cause: str | None


Command = RequestSlot | CancelSlotRequest | ReleaseSlot | DeployTask | CancelTask | JobTerminated


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


class Scheduler:
    """Schedules one job's ExecutionGraph; see the module docstring for the contract.

    Lifecycle decisions (JobStatus): start() RUNNING; all subtasks FINISHED -> FINISHED;
    the first task failure -> FAILING, every other task cancelled, FAILED once all are
    terminal (restart strategies come later); cancel() -> CANCELLING, CANCELED once all
    are terminal. JobTerminated is emitted exactly once.
    """

    def __init__(self, execution_graph: ExecutionGraph) -> None:
        self._graph = execution_graph
        self._slots: dict[SlotRequestId, _SharedSlot] = {}
        self._slot_of: dict[ExecutionVertexID, _SharedSlot] = {}
        self._assign_shared_slots()
        self._regions = execution_graph.pipelined_regions()
        self._region_inputs = [self._blocking_inputs(region) for region in self._regions]
        self._scheduled_regions: set[int] = set()

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
        """The SlotPool fulfilled a RequestSlot: deploy the subtasks waiting for it.
        A slot for a request no longer wanted is given straight back (ReleaseSlot)."""
        shared = self._slots[request_id]
        if shared.state is _SlotState.ALLOCATED:
            raise ValueError(f"slot request {request_id} was already fulfilled")
        if shared.state is not _SlotState.PENDING:
            return [ReleaseSlot(request_id)]
        shared.state, shared.slot = _SlotState.ALLOCATED, slot
        return [self._deploy(self._graph.vertex(m), slot, now) for m in shared.members
                if self._graph.vertex(m).state is _S.SCHEDULED]

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
        deployed in it fail. Its subtasks not yet scheduled will ask for a new slot.
        (Outputs of finished subtasks lost with their TaskExecutor are for the partition
        tracker and failover strategies to come.)"""
        shared = self._slots[request_id]
        if shared.state is not _SlotState.ALLOCATED:
            return []
        shared.state, shared.slot = _SlotState.RELEASED, None
        deployed = [m for m in shared.members
                    if self._graph.vertex(m).state in _ON_TASK_EXECUTOR | {_S.CANCELING}]
        return self._fail_tasks(deployed, f"slot {request_id} lost: {cause}", now)

    def task_state_changed(self, attempt_id: ExecutionAttemptID, state: ExecutionState,
                           error: str | None, now: float) -> list[Command]:
        """A TaskExecutor reports an attempt INITIALIZING, RUNNING, FINISHED, FAILED or
        CANCELED. Stale attempts, reports after a terminal state and progress older than
        what is known are dropped. A terminal report for a CANCELING attempt completes
        its cancellation; CANCELED without being asked counts as a failure."""
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
            return self._settle(now)
        if state is _S.CANCELED:
            state, error = _S.FAILED, error or "canceled without the JobMaster asking"
        if state is _S.FAILED:
            return self._fail_tasks([execution.vertex_id], error or "unknown error", now)
        if DEPLOYMENT_CHAIN.index(state) <= DEPLOYMENT_CHAIN.index(execution.state):
            return []
        execution.transition(state, now)
        commands: list[Command] = []
        if state is _S.FINISHED and self._graph.status is JobStatus.RUNNING:
            commands += self._schedule_ready_regions(now)
        return commands + self._settle(now)

    def cancel(self, now: float) -> list[Command]:
        """The user cancels the job: every task is cancelled; CANCELED once all are
        terminal. Idempotent; a job already terminal stays as it is."""
        if self._graph.status.is_terminal or self._graph.status is JobStatus.CANCELLING:
            return []
        self._graph.transition_to(JobStatus.CANCELLING, now)
        return self._cancel_all(now) + self._settle(now)

    # ---- queries ------------------------------------------------------------------------

    @property
    def execution_graph(self) -> ExecutionGraph:
        return self._graph

    @property
    def job_status(self) -> JobStatus:
        return self._graph.status

    @property
    def failure_cause(self) -> str | None:
        return self._graph.failure_cause

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
                    self._graph.is_result_complete(r) for r in self._region_inputs[index]):
                self._scheduled_regions.add(index)
                ready |= region
        return self._schedule([v.id for v in self._graph.execution_vertices() if v.id in ready],
                              now)

    def _schedule(self, evids: list[ExecutionVertexID], now: float) -> list[Command]:
        """CREATED -> SCHEDULED; request missing slots, deploy into slots already held."""
        commands: list[Command] = []
        for evid in evids:
            self._graph.vertex(evid).current_execution.transition(_S.SCHEDULED, now)
        for evid in evids:
            shared = self._slot_of[evid]
            if shared.state is _SlotState.ALLOCATED:
                assert shared.slot is not None
                commands.append(self._deploy(self._graph.vertex(evid), shared.slot, now))
            elif shared.state is not _SlotState.PENDING:
                shared.state = _SlotState.PENDING
                commands.append(RequestSlot(shared.request_id, shared.profile))
        return commands

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
            consumed_partitions=list(
                ConsumedPartition(p.result.id, p.result.producer, p.partition_number,
                                  p.result.partition_type, sorted(p.consumers).index(vertex.id))
                for p in vertex.consumed_partitions),
            produced_partitions=list(
                ProducedPartition(p.result.id, p.result.partition_type, len(p.consumers),
                                  p.result.consumer)
                for p in vertex.produced_partitions))
        return DeployTask(descriptor, slot.task_executor_address)

    def _fail_tasks(self, evids: list[ExecutionVertexID], error: str,
                    now: float) -> list[Command]:
        """The attempts of `evids` failed with `error`; the first failure fails the job."""
        first: ExecutionVertex | None = None
        for evid in evids:
            vertex = self._graph.vertex(evid)
            if vertex.state is _S.CANCELING:
                vertex.current_execution.transition(_S.CANCELED, now)
                continue
            vertex.current_execution.transition(_S.FAILED, now, failure_cause=error)
            first = first or vertex
        if first is None:
            return self._settle(now)
        return self._fail_job(f"{first.task_name} failed: {error}", now)

    def _fail_job(self, cause: str, now: float) -> list[Command]:
        """RUNNING -> FAILING: cancel everything else. Later failures keep the first cause."""
        if self._graph.status is not JobStatus.RUNNING:
            return self._settle(now)
        self._graph.transition_to(JobStatus.FAILING, now, failure_cause=cause)
        return self._cancel_all(now) + self._settle(now)

    def _cancel_all(self, now: float) -> list[Command]:
        commands: list[Command] = []
        for vertex in self._graph.execution_vertices():
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

    def _settle(self, now: float) -> list[Command]:
        """Give back slots whose subtasks are all terminal; end the job when it is over."""
        commands: list[Command] = []
        for shared in self._slots.values():
            if shared.state in (_SlotState.PENDING, _SlotState.ALLOCATED) and all(
                    self._graph.vertex(m).state.is_terminal for m in shared.members):
                commands.append(ReleaseSlot(shared.request_id)
                                if shared.state is _SlotState.ALLOCATED
                                else CancelSlotRequest(shared.request_id))
                shared.state, shared.slot = _SlotState.RELEASED, None
        status = self._graph.status
        states = [v.state for v in self._graph.execution_vertices()]
        if status is JobStatus.RUNNING and all(s is _S.FINISHED for s in states):
            self._graph.transition_to(JobStatus.FINISHED, now)
            commands.append(JobTerminated(JobStatus.FINISHED, None))
        elif status in (JobStatus.FAILING, JobStatus.CANCELLING) and all(
                s.is_terminal for s in states):
            final = JobStatus.FAILED if status is JobStatus.FAILING else JobStatus.CANCELED
            self._graph.transition_to(final, now)
            commands.append(JobTerminated(
                final, self._graph.failure_cause if final is JobStatus.FAILED else None))
        return commands
