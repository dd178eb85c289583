"""A job's file outputs under Flink's write modes (FileSystem.WriteMode).

NO_OVERWRITE (the default). `check` runs in the client before anything is started or
submitted, for every target. It refuses an output whose path is a file, or a folder
with anything in it (hidden names too); a missing or empty folder is fine. It costs
one status call and, for a folder, one listing per output.

OVERWRITE. The sink's subtasks write into `staging`, a hidden sibling of the target
(`<parent>/.<name>.staging-<random>`, named on the client when the sink is made, so
the pickled sink and the JobGraph's FileOutput agree), and never touch the target
while the job runs. When every task has FINISHED, the JobMaster calls `commit`: the
old target, if any, is renamed to a hidden sibling `.<name>.old-<random>`, the staging
folder is renamed to the target, and the old one is deleted. When the job fails or is
canceled (or a commit fails) it calls `discard`, which deletes the staging folder; the
target is untouched. A reader never sees a mix of two runs; between the two renames it
may see no folder at the target (an HDFS rename does not replace). If the process ends
between them, the old content is in the `.old-` sibling. A job with several outputs
swaps them one after the other, not all at once.

Readers of the parent folder skip the hidden siblings (see filesystems.list_files).
Every function does blocking filesystem calls: the JobMaster runs them off its loop.
"""

from __future__ import annotations

import logging
import uuid
from typing import Iterable
from urllib.parse import urlparse

import pyarrow.fs as pafs

from flinkyarn.connectors import filesystems
from flinkyarn.jobgraph import FileOutput, OutputExistsError, OutputMode

log = logging.getLogger(__name__)


def staging_folder(path: str) -> str:
    """A new, unique hidden sibling of the (normalized) folder `path` for OVERWRITE, in
    the same form (local path or URL). ValueError for the root of a filesystem, which
    has no sibling."""
    if "://" in path:
        url = urlparse(path)
        if url.path.rstrip("/") == "":
            raise ValueError(f"{path} is the root of a filesystem: mode=\"overwrite\" "
                             f"needs a folder to replace")
    elif path.rstrip("/") == "":
        raise ValueError("/ cannot be overwritten: mode=\"overwrite\" needs a folder to replace")
    return _hidden_sibling(path, "staging")


def _hidden_sibling(path: str, kind: str) -> str:
    parent, name = path.rstrip("/").rsplit("/", 1)
    return f"{parent}/.{name}.{kind}-{uuid.uuid4().hex[:12]}"


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


def commit(output: FileOutput) -> str:
    """Swaps an OVERWRITE output's staging folder in for its target (see the module
    docstring); returns what it did, for the log. On an error the target holds either
    its old content or, if even moving that back failed, nothing (the error's note
    says where the old content is); the staging folder is left for `discard`."""
    if output.staging is None:
        raise ValueError(f"output {output.path} has no staging folder to commit")
    fs, target = filesystems.resolve(output.path)
    _, staging = filesystems.resolve(output.staging)
    # Every subtask creates it when it starts: missing only if no sink subtask ran.
    filesystems.ensure_folder(fs, staging)
    old = None
    if fs.get_file_info(target).type != pafs.FileType.NotFound:
        old = _hidden_sibling(target, "old")
        filesystems.rename(fs, target, old)
    try:
        filesystems.rename(fs, staging, target)
    except Exception as error:
        if old is not None:
            try:
                filesystems.rename(fs, old, target)
            except Exception as restore_error:
                error.add_note(f"the previous content of {output.path} is in {old} "
                               f"(moving it back failed: {restore_error})")
        raise
    if old is None:
        return f"committed {output.path} (new)"
    try:
        filesystems.delete(fs, old)
    except Exception as error:  # the new content is in place: the job still succeeds
        log.warning("the previous content of %s, renamed to %s, could not be deleted: %s",
                    output.path, old, error)
    return f"committed {output.path} (replaced its previous content)"


def discard(output: FileOutput) -> None:
    """Deletes an OVERWRITE output's staging folder, if there is one."""
    if output.staging is None:
        return
    fs, staging = filesystems.resolve(output.staging)
    filesystems.delete(fs, staging)


def staged(outputs: Iterable[FileOutput]) -> list[FileOutput]:
    """The outputs the JobMaster commits or discards (those with a staging folder)."""
    return [output for output in outputs if output.staging is not None]

