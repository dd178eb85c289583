"""Task functions for local-cluster tests. They coordinate with the test through files
in a folder: `started-*` / `finished-*` / `stopped-*` markers, and a `go` file they wait for.
The conftest registers this module for pickling by value, so TaskExecutors need not
import the tests."""

from __future__ import annotations

from pathlib import Path

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
