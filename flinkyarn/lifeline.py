"""A process of ours lives no longer than what started it (Linux).

YARN counts a container as running while the process its NodeManager started for it
runs (`default_container_executor.sh`, or the setuid `container-executor`), which runs
the container's launch script in a session of its own, which runs our command. When
any of them dies (an operator's `kill`, the OOM killer), YARN reports the container
ended and the ResourceManager replaces its worker; a TaskExecutor or AppMaster left
running below would be an orphan outside anything YARN accounts for. So such a process
ends itself, with SIGKILL (what is started below it ends with it: Spark's JVM when its
input closes, the rest through taskexecutor/reaper.py):

- when its parent dies, at once (PR_SET_PDEATHSIG), where the parent allows;
- when any other of its `ancestors()` dies, within WATCH_INTERVAL (a thread looks).

The container's ancestors are the processes above this one up to and including the first
that is outside this process's session: the launch script's session leader and the
process of the NodeManager's that started it. Locally, a TaskExecutor has one: the
AppMaster that started it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.5
_PR_SET_PDEATHSIG = 1


def _stat(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, session, ...,
    start time at index 19); None if there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in (b"Z", b"X") else fields


def identity(pid: int) -> tuple[int, bytes] | None:
    """(pid, start time): a process, not a pid the kernel may give another one later;
    None if it is gone."""
    fields = _stat(pid)
    return (pid, fields[19]) if fields is not None else None


def ancestors(pid: int | None = None) -> list[tuple[int, bytes]]:
    """The identities of the processes above `pid` (this one) up to and including the
    first outside its session, nearest first; none above pid 1."""
    pid = os.getpid() if pid is None else pid
    fields = _stat(pid)
    if fields is None:
        return []
    session = fields[3]
    found = []
    parent = int(fields[1])
    while parent > 1:
        above = _stat(parent)
        if above is None:
            break
        found.append((parent, above[19]))
        if above[3] != session:
            break
        parent = int(above[1])
    return found


def die_with(watched: list[tuple[int, bytes]], what: str,
             parent_death_signal: bool = True) -> None:
    """Ends this process with SIGKILL when any of `watched` (identities, the parent
    first) ends; if one has ended already, at once. `what` names them in the log line.
    `parent_death_signal`: the kernel signals the parent's end at once; only for a
    parent that does not start processes from threads which may end before it (the
    signal comes when the thread that forked us ends: a JVM's would send it early)."""
    if not watched or not os.path.isdir("/proc/self"):  # not Linux: nothing to watch by
        return
    if parent_death_signal and _set_parent_death_signal():
        if os.getppid() != watched[0][0]:  # the parent died before we asked
            _end(f"{what} (process {watched[0][0]}) ended")
        watched = watched[1:]
    if watched:
        threading.Thread(target=_watch, args=(watched, what), daemon=True,
                         name="lifeline").start()


def _set_parent_death_signal() -> bool:
    """Asks the kernel for SIGKILL when the parent ends; False where it cannot (the
    parent is then watched as the others are)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return False
    return True


def die_with_parent(parent: int, what: str) -> None:
    """die_with for a parent known by its pid, which may have died already (we would then
    be some other process's child)."""
    die_with([identity(parent) or (parent, b"")], what)


def _watch(watched: list[tuple[int, bytes]], what: str) -> None:
    while True:
        for pid, started in watched:
            if identity(pid) != (pid, started):
                _end(f"{what} (process {pid}) ended")
        time.sleep(WATCH_INTERVAL)


def _end(why: str) -> None:
    log.error("%s: this process ends with it", why)
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)
