"""Chaos on YARN (issue 41): the processes of a flinkyarn application, by kind, found on
this machine (every NodeManager of the test cluster runs here), killed mid-job; the job
they run, and what must hold after.

The kinds, in a TaskExecutor's container:
    taskexecutor    its Python (`python -m taskexecutor`)
    launch-script   the container's launch script (the session leader above it)
    spark-jvm       its Spark JVM (the local SparkSession of its Spark stages)
    spark-daemon    Spark's Python daemon, which forks the workers of Python UDFs
    spark-worker    a Python worker forked by that daemon
and in the AppMaster's container:
    appmaster       our AppMaster's Python
    skein-am        skein's ApplicationMaster JVM

A process belongs to the application when its environment has the CONTAINER_ID YARN
gave one of the application's containers (what it starts inherits it).

The jobs (per-job on YARN, parallelism 2 over two TaskExecutor containers of one slot
each, restarts allowed): a word count over a text corpus on HDFS whose Spark stage runs
each word through a Python UDF (so Spark's daemon and workers exist), and a
checkpointed stream of numbered rows to an exactly-once sink and through a Spark stage.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from flinkyarn.spark import python_daemon
from tests.waiting import wait_for

# Spark's Python worker daemon of ours: the TaskExecutor's local Spark's, Spark's executors'.
DAEMON_MODULES = (python_daemon.LOCAL_MODULE, python_daemon.MODULE)

KINDS = ("taskexecutor", "launch-script", "spark-jvm", "spark-daemon", "spark-worker",
         "appmaster", "skein-am")

PROGRAM = '''
import sys
import pyarrow as pa
import pyarrow.compute as pc
from flinkyarn import Pipeline

def split_words(batch):
    lowered = pc.utf8_lower(batch.column("line"))
    words = pc.list_flatten(pc.split_pattern_regex(lowered, pattern="[^a-z0-9]+"))
    return pa.record_batch([pc.filter(words, pc.not_equal(words, ""))], names=["word"])

def count_words(words):
    from pyspark.sql import functions as F
    same = F.udf(lambda word: word)  # through Spark's Python workers
    return words.select(same("word").alias("word")).groupBy("word").count()

p = Pipeline("chaos wordcount", parallelism=2)
p.read_text(sys.argv[1]).flat_map(split_words, name="split words") \\
    .key_by("word").spark(count_words, name="count words").write_parquet(sys.argv[2])
p.execute()
'''

# The streaming job: ROWS numbered rows over some 15 s, checkpointed every second; each
# row goes to an exactly-once Parquet sink, and the sums of n per k (n mod 4) of each
# checkpoint interval come from a Spark stage that runs n through a Python UDF.
STREAM_PROGRAM = '''
import sys
import pyarrow as pa
import pyarrow.compute as pc
from flinkyarn import Pipeline

records, sums, checkpoints, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def numbered(numbers):
    return pa.record_batch({"n": numbers, "k": pc.bit_wise_and(numbers, 3)})

def interval_sums(rows):
    from pyspark.sql import functions as F
    same = F.udf(lambda n: n, "long")  # through Spark's Python workers
    return rows.select("k", same("n").alias("n")).groupBy("k").agg(F.sum("n").alias("n"))

p = Pipeline("chaos stream", parallelism=2, configuration={
    "execution.checkpointing.interval": "1 s", "state.checkpoints.dir": checkpoints})
numbers = p.from_data_generator(numbered, count=rows, rows_per_second=rows / 15)
numbers.write_parquet(records)
numbers.key_by("k").spark(interval_sums, name="interval sums").write_parquet(sums)
p.execute()
'''
STREAM_ROWS = 15_000
JOBS = ("wordcount", "stream")

VALIDITY_S = 2.0
APPMASTER_KINDS = ("appmaster", "skein-am")

# Restarts for as long as the chaos lasts; one slot per TaskExecutor container, so the
# job's two subtasks run in two containers (YARN puts them on either node).
OPTIONS = ["-D", "heartbeat.interval=1 s", "-D", "heartbeat.timeout=10 s",
           "-D", "taskmanager.numberOfTaskSlots=1",
           "-D", "restart-strategy.type=fixed-delay",
           "-D", "restart-strategy.fixed-delay.attempts=1000",
           "-D", "restart-strategy.fixed-delay.delay=1 s",
           # YARN ends an application whose AppMaster fails twice within this interval
           # (its attempts, 2); lost further apart, it comes back each time.
           "-D", f"yarn.application-attempt-failures-validity-interval={VALIDITY_S:g} s"]


def expected_counts(corpus: list[Path]) -> dict[str, int]:
    """The exact word counts of the corpus, as the job counts."""
    import pyarrow.compute as pc

    counts: collections.Counter[str] = collections.Counter()
    for path in corpus:
        lines = pa.array(path.read_text().splitlines())
        words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(lines), pattern="[^a-z0-9]+"))
        counts.update(w for w in words.to_pylist() if w)
    return dict(counts)


def put_corpus(repo: Path, local: Path, megabytes: float) -> tuple[str, dict[str, int]]:
    """Two corpus files of `megabytes` each (examples/make_corpus.py) in `local` and in a
    new folder on HDFS: (that folder's URL, ending in "/", the exact word counts)."""
    import uuid

    import local_hadoop
    from flinkyarn.connectors.filesystems import resolve

    sys.path.insert(0, str(repo / "examples"))
    from make_corpus import write_corpus

    files = [local / f"part-{seed}.txt" for seed in (1, 2)]
    for seed, path in enumerate(files, 1):
        write_corpus(path, megabytes, seed=seed)
    folder = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/chaos-{uuid.uuid4().hex}"
    filesystem, path = resolve(folder)
    filesystem.create_dir(path)
    for file in files:
        with filesystem.open_output_stream(f"{path}/{file.name}") as out:
            out.write(file.read_bytes())
    return f"{folder}/", expected_counts(files)


def counts_of(output: str) -> dict[str, int]:
    """The word counts the job wrote to `output`."""
    from flinkyarn.connectors.filesystems import read_parquet

    table = read_parquet(output)
    return dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist()))


def remove(url: str) -> None:
    from flinkyarn.connectors.filesystems import resolve

    filesystem, path = resolve(url)
    filesystem.delete_dir(path)


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    container: str   # its YARN container id
    argv: list[bytes]

    @property
    def in_appmaster(self) -> bool:
        return self.container.endswith("_000001")


def processes(app_id: str) -> list[Process]:
    """Every process on this machine of one of the application's containers."""
    return container_processes(f"container_{app_id.removeprefix('application_')}_")


def container_processes(container_id: str) -> list[Process]:
    """Every process on this machine of the container `container_id` (or, ending in "_",
    of every container whose id starts so): its environment names it."""
    prefix = f"CONTAINER_ID={container_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            variables = (proc / "environ").read_bytes().split(b"\0")
            container = next((v for v in variables if v.startswith(prefix)), None)
            if container is None:
                continue
            stat = (proc / "stat").read_bytes().rpartition(b")")[2].split()
            if stat[0] in (b"Z", b"X"):
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found.append(Process(int(proc.name), int(stat[1]), container.split(b"=", 1)[1].decode(),
                             argv))
    return found


def of_kind(app_id: str, kind: str) -> list[Process]:
    """The application's running processes of `kind` (see the module docstring)."""
    every = processes(app_id)
    by_pid = {p.pid: p for p in every}

    def is_taskexecutor(p: Process) -> bool:
        return b"-m" in p.argv and b"taskexecutor" in p.argv and not p.in_appmaster

    def is_daemon_module(p: Process | None) -> bool:
        return p is not None and any(a.decode(errors="replace") in DAEMON_MODULES for a in p.argv)

    def is_java(p: Process | None) -> bool:
        return p is not None and p.argv[0].endswith(b"java")

    match kind:
        case "taskexecutor":
            return [p for p in every if is_taskexecutor(p)]
        case "launch-script":
            return [by_pid[p.ppid] for p in every if is_taskexecutor(p) and p.ppid in by_pid]
        case "spark-jvm":
            return [p for p in every if is_java(p) and not p.in_appmaster
                    and b"org.apache.spark.deploy.SparkSubmit" in p.argv]
        case "spark-daemon":
            return [p for p in every if is_daemon_module(p) and is_java(by_pid.get(p.ppid))]
        case "spark-worker":
            return [p for p in every if is_daemon_module(p)
                    and is_daemon_module(by_pid.get(p.ppid))]
        case "appmaster":
            return [p for p in every if b"yarn_am.yarn_entrypoint" in p.argv]
        case "skein-am":
            return [p for p in every if is_java(p) and p.in_appmaster]
    raise ValueError(f"unknown kind of process {kind!r}; one of {', '.join(KINDS)}")


def kill_one(app_id: str, kind: str) -> Process | None:
    """SIGKILLs one running process of `kind` (the newest); None if there is none."""
    found = of_kind(app_id, kind)
    if not found:
        return None
    victim = max(found, key=lambda p: p.pid)
    return victim if kill(victim) else None


def kill(process: Process) -> bool:
    """SIGKILLs `process`; False if it is gone already."""
    try:
        os.kill(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def describe(found: list[Process]) -> list[str]:
    return [f"{p.pid} ({p.container}): {b' '.join(p.argv)[:200].decode(errors='replace')}"
            for p in found]


def application_id(client: subprocess.Popen, stderr_lines: list[str], timeout: float) -> str:
    """The application id the client printed ("submitted application_..."), reading its
    stderr line by line into `stderr_lines` until it does."""
    assert client.stderr is not None
    deadline = time.monotonic() + timeout
    for line in client.stderr:
        stderr_lines.append(line)
        found = re.search(r"submitted (application_\d+_\d+)", line)
        if found:
            return found.group(1)
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"the client printed no application id:\n{''.join(stderr_lines)[-3000:]}")


def wait_while_running(clients: dict[str, subprocess.Popen], predicate: Callable[[], object],
                       timeout: float, what: str, poll: float = 0.05) -> None:
    """wait_for(predicate, poll=`poll`), failing at once with its output when one of
    `clients` (by name) ends first: a client that gave up is not waited for until the
    timeout."""
    ended: list[str] = []

    def done() -> object:
        ended.extend(name for name, client in clients.items() if client.poll() is not None)
        return ended or predicate()

    wait_for(done, timeout, what, poll)
    if ended:
        client = clients[ended[0]]
        raise AssertionError(f"the {ended[0]} client ended (exit {client.returncode}) before "
                             f"{what}:\n{client.communicate()[1][-3000:]}")


def start(repo: Path, program: Path, arguments: list[str], tag: str,
          text: str = PROGRAM) -> subprocess.Popen:
    """`flinkyarn run` of a chaos job (`text`: PROGRAM, the word count, whose arguments are
    the corpus and the output; or STREAM_PROGRAM: records, sums, checkpoints, rows),
    per-job on YARN, attached."""
    program.write_text(text)
    return subprocess.Popen(
        [sys.executable, "-m", "yarn_client", "run", "-t", "yarn-per-job", *OPTIONS,
         "--tags", tag, str(program), *arguments],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def committed(folder: str) -> bool:
    """Whether a sink committed a part file to `folder` (a checkpoint completed)."""
    import pyarrow.fs as pafs

    from flinkyarn.connectors.filesystems import resolve

    filesystem, path = resolve(folder)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(path))
    except (FileNotFoundError, OSError):
        return False
    return any(info.base_name.startswith("part-") for info in infos)


def check_stream(records: str, sums: str, rows: int = STREAM_ROWS) -> None:
    """Every row in the records once, and the interval sums adding up to each k's."""
    from flinkyarn.connectors.filesystems import read_parquet

    numbers = sorted(read_parquet(records).column("n").to_pylist())
    assert numbers == list(range(rows)), (
        f"{len(numbers)} records, {len(set(numbers))} distinct, of {rows}")
    table = read_parquet(sums)
    by_key: collections.Counter[int] = collections.Counter()
    for k, n in zip(table.column("k").to_pylist(), table.column("n").to_pylist()):
        by_key[k] += n
    assert dict(by_key) == {k: sum(range(k, rows, 4)) for k in range(4)}, dict(by_key)


def nothing_left(app_id: str, timeout: float = 60.0) -> None:
    """After the application ended: within `timeout`, no process of it runs here."""
    try:
        wait_for(lambda: not processes(app_id), timeout, "no process of the application")
    except AssertionError:
        raise AssertionError(f"processes of {app_id} still run {timeout:g} s after its end:\n"
                             + "\n".join(describe(processes(app_id)))) from None
