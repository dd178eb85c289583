"""Pipelines on a local cluster of real processes: the exchange's guarantees, and
wrong input failing the job clearly instead of hanging."""

from __future__ import annotations

import sys

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flinkyarn import Pipeline
from flinkyarn.jobgraph import ResultPartitionType, ScheduleMode
from flinkyarn.pipeline.operator import Operator
from tests.waiting import wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TagSubtask(Operator):
    """Appends the subtask index that saw each row."""

    name = "tag subtask"

    def process(self, batch, input_index):
        tag = pa.array([self.context.subtask_index] * batch.num_rows, pa.int64())
        return [batch.append_column("subtask", tag)]


def keys_twice(subtask, parallelism):
    # Both source subtasks emit every key: only the exchange can bring equal keys together.
    for start in range(0, 1000, 250):
        keys = pa.array(range(start, start + 250), pa.int64())
        yield pa.record_batch([keys, pa.array([subtask] * 250, pa.int64())], names=["k", "source"])


def numbers(subtask, parallelism):
    if subtask == 0:
        yield pa.record_batch([pa.array(range(100), pa.int64())], names=["n"])


def run(cluster, pipeline, timeout=120):
    rest = cluster.rest
    job_id = rest.submit(pipeline.job_graph())
    return wait_for(lambda: (d := rest.job(job_id)).status in ("FINISHED", "FAILED", "CANCELED") and d,
                    timeout, "the job to end")


def test_hash_exchange_sends_each_key_to_exactly_one_consumer(cluster, tmp_path):
    p = Pipeline("hash", parallelism=2)
    tagged = p.from_generator(keys_twice).key_by("k").transform(TagSubtask(), parallelism=3)
    tagged.write_parquet(str(tmp_path / "out"))

    details = run(cluster, p)

    assert details.status == "FINISHED", details.failure_cause
    table = pq.read_table(tmp_path / "out")
    assert table.num_rows == 2000
    per_key = table.group_by("k").aggregate([("subtask", "count_distinct"), ("source", "count")])
    assert per_key.num_rows == 1000
    assert pc.all(pc.equal(per_key.column("subtask_count_distinct"), 1)).as_py()
    assert pc.all(pc.equal(per_key.column("source_count"), 2)).as_py()
    assert set(table.column("subtask").to_pylist()) == {0, 1, 2}


def test_broadcast_sends_every_row_to_every_consumer(cluster, tmp_path):
    p = Pipeline("broadcast", parallelism=1)
    p.from_generator(numbers).broadcast().transform(TagSubtask(), parallelism=3) \
        .write_parquet(str(tmp_path / "out"), parallelism=3)

    details = run(cluster, p)

    assert details.status == "FINISHED", details.failure_cause
    table = pq.read_table(tmp_path / "out")
    for subtask in range(3):
        mine = table.filter(pc.equal(table.column("subtask"), subtask))
        assert sorted(mine.column("n").to_pylist()) == list(range(100))


def test_batch_mode_exchanges_through_blocking_partitions(cluster, tmp_path):
    p = Pipeline("batch", parallelism=2, batch_mode=True)
    p.from_generator(keys_twice).key_by("k").sum("source").write_parquet(str(tmp_path / "out"))

    graph = p.job_graph()
    assert graph.schedule_mode is ScheduleMode.LAZY_FROM_SOURCES
    assert {e.partition_type for e in graph.edges} == {ResultPartitionType.BLOCKING}
    details = run(cluster, p)

    assert details.status == "FINISHED", details.failure_cause
    table = pq.read_table(tmp_path / "out")
    assert sorted(zip(table.column("k").to_pylist(), table.column("source_sum").to_pylist())) == \
        [(k, 1) for k in range(1000)]  # source 0 + source 1


def test_missing_input_fails_the_job_naming_the_path_and_source(cluster, tmp_path):
    missing = tmp_path / "no-such-input"
    p = Pipeline("missing", parallelism=2)
    p.read_text(str(missing)).write_parquet(str(tmp_path / "out"))

    details = run(cluster, p, timeout=60)

    assert details.status == "FAILED"
    assert "FileNotFoundError" in details.failure_cause
    assert str(missing) in details.failure_cause
    assert "Source: text" in details.failure_cause


def test_wrong_key_column_fails_the_job_naming_the_column(cluster, tmp_path):
    p = Pipeline("wrong key", parallelism=2)
    p.from_generator(keys_twice).key_by("key").count().write_parquet(str(tmp_path / "out"))

    details = run(cluster, p, timeout=60)

    assert details.status == "FAILED"
    assert "'key'" in details.failure_cause and "KeyError" in details.failure_cause


def broken_parse(batch):
    raise ValueError("cannot parse line 17: 'x,y'")


def test_failing_udf_fails_the_job_naming_the_operator(cluster, tmp_path):
    p = Pipeline("udf", parallelism=2)
    p.from_generator(keys_twice).map(broken_parse, name="parse").write_parquet(str(tmp_path / "out"))

    details = run(cluster, p, timeout=60)

    assert details.status == "FAILED"
    assert "operator 'parse'" in details.failure_cause
    assert "ValueError: cannot parse line 17: 'x,y'" in details.failure_cause
