"""Write modes of file outputs (Flink's NO_OVERWRITE and OVERWRITE): the JobGraph's
record of them, the client's check, and the JobMaster's commit and discard, on the
local disk."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flinkyarn import Pipeline
from flinkyarn.connectors import CsvSink, ParquetSink, outputs
from flinkyarn.jobgraph import (FileOutput, InvalidJobGraph, JobGraph, OutputExistsError,
                                OutputMode)
from tests.operator_context import FakeContext
from yarn_am.jobmaster.execution_graph import JobStatus
from yarn_am.jobmaster.output_commit import finish_outputs

ROWS = pa.table({"n": pa.array([1, 2, 3], pa.int64())})


def numbers(subtask, parallelism):
    yield ROWS.to_batches()[0]


def write_part(sink, subtask: int, table: pa.Table = ROWS) -> None:
    sink.open(FakeContext(subtask, 2))
    try:
        for batch in table.to_batches():
            sink.process(batch, 0)
        sink.finish()
    finally:
        sink.close()


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---- the API and the JobGraph --------------------------------------------------------------

@pytest.mark.parametrize("write", ["write_parquet", "write_csv"])
def test_an_unknown_mode_is_refused_where_the_sink_is_made(write, tmp_path):
    stream = Pipeline("modes").from_generator(numbers)
    with pytest.raises(ValueError, match=re.escape(
            f"{write}: unknown mode 'append'; one of 'no_overwrite', 'overwrite'")):
        getattr(stream, write)(str(tmp_path / "out"), mode="append")


def test_the_root_of_a_filesystem_cannot_be_overwritten():
    stream = Pipeline("root").from_generator(numbers)
    with pytest.raises(ValueError, match="write_parquet: hdfs:/// is the root"):
        stream.write_parquet("hdfs:///", mode="overwrite")


def test_the_job_graph_lists_every_file_output_with_its_mode(tmp_path):
    p = Pipeline("outputs", parallelism=2)
    stream = p.from_generator(numbers)
    stream.write_parquet(str(tmp_path / "kept"))
    stream.write_csv("hdfs:///data/report", mode="overwrite")

    graph = p.job_graph()

    kept, report = graph.outputs
    assert kept == FileOutput(str(tmp_path / "kept"), "parquet", OutputMode.NO_OVERWRITE, None)
    assert (report.path, report.format, report.mode) == ("hdfs:///data/report", "csv",
                                                         OutputMode.OVERWRITE)
    assert re.fullmatch(r"hdfs:///data/\.report\.staging-[0-9a-f]{12}", report.staging)
    # The sink the subtasks unpickle writes where the JobGraph says.
    sinks = [n.operator for n in p.stream_graph().nodes() if isinstance(n.operator, CsvSink)]
    assert [s.staging for s in sinks] == [report.staging]
    # It travels to the cluster as a typed field.
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(graph), type=JobGraph)
    assert decoded.outputs == graph.outputs


def test_a_job_cannot_write_one_folder_twice(tmp_path):
    p = Pipeline("twice")
    stream = p.from_generator(numbers)
    stream.write_parquet(str(tmp_path / "out"))
    stream.write_csv(str(tmp_path / "out") + "/", mode="overwrite")
    with pytest.raises(InvalidJobGraph, match=f"writes {tmp_path / 'out'}.* twice"):
        p.job_graph()


# ---- NO_OVERWRITE: the client's check -----------------------------------------------------

def test_no_overwrite_takes_a_missing_or_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    outputs.check([FileOutput(str(tmp_path / "missing"), "parquet"),
                   FileOutput(str(tmp_path / "empty"), "parquet"),
                   FileOutput(f"file://{tmp_path / 'empty'}", "csv")])


def test_no_overwrite_refuses_content_or_a_file_naming_the_path(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".hidden").write_text("")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputExistsError) as refused:
        outputs.check([FileOutput(str(tmp_path / "out"), "parquet")])
    assert str(refused.value) == (f"output {tmp_path / 'out'} exists and is not empty; "
                                  f"write_parquet(..., mode=\"overwrite\") replaces it")
    with pytest.raises(OutputExistsError, match=f"output {tmp_path / 'file'} exists and is a "
                                                f"file; write_csv"):
        outputs.check([FileOutput(str(tmp_path / "file"), "csv")])
    # Overwrite outputs are not checked.
    outputs.check([FileOutput(str(tmp_path / "out"), "parquet", OutputMode.OVERWRITE,
                              str(tmp_path / ".out.staging-1"))])


# ---- OVERWRITE: staging, commit, discard ---------------------------------------------------

def test_overwrite_sinks_write_into_the_staging_folder_only(tmp_path):
    out = tmp_path / "out"
    sink = ParquetSink(out, mode="overwrite")
    write_part(sink, 1)
    staging = Path(sink.staging)
    assert staging.parent == tmp_path and staging.name.startswith(".out.staging-")
    assert not out.exists()
    assert names(staging) == ["part-00001.parquet"]


def run_finish(graph: JobGraph, status: JobStatus, cause: str | None = None):
    async def run_blocking(function, *args):
        return function(*args)
    return asyncio.run(finish_outputs(graph, status, cause, run_blocking))


def overwrite_job(*paths: Path) -> tuple[JobGraph, list]:
    p = Pipeline("overwrite", parallelism=2)
    stream = p.from_generator(numbers)
    for path in paths:
        stream.write_parquet(str(path), mode="overwrite")
    sinks = [n.operator for n in p.stream_graph().nodes() if isinstance(n.operator, ParquetSink)]
    return p.job_graph(), sinks


def old_run(out: Path, parts: int) -> None:
    out.mkdir()
    for i in range(parts):
        pq.write_table(pa.table({"n": [100 + i]}), out / f"part-{i:05d}.parquet")


def test_a_finished_job_replaces_the_folder_with_exactly_its_part_files(tmp_path):
    out = tmp_path / "out"
    old_run(out, parts=4)
    graph, [sink] = overwrite_job(out)
    write_part(sink, 0)
    write_part(sink, 1)

    assert run_finish(graph, JobStatus.FINISHED) == (JobStatus.FINISHED, None)

    assert names(out) == ["part-00000.parquet", "part-00001.parquet"]
    assert pq.read_table(out).column("n").to_pylist() == [1, 2, 3, 1, 2, 3]
    assert names(tmp_path) == ["out"]  # no staging, no old content left beside it


def test_a_finished_job_creates_a_missing_folder(tmp_path):
    graph, [sink] = overwrite_job(tmp_path / "new" / "out")
    write_part(sink, 0)
    assert run_finish(graph, JobStatus.FINISHED)[0] is JobStatus.FINISHED
    assert names(tmp_path / "new") == ["out"]
    assert names(tmp_path / "new" / "out") == ["part-00000.parquet"]


@pytest.mark.parametrize("status", [JobStatus.FAILED, JobStatus.CANCELED])
def test_a_failed_or_canceled_job_leaves_the_folder_as_it_was(tmp_path, status):
    out = tmp_path / "out"
    old_run(out, parts=2)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    graph, [sink] = overwrite_job(out)
    write_part(sink, 0)

    assert run_finish(graph, status, "boom") == (status, "boom")

    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert names(tmp_path) == ["out"]


def test_a_failed_commit_fails_the_job_and_keeps_the_old_content(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    old_run(first, parts=1)
    old_run(second, parts=1)
    before = (second / "part-00000.parquet").read_bytes()
    graph, sinks = overwrite_job(first, second)
    for sink in sinks:
        write_part(sink, 0)
    rename = outputs.filesystems.rename

    def failing_rename(fs, source, target):
        if source == sinks[1].staging:
            raise OSError("the NameNode is in safe mode")
        rename(fs, source, target)
    monkeypatch.setattr(outputs.filesystems, "rename", failing_rename)

    status, cause = run_finish(graph, JobStatus.FINISHED)

    assert status is JobStatus.FAILED
    assert cause == f"committing output {second} failed: OSError: the NameNode is in safe mode"
    assert (second / "part-00000.parquet").read_bytes() == before
    assert pq.read_table(first).column("n").to_pylist() == [1, 2, 3]  # committed before
    assert names(tmp_path) == ["first", "second"]
