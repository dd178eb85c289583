"""What one JobVertex of a pipeline runs: its chain of operators, where its inputs come
from and how its outputs are partitioned. The JobGraph builder cloudpickles a
StreamTaskSpec as the vertex's invokable; the TaskExecutor recognises the unpickled spec
and runs it as a StreamTask of its own (taskexecutor/stream_task.py). A spec is data: it
is not called, and this package does not know the TaskExecutor."""

from __future__ import annotations

from dataclasses import dataclass

from flinkyarn.jobgraph import ShipStrategy, enum_value
from flinkyarn.pipeline.operator import Operator



@dataclass(frozen=True)
class InputSpec:
    """Input `i` of the chain head reads the results of producer vertex producer_vertex_id."""

    producer_vertex_id: str


@dataclass(frozen=True)
class OutputSpec:
    """The chain's output to consumer vertex consumer_vertex_id, partitioned so.
    hash: rows with equal key_columns values go to the same consumer subtask. A
    partitioner given by name is kept as its ShipStrategy; an unknown name raises."""

    consumer_vertex_id: str
    partitioner: ShipStrategy
    key_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitioner",
                           enum_value(ShipStrategy, self.partitioner, "partitioner"))
        if (self.partitioner is ShipStrategy.HASH) != bool(self.key_columns):
            raise ValueError("a hash partitioner needs key columns, and only it has them")


@dataclass(frozen=True)
class StreamTaskSpec:
    operators: tuple[Operator, ...]    # the chain, head first; a SourceOperator heads a source
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()
    operator_ids: tuple[str, ...] = ()  # the operators' stable ids (their state's keys)
