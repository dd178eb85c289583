"""A pipeline stage that runs a user's Spark DataFrame function over its inputs.

    SparkStage(lambda orders, users: orders.join(users, "user_id").groupBy("country").count(),
               num_inputs=2)

The stage is blocking, like a sort or an aggregation: it holds back every batch of every
input, and only in `finish()` turns each input into a DataFrame of the TaskExecutor's
SparkSession (`context.spark()`), calls the function, and emits the result.

Moving data between the task and Spark. Each input streams, batch by batch, into a
Parquet file in `context.tmp_dir` as it arrives, so holding it back costs disk, not
memory; `finish()` gives Spark `spark.read.parquet` of those files, which Spark splits
and reads in parallel on its executor threads. The result goes back the same way: Spark
writes it as Parquet and the stage streams it out with pyarrow, batch by batch. Neither
direction passes through the Spark driver's heap or Python row objects (a
`createDataFrame` of local data would ship the whole input through the driver as one
task, and `toArrow()` would collect the whole result there).

Schemas. An input's schema is the first batch's; later batches are cast to it (a batch
that cannot be cast fails the stage, naming the input). An input that ended without any
batch becomes an empty DataFrame with the schema given in `schemas`, else an empty
DataFrame with no columns.

In a stream (a job that takes checkpoints), the stage runs once per completed
checkpoint interval instead: what arrived between two barriers is an interval, closed
at the second barrier (its rows are the operator's state in that checkpoint), and when
that checkpoint completes the function runs over the interval and its result goes on,
after the barrier, so it belongs to the next checkpoint with everything else the
interval caused downstream: exactly once with the rest (a restore runs again the
intervals its checkpoint had not seen through; an exactly-once sink dropped what they
gave before). An interval with no rows is skipped; at the end of a bounded stream the
rest runs at once. Rescaled, old subtask k's intervals go to subtask k % parallelism
(they run over the same rows as they would have).

Cancellation. The Spark jobs started in `finish()` carry a job tag of this subtask; a
watcher thread cancels them when the task is cancelled, so `finish()` returns promptly
with Spark's cancellation error (`spark_job_tag`).

The session itself is the TaskExecutor's (taskexecutor/spark/bridge.py); the stage only
asks its OperatorContext for it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import shutil
import threading
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flinkyarn import key_groups
from flinkyarn.key_groups import Redistribution
from flinkyarn.pipeline.operator import Operator, OperatorContext

_INTERVAL = "__checkpoint"  # the interval's checkpoint, in the stage's state tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class SparkStage(Operator):
    """Runs `fn(*dataframes) -> DataFrame` once over all of this subtask's input (in a
    job that takes checkpoints: once per completed checkpoint interval).

    Called by the StreamTask from the task thread only; `fn` runs in that thread too.
    `finish` emits the result in batches of at most `context.batch_size` rows (one
    empty batch, carrying the schema, when the result has no rows); in a stream,
    `notify_checkpoint_complete` (and `process`, after a restore) emit the results of
    the intervals it completed. Exceptions from Spark or `fn` propagate unchanged.
    """

    def __init__(self, fn: Callable[..., "DataFrame"], num_inputs: int = 1, name: str | None = None,
                 schemas: Sequence[pa.Schema | None] | None = None) -> None:
        if num_inputs < 1:
            raise ValueError("a SparkStage needs at least one input")
        if schemas is not None and len(schemas) != num_inputs:
            raise ValueError(f"{len(schemas)} schemas given for {num_inputs} inputs")
        self.fn = fn
        self.num_inputs = num_inputs
        self.name = name or f"spark({getattr(fn, '__name__', type(fn).__name__)})"
        self.schemas = list(schemas) if schemas is not None else [None] * num_inputs
        self._inputs: list[_CollectedInput] = []

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        # The session takes seconds to start; start it while the input is still arriving,
        # not after. The provider is thread-safe: finish() waits for this start if needed.
        self._warm_up = threading.Thread(target=context.spark, daemon=True,
                                         name=f"start Spark for {self.name}")
        self._warm_up.start()
        self._inputs = self._collecting()
        # In a stream: the closed intervals not run yet, (checkpoint id, inputs), oldest
        # first, and the newest checkpoint known complete (its intervals may run).
        self._intervals: list[tuple[int, list[_CollectedInput]]] = []
        self._completed = -1

    def _collecting(self) -> list[_CollectedInput]:
        return [_CollectedInput(f"{self.name} input {i}", self.context.tmp_dir, self.schemas[i])
                for i in range(self.num_inputs)]

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        self._inputs[input_index].add(batch)
        return self._run_completed() if self._intervals else ()

    def finish(self) -> Iterable[pa.RecordBatch]:
        intervals = [inputs for _, inputs in self._intervals]
        self._intervals, current, self._inputs = [], self._inputs, self._collecting()
        if not getattr(self.context, "checkpointing", False):
            if not any(c.rows for c in current) and None in [c.schema for c in current]:
                # Nothing arrived (a subtask no key hashed to) and nothing says what it
                # would have held: no frame to give the function, nothing to run, as for
                # an empty interval of a stream.
                for collected in current:
                    collected.close()
                return ()
            return self._run(current)
        return self._run_each([*intervals, current])

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        """The interval ends at this barrier: the rows of every interval not run yet,
        per input (with their interval's checkpoint and this subtask)."""
        self._intervals.append((checkpoint_id, self._inputs))
        self._inputs = self._collecting()
        state = {}
        for index in range(self.num_inputs):
            parts = [inputs[index].table().append_column(
                _INTERVAL, pa.array([checkpoint] * inputs[index].rows, pa.int64()))
                for checkpoint, inputs in self._intervals if inputs[index].rows]
            if parts:
                table = pa.concat_tables(parts, promote_options="permissive")
                state[f"input-{index}"] = table.append_column("subtask", pa.array(
                    [self.context.subtask_index] * table.num_rows, pa.int32()))
        return state

    def notify_checkpoint_complete(self, checkpoint_id: int) -> Iterable[pa.RecordBatch]:
        self._completed = max(self._completed, checkpoint_id)
        return self._run_completed()

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        """The intervals the checkpoint had not seen through: they run at the next
        chance (their checkpoint completed)."""
        intervals: dict[int, list[_CollectedInput]] = {}
        for index in range(self.num_inputs):
            table = state.get(f"input-{index}")
            if table is None:
                continue
            for checkpoint in sorted(set(table.column(_INTERVAL).to_pylist())):
                rows = table.filter(pc.equal(table.column(_INTERVAL), checkpoint))
                inputs = intervals.setdefault(checkpoint, self._collecting())
                for batch in rows.drop_columns([_INTERVAL, "subtask"]).to_batches():
                    inputs[index].add(batch)
        self._intervals = sorted(intervals.items())
        self._completed = max(intervals, default=-1)

    def state_redistribution(self, name: str) -> Redistribution:
        return key_groups.by_subtask()

    def _run_completed(self) -> Iterable[pa.RecordBatch]:
        due = []
        while self._intervals and self._intervals[0][0] <= self._completed:
            due.append(self._intervals.pop(0)[1])
        return self._run_each(due)

    def _run_each(self, intervals: list[list[_CollectedInput]]) -> Iterable[pa.RecordBatch]:
        """The function over each interval with rows, in order (run now; the results
        stream out when read)."""
        results = []
        for inputs in intervals:
            if any(collected.rows for collected in inputs):
                results.append(self._run(inputs))
            else:
                for collected in inputs:
                    collected.close()
        return itertools.chain.from_iterable(results)

    def _run(self, inputs: list[_CollectedInput]) -> Iterator[pa.RecordBatch]:
        """Runs the function over `inputs` (closed and removed after); its result
        streams out of the returned iterator."""
        spark = self.context.spark()
        # Only now: the session's start imported pyspark (in a TaskExecutor, under its lock
        # for first imports, taskexecutor/task.py IMPORTING), so this import cannot race it.
        from pyspark.sql import DataFrame

        result_dir = os.path.join(self.context.tmp_dir, f"spark-result-{uuid.uuid4().hex}")
        try:
            with spark_job_tag(spark, self.context, self.name):
                frames = [collected.dataframe(spark) for collected in inputs]
                result = self.fn(*frames)
                if not isinstance(result, DataFrame):
                    raise TypeError(f"{self.name}: the function must return a "
                                    f"pyspark.sql.DataFrame, it returned {type(result).__name__}")
                # file:// explicitly: with a Hadoop configuration, a bare path means HDFS.
                result.write.mode("overwrite").parquet(pathlib.Path(result_dir).as_uri())
        finally:
            for collected in inputs:
                collected.close()
        return _stream_result(result_dir, self.context.batch_size)

    def close(self) -> None:
        for collected in self._inputs:
            collected.close()
        for _, inputs in self._intervals:
            for collected in inputs:
                collected.close()


def _stream_result(folder: str, batch_size: int) -> Iterator[pa.RecordBatch]:
    """The Parquet files Spark wrote, batch by batch; one empty batch carrying the schema
    when there are no rows. The folder is removed once read."""
    import pyarrow.dataset as ds

    try:
        dataset = ds.dataset(folder, format="parquet")
        emitted = False
        for batch in dataset.to_batches(batch_size=batch_size):
            if batch.num_rows:
                emitted = True
                yield batch
        if not emitted:
            yield pa.RecordBatch.from_pylist([], schema=dataset.schema)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _CollectedInput:
    """The batches of one input, streamed into a Parquet file as they arrive."""

    def __init__(self, what: str, tmp_dir: str, schema: pa.Schema | None) -> None:
        self.what = what
        self.tmp_dir = tmp_dir
        self.schema = schema
        self._path: str | None = None
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.schema = batch.schema
        elif not batch.schema.equals(self.schema):
            try:
                batch = batch.cast(self.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as error:
                raise TypeError(f"{self.what}: a batch with schema {batch.schema} does not "
                                f"match the input's schema {self.schema}: {error}") from error
        if self._writer is None:
            os.makedirs(self.tmp_dir, exist_ok=True)
            self._path = os.path.join(self.tmp_dir, f"spark-input-{uuid.uuid4().hex}.parquet")
            self._writer = pq.ParquetWriter(self._path, self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def table(self) -> pa.Table:
        """What arrived so far (read back from the file; empty when nothing did)."""
        if self._writer is None and self._path is None:
            return pa.table({}) if self.schema is None else self.schema.empty_table()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        assert self._path is not None
        return pq.read_table(self._path)

    def dataframe(self, spark: "SparkSession") -> "DataFrame":
        """Everything that arrived, as a DataFrame read from the file (an empty one, with
        the schema if known, when nothing arrived)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._path is not None:
            return spark.read.parquet(pathlib.Path(self._path).as_uri())
        return spark.createDataFrame(pa.table({}) if self.schema is None
                                     else self.schema.empty_table())

    def close(self) -> None:
        """Removes the file. Idempotent; the DataFrame read from it must be done with."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
            self._path = None


_tag_numbers = itertools.count()


@contextlib.contextmanager
def spark_job_tag(spark: SparkSession, context: OperatorContext, what: str) -> Iterator[None]:
    """Tags the Spark jobs the calling thread starts inside the block, and cancels them
    (interrupting their threads) as soon as `context.is_cancelled()` turns true, and
    again at each look after that: a job still being planned at the first cancel starts
    later and is cancelled then. The watcher is a daemon thread looking every 0.2 s; it
    ends with the block."""
    sc = spark.sparkContext
    tag = f"flinkyarn-{os.getpid()}-{next(_tag_numbers)}"
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if context.is_cancelled():
                sc.cancelJobsWithTag(tag)

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
