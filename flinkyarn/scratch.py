"""Where a process keeps its scratch files: spilled blocking partitions, tasks' scratch
folders, Spark's local dirs and its JVM's temporary folder, and whatever Python, pyspark
and py4j put in the temporary folder.

The scratch roots, first match wins (`scratch_roots`):

1. option `io.tmp.dirs`, when set (comma-separated folders);
2. `LOCAL_DIRS`, in a YARN container (YARN sets it, comma-separated, and removes the
   folders when the application ends, also after a container was killed);
3. `tempfile.gettempdir()`: `TMPDIR`, else the system's temporary folder. The local
   target sets `TMPDIR` of its processes to a folder of the cluster's work dir.

A process makes its own folder in each root (`ProcessScratch`) and removes them when it
ends cleanly. `process_scratch` also makes a folder of the first one the process's
temporary folder (`TMPDIR`), which child processes (Spark's JVM and its Python workers)
inherit. A process killed outright leaves its folders behind: YARN removes them with the
application's `LOCAL_DIRS`, `LocalCluster.stop()` with the cluster's work dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from flinkyarn import options
from flinkyarn.configuration import Configuration

LOCAL_DIRS_ENV = "LOCAL_DIRS"
TMPDIR_ENV = "TMPDIR"


def scratch_roots(conf: Configuration, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The folders this process may put scratch files in, best first; never empty.
    `environ` defaults to the process's environment."""
    environ = os.environ if environ is None else environ
    for listed in (conf.get(options.IO_TMP_DIRS), environ.get(LOCAL_DIRS_ENV, "")):
        roots = [Path(part.strip()) for part in listed.split(",") if part.strip()]
        if roots:
            return roots
    return [Path(tempfile.gettempdir())]


@dataclass(frozen=True)
class ProcessScratch:
    """One process's own folders, one in each scratch root. `root` (in the first) holds
    the process's scratch files; `dirs` is every folder, to spread Spark's local dirs."""

    dirs: tuple[Path, ...]

    @classmethod
    def create(cls, conf: Configuration, prefix: str,
               environ: Mapping[str, str] | None = None) -> ProcessScratch:
        """Makes a fresh folder named `prefix`... in each scratch root (roots named by
        io.tmp.dirs are created if missing)."""
        dirs = []
        for root in scratch_roots(conf, environ):
            root.mkdir(parents=True, exist_ok=True)
            dirs.append(Path(tempfile.mkdtemp(prefix=prefix, dir=root)))
        return cls(tuple(dirs))

    @property
    def root(self) -> Path:
        return self.dirs[0]

    @property
    def temp_dir(self) -> Path:
        """The process's temporary folder (TMPDIR), inside `root`."""
        return self.root / "tmp"

    def remove(self) -> None:
        for folder in self.dirs:
            shutil.rmtree(folder, ignore_errors=True)


def use_as_temp_dir(folder: Path) -> None:
    """Makes `folder` (created if missing) this process's temporary folder: for Python's
    `tempfile` from now on and, through TMPDIR, for every child process started later."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[TMPDIR_ENV] = str(folder)
    tempfile.tempdir = None  # gettempdir() caches its answer: make it read TMPDIR again


@contextlib.contextmanager
def process_scratch(conf: Configuration, prefix: str) -> Iterator[ProcessScratch]:
    """For a process's main function: its `ProcessScratch`, with `temp_dir` as its
    temporary folder, removed on the way out. Changes the process's environment (TMPDIR),
    so only entry points of processes call it."""
    scratch = ProcessScratch.create(conf, prefix)
    saved = os.environ.get(TMPDIR_ENV)
    use_as_temp_dir(scratch.temp_dir)
    try:
        yield scratch
    finally:
        if saved is None:
            os.environ.pop(TMPDIR_ENV, None)
        else:
            os.environ[TMPDIR_ENV] = saved
        tempfile.tempdir = None
        scratch.remove()
