"""Failover strategies as a specification: a graph in some state and a failure in, the
subtasks to restart out. The region rules are the specification's "Error Recovery"."""

from __future__ import annotations

import time

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.gateways.job_master import FailureKind
from flinkyarn.ids import ExecutionVertexID, JobID, JobVertexID
from flinkyarn.jobgraph import (DistributionPattern, JobEdge, JobGraph, JobVertex,
                                ResultPartitionType)
from yarn_am.jobmaster import failover_strategy
from yarn_am.jobmaster.execution_graph import ExecutionGraph, ExecutionState
from yarn_am.jobmaster.failover_strategy import (RegionFailoverStrategy,
                                                 RestartAllFailoverStrategy,
                                                 RestartIndividualFailoverStrategy)

S = ExecutionState
PIPELINED, BLOCKING = ResultPartitionType.PIPELINED, ResultPartitionType.BLOCKING
ALL_TO_ALL, POINTWISE = DistributionPattern.ALL_TO_ALL, DistributionPattern.POINTWISE
TASK, PARTITION = FailureKind.TASK, FailureKind.PARTITION


def vertex(name: str, parallelism: int) -> JobVertex:
    return JobVertex(JobVertexID(name), name.upper(), parallelism, b"")


def edge(source: str, target: str, partition_type=BLOCKING, distribution=ALL_TO_ALL,
         deterministic: bool = True) -> JobEdge:
    return JobEdge(JobVertexID(source), JobVertexID(target), distribution, partition_type,
                   deterministic)


def graph(vertices, edges=()) -> ExecutionGraph:
    return ExecutionGraph(JobGraph(JobID("job"), "test", list(vertices), list(edges)))


def ev(name: str, index: int) -> ExecutionVertexID:
    return ExecutionVertexID(JobVertexID(name), index)


def evs(*names: str) -> set[ExecutionVertexID]:
    """evs("a0", "b1") -> the subtasks a#0 and b#1."""
    return {ev(n[:-1], int(n[-1])) for n in names}


def set_state(eg: ExecutionGraph, state: ExecutionState, *names: str) -> None:
    """Walk each subtask's current attempt to `state` (RUNNING, FINISHED or FAILED)."""
    for evid in evs(*names):
        execution = eg.vertex(evid).current_execution
        for step in (S.SCHEDULED, S.DEPLOYING, S.RUNNING):
            execution.transition(step, 0.0)
        if state is not S.RUNNING:
            execution.transition(state, 0.0)


# ---- full and individual --------------------------------------------------------------------

def test_full_restarts_every_subtask():
    eg = graph([vertex("a", 2), vertex("b", 2), vertex("c", 1)], [edge("a", "b")])
    set_state(eg, S.FINISHED, "a0", "a1")
    set_state(eg, S.FAILED, "b0")

    assert RestartAllFailoverStrategy().tasks_to_restart(eg, ev("b", 0), TASK) == evs(
        "a0", "a1", "b0", "b1", "c0")


def test_individual_restarts_only_the_failed_subtask():
    eg = graph([vertex("a", 3), vertex("b", 1)])
    strategy = RestartIndividualFailoverStrategy()
    strategy.validate(eg)

    assert strategy.tasks_to_restart(eg, ev("a", 1), TASK) == evs("a1")


def test_individual_refuses_a_job_with_data_exchange_naming_the_option():
    eg = graph([vertex("a", 1), vertex("b", 1)], [edge("a", "b")])

    with pytest.raises(ValueError, match="'jobmanager.execution.failover-strategy'.*"
                                         "'restart-individual'.*1 edge"):
        RestartIndividualFailoverStrategy().validate(eg)


def test_strategies_by_option_value():
    assert isinstance(failover_strategy.from_configuration(Configuration()),
                      RegionFailoverStrategy)  # Flink's default
    for name, kind in [("full", RestartAllFailoverStrategy), ("region", RegionFailoverStrategy),
                       ("restart-individual", RestartIndividualFailoverStrategy)]:
        conf = Configuration.from_raw({"jobmanager.execution.failover-strategy": name})
        assert isinstance(failover_strategy.from_configuration(conf), kind)
    with pytest.raises(ValueError, match="'jobmanager.execution.failover-strategy'"):
        failover_strategy.create("restart-some")


# ---- region ---------------------------------------------------------------------------------

def region_restart(eg, failed: str, kind=TASK, lost=()) -> set[ExecutionVertexID]:
    return RegionFailoverStrategy().tasks_to_restart(eg, ev(failed[:-1], int(failed[-1])),
                                                     kind, frozenset(evs(*lost)))


def test_a_failure_restarts_only_its_pipelined_region():
    eg = graph([vertex("a", 1), vertex("b", 1), vertex("c", 1), vertex("d", 1)],
               [edge("a", "b", PIPELINED), edge("c", "d", PIPELINED)])
    set_state(eg, S.RUNNING, "a0", "c0", "d0")
    set_state(eg, S.FAILED, "b0")

    assert region_restart(eg, "b0") == evs("a0", "b0")


def test_a_consumer_failure_does_not_rerun_the_finished_producer_of_a_blocking_edge():
    eg = graph([vertex("a", 2), vertex("b", 2)], [edge("a", "b")])
    set_state(eg, S.FINISHED, "a0", "a1")
    set_state(eg, S.RUNNING, "b1")
    set_state(eg, S.FAILED, "b0")

    assert region_restart(eg, "b0") == evs("b0")


def test_a_partition_read_failure_reruns_the_producer_of_the_lost_partition_only():
    eg = graph([vertex("a", 2), vertex("b", 2)], [edge("a", "b")])
    set_state(eg, S.FINISHED, "a0", "a1", "b1")
    set_state(eg, S.FAILED, "b0")

    # a1's TaskExecutor is lost: a1 re-runs; a0's output survives; b1 read the same data
    # (deterministic edge) and stays finished.
    assert region_restart(eg, "b0", PARTITION, lost=["a1"]) == evs("a1", "b0")


def test_a_partition_read_failure_with_no_known_lost_input_reruns_every_upstream_region():
    eg = graph([vertex("a", 2), vertex("b", 2), vertex("x", 1)],
               [edge("a", "b"), edge("x", "b", PIPELINED)])
    set_state(eg, S.FINISHED, "a0", "a1")
    set_state(eg, S.RUNNING, "x0", "b1")
    set_state(eg, S.FAILED, "b0")

    # x feeds b pipelined: x, b0 and b1 are one region.
    assert region_restart(eg, "b0", PARTITION) == evs("a0", "a1", "b0", "b1", "x0")
    assert region_restart(eg, "b0", TASK) == evs("b0", "b1", "x0")


def test_a_lost_input_of_a_restarting_region_is_rerun_even_for_a_task_failure():
    eg = graph([vertex("a", 2), vertex("b", 2)], [edge("a", "b")])
    set_state(eg, S.FINISHED, "a0", "a1")
    set_state(eg, S.FAILED, "b0")

    assert region_restart(eg, "b0", TASK, lost=["a0"]) == evs("a0", "b0")


def test_a_non_deterministic_producer_edge_restarts_all_its_consumer_regions():
    eg = graph([vertex("a", 2), vertex("b", 3)], [edge("a", "b", deterministic=False)])
    set_state(eg, S.FINISHED, "a0", "a1", "b1")
    set_state(eg, S.RUNNING, "b2")
    set_state(eg, S.FAILED, "b0")

    # a1 re-run sends its records elsewhere (rebalance): b1 and b2 read the old ones.
    assert region_restart(eg, "b0", PARTITION, lost=["a1"]) == evs("a1", "b0", "b1", "b2")
    # a failure of b0 itself leaves the producer and the other consumers alone
    assert region_restart(eg, "b0", TASK) == evs("b0")


def test_consumers_of_changed_data_restart_transitively_and_surviving_results_are_reused():
    eg = graph([vertex("a", 2), vertex("b", 2), vertex("c", 2)],
               [edge("a", "b", deterministic=False), edge("b", "c")])
    set_state(eg, S.FINISHED, "a0", "a1", "b0", "b1", "c1")
    set_state(eg, S.FAILED, "c0")

    # c0 cannot read b1; a1 was lost with the same TaskExecutor. b1 needs a1 again; a1's
    # re-run changes what b0 and b1 get, so their outputs change, so c1 re-runs too.
    # a0's output survives and is read again.
    assert region_restart(eg, "c0", PARTITION, lost=["b1", "a1"]) == evs(
        "a1", "b0", "b1", "c0", "c1")
    # deterministic a -> b: only what was lost re-runs
    eg2 = graph([vertex("a", 2), vertex("b", 2), vertex("c", 2)],
                [edge("a", "b"), edge("b", "c")])
    set_state(eg2, S.FINISHED, "a0", "a1", "b0", "b1", "c1")
    set_state(eg2, S.FAILED, "c0")
    assert region_restart(eg2, "c0", PARTITION, lost=["b1", "a1"]) == evs("a1", "b1", "c0")


def test_only_finished_output_can_have_been_read():
    # A non-deterministic producer failing by itself: no consumer read its unfinished
    # blocking output, so the consumers (deployed early, waiting) stay.
    eg = graph([vertex("a", 1), vertex("b", 2)], [edge("a", "b", deterministic=False)])
    set_state(eg, S.RUNNING, "b0", "b1")
    set_state(eg, S.FAILED, "a0")

    assert region_restart(eg, "a0") == evs("a0")


def test_pointwise_blocking_inputs_rerun_only_the_producers_they_read():
    eg = graph([vertex("a", 4), vertex("b", 2)], [edge("a", "b", distribution=POINTWISE)])
    set_state(eg, S.FINISHED, "a0", "a1", "a2", "a3")
    set_state(eg, S.FAILED, "b1")

    # b1 reads a2 and a3; nothing is known lost, so both re-run, not a0 or a1.
    assert region_restart(eg, "b1", PARTITION) == evs("a2", "a3", "b1")


def test_the_region_index_is_built_once_per_graph():
    eg = graph([vertex("a", 2), vertex("b", 2)], [edge("a", "b")])
    strategy = RegionFailoverStrategy()
    strategy.tasks_to_restart(eg, ev("b", 0))
    index = strategy._topology

    strategy.tasks_to_restart(eg, ev("b", 1))

    assert strategy._topology is index


# ---- scale ----------------------------------------------------------------------------------

def all_to_all(n: int, deterministic: bool) -> ExecutionGraph:
    """n producers -> n consumers, BLOCKING ALL_TO_ALL: 2n regions, n * n edges. The
    producers FINISHED, the consumers RUNNING."""
    eg = graph([vertex("a", n), vertex("b", n)], [edge("a", "b", deterministic=deterministic)])
    for index in range(n):
        producer = eg.vertex(ev("a", index)).current_execution
        consumer = eg.vertex(ev("b", index)).current_execution
        for step in (S.SCHEDULED, S.DEPLOYING, S.RUNNING):
            producer.transition(step, 0.0)
            consumer.transition(step, 0.0)
        producer.transition(S.FINISHED, 0.0)
    return eg


def test_region_failover_on_a_1000_by_1000_all_to_all_graph(capsys):
    """Runs and is right at scale; prints its times (pytest -s). The growth from
    1000 x 1000 to 2000 x 2000 is measured by bench/failover.py."""
    n = 1000
    eg = all_to_all(n, deterministic=False)
    strategy = RegionFailoverStrategy()
    eg.vertex(ev("b", 0)).current_execution.transition(S.FAILED, 0.0)

    start = time.perf_counter()
    first = strategy.tasks_to_restart(eg, ev("b", 0), TASK, frozenset({ev("a", 7)}))
    indexed = time.perf_counter()
    everything = strategy.tasks_to_restart(eg, ev("b", 0), PARTITION)
    done = time.perf_counter()

    assert first == {ev("a", 7)} | {ev("b", j) for j in range(n)}
    assert len(everything) == 2 * n
    with capsys.disabled():
        print(f"\nregion failover {n}x{n} all-to-all: first call (with index) "
              f"{indexed - start:.3f} s, all regions {done - indexed:.3f} s")
