"""StreamGraph -> JobGraph: operator chaining, stable operator ids, one StreamTaskSpec per
JobVertex (Flink's StreamingJobGraphGenerator and StreamGraphHasherV2).

Chaining. An edge is chained (its two operators run in one task, records handed over
by a function call) when every predicate of CHAINING_CONDITIONS holds: Flink's nine
conditions, the optional forced-blocking one, and one of ours: the upstream operator
has exactly one output. Our StreamTask runs a *linear* chain (each operator feeds the
next, only the last one feeds the vertex's outputs), where Flink's chain is a tree;
so an operator whose output fans out ends its chain.

Stable ids. Every operator gets a 32-hex-digit id that is the same whenever the same
program is built, in any process: a hash of the user's `uid` when given, else a hash of
the operator's place in the graph (StreamGraphHasherV2.generateDeterministicHash):
its position in a breadth-first walk from the sources, once more for each chainable
output, then mixed with the ids of its inputs. So names, functions and parallelism do
not change an id; inserting or removing an operator upstream, or changing whether an
operator chains to its successor, changes the ids of that operator and everything
downstream of it, except operators with a uid. A JobVertex's id is its head's id.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Callable


from flinkyarn.environment import pickle_user_code
from flinkyarn.ids import JobID, JobVertexID, new_id
from flinkyarn.jobgraph import (ChainedOperator, DistributionPattern, JobEdge, JobGraph,
                                JobVertex, ResultPartitionType, ScheduleMode, ShipStrategy)
from flinkyarn.pipeline.operator import Operator, SourceOperator
from flinkyarn.pipeline.spark_stage import SparkStage
from flinkyarn.pipeline.stream_graph import (ChainingStrategy, ExchangeMode, StreamEdge,
                                             StreamGraph, StreamNode)
from flinkyarn.pipeline.task_spec import InputSpec, OutputSpec, StreamTaskSpec
from flinkyarn.resources import UNKNOWN, ResourceProfile

# ---- chaining conditions: (graph, edge) -> bool, one per condition -----------------------


def downstream_has_single_input(graph: StreamGraph, edge: StreamEdge) -> bool:
    return len(graph.node(edge.target_id).in_edges) == 1


def downstream_has_operator(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.node(edge.target_id).operator is not None


def upstream_has_operator(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.node(edge.source_id).operator is not None


def same_slot_sharing_group(graph: StreamGraph, edge: StreamEdge) -> bool:
    return (graph.node(edge.source_id).slot_sharing_group
            == graph.node(edge.target_id).slot_sharing_group)


def downstream_chains_always(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.node(edge.target_id).chaining_strategy is ChainingStrategy.ALWAYS


def upstream_chains_head_or_always(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.node(edge.source_id).chaining_strategy in (ChainingStrategy.HEAD,
                                                            ChainingStrategy.ALWAYS)


def forward_partitioned(graph: StreamGraph, edge: StreamEdge) -> bool:
    return edge.partitioner == "forward"


def same_parallelism(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.node(edge.source_id).parallelism == graph.node(edge.target_id).parallelism


def chaining_enabled(graph: StreamGraph, edge: StreamEdge) -> bool:
    return graph.chaining_enabled


def not_forced_blocking(graph: StreamGraph, edge: StreamEdge) -> bool:
    return edge.exchange_mode is not ExchangeMode.BATCH


def upstream_has_single_output(graph: StreamGraph, edge: StreamEdge) -> bool:
    """Ours, not Flink's: chains are linear (see the module docstring)."""
    return len(graph.node(edge.source_id).out_edges) == 1


CHAINING_CONDITIONS: tuple[Callable[[StreamGraph, StreamEdge], bool], ...] = (
    downstream_has_single_input,
    downstream_has_operator,
    upstream_has_operator,
    same_slot_sharing_group,
    downstream_chains_always,
    upstream_chains_head_or_always,
    forward_partitioned,
    same_parallelism,
    chaining_enabled,
    not_forced_blocking,
    upstream_has_single_output,
)


def is_chainable(graph: StreamGraph, edge: StreamEdge) -> bool:
    return all(condition(graph, edge) for condition in CHAINING_CONDITIONS)


def unmet_chaining_conditions(graph: StreamGraph, edge: StreamEdge) -> list[str]:
    """The names of the conditions that keep `edge` from being chained."""
    return [c.__name__ for c in CHAINING_CONDITIONS if not c(graph, edge)]


def chains(graph: StreamGraph) -> list[list[StreamNode]]:
    """The operator chains, each head first; ordered by head id (creation order, so
    a chain's producers come before it)."""
    result = []
    for node in graph.nodes():
        if len(node.in_edges) == 1 and is_chainable(graph, node.in_edges[0]):
            continue  # chained to its predecessor
        chain = [node]
        while (len(chain[-1].out_edges) == 1
               and is_chainable(graph, chain[-1].out_edges[0])):
            chain.append(graph.node(chain[-1].out_edges[0].target_id))
        result.append(chain)
    return result


# ---- stable operator ids --------------------------------------------------------------------

def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:16]


def operator_ids(graph: StreamGraph) -> dict[int, str]:
    """StreamNode id -> stable operator id (32 hex digits); see the module docstring."""
    hashes: dict[int, bytes] = {}
    uid_owner: dict[bytes, str] = {}
    sources = graph.sources()
    remaining = deque(sources)
    visited = {n.id for n in sources}
    while remaining:
        node = remaining.popleft()
        if node.uid is not None:
            digest = _digest(b"uid\0" + node.uid.encode())
            if digest in uid_owner:
                raise ValueError(f"{node.name}: uid {node.uid!r} is also the uid of "
                                 f"{uid_owner[digest]!r}")
            uid_owner[digest] = node.name
            hashes[node.id] = digest
        elif all(e.source_id in hashes for e in node.in_edges):
            hashes[node.id] = _deterministic_hash(graph, node, position=len(hashes),
                                                  hashes=hashes)
        else:
            visited.discard(node.id)  # queued again when its last input is hashed
            continue
        for edge in node.out_edges:
            if edge.target_id not in visited:
                visited.add(edge.target_id)
                remaining.append(graph.node(edge.target_id))
    missing = [n.name for n in graph.nodes() if n.id not in hashes]
    if missing:
        raise ValueError(f"job {graph.job_name!r}: operators not reachable from a source: "
                         f"{', '.join(missing)}")
    return {node_id: digest.hex() for node_id, digest in hashes.items()}


def _deterministic_hash(graph: StreamGraph, node: StreamNode, position: int,
                        hashes: dict[int, bytes]) -> bytes:
    data = position.to_bytes(4, "big")
    for edge in node.out_edges:
        if is_chainable(graph, edge):
            data += position.to_bytes(4, "big")
    digest = bytearray(_digest(data))
    for edge in node.in_edges:
        other = hashes[edge.source_id]
        for j in range(len(digest)):
            digest[j] = ((digest[j] * 37) ^ other[j]) & 0xFF
    return bytes(digest)


# ---- the JobGraph ---------------------------------------------------------------------------

def _chain_resources(chain: list[StreamNode]) -> ResourceProfile:
    """The sum of the profiles the chain's operators declare; UNKNOWN if none does."""
    known = [n.resources for n in chain if not n.resources.is_unknown()]
    if not known:
        return UNKNOWN
    return ResourceProfile(sum(p.cpu_cores for p in known), sum(p.memory_mb for p in known))


def _partition_type(graph: StreamGraph, edge: StreamEdge) -> ResultPartitionType:
    if graph.batch_mode or edge.exchange_mode is ExchangeMode.BATCH:
        return ResultPartitionType.BLOCKING
    return ResultPartitionType.PIPELINED


def _distribution(graph: StreamGraph, edge: StreamEdge) -> DistributionPattern:
    if edge.partitioner == "forward" and same_parallelism(graph, edge):
        return DistributionPattern.POINTWISE
    return DistributionPattern.ALL_TO_ALL


def build_job_graph(graph: StreamGraph) -> JobGraph:
    """The JobGraph of `graph`, validated. Vertices in chain-head creation order (a
    topological order); edges grouped by producer in that order, each producer's in the
    order of its StreamTaskSpec outputs; `outputs` are the operators' file_output()s, in
    StreamNode order."""
    if not graph.nodes():
        raise ValueError(f"pipeline {graph.job_name!r} has no operators")
    operator_of: dict[int, Operator] = {}
    for node in graph.nodes():
        if node.operator is None:
            raise ValueError(f"{node.name}: stream node {node.id} has no operator")
        if not node.in_edges and not isinstance(node.operator, SourceOperator):
            raise ValueError(f"{node.name}: has no input and is not a SourceOperator")
        operator_of[node.id] = node.operator
    ids = operator_ids(graph)
    all_chains = chains(graph)
    vertex_of: dict[int, JobVertexID] = {}
    for chain in all_chains:
        for node in chain:
            vertex_of[node.id] = JobVertexID(ids[chain[0].id])

    vertices: list[JobVertex] = []
    edges: list[JobEdge] = []
    for chain in all_chains:
        head, last = chain[0], chain[-1]
        vertex_id = vertex_of[head.id]
        inputs = tuple(InputSpec(vertex_of[e.source_id])
                       for e in sorted(head.in_edges, key=lambda e: e.input_index))
        outputs = []
        for edge in last.out_edges:
            target = vertex_of[edge.target_id]
            outputs.append(OutputSpec(target, ShipStrategy(edge.partitioner),
                                      tuple(edge.key_columns)))
            edges.append(JobEdge(
                source=vertex_id, target=target,
                distribution=_distribution(graph, edge),
                partition_type=_partition_type(graph, edge),
                deterministic=edge.partitioner != "rebalance",
                partitioner=ShipStrategy(edge.partitioner),
                key_columns=list(edge.key_columns)))
        spec = StreamTaskSpec(operators=tuple(operator_of[n.id] for n in chain), inputs=inputs,
                              outputs=tuple(outputs), operator_ids=tuple(ids[n.id] for n in chain))
        vertices.append(JobVertex(
            id=vertex_id,
            name=" -> ".join(n.name for n in chain),
            parallelism=head.parallelism,
            invokable=pickle_user_code(spec),
            slot_sharing_group=head.slot_sharing_group,
            resources=_chain_resources(chain),
            operators=[ChainedOperator(ids[n.id], n.name) for n in chain],
            uses_spark=any(isinstance(operator_of[n.id], SparkStage) for n in chain)))

    # A blocking exchange needs its consumers scheduled after it completes, which is
    # what lazy-from-sources (pipelined region) scheduling does; eager would deploy
    # them at once. So a streaming pipeline with a forced blocking() edge runs lazily.
    lazy = graph.batch_mode or any(e.partition_type is ResultPartitionType.BLOCKING
                                   for e in edges)
    file_outputs = [output for node in graph.nodes()
                    if (output := operator_of[node.id].file_output()) is not None]
    job_graph = JobGraph(JobID(new_id()), graph.job_name, vertices, edges,
                         ScheduleMode.LAZY_FROM_SOURCES if lazy else ScheduleMode.EAGER,
                         outputs=file_outputs)
    job_graph.validate()
    return job_graph
