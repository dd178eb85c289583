"""The class-data trainer: the process that makes one class-data archive of the Spark JVM
(flinkyarn/spark/class_data.py says what the archive is, where it lives and who starts
this process):

    python -m taskexecutor.spark.class_data_trainer ARCHIVE [ENVIRONMENT]

It runs with CPU only when nothing else wants it (SCHED_IDLE), starts a SparkSession of
the TaskExecutor's bridge (the same JVM settings as a TaskExecutor's session) whose JVM
dumps every class it loaded at exit (-XX:ArchiveClassesAtExit), runs a small workload of
what Spark stages do, lets the JVM exit, and renames the finished archive into place;
with ENVIRONMENT, a portable archive of that environment, made in a folder laid out as a
container's. It removes the lock in the end, leaves ARCHIVE.failed if it failed, and
removes the archives nobody mapped for 30 days.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from flinkyarn import scratch
from flinkyarn.spark.class_data import PORTABLE_ROOT, QUIET, portable_class_path, remove_unused
from taskexecutor.spark import pyspark_patches
from taskexecutor.spark.bridge import SparkSessionProvider


# The longest a training may take (a first one takes a minute or two on 2 busy cores).
TRAINING_TIMEOUT = 20 * 60


def workload(spark, folder: Path) -> None:
    """What Spark stages do, small: the classes of those paths get archived."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    words = pa.table({"word": [f"w{i % 97}" for i in range(5000)],
                      "n": list(range(5000))})
    source = folder / "input.parquet"
    pq.write_table(words, source)
    frame = spark.read.parquet(source.as_uri())
    counts = frame.groupBy("word").agg(F.count("*").alias("count"), F.sum("n").alias("n"))
    joined = counts.join(spark.createDataFrame(words.slice(0, 100)).withColumnRenamed("n", "m"),
                         "word")
    joined.write.mode("overwrite").parquet((folder / "output").as_uri())
    spark.read.parquet((folder / "output").as_uri()).orderBy("word").limit(5).collect()
    # A PySpark script's RDD job, through Python workers (drivers and executors map it too).
    spark.sparkContext.parallelize(range(1000), 2).map(lambda x: x * x).reduce(lambda a, b: a + b)


def _lowest_priority() -> None:
    """CPU only when nothing else wants it (Linux's SCHED_IDLE), else the lowest nice."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def _raise(error: BaseException) -> None:
    raise error


def train(archive: Path, environment: Path | None = None) -> None:
    """Makes `archive` (the module's text), a portable one of `environment` if given;
    removes the lock in the end."""
    lock = archive.with_suffix(".lock")
    partial = archive.with_suffix(f".partial-{os.getpid()}").absolute()
    process = None
    try:
        with tempfile.TemporaryDirectory(prefix="spark-cds-", dir=archive.parent) as work:
            # Its own temporary folder, not the one of the TaskExecutor that started it,
            # which goes with that TaskExecutor: pyspark's JVM writes the file pyspark
            # waits for there, and without the folder pyspark would wait forever.
            scratch.use_as_temp_dir(Path(work, "tmp"))
            class_path: list[str] = []
            if environment is not None:  # in a folder like a container's
                os.symlink(environment, Path(work, PORTABLE_ROOT))
                os.chdir(work)
                class_path = portable_class_path(Path(PORTABLE_ROOT))
            provider = SparkSessionProvider(cores=2, memory_bytes=1 << 30, slots=1,
                                            tmp_dir=work, class_path=class_path, java_options=[
                                                f"-XX:ArchiveClassesAtExit={partial}", *QUIET])
            spark = provider.get()
            process = pyspark_patches.process_jvm()
            assert process is not None and process.stdin is not None  # the provider's
            workload(spark, Path(work))
            provider.stop()
            process.stdin.close()  # PySpark's JVM exits at the end of its input, and dumps
            if process.wait(timeout=600) != 0 or not partial.is_file():
                raise RuntimeError(f"the JVM ended with {process.returncode} and wrote no "
                                   f"archive")
        os.replace(partial, archive)
        print(f"written: {archive} ({archive.stat().st_size >> 20} MB)", flush=True)
        for removed in remove_unused(archive.parent):
            print(f"removed unused {removed}", flush=True)
    except BaseException as error:
        if process is not None and process.poll() is None:
            process.kill()  # no half-made archive after this process
            process.wait()
        if not isinstance(error, (SystemExit, KeyboardInterrupt)):  # stopped: may retry
            archive.with_suffix(".failed").touch()
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    # Here, not in a preexec_fn of the process that starts us: that one may run gRPC, and
    # Python run between its fork and exec can crash the child (see pyspark_patches).
    _lowest_priority()
    logging.basicConfig(level=logging.INFO)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    # A training that has not ended by then never will (a JVM stuck at its start): it
    # fails, and leaves ARCHIVE.failed, rather than hold the lock for ever.
    signal.signal(signal.SIGALRM, lambda *_: _raise(TimeoutError(
        f"the training did not end within {TRAINING_TIMEOUT} s")))
    signal.alarm(TRAINING_TIMEOUT)
    train(Path(sys.argv[1]).absolute(), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
