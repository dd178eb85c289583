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

Rescaling. Each named state says how it is shared out when its operator resumes at
another parallelism (a `Redistribution`, in the metadata): keyed state by key group
(flinkyarn/key_groups.py), the rest as Flink shares operator state (every subtask gets
all of it, or rows go by the subtask they belong to); state that cannot be shared out
(a bounded source's position) pins its operator's parallelism. The JobMaster hands each
new subtask every old subtask's files of such an operator (`RescaledState`) and the
task keeps its share (`redistribute`).
"""

from __future__ import annotations

import os
import re
import uuid

import msgspec
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from flinkyarn import key_groups
from flinkyarn.connectors import filesystems
from flinkyarn.key_groups import (BY_SUBTASK, DEFAULT_MAX_PARALLELISM, FIXED, KEYED, UNION,
                                  Redistribution)

METADATA = "_metadata"


class TaskStateSnapshot(msgspec.Struct, frozen=True):
    """A task's state in one checkpoint: per operator id, the files of its named states
    (name -> path), and how each is shared out (name -> Redistribution; FIXED when
    missing); `size` in bytes. Empty for a task without state. `alignment`: how long
    the task waited for the barrier on all its inputs, in seconds (a statistic)."""

    operators: dict[str, dict[str, str]] = {}
    size: int = 0
    redistribution: dict[str, dict[str, Redistribution]] = {}
    alignment: float = 0.0


class RescaledState(msgspec.Struct, frozen=True):
    """An operator's state in a checkpoint taken at another parallelism: every old
    subtask's files (old index -> name -> path), and how each name is shared out."""

    parallelism: int
    subtasks: dict[int, dict[str, str]]
    redistribution: dict[str, Redistribution]


class TaskRestore(msgspec.Struct, frozen=True):
    """What a task restarts from: its subtask's state in checkpoint `checkpoint_id`, and,
    for the operators whose parallelism changed since, their `rescaled` state."""

    checkpoint_id: int
    snapshot: TaskStateSnapshot
    rescaled: dict[str, RescaledState] = {}


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
    max_parallelism: int = DEFAULT_MAX_PARALLELISM  # the job's key groups

    def restore_for(self, vertex_id: str, subtask_index: int) -> TaskRestore | None:
        for task in self.tasks:
            if task.vertex_id == vertex_id and task.subtask_index == subtask_index:
                return TaskRestore(self.checkpoint_id, task.snapshot)
        return None


def default_directory(on_yarn: bool, user: str | None = None) -> str:
    """Where checkpoints go when state.checkpoints.dir is empty: HDFS under the user's
    staging directory on YARN (a TaskExecutor on another node must reach it), else the
    client's own folder (~/.flinkyarn or FLINKYARN_HOME): a retained checkpoint or a
    savepoint outlives the local cluster, whose scratch folders go when it stops."""
    if on_yarn:
        return f"hdfs:///user/{user or os.environ.get('USER', 'root')}/.flinkyarn/checkpoints"
    from flinkyarn import kerberos

    return str(kerberos.client_home() / "checkpoints")


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


def latest_completed(job_dir: str) -> str | None:
    """The folder of the job's newest completed checkpoint in `job_dir` (one whose
    metadata is written: see write_metadata), or None when it has none."""
    fs, root = filesystems.resolve(job_dir)
    entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    numbers = sorted((int(e.base_name[4:]) for e in entries
                      if e.type == pafs.FileType.Directory and re.fullmatch(r"chk-\d+", e.base_name)),
                     reverse=True)
    for number in numbers:
        folder = f"{root}/chk-{number}"
        if fs.get_file_info(f"{folder}/{METADATA}").type == pafs.FileType.File:
            return _same_scheme(job_dir, root, folder)
    return None


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
                                  TaskStateSnapshot(operators, task.snapshot.size,
                                                    task.snapshot.redistribution),
                                  task.parallelism))
    saved = CheckpointMetadata(metadata.job_id, metadata.checkpoint_id, metadata.timestamp, tasks,
                               metadata.max_parallelism)
    filesystems.ensure_folder(target_fs, target_root)  # also for a job without state
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
    state; an operator whose parallelism changed gets every old subtask's state in each
    new subtask (RescaledState), which keeps its share. ValueError naming the operator
    for state no operator of the job claims (unless `allow_non_restored_state`), and for
    a changed parallelism of an operator with state that cannot be shared out."""
    owner = {op: (vertex_id, parallelism) for vertex_id, parallelism, ops in vertices
             for op in ops}
    saved: dict[str, list[SubtaskState]] = {}
    for task in metadata.tasks:
        for op in task.snapshot.operators:
            saved.setdefault(op, []).append(task)
    gathered: dict[tuple[str, int], dict[str, dict[str, str]]] = {}
    shapes: dict[tuple[str, int], dict[str, dict[str, Redistribution]]] = {}
    rescaled: dict[tuple[str, int], dict[str, RescaledState]] = {}
    size: dict[tuple[str, int], int] = {}
    for op, tasks in saved.items():
        if op not in owner:
            if allow_non_restored_state:
                continue
            raise ValueError(f"the savepoint has state of operator {op}, which this job "
                             f"does not have (give each operator a stable uid; "
                             f"--allow-non-restored-state drops such state)")
        vertex_id, parallelism = owner[op]
        before = tasks[0].parallelism
        if parallelism == before:
            for task in tasks:
                key = (vertex_id, task.subtask_index)
                gathered.setdefault(key, {})[op] = task.snapshot.operators[op]
                shapes.setdefault(key, {})[op] = task.snapshot.redistribution.get(op, {})
                size[key] = size.get(key, 0) + task.snapshot.size
            continue
        kinds = tasks[0].snapshot.redistribution.get(op, {})
        pinned = sorted(name for name in tasks[0].snapshot.operators[op]
                        if kinds.get(name, Redistribution()).kind == FIXED)
        if pinned:
            raise ValueError(f"operator {op} ran with parallelism {before} in the savepoint "
                             f"and has {parallelism} now, but its state {', '.join(pinned)} "
                             f"cannot be shared out at another parallelism (a bounded "
                             f"source's position): resume it at parallelism {before}")
        state = RescaledState(before, {t.subtask_index: t.snapshot.operators[op] for t in tasks},
                              kinds)
        share = sum(t.snapshot.size for t in tasks) // parallelism
        for index in range(parallelism):
            key = (vertex_id, index)
            rescaled.setdefault(key, {})[op] = state
            size[key] = size.get(key, 0) + share
    return {key: TaskRestore(metadata.checkpoint_id,
                             TaskStateSnapshot(gathered.get(key, {}), size[key],
                                               shapes.get(key, {})),
                             rescaled.get(key, {}))
            for key in size}


def redistribute(state: RescaledState, max_parallelism: int, parallelism: int,
                 index: int) -> dict[str, pa.Table]:
    """Subtask `index` of `parallelism`'s share of an operator's rescaled state, read from
    the old subtasks' files: per name, its rows (see Redistribution); keyed state only
    from the old subtasks whose key groups overlap its own."""
    mine = key_groups.key_group_range(max_parallelism, parallelism, index)
    shares: dict[str, pa.Table] = {}
    names = dict.fromkeys(name for files in state.subtasks.values() for name in files)
    for name in names:
        how = state.redistribution.get(name, Redistribution())
        tables = []
        for old, files in sorted(state.subtasks.items()):
            if name not in files:
                continue
            if how.kind == KEYED:
                theirs = key_groups.key_group_range(max_parallelism, state.parallelism, old)
                if theirs.stop <= mine.start or mine.stop <= theirs.start:
                    continue
            tables.append(read_state(files[name]))
        if not tables:
            continue
        table = pa.concat_tables(tables, promote_options="permissive")
        if how.kind == KEYED:
            groups = key_groups.key_groups(table, how.key_columns, max_parallelism)
            table = table.filter(pa.array((groups >= mine.start) & (groups < mine.stop)))
        elif how.kind == BY_SUBTASK:
            owners = table.column("subtask").cast(pa.int64()).to_numpy()
            table = table.filter(pa.array(owners % parallelism == index))
        elif how.kind != UNION:
            raise ValueError(f"state {name!r} cannot be shared out at another parallelism")
        shares[name] = table
    return shares
