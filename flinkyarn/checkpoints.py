"""Checkpoints on storage: what a task writes, what the JobMaster writes when a checkpoint
completes, and what a restarted task gets back. Shared by the TaskExecutor (tasks write
and read state) and the JobMaster (metadata, retention).

    <state.checkpoints.dir>/<job id>/
        chk-<n>/<operator id>/<subtask>-<attempt>-<name>.arrow   a task's state (Arrow IPC)
        chk-<n>/_metadata                                        JSON: CheckpointMetadata,
                                                                 written last, atomically
A checkpoint folder without `_metadata` is not a checkpoint (it was aborted, or the
JobMaster died while completing it). Paths are local paths or hdfs:// URLs
(flinkyarn.connectors.filesystems).

A task's state is, per operator of its chain (by the operator's stable id: its `uid`
or the JobGraph builder's hash), named Arrow tables: an operator's `snapshot_state()`.
"""

from __future__ import annotations

import os
import tempfile
import uuid

import msgspec
import pyarrow as pa
import pyarrow.ipc as ipc

from flinkyarn.connectors import filesystems

METADATA = "_metadata"


class TaskStateSnapshot(msgspec.Struct, frozen=True):
    """A task's state in one checkpoint: per operator id, the files of its named states
    (name -> path); `size` in bytes. Empty for a task without state."""

    operators: dict[str, dict[str, str]] = {}
    size: int = 0


class TaskRestore(msgspec.Struct, frozen=True):
    """What a task restarts from: its subtask's state in checkpoint `checkpoint_id`."""

    checkpoint_id: int
    snapshot: TaskStateSnapshot


class SubtaskState(msgspec.Struct, frozen=True):
    vertex_id: str
    subtask_index: int
    snapshot: TaskStateSnapshot


class CheckpointMetadata(msgspec.Struct, frozen=True):
    """A completed checkpoint: written by the JobMaster once every task acknowledged."""

    job_id: str
    checkpoint_id: int
    timestamp: int
    tasks: list[SubtaskState]

    def restore_for(self, vertex_id: str, subtask_index: int) -> TaskRestore | None:
        for task in self.tasks:
            if task.vertex_id == vertex_id and task.subtask_index == subtask_index:
                return TaskRestore(self.checkpoint_id, task.snapshot)
        return None


def default_directory(on_yarn: bool, user: str | None = None) -> str:
    """Where checkpoints go when state.checkpoints.dir is empty: HDFS under the user's
    staging directory on YARN (a TaskExecutor on another node must reach it), else the
    temporary folder."""
    if on_yarn:
        return f"hdfs:///user/{user or os.environ.get('USER', 'root')}/.flinkyarn/checkpoints"
    return os.path.join(tempfile.gettempdir(), "flinkyarn-checkpoints")


def job_directory(base: str, job_id: str) -> str:
    return f"{filesystems.normalize(base).rstrip('/')}/{job_id}"


def checkpoint_directory(job_dir: str, checkpoint_id: int) -> str:
    return f"{job_dir}/chk-{checkpoint_id}"


def write_state(job_dir: str, checkpoint_id: int, operator_id: str, subtask_index: int,
                attempt_id: str, name: str, table: pa.Table) -> tuple[str, int]:
    """Writes one named state of an operator; returns (its path, its size in bytes)."""
    fs, root = filesystems.resolve(job_dir)
    folder = f"{root}/chk-{checkpoint_id}/{operator_id}"
    filesystems.ensure_folder(fs, folder)
    path = f"{folder}/{subtask_index}-{attempt_id[:8]}-{name}.arrow"
    with fs.open_output_stream(path) as out:
        with ipc.new_file(out, table.schema) as writer:
            writer.write_table(table)
        size = out.tell()
    return _same_scheme(job_dir, root, path), size


def read_state(path: str) -> pa.Table:
    fs, inner = filesystems.resolve(path)
    with fs.open_input_file(inner) as source:
        return ipc.open_file(source).read_all()


def write_metadata(job_dir: str, metadata: CheckpointMetadata) -> str:
    """Writes chk-<n>/_metadata atomically (a temporary name, then a rename): a reader
    never sees half of it. Returns its path."""
    fs, root = filesystems.resolve(job_dir)
    folder = f"{root}/chk-{metadata.checkpoint_id}"
    filesystems.ensure_folder(fs, folder)
    temporary = f"{folder}/.{METADATA}-{uuid.uuid4().hex[:8]}"
    with fs.open_output_stream(temporary) as out:
        out.write(msgspec.json.encode(metadata))
    filesystems.rename(fs, temporary, f"{folder}/{METADATA}")
    return _same_scheme(job_dir, root, f"{folder}/{METADATA}")


def read_metadata(checkpoint_dir: str) -> CheckpointMetadata:
    """The metadata of a completed checkpoint (or savepoint) folder; ValueError naming
    the folder when it has none or it is not readable as such."""
    fs, root = filesystems.resolve(checkpoint_dir)
    path = f"{root.rstrip('/')}/{METADATA}"
    try:
        with fs.open_input_stream(path) as source:
            data = source.read()
    except (FileNotFoundError, OSError) as error:
        raise ValueError(f"{checkpoint_dir} is not a completed checkpoint: no readable "
                         f"{METADATA} ({error})") from None
    try:
        return msgspec.json.decode(data, type=CheckpointMetadata)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise ValueError(f"{checkpoint_dir}/{METADATA} is not checkpoint metadata: "
                         f"{error}") from None


def discard(job_dir: str, checkpoint_id: int) -> None:
    """Deletes a checkpoint's folder (a discarded or aborted one), if there is one."""
    fs, root = filesystems.resolve(job_dir)
    filesystems.delete(fs, f"{root}/chk-{checkpoint_id}")


def _same_scheme(url: str, root: str, path: str) -> str:
    """`path` (within the filesystem of `url`, whose root path is `root`) as a path or
    URL of the same kind as `url`."""
    if "://" not in url:
        return path
    return url[:len(url) - len(root)] + path if url.endswith(root) else path


def discard_job(job_dir: str) -> None:
    """Deletes every checkpoint of a job (its folder), if there are any."""
    fs, root = filesystems.resolve(job_dir)
    filesystems.delete(fs, root)
