"""How the wordcount scales with its input (issue 17): 20 MB, 200 MB and 2 GB of generated
text (examples/make_corpus.py, as bench/wordcount.py makes it), local and on YARN.

For each size, one after the other:
- `flinkyarn run -t local examples/wordcount.py` at parallelism 2, and the same count as
  one plain PySpark job on `local[2]` (bench/wordcount.py's, the baseline of the size);
- `flinkyarn run -t yarn-per-job examples/wordcount.py` at parallelism 2, the corpus on
  HDFS, its output on HDFS.
Every output is checked: the three give the same words with the same counts.

Figures per run: wall seconds and seconds per 100 MB of input (cost grows at most
linearly when this stays flat or falls); the peak resident memory of each TaskExecutor
(its process and everything it started: its Spark JVM, Spark's Python workers), sampled
every 0.5 s; and the peak of what the run's scratch space held (local: the folder given
as io.tmp.dirs and TMPDIR; YARN: the application's folders under the NodeManagers'
local dirs), against the input's size: a run may spill, never the whole input.

usage: .venv/bin/python bench/scale.py [--sizes 20,200,2000] [--only local,yarn]
Needs the local Hadoop for the YARN runs (`integration/cluster up --nodes 2`;
HADOOP_CONF_DIR set by `eval "$(integration/cluster env)"`). Writes
bench/results/scale.json; the corpora stay in bench/results/ for the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (hdfs, parquet_counts, same, timed)
import wordcount  # noqa: E402  (the corpus, PySpark's job, Timed)
from taskexecutor.reaper import proc_stat  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "scale.json"
WORK = REPO / "bench" / "results" / "scale-runs"
NODES = REPO / ".local-hadoop" / "nodes"
PAGE = os.sysconf("SC_PAGE_SIZE")


# ============================================================ what the runs hold

def _processes() -> dict[int, tuple[int, int, list[str]]]:
    """pid -> (parent pid, resident bytes, command line) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = [part.decode(errors="replace") for part in cmdline.read().split(b"\0") if part]
        except OSError:
            continue
        if fields is not None:
            table[int(entry)] = (int(fields[1]), int(fields[21]) * PAGE, command)
    return table


def taskexecutor_memory() -> dict[int, int]:
    """Resident bytes of each TaskExecutor (`python -m taskexecutor`) with all it started."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    def is_taskexecutor(pid: int) -> bool:
        command = table.get(pid, (0, 0, []))[2]
        return "-m" in command and command[command.index("-m") + 1:][:1] == ["taskexecutor"]

    memory = {}
    for pid, (parent, _, _) in table.items():
        # A child forked by a TaskExecutor (not yet exec'd) has its command line: it
        # counts with its parent.
        if not is_taskexecutor(pid) or is_taskexecutor(parent):
            continue
        total, stack = 0, [pid]
        while stack:
            current = stack.pop()
            total += table.get(current, (0, 0, []))[1]
            stack.extend(children.get(current, []))
        memory[pid] = total
    return memory


def folder_bytes(folders: list[Path]) -> int:
    """What the files under `folders` hold (symbolic links not followed)."""
    total = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    pass
    return total


class Sampler:
    """Samples, while a run goes, the peak memory of each TaskExecutor and the peak of
    what `scratch()` (the folders of the run's scratch space) holds."""

    def __init__(self, scratch) -> None:
        self.scratch = scratch
        self.memory: dict[int, int] = {}
        self.scratch_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        beat = 0
        while not self._stop.wait(0.5):
            for pid, rss in taskexecutor_memory().items():
                self.memory[pid] = max(rss, self.memory.get(pid, 0))
            beat += 1
            if beat % 4 == 0:  # walking the folders costs more: every 2 s
                self.scratch_peak = max(self.scratch_peak, folder_bytes(self.scratch()))

    def report(self) -> dict:
        return {"taskexecutors": len(self.memory),
                "peak_rss_mb": sorted(round(m / 2**20) for m in self.memory.values()),
                "scratch_peak_mb": round(self.scratch_peak / 2**20, 1)}


# ===================================================================== runs

def local_run(corpus: Path, megabytes: float) -> dict:
    scratch = WORK / "local-scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    output = WORK / "local-out"
    shutil.rmtree(output, ignore_errors=True)
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch)  # wordcount.Timed passes os.environ on
    try:
        with Sampler(lambda: [scratch]) as sampler:
            run = wordcount.Timed([str(wordcount.FLINKYARN), "run", "-t", "local",
                                   "-D", f"io.tmp.dirs={scratch}", "examples/wordcount.py",
                                   "--input", str(corpus), "--output", str(output),
                                   "--parallelism", str(wordcount.PARALLELISM)],
                                  WORK / f"local-{megabytes:g}mb.log")
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
    run.check("flinkyarn run -t local")
    return {"seconds": run.seconds, **sampler.report()}


def pyspark_run(corpus: Path, megabytes: float) -> dict:
    result = wordcount.run_pyspark(corpus, WORK / "pyspark-out", WORK / f"pyspark-{megabytes:g}mb.log")
    return {"seconds": result["whole_s"], "job_s": result["job_s"]}


def application_folders() -> list[Path]:
    return [path for path in NODES.glob("*/local/usercache/*/appcache/*") if path.is_dir()]


def yarn_run(corpus: Path, megabytes: float, base: str) -> dict:
    source = f"{base}/corpus-{megabytes:g}mb"
    if len(peers.hdfs("-ls", source, check=False).splitlines()) < wordcount.FILES + 1:
        print(f"  putting the {megabytes:g} MB corpus on HDFS", file=sys.stderr, flush=True)
        peers.hdfs("-mkdir", "-p", source)
        peers.hdfs("-put", "-f", *map(str, sorted(corpus.glob("part-*.txt"))), source)
    sink = f"{base}/out-{megabytes:g}mb"
    peers.hdfs("-rm", "-r", "-f", "-skipTrash", sink)
    before = set(application_folders())
    with Sampler(lambda: [p for p in application_folders() if p not in before]) as sampler:
        seconds, _ = peers.timed([*peers.FLINKYARN, "run", "-t", "yarn-per-job",
                                  "--name", f"scale {megabytes:g} MB", "examples/wordcount.py",
                                  "--input", source, "--output", sink,
                                  "--parallelism", str(wordcount.PARALLELISM)], dict(os.environ),
                                 timeout=3600)
    return {"seconds": seconds, "sink": sink, **sampler.report()}


def hdfs_base() -> str:
    return peers.hdfs_base().rpartition("/")[0] + "/flinkyarn-bench-scale"


def check(megabytes: float, results: dict, base: str) -> dict:
    """The same words with the same counts from every run of this size."""
    counts = {}
    if "local" in results:
        counts["flinkyarn local"] = peers.parquet_counts(str(WORK / "local-out"), "word")
        counts["pyspark local"] = peers.parquet_counts(str(WORK / "pyspark-out"), "word")
    if "yarn" in results:
        counts["flinkyarn yarn"] = peers.parquet_counts(results["yarn"].pop("sink"), "word")
    return peers.same(f"wordcount {megabytes:g} MB", counts)


# ==================================================================== report

def per_100mb(seconds: float, megabytes: float) -> float:
    return round(seconds / megabytes * 100, 2)


def print_report(rows: list[dict]) -> None:
    print("\nwordcount at scale (parallelism 2; seconds, seconds per 100 MB, peak RSS per "
          "TaskExecutor, peak scratch)")
    for row in rows:
        mb = row["megabytes"]
        parts = [f"{mb:>6g} MB"]
        for name in ("local", "pyspark", "yarn"):
            run = row.get(name)
            if run is None:
                continue
            text = f"{name} {run['seconds']:.1f} s ({per_100mb(run['seconds'], mb):.2f} s/100MB)"
            if "peak_rss_mb" in run:
                text += f", RSS {run['peak_rss_mb']} MB, scratch {run['scratch_peak_mb']} MB"
            parts.append(text)
        print("  " + " | ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,200,2000", help="corpus sizes in MB")
    parser.add_argument("--only", default="local,yarn", help="local, yarn or both")
    args = parser.parse_args()
    sizes = [float(size) for size in args.sizes.split(",")]
    targets = set(args.only.split(","))
    if targets - {"local", "yarn"}:
        raise SystemExit(f"--only: unknown {', '.join(sorted(targets - {'local', 'yarn'}))}")
    if "yarn" in targets and not os.environ.get("HADOOP_CONF_DIR"):
        raise SystemExit('the YARN runs need HADOOP_CONF_DIR: eval "$(integration/cluster env)"')
    WORK.mkdir(parents=True, exist_ok=True)
    base = hdfs_base() if "yarn" in targets else ""
    rows = []
    for megabytes in sizes:
        corpus, size = wordcount.ensure_corpus(megabytes)
        wordcount.warm_page_cache(corpus)
        row: dict = {"megabytes": megabytes, "bytes": size}
        if "local" in targets:
            print(f"{megabytes:g} MB: flinkyarn local", file=sys.stderr, flush=True)
            row["local"] = local_run(corpus, megabytes)
            print(f"{megabytes:g} MB: PySpark local", file=sys.stderr, flush=True)
            row["pyspark"] = pyspark_run(corpus, megabytes)
        if "yarn" in targets:
            print(f"{megabytes:g} MB: flinkyarn per-job on YARN", file=sys.stderr, flush=True)
            row["yarn"] = yarn_run(corpus, megabytes, base)
        row["output"] = check(megabytes, row, base)
        rows.append(row)
        print_report(rows)
    if base:  # the corpora stay there for the next run, as they do here
        peers.hdfs("-rm", "-r", "-f", "-skipTrash", f"{base}/out-*")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, "
        f"{os.cpu_count()} cores", "rows": rows}, indent=2) + "\n")
    print(f"\nwritten {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
