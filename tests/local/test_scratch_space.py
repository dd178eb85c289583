"""`flinkyarn run -t local` keeps every scratch file of its processes (blocking
partitions, tasks' folders, Spark's local dirs, the JVM's and Python's temporary files)
under the TMPDIR it was started with, and leaves nothing there when it exits: also not
after a TaskExecutor was SIGKILLed in the middle of a Spark stage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.local.conftest import processes_mentioning
from tests.waiting import wait_for
from tests.local.test_cli import FLINKYARN, REPO, run_cli

N = 4000

# A batch job (blocking exchange on k) whose Spark stage sums n per key. The stage's
# function, running in a TaskExecutor, records where that process's scratch goes in
# FOLDER/spark-PID-ATTEMPT; with `kill`, it then waits until the test has killed
# one TaskExecutor (FOLDER/killed).
PROGRAM = """
import json, os, sys, tempfile, time, uuid
import pyarrow as pa
from flinkyarn import Pipeline

folder, output, mode = sys.argv[1:4]

def numbers(subtask, parallelism):
    values = list(range(subtask + 1, %(n)d + 1, parallelism))
    for start in range(0, len(values), 250):
        chunk = pa.array(values[start:start + 250], pa.int64())
        yield pa.record_batch([chunk, pa.array([v %% 4 for v in chunk.to_pylist()])], names=["n", "k"])

def sum_per_key(df):
    from pyspark.sql import functions as F
    sums = df.groupBy("k").agg(F.sum("n").alias("n_sum"))
    sums.count()  # a shuffle: Spark writes to its local dirs
    jvm = df.sparkSession.sparkContext._jvm
    where = {"tempfile": tempfile.gettempdir(),
             "spark.local.dir": df.sparkSession.conf.get("spark.local.dir"),
             "java.io.tmpdir": jvm.java.lang.System.getProperty("java.io.tmpdir")}
    with open(os.path.join(folder, f"spark-{os.getpid()}-{uuid.uuid4().hex[:6]}"), "w") as f:
        json.dump(where, f)
    while mode == "kill" and not os.path.exists(os.path.join(folder, "killed")):
        time.sleep(0.05)
    return sums

p = Pipeline("scratch", parallelism=2, batch_mode=True, configuration={
    "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
    "restart-strategy.fixed-delay.delay": "200 ms"})
p.from_generator(numbers).key_by("k").spark(sum_per_key, name="sum per key").write_parquet(output)
sys.exit(0 if p.execute().succeeded else 1)
""" % {"n": N}

# Two TaskExecutors. A lost one is seen by its process ending; a generous heartbeat
# timeout keeps busy ones (two Spark JVMs starting on a small machine) from being lost too.
SETTINGS = ["-D", "taskmanager.numberOfTaskSlots=1", "-D", "heartbeat.interval=1 s",
            "-D", "heartbeat.timeout=30 s"]


@pytest.fixture
def job(tmp_path):
    """(program, marker folder, output, fresh empty TMPDIR for the client)."""
    program = tmp_path / "scratch_job.py"
    program.write_text(PROGRAM)
    folder, tmpdir = tmp_path / "markers", tmp_path / "tmpdir"
    folder.mkdir(), tmpdir.mkdir()
    return program, folder, tmp_path / "out", tmpdir


def left_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def assert_exact_sums(out: Path) -> None:
    table = pq.read_table(out)
    expected = {k: sum(n for n in range(1, N + 1) if n % 4 == k) for k in range(4)}
    assert dict(zip(table.column("k").to_pylist(), table.column("n_sum").to_pylist())) == expected


def assert_scratch_was_under(tmpdir: Path, markers: list[Path]) -> None:
    assert markers, "no Spark stage ran"
    for marker in markers:
        where = json.loads(marker.read_text())
        places = [where["tempfile"], where["java.io.tmpdir"], *where["spark.local.dir"].split(",")]
        assert all(Path(place).is_relative_to(tmpdir) for place in places), where


def test_a_batch_job_with_a_spark_stage_leaves_nothing_in_tmpdir(job):
    program, folder, out, tmpdir = job

    result = run_cli("run", "-t", "local", *SETTINGS, str(program), str(folder),
                     str(out), "run", tmp_path=tmpdir, timeout=300)

    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_exact_sums(out)
    assert_scratch_was_under(tmpdir, sorted(folder.glob("spark-*")))
    assert left_in(tmpdir) == [], "left behind in TMPDIR"


def test_a_task_executor_killed_in_a_spark_stage_leaves_nothing_in_tmpdir(job):
    program, folder, out, tmpdir = job
    client = subprocess.Popen(
        [*FLINKYARN, "run", "-t", "local", *SETTINGS, str(program), str(folder),
         str(out), "kill"], cwd=REPO, env=dict(os.environ, TMPDIR=str(tmpdir)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker = wait_for(lambda: next(folder.glob("spark-*"), None), 240, "a Spark stage to run")
        victim = int(marker.name.split("-")[1])
        assert b"taskexecutor" in Path(f"/proc/{victim}/cmdline").read_bytes().split(b"\0")
        # What the victim leaves behind: its blocking partitions and Spark's local dirs.
        assert any(tmpdir.rglob("partitions")) and any(tmpdir.rglob("blockmgr-*")), left_in(tmpdir)
        os.kill(victim, signal.SIGKILL)
        (folder / "killed").touch()
        stdout, stderr = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()

    assert client.returncode == 0, (stdout + stderr)[-3000:]
    assert_exact_sums(out)
    assert_scratch_was_under(tmpdir, sorted(folder.glob("spark-*")))
    assert left_in(tmpdir) == [], "left behind in TMPDIR"
    assert processes_mentioning(str(tmpdir)) == []
