"""Figures for the wordcount job (issue 4): `flinkyarn run -t local examples/wordcount.py`
at parallelism 2 over a generated corpus (default 500 MB), as a ratio to the same
computation written as one plain PySpark job on `local[2]`, measured in the same run.

The corpus: examples/make_corpus.py, 4 files of a quarter of the size each (seeds 7..10),
generated once into bench/results/corpus-<N>mb/ and reused while its manifest
(`_corpus.json`, which both readers skip) matches the files on disk. Before the runs it
is read once, so both sides start with it in the page cache.

flinkyarn: the CLI as a subprocess, exactly as a user runs it:
    flinkyarn run -t local examples/wordcount.py --input CORPUS --output OUT --parallelism 2
  "whole command" is the wall time of that process: the client, the local cluster's
  start (AppMaster, then the TaskExecutor(s) the job asks for), the job, the cluster's
  stop. "job" is the duration the CLI prints ("Job ... FINISHED in X s", the JobMaster's
  start to end): it includes starting the TaskExecutor process(es) and their
  SparkSession. The phases come from the CLI's progress lines (when each arrived).
  A TaskExecutor is 2 slots, 2 cores, 1 gb (the defaults): its SparkSession is
  `local[2]` with a 512 MiB heap (SparkMemoryBudget of 1 gb). The job's four subtasks
  share those two slots (one slot sharing group), so it runs in one TaskExecutor and its
  hash exchange is in-process (LocalInputChannel); bench/data_plane.py measures the
  exchange over Arrow Flight.
PySpark: this file with --pyspark-job, run as `python bench/wordcount.py --pyspark-job ...`
  (PySpark launches its JVM through spark-submit, as in the TaskExecutor), a
  SparkSession of `local[2]`, spark.driver.memory 512m (the TaskExecutor's Spark heap),
  the UI off and loopback only (as the TaskExecutor has them); everything else Spark's
  defaults (adaptive execution on, 200 shuffle partitions coalesced by it). The job:
  lower-case, split on runs of [^a-z0-9], drop empty strings, count per word, write
  Parquet. "whole command" is the process's wall time; "job" is from the session being
  up to the Parquet written (the session start, ~import to getOrCreate, is reported
  apart, and "job" ratios are given against both).

Both outputs are read back and compared: the same words with the same counts, or the
run fails. Both subprocesses run without HADOOP_CONF_DIR and get absolute paths
(flinkyarn) or file:// URIs (Spark), so everything is local. Runs alternate
(flinkyarn, pyspark, pyspark, flinkyarn, ...); figures are medians.

These machines are shared and noisy (2 cores): compare ratios between runs, not seconds,
and never assert on absolute times.

usage: .venv/bin/python bench/wordcount.py [--megabytes N] [--runs N] [--keep-output]
Writes bench/results/wordcount.json (the corpus stays in bench/results/ for the next run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
RESULTS = RESULTS_DIR / "wordcount.json"
FLINKYARN = REPO / ".venv" / "bin" / "flinkyarn"
FILES = 4
FIRST_SEED = 7
PARALLELISM = 2
SPARK_CORES = 2
SPARK_MEMORY = "512m"  # the TaskExecutor's Spark heap at the default 1 gb process size

JOB_LINE = re.compile(r"^Job (\w+) (FINISHED|FAILED|CANCELED) in ([0-9.]+) s")
PROGRESS = re.compile(r"^\[\s*([0-9.]+) s\] job \w+ (\w+): (.*)$")


# ====================================================================== corpus

def corpus_dir(megabytes: float) -> Path:
    return RESULTS_DIR / f"corpus-{megabytes:g}mb"


def _write_one(args: tuple[str, float, int]) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    import make_corpus

    path, megabytes, seed = args
    make_corpus.write_corpus(Path(path), megabytes, seed)


def ensure_corpus(megabytes: float) -> tuple[Path, int]:
    """The corpus folder and its size in bytes; generated (two processes) unless its
    manifest matches the files there."""
    folder = corpus_dir(megabytes)
    manifest = folder / "_corpus.json"
    names = [f"part-{i}.txt" for i in range(FILES)]
    if manifest.is_file():
        recorded = json.loads(manifest.read_text())
        sizes = {name: (folder / name).stat().st_size if (folder / name).is_file() else -1
                 for name in names}
        if recorded.get("megabytes") == megabytes and recorded.get("files") == sizes:
            return folder, sum(sizes.values())
    print(f"generating a {megabytes:g} MB corpus in {folder.relative_to(REPO)} ...",
          file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    jobs = [(str(folder / name), megabytes / FILES, FIRST_SEED + i) for i, name in enumerate(names)]
    with multiprocessing.Pool(min(FILES, os.cpu_count() or 1)) as pool:
        pool.map(_write_one, jobs)
    sizes = {name: (folder / name).stat().st_size for name in names}
    manifest.write_text(json.dumps({"megabytes": megabytes, "files": sizes}, indent=2))
    print(f"  written in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return folder, sum(sizes.values())


def warm_page_cache(folder: Path) -> None:
    for path in sorted(folder.glob("part-*.txt")):
        with open(path, "rb") as file:
            while file.read(16 << 20):
                pass


# ============================================================ the two commands

def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HADOOP_CONF_DIR", None)  # bare paths are local, for Spark too
    env.pop("YARN_CONF_DIR", None)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


class Timed:
    """A subprocess's wall time and its output lines, each with when it arrived (seconds
    since the process was started)."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.command = command
        self.lines: list[tuple[float, str, str]] = []  # (at, stream, text)
        lock = threading.Lock()
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env=subprocess_env(),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)

        def pump(stream, name: str) -> None:
            for line in stream:
                with lock:
                    self.lines.append((time.perf_counter() - start, name, line.rstrip("\n")))

        pumps = [threading.Thread(target=pump, args=(process.stdout, "out"), daemon=True),
                 threading.Thread(target=pump, args=(process.stderr, "err"), daemon=True)]
        for thread in pumps:
            thread.start()
        self.returncode = process.wait()
        self.seconds = time.perf_counter() - start
        for thread in pumps:
            thread.join()
        self.lines.sort(key=lambda item: item[0])
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(f"{at:9.3f} {name} {text}\n" for at, name, text in self.lines))
        self.log = log

    def check(self, what: str) -> None:
        if self.returncode != 0:
            tail = "\n".join(text for _, _, text in self.lines[-25:])
            raise RuntimeError(f"{what} exited with code {self.returncode} (log: {self.log}):\n"
                               f"{tail}")

    def first(self, predicate) -> tuple[float, str] | None:
        return next(((at, text) for at, _, text in self.lines if predicate(text)), None)


def run_flinkyarn(corpus: Path, output: Path, log: Path) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    run = Timed([str(FLINKYARN), "run", "-t", "local", "examples/wordcount.py",
                 "--input", str(corpus), "--output", str(output),
                 "--parallelism", str(PARALLELISM)], log)
    run.check("flinkyarn run")
    job = run.first(lambda text: JOB_LINE.match(text) is not None)
    if job is None or JOB_LINE.match(job[1]).group(2) != "FINISHED":
        raise RuntimeError(f"no 'Job ... FINISHED' line from flinkyarn run (log: {log})")
    job_seconds = float(JOB_LINE.match(job[1]).group(3))
    starting = run.first(lambda text: text.startswith("starting a local cluster"))
    submitted = run.first(lambda text: text.startswith("submitted job"))
    # The progress lines: "[  t s] job ID STATUS: vertex [counts]; vertex [counts]"
    progress = []
    for at, _, text in run.lines:
        match = PROGRESS.match(text)
        if match:
            progress.append((at, float(match.group(1)), match.group(2), match.group(3)))
    source_done = next((p for p in progress if _first_vertex_finished(p[3])), None)
    all_running = next((p for p in progress if _all_running(p[3])), None)
    phases = {
        "client_and_cluster_start_s": submitted[0] if submitted else None,
        "client_start_s": starting[0] if starting else None,
        "submitted_to_tasks_running_s": all_running[1] if all_running else None,
        "submitted_to_source_finished_s": source_done[1] if source_done else None,
        "source_finished_to_job_end_s":
            (progress[-1][1] - source_done[1]) if source_done and progress else None,
        "job_end_to_exit_s": run.seconds - job[0],
    }
    return {"whole_s": run.seconds, "job_s": job_seconds, "phases": phases,
            "progress": [(round(at, 2), text) for at, _, _, text in progress],
            "log": str(log.relative_to(REPO))}


def _vertex_counts(description: str) -> list[dict[str, int]]:
    vertices = []
    for part in description.split("; "):
        counts = part[part.rfind("[") + 1:part.rfind("]")]
        vertices.append({state: int(n) for n, state in
                         (item.split(" ", 1) for item in counts.split(", ") if item)})
    return vertices


def _first_vertex_finished(description: str) -> bool:
    vertices = _vertex_counts(description)
    return bool(vertices) and set(vertices[0]) == {"FINISHED"}


def _all_running(description: str) -> bool:
    vertices = _vertex_counts(description)
    return bool(vertices) and all(set(v) <= {"RUNNING", "FINISHED"} for v in vertices)


def run_pyspark(corpus: Path, output: Path, log: Path) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    run = Timed([sys.executable, str(Path(__file__).resolve()), "--pyspark-job",
                 corpus.as_uri(), output.as_uri()], log)
    run.check("the PySpark job")
    report = run.first(lambda text: text.startswith("{\"pyspark\""))
    if report is None:
        raise RuntimeError(f"the PySpark job printed no timings (log: {log})")
    timings = json.loads(report[1])["pyspark"]
    return {"whole_s": run.seconds, "job_s": timings["job_s"],
            "session_s": timings["session_s"], "phases": timings,
            "log": str(log.relative_to(REPO))}


def pyspark_job(input_uri: str, output_uri: str) -> None:
    """The baseline, in its own process: the same wordcount as one plain PySpark job."""
    started = time.perf_counter()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    imported = time.perf_counter()
    spark = (SparkSession.builder.master(f"local[{SPARK_CORES}]")
             .appName("bench-wordcount-pyspark")
             .config("spark.driver.memory", SPARK_MEMORY)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    session = time.perf_counter()
    lines = spark.read.text(input_uri)
    words = lines.select(F.explode(F.split(F.lower(F.col("value")), "[^a-z0-9]+")).alias("word"))
    counts = words.where(F.col("word") != "").groupBy("word").count()
    counts.write.mode("overwrite").parquet(output_uri)
    written = time.perf_counter()
    spark.stop()
    stopped = time.perf_counter()
    print(json.dumps({"pyspark": {"import_s": imported - started, "session_s": session - imported,
                                  "job_s": written - session, "stop_s": stopped - written}}),
          flush=True)


def read_counts(folder: Path):
    import pyarrow as pa
    import pyarrow.dataset as ds

    table = ds.dataset(str(folder), format="parquet").to_table(columns=["word", "count"])
    table = table.cast(pa.schema([("word", pa.string()), ("count", pa.int64())]))
    return table.sort_by("word")


def same_counts(ours: Path, theirs: Path) -> dict:
    a, b = read_counts(ours), read_counts(theirs)
    if not a.equals(b):
        raise AssertionError(f"the outputs differ: flinkyarn {a.num_rows} words "
                             f"({sum(a.column('count').to_pylist())} in all), PySpark "
                             f"{b.num_rows} words ({sum(b.column('count').to_pylist())} in all)")
    return {"distinct_words": a.num_rows, "words": sum(a.column("count").to_pylist())}


# ===================================================================== report

def median(runs: list[dict], *keys: str) -> float:
    values = []
    for run in runs:
        value = run
        for key in keys:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def summarize(ours: list[dict], spark: list[dict]) -> dict:
    whole, spark_whole = median(ours, "whole_s"), median(spark, "whole_s")
    job, spark_job = median(ours, "job_s"), median(spark, "job_s")
    spark_session_and_job = statistics.median(r["session_s"] + r["job_s"] for r in spark)
    return {
        "flinkyarn_whole_s": whole, "pyspark_whole_s": spark_whole,
        "ratio_whole": whole / spark_whole,
        "flinkyarn_job_s": job, "pyspark_job_s": spark_job,
        "ratio_job": job / spark_job,
        "pyspark_session_and_job_s": spark_session_and_job,
        "ratio_job_to_session_and_job": job / spark_session_and_job,
    }


def print_report(summary: dict, ours: list[dict], spark: list[dict], corpus_bytes: int,
                 check: dict) -> None:
    print(f"{'figure':44} {'flinkyarn s':>11} {'PySpark s':>10}   {'ratio':>6}")
    rows = [
        ("whole command", summary["flinkyarn_whole_s"], summary["pyspark_whole_s"]),
        ("job only (PySpark: session up -> written)", summary["flinkyarn_job_s"],
         summary["pyspark_job_s"]),
        ("job only (PySpark: incl. session start)", summary["flinkyarn_job_s"],
         summary["pyspark_session_and_job_s"]),
    ]
    for name, value, base in rows:
        print(f"{name:44} {value:11.1f} {base:10.1f}   {value / base:5.2f}x")

    def phase(runs: list[dict], key: str) -> str:
        values = [r["phases"][key] for r in runs if r["phases"].get(key) is not None]
        return f"{statistics.median(values):7.1f} s" if values else "      -  "

    print("\nflinkyarn phases (medians, from the CLI's progress lines):")
    ours_phases = (
        ("client start (to 'starting a local cluster')", "client_start_s"),
        ("client + cluster start (to 'submitted job')", "client_and_cluster_start_s"),
        ("submitted -> all tasks RUNNING", "submitted_to_tasks_running_s"),
        ("submitted -> source/split/exchange FINISHED", "submitted_to_source_finished_s"),
        ("source FINISHED -> job end (Spark stage, sink)", "source_finished_to_job_end_s"),
        ("job end -> CLI exit (cluster stop)", "job_end_to_exit_s"),
    )
    for label, key in ours_phases:
        print(f"  {label:52} {phase(ours, key)}")
    print("PySpark phases (medians):")
    for label, key in (("import pyspark", "import_s"), ("SparkSession start", "session_s"),
                       ("job (read, split, count, write)", "job_s"), ("stop", "stop_s")):
        print(f"  {label:52} {phase(spark, key)}")
    print(f"\ncorpus {corpus_bytes / 1e6:.0f} MB ({FILES} files), {check['words']} words, "
          f"{check['distinct_words']} distinct, outputs identical; {len(ours)} flinkyarn and "
          f"{len(spark)} PySpark runs, alternating; flinkyarn parallelism {PARALLELISM}, "
          f"PySpark local[{SPARK_CORES}] with spark.driver.memory {SPARK_MEMORY}")
    print("runs (whole s / job s): flinkyarn " + ", ".join(
        f"{r['whole_s']:.1f}/{r['job_s']:.1f}" for r in ours) + "; PySpark " + ", ".join(
        f"{r['whole_s']:.1f}/{r['job_s']:.1f}" for r in spark))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=500,
                        help="corpus size in MB (default 500)")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of each side, alternating (default 3)")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep both sides' Parquet output of the last run")
    parser.add_argument("--pyspark-job", nargs=2, metavar=("INPUT_URI", "OUTPUT_URI"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pyspark_job:
        pyspark_job(*args.pyspark_job)
        return

    corpus, corpus_bytes = ensure_corpus(args.megabytes)
    warm_page_cache(corpus)
    work = RESULTS_DIR / "wordcount-runs"
    shutil.rmtree(work, ignore_errors=True)
    ours: list[dict] = []
    spark: list[dict] = []
    check = None
    load_before = os.getloadavg()
    for index in range(args.runs):
        sides = [("flinkyarn", run_flinkyarn, ours), ("pyspark", run_pyspark, spark)]
        if index % 2:
            sides.reverse()
        for name, run, out in sides:
            print(f"run {index + 1}/{args.runs}: {name} ...", file=sys.stderr, flush=True)
            result = run(corpus, work / f"{name}-output", work / f"{name}-{index + 1}.log")
            out.append(result)
            print(f"  whole {result['whole_s']:.1f} s, job {result['job_s']:.1f} s",
                  file=sys.stderr, flush=True)
        check = same_counts(work / "flinkyarn-output", work / "pyspark-output")
    if not args.keep_output:
        for name in ("flinkyarn", "pyspark"):
            shutil.rmtree(work / f"{name}-output", ignore_errors=True)

    summary = summarize(ours, spark)
    print_report(summary, ours, spark, corpus_bytes, check)
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "corpus": {"folder": str(corpus.relative_to(REPO)), "bytes": corpus_bytes,
                   "files": FILES, **check},
        "settings": {"parallelism": PARALLELISM, "pyspark_master": f"local[{SPARK_CORES}]",
                     "pyspark_driver_memory": SPARK_MEMORY},
        "summary": summary,
        "flinkyarn_runs": ours,
        "pyspark_runs": spark,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {RESULTS.relative_to(REPO)} (logs of each run in "
          f"{work.relative_to(REPO)}/)")


if __name__ == "__main__":
    main()
