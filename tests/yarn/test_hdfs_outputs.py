"""Write modes of file outputs on the local Hadoop's HDFS, written by a local-target job:
the client's NO_OVERWRITE check and the JobMaster's OVERWRITE swap, where a rename
does not replace its target. What is on HDFS is checked with Hadoop's own client."""

from __future__ import annotations

import subprocess
import sys
import uuid

import cloudpickle
import pyarrow as pa
import pytest

from flinkyarn import Pipeline
from flinkyarn.configuration import Configuration
from flinkyarn.connectors import outputs
from flinkyarn.jobgraph import OutputExistsError
from tests.local.conftest import FAST
from tests.waiting import wait_for
from yarn_client.local_cluster import LocalCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


def hdfs(*args: str) -> str:
    return subprocess.run(["hdfs", "dfs", *args], check=True,
                          capture_output=True).stdout.decode(errors="replace")


@pytest.fixture
def folder(hadoop):
    path = f"/tmp/flinkyarn-tests/{uuid.uuid4().hex}"  # the job creates it
    yield path
    hdfs("-rm", "-r", "-f", "-skipTrash", path)


@pytest.fixture
def cluster(hadoop, tmp_path):
    cluster = LocalCluster(Configuration.load(overrides={
        **FAST, "taskmanager.numberOfTaskSlots": "4"}), work_dir=tmp_path / "cluster")
    cluster.start()
    yield cluster
    cluster.stop()


def rows(subtask, parallelism):
    yield pa.record_batch([pa.array([subtask * 1000 + parallelism], pa.int64())], names=["n"])


def rejected(batch):
    raise ValueError("rejected by the test")


def job(url: str, parallelism: int, mode: str, fail: bool = False):
    p = Pipeline("hdfs outputs", parallelism=parallelism,
                 configuration={"restart-strategy.type": "none"})
    p.from_generator(rows).map(rejected if fail else (lambda batch: batch), name="check") \
        .write_csv(url, mode=mode)
    return p.job_graph()


def run(cluster, graph):
    job_id = cluster.rest.submit(graph)
    return wait_for(lambda: (d := cluster.rest.job(job_id)).status in TERMINAL and d,
                    120, "the job to end")


def tree(path: str) -> list[str]:
    """Every file and folder under `path`, with its size and time (`hdfs dfs -ls -R`)."""
    return hdfs("-ls", "-R", path).splitlines()


def test_overwrite_swaps_the_folder_on_hdfs(cluster, folder):
    url = f"hdfs://{folder}/out"  # hdfs:///tmp/...: the configured NameNode
    assert run(cluster, job(url, 4, "no_overwrite")).status == "FINISHED"
    before = tree(folder)
    # The folder, its marker and 4 parts.
    assert len(before) == 6 and before[0].endswith(f" {folder}/out")
    assert before[1].split()[4::3] == ["0", f"{folder}/out/_SUCCESS"]  # empty

    with pytest.raises(OutputExistsError, match=f"output {url} exists and is not empty"):
        outputs.check(job(url, 2, "no_overwrite").outputs)

    failed = run(cluster, job(url, 2, "overwrite", fail=True))
    assert failed.status == "FAILED"
    assert tree(folder) == before  # untouched, and its staging folder is gone

    details = run(cluster, job(url, 2, "overwrite"))

    assert details.status == "FINISHED", details.failure_cause
    after = [line.split()[-1] for line in tree(folder)]
    assert after == [f"{folder}/out", f"{folder}/out/_SUCCESS", f"{folder}/out/part-00000.csv",
                     f"{folder}/out/part-00001.csv"]
    assert hdfs("-cat", *after[2:]).split() == ['"n"', "2", '"n"', "1002"]
