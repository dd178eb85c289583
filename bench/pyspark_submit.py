"""`flinkyarn run --pyspark` against spark-submit from the same pyspark (issue 19), as
ratios of times measured in the same run, interleaved round by round.

Spark's own example `pi.py 100`, submit to exit, five pairs:
- per-job, default path (Spark's executors on YARN, dynamic allocation from 2 to 4)
                                                      vs spark-submit --master yarn
  --deploy-mode cluster with spark.yarn.archive on HDFS (our cache's jars archive, so
  neither uploads jars), pyspark's archives from there too (PYSPARK_ARCHIVES_PATH), and
  the same Python environment archive for its driver and executors;
- per-job, Spark on YARN with --num-executors 2 (spark-submit's own default: two fixed
  executors)                                          vs that spark-submit;
- per-job with -D pyspark.master=local                vs that spark-submit;
- into a warm session (its TaskExecutor kept, one slot, a warm driver ready: see
  taskexecutor/spark/warm_pool.py), -D pyspark.master=local vs that spark-submit;
- local target (-t local)                             vs `python pi.py 100`;
and, as the floor of every path whose JVM starts cold on this machine, `python pi.py 100`
vs that spark-submit; and, as the floor of any driver at all, warm or not, pi's own Spark
job (its 100 tasks on `local[2]`) run a second time in a SparkContext that already ran it
once: what is left when nothing starts (the warm-session target is 0.2x spark-submit).

usage: .venv/bin/python bench/pyspark_submit.py [--rounds N]
Needs the local Hadoop with HADOOP_CONF_DIR set (`eval "$(integration/cluster env)"`)
and one earlier `flinkyarn run --pyspark` on YARN (which fills the cache). Writes
bench/results/pyspark_submit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parent.parent
HOME = Path(pyspark.__file__).resolve().parent
PI = HOME / "examples" / "src" / "main" / "python" / "pi.py"
CLI = [sys.executable, "-m", "yarn_client"]
WARM_UP = 15.0


def timed(command: list[str], env: dict[str, str] | None = None,
          expect: str = "Pi is roughly") -> float:
    """Seconds from start to exit; the run must succeed and show `expect` (cluster mode's
    spark-submit shows the driver's output in its logs only: its final status then)."""
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env,
                            timeout=900)
    elapsed = time.monotonic() - start
    if result.returncode != 0 or expect not in result.stdout + result.stderr:
        raise SystemExit(f"{command[:6]} failed:\n{result.stderr[-3000:]}")
    return elapsed


PI_JOB = """
import sys, time
from operator import add
from random import random
from pyspark.sql import SparkSession

def f(_):  # pi.py's own
    x = random() * 2 - 1
    y = random() * 2 - 1
    return 1 if x ** 2 + y ** 2 <= 1 else 0

spark = SparkSession.builder.master("local[2]").appName("pi-floor").getOrCreate()
n = 100000 * 100
for run in range(2):
    start = time.monotonic()
    spark.sparkContext.parallelize(range(1, n + 1), 100).map(f).reduce(add)
print(f"{time.monotonic() - start:.3f}")
spark.stop()
"""


def pi_job_steady() -> float:
    """Seconds of pi's own Spark job in a SparkContext that ran it once already."""
    result = subprocess.run([sys.executable, "-c", PI_JOB], capture_output=True, text=True,
                            timeout=300, check=True)
    return float(result.stdout.split()[-1])


def cache_urls(prefix: str) -> list[str]:
    """hdfs:// URLs of the cache's files whose names start with `prefix`, the newest
    first (a changed environment is cached beside the former one)."""
    user = os.environ.get("USER") or "root"
    listing = subprocess.run(["hdfs", "dfs", "-ls", "-t", f"/user/{user}/.flinkyarn/cache"],
                             capture_output=True, text=True, check=True).stdout
    from flinkyarn import hadoop

    fs = hadoop.default_fs().rstrip("/")
    found = [fs + line.split()[-1] for line in listing.splitlines()
             if line.strip() and Path(line.split()[-1]).name.startswith(prefix)
             and ".partial" not in line]
    if not found:
        raise SystemExit(f"no {prefix}* in the cache: run `flinkyarn run --pyspark` once first")
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    archive, environment = cache_urls("spark-jars-")[0], cache_urls("environment-")[0]
    # Our drivers' and TaskExecutors' class-data archive, shipped from the first submit
    # on once made: made now (as the first submit would start it, in the background).
    from flinkyarn.spark import class_data
    from yarn_client import shipping

    print(f"class-data archive: {class_data.ensure_archive(shipping.environment_prefix())}",
          file=sys.stderr)
    # spark-submit takes pyspark's own archives from the cache too: it uploads nothing.
    submit_env = dict(os.environ, PYSPARK_ARCHIVES_PATH=",".join(cache_urls("pyspark-lib-")))
    spark_submit = [str(HOME / "bin" / "spark-submit"), "--master", "yarn", "--deploy-mode",
                    "cluster", "--conf", f"spark.yarn.archive={archive}",
                    "--archives", f"{environment}#environment",
                    "--conf", "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python",
                    "--conf", "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
                    str(PI), "100"]
    # A warm session keeps its TaskExecutor between the rounds. A session for scripts
    # gives each slot the TaskExecutor's cores (one slot), as `python pi.py` has them all.
    session = subprocess.run([*CLI, "session", "start", "-D",
                              "resourcemanager.taskmanager-timeout=30 min",
                              "-D", "taskmanager.numberOfTaskSlots=1"],
                             capture_output=True, text=True, cwd=REPO,
                             check=True).stdout.strip().splitlines()[-1]
    # Warm: its TaskExecutor is up (the first job of a session asks YARN for it).
    timed([*CLI, "run", "-t", "yarn-session", "--application-id", session, "--pyspark",
           "-D", "pyspark.master=local", str(PI), "2"])
    pairs = {
        "per-job, Spark on YARN": [*CLI, "run", "-t", "yarn-per-job", "--pyspark", str(PI), "100"],
        # spark-submit's own executor policy (two, fixed) instead of dynamic allocation.
        "per-job, Spark on YARN, --num-executors 2": [
            *CLI, "run", "-t", "yarn-per-job", "--pyspark", "--num-executors", "2", str(PI), "100"],
        "per-job, pyspark.master=local": [*CLI, "run", "-t", "yarn-per-job", "--pyspark",
                                          "-D", "pyspark.master=local", str(PI), "100"],
        "warm session, pyspark.master=local": [*CLI, "run", "-t", "yarn-session",
                                               "--application-id", session, "--pyspark",
                                               "-D", "pyspark.master=local", str(PI), "100"],
    }
    local_env = {k: v for k, v in os.environ.items() if k != "HADOOP_CONF_DIR"}
    times: dict[str, list[float]] = {name: [] for name in
                                     [*pairs, "spark-submit cluster", "local target", "python",
                                      "pi's job, warm SparkContext"]}
    try:
        for round_ in range(args.rounds):
            times["spark-submit cluster"].append(timed(spark_submit, submit_env, "final status: SUCCEEDED"))
            for name, command in pairs.items():
                times[name].append(timed(command))
            # After the session's script, its TaskExecutor warms a driver up for the next
            # one (some 11 s of a core): not on the clock of the next command here.
            time.sleep(WARM_UP)
            times["python"].append(timed([sys.executable, str(PI), "100"], local_env))
            times["pi's job, warm SparkContext"].append(pi_job_steady())
            times["local target"].append(timed([*CLI, "run", "-t", "local", "--pyspark",
                                                str(PI), "100"], local_env))
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()),
                  flush=True)
    finally:
        subprocess.run([*CLI, "session", "stop", session], capture_output=True, cwd=REPO)
    median = {name: statistics.median(values) for name, values in times.items()}
    ratios = {name: median[name] / median["spark-submit cluster"] for name in pairs}
    ratios["local target vs python"] = median["local target"] / median["python"]
    # The floor of any path whose JVM starts cold on this machine: the script alone.
    ratios["floor: python pi.py vs spark-submit"] = median["python"] / median["spark-submit cluster"]
    ratios["floor: pi's job alone, warm, vs spark-submit"] = (
        median["pi's job, warm SparkContext"] / median["spark-submit cluster"])
    for name, ratio in ratios.items():
        print(f"{name:40} {ratio:5.2f}x")
    out = REPO / "bench" / "results" / "pyspark_submit.json"
    out.parent.mkdir(parents=True, exist_ok=True)  # not in a fresh clone (.gitignore)
    out.write_text(json.dumps({"median_seconds": median, "ratios": ratios, "times": times},
                              indent=2))


if __name__ == "__main__":
    main()
