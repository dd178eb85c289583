"""spark-submit's words for `flinkyarn run --pyspark`: its options, with its names and
meaning, turned into the PySparkSettings of the script's job.

    spark-submit --master yarn --deploy-mode cluster --num-executors 2 pi.py 100
    flinkyarn run --pyspark --num-executors 2 pi.py 100

`--conf k=v` (and `-D spark.k=v`), `--num-executors`, `--executor-cores`,
`--executor-memory`, `--driver-memory`, `--name` and `--queue` become Spark settings;
`--files`, `--archives` and `--py-files` reach the driver's folder and path and Spark's
executors (through the HDFS cache on YARN). The driver runs in a slot of the cluster,
which is spark-submit's cluster deploy mode.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from flinkyarn import options
from flinkyarn.pipeline.pyspark_script import PySparkSettings

# spark-submit options flinkyarn does not take, and what to do instead.
NOT_TAKEN = {
    "--jars": "pass jars with --conf spark.jars=hdfs://...",
    "--packages": "pass Maven packages with --conf spark.jars.packages=...",
    "--class": "flinkyarn runs Python scripts only",
    "--driver-cores": "a script's driver has its slot's cores",
    "--total-executor-cores": "that is for Spark's standalone master",
    "--supervise": "use a restart strategy: -D restart-strategy.type=fixed-delay",
    "--kill": "use flinkyarn cancel APPLICATION JOB",
    "--status": "use flinkyarn list APPLICATION",
    "--properties-file": "pass its settings with --conf KEY=VALUE",
    "--principal": "a Kerberos login is not supported yet",
    "--keytab": "a Kerberos login is not supported yet",
    "--proxy-user": "submit as that user",
}


class SparkSubmitError(ValueError):
    """An option a spark-submit user passed that does not hold; the message says why."""


@dataclass
class SparkSubmitOptions:
    confs: tuple[str, ...] = ()
    master: str | None = None
    deploy_mode: str | None = None
    num_executors: int | None = None
    executor_cores: int | None = None
    executor_memory: str | None = None
    driver_memory: str | None = None
    name: str | None = None
    queue: str | None = None
    files: tuple[Path, ...] = ()
    archives: tuple[str, ...] = ()
    py_files: tuple[str, ...] = ()


def memory_mib(value: str, option: str) -> int:
    """A JVM memory size as spark-submit takes it (512m, 2g, 1024k...) in MiB."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", value.lower())
    if not match:
        raise SparkSubmitError(f"{option}: {value!r} is not a memory size such as 512m or 2g")
    number, unit = int(match[1]), match[2] or "m"
    return max(1, number * {"k": 1, "m": 1024, "g": 1024 ** 2, "t": 1024 ** 3}[unit] // 1024)


def spark_conf(submit: SparkSubmitOptions, properties: dict[str, str]) -> dict[str, str]:
    """--conf, the -D spark.* properties, and the options that stand for Spark settings."""
    conf = {key: value for key, value in properties.items() if key.startswith("spark.")}
    for entry in submit.confs:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise SparkSubmitError(f"--conf {entry!r}: expected KEY=VALUE")
        if not key.startswith("spark."):
            raise SparkSubmitError(f"--conf {entry!r}: Spark's settings start with 'spark.' "
                                   f"(flinkyarn's own options go with -D)")
        conf[key.strip()] = value
    settings: tuple[tuple[str, str, int | str | None], ...] = (
            ("--num-executors", "spark.executor.instances", submit.num_executors),
            ("--executor-cores", "spark.executor.cores", submit.executor_cores),
            ("--executor-memory", "spark.executor.memory", submit.executor_memory),
            ("--driver-memory", "spark.driver.memory", submit.driver_memory),
            ("--name", "spark.app.name", submit.name),
            ("--queue", "spark.yarn.queue", submit.queue))
    for option, spark_key, given in settings:
        if given is None:
            continue
        if isinstance(given, int) and given < 1:
            raise SparkSubmitError(f"{option} must be at least 1, not {given}")
        if option.endswith("memory") and isinstance(given, str):
            memory_mib(given, option)
        conf[spark_key] = str(given)
    return conf


def master(submit: SparkSubmitOptions, properties: dict[str, str], yarn_target: bool) -> str:
    if submit.deploy_mode == "client":
        raise SparkSubmitError("--deploy-mode client: flinkyarn runs the driver in a slot of "
                               "the cluster, which is spark-submit's cluster mode; drop the option")
    value = submit.master or properties.get(options.PYSPARK_MASTER.key) or \
        ("yarn" if yarn_target else "local")
    if value == "yarn" and not yarn_target:
        raise SparkSubmitError("master yarn needs a YARN target (-t yarn-per-job or "
                               "yarn-session, or HADOOP_CONF_DIR with a yarn-site.xml)")
    if not (value in ("yarn", "local") or re.fullmatch(r"local\[(\d+|\*)(,\d+)?\]", value)
            or re.fullmatch(r"(spark|k8s)://\S+", value)):
        raise SparkSubmitError(f"unknown Spark master {value!r}: yarn, local, local[N] or a "
                               f"spark:// URL")
    return value


def local_settings(submit: SparkSubmitOptions, properties: dict[str, str]) -> PySparkSettings:
    """The local target: the driver runs in the client's folder, as `python script.py`."""
    if submit.files or submit.archives:
        raise SparkSubmitError("--files and --archives ship to a cluster; on the local target "
                               "the script runs in your current folder and finds its files there")
    return PySparkSettings(
        master=master(submit, properties, yarn_target=False),
        spark_conf=spark_conf(submit, properties),
        py_files=[str(Path(p).resolve()) for p in submit.py_files],
        working_dir=os.getcwd(),
        show_spark_logs=_flag(properties.get(options.PYSPARK_SHOW_SPARK_LOGS.key, "false")))


def yarn_settings(submit: SparkSubmitOptions, properties: dict[str, str],
                  staging) -> PySparkSettings:
    """A YARN target: Spark's jars and the user's files from the HDFS cache."""
    from yarn_client import shipping

    value = master(submit, properties, yarn_target=True)
    conf = spark_conf(submit, properties)
    for path in submit.py_files:
        if not Path(path).exists():
            raise SparkSubmitError(f"--py-files: no such file {path}")
    shipped = shipping.ship_pyspark(staging, list(submit.files), list(submit.archives),
                                    [Path(p).expanduser() for p in submit.py_files],
                                    with_spark=value == "yarn")
    return PySparkSettings(
        master=value, spark_conf={**shipped.spark_conf, **conf},
        environment=shipped.environment, files=shipped.files, archives=shipped.archives,
        py_files=shipped.py_files,
        show_spark_logs=_flag(properties.get(options.PYSPARK_SHOW_SPARK_LOGS.key, "false")))


def _flag(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")
