"""Figures for the foundation: local Hadoop start-up, cold and warm, and the skein smoke
application's submit-to-FINISHED time. Medians of N runs.

Each figure is also given as a ratio to a baseline measured in the same run: one bare
JVM start on the same classpath (Hadoop's VersionInfo), which is what every daemon
and client pays before doing anything. These machines are shared and noisy; ratios
travel between runs better than seconds.

usage: .venv/bin/python bench/foundation.py [--runs N] [--skip-cold]
The local Hadoop must be down at the start; it is left down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))
import local_hadoop  # noqa: E402


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def jvm_baseline(layout: local_hadoop.Layout) -> float:
    return timed([f"{local_hadoop.java_home()}/bin/java", "-cp", f"{layout.lib}/*",
                  "org.apache.hadoop.util.VersionInfo"])


def cold_up(runs: int) -> list[float]:
    """`up` with an empty jar cache, an empty Maven repository and a new work folder."""
    times = []
    cluster = str(REPO / "integration" / "cluster")
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as scratch:
            env = dict(os.environ,
                       FLINKYARN_HADOOP_CACHE=f"{scratch}/cache",
                       FLINKYARN_HADOOP_WORK=f"{scratch}/work",
                       MAVEN_OPTS=f"-Dmaven.repo.local={scratch}/m2")
            try:
                times.append(timed([cluster, "up"], env))
            finally:
                subprocess.run([cluster, "down"], env=env, stdout=subprocess.DEVNULL)
    return times


def warm_up(runs: int) -> list[float]:
    cluster = str(REPO / "integration" / "cluster")
    times = []
    for _ in range(runs):
        times.append(timed([cluster, "up"]))
        subprocess.run([cluster, "down"], check=True, stdout=subprocess.DEVNULL)
    return times


def smoke(runs: int) -> list[float]:
    import uuid

    import skein
    import smoke as smoke_app

    subprocess.run([str(REPO / "integration" / "cluster"), "up"], check=True, stdout=subprocess.DEVNULL)
    local_hadoop.apply_env()
    times = []
    try:
        with skein.Client(log=False) as client:
            for _ in range(runs):
                url = f"{local_hadoop.DEFAULT_FS}/tmp/bench/{uuid.uuid4().hex}"
                _, app, seconds = smoke_app.run(client, local_hadoop.RM_WEB, [url, "bench"])
                assert app["finalStatus"] == "SUCCEEDED", app
                times.append(seconds)
    finally:
        subprocess.run([str(REPO / "integration" / "cluster"), "down"], stdout=subprocess.DEVNULL)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true")
    args = parser.parse_args()
    layout = local_hadoop.Layout.default()
    local_hadoop.ensure_jars(layout)
    baseline = statistics.median(jvm_baseline(layout) for _ in range(args.runs))
    figures = {"baseline: bare JVM start (VersionInfo)": baseline}
    if not args.skip_cold:
        figures["cluster up, cold (downloads, format)"] = statistics.median(cold_up(args.runs))
    figures["cluster up, warm"] = statistics.median(warm_up(args.runs))
    figures["smoke app submit to FINISHED"] = statistics.median(smoke(args.runs))
    for name, seconds in figures.items():
        print(f"{name:42} {seconds:7.2f} s   {seconds / baseline:6.1f} x baseline")
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "foundation.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
