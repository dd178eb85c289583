"""What a TaskExecutor started that could outlive it ends with it, however it ends.

    python -m taskexecutor.reaper GRACE

A PySpark driver runs in a process group of its own (cancelling it must not hit the
TaskExecutor), so YARN's end of a container, a signal to the container's process group,
misses it. Its launcher dies with the TaskExecutor (PR_SET_PDEATHSIG), and its JVM exits
when its stdin closes, but through Spark's shutdown hooks, which can hang for minutes (a
yarn-client driver's hook retries a ResourceManager that went away); so can the Spark JVM
of the TaskExecutor's own Spark stages, and a stopped process never reads its end of
input at all. The reaper is the one process that sees the TaskExecutor die and acts.

The TaskExecutor starts it when it first starts such a process, in a session of its own
(YARN's signal to the container's group must not end it first), and tells it, one line
each on its stdin, what to end after it:

    group PGID             a process group (a PySpark driver's)
    process PID START      a process; START is its start time as /proc/PID/stat gives
                           it, so that a pid the kernel has given another process since
                           is spared
    forget group PGID      the TaskExecutor ended it itself
    forget process PID

At the end of its input (the TaskExecutor exited or was killed: the kernel closes the
pipe either way), what is listed and still runs gets GRACE seconds to end by itself (a
JVM's shutdown hooks remove its folders), then SIGKILL; then the reaper exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)

GRACE_S = 8.0
"""How long what a dead TaskExecutor left may take to end by itself. Spark's shutdown
hooks take a second or two; a JVM still running after this is stuck."""


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (the first is the state), or
    None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
            return stat.read().rpartition(b")")[2].split()
    except OSError:
        return None


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), or None if it is gone or a
    zombie."""
    fields = proc_stat(pid)
    if fields is None or len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. A zombie does not count: a driver's
    JVM, orphaned when the driver exits, is reaped by whatever adopts it (init, which may
    take a second or more), and holds nothing but its process table entry."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: whatever is in the group counts
        return True
    for entry in entries:
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and len(fields) > 2 and int(fields[2]) == pgid \
                    and fields[0] not in (b"Z", b"X"):
                return True
    return False


def reap(groups: set[int], processes: dict[int, str], grace: float) -> list[str]:
    """Waits up to `grace` seconds for `groups` and `processes` ({pid: start time}) to
    end, then kills what still runs. Returns what it killed."""
    deadline = time.monotonic() + grace
    while True:
        groups = {g for g in groups if group_alive(g)}
        processes = {p: s for p, s in processes.items() if start_time(p) == s}
        if not (groups or processes) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    killed = []
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed.append(f"process group {pgid}")
    for pid in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(f"process {pid}")
    return killed


def main(argv: list[str]) -> int:
    grace = float(argv[0]) if argv else GRACE_S
    groups: set[int] = set()
    processes: dict[int, str] = {}
    for line in sys.stdin.buffer:  # until the TaskExecutor is gone
        try:
            match line.decode().split():
                case ["group", pgid]:
                    groups.add(int(pgid))
                case ["process", pid, started]:
                    processes[int(pid)] = started
                case ["forget", "group", pgid]:
                    groups.discard(int(pgid))
                case ["forget", "process", pid]:
                    processes.pop(int(pid), None)
                case _:
                    raise ValueError
        except ValueError:
            print(f"reaper: a line it does not know: {line!r}", file=sys.stderr)
    killed = reap(groups, processes, grace)
    if killed:
        print(f"reaper: the TaskExecutor is gone; killed what it left that was still running "
              f"{grace:g} s later: {', '.join(killed)}", file=sys.stderr)
    return 0


class Reaper:
    """The TaskExecutor's side: starts the reaper on first use, tells it what to end.
    Thread-safe (task threads start drivers)."""

    def __init__(self, grace: float = GRACE_S) -> None:
        self.grace = grace
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def watch_group(self, pgid: int) -> None:
        self._tell(f"group {pgid}")

    def watch_process(self, pid: int) -> None:
        started = start_time(pid)
        if started is not None:
            self._tell(f"process {pid} {started}")

    def forget_group(self, pgid: int) -> None:
        self._tell(f"forget group {pgid}", start=False)

    def forget_process(self, pid: int) -> None:
        self._tell(f"forget process {pid}", start=False)

    def _tell(self, line: str, start: bool = True) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is not None:
                log.warning("the reaper (pid %d) ended (status %s); a new one starts",
                            self._process.pid, self._process.returncode)
                self._process = None
            if self._process is None:
                if not start:
                    return
                # No preexec_fn: forking a process that runs gRPC must not run Python.
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "taskexecutor.reaper", f"{self.grace:g}"],
                    stdin=subprocess.PIPE, start_new_session=True)
            assert self._process.stdin is not None  # a PIPE
            try:
                self._process.stdin.write(f"{line}\n".encode())
                self._process.stdin.flush()
            except OSError as error:
                log.warning("cannot tell the reaper %r: %s", line, error)


REAPER = Reaper()
"""This process's reaper."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
