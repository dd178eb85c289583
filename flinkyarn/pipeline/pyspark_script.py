"""Runs an unmodified PySpark script as a job, in one slot, with the TaskExecutor's session.

    PySparkScript("wordcount.py", ["hdfs:///in", "hdfs:///out"])

The script runs as `__main__` (`runpy.run_path`) in the task thread, with

- `sys.argv == [script, *args]` and the script's folder first on `sys.path`;
- the TaskExecutor's SparkSession (`context.spark()`) made PySpark's default and active
  session, so the script's `SparkSession.builder....getOrCreate()` returns it; builder
  options the script sets are applied to the shared session (runtime SQL settings only);
- `SparkSession.stop` and `SparkContext.stop` replaced by wrappers that ignore calls
  while a script runs: the session is shared by the TaskExecutor's slots and outlives
  the script. The original is the wrapper's `__wrapped__` (the TaskExecutor's own
  `SparkSessionProvider.stop` calls it). `with SparkSession.builder.getOrCreate() as
  spark:` is covered, since `__exit__` calls `stop`;
- what the script's thread prints to `sys.stdout` logged, line by line, at INFO on the
  logger `flinkyarn.pyspark_script` with the task's name: it lands in the TaskExecutor's
  log. Other threads' output is passed through untouched.

A script that builds its own `SparkContext(conf)` instead of using the builder fails:
Spark allows one SparkContext per process, and the TaskExecutor's is running.

`sys.argv`, `sys.stdout` and the `stop` methods belong to the whole process, so at most
one script runs at a time in a TaskExecutor; a second one waits (and gives up if its
task is cancelled meanwhile). Exceptions from the script propagate; `sys.exit(0)` or
`sys.exit()` count as success, any other exit status fails the task.

The script's text is read when the operator is made, if the file exists there, so a
script on the client's disk ships with the job; where the task runs, the file is run in
place if it exists there, else that copy is run from `context.tmp_dir`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import runpy
import sys
import threading
from typing import Iterable, Iterator

import pyarrow as pa

from flinkyarn.pipeline.operator import OperatorContext, SourceOperator
from flinkyarn.pipeline.spark_stage import make_active, spark_job_tag

log = logging.getLogger("flinkyarn.pyspark_script")

_one_script_at_a_time = threading.Lock()


class PySparkScript(SourceOperator):
    """A source that runs a PySpark script in `read()` and yields no batches.

    `path_or_source` is a path to a `.py` file, or the script's text itself (any string
    with a newline in it).
    """

    def __init__(self, path_or_source: str | os.PathLike, args: Iterable[str] = ()) -> None:
        text = os.fspath(path_or_source)
        self.args = [str(arg) for arg in args]
        if "\n" in text:
            self.path, self.source = None, text
            self.name = "Source: pyspark-script(<source>)"
        else:
            self.path = os.path.abspath(text)
            self.source = None
            if os.path.isfile(self.path):
                with open(self.path, encoding="utf-8") as file:
                    self.source = file.read()
            self.name = f"Source: pyspark-script({os.path.basename(self.path)})"

    def read(self) -> Iterable[pa.RecordBatch]:
        script = self._script_file(self.context)
        while not _one_script_at_a_time.acquire(timeout=0.2):
            if self.context.is_cancelled():
                return
        try:
            spark = self.context.spark()
            make_active(spark)
            with _stop_ignored(), _stdout_logged(self.context.task_name), \
                    _argv_and_path(script, self.args), spark_job_tag(spark, self.context, self.name):
                try:
                    runpy.run_path(script, run_name="__main__")
                except SystemExit as exit_:
                    if exit_.code not in (None, 0):
                        raise RuntimeError(f"{self.name}: the script exited with status "
                                           f"{exit_.code!r}") from exit_
        finally:
            _one_script_at_a_time.release()
        return
        yield  # a generator: the script runs when the StreamTask iterates read()

    def _script_file(self, context: OperatorContext) -> str:
        if self.path is not None and os.path.isfile(self.path):
            return self.path
        if self.source is None:
            raise FileNotFoundError(f"{self.name}: no script at {self.path}")
        name = os.path.basename(self.path) if self.path else "script.py"
        copy = os.path.join(context.tmp_dir, name)
        os.makedirs(context.tmp_dir, exist_ok=True)
        with open(copy, "w", encoding="utf-8") as file:
            file.write(self.source)
        return copy


@contextlib.contextmanager
def _stop_ignored() -> Iterator[None]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    originals = {cls: cls.stop for cls in (SparkSession, SparkContext)}
    for cls, original in originals.items():
        cls.stop = _ignoring(original, cls.__name__)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.stop = original


def _ignoring(original, what: str):
    @functools.wraps(original)
    def stop(self) -> None:
        log.info("ignored %s.stop() of a PySpark script: the session is shared by the "
                 "TaskExecutor and outlives the script", what)
    return stop


@contextlib.contextmanager
def _argv_and_path(script: str, args: list[str]) -> Iterator[None]:
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


@contextlib.contextmanager
def _stdout_logged(task_name: str) -> Iterator[None]:
    saved = sys.stdout
    routed = _ThreadRoutedStdout(saved, threading.get_ident(), task_name)
    sys.stdout = routed
    try:
        yield
    finally:
        routed.flush_line()
        sys.stdout = saved


class _ThreadRoutedStdout(io.TextIOBase):
    """stdout that logs the lines one thread writes and passes the rest to `other`."""

    def __init__(self, other, thread_id: int, task_name: str) -> None:
        self.other, self.thread_id, self.task_name = other, thread_id, task_name
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if threading.get_ident() != self.thread_id:
            return self.other.write(text)
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            log.info("%s: %s", self.task_name, line)
        return len(text)

    def flush_line(self) -> None:
        if self._partial:
            log.info("%s: %s", self.task_name, self._partial)
            self._partial = ""

    def flush(self) -> None:
        if threading.get_ident() != self.thread_id:
            self.other.flush()
