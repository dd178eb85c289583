"""The first lines of a PySpark driver process, then the script itself:

    python -m taskexecutor.pyspark_launcher PARENT_PID SCRIPT [ARGS...]
    python -m taskexecutor.pyspark_launcher PARENT_PID --warm

Asks Linux to kill this process when its TaskExecutor dies (even by SIGKILL: YARN kills
a container's process group, and the driver has a group of its own so that cancelling
it cannot hit the TaskExecutor), then runs SCRIPT as `python SCRIPT ARGS` would:
`__main__`, `sys.argv == [SCRIPT, *ARGS]`, the script's folder first on `sys.path`, and
the exit status of `sys.exit()` or of an uncaught exception (1, traceback on stderr).
Nothing here may slow the script's start: besides the standard library it imports only
what of pyspark its script imports anyway (see `survive_ui_race`, `stop_without_waiting`,
`backlog_timer_from_the_first_stage`).

With --warm (a warm driver, taskexecutor/warm_drivers.py), pyspark's JVM starts first
(PYSPARK_SUBMIT_ARGS as for any driver) and is warmed up by a SparkSession that is
stopped again; then one line on stdin says which script to run: {"script", "args",
"properties" (set as the JVM's system properties, which SparkConf reads), "cleared"
(system properties to remove), "log4j" (the log4j2 configuration to load)}. Before the
script runs, SCRIPT_STARTS goes to stdout and stderr: what came before is the warm-up's.
End of input instead of a line: the TaskExecutor is done with us; exit 0.
"""

import json
import os
import runpy
import select
import shlex
import sys
import threading

from flinkyarn import lifeline  # the standard library's only

SCRIPT_STARTS = "\x1eflinkyarn: the script starts\n"
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


def script_waiting() -> bool:
    return bool(select.select([sys.stdin], [], [], 0)[0])


def warm_up() -> None:
    """A SparkSession with one RDD job through a Python worker and one SQL job, stopped:
    what every script's first SparkContext and jobs would load and compile. A script
    that comes meanwhile cuts it short (after the step under way, and the stop)."""
    from pyspark.sql import SparkSession

    if script_waiting():
        return
    spark = SparkSession.builder.appName("flinkyarn-warm-up").getOrCreate()
    try:
        if not script_waiting():
            spark.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).sum()
        if not script_waiting():
            spark.range(100).selectExpr("sum(id)").collect()
    finally:
        spark.stop()


def warm() -> None:
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # the JVM
    warm_up()
    line = sys.stdin.readline()
    if not line:
        return
    job = json.loads(line)
    stdin = os.open(os.devnull, os.O_RDONLY)  # the script's stdin, as a cold driver's
    os.dup2(stdin, 0)
    os.close(stdin)
    jvm = SparkContext._jvm
    assert jvm is not None  # _ensure_initialized
    for key in job["cleared"]:
        jvm.java.lang.System.clearProperty(key)
    for key, value in job["properties"].items():
        jvm.java.lang.System.setProperty(key, value)
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(job["log4j"]))
    for stream in (sys.stdout, sys.stderr):
        stream.write(SCRIPT_STARTS)
        stream.flush()
    run_script(job["script"], job["args"])


def main() -> None:
    parent, script, *args = sys.argv[1:]
    lifeline.die_with_parent(int(parent), "the TaskExecutor that started this driver")
    stop_without_waiting()
    if script == "--warm":
        warm()
    else:
        if on_yarn(os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
            survive_ui_race()
            backlog_timer_from_the_first_stage()
        run_script(script, args)


if __name__ == "__main__":
    main()
