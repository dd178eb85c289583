"""File outputs and their job-level commit (Hadoop's FileOutputCommitter), under Flink's
write modes NO_OVERWRITE and OVERWRITE: the JobGraph's record of them, the client's
check, and the JobMaster's commit, marker, rollback and discard, on the local disk."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.fs as pafs
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
    assert (kept.path, kept.format, kept.mode) == (str(tmp_path / "kept"), "parquet",
                                                   OutputMode.NO_OVERWRITE)
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/\.kept\.staging-[0-9a-f]{12}", kept.staging)
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


# ---- staging, commit, marker, discard ------------------------------------------------------

@pytest.mark.parametrize("mode", ["no_overwrite", "overwrite"])
def test_sinks_write_into_the_staging_folder_only(tmp_path, mode):
    out = tmp_path / "out"
    sink = ParquetSink(out, mode=mode)
    write_part(sink, 1)
    staging = Path(sink.staging)
    assert staging.parent == tmp_path and staging.name.startswith(".out.staging-")
    assert not out.exists()
    assert names(staging) == ["part-00001.parquet"]


def test_a_checkpointed_no_overwrite_sink_writes_in_place(tmp_path):
    out = tmp_path / "out"
    sink = ParquetSink(out)
    sink.open(FakeContext(0, 1, checkpointing=True))
    sink.close()
    assert out.is_dir() and not Path(sink.staging).exists()


def run_finish(graph: JobGraph, status: JobStatus, cause: str | None = None, **options):
    async def run_blocking(function, *args):
        return function(*args)
    return asyncio.run(finish_outputs(graph, status, cause, run_blocking, **options))


def job_writing(*paths: Path, mode: str = "overwrite") -> tuple[JobGraph, list]:
    p = Pipeline("outputs", parallelism=2)
    stream = p.from_generator(numbers)
    for path in paths:
        stream.write_parquet(str(path), mode=mode)
    sinks = [n.operator for n in p.stream_graph().nodes() if isinstance(n.operator, ParquetSink)]
    return p.job_graph(), sinks


def old_run(out: Path, parts: int) -> None:
    out.mkdir()
    for i in range(parts):
        pq.write_table(pa.table({"n": [100 + i]}), out / f"part-{i:05d}.parquet")


def test_a_finished_job_replaces_the_folder_with_exactly_its_part_files(tmp_path):
    out = tmp_path / "out"
    old_run(out, parts=4)
    graph, [sink] = job_writing(out)
    write_part(sink, 0)
    write_part(sink, 1)

    assert run_finish(graph, JobStatus.FINISHED) == (JobStatus.FINISHED, None)

    assert names(out) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]
    assert (out / "_SUCCESS").read_bytes() == b""
    assert pq.read_table(out).column("n").to_pylist() == [1, 2, 3, 1, 2, 3]
    assert names(tmp_path) == ["out"]  # no staging, no old content left beside it


@pytest.mark.parametrize("mode", ["no_overwrite", "overwrite"])
@pytest.mark.parametrize("before", ["missing", "empty"])
def test_a_finished_job_puts_its_folder_in_place_and_marks_it(tmp_path, mode, before):
    out = tmp_path / "new" / "out"
    if before == "empty":
        out.mkdir(parents=True)
    graph, [sink] = job_writing(out, mode=mode)
    (Path(sink.staging) / ".part-00001.parquet.0-dead.inprogress").parent.mkdir(parents=True)
    (Path(sink.staging) / ".part-00001.parquet.0-dead.inprogress").write_text("cut off")
    write_part(sink, 0)
    assert run_finish(graph, JobStatus.FINISHED)[0] is JobStatus.FINISHED
    assert names(tmp_path / "new") == ["out"]
    # A cut-off attempt's in-progress file is not carried into the target.
    assert names(out) == ["_SUCCESS", "part-00000.parquet"]


def test_the_marker_can_be_turned_off(tmp_path):
    graph, [sink] = job_writing(tmp_path / "out", mode="no_overwrite")
    write_part(sink, 0)
    assert run_finish(graph, JobStatus.FINISHED, mark_success=False)[0] is JobStatus.FINISHED
    assert names(tmp_path / "out") == ["part-00000.parquet"]


def test_a_checkpointed_job_wrote_in_place_and_only_gets_its_marker(tmp_path):
    out = tmp_path / "out"
    graph, [sink] = job_writing(out, mode="no_overwrite")
    sink.open(FakeContext(0, 1, checkpointing=True))
    for batch in ROWS.to_batches():
        sink.process(batch, 0)
    sink.finish()
    sink.close()
    assert run_finish(graph, JobStatus.FINISHED, checkpointed=True)[0] is JobStatus.FINISHED
    assert names(out) == ["_SUCCESS", "part-00000-00000.parquet"]
    assert names(tmp_path) == ["out"]


@pytest.mark.parametrize("status", [JobStatus.FAILED, JobStatus.CANCELED])
@pytest.mark.parametrize("mode", ["no_overwrite", "overwrite"])
def test_a_failed_or_canceled_job_leaves_the_folder_as_it_was(tmp_path, status, mode):
    out, missing = tmp_path / "out", tmp_path / "missing"
    if mode == "overwrite":
        old_run(out, parts=2)
    else:
        out.mkdir()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    graph, sinks = job_writing(out, missing, mode=mode)
    for sink in sinks:
        write_part(sink, 0)

    assert run_finish(graph, status, "boom") == (status, "boom")

    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert names(tmp_path) == ["out"]  # no staging; the missing folder still missing


def test_a_folder_written_into_while_the_job_ran_fails_the_commit(tmp_path):
    out = tmp_path / "out"
    graph, [sink] = job_writing(out, mode="no_overwrite")
    write_part(sink, 0)
    old_run(out, parts=1)  # another writer, after the client's check

    status, cause = run_finish(graph, JobStatus.FINISHED)

    assert status is JobStatus.FAILED
    assert cause == (f"committing output {out} failed: OutputExistsError: output {out} has "
                     f"content now (someone wrote into it while the job ran); write_parquet"
                     f"(..., mode=\"overwrite\") replaces it")
    assert names(out) == ["part-00000.parquet"] and names(tmp_path) == ["out"]


@pytest.mark.parametrize("failing", ["rename", "marker"])
def test_a_failed_commit_fails_the_job_and_puts_every_output_back(tmp_path, monkeypatch,
                                                                  failing):
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    old_run(first, parts=1)
    old_run(second, parts=1)
    before = {path: names(path) and (path / "part-00000.parquet").read_bytes()
              for path in (first, second)}
    graph, sinks = job_writing(first, second, third)
    for sink in sinks:
        write_part(sink, 0)
    rename, marker = outputs.filesystems.rename, outputs.filesystems.create_empty_file

    def failing_rename(fs, source, target):
        if source == sinks[2].staging:
            raise OSError("the NameNode is in safe mode")
        rename(fs, source, target)

    def failing_marker(fs, path):
        if path.startswith(str(second)):
            raise PermissionError(f"Permission denied: {path}")
        marker(fs, path)
    monkeypatch.setattr(outputs.filesystems, "rename", failing_rename)
    monkeypatch.setattr(outputs.filesystems, "create_empty_file", failing_marker)
    if failing == "marker":
        monkeypatch.setattr(outputs.filesystems, "rename", rename)

    status, cause = run_finish(graph, JobStatus.FINISHED)

    assert status is JobStatus.FAILED
    assert cause == {
        "rename": f"committing output {third} failed: OSError: the NameNode is in safe mode",
        "marker": f"writing _SUCCESS into output {second} failed: PermissionError: "
                  f"Permission denied: {second}/_SUCCESS"}[failing]
    # The outputs committed before are back as they were; nothing new is left anywhere.
    for path, content in before.items():
        assert names(path) == ["part-00000.parquet"]
        assert (path / "part-00000.parquet").read_bytes() == content
    assert names(tmp_path) == ["first", "second"]


class Refusing:
    """A local filesystem that answers renames and deletes without doing them, as HDFS
    answers `false`."""

    def __init__(self) -> None:
        self._local = pafs.LocalFileSystem()

    def __getattr__(self, name):
        return getattr(self._local, name)

    def move(self, source, target):
        pass

    def delete_file(self, path):
        pass

    def delete_dir(self, path):
        pass


def test_a_refused_rename_or_delete_raises_with_the_path(tmp_path):
    (tmp_path / "a").write_text("x")
    (tmp_path / "folder").mkdir()
    fs = Refusing()
    with pytest.raises(OSError, match=f"renaming {tmp_path}/a to {tmp_path}/b failed"):
        outputs.filesystems.rename(fs, str(tmp_path / "a"), str(tmp_path / "b"))
    with pytest.raises(OSError, match=f"renaming {tmp_path}/a to {tmp_path}/b failed"):
        outputs.filesystems.replace(fs, str(tmp_path / "a"), str(tmp_path / "b"))
    for path in (tmp_path / "a", tmp_path / "folder"):
        with pytest.raises(OSError, match=f"deleting {path} failed: it is still there"):
            outputs.filesystems.delete(fs, str(path))


def test_a_filesystem_that_refuses_renames_fails_the_commit_loudly(tmp_path, monkeypatch):
    out = tmp_path / "out"
    graph, [sink] = job_writing(out, mode="no_overwrite")
    write_part(sink, 0)
    monkeypatch.setattr(outputs.filesystems, "resolve",
                        lambda path: (Refusing(), outputs.filesystems.normalize(path)))

    status, cause = run_finish(graph, JobStatus.FINISHED)

    assert status is JobStatus.FAILED
    assert cause == (f"committing output {out} failed: OSError: renaming {sink.staging} to "
                     f"{out} failed")
    assert not out.exists()
