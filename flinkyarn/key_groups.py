"""Key groups (Flink's KeyGroupRangeAssignment): how keyed data and keyed state are cut
so that a job can resume at another parallelism.

A key's key group is `hash_rows(key) % max_parallelism` (a job's
pipeline.max-parallelism, 128 by default as in Flink: see `resolve_max_parallelism`).
Subtask i of a keyed operator at parallelism p owns the contiguous range of key groups
`key_group_range(max_parallelism, p, i)`, and a record goes to the subtask that owns its
key's group (`operator_indices`): the hash exchange routes by it, and a keyed operator's
state rows are shared out by it when the job resumes from a checkpoint or savepoint
taken at another parallelism. The number of key groups therefore may not change
between a savepoint and the job that resumes from it.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import msgspec
import numpy as np
import pyarrow as pa

from flinkyarn.options import MAX_PARALLELISM_UPPER_BOUND

DEFAULT_MAX_PARALLELISM = 128  # Flink's smallest default

KEYED, UNION, BY_SUBTASK, FIXED = "keyed", "union", "by-subtask", "fixed"


class Redistribution(msgspec.Struct, frozen=True):
    """How a named state is shared out when its operator resumes at another parallelism:

    KEYED       rows of keys (in `key_columns`); a subtask keeps the rows of its key groups
    UNION       every subtask gets every old subtask's rows (Flink's union list state)
    BY_SUBTASK  rows carry the subtask they belong to in an int column `subtask`; row
                goes to subtask `subtask % parallelism`
    FIXED       not at all: the operator cannot change its parallelism (the default)
    """

    kind: str = FIXED
    key_columns: list[str] = []


def keyed(*key_columns: str) -> Redistribution:
    return Redistribution(KEYED, list(key_columns))


def union() -> Redistribution:
    return Redistribution(UNION)


def by_subtask() -> Redistribution:
    return Redistribution(BY_SUBTASK)


# The hash of a null key value; any fixed value will do, it only has to be the same
# in every process.
_NULL_HASH = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0x100000001B3)


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default for an operator of `parallelism`: 1.5 times it rounded up to a
    power of two, at least 128 and at most 32768."""
    wanted = 1 << max(0, (parallelism + parallelism // 2) - 1).bit_length()
    return min(max(wanted, DEFAULT_MAX_PARALLELISM), MAX_PARALLELISM_UPPER_BOUND)


def resolve_max_parallelism(configured: int, parallelisms: Iterable[int],
                            saved: int | None = None) -> int:
    """A job's number of key groups: pipeline.max-parallelism if set (`configured` not
    -1), else the savepoint's it resumes from (`saved`), else Flink's default for its
    widest vertex. ValueError when a vertex is wider than that or the setting differs
    from the savepoint's."""
    widest = max(parallelisms, default=1)
    if configured != -1:
        if saved is not None and saved != configured:
            raise ValueError(f"the savepoint's state is cut into {saved} key groups "
                             f"(pipeline.max-parallelism {saved}), and this job sets "
                             f"{configured}: they must be equal")
        chosen = configured
    else:
        chosen = saved if saved is not None else default_max_parallelism(widest)
    if widest > chosen:
        where = "the savepoint's maximum parallelism" if configured == -1 and saved is not None \
            else "pipeline.max-parallelism"
        raise ValueError(f"a vertex has parallelism {widest}, above {where} {chosen}")
    return chosen


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> range:
    """The key groups subtask `index` of `parallelism` owns: a contiguous range."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def operator_indices(hashes: np.ndarray, max_parallelism: int, parallelism: int) -> np.ndarray:
    """The subtask (of `parallelism`) owning each row's key group, from hash_rows()."""
    groups = (hashes % np.uint64(max_parallelism)).astype(np.int64)
    return groups * parallelism // max_parallelism


def key_groups(table: pa.Table | pa.RecordBatch, key_columns: Sequence[str],
               max_parallelism: int) -> np.ndarray:
    """The key group of each row of `table` (its keys in `key_columns`)."""
    return (hash_table_rows(table, key_columns) % np.uint64(max_parallelism)).astype(np.int64)


def hash_table_rows(table: pa.Table | pa.RecordBatch, key_columns: Sequence[str]) -> np.ndarray:
    """hash_rows of a table (its chunks combined) or of a batch."""
    if isinstance(table, pa.Table):
        table = pa.record_batch([table.column(c).combine_chunks() for c in key_columns],
                                names=list(key_columns))
    return hash_rows(table, key_columns)


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
        spread: np.ndarray = pd.util.hash_array(distinct)[
            encoded.indices.to_numpy(zero_copy_only=False)]
        return spread
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        values = values + 0.0  # -0.0 == 0.0 but their bits differ
    hashes: np.ndarray = pd.util.hash_array(values)
    return hashes


