"""Event time: watermarks, the operator that assigns them, and event-time windows.

A record's event time is a column of it: int64 milliseconds since the epoch, or an
Arrow timestamp (any unit). `assign_timestamps(column, max_out_of_orderness)` puts
Flink's bounded-out-of-orderness watermarks into the stream: after each batch, the
greatest time seen so far minus `max_out_of_orderness`, minus 1 ms. A Watermark(t)
says: no record with a time <= t is still to come. Watermarks travel with the data
(between TaskExecutors too); a task with several input channels goes on with the least
of its channels' watermarks (a channel that ended counts no more), and the end of the
input is the greatest watermark of all, so every window fires before a bounded job
finishes.

Windows (Flink's TumblingEventTimeWindows, SlidingEventTimeWindows) group a keyed
stream by key and window [start, start + size). A window fires, once, when the
watermark reaches its end - 1: one row per key with the key columns, `window_start`,
`window_end` (timestamp[ms]) and the aggregates. A record whose windows all fired
already is late: dropped (Flink's default allowed lateness of 0) and counted in the
operator's `late_records`, which its task logs when it ends. The partial aggregates of
the windows not fired yet, and the watermark, are the operator's checkpointed state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import key_groups
from flinkyarn.key_groups import Redistribution
from flinkyarn.pipeline.operator import (MAX_WATERMARK, MIN_TIMESTAMP, Operator,
                                         OperatorContext, Watermark)
from flinkyarn.pipeline.operators import Aggregation, KeyedAggregateOperator

log = logging.getLogger(__name__)

__all__ = ["MAX_WATERMARK", "SlidingEventTimeWindows", "TimestampAssigner",
           "TumblingEventTimeWindows", "Watermark", "WindowAggregateOperator", "event_times"]



def event_times(batch: pa.RecordBatch, column: str, what: str) -> pa.Array:
    """`column` of `batch` as int64 milliseconds since the epoch; errors name `what`."""
    if column not in batch.schema.names:
        raise KeyError(f"{what}: the input has no column {column!r} (its columns: "
                       f"{', '.join(batch.schema.names)})")
    values = batch.column(column)
    if pa.types.is_timestamp(values.type):
        return pc.cast(pc.cast(values, pa.timestamp("ms")), pa.int64())
    if pa.types.is_integer(values.type):
        return pc.cast(values, pa.int64())
    raise TypeError(f"{what}: column {column!r} is {values.type}: event times are int64 "
                    f"milliseconds or a timestamp")


class TimestampAssigner(Operator):
    """Passes batches on and puts a watermark behind each one that raised the greatest
    event time seen (bounded out-of-orderness). Null times are refused."""

    def __init__(self, column: str, max_out_of_orderness: float, name: str = "timestamps") -> None:
        self.column = column
        self.lag_ms = int(round(max_out_of_orderness * 1000))
        self.name = name
        self._max = MIN_TIMESTAMP

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch | Watermark]:
        times = event_times(batch, self.column, self.name)
        if times.null_count:
            raise ValueError(f"{self.name}: column {self.column!r} has {times.null_count} null "
                             f"event time(s)")
        if len(times) == 0:
            return (batch,)
        greatest = pc.max(times).as_py()
        if greatest <= self._max:
            return (batch,)
        self._max = greatest
        return (batch, Watermark(greatest - self.lag_ms - 1))

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        return {"greatest": pa.table({"time": pa.array([self._max], pa.int64())})}

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        self._max = _least(state["greatest"])

    def state_redistribution(self, name: str) -> Redistribution:
        """Rescaled, a subtask goes on from the least of the old subtasks' greatest times
        (its new share of the input may be behind the others')."""
        return key_groups.union()


@dataclass(frozen=True)
class TumblingEventTimeWindows:
    """Windows of `size` seconds, one after the other: [k*size, (k+1)*size)."""

    size: float

    def __post_init__(self) -> None:
        if not self.size > 0:
            raise ValueError(f"a window's size must be greater than 0, not {self.size!r}")

    @property
    def size_ms(self) -> int:
        return int(round(self.size * 1000))

    @property
    def slide_ms(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class SlidingEventTimeWindows:
    """Windows of `size` seconds starting every `slide` seconds: a record is in
    size/slide of them (size a multiple of slide)."""

    size: float
    slide: float

    def __post_init__(self) -> None:
        if not (self.size > 0 and self.slide > 0):
            raise ValueError(f"a window's size and slide must be greater than 0, not "
                             f"{self.size!r} and {self.slide!r}")
        if self.size_ms % self.slide_ms:
            raise ValueError(f"a sliding window's size ({self.size:g} s) must be a multiple "
                             f"of its slide ({self.slide:g} s)")

    @property
    def size_ms(self) -> int:
        return int(round(self.size * 1000))

    @property
    def slide_ms(self) -> int:
        return int(round(self.slide * 1000))


WindowAssigner = TumblingEventTimeWindows | SlidingEventTimeWindows
_START = "window_start"


class WindowAggregateOperator(Operator):
    """Aggregations per key and event-time window; see the module docstring."""

    def __init__(self, key_columns: Sequence[str], time_column: str, assigner: WindowAssigner,
                 aggregations: Sequence[Aggregation], name: str = "window") -> None:
        for reserved in (_START, "window_end"):
            if reserved in key_columns:
                raise ValueError(f"{name}: {reserved!r} is the window's column, not a key")
        self.key_columns = tuple(key_columns)
        self.time_column = time_column
        self.assigner = assigner
        self.name = name
        self._partials = KeyedAggregateOperator((*self.key_columns, _START), aggregations,
                                                name=name)
        self._watermark = MIN_TIMESTAMP
        self.late_records = 0

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        self._partials.open(context)
        self.late_records = 0

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        times = event_times(batch, self.time_column, self.name)
        size, slide = self.assigner.size_ms, self.assigner.slide_ms
        # The start of the newest window of each record: its time rounded down to a slide.
        last_start = pc.multiply(pc.cast(pc.floor(pc.divide(pc.cast(times, pa.float64()), slide)),
                                         pa.int64()), slide)
        for k in range(size // slide):  # the windows a record is in, newest first
            starts = pc.subtract(last_start, k * slide)
            # Late: the window ended at or before the watermark (it fired).
            on_time = pc.greater(pc.add(starts, size - 1), self._watermark)
            kept = batch.filter(on_time)
            self.late_records += (batch.num_rows - kept.num_rows) if k == 0 else 0
            if kept.num_rows:
                self._partials.process(kept.append_column(_START, starts.filter(on_time)), 0)
        return ()

    def process_watermark(self, watermark: Watermark) -> Iterable[pa.RecordBatch | Watermark]:
        if watermark.timestamp <= self._watermark:
            return ()
        self._watermark = watermark.timestamp
        # A window fires when the watermark reaches its end - 1.
        return (*self._fire(lambda ends: pc.less_equal(pc.subtract(ends, 1), watermark.timestamp)),
                watermark)

    def finish(self) -> Iterable[pa.RecordBatch]:
        fired = self._fire(None)
        if self.late_records:
            log.info("%s (%d/%d): dropped %d late record(s)", self.name,
                     self.context.subtask_index + 1, self.context.parallelism, self.late_records)
        return fired

    def _fire(self, due: Callable[[pa.Array], pa.Array] | None) -> list[pa.RecordBatch]:
        """The windows whose end satisfies `due` (None: all), as rows; they are dropped."""
        merged = self._partials.merged_partials()
        if merged is None or merged.num_rows == 0:
            return []
        start = merged.column(f"k{len(self.key_columns)}")
        ends = pc.add(start, self.assigner.size_ms)
        mask = pa.array([True] * merged.num_rows) if due is None else due(ends)
        fired, rest = merged.filter(mask), merged.filter(pc.invert(mask))
        self._partials.replace_partials(rest if rest.num_rows else None)
        if fired.num_rows == 0:
            return []
        table = self._partials.finalize(fired)
        starts = table.column(_START)
        table = table.drop_columns([_START])
        at = len(self.key_columns)
        table = table.add_column(at, _START, pc.cast(starts, pa.timestamp("ms")))
        table = table.add_column(at + 1, "window_end", pc.cast(
            pc.add(starts, self.assigner.size_ms), pa.timestamp("ms")))
        ordered = table.sort_by([(_START, "ascending")]).combine_chunks()
        batches: list[pa.RecordBatch] = ordered.to_batches(
            max_chunksize=max(1, int(self.context.batch_size)))
        return batches

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        state = dict(self._partials.snapshot_state(checkpoint_id))
        state["watermark"] = pa.table({"time": pa.array([self._watermark], pa.int64())})
        return state

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        self._partials.initialize_state(state)
        self._watermark = _least(state["watermark"])

    def state_redistribution(self, name: str) -> Redistribution:
        """The windows' partials go by key group (the user's keys, not the window's
        start); rescaled, the watermark is the least of the old subtasks'."""
        if name == "watermark":
            return key_groups.union()
        return key_groups.keyed(*(f"k{i}" for i in range(len(self.key_columns))))


def _least(times: pa.Table) -> int:
    """The least time of a state table of times (one row per subtask it came from)."""
    least = pc.min(times.column("time")).as_py()
    return MIN_TIMESTAMP if least is None else least
