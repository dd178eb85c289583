"""The process of a PySpark script's driver: its first lines, then the script itself.

    python -m taskexecutor.spark.driver PARENT_PID SCRIPT [ARGS...]

Asks Linux to kill this process when its TaskExecutor dies (even by SIGKILL: YARN kills
a container's process group, and the driver has a group of its own so that cancelling
it cannot hit the TaskExecutor), then runs SCRIPT as `python SCRIPT ARGS` would:
`__main__`, `sys.argv == [SCRIPT, *ARGS]`, the script's folder first on `sys.path`, and
the exit status of `sys.exit()` or of an uncaught exception (1, traceback on stderr).
Nothing here may slow the script's start: besides the standard library it imports only
what of pyspark its script imports anyway, to apply pyspark_patches' driver patches
(`stop_without_waiting`; on YARN `survive_ui_race`, `backlog_timer_from_the_first_stage`).
A driver started before its script is a warm driver (taskexecutor/spark/warm_driver.py).
The TaskExecutor's side of it is taskexecutor/spark/script_task.py.
"""

import os
import runpy
import shlex
import sys

from flinkyarn import lifeline  # the standard library's only
from taskexecutor.spark import pyspark_patches


def run_script(script: str, args: list[str]) -> None:
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        end_stopped_jvm()


def end_stopped_jvm() -> None:
    """After the script: when it stopped its SparkContext (as scripts do), its JVM has
    nothing left to do but Spark's shutdown hooks, which delete the temporary folders in
    this driver's own folder (java.io.tmpdir, spark.local.dir: removed after the driver
    anyway). Those hooks held the script's end some 0.35 s (its TaskExecutor waits for
    the JVM before it reports the end): the JVM is killed instead. A context still
    running is left to the hooks, which stop it as Spark would; a script that never
    started Spark has no JVM."""
    process = pyspark_patches.process_jvm()
    if process is None or pyspark_patches.context_running():
        return
    process.kill()
    process.wait()


def on_yarn(submit_args: str) -> bool:
    args = shlex.split(submit_args)
    return any(a == "--master" and b == "yarn" for a, b in zip(args, args[1:]))


def main() -> None:
    parent, script, *args = sys.argv[1:]
    lifeline.die_with_parent(int(parent), "the TaskExecutor that started this driver")
    pyspark_patches.stop_without_waiting()
    if on_yarn(os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        pyspark_patches.survive_ui_race()
        pyspark_patches.backlog_timer_from_the_first_stage()
    run_script(script, args)


if __name__ == "__main__":
    main()
