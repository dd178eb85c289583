"""Word count. Words are the maximal runs of [a-z0-9] in the lower-cased text. The
counting after the hash exchange on `word` runs as a Spark stage. The output is a
folder of Parquet part files with columns word (string) and count (int64), one row
per distinct word.

usage: flinkyarn run [-t TARGET] examples/wordcount.py --input PATH --output DIR [--top N]
       (also: python examples/wordcount.py ..., which runs it on a local cluster)
PATH and DIR may be local or hdfs:// paths.
"""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import Pipeline


def split_words(batch: pa.RecordBatch) -> pa.RecordBatch:
    lowered = pc.utf8_lower(batch.column("line"))
    words = pc.list_flatten(pc.split_pattern_regex(lowered, pattern="[^a-z0-9]+"))
    words = pc.filter(words, pc.not_equal(words, ""))
    return pa.record_batch([words], names=["word"])


def count_words(words):
    return words.groupBy("word").count()


def top_words(output: str, n: int) -> list[tuple[str, int]]:
    from flinkyarn.connectors.filesystems import read_parquet

    table = read_parquet(output)
    top = table.sort_by([("count", "descending"), ("word", "ascending")]).slice(0, n)
    return list(zip(top.column("word").to_pylist(), top.column("count").to_pylist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--top", type=int, default=0, help="print the N most frequent words")
    args = parser.parse_args()

    pipeline = Pipeline("wordcount", parallelism=args.parallelism)
    lines = pipeline.read_text(args.input)
    words = lines.flat_map(split_words, name="split words")
    counts = words.key_by("word").spark(count_words, name="count words")
    counts.write_parquet(args.output)
    result = pipeline.execute()

    if result.succeeded and args.top:
        print(f"top {args.top} words:")
        for word, count in top_words(args.output, args.top):
            print(f"{count:>10}  {word}")


if __name__ == "__main__":
    main()
