"""Operator chaining: each condition under which two operators share a task.

Every test builds a small program in which exactly one condition keeps an edge from
being chained, and checks the vertices and edges of the JobGraph it becomes.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from flinkyarn.jobgraph import ResultPartitionType, ScheduleMode
from flinkyarn.pipeline.api import Pipeline
from flinkyarn.pipeline.job_graph_builder import (CHAINING_CONDITIONS, build_job_graph,
                                                  chains, downstream_chains_always,
                                                  is_chainable, operator_ids,
                                                  same_parallelism, unmet_chaining_conditions)
from flinkyarn.pipeline.operator import Operator, SourceOperator
from flinkyarn.pipeline.stream_graph import ChainingStrategy, StreamEdge, StreamGraph, StreamNode


class Numbers(SourceOperator):
    name = "numbers"

    def read(self):
        yield pa.record_batch({"n": [1, 2, 3]})


class Collect(Operator):
    name = "collect"

    def process(self, batch, input_index):
        return ()


class Union(Operator):
    """Two inputs, passed on as they come."""

    name = "union"


def identity(batch):
    return batch


def vertex_names(pipeline: Pipeline) -> list[str]:
    return [v.name for v in pipeline.job_graph().vertices]


def unmet(pipeline: Pipeline) -> dict[tuple[str, str], list[str]]:
    """(upstream, downstream) -> the chaining conditions the edge does not meet."""
    graph = pipeline.stream_graph()
    return {(graph.node(e.source_id).name, graph.node(e.target_id).name):
            unmet_chaining_conditions(graph, e)
            for node in graph.nodes() for e in node.out_edges}


def test_there_is_one_predicate_per_condition():
    assert [c.__name__ for c in CHAINING_CONDITIONS] == [
        "downstream_has_single_input", "downstream_has_operator", "upstream_has_operator",
        "same_slot_sharing_group", "downstream_chains_always",
        "upstream_chains_head_or_always", "forward_partitioned", "same_parallelism",
        "chaining_enabled", "not_forced_blocking", "upstream_has_single_output"]


def test_a_straight_pipeline_of_equal_parallelism_chains_into_one_vertex():
    p = Pipeline("straight", parallelism=2)
    (p.add_source(Numbers()).map(identity).filter(lambda b: pa.array([True] * b.num_rows))
     .flat_map(lambda b: [b]).sink_to(Collect()))
    graph = p.job_graph()
    assert [v.name for v in graph.vertices] == [
        "Source: numbers -> map -> filter -> flat_map -> Sink: collect"]
    assert graph.edges == []
    assert [op.name for op in graph.vertices[0].operators] == [
        "Source: numbers", "map", "filter", "flat_map", "Sink: collect"]
    assert all(not conditions for conditions in unmet(p).values())


def test_an_operator_with_two_inputs_is_not_chained():
    p = Pipeline("two inputs", parallelism=2)
    a = p.add_source(Numbers(), name="a")
    b = p.add_source(Numbers(), name="b")
    a.transform(Union(), b).sink_to(Collect())
    assert vertex_names(p) == ["Source: a", "Source: b", "union -> Sink: collect"]
    assert unmet(p)[("Source: a", "union")] == ["downstream_has_single_input"]
    assert unmet(p)[("Source: b", "union")] == ["downstream_has_single_input"]


def _hand_built(source_operator, downstream_operator) -> StreamGraph:
    graph = StreamGraph("hand built")
    graph.add_node(StreamNode(1, "up", source_operator, 1,
                              chaining_strategy=ChainingStrategy.HEAD, is_source=True))
    graph.add_node(StreamNode(2, "down", downstream_operator, 1), [1])
    return graph


def test_a_node_without_operator_is_not_chained_to_its_input():
    graph = _hand_built(Numbers(), None)
    assert [[n.id for n in chain] for chain in chains(graph)] == [[1], [2]]
    assert unmet_chaining_conditions(graph, graph.node(1).out_edges[0]) == [
        "downstream_has_operator"]
    with pytest.raises(ValueError, match="down: stream node 2 has no operator"):
        build_job_graph(graph)


def test_a_node_without_operator_is_not_chained_to_its_output():
    graph = _hand_built(None, Collect())
    assert [[n.id for n in chain] for chain in chains(graph)] == [[1], [2]]
    assert unmet_chaining_conditions(graph, graph.node(1).out_edges[0]) == [
        "upstream_has_operator"]


def test_operators_in_different_slot_sharing_groups_are_not_chained():
    p = Pipeline("groups", parallelism=2)
    p.add_source(Numbers()).map(identity, slot_sharing_group="heavy").sink_to(Collect())
    graph = p.job_graph()
    assert [(v.name, v.slot_sharing_group) for v in graph.vertices] == [
        ("Source: numbers", "default"), ("map -> Sink: collect", "heavy")]
    assert unmet(p)[("Source: numbers", "map")] == ["same_slot_sharing_group"]


def test_a_head_operator_starts_a_chain_but_its_successor_chains_to_it():
    p = Pipeline("head", parallelism=2)
    p.add_source(Numbers()).map(identity).start_new_chain().sink_to(Collect())
    assert vertex_names(p) == ["Source: numbers", "map -> Sink: collect"]
    assert unmet(p)[("Source: numbers", "map")] == ["downstream_chains_always"]
    assert unmet(p)[("map", "Sink: collect")] == []


def test_an_operator_that_never_chains_has_a_vertex_of_its_own():
    p = Pipeline("never", parallelism=2)
    p.add_source(Numbers()).disable_chaining().map(identity).sink_to(Collect())
    assert vertex_names(p) == ["Source: numbers", "map -> Sink: collect"]
    assert unmet(p)[("Source: numbers", "map")] == ["upstream_chains_head_or_always"]

    p = Pipeline("never in the middle", parallelism=2)
    p.add_source(Numbers()).map(identity).disable_chaining().sink_to(Collect())
    assert vertex_names(p) == ["Source: numbers", "map", "Sink: collect"]
    assert unmet(p)[("Source: numbers", "map")] == ["downstream_chains_always"]
    assert unmet(p)[("map", "Sink: collect")] == ["upstream_chains_head_or_always"]


def test_aggregations_head_their_chain():
    p = Pipeline("aggregation", parallelism=2)
    counts = p.add_source(Numbers()).key_by("n").count()
    counts.sink_to(Collect())
    assert p.stream_graph().resolve(counts._id).chaining_strategy is ChainingStrategy.HEAD
    assert p.stream_graph().sources()[0].chaining_strategy is ChainingStrategy.HEAD
    assert vertex_names(p) == ["Source: numbers", "count -> Sink: collect"]
    # Even behind a forward edge, an aggregation is not chained to its input.
    edge = p.stream_graph().sources()[0].out_edges[0]
    assert not downstream_chains_always(p.stream_graph(), edge)


def test_an_edge_that_is_not_forward_is_not_chained():
    for partitioning in ("rebalance", "broadcast"):
        p = Pipeline(partitioning, parallelism=2)
        getattr(p.add_source(Numbers()), partitioning)().map(identity).sink_to(Collect())
        assert vertex_names(p) == ["Source: numbers", "map -> Sink: collect"]
        assert unmet(p)[("Source: numbers", "map")] == ["forward_partitioned"]
        assert [e.partitioner for e in p.job_graph().edges] == [partitioning]

    p = Pipeline("hash", parallelism=2)
    p.add_source(Numbers()).key_by("n").map(identity).sink_to(Collect())
    assert unmet(p)[("Source: numbers", "map")] == ["forward_partitioned"]


def test_a_change_of_parallelism_is_not_chained():
    p = Pipeline("parallelism", parallelism=2)
    p.add_source(Numbers()).map(identity, parallelism=3).sink_to(Collect(), parallelism=3)
    assert vertex_names(p) == ["Source: numbers", "map -> Sink: collect"]
    # The API never makes a forward edge between different parallelisms (it rebalances,
    # or refuses an explicit forward()), so both conditions fail here...
    assert unmet(p)[("Source: numbers", "map")] == ["forward_partitioned", "same_parallelism"]

    # ...and the parallelism condition on its own keeps a forward edge unchained.
    p = Pipeline("parallelism", parallelism=2)
    p.add_source(Numbers()).map(identity).sink_to(Collect())
    graph = p.stream_graph()
    graph.nodes()[1].parallelism = 3
    edge = graph.nodes()[0].out_edges[0]
    assert edge.partitioner == "forward"
    assert unmet_chaining_conditions(graph, edge) == ["same_parallelism"]
    assert [[n.name for n in c] for c in chains(graph)] == [["Source: numbers"],
                                                            ["map"], ["Sink: collect"]]


def test_same_parallelism_compares_the_two_ends():
    graph = StreamGraph("g")
    graph.add_node(StreamNode(1, "a", Numbers(), 2, is_source=True))
    graph.add_node(StreamNode(2, "b", Collect(), 3), [1])  # rebalance
    assert not same_parallelism(graph, StreamEdge(1, 2, 0, "forward"))
    assert same_parallelism(graph, StreamEdge(1, 1, 0, "forward"))


def test_nothing_chains_when_chaining_is_disabled():
    p = Pipeline("unchained", parallelism=2, chaining=False)
    p.add_source(Numbers()).map(identity).sink_to(Collect())
    graph = p.job_graph()
    assert [v.name for v in graph.vertices] == ["Source: numbers", "map", "Sink: collect"]
    assert [(e.partitioner, e.distribution.value) for e in graph.edges] == [
        ("forward", "pointwise"), ("forward", "pointwise")]
    assert set(map(tuple, unmet(p).values())) == {("chaining_enabled",)}


def test_a_forced_blocking_exchange_is_not_chained():
    p = Pipeline("blocking", parallelism=2)
    p.add_source(Numbers()).blocking().map(identity).sink_to(Collect())
    graph = p.job_graph()
    assert [v.name for v in graph.vertices] == ["Source: numbers", "map -> Sink: collect"]
    assert unmet(p)[("Source: numbers", "map")] == ["not_forced_blocking"]
    [edge] = graph.edges
    assert (edge.partitioner, edge.partition_type) == ("forward", ResultPartitionType.BLOCKING)
    # Consumers of a blocking result are deployed when it is complete.
    assert graph.schedule_mode is ScheduleMode.LAZY_FROM_SOURCES


def test_an_operator_whose_output_fans_out_ends_its_chain():
    p = Pipeline("fan out", parallelism=2)
    numbers = p.add_source(Numbers())
    numbers.map(identity, name="left").sink_to(Collect(), name="left sink")
    numbers.map(identity, name="right").sink_to(Collect(), name="right sink")
    graph = p.job_graph()
    assert [v.name for v in graph.vertices] == [
        "Source: numbers", "left -> Sink: left sink", "right -> Sink: right sink"]
    assert unmet(p)[("Source: numbers", "left")] == ["upstream_has_single_output"]
    assert unmet(p)[("Source: numbers", "right")] == ["upstream_has_single_output"]
    assert [(e.source, e.target) for e in graph.edges] == [
        (graph.vertices[0].id, graph.vertices[1].id),
        (graph.vertices[0].id, graph.vertices[2].id)]


def test_batch_mode_still_chains_forward_edges_and_blocks_the_others():
    p = Pipeline("batch", parallelism=2, batch_mode=True)
    p.add_source(Numbers()).map(identity).key_by("n").sum("n").sink_to(Collect())
    graph = p.job_graph()
    assert [v.name for v in graph.vertices] == ["Source: numbers -> map",
                                                "sum(n) -> Sink: collect"]
    [edge] = graph.edges
    assert edge.partition_type is ResultPartitionType.BLOCKING


def test_chainability_is_part_of_an_operators_id():
    def ids(split: bool) -> dict[str, str]:
        p = Pipeline("ids", parallelism=2)
        mapped = p.add_source(Numbers()).map(identity)
        if split:
            mapped.start_new_chain()
        mapped.sink_to(Collect())
        graph = p.stream_graph()
        return {graph.node(i).name: h for i, h in operator_ids(graph).items()}

    chained, split = ids(False), ids(True)
    # The source's position is the same, but it has one chainable output less.
    assert chained["Source: numbers"] != split["Source: numbers"]
    assert chained["map"] != split["map"]


def test_is_chainable_is_all_conditions():
    p = Pipeline("all", parallelism=2)
    p.add_source(Numbers()).map(identity)
    graph = p.stream_graph()
    edge = graph.nodes()[0].out_edges[0]
    assert is_chainable(graph, edge)
    graph.chaining_enabled = False
    assert not is_chainable(graph, edge)
