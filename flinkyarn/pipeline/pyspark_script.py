"""An unmodified PySpark script as a job of one task: the task is the script's driver.

    PySparkScript.from_file("pi.py", ["100"], PySparkSettings(master="yarn"))

The slot starts the script as its own Python process, as spark-submit would: `python
script.py ARGS` with `__main__`, `sys.argv`, its own SparkContext however the script
makes it, and its exit status as the task's result (0 finished; anything else fails the
task, with the script's last traceback as the cause). Spark is pointed where
`settings.master` says through PYSPARK_SUBMIT_ARGS, which pyspark hands to spark-submit
when the script's first SparkContext starts its JVM: on YARN, Spark's own YARN backend
(client deploy mode, the driver in our container) asks YARN for executors.

Nothing of the TaskExecutor's process is touched, so any number of scripts run side by
side in one TaskExecutor. What the driver prints streams back to the JobMaster (and from
there to an attached client) and into the TaskExecutor's container log. This module only
says what to run: the TaskExecutor's StreamTask recognises a PySparkScript at the head
of its chain and runs the driver process itself (taskexecutor/spark/script_task.py).

The script's text travels in the job graph, so a script on the client's disk needs no
shipping.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from flinkyarn.pipeline.operator import SourceOperator

if TYPE_CHECKING:
    import pyarrow as pa  # the client that submits a script imports no Arrow


@dataclass
class PySparkSettings:
    """What spark-submit's options said, resolved by the client.

    `master`: "yarn", "local" (local[slot cores]) or a Spark master URL.
    `spark_conf`: --conf and what the other options stand for (spark.executor.memory...).
    `environment`: variables for the driver (PYSPARK_ARCHIVES_PATH on YARN).
    `files`, `archives`, `py_files`: --files, --archives and --py-files as the driver
    gets them (hdfs:// URLs on YARN, which the driver's host downloads; local paths
    locally): files as `url#name` into its working folder, archives as (url, name)
    unpacked there as `name`, py-files as `url#name` on its PYTHONPATH.
    `working_dir`: where the driver runs; None: a fresh folder of the task (on YARN, as
    in spark-submit's cluster mode), the client's folder on the local target.
    """

    master: str = "local"
    spark_conf: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    archives: list[tuple[str, str]] = field(default_factory=list)
    py_files: list[str] = field(default_factory=list)
    working_dir: str | None = None
    show_spark_logs: bool = False


class PySparkScript(SourceOperator):
    """A source that emits nothing: the StreamTask runs the script's driver to its end
    in place of reading it."""

    def __init__(self, script_name: str, source: str, args: Iterable[str] = (),
                 settings: PySparkSettings | None = None) -> None:
        self.script_name = script_name
        self.source = source
        self.args = [str(arg) for arg in args]
        self.settings = settings or PySparkSettings()
        self.name = f"Source: pyspark-script({script_name})"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], args: Iterable[str] = (),
                  settings: PySparkSettings | None = None) -> PySparkScript:
        with open(path, encoding="utf-8") as file:
            return cls(os.path.basename(os.fspath(path)), file.read(), args, settings)

    def read(self) -> Iterable[pa.RecordBatch]:
        """Never called by a TaskExecutor, which runs the driver instead."""
        raise TypeError(f"{self.name}: a PySpark script is run by a TaskExecutor's "
                        "StreamTask, not read")
