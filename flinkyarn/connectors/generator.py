"""Sources whose data comes from a function: the generator (for tests and examples) and
the data generator (Flink's DataGeneratorSource: numbered rows at a limited rate,
bounded or not)."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from flinkyarn.connectors.files import Position, cap_rows
from flinkyarn.pipeline.operator import SourceOperator


class GeneratorSource(SourceOperator):
    """Each subtask yields what `fn(subtask_index, parallelism)` returns: RecordBatches or
    Tables, re-cut into batches of at most `context.batch_size` rows; None says it has
    nothing for now (while it waits, at least every 100 ms: its task takes checkpoint
    triggers then). `fn` is called once per attempt, in the task thread; it must be
    picklable (cloudpickle) and finite.

    Its position is its state: how many batches it had emitted at a checkpoint. A
    subtask restored from one generates again and skips that many, so `fn` must give
    the same batches in every attempt (as a replayable source does)."""

    def __init__(self, fn: Callable[[int, int], Iterable[pa.RecordBatch | pa.Table | None]],
                 name: str | None = None) -> None:
        self.fn = fn
        self.name = f"Source: {name or 'generator(' + getattr(fn, '__name__', 'fn') + ')'}"
        self._position = Position()

    def read(self) -> Iterator[pa.RecordBatch | None]:
        return self._position.replay(self._capped())

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        return self._position.state()

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        self._position.restore(state)

    def _capped(self) -> Iterator[pa.RecordBatch | None]:
        for item in self._batches():
            if item is None:  # the function has nothing for now: the task takes triggers
                yield None
            else:
                yield from cap_rows((item,), self.context.batch_size)

    def _batches(self) -> Iterator[pa.RecordBatch | None]:
        for item in self.fn(self.context.subtask_index, self.context.parallelism):
            if item is None or isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, pa.Table):
                yield from item.to_batches()
            else:
                raise TypeError(f"{self.name}: the function yielded a {type(item).__name__}, "
                                "not a pyarrow.RecordBatch or Table")


class DataGeneratorSource(SourceOperator):
    """Flink's DataGeneratorSource with a RateLimiterStrategy: rows made by
    `fn(indices)` (a RecordBatch or Table for an int64 Array of row numbers) for the row
    numbers 0, 1, 2, ... up to `count` (None: without end, an unbounded source), at most
    `rows_per_second` in all (None: as fast as it goes), shared evenly by the subtasks:
    subtask i of p makes the numbers i, i + p, i + 2p, ... `fn` must give the same rows
    for the same numbers in every attempt.

    A subtask makes about ten batches a second at its rate (at most
    context.batch_size rows each) and waits between them, yielding None (its task takes
    checkpoint triggers meanwhile). Its position, how many of its numbers it emitted, is
    its state: a restored subtask goes on from there. The numbers depend on the
    parallelism, so the position pins it (a savepoint resumes at the same parallelism).
    """

    def __init__(self, fn: Callable[[pa.Array], pa.RecordBatch | pa.Table],
                 count: int | None = None, rows_per_second: float | None = None,
                 name: str | None = None) -> None:
        self.fn = fn
        self.name = f"Source: {name or 'data-generator(' + getattr(fn, '__name__', 'fn') + ')'}"
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or count < 0):
            raise ValueError(f"{self.name}: count must be an int >= 0 or None, not {count!r}")
        if rows_per_second is not None and not rows_per_second > 0:
            raise ValueError(f"{self.name}: rows_per_second must be greater than 0, not "
                             f"{rows_per_second!r}")
        self.count = count
        self.rows_per_second = rows_per_second
        self._position = Position()  # its `emitted`: how many of its numbers went out

    def read(self) -> Iterator[pa.RecordBatch | None]:
        index, parallelism = self.context.subtask_index, self.context.parallelism
        mine = None if self.count is None else max(0, (self.count - index + parallelism - 1)
                                                    // parallelism)
        rate = None if self.rows_per_second is None else self.rows_per_second / parallelism
        chunk = int(self.context.batch_size) if rate is None else \
            max(1, min(int(self.context.batch_size), int(rate / 10)))
        position = self._position
        started, made = time.monotonic(), 0  # the rate counts from this attempt's start
        while mine is None or position.emitted < mine:
            rows = chunk if mine is None else min(chunk, mine - position.emitted)
            if rate is not None:
                due = started + made / rate
                while (wait := due - time.monotonic()) > 0:
                    yield None
                    time.sleep(min(0.05, wait))
            numbers = index + parallelism * np.arange(position.emitted, position.emitted + rows,
                                                      dtype=np.int64)
            batches = self._batches(pa.array(numbers, pa.int64()))
            position.emitted += rows
            made += rows
            yield from batches

    def _batches(self, numbers: pa.Array) -> list[pa.RecordBatch]:
        result = self.fn(numbers)
        if isinstance(result, pa.RecordBatch):
            batches = [result]
        elif isinstance(result, pa.Table):
            batches = result.to_batches()
        else:
            raise TypeError(f"{self.name}: the function returned a {type(result).__name__}, "
                            f"not a pyarrow.RecordBatch or Table")
        return list(cap_rows(batches, self.context.batch_size))

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        return self._position.state()

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        self._position.restore(state)
