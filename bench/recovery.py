"""Failover figures (issue 6): how long a job takes to run again after it loses a
TaskExecutor, and how much of a job region failover restarts compared with restart-all.

1. Recovery time. The job is tests/local/jobs.py's summing_pipeline (1..20000 summed per
   key, parallelism 2, a source and a keyed sum -> sink, one pipelined region; each
   subtask runs ~2 s), under restart-strategy fixed-delay (3 attempts, DELAY). Once every
   task is RUNNING and KILL_AFTER more seconds have passed, the TaskExecutor holding the
   job's slots gets

       SIGKILL  its process ends: the local driver or YARN reports it and the
                ResourceManager tells the JobMaster, or the JobMaster's heartbeat calls
                are refused heartbeat.rpc-failure-threshold (2) times in a row,
                whichever comes first;
       SIGSTOP  it is frozen, alive to the kernel and to YARN: only the heartbeat timeout
                (heartbeat.timeout) tells; SIGCONT once the job has finished;

   and `rest.job` is polled every --poll-ms until it shows
       restart decided   restarts >= 1,
       RUNNING again     restarts >= 1 and every subtask of every vertex RUNNING (the figure),
       FINISHED          the job finished; its output must sum to N(N+1)/2 exactly, else
                         the run is reported as an error, never as a figure.
   "minus delay" is the figure less the restart delay, which the JobMaster waits by design.

   local   a LocalCluster of real processes per run (AppMaster and TaskExecutors on
           loopback), with the local tests' settings (tests/local/conftest.py FAST:
           heartbeat.interval 250 ms, heartbeat.timeout 2 s, 2 slots per TaskExecutor).
           Rows: SIGKILL with DELAY, SIGKILL with delay 0 ms, SIGSTOP with DELAY; the
           three interleaved, --runs of each.
   yarn    ONE session cluster on the local Hadoop (heartbeat.interval 1 s,
           heartbeat.timeout 10 s, 2 slots; resourcemanager.taskmanager-timeout 2 s so an
           idle TaskExecutor's container goes away between runs), --yarn-runs SIGKILLs of
           the TaskExecutor's process inside its container, a new job each run. The
           ResourceManager replaces the killed container.

   Baselines, measured in the same runs on the same clusters (submit -> every task
   RUNNING, no failure):
       free slots         a new job while an idle TaskExecutor has free slots (local: the
                          SIGKILL runs, after the recovered job finished; yarn: likewise);
       new TaskExecutor   a job that needs a TaskExecutor started first: local, the first
                          job of each fresh cluster (a new process); yarn, the job that is
                          then killed, submitted once YARN shows no TaskExecutor container
                          (a new container).
   Recovery is reported in seconds and as ratios ("x free", "x new TE") to the medians of
   those baselines. A lost TaskExecutor always means a new one here (it held both slots),
   so "x new TE" is the ratio to compare across machines.

   Where the time goes: the AppMaster's own log (millisecond stamps, read while the
   cluster runs: the local cluster's appmaster.log; on YARN the AppMaster container's
   application.driver.log in the NodeManager's log folder of this single-node Hadoop):
   the JobMaster told that the TaskExecutor is lost, a new TaskExecutor requested,
   started (local: process spawned; yarn: skein reports the container RUNNING, polled
   every 0.5 s by the driver), registered. A step whose line is not there is left out
   (None), never guessed.

2. Restart fraction, region failover vs restart-all, with the pure state machines (no
   cluster): an ExecutionGraph of each shape is put in a realistic state and
   RegionFailoverStrategy / RestartAllFailoverStrategy are asked `tasks_to_restart` for
   the failed subtask(s), as the Scheduler asks (union over the failed subtasks, those
   still CREATED left out). Shapes: examples/wordcount.py's (parallelism 4) in batch and
   in streaming mode, the batch one also losing a TaskExecutor of two slots; source ->
   map -> sink with forward edges at parallelism 8 (chaining off, so the edges exist:
   chained, it is one vertex and the fraction is the same 1/8); two independent chains
   (tests/local/test_failover.py's two-regions job). The two-regions shape is also run on
   a local cluster with each strategy (a map failing once): the restarted tasks the job
   reports (`restart_history[0].restarted`) must match the state machine's.

Clocks: everything is this machine's epoch clock, time.time(), so the AppMaster's log
stamps compare with the client's. Polled client times are upper bounds: at most one
poll (--poll-ms) plus one REST round trip late. On YARN, "kill -> JobMaster told"
depends on where in skein's allocate cycle (yarn.heartbeat.interval while no container is
pending) the kill
falls: YARN reports a container's end to skein's ApplicationMaster only on that
heartbeat. The cold-start baseline's submissions are spread over that cycle (as
bench/yarn.py does); the kills are not: each comes KILL_AFTER after its job runs, and
that job's container was allocated on one of those heartbeats, so the kills tend to fall
at the same point of the cycle run after run.
These machines are shared and noisy: compare ratios, never assert on absolute times.

usage: .venv/bin/python bench/recovery.py [--runs 5] [--yarn-runs 3] [--poll-ms 20]
                                          [--skip-local] [--skip-yarn]
Writes bench/results/recovery-<YYYYmmdd-HHMMSS>.json. The YARN part needs the local
Hadoop (`integration/cluster up`; run `eval "$(integration/cluster env)"` first).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "integration"))

import cloudpickle  # noqa: E402
import local_hadoop  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from flinkyarn import Pipeline, options  # noqa: E402
from flinkyarn.configuration import Configuration  # noqa: E402
from flinkyarn.connectors.filesystems import read_parquet  # noqa: E402
from flinkyarn.gateways.dispatcher import JobDetails  # noqa: E402
from flinkyarn.ids import ExecutionVertexID  # noqa: E402
from tests.local import jobs  # noqa: E402
from tests.local.conftest import FAST, task_executor_process  # noqa: E402
from tests.local.jobs import N, FailOnce, slow_numbers, summing_pipeline  # noqa: E402
from yarn_am.jobmaster.execution_graph import ExecutionGraph, ExecutionState  # noqa: E402
from yarn_am.jobmaster.failover_strategy import (FailureKind, RegionFailoverStrategy,  # noqa: E402
                                                 RestartAllFailoverStrategy)
from yarn_client import yarn_cluster  # noqa: E402
from yarn_client.local_cluster import LocalCluster  # noqa: E402
from yarn_client.rest_client import RestClient, RestError  # noqa: E402
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions  # noqa: E402

cloudpickle.register_pickle_by_value(jobs)

RESULTS_DIR = REPO / "bench" / "results"
RUN_ID = uuid.uuid4().hex[:8]
TAG = f"flinkyarn-bench-{RUN_ID}"
HDFS_DIR = f"/tmp/flinkyarn-bench/recovery-{RUN_ID}"
TOTAL = N * (N + 1) // 2
DELAY = "200 ms"
KILL_AFTER = 0.3    # seconds between every task RUNNING and the kill: early in a ~2 s job
JOB_TERMINAL = ("FINISHED", "FAILED", "CANCELED")
APP_LIVE = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"
# skein's allocate interval while no container is pending (yarn.heartbeat.interval, patched)
SKEIN_IDLE_HEARTBEAT = min(5.0, Configuration().get(options.YARN_HEARTBEAT_INTERVAL))


def restarting(delay: str) -> dict[str, str]:
    return {"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
            "restart-strategy.fixed-delay.delay": delay}


def seconds(duration: str) -> float:
    value, unit = duration.split()
    return float(value) * {"ms": 1e-3, "s": 1.0}[unit]


LOCAL_MODES = (("SIGKILL", DELAY), ("SIGKILL", "0 ms"), ("SIGSTOP", DELAY))
YARN_OVERRIDES = {"heartbeat.interval": "1 s", "heartbeat.timeout": "10 s",
                  "taskmanager.numberOfTaskSlots": "2",
                  "resourcemanager.taskmanager-timeout": "2 s", "slot.idle.timeout": "1 s",
                  **restarting(DELAY)}


def median(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def step(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


class RunFailed(RuntimeError):
    """A run that is no measurement: the job failed, ended early, or its sum is wrong."""


# ====================================================================== the job

def all_running(details: JobDetails) -> bool:
    return details.status == "RUNNING" and all(
        v.state_counts.get("RUNNING", 0) == v.parallelism for v in details.vertices)


def restarted_and_running(details: JobDetails) -> bool:
    return details.restarts >= 1 and all_running(details)


def watch(rest: RestClient, job_id: str, marks: dict[str, Callable[[JobDetails], bool]],
          until: str, poll: float, timeout: float = 180.0) -> tuple[dict[str, float], JobDetails]:
    """Polls the job every `poll` s until mark `until` holds: the time (epoch, when the
    answer arrived) each mark was first seen to hold, and the last answer. A job that
    ends before `until` holds raises RunFailed."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while True:
        sent = time.monotonic()
        details = rest.job(job_id)
        now = time.time()
        for name, condition in marks.items():
            if name not in seen and condition(details):
                seen[name] = now
        if until in seen:
            return seen, details
        if details.status in JOB_TERMINAL:
            raise RunFailed(f"job {job_id} ended {details.status} before {until!r} "
                            f"(seen: {sorted(seen)}): {details.failure_cause}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id}: {until!r} not seen within {timeout:g} s")
        time.sleep(max(0.0, sent + poll - time.monotonic()))


def check_sum(out: str) -> None:
    total = pc.sum(read_parquet(out).column("n_sum")).as_py()
    if total != TOTAL:
        raise RunFailed(f"wrong result in {out}: n_sum adds up to {total}, not {TOTAL}")


def submit_until_running(rest: RestClient, out: str, poll: float) -> tuple[str, dict[str, float]]:
    """Submits a summing job; (job id, epoch times of 'submit' and 'running')."""
    graph = summing_pipeline(out).job_graph()
    submitted = time.time()
    job_id = rest.submit(graph)
    seen, _ = watch(rest, job_id, {"running": all_running}, "running", poll)
    return job_id, {"submit": submitted, "running": seen["running"]}


def finish(rest: RestClient, job_id: str, out: str, poll: float) -> None:
    watch(rest, job_id, {"finished": lambda d: d.status == "FINISHED"}, "finished", poll)
    check_sum(out)


def job_task_executors(rest: RestClient, job_id: str) -> list[str]:
    return [te.resource_id for te in rest.overview().task_executors
            if any(slot.job_id == job_id for slot in te.slots)]


def harm_and_watch(rest: RestClient, job_id: str, out: str, how: str, poll: float) -> dict:
    """Kills (SIGKILL) or freezes (SIGSTOP) the TaskExecutor holding the job's slots and
    watches the job recover and finish; a frozen one is thawed once the job is over."""
    victims = job_task_executors(rest, job_id)
    if not victims:
        raise RunFailed(f"job {job_id}: no TaskExecutor holds its slots")
    pid = task_executor_process(victims[0])
    time.sleep(KILL_AFTER)
    harmed = time.time()
    os.kill(pid, getattr(signal, how))
    try:
        seen, details = watch(rest, job_id, {
            "restart decided": lambda d: d.restarts >= 1,
            "running again": restarted_and_running,
            "finished": lambda d: d.status == "FINISHED"}, "finished", poll)
    finally:
        if how == "SIGSTOP":
            os.kill(pid, signal.SIGCONT)
    if "running again" not in seen:
        raise RunFailed(f"job {job_id} finished without being seen RUNNING again")
    check_sum(out)
    return {"job_id": job_id, "victim": victims[0], "task_executors_of_job": len(victims),
            "harmed": harmed, **seen, "restarts": details.restarts,
            "root_cause": details.root_cause,
            "restarted_tasks": len(details.restart_history[0].restarted)
            if details.restart_history else None}


def detected_by(root_cause: str | None) -> str:
    if root_cause and "timed out" in root_cause:
        return "heartbeat timeout"
    if root_cause and "unreachable" in root_cause:
        return "calls refused"
    if root_cause and "container" in root_cause:
        return "container end"
    if root_cause and "process" in root_cause:
        return "process end"
    return "other"


# ====================================================================== the AppMaster's log

_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ appmaster \S+: (.*)$")


class AppMasterLog:
    """The AppMaster's log lines as (epoch, message); its stamps are local time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[tuple[float, str]] = []
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            if m := _LOG_LINE.match(line):
                at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                self.lines.append((at, m[2]))

    def first(self, pattern: str, after: float) -> tuple[float, re.Match] | tuple[None, None]:
        # Stamps are truncated to the millisecond: allow that much before `after`.
        compiled = re.compile(pattern)
        for at, message in self.lines:
            if at >= after - 0.001 and (m := compiled.search(message)):
                return at, m
        return None, None

    def new_worker(self, after: float) -> dict[str, float | None]:
        """The first TaskExecutor requested after `after`: when it was requested, its
        container requested (YARN), started and registered."""
        requested, m = self.first(r"requested worker (\S+) \(", after)
        if m is None:
            return {"worker requested": None, "container requested": None,
                    "worker started": None, "registered": None}
        worker = re.escape(m[1])
        return {"worker requested": requested,
                "container requested": self.first(rf"worker {worker}: container \S+ requested",
                                                  after)[0],
                "worker started": self.first(rf"worker {worker} started", after)[0],
                "registered": self.first(rf"TaskExecutor {worker} registered from ", after)[0]}

    def recovery(self, run: dict) -> dict[str, float | None]:
        told, _ = self.first(rf"job {run['job_id']}: TaskExecutor {re.escape(run['victim'])} lost",
                             run["harmed"])
        return {"jobmaster told": told, **self.new_worker(run["harmed"])}


def yarn_driver_log(app_id: str) -> Path:
    """The AppMaster container's log while the application runs (single-node Hadoop)."""
    container = f"container_{app_id[len('application_'):]}_01_000001"
    return (local_hadoop.Layout.default().data / "nm-logs" / app_id / container
            / "application.driver.log")


# (row, from, to) of the breakdowns; keys of a run's merged client and log times.
RECOVERY_STEPS = (
    ("harm -> JobMaster told TaskExecutor lost (log)", "harmed", "jobmaster told"),
    ("  -> new TaskExecutor requested (log)", "jobmaster told", "worker requested"),
    ("  -> TaskExecutor started (log)", "worker requested", "worker started"),
    ("  -> TaskExecutor registered (log)", "worker started", "registered"),
    ("  -> every task RUNNING again (client)", "registered", "running again"),
    ("harm -> every task RUNNING again (client)", "harmed", "running again"),
)
COLD_STEPS = (
    ("submit -> TaskExecutor requested (log)", "submit", "worker requested"),
    ("  -> TaskExecutor started (log)", "worker requested", "worker started"),
    ("  -> TaskExecutor registered (log)", "worker started", "registered"),
    ("  -> every task RUNNING (client)", "registered", "running"),
    ("submit -> every task RUNNING (client)", "submit", "running"),
)


def breakdown(runs: list[dict], steps) -> dict[str, float | None]:
    return {name: median(step(r.get(a), r.get(b)) for r in runs) for name, a, b in steps}


# ====================================================================== 1. local

def local_run(mode: str, delay: str, work: Path, poll: float) -> dict:
    """One fresh LocalCluster: a first job (new TaskExecutor baseline), its TaskExecutor
    harmed, recovery watched; after a SIGKILL a second job (free slots baseline)."""
    cluster = LocalCluster(Configuration.load(overrides={**FAST, **restarting(delay)}),
                           work_dir=work / f"cluster-{uuid.uuid4().hex[:8]}")
    cluster.start()
    try:
        rest = cluster.rest
        out = str(work / f"out-{uuid.uuid4().hex[:8]}")
        job_id, cold = submit_until_running(rest, out, poll)
        record = harm_and_watch(rest, job_id, out, mode, poll)
        log = AppMasterLog(cluster.log_file)
        record.update(log.recovery(record))
        record["cold"] = {**cold, **log.new_worker(cold["submit"])}
        if mode == "SIGKILL":
            out = str(work / f"out-{uuid.uuid4().hex[:8]}")
            warm_id, record["warm"] = submit_until_running(rest, out, poll)
            finish(rest, warm_id, out, poll)
        return record
    finally:
        cluster.stop()


def two_regions(folder: str) -> Pipeline:
    """tests/local/test_failover.py's two-regions job: two independent chains, the
    right one failing once."""
    p = Pipeline("two regions", parallelism=1)
    p.from_generator(slow_numbers, name="left source").map(lambda b: b, name="left") \
        .write_parquet(f"{folder}/left")
    p.from_generator(slow_numbers, name="right source") \
        .map(FailOnce(f"{folder}/failed-once"), name="right") \
        .write_parquet(f"{folder}/right")
    return p


def two_regions_on_cluster(strategy: str, work: Path, poll: float) -> dict:
    """The two-regions job on a local cluster with failover strategy `strategy`: the
    tasks its first restart restarted, of how many."""
    overrides = {**FAST, **restarting(DELAY), "jobmanager.execution.failover-strategy": strategy}
    cluster = LocalCluster(Configuration.load(overrides=overrides),
                           work_dir=work / f"cluster-{strategy}")
    folder = work / f"two-regions-{strategy}"
    folder.mkdir()
    cluster.start()
    try:
        job_id = cluster.rest.submit(two_regions(str(folder)).job_graph())
        _, details = watch(cluster.rest, job_id, {"end": lambda d: d.status in JOB_TERMINAL},
                           "end", poll)
    finally:
        cluster.stop()
    if details.status != "FINISHED" or details.restarts != 1:
        raise RunFailed(f"two regions, {strategy}: {details.status} after {details.restarts} "
                        f"restarts: {details.failure_cause}")
    for side in ("left", "right"):
        total = pc.sum(read_parquet(folder / side).column("n")).as_py()
        if total != TOTAL:
            raise RunFailed(f"two regions, {strategy}: {side} adds up to {total}, not {TOTAL}")
    restarted = details.restart_history[0].restarted
    return {"restarted": len(restarted), "total": sum(v.parallelism for v in details.vertices),
            "restarted_tasks": restarted}


def local_figures(runs: int, poll: float, failures: list[str]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="flinkyarn-bench-recovery-"))
    samples: dict[str, list[dict]] = {f"{mode}, delay {delay}": [] for mode, delay in LOCAL_MODES}
    try:
        for index in range(runs):  # interleaved, so drift hits every row alike
            for mode, delay in LOCAL_MODES:
                name = f"{mode}, delay {delay}"
                try:
                    record = local_run(mode, delay, work, poll)
                except (RunFailed, TimeoutError, RestError, LookupError) as failure:
                    failures.append(f"local {name}, run {index + 1}: {failure}")
                    print(f"  local {name} run {index + 1} failed: {failure}", file=sys.stderr)
                    continue
                record["delay_s"] = seconds(delay)
                samples[name].append(record)
                print(f"  local {name} run {index + 1}: RUNNING again "
                      f"{record['running again'] - record['harmed']:.2f} s after the {mode}",
                      file=sys.stderr, flush=True)
        cross_check = {}
        for strategy in ("region", "full"):
            try:
                cross_check[strategy] = two_regions_on_cluster(strategy, work, poll)
            except (RunFailed, TimeoutError, RestError) as failure:
                failures.append(f"two regions on a local cluster, {strategy}: {failure}")
                cross_check[strategy] = None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": samples, "cross_check": cross_check}


# ====================================================================== 1. YARN

def wait_no_task_executor(rest: RestClient, app_id: str, timeout: float = 120.0) -> None:
    """Until the session has released every TaskExecutor and YARN shows no container but
    the AppMaster's."""
    deadline = time.monotonic() + timeout
    while True:
        overview = rest.overview()
        if not overview.task_executors and all(j.status in JOB_TERMINAL for j in overview.jobs) \
                and yarn_cluster.application_report(app_id).get("runningContainers") == 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"TaskExecutors not released within {timeout:g} s")
        time.sleep(0.25)


def yarn_run(rest: RestClient, app_id: str, offset: float, poll: float) -> dict:
    """Once no TaskExecutor is left and `offset` more seconds: a job that needs a new
    container (baseline), its TaskExecutor killed, recovery watched, then a job on the
    replacement's free slots (baseline)."""
    wait_no_task_executor(rest, app_id)
    time.sleep(offset)
    out = f"{local_hadoop.DEFAULT_FS}{HDFS_DIR}/{uuid.uuid4().hex[:8]}"
    job_id, cold = submit_until_running(rest, out, poll)
    record = harm_and_watch(rest, job_id, out, "SIGKILL", poll)
    out = f"{local_hadoop.DEFAULT_FS}{HDFS_DIR}/{uuid.uuid4().hex[:8]}"
    warm_id, record["warm"] = submit_until_running(rest, out, poll)
    finish(rest, warm_id, out, poll)
    log = AppMasterLog(yarn_driver_log(app_id))
    record.update(log.recovery(record))
    record["cold"] = {**cold, **log.new_worker(cold["submit"])}
    record["offset_s"] = offset
    record["delay_s"] = seconds(DELAY)
    return record


def stop_session(app_id: str) -> str:
    """`flinkyarn session stop`, as a user stops it; killed if that fails."""
    result = subprocess.run([sys.executable, "-m", "yarn_client", "session", "stop", app_id],
                            cwd=REPO, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        print(f"  session stop {app_id} failed: {result.stderr.strip()[-500:]}; killing it",
              file=sys.stderr)
        yarn_cluster.kill(app_id)
    report = yarn_cluster.wait_for_end(app_id, timeout=120)
    return f"{report['state']}/{report['finalStatus']}"


def live_applications() -> list[str]:
    """This run's applications YARN still has running or about to run."""
    apps = (yarn_cluster.rm_get(f"/ws/v1/cluster/apps?states={APP_LIVE}&applicationTags={TAG}")
            .get("apps") or {}).get("app") or []
    return [a["id"] for a in apps]


def yarn_figures(runs: int, poll: float, failures: list[str]) -> dict:
    deployment = YarnClusterDescriptor(
        Configuration.load(overrides=YARN_OVERRIDES),
        YarnOptions(name="bench recovery", tags=(TAG,))).deploy("session")
    app_id, rest = deployment.app_id, deployment.rest
    samples: list[dict] = []
    ended = None
    try:
        for index in range(runs):
            # "No TaskExecutor container" shows just after one of skein's allocate
            # heartbeats: spread the cold submissions evenly over its cycle.
            offset = SKEIN_IDLE_HEARTBEAT * (index + 0.5) / runs
            try:
                record = yarn_run(rest, app_id, offset, poll)
            except (RunFailed, TimeoutError, RestError, LookupError) as failure:
                failures.append(f"yarn run {index + 1}: {failure}")
                print(f"  yarn run {index + 1} failed: {failure}", file=sys.stderr)
                continue
            samples.append(record)
            cold = record["cold"]["running"] - record["cold"]["submit"]
            print(f"  yarn run {index + 1}: new container {cold:.2f} s; RUNNING again "
                  f"{record['running again'] - record['harmed']:.2f} s after the SIGKILL",
                  file=sys.stderr, flush=True)
    finally:
        try:
            ended = stop_session(app_id)
        finally:
            for leftover in live_applications():
                failures.append(f"{leftover} still running after the bench: killed")
                yarn_cluster.kill(leftover)
            subprocess.run(["hdfs", "dfs", "-rm", "-r", "-f", "-skipTrash", HDFS_DIR],
                           capture_output=True, timeout=120)
    listed = subprocess.run(["yarn", "application", "-list"], capture_output=True, text=True,
                            timeout=120).stdout
    if app_id in listed:
        failures.append(f"{app_id} still in `yarn application -list` after the bench")
    return {"app_id": app_id, "session_ended": ended, "settings": YARN_OVERRIDES,
            "runs": samples, "left_in_yarn_application_list": app_id in listed}


# ====================================================================== 2. restart fraction

def example_wordcount():
    """examples/wordcount.py as a module (its name would clash with bench/wordcount.py)."""
    spec = importlib.util.spec_from_file_location("example_wordcount",
                                                  REPO / "examples" / "wordcount.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wordcount(batch_mode: bool) -> Pipeline:
    """examples/wordcount.py's pipeline at parallelism 4."""
    example = example_wordcount()
    p = Pipeline("wordcount", parallelism=4, batch_mode=batch_mode)
    words = p.read_text("/in").flat_map(example.split_words, name="split words")
    words.key_by("word").spark(example.count_words, name="count words").write_parquet("/out")
    return p


def forward_chain() -> Pipeline:
    p = Pipeline("source -> map -> sink", parallelism=8, chaining=False)
    p.from_generator(slow_numbers).map(lambda b: b, name="map").write_parquet("/out")
    return p


@dataclass(frozen=True)
class Shape:
    """A job in a state at the moment of a failure. Vertices are named by their position
    in topological order, subtasks as (vertex, subtask index)."""

    title: str
    failure: str
    pipeline: Callable[[], Pipeline]
    finished: tuple[int, ...]              # vertices whose subtasks have all FINISHED
    failed: tuple[tuple[int, int], ...]    # the rest are RUNNING
    lost: tuple[tuple[int, int], ...] = ()  # finished subtasks whose output is gone


SHAPES = {
    "a": Shape("wordcount, batch, p4", "one consumer fails; producers FINISHED",
               lambda: wordcount(True), finished=(0,), failed=((1, 0),)),
    "a2": Shape("wordcount, batch, p4", "TaskExecutor of slots 0-1 lost: consumers 0-1 fail, "
                "producers 0-1's output lost", lambda: wordcount(True), finished=(0,),
                failed=((1, 0), (1, 1)), lost=((0, 0), (0, 1))),
    "b": Shape("wordcount, streaming, p4", "one consumer fails; all RUNNING",
               lambda: wordcount(False), finished=(), failed=((1, 0),)),
    "c": Shape("source -> map -> sink, forward, p8", "one map subtask fails",
               forward_chain, finished=(), failed=((1, 0),)),
    "d": Shape("two regions, p1", "the right chain fails",
               lambda: two_regions("/out"), finished=(), failed=((1, 0),)),
}


def graph_in_state(shape: Shape) -> tuple[ExecutionGraph, list[ExecutionVertexID],
                                          frozenset[ExecutionVertexID]]:
    graph = ExecutionGraph(shape.pipeline().job_graph())
    order = [v.id for v in graph.vertices_in_topological_order()]
    finished = {order[i] for i in shape.finished}
    for vertex in graph.execution_vertices():
        execution = vertex.current_execution
        for state in (ExecutionState.SCHEDULED, ExecutionState.DEPLOYING, ExecutionState.RUNNING):
            execution.transition(state, 0.0)
        if vertex.id.vertex_id in finished:
            execution.transition(ExecutionState.FINISHED, 0.0)
    failed = [ExecutionVertexID(order[v], i) for v, i in shape.failed]
    for evid in failed:
        graph.vertex(evid).current_execution.transition(ExecutionState.FAILED, 0.0)
    return graph, failed, frozenset(ExecutionVertexID(order[v], i) for v, i in shape.lost)


def restart_set(strategy, graph: ExecutionGraph, failed: list[ExecutionVertexID],
                lost: frozenset[ExecutionVertexID]) -> set[ExecutionVertexID]:
    """As the Scheduler asks: the union over the failed subtasks, CREATED ones left out."""
    restart: set[ExecutionVertexID] = set()
    for evid in failed:
        if evid not in restart:
            restart |= strategy.tasks_to_restart(graph, evid, FailureKind.TASK, lost)
    return {e for e in restart if graph.vertex(e).state is not ExecutionState.CREATED}


def restart_fractions() -> dict[str, dict]:
    out = {}
    for key, shape in SHAPES.items():
        graph, failed, lost = graph_in_state(shape)
        total = sum(1 for _ in graph.execution_vertices())
        region = restart_set(RegionFailoverStrategy(), graph, failed, lost)
        full = restart_set(RestartAllFailoverStrategy(), graph, failed, lost)
        out[key] = {"shape": shape.title, "failure": shape.failure, "total": total,
                    "vertices": [f"{v.name} x{v.parallelism}"
                                 for v in graph.vertices_in_topological_order()],
                    "regions": len(graph.pipelined_regions()),
                    "region": len(region), "full": len(full),
                    "region_fraction": len(region) / total, "full_fraction": len(full) / total,
                    "region_restarts": sorted(graph.vertex(e).task_name for e in region)}
    return out


# ====================================================================== report

def fmt(value: float | None, width: int = 7, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def recovery_row(target: str, name: str, runs: list[dict], free: float | None,
                 new_te: float | None) -> dict:
    running = [r["running again"] - r["harmed"] for r in runs]
    delay = runs[0]["delay_s"] if runs else None
    return {
        "target": target, "failure": name, "runs": len(runs), "delay_s": delay,
        "restart_decided_s": median(r["restart decided"] - r["harmed"] for r in runs),
        "running_again_s": median(running),
        "running_again_min_s": min(running) if running else None,
        "running_again_max_s": max(running) if running else None,
        "running_again_minus_delay_s": median(v - delay for v in running) if runs else None,
        "finished_s": median(r["finished"] - r["harmed"] for r in runs),
        "ratio_to_free_slots": ratio(median(running), free),
        "ratio_to_new_task_executor": ratio(median(running), new_te),
        "detected_by": dict(Counter(detected_by(r["root_cause"]) for r in runs)),
        "runs_with_more_than_one_restart": sum(1 for r in runs if r["restarts"] > 1),
        "restarted_tasks": sorted({r["restarted_tasks"] for r in runs if r["restarted_tasks"]}),
        "breakdown_median_s": breakdown(runs, RECOVERY_STEPS),
    }


def baseline(target: str, name: str, values: list[float]) -> dict:
    return {"target": target, "baseline": name, "runs": len(values), "median_s": median(values),
            "min_s": min(values) if values else None, "max_s": max(values) if values else None}


def figures(local: dict | None, yarn: dict | None) -> tuple[list[dict], list[dict], dict]:
    rows, baselines, cold_breakdowns = [], [], {}
    if local is not None:
        every = [r for runs in local["runs"].values() for r in runs]
        cold = [r["cold"] for r in every]
        free = [r["warm"]["running"] - r["warm"]["submit"] for r in every if "warm" in r]
        new_te = [c["running"] - c["submit"] for c in cold]
        baselines += [baseline("local", "free slots", free),
                      baseline("local", "new TaskExecutor process", new_te)]
        cold_breakdowns["local new process"] = breakdown(cold, COLD_STEPS)
        for name, runs in local["runs"].items():
            rows.append(recovery_row("local", name, runs, median(free), median(new_te)))
    if yarn is not None:
        runs = yarn["runs"]
        cold = [r["cold"] for r in runs]
        free = [r["warm"]["running"] - r["warm"]["submit"] for r in runs]
        new_te = [c["running"] - c["submit"] for c in cold]
        baselines += [baseline("yarn", "free slots", free),
                      baseline("yarn", "new TaskExecutor container", new_te)]
        cold_breakdowns["yarn new container"] = breakdown(cold, COLD_STEPS)
        rows.append(recovery_row("yarn", f"SIGKILL, delay {DELAY}", runs, median(free),
                                 median(new_te)))
    return rows, baselines, cold_breakdowns


def report_recovery(rows: list[dict], baselines: list[dict], cold_breakdowns: dict) -> None:
    print("\n1. Recovery: seconds from the kill (or freeze) of the TaskExecutor holding the "
          "job's slots, medians")
    print(f"{'target':6} {'failure':22} {'runs':>4} {'restart':>8} {'RUNNING':>8} "
          f"{'min':>6} {'max':>6} {'- delay':>8} {'x free':>7} {'x new TE':>8} "
          f"{'FINISHED':>8}  detected by")
    for r in rows:
        detected = ", ".join(f"{k} {v}/{r['runs']}" for k, v in r["detected_by"].items())
        print(f"{r['target']:6} {r['failure']:22} {r['runs']:4d} "
              f"{fmt(r['restart_decided_s'], 8)} {fmt(r['running_again_s'], 8)} "
              f"{fmt(r['running_again_min_s'], 6)} {fmt(r['running_again_max_s'], 6)} "
              f"{fmt(r['running_again_minus_delay_s'], 8)} "
              f"{fmt(r['ratio_to_free_slots'], 7, 1)} "
              f"{fmt(r['ratio_to_new_task_executor'], 8)} {fmt(r['finished_s'], 8)}  {detected}")
    print("restart: restarts >= 1 seen; RUNNING: every task RUNNING again; - delay: less "
          "the restart delay;\nx free / x new TE: RUNNING over the baseline medians below")
    print("\nbaselines, same clusters: submit -> every task RUNNING, no failure")
    print(f"{'target':6} {'baseline':28} {'runs':>4} {'median':>7} {'min':>6} {'max':>6}")
    for b in baselines:
        print(f"{b['target']:6} {b['baseline']:28} {b['runs']:4d} {fmt(b['median_s'])} "
              f"{fmt(b['min_s'], 6)} {fmt(b['max_s'], 6)}")
    print("\nwhere the time goes, medians of each run's steps (s; log: the AppMaster's log)")
    columns = [f"{r['target']} {r['failure'].replace(', delay', '').replace(' ms', 'ms')}"
               for r in rows]
    print(f"{'recovery':46} " + " ".join(f"{c:>19}" for c in columns))
    for name, _, _ in RECOVERY_STEPS:
        print(f"{name:46} " + " ".join(fmt(r["breakdown_median_s"][name], 19) for r in rows))
    print(f"{'cold start (baseline)':46} " + " ".join(f"{c:>19}" for c in cold_breakdowns))
    for name, _, _ in COLD_STEPS:
        print(f"{name:46} " + " ".join(fmt(steps[name], 19) for steps in cold_breakdowns.values()))


def report_fractions(fractions: dict, cross_check: dict | None) -> None:
    print("\n2. Restart fraction: subtasks restarted after the failure, region failover vs "
          "restart-all (state machines)")
    width = max(len(f["failure"]) for f in fractions.values())
    print(f"{'':4} {'shape':36} {'failure':{width}} {'region':>13} {'full':>13} "
          f"{'region/full':>11}")
    for key, f in fractions.items():
        region = f"{f['region']}/{f['total']} {f['region_fraction']:6.1%}"
        full = f"{f['full']}/{f['total']} {f['full_fraction']:6.1%}"
        print(f"({key:>2}) {f['shape']:36} {f['failure']:{width}} {region:>13} {full:>13} "
              f"{f['region'] / f['full']:11.3f}")
    if cross_check is not None:
        d = fractions["d"]
        for strategy in ("region", "full"):
            real = cross_check.get(strategy)
            expected = d[strategy]
            if real is None:
                print(f"(d) on a local cluster, {strategy}: no result (see failures)")
                continue
            verdict = "match" if (real["restarted"], real["total"]) == (expected, d["total"]) \
                else "MISMATCH"
            print(f"(d) on a local cluster, {strategy}: restarted {real['restarted']} of "
                  f"{real['total']}; state machine {expected} of {d['total']}: {verdict}")


# ====================================================================== main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="local runs of each row (default 5)")
    parser.add_argument("--yarn-runs", type=int, default=3,
                        help="kills in the YARN session (default 3)")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the job status polls (default 20 ms)")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-yarn", action="store_true")
    args = parser.parse_args()
    poll = args.poll_ms / 1000.0
    began, load_before = time.time(), os.getloadavg()
    failures: list[str] = []

    fractions = restart_fractions()
    local = yarn = None
    if not args.skip_local:
        print("local clusters", file=sys.stderr, flush=True)
        local = local_figures(args.runs, poll, failures)
        cross_check = local["cross_check"]
        for strategy, real in cross_check.items():
            if real is not None and (real["restarted"], real["total"]) != \
                    (fractions["d"][strategy], fractions["d"]["total"]):
                failures.append(f"two regions, {strategy}: the cluster restarted "
                                f"{real['restarted']}/{real['total']}, the state machine "
                                f"{fractions['d'][strategy]}/{fractions['d']['total']}")
    if not args.skip_yarn:
        local_hadoop.apply_env()
        healthy, state = local_hadoop.status()
        if not healthy:
            sys.exit(f"the local Hadoop is not healthy; `integration/cluster up` first\n{state}")
        print("YARN session", file=sys.stderr, flush=True)
        yarn = yarn_figures(args.yarn_runs, poll, failures)

    rows, baselines, cold_breakdowns = figures(local, yarn)
    if rows:
        report_recovery(rows, baselines, cold_breakdowns)
    report_fractions(fractions, local["cross_check"] if local else None)
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_before": load_before, "load_after": os.getloadavg()},
        "settings": {"runs": args.runs, "yarn_runs": args.yarn_runs, "poll_ms": args.poll_ms,
                     "kill_after_s": KILL_AFTER, "local_overrides": FAST,
                     "restart_strategy": restarting(DELAY), "yarn_overrides": YARN_OVERRIDES,
                     "tag": TAG},
        "total_s": time.time() - began,
        "recovery": rows, "baselines": baselines, "cold_start_breakdown": cold_breakdowns,
        "restart_fractions": fractions,
        "local": local, "yarn": yarn,
        "failures": failures,
    }
    if failures:
        print("\nfailures (not figures):")
        for failure in failures:
            print(f"  {failure}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"recovery-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten: {path.relative_to(REPO)} (total {results['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
