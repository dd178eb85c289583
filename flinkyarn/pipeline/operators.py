"""Record-level operators: map, flat_map, filter and keyed aggregations.

They follow the contract of `flinkyarn.pipeline.operator`: one instance per subtask,
`process` called from the task thread only. A user function's own exception propagates
unchanged (the StreamTask prefixes the operator's name); a function that returns the
wrong kind of value gets a TypeError naming the operator and what came back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import key_groups
from flinkyarn.key_groups import Redistribution, hash_table_rows
from flinkyarn.pipeline.operator import Operator, OperatorContext


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    kind = type(value)
    return f"a {kind.__module__}.{kind.__qualname__}"


def _pandas_hint(value: Any) -> str:
    if type(value).__module__.startswith("pandas"):
        return ("; convert a pandas DataFrame with "
                "pa.RecordBatch.from_pandas(df, preserve_index=False)")
    return ""


def _batches_of(value: Any, operator_name: str, what: str) -> tuple[pa.RecordBatch, ...]:
    """`value` as record batches if it is a RecordBatch or Table, else a TypeError."""
    if isinstance(value, pa.RecordBatch):
        return (value,)
    if isinstance(value, pa.Table):
        return tuple(value.to_batches())
    raise TypeError(f"{operator_name}: {what} {_describe(value)}, expected a "
                    f"pyarrow.RecordBatch (or pyarrow.Table){_pandas_hint(value)}")


class MapOperator(Operator):
    """fn(batch) -> batch (a RecordBatch, or a Table that is passed on as its batches)."""

    def __init__(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch], name: str = "map") -> None:
        self.fn = fn
        self.name = name

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        return _batches_of(self.fn(batch), self.name, "the function returned")


class FlatMapOperator(Operator):
    """fn(batch) -> an iterable of batches (a generator is consumed lazily), or a single
    batch or Table."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Iterable[pa.RecordBatch]],
                 name: str = "flat_map") -> None:
        self.fn = fn
        self.name = name

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        result = self.fn(batch)
        if isinstance(result, (pa.RecordBatch, pa.Table)):
            return _batches_of(result, self.name, "the function returned")
        if (result is None or isinstance(result, (str, bytes, Mapping))
                or type(result).__module__.startswith("pandas")
                or not isinstance(result, Iterable)):
            raise TypeError(f"{self.name}: the function returned {_describe(result)}, "
                            f"expected an iterable of pyarrow.RecordBatch (or a single "
                            f"batch){_pandas_hint(result)}")
        return self._checked(result)

    def _checked(self, results: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        for position, item in enumerate(results):
            yield from _batches_of(item, self.name,
                                   f"item {position} of what the function returned is")


class FilterOperator(Operator):
    """fn(batch) -> a boolean mask with one entry per row (pyarrow Array or ChunkedArray,
    numpy array, pandas Series or list); rows where it is true are kept, null counts as
    false. A batch with no row left is not passed on."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any], name: str = "filter") -> None:
        self.fn = fn
        self.name = name

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        mask = self._mask(self.fn(batch))
        if len(mask) != batch.num_rows:
            raise ValueError(f"{self.name}: the mask has {len(mask)} entries for a batch "
                             f"of {batch.num_rows} rows; it needs one per row")
        kept = batch.filter(mask, null_selection_behavior="drop")
        return (kept,) if kept.num_rows else ()

    def _mask(self, value: Any) -> pa.Array:
        if isinstance(value, pa.ChunkedArray):
            mask = value.combine_chunks()
        elif isinstance(value, pa.Array):
            mask = value
        elif type(value).__module__.startswith("pandas") and hasattr(value, "to_numpy"):
            mask = pa.Array.from_pandas(value)
        elif type(value).__module__ == "numpy" and getattr(value, "ndim", 0) == 1:
            mask = pa.array(value)
        elif isinstance(value, (list, tuple)):
            try:
                mask = pa.array(value, type=pa.bool_())
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise TypeError(f"{self.name}: the function returned a list that is not "
                                f"a boolean mask: {e}") from None
        else:
            raise TypeError(f"{self.name}: the function returned {_describe(value)}, "
                            f"expected a boolean mask (pyarrow Array, numpy array) with "
                            f"one entry per row")
        if mask.type != pa.bool_():
            raise TypeError(f"{self.name}: the function returned a mask of type "
                            f"{mask.type}, expected bool")
        return mask


# ---- keyed aggregations ---------------------------------------------------------------

AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "mean")

# How each function is computed per batch (partial) and how partials merge.
_PARTIALS: dict[str, tuple[str, ...]] = {
    "count": ("count",), "sum": ("sum",), "min": ("min",), "max": ("max",),
    "mean": ("sum", "count"),
}
_MERGE = {"count": "sum", "count_all": "sum", "sum": "sum", "min": "min", "max": "max"}


@dataclass(frozen=True)
class Aggregation:
    """`function` of `column` per key, in output column `output`. column None with
    function "count": the number of rows of the key."""

    column: str | None
    function: str
    output: str


def output_name(column: str | None, function: str) -> str:
    """The output column of an aggregation: "count" for the rows per key, else
    "<column>_<function>" (pyarrow's naming): "n_sum", "n_min", "n_max", "n_mean",
    "n_count" (non-null values of n)."""
    return "count" if column is None else f"{column}_{function}"


def aggregations_from_spec(spec: Mapping[str, str | Sequence[str]]) -> list[Aggregation]:
    """{"n": "sum", "price": ["min", "max", "mean"]} -> Aggregations, in that order."""
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"aggregate: expected a non-empty dict of column -> function(s), "
                         f"not {spec!r}")
    result = []
    for column, functions in spec.items():
        if isinstance(functions, str):
            functions = [functions]
        for function in functions:
            result.append(Aggregation(column, function, output_name(column, function)))
    return result


def validate_aggregations(name: str, key_columns: Sequence[str],
                          aggregations: Sequence[Aggregation]) -> None:
    if not aggregations:
        raise ValueError(f"{name}: no aggregation given")
    outputs = list(key_columns)
    for agg in aggregations:
        if agg.function not in AGGREGATE_FUNCTIONS:
            raise ValueError(f"{name}: unknown aggregate function {agg.function!r}; one of "
                             f"{', '.join(AGGREGATE_FUNCTIONS)}")
        if agg.column is None and agg.function != "count":
            raise ValueError(f"{name}: {agg.function} needs a column")
        if agg.column is not None and (not isinstance(agg.column, str) or not agg.column):
            raise ValueError(f"{name}: column names are non-empty strings, not {agg.column!r}")
        if agg.output in outputs:
            raise ValueError(f"{name}: output column {agg.output!r} appears twice (key "
                             f"columns and aggregates share one namespace)")
        outputs.append(agg.output)


class KeyedAggregateOperator(Operator):
    """Aggregates its bounded input per key and emits one row per key in `finish()`:
    the key columns first, then one column per aggregation (see `output_name`), groups
    in order of first appearance, in batches of at most context.batch_size rows.

    `running` (a rolling aggregation, as Flink's DataStream sum/min/max on an unbounded
    stream): after each batch it emits the updated row of every key of the batch, and
    nothing at the end.

    Each batch is reduced to partial aggregates at once (sum, count, min, max; a mean
    is a sum and a count), and partials are merged every MERGE_EVERY batches, so memory
    grows with the number of distinct keys, not with the input. The merged partials are
    its checkpointed state. Vectorised with
    pyarrow's Table.group_by. Null keys form a group of their own (as in Spark); a sum,
    min, max or mean over only nulls is null.
    """

    MERGE_EVERY = 16

    def __init__(self, key_columns: Sequence[str], aggregations: Sequence[Aggregation],
                 name: str = "aggregate", running: bool = False) -> None:
        self.running = bool(running)
        self.key_columns = tuple(key_columns)
        self.aggregations = tuple(aggregations)
        self.name = name
        validate_aggregations(name, self.key_columns, self.aggregations)
        # Distinct (column, partial function) pairs, in first-use order.
        partials: list[tuple[str | None, str]] = []
        for agg in self.aggregations:
            wanted = [(None, "count_all")] if agg.column is None else \
                [(agg.column, f) for f in _PARTIALS[agg.function]]
            partials.extend(p for p in wanted if p not in partials)
        self._partials = partials
        self._value_columns = list(dict.fromkeys(c for c, _ in partials if c is not None))
        self._merged: pa.Table | None = None
        self._pending: list[pa.Table] = []

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        self._merged, self._pending = None, []

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        if batch.num_rows:
            partial = self._partial(batch)
            self._pending.append(partial)
            if self.running:
                return self._updates(partial)
            if len(self._pending) >= self.MERGE_EVERY:
                self._merge()
        return ()

    def _updates(self, partial: pa.Table) -> list[pa.RecordBatch]:
        """The current rows of the keys of `partial` (a batch's partial aggregates)."""
        self._merge()
        assert self._merged is not None
        keys = [f"k{i}" for i in range(len(self.key_columns))]
        changed = np.isin(hash_table_rows(self._merged, keys), hash_table_rows(partial, keys))
        table = self._final(self._merged.filter(pa.array(changed))).combine_chunks()
        batches: list[pa.RecordBatch] = table.to_batches(
            max_chunksize=max(1, int(self.context.batch_size)))
        return batches

    def merged_partials(self) -> pa.Table | None:
        """The partial aggregates per key so far, merged (columns k0.. for the keys, p0..
        for the partials); None before any row."""
        self._merge()
        return self._merged

    def replace_partials(self, partials: pa.Table | None) -> None:
        """Keeps `partials` (rows of merged_partials()) instead of what it had."""
        self._merged, self._pending = partials, []

    def finalize(self, partials: pa.Table) -> pa.Table:
        """The output rows (key columns, then the aggregates) of rows of merged_partials()."""
        return self._final(partials)

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        """The partial aggregates per key so far (merged): what a restore goes on from."""
        self._merge()
        return {} if self._merged is None else {"partials": self._merged}

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        self._merged = state.get("partials")

    def state_redistribution(self, name: str) -> Redistribution:
        """The partials go by key group (their keys are columns k0..)."""
        return key_groups.keyed(*(f"k{i}" for i in range(len(self.key_columns))))

    def finish(self) -> Iterable[pa.RecordBatch]:
        self._merge()
        merged, self._merged = self._merged, None
        if merged is None or self.running:  # a running one emitted every update already
            return ()
        result = self._final(merged).combine_chunks()
        batches: list[pa.RecordBatch] = result.to_batches(
            max_chunksize=max(1, int(self.context.batch_size)))
        return batches

    # Internal column names: keys k0.., partials p0.., so that no user column name
    # (say a key called "n_sum") can collide with pyarrow's output names.
    def _partial(self, batch: pa.RecordBatch) -> pa.Table:
        names = batch.schema.names
        for column in (*self.key_columns, *self._value_columns):
            if column not in names:
                raise KeyError(f"{self.name}: the input has no column {column!r} "
                               f"(its columns: {', '.join(names)})")
        keys = [f"k{i}" for i in range(len(self.key_columns))]
        values = {c: f"v{i}" for i, c in enumerate(self._value_columns)}
        table = pa.Table.from_arrays(
            [batch.column(c) for c in self.key_columns]
            + [batch.column(c) for c in self._value_columns],
            names=keys + list(values.values()))
        specs = [([], "count_all") if c is None else (values[c], f) for c, f in self._partials]
        try:
            grouped = table.group_by(keys, use_threads=False).aggregate(specs)
        except pa.ArrowNotImplementedError as e:
            wanted = ", ".join(f"{f}({c}: {batch.schema.field(c).type})"
                               for c, f in self._partials if c is not None)
            raise TypeError(f"{self.name}: cannot compute {wanted}: {e}") from None
        out = ["count_all" if c is None else f"{values[c]}_{f}" for c, f in self._partials]
        return pa.Table.from_arrays(
            [grouped.column(k) for k in keys] + [grouped.column(o) for o in out],
            names=keys + [f"p{i}" for i in range(len(out))])

    def _merge(self) -> None:
        tables = ([self._merged] if self._merged is not None else []) + self._pending
        self._pending = []
        if not tables:
            return
        if len(tables) == 1:
            self._merged = tables[0]
            return
        combined = pa.concat_tables(tables, promote_options="permissive")
        keys = [f"k{i}" for i in range(len(self.key_columns))]
        partials = [f"p{i}" for i in range(len(self._partials))]
        grouped = combined.group_by(keys, use_threads=False).aggregate(
            [(p, _MERGE[f]) for p, (_, f) in zip(partials, self._partials)])
        self._merged = pa.Table.from_arrays(
            [grouped.column(k) for k in keys]
            + [grouped.column(f"{p}_{_MERGE[f]}") for p, (_, f) in zip(partials, self._partials)],
            names=keys + partials)

    def _final(self, merged: pa.Table) -> pa.Table:
        def partial(column: str | None, function: str) -> pa.ChunkedArray:
            return merged.column(f"p{self._partials.index((column, function))}")

        columns = [merged.column(f"k{i}") for i in range(len(self.key_columns))]
        for agg in self.aggregations:
            if agg.column is None:
                columns.append(partial(None, "count_all"))
            elif agg.function == "mean":
                total = pc.cast(partial(agg.column, "sum"), pa.float64())
                count = partial(agg.column, "count")
                mean = pc.divide(total, pc.cast(count, pa.float64()))
                columns.append(pc.if_else(pc.equal(count, 0),
                                          pa.scalar(None, pa.float64()), mean))
            else:
                columns.append(partial(agg.column, agg.function))
        return pa.Table.from_arrays(columns,
                                    names=[*self.key_columns,
                                           *(a.output for a in self.aggregations)])
