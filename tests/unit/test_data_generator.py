"""The data generator (Flink's DataGeneratorSource with a rate limit): each subtask makes
its share of the row numbers, at its share of the rate (on a fake clock here), bounded
or without end, and goes on from its checkpointed position."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from flinkyarn import Pipeline
from flinkyarn.connectors import generator
from flinkyarn.connectors.generator import DataGeneratorSource
from tests.operator_context import FakeContext


def squares(numbers: pa.Array) -> pa.RecordBatch:
    return pa.record_batch({"n": numbers, "square": pa.array([n * n for n in numbers.to_pylist()])})


class FakeClock:
    """time.monotonic and time.sleep for the generator: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(generator, "time", fake)
    return fake


def opened(source: DataGeneratorSource, subtask: int = 0, parallelism: int = 1,
           batch_size: int = 1000) -> DataGeneratorSource:
    source.open(FakeContext(subtask, parallelism, batch_size=batch_size))
    return source


def numbers_of(items) -> list[int]:
    return [n for item in items if item is not None for n in item.column("n").to_pylist()]


def test_the_subtasks_share_the_numbers_and_a_bounded_one_ends(clock):
    made = [numbers_of(opened(DataGeneratorSource(squares, count=11), i, 3).read())
            for i in range(3)]
    assert made == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert sorted(itertools.chain(*made)) == list(range(11))


def test_the_rate_is_shared_by_the_subtasks_and_waits_yield_none(clock):
    """200 rows/s over 2 subtasks: 100 a subtask, in batches of 10 (ten a second)."""
    source = opened(DataGeneratorSource(squares, count=100, rows_per_second=200), 0, 2)
    started = clock.now
    items = list(source.read())
    batches = [item for item in items if item is not None]
    assert [b.num_rows for b in batches] == [10] * 5
    assert None in items  # it waited for its rate, taking checkpoint triggers meanwhile
    assert clock.now - started == pytest.approx(0.4, abs=0.06)  # the 5th batch is due at 0.4 s


def test_without_a_count_it_does_not_end_and_goes_on_from_its_position(clock):
    source = opened(DataGeneratorSource(squares, rows_per_second=1000), batch_size=50)
    reading = source.read()
    batches = list(itertools.islice((b for b in reading if b is not None), 3))
    assert numbers_of(batches) == list(range(150))
    state = source.snapshot_state(1)  # as a checkpoint after the third batch
    again = opened(DataGeneratorSource(squares, rows_per_second=1000), batch_size=50)
    again.initialize_state(state)
    first = next(b for b in again.read() if b is not None)
    assert first.column("n").to_pylist()[0] == 150
    assert first.column("square").to_pylist()[1] == 151 * 151


def test_mistakes_are_named():
    with pytest.raises(ValueError, match="count must be an int >= 0"):
        DataGeneratorSource(squares, count=-1)
    with pytest.raises(ValueError, match="rows_per_second must be greater than 0"):
        DataGeneratorSource(squares, rows_per_second=0)
    bad = opened(DataGeneratorSource(lambda numbers: [1, 2], count=3))
    with pytest.raises(TypeError, match="the function returned a list, not a pyarrow.RecordBatch"):
        list(bad.read())
    with pytest.raises(ValueError, match="unbounded source; pipeline 'p' is in batch mode"):
        Pipeline("p", batch_mode=True).from_data_generator(squares)
    stream = Pipeline("p").from_data_generator(squares, count=10, rows_per_second=100)
    assert stream.name == "Source: data-generator(squares)"
