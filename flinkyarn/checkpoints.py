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

A savepoint is a completed checkpoint the user asked for, copied to a folder of its own
(`<target>/savepoint-<job>-<n>/`, with its `_metadata`), which outlives the job:
`restores_from` maps it onto a job that resumes from it.
"""

from __future__ import annotations

import os
import tempfile
import uuid

import msgspec
import pyarrow as pa
import pyarrow.fs as pafs
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
    parallelism: int = 1  # of its vertex


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


def default_savepoint_directory(on_yarn: bool, user: str | None = None) -> str:
    """Where savepoints go when state.savepoints.dir is empty (beside the checkpoints)."""
    return default_directory(on_yarn, user).rsplit("checkpoints", 1)[0] + "savepoints"


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


def write_savepoint(job_dir: str, metadata: CheckpointMetadata, target: str) -> str:
    """A completed checkpoint made a savepoint: its state files copied into the folder
    `target`/savepoint-<job>-<n> (any filesystem), `_metadata` written there last with
    the new paths, and the checkpoint's own folder deleted. Returns the savepoint's
    folder, what `flinkyarn run -s` takes."""
    folder = f"{filesystems.normalize(target).rstrip('/')}/savepoint-{metadata.job_id[:8]}-" \
             f"{metadata.checkpoint_id}"
    source_prefix = checkpoint_directory(job_dir, metadata.checkpoint_id)
    source_fs, _ = filesystems.resolve(job_dir)
    target_fs, target_root = filesystems.resolve(folder)
    if target_fs.get_file_info(target_root).type != pafs.FileType.NotFound:
        raise ValueError(f"{folder} exists already")
    tasks = []
    for task in metadata.tasks:
        operators: dict[str, dict[str, str]] = {}
        for operator_id, files in task.snapshot.operators.items():
            operators[operator_id] = {}
            for name, path in files.items():
                relative = path[len(source_prefix):].lstrip("/") if path.startswith(source_prefix) \
                    else f"{operator_id}/{path.rsplit('/', 1)[-1]}"
                copied = f"{folder}/{relative}"
                _, inner_source = filesystems.resolve(path)
                _, inner_target = filesystems.resolve(copied)
                filesystems.ensure_folder(target_fs, inner_target.rsplit("/", 1)[0])
                pafs.copy_files(inner_source, inner_target, source_filesystem=source_fs,
                                destination_filesystem=target_fs)
                operators[operator_id][name] = copied
        tasks.append(SubtaskState(task.vertex_id, task.subtask_index,
                                  TaskStateSnapshot(operators, task.snapshot.size),
                                  task.parallelism))
    saved = CheckpointMetadata(metadata.job_id, metadata.checkpoint_id, metadata.timestamp, tasks)
    temporary = f"{target_root}/.{METADATA}-{uuid.uuid4().hex[:8]}"
    with target_fs.open_output_stream(temporary) as out:
        out.write(msgspec.json.encode(saved))
    filesystems.rename(target_fs, temporary, f"{target_root}/{METADATA}")
    discard(job_dir, metadata.checkpoint_id)
    return folder


def restores_from(metadata: CheckpointMetadata,
                  vertices: list[tuple[str, int, list[str]]],
                  allow_non_restored_state: bool = False) -> dict[tuple[str, int], TaskRestore]:
    """What each subtask of a job starts from when it resumes from a savepoint (or an
    external checkpoint): `vertices` are the job's (vertex id, parallelism, operator ids
    of its chain). State goes by operator id, so a changed chain keeps its operators'
    state. ValueError naming the operator for state no operator of the job claims
    (unless `allow_non_restored_state`), and for an operator whose parallelism changed
    (rescaling a savepoint is not supported yet)."""
    owner = {op: (vertex_id, parallelism) for vertex_id, parallelism, ops in vertices
             for op in ops}
    saved_parallelism = {op: task.parallelism for task in metadata.tasks
                         for op in task.snapshot.operators}
    gathered: dict[tuple[str, int], dict[str, dict[str, str]]] = {}
    size: dict[tuple[str, int], int] = {}
    for task in metadata.tasks:
        for op, files in task.snapshot.operators.items():
            if op not in owner:
                if allow_non_restored_state:
                    continue
                raise ValueError(f"the savepoint has state of operator {op}, which this job "
                                 f"does not have (give each operator a stable uid; "
                                 f"--allow-non-restored-state drops such state)")
            vertex_id, parallelism = owner[op]
            if parallelism != saved_parallelism[op]:
                raise ValueError(f"operator {op} ran with parallelism {saved_parallelism[op]} "
                                 f"in the savepoint and has {parallelism} now: rescaling "
                                 f"from a savepoint is not supported yet")
            key = (vertex_id, task.subtask_index)
            gathered.setdefault(key, {})[op] = files
            size[key] = size.get(key, 0) + task.snapshot.size
    return {key: TaskRestore(metadata.checkpoint_id, TaskStateSnapshot(ops, size[key]))
            for key, ops in gathered.items()}
