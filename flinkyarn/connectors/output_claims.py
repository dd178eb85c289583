"""One writer per output folder: the Dispatcher claims each output folder of a job before
the job runs, and the JobMaster releases the claims once the job's outputs are final.
Of two jobs that would write one folder at once (two clients whose checks both passed,
a session given the same program twice), exactly one runs; the other is refused with
an error naming the folder and the job that holds it.

A claim is the hidden sibling folder `<parent>/.<name>.flinkyarn-lock` holding one empty
file whose name says who holds it:

    held-by-job-<job id>-of-<application or "local">-pid-<pid>@<host>

It is made in one step that fails if the claim exists: a folder with that file is made
under a unique name, then renamed to the claim's name (a rename that refuses an
existing target: the NameNode's, or rename(2), which refuses a folder that is not
empty). Nothing but names is written, so on HDFS a claim costs no data block (and none
of the client's pause when it closes a file; see docs/install.md).

A claim held by an earlier attempt of the same job is taken over. A claim whose holder
is gone (`alive` says so: its job ended in this AppMaster, its YARN application ended,
or its local process is not running on this host) is broken and made again. Every
function does blocking filesystem calls.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

import pyarrow.fs as pafs

from flinkyarn.connectors import filesystems, outputs
from flinkyarn.jobgraph import FileOutput

LOCK_SUFFIX = ".flinkyarn-lock"
_HOLDER = re.compile(r"held-by-job-(?P<job>[^-]+)-of-(?P<application>.+)-pid-(?P<pid>\d+)"
                     r"@(?P<host>.+)$")


@dataclass(frozen=True)
class Holder:
    job_id: str
    application: str  # the YARN application id; "local" for a local cluster
    pid: int
    host: str

    @classmethod
    def this_process(cls, job_id: str, application: str) -> "Holder":
        return cls(job_id, application or "local", os.getpid(), socket.gethostname())

    @property
    def file_name(self) -> str:
        return f"held-by-job-{self.job_id}-of-{self.application}-pid-{self.pid}@{self.host}"

    @classmethod
    def of_file_name(cls, name: str) -> "Holder | None":
        found = _HOLDER.match(name)
        if found is None:
            return None
        return cls(found["job"], found["application"], int(found["pid"]), found["host"])

    def describe(self) -> str:
        where = (f"in a local cluster (pid {self.pid} on {self.host})"
                 if self.application == "local" else f"of {self.application}")
        return f"job {self.job_id} {where}"


class OutputBusyError(ValueError):
    """Another running job holds the claim on an output folder: the job is refused."""


@dataclass(frozen=True)
class Claims:
    """The claims a job holds: what its JobMaster releases once its outputs are final."""

    outputs: list[FileOutput]
    holder: Holder

    def release(self) -> None:
        release_all(self.outputs, self.holder)


def claim_path(output: FileOutput) -> str:
    """Where the claim on `output`'s folder is, in the folder's form (path or URL)."""
    return outputs.hidden_sibling(output.path, LOCK_SUFFIX)


def claim_all(outputs: Iterable[FileOutput], holder: Holder,
              alive: Callable[[Holder], bool]) -> Claims:
    """Claims every output folder for `holder`. On a refusal releases those claimed
    before and raises OutputBusyError naming the folder and its holder; other errors
    (the filesystem) propagate, also after releasing."""
    claimed: list[FileOutput] = []
    try:
        for output in outputs:
            if output.staging is None:
                continue  # the root of a filesystem: nothing beside it to claim with
            claim(output, holder, alive)
            claimed.append(output)
    except BaseException:
        release_all(claimed, holder)
        raise
    return Claims(claimed, holder)


def claim(output: FileOutput, holder: Holder, alive: Callable[[Holder], bool]) -> None:
    """Claims `output`'s folder for `holder` (see the module docstring)."""
    fs, lock = filesystems.resolve(claim_path(output))
    for _ in range(3):  # a broken claim may be made again by another job first
        parent, name = lock.rsplit("/", 1)
        draft = f"{parent}/{name}.draft-{uuid.uuid4().hex[:12]}"
        filesystems.ensure_folder(fs, draft)
        try:
            filesystems.create_empty_file(fs, f"{draft}/{holder.file_name}")
            filesystems.rename_exclusive(fs, draft, lock)
            return
        except FileExistsError:
            pass
        finally:
            filesystems.delete(fs, draft)  # gone already once renamed
        current = holder_of(output)
        if current is None:
            continue  # released meanwhile
        if current.job_id == holder.job_id or not alive(current):
            filesystems.delete(fs, lock)  # an earlier attempt of this job's, or stale
            continue
        raise OutputBusyError(f"output {output.path} is being written by {current.describe()}"
                              f" (its claim: {claim_path(output)})")
    raise OutputBusyError(f"output {output.path}: its claim {claim_path(output)} keeps "
                          f"changing hands; try again")


def holder_of(output: FileOutput) -> Holder | None:
    """Who holds the claim on `output`'s folder; None when no one does. A claim folder
    whose holder cannot be read is held by an unknown, live holder (a claim being
    broken right now), so it is never taken for stale."""
    fs, lock = filesystems.resolve(claim_path(output))
    entries = fs.get_file_info(pafs.FileSelector(lock, allow_not_found=True))
    if not entries and fs.get_file_info(lock).type == pafs.FileType.NotFound:
        return None
    for entry in entries:
        found = Holder.of_file_name(entry.base_name)
        if found is not None:
            return found
    return Holder("unknown", "unknown", 0, "unknown")


def release_all(outputs: Iterable[FileOutput], holder: Holder) -> None:
    """Releases `holder`'s claims on the outputs' folders (a claim someone else holds now
    stays); raises the first error after trying every one."""
    errors = []
    for output in outputs:
        try:
            if holder_of(output) == holder:
                fs, lock = filesystems.resolve(claim_path(output))
                filesystems.delete(fs, lock)
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


def holder_alive(holder: Holder, application: str, job_running: Callable[[str], bool]) -> bool:
    """Whether `holder` may still write its folder, asked by a process of `application`
    ("" for a local cluster) whose own jobs `job_running` knows: a job of this
    application runs while it has no result; another YARN application while the
    ResourceManager does not say it ended; a local cluster while its process runs on
    this host. Whatever cannot be asked counts as alive: a claim is broken only when
    its holder is known to be gone."""
    if application and holder.application == application:
        return job_running(holder.job_id)
    if holder.application.startswith("application_"):
        from flinkyarn import hadoop

        try:
            state = hadoop.rm_request(f"/ws/v1/cluster/apps/{holder.application}")["app"]["state"]
        except (OSError, KeyError, TypeError, ValueError):
            return True
        return state not in ("FINISHED", "FAILED", "KILLED")
    if holder.application == "local" and holder.host == socket.gethostname():
        if holder.pid == os.getpid():
            return job_running(holder.job_id)
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's: it runs
            pass
    return True
