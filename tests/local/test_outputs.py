"""File outputs on a local cluster of real processes: a second run into a folder with
content is refused before anything starts; a finished job's folder holds exactly its part
files and _SUCCESS, and an overwrite replaces the old run's; a failed job leaves the
folder as it was, though some of its subtasks had finished."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flinkyarn import Pipeline
from yarn_client.rest_client import RestError
from tests.local.conftest import FAST, processes_mentioning
from tests.waiting import wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("FINISHED", "FAILED", "CANCELED")
WIDE = {"taskmanager.numberOfTaskSlots": "4"}  # one TaskExecutor runs the wide job

# argv: the output folder, the mode
PROGRAM = """
import sys

import pyarrow as pa

from flinkyarn import Pipeline
from yarn_client.rest_client import RestError


def rows(subtask, parallelism):
    yield pa.record_batch([pa.array([subtask], pa.int64())], names=["n"])


p = Pipeline("outputs", parallelism=2)
p.from_generator(rows).write_parquet(sys.argv[1], mode=sys.argv[2])
p.execute()
"""


def flinkyarn_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    settings = [arg for key, value in FAST.items() for arg in ("-D", f"{key}={value}")]
    result = subprocess.run(
        [sys.executable, "-m", "yarn_client", "run", "-t", "local", *settings, str(program),
         *args], capture_output=True, text=True, cwd=REPO,
        env=dict(os.environ, TMPDIR=str(tmp_path)), timeout=180)
    assert processes_mentioning(str(tmp_path)) == []
    return result


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def old_run(out: Path, parts: int) -> dict[str, bytes]:
    """The part files a run at parallelism `parts` would leave."""
    out.mkdir()
    for i in range(parts):
        pq.write_table(pa.table({"n": pa.array([100 + i], pa.int64())}),
                       out / f"part-{i:05d}.parquet")
    return snapshot(out)


def test_a_run_into_a_folder_with_content_exits_2_before_anything_starts(tmp_path):
    out = tmp_path / "out"
    before = old_run(out, parts=4)

    result = flinkyarn_run(tmp_path, str(out), "no_overwrite")

    assert result.returncode == 2, result.stderr
    assert (f"error: output {out} exists and is not empty; "
            f"write_parquet(..., mode=\"overwrite\") replaces it") in result.stderr
    assert "starting a local cluster" not in result.stderr
    assert "submitted job" not in result.stderr
    assert snapshot(out) == before


def rows(subtask, parallelism):
    yield pa.record_batch([pa.array([subtask * 1000 + parallelism], pa.int64())], names=["n"])


def rejected(batch):
    raise ValueError("rejected by the test")


def rejected_later_by_subtask_1(batch):
    if batch.column("n")[0].as_py() >= 1000:  # subtask 1's row (see rows)
        time.sleep(1.5)  # subtask 0 has finished: its part file is written and committed
        raise ValueError("rejected by the test")
    return batch


def run(cluster, out: Path, parallelism: int, mode: str, fail=False):
    """The program's job, submitted straight to `cluster`; its details when it ended.
    `fail`: True fails every subtask, a function fails whichever it rejects."""
    p = Pipeline("outputs", parallelism=parallelism,
                 configuration={"restart-strategy.type": "none"})
    check = fail if callable(fail) else rejected if fail else (lambda batch: batch)
    p.from_generator(rows).map(check, name="check").write_parquet(str(out), mode=mode)
    job_id = cluster.rest.submit(p.job_graph())
    return wait_for(lambda: (d := cluster.rest.job(job_id)).status in TERMINAL and d,
                    120, "the job to end")


def test_overwrite_replaces_a_wider_run_with_exactly_the_new_part_files(start_cluster, tmp_path):
    cluster = start_cluster(**WIDE)
    out = tmp_path / "out"
    wide = run(cluster, out, 4, "no_overwrite")
    assert wide.status == "FINISHED", wide.failure_cause
    assert len(os.listdir(out)) == 5  # and _SUCCESS

    details = run(cluster, out, 2, "overwrite")

    assert details.status == "FINISHED", details.failure_cause
    assert sorted(os.listdir(out)) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    assert sorted(pq.read_table(out).column("n").to_pylist()) == [2, 1002]
    assert sorted(os.listdir(tmp_path)) == ["cluster-0", "out"]  # no staging, no old copy


def test_a_failed_overwrite_leaves_the_old_content_and_no_staging_folder(start_cluster, tmp_path):
    cluster = start_cluster(**WIDE)
    out = tmp_path / "out"
    assert run(cluster, out, 4, "no_overwrite").status == "FINISHED"
    before = snapshot(out)

    details = run(cluster, out, 2, "overwrite", fail=True)

    assert details.status == "FAILED"
    assert "ValueError: rejected by the test" in details.failure_cause
    assert snapshot(out) == before
    assert sorted(os.listdir(tmp_path)) == ["cluster-0", "out"]


@pytest.mark.parametrize("before", ["missing", "empty"])
def test_a_job_that_fails_after_a_subtask_finished_leaves_the_folder_as_it_was(
        start_cluster, tmp_path, before):
    cluster = start_cluster()
    out = tmp_path / "out"
    if before == "empty":
        out.mkdir()

    details = run(cluster, out, 2, "no_overwrite", fail=rejected_later_by_subtask_1)

    assert details.status == "FAILED"
    [check] = [v for v in details.vertices if "check" in v.name]
    assert [s.state for s in check.subtasks] == ["FINISHED", "FAILED"]
    assert sorted(os.listdir(tmp_path)) == ["cluster-0"] + (["out"] if before == "empty" else [])
    if before == "empty":
        assert os.listdir(out) == []


def slowly(batch):
    time.sleep(3)
    return batch


def test_of_two_jobs_into_one_folder_one_runs_and_the_other_is_refused_naming_it(
        start_cluster, tmp_path):
    cluster = start_cluster(**WIDE)
    out = tmp_path / "out"

    def graph(check):
        p = Pipeline("outputs", parallelism=2)
        p.from_generator(rows).map(check, name="check").write_parquet(str(out))
        return p.job_graph()
    first = cluster.rest.submit(graph(slowly))
    with pytest.raises(RestError) as refused:
        cluster.rest.submit(graph(lambda batch: batch))
    assert f"cannot run: output {out} is being written by job {first} in a local cluster" \
        in str(refused.value)
    assert wait_for(lambda: (d := cluster.rest.job(first)).status in TERMINAL and d, 120,
                    "the first job to end").status == "FINISHED"
    assert sorted(os.listdir(out)) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    assert sorted(os.listdir(tmp_path)) == ["cluster-0", "out"]  # the claim is gone
