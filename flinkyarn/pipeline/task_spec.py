"""What one JobVertex of a pipeline runs: its chain of operators, where its inputs come
from and how its outputs are partitioned. The JobGraph builder cloudpickles a
StreamTaskSpec as the vertex's invokable; the TaskExecutor calls it with the task's
context, which runs it as a StreamTask."""

from __future__ import annotations

from dataclasses import dataclass

from flinkyarn.pipeline.operator import Operator

PARTITIONERS = ("forward", "rebalance", "hash", "broadcast")


@dataclass(frozen=True)
class InputSpec:
    """Input `i` of the chain head reads the results of producer vertex producer_vertex_id."""

    producer_vertex_id: str


@dataclass(frozen=True)
class OutputSpec:
    """The chain's output to consumer vertex consumer_vertex_id, partitioned so.
    hash: rows with equal key_columns values go to the same consumer subtask."""

    consumer_vertex_id: str
    partitioner: str
    key_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.partitioner not in PARTITIONERS:
            raise ValueError(f"unknown partitioner {self.partitioner!r}; one of {PARTITIONERS}")
        if (self.partitioner == "hash") != bool(self.key_columns):
            raise ValueError("a hash partitioner needs key columns, and only it has them")


@dataclass(frozen=True)
class StreamTaskSpec:
    operators: tuple[Operator, ...]    # the chain, head first; a SourceOperator heads a source
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()

    def __call__(self, context) -> None:
        from taskexecutor.stream_task import run_stream_task  # only inside a TaskExecutor
        run_stream_task(self, context)
