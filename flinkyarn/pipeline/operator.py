"""The contract between a pipeline's operators and the StreamTask that runs them.

A JobVertex of a pipeline runs a chain of operators in one task thread. Data moves as
Arrow RecordBatches. The StreamTask (taskexecutor/stream_task.py) calls, for each
operator of the chain, head first:

    open(context)                    once, before any data; may start resources
    process(batch, input_index)      for each batch arriving on input `input_index`
                                     (the chain head's inputs are the vertex's inputs in
                                     JobGraph order; chained operators have input 0)
    process_watermark(watermark)     when the event time advanced (the least of the
                                     inputs' watermarks; MAX_WATERMARK at the end of the
                                     input); what it returns goes on, a Watermark too
    end_input(input_index)           when input `input_index` has no more data
    finish()                         after every input ended: flush what is held back
                                     (aggregations, Spark stages emit here)
    close()                          always, also after a failure or cancellation

`process`, `end_input` and `finish` return the batches to pass on (an iterable, possibly
empty; `process` and `process_watermark` may put Watermarks among them); the StreamTask
hands them to the next operator of the chain, or, for the last one, to the vertex's
outputs. A source is the head of its chain and has no inputs: the
StreamTask iterates `SourceOperator.read()` instead of calling `process`.

Checkpoints (a streaming job with execution.checkpointing.interval), between two calls
above, on the task thread:

    initialize_state(state)          after open(), when the task starts from a checkpoint
                                     that holds state of this operator (by its id)
    snapshot_state(checkpoint_id)    at the checkpoint's barrier: the operator's state as
                                     of everything before it, as named Arrow tables
    notify_checkpoint_complete(id)   the checkpoint completed: commit what it covers; what
                                     it returns goes on (after the barrier, as process's)

`state_redistribution(name)` says how the state `name` is shared out when the job resumes
at another parallelism (flinkyarn.key_groups.Redistribution: by key group, union, by
subtask; by default it cannot be, and the operator keeps its parallelism); after a
rescale, initialize_state gets the subtask's share.

Operators are cloudpickled on the client and unpickled in the TaskExecutor; one
instance per subtask. An exception from any method fails the task; its message should
name the bad input (file, column), and the StreamTask prefixes the operator's name.
Operators never block on the network themselves: backpressure is the StreamTask's
business (its writes to result partitions block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from flinkyarn.jobgraph import FileOutput

if TYPE_CHECKING:
    # For annotations only: a client that submits a PySpark script (an Operator too)
    # imports neither Arrow nor numpy, half a second of its start.
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from flinkyarn.gateways.job_master import OutputChunk
    from flinkyarn.key_groups import Redistribution


class OperatorContext(Protocol):
    """What a running operator may know and use."""

    subtask_index: int
    parallelism: int
    attempt_number: int
    job_id: str
    task_name: str        # e.g. "Source: text -> flat_map (1/2)"
    batch_size: int       # pipeline.batch-size: most rows per batch to emit
    tmp_dir: str          # a scratch folder of this task, removed after it
    attempt_id: str       # this execution attempt of the subtask
    environment: object   # the TaskExecutor's TaskEnvironment (a PySpark driver reads its
                          # configuration and scratch folder)
    checkpointing: bool   # the job takes checkpoints: snapshot_state will be called

    def is_cancelled(self) -> bool:
        ...

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Runs `hook` (from another thread) when the task is cancelled; at once if it is."""
        ...

    def report_output(self, chunks: list[OutputChunk], spark_application: str | None = None,
                      spark_tracking_url: str | None = None) -> None:
        """Sends what the task printed (OutputChunks) to the JobMaster, which shows it to
        attached clients; blocks until it has them."""
        ...

    def spark(self) -> "SparkSession":
        """The TaskExecutor's SparkSession, started on first use and shared by its slots."""
        ...


MIN_TIMESTAMP = -(2 ** 63)
MAX_TIMESTAMP = 2 ** 63 - 1


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time (flinkyarn/pipeline/event_time.py): no record with an event time (ms
    since the epoch) <= `timestamp` is still to come."""

    timestamp: int


MAX_WATERMARK = Watermark(MAX_TIMESTAMP)  # the end of the input


class Operator:
    """Base class: a stateless pass-through. Override what the operator needs.
    (`process` may also put Watermarks among the batches it returns.)"""

    name: str = "operator"

    def open(self, context: OperatorContext) -> None:
        self.context = context

    def process(self, batch: pa.RecordBatch, input_index: int) -> Iterable[Any]:
        return (batch,)

    def process_watermark(self, watermark: Watermark) -> Iterable[pa.RecordBatch | Watermark]:
        """The event time advanced: what is due (windows) and then the watermark, which
        goes on to the next operator unless it is left out."""
        return (watermark,)

    def end_input(self, input_index: int) -> Iterable[pa.RecordBatch]:
        return ()

    def finish(self) -> Iterable[pa.RecordBatch]:
        return ()

    def close(self) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> Mapping[str, pa.Table] | None:
        """This operator's state as of the barrier of `checkpoint_id` (None: none)."""
        return None

    def initialize_state(self, state: Mapping[str, pa.Table]) -> None:
        """The state this operator's subtask had in the checkpoint the task starts from."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> Iterable[pa.RecordBatch] | None:
        """Checkpoint `checkpoint_id` completed everywhere; returns what goes on, if anything."""
        return None

    def state_redistribution(self, name: str) -> Redistribution:
        """How the state `name` of snapshot_state() is shared out at another parallelism
        (by default it is not: the operator cannot be rescaled)."""
        from flinkyarn.key_groups import Redistribution

        return Redistribution()

    def file_output(self) -> FileOutput | None:
        """The folder this operator writes, if it is a file sink whose folder the client
        checks and the JobMaster commits (see flinkyarn.connectors.outputs). Called on the
        client when the JobGraph is built, never in a task."""
        return None


class SourceOperator(Operator):
    """The head of a source chain: reads this subtask's share of the input. An
    unbounded source yields None when it has nothing for now (at least every 100 ms
    while it waits): the task then takes checkpoint triggers, which otherwise wait for
    its next batch. Its position (what it read) is its state."""

    def read(self) -> Iterable[pa.RecordBatch | None]:
        raise NotImplementedError
