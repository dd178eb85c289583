"""Class-data sharing for the TaskExecutor's Spark JVM: its classes loaded from an archive.

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
("auto": ~/.cache/flinkyarn/spark-cds for TaskExecutors that are local processes; none in
a YARN container, whose files go with the application).

Making it. The first TaskExecutor that finds no archive for its key starts one trainer,
`python -m taskexecutor.spark_cds ARCHIVE`, in a session of its own with CPU only when
nothing else wants it (SCHED_IDLE), and starts its own session without. The trainer
starts a SparkSession whose JVM dumps every class it loaded at exit
(-XX:ArchiveClassesAtExit), runs a small workload of what Spark stages do (Parquet in and
out, a shuffle, an aggregation, a join, Arrow to a DataFrame), lets the JVM exit, and
renames the finished archive into place; a TaskExecutor that starts later maps it. One
trainer at a time per archive (an exclusive lock file naming its process; a dead one's
lock is taken over). A trainer that fails leaves ARCHIVE.failed beside its log, so the
next TaskExecutors do not try again; remove it to retry. Each JVM that maps an archive
touches it; a trainer that made one removes the archives nobody mapped for 30 days
(another JDK's, another Spark's: some 180 MB each).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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


def archive_key() -> str | None:
    """A digest of the JDK and the Spark JVM's class path; None when no java or no Spark
    is found."""
    java, home = _java(), spark_home()
    if java is None or home is None:
        return None
    digest = hashlib.sha256()
    stat = java.stat()
    digest.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    # The JDK's own archive, which ours extends: regenerated (`java -Xshare:dump`, as a
    # JDK package's install does), it makes ours unusable.
    for base in sorted((java.parent.parent / "lib").glob("*/classes*.jsa")):
        stat = base.stat()
        digest.update(f"{base}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for jar in sorted((home / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for name in CLASS_PATH_ENVIRONMENT:
        digest.update(f"{name}={os.environ.get(name, '')}\0".encode())
    return digest.hexdigest()[:20]


class SparkClassData:
    """The archive of one folder for this process's JDK and Spark."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.archive = folder / f"spark-{key}.jsa"

    @classmethod
    def from_configuration(cls, conf: Configuration) -> SparkClassData | None:
        folder = archive_dir(conf)
        key = archive_key() if folder is not None else None
        return cls(folder, key) if folder is not None and key is not None else None

    @property
    def lock(self) -> Path:
        return self.archive.with_suffix(".lock")

    @property
    def failed(self) -> Path:
        return self.archive.with_suffix(".failed")

    def java_options(self) -> list[str]:
        """The JVM options that map the archive; none, with a trainer started to make it,
        while there is none. A folder this process cannot write only costs the archive."""
        if self.archive.is_file():
            with contextlib.suppress(OSError):
                os.utime(self.archive)  # in use: see remove_unused
            return [f"-XX:SharedArchiveFile={self.archive}", *QUIET]
        try:
            self.train_in_background()
        except OSError as error:
            log.warning("no class-data archive for the Spark JVM: cannot make one in %s: %s",
                        self.folder, error)
        return []

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
                    [sys.executable, "-m", "taskexecutor.spark_cds", str(self.archive)],
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_lowest_priority)
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


def _lowest_priority() -> None:
    """CPU only when nothing else wants it (Linux's SCHED_IDLE), else the lowest nice."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


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


def workload(spark, folder: Path) -> None:
    """What Spark stages do, small: the classes of those paths get archived."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    words = pa.table({"word": [f"w{i % 97}" for i in range(5000)],
                      "n": list(range(5000))})
    source = folder / "input.parquet"
    pq.write_table(words, source)
    frame = spark.read.parquet(source.as_uri())
    counts = frame.groupBy("word").agg(F.count("*").alias("count"), F.sum("n").alias("n"))
    joined = counts.join(spark.createDataFrame(words.slice(0, 100)).withColumnRenamed("n", "m"),
                         "word")
    joined.write.mode("overwrite").parquet((folder / "output").as_uri())
    spark.read.parquet((folder / "output").as_uri()).orderBy("word").limit(5).collect()


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


def train(archive: Path) -> None:
    """Makes `archive` (see the module's text); removes the lock in the end."""
    from pyspark import SparkContext

    from taskexecutor.spark_bridge import SparkSessionProvider

    lock = archive.with_suffix(".lock")
    partial = archive.with_suffix(f".partial-{os.getpid()}")
    process = None
    try:
        with tempfile.TemporaryDirectory(prefix="spark-cds-", dir=archive.parent) as work:
            provider = SparkSessionProvider(cores=2, memory_bytes=1 << 30, slots=1,
                                            tmp_dir=work, java_options=[
                                                f"-XX:ArchiveClassesAtExit={partial}", *QUIET])
            spark = provider.get()
            process = SparkContext._gateway.proc  # type: ignore[union-attr]
            workload(spark, Path(work))
            provider.stop()
            process.stdin.close()  # PySpark's JVM exits at the end of its input, and dumps
            if process.wait(timeout=600) != 0 or not partial.is_file():
                raise RuntimeError(f"the JVM ended with {process.returncode} and wrote no "
                                   f"archive")
        os.replace(partial, archive)
        print(f"written: {archive} ({archive.stat().st_size >> 20} MB)", flush=True)
        for removed in remove_unused(archive.parent):
            print(f"removed unused {removed}", flush=True)
    except BaseException as error:
        if process is not None and process.poll() is None:
            process.kill()  # no half-made archive after this process
            process.wait()
        if not isinstance(error, (SystemExit, KeyboardInterrupt)):  # stopped: may retry
            archive.with_suffix(".failed").touch()
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    train(Path(sys.argv[1]))
