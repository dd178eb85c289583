"""The ExecutionGraph: the JobGraph expanded by parallelism, and the states of its parts.

One ExecutionJobVertex per JobVertex, holding `parallelism` ExecutionVertices (subtasks);
each ExecutionVertex has its current Execution (one attempt to run it). One
IntermediateResult per JobEdge, with one IntermediateResultPartition per producer subtask,
connected to consumer subtasks as the edge's DistributionPattern says.

The graph holds state and refuses illegal state changes (IllegalStateTransition: a
programming error); it decides nothing. The Scheduler (scheduler.py) decides, on the
JobMaster's loop only. No I/O, no clock: every change takes `now` (monotonic seconds).
"""

from __future__ import annotations

import collections
import enum
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from flinkyarn.ids import (AllocationID, ExecutionAttemptID, ExecutionVertexID,
                           IntermediateDataSetID, JobID, JobVertexID, ResourceID, new_id)
from flinkyarn.jobgraph import (DistributionPattern, JobEdge, JobGraph, JobVertex,
                                ResultPartitionType, ScheduleMode)


class IllegalStateTransition(RuntimeError):
    """A state change the transition tables forbid: a bug in the caller, never input."""


class ExecutionState(str, enum.Enum):
    """The state of one attempt to run one subtask.

        CREATED -> SCHEDULED -> DEPLOYING -> INITIALIZING -> RUNNING -> FINISHED
        CREATED | SCHEDULED -> CANCELED            (never deployed: nothing to cancel)
        any non-terminal -> CANCELING -> CANCELED
        any non-terminal -> FAILED

    From DEPLOYING on, progress may skip states (DEPLOYING -> FINISHED is legal), as
    Flink's Execution accepts a task that finished before its RUNNING report arrived.
    FINISHED, CANCELED and FAILED are terminal.
    """

    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_S = ExecutionState
_TERMINAL = frozenset({_S.FINISHED, _S.CANCELED, _S.FAILED})
DEPLOYMENT_CHAIN = (_S.CREATED, _S.SCHEDULED, _S.DEPLOYING, _S.INITIALIZING, _S.RUNNING,
                    _S.FINISHED)
"""The states of a successful attempt, in order."""

_EXECUTION_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    _S.CREATED: frozenset({_S.SCHEDULED, _S.CANCELING, _S.CANCELED, _S.FAILED}),
    _S.SCHEDULED: frozenset({_S.DEPLOYING, _S.CANCELING, _S.CANCELED, _S.FAILED}),
    _S.DEPLOYING: frozenset({_S.INITIALIZING, _S.RUNNING, _S.FINISHED, _S.CANCELING,
                             _S.FAILED}),
    _S.INITIALIZING: frozenset({_S.RUNNING, _S.FINISHED, _S.CANCELING, _S.FAILED}),
    _S.RUNNING: frozenset({_S.FINISHED, _S.CANCELING, _S.FAILED}),
    _S.CANCELING: frozenset({_S.CANCELED, _S.FAILED}),
    _S.FINISHED: frozenset(),
    _S.CANCELED: frozenset(),
    _S.FAILED: frozenset(),
}


class JobStatus(str, enum.Enum):
    """The state of the whole job.

        CREATED -> RUNNING -> FINISHED
        RUNNING -> FAILING -> FAILED
        CREATED | RUNNING | FAILING -> CANCELLING -> CANCELED
        RUNNING -> CANCELLING -> FINISHED (stopped after a savepoint: Flink's stop)

    CREATED -> CANCELLING is Flink's: a job cancelled before it started. RESTARTING
    has no transitions: the Scheduler keeps a restarting job RUNNING (its pending
    restarts are its own state; see scheduler.py). FINISHED,
    FAILED and CANCELED are terminal (globally: the job will not run again).
    """

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


_J = JobStatus
_JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    _J.CREATED: frozenset({_J.RUNNING, _J.CANCELLING}),
    _J.RUNNING: frozenset({_J.FINISHED, _J.FAILING, _J.CANCELLING}),
    _J.FAILING: frozenset({_J.FAILED, _J.CANCELLING}),
    _J.CANCELLING: frozenset({_J.CANCELED, _J.FINISHED}),
    _J.RESTARTING: frozenset(),
    _J.FINISHED: frozenset(),
    _J.FAILED: frozenset(),
    _J.CANCELED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """The slot the SlotPool gave to a slot request: where a task is deployed."""

    allocation_id: AllocationID
    resource_id: ResourceID
    slot_index: int
    task_executor_address: str


@dataclass(eq=False, slots=True)
class Execution:
    """One attempt to run one subtask; the attempt id fences every report about it.

    Changed only through deploy() and transition(), which check ExecutionState's table.
    """

    attempt_id: ExecutionAttemptID
    vertex_id: ExecutionVertexID
    attempt_number: int
    state: ExecutionState = ExecutionState.CREATED
    slot: SlotInfo | None = None
    failure_cause: str | None = None
    state_timestamps: dict[ExecutionState, float] = field(default_factory=dict)
    # The graph's count of current attempts by state, kept by transition() (a prior
    # attempt is terminal: it never changes again).
    counts: collections.Counter[ExecutionState] = field(
        default_factory=collections.Counter, repr=False)

    def transition(self, new: ExecutionState, now: float,
                   failure_cause: str | None = None) -> None:
        if new not in _EXECUTION_TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"{self.vertex_id} attempt #{self.attempt_number}: "
                f"{self.state.value} -> {new.value}")
        self.counts[self.state] -= 1
        self.counts[new] += 1
        self.state = new
        self.state_timestamps[new] = now
        if new is ExecutionState.FAILED:
            self.failure_cause = failure_cause

    def deploy(self, slot: SlotInfo, now: float) -> None:
        """SCHEDULED -> DEPLOYING into `slot`."""
        if self.state is not ExecutionState.SCHEDULED:
            raise IllegalStateTransition(
                f"{self.vertex_id} attempt #{self.attempt_number}: cannot deploy "
                f"from {self.state.value}")
        self.slot = slot
        self.transition(ExecutionState.DEPLOYING, now)


@dataclass(eq=False, slots=True)
class IntermediateResultPartition:
    """The output of one producer subtask for one result, read by `consumers`."""

    result: IntermediateResult
    partition_number: int  # == the producer's subtask index
    consumers: list[ExecutionVertexID] = field(default_factory=list)

    @property
    def producer(self) -> ExecutionVertexID:
        return ExecutionVertexID(self.result.producer, self.partition_number)

    def subpartition_of(self, consumer: ExecutionVertexID) -> int:
        """Which subpartition `consumer` reads. `consumers` is a contiguous, ascending
        range of the consuming vertex's subtasks (all of them for ALL_TO_ALL), so this
        is constant time: the scheduler asks once per input of every deployment."""
        index = consumer.subtask_index - self.consumers[0].subtask_index
        if not 0 <= index < len(self.consumers) or self.consumers[index] != consumer:
            raise ValueError(f"{consumer} does not read partition {self.partition_number} "
                             f"of result {self.result.id}")
        return index


@dataclass(eq=False, slots=True)
class IntermediateResult:
    """What one JobEdge carries: one partition per subtask of the producer vertex."""

    id: IntermediateDataSetID
    producer: JobVertexID
    consumer: JobVertexID
    partition_type: ResultPartitionType
    distribution: DistributionPattern
    # The JobEdge's: whether a re-run producer sends each record to the same consumer.
    deterministic: bool = True
    partitions: list[IntermediateResultPartition] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class ExecutionVertex:
    """One subtask. Earlier attempts stay in prior_executions, so late reports about
    them are recognised (and ignored) rather than mistaken for unknown attempts."""

    id: ExecutionVertexID
    job_vertex: JobVertex
    current_execution: Execution
    produced_partitions: list[IntermediateResultPartition] = field(default_factory=list)
    consumed_partitions: list[IntermediateResultPartition] = field(default_factory=list)
    prior_executions: list[Execution] = field(default_factory=list)

    @property
    def state(self) -> ExecutionState:
        return self.current_execution.state

    @property
    def task_name(self) -> str:
        """Flink's "name (subtask+1/parallelism)", as users see it in logs and causes."""
        return (f"{self.job_vertex.name} "
                f"({self.id.subtask_index + 1}/{self.job_vertex.parallelism})")


@dataclass(eq=False, slots=True)
class ExecutionJobVertex:
    """One JobVertex expanded into its subtasks."""

    job_vertex: JobVertex
    task_vertices: list[ExecutionVertex] = field(default_factory=list)
    inputs: list[IntermediateResult] = field(default_factory=list)
    produced_results: list[IntermediateResult] = field(default_factory=list)

    @property
    def id(self) -> JobVertexID:
        return self.job_vertex.id

    @property
    def name(self) -> str:
        return self.job_vertex.name

    @property
    def parallelism(self) -> int:
        return self.job_vertex.parallelism

    def state_counts(self) -> dict[ExecutionState, int]:
        """How many subtasks are in each state (every state present, zeros included)."""
        counts = {state: 0 for state in ExecutionState}
        for vertex in self.task_vertices:
            counts[vertex.state] += 1
        return counts

    def aggregate_state(self) -> ExecutionState:
        """One state for the vertex, as Flink's web UI shows it: failures and
        cancellation first, then RUNNING while any subtask runs or some have finished,
        FINISHED when all have, else the most advanced pre-running state."""
        counts = self.state_counts()
        for state in (_S.FAILED, _S.CANCELING, _S.CANCELED):
            if counts[state]:
                return state
        if counts[_S.FINISHED] == self.parallelism:
            return _S.FINISHED
        if counts[_S.RUNNING] or counts[_S.INITIALIZING] or counts[_S.FINISHED]:
            return _S.RUNNING
        for state in (_S.DEPLOYING, _S.SCHEDULED):
            if counts[state]:
                return state
        return _S.CREATED


def pointwise_targets(producers: int, consumers: int) -> list[list[int]]:
    """For each producer subtask, the consumer subtasks reading its partition.

    As Flink's pointwise connection: i -> i when the parallelisms are equal; with more
    producers, consumer j reads the contiguous range [j*p/c, (j+1)*p/c); with more
    consumers, each reads exactly one producer and producer i feeds a contiguous range.
    """
    if producers == consumers:
        return [[i] for i in range(producers)]
    targets: list[list[int]] = [[] for _ in range(producers)]
    if producers > consumers:
        for j in range(consumers):
            for i in range(j * producers // consumers, (j + 1) * producers // consumers):
                targets[i].append(j)
        return targets
    for i in range(producers):
        start = (i * consumers + producers - 1) // producers
        end = ((i + 1) * consumers + producers - 1) // producers
        targets[i].extend(range(start, end))
    return targets


class ExecutionGraph:
    """The JobMaster's core data structure for one job; see the module docstring.

    Built once from a validated JobGraph; its structure never changes afterwards, only
    the states of the job and of the executions do.
    """

    def __init__(self, job_graph: JobGraph) -> None:
        job_graph.validate()
        self.job_graph = job_graph
        self.status = JobStatus.CREATED
        self.failure_cause: str | None = None
        self.status_timestamps: dict[JobStatus, float] = {}
        self._job_vertices: dict[JobVertexID, ExecutionJobVertex] = {}
        self._results: dict[IntermediateDataSetID, IntermediateResult] = {}
        self._executions: dict[ExecutionAttemptID, Execution] = {}
        # Current attempts by state (Execution.counts): whether all are finished or
        # terminal in O(1), as each of n reports asks.
        self._counts: collections.Counter[ExecutionState] = collections.Counter()
        self._size = 0
        for job_vertex in job_graph.topological_order():
            ejv = ExecutionJobVertex(job_vertex)
            for index in range(job_vertex.parallelism):
                evid = ExecutionVertexID(job_vertex.id, index)
                execution = self._new_execution(evid, 0)
                ejv.task_vertices.append(ExecutionVertex(evid, job_vertex, execution))
                self._size += 1
            self._job_vertices[job_vertex.id] = ejv
        for position, edge in enumerate(job_graph.edges):
            self._connect(position, edge)
        self._regions = _pipelined_regions(self)
        self._region_index = {evid: region for region in self._regions for evid in region}

    # ---- structure ----------------------------------------------------------------------

    @property
    def job_id(self) -> JobID:
        return self.job_graph.job_id

    @property
    def job_name(self) -> str:
        return self.job_graph.name

    @property
    def schedule_mode(self) -> ScheduleMode:
        return self.job_graph.schedule_mode

    def vertices_in_topological_order(self) -> list[ExecutionJobVertex]:
        return list(self._job_vertices.values())

    def job_vertex(self, vertex_id: JobVertexID) -> ExecutionJobVertex:
        return self._job_vertices[vertex_id]

    def vertex(self, evid: ExecutionVertexID) -> ExecutionVertex:
        return self._job_vertices[evid.vertex_id].task_vertices[evid.subtask_index]

    def execution_vertices(self) -> Iterator[ExecutionVertex]:
        """Every subtask: vertices in topological order, subtasks in index order."""
        for ejv in self._job_vertices.values():
            yield from ejv.task_vertices

    def result(self, result_id: IntermediateDataSetID) -> IntermediateResult:
        return self._results[result_id]

    def results(self) -> list[IntermediateResult]:
        return list(self._results.values())

    def producers_of(self, evid: ExecutionVertexID) -> list[ExecutionVertexID]:
        """The subtasks whose partitions `evid` consumes, sorted."""
        return sorted({p.producer for p in self.vertex(evid).consumed_partitions})

    def consumers_of(self, evid: ExecutionVertexID) -> list[ExecutionVertexID]:
        """The subtasks that consume a partition `evid` produces, sorted."""
        return sorted({c for p in self.vertex(evid).produced_partitions for c in p.consumers})

    def pipelined_regions(self) -> list[frozenset[ExecutionVertexID]]:
        """Subtasks connected through PIPELINED partitions, which must run together.

        BLOCKING partitions separate regions, except that regions depending on each other
        in a cycle through BLOCKING partitions are merged (as Flink does), so that no
        region ever waits for its own output. Ordered by their first subtask in
        topological order."""
        return list(self._regions)

    def region_of(self, evid: ExecutionVertexID) -> frozenset[ExecutionVertexID]:
        return self._region_index[evid]

    def all_finished(self) -> bool:
        """Whether every subtask's current attempt is FINISHED."""
        return self._counts[ExecutionState.FINISHED] == self._size

    def all_terminal(self) -> bool:
        """Whether every subtask's current attempt is terminal."""
        return sum(self._counts[state] for state in _TERMINAL) == self._size

    def is_result_complete(self, result_id: IntermediateDataSetID) -> bool:
        """True when every producer subtask of the result has FINISHED."""
        return all(self.vertex(p.producer).state is ExecutionState.FINISHED
                   for p in self._results[result_id].partitions)

    # ---- states -------------------------------------------------------------------------

    def execution(self, attempt_id: ExecutionAttemptID) -> Execution | None:
        """Any attempt of this graph, current or prior; None for an unknown id."""
        return self._executions.get(attempt_id)

    def is_current(self, execution: Execution) -> bool:
        return self.vertex(execution.vertex_id).current_execution is execution

    def transition_to(self, status: JobStatus, now: float,
                      failure_cause: str | None = None) -> None:
        """Change the job status per JobStatus's table; a cause is kept once set."""
        if status not in _JOB_TRANSITIONS[self.status]:
            raise IllegalStateTransition(f"job {self.job_name!r}: "
                                         f"{self.status.value} -> {status.value}")
        self.status = status
        self.status_timestamps[status] = now
        if failure_cause is not None and self.failure_cause is None:
            self.failure_cause = failure_cause

    def reset_for_new_execution(self, evid: ExecutionVertexID) -> Execution:
        """Start a new attempt (CREATED) of a subtask whose current one is terminal.
        For the restart strategies; reports about the old attempt become stale."""
        vertex = self.vertex(evid)
        old = vertex.current_execution
        if not old.state.is_terminal:
            raise IllegalStateTransition(f"{evid}: cannot start a new attempt while "
                                         f"attempt #{old.attempt_number} is {old.state.value}")
        vertex.prior_executions.append(old)
        self._counts[old.state] -= 1
        vertex.current_execution = self._new_execution(evid, old.attempt_number + 1)
        return vertex.current_execution

    def _new_execution(self, evid: ExecutionVertexID, attempt_number: int) -> Execution:
        execution = Execution(ExecutionAttemptID(new_id()), evid, attempt_number,
                              counts=self._counts)
        self._counts[execution.state] += 1
        self._executions[execution.attempt_id] = execution
        return execution

    def _connect(self, position: int, edge: JobEdge) -> None:
        source, target, distribution = edge.source, edge.target, edge.distribution
        # Deterministic, so that a restarted JobMaster names the same results.
        result_id = IntermediateDataSetID(
            uuid.uuid5(uuid.NAMESPACE_OID, f"{self.job_id}/{position}/{source}/{target}").hex)
        result = IntermediateResult(result_id, source, target, edge.partition_type,
                                    distribution, edge.deterministic)
        self._results[result_id] = result
        producer, consumer = self._job_vertices[source], self._job_vertices[target]
        producer.produced_results.append(result)
        consumer.inputs.append(result)
        if distribution is DistributionPattern.ALL_TO_ALL:
            targets = [list(range(consumer.parallelism))] * producer.parallelism
        else:
            targets = pointwise_targets(producer.parallelism, consumer.parallelism)
        for index, producing in enumerate(producer.task_vertices):
            partition = IntermediateResultPartition(result, index)
            result.partitions.append(partition)
            producing.produced_partitions.append(partition)
            for j in targets[index]:
                consuming = consumer.task_vertices[j]
                partition.consumers.append(consuming.id)
                consuming.consumed_partitions.append(partition)


def _pipelined_regions(graph: ExecutionGraph) -> list[frozenset[ExecutionVertexID]]:
    order = {v.id: n for n, v in enumerate(graph.execution_vertices())}
    parent = {evid: evid for evid in order}

    def find(evid: ExecutionVertexID) -> ExecutionVertexID:
        while parent[evid] != evid:
            parent[evid] = parent[parent[evid]]
            evid = parent[evid]
        return evid

    def union(a: ExecutionVertexID, b: ExecutionVertexID) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=order.__getitem__)] = min(ra, rb, key=order.__getitem__)

    blocking: list[tuple[ExecutionVertexID, ExecutionVertexID]] = []
    for result in graph.results():
        for partition in result.partitions:
            for consumer in partition.consumers:
                if result.partition_type is ResultPartitionType.PIPELINED:
                    union(partition.producer, consumer)
                else:
                    blocking.append((partition.producer, consumer))

    # Regions on a cycle of BLOCKING dependencies are mutually reachable: merge them.
    successors: dict[ExecutionVertexID, set[ExecutionVertexID]] = {}
    for producer, consumer in blocking:
        rp, rc = find(producer), find(consumer)
        if rp != rc:
            successors.setdefault(rp, set()).add(rc)
    reachable: dict[ExecutionVertexID, set[ExecutionVertexID]] = {}
    for root in successors:
        seen: set[ExecutionVertexID] = set()
        stack = [root]
        while stack:
            for nxt in successors.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        reachable[root] = seen
    for root, seen in reachable.items():
        for other in seen:
            if root in reachable.get(other, ()):
                union(root, other)

    regions: dict[ExecutionVertexID, set[ExecutionVertexID]] = {}
    for evid in order:
        regions.setdefault(find(evid), set()).add(evid)
    return [frozenset(members) for members in regions.values()]
