"""Paths and URLs to pyarrow filesystems.

    local paths, file:///path             pyarrow.fs.LocalFileSystem
    hdfs://nameservice/path, hdfs:///path  HDFS through hdfs-native (flinkyarn/hdfs.py),
    viewfs://cluster/path                  wrapped for pyarrow

`hdfs:///path` is on the default filesystem of the Hadoop client configuration in
$HADOOP_CONF_DIR; a nameservice, a NameNode's host:port or a viewfs mount table is
resolved as Hadoop's own client resolves it. Any other scheme raises ValueError.

Functions here are pure apart from the filesystem calls and safe to call from any thread.
"""

from __future__ import annotations

import errno
import os
import uuid
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from flinkyarn import hdfs


def normalize(path: str | os.PathLike[str]) -> str:
    """`path` made independent of the current folder: a local path becomes absolute
    (operators are made on the client and run elsewhere); a URL stays as it is."""
    text = os.fspath(path)
    if "://" in text:
        return text
    return os.path.abspath(os.path.expanduser(text))


def resolve(path: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a local path or a `file://`, `hdfs://` or
    `viewfs://` URL."""
    text = os.fspath(path)
    if "://" not in text:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text))
    url = urlparse(text)
    if url.scheme == "file":
        return pafs.LocalFileSystem(), url.path or "/"
    if url.scheme in hdfs.SCHEMES:
        return pafs.PyFileSystem(pafs.FSSpecHandler(hdfs.filesystem(text))), hdfs.path_of(text)
    raise ValueError(f"unsupported filesystem {url.scheme!r} in {text!r}: "
                     "use a local path, file://, hdfs:// or viewfs://")


def read_parquet(path: str | os.PathLike[str]) -> Any:
    """The whole Parquet output at `path` (a file or a job's output folder) as one
    pyarrow Table, for a client that reads a job's result.

    Read on the calling thread: a read through Arrow's thread pool over HDFS's Python file
    handles leaves pool threads that can abort the interpreter at exit ("terminate called
    without an active exception", apache/arrow#34314, #39862); a client that printed the
    right result then failed with SIGABRT."""
    import pyarrow.parquet as pq

    fs, where = resolve(path)
    return pq.read_table(where, filesystem=fs, use_threads=False)


def list_files(fs: pafs.FileSystem, path: str) -> list[str]:
    """The data files at `path`: [path] for a file; for a folder, its files at any depth,
    sorted, leaving out every name under it that starts with `_` or `.` (markers such as
    _SUCCESS, hidden and in-progress files). FileNotFoundError naming `path` if absent."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no such file or folder: {path}")
    if info.type == pafs.FileType.File:
        return [path]
    root = path.rstrip("/")
    found = []
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if entry.type != pafs.FileType.File:
            continue
        relative = entry.path[len(root):].lstrip("/") if entry.path.startswith(root) else entry.base_name
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        found.append(entry.path)
    return sorted(found)


def ensure_folder(fs: pafs.FileSystem, path: str) -> None:
    """Creates the folder `path` and its parents if missing."""
    fs.create_dir(path, recursive=True)


def replace(fs: pafs.FileSystem, source: str, target: str) -> None:
    """Renames `source` to `target`, replacing `target` if it exists, in one step (on
    HDFS, the NameNode's rename with overwrite). Raises OSError naming both if
    afterwards `source` is still there or `target` is missing."""
    client = _hdfs_client(fs)
    if client is not None:
        client.rename(source, target, True)
    else:
        fs.move(source, target)
    _check_renamed(fs, source, target)


def _hdfs_client(fs: pafs.FileSystem) -> Any | None:
    """The hdfs-native client under a filesystem of `resolve`; None for a local one."""
    return hdfs.client_of(getattr(getattr(fs, "handler", None), "fs", None))


def _check_renamed(fs: pafs.FileSystem, source: str, target: str) -> None:
    after = fs.get_file_info([source, target])
    if after[0].type != pafs.FileType.NotFound or after[1].type == pafs.FileType.NotFound:
        raise OSError(f"renaming {source} to {target} failed")


def rename(fs: pafs.FileSystem, source: str, target: str) -> None:
    """Renames the file or folder `source` to `target`, which must not exist (on HDFS
    a folder renamed onto an existing folder would move inside it). Raises OSError
    naming both if afterwards `target` is missing or `source` is still there (HDFS may
    answer a failed rename with `false` instead of an error)."""
    fs.move(source, target)
    _check_renamed(fs, source, target)


def rename_exclusive(fs: pafs.FileSystem, source: str, target: str) -> None:
    """Renames the folder `source` to `target` in one step that fails with
    FileExistsError when `target` exists (HDFS: the NameNode's rename without
    overwrite; local: rename(2), which refuses a target folder that is not empty, so
    `source` must not be empty). Checked as `rename`."""
    client = _hdfs_client(fs)
    try:
        if client is not None:
            client.rename(source, target, False)
        else:
            os.rename(source, target)
    except OSError as error:
        if isinstance(error, FileExistsError) or error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(f"{target} exists") from None
        raise
    _check_renamed(fs, source, target)


def delete(fs: pafs.FileSystem, path: str) -> None:
    """Deletes the file or the folder (with its content) at `path`, if there is one.
    Raises OSError naming `path` if it is still there afterwards (HDFS may answer a
    refused delete with `false` instead of an error)."""
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.Directory:
        fs.delete_dir(path)
    elif kind != pafs.FileType.NotFound:
        fs.delete_file(path)
    else:
        return
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise OSError(f"deleting {path} failed: it is still there")


def delete_empty_folder(fs: pafs.FileSystem, path: str) -> None:
    """Deletes the folder `path` if it is empty; OSError naming it if it has content
    (someone wrote into it) or is still there afterwards."""
    if fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        raise OSError(f"{path} is not empty")
    delete(fs, path)


def create_empty_file(fs: pafs.FileSystem, path: str) -> None:
    """Creates (or truncates) the empty file `path`, such as a _SUCCESS marker."""
    with fs.open_output_stream(path):
        pass


class WholeFiles:
    """A folder (a local path or an hdfs:// URL) of small files that are each written
    whole under a hidden name, then renamed: a reader sees all of a file or nothing, and
    a listing leaves out the hidden ones."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._fs, self._root = resolve(folder)

    def write(self, relative: str, data: bytes) -> None:
        path = f"{self._root}/{relative}"
        parent, _, name = path.rpartition("/")
        ensure_folder(self._fs, parent)
        temporary = f"{parent}/.{name}-{uuid.uuid4().hex[:8]}"
        with self._fs.open_output_stream(temporary) as out:
            out.write(data)
        replace(self._fs, temporary, path)

    def read(self, relative: str) -> bytes:
        with self._fs.open_input_stream(f"{self._root}/{relative}") as source:
            data: bytes = source.read()
        return data

    def names(self, relative: str = "") -> list[str]:
        """The visible names in a folder of it (none when it does not exist), sorted."""
        folder = f"{self._root}/{relative}".rstrip("/")
        entries = self._fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        return sorted(e.base_name for e in entries if not e.base_name.startswith("."))

    def delete(self, relative: str) -> None:
        """Deletes a file of it, if there is one (checked as `delete`)."""
        delete(self._fs, f"{self._root}/{relative}")
