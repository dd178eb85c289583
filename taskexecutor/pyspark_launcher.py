"""The first lines of a PySpark driver process, then the script itself:

    python -m taskexecutor.pyspark_launcher PARENT_PID SCRIPT [ARGS...]

Asks Linux to kill this process when its TaskExecutor dies (even by SIGKILL: YARN kills
a container's process group, and the driver has a group of its own so that cancelling
it cannot hit the TaskExecutor), then runs SCRIPT as `python SCRIPT ARGS` would:
`__main__`, `sys.argv == [SCRIPT, *ARGS]`, the script's folder first on `sys.path`, and
the exit status of `sys.exit()` or of an uncaught exception (1, traceback on stderr).
Standard library only: nothing here may slow the script's start.
"""

import os
import runpy
import signal
import sys


def die_with_parent(parent_pid: int) -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the TaskExecutor kills us on its way out
        return
    if os.getppid() != parent_pid:  # the parent died before we asked
        os._exit(1)


def main() -> None:
    parent, script, *args = sys.argv[1:]
    die_with_parent(int(parent))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
