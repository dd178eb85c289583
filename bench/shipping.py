"""What shipping the Python environment costs (issue 10), against a baseline measured in
the same run.

Each round, interleaved so all three see the same noise:
- bare: a skein application whose master is a shell `echo` (nothing localized but
  skein's own files), from `skein.Client()` to FINISHED: the floor of any YARN application;
- first submit: a per-job flinkyarn application of one trivial task into a staging folder
  never used before (`yarn.staging-directory`): the environment is packed and uploaded,
  and every node that runs a container localizes it for the first time;
- cached submit (twice): the same job into the same staging folder: nothing is packed or
  uploaded, the nodes have the environment unpacked already.
Times are whole submits, from the descriptor's `deploy` call (the client's queue check,
shipping, skein driver, submission) to the application FINISHED as the ResourceManager
reports it; bytes are what the submit uploaded for the environment and code.

usage: .venv/bin/python bench/shipping.py [--rounds N]
Writes bench/results/shipping.json. Needs the local Hadoop (`integration/cluster up
--nodes 2` for the multi-node figures). Removes its staging folders at the end.
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))
sys.path.insert(0, str(REPO))

import local_hadoop  # noqa: E402
import skein  # noqa: E402

from flinkyarn import hdfs  # noqa: E402
from flinkyarn.configuration import Configuration  # noqa: E402
from flinkyarn.job import JobBuilder  # noqa: E402
from yarn_client import yarn_cluster  # noqa: E402
from yarn_client import skein_agent  # noqa: E402
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions  # noqa: E402

TAG = f"flinkyarn-bench-{uuid.uuid4().hex[:8]}"
STAGING = f"/user/{getpass.getuser()}/.flinkyarn-bench-{TAG}"


def noop(ctx) -> None:
    pass


def bare() -> dict:
    spec = skein.ApplicationSpec(
        name="flinkyarn bench: bare skein", queue="default", tags={TAG},
        master=skein.Master(resources=skein.Resources(memory=256, vcores=1),
                            script="echo bare skein application"))
    start = time.time()
    with skein_agent.client(log=False) as client:  # of type flinkyarn, as ours are
        app_id = client.submit(spec)
        report = yarn_cluster.wait_for_end(app_id)
    return {"app_id": app_id, "seconds": time.time() - start, "uploaded_bytes": 0,
            "final": report["finalStatus"]}


def submit(staging: str) -> dict:
    conf = Configuration.load(overrides={"yarn.staging-directory": staging,
                                         "heartbeat.interval": "1 s",
                                         "heartbeat.timeout": "10 s"})
    job = JobBuilder("flinkyarn bench: shipping")
    job.add_vertex("noop", noop, parallelism=1)
    start = time.time()
    out = io.StringIO()
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(TAG,)), out).deploy(
        "per-job", job.build())
    report = yarn_cluster.wait_for_end(deployment.app_id, timeout=600)
    return {"app_id": deployment.app_id, "seconds": time.time() - start,
            "uploaded_bytes": int(deployment.phases["uploaded bytes"]),
            "final": report["finalStatus"], "client_lines": out.getvalue().splitlines()}


def summary(runs: list[dict]) -> dict:
    seconds = [r["seconds"] for r in runs]
    return {"runs": len(runs), "median_s": statistics.median(seconds), "min_s": min(seconds),
            "max_s": max(seconds), "uploaded_bytes": [r["uploaded_bytes"] for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    local_hadoop.apply_env()
    nodes = local_hadoop.recorded_node_count(local_hadoop.Layout.default())
    results: dict[str, list[dict]] = {"bare": [], "first": [], "cached": []}
    staging_folders = []
    try:
        for round_ in range(args.rounds):
            staging = f"{STAGING}-{round_}"
            staging_folders.append(staging)
            results["bare"].append(bare())
            results["first"].append(submit(staging))
            results["cached"].append(submit(staging))
            results["cached"].append(submit(staging))
            print(f"round {round_ + 1}: " + ", ".join(
                f"{name} {runs[-1]['seconds']:.1f} s" for name, runs in results.items()),
                flush=True)
    finally:
        for app in yarn_cluster.flinkyarn_applications(tag=TAG):
            yarn_cluster.kill(app["id"])
        filesystem = hdfs.filesystem()
        for folder in staging_folders:
            if filesystem.exists(folder):
                filesystem.rm(folder, recursive=True)
    failed = [r["app_id"] for runs in results.values() for r in runs if r["final"] != "SUCCEEDED"]
    figures = {name: summary(runs) for name, runs in results.items()}
    base = figures["bare"]["median_s"]
    for name in ("first", "cached"):
        figures[name]["x_bare"] = figures[name]["median_s"] / base
    out = REPO / "bench" / "results" / "shipping.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"nodes": nodes, "figures": figures, "runs": results,
                               "failed": failed}, indent=2))
    print(f"\n{nodes} node(s), {args.rounds} round(s); medians (min-max), whole submit to FINISHED")
    for name, figure in figures.items():
        ratio = f"  {figure['x_bare']:.2f}x bare" if "x_bare" in figure else ""
        uploaded = max(figure["uploaded_bytes"]) / 2**20
        print(f"  {name:7} {figure['median_s']:6.1f} s ({figure['min_s']:.1f}-{figure['max_s']:.1f})"
              f"{ratio}   uploaded up to {uploaded:.1f} MiB")
    if failed:
        print(f"applications that did not succeed: {failed}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
