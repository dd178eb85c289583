"""The tiny job of bench/peers.py, flinkyarn's side: the numbers 0..999, counted per
n mod 10 after a hash exchange, written as Parquet (k, count) to OUTPUT.

usage: flinkyarn run [-t TARGET] bench/peers/tiny_flinkyarn.py OUTPUT
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import Pipeline


def numbers(n: pa.Array) -> pa.Table:
    return pa.table({"k": pc.subtract(n, pc.multiply(pc.divide(n, 10), 10))})


def main(output: str) -> None:
    pipeline = Pipeline("tiny", parallelism=2)
    pipeline.from_data_generator(numbers, count=1000).key_by("k").count().write_parquet(output)
    pipeline.execute()


if __name__ == "__main__":
    main(sys.argv[1])
