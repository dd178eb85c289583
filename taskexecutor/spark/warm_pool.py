"""A TaskExecutor's pool of warm PySpark drivers: driver processes started before their
script (taskexecutor/spark/warm_driver.py), for the next script with
pyspark.master=local on this TaskExecutor.

A script's driver spends seconds before its first line of Spark runs: Python imports
pyspark, pyspark starts its JVM (spark-submit, 1.5 s here), and the JVM's first
SparkContext loads and compiles most of Spark (3 s; a second one in the same JVM takes
0.2 s). A warm driver has done all of it: `python -m taskexecutor.spark.warm_driver
PARENT` started the JVM with the settings a script of this TaskExecutor gets, made
a SparkSession of its own, ran two small jobs (an RDD one through a Python worker, a SQL
one) and stopped it. The script then makes its own SparkContext from its own settings,
as in a driver of its own, and nothing of the warm-up is left but compiled code.
The warm-up spends the CPU time a cold script spends on its start (here some 11 s of a
core, 12 s for a cold script with an RDD job and a SQL one), only earlier: after the
script before it.

    TaskExecutor                         warm driver (cwd FOLDER/work, own group)
      launch ----------------------------> JVM up, warm-up, reads a line on stdin
      take(settings_for) ... hand_over --> {"script", "args", "properties", "cleared",
                                            "log4j"}: JVM system properties (what
                                            SparkConf reads), log4j2 reconfigured, then
                                            SCRIPT_STARTS on stdout and stderr, runpy

- Which scripts: master `local` (local[slot cores]) in a folder of the task's own (not
  the local target's, where the driver runs in the client's folder), no --py-files and
  no extra environment (both given to the JVM at its start), and the same launch-time
  settings (spark.driver.*, spark.jars*, spark.master, spark.submit.*: spark-submit
  reads them when it starts the JVM) as the warm driver had. Any other script starts
  its driver cold, as before.
- When: once this TaskExecutor ran a script that could have used one, it keeps
  `pyspark.warm-drivers` (1) ready, started REPLENISH_DELAY after a script ended or a
  slot was freed (not while one starts). Not at its start: a per-job cluster's one
  script reaches its TaskExecutor within 50 ms of it, and a warm-up under way holds a
  script up (a script that comes meanwhile cuts it short after the step under way).
- Output: the driver's pipes are the TaskExecutor's from its start; what it wrote
  before SCRIPT_STARTS (nothing, normally: Spark's log goes to a file) is the warm-up's,
  logged here, not shown as the script's.
- Memory: a ready driver (an idle JVM and Python, some 300 MB) stands in a free slot's
  place: there are never more than free slots (`free_slots`, the TaskExecutor's count),
  and a task that takes a slot without taking a warm driver ends one (make_room) if
  there would be.
- Ending: a driver that died while warm is dropped (its stderr logged); close() ends
  the ready ones (their stdin closes, then their process group is killed) and removes
  their folders. A taken driver's folder goes with its script's end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.pipeline.pyspark_script import PySparkSettings
from taskexecutor.spark.script_task import (PySparkScriptFailed, driver_conf,
                                             driver_environment, log_dir)
from taskexecutor.reaper import REAPER

log = logging.getLogger(__name__)

REPLENISH_DELAY = 0.2
LAUNCH_TIME = ("spark.driver.", "spark.jars", "spark.master", "spark.submit.")

# A driver's settings and environment for a folder: what PySparkDriver would start it with.
SettingsFor = Callable[[Path], tuple[dict[str, str], dict[str, str]]]


def _launch_time(conf: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in conf.items() if key.startswith(LAUNCH_TIME)}


def _without_submit_args(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key != "PYSPARK_SUBMIT_ARGS"}


@dataclass
class WarmDriver:
    process: subprocess.Popen
    folder: Path   # work/ (its cwd), tmp/, local/, script/, log4j2.properties
    conf: dict[str, str]
    env: dict[str, str]

    def hand_over(self, script: Path, args: list[str], conf: dict[str, str]) -> None:
        """Tells the driver to run `script` with `conf` (its JVM's system properties)."""
        job = {"script": str(script), "args": args, "properties": conf,
               "cleared": [key for key in self.conf if key not in conf],
               "log4j": (self.folder / "log4j2.properties").as_uri()}
        assert self.process.stdin is not None  # a PIPE
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.close()
        except OSError as error:  # it died since it was taken
            raise PySparkScriptFailed(f"the warm driver in {self.folder} ended before it got "
                                      f"the script ({error})") from None

    def end(self) -> None:
        """Ends what is left of the driver's process group; removes its folder."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        REAPER.forget_group(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class WarmDrivers:
    """The warm drivers of one TaskExecutor (thread-safe: task threads take them)."""

    def __init__(self, conf: Configuration, scratch: Path) -> None:
        self.conf = conf
        self.count = conf.get(options.PYSPARK_WARM_DRIVERS)
        self.root = scratch / "warm-drivers"
        self._ready: list[WarmDriver] = []
        self._lock = threading.Lock()
        self._closed = False
        self._wanted = False  # a script that could have run warm ran here
        # Slots with no task: set by the TaskExecutor (called from any thread).
        self.free_slots: Callable[[], int] = lambda: self.count
        self.command = [sys.executable, "-m", "taskexecutor.spark.warm_driver", str(os.getpid())]
        self._serial = 0
        self._timer: threading.Timer | None = None

    @staticmethod
    def eligible(settings: PySparkSettings) -> bool:
        """Whether a script with these settings may run in a warm driver."""
        return (settings.master == "local" and not settings.working_dir
                and not settings.py_files and not settings.environment)

    def start(self) -> None:
        """Launches one warm driver."""
        with self._lock:
            if self._closed:
                return
            self._serial += 1
            folder = self.root / str(self._serial)
        for name in ("work", "tmp", "local", "script"):
            (folder / name).mkdir(parents=True, exist_ok=True)
        settings = PySparkSettings(master="local")
        conf = driver_conf(self.conf, settings, folder,
                           log_dir(self.root.parent) / "spark-warm-drivers.log")
        env = driver_environment(self.conf, settings, conf, folder)
        process = subprocess.Popen(self.command, cwd=folder / "work", env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, process_group=0)
        REAPER.watch_group(process.pid)
        driver = WarmDriver(process, folder, conf, env)
        with self._lock:
            if not self._closed:
                self._ready.append(driver)
                log.info("warm PySpark driver %d starting (pid %d)", self._serial, process.pid)
                return
        driver.end()

    def take(self, settings_for: SettingsFor) -> tuple[WarmDriver, dict[str, str], dict[str, str]] | None:
        """A ready driver that a script with the settings and environment
        `settings_for(its folder)` may run in, with those; None if there is none."""
        with self._lock:
            ready = list(self._ready)
        for driver in ready:
            if driver.process.poll() is not None:
                if self._remove(driver):
                    self._dropped(driver)
                continue
            conf, env = settings_for(driver.folder)
            if (_launch_time(conf) != _launch_time(driver.conf)
                    or _without_submit_args(env) != _without_submit_args(driver.env)):
                log.info("warm PySpark driver in %s: launched with other settings than "
                         "this script's, whose driver starts cold", driver.folder)
                continue
            if self._remove(driver):  # not ended meanwhile (make_room, close)
                return driver, conf, env
        return None

    def _remove(self, driver: WarmDriver) -> bool:
        with self._lock:
            if driver not in self._ready:
                return False
            self._ready.remove(driver)
            return True

    def used(self) -> None:
        """A script that could run warm ended: from now on, keep drivers ready."""
        self._wanted = True
        self.replenish()

    def replenish(self) -> None:
        """Tops the ready drivers up (after REPLENISH_DELAY), if scripts want them."""
        with self._lock:
            if not self._wanted or self._closed or self._timer is not None:
                return
            self._timer = threading.Timer(REPLENISH_DELAY, self._replenish)
            self._timer.daemon = True
            self._timer.start()

    def _replenish(self) -> None:
        with self._lock:
            self._timer = None
            missing = 0 if self._closed else min(self.count, self.free_slots()) - len(self._ready)
        for _ in range(missing):
            try:
                self.start()
            except OSError as error:
                log.warning("cannot start a warm PySpark driver: %s", error)
                return

    def make_room(self) -> None:
        """A task took a slot and no warm driver: ends those beyond the free slots."""
        with self._lock:
            surplus = max(0, len(self._ready) - self.free_slots())
            ended, self._ready = self._ready[:surplus], self._ready[surplus:]
        for driver in ended:
            log.info("warm PySpark driver in %s ends: its slot's memory is taken", driver.folder)
            driver.end()

    def _dropped(self, driver: WarmDriver) -> None:
        assert driver.process.stderr is not None  # a PIPE
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(driver.process.pid, signal.SIGKILL)  # its JVM holds the pipes too
        error = driver.process.stderr.read().decode(errors="replace").strip()
        log.warning("warm PySpark driver in %s ended (status %s) before it got a script%s",
                    driver.folder, driver.process.returncode,
                    f": {error[-2000:]}" if error else "")
        driver.end()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
            if self._timer is not None:
                self._timer.cancel()
        for driver in ready:
            driver.end()
