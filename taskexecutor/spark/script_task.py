"""The task of a PySparkScript (flinkyarn/pipeline/pyspark_script.py), in the
TaskExecutor: runs the script's driver as a process of its own
(taskexecutor/spark/driver.py) and follows it.

    script text -> <task scratch>/script/NAME.py
    python -m taskexecutor.spark.driver TE_PID NAME.py ARGS
        cwd:  settings.working_dir, or <task scratch>/work with --files and --archives
        env:  PYSPARK_SUBMIT_ARGS="--master ... --conf ... pyspark-shell" (read by pyspark
              when the script's SparkContext launches its JVM), PYSPARK_PYTHON (the
              executors' interpreter), SPARK_LOCAL_IP (the TaskExecutor's host)

- Warm: a pyspark.master=local script may run in a driver started before it, its JVM
  up and warmed (taskexecutor/spark/warm_pool.py): its folder is that driver's, its
  settings go to the JVM's system properties, and what the driver wrote before the
  SCRIPT_STARTS mark is not the script's.
- Output: the driver's stdout and stderr (its JVM inherits them) are read as they come,
  appended to `pyspark-<job>.log` in the container's log folder and sent to the
  JobMaster every 0.2 s, and once more, completely, before the task ends, so an
  attached client has every line before it hears the result. Spark's own log goes to
  `spark-<job>.log` beside it (log4j2), or, with pyspark.show-spark-logs, WARN and up
  to stderr as spark-submit shows it.
- On a secure cluster, the Spark application on YARN gets delegation tokens of its own
  from the AppMaster where it has a keytab (a token file for the driver, in its
  scratch): YARN cancels an application's tokens when it ends, and the TaskExecutor's
  must outlive it.
- The Spark application on YARN carries the tag `flinkyarn-task-<attempt>` (and
  `flinkyarn-job-<job>` and our application's id); it is found by that tag through the
  ResourceManager's REST API and reported to the JobMaster, with its tracking URL
  through YARN's web proxy. Its AM runs inside the driver (an unmanaged AM, which client
  mode's AM may be: it only asks YARN for executors; not on a Kerberos cluster), so the
  executors are asked for without a container and a JVM start first; the JobMaster
  kills the application if the driver dies with its TaskExecutor.
- Cancel: SIGTERM to the driver's process group (the Python driver, its JVM, local
  Python workers), SIGKILL after half of task.cancellation.timeout (at most 10 s), then
  the Spark application is killed through the ResourceManager if it still runs. The
  driver dies with the TaskExecutor too (parent-death signal, see the launcher).
- Result: exit status 0 finishes the task. Any other fails it; the cause names the
  status, the script's last traceback (from its stderr) and, if it ended badly, the
  Spark application's final status and diagnostics.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from flinkyarn import hadoop, hdfs, kerberos, options, retry
from flinkyarn.configuration import Configuration
from flinkyarn.gateways.job_master import OutputChunk
from flinkyarn.spark import python_daemon
from flinkyarn.spark.class_data import PORTABLE_ROOT, QUIET, SparkClassData
from taskexecutor.reaper import REAPER, group_alive
from taskexecutor.spark.warm_driver import SCRIPT_STARTS

if TYPE_CHECKING:
    from collections.abc import Callable

    from flinkyarn.pipeline.pyspark_script import PySparkScript, PySparkSettings

log = logging.getLogger(__name__)

MIB = 1 << 20
FLUSH_INTERVAL = 0.2
MAX_REPORT_CHARS = 512 * 1024
TERMINAL = hadoop.APPLICATION_ENDED  # a YARN application's


class PySparkScriptFailed(RuntimeError):
    """The driver exited with a status other than 0."""


def last_traceback(lines: list[str], most: int = 30) -> str:
    """The last Python traceback in `lines` (from its 'Traceback' line on), else the
    last few lines."""
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("Traceback (most recent call last)"):
            return "\n".join(lines[index:][-most:])
    return "\n".join(lines[-10:])


def proxied(app: dict) -> dict:
    """The ResourceManager's report of a Spark application, its tracking URL through
    YARN's web proxy: the RM gives an unmanaged AM's (the driver's UI, on a node's
    address) as registered, but proxies it like any other."""
    if app.get("unmanagedApplication") and app.get("trackingUrl"):
        return {**app, "trackingUrl": f"{hadoop.rm_web_address()}/proxy/{app['id']}/"}
    return app


def spark_master_url(master: str, cores: int) -> str:
    return f"local[{cores}]" if master == "local" else master


def log4j2_properties(log_file: Path, console: bool) -> str:
    # The shells' loggers at the root's level: Spark then leaves the console alone (no
    # "Setting default log level" line; pyspark's JVM is PythonGatewayServer's).
    lines = ["rootLogger.level = info",
             "logger.repl.name = org.apache.spark.repl.Main",
             "logger.repl.level = info",
             "logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer",
             "logger.pyspark.level = info",
             "rootLogger.appenderRef.file.ref = file",
             "appender.file.type = File",
             "appender.file.name = file",
             f"appender.file.fileName = {log_file}",
             "appender.file.append = true",
             "appender.file.layout.type = PatternLayout",
             "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"]
    if console:
        lines += ["rootLogger.appenderRef.console.ref = console",
                  "appender.console.type = Console",
                  "appender.console.name = console",
                  "appender.console.target = SYSTEM_ERR",
                  "appender.console.filter.threshold.type = ThresholdFilter",
                  "appender.console.filter.threshold.level = warn",
                  "appender.console.layout.type = PatternLayout",
                  "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"]
    return "\n".join(lines) + "\n"


def slot_share(conf: Configuration) -> tuple[int, int]:
    """(cores, memory bytes) of one slot of a TaskExecutor of configuration `conf`."""
    slots = conf.get(options.NUM_TASK_SLOTS)
    cores = max(1, math.floor(conf.get(options.TASK_MANAGER_CPU_CORES) / slots))
    return cores, conf.get(options.TASK_MANAGER_PROCESS_MEMORY) // slots


def log_dir(te_tmp: Path) -> Path:
    """Where drivers' logs go: the container's log folder (YARN), else the scratch's."""
    dirs = os.environ.get("LOG_DIRS", "")
    folder = Path(dirs.split(",")[0]) if dirs else te_tmp / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def driver_conf(te_conf: Configuration, settings: "PySparkSettings", work: Path, log_file: Path,
                master_conf: "Callable[[dict[str, str], dict[str, str]], None] | None" = None,
                ) -> dict[str, str]:
    """A driver's Spark settings: ours, the master's (`master_conf(conf, user)`, which
    may take user settings it merges), then what the user set (--conf and the options
    standing for it). Writes the driver's log4j2.properties into `work`."""
    _, memory = slot_share(te_conf)
    host = te_conf.get(options.TASK_MANAGER_HOST)
    (work / "log4j2.properties").write_text(log4j2_properties(log_file, settings.show_spark_logs))
    java = [f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'}",
            f"-Djava.io.tmpdir={work / 'tmp'}", "-XX:-UsePerfData"]
    user = dict(settings.spark_conf)
    conf = {
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.driver.memory": f"{max(512, memory // 2 // MIB)}m",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(work / "local"),
    }
    if master_conf is not None:
        master_conf(conf, user)
    else:  # this process's Python workers import pyspark compiled (taskexecutor/spark/daemon.py)
        conf["spark.python.daemon.module"] = python_daemon.LOCAL_MODULE
    class_data = _class_data(te_conf, settings)
    if class_data is not None:
        java = [*class_data.java_options(), *java]
    if class_data is not None and class_data.class_path:
        # Its jars are named through `environment`: the driver's folder (the script's
        # working folder, work/work) links the container's.
        link = work / "work" / PORTABLE_ROOT
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path(PORTABLE_ROOT).absolute())
        conf["spark.driver.extraClassPath"] = os.pathsep.join(filter(None, [
            *class_data.class_path, user.pop("spark.driver.extraClassPath", "")]))
    if user.get("spark.driver.extraJavaOptions"):
        java = [*shlex.split(user.pop("spark.driver.extraJavaOptions")), *java]
    conf["spark.driver.extraJavaOptions"] = shlex.join(java)
    conf.update(user)
    return conf


def _class_data(te_conf: Configuration, settings: "PySparkSettings") -> SparkClassData | None:
    """The class-data archive of the TaskExecutor's own Spark JVM, for a driver whose
    JVM has that class path: this machine's (the driver's Spark home is the
    TaskExecutor's), or the one the client shipped into a YARN container, whose jars
    are named through a link in the driver's folder. That folder must be ours: none in a
    folder of the user's, or where a --files or --archives takes the link's name."""
    data = SparkClassData.from_configuration(te_conf)
    if data is None or not data.class_path:
        return data
    names = {name for _, name in settings.archives} | {
        spec.partition("#")[2] or Path(spec.partition("#")[0]).name for spec in settings.files}
    return None if settings.working_dir or PORTABLE_ROOT in names else data


def submit_args(te_conf: Configuration, settings: "PySparkSettings", conf: dict[str, str]) -> str:
    """PYSPARK_SUBMIT_ARGS: what pyspark passes spark-submit when it starts its JVM."""
    cores, _ = slot_share(te_conf)
    args = ["--master", spark_master_url(settings.master, cores)]
    if settings.master == "yarn":
        args += ["--deploy-mode", "client"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return shlex.join([*args, "pyspark-shell"])


def driver_environment(te_conf: Configuration, settings: "PySparkSettings",
                       conf: dict[str, str], work: Path) -> dict[str, str]:
    """The driver process's environment: the TaskExecutor's, with pyspark's settings."""
    env = dict(os.environ)
    for key in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
        env.pop(key, None)
    host = te_conf.get(options.TASK_MANAGER_HOST)
    env.update({"PYTHONUNBUFFERED": "1", "TMPDIR": str(work / "tmp"),
                "SPARK_LOCAL_IP": host, "SPARK_LOCAL_HOSTNAME": host,
                "PYSPARK_SUBMIT_ARGS": submit_args(te_conf, settings, conf)})
    if settings.master == "yarn":
        if not (env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR")):
            raise PySparkScriptFailed("pyspark.master=yarn needs the Hadoop configuration "
                                      "(HADOOP_CONF_DIR) where the TaskExecutor runs")
        env["PYSPARK_PYTHON"] = te_conf.get(options.PYSPARK_PYTHON) or sys.executable
    else:
        env["PYSPARK_PYTHON"] = sys.executable
    env.update(settings.environment)
    return env


class PySparkDriver:
    def __init__(self, script: "PySparkScript", context) -> None:
        self.script = script
        self.settings = script.settings
        self.context = context
        environment = context.environment
        self.conf = environment.conf if environment.conf is not None else Configuration({})
        self.te_tmp = Path(environment.tmp_dir)
        self.tag = f"flinkyarn-task-{context.attempt_id}"
        self._pending: list[OutputChunk] = []
        self._pending_lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._stderr_tail: deque[str] = deque(maxlen=300)
        self._log_file: TextIO | None = None
        self._ended = threading.Event()
        self.spark_application: dict | None = None

    # ------------------------------------------------------------------ set-up

    @property
    def yarn(self) -> bool:
        return self.settings.master == "yarn"

    def spark_conf(self, work: Path, log_folder: Path) -> dict[str, str]:
        """Our settings, under what the user set (--conf and the options standing for it)."""
        return driver_conf(self.conf, self.settings, work,
                           log_folder / f"spark-{self.context.job_id}.log",
                           self._yarn_conf if self.yarn else None)

    def _yarn_conf(self, conf: dict[str, str], user: dict[str, str]) -> None:
        """Spark on YARN's settings, merged with the user's lists (which it takes)."""
        tags = [self.tag, f"flinkyarn-job-{self.context.job_id}"]
        app = os.environ.get("SKEIN_APPLICATION_ID")  # skein sets it in every container
        if app:
            tags.append(app)
        conf["spark.yarn.tags"] = ",".join([*tags, *filter(None, user.pop(
            "spark.yarn.tags", "").split(","))])
        if f"/{python_daemon.CACHE_KIND}-" in self.settings.environment.get("PYSPARK_ARCHIVES_PATH", ""):
            # The executors' Python workers import pyspark compiled (taskexecutor/spark/daemon.py).
            conf["spark.python.daemon.module"] = python_daemon.MODULE
        archive = self.conf.get(options.PYSPARK_PYTHON_ARCHIVE)
        archives = [a for a in (archive, user.pop("spark.yarn.dist.archives", "")) if a]
        if archives:
            conf["spark.yarn.dist.archives"] = ",".join(archives)
        try:
            hdfs_site = hadoop.site_properties("hdfs-site.xml")
            secure = kerberos.security_enabled()
        except hadoop.HadoopConfigError:  # environment() says what is missing
            hdfs_site, secure = {}, False
        # Client mode's Spark AM only asks YARN for executors: it runs inside the
        # driver (an unmanaged AM), which spares a container and a JVM start before
        # the first executor is asked for. Not on a Kerberos cluster: there the
        # driver, with delegation tokens only, waited for its AM to start forever.
        # With unmanagedAM=false, a lean JVM.
        conf["spark.yarn.unmanagedAM.enabled"] = "false" if secure else "true"
        # How often the driver asks YARN whether its application was accepted (then
        # its AM starts) and runs (then the SparkContext is up): 1 s by default,
        # twice on the way to the first executor.
        conf["spark.yarn.clientLaunchMonitorInterval"] = "100ms"
        conf.update({f"spark.hadoop.{key}": value for key, value
                     in hadoop.CLIENT_HDFS.items() if key not in hdfs_site})
        conf["spark.yarn.am.extraJavaOptions"] = " ".join(filter(None, (
            hadoop.LEAN_JVM, user.pop("spark.yarn.am.extraJavaOptions", ""))))
        self._executor_class_data(conf, user)
        if "spark.executor.instances" not in user:
            most = self.conf.get(options.PYSPARK_MAX_EXECUTORS)
            # More executors than the first two once tasks waited 15 s, not 1 s (Spark's
            # default), then twice as many every 5 s: an executor asked for takes 7-12 s
            # to run tasks (container, JVM, Python workers), so one asked for sooner
            # mostly starts while the first two finish the tasks (a short job ends before
            # it ran anything), and on a busy cluster its start slows those two down.
            # pi.py 100 on the two-node test cluster: 45.5 s with 5 s, 38.6 s with 10 s,
            # 34.6 s with 15 s, 34.9 s with two fixed executors (medians of 3).
            conf.update({"spark.dynamicAllocation.enabled": "true",
                         "spark.dynamicAllocation.shuffleTracking.enabled": "true",
                         "spark.dynamicAllocation.minExecutors": "0",
                         "spark.dynamicAllocation.initialExecutors": str(min(2, most)),
                         "spark.dynamicAllocation.maxExecutors": str(most),
                         "spark.dynamicAllocation.schedulerBacklogTimeout": "15s",
                         "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": "5s"})

    def _executor_class_data(self, conf: dict[str, str], user: dict[str, str]) -> None:
        """Spark's executors map the class-data archive this TaskExecutor maps, localized
        beside the same environment (spark.yarn.dist.files), its jars named alike."""
        uri = self.conf.get(options.PYSPARK_CLASS_DATA_ARCHIVE)
        shipped = SparkClassData.from_configuration(self.conf) \
            if uri and os.environ.get("CONTAINER_ID") else None
        if shipped is None or not shipped.class_path or Path(uri).name != shipped.archive.name \
                or not self.conf.get(options.PYSPARK_PYTHON_ARCHIVE).endswith(f"#{PORTABLE_ROOT}"):
            return
        conf["spark.yarn.dist.files"] = ",".join(filter(None, [
            uri, user.pop("spark.yarn.dist.files", "")]))
        conf["spark.executor.extraClassPath"] = os.pathsep.join(filter(None, [
            *shipped.class_path, user.pop("spark.executor.extraClassPath", "")]))
        conf["spark.executor.extraJavaOptions"] = " ".join(filter(None, [
            f"-XX:SharedArchiveFile={shipped.archive.name}", *QUIET,
            user.pop("spark.executor.extraJavaOptions", "")]))

    def environment(self, conf: dict[str, str], work: Path) -> dict[str, str]:
        return driver_environment(self.conf, self.settings, conf, work)

    def _own_tokens(self, env: dict[str, str], work: Path) -> None:
        """Spark on YARN on a secure cluster: the driver's token file holds tokens of its
        application's own where the AppMaster can obtain them."""
        provider = self.context.environment.application_tokens
        if not self.yarn or provider is None or not kerberos.security_enabled():
            return
        try:
            data = provider(f"the Spark application of {self.script.script_name} "
                            f"(job {self.context.job_id})")
        except Exception as error:
            raise PySparkScriptFailed(f"could not obtain delegation tokens for its Spark "
                                      f"application: {kerberos.first_line(error)}") from None
        if data:
            tokens = kerberos.read_token_storage(data)
            env[kerberos.TOKEN_FILE_VARIABLE] = str(kerberos.write_token_file(tokens, work / "tokens"))

    def _fetch(self, url: str, target: Path) -> Path:
        """A copy (hdfs://) or a link (a local path) of `url` at `target`."""
        target.parent.mkdir(parents=True, exist_ok=True)
        if hdfs.is_hdfs(url):
            hdfs.filesystem(url).get(hdfs.path_of(url), str(target))
        else:
            target.symlink_to(Path(url).resolve())
        return target

    def _prepare_working_dir(self, work: Path) -> Path:
        """The driver's folder, with --files and --archives, as spark-submit's cluster
        mode gives them to its driver; --py-files into `work/py-files`."""
        if self.settings.working_dir:
            return Path(self.settings.working_dir)
        folder = work / "work"
        folder.mkdir(parents=True, exist_ok=True)
        for spec in self.settings.files:
            url, _, name = spec.partition("#")
            self._fetch(url, folder / (name or Path(url).name))
        for url, name in self.settings.archives:
            local = self._fetch(url, work / "tmp" / "archives" / Path(url).name)
            shutil.unpack_archive(str(local), str(folder / name))
        return folder

    def _python_path(self, work: Path) -> list[str]:
        entries = []
        for spec in self.settings.py_files:
            url, _, name = spec.partition("#")
            local = self._fetch(url, work / "py-files" / (name or Path(url).name))
            entries.append(str(local.parent if local.suffix == ".py" else local))
        return list(dict.fromkeys(entries))

    # --------------------------------------------------------------------- output

    def _pump(self, stream, name: str, skip: str = "") -> None:
        """Passes what the driver writes to `stream` on; a warm driver's from after
        `skip` (what its warm-up wrote goes to our log)."""
        log_file = self._log_file
        assert log_file is not None  # opened before the driver starts
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        partial = ""
        skipped = ""
        while True:
            data = os.read(stream.fileno(), 65536)
            text = decoder.decode(data, final=not data)
            if skip:
                skipped += text
                before, found, text = skipped.partition(skip)
                if found or not data:
                    if before.strip():
                        log.info("%s: the warm driver's %s before the script: %s",
                                 self.script.name, name, before.strip()[-2000:])
                    skip = ""
                    text = text if found else ""
                else:
                    text = ""
            if text:
                log_file.write(text)
                log_file.flush()
                with self._pending_lock:
                    self._pending.append(OutputChunk(name, text))
                if name == "stderr":
                    *lines, partial = (partial + text).split("\n")
                    self._stderr_tail.extend(lines)
            if not data:
                if partial and name == "stderr":
                    self._stderr_tail.append(partial)
                return

    def _flush(self, spark: dict | None = None) -> None:
        """Sends what is pending (in pieces of at most MAX_REPORT_CHARS), in order."""
        with self._report_lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
            batches: list[list[OutputChunk]] = []
            batch: list[OutputChunk] = []
            size = 0
            for chunk in pending:
                if batch and batch[-1].stream == chunk.stream and size + len(chunk.text) <= MAX_REPORT_CHARS:
                    batch[-1] = OutputChunk(chunk.stream, batch[-1].text + chunk.text)
                elif batch and size + len(chunk.text) > MAX_REPORT_CHARS:
                    batches.append(batch)
                    batch, size = [chunk], 0
                else:
                    batch.append(chunk)
                size += len(chunk.text)
            if batch:
                batches.append(batch)
            if spark is not None and not batches:
                batches.append([])
            for index, chunks in enumerate(batches):
                info = spark if index == 0 and spark is not None else {}
                try:
                    self.context.report_output(chunks, info.get("id"), info.get("trackingUrl"))
                except Exception as error:  # the JobMaster may be gone; the log has it all
                    log.warning("could not send the output of %s: %s", self.script.name, error)
                    return

    def _flusher(self) -> None:
        while not self._ended.wait(FLUSH_INTERVAL):
            self._flush()

    def _find_spark_application(self) -> None:
        """Polls the ResourceManager for the application tagged with this attempt, until
        it is known with its tracking URL (YARN gives that once it accepted it)."""
        while not self._ended.wait(1.0):
            try:
                found = hadoop.applications_tagged(self.tag)
            except (OSError, ValueError) as error:
                log.debug("cannot ask the ResourceManager for %s: %s", self.tag, error)
                continue
            if found and found[0] != self.spark_application:
                self.spark_application = proxied(found[0])
                self._flush(self.spark_application)
                if found[0].get("trackingUrl"):
                    return

    # ------------------------------------------------------------------------ run

    def run(self) -> None:
        """Runs the driver to its end, on the task's thread. Returns when the script
        exited 0 or the task was cancelled (the caller tells them apart and reports a
        cancel), raises PySparkScriptFailed when the script failed."""
        log_folder = log_dir(self.te_tmp)
        pool = self.context.environment.warm_drivers
        may_run_warm = pool is not None and pool.eligible(self.settings)
        warm = pool.take(lambda folder: self._settings_for(folder, log_folder)) \
            if may_run_warm else None
        if warm is not None:
            driver, conf, env = warm
            work = driver.folder
        else:
            if pool is not None:
                pool.make_room()
            work = Path(self.context.tmp_dir)
            for folder in ("script", "tmp", "local"):
                (work / folder).mkdir(parents=True, exist_ok=True)
            conf, env = self._settings_for(work, log_folder)
            self._own_tokens(env, work)
        script = work / "script" / self.script.script_name
        script.write_text(self.script.source, encoding="utf-8")
        cwd = self._prepare_working_dir(work)
        python_path = self._python_path(work)
        if python_path:
            env["PYTHONPATH"] = os.pathsep.join([*python_path, *filter(None, [env.get("PYTHONPATH")])])
        log.info("%s: starting the driver (master %s%s) in %s", self.script.name,
                 self.settings.master, ", warm" if warm else "", cwd)
        try:
            if warm is not None:
                warm[0].hand_over(script, self.script.args, conf)
                process = warm[0].process
            else:
                process = subprocess.Popen(
                    [sys.executable, "-m", "taskexecutor.spark.driver", str(os.getpid()),
                     str(script), *self.script.args],
                    cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, process_group=0)
                REAPER.watch_group(process.pid)
            self._drive(process, log_folder / f"pyspark-{self.context.job_id}.log",
                        warm is not None)
        finally:
            if warm is not None:  # its process group is gone; it may not have started
                warm[0].end()
            if may_run_warm:
                assert pool is not None
                pool.used()

    def _settings_for(self, work: Path, log_folder: Path) -> tuple[dict[str, str], dict[str, str]]:
        conf = self.spark_conf(work, log_folder)
        return conf, self.environment(conf, work)

    def _drive(self, process: subprocess.Popen, log_path: Path, warm: bool) -> None:
        """Shows the driver's output as it comes (and appends it to `log_path`), waits
        for its end, ends what it left."""
        log_file = self._log_file = open(log_path, "a", encoding="utf-8")
        assert process.stdout is not None and process.stderr is not None  # PIPEs
        skip = SCRIPT_STARTS if warm else ""
        threads = [threading.Thread(target=self._pump, args=(process.stdout, "stdout", skip), daemon=True),
                   threading.Thread(target=self._pump, args=(process.stderr, "stderr", skip), daemon=True),
                   threading.Thread(target=self._flusher, daemon=True)]
        if self.yarn:
            threads.append(threading.Thread(target=self._find_spark_application, daemon=True))
        for thread in threads:
            thread.start()
        self.context.on_cancel(lambda: _signal_group(process.pid, signal.SIGTERM))
        try:
            code = self._wait(process)
        finally:
            self._ended.set()
            for thread in threads[:2]:
                thread.join(timeout=10)
            self._flush()
            log_file.close()
            process.stdout.close()
            process.stderr.close()
        spark_end = self._end_spark_application(cancelled=self.context.is_cancelled())
        if self.context.is_cancelled():
            return  # the task's to report (its StreamTask raises TaskCancelled)
        if code != 0:
            cause = f"the script exited with status {code}"
            if code < 0:
                cause = f"the script was killed by signal {-code}"
            detail = last_traceback(list(self._stderr_tail))
            raise PySparkScriptFailed(f"{cause}{spark_end}" + (f"\n{detail}" if detail else ""))

    def _grace(self) -> float:
        timeout = self.conf.get(options.TASK_CANCELLATION_TIMEOUT)
        return min(10.0, timeout / 2) if timeout > 0 else 10.0

    def _wait(self, process: subprocess.Popen) -> int:
        """Waits for the driver; on cancel, ends its process group (TERM, then KILL).
        After the driver exited, what it left in its group gets the grace period to end
        (its JVM ends when its stdin closes), then is killed."""
        killed_at = None
        while process.poll() is None:
            if self.context.is_cancelled():
                if killed_at is None:
                    _signal_group(process.pid, signal.SIGTERM)
                    killed_at = time.monotonic()
                elif time.monotonic() - killed_at > self._grace():
                    _signal_group(process.pid, signal.SIGKILL)
            time.sleep(0.05)
        exited = time.monotonic()
        with contextlib.suppress(retry.GaveUp):
            retry.poll_until(lambda: not group_alive(process.pid), bool,
                             pauses=retry.Backoff.fixed(0.05), deadline=retry.Deadline(
                                 0 if self.context.is_cancelled() else self._grace()))
        _signal_group(process.pid, signal.SIGKILL)
        REAPER.forget_group(process.pid)
        log.info("%s: the driver exited (status %s); its JVM and workers %.2f s later",
                 self.script.name, process.returncode, time.monotonic() - exited)
        return process.returncode

    def _end_spark_application(self, cancelled: bool) -> str:
        """Makes sure the Spark application ended; returns what the failure cause should
        say of it (empty if it succeeded or was never started)."""
        if not self.yarn:
            return ""
        app = self.spark_application
        if app is None:
            try:
                found = hadoop.applications_tagged(self.tag)
            except (OSError, ValueError):
                return ""
            if not found:
                return ""
            app = self.spark_application = proxied(found[0])
            self._flush(app)
        app_id = app["id"]
        try:
            try:  # a cancelled script's application is killed at once
                report = retry.poll_until(
                    lambda: hadoop.rm_request(f"/ws/v1/cluster/apps/{app_id}")["app"],
                    lambda report: report["state"] in TERMINAL, pauses=retry.Backoff.fixed(0.2),
                    deadline=retry.Deadline(0 if cancelled else 5.0))
            except retry.GaveUp as gave_up:
                report = gave_up.last_value
            if report["state"] not in TERMINAL:
                log.info("killing Spark application %s of %s", app_id, self.script.name)
                hadoop.kill_application(app_id)
                return f" (Spark application {app_id} killed)"
        except (OSError, ValueError, KeyError) as error:
            log.warning("cannot end Spark application %s: %s", app_id, error)
            return f" (Spark application {app_id}: its state is unknown: {error})"
        if report.get("finalStatus") in ("FAILED", "KILLED"):
            diagnostics = (report.get("diagnostics") or "").strip()
            return (f" (Spark application {app_id} {report['finalStatus']}"
                    f"{': ' + diagnostics.splitlines()[0] if diagnostics else ''})")
        return ""


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
