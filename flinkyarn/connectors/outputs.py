"""A job's file outputs, committed for the whole job as Hadoop's FileOutputCommitter
does, under Flink's write modes (FileSystem.WriteMode).

Every file sink gets a staging folder, a hidden sibling of its target
(`<parent>/.<name>.staging-<random>`, named on the client when the sink is made, so the
pickled sink and the JobGraph's FileOutput agree); its subtasks write their part files
there and never touch the target while the job runs. When every task has FINISHED, the
JobMaster commits the job's outputs before anyone hears "FINISHED" (output_commit):

    NO_OVERWRITE (default)  the staging folder is renamed to the target, which must still
                            be missing or empty (`check` ran on the client);
    OVERWRITE               the old target, if any, is renamed to a hidden sibling
                            `.<name>.old-<random>`, the staging folder to the target;

then `_SUCCESS` (an empty file) is written into each target, and the old contents are
deleted. Should any step fail, the outputs already committed are put back as they were
(`undo`) and the job FAILS naming the output. A failed or canceled job's staging
folders are deleted (`discard`): its targets are as they were before the run.

A checkpointed job's NO_OVERWRITE sinks write into the target itself, each part file
committed by the checkpoint that covers it (two-phase commit, connectors/files.py): a
reader sees what the completed checkpoints wrote; at the end of the input the job's
commit only adds `_SUCCESS`. (A job stopped with a savepoint gets none: it goes on.)

Readers skip names that start with `.` or `_` (see filesystems.list_files; pyarrow does
the same). Every function does blocking filesystem calls: the JobMaster runs them off
its loop.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlparse

import pyarrow.fs as pafs

from flinkyarn.connectors import filesystems
from flinkyarn.jobgraph import FileOutput, OutputExistsError, OutputMode

log = logging.getLogger(__name__)


def staging_folder(path: str) -> str:
    """A new, unique hidden sibling of the (normalized) folder `path` for the sink's
    subtasks to write into, in the same form (local path or URL). ValueError for the
    root of a filesystem, which has no sibling."""
    if "://" in path:
        url = urlparse(path)
        if url.path.rstrip("/") == "":
            raise ValueError(f"{path} is the root of a filesystem: mode=\"overwrite\" "
                             f"needs a folder to replace")
    elif path.rstrip("/") == "":
        raise ValueError("/ cannot be overwritten: mode=\"overwrite\" needs a folder to replace")
    return _hidden_sibling(path, "staging")


def hidden_sibling(path: str, suffix: str) -> str:
    """`<parent>/.<name><suffix>` beside the folder `path`, in its form (path or URL)."""
    parent, name = path.rstrip("/").rsplit("/", 1)
    return f"{parent}/.{name}{suffix}"


def _hidden_sibling(path: str, kind: str) -> str:
    return hidden_sibling(path, f".{kind}-{uuid.uuid4().hex[:12]}")


def check(outputs: Iterable[FileOutput]) -> None:
    """Raises OutputExistsError for the first NO_OVERWRITE output that is a file or a
    folder with content; other errors (unreachable filesystem) propagate."""
    for output in outputs:
        if output.mode is not OutputMode.NO_OVERWRITE:
            continue
        fs, path = filesystems.resolve(output.path)
        kind = fs.get_file_info(path).type
        if kind == pafs.FileType.NotFound:
            continue
        if kind != pafs.FileType.Directory:
            raise OutputExistsError(output, "exists and is a file")
        if fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
            raise OutputExistsError(output, "exists and is not empty")


SUCCESS_MARKER = "_SUCCESS"


@dataclass(frozen=True)
class Committed:
    """An output whose staging folder is in place at its target: what `undo` puts back."""

    output: FileOutput
    moved: bool            # the staging folder became the target (else: written in place)
    was_empty: bool        # the target was an empty folder before (recreated by `undo`)
    old: str | None        # OVERWRITE: where the previous content is until `finish`


def writes_in_place(output: FileOutput, checkpointed: bool) -> bool:
    """Whether the sink's subtasks write into the target itself: a checkpointed job's
    NO_OVERWRITE output, or one without a staging folder (the root of a filesystem,
    or a graph from an older client)."""
    return output.staging is None or (checkpointed and output.mode is OutputMode.NO_OVERWRITE)


def commit(output: FileOutput, checkpointed: bool, recovering: bool = False) -> Committed:
    """Puts the output's staging folder in place at its target (see the module
    docstring). On an error the target is as it was, or, if even restoring it failed,
    the error's note says where the previous content is; the staging folder is left
    for `discard`. `recovering`: an earlier AppMaster attempt began this commit and may
    have done this output (its staging folder is gone, its target there) or left the
    previous content of an OVERWRITE target in a hidden sibling, which goes."""
    if writes_in_place(output, checkpointed):
        return Committed(output, moved=False, was_empty=False, old=None)
    assert output.staging is not None
    fs, target = filesystems.resolve(output.path)
    _, staging = filesystems.resolve(output.staging)
    if recovering:
        _drop_old_content(fs, target)
        if fs.get_file_info(staging).type == pafs.FileType.NotFound:
            if fs.get_file_info(target).type == pafs.FileType.NotFound:
                raise FileNotFoundError(f"neither {output.staging} nor {output.path} exists: "
                                        f"the output of the earlier attempt is lost")
            return Committed(output, moved=False, was_empty=False, old=None)  # done before
    # Every subtask creates it when it starts: missing only if no sink subtask ran.
    filesystems.ensure_folder(fs, staging)
    _drop_hidden_files(fs, staging)
    kind = fs.get_file_info(target).type
    old, was_empty = None, False
    if output.mode is OutputMode.NO_OVERWRITE:
        if kind == pafs.FileType.File:
            raise OutputExistsError(output, "is a file now (it was not when the job was submitted)")
        if kind == pafs.FileType.Directory:
            if fs.get_file_info(pafs.FileSelector(target)):
                raise OutputExistsError(output, "has content now (someone wrote into it "
                                                "while the job ran)")
            filesystems.delete_empty_folder(fs, target)
            was_empty = True
    elif kind != pafs.FileType.NotFound:
        old = _hidden_sibling(target, "old")
        filesystems.rename(fs, target, old)
    try:
        filesystems.rename(fs, staging, target)
    except Exception as error:
        _restore(output, fs, target, old, was_empty, error)
        raise
    return Committed(output, moved=True, was_empty=was_empty, old=old)


def _drop_old_content(fs: pafs.FileSystem, target: str) -> None:
    """Deletes the hidden siblings `.<name>.old-*` of `target`: previous contents an
    interrupted OVERWRITE commit left behind."""
    parent, prefix = hidden_sibling(target, ".old-").rsplit("/", 1)
    for entry in fs.get_file_info(pafs.FileSelector(parent or "/", allow_not_found=True)):
        if entry.base_name.startswith(prefix):
            filesystems.delete(fs, entry.path)


def _drop_hidden_files(fs: pafs.FileSystem, folder: str) -> None:
    """Deletes the hidden files in a staging folder (in-progress files of attempts that
    failed or were cut off): the target gets the part files only."""
    for entry in fs.get_file_info(pafs.FileSelector(folder)):
        if entry.base_name.startswith("."):
            filesystems.delete(fs, entry.path)


def _restore(output: FileOutput, fs: pafs.FileSystem, target: str, old: str | None,
             was_empty: bool, error: BaseException) -> None:
    """Puts the target's previous state back after a failed commit step."""
    try:
        _put_back(fs, target, old, was_empty)
    except Exception as restore_error:
        where = f" is in {old}" if old is not None else " was an empty folder"
        error.add_note(f"the previous content of {output.path}{where} (restoring it "
                       f"failed: {restore_error})")


def mark(committed: Committed) -> None:
    """Writes `_SUCCESS` into a committed output's target."""
    fs, target = filesystems.resolve(committed.output.path)
    filesystems.ensure_folder(fs, target)  # in place: a job that wrote nothing has none
    filesystems.create_empty_file(fs, f"{target}/{SUCCESS_MARKER}")


def undo(committed: Committed) -> None:
    """Puts a committed output back as it was before the run (the new content goes
    back to the staging folder, for `discard`); raises if a step fails."""
    output = committed.output
    fs, target = filesystems.resolve(output.path)
    if not committed.moved:
        filesystems.delete(fs, f"{target}/{SUCCESS_MARKER}")
        return
    assert output.staging is not None
    _, staging = filesystems.resolve(output.staging)
    filesystems.rename(fs, target, staging)
    _put_back(fs, target, committed.old, committed.was_empty)


def _put_back(fs: pafs.FileSystem, target: str, old: str | None, was_empty: bool) -> None:
    """Puts what `target` held before the commit back: the previous content renamed to
    `old`, or the empty folder it was."""
    if old is not None:
        filesystems.rename(fs, old, target)
    elif was_empty:
        filesystems.ensure_folder(fs, target)


def finish(committed: Committed) -> str:
    """Deletes an OVERWRITE output's previous content once every output is committed;
    returns what the commit did, for the log. A failed delete is only logged: the new
    content is in place."""
    path = committed.output.path
    if not committed.moved:
        return f"marked {path} (written in place)"
    if committed.old is None:
        return f"committed {path} (new)"
    fs, _ = filesystems.resolve(path)
    try:
        filesystems.delete(fs, committed.old)
    except Exception as error:
        log.warning("the previous content of %s, renamed to %s, could not be deleted: %s",
                    path, committed.old, error)
    return f"committed {path} (replaced its previous content)"


def discard(output: FileOutput) -> None:
    """Deletes an output's staging folder, if there is one."""
    if output.staging is None:
        return
    fs, staging = filesystems.resolve(output.staging)
    filesystems.delete(fs, staging)
