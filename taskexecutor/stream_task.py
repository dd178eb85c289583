"""The StreamTask: runs one subtask of a pipeline vertex in its task thread.

    inputs (InputGate over every consumed partition: local or remote channels)
      -> chain of operators (head first; a source reads instead)
      -> outputs (one ResultPartition per consumer vertex, written through its partitioner)

Order of calls on the chain is the operator contract's (flinkyarn/pipeline/operator.py).
End of partition, cancellation and failure are explicit: on success every produced
partition is finished; on failure it is failed with the error (consumers see it); on
cancellation gates are closed and partitions released, which wakes a thread blocked
on backpressure or on an empty channel.

Checkpoints: a source task takes the JobMaster's trigger between two batches; any other
task takes the barrier once its input gate aligned it. Either passes the barrier on to
every output first, then writes each operator's snapshot_state() under the job's
checkpoint folder (flinkyarn/checkpoints.py) and acknowledges with the files; a
snapshot that fails declines the checkpoint (the task goes on). A confirmation goes to
every operator (notify_checkpoint_complete). A task deployed with a restore gives each
operator its state back (initialize_state) before the first batch.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

import msgspec
import pyarrow as pa

from flinkyarn import checkpoints, retry
from flinkyarn.checkpoints import TaskStateSnapshot
from flinkyarn.key_groups import Redistribution
from flinkyarn.gateways.job_master import PartitionLocation, PartitionLocationState
from flinkyarn.gateways.task_executor import ConsumedPartition
from flinkyarn.pipeline.operator import MAX_WATERMARK, Operator, SourceOperator, Watermark
from flinkyarn.pipeline.pyspark_script import PySparkScript
from flinkyarn.pipeline.task_spec import StreamTaskSpec
from taskexecutor.environment import TaskEnvironment
from taskexecutor.network.errors import PartitionFailed, PartitionNotFound
from taskexecutor.network.input_gate import (CheckpointAborted, InputGate, LocalInputChannel,
                                             RemoteInputChannel)
from taskexecutor.network.partition import ResultPartition, ResultPartitionID
from taskexecutor.network.partitioner import Partitioner, make_partitioner
from taskexecutor.network.subpartition import CheckpointBarrier
from taskexecutor.spark.script_task import PySparkDriver
from taskexecutor.task import TaskCancelled, TaskContext, TriggerBarrier

log = logging.getLogger(__name__)

# Between questions to the JobMaster for the location of a producer not deployed yet.
_LOCATE_BACKOFF = retry.Backoff(0.01, 0.5)


class OperatorError(Exception):
    """An operator raised; the message names it (and the task runs no further)."""


class StreamOperatorContext:
    """The OperatorContext of flinkyarn/pipeline/operator.py, for one subtask."""

    def __init__(self, task: TaskContext, environment: TaskEnvironment, tmp_dir: str) -> None:
        self._task = task
        self.subtask_index = task.subtask_index
        self.parallelism = task.parallelism
        self.attempt_number = task.attempt_number
        self.job_id = task.job_id
        self.task_name = task.task_name
        self.batch_size = environment.network.batch_size
        self.tmp_dir = tmp_dir
        self.attempt_id = task.deployment.attempt_id
        self.environment = environment
        self.checkpointing = bool(task.deployment.checkpoint_dir)

    def is_cancelled(self) -> bool:
        return self._task.is_cancelled()

    def on_cancel(self, hook) -> None:
        self._task.on_cancel(hook)

    def report_output(self, chunks, spark_application=None, spark_tracking_url=None) -> None:
        self._task.report_output(chunks, spark_application, spark_tracking_url)

    def spark(self):
        return self.environment.spark.get()


def _named(operator: Operator, what: str, *args):
    """Calls an operator method, naming the operator in any error it raises."""
    try:
        return getattr(operator, what)(*args)
    except TaskCancelled:
        raise
    except Exception as error:
        raise OperatorError(f"operator {operator.name!r}: {type(error).__name__}: {error}") from error


def _call(operator: Operator, what: str, *args) -> list[pa.RecordBatch]:
    """Calls an operator method that returns batches, naming the operator in errors."""
    result = _named(operator, what, *args)
    return [] if result is None else list(result)


def _batches(source: SourceOperator, context: StreamOperatorContext) -> Iterable[pa.RecordBatch | None]:
    """What a source gives: a PySpark script's driver process runs here to its end and
    gives nothing; any other source is read."""
    if isinstance(source, PySparkScript):
        PySparkDriver(source, context).run()  # returns when cancelled, raises when failed
        if context.is_cancelled():
            raise TaskCancelled()
        return ()
    return source.read()


def _read(source: SourceOperator, context: StreamOperatorContext) -> Iterable[pa.RecordBatch | None]:
    """The source's batches one at a time (never all at once; None: nothing for now),
    naming it in errors."""
    try:
        iterator = iter(_batches(source, context))
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch
    except TaskCancelled:
        raise
    except OperatorError:
        raise
    except Exception as error:
        raise OperatorError(f"operator {source.name!r}: {type(error).__name__}: {error}") from error


class StreamTask:
    def __init__(self, spec: StreamTaskSpec, task: TaskContext) -> None:
        if not spec.operators:
            raise ValueError("a stream task needs at least one operator")
        if task.environment is None:
            raise ValueError(f"{task.task_name}: a stream task runs only in a TaskExecutor")
        self.spec = spec
        self.task = task
        self.env = task.environment
        self.operators = list(spec.operators)
        self.partitions: list[ResultPartition] = []
        # (partition, partitioner) per output, in spec order
        self._routes: list[tuple[ResultPartition, Partitioner]] = []
        self.gate: InputGate | None = None
        self._channel_input: list[int] = []  # channel index -> input index of the head

    # -------------------------------------------------------------------- set-up

    def _open_outputs(self, spill_dir: Path) -> None:
        d = self.task.deployment
        for output in self.spec.outputs:
            produced = [p for p in d.produced_partitions
                        if p.consumer_vertex_id == output.consumer_vertex_id]
            if len(produced) != 1:
                raise ValueError(f"{self.task.task_name}: no single produced partition for "
                                 f"consumer {output.consumer_vertex_id}")
            p = produced[0]
            partition = ResultPartition(
                ResultPartitionID(d.job_id, p.result_id, d.subtask_index),
                p.partition_type.value, p.number_of_subpartitions, spill_dir,
                self.env.network.max_buffered_bytes, data_key=d.data_key)
            self.env.partition_manager.register(partition)
            self.partitions.append(partition)
            self._routes.append((partition, make_partitioner(
                output.partitioner, p.number_of_subpartitions, output.key_columns,
                d.subtask_index, d.max_parallelism)))

    def _open_inputs(self) -> None:
        consumed = self.task.deployment.consumed_partitions
        channels = []
        for input_index, spec in enumerate(self.spec.inputs):
            mine = [c for c in consumed if c.producer_vertex_id == spec.producer_vertex_id]
            if not mine:
                raise ValueError(f"{self.task.task_name}: nothing consumed from input {input_index}")
            for partition in mine:
                channels.append(self._channel(partition))
                self._channel_input.append(input_index)
        if channels:
            self.gate = InputGate(channels)
            self.task.on_cancel(self.gate.close)

    def _channel(self, consumed: ConsumedPartition):
        """A local channel when the producer runs in this TaskExecutor, else a remote one.
        Waits (receiver-initiated) until the JobMaster knows where the producer runs."""
        partition_id = ResultPartitionID(self.task.job_id, consumed.result_id,
                                         consumed.producer_subtask_index)
        timeout = self.env.network.partition_request_timeout
        locate = self.task.locate
        if locate is None:
            raise ValueError(f"{self.task.task_name}: no way to locate its inputs")

        def ready() -> PartitionLocation | None:
            self.task.check_cancelled()
            location = locate(consumed.result_id, consumed.producer_subtask_index)
            if location.state is PartitionLocationState.FAILED:
                raise PartitionFailed(f"{partition_id}: {location.error}", partition_id)
            return location if location.state is PartitionLocationState.READY else None

        try:
            location = retry.poll_until(ready, pauses=_LOCATE_BACKOFF,
                                        deadline=retry.Deadline(timeout))
        except retry.GaveUp:
            raise PartitionNotFound(f"the producer of {partition_id} was not deployed "
                                    f"within {timeout:g} s", partition_id) from None
        if location.resource_id == self.env.resource_id:
            return LocalInputChannel(self.env.partition_manager, partition_id,
                                     consumed.subpartition_index, timeout)
        address = location.data_address
        return RemoteInputChannel(self.env.clients, lambda: address, partition_id,
                                  consumed.subpartition_index, timeout, ticket=consumed.ticket,
                                  producer=str(location.resource_id),
                                  backoff=self.env.network.request_backoff)

    # ------------------------------------------------------------------- running

    def _emit(self, items: Iterable[pa.RecordBatch | Watermark]) -> None:
        for item in items:
            if isinstance(item, Watermark):
                for partition, _ in self._routes:
                    partition.broadcast_event(item)
                continue
            if item.num_rows == 0:
                continue
            io = self.task.io
            io.sent(item.num_rows, item.nbytes)
            for partition, partitioner in self._routes:
                for subpartition, part in partitioner.route(item):
                    waiting = io.now()
                    partition.emit(subpartition, part)  # blocks while the output is full
                    io.backpressured += io.now() - waiting

    def _push(self, level: int, items: Iterable[pa.RecordBatch | Watermark]) -> None:
        """Hands batches and watermarks to operator `level` of the chain (past the end:
        the outputs)."""
        if level == len(self.operators):
            self._emit(items)
            return
        operator = self.operators[level]
        for item in items:
            if isinstance(item, Watermark):
                self._push(level + 1, _call(operator, "process_watermark", item))
            else:
                self._push(level + 1, _call(operator, "process", item, 0))

    def _timed(self, gate: InputGate) -> Iterator[tuple[int, object]]:
        """The gate's events, the time spent waiting for each counted as idle."""
        io = self.task.io
        events = iter(gate)
        while True:
            waiting = io.now()
            try:
                event = next(events)
            except StopIteration:
                return
            finally:
                io.idle += io.now() - waiting
            yield event

    def _output_fill(self) -> float:
        """The fullest pipelined subpartition's share of its bound (blocking ones spill)."""
        fills = [partition.buffered_bytes() / (partition.max_buffered_bytes *
                                               partition.num_subpartitions)
                 for partition in self.partitions
                 if partition.partition_type == "pipelined" and partition.max_buffered_bytes]
        return min(1.0, max(fills, default=0.0))

    def _finish_chain(self) -> None:
        """Every input ended: all of event time passed (MAX_WATERMARK), then each
        operator ends its input and flushes, head first."""
        head = self.operators[0]
        if isinstance(head, SourceOperator):
            self._push(1, [MAX_WATERMARK])
        else:
            self._push(1, _call(head, "process_watermark", MAX_WATERMARK))
            for input_index in range(len(self.spec.inputs)):
                self._push(1, _call(head, "end_input", input_index))
        for level, operator in enumerate(self.operators):
            if level > 0:
                self._push(level + 1, _call(operator, "end_input", 0))
            self._push(level + 1, _call(operator, "finish"))

    def run(self) -> None:
        head = self.operators[0]
        if self.env.warm_drivers is not None and not isinstance(head, PySparkScript):
            self.env.warm_drivers.make_room()  # a warm driver held its slot's memory
        tmp_root = self.env.tmp_dir
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp_dir = Path(tempfile.mkdtemp(prefix=f"task-{self.task.deployment.attempt_id[:8]}-",
                                        dir=tmp_root))
        context = StreamOperatorContext(self.task, self.env, str(tmp_dir / "scratch"))
        Path(context.tmp_dir).mkdir()
        opened: list[Operator] = []
        try:
            self._open_outputs(self.env.tmp_dir / "partitions")
            for partition in self.partitions:
                self.task.on_cancel(partition.release)
            self._open_inputs()
            self.task.io.output_fill = self._output_fill
            if self.gate is not None:
                self.task.io.input_fill = self.gate.fill
            for operator in self.operators:
                _call(operator, "open", context)
                opened.append(operator)
            self._restore()
            head = self.operators[0]
            if isinstance(head, SourceOperator):
                for batch in _read(head, context):
                    self.task.check_cancelled()
                    if batch is not None:
                        self._push(1, [batch])
                    self._take_controls()
            elif self.gate is not None:
                self.task.on_control(self.gate.wake)
                for channel_index, event in self._timed(self.gate):
                    self.task.check_cancelled()
                    if isinstance(event, pa.RecordBatch):
                        self.task.io.received(event.num_rows, event.nbytes)
                        self._push(1, _call(head, "process", event,
                                            self._channel_input[channel_index]))
                    elif isinstance(event, CheckpointBarrier):
                        self._checkpoint(event.checkpoint_id, event.timestamp,
                                         self.gate.last_alignment)
                    elif isinstance(event, CheckpointAborted):
                        self._decline(event.checkpoint_id, event.reason)
                    elif isinstance(event, Watermark):
                        self._push(1, _call(head, "process_watermark", event))
                    self._take_controls()
            self.task.check_cancelled()
            self._finish_chain()
            for partition in self.partitions:
                partition.finish()
        except BaseException as error:
            for partition in self.partitions:
                if self.task.is_cancelled():
                    partition.release()
                else:
                    partition.fail(f"{self.task.task_name} failed: {type(error).__name__}: {error}")
            if self.task.is_cancelled() and not isinstance(error, TaskCancelled):
                raise TaskCancelled() from error
            raise
        finally:
            if self.gate is not None:
                self.gate.close()
            for operator in reversed(opened):
                try:
                    operator.close()
                except Exception:
                    log.exception("closing operator %s failed", operator.name)
            shutil.rmtree(tmp_dir, ignore_errors=True)

    # --------------------------------------------------------------- checkpoints

    def _take_controls(self) -> None:
        """The JobMaster's triggers (sources) and confirmations posted since last time."""
        for control in self.task.take_controls():
            if isinstance(control, TriggerBarrier):
                if isinstance(self.operators[0], SourceOperator):
                    self._checkpoint(control.checkpoint_id, control.timestamp)
                else:
                    self._decline(control.checkpoint_id, "only source tasks are triggered")
            else:  # what an operator gives for it goes on (a Spark stage's interval)
                for level, operator in enumerate(self.operators):
                    self._push(level + 1, _call(operator, "notify_checkpoint_complete",
                                                control.checkpoint_id))
                self.task.confirmed = max(self.task.confirmed, control.checkpoint_id)

    def _checkpoint(self, checkpoint_id: int, timestamp: int, alignment: float = 0.0) -> None:
        """The barrier goes on to every output, then the chain's state is written and the
        checkpoint acknowledged (or declined, naming what failed)."""
        try:
            barrier = CheckpointBarrier(checkpoint_id, timestamp)
            for partition in self.partitions:
                partition.broadcast_event(barrier)
            snapshot = msgspec.structs.replace(self._snapshot(checkpoint_id), alignment=alignment)
        except TaskCancelled:
            raise
        except Exception as error:
            log.warning("%s: checkpoint %d failed: %s", self.task.task_name, checkpoint_id, error)
            self._decline(checkpoint_id, f"{self.task.task_name}: {type(error).__name__}: {error}")
            return
        if self.task.checkpoints is not None:
            self.task.checkpoints.acknowledge(checkpoint_id, snapshot)

    def _snapshot(self, checkpoint_id: int) -> TaskStateSnapshot:
        deployment = self.task.deployment
        written: dict[str, dict[str, str]] = {}
        shapes: dict[str, dict[str, Redistribution]] = {}
        size = 0
        for operator, operator_id in zip(self.operators, self.spec.operator_ids):
            state = _named(operator, "snapshot_state", checkpoint_id)
            if not state:
                continue
            if not deployment.checkpoint_dir:
                raise RuntimeError("the task has state but no checkpoint folder")
            files = {}
            for name, table in state.items():
                files[name], bytes_written = checkpoints.write_state(
                    deployment.checkpoint_dir, checkpoint_id, operator_id,
                    deployment.subtask_index, deployment.attempt_id, name, table)
                size += bytes_written
            written[operator_id] = files
            shapes[operator_id] = {name: _named(operator, "state_redistribution", name)
                                   for name in state}
        return TaskStateSnapshot(written, size, shapes)

    def _decline(self, checkpoint_id: int, reason: str) -> None:
        if self.task.checkpoints is not None:
            self.task.checkpoints.decline(checkpoint_id, reason)

    def _restore(self) -> None:
        """Each operator's state in the checkpoint the task starts from, if it has any."""
        restore = self.task.deployment.restore
        if restore is None:
            return
        d = self.task.deployment
        for operator, operator_id in zip(self.operators, self.spec.operator_ids):
            files = restore.snapshot.operators.get(operator_id)
            rescaled = restore.rescaled.get(operator_id)
            if files:
                state = {name: checkpoints.read_state(path) for name, path in files.items()}
            elif rescaled is not None:  # its share of every old subtask's state
                state = checkpoints.redistribute(rescaled, d.max_parallelism, d.parallelism,
                                                 d.subtask_index)
                log.info("%s: %s's state redistributed from parallelism %d", self.task.task_name,
                         operator.name, rescaled.parallelism)
            else:
                continue
            if state:
                _named(operator, "initialize_state", state)
        log.info("%s restored from checkpoint %d", self.task.task_name, restore.checkpoint_id)


def run_stream_task(spec: StreamTaskSpec, task: TaskContext) -> None:
    if task.environment is None:
        raise RuntimeError("pipeline tasks need a TaskExecutor with a data plane")
    StreamTask(spec, task).run()
