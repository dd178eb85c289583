"""File sources and sinks on the local disk, driven the way a StreamTask drives them."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flinkyarn.connectors import (
    CsvSink,
    CsvSource,
    FileFormatError,
    GeneratorSource,
    ParquetSink,
    ParquetSource,
    TextSource,
)
from flinkyarn.connectors import filesystems, outputs
from tests.operator_context import FakeContext


def read_batches(source, subtask=0, parallelism=1, batch_size=1000) -> list[pa.RecordBatch]:
    source.open(FakeContext(subtask, parallelism, batch_size=batch_size))
    try:
        return list(source.read())
    finally:
        source.close()


def read_all(source, parallelism=1, batch_size=1000) -> list[pa.Table]:
    """Each subtask's rows, as one table per subtask."""
    tables = []
    for subtask in range(parallelism):
        batches = read_batches(source, subtask, parallelism, batch_size)
        assert all(batch.num_rows <= batch_size for batch in batches)
        tables.append(pa.Table.from_batches(batches) if batches else None)
    return tables


def write(sink, batches, subtask=0, attempt=0, finish=True):
    sink.open(FakeContext(subtask, 3, attempt_number=attempt))
    try:
        for batch in batches:
            assert list(sink.process(batch, 0)) == []
        if finish:
            assert list(sink.finish()) == []
    finally:
        sink.close()


def lines_of(tables) -> list[str]:
    return [line for table in tables if table is not None for line in table.column("line").to_pylist()]


PEOPLE = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                   "name": ["ann", "", None, "dé", "eve"],
                   "score": [1.5, 2.0, 3.25, None, 5.0]})


# --- text -------------------------------------------------------------------------------


def test_text_source_reads_lines_without_their_newlines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("first\n\nwindows\r\nünïcode\nno newline at the end".encode())
    source = TextSource(path)
    assert source.name == f"Source: text({path})"
    [table] = read_all(source, batch_size=2)
    assert table.schema == pa.schema([("line", pa.string())])
    assert table.column("line").to_pylist() == [
        "first", "", "windows", "ünïcode", "no newline at the end"]


def test_text_file_cut_into_byte_ranges_loses_and_duplicates_no_line(tmp_path):
    rng = random.Random(7)
    words = ["", "a", "bb", "ccc", "a much longer line than the others", "x" * 40]
    expected = []
    for number in range(4):
        lines = [rng.choice(words) + str(i) * rng.randint(0, 1) for i in range(rng.randint(0, 60))]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        (tmp_path / f"f{number}.txt").write_text(text)
        expected += lines
    for split_bytes in (1, 2, 3, 5, 8, 13, 64, 1 << 20):
        for parallelism in (1, 3):
            tables = read_all(TextSource(tmp_path, split_bytes=split_bytes), parallelism)
            assert Counter(lines_of(tables)) == Counter(expected), (split_bytes, parallelism)
        # one subtask reads the splits in order, so it sees the files' lines in order
        assert lines_of(read_all(TextSource(tmp_path, split_bytes=split_bytes))) == expected


def test_text_lines_longer_than_a_read_block(tmp_path, monkeypatch):
    from flinkyarn.connectors import files
    monkeypatch.setattr(files, "_BLOCK_BYTES", 4)
    lines = ["0123456789abcdef", "", "short", "another line of some length"]
    (tmp_path / "long.txt").write_text("\n".join(lines) + "\n")
    for split_bytes in (3, 10, 17, 1000):
        tables = read_all(TextSource(tmp_path, split_bytes=split_bytes), parallelism=2)
        assert Counter(lines_of(tables)) == Counter(lines), split_bytes


# --- folders, splits, subtasks -----------------------------------------------------------


def test_folder_files_go_round_robin_to_three_subtasks(tmp_path):
    for i in range(7):
        pq.write_table(pa.table({"file": [i] * (i + 1), "row": list(range(i + 1))}),
                       tmp_path / f"data-{i}.parquet")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".hidden.parquet").write_text("not parquet")
    tables = read_all(ParquetSource(tmp_path), parallelism=3, batch_size=2)
    for subtask, table in enumerate(tables):
        assert set(table.column("file").to_pylist()) == {i for i in range(7) if i % 3 == subtask}
    rows = Counter(row for t in tables for row in zip(t.column("file").to_pylist(), t.column("row").to_pylist()))
    assert rows == Counter((i, r) for i in range(7) for r in range(i + 1))


def test_nested_folders_are_read_in_sorted_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "_temporary").mkdir(parents=True)
    (tmp_path / "b" / "1.txt").write_text("b1\n")
    (tmp_path / "a" / "2.txt").write_text("a2\n")
    (tmp_path / "a" / "_temporary" / "3.txt").write_text("skipped\n")
    (tmp_path / "0.txt").write_text("top\n")
    assert lines_of(read_all(TextSource(tmp_path))) == ["top", "a2", "b1"]
    assert lines_of(read_all(TextSource(f"file://{tmp_path}"))) == ["top", "a2", "b1"]


def test_a_subtask_without_files_reads_nothing(tmp_path):
    (tmp_path / "only.txt").write_text("one\n")
    assert read_all(TextSource(tmp_path), parallelism=3)[1:] == [None, None]


# --- CSV and Parquet round trips ----------------------------------------------------------


def test_parquet_round_trip_through_part_files(tmp_path):
    out = tmp_path / "out"
    sink = ParquetSink(out)
    assert sink.name == f"Sink: parquet({out})"
    write(sink, PEOPLE.slice(0, 3).to_batches(), subtask=0)
    write(sink, PEOPLE.slice(3).to_batches(), subtask=2)
    outputs.commit(sink.file_output(), checkpointed=False)  # the JobMaster's, at the end
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet", "part-00002.parquet"]
    [table] = read_all(ParquetSource(out), batch_size=2)
    assert table.equals(PEOPLE)
    [names] = read_all(ParquetSource(out, columns=["name"]))
    assert names.column_names == ["name"]


def test_csv_round_trip_with_a_schema(tmp_path):
    out = tmp_path / "csv"
    sink = CsvSink(out)
    write(sink, PEOPLE.to_batches(max_chunksize=2), subtask=1)
    outputs.commit(sink.file_output(), checkpointed=False)
    assert (out / "part-00001.csv").read_text().splitlines()[0] == '"id","name","score"'
    [table] = read_all(CsvSource(out, schema=PEOPLE.schema), batch_size=2)
    assert table.equals(PEOPLE)


def test_csv_options_reach_pyarrow(tmp_path):
    (tmp_path / "x.csv").write_text("# comment\na;b\n1;NA\n2;x\n")
    source = CsvSource(tmp_path / "x.csv", delimiter=";", skip_rows=1, null_values=["NA"])
    [table] = read_all(source)
    assert table.to_pydict() == {"a": [1, 2], "b": [None, "x"]}
    with pytest.raises(TypeError, match="unknown CSV option 'delimeter'"):
        CsvSource(tmp_path, delimeter=";")


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [TextSource, CsvSource, ParquetSource])
def test_missing_path_raises_file_not_found_naming_it(tmp_path, make):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        read_all(make(missing))


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    pq.write_table(PEOPLE, tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_text("id,name\n1,x\n")
    with pytest.raises(FileFormatError, match=f"{tmp_path / 'b.parquet'}: not a valid parquet file"):
        read_all(ParquetSource(tmp_path))


def test_a_file_that_is_not_csv_is_named(tmp_path):
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(FileFormatError, match="bad.csv: not a valid csv file"):
        read_all(CsvSource(tmp_path))


def test_text_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(FileFormatError, match="latin1.txt: not a valid text file"):
        read_all(TextSource(tmp_path))


def test_unsupported_scheme():
    with pytest.raises(ValueError, match="unsupported filesystem 's3'"):
        filesystems.resolve("s3://bucket/key")


# --- atomic part files --------------------------------------------------------------------


def test_part_file_appears_only_when_finished(tmp_path):
    sink = ParquetSink(tmp_path / "out")
    folder = Path(sink.staging)  # the job's output goes in place when the job finishes
    sink.open(FakeContext(subtask_index=4, attempt_number=0))
    sink.process(PEOPLE.to_batches()[0], 0)
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == []
    assert read_all(ParquetSource(folder)) == [None]  # in-progress files are hidden
    sink.finish()
    sink.close()
    assert [p.name for p in folder.iterdir()] == ["part-00004.parquet"]


def test_a_retried_attempt_replaces_the_part_file_and_a_failed_one_leaves_nothing(tmp_path):
    sink = ParquetSink(tmp_path / "out")  # each attempt unpickles the same sink
    folder = Path(sink.staging)
    write(sink, PEOPLE.to_batches(), subtask=1, attempt=0)
    write(sink, PEOPLE.slice(0, 1).to_batches(), subtask=1, attempt=1, finish=False)
    assert [p.name for p in folder.iterdir()] == ["part-00001.parquet"]
    assert pq.read_table(folder / "part-00001.parquet").equals(PEOPLE)
    write(sink, PEOPLE.slice(0, 2).to_batches(), subtask=1, attempt=2)
    assert [p.name for p in folder.iterdir()] == ["part-00001.parquet"]
    assert pq.read_table(folder / "part-00001.parquet").equals(PEOPLE.slice(0, 2))


def test_empty_input_writes_an_empty_file_only_when_the_schema_is_known(tmp_path):
    sinks = [ParquetSink(tmp_path / "unknown"), ParquetSink(tmp_path / "known", schema=PEOPLE.schema),
             CsvSink(tmp_path / "csv")]
    unknown, known, csv = (Path(sink.staging) for sink in sinks)
    write(sinks[0], [])
    assert list(unknown.iterdir()) == []
    write(sinks[1], [])
    assert pq.read_table(known / "part-00000.parquet").schema == PEOPLE.schema
    write(sinks[2], [pa.RecordBatch.from_pylist([], schema=PEOPLE.schema)])
    assert (csv / "part-00000.csv").read_text().strip() == '"id","name","score"'
    [table] = read_all(ParquetSource(known))
    assert table.num_rows == 0 and table.schema == PEOPLE.schema


# --- generator ----------------------------------------------------------------------------


def test_generator_source_gives_each_subtask_its_own_batches():
    def numbers(subtask, parallelism):
        yield pa.table({"n": list(range(subtask, 20, parallelism))})
        yield pa.record_batch({"n": [100 + subtask]})

    tables = read_all(GeneratorSource(numbers), parallelism=2, batch_size=3)
    assert tables[0].column("n").to_pylist() == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 100]
    assert tables[1].column("n").to_pylist() == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 101]
    assert GeneratorSource(numbers).name == "Source: generator(numbers)"
    with pytest.raises(TypeError, match="yielded a list"):
        read_all(GeneratorSource(lambda s, p: [[1, 2]]))


# --- exactly-once part files (checkpointed jobs) ------------------------------------------


def rows(n: int) -> pa.RecordBatch:
    return pa.record_batch({"n": [n]})


def visible(folder) -> dict[str, list[int]]:
    """Each visible part file's values of n."""
    return {p.name: pq.read_table(p).column("n").to_pylist()
            for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def checkpointed_sink(folder, attempt=0, state=None) -> ParquetSink:
    sink = ParquetSink(folder)
    sink.open(FakeContext(subtask_index=2, attempt_number=attempt, checkpointing=True))
    if state is not None:
        sink.initialize_state(state)
    return sink


def test_a_checkpointed_sink_shows_a_part_only_once_its_checkpoint_completed(tmp_path):
    sink = checkpointed_sink(tmp_path)
    sink.process(rows(1), 0)
    sink.snapshot_state(1)
    sink.process(rows(2), 0)
    assert visible(tmp_path) == {}
    sink.notify_checkpoint_complete(1)
    assert visible(tmp_path) == {"part-00002-00000.parquet": [1]}
    sink.finish()  # the end of the input: the rest is final
    sink.close()
    assert visible(tmp_path) == {"part-00002-00000.parquet": [1], "part-00002-00001.parquet": [2]}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_restored_sink_commits_what_its_checkpoint_had_pending_and_drops_what_came_after(
        tmp_path):
    first = checkpointed_sink(tmp_path)
    first.process(rows(1), 0)
    first.snapshot_state(1)
    first.notify_checkpoint_complete(1)
    first.process(rows(2), 0)
    state = first.snapshot_state(2)      # completes
    first.process(rows(3), 0)
    first.snapshot_state(3)              # never completes
    first.notify_checkpoint_complete(2)  # part 1 (2) is committed
    first.process(rows(4), 0)            # then the TaskExecutor dies
    assert visible(tmp_path) == {"part-00002-00000.parquet": [1], "part-00002-00001.parquet": [2]}

    # The job restarts from checkpoint 2; 3 and 4 come again.
    again = checkpointed_sink(tmp_path, attempt=1, state=state)
    for n in (3, 4):
        again.process(rows(n), 0)
    again.finish()
    again.close()
    assert sorted(n for ns in visible(tmp_path).values() for n in ns) == [1, 2, 3, 4]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_restored_sink_commits_a_pending_part_whose_confirmation_was_lost(tmp_path):
    first = checkpointed_sink(tmp_path)
    first.process(rows(1), 0)
    state = first.snapshot_state(1)
    # Checkpoint 1 completed, but the TaskExecutor died before the confirmation came.
    again = checkpointed_sink(tmp_path, attempt=1, state=state)
    assert visible(tmp_path) == {"part-00002-00000.parquet": [1]}
    again.finish()
    assert visible(tmp_path) == {"part-00002-00000.parquet": [1]}


def test_a_sink_starting_from_scratch_drops_its_earlier_parts(tmp_path):
    first = checkpointed_sink(tmp_path)
    first.process(rows(1), 0)
    first.finish()
    other = ParquetSink(tmp_path)  # another subtask's part stays
    other.open(FakeContext(subtask_index=0, checkpointing=True))
    other.process(rows(9), 0)
    other.finish()
    again = checkpointed_sink(tmp_path, attempt=1)
    again.process(rows(5), 0)
    again.finish()
    assert visible(tmp_path) == {"part-00000-00000.parquet": [9], "part-00002-00000.parquet": [5]}


def test_a_sink_that_takes_over_old_subtasks_at_a_lower_parallelism_keeps_their_numbering(
        tmp_path):
    """Resumed at parallelism 1 from a checkpoint of 3 (its share: every old subtask's
    rows): subtask 0 commits what 1 and 2 had pending, drops what they wrote after the
    checkpoint, and carries their numbering on, so that subtask 2 of a later rescale
    to 3 does not write over its committed parts."""
    def write(subtask, number, n, hidden=False):
        name = f"part-{subtask:05d}-{number:05d}.parquet"
        pq.write_table(pa.table({"n": [n]}), tmp_path / (f".{name}.0-ab.inprogress" if hidden else name))

    write(1, 0, 10)
    write(1, 1, 11, hidden=True)      # pending in the checkpoint
    write(1, 2, 12)                   # committed after it (a later checkpoint): comes again
    write(2, 0, 20)
    write(2, 3, 23, hidden=True)      # an earlier attempt's, in no checkpoint
    state = {"files": pa.table({"subtask": pa.array([1], pa.int32()),
                                "checkpoint": pa.array([4], pa.int64()),
                                "in_progress": [str(tmp_path / ".part-00001-00001.parquet.0-ab.inprogress")],
                                "part": [str(tmp_path / "part-00001-00001.parquet")]}),
             "position": pa.table({"subtask": pa.array([1, 2], pa.int32()),
                                   "next_part": pa.array([2, 1], pa.int64())})}
    sink = ParquetSink(tmp_path)
    sink.open(FakeContext(subtask_index=0, parallelism=1, checkpointing=True))
    sink.initialize_state(state)
    sink.process(rows(1), 0)
    assert visible(tmp_path) == {"part-00001-00000.parquet": [10], "part-00001-00001.parquet": [11],
                                 "part-00002-00000.parquet": [20]}
    assert not any(p.name.startswith(".part-00002") for p in tmp_path.iterdir())
    later = sink.snapshot_state(5)["position"]
    assert dict(zip(later.column("subtask").to_pylist(), later.column("next_part").to_pylist())) \
        == {0: 1, 1: 2, 2: 1}
    assert sink.state_redistribution("position").kind == "by-subtask"


# --- watched folders and source positions --------------------------------------------------


def take(iterator, count: int) -> list:
    """The next `count` items that are batches (None: the source had nothing then)."""
    got = []
    while len(got) < count:
        item = next(iterator)
        if item is not None:
            got.append(item.column("line").to_pylist())
    return got


def test_a_watched_folder_is_read_as_files_appear_and_ends_after_until_files(tmp_path):
    folder = tmp_path / "in"
    source = TextSource(folder, monitor_interval=0.01, until_files=3)
    source.open(FakeContext(batch_size=10))
    items = source.read()
    assert next(items) is None  # no folder yet: nothing, and no error
    folder.mkdir()
    (folder / "a.txt").write_text("a1\na2\n")
    (folder / ".b.txt.inprogress").write_text("half")  # hidden: a writer's file
    assert take(items, 1) == [["a1", "a2"]]
    assert next(items) is None
    (folder / ".b.txt.inprogress").rename(folder / "b.txt")
    (folder / "c.txt").write_text("c1\n")
    assert take(items, 2) == [["half"], ["c1"]]
    assert list(items) == []  # three files: the end


def test_a_restored_watched_folder_source_reads_no_file_twice(tmp_path):
    for name, text in [("1.txt", "one\n"), ("2.txt", "two\n")]:
        (tmp_path / name).write_text(text)
    first = TextSource(tmp_path, monitor_interval=0.01)
    first.open(FakeContext())
    items = first.read()
    assert take(items, 1) == [["one"]]
    state = first.snapshot_state(1)
    again = TextSource(tmp_path, monitor_interval=0.01, until_files=3)
    again.open(FakeContext())
    again.initialize_state(state)
    (tmp_path / "3.txt").write_text("three\n")
    assert [b.column("line").to_pylist() for b in again.read() if b is not None] == [
        ["two"], ["three"]]


def test_a_restored_bounded_source_skips_the_batches_it_had_emitted(tmp_path):
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(10)))
    first = TextSource(tmp_path)
    first.open(FakeContext(batch_size=3))
    items = first.read()
    assert take(items, 2) == [["0", "1", "2"], ["3", "4", "5"]]
    state = first.snapshot_state(1)
    again = TextSource(tmp_path)
    again.open(FakeContext(batch_size=3))
    again.initialize_state(state)
    assert [b.column("line").to_pylist() for b in again.read()] == [["6", "7", "8"], ["9"]]
    assert again.snapshot_state(2)["position"].column("emitted")[0].as_py() == 4


def test_a_watched_folder_needs_a_positive_interval_and_until_files_needs_one():
    with pytest.raises(ValueError, match="monitor_interval must be greater than 0"):
        TextSource("/x", monitor_interval=0)
    with pytest.raises(ValueError, match="until_files .* goes with monitor_interval"):
        TextSource("/x", until_files=2)


def test_a_generator_may_say_it_has_nothing_for_now_and_that_is_no_position():
    def idling(subtask, parallelism):
        yield pa.record_batch({"n": [1]})
        yield None
        yield None
        yield pa.record_batch({"n": [2]})

    first = GeneratorSource(idling)
    first.open(FakeContext())
    items = first.read()
    assert [next(items).column("n").to_pylist(), next(items), next(items)] == [[1], None, None]
    state = first.snapshot_state(1)
    again = GeneratorSource(idling)
    again.open(FakeContext())
    again.initialize_state(state)
    assert [b.column("n").to_pylist() for b in again.read() if b is not None] == [[2]]
