"""File sources and sinks: text, CSV and Parquet, on local disks and HDFS.

Sources. A source's path is a file or a folder (read at any depth, leaving out names
that start with `_` or `.`; see filesystems.list_files). The files are sorted and cut
into splits, and split i is read by subtask i % parallelism. A CSV or Parquet file is
one split. A text file is cut into byte ranges of `split_bytes` (64 MiB): the range
[start, end) owns exactly the lines whose first byte lies in it, so no line is lost
or read twice at a boundary (the rule of Hadoop's LineRecordReader). Files smaller than
`split_bytes` are therefore one split each, and file i goes to subtask i % parallelism.
`read()` yields batches of at most `context.batch_size` rows.

Errors: a missing path raises FileNotFoundError naming it; a file that is not valid for
the format raises FileFormatError naming the file; other errors get a note naming the file.

Sinks. Subtask i writes everything it receives to `part-{i:05d}.<format>` in the sink's
folder (created if missing). The data goes to a hidden in-progress file first, which
`finish()` renames to the part file, so a reader never sees half a file and a retried
attempt replaces the part file of an earlier one. A subtask that received no batch
writes an empty file only if it knows the schema (the `schema` argument); `close()`
after a failure removes the in-progress file. Sinks emit nothing.

In a job that takes checkpoints the sinks are exactly-once (two-phase commit, as
Flink's FileSink): subtask i writes `part-{i:05d}-{n:05d}.<format>`, n counting up. At a
checkpoint's barrier the in-progress file is closed and pending (its name is part of
the checkpoint's state); when the checkpoint completes it is renamed to its part file.
A subtask that starts from a checkpoint renames what that checkpoint still had pending
(it completed; the confirmation may not have arrived) and deletes its part files
numbered from the checkpoint's n on (written after it: they will be written again);
one that starts from scratch deletes all of its part files. So the folder holds each
record once, and only what a completed checkpoint (or the end of the input) covers.
Resumed at another parallelism, old subtask k's pending files and numbering go to
subtask k % parallelism, which commits the ones, deletes k's later part files and keeps
k's numbering in its own state (a later rescale hands it on).

Write modes (Flink's WriteMode; flinkyarn.connectors.outputs has the details). The
subtasks write into a hidden sibling staging folder (`.<name>.staging-<random>`, named
when the sink is made), which the JobMaster puts in place at the folder, marked
`_SUCCESS`, once the whole job has finished, and deletes when the job fails or is
canceled. With mode "no_overwrite", the default, a job whose folder exists and is not
empty (or is a file) is refused by the client before anything runs, so the part files of
two runs never mix; with mode "overwrite" the folder's old content is replaced. Either
way the folder has exactly the run's part files, or, after a failure, exactly what it
had before. A checkpointed job's no_overwrite sink writes into the folder itself, each
part file committed by its checkpoint. The sink tells the JobGraph about its folder
through `file_output()`.

All methods are called from the task thread only (see flinkyarn.pipeline.operator).
"""

from __future__ import annotations

import os
import re
import time
import uuid
import zlib
from typing import Any, Iterable, Iterator, Mapping, Protocol

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from flinkyarn import key_groups
from flinkyarn.connectors import filesystems, outputs
from flinkyarn.jobgraph import FileOutput, OutputMode, output_mode
from flinkyarn.key_groups import Redistribution
from flinkyarn.pipeline.operator import Operator, OperatorContext, SourceOperator

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
_BLOCK_BYTES = 4 * 1024 * 1024
_FORMAT_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
# A checkpointed sink's part file, or (hidden) its in-progress twin.
_PART = re.compile(r"^\.?part-(?P<subtask>\d{5,})-(?P<number>\d{5,})(?P<rest>.*)$")
# What a source reads in one go: its first item is the file, the rest is up to the source.
Split = tuple[Any, ...]


class Position:
    """A replayable source's place, its checkpointed state: how many batches it emitted.
    Restored, it reads its input again and skips that many."""

    def __init__(self) -> None:
        self.emitted = 0
        self._skip = 0

    def replay(self, items: Iterable[pa.RecordBatch | None]) -> Iterator[pa.RecordBatch | None]:
        """`items` past the restored position, counting them (None passes: no position)."""
        self.emitted = self._skip
        seen = 0
        for item in items:
            if item is None:
                yield None
                continue
            seen += 1
            if seen > self._skip:
                self.emitted = seen
                yield item

    def state(self) -> dict[str, pa.Table]:
        return {"position": pa.table({"emitted": pa.array([self.emitted], pa.int64())})}

    def restore(self, state: Mapping[str, pa.Table]) -> None:
        self._skip = self.emitted = state["position"].column("emitted")[0].as_py()


class FileFormatError(ValueError):
    """A file is not valid for the format it is read as."""


def cap_rows(batches: Iterable[pa.RecordBatch], most: int) -> Iterator[pa.RecordBatch]:
    """The same rows, in batches of at most `most` rows (larger ones sliced, zero-copy)."""
    for batch in batches:
        if batch.num_rows <= most:
            yield batch
        else:
            for offset in range(0, batch.num_rows, most):
                yield batch.slice(offset, most)


class FileSource(SourceOperator):
    """Base of the file sources: lists, splits and assigns the files; subclasses read one
    split.

    Bounded (the default): what the folder holds when the task starts. Its position (the
    batches it emitted) is its checkpointed state; a restored subtask reads its splits
    again and skips that many.

    Continuous (`monitor_interval` seconds; Flink's FileSource.monitorContinuously): the
    folder is listed again every `monitor_interval`, and every new file is read once,
    whole, by the subtask it belongs to (a hash of its path); names starting with `.` or
    `_` are left out, so a writer renames a finished file into place. The source never
    ends, unless `until_files` is given: it ends once the folder holds that many files
    and it has read its own among the first that many by name. Its state: the files it
    read, and how many batches of the file it is reading it emitted.
    """

    format = "file"

    def __init__(self, path: str | os.PathLike[str], monitor_interval: float | None = None,
                 until_files: int | None = None) -> None:
        self.path = filesystems.normalize(path)
        self.name = f"Source: {self.format}({self.path})"
        if monitor_interval is not None and monitor_interval <= 0:
            raise ValueError(f"{self.name}: monitor_interval must be greater than 0, not "
                             f"{monitor_interval!r}")
        if until_files is not None and (monitor_interval is None or until_files < 1):
            raise ValueError(f"{self.name}: until_files (a number >= 1) goes with "
                             f"monitor_interval")
        self.monitor_interval = monitor_interval
        self.until_files = until_files
        self._position = Position()                # bounded
        self._done: set[str] = set()               # continuous: files read
        self._current: dict[str, int] = {}         # ... and batches emitted of a file under way

    def read(self) -> Iterator[pa.RecordBatch | None]:
        if self.monitor_interval is None:
            return self._position.replay(self._read_once())
        return self._read_continuously(self.monitor_interval)

    def _read_once(self) -> Iterator[pa.RecordBatch]:
        fs, root = filesystems.resolve(self.path)
        splits = self.splits(fs, filesystems.list_files(fs, root))
        for split in splits[self.context.subtask_index::self.context.parallelism]:
            yield from self._batches_of(fs, split)

    def _read_continuously(self, interval: float) -> Iterator[pa.RecordBatch | None]:
        fs, root = filesystems.resolve(self.path)
        self._current = {file: batches for file, batches in self._current.items()
                         if self._owner(file, root) == self.context.subtask_index}
        while True:
            try:
                files = filesystems.list_files(fs, root)
            except FileNotFoundError:  # not there yet
                files = []
            if self.until_files is not None:
                files = files[:self.until_files]
            for file in files:
                if file in self._done or self._owner(file, root) != self.context.subtask_index:
                    continue
                skip = self._current.get(file, 0)
                count = 0
                for split in self.splits(fs, [file]):
                    for batch in self._batches_of(fs, split):
                        count += 1
                        if count > skip:
                            self._current[file] = count
                            yield batch
                self._done.add(file)
                self._current.pop(file, None)
            if self.until_files is not None and len(files) >= self.until_files:
                return
            deadline = time.monotonic() + interval
            while (remaining := deadline - time.monotonic()) > 0:
                yield None  # the task takes checkpoint triggers meanwhile
                time.sleep(min(0.1, remaining))

    def _owner(self, file: str, root: str) -> int:
        relative = file[len(root):] if file.startswith(root) else file
        return zlib.crc32(relative.encode()) % self.context.parallelism

    def _batches_of(self, fs: pafs.FileSystem, split: Split) -> Iterator[pa.RecordBatch]:
        file = split[0]
        try:
            yield from cap_rows(self.read_split(fs, split), self.context.batch_size)
        except _FORMAT_ERRORS as error:
            raise FileFormatError(f"{file}: not a valid {self.format} file: {error}") from error
        except Exception as error:
            error.add_note(f"while reading {file}")
            raise

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        if self.monitor_interval is None:
            return self._position.state()
        return {"files": pa.table({"file": pa.array(sorted(self._done), pa.string())}),
                "current": pa.table({"file": pa.array(list(self._current), pa.string()),
                                     "batches": pa.array(list(self._current.values()), pa.int64())})}

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        if "position" in state:
            self._position.restore(state)
        if "files" in state:
            self._done = set(state["files"].column("file").to_pylist())
        if "current" in state:  # rescaled: the old subtasks' (a file in one at most)
            current = state["current"]
            self._current = {}
            for file, batches in zip(current.column("file").to_pylist(),
                                     current.column("batches").to_pylist()):
                if file and file not in self._done:
                    self._current[file] = max(batches, self._current.get(file, 0))

    def state_redistribution(self, name: str) -> Redistribution:
        """Continuous: every subtask gets the files all read and where each stopped in
        the ones under way (a file's reader may change with the parallelism); bounded:
        its position pins its parallelism."""
        return key_groups.union() if self.monitor_interval is not None else Redistribution()

    def splits(self, fs: pafs.FileSystem, files: list[str]) -> list[Split]:
        """The splits of the sorted `files`, in order; the first item of each is its file."""
        return [(file,) for file in files]

    def read_split(self, fs: pafs.FileSystem, split: Split) -> Iterable[pa.RecordBatch]:
        raise NotImplementedError


class TextSource(FileSource):
    """Lines of UTF-8 text as one string column `line`, without their `\\n` (or `\\r\\n`)."""

    format = "text"
    schema = pa.schema([("line", pa.string())])

    def __init__(self, path: str | os.PathLike[str], split_bytes: int = DEFAULT_SPLIT_BYTES,
                 monitor_interval: float | None = None, until_files: int | None = None
                 ) -> None:
        super().__init__(path, monitor_interval, until_files)
        if split_bytes < 1:
            raise ValueError("split_bytes must be positive")
        self.split_bytes = split_bytes

    def splits(self, fs: pafs.FileSystem, files: list[str]) -> list[Split]:
        splits: list[Split] = []
        for info in fs.get_file_info(files):
            size = info.size or 0
            for start in range(0, max(size, 1), self.split_bytes):
                splits.append((info.path, start, min(start + self.split_bytes, size)))
        return splits

    def read_split(self, fs: pafs.FileSystem, split: Split) -> Iterator[pa.RecordBatch]:
        file, start, end = split
        import pyarrow.compute as pc  # here: a process that reads no text spares its import

        with fs.open_input_file(file) as stream:
            for lines in _lines_starting_in(stream, start, end):
                array = pa.array(lines, type=pa.binary()).cast(pa.string())
                if pc.any(pc.ends_with(array, "\r")).as_py():
                    array = pc.replace_substring_regex(array, pattern="\r$", replacement="")
                yield pa.record_batch([array], schema=self.schema)


def _lines_starting_in(stream: pa.NativeFile, start: int, end: int) -> Iterator[list[bytes]]:
    """Lists of the lines (without '\\n') whose first byte is at a position in [start, end).
    Reads the range in blocks, then past `end` only as far as the last line's newline."""
    tail_bytes = min(_BLOCK_BYTES, 64 * 1024)
    offset = start  # file position of buf[0], always the start of a line
    buf = b""
    if start > 0:
        # The line running through position start-1 belongs to the previous split.
        stream.seek(start - 1)
        offset = start - 1
        while True:
            block = stream.read(tail_bytes)
            if not block:
                return
            newline = block.find(b"\n")
            if newline >= 0:
                offset += newline + 1
                buf = block[newline + 1:]
                break
            offset += len(block)
    if offset >= end:
        return
    while True:
        cut = buf.rfind(b"\n")
        if cut >= 0:
            if offset + cut + 1 >= end:
                # The line after `cut` starts at or after `end`: take the lines starting
                # before `end`, the last of which ends at the first newline from end-1 on.
                last = buf.find(b"\n", end - offset - 1)
                yield buf[:last].split(b"\n")
                return
            yield buf[:cut].split(b"\n")
            offset += cut + 1
            buf = buf[cut + 1:]
        unread_in_range = end - offset - len(buf)
        block = stream.read(min(unread_in_range, _BLOCK_BYTES) if unread_in_range > 0 else tail_bytes)
        if not block:
            break
        buf += block
    if buf:
        yield [buf]


_CSV_OPTION_CLASSES = (pacsv.ReadOptions, pacsv.ParseOptions, pacsv.ConvertOptions)
_CSV_OPTION_NAMES = {cls: {name for name in dir(cls) if not name.startswith("_")
                           and name not in ("equals", "validate")}
                     for cls in _CSV_OPTION_CLASSES}


class CsvSource(FileSource):
    """CSV files through pyarrow.csv. `schema` fixes the columns (in its order) and their
    types; `csv_options` are attributes of pyarrow.csv's ReadOptions, ParseOptions or
    ConvertOptions (`delimiter=";"`, `skip_rows=1`, `null_values=["NA"]`, ...). Unless
    told otherwise, an unquoted empty field is null also in a string column, and `""` is
    the empty string: what CsvSink writes reads back unchanged. A file of zero bytes has
    no rows."""

    format = "csv"

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None = None,
                 **csv_options: Any) -> None:
        super().__init__(path)
        self.schema = schema
        self.csv_options: dict[type, dict[str, Any]] = {cls: {} for cls in _CSV_OPTION_CLASSES}
        for key, value in csv_options.items():
            owner = next((cls for cls in _CSV_OPTION_CLASSES if key in _CSV_OPTION_NAMES[cls]), None)
            if owner is None:
                raise TypeError(f"CsvSource: unknown CSV option {key!r}")
            self.csv_options[owner][key] = value
        convert = self.csv_options[pacsv.ConvertOptions]
        convert.setdefault("strings_can_be_null", True)
        convert.setdefault("quoted_strings_can_be_null", False)
        if schema is not None:
            convert.setdefault("column_types", {field.name: field.type for field in schema})
            convert.setdefault("include_columns", schema.names)

    def read_split(self, fs: pafs.FileSystem, split: Split) -> Iterator[pa.RecordBatch]:
        file = split[0]
        if fs.get_file_info(file).size == 0:
            return
        read, parse, convert = (cls(**self.csv_options[cls]) for cls in _CSV_OPTION_CLASSES)
        with fs.open_input_stream(file) as stream:
            reader = pacsv.open_csv(stream, read_options=read, parse_options=parse,
                                    convert_options=convert)
            for batch in reader:
                if self.schema is not None and not batch.schema.equals(self.schema):
                    batch = batch.cast(self.schema)
                yield batch


class ParquetSource(FileSource):
    """Parquet files; `columns` selects columns (all by default). A file without rows
    yields one empty batch, so that its schema travels on."""

    format = "parquet"

    def __init__(self, path: str | os.PathLike[str], columns: list[str] | None = None) -> None:
        super().__init__(path)
        self.columns = list(columns) if columns is not None else None

    def read_split(self, fs: pafs.FileSystem, split: Split) -> Iterator[pa.RecordBatch]:
        with fs.open_input_file(split[0]) as stream:
            parquet = pq.ParquetFile(stream)
            if parquet.metadata.num_rows == 0:
                schema = parquet.schema_arrow
                if self.columns is not None:
                    schema = pa.schema([schema.field(name) for name in self.columns])
                yield pa.RecordBatch.from_pylist([], schema=schema)
                return
            yield from parquet.iter_batches(batch_size=self.context.batch_size, columns=self.columns)


class BatchWriter(Protocol):
    """What a FileSink writes its part file with."""

    def write_batch(self, batch: pa.RecordBatch) -> None:
        ...

    def close(self) -> None:
        """Closes the file."""
        ...


class FileSink(Operator):
    """Base of the file sinks: the part file, its in-progress twin and the commit."""

    format = "file"
    suffix = ""

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None = None,
                 mode: OutputMode | str = OutputMode.NO_OVERWRITE) -> None:
        """ValueError for an unknown `mode`, or "overwrite" of a filesystem's root."""
        self.path = filesystems.normalize(path)
        self.schema = schema
        self.mode = output_mode(mode)
        # Chosen here, on the client: the JobMaster learns it from file_output().
        try:
            self.staging: str | None = outputs.staging_folder(self.path)
        except ValueError:  # the root of a filesystem: written in place, if at all
            if self.mode is OutputMode.OVERWRITE:
                raise
            self.staging = None
        self.name = f"Sink: {self.format}({self.path})"
        self._writer: BatchWriter | None = None
        self._pending = False

    def file_output(self) -> FileOutput:
        return FileOutput(self.path, self.format, self.mode, self.staging)

    def open(self, context: OperatorContext) -> None:
        super().open(context)
        # Checkpointed: the next part's number and the closed files waiting for their
        # checkpoint to complete, (checkpoint id, in-progress path, part path).
        self._checkpointed = bool(getattr(context, "checkpointing", False))
        in_place = outputs.writes_in_place(self.file_output(), self._checkpointed)
        self._fs, folder = filesystems.resolve(self.path if in_place or self.staging is None
                                               else self.staging)
        filesystems.ensure_folder(self._fs, folder)
        self._folder = folder.rstrip("/")
        self._writer = None
        self._pending = False  # an in-progress file exists and was not renamed
        self._part_number = 0
        self._to_commit: list[tuple[int, str, str]] = []
        self._adopted: dict[int, int] = {}  # old subtasks taken over: their next part number
        self._forgotten = False
        self._name_files()

    def _name_files(self) -> None:
        index = self.context.subtask_index
        part = (f"part-{index:05d}-{self._part_number:05d}{self.suffix}" if self._checkpointed
                else f"part-{index:05d}{self.suffix}")
        self.part_file = f"{self._folder}/{part}"
        self._in_progress = (f"{self._folder}/.{part}.{self.context.attempt_number}-"
                             f"{uuid.uuid4().hex[:8]}.inprogress")

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table]:
        """Closes the file being written: it waits for this checkpoint to complete."""
        self._forget_output_after(None)
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            self._pending = False
            self._to_commit.append((checkpoint_id, self._in_progress, self.part_file))
            self._part_number += 1
            self._name_files()
        index = self.context.subtask_index
        numbering = {index: self._part_number, **self._adopted}
        return {"files": pa.table({
            "subtask": pa.array([index] * len(self._to_commit), pa.int32()),
            "checkpoint": pa.array([c for c, _, _ in self._to_commit], pa.int64()),
            "in_progress": pa.array([i for _, i, _ in self._to_commit], pa.string()),
            "part": pa.array([p for _, _, p in self._to_commit], pa.string())}),
            "position": pa.table({"subtask": pa.array(list(numbering), pa.int32()),
                                  "next_part": pa.array(list(numbering.values()), pa.int64())})}

    def state_redistribution(self, name: str) -> Redistribution:
        """Rescaled, the pending files and the part numbering of old subtask k go to
        subtask k % parallelism, which commits the one and keeps the other."""
        return key_groups.by_subtask()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        done = [entry for entry in self._to_commit if entry[0] <= checkpoint_id]
        self._to_commit = [entry for entry in self._to_commit if entry[0] > checkpoint_id]
        for _, in_progress, part in done:
            self._commit(in_progress, part)

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        """The checkpoint completed: what it had pending is committed; the part files
        written after it go (they come again), this subtask's and those of the old
        subtasks it took over when the parallelism changed, whose numbering it keeps."""
        files = state.get("files")
        if files is not None:
            for in_progress, part in zip(files.column("in_progress").to_pylist(),
                                         files.column("part").to_pylist()):
                self._commit(in_progress, part)
        position = state["position"]
        numbering = dict(zip(position.column("subtask").to_pylist(),
                             position.column("next_part").to_pylist()))
        self._part_number = numbering.pop(self.context.subtask_index, 0)
        self._adopted = numbering
        self._forget_output_after(self._part_number)
        self._name_files()

    def _forget_output_after(self, first: int | None) -> None:
        """Once per attempt, before its first part: deletes this subtask's part files
        from number `first` on (None: all of them, the job starts from scratch), those of
        the old subtasks it took over from their numbering on, and their in-progress
        files no checkpoint refers to any more (earlier attempts')."""
        if not self._checkpointed or self._forgotten:
            return
        self._forgotten = True
        limits = {self.context.subtask_index: first or 0, **self._adopted}
        for entry in self._fs.get_file_info(pafs.FileSelector(self._folder)):
            name = entry.base_name
            match = _PART.match(name)
            if match is None or int(match["subtask"]) not in limits:
                continue
            if name.startswith("."):
                if name.endswith(".inprogress"):
                    filesystems.delete(self._fs, entry.path)
            elif match["rest"] == self.suffix and \
                    int(match["number"]) >= limits[int(match["subtask"])]:
                filesystems.delete(self._fs, entry.path)

    def _commit(self, in_progress: str, part: str) -> None:
        """Renames a closed in-progress file to its part file; done already if it is gone."""
        if self._fs.get_file_info(in_progress).type != pafs.FileType.NotFound:
            filesystems.replace(self._fs, in_progress, part)

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[pa.RecordBatch]:
        writer = self._writer
        if writer is None:
            self._forget_output_after(None)
            if self.schema is None:
                self.schema = batch.schema
            writer = self._start_file()
        if not batch.schema.equals(self.schema):
            try:
                batch = batch.cast(self.schema)
            except (*_FORMAT_ERRORS, ValueError) as error:
                raise TypeError(f"{self.name}: a batch with schema {batch.schema} does not match "
                                f"the file's schema {self.schema}: {error}") from error
        writer.write_batch(batch)
        return ()

    def finish(self) -> Iterable[pa.RecordBatch]:
        """The end of the input: everything written is final (pending files too)."""
        self._forget_output_after(None)
        if self._writer is None and self.schema is not None and not self._to_commit \
                and self._part_number == 0:
            self._start_file()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            self._to_commit.append((-1, self._in_progress, self.part_file))
            self._pending = False
        for _, in_progress, part in self._to_commit:
            self._commit(in_progress, part)
        self._to_commit = []
        return ()

    def close(self) -> None:
        """After a failure or a cancellation: drops the in-progress file."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
        finally:
            if self._pending:
                self._pending = False
                filesystems.delete(self._fs, self._in_progress)

    def _start_file(self) -> BatchWriter:
        self._pending = True
        self._writer = self.open_writer(self._fs, self._in_progress, self.schema)
        return self._writer

    def open_writer(self, fs: pafs.FileSystem, path: str, schema: pa.Schema) -> BatchWriter:
        """A writer of a new file at `path`."""
        raise NotImplementedError


class ParquetSink(FileSink):
    format = "parquet"
    suffix = ".parquet"

    def open_writer(self, fs: pafs.FileSystem, path: str, schema: pa.Schema) -> BatchWriter:
        writer: BatchWriter = pq.ParquetWriter(path, schema, filesystem=fs)
        return writer


class CsvSink(FileSink):
    """CSV with a header line, as pyarrow.csv writes it."""

    format = "csv"
    suffix = ".csv"

    def open_writer(self, fs: pafs.FileSystem, path: str, schema: pa.Schema) -> BatchWriter:
        return _ClosingCsvWriter(fs.open_output_stream(path, compression=None), schema)


class _ClosingCsvWriter:
    def __init__(self, stream: pa.NativeFile, schema: pa.Schema) -> None:
        self._stream = stream
        self._writer = pacsv.CSVWriter(stream, schema)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._stream.close()
