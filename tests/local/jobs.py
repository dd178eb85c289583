"""Task functions and pipelines for the tests that run on clusters (local and YARN).
Task functions coordinate with the test through files in a folder: `started-*` /
`finished-*` / `stopped-*` markers, and a `go` file they wait for. The local conftest
registers this module for pickling by value, so TaskExecutors need not import the
tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from flinkyarn import Pipeline
from flinkyarn.pipeline.operator import Operator
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


def summing_pipeline(out: str, configuration: dict[str, str] | None = None) -> Pipeline:
    """Sums 1..N per key across two subtasks: the result is exact only if no record is
    lost or counted twice (column n_sum adds up to N(N+1)/2)."""
    p = Pipeline("sum", parallelism=2, configuration=configuration)
    p.from_generator(slow_numbers).key_by("k").sum("n").write_parquet(str(out))
    return p


def always_fails(batch):
    raise ValueError("column n has a negative value")


class FailOnce:
    """A map that fails the first time any attempt calls it (a marker file remembers;
    all TaskExecutors are on this machine), then passes batches on."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self, batch):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("transient failure")
        return batch


class SlowOnSubtaskZero(Operator):
    """Passes batches on; subtask 0 writes its TaskExecutor's pid to `folder`/pid-ATTEMPT
    and dawdles, so a test can kill it in the middle while subtask 1 runs ahead."""

    name = "consume"

    def __init__(self, folder: str):
        self.folder = folder

    def open(self, context):
        super().open(context)
        if context.subtask_index == 0:
            with open(os.path.join(self.folder, f"pid-{context.attempt_number}"), "w") as f:
                f.write(str(os.getpid()))

    def process(self, batch, input_index):
        if self.context.subtask_index == 0:
            time.sleep(0.1)
        return (batch,)
