"""The ExecutionGraph: expansion of a JobGraph by parallelism, regions, legal states."""

from __future__ import annotations

import pytest

from flinkyarn.ids import ExecutionAttemptID, ExecutionVertexID, JobID, JobVertexID
from flinkyarn.jobgraph import (DistributionPattern, JobEdge, JobGraph, JobVertex,
                                ResultPartitionType)
from yarn_am.jobmaster.execution_graph import (ExecutionGraph, ExecutionState,
                                               IllegalStateTransition, JobStatus,
                                               pointwise_targets)

PIPELINED, BLOCKING = ResultPartitionType.PIPELINED, ResultPartitionType.BLOCKING
ALL_TO_ALL, POINTWISE = DistributionPattern.ALL_TO_ALL, DistributionPattern.POINTWISE
S = ExecutionState


def vertex(name: str, parallelism: int) -> JobVertex:
    return JobVertex(JobVertexID(name), name.upper(), parallelism, b"code-" + name.encode())


def edge(source: str, target: str, distribution=ALL_TO_ALL, partition_type=PIPELINED) -> JobEdge:
    return JobEdge(JobVertexID(source), JobVertexID(target), distribution, partition_type)


def graph(vertices: list[JobVertex], edges: list[JobEdge] = ()) -> ExecutionGraph:
    return ExecutionGraph(JobGraph(JobID("job"), "test job", vertices, list(edges)))


def ev(name: str, index: int) -> ExecutionVertexID:
    return ExecutionVertexID(JobVertexID(name), index)


def consumed(eg: ExecutionGraph, name: str, index: int) -> list[tuple[str, int]]:
    return [(p.producer.vertex_id, p.partition_number)
            for p in eg.vertex(ev(name, index)).consumed_partitions]


# ---- expansion ------------------------------------------------------------------------------

def test_each_job_vertex_expands_into_parallelism_subtasks_with_a_created_attempt():
    eg = graph([vertex("a", 3), vertex("b", 2)], [edge("a", "b")])

    assert [v.id for v in eg.vertices_in_topological_order()] == ["a", "b"]
    a = eg.job_vertex(JobVertexID("a"))
    assert [v.id for v in a.task_vertices] == [ev("a", 0), ev("a", 1), ev("a", 2)]
    executions = [v.current_execution for v in eg.execution_vertices()]
    assert len(executions) == 5
    assert len({e.attempt_id for e in executions}) == 5
    for execution in executions:
        assert execution.state is S.CREATED and execution.attempt_number == 0
        assert execution.slot is None and execution.failure_cause is None
        assert eg.execution(execution.attempt_id) is execution
    assert eg.execution(ExecutionAttemptID("unknown")) is None
    assert eg.status is JobStatus.CREATED


def test_topological_order_follows_edges_not_declaration_order():
    eg = graph([vertex("sink", 1), vertex("map", 1), vertex("src", 1)],
               [edge("map", "sink"), edge("src", "map")])

    assert [v.id for v in eg.vertices_in_topological_order()] == ["src", "map", "sink"]


def test_all_to_all_connects_every_producer_partition_to_every_consumer():
    eg = graph([vertex("a", 3), vertex("b", 2)], [edge("a", "b", ALL_TO_ALL)])

    [result] = eg.results()
    assert [p.partition_number for p in result.partitions] == [0, 1, 2]
    assert [p.producer for p in result.partitions] == [ev("a", 0), ev("a", 1), ev("a", 2)]
    for partition in result.partitions:
        assert partition.consumers == [ev("b", 0), ev("b", 1)]
    for j in range(2):
        assert consumed(eg, "b", j) == [("a", 0), ("a", 1), ("a", 2)]
        assert eg.producers_of(ev("b", j)) == [ev("a", 0), ev("a", 1), ev("a", 2)]
    assert eg.consumers_of(ev("a", 1)) == [ev("b", 0), ev("b", 1)]


def test_pointwise_with_equal_parallelism_connects_i_to_i():
    eg = graph([vertex("a", 3), vertex("b", 3)], [edge("a", "b", POINTWISE)])

    for i in range(3):
        assert consumed(eg, "b", i) == [("a", i)]
        assert eg.consumers_of(ev("a", i)) == [ev("b", i)]


def test_pointwise_fan_in_gives_each_consumer_a_contiguous_range_of_producers():
    eg = graph([vertex("a", 4), vertex("b", 3)], [edge("a", "b", POINTWISE)])

    assert [consumed(eg, "b", j) for j in range(3)] == [
        [("a", 0)], [("a", 1)], [("a", 2), ("a", 3)]]
    assert eg.consumers_of(ev("a", 3)) == [ev("b", 2)]


def test_pointwise_fan_out_gives_each_consumer_exactly_one_producer():
    eg = graph([vertex("a", 2), vertex("b", 3)], [edge("a", "b", POINTWISE)])

    assert [consumed(eg, "b", j) for j in range(3)] == [[("a", 0)], [("a", 0)], [("a", 1)]]
    assert eg.consumers_of(ev("a", 0)) == [ev("b", 0), ev("b", 1)]
    assert eg.consumers_of(ev("a", 1)) == [ev("b", 2)]


@pytest.mark.parametrize("producers,consumers", [(1, 5), (5, 1), (3, 7), (7, 3), (6, 4)])
def test_pointwise_connects_every_partition_and_every_consumer(producers, consumers):
    targets = pointwise_targets(producers, consumers)

    assert len(targets) == producers
    assert all(targets)  # no partition without a reader
    readers = [j for t in targets for j in t]
    assert sorted(set(readers)) == list(range(consumers))  # no consumer without input
    assert readers == sorted(readers)  # contiguous ranges, in order
    if producers <= consumers:
        assert len(readers) == consumers  # each consumer reads exactly one partition
    else:
        assert len(readers) == producers  # each partition has exactly one reader


@pytest.mark.parametrize("distribution", [ALL_TO_ALL, POINTWISE])
@pytest.mark.parametrize("producers,consumers", [(1, 5), (5, 1), (3, 7), (7, 3), (4, 4)])
def test_each_consumer_reads_the_subpartition_of_its_place_among_the_readers(
        distribution, producers, consumers):
    eg = graph([vertex("a", producers), vertex("b", consumers)], [edge("a", "b", distribution)])

    for partition in eg.result(eg.vertex(ev("a", 0)).produced_partitions[0].result.id).partitions:
        for place, reader in enumerate(sorted(partition.consumers)):
            assert partition.subpartition_of(reader) == place
        stranger = next((ev("b", j) for j in range(consumers)
                         if ev("b", j) not in partition.consumers), ev("b", consumers))
        with pytest.raises(ValueError, match="does not read partition"):
            partition.subpartition_of(stranger)


def test_a_vertex_with_two_inputs_consumes_both_results_in_edge_order():
    eg = graph([vertex("a", 1), vertex("b", 2), vertex("c", 1)],
               [edge("a", "c"), edge("b", "c")])

    assert consumed(eg, "c", 0) == [("a", 0), ("b", 0), ("b", 1)]
    assert [r.id for r in eg.job_vertex(JobVertexID("c")).inputs] == [r.id for r in eg.results()]


def test_result_ids_are_deterministic_for_the_same_job_graph():
    make = lambda: graph([vertex("a", 1), vertex("b", 1)], [edge("a", "b")])  # noqa: E731

    assert [r.id for r in make().results()] == [r.id for r in make().results()]


# ---- pipelined regions ----------------------------------------------------------------------

def test_pipelined_regions_are_split_at_blocking_edges():
    eg = graph([vertex("a", 2), vertex("b", 2), vertex("c", 2)],
               [edge("a", "b", POINTWISE, PIPELINED), edge("b", "c", ALL_TO_ALL, BLOCKING)])

    assert eg.pipelined_regions() == [
        frozenset({ev("a", 0), ev("b", 0)}), frozenset({ev("a", 1), ev("b", 1)}),
        frozenset({ev("c", 0)}), frozenset({ev("c", 1)})]
    assert eg.region_of(ev("b", 1)) == frozenset({ev("a", 1), ev("b", 1)})


def test_all_to_all_pipelined_edge_joins_every_subtask_into_one_region():
    eg = graph([vertex("a", 2), vertex("b", 3)], [edge("a", "b", ALL_TO_ALL, PIPELINED)])

    assert eg.pipelined_regions() == [frozenset(v.id for v in eg.execution_vertices())]


def test_regions_depending_on_each_other_through_blocking_edges_are_merged():
    # a -blocking-> b -blocking-> c, while a and c are joined by pipelined edges to d:
    # region {a, c, d} would wait for b, which waits for it.
    eg = graph([vertex("a", 1), vertex("b", 1), vertex("c", 1), vertex("d", 1)],
               [edge("a", "b", partition_type=BLOCKING), edge("b", "c", partition_type=BLOCKING),
                edge("a", "d"), edge("c", "d")])

    assert eg.pipelined_regions() == [frozenset(v.id for v in eg.execution_vertices())]


# ---- states ---------------------------------------------------------------------------------

def test_an_execution_moves_along_the_legal_path_and_records_when():
    eg = graph([vertex("a", 1)])
    execution = eg.vertex(ev("a", 0)).current_execution

    for now, state in enumerate([S.SCHEDULED, S.DEPLOYING, S.INITIALIZING, S.RUNNING,
                                 S.FINISHED]):
        execution.transition(state, float(now))
    assert execution.state is S.FINISHED and execution.state.is_terminal
    assert execution.state_timestamps[S.RUNNING] == 3.0


@pytest.mark.parametrize("path", [
    [S.RUNNING],                                       # CREATED cannot run
    [S.SCHEDULED, S.INITIALIZING],                     # not deployed yet
    [S.SCHEDULED, S.DEPLOYING, S.RUNNING, S.DEPLOYING],  # no way back
    [S.FAILED, S.RUNNING],                             # terminal
    [S.SCHEDULED, S.DEPLOYING, S.FINISHED, S.CANCELING],  # terminal
    [S.SCHEDULED, S.DEPLOYING, S.CANCELED],            # a deployed task goes via CANCELING
    [S.SCHEDULED, S.DEPLOYING, S.CANCELING, S.RUNNING],  # cancelling is for good
])
def test_illegal_execution_transitions_raise(path):
    execution = graph([vertex("a", 1)]).vertex(ev("a", 0)).current_execution

    with pytest.raises(IllegalStateTransition):
        for state in path:
            execution.transition(state, 0.0)


def test_failed_execution_keeps_its_cause():
    execution = graph([vertex("a", 1)]).vertex(ev("a", 0)).current_execution

    execution.transition(S.FAILED, 1.0, failure_cause="boom")
    assert execution.failure_cause == "boom"


@pytest.mark.parametrize("path,legal", [
    ([JobStatus.RUNNING, JobStatus.FINISHED], True),
    ([JobStatus.RUNNING, JobStatus.FAILING, JobStatus.FAILED], True),
    ([JobStatus.RUNNING, JobStatus.FAILING, JobStatus.CANCELLING, JobStatus.CANCELED], True),
    ([JobStatus.FINISHED], False),
    ([JobStatus.RUNNING, JobStatus.FAILED], False),
    ([JobStatus.RUNNING, JobStatus.CANCELED], False),
    ([JobStatus.RUNNING, JobStatus.FINISHED, JobStatus.RUNNING], False),
    ([JobStatus.RUNNING, JobStatus.RESTARTING], False),
])
def test_job_status_transitions(path, legal):
    eg = graph([vertex("a", 1)])

    def walk():
        for now, status in enumerate(path):
            eg.transition_to(status, float(now))
    if legal:
        walk()
        assert eg.status is path[-1]
    else:
        with pytest.raises(IllegalStateTransition):
            walk()


def test_a_new_attempt_makes_the_old_one_stale_but_known():
    eg = graph([vertex("a", 1)])
    old = eg.vertex(ev("a", 0)).current_execution
    with pytest.raises(IllegalStateTransition):
        eg.reset_for_new_execution(ev("a", 0))  # the old one is not terminal yet
    old.transition(S.FAILED, 1.0, failure_cause="boom")

    new = eg.reset_for_new_execution(ev("a", 0))

    assert new.attempt_number == 1 and new.state is S.CREATED
    assert new.attempt_id != old.attempt_id
    assert eg.execution(old.attempt_id) is old and not eg.is_current(old)
    assert eg.is_current(new)


def test_all_finished_and_all_terminal_count_the_current_attempts_only():
    eg = graph([vertex("a", 2), vertex("b", 1)], [edge("a", "b")])
    a0, a1, b0 = (eg.vertex(evid).current_execution for evid in (ev("a", 0), ev("a", 1), ev("b", 0)))
    for execution in (a0, a1, b0):
        for state in (S.SCHEDULED, S.DEPLOYING):
            execution.transition(state, 1.0)
    a0.transition(S.FINISHED, 2.0)
    a1.transition(S.FAILED, 2.0, failure_cause="boom")
    assert not eg.all_terminal() and not eg.all_finished()
    b0.transition(S.CANCELING, 3.0)
    b0.transition(S.CANCELED, 4.0)
    assert eg.all_terminal() and not eg.all_finished()

    # New attempts: their failed and canceled predecessors no longer count.
    for evid in (ev("a", 1), ev("b", 0)):
        eg.reset_for_new_execution(evid)
    assert not eg.all_terminal()
    for evid in (ev("a", 1), ev("b", 0)):
        execution = eg.vertex(evid).current_execution
        for state in (S.SCHEDULED, S.DEPLOYING, S.FINISHED):
            execution.transition(state, 5.0)
    assert eg.all_finished() and eg.all_terminal()
    assert eg.all_finished() == all(v.state is S.FINISHED for v in eg.execution_vertices())
