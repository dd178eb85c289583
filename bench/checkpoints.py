"""Checkpoint figures (issue 14), on a local cluster of real processes (tests/local's fast
settings), as ratios of figures measured in the same run.

1. Throughput: the same streaming job (ROWS int64 records from a generator, key_by,
   a keyed sum, a Parquet sink; parallelism 2) without checkpoints and with one every
   second, interleaved --runs times; submit -> FINISHED from the REST API's times. The
   figure: with / without.
2. Checkpoint duration and size against state size: a job holds KEYS distinct keys in a
   keyed sum (the state: one row of key and partial sum per key), its source then idles
   (empty batches), and three checkpoints complete; their last one's duration and size
   (the REST API's) are the figures, for state of about 10 MB and 100 MB (and 1 GB with
   --large: some minutes and several GB of memory on this machine).
3. Recovery with state: the idling 100 MB job's TaskExecutor is SIGKILLed; the time until
   a checkpoint completes after the restart (the restored state is back in every task:
   a task acknowledges only once it runs again) against the same job with a few keys
   (no state to speak of).

usage: .venv/bin/python bench/checkpoints.py [--runs N] [--large] [--state-only]
Writes bench/results/checkpoints.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from flinkyarn import Pipeline  # noqa: E402
from flinkyarn.configuration import Configuration  # noqa: E402
from tests.local.conftest import FAST, task_executor_process  # noqa: E402
from yarn_client.local_cluster import LocalCluster  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 60_000_000
BATCH = 50_000
BYTES_PER_KEY = 16  # an int64 key and an int64 partial sum: Arrow IPC bytes per key


class Numbers:
    """`rows` numbers in batches, keys n mod `keys`; then, while `hold` exists, None
    every 50 ms (the source idles, and takes checkpoint triggers)."""

    def __init__(self, rows: int, keys: int, hold: str | None = None) -> None:
        self.rows, self.keys, self.hold = rows, keys, hold

    def __call__(self, subtask: int, parallelism: int):
        share = range(subtask * BATCH, self.rows, parallelism * BATCH)
        for start in share:
            n = pa.array(range(start, min(start + BATCH, self.rows)), pa.int64())
            k = pc.subtract(n, pc.multiply(pc.divide(n, self.keys), self.keys))  # n mod keys
            yield pa.record_batch([n, k], names=["n", "k"])
        while self.hold is not None and os.path.exists(self.hold):
            time.sleep(0.05)
            yield None  # idle: the task takes checkpoint triggers


def pipeline(out: str, rows: int, keys: int, interval: str | None,
             hold: str | None = None) -> Pipeline:
    settings = {"restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "3",
                "restart-strategy.fixed-delay.delay": "0 ms"}
    if interval:
        settings["execution.checkpointing.interval"] = interval
    p = Pipeline("bench", parallelism=2, configuration=settings)
    p.from_generator(Numbers(rows, keys, hold)).key_by("k").sum("n").write_parquet(out)
    return p


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def finished(cluster: LocalCluster, job: str) -> float:
    details = wait(lambda: (d := cluster.rest.job(job)).status in ("FINISHED", "FAILED", "CANCELED")
                   and d.end_time is not None and d, 900, "the job to end")
    if details.status != "FINISHED":
        raise SystemExit(f"job {job} {details.status}: {details.failure_cause}")
    return details.end_time - details.start_time


def throughput(cluster: LocalCluster, work: Path, runs: int) -> dict:
    times: dict[str, list[float]] = {"no checkpoints": [], "every 1 s": []}
    # A first job warms the cluster up (its TaskExecutor's slots, imports): not measured.
    finished(cluster, cluster.rest.submit(pipeline(str(work / "warm-up"), ROWS // 10, 16,
                                                   None).job_graph()))
    for run in range(runs):
        for name, interval in (("no checkpoints", None), ("every 1 s", "1 s")):
            job = cluster.rest.submit(pipeline(str(work / f"tp-{run}-{len(times[name])}-{interval}"),
                                               ROWS, 16, interval).job_graph())
            times[name].append(finished(cluster, job))
            print(f"throughput run {run + 1}: {name} {times[name][-1]:.2f} s", flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    return {"seconds": times, "median": median,
            "ratio with / without": median["every 1 s"] / median["no checkpoints"]}


def held_job(cluster: LocalCluster, work: Path, keys: int, name: str) -> tuple[str, Path]:
    hold = work / f"hold-{name}"
    hold.write_text("")
    job = cluster.rest.submit(pipeline(str(work / f"held-{name}"), keys, keys, "1 s",
                                       str(hold)).job_graph())
    return job, hold


def state_figures(cluster: LocalCluster, work: Path, sizes: dict[str, int]) -> dict:
    return {name: state_figure(cluster, work, name, keys) for name, keys in sizes.items()}


def state_figure(cluster: LocalCluster, work: Path, name: str, keys: int) -> dict:
    job, hold = held_job(cluster, work, keys, name)
    # Every key is in (BYTES_PER_KEY each, less a little), then two more checkpoints.
    wait(lambda: (v := cluster.rest.job(job).checkpoints) and v.completed >= 1
         and v.last_completed_size and v.last_completed_size >= keys * BYTES_PER_KEY * 0.98,
         3600, f"a checkpoint with all {keys} keys")
    done = cluster.rest.job(job).checkpoints.completed
    view = wait(lambda: (v := cluster.rest.job(job).checkpoints) and v.completed >= done + 2
                and v, 1800, "two more checkpoints")
    figure = {"keys": keys, "size_bytes": view.last_completed_size,
              "duration_s": view.last_completed_duration}
    print(f"state {name}: {figure}", flush=True)
    hold.unlink()
    finished(cluster, job)
    return figure


def recovery(cluster: LocalCluster, work: Path, keys: int, name: str) -> float:
    job, hold = held_job(cluster, work, keys, name)
    wait(lambda: (v := cluster.rest.job(job).checkpoints) and v.completed >= 2, 1800,
         "two checkpoints")
    victim = cluster.rest.overview().task_executors[0].resource_id
    before = cluster.rest.job(job).checkpoints.last_completed_id
    os.kill(task_executor_process(victim), signal.SIGKILL)
    killed = time.monotonic()
    wait(lambda: (v := cluster.rest.job(job).checkpoints) and v.restored_from is not None
         and (v.last_completed_id or 0) > before, 1800, "a checkpoint after the restart")
    seconds = time.monotonic() - killed
    hold.unlink()
    finished(cluster, job)
    print(f"recovery {name}: {seconds:.2f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--large", action="store_true", help="also 1 GB of state")
    parser.add_argument("--state-only", action="store_true",
                        help="only the state figures, into the results file's")
    args = parser.parse_args()
    sizes = {"10 MB": 10_000_000 // BYTES_PER_KEY, "100 MB": 100_000_000 // BYTES_PER_KEY}
    if args.large:
        sizes["1 GB"] = 1_000_000_000 // BYTES_PER_KEY
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
    conf = Configuration.load(overrides={**FAST, "taskmanager.memory.process.size": "4 gb"})
    out = REPO / "bench" / "results" / "checkpoints.json"
    out.parent.mkdir(parents=True, exist_ok=True)  # not in a fresh clone (.gitignore)
    if args.state_only:
        results = json.loads(out.read_text())
        with LocalCluster(conf, work_dir=work / "cluster", start_workers=1) as cluster:
            results["state"].update(state_figures(cluster, work, sizes))
        out.write_text(json.dumps(results, indent=2))
        print(json.dumps(results["state"], indent=2))
        return
    with LocalCluster(conf, work_dir=work / "cluster", start_workers=1) as cluster:
        results = {"throughput": throughput(cluster, work, args.runs),
                   "state": state_figures(cluster, work, sizes)}
        stateful = [recovery(cluster, work, sizes["100 MB"], f"100 MB-{i}") for i in range(args.runs)]
        stateless = [recovery(cluster, work, 16, f"none-{i}") for i in range(args.runs)]
        results["recovery"] = {
            "seconds with 100 MB": stateful, "seconds without state": stateless,
            "ratio": statistics.median(stateful) / statistics.median(stateless)}
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps({"throughput with/without": results["throughput"]["ratio with / without"],
                      "state": results["state"],
                      "recovery 100 MB / none": results["recovery"]["ratio"]}, indent=2))


if __name__ == "__main__":
    main()
