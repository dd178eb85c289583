"""flinkyarn/lifeline.py with real processes in the shape of a YARN container: a
NodeManager's launcher (`default_container_executor.sh`, in the NodeManager's session)
starts the launch script in a session of its own, which runs our process. Whichever of
the two is killed, our process ends with it: none runs on outside its container."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flinkyarn import lifeline
from tests.local.conftest import cmdline, descendants
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]

# Our process: watches its container's ancestors, says who it watches, then waits.
OURS = """
import json, sys, time
from flinkyarn import lifeline
watched = lifeline.ancestors()
lifeline.die_with(watched, "a launch process")
open(sys.argv[1], "w").write(json.dumps([pid for pid, _ in watched]))
time.sleep(600)
"""


def gone(pid: int) -> bool:
    return lifeline.identity(pid) is None


def container(tmp_path: Path) -> tuple[subprocess.Popen, int, int, int]:
    """(launcher, its pid, the launch script's pid, our process's pid); `; :` keeps each
    shell from exec'ing its command, as YARN's scripts do not."""
    said, code = tmp_path / "watched.json", tmp_path / "ours.py"
    code.write_text(OURS)
    ours = shlex.join([sys.executable, str(code), str(said)])
    script = f"setsid bash -c {shlex.quote(ours + '; :')} & wait; :"
    launcher = subprocess.Popen(["bash", "-c", script], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    wait_for(said.exists, 30, "our process to start", poll=0.02)
    wait_for(lambda: said.read_text(), 30, "our process to say what it watches", poll=0.02)
    session_leader, outer = json.loads(said.read_text())
    children = Path(f"/proc/{session_leader}/task/{session_leader}/children").read_text().split()
    [process] = map(int, children)
    return launcher, outer, session_leader, process


def test_the_container_s_ancestors_are_the_launch_script_and_the_launcher(tmp_path):
    launcher, outer, session_leader, process = container(tmp_path)
    try:
        assert outer == launcher.pid
        assert os.getsid(session_leader) == session_leader != os.getsid(outer)
        assert os.getsid(process) == session_leader
    finally:
        for pid in (process, session_leader, outer):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.wait()


@pytest.mark.parametrize("killed", ["the launch script (its parent)",
                                    "the NodeManager's launcher"])
def test_a_process_ends_when_a_launch_process_of_its_container_is_killed(tmp_path, killed):
    launcher, outer, session_leader, process = container(tmp_path)
    victim = session_leader if killed.startswith("the launch script") else outer
    os.kill(victim, signal.SIGKILL)
    launcher.wait()
    wait_for(lambda: gone(process), 30, "our process to end", poll=0.02)



def test_nothing_a_killed_local_appmaster_started_runs_on(start_cluster):
    """The local target's AppMaster SIGKILLed: its TaskExecutors (parent-death signal),
    their Spark JVMs (their input closes) and their reapers (which outlive them by
    design, to end what they leave) all end."""
    cluster = start_cluster(start_workers=1, **{"taskmanager.spark.start-eagerly": "true"})
    appmaster = cluster.process.pid

    def spark_jvm_up():
        below = descendants(appmaster)
        return below if any(b"SparkSubmit" in cmdline(pid) for pid in below) else None
    below = wait_for(spark_jvm_up, 120, "the TaskExecutor's Spark JVM")
    alive = {pid: lifeline.identity(pid) for pid in below}
    os.kill(appmaster, signal.SIGKILL)
    cluster.process.wait()

    def still_running() -> list[str]:
        return [f"{pid}: {cmdline(pid)[:150]!r}" for pid, started in alive.items()
                if lifeline.identity(pid) == started]
    try:
        wait_for(lambda: not still_running(), 60, "every process the AppMaster started to end")
    except AssertionError as error:
        raise AssertionError(f"{error}; still running: {still_running()}") from None

