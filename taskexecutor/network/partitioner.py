"""Partitioners (Flink's ChannelSelectors): to which subpartitions of a ResultPartition
each RecordBatch, or each row of it, goes.

A partitioner belongs to one output of one producer subtask and is called from that
task's thread only (the round-robin ones keep a counter; none is thread-safe).
`route()` never returns empty batches: an empty input routes nowhere, and the hash
partitioner leaves out subpartitions that get no rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np
import pyarrow as pa

from flinkyarn.jobgraph import ShipStrategy, enum_value
from flinkyarn.key_groups import DEFAULT_MAX_PARALLELISM, hash_rows, operator_indices

Routed = list[tuple[int, pa.RecordBatch]]


class Partitioner(ABC):
    """Routes batches of one output to its `num_subpartitions` subpartitions."""

    name: str = ""

    def __init__(self, num_subpartitions: int) -> None:
        if num_subpartitions < 1:
            raise ValueError(f"a {self.name} partitioner needs at least one subpartition, "
                             f"got {num_subpartitions}")
        self.num_subpartitions = num_subpartitions

    @abstractmethod
    def route(self, batch: pa.RecordBatch) -> Routed:
        """The (subpartition, batch) pairs to emit for `batch`, none of them empty."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_subpartitions})"


class _RoundRobin(Partitioner):
    """Whole batches, one subpartition after the other, from `start` on."""

    def __init__(self, num_subpartitions: int, start: int = 0) -> None:
        super().__init__(num_subpartitions)
        self._next = start % num_subpartitions

    def route(self, batch: pa.RecordBatch) -> Routed:
        if batch.num_rows == 0:
            return []
        target = self._next
        self._next = (target + 1) % self.num_subpartitions
        return [(target, batch)]


class ForwardPartitioner(_RoundRobin):
    """One-to-one edges: everything goes to subpartition 0. When one producer feeds
    several consumers (pointwise fan-out), whole batches go round-robin."""

    name = "forward"


class RebalancePartitioner(_RoundRobin):
    """Whole batches round-robin over all consumers. Each producer subtask starts at its
    own index, so that producers with few batches do not all load consumer 0."""

    name = "rebalance"

    def __init__(self, num_subpartitions: int, subtask_index: int = 0) -> None:
        super().__init__(num_subpartitions, start=subtask_index)


class BroadcastPartitioner(Partitioner):
    """Every batch to every consumer (the same immutable batch, not copies)."""

    name = "broadcast"

    def route(self, batch: pa.RecordBatch) -> Routed:
        if batch.num_rows == 0:
            return []
        return [(i, batch) for i in range(self.num_subpartitions)]


class HashPartitioner(Partitioner):
    """Rows with equal key values go to the same subpartition, the consumer subtask of
    their key group (flinkyarn.key_groups: `hash_rows(batch, keys) % max_parallelism`,
    then the consumer whose range of key groups holds it, as Flink's
    KeyGroupStreamPartitioner). The hash is the same in every process and every run, so
    all producer subtasks agree on where a key goes, and a keyed operator's state stays
    with its key when the job resumes at another parallelism."""

    name = "hash"

    def __init__(self, num_subpartitions: int, key_columns: Sequence[str],
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> None:
        super().__init__(num_subpartitions)
        if not key_columns:
            raise ValueError("a hash partitioner needs at least one key column")
        if max_parallelism < num_subpartitions:
            raise ValueError(f"a hash partitioner over {num_subpartitions} subpartitions "
                             f"needs at least as many key groups, not {max_parallelism}")
        self.key_columns = tuple(key_columns)
        self.max_parallelism = max_parallelism

    def route(self, batch: pa.RecordBatch) -> Routed:
        if batch.num_rows == 0:
            return []
        if self.num_subpartitions == 1:
            hash_rows(batch, self.key_columns)  # a missing key column fails here too
            return [(0, batch)]
        targets = operator_indices(hash_rows(batch, self.key_columns), self.max_parallelism,
                                   self.num_subpartitions)
        counts = np.bincount(targets, minlength=self.num_subpartitions)
        if counts.max() == batch.num_rows:  # all rows to one subpartition: no copy
            return [(int(targets[0]), batch)]
        # One take groups the rows by subpartition; the groups are zero-copy slices.
        grouped = batch.take(pa.array(np.argsort(targets, kind="stable")))
        offsets = np.concatenate(([0], np.cumsum(counts)))
        return [(int(i), grouped.slice(int(offsets[i]), int(counts[i])))
                for i in np.flatnonzero(counts)]

    def __repr__(self) -> str:
        return f"HashPartitioner({self.num_subpartitions}, {self.key_columns})"


def make_partitioner(name: ShipStrategy | str, num_subpartitions: int,
                     key_columns: Sequence[str] = (), subtask_index: int = 0,
                     max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> Partitioner:
    """The partitioner of ship strategy `name` (flinkyarn.jobgraph.ShipStrategy, or its
    value) of producer subtask `subtask_index` for an output with `num_subpartitions`
    consumers; a hash one over the job's `max_parallelism` key groups."""
    strategy = enum_value(ShipStrategy, name, "partitioner")
    if strategy is ShipStrategy.FORWARD:
        return ForwardPartitioner(num_subpartitions)
    if strategy is ShipStrategy.REBALANCE:
        return RebalancePartitioner(num_subpartitions, subtask_index)
    if strategy is ShipStrategy.BROADCAST:
        return BroadcastPartitioner(num_subpartitions)
    return HashPartitioner(num_subpartitions, key_columns, max_parallelism)
