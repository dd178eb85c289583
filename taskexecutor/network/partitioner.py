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

Routed = list[tuple[int, pa.RecordBatch]]

# The hash of a null key value; any fixed value will do, it only has to be the same
# in every process.
_NULL_HASH = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0x100000001B3)


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
    """Rows with equal key values go to the same subpartition: `hash_rows(batch, keys)
    % num_subpartitions`. The hash is the same in every process and every run, so all
    producer subtasks agree on where a key goes."""

    name = "hash"

    def __init__(self, num_subpartitions: int, key_columns: Sequence[str]) -> None:
        super().__init__(num_subpartitions)
        if not key_columns:
            raise ValueError("a hash partitioner needs at least one key column")
        self.key_columns = tuple(key_columns)

    def route(self, batch: pa.RecordBatch) -> Routed:
        if batch.num_rows == 0:
            return []
        hashes = hash_rows(batch, self.key_columns)
        if self.num_subpartitions == 1:
            return [(0, batch)]
        targets = (hashes % np.uint64(self.num_subpartitions)).astype(np.int64)
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


def hash_rows(batch: pa.RecordBatch, key_columns: Sequence[str]) -> np.ndarray:
    """A uint64 hash per row of the key columns' values, identical in every process.

    Python's hash() of str is salted per process, so it cannot be used; this uses
    pandas' SipHash with its fixed key, vectorised. Values are normalised first so that
    a value hashes the same whatever else is in its batch: integers as int64, floats as
    float64 (-0.0 as 0.0), dictionaries decoded, and nulls get one fixed hash (a column
    with nulls would otherwise become float or object in numpy).
    """
    combined = np.zeros(batch.num_rows, dtype=np.uint64)
    for name in key_columns:
        column_hash = _hash_column(_key_column(batch, name))
        combined = (combined ^ column_hash) * _MIX
    return combined


def _key_column(batch: pa.RecordBatch, name: str) -> pa.Array:
    indices = batch.schema.get_all_field_indices(name)
    if not indices:
        raise KeyError(f"key column {name!r} is not in the batch; its columns are "
                       f"{batch.schema.names}")
    if len(indices) > 1:
        raise ValueError(f"key column {name!r} appears {len(indices)} times in the batch")
    return batch.column(indices[0])


def _hash_column(column: pa.Array) -> np.ndarray:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_integer(column.type):
        column = column.cast(pa.int64(), safe=False)
    elif pa.types.is_floating(column.type):
        column = column.cast(pa.float64())
    if column.null_count == 0:
        return _hash_values(column)
    hashes = np.full(len(column), _NULL_HASH, dtype=np.uint64)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    hashes[valid] = _hash_values(column.drop_null())
    return hashes


def _hash_values(column: pa.Array) -> np.ndarray:
    import pandas as pd  # half of a TaskExecutor's imports: loaded when a hash exchange runs

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) \
            or pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        # Strings become Python objects on the way to numpy; hash each distinct value
        # once (the hash of a value does not depend on the others) and spread by index.
        encoded = column.dictionary_encode()
        distinct = encoded.dictionary.to_numpy(zero_copy_only=False)
        return pd.util.hash_array(distinct)[encoded.indices.to_numpy(zero_copy_only=False)]
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        values = values + 0.0  # -0.0 == 0.0 but their bits differ
    return pd.util.hash_array(values)


def make_partitioner(name: ShipStrategy | str, num_subpartitions: int,
                     key_columns: Sequence[str] = (), subtask_index: int = 0) -> Partitioner:
    """The partitioner of ship strategy `name` (flinkyarn.jobgraph.ShipStrategy, or its
    value) of producer subtask `subtask_index` for an output with `num_subpartitions`
    consumers."""
    strategy = enum_value(ShipStrategy, name, "partitioner")
    if strategy is ShipStrategy.FORWARD:
        return ForwardPartitioner(num_subpartitions)
    if strategy is ShipStrategy.REBALANCE:
        return RebalancePartitioner(num_subpartitions, subtask_index)
    if strategy is ShipStrategy.BROADCAST:
        return BroadcastPartitioner(num_subpartitions)
    return HashPartitioner(num_subpartitions, key_columns)
