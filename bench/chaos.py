"""Issue 41's chaos runs: a process of ours SIGKILLed every 0-6 s for 60 s while the
per-job chaos word count runs on the two-node local Hadoop (tests/chaos.py: any
process of the application of a kind it knows that runs at that moment, drawn alike,
the TaskExecutors' and their Spark's, the containers' launch scripts, the AppMaster's
Python and skein's JVM).

An AppMaster-side process is killed only 5 s or more after the last one: YARN ends an
application whose AppMaster fails twice within its validity interval (2 s here, 10 s
by default: yarn.application-attempt-failures-validity-interval), by design.

Each round must end with the job FINISHED and its counts exact, the application
SUCCEEDED within --settle seconds (60) of the last kill, and no process of the
application left on this machine; the first round that does not stops the run (exit 1).
Reported per round: the kills by kind, how long after the last kill the job ended.

usage: .venv/bin/python bench/chaos.py [--rounds 5] [--seconds 60] [--megabytes 8] [--seed S]
Needs the local Hadoop with HADOOP_CONF_DIR set (`eval "$(integration/cluster env)"`).
Writes bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "integration")]

import local_hadoop  # noqa: E402
from tests import chaos  # noqa: E402
from yarn_client import yarn_cluster  # noqa: E402


APPMASTER_SPACING_S = 5.0


def one_round(number: int, folder: str, expected: dict[str, int], seconds: float,
              settle: float, rng: random.Random, work: Path) -> dict:
    output = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-bench/{uuid.uuid4().hex}/counts"
    client = chaos.start(REPO, work / "chaos_wordcount.py", [folder, output],
                         f"flinkyarn-bench-chaos-{uuid.uuid4().hex[:8]}")
    said: list[str] = []
    kills: list[tuple[float, str, int]] = []
    try:
        app_id = chaos.application_id(client, said, timeout=300)
        chaos.wait_for(lambda: chaos.of_kind(app_id, "spark-worker"), 300,
                       "the Spark stage's Python workers")
        start = time.monotonic()
        last_appmaster = start - APPMASTER_SPACING_S
        while time.monotonic() - start < seconds and client.poll() is None:
            time.sleep(rng.uniform(0, 6))
            appmaster_may_die = time.monotonic() - last_appmaster >= APPMASTER_SPACING_S
            running = [(kind, process) for kind in chaos.KINDS
                       if appmaster_may_die or kind not in chaos.APPMASTER_KINDS
                       for process in chaos.of_kind(app_id, kind)]
            if not running:
                continue
            kind, victim = rng.choice(running)
            if chaos.kill(victim):
                kills.append((time.monotonic() - start, kind, victim.pid))
                if kind in chaos.APPMASTER_KINDS:
                    last_appmaster = time.monotonic()
                print(f"  round {number}: {kills[-1][0]:5.1f} s killed {kind} {victim.pid}",
                      flush=True)
        last = start + (kills[-1][0] if kills else 0.0)
        _, rest = client.communicate(timeout=settle + 600)
        ended = time.monotonic()
    finally:
        if client.poll() is None:
            client.kill()
    said.append(rest)
    report = yarn_cluster.application_report(app_id)
    problems = []
    if client.returncode != 0 or report.get("finalStatus") != "SUCCEEDED":
        problems.append(f"client exit {client.returncode}, application "
                        f"{report.get('state')}/{report.get('finalStatus')}:\n"
                        + "".join(said)[-4000:])
    elif chaos.counts_of(output) != expected:
        problems.append("the counts are not exact")
    if ended - last > settle:
        problems.append(f"the job ended {ended - last:.0f} s after the last kill (> {settle:g} s)")
    try:
        chaos.nothing_left(app_id)
    except AssertionError as error:
        problems.append(str(error))
    restarts = [line for line in "".join(said).splitlines() if "restart (attempt" in line]
    return {"round": number, "application": app_id, "kills": len(kills),
            "by_kind": dict(collections.Counter(kind for _, kind, _ in kills)),
            "after_last_kill_s": round(ended - last, 1), "restarts": len(restarts),
            "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--megabytes", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"chaos: {args.rounds} rounds of {args.seconds:g} s, seed {seed}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as work:
        folder, expected = chaos.put_corpus(REPO, Path(work), args.megabytes)
        try:
            for number in range(1, args.rounds + 1):
                result = one_round(number, folder, expected, args.seconds, args.settle, rng,
                                   Path(work))
                results.append(result)
                print(f"round {number}: {result['kills']} kills {result['by_kind']}, "
                      f"{result['restarts']} restarts, ended {result['after_last_kill_s']} s "
                      f"after the last kill: "
                      f"{'; '.join(result['problems']) or 'exact, nothing left'}", flush=True)
                if result["problems"]:
                    break
        finally:
            chaos.remove(folder)
    out = REPO / "bench" / "results" / "chaos.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"seed": seed, "seconds": args.seconds, "rounds": results},
                              indent=2) + "\n")
    passed = sum(not r["problems"] for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
