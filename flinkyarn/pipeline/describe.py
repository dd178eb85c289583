"""A JobGraph as text, for `flinkyarn info FILE.py`.

    Job 'wordcount': 2 vertices, 1 edge, schedule lazy_from_sources

    Vertices
      v1  Source: text -> flat_map  (id 9f3c2a1b)
          parallelism 2, slot sharing group 'default', resources UNKNOWN
          operators: Source: text [9f3c2a1b], flat_map [51d0e7aa]
      v2  count -> Sink: parquet  (id 0c77b1e2)
          ...

    Edges
      v1 -> v2  hash [word], blocking, all_to_all  (flat_map => count)

Vertices are numbered in topological order (v1, v2, ...); ids are cut to their first
8 hex digits. The output depends only on the graph, not on the job id, so two builds
of the same program print the same text.
"""

from __future__ import annotations

from flinkyarn.ids import JobVertexID
from flinkyarn.jobgraph import JobGraph

SHORT_ID = 8


def _short(vertex_or_operator_id: str) -> str:
    return vertex_or_operator_id[:SHORT_ID]


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _end_names(graph: JobGraph, source_id: JobVertexID, target_id: JobVertexID
               ) -> tuple[str, str]:
    """The operators an edge connects: the last of the producer's chain, the head of
    the consumer's."""
    source, target = graph.vertex(source_id), graph.vertex(target_id)
    return (source.operators[-1].name if source.operators else source.name,
            target.operators[0].name if target.operators else target.name)


def describe_job_graph(graph: JobGraph) -> str:
    order = graph.topological_order()
    label = {vertex.id: f"v{position}" for position, vertex in enumerate(order, start=1)}
    width = max(len(label[v.id]) for v in order)
    lines = [f"Job {graph.name!r}: {_count(len(order), 'vertex', 'vertices')}, "
             f"{_count(len(graph.edges), 'edge', 'edges')}, "
             f"schedule {graph.schedule_mode.value}",
             "", "Vertices"]
    for vertex in order:
        group = ("a slot of its own" if vertex.slot_sharing_group is None
                 else f"slot sharing group {vertex.slot_sharing_group!r}")
        lines.append(f"  {label[vertex.id]:<{width}}  {vertex.name}  (id {_short(vertex.id)})")
        indent = " " * (width + 4)
        lines.append(f"{indent}parallelism {vertex.parallelism}, {group}, "
                     f"resources {vertex.resources}")
        if vertex.operators:
            operators = ", ".join(f"{op.name} [{_short(op.uid)}]" for op in vertex.operators)
            lines.append(f"{indent}operators: {operators}")
    if graph.edges:
        lines += ["", "Edges"]
        position = {vertex.id: index for index, vertex in enumerate(order)}
        edges = sorted(enumerate(graph.edges),
                       key=lambda item: (position[item[1].source], position[item[1].target],
                                         item[0]))
        for _, edge in edges:
            partitioning = edge.partitioner.value
            if edge.key_columns:
                partitioning += f" [{', '.join(edge.key_columns)}]"
            producer, consumer = _end_names(graph, edge.source, edge.target)
            lines.append(f"  {label[edge.source]} -> {label[edge.target]}  {partitioning}, "
                         f"{edge.partition_type.value}, {edge.distribution.value}  "
                         f"({producer} => {consumer})")
    return "\n".join(lines) + "\n"
