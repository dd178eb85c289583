"""Task functions for local-cluster tests. They coordinate with the test through files
in a folder: `started-*` / `finished-*` / `stopped-*` markers, and a `go` file they wait for.
The conftest registers this module for pickling by value, so TaskExecutors need not
import the tests."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import Pipeline

from taskexecutor.task import TaskCancelled


def mark(folder: Path, what: str, ctx) -> None:
    (folder / f"{what}-{ctx.vertex_name}-{ctx.subtask_index}-{ctx.attempt_number}").touch()


def quick(folder: Path):
    def run(ctx):
        mark(folder, "finished", ctx)
    return run


def wait_for_go(folder: Path, limit: float = 120.0):
    """Runs until the test creates `go` (then finishes) or the task is cancelled."""
    def run(ctx):
        mark(folder, "started", ctx)
        waited = 0.0
        try:
            while not (folder / "go").exists():
                ctx.sleep(0.05)
                waited += 0.05
                if waited > limit:
                    raise TimeoutError("the test never said go")
        except TaskCancelled:
            mark(folder, "stopped", ctx)
            raise
        mark(folder, "finished", ctx)
    return run


def failing(message: str):
    def run(ctx):
        raise ValueError(message)
    return run


def markers(folder: Path, what: str) -> set[str]:
    return {p.name[len(what) + 1:] for p in folder.glob(f"{what}-*")}


N = 20_000


def slow_numbers(subtask: int, parallelism: int):
    """1..N split between the subtasks, slowly enough (2 s per subtask at parallelism 2)
    to kill something in the middle; column k = n mod 4 is a key."""
    numbers = list(range(subtask + 1, N + 1, parallelism))
    for start in range(0, len(numbers), 500):
        time.sleep(0.1)
        chunk = pa.array(numbers[start:start + 500], pa.int64())
        yield pa.record_batch([chunk, pc.bit_wise_and(chunk, 3)], names=["n", "k"])


def summing_pipeline(out: str) -> Pipeline:
    """Sums 1..N per key across two subtasks: the result is exact only if no record is
    lost or counted twice (column n_sum adds up to N(N+1)/2)."""
    p = Pipeline("sum", parallelism=2)
    p.from_generator(slow_numbers).key_by("k").sum("n").write_parquet(str(out))
    return p
