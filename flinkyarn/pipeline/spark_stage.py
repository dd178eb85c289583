"""A pipeline stage that runs a user's Spark DataFrame function over its inputs.

    SparkStage(lambda orders, users: orders.join(users, "user_id").groupBy("country").count(),
               num_inputs=2)

The stage is blocking, like a sort or an aggregation: it holds back every batch of every
input, and only in `finish()` turns each input into a DataFrame of the TaskExecutor's
SparkSession (`context.spark()`), calls the function, and emits the result.

Holding inputs back. Each input keeps its batches in a list until they exceed
`spill_bytes` (64 MiB by default); from then on that input goes to an Arrow IPC file in
`context.tmp_dir`, which `finish()` memory-maps, so a large input costs page cache, not
Python heap. PySpark then streams the table to the JVM through a file of its own
(`spark.createDataFrame(pyarrow.Table)`: no Python row objects anywhere).

Schemas. An input's schema is the first batch's; later batches are cast to it (a batch
that cannot be cast fails the stage, naming the input). An input that ended without any
batch becomes an empty DataFrame with the schema given in `schemas`, else an empty
DataFrame with no columns.

Cancellation. The Spark jobs started in `finish()` carry a job tag of this subtask; a
watcher thread cancels them when the task is cancelled, so `finish()` returns promptly
with Spark's cancellation error.

Also here, for the TaskExecutor's SparkSessionProvider and PySparkScript:
`spark_job_tag` (that cancellation) and `make_active` (makes a session the one
`SparkSession.builder.getOrCreate()` returns).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.ipc as ipc

from flinkyarn.pipeline.operator import Operator, OperatorContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_SPILL_BYTES = 64 * 1024 * 1024


class SparkStage(Operator):
    """Runs `fn(*dataframes) -> DataFrame` once over all of this subtask's input.

    Called by the StreamTask from the task thread only; `fn` runs in that thread too.
    `process` and `end_input` emit nothing; `finish` emits the result in batches of at
    most `context.batch_size` rows (one empty batch, carrying the schema, when the
    result has no rows). Exceptions from Spark or `fn` propagate unchanged.
    """

    def __init__(self, fn: Callable[..., "DataFrame"], num_inputs: int = 1, name: str | None = None,
                 schemas: Sequence[pa.Schema | None] | None = None,
                 spill_bytes: int = DEFAULT_SPILL_BYTES) -> None:
        if num_inputs < 1:
            raise ValueError("a SparkStage needs at least one input")
        if schemas is not None and len(schemas) != num_inputs:
            raise ValueError(f"{len(schemas)} schemas given for {num_inputs} inputs")
        self.fn = fn
        self.num_inputs = num_inputs
        self.name = name or f"spark({getattr(fn, '__name__', type(fn).__name__)})"
        self.schemas = list(schemas) if schemas is not None else [None] * num_inputs
        self.spill_bytes = spill_bytes
        self._inputs: list[_CollectedInput] = []

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        self._inputs = [_CollectedInput(f"{self.name} input {i}", context.tmp_dir,
                                        self.spill_bytes, self.schemas[i])
                        for i in range(self.num_inputs)]

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        self._inputs[input_index].add(batch)
        return ()

    def finish(self) -> Iterable[pa.RecordBatch]:
        from pyspark.sql import DataFrame

        spark = self.context.spark()
        with spark_job_tag(spark, self.context, self.name):
            frames = [spark.createDataFrame(collected.table()) for collected in self._inputs]
            result = self.fn(*frames)
            if not isinstance(result, DataFrame):
                raise TypeError(f"{self.name}: the function must return a pyspark.sql.DataFrame, "
                                f"it returned {type(result).__name__}")
            table = result.toArrow()
        for collected in self._inputs:
            collected.close()
        if table.num_rows == 0:
            return [pa.RecordBatch.from_pylist([], schema=table.schema)]
        return table.to_batches(max_chunksize=self.context.batch_size)

    def close(self) -> None:
        for collected in self._inputs:
            collected.close()


class _CollectedInput:
    """The batches of one input: a list, then, past `spill_bytes`, an Arrow IPC file."""

    def __init__(self, what: str, tmp_dir: str, spill_bytes: int, schema: pa.Schema | None) -> None:
        self.what = what
        self.tmp_dir = tmp_dir
        self.spill_bytes = spill_bytes
        self.schema = schema
        self._batches: list[pa.RecordBatch] = []
        self._bytes = 0
        self._path: str | None = None
        self._writer: ipc.RecordBatchFileWriter | None = None
        self._mapped: pa.MemoryMappedFile | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.schema = batch.schema
        elif not batch.schema.equals(self.schema):
            try:
                batch = batch.cast(self.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as error:
                raise TypeError(f"{self.what}: a batch with schema {batch.schema} does not "
                                f"match the input's schema {self.schema}: {error}") from error
        if self._writer is not None:
            self._writer.write_batch(batch)
            return
        self._batches.append(batch)
        self._bytes += batch.nbytes
        if self._bytes > self.spill_bytes:
            self._spill()

    def _spill(self) -> None:
        os.makedirs(self.tmp_dir, exist_ok=True)
        self._path = os.path.join(self.tmp_dir, f"spark-stage-{uuid.uuid4().hex}.arrow")
        self._writer = ipc.new_file(self._path, self.schema)
        for batch in self._batches:
            self._writer.write_batch(batch)
        self._batches = []

    def table(self) -> pa.Table:
        """Everything that arrived, as one table; an empty one if nothing did."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._mapped = pa.memory_map(self._path)
            return ipc.open_file(self._mapped).read_all()
        if self.schema is None:
            return pa.table({})
        return pa.Table.from_batches(self._batches, schema=self.schema)

    def close(self) -> None:
        """Frees the batches and removes the spill file. Idempotent."""
        self._batches = []
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._mapped is not None:
            self._mapped.close()
            self._mapped = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
            self._path = None


_tag_numbers = itertools.count()


@contextlib.contextmanager
def spark_job_tag(spark: SparkSession, context: OperatorContext, what: str) -> Iterator[None]:
    """Tags the Spark jobs the calling thread starts inside the block, and cancels them
    (interrupting their threads) as soon as `context.is_cancelled()` turns true. The
    watcher is a daemon thread polling every 0.2 s; it ends with the block."""
    sc = spark.sparkContext
    tag = f"flinkyarn-{os.getpid()}-{next(_tag_numbers)}"
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if context.is_cancelled():
                sc.cancelJobsWithTag(tag)
                return

    sc.addJobTag(tag)
    sc.setInterruptOnCancel(True)
    watcher = threading.Thread(target=watch, name=f"cancel watcher of {what}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        sc.removeJobTag(tag)


def make_active(session: SparkSession) -> None:
    """Makes `session` PySpark's default session in this process and the active one of the
    calling thread, so that `SparkSession.builder.getOrCreate()`, `SparkSession.active()`
    and `getActiveSession()` return it. Call from the thread that will use it."""
    from pyspark.sql import SparkSession

    jvm_class = SparkSession._get_j_spark_session_class(session._jvm)
    jvm_class.setDefaultSession(session._jsparkSession)
    jvm_class.setActiveSession(session._jsparkSession)
    SparkSession._instantiatedSession = session
    SparkSession._activeSession = session
