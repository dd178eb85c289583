"""Task functions and pipelines for the tests that run on clusters (local and YARN).
Task functions coordinate with the test through files in a folder: `started-*` /
`finished-*` / `stopped-*` markers, and a `go` file they wait for. The folder is a local
path for a local cluster and an `hdfs://` URL on YARN, where a container sees none of
the client's files and HDFS is what the client and every node share; the helpers below
take either. The local conftest registers this module for pickling by value, so
TaskExecutors need not import the tests."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from flinkyarn import KeyedProcessFunction, Pipeline
from flinkyarn.pipeline.operator import Operator
from flinkyarn.connectors.filesystems import resolve
from taskexecutor.task import TaskCancelled

# ------------------------------------------------ files in a local folder or on HDFS


def join(folder: str | os.PathLike, name: str) -> str:
    return f"{os.fspath(folder).rstrip('/')}/{name}"


def make_folder(folder: str | os.PathLike) -> None:
    filesystem, path = resolve(folder)
    filesystem.create_dir(path, recursive=True)


def exists(path: str | os.PathLike) -> bool:
    filesystem, local = resolve(path)
    return filesystem.get_file_info(local).type != pafs.FileType.NotFound


def write_text(path: str | os.PathLike, text: str = "") -> None:
    filesystem, local = resolve(path)
    with filesystem.open_output_stream(local) as out:
        out.write(text.encode())


def read_text(path: str | os.PathLike) -> str:
    filesystem, local = resolve(path)
    with filesystem.open_input_stream(local) as data:
        return data.read().decode()


def go(folder: str | os.PathLike) -> None:
    """Tells the folder's wait_for_go tasks to finish."""
    write_text(join(folder, "go"))


def markers(folder: str | os.PathLike, what: str) -> set[str]:
    filesystem, path = resolve(folder)
    names = (f.base_name for f in filesystem.get_file_info(pafs.FileSelector(path)))
    return {name[len(what) + 1:] for name in names if name.startswith(f"{what}-")}


# ------------------------------------------------------------------- task functions


def mark(folder: str | os.PathLike, what: str, ctx) -> None:
    write_text(join(folder, f"{what}-{ctx.vertex_name}-{ctx.subtask_index}-{ctx.attempt_number}"))


def quick(folder: str | os.PathLike):
    def run(ctx):
        mark(folder, "finished", ctx)
    return run


def wait_for_go(folder: str | os.PathLike, limit: float = 120.0):
    """Runs until the test creates `go` (then finishes) or the task is cancelled."""
    def run(ctx):
        mark(folder, "started", ctx)
        filesystem, go_file = resolve(join(folder, "go"))
        waited = 0.0
        try:
            while filesystem.get_file_info(go_file).type == pafs.FileType.NotFound:
                ctx.sleep(0.1)
                waited += 0.1
                if waited > limit:
                    raise TimeoutError("the test never said go")
        except TaskCancelled:
            mark(folder, "stopped", ctx)
            raise
        mark(folder, "finished", ctx)
    return run


def failing(message: str):
    def run(ctx):
        raise ValueError(message)
    return run


def ignores_cancellation(folder: str | os.PathLike):
    """User code that never looks at its context: a long blocking call."""
    def run(ctx):
        mark(folder, "started", ctx)
        time.sleep(600)
    return run


N = 20_000


def slow_numbers(subtask: int, parallelism: int):
    """1..N split between the subtasks, slowly enough (2 s per subtask at parallelism 2)
    to kill something in the middle; column k = n mod 4 is a key."""
    numbers = list(range(subtask + 1, N + 1, parallelism))
    for start in range(0, len(numbers), 500):
        time.sleep(0.1)
        chunk = pa.array(numbers[start:start + 500], pa.int64())
        yield pa.record_batch([chunk, pc.bit_wise_and(chunk, 3)], names=["n", "k"])


def summing_pipeline(out: str, configuration: dict[str, str] | None = None) -> Pipeline:
    """Sums 1..N per key across two subtasks: the result is exact only if no record is
    lost or counted twice (column n_sum adds up to N(N+1)/2)."""
    p = Pipeline("sum", parallelism=2, configuration=configuration)
    p.from_generator(slow_numbers).key_by("k").sum("n").write_parquet(str(out))
    return p


def always_fails(batch):
    raise ValueError("column n has a negative value")


class FailOnce:
    """A map that fails the first time any attempt calls it, then passes batches on. A
    marker file remembers, at a path every TaskExecutor reaches (a local path for a
    local cluster, an hdfs:// URL on YARN)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self, batch):
        if not exists(self.marker):
            write_text(self.marker)
            raise RuntimeError("transient failure")
        return batch




class SlowSnapshots(Operator):
    """Passes batches on; its snapshot of checkpoints 1 to `slow` takes `seconds` (longer
    than the job's execution.checkpointing.timeout: they expire)."""

    def __init__(self, slow: int, seconds: float) -> None:
        self.slow = slow
        self.seconds = seconds
        self.name = "slow snapshots"

    def snapshot_state(self, checkpoint_id: int):
        if checkpoint_id <= self.slow:
            time.sleep(self.seconds)
        return None


def publish(folder: str | os.PathLike, name: str, text: str) -> None:
    """Puts a file into a watched folder as a writer should: written under a hidden
    name, then renamed into place."""
    hidden = join(folder, f".{name}.inprogress")
    write_text(hidden, text)
    fs, path = resolve(hidden)
    fs.move(path, resolve(join(folder, name))[1])


class TallyPerKey(KeyedProcessFunction):
    """Keyed state of each kind: the count of a key's records (value), its five
    greatest numbers (list) and its count per last digit (map). At the end of the input,
    one row per key: k, count, top (the five, descending), digits (the map's counts'
    sum, which is the count again: every record is in one digit's count)."""

    def process(self, key, rows, state):
        count = state.value("count", default=0)
        count.update(count.value() + rows.num_rows)
        top = state.list("top")
        top.update(sorted([*top.get(), *rows.column("n").to_pylist()], reverse=True)[:5])
        digits = state.map("digits")
        for n in rows.column("n").to_pylist():
            digits[n % 10] = digits.get(n % 10, 0) + 1
        return None

    def finish(self, key, state):
        return pa.record_batch({"k": [key[0]], "count": [state.value("count").value()],
                                "top": [state.list("top").get()],
                                "digits": [sum(state.map("digits").values())]})


def as_rows(numbers: pa.Array) -> pa.RecordBatch:
    """A data generator's function: a column n of the row numbers."""
    return pa.record_batch({"n": numbers})


def interval_sums(df):
    """A Spark stage: the sum of n per k of what it gets."""
    from pyspark.sql import functions as F
    return df.groupBy("k").agg(F.sum("n").alias("n"))


def numbered(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Lines holding numbers -> columns n and k = n mod 4."""
    n = pc.cast(batch.column("line"), pa.int64())
    return pa.record_batch([n, pc.bit_wise_and(n, 3)], names=["n", "k"])


def split_words(batch: pa.RecordBatch) -> pa.RecordBatch:
    """examples/wordcount.py's split: the maximal runs of [a-z0-9] of the lower-cased line."""
    words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(batch.column("line")),
                                                  pattern="[^a-z0-9]+"))
    return pa.record_batch([pc.filter(words, pc.not_equal(words, ""))], names=["word"])


def wordcount(source: str, output: str) -> Pipeline:
    """A word count without Spark: lines -> rebalance -> split words -> hash on word ->
    count -> Parquet. Three vertices, two edges; "lines" emits one record per line."""
    p = Pipeline("wordcount", parallelism=1)
    p.read_text(source, name="lines").rebalance().flat_map(split_words, name="split words") \
        .key_by("word").count(name="count words").write_parquet(output)
    return p
