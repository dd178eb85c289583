"""A busy queue on the real local Hadoop: while a session's AppMaster takes the AM share
of the queue `small` (integration/local_hadoop.py: room for one AppMaster), YARN keeps
any other application there ACCEPTED. The client waits for it, says why with YARN's
words and the queue's figures, and at yarn.application.start-timeout gives up, naming
the option, with the application killed."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from flinkyarn.hadoop import leaf_queues, rm_request
from yarn_client import yarn_cluster

REPO = Path(__file__).resolve().parents[2]
TAG = f"flinkyarn-test-{uuid.uuid4().hex[:8]}"
QUEUE = "small"
APPMASTER_MB = 768  # jobmanager.memory.process.size's default
# The client says why it waits 10 s after the submission (and every 30 s after that:
# tests/unit/test_busy_queue.py, on a manual clock): one line, then it gives up.
START_TIMEOUT = "15 s"


def flinkyarn(*args: str, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "yarn_client", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout)


@pytest.fixture
def busy_queue(hadoop):
    """QUEUE with a session in it, whose AppMaster leaves the queue no AM share for
    another; the session's application id."""
    scheduler = rm_request("/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
    queue = leaf_queues(scheduler).get(QUEUE)
    if queue is None:
        pytest.fail(f"the local Hadoop has no queue {QUEUE!r}: it was started before "
                    f"integration/local_hadoop.py had one; restart it (integration/cluster "
                    f"down, then up)", pytrace=False)
    room = (queue.get("maxEffectiveCapacity") or {}).get("memory", 0)
    assert room >= APPMASTER_MB, f"queue {QUEUE!r} has room for no AppMaster: {queue}"
    started = flinkyarn("session", "start", "--queue", QUEUE, "--tags", TAG,
                        "-D", "yarn.application.start-timeout=3 min")
    assert started.returncode == 0, started.stderr[-3000:]
    app_id = started.stdout.strip().splitlines()[-1]
    try:
        yield app_id
    finally:
        stopped = flinkyarn("session", "stop", app_id)
        leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
        for app in leftovers:
            yarn_cluster.kill(app["id"])
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def test_in_a_busy_queue_the_client_waits_says_why_and_kills_at_the_start_timeout(busy_queue):
    waited = flinkyarn("session", "start", "--queue", QUEUE, "--tags", TAG,
                       "-D", f"yarn.application.start-timeout={START_TIMEOUT}")
    stderr = waited.stderr
    assert waited.returncode == 1, stderr[-3000:]
    [app_id] = re.findall(rf"submitted (application_\d+_\d+) \(.*\) to queue {QUEUE} ", stderr)
    assert app_id != busy_queue

    lines = [line for line in stderr.splitlines() if line.startswith("  still ACCEPTED [")]
    assert len(lines) == 1, stderr[-3000:]  # after 10 s
    [line] = lines
    assert "AM resource limit exceeded" in line, line  # YARN's own words
    assert re.search(rf"; queue {QUEUE} uses \d+ MiB/\d+ vcores? of at most \d+ MiB/\d+ "
                     rf"vcores?, AppMasters \d+ MiB/\d+ vcores? of at most \d+ MiB", line), line
    assert f"; this AppMaster asks for {APPMASTER_MB} MiB/1 vcore" in line, line
    assert line.endswith(f"; the client gives up {START_TIMEOUT} after the submission "
                         f"(yarn.application.start-timeout)"), line

    [error] = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: {app_id} did not start within {START_TIMEOUT} "
                            f"(yarn.application.start-timeout), so it was killed; still "
                            f"ACCEPTED: YARN says "), error
    assert "Raise yarn.application.start-timeout, or leave it empty" in error, error
    assert yarn_cluster.wait_for_end(app_id)["state"] == "KILLED"
    assert yarn_cluster.application_report(busy_queue)["state"] == "RUNNING"
