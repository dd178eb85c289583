"""The process of a PySpark script's driver: its first lines, then the script itself.

    python -m taskexecutor.spark.driver PARENT_PID SCRIPT [ARGS...]

Asks Linux to kill this process when its TaskExecutor dies (even by SIGKILL: YARN kills
a container's process group, and the driver has a group of its own so that cancelling
it cannot hit the TaskExecutor), then runs SCRIPT as `python SCRIPT ARGS` would:
`__main__`, `sys.argv == [SCRIPT, *ARGS]`, the script's folder first on `sys.path`, and
the exit status of `sys.exit()` or of an uncaught exception (1, traceback on stderr).
Nothing here may slow the script's start: besides the standard library it imports only
what of pyspark its script imports anyway (see `survive_ui_race`, `stop_without_waiting`,
`backlog_timer_from_the_first_stage`). A driver started before its script is a warm
driver (taskexecutor/spark/warm_driver.py). The TaskExecutor's side of it is
taskexecutor/spark/script_task.py.
"""

import os
import runpy
import shlex
import sys
import threading

from flinkyarn import lifeline  # the standard library's only

# Spark's YARN AM asks the driver to put this filter on its web UI while the driver
# starts the UI's handlers (SparkContext's attachAllHandlers, unsynchronized with the
# request): a handler that starts between the filter and its mapping fails the context.
UI_FILTER_RACE = "No filter named org.apache.spark.deploy.yarn.AmIpFilter"
# The same race met inside Jetty: the filter added while its handlers are iterated.
UI_HANDLERS_RACE = "java.util.ConcurrentModificationException"
# ExecutorAllocationManager.onSchedulerQueueEmpty, as Scala names it in the bytecode.
QUEUE_EMPTY = "org$apache$spark$ExecutorAllocationManager$$onSchedulerQueueEmpty"


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
    context = sys.modules.get("pyspark.core.context")
    if context is None:
        return
    spark_context = context.SparkContext
    gateway = spark_context._gateway
    process = getattr(gateway, "proc", None)
    if spark_context._active_spark_context is not None or process is None:
        return
    process.kill()
    process.wait()


def on_yarn(submit_args: str) -> bool:
    args = shlex.split(submit_args)
    return any(a == "--master" and b == "yarn" for a, b in zip(args, args[1:]))


def survive_ui_race(attempts: int = 3) -> None:
    """Makes a SparkContext whose JVM side lost Spark's web-UI filter race
    (UI_FILTER_RACE, or UI_HANDLERS_RACE when Jetty iterates the handlers the filter is
    added to) start again, up to `attempts` times in all: the failed context has stopped
    itself (its YARN application too) before the error reaches Python, and nothing of
    the script's ran in between."""
    from py4j.protocol import Py4JJavaError
    from pyspark.core.context import SparkContext

    initialize = SparkContext._initialize_context

    def _initialize_context(self, jconf):
        for attempt in range(1, attempts + 1):
            try:
                return initialize(self, jconf)
            except Py4JJavaError as error:
                thrown = str(error.java_exception)
                if attempt == attempts or not (UI_FILTER_RACE in thrown
                                               or thrown.startswith(UI_HANDLERS_RACE)):
                    raise
                print(f"flinkyarn: the SparkContext lost Spark's web-UI filter race "
                      f"({thrown.splitlines()[0]}); starting it again", file=sys.stderr, flush=True)

    SparkContext._initialize_context = _initialize_context  # type: ignore[method-assign]


def backlog_timer_from_the_first_stage() -> None:
    """Makes Spark's dynamic allocation ask for executors beyond its initial ones only
    once tasks have waited spark.dynamicAllocation.schedulerBacklogTimeout, as Spark
    documents it, in the first stage too. When the YARN AM registers (inside the
    SparkContext's start), the driver resets its allocation manager as for an AM that
    replaced another, and the reset marks the backlog timer expired: the first stage
    asked for one more executor as it was submitted, and for more at each
    sustainedSchedulerBacklogTimeout after, while the initial ones were still starting.
    After the start, the manager is told what is true then, that no task waits (it has
    no public call for it; with a Spark that lacks this one, nothing changes)."""
    from py4j.protocol import Py4JError
    from pyspark.core.context import SparkContext

    initialize = SparkContext._initialize_context

    def _initialize_context(self, jconf):
        context = initialize(self, jconf)
        try:
            manager = context.sc().executorAllocationManager()
            if manager.isDefined():
                getattr(manager.get(), QUEUE_EMPTY)()
        except Py4JError:
            pass
        return context

    SparkContext._initialize_context = _initialize_context  # type: ignore[method-assign]


def stop_without_waiting() -> None:
    """Makes `SparkContext.stop()` leave its accumulator server's shutdown to a thread
    of its own. pyspark's shutdown waits for the server's thread, whose request handler
    looks at the shutdown flag once a second (UpdateRequestHandler's poll): every stop
    waited about a second for nothing, since the updates of a job's tasks are all in
    before the job ends. The server's thread is a daemon, and so is the one that now
    waits for it: neither holds the driver's exit."""
    from pyspark import accumulators

    def detach(shutdown):
        def detached(self) -> None:
            threading.Thread(target=shutdown, args=(self,), daemon=True,
                             name="accumulator-server-shutdown").start()
        return detached

    for server in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        server.shutdown = detach(server.shutdown)  # type: ignore[method-assign]


def main() -> None:
    parent, script, *args = sys.argv[1:]
    lifeline.die_with_parent(int(parent), "the TaskExecutor that started this driver")
    stop_without_waiting()
    if on_yarn(os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        survive_ui_race()
        backlog_timer_from_the_first_stage()
    run_script(script, args)


if __name__ == "__main__":
    main()
