"""Issue 15's figure: how long a per-job job's tasks are gone when its AppMaster is lost,
against a cold per-job start in the same run (the floor that YARN's restart of the
attempt sets: a container, skein's ApplicationMaster, ours, then the TaskExecutor's).

Each round runs the slow per-job wordcount of tests/yarn/test_appmaster_failover.py
(parallelism 2, each subtask 0.5 s a batch) on the local Hadoop and measures
    cold start   `flinkyarn run` started -> every task of its source RUNNING (attempt 1),
    recovery     the AppMaster container's processes SIGKILLed -> every task of the
                 source RUNNING again, in attempt 2 (the figure),
then lets the job finish (its counts must be exact, else the round is an error).

usage: .venv/bin/python bench/appmaster_failover.py [--rounds N]
Needs the local Hadoop with HADOOP_CONF_DIR set (`eval "$(integration/cluster env)"`).
Writes bench/results/appmaster_failover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "integration")]


import local_hadoop  # noqa: E402
from flinkyarn.connectors.filesystems import read_parquet  # noqa: E402
from tests.yarn.test_appmaster_failover import (BATCHES, SLOW_WORDCOUNT, WORDS,  # noqa: E402
                                                container_processes, tasks_running)
from tests.yarn.test_on_yarn import FAST  # noqa: E402
from yarn_client import yarn_cluster  # noqa: E402

POLL = 0.1


def until(condition, timeout: float = 180.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(POLL)
    raise SystemExit(f"timed out after {timeout:g} s")


def one_round(program: Path) -> tuple[float, float]:
    output = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-bench/{uuid.uuid4().hex}/counts"
    tag = f"flinkyarn-bench-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    client = subprocess.Popen([sys.executable, "-m", "yarn_client", "run", *FAST, "--tags", tag,
                               str(program), output], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        found: list[str] = []
        until(lambda: bool(found.extend(a["id"] for a in yarn_cluster.flinkyarn_applications(tag=tag))
                           or found))
        app_id = found[0]
        running = until(lambda: tasks_running(app_id, attempt=1))
        master = f"container_{app_id.removeprefix('application_')}_01_000001"
        killed = time.monotonic()
        for pid in container_processes(master):
            os.kill(pid, signal.SIGKILL)
        again = until(lambda: tasks_running(app_id, attempt=2))
        _, stderr = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
    if client.returncode != 0:
        raise SystemExit(f"the job failed:\n{stderr[-3000:]}")
    counts = read_parquet(output).to_pydict()
    if dict(zip(counts["word"], counts["count"])) != {w: 2 * BATCHES for w in WORDS}:
        raise SystemExit(f"inexact counts: {counts}")
    return running - start, again - killed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "slow_wordcount.py"
        program.write_text(SLOW_WORDCOUNT)
        cold, recovery = [], []
        for round_ in range(args.rounds):
            c, r = one_round(program)
            cold.append(c)
            recovery.append(r)
            print(f"round {round_ + 1}: cold start {c:.1f} s, recovery {r:.1f} s", flush=True)
    result = {"cold_start_s": statistics.median(cold), "recovery_s": statistics.median(recovery),
              "cold": cold, "recovery": recovery}
    result["recovery_vs_cold_start"] = result["recovery_s"] / result["cold_start_s"]
    print(f"AppMaster SIGKILL -> tasks RUNNING again: {result['recovery_s']:.1f} s, "
          f"{result['recovery_vs_cold_start']:.2f}x a cold per-job start "
          f"({result['cold_start_s']:.1f} s)")
    out = REPO / "bench" / "results" / "appmaster_failover.json"
    out.parent.mkdir(parents=True, exist_ok=True)  # not in a fresh clone (.gitignore)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
