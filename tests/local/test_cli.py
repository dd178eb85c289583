"""`flinkyarn run -t local` as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local.conftest import processes_mentioning
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
FLINKYARN = [sys.executable, "-m", "yarn_client"]
FAST = ["-D", "heartbeat.interval=250 ms", "-D", "heartbeat.timeout=2 s"]

LONG_JOB = """
from flinkyarn.job import JobBuilder

def forever(ctx):
    while True:
        ctx.sleep(0.1)

job = JobBuilder("forever")
job.add_vertex("loop", forever, parallelism=2)
job.execute()
"""

FAILING_JOB = """
from flinkyarn.job import JobBuilder

def boom(ctx):
    raise KeyError("missing column 'word'")

job = JobBuilder("failing")
job.add_vertex("boom", boom, parallelism=1)
job.execute()
"""


def interruptible() -> None:
    """The client as a terminal starts it: SIGINT at its default. A test run started in
    the background of a shell (`.ci/run &`, nohup) ignores SIGINT, and its children
    inherit that, as they should: such a client rightly ignores Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cluster_logs(tmp_path: Path, lines: int = 40) -> str:
    """The last lines of each log of the local clusters started with TMPDIR=tmp_path."""
    return "\n".join(f"--- {log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                     for log in sorted(tmp_path.glob("flinkyarn-local-*/**/*.log")))


def run_cli(*args, tmp_path, timeout=120):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    return subprocess.run([*FLINKYARN, *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


def test_run_finishes_the_example_and_exits_0(tmp_path):
    result = run_cli("run", "-t", "local", *FAST, "examples/two_stage_job.py", "3", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "FINISHED" in result.stdout
    assert "source [3 FINISHED]; sink [3 FINISHED]" in result.stderr  # progress
    assert processes_mentioning(str(tmp_path)) == []


def test_failing_job_exits_1_with_the_cause(tmp_path):
    program = tmp_path / "failing.py"
    program.write_text(FAILING_JOB)
    result = run_cli("run", "-t", "local", *FAST, str(program), tmp_path=tmp_path)
    assert result.returncode == 1
    assert "FAILED" in result.stdout
    assert "KeyError: \"missing column 'word'\"" in result.stdout
    assert processes_mentioning(str(tmp_path)) == []


def test_usage_errors_exit_2_and_name_the_problem(tmp_path):
    bad_value = run_cli("run", "-t", "local", "-D", "heartbeat.interval=soon", "examples/two_stage_job.py",
                        tmp_path=tmp_path)
    assert bad_value.returncode == 2 and "heartbeat.interval" in bad_value.stderr
    unknown_key = run_cli("run", "-t", "local", "-D", "heartbeat.intervall=1 s", "examples/two_stage_job.py",
                          tmp_path=tmp_path)
    assert unknown_key.returncode == 2 and "heartbeat.intervall" in unknown_key.stderr
    missing = run_cli("run", "-t", "local", "no/such/program.py", tmp_path=tmp_path)
    assert missing.returncode == 2 and "no such file: no/such/program.py" in missing.stderr
    target = run_cli("run", "-t", "mars", "examples/two_stage_job.py", tmp_path=tmp_path)
    assert target.returncode == 2 and "mars" in target.stderr



CROSS_OPTION_ERRORS = [
    # (the -D values, the keys the error must name)
    (["heartbeat.interval=60 s"], ["heartbeat.interval", "heartbeat.timeout"]),
    (["heartbeat.interval=0 ms"], ["heartbeat.interval"]),
    (["cluster.registration.initial-timeout=10 s", "cluster.registration.max-timeout=1 s"],
     ["cluster.registration.initial-timeout", "cluster.registration.max-timeout"]),
    (["restart-strategy.exponential-delay.initial-backoff=10 min"],
     ["restart-strategy.exponential-delay.initial-backoff",
      "restart-strategy.exponential-delay.max-backoff"]),
    (["task.cancellation.interval=0 s"], ["task.cancellation.interval"]),
]


def test_options_that_contradict_each_other_are_refused_before_anything_starts(tmp_path):
    """Rules spanning options are the client's to check: exit 2 naming the keys, no
    AppMaster started (it used to crash on them with a traceback), nothing on disk."""
    for values, keys in CROSS_OPTION_ERRORS:
        flags = [part for value in values for part in ("-D", value)]
        result = run_cli("run", "-t", "local", *flags, "examples/two_stage_job.py", tmp_path=tmp_path)
        assert result.returncode == 2, (values, result.stderr)
        assert all(key in result.stderr for key in keys), (values, result.stderr)
        assert "Traceback" not in result.stderr and "starting" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []
    assert processes_mentioning(str(tmp_path)) == []

@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda signum: signal.Signals(signum).name)
def test_a_client_ended_by_a_signal_leaves_nothing_running_or_on_disk(tmp_path, signum):
    """Ctrl-C, a CI runner's SIGTERM and a closed terminal's SIGHUP cancel and stop as the
    client goes; after a SIGKILL the local AppMaster sees its client gone and does it,
    and removes the work folder (the cluster's private key) the client would have."""
    program = tmp_path / "forever.py"
    program.write_text(LONG_JOB)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    stderr_file = tmp_path / "client-stderr"
    with open(stderr_file, "w") as stderr:
        process = subprocess.Popen([*FLINKYARN, "run", "-t", "local", *FAST, str(program)],
                                   cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                   text=True, preexec_fn=interruptible)
    try:
        wait_for(lambda: any("taskexecutor" in line for line in processes_mentioning(str(tmp_path))),
                 60, "a TaskExecutor")
        wait_for(lambda: "loop [2 RUNNING]" in stderr_file.read_text(), 60,
                 "the client following the running job")
        assert list(tmp_path.glob("flinkyarn-local-*/security/*key.pem"))
        process.send_signal(signum)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the client did not end within 60 s of {signal.Signals(signum).name}:"
                        f"\n{stderr_file.read_text()}\n{cluster_logs(tmp_path)}")
    finally:
        if process.poll() is None:
            process.kill()
    err = stderr_file.read_text()
    if signum == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
    else:
        assert process.returncode == 1, err
    if signum in (signal.SIGINT, signal.SIGTERM):
        assert "interrupted" in err and "Traceback" not in err, err
    wait_for(lambda: processes_mentioning(str(tmp_path)) == [], 60, "no process of the cluster")
    wait_for(lambda: not list(tmp_path.glob("flinkyarn-local-*")), 60, "the work folder gone")


def test_an_attached_client_prints_each_restart_as_it_happens(tmp_path):
    program = tmp_path / "fails_once.py"
    program.write_text("from flinkyarn.job import JobBuilder\n"
                       "def work(ctx):\n"
                       "    if ctx.attempt_number == 0:\n"
                       "        raise ValueError('first attempt fails on purpose')\n"
                       "job = JobBuilder('fails once')\n"
                       "job.add_vertex('work', work, parallelism=1)\n"
                       "job.execute()\n")
    result = run_cli("run", "-t", "local", *FAST, "-D", "restart-strategy.type=fixed-delay",
                     "-D", "restart-strategy.fixed-delay.attempts=2",
                     "-D", "restart-strategy.fixed-delay.delay=100 ms", str(program),
                     tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "restart (" in line]
    assert line.endswith("restart (attempt 1 of 2): work (1/1) failed: ValueError: first "
                         "attempt fails on purpose (in task work (1/1) #0); 1 task(s) restart")
