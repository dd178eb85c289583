"""What counting task metrics costs (issue 16): wordcount throughput with every task
counting its records, bytes and busy/backpressured/idle time (`metrics.task-io: true`,
the default) against the same runs counting nothing (`false`), measured in one run.

Two programs over bench/wordcount.py's generated corpus (default 200 MB), each as
`flinkyarn run -t local PROGRAM --input CORPUS --output OUT --parallelism 2`:
  wordcount   examples/wordcount.py: the counting is a Spark stage, so most of the time
              is Spark's and the tasks that count are the source and the split;
  streamed    the same word count with the pipeline's own keyed count (no Spark):
              every record passes three counting tasks and a hash exchange, the case
              where counting is the largest share of the work.
The figure is each program's job duration (the CLI's "Job ... FINISHED in X s", the
JobMaster's start to end) with counting on, as a ratio to off, and the throughput in
MB/s of both. Runs alternate (on, off, off, on, ...); figures are medians. Both outputs
are read back: the same words with the same counts, or the run fails.

These machines are shared and noisy (2 cores): compare ratios between runs, not seconds.

usage: .venv/bin/python bench/metrics_cost.py [--megabytes N] [--runs N]
Writes bench/results/metrics_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wordcount as bench_wordcount  # noqa: E402  the corpus and the CLI runner

REPO = bench_wordcount.REPO
RESULTS = bench_wordcount.RESULTS_DIR / "metrics_cost.json"

STREAMED = '''
"""examples/wordcount.py with the pipeline's keyed count instead of a Spark stage."""
import argparse
import pyarrow as pa
import pyarrow.compute as pc
from flinkyarn import Pipeline

def split_words(batch):
    words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(batch.column("line")),
                                                  pattern="[^a-z0-9]+"))
    return pa.record_batch([pc.filter(words, pc.not_equal(words, ""))], names=["word"])

parser = argparse.ArgumentParser()
parser.add_argument("--input"); parser.add_argument("--output")
parser.add_argument("--parallelism", type=int, default=2)
args = parser.parse_args()
p = Pipeline("streamed wordcount", parallelism=args.parallelism)
p.read_text(args.input).flat_map(split_words, name="split words").key_by("word") \\
    .count(name="count words").write_parquet(args.output)
p.execute()
'''


def run(program: Path, corpus: Path, output: Path, counting: bool, log: Path) -> float:
    """The job's seconds, as the CLI prints them."""
    shutil.rmtree(output, ignore_errors=True)
    timed = bench_wordcount.Timed(
        [str(bench_wordcount.FLINKYARN), "run", "-t", "local",
         "-D", f"metrics.task-io={'true' if counting else 'false'}", str(program),
         "--input", str(corpus), "--output", str(output), "--parallelism", "2"], log)
    timed.check("flinkyarn run")
    line = timed.first(lambda text: bench_wordcount.JOB_LINE.match(text) is not None)
    match = bench_wordcount.JOB_LINE.match(line[1]) if line else None
    if match is None or match.group(2) != "FINISHED":
        raise RuntimeError(f"no 'Job ... FINISHED' line from flinkyarn run (log: {log})")
    return float(match.group(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--runs", type=int, default=3, help="runs of each setting and program")
    args = parser.parse_args()

    corpus, corpus_bytes = bench_wordcount.ensure_corpus(args.megabytes)
    bench_wordcount.warm_page_cache(corpus)
    work = Path(tempfile.mkdtemp(prefix="flinkyarn-metrics-cost-"))
    streamed = work / "streamed_wordcount.py"
    streamed.write_text(STREAMED)
    programs = {"wordcount": REPO / "examples" / "wordcount.py", "streamed": streamed}
    times: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in programs}
    try:
        for round_number in range(args.runs):
            order = (True, False) if round_number % 2 == 0 else (False, True)
            for name, program in programs.items():
                for counting in order:
                    output = work / f"{name}-{'on' if counting else 'off'}"
                    log = work / f"{name}-{round_number}-{'on' if counting else 'off'}.log"
                    seconds = run(program, corpus, output, counting, log)
                    times[name][counting].append(seconds)
                    print(f"  {name:9} counting {'on ' if counting else 'off'}: {seconds:6.2f} s",
                          flush=True)
                # Raises if the two outputs differ in a word or a count.
                bench_wordcount.same_counts(work / f"{name}-on", work / f"{name}-off")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    megabytes = corpus_bytes / 1e6
    figures = {}
    for name, by in times.items():
        on, off = statistics.median(by[True]), statistics.median(by[False])
        figures[name] = {"on_s": on, "off_s": off, "ratio_on_to_off": round(on / off, 3),
                         "on_mb_per_s": round(megabytes / on, 1),
                         "off_mb_per_s": round(megabytes / off, 1),
                         "runs_on": by[True], "runs_off": by[False]}
    result = {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
              "cores": os.cpu_count(), "corpus_mb": round(megabytes, 1),
              "runs": args.runs, "figures": figures}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nmetrics cost over {megabytes:.0f} MB, medians of {args.runs} "
          f"(job seconds; ratio = counting on / off):")
    for name, figure in figures.items():
        print(f"  {name:9} on {figure['on_s']:6.2f} s ({figure['on_mb_per_s']} MB/s)  "
              f"off {figure['off_s']:6.2f} s ({figure['off_mb_per_s']} MB/s)  "
              f"ratio {figure['ratio_on_to_off']:.3f}")
    print(f"written to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
