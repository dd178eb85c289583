"""flinkyarn clusters on YARN, through skein: a per-job cluster (the AppMaster runs one
job and ends with it) or a session cluster (it runs jobs until stopped).

The client generates the cluster's certificates and keeps them under
~/.flinkyarn/applications/<application id>/ (with the REST address), so later commands
(`list`, `cancel`, `session stop`, `run -t yarn-session`) can reach the AppMaster. Before
submitting, it checks the request against the ResourceManager: the queue must exist and
every container must fit its maximum allocation, else nothing is submitted. After
submitting, it waits for the AppMaster as long as YARN keeps the application waiting for
room in its queue (unless yarn.application.start-timeout says otherwise), and says why.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import msgspec

from flinkyarn import hadoop, hdfs, kerberos, options, retry
from flinkyarn.archive import JobArchive
from flinkyarn.clock import Clock, SystemClock
from flinkyarn.configuration import Configuration, format_duration
from flinkyarn.gateways.dispatcher import TokenStatus
from flinkyarn.ids import new_id
from flinkyarn.jobgraph import JobGraph
from flinkyarn.rpc.security import (APPMASTER_FILES, CA_FILE, CERT_FILE, FILES, KEY_FILE,
                                     TASKEXECUTOR_DIR, ClusterSecurity)
from yarn_client import rest_submit, shipping, skein_agent
from yarn_client.rest_client import RestClient, RestError

log = logging.getLogger(__name__)

APPLICATION_TYPE = skein_agent.APPLICATION_TYPE
REST_ADDRESS_KEY = "flinkyarn.rest_address"
DASHBOARD_KEY = "flinkyarn.dashboard_url"
TERMINAL = hadoop.APPLICATION_ENDED  # a YARN application's
HOME = kerberos.client_home()


KEYTAB = "flinkyarn-login.keytab"  # the AppMaster's copy of security.kerberos.login.keytab

APPMASTER_START_TIMEOUT = 300.0
"""Seconds an AppMaster that YARN runs has to answer: its start is ours, and bounded. How
long YARN keeps an application waiting for room (ACCEPTED) is the queue's business:
yarn.application.start-timeout, by default no bound."""
FIRST_WAITING_REPORT = 10.0
"""Seconds after the submission when the client first says why YARN keeps the
application waiting (most start well before), ..."""
WAITING_REPORT_INTERVAL = 30.0
"""... and how often it says so again while YARN does."""


class YarnDeploymentError(RuntimeError):
    """The application was refused before or during start; nothing is left running."""


@dataclass
class YarnOptions:
    name: str = ""
    queue: str = "default"
    tags: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()


@dataclass
class Deployment:
    app_id: str
    rest: RestClient
    dashboard_url: str
    phases: dict[str, float] = field(default_factory=dict)
    delegation_tokens: TokenStatus | None = None  # on a secure cluster
    job_store: str = ""  # its folder of the job store: where a new attempt says it serves


def applications_dir() -> Path:
    """Where this client keeps a folder per application it made (with its keys)."""
    return HOME / "applications"


def application_dir(app_id: str) -> Path:
    return applications_dir() / app_id


def rm_web_address() -> str:
    return hadoop.rm_web_address()


def rm_get(path: str) -> dict:
    """A GET of the ResourceManager's REST API (hadoop.rm_request: RM HA, HTTPS_ONLY,
    SPNEGO); YarnDeploymentError naming the RMs tried when none answers or it refuses."""
    try:
        return hadoop.rm_request(path)
    except hadoop.ResourceManagerError as error:
        if error.status == 404:
            raise YarnDeploymentError(f"the YARN ResourceManager knows no {path}") from None
        if error.status is not None or not error.tried:  # refused, or no ticket
            raise YarnDeploymentError(str(error)) from None
        raise YarnDeploymentError(f"{error}; is HADOOP_CONF_DIR "
                                  f"({os.environ.get('HADOOP_CONF_DIR')}) right?") from None


def application_report(app_id: str) -> dict:
    """The ResourceManager's report of `app_id` as its REST API gives it (trackingUrl,
    amHostHttpAddress, runningContainers, logAggregationStatus, ...: more than skein's
    ApplicationReport has, and without starting skein's driver)."""
    return rm_get(f"/ws/v1/cluster/apps/{app_id}")["app"]


TASKEXECUTOR_STAGED = {CA_FILE: CA_FILE, CERT_FILE: "taskexecutor-cert.pem",
                       KEY_FILE: "taskexecutor-key.pem"}
"""A TaskExecutor container's security files: its name for each, the staged file's."""


def _staged_security(directory: Path) -> dict[str, Path]:
    """What of ClusterSecurity.generate's files goes into the staging folder, by staged
    name: the client's files (the AppMaster localizes the authority's; a client on another
    machine fetches the rest: `connect`), and the TaskExecutors' certificate and key under
    TASKEXECUTOR_STAGED's names (their ca.pem is the client's)."""
    staged = {name: directory / name for name in FILES}
    for name in (CERT_FILE, KEY_FILE):
        staged[TASKEXECUTOR_STAGED[name]] = directory / TASKEXECUTOR_DIR / name
    return staged


def check_request(queue: str, containers: dict[str, tuple[int, int, str]]) -> None:
    """Refuses what YARN could never satisfy: an unknown queue, or a container (memory
    MiB, vcores, the option that sized it) over the queue's maximum allocation."""
    scheduler = rm_get("/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
    queues = hadoop.leaf_queues(scheduler)
    if queues and queue not in queues:
        raise YarnDeploymentError(f"unknown YARN queue {queue!r} (option "
                                  f"{options.YARN_APPLICATION_QUEUE.key}); leaf queues: "
                                  f"{', '.join(sorted(q for q in queues if '.' not in q))}")
    limit = (queues.get(queue) or scheduler).get("maximumAllocation") or {}
    max_memory, max_vcores = limit.get("memory"), limit.get("vCores")
    for what, (memory, vcores, key) in containers.items():
        if max_memory is not None and memory > max_memory:
            raise YarnDeploymentError(
                f"the {what} container needs {memory} MiB, more than the {max_memory} MiB "
                f"YARN allows in queue {queue!r}; lower {key}")
        if max_vcores is not None and vcores > max_vcores:
            raise YarnDeploymentError(
                f"the {what} container needs {vcores} vcores, more than the {max_vcores} "
                f"YARN allows in queue {queue!r}; lower {key}")


class _StartingDriver:
    """skein's Client, started on a thread at once; `client()` waits for it, `close()`
    stops it whether it was used or not (its driver is a process of ours)."""

    def __init__(self, attempt_failures_validity_ms: int = 0) -> None:
        log = HOME / "logs" / "skein-driver.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skein-driver")
        self._future = self._pool.submit(skein_agent.client, str(log),
                                         attempt_failures_validity_ms)

    def client(self):
        return self._future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._future.exception() is None:
            self._future.result().close()


@dataclass
class _Submission:
    """One deploy's state on the client: what `end()` cleans up once the application is
    up, or its submission failed. `credentials` (the staging folder with the cluster's
    keys) is set once chosen, and removed unless the application came `up`."""

    staging: shipping.Staging
    start: float              # monotonic s on the descriptor's clock
    validity_ms: int          # yarn.application-attempt-failures-validity-interval
    driver: _StartingDriver | None  # skein's, on a secure cluster
    work: Path                # local, beside the applications' folders
    credentials: str | None = None
    up: bool = False

    def end(self) -> None:
        if self.driver is not None:
            self.driver.close()
        shutil.rmtree(self.work, ignore_errors=True)
        if self.credentials is not None and not self.up:  # nothing submitted, or it was killed
            self.staging.remove_quietly(self.credentials)


@dataclass(frozen=True)
class _Shipped:
    """What _ship put on the cluster's filesystem."""

    shipment: shipping.Shipment
    jar: shipping.Localized | None    # skein's, for a submission without skein's driver
    agent: shipping.Localized         # our Java agent for skein's ApplicationMaster
    credentials: str                  # the private folder of the cluster's keys
    uploads: dict[str, Path]          # its files: written already, or with the submission
    keytab: Path | None               # the login keytab, shipped for the AppMaster


def _index(staging: shipping.Staging, app_id: str) -> str:
    """The application's entry in the staging folder's index (where its AppMaster is)."""
    return f"{staging.root}/applications/{app_id}.json"


class YarnClusterDescriptor:
    """Starts clusters on YARN. `clock` and `sleep` time and pace the wait for an
    AppMaster (a test passes a ManualClock and its `advance`)."""

    def __init__(self, conf: Configuration, yarn: YarnOptions, out: TextIO = sys.stderr,
                 clock: Clock | None = None,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.conf = conf
        self.yarn = yarn
        self.out = out
        self.clock = clock or SystemClock()
        self.sleep = sleep

    # ------------------------------------------------------------------ resources

    def _containers(self) -> dict[str, tuple[int, int, str]]:
        am_memory = math.ceil(self.conf.get(options.JOB_MANAGER_PROCESS_MEMORY) / (1 << 20))
        te_memory = math.ceil(self.conf.get(options.TASK_MANAGER_PROCESS_MEMORY) / (1 << 20))
        te_vcores = max(1, math.ceil(self.conf.get(options.TASK_MANAGER_CPU_CORES)))
        return {
            "AppMaster": (am_memory, 1, options.JOB_MANAGER_PROCESS_MEMORY.key),
            "TaskExecutor": (te_memory, te_vcores, f"{options.TASK_MANAGER_PROCESS_MEMORY.key} "
                                                   f"or {options.TASK_MANAGER_CPU_CORES.key}"),
        }

    # --------------------------------------------------------------------- deploy

    def deploy(self, mode: str, graph: JobGraph | None = None) -> Deployment:
        """Submits a per-job (with `graph`) or session application and returns once its
        REST API answers. On any failure the application is killed and the error says
        where to look. Raises ConfigurationError, before anything is started, for options
        that the AppMaster or a TaskExecutor would refuse, and InvalidJobGraph for a graph
        the Dispatcher would."""
        containers = self._check_request(graph)
        extras = self._ship_files()
        submission = self._begin_submission()
        try:
            shipped = self._ship(submission)
            master_files, files = self._container_files(submission, shipped, extras, graph)
            store = f"{submission.staging.job_store(self.conf)}/{{app_id}}"
            spec = self._spec(mode, graph, master_files, files, shipped.shipment, containers,
                              self._cleanup_arguments(submission.staging, shipped.credentials,
                                                      store))
            phases: dict[str, float] = {"uploaded bytes": float(shipped.shipment.uploaded_bytes)}
            app_id = self._submit(spec, submission.staging, shipped.jar, submission.driver,
                                  submission.validity_ms, shipped.uploads)
            phases["submitted"] = self.clock.monotonic() - submission.start
            self._say(f"submitted {app_id} ({spec.name}) to queue {self.yarn.queue} "
                      f"[{phases['submitted']:.1f} s]")
            rest_address, dashboard, tokens = self.wait_for_appmaster(app_id, submission.start,
                                                                      phases)
            submission.up = True
            target = self._record_application(submission, app_id, mode, spec.name, store,
                                              rest_address, dashboard)
        finally:
            submission.end()
        return Deployment(app_id, RestClient(rest_address, ClusterSecurity.load(target / "security"),
                                             timeout=self.conf.get(options.CLIENT_TIMEOUT)),
                          dashboard, phases, tokens, store.format(app_id=app_id))

    def _check_request(self, graph: JobGraph | None) -> dict[str, tuple[int, int, str]]:
        """Refuses, before anything starts, what the AppMaster, a TaskExecutor, the
        Dispatcher or YARN would (check_request); logs in to Kerberos on the way. The
        containers the application asks for (_containers)."""
        options.check_cluster_options(self.conf)
        if graph is not None:
            options.check_job_graph(graph, self.conf)
        kerberos.client_login(self.conf)
        containers = self._containers()
        check_request(self.yarn.queue, containers)
        return containers

    def _begin_submission(self) -> _Submission:
        """The staging folder, the clock of the start-up phases, skein's driver on a
        secure cluster (started now: it starts while the files are shipped), and a local
        work folder; `end()` cleans them up."""
        staging = shipping.Staging(self.conf, self._say)
        start = self.clock.monotonic()
        validity_ms = round(self.conf.get(options.YARN_ATTEMPT_FAILURES_VALIDITY_INTERVAL) * 1000)
        # Without Kerberos the client submits through the ResourceManager's REST API
        # (yarn_client/rest_submit.py); on a secure cluster skein's driver (a JVM:
        # seconds) gathers the delegation tokens, and starts while the files are shipped.
        driver = _StartingDriver(validity_ms) if kerberos.security_enabled() else None
        self._say("shipping to the cluster:")
        # Beside the application's folder, not in TMPDIR: its keys move there in one
        # rename, which another filesystem would refuse (EXDEV) once the application runs.
        applications = applications_dir()
        applications.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".submit-", dir=applications))
        return _Submission(staging, start, validity_ms, driver, work)

    def _ship(self, submission: _Submission) -> _Shipped:
        """Ships the Python environment and the program's files, skein's jar (without
        skein's driver), and the cluster's new keys (and the login keytab) into a private
        credentials folder; a YarnDeploymentError when the filesystem refuses."""
        staging = submission.staging
        try:
            shipment = shipping.ship(self.conf, staging)
            jar = None if submission.driver is not None else shipping.cached_copy(
                staging, skein_agent.skein_jar(), "file",
                "skein's ApplicationMaster", rest_submit.JAR, localize_as="file")
            agent = skein_agent.localized_agent(staging)
            ClusterSecurity.generate(submission.work / "security")
            credentials = f"{staging.root}/clusters/{new_id()}"
            submission.credentials = credentials
            staging.private_folder(credentials)
            uploads = {f"{credentials}/{name}": source
                       for name, source in _staged_security(submission.work / "security").items()}
            keytab = self._keytab()
            if keytab is not None:
                uploads[f"{credentials}/{KEYTAB}"] = keytab
            if submission.driver is not None:  # else written with the application's folder
                staging.upload_new(uploads)
        except OSError as error:  # HDFS: refused, unreachable, permission denied
            raise YarnDeploymentError(f"cannot ship to {staging.uri(staging.root)}: "
                                      f"{kerberos.first_line(error)}") from None
        except skein_agent.AgentBuildError as error:
            raise YarnDeploymentError(str(error)) from None
        return _Shipped(shipment, jar, agent, credentials, uploads, keytab)

    def _container_files(self, submission: _Submission, shipped: _Shipped, extras: list[Path],
                         graph: JobGraph | None) -> tuple[dict, dict]:
        """What YARN localizes for the AppMaster and for each TaskExecutor (skein files by
        name): the role's keys, the shipment, --files and --py-files, the AppMaster's
        keytab, and the job graph (written into the work folder)."""
        staging = submission.staging

        # Localized from the staging folder, readable by this user only: nothing
        # else carries the cluster's keys. Each role gets its own (security.py): the
        # AppMaster the authority's key, a TaskExecutor the TaskExecutors' certificate
        # under the usual names; neither gets the client's.
        def localized(names: dict[str, str]) -> dict:
            return {name: shipping.Localized(name, staging.uri(f"{shipped.credentials}/{staged}"))
                    .skein_file() for name, staged in names.items()}

        files = localized(TASKEXECUTOR_STAGED)
        master_files = localized({name: name for name in APPMASTER_FILES})
        # Its JVM's options name it (skein_agent.am_java_options), on either path.
        master_files[skein_agent.AGENT_JAR] = shipped.agent.skein_file()
        for role_files, role_shipped in ((files, shipped.shipment.executor_files()),
                                         (master_files, shipped.shipment.master_files())):
            role_files.update({name: f.skein_file() for name, f in role_shipped.items()})
            for extra in extras:
                role_files[extra.name] = str(extra.resolve())
        if shipped.keytab is not None:  # the AppMaster's alone: the TaskExecutors get tokens
            master_files[KEYTAB] = shipping.Localized(
                KEYTAB, staging.uri(f"{shipped.credentials}/{KEYTAB}")).skein_file()
        if graph is not None:
            (submission.work / "job.msgpack").write_bytes(msgspec.msgpack.encode(graph))
            master_files["job.msgpack"] = str(submission.work / "job.msgpack")
        return master_files, files

    def _cleanup_arguments(self, staging: shipping.Staging, credentials: str, store: str) -> str:
        """The AppMaster's arguments for what it deletes at the application's end
        (`store`: the job store's folder, of {app_id}); its archive goes to the archive
        folder."""
        app_id = "$SKEIN_APPLICATION_ID"
        return (f'--archive "{staging.uri(staging.archive(self.conf))}" '
                f'--job-store "{staging.uri(store.format(app_id=app_id))}" '
                f'--staging-file "{store.format(app_id=app_id)}" '
                f'--staging-file "{credentials}" '
                f'--staging-file "{_index(staging, app_id)}" ')

    def _record_application(self, submission: _Submission, app_id: str, mode: str, name: str,
                            store: str, rest_address: str, dashboard: str) -> Path:
        """The AppMaster answers: where to reach it goes into the staging folder's index
        (private) and the application's local folder, with the cluster's keys; that
        folder."""
        info = {"rest_address": rest_address, "dashboard_url": dashboard, "mode": mode,
                "name": name, "credentials": submission.credentials,
                "job_store": store.format(app_id=app_id)}
        submission.staging.write_private(_index(submission.staging, app_id), json.dumps(info).encode())
        target = application_dir(app_id)
        target.mkdir(parents=True, exist_ok=True)
        target.chmod(0o700)
        os.replace(submission.work / "security", target / "security")
        (target / "cluster.json").write_text(json.dumps(info))
        return target

    def _submit(self, spec, staging: shipping.Staging, jar: shipping.Localized | None,
                driver: _StartingDriver | None, validity_ms: int,
                uploads: dict[str, Path]) -> str:
        """Submits `spec` through skein's driver where there is one, else through the
        ResourceManager's REST API, writing `uploads` with the application's folder;
        the application's id."""
        if driver is not None:
            with driver.client() as client:
                return client.submit(spec)
        assert jar is not None
        submission = None
        try:
            submission = rest_submit.Submission(staging, jar)
            return submission.submit(spec, application_type=APPLICATION_TYPE,
                                     validity_ms=validity_ms, uploads=uploads)
        except BaseException as error:
            if submission is not None:
                submission.discard()
            if isinstance(error, OSError):  # HDFS or the ResourceManager refused
                raise YarnDeploymentError(
                    f"cannot submit to YARN: {kerberos.first_line(error)}") from None
            raise

    def _keytab(self) -> Path | None:
        """security.kerberos.login.keytab, shipped (owner-only, like the cluster's keys)
        for the AppMaster to obtain new delegation tokens from; None on a cluster
        without Kerberos, without a keytab, or with renewal turned off."""
        keytab = self.conf.get(options.SECURITY_KERBEROS_KEYTAB)
        if not (keytab and kerberos.security_enabled()
                and self.conf.get(options.SECURITY_DELEGATION_TOKENS_ENABLED)):
            return None
        return Path(keytab).expanduser()

    def _ship_files(self) -> list[Path]:
        """--files and --py-files (each localized under its own name)."""
        listed = [*self.yarn.files, *(Path(p.strip()).expanduser() for key in
                                      (options.YARN_SHIP_FILES, options.PYTHON_FILES)
                                      for p in self.conf.get(key).split(",") if p.strip())]
        names: dict[str, Path] = {}
        for path in listed:
            if not path.exists():
                raise YarnDeploymentError(f"cannot ship {path}: no such file or folder")
            if names.get(path.name, path).resolve() != path.resolve():
                raise YarnDeploymentError(f"cannot ship both {names[path.name]} and {path}: "
                                          f"containers see both as {path.name}")
            names[path.name] = path
        return list(names.values())

    def _spec(self, mode: str, graph: JobGraph | None, master_files: dict, files: dict,
              shipment: shipping.Shipment, containers: dict[str, tuple[int, int, str]],
              cleanup: str = ""):
        import skein

        # Where a process binds and what it advertises is the host YARN put it on: the
        # client's values for these keys mean nothing there.
        placed = {options.JOB_MANAGER_RPC_ADDRESS.key, options.REST_ADDRESS.key,
                  options.TASK_MANAGER_HOST.key}
        conf = options.with_spark_started(self.conf, graph) if graph is not None else self.conf
        raw = {**conf.raw(), **shipping.executor_python(self.conf, shipment)}
        keytab = options.SECURITY_KERBEROS_KEYTAB.key
        # The client's keytab path means nothing in a container: the AppMaster's is the
        # localized copy (when shipped), a TaskExecutor has none.
        raw.pop(keytab, None)
        properties = " ".join(f"-D {shlex.quote(f'{k}={v}')}" for k, v in raw.items()
                              if k not in placed)
        am_properties = f"-D {keytab}={KEYTAB} {properties}" if KEYTAB in master_files else properties
        python_path = shipping.container_python_path(shipment, self.conf)
        versions = shipping.client_versions()
        name = self.yarn.name or self.conf.get(options.YARN_APPLICATION_NAME) or (
            f"flinkyarn: {graph.name}" if graph else "flinkyarn session")
        job = "--job-graph job.msgpack " if graph is not None else ""
        am_memory, _, _ = containers["AppMaster"]
        te_memory, te_vcores, _ = containers["TaskExecutor"]
        environment = {"PYTHONUNBUFFERED": "1"}
        # Read by the agent in skein's ApplicationMaster (yarn_client/skein_agent.py).
        def millis(option) -> str:
            return str(max(1, round(self.conf.get(option) * 1000)))
        heartbeat = {skein_agent.HEARTBEAT_ENV: millis(options.YARN_HEARTBEAT_INTERVAL),
                     skein_agent.PENDING_HEARTBEAT_ENV:
                         millis(options.YARN_CONTAINER_REQUEST_INTERVAL),
                     skein_agent.FINAL_END_ENV: "1"}
        tags = {APPLICATION_TYPE, f"{APPLICATION_TYPE}-{mode}", *self.yarn.tags,
                *(t for t in self.conf.get(options.YARN_TAGS).split(",") if t)}
        return skein.ApplicationSpec(
            name=name, queue=self.yarn.queue, tags=tags,
            max_attempts=self.conf.get(options.YARN_APPLICATION_ATTEMPTS),
            master=skein.Master(
                resources=skein.Resources(memory=am_memory, vcores=1),
                files=master_files, env={**environment, **heartbeat},
                script=shipping.launch_script(shipment.runtime_python, python_path, versions, (
                    f"-m yarn_am.yarn_entrypoint --mode {mode} --die-with-container {job}{cleanup}"
                    f"--security-dir . -D jobmanager.rpc.address=$NM_HOST "
                    f"-D rest.address=$NM_HOST {am_properties}"))),
            services={"taskexecutor": skein.Service(
                # The ResourceManager decides on replacements; a failed container must
                # not end the application (skein's default for a failing service). A
                # per-job application's job needs a TaskExecutor at once: YARN starts the
                # first beside the AppMaster, with the worker id the service's environment
                # gives (requested ones get their own), and the ResourceManager adopts it.
                instances=1 if graph is not None else 0, max_restarts=0, allow_failures=True,
                resources=skein.Resources(memory=te_memory, vcores=te_vcores),
                files=files, env={**environment, "FLINKYARN_RESOURCE_ID": "taskexecutor-0"},
                script=shipping.launch_script(shipment.python, python_path, versions, (
                    f"-m taskexecutor --resource-id $FLINKYARN_RESOURCE_ID --die-with-container "
                    f"--resource-manager skein-kv:flinkyarn.rpc_address "
                    f"--security-dir . -D taskmanager.host=$NM_HOST {properties}")))})

    def wait_for_appmaster(self, app_id: str, start: float, phases: dict[str, float]
                           ) -> tuple[str, str, TokenStatus | None]:
        """Waits until the AppMaster of the submitted application `app_id` answers, showing
        the start-up phases (seconds since `start` on self.clock, also into `phases`);
        returns (REST address, dashboard URL, what the AppMaster says of its delegation
        tokens on a secure cluster).

        Until YARN runs the AppMaster (ACCEPTED: no room for it in its queue yet, or its
        container has yet to register) it waits as long as yarn.application.start-timeout
        allows, by default as long as it takes, and says why (`waiting_reason`)
        FIRST_WAITING_REPORT s after the submission, then every WAITING_REPORT_INTERVAL s.
        An AppMaster that YARN runs has APPMASTER_START_TIMEOUT s to answer. On any
        failure, an interrupt too, it kills the application and raises:
        YarnDeploymentError says what happened and what to do."""
        key = options.YARN_APPLICATION_START_TIMEOUT.key
        timeout = self.conf.get(options.YARN_APPLICATION_START_TIMEOUT)
        deadline = retry.Deadline(timeout, self.clock)
        next_report = self.clock.monotonic() + FIRST_WAITING_REPORT
        seen = "SUBMITTED"
        last: dict[str, Any] = {"state": seen}  # the latest application report
        running_since: float | None = None
        clients: dict[str, Any] = {}  # by the AppMaster's address
        # The first line says how long the client waits; the later ones need not.
        bound = (f"; the client waits without a deadline ({key})" if timeout is None else
                 f"; the client gives up {format_duration(timeout)} after the submission ({key})")

        def started() -> tuple[str, str, TokenStatus | None] | None:
            nonlocal seen, last, next_report, running_since, bound
            report = last = application_report(app_id)
            state = report["state"]
            now = self.clock.monotonic()
            if state != seen and state in ("ACCEPTED", "RUNNING"):
                phases[state.lower()] = now - start
                self._say(f"  {state.lower()} [{phases[state.lower()]:.1f} s]")
                seen = state
            if state in TERMINAL:
                raise YarnDeploymentError(
                    f"{app_id} ended while starting: {report.get('finalStatus')}: "
                    f"{(report.get('diagnostics') or '').strip()}\n"
                    f"  logs: yarn logs -applicationId {app_id}")
            if state != "RUNNING":
                running_since = None  # a later attempt waits for room as the first did
                if now >= next_report:
                    self._say(f"  still {state} [{now - start:.1f} s]: "
                              f"{self._waiting_reason(report)}{bound}")
                    next_report, bound = now + WAITING_REPORT_INTERVAL, ""
                return None
            if running_since is None:
                running_since = now
            elif now - running_since > APPMASTER_START_TIMEOUT:
                raise YarnDeploymentError(
                    f"the AppMaster of {app_id} did not answer within "
                    f"{APPMASTER_START_TIMEOUT:g} s of YARN running it; "
                    f"logs: yarn logs -applicationId {app_id}")
            if not report.get("amRPCAddress"):
                return None
            address = report["amRPCAddress"]
            if address not in clients:
                clients[address] = skein_application(report)
            values = clients[address].kv.get_prefix("flinkyarn.")
            if REST_ADDRESS_KEY not in values:
                return None
            phases["appmaster up"] = self.clock.monotonic() - start
            self._say(f"  AppMaster up [{phases['appmaster up']:.1f} s]")
            tokens = values.get(kerberos.TOKEN_STATUS_KEY)
            return (values[REST_ADDRESS_KEY].decode(), values[DASHBOARD_KEY].decode(),
                    msgspec.json.decode(tokens, type=TokenStatus) if tokens else None)

        try:
            try:
                return retry.poll_until(started, pauses=retry.Backoff.fixed(0.2),
                                        deadline=deadline, sleep=self.sleep)
            except retry.GaveUp:
                assert timeout is not None  # without one, only `started` ends the wait
                state = last["state"]
                why = ("YARN runs it, its AppMaster has not answered yet" if state == "RUNNING"
                       else f"still {state}: {self._waiting_reason(last)}")
                raise YarnDeploymentError(
                    f"{app_id} did not start within {format_duration(timeout)} ({key}), so "
                    f"it was killed; {why}. Raise {key}, or leave it empty to wait as long "
                    f"as YARN keeps the application waiting; logs: yarn logs -applicationId "
                    f"{app_id}") from None
        except BaseException:
            with contextlib.suppress(YarnDeploymentError):  # the first error says more
                kill(app_id)
            raise

    def _waiting_reason(self, report: dict[str, Any]) -> str:
        """`waiting_reason` of the application of `report`, with its queue as the
        ResourceManager's scheduler shows it now (left out if it cannot say)."""
        queue_name = report.get("queue") or self.yarn.queue
        try:
            scheduler = rm_get("/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
            queue = hadoop.leaf_queues(scheduler).get(queue_name)
        except (YarnDeploymentError, hadoop.HadoopConfigError, KeyError, TypeError):
            queue = None  # the line says what is known; the wait goes on
        memory, vcores, _ = self._containers()["AppMaster"]
        return waiting_reason(report.get("diagnostics") or "", queue_name, queue,
                              (memory, vcores))

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def waiting_reason(diagnostics: str, queue_name: str, queue: dict[str, Any] | None,
                   appmaster: tuple[int, int]) -> str:
    """Why YARN keeps an application waiting, on one line: what YARN says (`diagnostics`
    of its application report, without the time stamp and the details the queue's
    figures give), its queue's use against the queue's limits (`queue`: its entry in the
    ResourceManager's /ws/v1/cluster/scheduler, as hadoop.leaf_queues gives it; None:
    not known), and what the AppMaster asks for (`appmaster`: MiB, vcores)."""
    parts = []
    headline = re.sub(r"^\s*\[[^\]]*\]", "", diagnostics).split(" Details :")[0]
    said = " ".join(headline.split())
    if said:
        parts.append(f'YARN says "{said if len(said) <= 300 else said[:297] + "..."}"')
    if queue is None:
        parts.append(f"queue {queue_name}")
    else:  # by its name, as the user gave it; the report has its path (root.etl)
        parts.append(f"queue {queue.get('queueName') or queue_name}{_queue_use(queue)}")
    memory, vcores = appmaster
    parts.append(f"this AppMaster asks for {_resource({'memory': memory, 'vCores': vcores})}")
    return "; ".join(parts)


def _queue_use(queue: dict[str, Any]) -> str:
    """What a leaf queue of the CapacityScheduler uses of its limits, its AppMasters of
    theirs, and how many applications wait in it (", uses ... of at most ..., ..."), from
    what its version of the REST API has: Hadoop 3.x gives the queue's effective maximum
    in resources, older ones percentages of the cluster; the AppMasters' use and limit
    are at the top (2.8 and later) or per partition."""
    said = []
    used, most = queue.get("resourcesUsed"), queue.get("maxEffectiveCapacity")
    if used and most:
        said.append(f" uses {_resource(used)} of at most {_resource(most)}")
    elif "absoluteUsedCapacity" in queue and "absoluteMaxCapacity" in queue:
        said.append(f" uses {queue['absoluteUsedCapacity']:.1f}% of the cluster, at most "
                    f"{queue['absoluteMaxCapacity']:.1f}%")
    am_used, am_limit = queue.get("usedAMResource"), queue.get("AMResourceLimit")
    if not (am_used and am_limit):
        partitions = (queue.get("resources") or {}).get("resourceUsagesByPartition") or []
        default: dict[str, Any] = next((p for p in partitions if not p.get("partitionName")), {})
        am_used, am_limit = default.get("amUsed"), default.get("amLimit")
    if am_used and am_limit:
        said.append(f" AppMasters {_resource(am_used)} of at most {_resource(am_limit)}")
    waiting = queue.get("numPendingApplications")
    if waiting:
        said.append(f" {waiting} application{'s' if waiting != 1 else ''} waiting")
    return ",".join(said)


def _resource(resource: dict[str, Any]) -> str:
    """A resource of YARN's REST API ({"memory": MiB, "vCores": n}) as "768 MiB/1 vcore"."""
    vcores = resource.get("vCores")
    return f"{resource.get('memory')} MiB" + (
        f"/{vcores} vcore{'s' if vcores != 1 else ''}" if vcores is not None else "")


# ------------------------------------------------------------ existing applications


def connect(app_id: str, conf: Configuration | None = None) -> RestClient:
    """The REST client of an application of this user: from what the submitting client
    kept in ~/.flinkyarn, or else from the application's files in the user's staging
    folder on HDFS (another machine, another HOME), fetched once into ~/.flinkyarn."""
    target = application_dir(app_id)
    conf = conf or Configuration.load()
    kerberos.client_login(conf)
    if not (target / "cluster.json").is_file():
        _fetch_application(app_id, target, conf)
    info = json.loads((target / "cluster.json").read_text())
    store = info.get("job_store")
    settled = conf

    def relocate() -> tuple[str, int] | None:  # a later AppMaster attempt serves elsewhere
        leader = _newest_leader(app_id, _job_store(store, settled)) if store else None
        return (leader.rest_address, leader.attempt) if leader else None

    return RestClient(info["rest_address"], ClusterSecurity.load(target / "security"),
                      timeout=conf.get(options.CLIENT_TIMEOUT), attempt=info.get("attempt", 1),
                      relocate=relocate)


def dashboard_token(app_id: str, conf: Configuration | None = None) -> str:
    """The token the application's dashboard asks for to cancel a job
    (ClusterSecurity.dashboard_token), from the client's files of the application."""
    connect(app_id, conf)  # fetches the files when this machine has none
    return ClusterSecurity.load(application_dir(app_id) / "security").dashboard_token()


def job_store_of(app_id: str) -> str:
    """The application's folder of the job store, as `connect()` found it ("" for an
    application of a flinkyarn without job stores)."""
    target = application_dir(app_id) / "cluster.json"
    return str(json.loads(target.read_text()).get("job_store", "")) if target.is_file() else ""


def _job_store(job_store: str, conf: Configuration):
    """The application's job store (`job_store`: its folder on the default filesystem)."""
    from flinkyarn.job_store import JobStore

    return JobStore(shipping.Staging(conf).uri(job_store))


def _newest_leader(app_id: str, store):
    """The leader file of the newest AppMaster attempt that served in `store` (None if
    none did), also kept in what `connect()` reads."""
    try:
        leader = store.leader()
    except OSError:
        return None
    target = application_dir(app_id) / "cluster.json"
    if leader is not None and target.is_file():
        info = json.loads(target.read_text())
        if leader.attempt > info.get("attempt", 1):
            info.update(rest_address=leader.rest_address, dashboard_url=leader.dashboard_url,
                        attempt=leader.attempt)
            partial = target.with_name(f"cluster.json.{new_id()[:8]}")
            partial.write_text(json.dumps(info))
            os.replace(partial, target)
    return leader


def _fetch_application(app_id: str, target: Path, conf: Configuration) -> None:
    staging = shipping.Staging(conf)
    index = f"{staging.root}/applications/{app_id}.json"
    try:
        info = json.loads(staging.fs.cat_file(index))
        keys = {name: staging.fs.cat_file(f"{info['credentials']}/{name}") for name in FILES}
    except FileNotFoundError:
        raise YarnDeploymentError(f"no flinkyarn application {app_id} of yours: neither "
                                  f"{target} nor {staging.uri(index)} exists") from None
    partial = target.with_name(f"{app_id}.partial-{new_id()[:8]}")
    (partial / "security").mkdir(parents=True, mode=0o700)
    partial.chmod(0o700)
    for name, data in keys.items():
        path = partial / "security" / name
        path.write_bytes(data)
        path.chmod(0o600)
    (partial / "cluster.json").write_text(json.dumps(info))
    try:
        os.rename(partial, target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not (target / "security").is_dir():  # else fetched concurrently: as good
            raise


def remove_leftovers(app_id: str, conf: Configuration | None = None) -> list[str]:
    """What an ended application of this user left in the staging folder (its keys, a
    shipped keytab, its index entry, its job store) and skein's folder of it: its
    AppMaster removes them at its end, but cannot once its delegation tokens expired
    (or when YARN killed it before it could). Returns what was removed."""
    conf = conf or Configuration.load()
    kerberos.client_login(conf)
    staging = shipping.Staging(conf)
    index = f"{staging.root}/applications/{app_id}.json"
    try:
        info = json.loads(staging.fs.cat_file(index))
    except FileNotFoundError:
        return []
    skein_folder = f"{hdfs.home()}/.skein/{app_id}"
    paths = [info["credentials"], *filter(None, [info.get("job_store")]), index, skein_folder]
    return [path for path in paths if hdfs.delete(staging.fs, path)]


LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


def sweep_leftovers(conf: Configuration, out: TextIO) -> list[str]:
    """Removes what ended applications of this user left behind (remove_leftovers: keys,
    keytab, index entry, job store, skein's folder on HDFS; their folders under
    ~/.flinkyarn/applications with the client's copy of their keys), and says so on
    `out`: an application YARN killed, or whose attached client was gone, could not.
    Returns the ids of those swept. Costs one listing of the staging folder's index and
    one question to the ResourceManager; when either cannot be asked, sweeps nothing."""
    kerberos.client_login(conf)
    staging = shipping.Staging(conf)
    try:
        listed = staging.fs.ls(f"{staging.root}/applications", detail=False)
    except FileNotFoundError:
        listed = []
    except OSError as error:
        log.debug("not sweeping leftovers: %s", error)
        return []
    indexed = {name.rsplit("/", 1)[-1].removesuffix(".json") for name in listed
               if name.endswith(".json")}
    local_root = applications_dir()
    local = {path.name for path in local_root.glob("application_*") if path.is_dir()}
    if not indexed | local:
        return []
    try:
        live = {app["id"] for app in flinkyarn_applications(states=LIVE_STATES)}
    except (YarnDeploymentError, hadoop.HadoopConfigError, OSError) as error:
        log.debug("not sweeping leftovers: %s", error)
        return []
    swept = []
    for app_id in sorted((indexed | local) - live):
        try:
            removed = remove_leftovers(app_id, conf) if app_id in indexed else []
            if (local_root / app_id).is_dir():
                shutil.rmtree(local_root / app_id)
                removed.append(str(local_root / app_id))
        except OSError as error:  # the next command tries again; this one goes on
            print(f"could not remove what ended application {app_id} left: {error}",
                  file=out, flush=True)
            continue
        print(f"removed what ended application {app_id} left: {', '.join(removed)}",
              file=out, flush=True)
        swept.append(app_id)
    return swept


def archives(conf: Configuration | None = None) -> list[JobArchive]:
    """The archives of ended jobs this client reads: historyserver.archive.fs.dir, or
    else where this user's applications archive (jobmanager.archive.fs.dir or its
    default). A path without a scheme is on the default filesystem, as it is for the
    AppMaster that writes it."""
    conf = conf or Configuration.load()
    staging = shipping.Staging(conf)
    listed = [d.strip() for d in conf.get(options.HISTORY_SERVER_ARCHIVE_DIRS).split(",")
              if d.strip()] or [staging.archive(conf)]
    return [JobArchive(d if "://" in d else staging.uri(d)) for d in listed]


def is_running(app_id: str) -> bool:
    """Whether YARN has the application and it has not ended (an application the
    ResourceManager no longer knows, after a restart of it, has ended)."""
    try:
        return application_report(app_id).get("state") not in TERMINAL
    except YarnDeploymentError as error:
        if "knows no" in str(error):
            return False
        raise


def flinkyarn_applications(states: tuple[str, ...] = ("ACCEPTED", "RUNNING"),
                           tag: str | None = None) -> list[dict]:
    query = f"?applicationTypes={APPLICATION_TYPE}&states={','.join(states)}"
    apps = (rm_get(f"/ws/v1/cluster/apps{query}").get("apps") or {}).get("app") or []
    user = os.environ.get("USER") or __import__("getpass").getuser()
    apps = [a for a in apps if a.get("user") == user]
    if tag is not None:
        apps = [a for a in apps if tag in (a.get("applicationTags") or "").split(",")]
    return sorted(apps, key=lambda a: a["startedTime"], reverse=True)


@dataclass
class Replacement:
    """The AppMaster of a later attempt, serving."""

    attempt: int
    rest: RestClient
    previous_end: str  # how YARN says the attempt before it ended


def replacement(app_id: str, job_store: str, attempt: int, rest: RestClient,
                conf: Configuration | None = None, timeout: float = 600.0) -> Replacement | None:
    """After the AppMaster of `attempt` stopped answering at `rest`: waits until YARN
    has ended the application (None), the AppMaster answers again (a Replacement of
    the same attempt), or a later attempt serves (its Replacement: its leader file in
    the job store says where). Updates what `connect()` reads to the newest address."""
    store = _job_store(job_store, conf or Configuration.load())  # once, not at each poll

    def found() -> Replacement | None:
        if application_report(app_id)["state"] in TERMINAL:
            raise _Ended()
        leader = _newest_leader(app_id, store)
        if leader is not None and leader.attempt > attempt:
            new = RestClient(leader.rest_address, rest.security, rest.timeout, leader.attempt,
                             rest.relocate)
            return Replacement(leader.attempt, new, hadoop.attempt_diagnostics(app_id, attempt))
        try:
            rest.jobs()
        except RestError:
            return None
        return Replacement(attempt, rest, "")

    try:
        return retry.poll_until(found, pauses=retry.Backoff.fixed(0.5),
                                deadline=retry.Deadline(timeout))
    except _Ended:
        return None
    except retry.GaveUp:
        raise YarnDeploymentError(f"{app_id}: its AppMaster (attempt {attempt}) stopped "
                                  f"answering and no other took over within {timeout:g} s; "
                                  f"logs: yarn logs -applicationId {app_id}") from None


class _Ended(Exception):
    """The application ended: no AppMaster will serve again."""


def wait_for_end(app_id: str, timeout: float = 120.0) -> dict:
    try:
        return retry.poll_until(lambda: application_report(app_id),
                                lambda report: report["state"] in TERMINAL,
                                pauses=retry.Backoff.fixed(0.25), deadline=retry.Deadline(timeout))
    except retry.GaveUp as gave_up:
        report = gave_up.last_value  # the last application report
        state = report["state"] if isinstance(report, dict) else "not ended"
        raise YarnDeploymentError(f"{app_id} still {state} after {timeout:g} s") from None


def skein_application(report: dict):
    """skein's client of the ApplicationMaster of a running application (`report`: the
    ResourceManager's), with this user's skein credentials, which it serves with."""
    import skein

    return skein.ApplicationClient(report["amRPCAddress"], report["id"],
                                   security=skein.Security.from_default())


def container_logs(app_id: str) -> list[tuple[str, str]]:
    """(container id, its logs in `yarn logs`' layout) of each TaskExecutor container of
    a running application, ended ones too, from the NodeManagers that ran them."""
    containers = skein_application(application_report(app_id)).get_containers(
        states=["RUNNING", "SUCCEEDED", "FAILED", "KILLED"])
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    found = []
    for container in containers:
        node, cid = container.yarn_node_http_address, container.yarn_container_id
        base = f"http://{node}/ws/v1/node"
        try:
            with opener.open(f"{base}/containers/{cid}/logs", timeout=10) as response:
                listed = json.load(response)["containerLogsInfo"]["containerLogInfo"]
        except (OSError, ValueError, KeyError):
            continue  # the node no longer has them
        text = [f"Container: {cid} on {node}", "=" * 60]
        for entry in listed:
            name = entry["fileName"]
            try:
                with opener.open(f"{base}/containerlogs/{cid}/{name}", timeout=30) as response:
                    body = response.read().decode(errors="replace")
            except OSError as error:
                body = f"(cannot read: {error})"
            # The NodeManager frames the contents with a header and a trailer of its own.
            contents = body.split("LogContents:\n", 1)[-1].split("\nEnd of LogType:", 1)[0]
            text += [f"LogType:{name}", "LogContents:", contents.rstrip("\n"),
                     f"End of LogType:{name}", ""]
        found.append((cid, "\n".join(text) + "\n"))
    return found


def kill(app_id: str) -> None:
    """Asks the ResourceManager to kill `app_id`."""
    try:
        hadoop.kill_application(app_id)
    except hadoop.ResourceManagerError as error:
        raise YarnDeploymentError(str(error)) from None
