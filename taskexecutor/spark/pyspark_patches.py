"""pyspark's private seams, all in one place: each change flinkyarn makes to pyspark's
internals, and each private attribute of pyspark's it reads, with why, the pyspark
versions it is verified against and the figure that pays for it (SEAMS). No other
module of ours names a private attribute of pyspark's (tests/unit/test_pyspark_patches.py).

The version check. Each patch, when applied, compares the running pyspark's version with
those its seam is verified against (`applies`); on any other it is skipped, with one
logged warning naming the seam, and pyspark runs as it does on its own. Skipping, not
failing, because every patch here improves on what pyspark does by itself (a faster
stop, a retried start, a JVM started without Python in the forked child, a JVM lost and
started again): without one a script or a stage runs as under spark-submit, while a
patch of internals that changed could fail in ways nobody has seen (a wrapped method
with another signature, an attribute that no longer holds the gateway). The pin in
setup.cfg keeps a user on the verified minor; tests/unit/test_pyspark_patches.py fails
when the installed pyspark is not a verified one, so a new version is verified (the
tests named in each seam) before it is listed.

Who calls what: the PySpark driver processes (taskexecutor/spark/driver.py,
warm_driver.py) apply their patches before the script runs; the TaskExecutor's bridge
(taskexecutor/spark/bridge.py) applies `launch_jvm_without_python_in_the_child` before
each session's start, under the import lock, and calls `discard_gateway` after its JVM
was lost. The readers below are plain functions, for any thread.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The pyspark versions every seam below is verified against: the tests each seam names
# pass on them. setup.cfg pins pyspark to their minor.
VERIFIED = ("4.3.0",)


@dataclass(frozen=True, slots=True)
class Seam:
    """One private seam of pyspark's: what it touches, why, and what it is worth."""

    name: str
    touches: str
    why: str
    figure: str
    tests: str
    verified: tuple[str, ...] = VERIFIED


JVM_WITHOUT_PYTHON_IN_THE_CHILD = Seam(
    "launch_jvm_without_python_in_the_child", "pyspark.java_gateway.Popen",
    why="pyspark's launch_gateway starts the JVM with a preexec_fn (to ignore SIGINT): "
        "Python run in the forked child of a TaskExecutor, whose gRPC threads hold locks; "
        "under load the child died before its exec ([JAVA_GATEWAY_EXITED], nothing from "
        "the JVM), and the Spark stage with it. pyspark offers no way to start the JVM "
        "without a preexec_fn (launch_gateway always sets one).",
    figure="none measured as a share of a run: a correctness fix, seen failing in "
           "integration/run-tests under load (commit 59cedec); no failure rate was recorded",
    tests="tests/unit/test_spark_gateway.py, tests/local/test_spark_bridge.py")

DISCARD_GATEWAY = Seam(
    "discard_gateway", "SparkContext._gateway, _jvm, _active_spark_context; "
    "SparkSession._instantiatedSession, _activeSession; SQLContext._instantiatedContext",
    why="pyspark keeps the gateway to the JVM it launched for the whole process and "
        "reuses it for every later session; after that JVM died (the OOM killer, a kill, "
        "a kill during the session's start) every call is refused. Reset, the next "
        "session starts a new JVM and the TaskExecutor goes on; without it the "
        "TaskExecutor ends itself and YARN gives a new container.",
    figure="none as a share of a run: bench/RESULTS.md's chaos runs (Spark JVMs "
           "killed 0-6 times a round, each round exact and SUCCEEDED) rely on it; commit "
           "f8ae1ff found a TaskExecutor failing every stage without it",
    tests="tests/local/test_spark_bridge.py (kills the JVM, also during a start)")

UI_RACE = Seam(
    "survive_ui_race", "SparkContext._initialize_context",
    why="Spark's YARN AM asks the driver to add its web-UI filter while the driver's "
        "SparkContext starts the UI's handlers (unsynchronized in Spark): a handler "
        "started between the filter and its mapping fails the context, with "
        "'No filter named ...AmIpFilter' or a ConcurrentModificationException. The failed "
        "context has stopped itself, so it is started again, up to 3 times.",
    figure="none as a share of a run: a correctness fix for PySpark scripts on YARN "
           "(failed test_token_renewal in CI, commit 306fcce); no failure rate was recorded",
    tests="tests/local/test_pyspark_scripts.py (the race, thrown through py4j)")

BACKLOG_TIMER = Seam(
    "backlog_timer_from_the_first_stage", "SparkContext._initialize_context; "
    "ExecutorAllocationManager's private onSchedulerQueueEmpty (Scala-mangled name)",
    why="when the YARN AM registers, the driver resets its allocation manager as for a "
        "replaced AM, and the reset marks the backlog timer expired: the first stage asks "
        "for more executors the moment it is submitted, whatever "
        "spark.dynamicAllocation.schedulerBacklogTimeout says. After the context's "
        "start, the manager is told that no task waits (no public call does it).",
    figure="pi.py 100 per-job on YARN, medians of 3: 45.5 s with a 5 s backlog timeout, "
           "34.6 s with flinkyarn's 15 s (24 % less; docs/internals.md), a timeout that "
           "the first stage waits only with this patch; no run measured the patch alone",
    tests="tests/yarn/test_pyspark_on_yarn.py (the timer is not set after the start)")

STOP_WITHOUT_WAITING = Seam(
    "stop_without_waiting", "pyspark.accumulators.AccumulatorTCPServer/UnixServer.shutdown",
    why="SparkContext.stop() waits for the accumulator server's thread, whose handler "
        "looks at the shutdown flag once a second: every stop waited about a second for "
        "nothing (the updates of a job's tasks are in before the job ends). The shutdown "
        "is left to a daemon thread.",
    figure="spark.stop() 0.15 s instead of about 1 s (docs/internals.md): some 0.85 s of "
           "a warm-session pi.py 100, which takes 0.19 of spark-submit's 44.7-54.2 s "
           "(bench/RESULTS.md, about 9 s): about 9 %",
    tests="tests/unit/test_pyspark_driver.py (the real server)")

JVM_PROCESS = Seam(
    "launched_jvm, context_running", "SparkContext._gateway (its proc), "
    "SparkContext._active_spark_context (read only)",
    why="the bridge watches and reaps its JVM, the trainer closes its input to make it "
        "dump its classes, and a driver whose script stopped its context kills its JVM "
        "instead of waiting for Spark's shutdown hooks, which only delete folders inside "
        "the driver's own (removed after it anyway)",
    figure="the driver's kill: 0.36 s of a warm-session pi.py 100 (bench/RESULTS.md, "
           "about 9 s): about 4 %, under 5 %, kept because the same reads serve the bridge "
           "and the trainer, which cannot do without the JVM's process",
    tests="tests/local/test_pyspark_scripts.py, tests/local/test_spark_bridge.py")

WARM_JVM = Seam(
    "start_jvm", "SparkContext._ensure_initialized, SparkContext._jvm",
    why="a warm driver starts pyspark's JVM before its script, with no SparkContext (the "
        "script makes its own), and sets the script's settings as the JVM's system "
        "properties",
    figure="a warm driver's new SparkContext takes 0.2 s instead of 4.6 s; a warm-session "
           "pi.py 100 takes 0.19 of spark-submit's time, against 0.49 per-job with "
           "pyspark.master=local (bench/RESULTS.md)",
    tests="tests/local/test_pyspark_scripts.py, tests/yarn/test_pyspark_on_yarn.py")

SESSION_JVM = Seam(
    "hadoop_of", "SparkSession._jvm, SparkSession._jsc (read only)",
    why="newer delegation tokens are added to a running session's JVM, as Spark adds "
        "those its driver sends; pyspark has no public handle on the JVM's Hadoop",
    figure="none: a session that runs longer than its tokens' lifetime needs it",
    tests="tests/yarn_secure (token renewal)")

SEAMS = (JVM_WITHOUT_PYTHON_IN_THE_CHILD, DISCARD_GATEWAY, UI_RACE, BACKLOG_TIMER,
         STOP_WITHOUT_WAITING, JVM_PROCESS, WARM_JVM, SESSION_JVM)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def applies(seam: Seam) -> bool:
    """Whether the running pyspark is one `seam` is verified against; if not, says so
    once (a warning) and the caller leaves pyspark as it is."""
    version = pyspark_version()
    if version in seam.verified:
        return True
    with _warned_lock:
        first = seam.name not in _warned
        _warned.add(seam.name)
    if first:
        log.warning("pyspark %s is not a version flinkyarn's %s is verified against (%s): "
                    "skipped, pyspark runs without it", version, seam.name,
                    ", ".join(seam.verified))
    return False


# ---------------------------------------------------------------- patches


class GatewayPopen(subprocess.Popen):
    """How pyspark's launch_gateway starts the JVM (spark-submit) in a TaskExecutor: the
    child only execs (by vfork), a shell makes SIGINT ignored (as the JVM inherits it)
    and execs spark-submit, so the process is the JVM, as before
    (JVM_WITHOUT_PYTHON_IN_THE_CHILD)."""

    def __init__(self, args: Sequence[str], **kwargs: Any) -> None:
        kwargs.pop("preexec_fn", None)
        super().__init__(["/bin/sh", "-c", 'trap "" INT; exec "$@"', "spark-submit", *args],
                         **kwargs)


def launch_jvm_without_python_in_the_child() -> None:
    """Makes pyspark start its JVM through GatewayPopen. Idempotent."""
    if not applies(JVM_WITHOUT_PYTHON_IN_THE_CHILD):
        return
    from pyspark import java_gateway

    java_gateway.Popen = GatewayPopen  # type: ignore[attr-defined,assignment]


def discard_gateway(session: SparkSession | None) -> None:
    """Makes pyspark launch a new JVM for the next session (DISCARD_GATEWAY): stops what
    is left of `session`, kills the JVM if it still runs (half started), forgets the
    gateway."""
    if not applies(DISCARD_GATEWAY):
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    if session is not None:
        with contextlib.suppress(Exception):  # the JVM is gone: its half fails
            session.sparkContext.stop()
    gateway = SparkContext._gateway
    process = launched_jvm(gateway)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.close()


# Spark's YARN AM asks the driver to put this filter on its web UI while the driver
# starts the UI's handlers: a handler that starts between the filter and its mapping
# fails the context.
UI_FILTER_RACE = "No filter named org.apache.spark.deploy.yarn.AmIpFilter"
# The same race met inside Jetty: the filter added while its handlers are iterated.
UI_HANDLERS_RACE = "java.util.ConcurrentModificationException"


def survive_ui_race(attempts: int = 3) -> None:
    """Makes a SparkContext whose JVM side lost the web-UI filter race start again, up
    to `attempts` times in all (UI_RACE)."""
    if not applies(UI_RACE):
        return
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


# ExecutorAllocationManager.onSchedulerQueueEmpty, as Scala names it in the bytecode.
QUEUE_EMPTY = "org$apache$spark$ExecutorAllocationManager$$onSchedulerQueueEmpty"


def backlog_timer_from_the_first_stage() -> None:
    """Makes dynamic allocation ask for executors beyond the initial ones only once tasks
    waited schedulerBacklogTimeout, in the first stage too (BACKLOG_TIMER). A Spark
    without the method changes nothing."""
    if not applies(BACKLOG_TIMER):
        return
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
    """Makes SparkContext.stop() leave the accumulator server's shutdown to a daemon
    thread (STOP_WITHOUT_WAITING); neither that thread nor the server's holds the
    driver's exit."""
    if not applies(STOP_WITHOUT_WAITING):
        return
    from pyspark import accumulators

    def detach(shutdown):
        def detached(self) -> None:
            threading.Thread(target=shutdown, args=(self,), daemon=True,
                             name="accumulator-server-shutdown").start()
        return detached

    for server in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        server.shutdown = detach(server.shutdown)  # type: ignore[method-assign]


# ---------------------------------------------------------------- private reads


def launched_jvm(gateway: object) -> subprocess.Popen | None:
    """The JVM pyspark's `gateway` launched; None without one (JVM_PROCESS)."""
    return getattr(gateway, "proc", None)


def session_jvm(session: SparkSession) -> subprocess.Popen | None:
    return launched_jvm(session.sparkContext._gateway)


def process_jvm() -> subprocess.Popen | None:
    """The JVM this process's pyspark launched, if it imported pyspark and did."""
    context = sys.modules.get("pyspark.core.context")
    return None if context is None else launched_jvm(context.SparkContext._gateway)


def context_running() -> bool:
    """Whether this process has a SparkContext that was not stopped (pyspark imported);
    true too when pyspark keeps it elsewhere than it did (the caller then leaves the
    JVM to Spark's shutdown hooks)."""
    context = sys.modules.get("pyspark.core.context")
    return context is not None and getattr(context.SparkContext, "_active_spark_context",
                                           True) is not None


def start_jvm() -> Any:
    """Starts this process's pyspark JVM without a SparkContext (WARM_JVM); its py4j view."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None  # _ensure_initialized
    return jvm


def hadoop_of(session: SparkSession) -> tuple[Any, Any]:
    """The py4j view of the session's JVM and its Hadoop configuration (SESSION_JVM)."""
    jvm = session._jvm
    assert jvm is not None  # a running session has its JVM
    return jvm, session._jsc.hadoopConfiguration()
