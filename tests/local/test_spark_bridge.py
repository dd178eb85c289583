"""The PySpark bridge with a real local Spark: the TaskExecutor's shared session, Spark
stages and unmodified PySpark scripts. One session serves the whole module (Spark takes
~10 s to start). It maps this machine's class-data archive for the Spark JVM (made first
if there is none, as a TaskExecutor's trainer makes it: taskexecutor/spark/class_data_trainer.py) with
-Xshare:on, so the session does not start unless the JVM takes the archive."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.pipeline.spark_stage import SparkStage
from taskexecutor.spark.bridge import MIB, SparkMemoryBudget, SparkSessionProvider
from taskexecutor.spark.pyspark_patches import GatewayPopen
from flinkyarn.spark import python_daemon
from flinkyarn.spark.class_data import SparkClassData
from tests.local.conftest import children, cmdline
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    class_data = SparkClassData.from_configuration(Configuration())
    assert class_data is not None, "a local process has a class-data archive folder by default"
    class_data.ensure()
    provider = SparkSessionProvider(cores=2, memory_bytes=1024 * MIB, slots=2,
                                    tmp_dir=tmp_path_factory.mktemp("spark"),
                                    class_data=class_data, java_options=["-Xshare:on"])
    yield provider
    provider.stop()


@dataclass
class Context:
    provider: SparkSessionProvider
    tmp_dir: str
    batch_size: int = 1000
    subtask_index: int = 0
    parallelism: int = 1
    attempt_number: int = 0
    job_id: str = "job"
    task_name: str = "spark task (1/1)"
    checkpointing: bool = False
    cancelled: threading.Event = field(default_factory=threading.Event)

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def spark(self):
        return self.provider.get()


def run_stage(stage: SparkStage, context: Context, *inputs: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    stage.open(context)
    try:
        for index, batches in enumerate(inputs):
            for batch in batches:
                assert list(stage.process(batch, index)) == []
            assert list(stage.end_input(index)) == []
        return list(stage.finish())
    finally:
        stage.close()


# --- the session ----------------------------------------------------------------------


def test_concurrent_first_gets_start_exactly_one_session(provider):
    if provider.started():
        provider.stop()
    starts = []
    original_start = provider._start
    provider._start = lambda: starts.append(1) or original_start()
    barrier = threading.Barrier(4)
    sessions = []

    def get():
        barrier.wait()
        sessions.append(provider.get())

    threads = [threading.Thread(target=get) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    del provider._start
    assert len(starts) == 1
    assert len(sessions) == 4 and all(session is sessions[0] for session in sessions)
    from pyspark.sql import SparkSession
    assert SparkSession.builder.getOrCreate() is sessions[0]


def test_session_is_sized_to_the_task_executor(provider):
    spark = provider.get()
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.driver.memory") == "512m"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark._jvm.java.lang.Runtime.getRuntime().maxMemory() <= 512 * MIB
    assert spark.sparkContext.uiWebUrl is None


def test_the_spark_jvm_maps_the_class_data_archive(provider):
    # With -Xshare:on a JVM that cannot map the archive (another JDK, another class
    # path) does not start at all: the session being up is the proof; these are the
    # options that got it there.
    spark = provider.get()
    arguments = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert f"-XX:SharedArchiveFile={provider.class_data.archive}" in arguments
    assert "-Xshare:on" in arguments


def test_the_spark_jvm_is_started_without_python_in_its_forked_child(provider):
    """A TaskExecutor runs gRPC: pyspark's own start (a preexec_fn) could kill the child
    before its exec. tests/unit/test_spark_gateway.py shows what GatewayPopen does."""
    assert isinstance(provider.get().sparkContext._gateway.proc, GatewayPopen)


def test_the_spark_jvm_listens_on_loopback_only(provider):
    spark = provider.get()
    pid = spark.sparkContext._gateway.proc.pid
    inodes = {link.split("[")[1].rstrip("]") for link in
              (str(fd.readlink()) for fd in Path(f"/proc/{pid}/fd").iterdir() if fd.is_symlink())
              if link.startswith("socket:[")}
    listening = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                listening.append(cols[1].split(":")[0])
    assert listening
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert set(listening) <= loopback, listening


def test_memory_budget_covers_python_and_the_spark_jvm():
    budget = SparkMemoryBudget.of(4096 * MIB)
    assert (budget.jvm_heap, budget.python) == (2048 * MIB, 4096 * MIB - 2048 * MIB - budget.jvm_overhead)
    assert budget.jvm_heap + budget.jvm_overhead + budget.python == budget.process
    with pytest.raises(ConfigurationError, match="taskmanager.memory.process.size"):
        SparkMemoryBudget.of(768 * MIB)


# --- Spark stages -----------------------------------------------------------------------

ORDERS = pa.table({"order_id": [1, 2, 3, 4, 5, 6],
                   "user_id": [10, 11, 10, 12, 13, 11],
                   "amount": [5.0, 7.5, 2.5, 1.0, 100.0, 2.5]})
USERS = pa.table({"user_id": [10, 11, 12, 14], "country": ["nl", "de", "nl", "fr"]})


def revenue_by_country(orders, users):
    from pyspark.sql import functions as F
    return (orders.join(users, "user_id")
            .groupBy("country")
            .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
            .orderBy("country"))


def test_stage_joins_and_aggregates_two_inputs(provider, tmp_path):
    stage = SparkStage(revenue_by_country, num_inputs=2)
    context = Context(provider, str(tmp_path), batch_size=1)
    batches = run_stage(stage, context, ORDERS.to_batches(max_chunksize=2), USERS.to_batches())
    assert [batch.num_rows for batch in batches] == [1, 1]
    assert pa.Table.from_batches(batches).to_pylist() == [
        {"country": "de", "revenue": 10.0, "orders": 2},
        {"country": "nl", "revenue": 8.5, "orders": 3},
    ]
    assert list(tmp_path.iterdir()) == []  # the spill file is gone
    assert stage.name == "spark(revenue_by_country)"


def test_two_slots_run_spark_stages_at_once(provider, tmp_path):
    results, errors = [], []

    def slot(number: int) -> None:
        try:
            context = Context(provider, str(tmp_path / str(number)), subtask_index=number)
            batches = run_stage(SparkStage(revenue_by_country, num_inputs=2), context,
                                ORDERS.to_batches(), USERS.to_batches())
            results.append(pa.Table.from_batches(batches).column("revenue").to_pylist())
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=slot, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == [[10.0, 8.5], [10.0, 8.5]]


def test_stage_over_empty_inputs(provider, tmp_path):
    from pyspark.sql import functions as F
    context = Context(provider, str(tmp_path))
    [batch] = run_stage(SparkStage(revenue_by_country, num_inputs=2), context,
                        [pa.RecordBatch.from_pylist([], schema=ORDERS.schema)], USERS.to_batches())
    assert batch.num_rows == 0 and batch.schema.names == ["country", "revenue", "orders"]
    # nothing arrived and no schema (a subtask no key hashed to, behind a function whose
    # output nothing declares): no frame to give the function, which is not run; its
    # columns would not resolve ("word" in examples/wordcount.py over three words)
    assert run_stage(SparkStage(lambda df: df.groupBy("word").count()), context, []) == []
    assert run_stage(SparkStage(lambda df: df.agg(F.count(F.lit(1)).alias("n"))), context, []) == []
    # nothing arrived, schema declared
    [batch] = run_stage(SparkStage(lambda df: df.select("amount"), schemas=[ORDERS.schema]), context, [])
    assert batch.num_rows == 0 and batch.schema.names == ["amount"]


def test_errors_of_the_function_and_of_spark_propagate(provider, tmp_path):
    context = Context(provider, str(tmp_path))

    def broken(df):
        raise ValueError("no good")

    with pytest.raises(ValueError, match="no good"):
        run_stage(SparkStage(broken), context, ORDERS.to_batches())
    with pytest.raises(Exception, match="no_such_column"):
        run_stage(SparkStage(lambda df: df.select("no_such_column")), context, ORDERS.to_batches())
    with pytest.raises(TypeError, match=r"spark\(counting\): the function must return a "
                                        r"pyspark.sql.DataFrame, it returned int"):
        run_stage(SparkStage(lambda df: df.count(), name="spark(counting)"), context, ORDERS.to_batches())


@pytest.mark.parametrize("when", ["while its job runs", "before its job starts"])
def test_cancelling_the_task_cancels_its_spark_job(provider, tmp_path, when):
    """Before its job starts: the stage's function sees the task cancelled, and the
    watcher's first look after that finds no job to cancel (as when a loaded machine is
    still planning it); the job that starts later is cancelled all the same. It would
    run for hours: pytest's timeout ends the test if it is not cancelled."""
    context = Context(provider, str(tmp_path))

    def endless(df):
        if when == "before its job starts":
            context.cancelled.set()
            time.sleep(0.5)  # the watcher looks every 0.2 s
        return df.sparkSession.range(0, 10**13, numPartitions=4).selectExpr("sum(id % 7) AS s")
    if when == "while its job runs":
        threading.Timer(2.0, context.cancelled.set).start()
    with pytest.raises(Exception, match="(?i)cancel"):
        run_stage(SparkStage(endless), context, ORDERS.to_batches())
    assert provider.get().range(3).count() == 3  # the session is fine


# --- a Spark stage in a stream ---------------------------------------------------------

def totals(df):
    from pyspark.sql import functions as F
    return df.groupBy("k").agg(F.sum("n").alias("n")).orderBy("k")


def numbers(*ns: int) -> pa.RecordBatch:
    return pa.record_batch({"k": [n % 2 for n in ns], "n": list(ns)})


def test_in_a_stream_the_stage_runs_once_per_completed_checkpoint_interval(provider, tmp_path):
    """Interval 1 (1, 2) closes at barrier 1 and runs when checkpoint 1 completes;
    interval 2 (3) closes at barrier 2, which fails: a restore from checkpoint 1 (the
    state at barrier 1 had interval 1 pending) runs interval 1 again, and its output is
    what the restored downstream gets; checkpoint 2's interval runs once it completes."""
    context = Context(provider, str(tmp_path), checkpointing=True)
    stage = SparkStage(totals)
    stage.open(context)
    assert list(stage.process(numbers(1, 2), 0)) == []
    state = stage.snapshot_state(1)
    assert state["input-0"].column("n").to_pylist() == [1, 2]
    assert list(stage.process(numbers(3), 0)) == []          # not complete yet: held
    assert pa.Table.from_batches(stage.notify_checkpoint_complete(1)).to_pylist() == [
        {"k": 0, "n": 2}, {"k": 1, "n": 1}]
    stage.snapshot_state(2)
    assert list(stage.notify_checkpoint_complete(1)) == []    # ran already
    stage.close()

    again = SparkStage(totals)
    again.open(Context(provider, str(tmp_path), checkpointing=True, attempt_number=1))
    again.initialize_state(state)
    out = pa.Table.from_batches(list(again.process(numbers(3), 0))).to_pylist()
    assert out == [{"k": 0, "n": 2}, {"k": 1, "n": 1}]      # interval 1, again
    assert again.snapshot_state(2)["input-0"].column("n").to_pylist() == [3]
    assert pa.Table.from_batches(list(again.notify_checkpoint_complete(2))).to_pylist() == [
        {"k": 1, "n": 3}]
    assert list(again.finish()) == []
    again.close()
    assert list(tmp_path.iterdir()) == []


def test_in_a_stream_empty_intervals_run_nothing_and_the_end_runs_the_rest(provider, tmp_path):
    stage = SparkStage(totals)
    stage.open(Context(provider, str(tmp_path), checkpointing=True))
    stage.snapshot_state(1)
    assert list(stage.notify_checkpoint_complete(1)) == []   # nothing arrived: no Spark job
    stage.process(numbers(5), 0)
    stage.snapshot_state(2)                                   # pending at the end
    stage.process(numbers(7), 0)
    assert pa.Table.from_batches(list(stage.finish())).to_pylist() == [
        {"k": 1, "n": 5}, {"k": 1, "n": 7}]
    stage.close()


# --- a Spark that dies under the TaskExecutor --------------------------------------------


def python_doubling(df):
    """A stage whose rows go through Spark's Python workers (forked by Spark's daemon)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    double = F.udf(lambda amount: amount * 2, DoubleType())
    return df.select(double("amount").alias("doubled")).orderBy("doubled")


DOUBLED = sorted(amount * 2 for amount in ORDERS.column("amount").to_pylist())


def doubled(provider, tmp_path, name: str) -> list[float]:
    batches = run_stage(SparkStage(python_doubling), Context(provider, str(tmp_path / name)),
                        ORDERS.to_batches())
    return pa.Table.from_batches(batches).column("doubled").to_pylist()


def test_a_killed_spark_jvm_is_reaped_and_the_next_stage_runs_on_a_new_one(provider, tmp_path):
    """Issue 41: a TaskExecutor whose Spark JVM was killed failed every Spark stage with
    'Connection refused', and the JVM stayed a zombie."""
    assert doubled(provider, tmp_path, "before") == DOUBLED
    old = provider.jvm_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{old}").exists(), 60, "the killed JVM to be reaped", poll=0.01)
    assert doubled(provider, tmp_path, "after") == DOUBLED
    assert provider.jvm_pid() not in (None, old)


def test_a_killed_spark_python_daemon_is_spark_s_to_start_again(provider, tmp_path):
    assert doubled(provider, tmp_path, "before") == DOUBLED
    jvm = provider.jvm_pid()
    daemons = [pid for pid in children(jvm) if python_daemon.LOCAL_MODULE.encode() in cmdline(pid)]
    assert daemons, "the stage's UDF runs in a worker of Spark's Python daemon"
    for daemon in daemons:
        os.kill(daemon, signal.SIGKILL)
    assert doubled(provider, tmp_path, "after") == DOUBLED
    assert provider.jvm_pid() == jvm


def test_a_spark_that_cannot_start_again_is_fatal_for_its_task_executor(provider, tmp_path):
    provider.get()
    fatal: list[str] = []
    provider.on_fatal = fatal.append
    old = provider.jvm_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{old}").exists(), 60, "the killed JVM to be reaped", poll=0.01)
    # Spark refuses to launch a driver JVM with -Xmx among its java options
    provider.java_options.append("-Xmx64m")
    try:
        with pytest.raises(Exception, match="JAVA_GATEWAY_EXITED|Java gateway"):
            provider.get()
    finally:
        provider.java_options.pop()
        provider.on_fatal = None
    [cause] = fatal
    assert cause.startswith(f"Spark could not start again after its JVM was lost (the Spark "
                            f"JVM (pid {old}) killed by signal 9)"), cause
    assert doubled(provider, tmp_path, "later") == DOUBLED  # a start that can, starts


def test_a_spark_jvm_killed_while_the_session_starts_is_not_reused(provider, tmp_path):
    """The chaos run on YARN killed a TaskExecutor's JVM while its session started: pyspark
    kept its gateway to the dead JVM, and every later start was refused."""
    provider.get()
    old = provider.jvm_pid()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{old}").exists(), 60, "the old JVM to be reaped", poll=0.01)

    failed: list[BaseException] = []

    def start() -> None:
        try:
            provider.get()
        except BaseException as error:  # what the first stage would see
            failed.append(error)

    starting = threading.Thread(target=start)
    starting.start()
    # Killed once pyspark holds its gateway, while the context is being made in it.
    from pyspark import SparkContext

    def launched():
        process = getattr(SparkContext._gateway, "proc", None)
        return process.pid if process is not None and process.pid != old else None
    jvm = wait_for(launched, 60, "the new session's JVM to be launched", poll=0.01)
    os.kill(jvm, signal.SIGKILL)
    starting.join(120)
    assert failed, "the start with its JVM killed failed"
    assert doubled(provider, tmp_path, "after") == DOUBLED
    assert provider.jvm_pid() not in (None, jvm)

