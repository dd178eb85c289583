"""The process of a warm PySpark driver: a driver started before its script
(taskexecutor/spark/warm_pool.py keeps them), for the next script with
pyspark.master=local on its TaskExecutor.

    python -m taskexecutor.spark.warm_driver PARENT_PID

pyspark's JVM starts first (PYSPARK_SUBMIT_ARGS as for any driver) and is warmed up by a
SparkSession that is stopped again; then one line on stdin says which script to run:
{"script", "args", "properties" (set as the JVM's system properties, which SparkConf
reads), "cleared" (system properties to remove), "log4j" (the log4j2 configuration to
load)}. Before the script runs, SCRIPT_STARTS goes to stdout and stderr: what came before
is the warm-up's. The script then runs as in a driver of its own
(taskexecutor/spark/driver.py). End of input instead of a line: the TaskExecutor is done
with us; exit 0.
"""

import json
import os
import select
import sys

from flinkyarn import lifeline  # the standard library's only
from taskexecutor.spark import pyspark_patches
from taskexecutor.spark.driver import run_script

SCRIPT_STARTS = "\x1eflinkyarn: the script starts\n"


def script_waiting() -> bool:
    return bool(select.select([sys.stdin], [], [], 0)[0])


def warm_up() -> None:
    """A SparkSession with one RDD job through a Python worker and one SQL job, stopped:
    what every script's first SparkContext and jobs would load and compile. A script
    that comes meanwhile cuts it short (after the step under way, and the stop)."""
    from pyspark.sql import SparkSession

    if script_waiting():
        return
    spark = SparkSession.builder.appName("flinkyarn-warm-up").getOrCreate()
    try:
        if not script_waiting():
            spark.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).sum()
        if not script_waiting():
            spark.range(100).selectExpr("sum(id)").collect()
    finally:
        spark.stop()


def warm() -> None:
    jvm = pyspark_patches.start_jvm()
    warm_up()
    line = sys.stdin.readline()
    if not line:
        return
    job = json.loads(line)
    stdin = os.open(os.devnull, os.O_RDONLY)  # the script's stdin, as a cold driver's
    os.dup2(stdin, 0)
    os.close(stdin)
    for key in job["cleared"]:
        jvm.java.lang.System.clearProperty(key)
    for key, value in job["properties"].items():
        jvm.java.lang.System.setProperty(key, value)
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(job["log4j"]))
    for stream in (sys.stdout, sys.stderr):
        stream.write(SCRIPT_STARTS)
        stream.flush()
    run_script(job["script"], job["args"])


def main() -> None:
    [parent] = sys.argv[1:]
    lifeline.die_with_parent(int(parent), "the TaskExecutor that started this driver")
    pyspark_patches.stop_without_waiting()
    warm()


if __name__ == "__main__":
    main()
