"""A bounded source whose data comes from a function, for tests and examples."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import pyarrow as pa

from flinkyarn.connectors.files import cap_rows
from flinkyarn.pipeline.operator import SourceOperator


class GeneratorSource(SourceOperator):
    """Each subtask yields what `fn(subtask_index, parallelism)` returns: RecordBatches or
    Tables, re-cut into batches of at most `context.batch_size` rows. `fn` is called once
    per attempt, in the task thread; it must be picklable (cloudpickle) and finite."""

    def __init__(self, fn: Callable[[int, int], Iterable[pa.RecordBatch | pa.Table]],
                 name: str | None = None) -> None:
        self.fn = fn
        self.name = f"Source: {name or 'generator(' + getattr(fn, '__name__', 'fn') + ')'}"

    def read(self) -> Iterator[pa.RecordBatch]:
        return cap_rows(self._batches(), self.context.batch_size)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for item in self.fn(self.context.subtask_index, self.context.parallelism):
            if isinstance(item, pa.RecordBatch):
                yield item
            elif isinstance(item, pa.Table):
                yield from item.to_batches()
            else:
                raise TypeError(f"{self.name}: the function yielded a {type(item).__name__}, "
                                "not a pyarrow.RecordBatch or Table")
