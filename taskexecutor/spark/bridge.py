"""The PySpark bridge: one local SparkSession per TaskExecutor process, shared by its slots.

Memory. A TaskExecutor's container holds two runtimes: this Python process and the JVM
that PySpark starts for the session. `taskmanager.memory.process.size` is the size of
the whole container, so it is split once, by `SparkMemoryBudget.of(process_bytes)`:

    Spark JVM heap   (spark.driver.memory)  50 % of the process size, at least 512 MiB
                                            (Spark refuses to start with a heap below
                                            ~450 MiB)
    Spark JVM other  (metaspace, code cache, 20 %, at least 192 MiB: not capped by flags,
                      thread stacks, direct  since Spark's Arrow and Netty buffers do not
                      and Arrow buffers)     honour -XX:MaxDirectMemorySize; an estimate
    Python           the rest, at least 256 MiB: the interpreter, batches in flight,
                     result partitions, Spark stages' collected inputs (which spill to
                     disk) and Spark's Python workers for UDFs

A process size too small to hold all three raises `ConfigurationError` naming the key.
With the default of 1 gb: heap 512 MiB, JVM other 205 MiB, Python 307 MiB.

Network. The session is `local[n]`: driver and executor live in the one JVM, which binds
and advertises the TaskExecutor's host only (`taskmanager.host`: $NM_HOST on YARN,
127.0.0.1 locally; SPARK_LOCAL_IP, SPARK_LOCAL_HOSTNAME, spark.driver.host/bindAddress),
and has no UI. (Inside a YARN container Spark still sees HADOOP_CONF_DIR, so a script's
`hdfs://` paths work; nothing is read at start.)

Scratch space. Everything the session writes is in the TaskExecutor's own scratch
folders (flinkyarn/scratch.py): the log configuration, the warehouse and the JVM's
java.io.tmpdir under `tmp_dir`, spark.local.dir spread over `local_dirs` (one folder
per scratch root). The JVM keeps no hsperfdata file in /tmp (-XX:-UsePerfData). In a
YARN container Spark itself prefers the container's LOCAL_DIRS to spark.local.dir; YARN
removes those with the application. JVM options from spark-defaults.conf (in
SPARK_CONF_DIR) come first in spark.driver.extraJavaOptions, ours after them, so ours win.

Active session. The session is pyspark's default one in this process (what
`SparkSession.builder.getOrCreate()` returns from any thread), as pyspark makes the first
session it starts. (Whole PySpark scripts do not use this session: each runs as its own
driver process, taskexecutor/spark/driver.py.) What the provider does to pyspark's
internals (the JVM's start, a lost JVM's gateway) is in taskexecutor/spark/pyspark_patches.py.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from flinkyarn import options
from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.scratch import ProcessScratch
from flinkyarn.spark import python_daemon
from flinkyarn.spark.class_data import SparkClassData
from taskexecutor.reaper import REAPER
from taskexecutor.spark import pyspark_patches
from taskexecutor.task import IMPORTING

__all__ = ["SparkMemoryBudget", "SparkSessionProvider"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIB = 1024 * 1024

log = logging.getLogger(__name__)

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.sparkenv.name = org.apache.spark.SparkEnv
logger.sparkenv.level = error
logger.sparkconf.name = org.apache.spark.SparkConf
logger.sparkconf.level = error
"""


@dataclass(frozen=True, slots=True)
class SparkMemoryBudget:
    """How one TaskExecutor process's memory is shared between Python and the Spark JVM.
    Invariant: jvm_heap + jvm_overhead + python == process."""

    process: int
    jvm_heap: int
    jvm_overhead: int
    python: int

    HEAP_FRACTION = 0.5
    MIN_HEAP = 512 * MIB
    OVERHEAD_FRACTION = 0.2
    MIN_OVERHEAD = 192 * MIB
    MIN_PYTHON = 256 * MIB

    @classmethod
    def of(cls, process_bytes: int) -> SparkMemoryBudget:
        heap = max(cls.MIN_HEAP, int(process_bytes * cls.HEAP_FRACTION) // MIB * MIB)
        overhead = max(cls.MIN_OVERHEAD, int(process_bytes * cls.OVERHEAD_FRACTION))
        python = process_bytes - heap - overhead
        if python < cls.MIN_PYTHON:
            need = (cls.MIN_HEAP + cls.MIN_OVERHEAD + cls.MIN_PYTHON) // MIB
            raise ConfigurationError(
                f"option {options.TASK_MANAGER_PROCESS_MEMORY.key!r} "
                f"({process_bytes // MIB} MiB) is too small for a TaskExecutor with a "
                f"Spark session: it must hold the Spark JVM and Python, at least {need} MiB")
        return cls(process_bytes, heap, overhead, python)


class SparkSessionProvider:
    """Starts the TaskExecutor's SparkSession on the first `get()` and hands out the same
    session until `stop()`, or until its JVM dies.

    The JVM is watched (a thread waits for it, so it is reaped at once): when it dies (the
    OOM killer, an operator's kill), the next `get()` starts a new JVM and session
    instead of handing out one whose every call is refused; so does the `get()` after a
    start that failed. If that second chance fails too, `on_fatal(cause)` is called (the
    TaskExecutor ends itself, as Flink's TaskManager does on a component it cannot
    recover, and YARN gives a fresh container) and `get()` raises. Spark's Python daemon
    is Spark's own to watch: Spark starts a new one when it cannot connect to it.

    Threading: `get()` may be called from any thread, also from several task threads at
    once; exactly one session is started, the others wait for it. `stop()` may be called
    from any thread; a later `get()` starts a new session. `on_fatal` is called on the
    thread of the `get()` that failed.
    """

    def __init__(self, cores: float, memory_bytes: int, slots: int, tmp_dir: str | os.PathLike,
                 host: str = "127.0.0.1", local_dirs: Sequence[str | os.PathLike] = (),
                 class_data: SparkClassData | None = None,
                 java_options: Sequence[str] = (), class_path: Sequence[str] = ()) -> None:
        """Spark's files go under `tmp_dir`, its local dirs in `local_dirs` (default: one
        under `tmp_dir`); the JVM binds and advertises `host`, maps the class-data archive
        of `class_data` if there is one (flinkyarn/spark/class_data.py) and has
        `java_options` too, and its class path starts with `class_path`."""
        self.cores = max(1, int(cores))
        self.slots = slots
        self.memory_bytes = memory_bytes
        self.tmp_dir = Path(tmp_dir)
        self.host = host
        self.local_dirs = [Path(d) for d in local_dirs] or [self.tmp_dir / "local"]
        self.class_data = class_data
        self.java_options = list(java_options)
        self.class_path = list(class_path)
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        # Why the session's JVM is gone (None while it runs, or before it started).
        self._jvm_lost: str | None = None
        # Why the next start is a second chance (a lost JVM, a failed start); None once
        # a start succeeded. A start failing then is fatal.
        self._broken: str | None = None
        self.on_fatal: Callable[[str], object] | None = None

    @classmethod
    def from_configuration(cls, conf: Configuration, scratch: ProcessScratch) -> SparkSessionProvider:
        """Sized and addressed by the TaskExecutor's options; its files in the
        TaskExecutor's `scratch`, local dirs spread over all of its folders."""
        return cls(cores=conf.get(options.TASK_MANAGER_CPU_CORES),
                   memory_bytes=conf.get(options.TASK_MANAGER_PROCESS_MEMORY),
                   slots=conf.get(options.NUM_TASK_SLOTS),
                   tmp_dir=scratch.root / "spark",
                   host=conf.get(options.TASK_MANAGER_HOST),
                   local_dirs=[folder / "spark-local" for folder in scratch.dirs],
                   class_data=SparkClassData.from_configuration(conf),
                   java_options=shlex.split(conf.get(options.TASK_MANAGER_SPARK_JAVA_OPTIONS)))

    @property
    def memory(self) -> SparkMemoryBudget:
        """The split of the process memory; ConfigurationError if it is too small. Checked
        when the session starts, so a TaskExecutor that never runs Spark is not refused."""
        return SparkMemoryBudget.of(self.memory_bytes)

    def spark_conf(self, extra_java_options: Sequence[str] = (),
                   extra_class_path: Sequence[str] = ()) -> dict[str, str]:
        """The settings the session starts with (its JVM with `extra_java_options` too,
        its class path starting with `extra_class_path`). Times are UTC in every
        container."""
        defaults = _spark_defaults()
        java_options = [*shlex.split(defaults.get("spark.driver.extraJavaOptions", "")),
                         f"-Djava.io.tmpdir={self.java_tmp_dir}",
                         f"-Dlog4j2.configurationFile=file:{self.tmp_dir / 'log4j2.properties'}",
                         # hsperfdata would go to /tmp whatever java.io.tmpdir says
                         "-XX:-UsePerfData", *self.java_options, *extra_java_options]
        conf = {
            "spark.master": f"local[{self.cores}]",
            "spark.app.name": "flinkyarn-taskexecutor",
            "spark.driver.memory": f"{self.memory.jvm_heap // MIB}m",
            "spark.driver.extraJavaOptions": shlex.join(java_options),
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            # Its Python workers import pyspark compiled, not from Spark's zip.
            "spark.python.daemon.module": python_daemon.LOCAL_MODULE,
            "spark.local.dir": ",".join(str(d) for d in self.local_dirs),
            "spark.sql.warehouse.dir": (self.tmp_dir / "warehouse").as_uri(),
            "spark.sql.catalogImplementation": "in-memory",
            "spark.sql.shuffle.partitions": str(self.cores * 2),
            "spark.default.parallelism": str(self.cores * 2),
            # Stage inputs are local Parquet files: split them so every core reads.
            "spark.sql.files.maxPartitionBytes": "16m",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
        }
        class_path = [*self.class_path, *extra_class_path,
                      *filter(None, [defaults.get("spark.driver.extraClassPath")])]
        if class_path:
            conf["spark.driver.extraClassPath"] = os.pathsep.join(class_path)
        if self.slots > 1:
            # Several slots' Spark stages run jobs at once; share the cores between them.
            conf["spark.scheduler.mode"] = "FAIR"
        return conf

    @property
    def java_tmp_dir(self) -> Path:
        return self.tmp_dir / "jvm-tmp"

    def spark_environment(self) -> dict[str, str]:
        """Environment variables the JVM reads when it starts: it binds and names itself
        by `host` and looks no host name up. They override the process's own."""
        return {"SPARK_LOCAL_IP": self.host, "SPARK_LOCAL_HOSTNAME": self.host}

    def get(self) -> SparkSession:
        """The session, started on the first call (~5-10 s). The JVM is launched once per
        process: after `stop()`, a new session runs in the same JVM, with its heap; after
        the JVM died, a new JVM starts (see the class)."""
        session = self._session
        if session is not None and self._jvm_lost is None:
            return session
        with self._lock:
            lost = self._jvm_lost
            if lost is not None:
                log.warning("%s: a new Spark JVM and session start", lost)
                pyspark_patches.discard_gateway(self._session)
                self._session, self._jvm_lost = None, None
                self._broken = f"its JVM was lost ({lost})"
            if self._session is None:
                try:
                    self._session = self._start()
                except Exception as error:
                    failure = f"{type(error).__name__}: {error}"
                    if self._broken is not None and self.on_fatal is not None:
                        self.on_fatal(f"Spark could not start again after {self._broken}: "
                                      f"{failure}")
                    self._broken = f"a failed start ({failure.splitlines()[0]})"
                    raise
                self._broken = None
            return self._session

    def started(self) -> bool:
        return self._session is not None

    def jvm_pid(self) -> int | None:
        """The pid of the running session's JVM (None before it starts, or if pyspark's
        JVM was not started by this provider)."""
        session = self._session
        process = pyspark_patches.session_jvm(session) if session else None
        return process.pid if process is not None else None

    def start_in_background(self) -> None:
        """Starts the session on a daemon thread, for the first `get()` to find it up (or
        to wait less for it). A failure is logged; that `get()` then tries again and
        raises."""
        def start() -> None:
            try:
                self.get()
            except Exception:  # noqa: BLE001 - the stage that needs it raises it
                log.warning("could not start the SparkSession ahead of the first Spark "
                            "stage", exc_info=True)

        threading.Thread(target=start, daemon=True, name="start SparkSession").start()

    def add_credentials(self, token_file: Path) -> None:
        """Newer delegation tokens for a running JVM (one started later reads
        HADOOP_TOKEN_FILE_LOCATION): added to its current user, as Spark adds those its
        driver sends."""
        session = self._session
        if session is None:
            return
        jvm, hadoop_conf = pyspark_patches.hadoop_of(session)
        credentials = jvm.org.apache.hadoop.security.Credentials.readTokenStorageFile(
            jvm.java.io.File(str(token_file)), hadoop_conf)
        jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().addCredentials(credentials)

    def stop(self) -> None:
        """Stops the session and its JVM's SparkContext, if started. Idempotent."""
        with self._lock:
            session, self._session = self._session, None
            lost, self._jvm_lost = self._jvm_lost, None
        if lost is not None:
            pyspark_patches.discard_gateway(session)
        elif session is not None:
            session.stop()

    def _start(self) -> SparkSession:
        with IMPORTING:  # a task thread may be importing pyspark too
            from pyspark.sql import SparkSession

            pyspark_patches.launch_jvm_without_python_in_the_child()

        for folder in (self.java_tmp_dir, *self.local_dirs):
            folder.mkdir(parents=True, exist_ok=True)
        (self.tmp_dir / "log4j2.properties").write_text(_LOG4J2)
        os.environ.update(self.spark_environment())
        # Spark's Python workers (UDFs) run this interpreter, with its virtualenv.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # The archive's options, or none while a trainer starts to make one.
        archive = self.class_data.java_options() if self.class_data is not None else []
        class_path = self.class_data.class_path if archive and self.class_data else []
        builder = SparkSession.builder
        for key, value in self.spark_conf(archive, class_path).items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except BaseException:
            # Its JVM may have died during the start (or never answered): the next
            # start must not reuse its gateway, whose every call would be refused.
            pyspark_patches.discard_gateway(None)
            raise
        jvm = pyspark_patches.session_jvm(session)
        if jvm is not None:
            REAPER.watch_process(jvm.pid)
            if archive and self.class_data is not None:
                self.class_data.log_mapping(jvm.pid)
            threading.Thread(target=self._watch_jvm, args=(jvm, session), daemon=True,
                             name=f"Spark JVM {jvm.pid}").start()
        session.sparkContext.setLogLevel("WARN")
        return session

    def _watch_jvm(self, jvm: subprocess.Popen, session: SparkSession) -> None:
        """Reaps the session's JVM when it exits; unless the session was stopped first,
        the next `get()` starts another. The loss is recorded before the JVM is reaped:
        once its pid is gone, `get()` knows."""
        try:
            ended = os.waitid(os.P_PID, jvm.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:  # reaped by someone else meanwhile
            ended = None
        if self._session is session:
            how = ("ended" if ended is None else
                   f"exited with code {ended.si_status}" if ended.si_code == os.CLD_EXITED
                   else f"killed by signal {ended.si_status}")
            self._jvm_lost = f"the Spark JVM (pid {jvm.pid}) {how}"
            log.warning("%s; Spark stages run on a new one", self._jvm_lost)
        jvm.wait()


def _spark_defaults() -> dict[str, str]:
    """The settings of the spark-defaults.conf that spark-submit would read (in
    SPARK_CONF_DIR, else SPARK_HOME/conf; none if there is none), parsed as a Java
    properties file of one-line entries."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None)
    try:
        lines = Path(conf_dir, "spark-defaults.conf").read_text().splitlines() if conf_dir else []
    except OSError:
        lines = []
    entries = (re.match(r"([^\s=:]+)\s*[=:]?\s*(.*)", line.strip()) for line in lines
               if line.strip() and not line.lstrip().startswith(("#", "!")))
    return {entry[1]: entry[2].strip() for entry in entries if entry}
