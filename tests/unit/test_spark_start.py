"""TaskExecutors started for a job with a Spark stage start their SparkSession with them
(taskmanager.spark.start-eagerly), so the session's start overlaps the cluster's and the
job's instead of following the stage's open."""

from __future__ import annotations

import pyarrow as pa

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.pipeline.api import Pipeline

KEY = options.TASK_MANAGER_SPARK_START_EAGERLY.key


def rows(n: pa.Array) -> pa.Table:
    return pa.table({"n": n})


def graph(with_spark: bool):
    pipeline = Pipeline("job", parallelism=2)
    stream = pipeline.from_data_generator(rows, count=10).key_by("n")
    if with_spark:
        stream = stream.spark(lambda df: df.groupBy("n").count(), name="count")
    stream.write_parquet("/tmp/out")
    return pipeline.job_graph()


def test_a_vertex_whose_chain_has_a_spark_stage_uses_spark():
    job = graph(with_spark=True)
    assert job.uses_spark
    assert [v.uses_spark for v in job.vertices] == [False, True]
    assert not graph(with_spark=False).uses_spark


def test_the_cluster_started_for_a_spark_job_starts_spark_eagerly_unless_told_not_to():
    conf = Configuration()
    assert not conf.get(options.TASK_MANAGER_SPARK_START_EAGERLY)
    assert options.with_spark_started(conf, graph(with_spark=True)).get(
        options.TASK_MANAGER_SPARK_START_EAGERLY)
    assert options.with_spark_started(conf, graph(with_spark=False)) is conf
    told = Configuration({KEY: "false"})
    assert not options.with_spark_started(told, graph(with_spark=True)).get(
        options.TASK_MANAGER_SPARK_START_EAGERLY)
