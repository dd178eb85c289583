"""The Scheduler as a specification: events in, commands out, no network."""

from __future__ import annotations

from collections import Counter

import pytest

from flinkyarn.gateways.job_master import FailureKind
from flinkyarn.ids import (AllocationID, ExecutionAttemptID, ExecutionVertexID,
                           IntermediateResultPartitionID, JobID, JobVertexID, ResourceID)
from flinkyarn.jobgraph import (DistributionPattern, JobEdge, JobGraph, JobVertex,
                               ResultPartitionType, ScheduleMode)
from flinkyarn.resources import UNKNOWN, ResourceProfile
from yarn_am.jobmaster.execution_graph import (ExecutionGraph, ExecutionState,
                                               IllegalStateTransition, JobStatus)
from yarn_am.jobmaster.restart_strategy import FixedDelayRestartBackoffTimeStrategy
from yarn_am.jobmaster.scheduler import (CancelSlotRequest, CancelTask, DeployTask,
                                         JobTerminated, ReleaseSlot, RequestSlot,
                                         ScheduleRestart, Scheduler, SlotInfo,
                                         TaskDeploymentDescriptor, slots_at_once_from)

S = ExecutionState
BLOCKING = ResultPartitionType.BLOCKING
TASK, PARTITION = FailureKind.TASK, FailureKind.PARTITION
EAGER, LAZY = ScheduleMode.EAGER, ScheduleMode.LAZY_FROM_SOURCES


def vertex(name: str, parallelism: int, group: str | None = "default",
           resources: ResourceProfile = UNKNOWN) -> JobVertex:
    return JobVertex(JobVertexID(name), name.upper(), parallelism, b"code-" + name.encode(),
                     group, resources)


def scheduler(vertices, edges=(), mode=EAGER) -> Scheduler:
    return Scheduler(ExecutionGraph(JobGraph(JobID("job"), "test", vertices, list(edges), mode)))


def ev(name: str, index: int) -> ExecutionVertexID:
    return ExecutionVertexID(JobVertexID(name), index)


def of(commands, kind) -> list:
    return [c for c in commands if isinstance(c, kind)]


class Cluster:
    """Plays SlotPool and TaskExecutors: a distinct slot per request, reports by vertex."""

    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.slots: dict[str, SlotInfo] = {}
        self.deployed: dict[ExecutionVertexID, TaskDeploymentDescriptor] = {}
        self.now = 0.0

    def assign(self, commands) -> list:
        """Fulfil every RequestSlot in `commands`; returns all commands that follow."""
        out = []
        for request in of(commands, RequestSlot):
            n = len(self.slots)
            slot = SlotInfo(AllocationID(f"alloc-{n}"), ResourceID(f"te-{n}"), 0, f"te-{n}:1")
            self.slots[request.request_id] = slot
            out += self.s.slot_assigned(request.request_id, slot, self.now)
        self.record(commands + out)
        return out

    def record(self, commands) -> None:
        for deploy in of(commands, DeployTask):
            d = deploy.descriptor
            self.deployed[ExecutionVertexID(d.vertex_id, d.subtask_index)] = d

    def report(self, evid: ExecutionVertexID, state: ExecutionState, error=None,
               kind: FailureKind = TASK, lost=()) -> list:
        self.now += 1.0
        out = self.s.task_state_changed(self.deployed[evid].attempt_id, state, error, self.now,
                                        failure_kind=kind, lost_partitions=list(lost))
        self.record(out)
        return out

    def finish(self, evid: ExecutionVertexID) -> list:
        return self.report(evid, S.RUNNING) + self.report(evid, S.FINISHED)

    def state(self, evid: ExecutionVertexID) -> ExecutionState:
        return self.s.execution_graph.vertex(evid).state


def started(vertices, edges=(), mode=EAGER) -> tuple[Cluster, list]:
    cluster = Cluster(scheduler(vertices, edges, mode))
    commands = cluster.s.start(0.0)
    return cluster, commands


# ---- slot sharing ---------------------------------------------------------------------------

def test_subtask_i_of_every_vertex_in_a_group_shares_slot_i():
    c, commands = started([vertex("a", 3, resources=ResourceProfile(1.0, 100)),
                           vertex("b", 3, resources=ResourceProfile(0.5, 200))],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])

    assert commands == [RequestSlot(f"default/{i}", ResourceProfile(1.5, 300)) for i in range(3)]
    assert all(c.state(v.id) is S.SCHEDULED for v in c.s.execution_graph.execution_vertices())
    assert c.s.slot_request_id(ev("a", 1)) == c.s.slot_request_id(ev("b", 1)) == "default/1"


def test_a_shared_slot_asks_only_for_the_vertices_that_use_it_and_unknown_wins():
    _, commands = started([vertex("a", 2, resources=ResourceProfile(1.0, 100)),
                           vertex("b", 1, resources=ResourceProfile(2.0, 50)),
                           vertex("c", 1, group="g", resources=UNKNOWN),
                           vertex("d", 1, group="g", resources=ResourceProfile(1.0, 1))])

    assert commands == [RequestSlot("default/0", ResourceProfile(3.0, 150)),
                        RequestSlot("default/1", ResourceProfile(1.0, 100)),
                        RequestSlot("g/0", UNKNOWN)]


def test_a_vertex_without_a_group_gets_a_slot_of_its_own_per_subtask():
    _, commands = started([vertex("a", 2), vertex("b", 2), vertex("lonely", 2, group=None)])

    requests = [r.request_id for r in of(commands, RequestSlot)]
    assert len(requests) == 4 and len(set(requests)) == 4
    assert requests[:2] == ["default/0", "default/1"]


def test_two_subtasks_of_one_vertex_never_share_a_slot():
    c, commands = started([vertex("a", 4), vertex("b", 2), vertex("c", 3, group=None)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign(commands)

    per_slot = Counter((d.allocation_id, d.vertex_id) for d in c.deployed.values())
    assert len(c.deployed) == 9 and set(per_slot.values()) == {1}
    assert c.deployed[ev("a", 1)].allocation_id == c.deployed[ev("b", 1)].allocation_id


# ---- eager scheduling -----------------------------------------------------------------------

def test_eager_deploys_a_pipelined_region_only_once_all_its_slots_are_assigned():
    c, commands = started([vertex("a", 2), vertex("b", 2)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])  # one region
    assert of(commands, DeployTask) == []

    first = c.s.slot_assigned("default/0", SlotInfo(AllocationID("x"), ResourceID("te"), 3,
                                                     "te:1"), 1.0)

    assert first == []  # b#0 would wait for a#1, whose TaskExecutor may still be starting
    assert all(c.state(v.id) is S.SCHEDULED for v in c.s.execution_graph.execution_vertices())
    second = c.s.slot_assigned("default/1", SlotInfo(AllocationID("y"), ResourceID("te2"), 0,
                                                      "te2:1"), 2.0)
    assert [(d.descriptor.vertex_id, d.descriptor.subtask_index) for d in second] == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    deploy_b = second[2]
    assert deploy_b.task_executor_address == "te:1"
    d = deploy_b.descriptor
    assert (d.job_id, d.vertex_name, d.parallelism, d.attempt_number) == ("job", "B", 2, 0)
    assert (d.allocation_id, d.resource_id, d.invokable) == ("x", "te", b"code-b")
    assert [(p.producer_vertex_id, p.producer_subtask_index) for p in d.consumed_partitions] \
        == [("a", 0), ("a", 1)]
    assert c.s.execution_graph.execution(d.attempt_id).state is S.DEPLOYING
    assert all(c.state(v.id) is S.DEPLOYING for v in c.s.execution_graph.execution_vertices())


def test_a_two_subtask_region_deploys_nothing_until_its_second_slot_then_both_producer_first():
    c, commands = started([vertex("a", 1, group=None), vertex("b", 1, group=None),
                           vertex("x", 1, group=None)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    assert {r.request_id for r in of(commands, RequestSlot)} == {"a#0", "b#0", "x#0"}

    assert c.assign([RequestSlot("b#0", UNKNOWN)]) == []
    assert c.state(ev("a", 0)) is S.SCHEDULED and c.state(ev("b", 0)) is S.SCHEDULED
    # another region does not wait for this one's slots
    assert [d.descriptor.vertex_id for d in c.assign([RequestSlot("x#0", UNKNOWN)])] == ["x"]
    out = c.assign([RequestSlot("a#0", UNKNOWN)])

    assert [(d.descriptor.vertex_id, d.descriptor.allocation_id) for d in out] == [
        ("a", "alloc-2"), ("b", "alloc-0")]


def test_a_slot_lost_while_its_region_waits_is_requested_again_and_nothing_fails():
    c, commands = started([vertex("a", 1, group=None), vertex("b", 1, group=None)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign([RequestSlot("a#0", UNKNOWN)])

    out = c.s.slot_lost("a#0", "TaskExecutor te-0 lost", 1.0)

    assert out == [RequestSlot("a#0", UNKNOWN)]
    assert c.state(ev("a", 0)) is S.SCHEDULED and c.s.job_status is JobStatus.RUNNING
    assert c.assign([RequestSlot("b#0", UNKNOWN)]) == []
    assert [d.descriptor.vertex_id for d in c.assign([RequestSlot("a#0", UNKNOWN)])] == [
        "a", "b"]


def test_a_failed_slot_request_fails_its_waiting_region_and_gives_back_the_slot_it_held():
    c, commands = started([vertex("a", 1, group=None), vertex("b", 1, group=None)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign([RequestSlot("a#0", UNKNOWN)])

    out = c.s.slot_request_failed("b#0", "no TaskExecutor fits 64 cpu", 2.0)

    assert c.state(ev("b", 0)) is S.FAILED and c.state(ev("a", 0)) is S.CANCELED
    assert of(out, DeployTask) == [] and of(out, CancelTask) == []
    assert out == [ReleaseSlot("a#0"), JobTerminated(JobStatus.FAILED, c.s.failure_cause)]
    assert "B (1/1)" in c.s.failure_cause


def test_job_finishes_when_every_task_finished_and_gives_back_every_slot():
    c, commands = started([vertex("a", 2), vertex("b", 2), vertex("x", 1, group=None)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign(commands)
    released = []
    for evid in [ev("a", 0), ev("a", 1), ev("b", 0), ev("x", 0)]:
        out = c.finish(evid)
        assert of(out, JobTerminated) == []
        released += of(out, ReleaseSlot)

    last = c.finish(ev("b", 1))

    assert last[-1] == JobTerminated(JobStatus.FINISHED, None)
    released += of(last, ReleaseSlot)
    assert sorted(r.request_id for r in released) == sorted(c.slots)
    assert c.s.job_status is JobStatus.FINISHED


def test_a_slot_is_released_as_soon_as_all_its_tasks_are_terminal():
    c, commands = started([vertex("a", 2), vertex("b", 2)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign(commands)

    assert of(c.finish(ev("a", 0)), ReleaseSlot) == []
    assert c.finish(ev("b", 0)) == [ReleaseSlot("default/0")]


# ---- lazy from sources ----------------------------------------------------------------------

def test_lazy_deploys_consumers_of_a_blocking_edge_only_after_every_producer_finished():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, commands = started([vertex("a", 3), vertex("b", 2)], edges, mode=LAZY)
    assert commands == [RequestSlot(f"default/{i}", UNKNOWN) for i in range(3)]
    c.assign(commands)
    assert set(c.deployed) == {ev("a", 0), ev("a", 1), ev("a", 2)}
    assert c.state(ev("b", 0)) is S.CREATED

    assert of(c.finish(ev("a", 0)) + c.finish(ev("a", 1)), DeployTask) == []
    out = c.finish(ev("a", 2))

    # b runs straight in the slots a held; slot 2 served only a.
    assert [(d.descriptor.vertex_id, d.descriptor.subtask_index) for d in of(out, DeployTask)] \
        == [("b", 0), ("b", 1)]
    assert of(out, RequestSlot) == [] and of(out, ReleaseSlot) == [ReleaseSlot("default/2")]
    assert [p.partition_type for p in c.deployed[ev("b", 0)].consumed_partitions] == [BLOCKING] * 3


def test_lazy_requests_slots_for_a_consumer_region_in_another_group_when_it_is_ready():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING),
             JobEdge(JobVertexID("b"), JobVertexID("c"))]  # b -> c pipelined: one region
    c, commands = started([vertex("a", 1), vertex("b", 1, group="g"), vertex("c", 1, group="g")],
                          edges, mode=LAZY)
    assert commands == [RequestSlot("default/0", UNKNOWN)]
    c.assign(commands)

    out = c.finish(ev("a", 0))

    assert of(out, RequestSlot) == [RequestSlot("g/0", UNKNOWN)]
    assert out[-1] == ReleaseSlot("default/0")
    c.assign(out)
    assert c.state(ev("b", 0)) is S.DEPLOYING and c.state(ev("c", 0)) is S.DEPLOYING


def test_lazy_consumer_region_deploys_once_all_its_slots_are_there_held_ones_included():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING),
             JobEdge(JobVertexID("b"), JobVertexID("c"))]  # region {b#0, b#1, c#0, c#1}
    c, commands = started([vertex("a", 1), vertex("b", 2), vertex("c", 2)], edges, mode=LAZY)
    assert commands == [RequestSlot("default/0", UNKNOWN)]
    c.assign(commands)

    out = c.finish(ev("a", 0))

    # default/0, asked for by a's region, is still held for b#0 and c#0: they wait for
    # default/1 all the same
    assert out == [RequestSlot("default/1", UNKNOWN)]
    assert c.state(ev("b", 0)) is S.SCHEDULED and c.state(ev("c", 0)) is S.SCHEDULED
    deployed = c.assign(out)
    assert [(d.descriptor.vertex_id, d.descriptor.subtask_index, d.descriptor.allocation_id)
            for d in deployed] == [("b", 0, "alloc-0"), ("b", 1, "alloc-1"),
                                   ("c", 0, "alloc-0"), ("c", 1, "alloc-1")]


def test_lazy_schedules_regions_without_blocking_inputs_at_once():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("c"), partition_type=BLOCKING),
             JobEdge(JobVertexID("b"), JobVertexID("c"), partition_type=BLOCKING)]
    c, commands = started([vertex("a", 1), vertex("b", 1, group=None), vertex("c", 1)],
                          edges, mode=LAZY)
    c.assign(commands)
    assert set(c.deployed) == {ev("a", 0), ev("b", 0)}

    assert of(c.finish(ev("a", 0)), DeployTask) == []  # c still waits for b
    assert of(c.finish(ev("b", 0)), DeployTask) != []


# ---- failures and cancellation --------------------------------------------------------------

def test_a_task_failure_cancels_the_others_and_fails_the_job_naming_vertex_and_error():
    c, commands = started([vertex("a", 2), vertex("x", 1, group=None)])
    c.assign([r for r in commands if r.request_id != "default/1"])  # a#1 still waits
    c.report(ev("x", 0), S.RUNNING)

    out = c.report(ev("a", 0), S.FAILED, "ZeroDivisionError: division by zero")

    assert c.s.job_status is JobStatus.FAILING
    x = c.deployed[ev("x", 0)]
    assert of(out, CancelTask) == [CancelTask(x.attempt_id, ResourceID("te-1"),
                                              AllocationID("alloc-1"), "te-1:1")]
    assert c.state(ev("a", 1)) is S.CANCELED  # never deployed: nothing to cancel
    assert CancelSlotRequest("default/1") in out and ReleaseSlot("default/0") in out
    assert of(out, JobTerminated) == []

    last = c.report(ev("x", 0), S.CANCELED)

    assert last == [ReleaseSlot("x#0"), JobTerminated(JobStatus.FAILED, c.s.failure_cause)]
    assert c.s.job_status is JobStatus.FAILED
    assert "A (1/2)" in c.s.failure_cause and "division by zero" in c.s.failure_cause


def test_only_the_first_failure_is_the_cause_and_a_finish_while_canceling_counts_as_canceled():
    c, commands = started([vertex("a", 3)])
    c.assign(commands)
    c.report(ev("a", 0), S.FAILED, "first")

    c.report(ev("a", 1), S.FAILED, "second")
    last = c.report(ev("a", 2), S.FINISHED)

    assert last[-1] == JobTerminated(JobStatus.FAILED, c.s.failure_cause)
    assert "first" in c.s.failure_cause and "second" not in c.s.failure_cause
    assert c.state(ev("a", 1)) is S.CANCELED and c.state(ev("a", 2)) is S.CANCELED


def test_cancel_cancels_running_tasks_and_pending_requests_and_ends_canceled():
    c, commands = started([vertex("a", 2)])
    c.assign([RequestSlot("default/0", UNKNOWN)])
    c.report(ev("a", 0), S.RUNNING)

    out = c.s.cancel(5.0)

    assert c.s.job_status is JobStatus.CANCELLING
    assert of(out, CancelTask) and of(out, CancelTask)[0].attempt_id == \
        c.deployed[ev("a", 0)].attempt_id
    assert of(out, CancelSlotRequest) == [CancelSlotRequest("default/1")]
    assert c.s.cancel(6.0) == []  # idempotent
    assert c.report(ev("a", 0), S.CANCELED) == [ReleaseSlot("default/0"),
                                                JobTerminated(JobStatus.CANCELED, None)]
    assert c.s.job_status is JobStatus.CANCELED
    # the slot of the cancelled request arrives anyway: give it straight back
    late = SlotInfo(AllocationID("late"), ResourceID("te"), 0, "te:1")
    assert c.s.slot_assigned("default/1", late, 7.0) == [ReleaseSlot("default/1")]


def test_a_failed_job_withdraws_its_pending_requests_before_it_gives_slots_back():
    """The SlotPool serves a slot given back to its oldest pending request: were that one
    of the job's withdrawn requests, the slot would come straight back and go to the next,
    through all of them (found by tests/robustness: 10650 of them blocked the AppMaster)."""
    c, commands = started([vertex("a", 4)])
    c.assign([RequestSlot("default/0", UNKNOWN)])
    c.report(ev("a", 0), S.RUNNING)

    out = c.report(ev("a", 0), S.FAILED, "boom")

    assert c.s.job_status is JobStatus.FAILED
    given_back = [type(command) for command in out
                  if isinstance(command, (ReleaseSlot, CancelSlotRequest))]
    assert given_back == [CancelSlotRequest] * 3 + [ReleaseSlot]


def test_cancel_before_any_slot_arrived_ends_canceled_at_once():
    c, commands = started([vertex("a", 1)])

    assert c.s.cancel(1.0) == [CancelSlotRequest("default/0"),
                               JobTerminated(JobStatus.CANCELED, None)]


def test_a_stale_attempts_report_changes_nothing():
    c, commands = started([vertex("a", 1)])
    c.assign(commands)
    before = c.s.vertex_states()

    for state in (S.RUNNING, S.FINISHED, S.FAILED):
        assert c.s.task_state_changed(ExecutionAttemptID("old-attempt"), state, "x", 1.0) == []

    assert c.s.vertex_states() == before and c.s.job_status is JobStatus.RUNNING
    assert c.state(ev("a", 0)) is S.DEPLOYING


def test_a_task_executor_cannot_report_states_only_the_job_master_sets():
    c, commands = started([vertex("a", 1)])
    c.assign(commands)

    for state in (S.CREATED, S.SCHEDULED, S.DEPLOYING, S.CANCELING):
        with pytest.raises(ValueError):
            c.report(ev("a", 0), state)
    assert c.state(ev("a", 0)) is S.DEPLOYING


def test_reports_after_a_terminal_state_or_older_than_known_progress_are_ignored():
    c, commands = started([vertex("a", 2)])
    c.assign(commands)
    c.report(ev("a", 0), S.RUNNING)
    assert c.report(ev("a", 0), S.INITIALIZING) == []
    assert c.state(ev("a", 0)) is S.RUNNING
    c.report(ev("a", 0), S.FINISHED)

    assert c.report(ev("a", 0), S.FAILED, "late") == []
    assert c.s.job_status is JobStatus.RUNNING


def test_a_slot_lost_fails_its_tasks_and_the_job():
    c, commands = started([vertex("a", 2), vertex("b", 2)],
                          [JobEdge(JobVertexID("a"), JobVertexID("b"))])
    c.assign(commands)
    c.report(ev("a", 1), S.RUNNING)

    out = c.s.slot_lost("default/0", "TaskExecutor te-0 lost", 3.0)

    assert c.state(ev("a", 0)) is S.FAILED and c.state(ev("b", 0)) is S.FAILED
    assert {t.attempt_id for t in of(out, CancelTask)} == {
        c.deployed[ev("a", 1)].attempt_id, c.deployed[ev("b", 1)].attempt_id}
    assert ReleaseSlot("default/0") not in out  # it is gone already
    c.report(ev("a", 1), S.CANCELED)
    last = c.report(ev("b", 1), S.CANCELED)
    assert last == [ReleaseSlot("default/1"), JobTerminated(JobStatus.FAILED, c.s.failure_cause)]
    assert "te-0 lost" in c.s.failure_cause


def test_a_lost_slot_that_held_only_waiting_subtasks_is_requested_again_for_them():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING),
             JobEdge(JobVertexID("x"), JobVertexID("b"), partition_type=BLOCKING)]
    c, commands = started([vertex("a", 1), vertex("b", 1), vertex("x", 1, group=None)], edges,
                          mode=LAZY)
    c.assign(commands)
    c.finish(ev("a", 0))  # default/0 stays held for b, which also waits for x

    assert c.s.slot_lost("default/0", "TaskExecutor te-0 lost", 5.0) == []
    assert c.s.job_status is JobStatus.RUNNING
    out = c.finish(ev("x", 0))

    assert of(out, RequestSlot) == [RequestSlot("default/0", UNKNOWN)]
    assert c.state(ev("b", 0)) is S.SCHEDULED


def test_a_slot_request_that_fails_fails_the_job():
    c, commands = started([vertex("a", 2)])
    c.assign([RequestSlot("default/0", UNKNOWN)])

    out = c.s.slot_request_failed("default/1", "no TaskExecutor fits 64 cpu", 2.0)

    assert c.state(ev("a", 1)) is S.FAILED
    assert c.s.execution_graph.vertex(ev("a", 1)).current_execution.failure_cause.endswith(
        "no TaskExecutor fits 64 cpu")
    assert of(out, CancelTask)[0].attempt_id == c.deployed[ev("a", 0)].attempt_id
    assert "A (2/2)" in c.s.failure_cause
    assert c.s.slot_request_failed("default/1", "again", 3.0) == []


def test_a_task_the_task_executor_canceled_on_its_own_is_a_failure():
    c, commands = started([vertex("a", 1)])
    c.assign(commands)

    out = c.report(ev("a", 0), S.CANCELED)

    assert out[-1].status is JobStatus.FAILED


# ---- queries --------------------------------------------------------------------------------

def test_vertex_states_and_summaries_count_subtasks_per_state():
    c, commands = started([vertex("a", 3), vertex("b", 1)])
    c.assign(commands)
    c.finish(ev("a", 0))
    c.report(ev("a", 1), S.RUNNING)

    states = c.s.vertex_states()

    assert states[JobVertexID("a")][S.FINISHED] == 1
    assert states[JobVertexID("a")][S.RUNNING] == 1
    assert states[JobVertexID("a")][S.DEPLOYING] == 1
    assert states[JobVertexID("b")][S.DEPLOYING] == 1
    assert sum(states[JobVertexID("b")].values()) == 1
    a, b = c.s.vertex_summaries()
    assert (a.name, a.parallelism, a.state) == ("A", 3, S.RUNNING)
    assert (b.name, b.parallelism, b.state) == ("B", 1, S.DEPLOYING)


def test_start_twice_is_a_programming_error():
    c, _ = started([vertex("a", 1)])

    with pytest.raises(IllegalStateTransition):
        c.s.start(1.0)


# ---- restarts -------------------------------------------------------------------------------

class Restarts(Cluster):
    """A Cluster whose SlotPool hands out a new slot for every request (a released slot
    asked for again included), and whose JobMaster calls restart_due when told to."""

    def __init__(self, s: Scheduler) -> None:
        super().__init__(s)
        self.allocations = 0

    def assign(self, commands) -> list:
        out = []
        for request in of(commands, RequestSlot):
            n = self.allocations
            self.allocations += 1
            slot = SlotInfo(AllocationID(f"alloc-{n}"), ResourceID(f"te-{n}"), 0, f"te-{n}:1")
            self.slots[request.request_id] = slot
            out += self.s.slot_assigned(request.request_id, slot, self.now)
        self.record(commands + out)
        return out

    def restart_due(self, commands) -> list:
        """The delay of the one ScheduleRestart in `commands` passes; slots it asks for
        are assigned. Returns every command that followed."""
        [restart] = of(commands, ScheduleRestart)
        self.now += restart.delay
        out = self.s.restart_due(restart.token, self.now)
        self.record(out)
        return out + self.assign(out)

    def attempt(self, evid: ExecutionVertexID):
        return self.s.execution_graph.vertex(evid).current_execution


def restartable(vertices, edges=(), mode=EAGER, failover="full", attempts=2,
                delay=5.0) -> tuple[Restarts, list]:
    s = Scheduler(ExecutionGraph(JobGraph(JobID("job"), "test", vertices, list(edges), mode)),
                  failover, FixedDelayRestartBackoffTimeStrategy(attempts, delay))
    c = Restarts(s)
    commands = s.start(0.0)
    return c, commands + c.assign(commands)


def test_without_a_restart_strategy_the_first_failure_still_fails_the_job():
    c, _ = started([vertex("a", 1)])
    c.assign([RequestSlot("default/0", UNKNOWN)])

    out = c.report(ev("a", 0), S.FAILED, "boom")

    assert out[-1] == JobTerminated(JobStatus.FAILED, c.s.failure_cause)
    assert of(out, ScheduleRestart) == [] and c.s.restarts == 0
    assert c.s.root_cause == c.s.failure_cause == "A (1/1) failed: boom"


def test_fixed_delay_2_survives_two_failures_and_fails_on_the_third_with_its_cause():
    c, _ = restartable([vertex("a", 2)], attempts=2, delay=5.0)

    for n in (1, 2):
        c.report(ev("a", 0), S.RUNNING)
        c.report(ev("a", 1), S.RUNNING)
        out = c.report(ev("a", 0), S.FAILED, f"boom {n}")

        assert c.s.job_status is JobStatus.RUNNING and c.s.restarts == n
        assert of(out, CancelTask) == [CancelTask(c.deployed[ev("a", 1)].attempt_id,
                                                  c.slots["default/1"].resource_id,
                                                  c.slots["default/1"].allocation_id,
                                                  c.slots["default/1"].task_executor_address)]
        assert out[-1] == ScheduleRestart(5.0, n) and of(out, JobTerminated) == []
        assert c.report(ev("a", 1), S.CANCELED) == [ReleaseSlot("default/1")]
        redeployed = c.restart_due(out)
        assert sorted((d.descriptor.subtask_index, d.descriptor.attempt_number)
                      for d in of(redeployed, DeployTask)) == [(0, n), (1, n)]
    c.report(ev("a", 1), S.RUNNING)

    out = c.report(ev("a", 1), S.FAILED, "boom 3")

    assert of(out, ScheduleRestart) == [] and c.s.job_status is JobStatus.FAILING
    last = c.report(ev("a", 0), S.CANCELED)
    assert last[-1] == JobTerminated(JobStatus.FAILED, "A (2/2) failed: boom 3")
    assert c.s.root_cause == "A (2/2) failed: boom 3"
    assert [(r.number, r.failed_task, r.cause) for r in c.s.restart_records()] == [
        (1, "A (1/2)", "A (1/2) failed: boom 1"), (2, "A (1/2)", "A (1/2) failed: boom 2")]
    assert c.s.restart_records()[0].restarted == (ev("a", 0), ev("a", 1))


def test_restarted_attempts_have_new_ids_and_numbers_and_stale_reports_are_ignored():
    c, _ = restartable([vertex("a", 1)], attempts=5)
    old = c.deployed[ev("a", 0)].attempt_id
    out = c.report(ev("a", 0), S.FAILED, "boom")
    c.restart_due(out)

    new = c.deployed[ev("a", 0)]
    assert new.attempt_id != old and new.attempt_number == 1
    assert c.attempt(ev("a", 0)).attempt_id == new.attempt_id
    assert [e.attempt_id for e in c.s.execution_graph.vertex(ev("a", 0)).prior_executions] == [old]
    for state in (S.RUNNING, S.FINISHED, S.FAILED, S.CANCELED):
        assert c.s.task_state_changed(old, state, "late news", 99.0) == []
    assert c.state(ev("a", 0)) is S.DEPLOYING and c.s.restarts == 1

    assert c.finish(ev("a", 0))[-1] == JobTerminated(JobStatus.FINISHED, None)


def test_the_restart_waits_for_the_delay_and_for_every_cancellation():
    c, _ = restartable([vertex("a", 2)])
    c.report(ev("a", 1), S.RUNNING)
    out = c.report(ev("a", 0), S.FAILED, "boom")
    [schedule] = of(out, ScheduleRestart)
    assert c.s.pending_restarts == 1

    assert c.s.restart_due(schedule.token, 10.0) == []  # a#1 is still being cancelled
    assert c.s.restart_due(schedule.token, 11.0) == []  # already due: nothing more

    after = c.report(ev("a", 1), S.CANCELED)
    # a#0's slot went back at the failure and is asked for again; a#1's is still held
    assert of(after, RequestSlot) == [RequestSlot("default/0", UNKNOWN)]
    [deploy] = of(after, DeployTask)
    assert (deploy.descriptor.subtask_index, deploy.descriptor.attempt_number) == (1, 1)
    assert deploy.descriptor.allocation_id == c.slots["default/1"].allocation_id
    assert of(after, ReleaseSlot) == [] and c.s.pending_restarts == 0


def test_cancel_during_a_pending_restart_ends_canceled_and_the_restart_never_happens():
    c, _ = restartable([vertex("a", 2)])
    out = c.report(ev("a", 0), S.FAILED, "boom")
    [schedule] = of(out, ScheduleRestart)

    cancelled = c.s.cancel(20.0)

    assert of(cancelled, CancelTask) == []  # a#1 is already being cancelled
    last = c.report(ev("a", 1), S.CANCELED)
    assert last[-1] == JobTerminated(JobStatus.CANCELED, None)
    assert c.s.restart_due(schedule.token, 30.0) == []
    assert c.s.job_status is JobStatus.CANCELED and c.s.pending_restarts == 0


def test_a_restart_due_after_the_job_failed_does_nothing():
    c, _ = restartable([vertex("a", 2)], failover="region", attempts=1)
    first = c.report(ev("a", 0), S.FAILED, "one")  # a#1 is a region of its own: runs on
    [schedule] = of(first, ScheduleRestart)

    final = c.report(ev("a", 1), S.FAILED, "two")

    assert final[-1] == JobTerminated(JobStatus.FAILED, "A (2/2) failed: two")
    assert c.s.restart_due(schedule.token, 50.0) == [] and c.s.pending_restarts == 0
    assert c.state(ev("a", 0)) is S.FAILED  # not restarted


def test_region_failover_restarts_only_the_failed_region():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b")),   # pipelined: region {a, b}
             JobEdge(JobVertexID("c"), JobVertexID("d"))]   # pipelined: region {c, d}
    c, _ = restartable([vertex("a", 1), vertex("b", 1), vertex("c", 1, group=None),
                        vertex("d", 1, group=None)], edges, failover="region")
    for name in "abcd":
        c.report(ev(name, 0), S.RUNNING)
    c_attempt = c.attempt(ev("c", 0))

    out = c.report(ev("b", 0), S.FAILED, "boom")

    [record] = c.s.restart_records()
    assert record.restarted == (ev("a", 0), ev("b", 0)) and record.failed_task == "B (1/1)"
    assert [t.attempt_id for t in of(out, CancelTask)] == [c.deployed[ev("a", 0)].attempt_id]
    assert c.attempt(ev("c", 0)) is c_attempt and c.state(ev("c", 0)) is S.RUNNING
    c.report(ev("a", 0), S.CANCELED)
    redeployed = c.restart_due(out)
    assert {(d.descriptor.vertex_id, d.descriptor.attempt_number)
            for d in of(redeployed, DeployTask)} == {("a", 1), ("b", 1)}
    assert c.attempt(ev("d", 0)).attempt_number == 0


def test_a_consumer_region_restarts_alone_and_reads_the_kept_blocking_result_again():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 2)], edges, mode=LAZY, failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.report(ev("b", 1), S.RUNNING)

    out = c.report(ev("b", 0), S.FAILED, "ValueError: bad record")

    assert c.s.restart_records()[0].restarted == (ev("b", 0),)
    assert of(out, CancelTask) == [] and ReleaseSlot("default/0") in out
    redeployed = c.restart_due(out)
    # its shared slot was given back meanwhile: asked for again, then deployed into
    assert of(redeployed, RequestSlot) == [RequestSlot("default/0", UNKNOWN)]
    assert [(d.descriptor.vertex_id, d.descriptor.subtask_index, d.descriptor.attempt_number)
            for d in of(redeployed, DeployTask)] == [("b", 0, 1)]
    assert c.attempt(ev("a", 0)).attempt_number == 0  # the producer did not re-run
    c.finish(ev("b", 1))
    assert c.finish(ev("b", 0))[-1] == JobTerminated(JobStatus.FINISHED, None)


def test_a_restarted_task_deploys_into_the_shared_slot_its_group_still_holds():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 1), vertex("b", 1)], edges, mode=EAGER, failover="region")
    c.report(ev("a", 0), S.RUNNING)  # b waits for a's blocking output, deployed already

    out = c.report(ev("b", 0), S.FAILED, "boom")
    redeployed = c.restart_due(out)

    assert of(out, ReleaseSlot) == [] and of(redeployed, RequestSlot) == []
    [deploy] = of(redeployed, DeployTask)
    assert deploy.descriptor.allocation_id == c.slots["default/0"].allocation_id
    assert c.attempt(ev("a", 0)).attempt_number == 0


def test_a_restarted_region_waits_for_all_its_slots_again_a_held_one_counting():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING),
             JobEdge(JobVertexID("b"), JobVertexID("c"))]  # regions {a#0}, {b#0, c#0}
    c, _ = restartable([vertex("a", 1), vertex("b", 1), vertex("c", 1, group=None)], edges,
                       mode=EAGER, failover="region")
    c.report(ev("a", 0), S.RUNNING)  # keeps default/0, which b#0 shares

    out = c.report(ev("c", 0), S.FAILED, "boom")
    assert ReleaseSlot("c#0") in out
    c.report(ev("b", 0), S.CANCELED)
    [schedule] = of(out, ScheduleRestart)
    redeployed = c.s.restart_due(schedule.token, 10.0)

    assert redeployed == [RequestSlot("c#0", UNKNOWN)]  # b#0's slot is held: not enough
    assert c.state(ev("b", 0)) is S.SCHEDULED
    deployed = c.assign(redeployed)
    assert [(d.descriptor.vertex_id, d.descriptor.attempt_number, d.descriptor.allocation_id)
            for d in deployed] == [("b", 1, "alloc-0"), ("c", 1, "alloc-2")]


def test_a_partition_read_failure_reruns_the_producer_first():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 1, group=None)], edges, mode=LAZY,
                       failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.assign([RequestSlot("b#0", UNKNOWN)])
    c.report(ev("b", 0), S.RUNNING)
    result = c.s.execution_graph.results()[0].id

    out = c.report(ev("b", 0), S.FAILED, "the producer's TaskExecutor is unreachable",
                   PARTITION, [IntermediateResultPartitionID(result, 1)])

    assert c.s.restart_records()[0].restarted == (ev("a", 1), ev("b", 0))
    redeployed = c.restart_due(out)
    assert [(d.descriptor.vertex_id, d.descriptor.subtask_index)
            for d in of(redeployed, DeployTask)] == [("a", 1)]  # b waits for a#1 again
    assert c.state(ev("b", 0)) is S.CREATED and c.attempt(ev("a", 0)).attempt_number == 0
    after = c.finish(ev("a", 1))
    assert [(d.descriptor.vertex_id, d.descriptor.attempt_number)
            for d in of(after, DeployTask) + of(c.assign(after), DeployTask)] == [("b", 1)]


def test_a_failure_whose_text_reads_like_a_partition_error_is_the_tasks_own_by_its_kind():
    # The kind decides, never the text: a user's error quoting a partition error (as the
    # old text match took for one) re-runs no producer.
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 1, group=None)], edges, mode=LAZY,
                       failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.assign([RequestSlot("b#0", UNKNOWN)])
    result = c.s.execution_graph.results()[0].id

    c.report(ev("b", 0), S.FAILED,
             f"ValueError: PartitionFailed: subpartition 0 of result partition {result}#1 of "
             "job job: the producer's TaskExecutor at te-1:1 is unreachable", TASK)

    assert c.s.restart_records()[0].restarted == (ev("b", 0),)


def test_a_slot_lost_with_an_unreachable_task_executor_is_a_task_failure():
    # Whatever its cause says: the outputs that TaskExecutor kept are task_executor_lost's.
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 1, group=None)], edges, mode=LAZY,
                       failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.assign([RequestSlot("b#0", UNKNOWN)])
    c.report(ev("b", 0), S.RUNNING)

    c.s.slot_lost("b#0", "TaskExecutor te-2 is unreachable: connection refused", 9.0)

    assert c.s.restart_records()[0].restarted == (ev("b", 0),)


def test_lost_partitions_of_another_job_or_past_the_end_are_ignored():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING,
                     distribution=DistributionPattern.POINTWISE)]
    c, _ = restartable([vertex("a", 2), vertex("b", 2, group=None)], edges, mode=LAZY,
                       failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.assign([RequestSlot("b#0", UNKNOWN), RequestSlot("b#1", UNKNOWN)])
    result = c.s.execution_graph.results()[0].id

    c.report(ev("b", 0), S.FAILED, "lost", PARTITION,
             [IntermediateResultPartitionID("not-ours", 0),
              IntermediateResultPartitionID(result, 7)])

    # Nothing known lost: every blocking input of b#0 from outside its region is (a#0).
    assert c.s.restart_records()[0].restarted == (ev("a", 0), ev("b", 0))


def test_outputs_lost_with_a_task_executor_rerun_with_the_consumer_that_needs_them():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 1, group=None)], edges, mode=LAZY,
                       failover="region")
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    c.assign([RequestSlot("b#0", UNKNOWN)])
    lost_te = c.attempt(ev("a", 0)).slot.resource_id

    assert c.s.task_executor_lost(lost_te, 9.0) == []
    c.report(ev("b", 0), S.FAILED, "not registered within 60 s", PARTITION)

    assert c.s.restart_records()[0].restarted == (ev("a", 0), ev("b", 0))


def test_a_later_failure_takes_over_the_subtasks_of_a_pending_restart():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING,
                     deterministic=False)]
    c, _ = restartable([vertex("a", 1), vertex("b", 2)], edges, mode=LAZY, failover="region",
                       attempts=5)
    c.finish(ev("a", 0))
    c.assign([RequestSlot("default/1", UNKNOWN)])
    first = c.report(ev("b", 0), S.FAILED, "boom")                  # restarts b#0
    second = c.report(ev("b", 1), S.FAILED, "x", PARTITION)  # a#0 and all of b

    assert c.s.restart_records()[1].restarted == (ev("a", 0), ev("b", 0), ev("b", 1))
    assert c.restart_due(first) == []  # b#0 is the second restart's now
    assert c.state(ev("b", 0)) is S.FAILED and c.attempt(ev("b", 0)).attempt_number == 0
    redeployed = c.restart_due(second)
    assert [(d.descriptor.vertex_id, d.descriptor.attempt_number)
            for d in of(redeployed, DeployTask)] == [("a", 1)]
    after = c.finish(ev("a", 0))
    deployed = of(after, DeployTask) + of(c.assign(after), DeployTask)
    assert sorted((d.descriptor.subtask_index, d.descriptor.attempt_number)
                  for d in deployed) == [(0, 1), (1, 1)]


def test_a_restarted_consumer_waits_while_its_producer_waits_for_its_own_restart():
    edges = [JobEdge(JobVertexID("a"), JobVertexID("b"), partition_type=BLOCKING)]
    c, _ = restartable([vertex("a", 2), vertex("b", 2)], edges, mode=LAZY, failover="region",
                       attempts=5)
    c.finish(ev("a", 0))
    c.finish(ev("a", 1))
    result = c.s.execution_graph.results()[0].id
    first = c.report(ev("b", 0), S.FAILED, "boom")  # b#0 only: a's output is kept
    second = c.report(ev("b", 1), S.FAILED, "gone",  # a#1's output is gone
                      PARTITION, [IntermediateResultPartitionID(result, 1)])
    assert c.s.restart_records()[1].restarted == (ev("a", 1), ev("b", 1))

    # b#0's restart comes first; a#1 is finished but about to re-run: b#0 must not read it
    assert of(c.restart_due(first), DeployTask) == []
    assert c.state(ev("b", 0)) is S.CREATED
    assert [d.descriptor.vertex_id for d in of(c.restart_due(second), DeployTask)] == ["a"]
    after = c.finish(ev("a", 1))
    assert sorted(d.descriptor.subtask_index
                  for d in of(after, DeployTask) + of(c.assign(after), DeployTask)) == [0, 1]


def test_restart_individual_restarts_one_task_and_refuses_a_job_with_edges():
    c, _ = restartable([vertex("a", 2)], failover="restart-individual")
    c.report(ev("a", 1), S.RUNNING)

    out = c.report(ev("a", 0), S.FAILED, "boom")

    assert of(out, CancelTask) == [] and c.s.restart_records()[0].restarted == (ev("a", 0),)
    redeployed = c.restart_due(out)
    assert [d.descriptor.subtask_index for d in of(redeployed, DeployTask)] == [0]
    with pytest.raises(ValueError, match="'jobmanager.execution.failover-strategy'"):
        scheduler_with = Scheduler(ExecutionGraph(JobGraph(
            JobID("job"), "test", [vertex("a", 1), vertex("b", 1)],
            [JobEdge(JobVertexID("a"), JobVertexID("b"))])), "restart-individual")
        del scheduler_with


def test_one_slot_loss_is_one_failure():
    c, _ = restartable([vertex("a", 2), vertex("b", 2)],
                       [JobEdge(JobVertexID("a"), JobVertexID("b"))], attempts=1)

    out = c.s.slot_lost("default/0", "TaskExecutor te-0 lost", 3.0)

    assert c.s.restarts == 1 and len(of(out, ScheduleRestart)) == 1
    assert c.s.job_status is JobStatus.RUNNING
    assert "te-0 lost" in c.s.root_cause


POINTWISE = DistributionPattern.POINTWISE


@pytest.mark.parametrize("vertices, edges, slots", [
    # one pipelined all-to-all region: the widest of the shared group
    ([vertex("a", 3), vertex("b", 5)], [JobEdge("a", "b")], 5),
    # pointwise: a region per subtask pair, one shared slot each
    ([vertex("a", 4), vertex("b", 4)], [JobEdge("a", "b", POINTWISE)], 1),
    # a lone vertex: a region per subtask
    ([vertex("a", 7)], [], 1),
    # blocking between wide stages: each side its own regions
    ([vertex("a", 3), vertex("b", 6), vertex("c", 2)],
     [JobEdge("a", "b", partition_type=BLOCKING), JobEdge("b", "c")], 6),
    # groups: slot per subtask of each group, and of each vertex without one
    ([vertex("a", 2, "x"), vertex("b", 3, "y"), vertex("c", 4, None)],
     [JobEdge("a", "b"), JobEdge("b", "c")], 3 + 2 + 4),
    # pointwise joined to an all-to-all edge: all one region
    ([vertex("a", 3), vertex("b", 3), vertex("c", 2, None)],
     [JobEdge("a", "b", POINTWISE), JobEdge("b", "c")], 3 + 2),
])
def test_slots_at_once_from_the_job_graph_matches_the_scheduler(vertices, edges, slots):
    """The Dispatcher refuses a job wider than the cluster from the job graph, before it
    builds an ExecutionGraph; both counts must agree with the regions the scheduler runs."""
    graph = JobGraph(JobID("job"), "test", vertices, edges, LAZY)
    assert slots_at_once_from(graph) == slots
    assert Scheduler(ExecutionGraph(graph)).slots_at_once == slots
