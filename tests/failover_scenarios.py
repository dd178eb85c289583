"""Failover scenarios run the same way on a local cluster of processes and on a YARN
session (tests/local/test_failover.py, tests/yarn/test_failover_on_yarn.py). Each
submits a job that sets its own restart and failover strategies, harms it (a TaskExecutor
killed or frozen, a UDF failing), and checks the outcome: the job's result to the record
and the restarts it reports."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

import cloudpickle
import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from flinkyarn import Pipeline, checkpoints
from flinkyarn.connectors.filesystems import read_parquet, resolve
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.pipeline.operator import Operator
from tests.local import jobs
from tests.waiting import wait_for
from tests.local.jobs import (N, FailOnce, always_fails, exists, join, slow_numbers,
                              write_text)
from yarn_client.rest_client import RestClient, RestError

# HeldNumbers and HoldsOnSubtaskZero, for the tasks.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

RESTARTING = {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
              "restart-strategy.fixed-delay.delay": "200 ms"}
REGION = {**RESTARTING, "jobmanager.execution.failover-strategy": "region"}
TOTAL = N * (N + 1) // 2


@dataclass
class Target:
    """A running cluster: its REST API, how to find a TaskExecutor's process (on this
    machine), where jobs write (a folder or an hdfs:// URL) and a scratch folder that
    the test and every task reach (a local folder for local processes, an hdfs:// URL on
    YARN, whose containers see none of the client's files)."""

    rest: RestClient
    pid_of: Callable[[str], int]
    outputs: str
    scratch: str

    def output(self, name: str) -> str:
        return f"{self.outputs.rstrip('/')}/{name}-{uuid.uuid4().hex[:8]}"

    def submit(self, pipeline: Pipeline) -> str:
        return self.rest.submit(pipeline.job_graph())

    def wait_until_running(self, job_id: str, timeout: float = 180) -> None:
        wait_for(lambda: all(v.state_counts.get("RUNNING") == v.parallelism
                             for v in self.rest.job(job_id).vertices), timeout, "every task running")

    def result(self, job_id: str, timeout: float = 180) -> JobDetails:
        return wait_for(lambda: (d := self.rest.job(job_id)).status in
                        ("FINISHED", "FAILED", "CANCELED") and d, timeout, "the job to end")


def victim_of(target: Target, job_id: str) -> str:
    """A TaskExecutor with a slot of `job_id`, whose loss the job must see: in a session
    others may be idle, or on their way out after an earlier scenario."""
    return wait_for(lambda: next((te.resource_id for te in target.rest.overview().task_executors
                                  if any(s.job_id == job_id for s in te.slots)), None),
                    30, f"a TaskExecutor with a slot of job {job_id}")


def read(path: str) -> pa.Table:
    return read_parquet(path)


def restarted_tasks(details: JobDetails) -> set[str]:
    return {task for restart in details.restart_history for task in restart.restarted}


class HeldNumbers:
    """slow_numbers (a batch each 0.1 s), whose subtasks hold before their batch
    `at_batch`: each writes `held-SUBTASK` to `folder` and waits for `harmed` there.
    Attempts that start after the harm find it and do not wait. (It names what it uses
    from tests.local.jobs: pickled by value, a reference to the module takes all of it.)"""

    def __init__(self, folder: str, at_batch: int) -> None:
        self.folder = folder
        self.at_batch = at_batch

    def __call__(self, subtask: int, parallelism: int) -> Iterator[pa.RecordBatch | None]:
        for number, batch in enumerate(slow_numbers(subtask, parallelism)):
            if number == self.at_batch:
                write_text(join(self.folder, f"held-{subtask}"))
                while not exists(join(self.folder, "harmed")):
                    time.sleep(0.1)
                    yield None  # held, but its task still takes checkpoint triggers
            yield batch


def harm_a_task_executor_mid_job(target: Target, how: signal.Signals,
                                 at_batch: int = 3) -> tuple[JobDetails, str]:
    """SIGKILL or SIGSTOP (thawed once the job ended) one TaskExecutor of a running
    summing job: the job must still finish with every record counted once. Returns the
    job's details and the harmed TaskExecutor's resource id.
    In the middle of the job, for certain: the sources hold before their batch `at_batch`
    (of 20 each) until the harm is done; they have sent data downstream, and the rest is
    still to come."""
    folder = jobs.join(target.scratch, f"harm-{uuid.uuid4().hex[:8]}")
    jobs.make_folder(folder)
    out = target.output("sum")
    p = Pipeline("sum", parallelism=2, configuration=RESTARTING)
    p.from_generator(HeldNumbers(folder, at_batch), name="numbers") \
        .key_by("k").sum("n").write_parquet(out)
    job_id = target.submit(p)
    try:
        target.wait_until_running(job_id)
        wait_for(lambda: jobs.markers(folder, "held") == {"0", "1"}, 180,
                 "both sources holding in the middle of the job")
        victim = victim_of(target, job_id)
        pid = target.pid_of(victim)
        os.kill(pid, how)
    finally:
        jobs.write_text(jobs.join(folder, "harmed"))  # the sources go on
    try:
        details = target.result(job_id)
    finally:
        if how is signal.SIGSTOP:
            os.kill(pid, signal.SIGCONT)
    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts >= 1 and victim in (details.root_cause or "")
    table = read(out)
    assert pc.sum(table.column("n_sum")).as_py() == TOTAL
    assert sorted(table.column("k").to_pylist()) == [0, 1, 2, 3]
    return details, victim


def failing_udf_exhausts_fixed_delay(target: Target) -> None:
    p = Pipeline("always failing", parallelism=1,
                 configuration={**RESTARTING, "restart-strategy.fixed-delay.attempts": "2"})
    p.from_generator(slow_numbers).map(always_fails, name="check") \
        .write_parquet(target.output("never"))

    details = target.result(target.submit(p))

    assert details.status == "FAILED"
    assert details.restarts == 2 and len(details.restart_history) == 2
    assert "operator 'check': ValueError: column n has a negative value" in details.failure_cause


def failure_in_one_of_two_regions_restarts_only_that_region(target: Target) -> None:
    p = Pipeline("two regions", parallelism=1, configuration=REGION)
    left, right = target.output("left"), target.output("right")
    p.from_generator(slow_numbers, name="left source").map(lambda b: b, name="left") \
        .write_parquet(left)
    p.from_generator(slow_numbers, name="right source") \
        .map(FailOnce(jobs.join(target.scratch, f"failed-once-{uuid.uuid4().hex}")), name="right") \
        .write_parquet(right)

    details = target.result(target.submit(p))

    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts == 1
    [restart] = details.restart_history
    assert restart.restarted and all("right" in task for task in restart.restarted)
    for side in (left, right):
        assert pc.sum(read(side).column("n")).as_py() == TOTAL


class HoldsOnSubtaskZero(Operator):
    """Passes batches on. Subtask 0 writes its TaskExecutor's pid to `folder`/pid-ATTEMPT;
    its first attempt, at its first batch, writes `reading` there and holds until it is
    cancelled (or its process killed), so a test can kill it while it reads, whatever
    subtask 1 does meanwhile. (Names from tests.local.jobs: see HeldNumbers.)"""

    name = "consume"

    def __init__(self, folder: str):
        self.folder = folder

    def open(self, context):
        super().open(context)
        if context.subtask_index == 0:
            write_text(join(self.folder, f"pid-{context.attempt_number}"), str(os.getpid()))

    def process(self, batch, input_index):
        if self.context.subtask_index == 0 and self.context.attempt_number == 0:
            write_text(join(self.folder, "reading"))
            while not self.context.is_cancelled():
                time.sleep(0.1)
        return (batch,)


def lost_blocking_partition_reruns_its_producer(target: Target, exchange: str,
                                                deterministic: bool) -> None:
    """Needs one slot per TaskExecutor. A batch job: producer i and consumer i share
    slot i on TaskExecutor i. TaskExecutor 0 is killed while consumer 0 reads, after
    consumer 1 is done. The blocking result of producer 0 is lost with it: producer 0
    runs again; producer 1's result, on the surviving TaskExecutor, is read again, not
    recomputed. Consumer 1 runs again only behind a non-deterministic exchange
    (rebalance), whose re-run producer may send it different records."""
    folder = jobs.join(target.scratch, f"pids-{uuid.uuid4().hex[:8]}")
    jobs.make_folder(folder)
    out = target.output("lost")
    p = Pipeline("lost partition", parallelism=2, batch_mode=True, configuration=REGION)
    numbers = p.from_generator(slow_numbers, name="numbers")
    exchanged = numbers.key_by("k") if exchange == "key_by" else numbers.rebalance()
    exchanged.transform(HoldsOnSubtaskZero(folder), name="consume").write_parquet(out)
    job_id = target.submit(p)

    def consumers():
        [vertex] = [v for v in target.rest.job(job_id).vertices if "consume" in v.name]
        return vertex.state_counts
    wait_for(lambda: consumers().get("FINISHED") == 1 and jobs.exists(jobs.join(folder, "reading")),
             180, "consumer 1 finished while consumer 0 reads")
    os.kill(int(jobs.read_text(jobs.join(folder, "pid-0"))), signal.SIGKILL)  # its first attempt's
    details = target.result(job_id)

    assert details.status == "FINISHED", details.failure_cause
    restarted = restarted_tasks(details)
    assert any(t.startswith("Source: numbers") and "(1/2)" in t for t in restarted), restarted
    assert not any(t.startswith("Source: numbers") and "(2/2)" in t for t in restarted), restarted
    assert any("consume" in t and "(1/2)" in t for t in restarted), restarted
    assert any("consume" in t and "(2/2)" in t for t in restarted) is not deterministic, restarted
    table = read(out)
    assert pc.sum(table.column("n")).as_py() == TOTAL and table.num_rows == N


def killed_streaming_job_goes_on_from_its_checkpoint(target: Target) -> JobDetails:
    """The summing job with checkpoints (every 100 ms, under the scratch folder): a
    TaskExecutor is SIGKILLed once a checkpoint completed and while the sources hold in
    the middle of their input. The restarted tasks start from the latest checkpoint: the
    sources skip what they had emitted, the sums go on from their checkpointed partials.
    The sum is exact only if both did (a source from the start would count records
    twice, sums from zero would lose some). Beside the sums, every record goes through
    the exactly-once file sink as it comes: its folder holds each record once."""
    folder = jobs.join(target.scratch, f"harm-{uuid.uuid4().hex[:8]}")
    jobs.make_folder(folder)
    out, records = target.output("sum"), target.output("records")
    p = Pipeline("checkpointed sum", parallelism=2, configuration={
        **RESTARTING, "execution.checkpointing.interval": "100 ms",
        "state.checkpoints.dir": jobs.join(target.scratch, "checkpoints")})
    keyed = p.from_generator(HeldNumbers(folder, at_batch=10), name="numbers").key_by("k")
    keyed.sum("n").write_parquet(out)
    keyed.write_parquet(records)
    job_id = target.submit(p)
    try:
        wait_for(lambda: jobs.markers(folder, "held") == {"0", "1"}, 180,
                 "both sources holding in the middle of the job")

        def latest_completed():
            """(checkpoints view, metadata of its latest completed one) once there is one."""
            view = target.rest.job(job_id).checkpoints
            if not (view and view.completed):
                return None
            try:
                return view, checkpoints.read_metadata(checkpoints.checkpoint_directory(
                    view.directory, view.last_completed_id or 0))
            except ValueError:  # a newer one completed and subsumed it since (100 ms)
                return None

        # Each subtask's state is in it (the sums' too: both had data by batch 10).
        view, latest = wait_for(latest_completed, 60, "a completed checkpoint")
        vertices = target.rest.job(job_id).vertices
        assert sorted((t.vertex_id, t.subtask_index) for t in latest.tasks
                      if t.snapshot.operators) == sorted(
            (v.vertex_id, i) for v in vertices for i in range(v.parallelism))
        victim = victim_of(target, job_id)
        os.kill(target.pid_of(victim), signal.SIGKILL)
    finally:
        jobs.write_text(jobs.join(folder, "harmed"))
    details = target.result(job_id)
    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts >= 1 and victim in (details.root_cause or ""), \
        (victim, details.restarts, details.root_cause)
    assert details.checkpoints is not None and details.checkpoints.restored_from is not None
    # A finished job's checkpoints are deleted (externalized-checkpoint-retention), as
    # its AppMaster side winds down, just after the job shows FINISHED.
    filesystem, job_folder = resolve(view.directory)
    wait_for(lambda: filesystem.get_file_info(job_folder).type == pafs.FileType.NotFound, 30,
             "the finished job's checkpoints to be deleted")
    table = read(out)
    assert pc.sum(table.column("n_sum")).as_py() == TOTAL
    assert sorted(table.column("k").to_pylist()) == [0, 1, 2, 3]
    assert sorted(read(records).column("n").to_pylist()) == list(range(1, N + 1))
    return details


def watched_folder_job_killed_twice_keeps_every_record_once(target: Target, files: int = 24,
                                                              lines: int = 50, spark: bool = False
                                                              ) -> JobDetails:
    """Issue 14's test: an unbounded streaming job watches a folder fed while it runs
    (`files` files of `lines` numbers, renamed into place one by one), keeps a running
    count per key (a rolling aggregation: each batch's keys' counts go out) and
    writes every record and every count through the exactly-once sink; a TaskExecutor is
    SIGKILLed a third of the way in and again two thirds in (once the job runs again and
    took a new checkpoint). Once the input is exhausted (every record committed), the job
    is stopped with a savepoint: the output holds every record once, no key's running
    count twice, and each key's last count is exact. With `spark`, a Spark stage also
    sums each checkpoint interval's numbers per key into a third output: its sums add up
    to each key's total (each interval's result written once)."""
    feed = jobs.join(target.scratch, f"feed-{uuid.uuid4().hex[:8]}")
    jobs.make_folder(feed)
    counts, records, sums = target.output("counts"), target.output("records"), target.output("sums")
    p = Pipeline("watched folder", parallelism=2, configuration={
        **RESTARTING, "restart-strategy.fixed-delay.attempts": "5",
        "execution.checkpointing.interval": "500 ms" if spark else "100 ms",
        "state.checkpoints.dir": jobs.join(target.scratch, "checkpoints")})
    keyed = p.read_text(feed, monitor_interval=0.05).map(jobs.numbered, name="parse").key_by("k")
    keyed.count(running=True).write_parquet(counts)
    keyed.write_parquet(records)
    if spark:
        keyed.spark(jobs.interval_sums).write_parquet(sums)
    job_id = target.submit(p)
    victims = []
    for number in range(files):
        first = number * lines + 1
        jobs.publish(feed, f"{number:04d}.txt",
                     "".join(f"{n}\n" for n in range(first, first + lines)))
        if number in (files // 3, 2 * files // 3):
            before = target.rest.job(job_id).checkpoints
            try:
                # With a Spark stage a checkpoint completes once its interval's Spark job
                # ran, the first in a freshly started Spark JVM (after a harm, in the
                # replacement TaskExecutor): tens of seconds on a loaded machine.
                wait_for(lambda done=before.completed if before else 0:
                         (v := target.rest.job(job_id).checkpoints) and v.completed > done,
                         180 if spark else 60, "a checkpoint after the last harm")
            except AssertionError as error:
                raise AssertionError(f"{error}: {target.rest.job(job_id)}") from None
            victim = victim_of(target, job_id)
            os.kill(target.pid_of(victim), signal.SIGKILL)
            victims.append(victim)
            try:
                wait_for(lambda: (d := target.rest.job(job_id)).restarts >= len(victims)
                         and all(v.state_counts.get("RUNNING") == v.parallelism
                                 for v in d.vertices), 120, "the job running again")
            except AssertionError as error:
                raise AssertionError(f"{error}: {target.rest.job(job_id)}") from None
        time.sleep(0.05)
    total = files * lines
    wait_for(lambda: committed_rows(records) == total, 120, "every record committed")
    sums_expected = {k: sum(n for n in range(1, total + 1) if n % 4 == k) for k in range(4)}
    if spark:
        # An interval's sums run once its checkpoint completed and commit with the next:
        # stopped before, the last intervals would wait in the savepoint for a resume.
        try:
            wait_for(lambda: committed_sums(sums) == sums_expected, 120,
                     "every interval's sums committed")
        except AssertionError as error:
            raise AssertionError(f"{error}: {committed_sums(sums)} != {sums_expected}") from None
    target.rest.savepoint(job_id, jobs.join(target.scratch, "savepoints"), stop=True, timeout=60)
    details = target.result(job_id)
    assert details.status == "FINISHED", details.failure_cause
    assert details.restarts >= 2, details.restart_history
    assert sorted(read(records).column("n").to_pylist()) == list(range(1, total + 1))
    running: dict[int, list[int]] = {}
    for row in read(counts).to_pylist():
        running.setdefault(row["k"], []).append(row["count"])
    for k in range(4):
        mine = sum(1 for n in range(1, total + 1) if n % 4 == k)
        assert len(set(running[k])) == len(running[k]), (k, sorted(running[k]))  # none twice
        assert max(running[k]) == mine, k
    if spark:  # each interval's result written once
        table = read(sums)
        assert committed_sums(sums) == sums_expected, table.to_pylist()
        assert table.num_rows > 4  # more than one interval
    return details


def committed_sums(folder: str) -> dict[int, int]:
    """The committed sums of n per key k of a Spark stage's intervals, added up."""
    if committed_rows(folder) == 0:
        return {}
    per_key: dict[int, int] = {}
    table = read(folder)
    for k, n in zip(table.column("k").to_pylist(), table.column("n").to_pylist()):
        per_key[k] = per_key.get(k, 0) + n
    return per_key


def committed_rows(folder: str) -> int:
    """The rows of the visible part files of a sink's folder (0 before there are any)."""
    try:
        return read(folder).num_rows
    except (FileNotFoundError, pa.ArrowInvalid):
        return 0


def watched_counting(feed: str, records: str, counts: str, files: int, parallelism: int = 2,
                     with_counts: bool = True, tallies: str | None = None) -> Pipeline:
    """A job watching `feed` (ending after `files` files) that writes every record
    through the exactly-once sink and, at its end, the count per key (and, to
    `tallies`, what a keyed process function's state holds per key: jobs.TallyPerKey)."""
    p = Pipeline("watched", parallelism=parallelism, configuration={
        "execution.checkpointing.interval": "100 ms"})
    keyed = p.read_text(feed, monitor_interval=0.05, until_files=files) \
        .map(jobs.numbered, name="parse").key_by("k")
    keyed.write_parquet(records, uid="records")
    if with_counts:
        keyed.count(uid="counts").write_parquet(counts)
    if tallies is not None:
        keyed.process(jobs.TallyPerKey(), uid="tallies").write_parquet(tallies)
    return p


def stop_with_savepoint_and_resume(target: Target, stop: Callable[[str, str], str],
                                   files: int = 8, lines: int = 25,
                                   parallelism: tuple[int, int] = (2, 3)) -> JobDetails:
    """Half the files, then `stop(job, folder)` stops the job with a savepoint and
    returns its folder: the job ends FINISHED. A job of the same program, at the second
    `parallelism`, resumes from the savepoint into the same folders and reads the rest:
    every record once, the counts over all of them (the keyed counts went to their key
    groups' new subtasks, the sink's pending files and numbering to theirs, every reader
    knows the files read). A job that lost an operator is refused unless it allows
    non-restored state."""
    run = jobs.join(target.scratch, f"savepoint-{uuid.uuid4().hex[:8]}")
    feed, records, counts, tallies = (jobs.join(run, name)
                                      for name in ("feed", "records", "counts", "tallies"))
    jobs.make_folder(feed)

    def put(number: int) -> None:
        first = number * lines + 1
        jobs.publish(feed, f"{number:04d}.txt",
                     "".join(f"{n}\n" for n in range(first, first + lines)))

    before, after = parallelism
    first = target.submit(watched_counting(feed, records, counts, files, before, tallies=tallies))
    for number in range(files // 2):
        put(number)
    wait_for(lambda: (v := target.rest.job(first).checkpoints) and v.completed >= 2, 120,
             "checkpoints of the first job")
    location = stop(first, jobs.join(run, "savepoints"))
    assert location.startswith(jobs.join(run, "savepoints/savepoint-")), location
    assert target.result(first).status == "FINISHED"
    # Its sinks committed what the savepoint covers before their tasks ended: no file is
    # left in progress (what came after the savepoint went with the tasks).
    filesystem, folder = resolve(records)
    assert [entry.base_name for entry in filesystem.get_file_info(pafs.FileSelector(folder))
            if entry.base_name.endswith(".inprogress")] == []

    def resumed(pipeline: Pipeline, allow: bool = False):
        graph = pipeline.job_graph()
        return msgspec.structs.replace(graph, configuration={
            **graph.configuration, "execution.savepoint.path": location,
            "execution.savepoint.ignore-unclaimed-state": str(allow).lower()})

    without_counts = watched_counting(feed, records, counts, files, after, with_counts=False,
                                      tallies=tallies)
    with pytest.raises(RestError, match="state of operator .* which this job does not have"):
        target.rest.submit(resumed(without_counts))

    second = target.rest.submit(resumed(watched_counting(feed, records, counts, files, after,
                                                         tallies=tallies)))
    for number in range(files // 2, files):
        put(number)
    details = target.result(second)
    assert details.status == "FINISHED", details.failure_cause
    assert details.checkpoints is not None and details.checkpoints.restored_from is not None
    assert_each_record_once(records, counts, files * lines)
    total = files * lines
    tallied = {row["k"]: row for row in read(tallies).to_pylist()}
    assert sorted(tallied) == [0, 1, 2, 3]
    for k, row in tallied.items():
        mine = [n for n in range(1, total + 1) if n % 4 == k]
        assert (row["count"], row["top"], row["digits"]) == \
            (len(mine), sorted(mine, reverse=True)[:5], len(mine)), k
    return details


def assert_each_record_once(records: str, counts: str, total: int) -> None:
    """The records folder holds 1..total once each, the counts folder the count per key."""
    assert sorted(read(records).column("n").to_pylist()) == list(range(1, total + 1))
    table = read(counts)
    assert dict(zip(table.column("k").to_pylist(), table.column("count").to_pylist())) == {
        k: sum(1 for n in range(1, total + 1) if n % 4 == k) for k in range(4)}
