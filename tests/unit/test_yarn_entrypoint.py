"""The YARN master script's supervision: whatever a task of it raises ends the
application FAILED with the cause in YARN's diagnostics; it never hangs.

`main` runs whole, with a real AppMaster on loopback, against a fake of skein's
ApplicationClient and a driver that starts no container (no YARN here)."""

from __future__ import annotations

import asyncio
import threading
import time

import msgspec
import pytest

from flinkyarn import kerberos
from flinkyarn.archive import JobArchive
from flinkyarn.ids import JobID, JobVertexID
from flinkyarn.jobgraph import JobGraph, JobVertex
from flinkyarn.rpc.security import ClusterSecurity
from tests.unit.test_job_isolation import IdleDriver
from yarn_am import yarn_entrypoint
from yarn_am.dispatcher import Dispatcher

# Generous: a hang fails the test (pytest-timeout) rather than stalling the suite.
NO_HANG = pytest.mark.timeout(120)


class FakeApplication:
    """What the master script uses of skein.ApplicationClient."""

    class _Page:
        address = "http://proxy/flinkyarn"

    class _UI:
        def add_page(self, name, url, link_name):
            return FakeApplication._Page()

    def __init__(self) -> None:
        self.id = "application_1_0001"
        self.kv: dict[str, bytes] = {}
        self.ui = self._UI()
        self.progress: list[float] = []
        self.final: tuple[str, str] | None = None

    def set_progress(self, fraction: float) -> None:
        self.progress.append(fraction)

    def shutdown(self, status: str, diagnostics: str) -> None:
        self.final = (status, diagnostics)


def run_main(tmp_path, monkeypatch, app: FakeApplication,
             driver=lambda app, on_fatal: IdleDriver()) -> int:
    monkeypatch.chdir(tmp_path)  # the container's working folder
    monkeypatch.setattr(kerberos, "security_enabled", lambda: False)
    monkeypatch.setattr(yarn_entrypoint.skein.ApplicationClient, "from_current",
                        staticmethod(lambda: app))
    monkeypatch.setattr(yarn_entrypoint, "YarnDriver", driver)
    ClusterSecurity.generate(tmp_path / "security")
    graph = JobGraph(JobID("j1"), "waits", [JobVertex(JobVertexID("v"), "Source", 1, b"-")])
    (tmp_path / "job.msgpack").write_bytes(msgspec.msgpack.encode(graph))
    argv = ["--mode", "per-job", "--job-graph", str(tmp_path / "job.msgpack"),
            "--security-dir", str(tmp_path / "security"), "-D", f"io.tmp.dirs={tmp_path}"]
    return yarn_entrypoint.main(argv)  # on the main thread: it sets signal handlers


@NO_HANG
def test_a_per_job_application_whose_job_coroutine_raises_ends_failed_with_the_cause(
        tmp_path, monkeypatch):
    async def broken(self, job_id):
        raise RuntimeError("the Dispatcher lost track of job j1")
    monkeypatch.setattr(Dispatcher, "wait_for_result", broken)
    app = FakeApplication()

    code = run_main(tmp_path, monkeypatch, app)

    assert code == 1
    status, diagnostics = app.final
    assert status == "FAILED"
    assert diagnostics.splitlines()[0] == (
        "running job 'waits' (j1) failed: RuntimeError: the Dispatcher lost track of job j1")
    assert "test_yarn_entrypoint.py" in diagnostics  # where it was raised


@NO_HANG
def test_a_failing_progress_report_ends_the_application_failed_too(tmp_path, monkeypatch):
    app = FakeApplication()

    def set_progress(fraction: float) -> None:
        raise ConnectionError("skein's application master is gone")
    app.set_progress = set_progress

    code = run_main(tmp_path, monkeypatch, app)

    assert code == 1
    status, diagnostics = app.final
    assert status == "FAILED"
    assert diagnostics.splitlines()[0] == ("reporting the job's progress failed: "
                                           "ConnectionError: skein's application master is gone")


@pytest.mark.parametrize("raises", [False, True])
def test_supervise_hands_an_error_to_on_fatal_and_nothing_else(raises):
    fatal: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        if raises:
            raise ValueError("bad")

    async def scenario() -> None:
        task = yarn_entrypoint.supervise(work(), "working", fatal.append)
        await task
        assert task.exception() is None

    asyncio.run(scenario())
    assert [line.splitlines()[0] for line in fatal] == (
        ["working failed: ValueError: bad"] if raises else [])


def test_a_supervised_task_cancelled_at_the_end_is_no_failure():
    fatal: list[str] = []

    async def scenario() -> None:
        task = yarn_entrypoint.supervise(asyncio.sleep(3600), "waiting", fatal.append)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert fatal == []


@NO_HANG
@pytest.mark.parametrize("attempt, stored, status, removed", [
    # The job ended in the attempt before: it is not run again; the end is final.
    (2, "FINISHED", "SUCCEEDED", True),
    (2, "FAILED", "FAILED", True),
    # Failed (its restart strategy gave up) or cancelled by its user: the end, whatever
    # the attempt; YARN starts no other.
    (1, "FAILED", "FAILED", True),
    (1, "CANCELED", "KILLED", True),
])
def test_an_attempt_takes_the_stored_result_and_a_jobs_end_is_the_applications(
        tmp_path, monkeypatch, attempt, stored, status, removed):
    from flinkyarn.gateways.dispatcher import JobDetails
    from flinkyarn.job_store import JobStore

    store = JobStore(str(tmp_path / "store"))
    store.put_result(JobDetails(JobID("j1"), "waits", stored, 1.0, 2.0,
                                None if stored == "FINISHED" else "it broke", []))
    monkeypatch.setenv("CONTAINER_ID", f"container_1_0001_0{attempt}_000001")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)  # the ResourceManager's cap: 2
    cleaned: list[list[str]] = []
    monkeypatch.setattr(yarn_entrypoint, "remove_staging_files",
                        lambda paths, app_id: cleaned.append(paths))
    monkeypatch.setattr(yarn_entrypoint.hadoop, "attempt_diagnostics", lambda app, n: "killed")
    app = FakeApplication()
    argv_store = ["--job-store", str(tmp_path / "store"), "--staging-file", "/staging/x"]
    monkeypatch.setattr(yarn_entrypoint, "main", _with_arguments(yarn_entrypoint.main, argv_store))

    code = run_main(tmp_path, monkeypatch, app)

    assert code == (0 if status == "SUCCEEDED" else 1)
    final_status, diagnostics = app.final
    assert final_status == status
    assert diagnostics.startswith(f"job 'waits' (j1) {stored}")
    assert ("(AppMaster attempt 2)" in diagnostics) is (attempt == 2)
    assert cleaned == ([["/staging/x"]] if removed else [])
    # What makes skein's ApplicationMaster unregister an end that is not a success.
    assert (tmp_path / yarn_entrypoint.FINAL_END_FILE).exists() is (removed and status != "SUCCEEDED")


class UnfitDriver(IdleDriver):
    """A platform whose first TaskExecutor container failed its environment check."""

    def __init__(self, on_fatal) -> None:
        super().__init__()
        self.on_fatal = on_fatal

    def request_worker(self, spec) -> str:
        asyncio.get_running_loop().call_soon(
            self.on_fatal, "TaskExecutor container c_2: flinkyarn-runtime-check: Python 3.99.0")
        return super().request_worker(spec)


@NO_HANG
def test_containers_that_can_never_start_end_the_application_in_its_first_attempt(
        tmp_path, monkeypatch):
    """Another AppMaster attempt would start the same unfit environment again: the end is
    final (the store and staged files go) though YARN would give a second attempt."""
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000001")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)  # the ResourceManager's cap: 2
    cleaned: list[list[str]] = []
    monkeypatch.setattr(yarn_entrypoint, "remove_staging_files",
                        lambda paths, app_id: cleaned.append(paths))
    app = FakeApplication()
    argv_store = ["--job-store", str(tmp_path / "store"), "--staging-file", "/staging/x"]
    monkeypatch.setattr(yarn_entrypoint, "main", _with_arguments(yarn_entrypoint.main, argv_store))
    code = run_main(tmp_path, monkeypatch, app, lambda app, on_fatal: UnfitDriver(on_fatal))

    assert code == 1
    assert app.final == ("FAILED", "TaskExecutor container c_2: flinkyarn-runtime-check: Python 3.99.0")
    assert cleaned == [["/staging/x"]]
    # What makes skein's ApplicationMaster unregister, though this is not the last attempt.
    assert (tmp_path / yarn_entrypoint.FINAL_END_FILE).read_text() == "FAILED"


@NO_HANG
def test_a_refused_job_ends_the_application_in_its_first_attempt(tmp_path, monkeypatch):
    """Its output folder is another job's, say: another attempt would run it once that job
    let go of the folder, behind its user's back. YARN starts none."""
    async def refuse(self, graph, again=False):
        raise ValueError("cannot run: output /out is being written by job j0 of application_1_0000")
    monkeypatch.setattr(Dispatcher, "run_own_job", refuse)
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000001")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)  # the ResourceManager's cap: 2
    monkeypatch.setattr(yarn_entrypoint, "remove_staging_files", lambda paths, app_id: None)
    app = FakeApplication()

    code = run_main(tmp_path, monkeypatch, app)

    assert code == 1
    assert app.final == ("FAILED", "job 'waits' refused: cannot run: output /out is being "
                                   "written by job j0 of application_1_0000")
    assert (tmp_path / yarn_entrypoint.FINAL_END_FILE).read_text() == "FAILED"


def _with_arguments(main, extra):
    return lambda argv: main([*argv, *extra])


@NO_HANG
@pytest.mark.parametrize("yarn_kills_it", [True, False])
def test_a_session_stopped_by_a_signal_keeps_its_store_unless_yarn_is_killing_it(
        tmp_path, monkeypatch, yarn_kills_it):
    """SIGTERM is how YARN ends a container: when it kills the application (the end:
    everything goes), and when the container's node goes away (another attempt takes
    over the session's jobs: the store stays). `session stop` is not a signal."""
    import os
    import signal
    import threading

    monkeypatch.setattr(kerberos, "security_enabled", lambda: False)
    monkeypatch.setattr(yarn_entrypoint.skein.ApplicationClient, "from_current",
                        staticmethod(lambda: app))
    monkeypatch.setattr(yarn_entrypoint, "YarnDriver", lambda app, on_fatal: IdleDriver())
    monkeypatch.chdir(tmp_path)  # the container's working folder
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000001")
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.setattr(yarn_entrypoint.hadoop, "attempt_killed", lambda app_id, n: yarn_kills_it)
    cleaned: list[list[str]] = []
    monkeypatch.setattr(yarn_entrypoint, "remove_staging_files",
                        lambda paths, app_id: cleaned.append(paths))
    app = FakeApplication()
    ClusterSecurity.generate(tmp_path / "security")

    def terminate_once_serving() -> None:
        while yarn_entrypoint.REST_ADDRESS_KEY not in app.kv:
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=terminate_once_serving, daemon=True).start()

    code = yarn_entrypoint.main(["--mode", "session", "--security-dir", str(tmp_path / "security"),
                                 "--job-store", str(tmp_path / "store"),
                                 "--staging-file", "/staging/x", "-D", f"io.tmp.dirs={tmp_path}"])

    assert code == 1
    assert app.final == ("KILLED", f"the AppMaster was stopped by signal {int(signal.SIGTERM)}")
    assert cleaned == ([["/staging/x"]] if yarn_kills_it else [])


@NO_HANG
def test_a_per_job_job_starts_before_the_appmasters_own_writes_which_end_before_it(
        tmp_path, monkeypatch):
    """Neither the archive entry (an HDFS write on YARN) nor the addresses in skein's
    key-value store hold up the job, and the job's graph, a file of the application, is
    not stored again; the application does not end before they are written: its end
    (in its last attempt) is archived over its start."""
    class Specified(FakeApplication):
        def get_specification(self):
            return type("Spec", (), {"name": "waits", "user": "alice"})()

    written_at_submit = []
    written = threading.Event()
    real_start = yarn_entrypoint.archive_start

    def slow_start(*args):
        time.sleep(1.0)  # an HDFS write taking its time
        real_start(*args)
        written.set()

    async def refused(self, graph, again=False):
        written_at_submit.append((written.is_set(), yarn_entrypoint.REST_ADDRESS_KEY in app.kv,
                                  again))
        raise ValueError("no slots for it, ever")
    monkeypatch.setattr(yarn_entrypoint, "archive_start", slow_start)
    monkeypatch.setattr(Dispatcher, "run_own_job", refused)
    app = Specified()
    archive = tmp_path / "archive"
    original = yarn_entrypoint.main
    monkeypatch.setattr(yarn_entrypoint, "main",
                        lambda argv: original([*argv, "--archive", str(archive),
                                               "-D", "yarn.application-attempts=1"]))

    assert run_main(tmp_path, monkeypatch, app) == 1

    assert written_at_submit == [(False, False, False)]
    assert yarn_entrypoint.REST_ADDRESS_KEY in app.kv
    assert app.final[0] == "FAILED" and "no slots for it, ever" in app.final[1]
    entry = JobArchive(str(archive)).application(app.id)
    assert entry is not None and entry.status == "FAILED", entry


def test_the_first_failure_is_the_applications_cause_not_what_follows_from_it():
    outcome = yarn_entrypoint.Outcome()
    outcome.fail("flinkyarn: environment mismatch: ...", final=True)
    outcome.fail("running job 'hello' failed: the AppMaster is stopping")
    assert (outcome.status, outcome.diagnostics, outcome.final) == (
        "FAILED", "flinkyarn: environment mismatch: ...", True)
