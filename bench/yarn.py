"""Figures for flinkyarn on YARN (issue 5), against baselines measured in the same run.

1. Per-job: `YarnClusterDescriptor.deploy("per-job", graph)` of a job of one vertex
   (parallelism 2: one TaskExecutor of two slots; each task holds for HOLD seconds), from
   the `deploy` call to all tasks RUNNING and to the application FINISHED, with the phases
   on the way: skein driver start and submission, ACCEPTED, AppMaster RUNNING, AppMaster
   up, TaskExecutor container requested -> registered, tasks RUNNING, job FINISHED,
   application FINISHED.
2. Session: `rest.submit` to all tasks RUNNING (a) with free slots: a session whose idle
   TaskExecutor stays (`resourcemanager.taskmanager-timeout: 10 min`), and (b) with a new
   container needed: a session that releases idle TaskExecutors after 2 s; each run waits
   until YARN shows no TaskExecutor container left, then a further offset that spreads
   the submissions evenly over skein's allocate cycle (yarn.heartbeat.interval; see
   spread_over_allocate_cycle).
3. Container request to TaskExecutor registered, for every TaskExecutor of 1 and 2b.

Baselines, interleaved with the per-job runs so they see the same noise:
- the skein smoke application of integration/smoke.py (a bare skein application whose
  master runs a tiny shell script: a file written to HDFS and read back with curl), from
  `skein.Client()` to FINISHED; `deploy` starts
  its own skein driver too, so both figures start before a driver exists. Its
  `smoke.run` part alone (submit to FINISHED) is reported beside it. `smoke.run` polls
  the application every 250 ms, this script every 50 ms: the smoke's figure may be up
  to 0.25 s late, which makes the ratios to it up to ~2 % low;
- `yarn application -list`: one Hadoop Java client, start to exit.
Per-job figures are given as ratios to the smoke application; everything in seconds too.

Where the times come from (all clocks are this machine's):
- client: `time.time()` here. `deploy` prints each start-up phase the moment it sees it;
  a stamping stream records when. Job states come from polling `rest.job` every
  `--poll-ms` (an upper bound, at most one poll plus one REST round trip late),
  application states from polling the ResourceManager's REST API.
- logs, preferred for the phases (millisecond stamps, no polling delay): the AppMaster's
  and TaskExecutors' logs through `yarn logs -applicationId` once log aggregation is
  done (`requested worker ...`, `worker ...: container ... requested`, `TaskExecutor ...
  registered from ...`, `TaskExecutor ... serving on ...`, `job ... FINISHED`), and the
  local ResourceManager's and NodeManager's own logs (application and container state
  changes), read from where they ended when the benchmark started. Phases whose log is
  not there are left out (None), never guessed.
- "application FINISHED": YARN reports FINISHED once the AppMaster has unregistered (the
  RM's internal FINISHING); the RM's own FINISHED follows when its container has exited.
  Both are shown; the figure is what a client sees.

Every application this starts carries a tag of this run; whatever is still running at the
end, or after an error, is killed. The machine is shared and noisy: compare ratios
between runs, never assert on absolute times.

usage: .venv/bin/python bench/yarn.py [--runs N] [--poll-ms MS]
Writes bench/results/yarn.json. Needs the local Hadoop (`integration/cluster up`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))

import local_hadoop  # noqa: E402
import skein  # noqa: E402
import smoke  # noqa: E402

from flinkyarn import options  # noqa: E402
from flinkyarn.configuration import Configuration  # noqa: E402
from flinkyarn.gateways.dispatcher import JobDetails  # noqa: E402
from flinkyarn.job import JobBuilder  # noqa: E402
from flinkyarn.jobgraph import JobGraph  # noqa: E402
from yarn_client import yarn_cluster  # noqa: E402
from yarn_client.rest_client import RestClient, RestError  # noqa: E402
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions  # noqa: E402

RESULTS = REPO / "bench" / "results" / "yarn.json"
RUN_ID = uuid.uuid4().hex[:8]
TAG = f"flinkyarn-bench-{RUN_ID}"
HOLD = 1.0          # seconds each task stays RUNNING
PARALLELISM = 2     # one TaskExecutor: taskmanager.numberOfTaskSlots defaults to 2
JOB_TERMINAL = ("FINISHED", "FAILED", "CANCELED")
APP_TERMINAL = ("FINISHED", "FAILED", "KILLED")
SESSION_WARM = {"resourcemanager.taskmanager-timeout": "10 min", "slot.idle.timeout": "1 s"}
SESSION_COLD = {"resourcemanager.taskmanager-timeout": "2 s", "slot.idle.timeout": "1 s"}
# skein's ApplicationMaster, with our agent (yarn_client/skein_agent.py): yarn.heartbeat.interval
# (at most skein's own 5 s) between allocate calls while no container request is pending
# (1 s while one is).
SKEIN_IDLE_HEARTBEAT = min(5.0, Configuration().get(options.YARN_HEARTBEAT_INTERVAL))


def median(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def since(times: dict[str, float | None], start: float) -> dict[str, float | None]:
    return {k: (None if v is None else v - start) for k, v in times.items()}


def step(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


# ====================================================================== the job

def hold_for(seconds: float) -> Callable:
    # Defined in __main__ (this file runs as a script), so cloudpickle ships it by value.
    def hold(ctx) -> None:
        ctx.sleep(seconds)
    return hold


def hold_job(name: str) -> JobGraph:
    job = JobBuilder(name)
    job.add_vertex("hold", hold_for(HOLD), parallelism=PARALLELISM)
    return job.build()


def all_running(details: JobDetails) -> bool:
    return details.status == "RUNNING" and all(
        v.state_counts.get("RUNNING", 0) == v.parallelism for v in details.vertices)


class JobFailed(RuntimeError):
    """A measured job or application did not finish well: the run is no measurement."""


def poll_job(rest: RestClient, job_id: str, condition: Callable[[JobDetails], bool],
             interval: float, timeout: float = 180.0, missing_ok: bool = False) -> float:
    """Time (epoch) of the first answer showing `condition`. With `missing_ok`, REST errors
    (the job not yet known, the AppMaster not yet serving it) mean "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        sent = time.monotonic()
        try:
            details = rest.job(job_id)
        except RestError:
            if not missing_ok:
                raise
            details = None
        if details is not None:
            if condition(details):
                return time.time()
            if details.status in JOB_TERMINAL:
                raise JobFailed(f"job {job_id} ended {details.status} before the awaited "
                                f"state: {details.failure_cause}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id}: not there within {timeout:g} s: {details}")
        time.sleep(max(0.0, sent + interval - time.monotonic()))


def wait_application_end(app_id: str, interval: float = 0.05, timeout: float = 120.0) -> tuple[float, dict]:
    deadline = time.monotonic() + timeout
    while True:
        report = yarn_cluster.application_report(app_id)
        if report["state"] in APP_TERMINAL:
            return time.time(), report
        if time.monotonic() > deadline:
            raise TimeoutError(f"{app_id} still {report['state']} after {timeout:g} s")
        time.sleep(interval)


class StampedOut:
    """The stream `deploy` reports its phases to: keeps each line with the time it came."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        if text.strip():
            self.lines.append((time.time(), text.strip()))
        return len(text)

    def flush(self) -> None:
        pass


def deploy(mode: str, conf: Configuration, name: str, graph: JobGraph | None = None):
    """(deployment, client-side times): the `deploy` call, the moment its phase clock
    started (after the queue check and the certificates), and each phase it printed."""
    out = StampedOut()
    called = time.time()
    deployment = YarnClusterDescriptor(conf, YarnOptions(name=name, tags=(TAG,)), out) \
        .deploy(mode, graph)
    returned = time.time()
    submitted_line = next(at for at, line in out.lines if line.startswith("submitted "))
    clock_start = submitted_line - deployment.phases["submitted"]
    times = {"deploy called": called, "phase clock started": clock_start,
             "deploy returned": returned}
    for phase in ("submitted", "accepted", "running", "appmaster up"):
        seconds = deployment.phases.get(phase)
        times[phase] = None if seconds is None else clock_start + seconds
    return deployment, times


# ============================================================== the logs

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def stamp(line: str) -> float | None:
    """Epoch seconds of a log line stamped `YYYY-MM-DD HH:MM:SS,mmm` (Python's logging and
    Hadoop's log4j, both in local time), else None."""
    match = _STAMP.match(line)
    if not match:
        return None
    return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(match[2]) / 1000


def first(lines: list[str], pattern: str) -> float | None:
    regex = re.compile(pattern)
    for line in lines:
        if regex.search(line):
            at = stamp(line)
            if at is not None:
                return at
    return None


def matches(lines: list[str], pattern: str) -> list[tuple[float, re.Match]]:
    regex = re.compile(pattern)
    out = []
    for line in lines:
        found = regex.search(line)
        at = stamp(line) if found else None
        if at is not None:
            out.append((at, found))
    return out


class DaemonLog:
    """What a local Hadoop daemon logged since this benchmark started (its file grows;
    `integration/cluster` never rotates it)."""

    def __init__(self, daemon: str) -> None:
        self.path = local_hadoop.Layout.default().log(daemon)
        self.offset = self.path.stat().st_size if self.path.is_file() else None
        self._lines: list[str] | None = None

    def lines(self, refresh: bool = False) -> list[str]:
        if self.offset is None:
            return []
        if self._lines is None or refresh:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                self._lines = log.read().decode(errors="replace").splitlines()
        return self._lines


def rm_application(rm: list[str], app_id: str) -> dict[str, float | None]:
    number = int(app_id.rsplit("_", 1)[1])
    own = [line for line in rm if app_id in line or f" {number} " in line or line.endswith(f" {number}")]
    return {
        "new id": first(own, rf"Allocated new applicationId: {number}$"),
        "submitted": first(own, rf"Application with id {number} submitted"),
        "accepted": first(own, rf"{app_id} State change from SUBMITTED to ACCEPTED"),
        "am registered": first(own, rf"{app_id} State change from ACCEPTED to RUNNING"),
        "unregistered": first(own, rf"{app_id} State change from RUNNING to FINAL_SAVING"),
        "finished": first(own, rf"{app_id} State change from \w+ to (FINISHED|FAILED|KILLED) "),
    }


def container_events(rm: list[str], nm: list[str], container_id: str) -> dict[str, float | None]:
    rm_own = [line for line in rm if container_id in line]
    nm_own = [line for line in nm if container_id in line]
    return {
        "allocated": first(rm_own, rf"{container_id} Container Transitioned from NEW to ALLOCATED"),
        "acquired": first(rm_own, rf"{container_id} Container Transitioned from ALLOCATED to ACQUIRED"),
        "nm start request": first(nm_own, rf"Start request for {container_id} "),
        "localized": first(nm_own, rf"{container_id} transitioned from LOCALIZING to SCHEDULED"),
        "launched": first(nm_own, rf"launchContainer: .*{container_id}/"),
    }


def fetch_logs(app_id: str, timeout: float = 120.0) -> list[tuple[str, str, list[str]]]:
    """(container id, log file, lines) of every aggregated log of the application; []
    when aggregation did not finish in time or `yarn logs` failed."""
    deadline = time.monotonic() + timeout
    while True:
        status = yarn_cluster.application_report(app_id).get("logAggregationStatus")
        if status in ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED"):
            break
        if time.monotonic() > deadline:
            print(f"  logs of {app_id}: aggregation still {status}", file=sys.stderr)
            return []
        time.sleep(0.5)
    result = subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        print(f"  yarn logs {app_id} failed: {result.stderr[-300:]}", file=sys.stderr)
        return []
    sections, container, log_type, body = [], None, None, None
    for line in result.stdout.splitlines():
        if line.startswith("Container: "):
            container = line.split()[1]
        elif line.startswith("LogType:"):
            log_type, body = line[len("LogType:"):], None
        elif line == "LogContents:":
            body = []
        elif line.startswith("End of LogType:"):
            sections.append((container, log_type, body or []))
            body = None
        elif body is not None:
            body.append(line)
    return sections


class ApplicationLogs:
    """What an application's AppMaster and TaskExecutors logged, as times per event."""

    def __init__(self, app_id: str, sections: list[tuple[str, str, list[str]]],
                 rm: list[str], nm: list[str]) -> None:
        self.app_id = app_id
        self.available = bool(sections)
        driver = [line for _, kind, lines in sections if kind == "application.driver.log"
                  for line in lines]
        self.am_serving = first(driver, r"AppMaster serving: ")
        self.jobs_ended = {m[1]: at for at, m in matches(driver, r" job (\w+) (FINISHED|FAILED|CANCELED)$")}
        am_container = f"container_{app_id[len('application_'):]}_01_000001"
        self.am_container = container_events(rm, nm, am_container)
        self.workers: dict[str, dict[str, float | None]] = {}
        for at, m in matches(driver, r"requested worker (\S+) \("):
            self.workers[m[1]] = {"requested": at}
        for at, m in matches(driver, r"worker (\S+): container \S+ requested"):
            self.workers.setdefault(m[1], {})["container requested"] = at
        for at, m in matches(driver, r"TaskExecutor (\S+) registered from "):
            self.workers.setdefault(m[1], {})["registered"] = at
        for container, kind, lines in sections:
            if kind != "taskexecutor.log":
                continue
            for at, m in matches(lines, r"TaskExecutor (\S+) serving on "):
                worker = self.workers.setdefault(m[1], {})
                worker["container"] = container
                worker["serving"] = at
                worker.update(container_events(rm, nm, container))

    def worker_between(self, start: float, end: float) -> dict | None:
        """The TaskExecutor requested in [start, end], if exactly one was."""
        found = [w for w in self.workers.values()
                 if w.get("requested") is not None and start <= w["requested"] <= end]
        return found[0] if len(found) == 1 else None


CONTAINER_STEPS = (  # (from, to, what happens in between)
    ("requested", "container requested",
     "driver: skein add_container call (gRPC to skein's AM)"),
    ("container requested", "allocated",
     "the ask waits for skein AM's allocate heartbeat (yarn.heartbeat.interval idle); RM allocates on it"),
    ("allocated", "acquired", "skein AM's next heartbeat (1 s, request pending) takes it"),
    ("acquired", "nm start request", "skein AM starts it at the NodeManager"),
    ("nm start request", "localized", "localization (certificates, scripts from HDFS)"),
    ("localized", "launched", "container launch"),
    ("launched", "serving",
     "Python start, imports, RM address from skein kv, RPC and Flight servers"),
    ("serving", "registered", "registration at the ResourceManager"),
)


def container_steps(worker: dict) -> dict[str, float | None]:
    out = {f"{a} -> {b}": step(worker.get(a), worker.get(b)) for a, b, _ in CONTAINER_STEPS}
    out["requested -> registered"] = step(worker.get("requested"), worker.get("registered"))
    return out


# ============================================================== baselines

def yarn_list() -> float:
    start = time.perf_counter()
    subprocess.run(["yarn", "application", "-list"], capture_output=True, check=True, timeout=120)
    return time.perf_counter() - start


# What the TaskExecutor's and the AppMaster's processes import before they serve
# (taskexecutor/__main__.py with build_environment; yarn_am/yarn_entrypoint.py).
IMPORTS = {
    "python -c pass": "pass",
    "python: TaskExecutor imports": "import skein, taskexecutor.__main__, taskexecutor.network.flight, "
                                    "taskexecutor.network.partition, taskexecutor.spark.bridge",
    "python: AppMaster imports": "import yarn_am.yarn_entrypoint",
}


def python_start(code: str) -> float:
    """Outside YARN: this interpreter started, `code` run, exited."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
    return time.perf_counter() - start


def smoke_run() -> dict:
    url = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-bench/{RUN_ID}/{uuid.uuid4().hex}.txt"
    # skein's own driver, without our agent: the smoke application keeps the type
    # `skein`, as integration/smoke.py runs it.
    start = time.time()
    with skein.Client(log=False) as client:
        driver_up = time.time()
        app_id, app, seconds = smoke.run(client, local_hadoop.RM_WEB, [url, "flinkyarn bench"])
        seen_finished = time.time()
    if app["finalStatus"] != "SUCCEEDED":
        raise JobFailed(f"smoke application {app_id} {app['finalStatus']}: {app.get('diagnostics')}")
    return {"app_id": app_id, "start": start, "driver up": driver_up,
            "finished seen": seen_finished, "submit_to_finished_s": seconds,
            "client_to_finished_s": seen_finished - start, "driver_start_s": driver_up - start}


# ============================================================== per-job

def per_job_run(poll: float) -> dict:
    graph = hold_job("bench: per-job")
    deployment, times = deploy("per-job", Configuration.load(), "bench per-job", graph)
    ended = False
    try:
        times["all running seen"] = poll_job(deployment.rest, graph.job_id, all_running, poll,
                                             missing_ok=True)
        try:
            times["job finished seen"] = poll_job(
                deployment.rest, graph.job_id, lambda d: d.status in JOB_TERMINAL, poll)
        except RestError:  # the AppMaster ended with the job before a poll saw it
            times["job finished seen"] = None
        times["application finished seen"], report = wait_application_end(deployment.app_id)
        ended = True
        if report["finalStatus"] != "SUCCEEDED":
            raise JobFailed(f"{deployment.app_id} {report['finalStatus']}: {report.get('diagnostics')}")
    finally:
        if not ended:
            kill_quietly(deployment.app_id)
    return {"app_id": deployment.app_id, "job_id": graph.job_id, "client": times}


PER_JOB_TIMELINE = (  # (name, where from, key)
    ("client checks, certificates", "client", "phase clock started"),
    ("skein driver up, asks the RM for an id", "RM log", "new id"),
    ("files uploaded to HDFS, submitted", "RM log", "rm submitted"),
    ("submit returned to the client", "client", "submitted"),
    ("ACCEPTED", "RM log", "accepted"),
    ("AppMaster container launched", "NM log", "am launched"),
    ("AppMaster RUNNING (skein AM registered)", "RM log", "am registered"),
    ("AppMaster up: Python AppMaster serving", "AM log", "am serving"),
    ("AppMaster up: REST address in kv, seen", "client", "appmaster up"),
    ("TaskExecutor container requested", "AM log", "te requested"),
    ("TaskExecutor container allocated", "RM log", "te allocated"),
    ("TaskExecutor container launched", "NM log", "te launched"),
    ("TaskExecutor serving", "TE log", "te serving"),
    ("TaskExecutor registered", "AM log", "te registered"),
    ("all tasks RUNNING, seen", "client", "all running seen"),
    ("job FINISHED", "AM log", "job finished"),
    # YARN reports FINISHED from the AppMaster's unregistration on (the RM's FINISHING)...
    ("AppMaster unregistered: YARN says FINISHED", "RM log", "unregistered"),
    ("application FINISHED, seen", "client", "application finished seen"),
    # ...and the RM's own state follows once the AppMaster's container has exited.
    ("AppMaster container exited (RM: FINISHED)", "RM log", "finished"),
)
# The same events of the smoke application, where it has them (keys of PER_JOB_TIMELINE).
SMOKE_KEYS = ("new id", "rm submitted", "accepted", "am launched", "am registered",
              "unregistered", "application finished seen", "finished")


def per_job_timeline(run: dict, logs: ApplicationLogs, rm_app: dict) -> dict[str, float | None]:
    """Epoch times of the timeline's events in one run."""
    client = run["client"]
    # The first TaskExecutor the job asked for (a replacement, if any, is not the figure).
    worker = min(logs.workers.values(), key=lambda w: w.get("requested") or float("inf"),
                 default={})
    events = dict(client)
    events.update({k: rm_app[k] for k in ("new id", "accepted", "am registered",
                                          "unregistered", "finished")})
    events.update({
        "rm submitted": rm_app["submitted"],
        "am launched": logs.am_container["launched"], "am serving": logs.am_serving,
        "te requested": worker.get("requested"), "te allocated": worker.get("allocated"),
        "te launched": worker.get("launched"), "te serving": worker.get("serving"),
        "te registered": worker.get("registered"),
        "job finished": logs.jobs_ended.get(run["job_id"]),
    })
    return events


# ============================================================== sessions

def wait_slots_free(rest: RestClient, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        overview = rest.overview()
        if (overview.task_executors
                and all(s.state == "free" for te in overview.task_executors for s in te.slots)
                and all(job.status in JOB_TERMINAL for job in overview.jobs)):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"slots not free within {timeout:g} s: {overview}")
        time.sleep(0.1)


def wait_no_task_executor(rest: RestClient, app_id: str, timeout: float = 120.0) -> None:
    """Until the ResourceManager released every TaskExecutor and YARN shows no container
    but the AppMaster's."""
    deadline = time.monotonic() + timeout
    while True:
        overview = rest.overview()
        containers = yarn_cluster.application_report(app_id).get("runningContainers")
        if not overview.task_executors and containers == 1 \
                and all(job.status in JOB_TERMINAL for job in overview.jobs):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"TaskExecutors not released within {timeout:g} s: "
                               f"{overview.task_executors}, {containers} containers")
        time.sleep(0.25)


def spread_over_allocate_cycle(runs: int) -> list[float]:
    """Offsets spreading the runs' submissions evenly over skein's allocate cycle.

    skein's AppMaster sends container asks to YARN only on its allocate heartbeat: every
    SKEIN_IDLE_HEARTBEAT seconds while it has no request pending (every second while it
    has), and a new request does not wake it. The ResourceManager also learns that a
    killed container is gone on that heartbeat, so "YARN shows no TaskExecutor container"
    comes true just after a heartbeat, and a job submitted at once would always wait
    nearly a whole cycle: the worst case, not the typical one."""
    return [SKEIN_IDLE_HEARTBEAT * (index + 0.5) / runs for index in range(runs)]


def session_run(rest: RestClient, poll: float) -> dict:
    graph = hold_job("bench: session")
    submit = time.time()
    job_id = rest.submit(graph)
    accepted = time.time()
    running = poll_job(rest, job_id, all_running, poll)
    finished = poll_job(rest, job_id, lambda d: d.status in JOB_TERMINAL, poll)
    if rest.job(job_id).status != "FINISHED":
        raise JobFailed(f"job {job_id}: {rest.job(job_id)}")
    return {"job_id": job_id, "submit": submit, "submit returned": accepted,
            "all running seen": running, "finished seen": finished,
            "submit_to_running_s": running - submit}


def session_figures(name: str, overrides: dict[str, str], runs: int, poll: float,
                    wait_before: Callable[[RestClient, str], None],
                    offsets: list[float] | None = None) -> dict:
    """`offsets`: seconds to wait after `wait_before`, one per run."""
    deployment, times = deploy("session", Configuration.load(overrides=overrides),
                               f"bench session {name}")
    app_id, rest = deployment.app_id, deployment.rest
    samples, failures = [], []
    try:
        warmup = session_run(rest, poll)  # the session's first TaskExecutor; not counted
        for index in range(runs):
            waiting = time.time()
            wait_before(rest, app_id)
            waited = time.time() - waiting
            offset = offsets[index] if offsets else 0.0
            time.sleep(offset)
            try:
                samples.append(dict(session_run(rest, poll), waited_before_s=waited,
                                    offset_s=offset))
            except JobFailed as failure:
                failures.append(str(failure))
                print(f"  session {name} run {index + 1} failed: {failure}", file=sys.stderr)
                continue
            print(f"  session {name} run {index + 1}: submit -> RUNNING "
                  f"{samples[-1]['submit_to_running_s']:.2f} s", file=sys.stderr, flush=True)
    finally:
        stop_session(rest, app_id)
    return {"app_id": app_id, "overrides": overrides, "deploy": since(times, times["deploy called"]),
            "warmup": warmup, "runs": samples, "failed_runs": failures}


def stop_session(rest: RestClient, app_id: str) -> None:
    try:
        rest.shutdown_cluster()
        report = yarn_cluster.wait_for_end(app_id, timeout=60)
        if report["finalStatus"] != "SUCCEEDED":
            print(f"  session {app_id} ended {report['finalStatus']}", file=sys.stderr)
    except Exception as error:  # stop it the hard way; it must not stay RUNNING
        print(f"  stopping {app_id} failed ({error}); killing it", file=sys.stderr)
        kill_quietly(app_id)


# ============================================================== clean-up

def kill_quietly(app_id: str) -> None:
    try:
        if yarn_cluster.application_report(app_id)["state"] not in APP_TERMINAL:
            yarn_cluster.kill(app_id)
            print(f"  killed {app_id}", file=sys.stderr)
    except Exception as error:
        print(f"  could not kill {app_id}: {error}", file=sys.stderr)


def kill_leftovers() -> list[str]:
    """Kills every application of this run that is not over; returns their ids."""
    states = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"
    apps = (yarn_cluster.rm_get(f"/ws/v1/cluster/apps?states={states}&applicationTags={TAG}")
            .get("apps") or {}).get("app") or []
    for app in apps:
        kill_quietly(app["id"])
    return [a["id"] for a in apps]


def remove_smoke_files() -> None:
    subprocess.run(["hdfs", "dfs", "-rm", "-r", "-f", "-skipTrash", f"/tmp/flinkyarn-bench/{RUN_ID}"],
                   capture_output=True, timeout=120)


# ============================================================== analysis

def analyse(per_job: list[dict], smokes: list[dict], cold: dict, rm_log: DaemonLog,
            nm_log: DaemonLog) -> dict:
    rm, nm = rm_log.lines(refresh=True), nm_log.lines(refresh=True)
    print("collecting logs (yarn logs, after aggregation) ...", file=sys.stderr, flush=True)

    def logs_of(app_id: str) -> ApplicationLogs:
        return ApplicationLogs(app_id, fetch_logs(app_id), rm, nm)

    # ---- per-job timeline
    timelines, workers = [], []
    for run in per_job:
        logs = logs_of(run["app_id"])
        events = per_job_timeline(run, logs, rm_application(rm, run["app_id"]))
        start = run["client"]["deploy called"]
        at = {name: step(start, events.get(key)) for name, _, key in PER_JOB_TIMELINE}
        timelines.append({"app_id": run["app_id"], "log_available": logs.available,
                          "at_s": at})
        workers += [dict(w, source="per-job", app_id=run["app_id"]) for w in logs.workers.values()]
    timeline_rows = []
    previous = None
    for name, source, _ in PER_JOB_TIMELINE:
        steps = [step(t["at_s"][previous], t["at_s"][name]) if previous else t["at_s"][name]
                 for t in timelines]
        timeline_rows.append({"phase": name, "source": source,
                              "at_median_s": median(t["at_s"][name] for t in timelines),
                              "step_median_s": median(steps)})
        if median(t["at_s"][name] for t in timelines) is not None:
            previous = name

    # ---- sessions: the cold runs' TaskExecutors and where their time went
    cold_logs = logs_of(cold["app_id"])
    cold_breakdown = []
    for run in cold["runs"]:
        worker = cold_logs.worker_between(run["submit"], run["all running seen"])
        if worker is None:
            cold_breakdown.append(None)
            continue
        workers.append(dict(worker, source="session, new container", app_id=cold["app_id"]))
        cold_breakdown.append({
            "submit -> container requested": step(run["submit"], worker.get("requested")),
            "container requested -> registered": step(worker.get("requested"), worker.get("registered")),
            "registered -> all running seen": step(worker.get("registered"), run["all running seen"]),
        })

    # ---- container request -> registered
    steps = [container_steps(w) for w in workers]
    container_rows = [{"step": f"{a} -> {b}", "what": what,
                       "median_s": median(s[f"{a} -> {b}"] for s in steps)}
                      for a, b, what in CONTAINER_STEPS]
    total = [s["requested -> registered"] for s in steps]

    # ---- the smoke application's events, for comparison with the AppMaster's
    smoke_phases = []
    for run in smokes:
        events = rm_application(rm, run["app_id"])
        events["rm submitted"] = events.pop("submitted")
        events["am launched"] = container_events(
            rm, nm, f"container_{run['app_id'][len('application_'):]}_01_000001")["launched"]
        events["application finished seen"] = run["finished seen"]
        smoke_phases.append({k: step(run["start"], events[k]) for k in SMOKE_KEYS})
    smoke_at = {k: median(p[k] for p in smoke_phases) for k in SMOKE_KEYS}
    for row, (_, _, key) in zip(timeline_rows, PER_JOB_TIMELINE):
        row["smoke_at_median_s"] = smoke_at.get(key)

    return {"per_job_timeline": timeline_rows, "per_job_timelines": timelines,
            "smoke_at_median_s": smoke_at,
            "container": {"samples": len(workers), "workers": workers,
                          "requested_to_registered_s": total,
                          "requested_to_registered_median_s": median(total),
                          "steps": container_rows},
            "session_cold_breakdown": cold_breakdown,
            "session_cold_breakdown_median_s": {
                k: median(b[k] for b in cold_breakdown if b) for k in
                ("submit -> container requested", "container requested -> registered",
                 "registered -> all running seen")},
            "daemon_logs": {"resourcemanager": str(rm_log.path) if rm else None,
                            "nodemanager": str(nm_log.path) if nm else None}}


def summary(values: list[float]) -> dict:
    return {"median_s": median(values), "min_s": min(values) if values else None,
            "max_s": max(values) if values else None, "runs": len(values)}


def fmt(value: float | None, width: int = 8, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def report(results: dict) -> None:
    figures, analysis = results["figures"], results["analysis"]
    smoke_median = figures["smoke: skein.Client() -> FINISHED"]["median_s"]
    print(f"\n{'figure':<58} {'median s':>8} {'min':>7} {'max':>7} {'x smoke':>8} {'x list':>7}")
    for name, figure in figures.items():
        ratios = [figure.get(k) for k in ("ratio_to_smoke", "ratio_to_yarn_list")]
        print(f"{name:<58} {fmt(figure['median_s'])} {fmt(figure['min_s'], 7)} "
              f"{fmt(figure['max_s'], 7)} "
              + " ".join(fmt(r, w) if r is not None else " " * w for r, w in zip(ratios, (8, 7))))
    print(f"x smoke: to the smoke application, skein.Client() -> FINISHED "
          f"({fmt(smoke_median, 0)} s); x list: to `yarn application -list`")
    print("\nper-job timeline, medians (at: s since the deploy call; step: median of each "
          "run's time since the row above;\nsmoke at: the smoke application's same event, s "
          "since skein.Client())")
    print(f"{'phase':<45} {'source':<7} {'at':>7} {'step':>7} {'smoke at':>9}")
    for row in analysis["per_job_timeline"]:
        print(f"{row['phase']:<45} {row['source']:<7} {fmt(row['at_median_s'], 7)} "
              f"{fmt(row['step_median_s'], 7)} {fmt(row['smoke_at_median_s'], 9)}")
    container = analysis["container"]
    print(f"\nTaskExecutor container request -> registered, medians over "
          f"{container['samples']} containers (AM, RM, NM and TE logs)")
    for row in container["steps"]:
        print(f"  {row['step']:<40} {fmt(row['median_s'], 6)}  {row['what']}")
    print(f"  {'requested -> registered':<40} {fmt(container['requested_to_registered_median_s'], 6)}")
    cold = analysis["session_cold_breakdown_median_s"]
    print("\nsession, new container: medians")
    for name, value in cold.items():
        print(f"  {name:<40} {fmt(value, 6)}")


# ============================================================== main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5,
                        help="measured runs of each figure and baseline (default 5)")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the job status polls (default 20 ms)")
    args = parser.parse_args()
    poll = args.poll_ms / 1000.0

    local_hadoop.apply_env()
    ok, state = local_hadoop.status()
    if not ok:
        sys.exit(f"the local Hadoop is not healthy; `integration/cluster up` first\n{state}")
    rm_log, nm_log = DaemonLog("resourcemanager"), DaemonLog("nodemanager")
    began, load_before = time.time(), os.getloadavg()

    lists, smokes, per_job, failures = [], [], [], []
    imports: dict[str, list[float]] = {}
    warm = cold = None
    try:
        for index in range(args.runs):  # interleaved, so drift hits baselines and figures alike
            print(f"round {index + 1}/{args.runs}", file=sys.stderr, flush=True)
            lists.append(yarn_list())
            for name, code in IMPORTS.items():
                imports.setdefault(name, []).append(python_start(code))
            smokes.append(smoke_run())
            print(f"  smoke {smokes[-1]['app_id']}: {smokes[-1]['client_to_finished_s']:.1f} s",
                  file=sys.stderr, flush=True)
            try:
                per_job.append(per_job_run(poll))
            except (JobFailed, TimeoutError, RestError) as failure:
                failures.append(f"per-job: {failure}")
                print(f"  per-job run failed: {failure}", file=sys.stderr)
                continue
            client = per_job[-1]["client"]
            print(f"  per-job {per_job[-1]['app_id']}: RUNNING "
                  f"{client['all running seen'] - client['deploy called']:.1f} s, FINISHED "
                  f"{client['application finished seen'] - client['deploy called']:.1f} s",
                  file=sys.stderr, flush=True)
        print("session, free slots", file=sys.stderr, flush=True)
        warm = session_figures("free slots", SESSION_WARM, args.runs, poll,
                               lambda rest, app_id: wait_slots_free(rest))
        print("session, new container", file=sys.stderr, flush=True)
        cold = session_figures("new container", SESSION_COLD, args.runs, poll,
                               wait_no_task_executor, spread_over_allocate_cycle(args.runs))
        analysis = analyse(per_job, smokes, cold, rm_log, nm_log)
    finally:
        leftovers = kill_leftovers()
        remove_smoke_files()
    if leftovers:
        failures.append(f"left running, killed: {leftovers}")

    smoke_total = [s["client_to_finished_s"] for s in smokes]
    smoke_median = median(smoke_total)

    def versus_smoke(values: list[float]) -> dict:
        out = summary(values)
        out["ratio_to_smoke"] = out["median_s"] / smoke_median if out["median_s"] else None
        return out

    def versus_list(values: list[float]) -> dict:
        out = summary(values)
        out["ratio_to_yarn_list"] = out["median_s"] / median(lists) if out["median_s"] else None
        return out

    def per_job_figure(key: str) -> list[float]:
        return [r["client"][key] - r["client"]["deploy called"] for r in per_job]

    container_total = [v for v in analysis["container"]["requested_to_registered_s"] if v is not None]
    figures = {
        "per-job: deploy -> all tasks RUNNING": versus_smoke(per_job_figure("all running seen")),
        "per-job: deploy -> application FINISHED": versus_smoke(per_job_figure("application finished seen")),
        "per-job: deploy -> submit returned (skein driver, upload)": versus_list(per_job_figure("submitted")),
        "per-job: deploy -> AppMaster up (REST in kv)": versus_smoke(per_job_figure("appmaster up")),
        "session, free slot: submit -> all tasks RUNNING":
            summary([r["submit_to_running_s"] for r in warm["runs"]]),
        "session, new container: submit -> all tasks RUNNING":
            versus_smoke([r["submit_to_running_s"] for r in cold["runs"]]),
        "TaskExecutor container requested -> registered (logs)": summary(container_total),
        "session deploy -> AppMaster up (REST in kv), 2 sessions":
            summary([s["deploy"]["appmaster up"] for s in (warm, cold)]),
        "smoke: skein.Client() -> FINISHED": versus_smoke(smoke_total),
        "smoke: smoke.run, submit -> FINISHED": versus_smoke([s["submit_to_finished_s"] for s in smokes]),
        "skein.Client() start (skein Java driver)": versus_list([s["driver_start_s"] for s in smokes]),
        "yarn application -list": summary(lists),
        **{f"{name} (outside YARN)": summary(values) for name, values in imports.items()},
    }
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "skein": skein.__version__, "load_before": load_before,
                    "load_after": os.getloadavg()},
        "settings": {"runs": args.runs, "poll_ms": args.poll_ms, "hold_s": HOLD,
                     "parallelism": PARALLELISM, "tag": TAG},
        "total_s": time.time() - began,
        "figures": figures,
        "analysis": analysis,
        "baselines": {"smoke": smokes, "yarn_application_list_s": lists,
                      "python_start_s": imports},
        "per_job_runs": per_job,
        "session_free_slots": warm,
        "session_new_container": cold,
        "failures": failures,
    }
    report(results)
    if failures:
        print(f"\nfailures: {failures}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten: {RESULTS.relative_to(REPO)} (total {results['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
