"""The AppMaster as the master script of a skein application.

    python -m yarn_am.yarn_entrypoint --mode per-job --job-graph job.msgpack --security-dir security -D ...
    python -m yarn_am.yarn_entrypoint --mode session --security-dir security -D ...

Per-job: runs the shipped JobGraph and ends with it; the YARN application's final status
says how: SUCCEEDED (FINISHED), FAILED (with the failure cause as diagnostics), KILLED
(canceled). Session: serves jobs until `flinkyarn session stop` (SUCCEEDED).
Clients find the REST API through skein's key-value store; the dashboard is a page of
the application's web UI, which YARN's tracking URL leads to through its web proxy.

Every task this script starts is supervised (`supervise`): an exception it raises ends
the application FAILED with the cause as diagnostics, never a hang, never lost.

Attempts (yarn.application-attempts): with --job-store, YARN starts the AppMaster again
when it is lost; the new attempt takes over the jobs the store holds (a per-job
application's job runs again unless it had ended) and writes where it serves for the
clients. Only the application's real end (SUCCEEDED, the last attempt, YARN killing
the application, a job cancelled by its user, TaskExecutor containers that can never
start: another attempt would start them alike) removes what the next attempt would
need, and only an end before the last attempt that is not real lets YARN retry (skein's
ApplicationMaster would retry every end but success: FINAL_END_FILE tells it otherwise;
stopped by a signal, it leaves the decision to YARN, which counts with the
attempt-failures validity interval).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable, Coroutine

import msgspec
import skein

from flinkyarn import hadoop, lifeline, options
from flinkyarn.archive import (FINAL_TRACKING_URL_FILE, ArchivedApplication, JobArchive,
                               history_page)
from flinkyarn.configuration import Configuration, parse_dynamic_properties
from flinkyarn.failures import failure_cause
from flinkyarn.gateways.dispatcher import TokenStatus
from flinkyarn.ids import JobID
from flinkyarn.job_store import FINAL_END_FILE, JobStore, Leader, attempt_of
from flinkyarn.jobgraph import JobGraph
from flinkyarn.kerberos import TOKEN_STATUS_KEY
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.scratch import ProcessScratch, process_scratch
from yarn_am.appmaster import AppMaster, appmaster_security
from yarn_am.delegation_tokens import DelegationTokenManager
from yarn_am.dispatcher import Dispatcher
from yarn_am.resourcemanager.yarn_driver import YarnDriver

log = logging.getLogger("yarn_am")

REST_ADDRESS_KEY = "flinkyarn.rest_address"
DASHBOARD_KEY = "flinkyarn.dashboard_url"
FINAL_STATUS = {"FINISHED": "SUCCEEDED", "FAILED": "FAILED", "CANCELED": "KILLED"}
MAX_DIAGNOSTICS = 4000


class Outcome:
    """How the application ends: a YARN final status and diagnostics."""

    def __init__(self, status: str = "SUCCEEDED", diagnostics: str = "") -> None:
        self.status, self.diagnostics = status, diagnostics
        self.fatal = False  # set once a failure ended the application; nothing overrides it
        self.final = False  # no later attempt could do better: the application ends

    def fail(self, diagnostics: str, final: bool = False) -> None:
        """A failure ends the application: FAILED with `diagnostics`, which nothing
        later overrides (not the job's result, not the stop that follows). `final`:
        another AppMaster attempt would meet the same failure (no TaskExecutor can ever
        start), so YARN gets none."""
        self.final = self.final or final
        if self.fatal:  # the first failure is the cause; what follows is its consequence
            return
        self.status, self.diagnostics = "FAILED", diagnostics
        self.fatal = True


def supervise(coroutine: Coroutine[Any, Any, None], what: str,
              on_fatal: Callable[[str], None]) -> asyncio.Task:
    """Starts `coroutine` as a task on the AppMaster's loop. If it raises (cancellation
    aside), the error is logged with its traceback and `on_fatal` gets the diagnostics
    ("WHAT failed: " and its failure cause), which end the application FAILED. The
    caller keeps the task and cancels it when the application ends."""
    async def supervised() -> None:
        try:
            await coroutine
        except Exception as error:
            log.error("%s failed", what, exc_info=error)
            on_fatal(f"{what} failed: {failure_cause(error)}")
    task = asyncio.create_task(supervised(), name=what)
    # Cancelled before it started, `coroutine` would never be awaited (a warning).
    task.add_done_callback(lambda _task: coroutine.close())
    return task


async def _report_progress(app, dispatcher: Dispatcher, job_id: JobID) -> None:
    """YARN's progress bar: the fraction of the job's subtasks that finished."""
    while True:
        details = await dispatcher.job_details_of(job_id)
        total = sum(v.parallelism for v in details.vertices) or 1
        done = sum(v.state_counts.get("FINISHED", 0) for v in details.vertices)
        await asyncio.to_thread(app.set_progress, max(0.01, min(0.99, done / total)))
        await asyncio.sleep(2.0)


async def _run_job(app, appmaster: AppMaster, graph: JobGraph, outcome: Outcome,
                   on_fatal: Callable[[str], None], attempt: int = 1) -> None:
    """Per-job mode: submit, wait for the end, record the outcome, shut down. Run under
    `supervise`; its progress reports are supervised the same way (`on_fatal`)."""
    dispatcher = appmaster.dispatcher
    assert dispatcher is not None  # it runs once the AppMaster serves
    if graph.job_id not in dispatcher.jobs:  # else it ended in an earlier attempt
        try:
            await dispatcher.run_own_job(graph, again=attempt > 1)
        except ValueError as error:
            if not outcome.fatal:  # else refused because the application ends for that
                outcome.status, outcome.diagnostics = "FAILED", f"job {graph.name!r} refused: {error}"
            # A refused job ends its application, as a refused submit ends Flink's: another
            # attempt would run it once what refused it changed (its output folder freed
            # by the job that wrote there), behind its user's back.
            outcome.final = True
            appmaster.shutdown()
            return
    progress = supervise(_report_progress(app, dispatcher, graph.job_id),
                         "reporting the job's progress", on_fatal)
    try:
        result = await dispatcher.wait_for_result(graph.job_id)
    finally:
        progress.cancel()
    if outcome.fatal:  # the application ended for a reason above the job's
        return
    # An attached client reads the job's last output before the application ends.
    await dispatcher.output_read(graph.job_id, timeout=10.0)
    outcome.status = FINAL_STATUS[result.status.value]
    # The job ended: finished, cancelled by its user, or failed once its restart strategy
    # gave up. Another AppMaster attempt would only say so again (Flink's application
    # unregisters too): YARN starts none.
    outcome.final = True
    outcome.diagnostics = f"job {graph.name!r} ({graph.job_id}) {result.status.value}"
    if result.failure_cause:
        outcome.diagnostics += f": {result.failure_cause}"
    appmaster.shutdown()


def max_attempts(conf: Configuration) -> int:
    """The attempts YARN gives this application: ours, capped by the ResourceManager's
    (as skein's ApplicationMaster and YARN count them)."""
    try:
        cap = int(hadoop.site_properties("yarn-site.xml").get(
            "yarn.resourcemanager.am.max-attempts", "2"))
    except (hadoop.HadoopConfigError, ValueError):
        cap = 2
    return max(1, min(conf.get(options.YARN_APPLICATION_ATTEMPTS), cap))


async def serve(app, args: argparse.Namespace, conf: Configuration, scratch: ProcessScratch,
                outcome: Outcome, store: JobStore | None = None, attempt: int = 1,
                archive: JobArchive | None = None) -> None:
    graph = None
    if args.mode == "per-job":
        graph = msgspec.msgpack.decode(Path(args.job_graph).read_bytes(), type=JobGraph)
    title = f"flinkyarn {args.mode}: {graph.name if graph else app.id}" + (
        f" (AppMaster attempt {attempt})" if attempt > 1 else "")
    appmaster: AppMaster | None = None

    def on_fatal(diagnostic: str, final: bool = False) -> None:
        log.error("ending the application: %s", diagnostic)
        outcome.fail(diagnostic, final)
        if appmaster is not None:
            appmaster.shutdown()

    def on_unfit_containers(diagnostic: str) -> None:
        on_fatal(diagnostic, final=True)

    # Its own certificate, for $NM_HOST (jobmanager.rpc.address), in its own folder.
    cluster = ClusterSecurity.load(Path(args.security_dir))
    security = appmaster_security(conf, cluster, scratch.root / "security")

    async def publish(status: TokenStatus) -> None:
        await asyncio.to_thread(app.kv.put, TOKEN_STATUS_KEY, msgspec.json.encode(status))

    # Not in the scratch folder, which goes before the AppMaster's last HDFS calls (the
    # archive, the staging files): HADOOP_TOKEN_FILE_LOCATION names the newest tokens'
    # file from their first renewal on. The container's own folder, YARN's to remove.
    tokens = DelegationTokenManager(conf, Path.cwd() / "delegation-tokens", publish)
    appmaster = AppMaster(conf, security, YarnDriver(app, on_fatal=on_unfit_containers), title,
                          tokens, job_store=store, attempt=attempt, archive=archive,
                          application_id=app.id, cancel_token=cluster.dashboard_token())
    job_task: list[asyncio.Task] = []

    async def on_ready(am: AppMaster) -> None:
        assert am.info is not None  # set before on_ready
        rest_address, dashboard_url = am.info.rest_address, am.info.dashboard_url
        # A per-job application's job starts first: what follows are calls to skein's
        # ApplicationMaster and HDFS writes (each can take 0.4 s), and none is for the job.
        # The AppMaster does not stop before on_ready returns: they are done by then.
        if graph is not None:
            job_task.append(supervise(_run_job(app, am, graph, outcome, on_fatal, attempt),
                                      f"running job {graph.name!r} ({graph.job_id})", on_fatal))

        async def publish_addresses() -> None:
            # The dashboard's own URL (loopback, secret path) stays here: skein's web UI,
            # in this container, proxies it for YARN's proxy; clients get the proxied one.
            page = await asyncio.to_thread(app.ui.add_page, "flinkyarn", dashboard_url,
                                           "flinkyarn dashboard")
            await asyncio.to_thread(app.kv.update, {REST_ADDRESS_KEY: rest_address.encode(),
                                                    DASHBOARD_KEY: page.address.encode()})
            if store is not None:  # where this attempt serves, for clients of an earlier one
                await asyncio.to_thread(store.put_leader, Leader(attempt, rest_address, page.address))

        writes = [publish_addresses()]
        if archive is not None:
            writes.append(asyncio.to_thread(archive_start, archive, app, args.mode, attempt))
        await asyncio.gather(*writes)

    await appmaster.serve(on_ready)
    for task in job_task:
        if not task.done():
            task.cancel()
            if not outcome.fatal:
                outcome.status, outcome.diagnostics = "KILLED", "the AppMaster was stopped"
    if appmaster.signalled is not None and not outcome.fatal and graph is None:
        # A session's AppMaster stopped by a signal, not by `session stop`: YARN killing
        # the application, or its container (node) going away, when another attempt
        # takes over its jobs (main keeps the job store then).
        outcome.status = "KILLED"
        outcome.diagnostics = f"the AppMaster was stopped by signal {appmaster.signalled}"


def history_server_url(conf: Configuration) -> str:
    """The root URL of the history server (historyserver.web.address and .port), "" when
    none is set."""
    host = conf.get(options.HISTORY_SERVER_ADDRESS)
    if not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{conf.get(options.HISTORY_SERVER_PORT)}/"


def archive_start(archive: JobArchive, app, mode: str, attempt: int) -> None:
    """The application's entry in the archive, RUNNING (an earlier attempt's entry keeps
    its start). Best effort: the application runs without its history."""
    try:
        earlier = archive.application(app.id) if attempt > 1 else None
        if earlier is None:
            spec = app.get_specification()
            earlier = ArchivedApplication(app.id, spec.name, mode, spec.user or getpass.getuser(),
                                          time.time())
        archive.put_application(msgspec.structs.replace(earlier, attempt=attempt))
    except Exception as error:
        log.warning("cannot archive application %s in %s: %s", app.id, archive.folder, error)


def archive_end(archive: JobArchive, app_id: str, status: str, diagnostics: str,
                attempt: int) -> None:
    """The application's entry in the archive with its final status (best effort)."""
    try:
        entry = archive.application(app_id)
        if entry is not None:
            archive.put_application(entry.ended(status, diagnostics, attempt))
    except Exception as error:
        log.warning("cannot archive the end of %s in %s: %s", app_id, archive.folder, error)


def remove_staging_files(paths: list[str], app_id: str) -> None:
    """What the client put on the default filesystem for this application alone, and
    skein's folder of it (skein's AppMaster removes that too, but only with the tokens of
    the submit: a session that outlived them leaves it); the application ends, so do
    they. Best effort: the final status matters more."""
    if not paths:
        return
    from flinkyarn import hdfs, kerberos

    try:
        filesystem = hdfs.filesystem()
        paths = [*paths, f"{hdfs.home()}/.skein/{app_id}"]
    except Exception as error:
        log.warning("could not remove %s: %s", ", ".join(paths), kerberos.first_line(error))
        return
    for path in paths:
        try:
            if hdfs.delete(filesystem, path):
                log.info("removed %s", path)
        except Exception as error:
            log.warning("could not remove %s: %s", path, kerberos.first_line(error))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m yarn_am.yarn_entrypoint")
    parser.add_argument("--mode", choices=("per-job", "session"), required=True)
    parser.add_argument("--job-graph")
    parser.add_argument("--security-dir", required=True)
    parser.add_argument("-D", dest="properties", action="append", default=[])
    parser.add_argument("--staging-file", dest="staging_files", action="append", default=[],
                        help="a path on the default filesystem that ends with the application "
                             "(its credentials, its index entry)")
    parser.add_argument("--archive", help="the archive folder of ended jobs and applications "
                                          "(jobmanager.archive.fs.dir)")
    parser.add_argument("--job-store", help="this application's folder of the job store "
                                            "(high-availability.storageDir)")
    parser.add_argument("--die-with-container", action="store_true",
                        help="exit when skein's ApplicationMaster or the container's launch "
                             "processes end")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s appmaster %(name)s: %(message)s")
    if args.die_with_container:
        # Its parent is skein's JVM, which may start it from a thread that ends first.
        lifeline.die_with(lifeline.ancestors(), "skein's ApplicationMaster or a launch "
                          "process of the AppMaster's container", parent_death_signal=False)
    app = skein.ApplicationClient.from_current()
    outcome = Outcome(diagnostics="session stopped" if args.mode == "session" else "")
    attempt, attempts, history_server = attempt_of(), 1, ""
    store = JobStore(args.job_store) if args.job_store else None
    archive = JobArchive(args.archive) if args.archive else None
    try:
        conf = Configuration.from_raw(parse_dynamic_properties(args.properties))
        attempts = max_attempts(conf)
        history_server = history_server_url(conf)
        if attempt > 1:
            log.info("AppMaster attempt %d of %d; attempt %d ended: %s", attempt, attempts,
                     attempt - 1, hadoop.attempt_diagnostics(app.id, attempt - 1) or "(YARN does not say)")
        with process_scratch(conf, "flinkyarn-appmaster-") as scratch:
            asyncio.run(serve(app, args, conf, scratch, outcome, store, attempt, archive))
    except BaseException as error:  # the AppMaster itself failed: say so in YARN
        log.exception("the AppMaster failed")
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        outcome.status = "FAILED"
        outcome.diagnostics = f"the flinkyarn AppMaster failed: {type(error).__name__}: {error}"
    if attempt > 1:
        outcome.diagnostics = f"{outcome.diagnostics} (AppMaster attempt {attempt})"
    log.info("final status %s: %s", outcome.status, outcome.diagnostics)
    if outcome.status == "SUCCEEDED" or outcome.final or attempt >= attempts or (
            outcome.status == "KILLED" and hadoop.attempt_killed(app.id, attempt)):
        if archive is not None:
            archive_end(archive, app.id, outcome.status, outcome.diagnostics, attempt)
            if history_server:  # YARN's tracking URL of the ended application leads there
                try:
                    Path(FINAL_TRACKING_URL_FILE).write_text(history_page(history_server, app.id))
                except OSError as error:  # the application still ends, without that link
                    log.warning("cannot leave the final tracking URL: %s", error)
        remove_staging_files(args.staging_files, app.id)  # the job store's folder too
        # skein unregisters (YARN starts no other attempt) a success, or an end it finds
        # this file for: never by its own count (yarn_client/skein_agent.py).
        if outcome.status != "SUCCEEDED":
            try:
                Path(FINAL_END_FILE).write_text(outcome.status)
            except OSError as error:
                log.warning("cannot make this attempt the last: %s", error)
    else:  # skein's ApplicationMaster leaves it to YARN to start the next attempt
        log.info("attempt %d of %d ends %s: YARN starts the next, which takes over the "
                 "jobs in %s", attempt, attempts, outcome.status, args.job_store)
    app.shutdown(outcome.status, outcome.diagnostics[:MAX_DIAGNOSTICS])
    return 0 if outcome.status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
