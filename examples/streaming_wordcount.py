"""Streaming word count: watches a folder and counts words, as examples/wordcount.py does
(maximal runs of [a-z0-9] in the lower-cased text), in tumbling windows of event time;
writes rows word (string), count (int64) through the exactly-once Parquet sink.

Files whose names start with `.` or `_` are left out, so a writer renames a finished
file into place. A line's event time is when it was read (ingestion time), so each
window holds what arrived in it. With --until-files N the source ends after N files,
the last windows fire and the job finishes; summing `count` per word over all rows
gives each word's total.

usage: flinkyarn run [-t TARGET] [-D execution.checkpointing.interval=1s ...]
           examples/streaming_wordcount.py --input DIR --output DIR [--until-files N]
           [--window SECONDS] [--monitor-interval SECONDS]
DIR may be local or hdfs://. Checkpoint and restart settings come from -D as usual.
"""

from __future__ import annotations

import argparse
import time

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import Pipeline, TumblingEventTimeWindows


def words_read_now(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The words of the lines, each with the time it was read (ms since the epoch)."""
    lowered = pc.utf8_lower(batch.column("line"))
    words = pc.list_flatten(pc.split_pattern_regex(lowered, pattern="[^a-z0-9]+"))
    words = pc.filter(words, pc.not_equal(words, ""))
    now = pa.array([int(time.time() * 1000)] * len(words), pa.int64())
    return pa.record_batch([words, now], names=["word", "read_at"])


def word_and_count(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.select(["word", "count"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--until-files", type=int, default=None,
                        help="end after this many files (default: run until cancelled)")
    parser.add_argument("--window", type=float, default=10.0, help="window size in seconds")
    parser.add_argument("--monitor-interval", type=float, default=1.0,
                        help="how often the folder is listed, in seconds")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    pipeline = Pipeline("streaming wordcount", parallelism=args.parallelism, mode="streaming")
    lines = pipeline.read_text(args.input, monitor_interval=args.monitor_interval,
                               until_files=args.until_files)
    words = lines.flat_map(words_read_now, name="split words") \
        .assign_timestamps("read_at", 0, name="read time")
    counts = words.key_by("word").window(TumblingEventTimeWindows(args.window)) \
        .count(name="count words")
    counts.map(word_and_count, name="word, count").write_parquet(args.output)
    result = pipeline.execute()
    raise SystemExit(0 if result.succeeded else 1)


if __name__ == "__main__":
    main()
