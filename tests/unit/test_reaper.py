"""The reaper (taskexecutor/reaper.py): what a TaskExecutor started outside its own
process group ends with it, however it ends. Real processes, no Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from flinkyarn import retry
from taskexecutor.reaper import group_alive, start_time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Ignores SIGTERM, as a JVM stuck in a shutdown hook effectively does.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"


def stubborn(**kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", STUBBORN], **kwargs)


def alive(pid: int) -> bool:
    return start_time(pid) is not None


def wait_gone(check, seconds: float) -> float:
    """Waits for `check()` to be false; returns how long it took."""
    began = time.monotonic()
    retry.poll_until(check, lambda value: not value, pauses=retry.Backoff.fixed(0.05),
                     deadline=retry.Deadline(seconds))
    return time.monotonic() - began


def reaper(grace: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "taskexecutor.reaper", f"{grace:g}"], cwd=REPO,
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_driver_group_of_zombies_has_ended():
    """A driver's JVM outlives the driver by a moment and is then a zombie until whatever
    adopted it reaps it; the task must not wait for that."""
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                               process_group=0)
    ended = subprocess.Popen([sys.executable, "-c", "pass"], process_group=0)
    try:
        assert group_alive(running.pid)
        # `ended` exits and stays a zombie of its group until this process waits for it.
        def zombie() -> bool:
            with open(f"/proc/{ended.pid}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] == "Z"

        retry.poll_until(zombie, bool, pauses=retry.Backoff.fixed(0.01),
                         deadline=retry.Deadline(30))
        assert not group_alive(ended.pid)
        assert start_time(ended.pid) is None  # nor as a process
    finally:
        running.kill()
        running.wait()
        ended.wait()
    assert not group_alive(ended.pid) and not group_alive(running.pid)


def test_at_its_end_of_input_what_still_runs_after_the_grace_is_killed_and_only_that():
    """Stopped or deaf to SIGTERM, a listed group or process dies GRACE after the
    TaskExecutor; what ends by itself in time, what was forgotten, and a pid whose start
    time is not the one told (the kernel gave it to another process) are not touched."""
    group = stubborn(process_group=0)
    stopped = stubborn(process_group=0)
    lone = stubborn()
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"], process_group=0)
    forgotten = stubborn(process_group=0)
    other = stubborn()  # told with a start time that is not its own
    os.kill(stopped.pid, signal.SIGSTOP)
    watcher = reaper(grace=2)
    try:
        watcher.stdin.write(
            f"group {group.pid}\ngroup {stopped.pid}\nprocess {lone.pid} {start_time(lone.pid)}\n"
            f"group {quick.pid}\ngroup {forgotten.pid}\nforget group {forgotten.pid}\n"
            f"process {other.pid} 1\nprocess twelve\n")
        watcher.stdin.close()
        began = time.monotonic()
        assert watcher.wait(timeout=30) == 0
        took = time.monotonic() - began
        stderr = watcher.stderr.read()
        for process in (group, stopped, lone):
            assert process.wait(timeout=5) == -signal.SIGKILL
        assert took >= 2, took  # the grace, for a stuck JVM's shutdown hooks
        assert quick.wait(timeout=5) == 0
        assert f"process group {quick.pid}" not in stderr
        assert forgotten.poll() is None and other.poll() is None
        assert "a line it does not know: b'process twelve\\n'" in stderr
        assert f"process group {group.pid}" in stderr and f"process {lone.pid}" in stderr
    finally:
        for process in (group, stopped, lone, quick, forgotten, other):
            process.kill()
            process.wait()


def test_a_task_executor_killed_takes_its_drivers_groups_with_it():
    """The TaskExecutor's side: the first watched group starts the reaper in a session
    of its own; SIGKILL to the TaskExecutor's whole process group (YARN's end of a
    container) misses the driver's group but not the reaper's end of input."""
    program = textwrap.dedent(f"""\
        import subprocess, sys, time
        from taskexecutor.reaper import Reaper
        reaper = Reaper(grace=1)
        driver = subprocess.Popen([sys.executable, "-c", {STUBBORN!r}], process_group=0)
        reaper.watch_group(driver.pid)
        print(driver.pid, reaper._process.pid, flush=True)
        time.sleep(120)
        """)
    executor = subprocess.Popen([sys.executable, "-c", program], cwd=REPO, stdout=subprocess.PIPE,
                                text=True, process_group=0)
    driver = watcher = None
    try:
        driver, watcher = map(int, executor.stdout.readline().split())
        assert os.getpgid(watcher) == os.getsid(watcher) == watcher  # apart from the container
        os.killpg(executor.pid, signal.SIGKILL)
        executor.wait()
        assert group_alive(driver)
        took = wait_gone(lambda: group_alive(driver), 30)
        assert took >= 0.5, took
        wait_gone(lambda: alive(watcher), 10)  # and the reaper is gone too
    finally:
        executor.kill()
        for pid in (driver, watcher):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
