"""File sources and sinks on the local Hadoop's HDFS (its nameservice), through
hdfs-native. What they write is checked with Hadoop's own client (`hdfs dfs`), not with
the code under test."""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter

import pyarrow as pa
import pytest

import local_hadoop
from flinkyarn.connectors import ParquetSink, ParquetSource, TextSource, outputs
from tests.operator_context import FakeContext


def hdfs(*args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["hdfs", "dfs", *args], input=stdin, check=True,
                          capture_output=True).stdout.decode(errors="replace")


@pytest.fixture
def folder(hadoop):
    path = f"/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    hdfs("-mkdir", "-p", path)
    yield path
    hdfs("-rm", "-r", "-f", "-skipTrash", path)


def read(source, parallelism: int) -> list[pa.Table]:
    tables = []
    for subtask in range(parallelism):
        source.open(FakeContext(subtask, parallelism, batch_size=2))
        batches = list(source.read())
        assert all(batch.num_rows <= 2 for batch in batches)
        tables.append(pa.Table.from_batches(batches) if batches else None)
    return tables


def write(sink, table: pa.Table, subtask: int, attempt: int = 0) -> None:
    sink.open(FakeContext(subtask, 2, attempt, batch_size=2))
    for batch in table.to_batches():
        sink.process(batch, 0)
    sink.finish()
    sink.close()


PEOPLE = pa.table({"id": [1, 2, 3, 4, 5], "name": ["ann", "bob", "cy", "dé", "eve"]})


def test_parquet_part_files_on_hdfs(folder):
    url = f"{local_hadoop.DEFAULT_FS}{folder}/out"
    sink = ParquetSink(url)  # each subtask and attempt unpickles the same sink
    write(sink, PEOPLE.slice(0, 1), subtask=0)
    write(sink, PEOPLE.slice(0, 2), subtask=1, attempt=0)
    write(sink, PEOPLE.slice(1), subtask=1, attempt=1)  # a retry replaces attempt 0
    outputs.commit(sink.file_output(), checkpointed=False)  # the JobMaster's, at the end
    listing = hdfs("-ls", "-C", f"{folder}/out").split()
    assert listing == [f"{folder}/out/part-00000.parquet", f"{folder}/out/part-00001.parquet"]
    assert hdfs("-cat", f"{folder}/out/part-00001.parquet").startswith("PAR1")
    tables = read(ParquetSource(url), parallelism=2)
    assert tables[0].equals(PEOPLE.slice(0, 1))
    assert tables[1].to_pylist() == PEOPLE.slice(1).to_pylist()


def test_text_split_by_byte_ranges_on_hdfs(folder):
    lines = [f"line {i} " + "x" * (i % 13) for i in range(200)]
    hdfs("-put", "-", f"{folder}/a.txt", stdin=("\n".join(lines) + "\n").encode())
    hdfs("-put", "-", f"{folder}/b.txt", stdin=b"last\n")
    hdfs("-touchz", f"{folder}/_SUCCESS")
    tables = read(TextSource(f"hdfs://{folder}", split_bytes=777), parallelism=3)
    found = [line for table in tables if table for line in table.column("line").to_pylist()]
    assert Counter(found) == Counter(lines + ["last"])


def test_missing_hdfs_path(folder):
    with pytest.raises(FileNotFoundError, match=f"{folder}/nothing"):
        read(ParquetSource(f"{local_hadoop.DEFAULT_FS}{folder}/nothing"), 1)


def test_a_copy_on_hdfs_is_whole_and_leaves_no_partial_file(folder):
    """What a savepoint does with its checkpoint's files (pyarrow's copy_file)."""
    from flinkyarn.connectors.filesystems import resolve

    filesystem, path = resolve(f"{local_hadoop.DEFAULT_FS}{folder}/a.bin")
    data = bytes(range(256)) * 40_000
    with filesystem.open_output_stream(path) as out:
        out.write(data)
    filesystem.create_dir(f"{folder}/copy")
    filesystem.copy_file(path, f"{folder}/copy/b.bin")
    filesystem.copy_file(path, f"{folder}/copy/b.bin")  # over the first copy
    assert hdfs("-ls", "-C", f"{folder}/copy").split() == [f"{folder}/copy/b.bin"]
    assert subprocess.run(["hdfs", "dfs", "-cat", f"{folder}/copy/b.bin"], check=True,
                          capture_output=True).stdout == data
