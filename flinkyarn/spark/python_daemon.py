"""How Spark's Python worker daemon of ours (taskexecutor/spark/daemon.py) is named: by
the TaskExecutor's Spark JVMs and drivers, which run it from our code, and by the client,
which ships its source to Spark's executors on YARN (which have none of our code) as
FILE_NAME in a zip of the HDFS cache, on PYSPARK_ARCHIVES_PATH. Named, not imported: the
core imports no role."""

from __future__ import annotations

from pathlib import Path

# spark.python.daemon.module where our code is installed (local Spark, drivers).
LOCAL_MODULE = "taskexecutor.spark.daemon"
# Its name in the zip Spark's executors on YARN get (spark.python.daemon.module there),
# and that zip's kind in the client's cache (yarn_client/shipping.py).
MODULE = "flinkyarn_spark_daemon"
FILE_NAME = f"{MODULE}.py"
CACHE_KIND = "flinkyarn-spark-daemon"


def source() -> Path:
    """The daemon's source file, beside this package in the installed code."""
    return Path(__file__).resolve().parents[2].joinpath(*LOCAL_MODULE.split(".")).with_suffix(".py")
