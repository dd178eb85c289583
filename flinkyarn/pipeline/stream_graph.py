"""The StreamGraph: the program as the Pipeline API recorded it.

Every transformation adds one StreamNode (its id is the order of creation, counted
together with virtual nodes, as Flink's transformation ids are); StreamEdges connect a
node to the nodes it feeds. Partitioning calls (`key_by`, `rebalance`, `broadcast`,
`forward`, `blocking`) add no StreamNode but a *virtual partition node*: an id that
stands for its input and, when a real node is connected to it, sets the partitioner
(and exchange mode) of that StreamEdge. So the StreamGraph has only real nodes, and
every edge knows how its records are partitioned.

Rules, as Flink's StreamGraph.addEdgeInternal:
  - an edge with no partitioner set is FORWARD when both ends have the same
    parallelism, else REBALANCE;
  - FORWARD between different parallelisms is refused;
  - through nested virtual nodes, the partitioner nearest the consumer wins, and the
    exchange is BATCH (blocking) if any of them asked for it.

The StreamGraph is built on the client thread only; it is not thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

from flinkyarn.jobgraph import DEFAULT_SLOT_SHARING_GROUP, ShipStrategy, enum_value
from flinkyarn.pipeline.operator import Operator
from flinkyarn.resources import UNKNOWN, ResourceProfile


class ChainingStrategy(str, enum.Enum):
    """Whether an operator may be chained to its neighbours (Flink's ChainingStrategy)."""

    ALWAYS = "always"  # may chain to its predecessor and its successor
    HEAD = "head"      # starts a chain: never chained to its predecessor; successors may chain
    NEVER = "never"    # a vertex of its own


class ExchangeMode(str, enum.Enum):
    """How one StreamEdge's data is exchanged when the edge is not chained."""

    UNDEFINED = "undefined"  # the pipeline decides: blocking in batch mode, else pipelined
    BATCH = "batch"          # forced blocking by the user (`blocking()`); never chained


@dataclass(frozen=True)
class StreamEdge:
    """Records of node source_id flow to input `input_index` of node target_id."""

    source_id: int
    target_id: int
    input_index: int
    partitioner: str
    key_columns: tuple[str, ...] = ()
    exchange_mode: ExchangeMode = ExchangeMode.UNDEFINED


@dataclass(eq=False)
class StreamNode:
    """One operator of the program. `operator` is None only in hand-built graphs (tests):
    the JobGraph builder refuses such a node, and it chains with nothing."""

    id: int
    name: str
    operator: Operator | None
    parallelism: int
    slot_sharing_group: str = DEFAULT_SLOT_SHARING_GROUP
    chaining_strategy: ChainingStrategy = ChainingStrategy.ALWAYS
    uid: str | None = None
    resources: ResourceProfile = UNKNOWN
    is_source: bool = False
    in_edges: list[StreamEdge] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"StreamNode({self.id}, {self.name!r}, parallelism={self.parallelism})"


@dataclass(frozen=True)
class VirtualPartitionNode:
    """Stands for node input_id, read with this partitioner (None: keep what is set
    further up, or the default) and exchange mode."""

    id: int
    input_id: int
    partitioner: str | None
    key_columns: tuple[str, ...] = ()
    exchange_mode: ExchangeMode = ExchangeMode.UNDEFINED


class StreamGraph:
    def __init__(self, job_name: str, batch_mode: bool = False,
                 chaining_enabled: bool = True) -> None:
        self.job_name = job_name
        self.batch_mode = batch_mode
        self.chaining_enabled = chaining_enabled
        self._nodes: dict[int, StreamNode] = {}
        self._virtual_nodes: dict[int, VirtualPartitionNode] = {}

    # ---- building -------------------------------------------------------------------

    def add_node(self, node: StreamNode, input_ids: Sequence[int] = ()) -> StreamNode:
        """Adds `node`, reading input i from input_ids[i] (a node or a virtual partition
        node). Checks everything first: on an error the graph is unchanged."""
        self._check_new_id(node.id)
        if node.in_edges or node.out_edges:
            raise ValueError(f"{node.name}: a new node has no edges yet")
        if isinstance(node.parallelism, bool) or not isinstance(node.parallelism, int) \
                or node.parallelism < 1:
            raise ValueError(f"{node.name}: parallelism must be an int >= 1, "
                             f"not {node.parallelism!r}")
        if node.uid is not None:
            for other in self._nodes.values():
                if other.uid == node.uid:
                    raise ValueError(f"{node.name}: uid {node.uid!r} is already the uid of "
                                     f"{other.name!r}; uids must be unique in a pipeline")
        edges = [self._edge(input_id, node, index) for index, input_id in enumerate(input_ids)]
        sources = [e.source_id for e in edges]
        for source_id in set(sources):
            if sources.count(source_id) > 1:
                raise ValueError(f"{node.name}: reads {self._nodes[source_id].name!r} more "
                                 f"than once; give the stream once and use it twice in the "
                                 f"function")
        self._nodes[node.id] = node
        for edge in edges:
            self._nodes[edge.source_id].out_edges.append(edge)
            node.in_edges.append(edge)
        return node

    def add_virtual_partition_node(self, virtual: VirtualPartitionNode) -> None:
        self._check_new_id(virtual.id)
        if virtual.input_id not in self._nodes and virtual.input_id not in self._virtual_nodes:
            raise KeyError(f"virtual partition node {virtual.id}: unknown input {virtual.input_id}")
        if virtual.partitioner is not None:
            enum_value(ShipStrategy, virtual.partitioner, "partitioning")
        if (virtual.partitioner == "hash") != bool(virtual.key_columns):
            raise ValueError("hash partitioning needs key columns, and only it has them")
        self._virtual_nodes[virtual.id] = virtual

    def _edge(self, upstream_id: int, downstream: StreamNode, input_index: int) -> StreamEdge:
        """The edge from `upstream_id` (resolving virtual nodes) to input `input_index`
        of `downstream`."""
        partitioner: str | None = None
        key_columns: tuple[str, ...] = ()
        exchange_mode = ExchangeMode.UNDEFINED
        while upstream_id in self._virtual_nodes:
            virtual = self._virtual_nodes[upstream_id]
            if partitioner is None and virtual.partitioner is not None:
                partitioner, key_columns = virtual.partitioner, virtual.key_columns
            if virtual.exchange_mode is ExchangeMode.BATCH:
                exchange_mode = ExchangeMode.BATCH
            upstream_id = virtual.input_id
        upstream = self.node(upstream_id)
        if partitioner is None:
            partitioner = ("forward" if upstream.parallelism == downstream.parallelism
                           else "rebalance")
        if partitioner == "forward" and upstream.parallelism != downstream.parallelism:
            raise ValueError(
                f"{downstream.name}: forward partitioning does not allow a change of "
                f"parallelism ({upstream.name!r} has {upstream.parallelism}, "
                f"{downstream.name!r} has {downstream.parallelism}); use rebalance(), "
                f"broadcast() or key_by()")
        return StreamEdge(upstream.id, downstream.id, input_index, partitioner,
                          tuple(key_columns), exchange_mode)

    def _check_new_id(self, node_id: int) -> None:
        if node_id in self._nodes or node_id in self._virtual_nodes:
            raise ValueError(f"stream node id {node_id} is taken")

    # ---- reading --------------------------------------------------------------------

    def node(self, node_id: int) -> StreamNode:
        return self._nodes[node_id]

    def resolve(self, node_id: int) -> StreamNode:
        """The real node a (possibly virtual) id stands for."""
        while node_id in self._virtual_nodes:
            node_id = self._virtual_nodes[node_id].input_id
        return self._nodes[node_id]

    def is_virtual(self, node_id: int) -> bool:
        return node_id in self._virtual_nodes

    def nodes(self) -> list[StreamNode]:
        """All real nodes by id; ids are creation order, so inputs come first."""
        return [self._nodes[i] for i in sorted(self._nodes)]

    def sources(self) -> list[StreamNode]:
        return [n for n in self.nodes() if not n.in_edges]

    def inherited_slot_sharing_group(self, input_ids: list[int]) -> str:
        """Flink's rule for a node with no group of its own: its inputs' group when they
        all agree, else the default group (also for sources)."""
        groups = {self.resolve(i).slot_sharing_group for i in input_ids}
        return groups.pop() if len(groups) == 1 else DEFAULT_SLOT_SHARING_GROUP
