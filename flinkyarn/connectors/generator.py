"""A bounded source whose data comes from a function, for tests and examples."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

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
