"""flinkyarn beside its peers (issue 17): Apache Flink 2.3 from PyPI (`apache-flink`) on
the same local YARN and locally, and plain PySpark, in one run, every system's output
checked for exactness. Prints the table of the issue afresh and writes
bench/results/peers.json; bench/RESULTS.md shows the latest table.

The figures (medians of --runs; runs of the two or three systems alternate):
- wordcount local, a 20 MB corpus (bench/wordcount.py's, 4 files), parallelism 2:
  `flinkyarn run -t local examples/wordcount.py` (counting in a Spark stage) against a
  PyFlink Table API program (bench/peers/flink_wordcount.py: built-in SQL functions only,
  no Python UDF, Flink's local MiniCluster) and plain PySpark on local[2]
  (`bench/wordcount.py --pyspark-job`); each its whole command, start to exit;
- per-job wordcount on YARN, the same corpus on HDFS, output to HDFS: `flinkyarn run -t
  yarn-per-job`, submit to the client's exit, against Flink's application mode (`flink run
  -t yarn-application ... -pym flink_wordcount`), submit to the YARN application's end
  (the command returns once deployed: the ResourceManager's finish time is the end);
- session start to usable: `flinkyarn session start` against `yarn-session.sh -d`, each
  to its return (both return once the session's REST API answers);
- the first job into the fresh session (its workers start for it) and a tiny job into the
  warm session (its workers kept), client wall time: bench/peers/tiny_flinkyarn.py against
  bench/peers/tiny_flink.py (`flink run -t yarn-session`), the same job: the numbers
  0..999 counted per n mod 10 after a hash exchange, written to HDFS.

Flink in its fastest documented set-up: its lib/ on HDFS (`yarn.provided.lib.dirs`,
uploaded once, so no jars go up per job), a FLINK_HOME laid out from the installed
pyflink package (bin/, conf/, lib/ with opt/'s flink-python jar, as Flink's docs say),
HADOOP_CLASSPATH from `yarn classpath`, its Python programs shipped with
`yarn.ship-files` / `-pyfs`, the interpreter of its own virtualenv on every node
(`python.executable`, `python.client.executable`; the test cluster's nodes see
~/.cache/flinkyarn-peers/ as a real cluster's nodes see a Python installed on each,
nothing to localize per job). The peer's virtualenv (there) and FLINK_HOME (in
.cache/peers/) are made on the first run (pip install apache-flink==2.3.0, a minute). Flink's JobManager has
1024 MB, each TaskManager 1536 MB and 2 slots; flinkyarn's AppMaster and TaskExecutors
their defaults (a TaskExecutor 1024 MB, 2 slots). Both sessions keep idle workers for
10 minutes, so the warm figure is a warm one for both.

usage: .venv/bin/python bench/peers.py [--runs N] [--only local,per-job,session]
Needs the local Hadoop (`integration/cluster up`; HADOOP_CONF_DIR set by
`eval "$(integration/cluster env)"`). These machines are shared and noisy: compare the
ratios, which come from one run.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wordcount  # noqa: E402  (bench/wordcount.py: the corpus, PySpark's job, Timed)

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"
CACHE = REPO / ".cache" / "peers"
FLINK_VERSION = "2.3.0"
# Outside the repository, which the test cluster's nodes do not see: there it stands for
# a Python with pyflink installed on every node, at the same path.
FLINK_VENV = Path.home() / ".cache" / "flinkyarn-peers" / f"flink-{FLINK_VERSION}-venv"
FLINK_PYTHON = FLINK_VENV / "bin" / "python"
FLINK_HOME = CACHE / f"flink-{FLINK_VERSION}"
FLINKYARN = [str(REPO / ".venv" / "bin" / "flinkyarn")]
RESULTS = REPO / "bench" / "results" / "peers.json"
WORK = REPO / "bench" / "results" / "peers-runs"
MEGABYTES = 20
PARALLELISM = 2
KEEP_WORKERS = "10 min"
APP_ID = re.compile(r"application_\d+_\d+")
RUN = uuid.uuid4().hex[:6]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ============================================================== Flink's set-up

def flink_installed() -> None:
    """The peer's virtualenv with apache-flink, and a FLINK_HOME laid out from it."""
    if not FLINK_PYTHON.exists() or subprocess.run(
            [str(FLINK_PYTHON), "-c", "import pyflink"], capture_output=True).returncode:
        say(f"installing apache-flink=={FLINK_VERSION} into {FLINK_VENV} ...")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(FLINK_VENV)], check=True)
        subprocess.run([str(FLINK_PYTHON), "-m", "pip", "install", "-q",
                        f"apache-flink=={FLINK_VERSION}"], check=True)
    package = Path(subprocess.run(
        [str(FLINK_PYTHON), "-c", "import pyflink, os; print(os.path.dirname(pyflink.__file__))"],
        capture_output=True, text=True, check=True).stdout.strip())
    shutil.rmtree(FLINK_HOME, ignore_errors=True)
    for folder in ("bin", "conf", "opt", "plugins"):
        shutil.copytree(package / folder, FLINK_HOME / folder, symlinks=True)
    (FLINK_HOME / "lib").mkdir()
    (FLINK_HOME / "log").mkdir()
    for jar in [*(package / "lib").glob("*.jar"), *(package / "opt").glob("flink-python-*.jar")]:
        (FLINK_HOME / "lib" / jar.name).symlink_to(jar)
    for script in (FLINK_HOME / "bin").iterdir():
        script.chmod(0o755)


def hdfs(*args: str, check: bool = True) -> str:
    return subprocess.run(["hdfs", "dfs", *args], capture_output=True, text=True,
                          check=check).stdout


def hdfs_base() -> str:
    from flinkyarn import hadoop

    user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True,
                                                    text=True).stdout.strip()
    return f"{hadoop.default_fs().rstrip('/')}/user/{user}/flinkyarn-bench-peers"


def flink_lib_on_hdfs(base: str) -> str:
    """Flink's lib/ on HDFS, uploaded when its listing differs from the local one."""
    target = f"{base}/flink-{FLINK_VERSION}/lib"
    local = sorted(p.name for p in (FLINK_HOME / "lib").iterdir())
    listed = sorted(Path(line.split()[-1]).name for line in hdfs("-ls", target, check=False)
                    .splitlines() if line.startswith("-"))
    if listed != local:
        say(f"uploading Flink's lib/ to {target} (once) ...")
        hdfs("-rm", "-r", "-f", "-skipTrash", target, check=False)
        hdfs("-mkdir", "-p", target)
        hdfs("-put", *(str((FLINK_HOME / "lib" / name).resolve()) for name in local), target)
    return target


def flink_configuration(lib_dir: str) -> None:
    """conf/config.yaml for the peer: the package's own (its JVM options for Java 17,
    region failover) without its standalone host names, with our memory sizes, the
    interpreter and lib/ on HDFS."""
    import yaml

    def flat(tree: dict, prefix: str = "") -> dict[str, str]:
        items: dict[str, str] = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                items.update(flat(value, f"{prefix}{key}."))
            else:
                items[f"{prefix}{key}"] = str(value)
        return items

    settings = {key: value for key, value in flat(yaml.safe_load(
        (FLINK_HOME / "conf" / "config.yaml").read_text())).items()
        if not key.endswith((".bind-host", ".address", "taskmanager.host", "rpc.port"))}
    settings.update({
        "jobmanager.memory.process.size": "1024m",
        "taskmanager.memory.process.size": "1536m",
        "taskmanager.numberOfTaskSlots": str(PARALLELISM),
        "parallelism.default": str(PARALLELISM),
        "python.executable": str(FLINK_PYTHON),
        "python.client.executable": str(FLINK_PYTHON),
        "resourcemanager.taskmanager-timeout": "600000",
        "classloader.check-leaked-classloader": "false",
    })
    if lib_dir:
        settings["yarn.provided.lib.dirs"] = lib_dir
    (FLINK_HOME / "conf" / "config.yaml").write_text(
        "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items()))


def flink_env() -> dict[str, str]:
    env = dict(os.environ, FLINK_HOME=str(FLINK_HOME), FLINK_CONF_DIR=str(FLINK_HOME / "conf"))
    env["HADOOP_CLASSPATH"] = subprocess.run(["yarn", "classpath"], capture_output=True,
                                             text=True, check=True).stdout.strip()
    env["PATH"] = f"{FLINK_VENV / 'bin'}:{env['PATH']}"
    env.pop("PYTHONPATH", None)
    return env


# ================================================================ measuring

def timed(command: list[str], env: dict[str, str] | None = None, cwd: Path = REPO,
          timeout: float = 900) -> tuple[float, str]:
    """(seconds from start to exit, stdout + stderr); the command must succeed."""
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env,
                            timeout=timeout, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:8])} ... exited with {result.returncode}:\n"
                           f"{output[-4000:]}")
    return elapsed, output


def rm_application(app_id: str) -> dict:
    from flinkyarn import hadoop

    return hadoop.rm_request(f"/ws/v1/cluster/apps/{app_id}")["app"]


def wait_application_end(app_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = rm_application(app_id)
        if app["state"] in ("FINISHED", "FAILED", "KILLED"):
            return app
        time.sleep(0.2)
    raise RuntimeError(f"{app_id} did not end within {timeout:g} s")


def kill(app_id: str) -> None:
    subprocess.run(["yarn", "application", "-kill", app_id], capture_output=True)


# =================================================================== outputs

def csv_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in csv.reader(io.StringIO(text)):
        if row:
            counts[row[0]] = counts.get(row[0], 0) + int(row[1])
    return counts


def local_csv_counts(folder: Path) -> dict[str, int]:
    return csv_counts("".join(p.read_text() for p in sorted(folder.rglob("*"))
                              if p.is_file() and not p.name.startswith((".", "_"))))


def hdfs_csv_counts(folder: str) -> dict[str, int]:
    return csv_counts(hdfs("-cat", f"{folder}/*"))


def parquet_counts(folder: str, key: str) -> dict[str, int]:
    from flinkyarn.connectors.filesystems import read_parquet

    table = read_parquet(folder)
    return {str(k): int(n) for k, n in zip(table.column(key).to_pylist(),
                                           table.column("count").to_pylist())}


def same(what: str, counts: dict[str, dict[str, int]]) -> dict:
    (first, reference), *others = counts.items()
    for name, other in others:
        if other != reference:
            missing = len(reference.keys() - other.keys())
            differing = sum(1 for k in reference.keys() & other.keys() if reference[k] != other[k])
            raise AssertionError(f"{what}: {name} differs from {first}: {len(other)} against "
                                 f"{len(reference)} keys, {missing} missing, {differing} counts "
                                 f"differ")
    return {"keys": len(reference), "total": sum(reference.values())}


# ==================================================================== figures

def class_data_archive(env: dict[str, str], shipped: bool = False) -> None:
    """The class-data archive of flinkyarn's local Spark JVMs for `env` (its key depends
    on the environment), or (`shipped`) the one the client ships to YARN for its
    environment, made now if there is none, as the first TaskExecutor or submit would make
    it in the background (flinkyarn/spark/class_data.py): the runs measure the steady state,
    not the one-time training."""
    environment = "shipping.environment_prefix()" if shipped else ""
    subprocess.run([sys.executable, "-c", "from flinkyarn.spark import class_data; "
                    "from yarn_client import shipping; "
                    f"print(class_data.ensure_archive({environment}))"],
                   env=env, cwd=REPO, check=True)


def alternating(systems: list, runs: int, what: str, times: dict[str, list[float]]):
    """`runs` rounds of one timed run of each system, recorded in `times`; the round's
    first system rotates. Yields after each round (for its output check)."""
    for index in range(runs):
        first = index % len(systems)
        for name, run in systems[first:] + systems[:first]:
            times[name].append(run())
            say(f"  {what}, run {index + 1}: {name} {times[name][-1]:.1f} s")
        yield index


def warm_up(systems: list) -> None:
    """One untimed run of each: flinkyarn's first run on YARN fills its HDFS cache (the
    environment, the code), every system's first run the page cache with its jars."""
    for name, run in systems:
        say(f"  warm-up: {name} {run():.1f} s")


def local_wordcount(runs: int) -> dict:
    corpus, _ = wordcount.ensure_corpus(MEGABYTES)
    wordcount.warm_page_cache(corpus)
    work = WORK / "local"
    env = wordcount.subprocess_env()  # no HADOOP_CONF_DIR: bare paths are local
    flink_local_env = {k: v for k, v in flink_env().items()
                       if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    times: dict[str, list[float]] = {"flinkyarn": [], "pyflink": [], "pyspark": []}
    checked = None

    def ours() -> float:
        shutil.rmtree(work / "flinkyarn", ignore_errors=True)
        return timed([*FLINKYARN, "run", "-t", "local", "examples/wordcount.py", "--input",
                      str(corpus), "--output", str(work / "flinkyarn"), "--parallelism",
                      str(PARALLELISM)], env)[0]

    def pyflink() -> float:
        shutil.rmtree(work / "pyflink", ignore_errors=True)
        return timed([str(FLINK_PYTHON), "flink_wordcount.py", str(corpus), str(work / "pyflink"),
                      str(PARALLELISM)], flink_local_env, cwd=PEERS)[0]

    def pyspark() -> float:
        shutil.rmtree(work / "pyspark", ignore_errors=True)
        return timed([sys.executable, str(REPO / "bench" / "wordcount.py"), "--pyspark-job",
                      corpus.as_uri(), (work / "pyspark").as_uri()], env)[0]

    systems = [("flinkyarn", ours), ("pyflink", pyflink), ("pyspark", pyspark)]
    class_data_archive(env)
    warm_up(systems)
    for _ in alternating(systems, runs, "local wordcount", times):
        checked = same("local wordcount", {
            "flinkyarn": parquet_counts(str(work / "flinkyarn"), "word"),
            "pyflink": local_csv_counts(work / "pyflink"),
            "pyspark": parquet_counts(str(work / "pyspark"), "word")})
    return {"seconds": times, "output": checked,
            "input_bytes": sum(p.stat().st_size for p in corpus.glob("part-*.txt"))}


def per_job_wordcount(runs: int, base: str) -> dict:
    corpus, _ = wordcount.ensure_corpus(MEGABYTES)
    source = f"{base}/corpus-{MEGABYTES}mb"
    if len(hdfs("-ls", source, check=False).splitlines()) < wordcount.FILES + 1:
        hdfs("-mkdir", "-p", source)
        hdfs("-put", "-f", *map(str, sorted(corpus.glob("part-*.txt"))), source)
    env = dict(os.environ)
    fenv = flink_env()
    times: dict[str, list[float]] = {"flinkyarn": [], "flink": []}
    checked = None

    def ours() -> float:
        sink = f"{base}/out-flinkyarn"
        hdfs("-rm", "-r", "-f", "-skipTrash", sink)
        return timed([*FLINKYARN, "run", "-t", "yarn-per-job", "--name", f"peers {RUN}",
                      "examples/wordcount.py", "--input", source, "--output", sink,
                      "--parallelism", str(PARALLELISM)], env)[0]

    def flink() -> float:
        sink = f"{base}/out-flink"
        hdfs("-rm", "-r", "-f", "-skipTrash", sink)
        start_ms = time.time() * 1000
        _, output = timed([str(FLINK_HOME / "bin" / "flink"), "run", "-t", "yarn-application",
                           f"-Dyarn.application.name=peers {RUN}",
                           f"-Dyarn.ship-files={PEERS}", "-pyfs", PEERS.name,
                           "-pym", "flink_wordcount", source, sink, str(PARALLELISM)], fenv)
        found = APP_ID.search(output)
        if not found:
            raise RuntimeError(f"no application id from flink run:\n{output[-3000:]}")
        app = wait_application_end(found.group(0))
        if app["finalStatus"] != "SUCCEEDED":
            raise RuntimeError(f"{found.group(0)} ended {app['finalStatus']}: "
                               f"{app.get('diagnostics', '')[:2000]}")
        return (app["finishedTime"] - start_ms) / 1000

    systems = [("flinkyarn", ours), ("flink", flink)]
    class_data_archive(env, shipped=True)
    warm_up(systems)
    for _ in alternating(systems, runs, "per-job wordcount on YARN", times):
        checked = same("per-job wordcount", {
            "flinkyarn": parquet_counts(f"{base}/out-flinkyarn", "word"),
            "flink": hdfs_csv_counts(f"{base}/out-flink")})
    return {"seconds": times, "output": checked}


EXPECTED_TINY = {str(k): 100 for k in range(10)}


def sessions(runs: int, base: str) -> dict:
    """Per run: a session of each system started, its first job, then --runs tiny jobs
    into it warm, then stopped."""
    env = dict(os.environ)
    fenv = flink_env()
    times: dict[str, list[float]] = {key: [] for key in (
        "flinkyarn start", "flink start", "flinkyarn first job", "flink first job",
        "flinkyarn warm job", "flink warm job")}

    def tiny_ours(app_id: str) -> float:
        sink = f"{base}/tiny-flinkyarn"
        hdfs("-rm", "-r", "-f", "-skipTrash", sink)
        seconds, _ = timed([*FLINKYARN, "run", "-t", "yarn-session", "--application-id", app_id,
                            "bench/peers/tiny_flinkyarn.py", sink], env)
        same("tiny job (flinkyarn)", {"expected": EXPECTED_TINY, "flinkyarn": parquet_counts(sink, "k")})
        return seconds

    def tiny_flink(app_id: str) -> float:
        sink = f"{base}/tiny-flink"
        hdfs("-rm", "-r", "-f", "-skipTrash", sink)
        seconds, _ = timed([str(FLINK_HOME / "bin" / "flink"), "run", "-t", "yarn-session",
                            f"-Dyarn.application.id={app_id}", "-py",
                            str(PEERS / "tiny_flink.py"), sink], fenv)
        same("tiny job (Flink)", {"expected": EXPECTED_TINY, "flink": hdfs_csv_counts(sink)})
        return seconds

    def session(name: str, start: list[str], start_env: dict[str, str],
                tiny: Callable[[str], float], stop: Callable[[str], object]) -> None:
        seconds, output = timed(start, start_env)
        app_id = APP_ID.findall(output)[-1]
        try:
            times[f"{name} start"].append(seconds)
            times[f"{name} first job"].append(tiny(app_id))
            for _ in range(runs):
                times[f"{name} warm job"].append(tiny(app_id))
        finally:
            stop(app_id)

    def session_ours() -> None:
        session("flinkyarn", [*FLINKYARN, "session", "start", "--name", f"peers {RUN}", "-D",
                              f"resourcemanager.taskmanager-timeout={KEEP_WORKERS}"], env,
                tiny_ours, lambda app_id: subprocess.run(
                    [*FLINKYARN, "session", "stop", app_id], capture_output=True, cwd=REPO))

    def session_flink() -> None:
        session("flink", [str(FLINK_HOME / "bin" / "yarn-session.sh"), "-d", "-nm",
                          f"peers {RUN}"], fenv, tiny_flink, kill)

    systems = [("flinkyarn", session_ours), ("flink", session_flink)]
    for index in range(runs):
        for name, run in systems[index % 2:] + systems[:index % 2]:
            run()
            say(f"  sessions, run {index + 1}: {name} start {times[f'{name} start'][-1]:.1f} s, "
                f"first job {times[f'{name} first job'][-1]:.1f} s, warm jobs "
                + ", ".join(f"{t:.1f}" for t in times[f"{name} warm job"][-runs:]) + " s")
    return {"seconds": times}


# ==================================================================== report

def table(results: dict) -> list[tuple[str, float, str, float]]:
    rows = []

    def median(figure: str, system: str) -> float:
        return statistics.median(results[figure]["seconds"][system])

    if "local" in results:
        ours = median("local", "flinkyarn")
        for peer, label in (("pyflink", "PyFlink 2.3 Table API"), ("pyspark", "plain PySpark local[2]")):
            rows.append((f"wordcount {MEGABYTES} MB, local, parallelism 2", ours, label,
                         median("local", peer)))
    if "per-job" in results:
        rows.append((f"per-job wordcount {MEGABYTES} MB on YARN, HDFS in/out, submit -> end",
                     median("per-job", "flinkyarn"), "Flink 2.3 application mode",
                     median("per-job", "flink")))
    if "session" in results:
        for figure, label in (("start", "session start -> usable"),
                              ("first job", "first job into a fresh session (new worker)"),
                              ("warm job", "tiny job into a warm session, client wall")):
            peer = "Flink `yarn-session.sh -d`" if figure == "start" else "Flink 2.3 session"
            rows.append((label, median("session", f"flinkyarn {figure}"), peer,
                         median("session", f"flink {figure}")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure (default 3)")
    parser.add_argument("--only", default="local,per-job,session",
                        help="comma-separated figures: local, per-job, session")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    unknown = wanted - {"local", "per-job", "session"}
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(sorted(unknown))}")
    if ({"per-job", "session"} & wanted) and not os.environ.get("HADOOP_CONF_DIR"):
        parser.error('the YARN figures need the local Hadoop: eval "$(integration/cluster env)"')

    flink_installed()
    base = hdfs_base() if {"per-job", "session"} & wanted else ""
    flink_configuration(flink_lib_on_hdfs(base) if base else "")
    results: dict = {}
    load_before = os.getloadavg()
    if "local" in wanted:
        say("wordcount, local ...")
        results["local"] = local_wordcount(args.runs)
    if "per-job" in wanted:
        say("wordcount, per-job on YARN ...")
        results["per-job"] = per_job_wordcount(args.runs, base)
    if "session" in wanted:
        say("sessions on YARN ...")
        results["session"] = sessions(args.runs, base)

    rows = table(results)
    print("\n| what | flinkyarn | peer | ratio |\n|---|---|---|---|")
    for what, ours, peer, theirs in rows:
        print(f"| {what} | {ours:.1f} s | {peer} {theirs:.1f} s | {ours / theirs:.2f}x |")
    print(f"\n{date.today()}, {os.cpu_count()} cores, medians of {args.runs}; outputs identical "
          f"across systems in every run")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "date": str(date.today()), "runs": args.runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "table": [{"what": w, "flinkyarn_s": o, "peer": p, "peer_s": t, "ratio": o / t}
                  for w, o, p, t in rows],
        "results": results}, indent=2))
    say(f"written: {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
