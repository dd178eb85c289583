"""Failover strategies: which subtasks restart when one fails.

Flink's FailoverStrategy: given the ExecutionGraph and the failed subtask, the set of
subtasks to restart. Read-only and pure: a strategy looks at the graph's structure and
at the states of its current executions and changes nothing. The Scheduler calls it on
the JobMaster's loop, once per failed subtask it handles; which of the returned subtasks
really restart (not those still CREATED) and when is the Scheduler's business.

    full                (Flink's RestartAllFailoverStrategy) every subtask.
    restart-individual  (RestartIndividualFailoverStrategy) only the failed subtask. Only
                        for jobs without data exchange between tasks: validate() refuses
                        a job with any JobEdge.
    region              (RestartPipelinedRegionFailoverStrategy) the failed subtask's
                        pipelined region, and what the rules below add.

Region rules, as the specification's "Error Recovery" states them:

1. The failed region restarts. Blocking inputs that are still available are read again
   from the output their producers kept: a finished producer region is not re-run.
2. Every region that restarts needs its blocking inputs. For each input that is *lost*,
   the producer's region restarts too, and so on transitively, reusing every blocking
   result that survives. An input is lost when its producer is in `lost_outputs` (the
   Scheduler's knowledge: a TaskExecutor that kept it was lost, or a failure's
   `lost_partitions` named the partition). For a failure of kind PARTITION (the failed
   task could not read an input; flinkyarn.gateways.job_master.FailureKind) of which no
   input is known lost, every blocking input from outside its region is taken as lost:
   the strategy cannot tell which one failed.
3. A region that re-runs regenerates the blocking outputs of its FINISHED subtasks
   (only a finished blocking partition can have been read). Through a deterministic
   edge (hash, forward, broadcast) the data is the same again, and consumers that read
   it stay. Through a non-deterministic edge (rebalance, random) it is not: ALL consumer
   regions of that output restart together. Such a consumer's own output then differs
   too, so all consumer regions of its finished subtasks restart as well, whatever the
   edge ("tainted" below).

Scale: RegionFailoverStrategy indexes a graph once, on its first call for it: the region
of each subtask; each region's blocking inputs as consumed-partition groups (an
ALL_TO_ALL result is one group shared by all of its consumers, as Flink's
ConsumedPartitionGroup; a POINTWISE result one group per consumer subtask); and the
consumer regions of each output as consumer groups (one per ALL_TO_ALL result, one per
POINTWISE partition). A call then visits each region at most twice (once more when first
reached untainted, later tainted), each group once, and each partition of a visited
input group once: O(subtasks + partitions), never the n x n edges of an all-to-all
connection. bench/failover.py measures it on 1000 x 1000 and 2000 x 2000 graphs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Set as AbstractSet
from typing import Protocol

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.gateways.job_master import FailureKind
from flinkyarn.ids import ExecutionVertexID
from flinkyarn.jobgraph import DistributionPattern, ResultPartitionType
from yarn_am.jobmaster.execution_graph import (ExecutionGraph, ExecutionState,
                                               IntermediateResultPartition)

__all__ = ["FailoverStrategy", "FailureKind", "RegionFailoverStrategy",
           "RestartAllFailoverStrategy", "RestartIndividualFailoverStrategy",
           "create", "from_configuration"]


class FailoverStrategy(Protocol):
    """Which subtasks restart after a failure. See the module docstring.

    validate(graph) is called once, when the Scheduler is built (so at JobMaster start),
    and raises ValueError naming the option if the strategy cannot serve the job.
    tasks_to_restart is called on the JobMaster's loop for each failed subtask the
    Scheduler handles; it never changes the graph and returns a new set (the caller may
    change it) that contains `failed`.
    """

    name: str

    def validate(self, graph: ExecutionGraph) -> None: ...

    def tasks_to_restart(self, graph: ExecutionGraph, failed: ExecutionVertexID,
                         cause_kind: FailureKind = FailureKind.TASK,
                         lost_outputs: AbstractSet[ExecutionVertexID] = frozenset(),
                         ) -> set[ExecutionVertexID]: ...


class RestartAllFailoverStrategy:
    """Every subtask restarts: the only choice for jobs whose tasks all depend on each
    other (streaming jobs restoring a checkpoint)."""

    name = "full"

    def validate(self, graph: ExecutionGraph) -> None:
        pass

    def tasks_to_restart(self, graph: ExecutionGraph, failed: ExecutionVertexID,
                         cause_kind: FailureKind = FailureKind.TASK,
                         lost_outputs: AbstractSet[ExecutionVertexID] = frozenset(),
                         ) -> set[ExecutionVertexID]:
        return {vertex.id for vertex in graph.execution_vertices()}


class RestartIndividualFailoverStrategy:
    """Only the failed subtask restarts; tasks must not exchange data."""

    name = "restart-individual"

    def validate(self, graph: ExecutionGraph) -> None:
        edges = graph.job_graph.edges
        if edges:
            first = edges[0]
            raise ValueError(
                f"option {options.FAILOVER_STRATEGY.key!r} is {self.name!r}, which restarts "
                f"only the failed task and so serves only jobs without data exchange between "
                f"tasks; job {graph.job_name!r} has {len(edges)} edge(s) (the first "
                f"{first.source} -> {first.target}). Use 'region' or 'full'.")

    def tasks_to_restart(self, graph: ExecutionGraph, failed: ExecutionVertexID,
                         cause_kind: FailureKind = FailureKind.TASK,
                         lost_outputs: AbstractSet[ExecutionVertexID] = frozenset(),
                         ) -> set[ExecutionVertexID]:
        return {failed}


class _RegionTopology:
    """The index RegionFailoverStrategy builds once per graph (module docstring)."""

    def __init__(self, graph: ExecutionGraph) -> None:
        self.graph = graph
        self.regions = graph.pipelined_regions()
        self.region_of: dict[ExecutionVertexID, int] = {
            evid: index for index, region in enumerate(self.regions) for evid in region}
        # Consumed-partition groups, and per region the groups it reads (BLOCKING only:
        # a PIPELINED producer is in its consumer's region anyway).
        self.partition_groups: list[list[IntermediateResultPartition]] = []
        inputs: list[dict[int, None]] = [{} for _ in self.regions]  # ordered sets
        # Consumer groups as the regions they contain, and per subtask its BLOCKING
        # outputs as (consumer group, deterministic).
        self.consumer_regions: list[list[int]] = []
        self.outputs: dict[ExecutionVertexID, list[tuple[int, bool]]] = {}
        for result in graph.results():
            if result.partition_type is not ResultPartitionType.BLOCKING:
                continue
            consumers = graph.job_vertex(result.consumer).task_vertices
            if result.distribution is DistributionPattern.ALL_TO_ALL:
                group = self._partition_group(list(result.partitions))
                for consumer in consumers:
                    inputs[self.region_of[consumer.id]][group] = None
                readers = self._consumer_group([c.id for c in consumers])
                for partition in result.partitions:
                    self.outputs.setdefault(partition.producer, []).append(
                        (readers, result.deterministic))
                continue
            read_by: dict[ExecutionVertexID, list[IntermediateResultPartition]] = {}
            for partition in result.partitions:
                readers = self._consumer_group(partition.consumers)
                self.outputs.setdefault(partition.producer, []).append(
                    (readers, result.deterministic))
                for consumer_id in partition.consumers:
                    read_by.setdefault(consumer_id, []).append(partition)
            for consumer_id, partitions in read_by.items():
                inputs[self.region_of[consumer_id]][self._partition_group(partitions)] = None
        self.input_groups: list[tuple[int, ...]] = [tuple(groups) for groups in inputs]

    def _partition_group(self, partitions: list[IntermediateResultPartition]) -> int:
        self.partition_groups.append(partitions)
        return len(self.partition_groups) - 1

    def _consumer_group(self, consumers: list[ExecutionVertexID]) -> int:
        self.consumer_regions.append(list(dict.fromkeys(self.region_of[c] for c in consumers)))
        return len(self.consumer_regions) - 1


class RegionFailoverStrategy:
    """The failed subtask's pipelined region, plus the producer regions of lost inputs
    and the consumer regions of changed outputs (module docstring, rules 1-3)."""

    name = "region"

    def __init__(self) -> None:
        self._topology: _RegionTopology | None = None

    def validate(self, graph: ExecutionGraph) -> None:
        pass

    def tasks_to_restart(self, graph: ExecutionGraph, failed: ExecutionVertexID,
                         cause_kind: FailureKind = FailureKind.TASK,
                         lost_outputs: AbstractSet[ExecutionVertexID] = frozenset(),
                         ) -> set[ExecutionVertexID]:
        topology = self._topology_of(graph)
        failed_region = topology.region_of[failed]
        lost = lost_outputs
        if cause_kind is FailureKind.PARTITION:
            upstream = [p.producer for p in graph.vertex(failed).consumed_partitions
                        if p.result.partition_type is ResultPartitionType.BLOCKING
                        and topology.region_of[p.producer] != failed_region]
            if not any(producer in lost for producer in upstream):
                lost = set(lost).union(upstream)

        # region index -> tainted (its output changes: rule 3's transitive part)
        restart: dict[int, bool] = {}
        queue: deque[tuple[int, bool]] = deque([(failed_region, False)])
        inputs_seen: set[int] = set()
        consumers_seen: set[int] = set()
        while queue:
            region, tainted = queue.popleft()
            known = restart.get(region)
            if known is not None and (known or not tainted):
                continue
            restart[region] = tainted
            if known is None:  # rule 2, once per region
                for group in topology.input_groups[region]:
                    if group in inputs_seen:
                        continue
                    inputs_seen.add(group)
                    for partition in topology.partition_groups[group]:
                        if partition.producer in lost:
                            producer_region = topology.region_of[partition.producer]
                            if producer_region not in restart:
                                queue.append((producer_region, False))
            for evid in topology.regions[region]:  # rule 3
                if graph.vertex(evid).state is not ExecutionState.FINISHED:
                    continue
                for readers, deterministic in topology.outputs.get(evid, ()):
                    if (deterministic and not tainted) or readers in consumers_seen:
                        continue
                    consumers_seen.add(readers)
                    for consumer_region in topology.consumer_regions[readers]:
                        if not restart.get(consumer_region):
                            queue.append((consumer_region, True))
        return {evid for region in restart for evid in topology.regions[region]}

    def _topology_of(self, graph: ExecutionGraph) -> _RegionTopology:
        if self._topology is None or self._topology.graph is not graph:
            self._topology = _RegionTopology(graph)
        return self._topology


_STRATEGIES = {strategy.name: strategy for strategy in (
    RestartAllFailoverStrategy, RegionFailoverStrategy, RestartIndividualFailoverStrategy)}


def create(name: str) -> FailoverStrategy:
    """A new strategy for one job by its option value: full, region, restart-individual."""
    try:
        return _STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"option {options.FAILOVER_STRATEGY.key!r}: unknown failover "
                         f"strategy {name!r}; expected one of {', '.join(_STRATEGIES)}") from None


def from_configuration(conf: Configuration) -> FailoverStrategy:
    """A new strategy for one job, as jobmanager.execution.failover-strategy says."""
    return create(conf.get(options.FAILOVER_STRATEGY))
