"""Fixtures shared by every test tier."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkyarn import retry

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))

import local_hadoop  # noqa: E402


@pytest.fixture(scope="session")
def hadoop() -> local_hadoop.Layout:
    """The running local Hadoop of integration/. A YARN-tier test fails, never skips,
    when it is not up: `integration/run-tests` starts it, and CI runs that."""
    layout = local_hadoop.Layout.default()
    healthy, report = local_hadoop.status(layout)
    if not healthy:
        pytest.fail("the local Hadoop is not up; start it with `integration/cluster up` "
                    "or run the tests through `integration/run-tests`\n" + report,
                    pytrace=False)
    local_hadoop.apply_env(layout)
    return layout


@pytest.fixture(scope="session")
def skein_client(hadoop):
    import skein

    with skein.Client(log=str(hadoop.logs / "skein-driver-tests.log")) as client:
        yield client


# ------------------------------------------------ nothing of ours left after the session
#
# After the last test, the session fails if a process of ours still runs or a folder of
# ours is left in the temporary folder. Ours: started during this session, and marked
# with SESSION_MARK in its environment (every process a test starts inherits it; an
# orphan keeps it) or running in a YARN container (a container gets its environment
# from YARN, not from us). So processes and folders of other sessions on the machine,
# and the local Hadoop's daemons, never count.

SESSION_MARK = "FLINKYARN_TEST_SESSION"
OUR_MODULES = ("yarn_am", "taskexecutor")   # and submodules: -m taskexecutor.spark.driver
SPARK_JVM = "org.apache.spark."             # the main class of a JVM that pyspark starts
REAPER = "taskexecutor.reaper"              # python -m taskexecutor.reaper GRACE
CLUSTER_TIERS = ("tests/yarn/", "tests/yarn_secure/")  # integration/run-tests: the rest beside
OUR_FOLDERS = "flinkyarn-*"                 # flinkyarn/scratch.py, yarn_client/: mkdtemp prefixes
SHARED_CLUSTER = "FLINKYARN_TEST_CLUSTER_SHARED"  # set: another session uses the cluster too
LEFTOVER_GRACE = 10.0                       # seconds for processes in their shutdown to end


@dataclass(frozen=True)
class _Process:
    pid: int
    parent: int
    started: int          # clock ticks after boot: a pid reused later has another
    argv: list[str]
    environ: dict[str, str]

    def is_ours_kind(self) -> bool:
        modules = [self.argv[i + 1] for i, arg in enumerate(self.argv[:-1]) if arg == "-m"]
        return any(m.split(".")[0] in OUR_MODULES for m in modules) or \
            any(arg.startswith(SPARK_JVM) for arg in self.argv)


def _processes() -> list[_Process]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            if fields[0] == "Z":
                continue
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            variables = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
            environ = dict(item.partition("=")[::2] for item in variables if item)
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile, or not ours to read
        found.append(_Process(int(proc.name), int(fields[1]), int(fields[19]), argv, environ))
    return found


_before = pytest.StashKey[tuple[str, Path, set[tuple[int, int]], set[Path]]]()
"""The session's mark, the temporary folder, and the processes and folders before it."""


def pytest_sessionstart(session: pytest.Session) -> None:
    token = uuid.uuid4().hex
    os.environ[SESSION_MARK] = token
    temp = Path(tempfile.gettempdir())
    session.config.stash[_before] = (
        token, temp, {(p.pid, p.started) for p in _processes()}, set(temp.glob(OUR_FOLDERS)))


def _leftovers(session: pytest.Session) -> list[str]:
    token, temp, processes_before, folders_before = session.config.stash[_before]
    processes = _processes()
    # The Spark JVM of this very process (the in-process Spark of tests/local/test_spark_
    # bridge.py: pyspark keeps its gateway until the interpreter exits) ends with it, and
    # so does the reaper that watches that JVM (taskexecutor/reaper.py).
    processes = [p for p in processes if not (
        p.parent == os.getpid() and (any(a.startswith(SPARK_JVM) for a in p.argv)
                                     or p.argv[-2:-1] == [REAPER]))]
    # A container's process is this session's if it ran tests that use the cluster
    # (integration/run-tests runs the others beside them, in another session).
    # When another session uses the cluster at the same time (integration/run-tests runs
    # two), a container's process is a leftover only once its application has ended;
    # run-tests checks that no application runs when both are done.
    on_cluster = any(item.nodeid.startswith(CLUSTER_TIERS) for item in session.items)
    shared = bool(os.environ.get(SHARED_CLUSTER))
    ours = [p for p in processes if p.is_ours_kind() and (p.pid, p.started) not in processes_before
            and (p.environ.get(SESSION_MARK) == token
                 or (on_cluster and SESSION_MARK not in p.environ and "CONTAINER_ID" in p.environ
                     and not (shared and _application_runs(p.environ["CONTAINER_ID"]))))]
    # A folder that a live process not of this session names (argv, TMPDIR) is its own.
    elsewhere = " ".join(" ".join(p.argv) + " " + p.environ.get("TMPDIR", "") for p in processes
                         if p.environ.get(SESSION_MARK) != token)
    folders = [f for f in set(temp.glob(OUR_FOLDERS)) - folders_before if str(f) not in elsewhere]
    return [f"process {p.pid}{_where(p)}: {_shortened(' '.join(p.argv))}" for p in ours] + \
        [f"in {temp}: {f.name}" for f in sorted(folders)]


def _application_runs(container_id: str) -> bool:
    """Whether YARN has the application of `container_id` (container_[e<epoch>_]<cluster
    timestamp>_<application>_<attempt>_<container>) still going."""
    from yarn_client import yarn_cluster

    timestamp, number = container_id.split("_")[-4:-2]
    try:
        return yarn_cluster.is_running(f"application_{timestamp}_{number}")
    except yarn_cluster.YarnDeploymentError:
        return False  # YARN does not answer: not running, then


def _where(process: _Process) -> str:
    """Where a leftover ran (its YARN container) and what (a JVM's main class and
    arguments, which a long class path hides from a shortened command line)."""
    where = f" in {process.environ['CONTAINER_ID']}" if "CONTAINER_ID" in process.environ else ""
    main = [i for i, arg in enumerate(process.argv) if arg.startswith(SPARK_JVM)]
    if main:
        where += f" running {_shortened(' '.join(process.argv[main[0]:]), 200)}"
    return where


def _shortened(command: str, most: int = 300) -> str:
    return command if len(command) <= most else f"{command[:most]} ..."


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _before not in session.config.stash:
        return
    try:
        retry.poll_until(lambda: _leftovers(session), lambda left: not left,
                         pauses=retry.Backoff.fixed(0.5), deadline=retry.Deadline(LEFTOVER_GRACE))
        return
    except retry.GaveUp as gave_up:
        left = gave_up.last_value
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (f"the tests left {len(left)} process(es) or folder(s) of ours behind "
               f"(still there {LEFTOVER_GRACE:g} s after the last test):\n  " + "\n  ".join(left))
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "left behind", red=True)
        reporter.write_line(message)
    else:
        print(message, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------ where the suite's time goes
#
# The suite should stay under 30 minutes on a 2-core machine: after the run, the time
# of each tier and of the slowest modules (setup, call and teardown summed), so that a
# CI log says which part grew.

_module_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _module_seconds:
        return
    tiers: dict[str, float] = {}
    for module, seconds in _module_seconds.items():
        tier = "/".join(module.split("/")[:2])
        tiers[tier] = tiers.get(tier, 0.0) + seconds
    terminalreporter.write_sep("=", "time by tier and module")
    for tier, seconds in sorted(tiers.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds / 60:6.1f} min  {tier}")
    slowest = sorted(_module_seconds.items(), key=lambda item: -item[1])[:15]
    for module, seconds in slowest:
        terminalreporter.write_line(f"{seconds:6.0f} s    {module}")
