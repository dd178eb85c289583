"""Event time: the timestamp assigner's watermarks, tumbling and sliding windows firing
on watermarks, late records, state across a restore, the API's checks, and the input
gate combining its channels' watermarks."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flinkyarn import Pipeline, SlidingEventTimeWindows, TumblingEventTimeWindows
from flinkyarn.pipeline.event_time import (MAX_WATERMARK, TimestampAssigner, Watermark,
                                           WindowAggregateOperator)
from flinkyarn.pipeline.operators import Aggregation
from taskexecutor.network import (InputGate, LocalInputChannel, ResultPartition,
                                  ResultPartitionID, ResultPartitionManager)
from tests.waiting import wait_for
from tests.operator_context import FakeContext
from tests.unit.test_network_input_gate import Reader

COUNT = [Aggregation(None, "count", "count")]


def rows_of(items) -> list[tuple]:
    """(key, window start ms, window end ms, count) of the batches among `items`."""
    out = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            for row in item.to_pylist():
                out.append((row["k"], int(row["window_start"].timestamp() * 1000),
                            int(row["window_end"].timestamp() * 1000), row["count"]))
    return out


def windows(assigner=None) -> WindowAggregateOperator:
    op = WindowAggregateOperator(("k",), "t", assigner or TumblingEventTimeWindows(1.0), COUNT)
    op.open(FakeContext())
    return op


def test_the_assigner_puts_a_watermark_behind_each_batch_that_raised_the_greatest_time():
    op = TimestampAssigner("t", 0.5)
    op.open(FakeContext())
    first = pa.record_batch({"t": [1000, 3000, 2000]})
    assert list(op.process(first, 0)) == [first, Watermark(3000 - 500 - 1)]
    older = pa.record_batch({"t": [2500]})
    assert list(op.process(older, 0)) == [older]  # no new greatest time: no watermark
    timestamps = pa.record_batch({"t": pa.array([4000], pa.timestamp("ms"))})
    assert list(op.process(timestamps, 0))[1] == Watermark(3499)
    with pytest.raises(ValueError, match="1 null event time"):
        op.process(pa.record_batch({"t": pa.array([None], pa.int64())}), 0)
    with pytest.raises(TypeError, match="column 't' is string"):
        op.process(pa.record_batch({"t": ["noon"]}), 0)


def test_a_tumbling_window_fires_once_the_watermark_reaches_its_end_with_its_late_rows_dropped():
    op = windows()
    assert list(op.process(pa.record_batch({"k": ["a", "b", "a"], "t": [100, 1500, 999]}), 0)) == []
    assert rows_of(op.process_watermark(Watermark(998))) == []
    assert rows_of(op.process_watermark(Watermark(999))) == [("a", 0, 1000, 2)]
    op.process(pa.record_batch({"k": ["a", "b"], "t": [500, 1200]}), 0)  # 500: late
    assert op.late_records == 1
    out = list(op.process_watermark(MAX_WATERMARK))
    assert rows_of(out) == [("b", 1000, 2000, 2)] and out[-1] == MAX_WATERMARK


def test_a_sliding_window_counts_a_record_in_each_window_it_falls_in():
    op = windows(SlidingEventTimeWindows(2.0, 1.0))
    op.process(pa.record_batch({"k": ["a", "a"], "t": [1500, 2500]}), 0)
    assert rows_of(op.process_watermark(MAX_WATERMARK)) == [
        ("a", 0, 2000, 1), ("a", 1000, 3000, 2), ("a", 2000, 4000, 1)]


def test_windows_not_fired_and_the_watermark_survive_a_restore():
    op = windows()
    op.process(pa.record_batch({"k": ["a", "a"], "t": [100, 1100]}), 0)
    op.process_watermark(Watermark(999))
    state = op.snapshot_state(1)
    again = windows()
    again.initialize_state(state)
    again.process(pa.record_batch({"k": ["a", "a"], "t": [200, 1200]}), 0)  # 200: late
    assert again.late_records == 1
    assert rows_of(again.process_watermark(MAX_WATERMARK)) == [("a", 1000, 2000, 2)]


def test_sizes_must_be_positive_and_a_sliding_size_a_multiple_of_its_slide():
    with pytest.raises(ValueError, match="greater than 0"):
        TumblingEventTimeWindows(0)
    with pytest.raises(ValueError, match="must be a multiple of its slide"):
        SlidingEventTimeWindows(3.0, 2.0)


def test_the_api_wants_timestamps_upstream_of_a_window_and_builds_a_window_operator():
    p = Pipeline("windows", parallelism=2)
    words = p.from_generator(lambda s, n: [], name="words")
    with pytest.raises(ValueError, match="need assign_timestamps"):
        words.key_by("w").window(TumblingEventTimeWindows(10))
    with pytest.raises(ValueError, match="max_out_of_orderness must be 0 or more"):
        words.assign_timestamps("ts", -1)
    windowed = words.assign_timestamps("ts", "2 s").key_by("w").window(TumblingEventTimeWindows(10))
    with pytest.raises(ValueError, match="windowed already"):
        windowed.window(TumblingEventTimeWindows(5))
    counts = windowed.count()
    operator = p.stream_graph().node(counts._id).operator
    assert isinstance(operator, WindowAggregateOperator)
    assert (operator.time_column, operator.key_columns, operator.assigner.size_ms) == (
        "ts", ("w",), 10_000)


def test_the_gate_goes_on_with_the_least_watermark_of_its_open_channels(tmp_path):
    manager = ResultPartitionManager()
    partitions = []
    for number in range(2):
        partition = ResultPartition(ResultPartitionID("job", "r", number), "pipelined", 1,
                                    tmp_path, 1 << 20)
        manager.register(partition)
        partitions.append(partition)
    gate = InputGate([LocalInputChannel(manager, ResultPartitionID("job", "r", n), 0, 30)
                      for n in range(2)])
    fast, slow = partitions
    reader = Reader(gate)

    def marks() -> list[int]:
        return [e.timestamp for _, e in list(reader.events) if isinstance(e, Watermark)]

    fast.broadcast_event(Watermark(50))  # the slow channel has none yet: no watermark
    slow.broadcast_event(Watermark(10))
    wait_for(lambda: marks() == [10], 30, "watermark 10, the least")
    fast.broadcast_event(Watermark(80))
    fast.emit(0, pa.record_batch({"x": [1]}))  # taken: watermark 80 was taken before it
    wait_for(lambda: any(isinstance(e, pa.RecordBatch) for _, e in list(reader.events)), 30,
             "the batch after watermark 80")
    slow.broadcast_event(Watermark(60))
    wait_for(lambda: marks() == [10, 60], 30, "watermark 60")
    slow.finish()  # ended: only the fast one counts from now on
    wait_for(lambda: marks() == [10, 60, 80], 30, "watermark 80")
    fast.finish()
    reader.result()
