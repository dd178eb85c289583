"""Submit -> RUNNING on the secure test cluster against the same on the plain one (issue 11).

The two clusters share their ports, so one run takes turns: the plain two-node cluster,
then the secure one (`integration/cluster up --nodes 2 --secure`), then the plain one
again, each for `--rounds` per-job submissions of a small pipeline; the figure is the
ratio of the medians of the client's own phase "AppMaster up" (submit to a running
AppMaster whose REST API answers). On the secure cluster the client logs in from the
test keytab (`security.kerberos.login.keytab`), so each round pays for its login too.

usage: .venv/bin/python bench/secure_submit.py [--rounds N]
Stops whatever local Hadoop runs; leaves none running. Writes bench/results/secure_submit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))
import local_hadoop  # noqa: E402

PROGRAM = """
import uuid
import pyarrow as pa
from flinkyarn import Pipeline

def rows(subtask, parallelism):
    yield pa.record_batch([pa.array([1, 2, 3])], names=["x"])

p = Pipeline("secure bench", parallelism=1)
p.from_generator(rows).write_parquet(f"hdfs:///tmp/flinkyarn-bench/{uuid.uuid4().hex}")
p.execute()
"""


def submit(program: Path, extra: list[str]) -> float:
    result = subprocess.run([sys.executable, "-m", "yarn_client", "run", "-t", "yarn-per-job",
                             *extra, str(program)], capture_output=True, text=True, cwd=REPO,
                            timeout=600)
    found = re.search(r"AppMaster up \[([\d.]+) s\]", result.stderr)
    if result.returncode != 0 or not found:
        raise SystemExit(f"the submission failed:\n{result.stderr[-3000:]}")
    return float(found.group(1))


def turn(secure: bool, rounds: int, program: Path) -> list[float]:
    layout = local_hadoop.Layout.default()
    local_hadoop.down(layout, say=lambda line: None)
    local_hadoop.up(layout, say=lambda line: None, nodes=2, secure=secure)
    saved = dict(os.environ)
    try:
        local_hadoop.apply_env(layout)
        extra = (["-D", f"security.kerberos.login.keytab={os.environ['FLINKYARN_TEST_KEYTAB']}",
                  "-D", f"security.kerberos.login.principal={os.environ['FLINKYARN_TEST_PRINCIPAL']}"]
                 if secure else [])
        submit(program, extra)  # warms the caches (HDFS and the nodes') for this cluster
        times = [submit(program, extra) for _ in range(rounds)]
        print(f"{'secure' if secure else 'plain'}: {', '.join(f'{t:.1f} s' for t in times)}",
              flush=True)
        return times
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    program = REPO / "bench" / "results" / "secure_bench_program.py"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(PROGRAM)
    times: dict[str, list[float]] = {"plain": [], "secure": []}
    try:
        times["plain"] += turn(False, args.rounds, program)
        times["secure"] += turn(True, args.rounds, program)
        times["plain"] += turn(False, args.rounds, program)
    finally:
        local_hadoop.down(local_hadoop.Layout.default(), say=lambda line: None)
        program.unlink(missing_ok=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    ratio = median["secure"] / median["plain"]
    print(f"submit -> AppMaster up: secure {median['secure']:.1f} s, plain "
          f"{median['plain']:.1f} s: {ratio:.2f}x")
    (REPO / "bench" / "results" / "secure_submit.json").write_text(json.dumps(
        {"median_seconds": median, "ratio secure vs plain": ratio, "times": times}, indent=2))


if __name__ == "__main__":
    main()
