"""Class-data sharing for the Spark JVM: its classes loaded from an archive. What the
client (which ships a portable archive) and the TaskExecutor (which maps one, or starts
its trainer) both know of it: its name, its key, its folder and its lock.

A SparkSession's JVM spends most of its start, and most of its first query, loading and
verifying some ten thousand classes from Spark's jars (on 2 cores: ~8 s to start, a
first small query ~7 s against ~1.3 s for the same query once warm). The JDK's
application class-data sharing (AppCDS, JDK 13+) keeps them, parsed and verified, in an
archive the JVM maps at start: with one, the TaskExecutor's session starts and runs its
first query in about 60 % of the time.

The archive belongs to one JDK and one class path (the JVM refuses it for another, and
then loads classes as usual), so its name is a digest of both (`archive_key`): the java
that PySpark launches, every jar of the Spark home with its size and time, and the
environment that adds to the class path. It lives in `taskmanager.spark.cds.dir`
("auto": ~/.cache/flinkyarn/spark-cds for TaskExecutors that are local processes).

In YARN containers. A container's folder goes with it, and JDK 17 takes an archive only
for the class path it was made with, each jar by its name as written (or the same file)
and its size and time. Spark's launcher names its jars by absolute paths, which differ
in every container. So the archive of the shipped environment (`portable`) is made with
the jars named first once more, relative to the JVM's working folder, through the
`environment` link that YARN makes there (spark.driver.extraClassPath; the launcher's own
absolute names follow, never used, so never checked). The client makes it, with a link
of that name to the environment it ships (whose jars keep their size and time in the
tar), in the background the first time, and ships it from then on as a file of the
HDFS cache that each node localizes once (yarn_client/shipping.py); a TaskExecutor maps
the one named by the key it computes for its own JDK and jars (`SparkClassData.shipped`),
so one made for another JDK is never tried. A PySpark driver maps it from its own
folder, through a link of the same name there; Spark's executors on YARN, which unpack
the same environment, get it localized beside it (taskexecutor/spark/script_task.py).

Making it. The first TaskExecutor that finds no archive for its key starts one trainer,
`python -m taskexecutor.spark.class_data_trainer ARCHIVE` (TRAINER, started by name: the
core imports no role), in a session of its own with CPU only when nothing else wants it
(SCHED_IDLE), and starts its own session without. The trainer starts a SparkSession
whose JVM dumps every class it loaded at exit (-XX:ArchiveClassesAtExit), runs a small
workload of what Spark stages do (Parquet in and out, a shuffle, an aggregation, a join,
Arrow to a DataFrame), lets the JVM exit, and renames the finished archive into place; a
TaskExecutor that starts later maps it. One trainer at a time per archive (an exclusive
lock file naming its process; a dead one's lock is taken over). A trainer that fails
leaves ARCHIVE.failed beside its log, so the next TaskExecutors do not try again; remove
it to retry. Each JVM that maps an archive touches it; a trainer that made one removes
the archives nobody mapped for 30 days (another JDK's, another Spark's: some 180 MB
each).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from flinkyarn import options
from flinkyarn.configuration import Configuration

log = logging.getLogger(__name__)

# What enters the Spark JVM's class path besides the Spark home's jars (spark-class,
# load-spark-env.sh). (JAVA_HOME only picks the java, which the key names itself.)
CLASS_PATH_ENVIRONMENT = ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
                          "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")
# JVM logging of class-data sharing off: a refused archive is no error (classes load as
# usual), and the dump's warnings about signed jars are noise.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_dir(conf: Configuration) -> Path | None:
    """The folder of the archives, None for none."""
    value = conf.get(options.TASK_MANAGER_SPARK_CDS_DIR).strip()
    if value != "auto":
        return Path(value).expanduser() if value else None
    if os.environ.get("CONTAINER_ID"):  # a YARN container: nothing here outlives it
        return None
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "flinkyarn" / "spark-cds"


def _java() -> Path | None:
    """The java PySpark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def spark_home() -> Path | None:
    """SPARK_HOME, else the installed pyspark package's folder, as PySpark finds its
    Spark home; found without importing pyspark (a quarter second of every TaskExecutor's start)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _files_digest(digest: "hashlib._Hash", files: list[tuple[str, Path]]) -> None:
    """Each file by the name given, its size and its time in whole seconds (what the JVM
    checks; a tar keeps no more)."""
    for name, path in files:
        stat = path.stat()
        digest.update(f"{name}\0{stat.st_size}\0{int(stat.st_mtime)}\0".encode())


def _jdk_digest(java: Path) -> "hashlib._Hash":
    """A digest started with the java and the JDK's own archive, which ours extends:
    regenerated (`java -Xshare:dump`, as a JDK package's install does), it makes ours
    unusable."""
    digest = hashlib.sha256()
    _files_digest(digest, [(str(path), path) for path in (
        java, *sorted((java.parent.parent / "lib").glob("*/classes*.jsa")))])
    return digest


def archive_key() -> str | None:
    """A digest of the JDK and the Spark JVM's class path; None when no java or no Spark
    is found."""
    java, home = _java(), spark_home()
    if java is None or home is None:
        return None
    digest = _jdk_digest(java)
    _files_digest(digest, [(str(jar), jar) for jar in sorted((home / "jars").glob("*.jar"))])
    for name in CLASS_PATH_ENVIRONMENT:
        digest.update(f"{name}={os.environ.get(name, '')}\0".encode())
    return digest.hexdigest()[:20]


# The process that makes an archive (taskexecutor/spark/class_data_trainer.py).
TRAINER = "taskexecutor.spark.class_data_trainer"

# The shipped environment's link in a YARN container's working folder
# (yarn_client.shipping.ENVIRONMENT_DIR), which the TaskExecutor's Spark JVM inherits.
PORTABLE_ROOT = "environment"
# The name of every portable archive starts so.
PORTABLE_PREFIX = "spark-portable-"


def portable_class_path(prefix: Path) -> list[str]:
    """The class path a portable archive of the environment `prefix` is made for."""
    return [name for name, _ in _portable_jars(prefix)]


def _portable_jars(prefix: Path) -> list[tuple[str, Path]]:
    """The jars of the environment `prefix`'s pyspark, each named through PORTABLE_ROOT,
    in name order; none without pyspark."""
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    jars = prefix / site / "pyspark" / "jars"
    return [(f"{PORTABLE_ROOT}/{site}/pyspark/jars/{jar.name}", jar)
            for jar in sorted(jars.glob("*.jar"))]


def portable_key(prefix: Path) -> str | None:
    """A digest of the JDK and the jars of the environment `prefix` as a container names
    them; None when no java or no pyspark is found. The same on the client for the
    environment it ships as in the container that runs it."""
    java, jars = _java(), _portable_jars(prefix)
    if java is None or not jars:
        return None
    digest = _jdk_digest(java)
    _files_digest(digest, jars)
    return PORTABLE_PREFIX.removeprefix("spark-") + digest.hexdigest()[:20]


class SparkClassData:
    """The archive of one folder for this process's JDK and Spark, or (`environment`) a
    portable one of that environment's (the module's text)."""

    def __init__(self, folder: Path, key: str, environment: Path | None = None) -> None:
        self.folder = folder
        self.archive = folder / f"spark-{key}.jsa"
        self.environment = environment
        # The Spark JVM's class path starts with these (spark.driver.extraClassPath).
        self.class_path = portable_class_path(environment) if environment is not None else []

    @classmethod
    def from_configuration(cls, conf: Configuration) -> SparkClassData | None:
        folder = archive_dir(conf)
        if folder is None:
            return cls.shipped() if conf.get(options.TASK_MANAGER_SPARK_CDS_DIR).strip() \
                == "auto" and os.environ.get("CONTAINER_ID") else None
        key = archive_key()
        return cls(folder, key) if key is not None else None

    @classmethod
    def portable(cls, conf: Configuration, environment: Path) -> SparkClassData | None:
        """The client's portable archive of the environment it ships; None when the
        option says none or the environment has no pyspark."""
        folder = archive_dir(conf)
        key = portable_key(environment) if folder is not None else None
        return cls(folder, key, environment) if folder is not None and key is not None else None

    @classmethod
    def shipped(cls) -> SparkClassData | None:
        """In a YARN container: the portable archive the client shipped for this JDK and
        the shipped environment, localized into the working folder; None without one."""
        root = Path(PORTABLE_ROOT)
        key = portable_key(root) if root.is_dir() else None
        data = cls(Path.cwd(), key, root) if key is not None else None
        return data if data is not None and data.archive.is_file() else None

    @property
    def lock(self) -> Path:
        return self.archive.with_suffix(".lock")

    @property
    def failed(self) -> Path:
        return self.archive.with_suffix(".failed")

    def java_options(self) -> list[str]:
        """The JVM options that map the archive; none, with a trainer started to make it,
        while there is none. A folder this process cannot write only costs the archive."""
        shipped = self.environment is not None and not self.environment.is_absolute()
        if self.archive.is_file():
            if not shipped:  # (a shipped one is YARN's to keep)
                with contextlib.suppress(OSError):
                    os.utime(self.archive)  # in use: see remove_unused
            return [f"-XX:SharedArchiveFile={self.archive}", *QUIET]
        if shipped:
            return []  # gone: a container makes none
        try:
            self.train_in_background()
        except OSError as error:
            log.warning("no class-data archive for the Spark JVM: cannot make one in %s: %s",
                        self.folder, error)
        return []

    def log_mapping(self, pid: int) -> bool:
        """Logs whether the JVM `pid`, started with java_options(), mapped the archive (it
        refuses one made for another class path or JDK, and loads its classes from the
        jars); returns it."""
        target = os.path.realpath(self.archive)  # a container's is YARN's link to it
        try:
            with open(f"/proc/{pid}/maps") as maps:
                found = any(line.rstrip().endswith(target) for line in maps)
        except OSError:
            return False
        if found:
            log.info("the Spark JVM maps its class-data archive %s", self.archive)
        else:
            log.warning("the Spark JVM refused its class-data archive %s; its classes load "
                        "from the jars", self.archive)
        return found

    def train_in_background(self) -> bool:
        """Starts the trainer unless one runs or one failed; whether it started one."""
        if self.failed.exists() or not self._take_lock():
            return False
        process = self._trainer()
        log.info("no class-data archive for the Spark JVM yet: trainer %d makes %s",
                 process.pid, self.archive)
        return True

    def ensure(self, timeout: float = 600.0) -> Path:
        """The archive: made now unless there is one, or waited for while a trainer makes
        it. RuntimeError when making it failed, TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.archive.is_file():
            if self.failed.exists():
                raise RuntimeError(f"making {self.archive} failed; its log: "
                                   f"{self.archive.with_suffix('.log')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {self.archive} after {timeout:g} s")
            if self._take_lock():
                self._trainer().wait(max(1.0, deadline - time.monotonic()))
            else:
                time.sleep(0.5)
        return self.archive

    def _trainer(self) -> subprocess.Popen[bytes]:
        """The trainer, started under the lock this process holds, which then names it."""
        try:
            with open(self.archive.with_suffix(".log"), "wb") as log_file:
                process = subprocess.Popen(
                    [sys.executable, "-m", TRAINER, str(self.archive),
                     *([str(self.environment)] if self.environment is not None else [])],
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    start_new_session=True)  # it lowers its own priority itself
        except OSError:
            self.lock.unlink(missing_ok=True)
            raise
        self.lock.write_text(str(process.pid))
        return process

    def _take_lock(self) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                os.close(os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                return True
            except FileExistsError:
                if _alive(self.lock):
                    return False
                # Its trainer died: take it over, without what its JVM may have dumped.
                self.lock.unlink(missing_ok=True)
                for partial in self.folder.glob(f"{self.archive.stem}.partial-*"):
                    partial.unlink(missing_ok=True)
        return False


def ensure_archive(environment: Path | None = None) -> Path | None:
    """This process's archive under the default configuration, or the portable one of
    `environment` (the client's), made now if there is none; None if there can be none.
    For benchmarks, which measure the steady state, not the one-time training."""
    conf = Configuration()
    data = SparkClassData.portable(conf, environment) if environment is not None \
        else SparkClassData.from_configuration(conf)
    return data.ensure() if data is not None else None


def _alive(lock: Path) -> bool:
    """Whether the process the lock names runs (a lock made in the last minute, naming
    none yet, is taken as alive)."""
    try:
        text = lock.read_text().strip()
        if not text:
            return time.time() - lock.stat().st_mtime < 60
    except FileNotFoundError:
        return False
    try:
        os.kill(int(text), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True


UNUSED_FOR = 30 * 24 * 3600.0


def remove_unused(folder: Path, unused_for: float = UNUSED_FOR) -> list[Path]:
    """Removes the archives no JVM mapped for `unused_for` seconds (each use touches its
    archive), with their logs and markers: another JDK's, another Spark's, another
    environment's. Returns the archives removed."""
    removed = []
    cutoff = time.time() - unused_for
    for archive in folder.glob("spark-*.jsa"):
        with contextlib.suppress(FileNotFoundError):
            if archive.stat().st_mtime < cutoff:
                for suffix in (".jsa", ".log", ".failed"):
                    archive.with_suffix(suffix).unlink(missing_ok=True)
                removed.append(archive)
    return removed


