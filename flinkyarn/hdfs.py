"""HDFS as flinkyarn's processes speak it: through hdfs-native, a client of HDFS's own
protocols (the NameNode's RPC, the DataNodes' data transfer) written in Rust.

It reads the cluster's core-site.xml and hdfs-site.xml from $HADOOP_CONF_DIR as Hadoop's
Java client does, and with them:
- a nameservice (`hdfs://prod-ns`, dfs.nameservices and dfs.ha.namenodes.*): it asks
  the NameNodes in turn and goes on with the active one, also after a failover;
- a `viewfs://` mount table (fs.viewfs.mounttable.*);
- a secure cluster (hadoop.security.authentication=kerberos): SASL with the process's
  HDFS delegation token where it has one (a YARN container: the file that
  HADOOP_TOKEN_FILE_LOCATION names), else with its Kerberos ticket (KRB5CCNAME, through
  the system's libgssapi_krb5); block access tokens and SASL with the DataNodes. A
  connection to a NameNode, once authenticated, stays open and serves on after the
  token's end (Hadoop's Java client drops one idle for 10 s);
- reads and writes straight from and to the DataNodes.

hdfs-native asks each NameNode of a nameservice once per call. While none is active (a
failover under way, the active one killed and the other not yet made active) each call
would fail at once; Hadoop's Java client tries again, with growing pauses, for minutes
(dfs.client.failover.max.attempts, 15). So does `_FailingOver` here, for a refusal that
says the call was not done (StandbyException, a refused connection), up to
FAILOVER_PATIENCE; it also turns the NameNode's refusals into OSErrors
(PermissionError for an AccessControlException), with their first line only.

`filesystem` hands out one fsspec filesystem per cluster (scheme and authority), process
and identity; pyarrow gets it wrapped (connectors/filesystems.py). A client is safe to use
from any thread. One made before a fork is never used after it (its runtime's threads do
not survive one): each process makes its own.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from flinkyarn import hadoop, kerberos, retry
from flinkyarn.kerberos import first_line

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

# How long a call waits for a nameservice to have an active NameNode again (Hadoop's
# client: 15 failovers, 0.5 s doubling up to 15 s apart, some 2.5 min).
FAILOVER_PATIENCE = 150.0
FAILOVER_PAUSES = retry.Backoff(0.25, 10.0)

# The schemes this module serves; a URL of another goes elsewhere (connectors/filesystems).
SCHEMES = ("hdfs", "viewfs")

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], AbstractFileSystem] = {}
# Bumped when the process is handed newer delegation tokens (kerberos.install_tokens):
# the next filesystem asked for is a new client that authenticates with them.
_generation = 0


def is_hdfs(url: str) -> bool:
    """Whether `url` names a file of a Hadoop filesystem this module serves."""
    return urlparse(url).scheme in SCHEMES


def path_of(url: str) -> str:
    """The path part of an `hdfs://` or `viewfs://` URL, as a filesystem of `filesystem`
    takes it."""
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES:
        raise ValueError(f"not an hdfs:// or viewfs:// URL: {url!r}")
    return parsed.path or "/"


def filesystem(url: str | None = None) -> AbstractFileSystem:
    """The fsspec filesystem of the Hadoop filesystem `url` is on (its scheme and
    authority; `hdfs:///path` and None: the default filesystem, fs.defaultFS)."""
    cluster = _cluster(url)
    key = (cluster, os.getpid(), _generation, os.environ.get("HADOOP_TOKEN_FILE_LOCATION"),
           os.environ.get("KRB5CCNAME"), os.environ.get("HADOOP_USER_NAME"))
    with _lock:
        found = _clients.get(key)
        if found is None:
            for stale in [k for k in _clients if k[0] == cluster]:
                del _clients[stale]  # another process's, or an older identity's
            hadoop.conf_dir()  # hdfs-native reads its site files: a clear error without
            _check_identity()
            parsed = urlparse(cluster)
            found = _filesystem_class(parsed.scheme)(parsed.hostname, parsed.port,
                                                     skip_instance_cache=True)
            # (fsspec's methods call it as `client`: each call goes through the wrapper)
            found.client = _FailingOver(found.client, cluster)
            _clients[key] = found
        return found


@functools.cache
def _filesystem_class(scheme: str) -> type:
    """hdfs-native's fsspec filesystem of `scheme`, with a `cp_file` (what pyarrow's
    copy_file calls: a savepoint copies its checkpoint's files) whose partial file is
    in the target's folder: hdfs-native 0.14's names it "." + the target's absolute
    path, a relative path under the user's home that the NameNode refuses."""
    import secrets
    import shutil

    from hdfs_native.fsspec import HdfsFileSystem, ViewfsFileSystem

    base = ViewfsFileSystem if scheme == "viewfs" else HdfsFileSystem

    class FileSystem(base):  # type: ignore[valid-type, misc]  # chosen at run time
        def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
            source, target = self._strip_protocol(path1), self._strip_protocol(path2)
            parent, _, name = target.rpartition("/")
            partial = f"{parent}/.{name}.partial-{secrets.token_hex(6)}"
            try:
                with self._open(source, "rb") as data, self._open(partial, "wb") as out:
                    shutil.copyfileobj(data, out, 8 << 20)
                self.client.rename(partial, target, True)
            except BaseException:
                with contextlib.suppress(OSError):
                    self.client.delete(partial, False)
                raise

    FileSystem.__name__ = FileSystem.__qualname__ = base.__name__
    return FileSystem


def _cluster(url: str | None) -> str:
    """scheme://authority of the filesystem `url` is on; fs.defaultFS for none."""
    parsed = urlparse(url) if url else None
    if parsed is None or not parsed.netloc:
        default = urlparse(hadoop.default_fs())
        if parsed is not None and parsed.scheme != default.scheme:
            raise hadoop.HadoopConfigError(
                f"{url} names no cluster and the default filesystem (fs.defaultFS in "
                f"{hadoop.conf_dir()}/core-site.xml) is {hadoop.default_fs()}")
        if default.scheme not in SCHEMES or not default.netloc:
            raise hadoop.HadoopConfigError(
                f"the default filesystem (fs.defaultFS in {hadoop.conf_dir()}/core-site.xml) "
                f"is {hadoop.default_fs()!r}, not an hdfs:// or viewfs:// cluster")
        parsed = default
    if parsed.scheme not in SCHEMES:
        raise ValueError(f"not an hdfs:// or viewfs:// URL: {url!r}")
    return f"{parsed.scheme}://{parsed.netloc}"


def _check_identity() -> None:
    """On a secure cluster, that the process has an HDFS delegation token or a valid
    Kerberos ticket: else one KerberosError saying what to do (hdfs-native would fail
    each call with GSSAPI's words)."""
    if kerberos.security_enabled() and not any(
            t.kind == kerberos.HDFS_TOKEN_KIND for t in kerberos.container_tokens()):
        kerberos.check_ticket()


class NoActiveNameNode(OSError):
    """No NameNode of the cluster took the call (standby, or not answering): not done."""


class _FailingOver:
    """hdfs-native's Client, each call tried again while its cluster has no active
    NameNode (see the module's docstring), its refusals OSErrors."""

    def __init__(self, client: Any, cluster: str) -> None:
        self._client, self._cluster = client, cluster

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args: Any, **kwargs: Any) -> Any:
            def on_retry(attempts: int, error: BaseException, pause: float) -> None:
                if attempts == 1:
                    log.warning("%s: no active NameNode took %s (%s); trying again for up to "
                                "%.0f s", self._cluster, name, first_line(error),
                                FAILOVER_PATIENCE)
            try:
                return retry.retry(lambda: _translated(attribute, args, kwargs),
                                   retry_on=NoActiveNameNode, pauses=FAILOVER_PAUSES,
                                   deadline=retry.Deadline(FAILOVER_PATIENCE),
                                   on_retry=on_retry)
            except retry.GaveUp as gave_up:
                assert gave_up.last_error is not None
                raise gave_up.last_error from None
        return call


def client_of(filesystem: Any) -> Any | None:
    """The hdfs-native client of a filesystem `filesystem()` made (its calls wait out a
    failover); None for any other object."""
    client = getattr(filesystem, "client", None)
    return client if isinstance(client, _FailingOver) else None


def _translated(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`method(*args, **kwargs)`, hdfs-native's errors as OSErrors: NoActiveNameNode for
    one that says the call was not done, PermissionError for an AccessControlException,
    FileExistsError for a FileAlreadyExistsException, OSError (first line only, with the
    Java exception's name) for another refusal."""
    try:
        return method(*args, **kwargs)
    except ConnectionError as error:  # refused, reset: no NameNode took it
        raise NoActiveNameNode(first_line(error)) from None
    except RuntimeError as error:  # hdfs-native's RPCError("java class", "message")
        text = str(error)
        found = re.match(r'(?:Fatal)?RPCError\("([^"]+)", "(.*)"\)$', text, re.DOTALL)
        exception, message = found.groups() if found else ("", text)
        message = first_line(Exception(message.split("\\n")[0].replace('\\"', '"')))
        said = f"{exception.rsplit('.', 1)[-1]}: {message}" if exception else message
        if "StandbyException" in exception or "Connection refused" in text:
            raise NoActiveNameNode(said) from None
        if "AccessControlException" in exception:
            raise PermissionError(said) from None
        if "FileAlreadyExistsException" in exception:
            raise FileExistsError(said) from None
        raise OSError(said) from None
    except OSError as error:
        if "Connection refused" in str(error) or "os error 111" in str(error):
            raise NoActiveNameNode(first_line(error)) from None
        raise


def forget_clients() -> None:
    """The next `filesystem` call makes new clients: newer delegation tokens were handed
    over (kerberos.install_tokens)."""
    global _generation
    with _lock:
        _generation += 1
        _clients.clear()


def home() -> str:
    """This process's user's home folder on the default filesystem, as Hadoop names it:
    /user/<HADOOP_USER_NAME, else the login user>."""
    return f"/user/{os.environ.get('HADOOP_USER_NAME') or getpass.getuser()}"


def delete(fs: AbstractFileSystem, path: str) -> bool:
    """Removes `path` (a folder with its contents); whether there was anything to
    remove. A refusal raises (PermissionError, OSError)."""
    removed: bool = fs.client.delete(path, True)
    return removed
