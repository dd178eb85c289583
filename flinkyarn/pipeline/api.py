"""The Pipeline API: what users write.

    from flinkyarn import Pipeline

    p = Pipeline("wordcount", parallelism=2, batch_mode=True)
    words = p.read_text("hdfs:///input").flat_map(split_words)
    counts = words.key_by("word").count()                 # columns: word, count
    counts.write_parquet("hdfs:///output")
    p.execute()

Every call adds a node to the pipeline's StreamGraph at once and checks its arguments
then, so a mistake is reported at the line that makes it, naming the operator. What
can only be known when data flows (does column "word" exist?) is reported by the
runtime. Each transformation accepts:

    name=                 shown in `flinkyarn info`, the dashboard and error messages
    parallelism=          subtasks; default the Pipeline's parallelism
    slot_sharing_group=   default: the group of its inputs if they agree, else "default"
    uid=                  a stable id of your own (for state and results across changes)
    resources=            a ResourceProfile the operator needs

Batch mode (`batch_mode=True`, or mode="batch"): every exchange between tasks is
blocking and the job is scheduled lazily from the sources (pipelined regions);
otherwise (mode="streaming", the default) exchanges are pipelined and every task is
deployed at once, as unbounded sources need; such a job takes checkpoints when
execution.checkpointing.interval is set. Data is Arrow: functions get and return
pyarrow.RecordBatch.

File outputs: write_parquet/write_csv refuse, before the job is submitted, a folder
that exists and is not empty (mode="no_overwrite", the default, as Flink's
NO_OVERWRITE); mode="overwrite" replaces its content when the job finishes and leaves
it untouched when the job fails (see flinkyarn.connectors.outputs).

Fault tolerance per job: `configuration={"restart-strategy.type": "fixed-delay", ...}`
sets this job's failover and restart strategies over the cluster's (only
jobmanager.execution.failover-strategy and restart-strategy.* keys; they are checked
here). `flinkyarn run -D` sets the same keys for every job of the program that does not
set them itself.

Keyed state: `key_by(...).process(fn)` runs fn(key, rows, state) per key with value,
list and map state (flinkyarn.pipeline.keyed_process); in a job that takes checkpoints
the state is checkpointed and restored, shared out by key group at another parallelism.

Aggregation output columns: the key columns, then "count" for count(), and
"<column>_<function>" for the others: sum("n") -> "n_sum", min -> "n_min",
max -> "n_max", mean -> "n_mean" (float64); aggregate({"n": ["sum", "max"]}) ->
"n_sum", "n_max"; aggregate({"n": "count"}) -> "n_count" (non-null values).

The Pipeline and its streams are used from one thread (the program's).
"""

from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import msgspec
import pyarrow as pa

from flinkyarn import environment, options
from flinkyarn.configuration import Configuration
from flinkyarn.jobgraph import JobGraph, ShipStrategy, enum_value, output_mode
from flinkyarn.pipeline.job_graph_builder import build_job_graph
from flinkyarn.pipeline.operator import Operator, SourceOperator
from flinkyarn.pipeline.operators import (Aggregation, FilterOperator, FlatMapOperator,
                                          KeyedAggregateOperator, MapOperator,
                                          aggregations_from_spec, output_name)
from flinkyarn.pipeline.stream_graph import (ChainingStrategy, ExchangeMode, StreamGraph,
                                             StreamNode, VirtualPartitionNode)
from flinkyarn.resources import UNKNOWN, ResourceProfile

if TYPE_CHECKING:  # at run time imported where used (write_parquet, write_csv, window)
    from flinkyarn.connectors.files import FileSink
    from flinkyarn.pipeline.event_time import SlidingEventTimeWindows, TumblingEventTimeWindows
    from flinkyarn.pipeline.keyed_process import KeyedProcessFunction, KeyedState

__all__ = ["Pipeline", "DataStream", "KeyedStream", "WindowedStream", "DataStreamSink"]


def _check_callable(what: str, fn: Any, arity: int) -> None:
    if not callable(fn):
        raise TypeError(f"{what}: expected a function, not {type(fn).__name__}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins and the like: trust them
        return
    try:
        signature.bind(*([None] * arity))
    except TypeError:
        raise TypeError(f"{what}: the function must take {arity} positional "
                        f"argument{'s' if arity != 1 else ''}; its signature is "
                        f"{signature}") from None


def _check_optional_str(what: str, setting: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{what}: {setting} must be a non-empty string, not {value!r}")


def _check_path(what: str, path: Any) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError(f"{what}: path must be a non-empty string, not {path!r}")
    return path


def _set_operator_name(operator: Operator, name: str) -> None:
    # The StreamTask prefixes errors with the operator's name: make it the one the user
    # gave. An operator whose name is read-only keeps its own.
    try:
        operator.name = name
    except AttributeError:
        pass


class Pipeline:
    """A program: sources, transformations and sinks, run as one job by `execute()`."""

    def __init__(self, name: str, parallelism: int = 1, batch_mode: bool = False,
                 chaining: bool = True, configuration: Mapping[str, str] | None = None,
                 mode: str | None = None) -> None:
        """`mode`: Flink's execution.runtime-mode, "streaming" (pipelined exchanges, the
        default: what an unbounded source needs) or "batch" (as batch_mode=True)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"Pipeline: name must be a non-empty string, not {name!r}")
        if mode is not None:
            if mode not in ("streaming", "batch"):
                raise ValueError(f"Pipeline {name!r}: mode is 'streaming' or 'batch', not {mode!r}")
            if batch_mode and mode == "streaming":
                raise ValueError(f"Pipeline {name!r}: batch_mode=True and mode='streaming' "
                                 f"contradict each other")
            batch_mode = mode == "batch"
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"Pipeline {name!r}: parallelism must be an int >= 1, "
                             f"not {parallelism!r}")
        self.configuration = {str(k): str(v) for k, v in (configuration or {}).items()}
        # Checked now, against the defaults: a bad key or value is the program's line.
        options.job_configuration(Configuration(), self.configuration)
        self.name = name
        self.parallelism = parallelism
        self.batch_mode = bool(batch_mode)
        self._graph = StreamGraph(name, batch_mode=self.batch_mode,
                                  chaining_enabled=bool(chaining))
        self._next_id = 1
        self._executed = False

    def __repr__(self) -> str:
        return (f"Pipeline({self.name!r}, parallelism={self.parallelism}, "
                f"batch_mode={self.batch_mode})")

    # ---- sources ----------------------------------------------------------------------

    def read_text(self, path: str, *, monitor_interval: float | str | None = None,
                  until_files: int | None = None, name: str | None = None,
                  parallelism: int | None = None, slot_sharing_group: str | None = None,
                  uid: str | None = None, resources: ResourceProfile | None = None
                  ) -> DataStream:
        """The lines of the text file(s) at `path` (the schema is the connector's);
        each subtask reads its share. With `monitor_interval` (seconds, or a duration
        such as "1 s") the folder is watched: new files are read as they appear, and the
        source ends only after `until_files` files, if given (a streaming pipeline only;
        see flinkyarn.connectors.files.FileSource)."""
        path = _check_path("read_text", path)
        self._check_open("read_text")
        interval = _seconds("read_text", "monitor_interval", monitor_interval)
        if interval is not None and self.batch_mode:
            raise ValueError(f"read_text({path!r}): a watched folder (monitor_interval) is "
                             f"an unbounded source; pipeline {self.name!r} is in batch mode")
        from flinkyarn.connectors.files import TextSource
        try:
            source = TextSource(path, monitor_interval=interval, until_files=until_files)
        except ValueError as error:
            raise ValueError(f"read_text: {error}") from None
        return self.add_source(source, name=name, parallelism=parallelism,
                               slot_sharing_group=slot_sharing_group, uid=uid,
                               resources=resources)

    def read_csv(self, path: str, schema: pa.Schema | None = None, *, name: str | None = None,
                 parallelism: int | None = None, slot_sharing_group: str | None = None,
                 uid: str | None = None, resources: ResourceProfile | None = None,
                 **csv_options: Any) -> DataStream:
        """Rows of the CSV file(s) at `path`; csv_options go to the connector."""
        path = _check_path("read_csv", path)
        if schema is not None and not isinstance(schema, pa.Schema):
            raise TypeError(f"read_csv: schema must be a pyarrow.Schema, not "
                            f"{type(schema).__name__}")
        self._check_open("read_csv")
        from flinkyarn.connectors.files import CsvSource
        return self.add_source(CsvSource(path, schema, **csv_options), name=name,
                               parallelism=parallelism, slot_sharing_group=slot_sharing_group,
                               uid=uid, resources=resources)

    def read_parquet(self, path: str, columns: list[str] | None = None, *,
                     name: str | None = None, parallelism: int | None = None,
                     slot_sharing_group: str | None = None, uid: str | None = None,
                     resources: ResourceProfile | None = None) -> DataStream:
        """Rows of the Parquet file(s) at `path`, only `columns` if given."""
        path = _check_path("read_parquet", path)
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
                raise ValueError(f"read_parquet: columns must be a list of column names, "
                                 f"not {columns!r}")
            columns = list(columns)
        self._check_open("read_parquet")
        from flinkyarn.connectors.files import ParquetSource
        return self.add_source(ParquetSource(path, columns), name=name,
                               parallelism=parallelism, slot_sharing_group=slot_sharing_group,
                               uid=uid, resources=resources)

    def from_generator(self, fn: Callable[[int, int], Iterable[pa.RecordBatch | None]], *,
                       name: str | None = None, parallelism: int | None = None,
                       slot_sharing_group: str | None = None, uid: str | None = None,
                       resources: ResourceProfile | None = None) -> DataStream:
        """Batches made by fn(subtask_index, parallelism), in each subtask (None: nothing
        for now; see flinkyarn.connectors.generator)."""
        _check_callable("from_generator", fn, 2)
        self._check_open("from_generator")
        from flinkyarn.connectors.generator import GeneratorSource
        return self.add_source(GeneratorSource(fn), name=name, parallelism=parallelism,
                               slot_sharing_group=slot_sharing_group, uid=uid,
                               resources=resources)

    def from_data_generator(self, fn: Callable[[pa.Array], pa.RecordBatch | pa.Table], *,
                            count: int | None = None, rows_per_second: float | None = None,
                            name: str | None = None, parallelism: int | None = None,
                            slot_sharing_group: str | None = None, uid: str | None = None,
                            resources: ResourceProfile | None = None) -> DataStream:
        """Rows made by fn(row numbers) for the numbers 0, 1, 2, ... up to `count` (None:
        an unbounded source, a streaming pipeline only), at most `rows_per_second` in
        all (Flink's DataGeneratorSource; see flinkyarn.connectors.generator)."""
        _check_callable("from_data_generator", fn, 1)
        self._check_open("from_data_generator")
        if count is None and self.batch_mode:
            raise ValueError(f"from_data_generator: without a count it is an unbounded source; "
                             f"pipeline {self.name!r} is in batch mode")
        from flinkyarn.connectors.generator import DataGeneratorSource
        return self.add_source(DataGeneratorSource(fn, count, rows_per_second), name=name,
                               parallelism=parallelism, slot_sharing_group=slot_sharing_group,
                               uid=uid, resources=resources)

    def add_source(self, source: SourceOperator, *, name: str | None = None,
                   parallelism: int | None = None, slot_sharing_group: str | None = None,
                   uid: str | None = None, resources: ResourceProfile | None = None
                   ) -> DataStream:
        """A source of your own: a SourceOperator that reads its subtask's share."""
        if not isinstance(source, SourceOperator):
            raise TypeError(f"add_source: expected a SourceOperator, not "
                            f"{type(source).__name__}")
        node = self._add_node(source, [], "Source: ", name, parallelism, slot_sharing_group,
                              uid, resources, ChainingStrategy.HEAD, is_source=True)
        return DataStream(self, node.id)

    # ---- the job ----------------------------------------------------------------------

    def stream_graph(self) -> StreamGraph:
        """The StreamGraph built so far (the live object: do not change it)."""
        return self._graph

    def job_graph(self) -> JobGraph:
        """The JobGraph `execute()` submits (a new job id at each call; vertex and
        operator ids are stable)."""
        graph = build_job_graph(self._graph)
        if self.configuration:
            graph = msgspec.structs.replace(graph, configuration=dict(self.configuration))
        return graph

    def execute(self) -> environment.JobResult:
        """Builds the JobGraph, runs it to the end on the current executor (the cluster
        `flinkyarn run` chose, or a local one) and returns how it ended. A pipeline runs
        once: afterwards its streams take no new operators."""
        self._check_open("execute")
        graph = self.job_graph()
        self._executed = True
        return environment.current_executor().execute(graph)

    # ---- internals --------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._executed:
            raise RuntimeError(f"{what}: pipeline {self.name!r} was already executed; "
                               f"build a new Pipeline for another job")

    def _take_id(self) -> int:
        node_id, self._next_id = self._next_id, self._next_id + 1
        return node_id

    def _add_node(self, operator: Operator, inputs: Sequence[DataStream], prefix: str,
                  name: str | None, parallelism: int | None, slot_sharing_group: str | None,
                  uid: str | None, resources: ResourceProfile | None,
                  chaining_strategy: ChainingStrategy, is_source: bool = False) -> StreamNode:
        what = name or getattr(operator, "name", None) or type(operator).__name__
        _check_optional_str(what, "name", name)
        _check_optional_str(what, "slot_sharing_group", slot_sharing_group)
        _check_optional_str(what, "uid", uid)
        if resources is not None and not isinstance(resources, ResourceProfile):
            raise TypeError(f"{what}: resources must be a ResourceProfile, not "
                            f"{type(resources).__name__}")
        for position, stream in enumerate(inputs):
            if not isinstance(stream, DataStream):
                raise TypeError(f"{what}: input {position} is a {type(stream).__name__}, "
                                f"not a DataStream")
            if stream._pipeline is not self:
                raise ValueError(f"{what}: input {position} belongs to pipeline "
                                 f"{stream._pipeline.name!r}, not {self.name!r}")
        self._check_open(what)
        display = what if not prefix or what.startswith(prefix) else prefix + what
        input_ids = [s._id for s in inputs]
        node = StreamNode(
            id=self._next_id, name=display, operator=operator,
            parallelism=self.parallelism if parallelism is None else parallelism,
            slot_sharing_group=(slot_sharing_group if slot_sharing_group is not None
                                else self._graph.inherited_slot_sharing_group(input_ids)),
            chaining_strategy=chaining_strategy, uid=uid,
            resources=UNKNOWN if resources is None else resources, is_source=is_source)
        self._graph.add_node(node, input_ids)
        self._take_id()
        _set_operator_name(operator, display)
        return node

    def _add_partitioning(self, stream: DataStream, partitioner: str | None,
                          key_columns: tuple[str, ...] = (),
                          exchange_mode: ExchangeMode = ExchangeMode.UNDEFINED) -> int:
        virtual_id = self._next_id
        self._graph.add_virtual_partition_node(VirtualPartitionNode(
            virtual_id, stream._id, partitioner, key_columns, exchange_mode))
        self._take_id()
        return virtual_id


class DataStream:
    """A stream of Arrow record batches: the output of one operator, possibly read
    through a partitioning (`key_by`, `rebalance`, ...)."""

    def __init__(self, pipeline: Pipeline, node_id: int) -> None:
        self._pipeline = pipeline
        self._id = node_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, parallelism={self.parallelism})"

    @property
    def pipeline(self) -> Pipeline:
        return self._pipeline

    @property
    def name(self) -> str:
        return self._node().name

    @property
    def parallelism(self) -> int:
        return self._node().parallelism

    def _node(self) -> StreamNode:
        return self._pipeline._graph.resolve(self._id)

    # ---- record-level transformations ------------------------------------------------

    def map(self, fn: Callable[[pa.RecordBatch], pa.RecordBatch], *, name: str | None = None,
            parallelism: int | None = None, slot_sharing_group: str | None = None,
            uid: str | None = None, resources: ResourceProfile | None = None) -> DataStream:
        """fn(batch) -> batch, for every batch."""
        _check_callable(name or "map", fn, 1)
        return self._one_input(MapOperator(fn), name, parallelism, slot_sharing_group, uid,
                               resources, ChainingStrategy.ALWAYS)

    def flat_map(self, fn: Callable[[pa.RecordBatch], Iterable[pa.RecordBatch]], *,
                 name: str | None = None, parallelism: int | None = None,
                 slot_sharing_group: str | None = None, uid: str | None = None,
                 resources: ResourceProfile | None = None) -> DataStream:
        """fn(batch) -> any number of batches (an iterable, or one batch)."""
        _check_callable(name or "flat_map", fn, 1)
        return self._one_input(FlatMapOperator(fn), name, parallelism, slot_sharing_group,
                               uid, resources, ChainingStrategy.ALWAYS)

    def filter(self, fn: Callable[[pa.RecordBatch], Any], *, name: str | None = None,
               parallelism: int | None = None, slot_sharing_group: str | None = None,
               uid: str | None = None, resources: ResourceProfile | None = None) -> DataStream:
        """fn(batch) -> a boolean mask, one entry per row: the rows to keep."""
        _check_callable(name or "filter", fn, 1)
        return self._one_input(FilterOperator(fn), name, parallelism, slot_sharing_group,
                               uid, resources, ChainingStrategy.ALWAYS)

    def spark(self, fn: Callable[..., Any], *others: DataStream, name: str | None = None,
              parallelism: int | None = None, slot_sharing_group: str | None = None,
              uid: str | None = None, resources: ResourceProfile | None = None) -> DataStream:
        """A Spark stage: fn(df, *other_dfs) -> DataFrame, run on all of its subtask's
        input (this stream first, then `others` in order) in the TaskExecutor's
        SparkSession. Partition the inputs alike (e.g. key_by on the join keys) when fn
        joins or groups them."""
        _check_callable(name or "spark", fn, 1 + len(others))
        self._pipeline._check_open(name or "spark")
        from flinkyarn.pipeline.spark_stage import SparkStage
        stage = SparkStage(fn, num_inputs=1 + len(others))
        node = self._pipeline._add_node(stage, [self, *others], "", name, parallelism,
                                        slot_sharing_group, uid, resources,
                                        ChainingStrategy.HEAD)
        return DataStream(self._pipeline, node.id)

    def transform(self, operator: Operator, *others: DataStream, name: str | None = None,
                  parallelism: int | None = None, slot_sharing_group: str | None = None,
                  uid: str | None = None, resources: ResourceProfile | None = None,
                  chaining: ChainingStrategy | str = ChainingStrategy.ALWAYS) -> DataStream:
        """An operator of your own (see flinkyarn.pipeline.operator), reading this stream
        as input 0 and `others` as inputs 1, 2, ... Use chaining="head" if it must see
        all of its subtask's input before emitting."""
        if not isinstance(operator, Operator) or isinstance(operator, SourceOperator):
            raise TypeError(f"transform: expected an Operator (not a source), not "
                            f"{type(operator).__name__}")
        node = self._pipeline._add_node(operator, [self, *others], "", name, parallelism,
                                        slot_sharing_group, uid, resources,
                                        _chaining_strategy(chaining))
        return DataStream(self._pipeline, node.id)

    def _one_input(self, operator: Operator, name: str | None, parallelism: int | None,
                   slot_sharing_group: str | None, uid: str | None,
                   resources: ResourceProfile | None, chaining: ChainingStrategy) -> DataStream:
        node = self._pipeline._add_node(operator, [self], "", name, parallelism,
                                        slot_sharing_group, uid, resources, chaining)
        return DataStream(self._pipeline, node.id)

    # ---- event time -------------------------------------------------------------------

    def assign_timestamps(self, column: str, max_out_of_orderness: float | str = 0.0, *,
                          name: str | None = None, parallelism: int | None = None,
                          slot_sharing_group: str | None = None, uid: str | None = None,
                          resources: ResourceProfile | None = None) -> DataStream:
        """`column` (int64 ms since the epoch, or a timestamp) is the records' event time;
        watermarks follow the data, `max_out_of_orderness` (seconds, or "5 s") behind
        the greatest time seen (see flinkyarn.pipeline.event_time). Windows further down
        use this column."""
        what = name or "timestamps"
        if not isinstance(column, str) or not column:
            raise ValueError(f"{what}: column must be a non-empty column name, not {column!r}")
        lag = _seconds(what, "max_out_of_orderness", max_out_of_orderness)
        if lag is None or lag < 0:
            raise ValueError(f"{what}: max_out_of_orderness must be 0 or more, not "
                             f"{max_out_of_orderness!r}")
        from flinkyarn.pipeline.event_time import TimestampAssigner
        return self._one_input(TimestampAssigner(column, lag, name=what), name, parallelism,
                               slot_sharing_group, uid, resources, ChainingStrategy.ALWAYS)

    def _time_column(self) -> str | None:
        """The column named by the nearest assign_timestamps upstream, if any."""
        from flinkyarn.pipeline.event_time import TimestampAssigner
        graph = self._pipeline._graph
        node = graph.resolve(self._id)
        while True:
            if isinstance(node.operator, TimestampAssigner):
                return node.operator.column
            if not node.in_edges:
                return None
            node = graph.node(node.in_edges[0].source_id)

    # ---- partitioning of the next edge ------------------------------------------------

    def key_by(self, *columns: str) -> KeyedStream:
        """Hash-partitions the stream on `columns`: rows with equal keys meet in the same
        subtask of the next operator."""
        if len(columns) == 1 and isinstance(columns[0], (list, tuple)):
            columns = tuple(columns[0])
        if not columns:
            raise ValueError(f"key_by on {self.name!r}: give at least one key column")
        for column in columns:
            if not isinstance(column, str) or not column:
                raise ValueError(f"key_by on {self.name!r}: key columns are non-empty "
                                 f"strings, not {column!r}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"key_by on {self.name!r}: a key column is repeated: {columns}")
        self._pipeline._check_open("key_by")
        virtual_id = self._pipeline._add_partitioning(self, "hash", tuple(columns))
        return KeyedStream(self._pipeline, virtual_id, tuple(columns))

    def rebalance(self) -> DataStream:
        """Round-robin over the next operator's subtasks (evens out skew)."""
        return self.partition("rebalance")

    def broadcast(self) -> DataStream:
        """Every batch to every subtask of the next operator."""
        return self.partition("broadcast")

    def forward(self) -> DataStream:
        """Subtask i to subtask i; the next operator must have the same parallelism."""
        return self.partition("forward")

    def partition(self, partitioner: str, *key_columns: str) -> DataStream:
        """The next edge's partitioner by name: forward, rebalance, broadcast, or hash
        with key columns (same as key_by)."""
        if partitioner == "hash":
            return self.key_by(*key_columns)
        try:
            enum_value(ShipStrategy, partitioner, "partitioning")
        except ValueError as error:
            raise ValueError(f"partition on {self.name!r}: {error}") from None
        if key_columns:
            raise ValueError(f"partition on {self.name!r}: only hash partitioning takes "
                             f"key columns")
        self._pipeline._check_open(partitioner)
        return DataStream(self._pipeline, self._pipeline._add_partitioning(self, partitioner))

    def blocking(self) -> DataStream:
        """Makes the next exchange blocking (fully produced, kept, then read), even in a
        streaming pipeline; such an edge is never chained. The partitioning is kept."""
        self._pipeline._check_open("blocking")
        virtual_id = self._pipeline._add_partitioning(self, None,
                                                      exchange_mode=ExchangeMode.BATCH)
        return self._same_kind(virtual_id)

    def _same_kind(self, node_id: int) -> DataStream:
        return DataStream(self._pipeline, node_id)

    # ---- chaining -----------------------------------------------------------------------

    def disable_chaining(self) -> DataStream:
        """This operator runs in a task of its own: chained neither to its input nor to
        its output."""
        self._set_chaining("disable_chaining", ChainingStrategy.NEVER)
        return self

    def start_new_chain(self) -> DataStream:
        """This operator is not chained to its input (its output still may be)."""
        self._set_chaining("start_new_chain", ChainingStrategy.HEAD)
        return self

    def _set_chaining(self, what: str, strategy: ChainingStrategy) -> None:
        self._pipeline._check_open(what)
        if self._pipeline._graph.is_virtual(self._id):
            raise ValueError(f"{what}: applies to an operator, not to a partitioning "
                             f"(call it before key_by/rebalance/broadcast/forward/blocking)")
        self._node().chaining_strategy = strategy

    # ---- sinks --------------------------------------------------------------------------

    def write_parquet(self, path: str, *, mode: str = "no_overwrite", name: str | None = None,
                      parallelism: int | None = None, slot_sharing_group: str | None = None,
                      uid: str | None = None, resources: ResourceProfile | None = None
                      ) -> DataStreamSink:
        """Writes the stream as a folder of Parquet part files at `path`. `mode`:
        "no_overwrite" (a folder with content is refused before the job is submitted) or
        "overwrite" (the job's output replaces the folder's content when it finishes)."""
        path = _check_path("write_parquet", path)
        self._pipeline._check_open("write_parquet")
        from flinkyarn.connectors.files import ParquetSink
        return self.sink_to(_file_sink("write_parquet", ParquetSink, path, mode), name=name,
                            parallelism=parallelism, slot_sharing_group=slot_sharing_group,
                            uid=uid, resources=resources)

    def write_csv(self, path: str, *, mode: str = "no_overwrite", name: str | None = None,
                  parallelism: int | None = None, slot_sharing_group: str | None = None,
                  uid: str | None = None, resources: ResourceProfile | None = None
                  ) -> DataStreamSink:
        """Writes the stream as a folder of CSV part files at `path`; `mode` as for
        write_parquet."""
        path = _check_path("write_csv", path)
        self._pipeline._check_open("write_csv")
        from flinkyarn.connectors.files import CsvSink
        return self.sink_to(_file_sink("write_csv", CsvSink, path, mode), name=name,
                            parallelism=parallelism, slot_sharing_group=slot_sharing_group,
                            uid=uid, resources=resources)

    def sink_to(self, sink: Operator, *, name: str | None = None,
                parallelism: int | None = None, slot_sharing_group: str | None = None,
                uid: str | None = None, resources: ResourceProfile | None = None
                ) -> DataStreamSink:
        """A sink of your own: an Operator that writes what it is given and emits nothing."""
        if not isinstance(sink, Operator) or isinstance(sink, SourceOperator):
            raise TypeError(f"sink_to: expected an Operator, not {type(sink).__name__}")
        node = self._pipeline._add_node(sink, [self], "Sink: ", name, parallelism,
                                        slot_sharing_group, uid, resources,
                                        ChainingStrategy.ALWAYS)
        return DataStreamSink(self._pipeline, node.id)


class KeyedStream(DataStream):
    """A stream hash-partitioned on key columns; its aggregations emit one row per key
    when their (bounded) input ends. See the module docstring for output columns."""

    def __init__(self, pipeline: Pipeline, node_id: int, key_columns: tuple[str, ...]) -> None:
        super().__init__(pipeline, node_id)
        self.key_columns = key_columns

    def _same_kind(self, node_id: int) -> DataStream:
        return KeyedStream(self._pipeline, node_id, self.key_columns)

    def count(self, *, name: str | None = None, parallelism: int | None = None,
              slot_sharing_group: str | None = None, uid: str | None = None,
              resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """Rows per key: the key columns and "count". `running` (this and the other
        aggregations): a rolling aggregation, which emits the updated row of each key of
        every batch instead of one row per key at the end (for unbounded input)."""
        return self._aggregate([Aggregation(None, "count", output_name(None, "count"))],
                               name or "count", parallelism, slot_sharing_group, uid,
                               resources, running)

    def sum(self, column: str, *, name: str | None = None, parallelism: int | None = None,
            slot_sharing_group: str | None = None, uid: str | None = None,
            resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """The sum of `column` per key, in "<column>_sum"."""
        return self._single("sum", column, name, parallelism, slot_sharing_group, uid,
                            resources, running)

    def min(self, column: str, *, name: str | None = None, parallelism: int | None = None,
            slot_sharing_group: str | None = None, uid: str | None = None,
            resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """The least value of `column` per key, in "<column>_min"."""
        return self._single("min", column, name, parallelism, slot_sharing_group, uid,
                            resources, running)

    def max(self, column: str, *, name: str | None = None, parallelism: int | None = None,
            slot_sharing_group: str | None = None, uid: str | None = None,
            resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """The greatest value of `column` per key, in "<column>_max"."""
        return self._single("max", column, name, parallelism, slot_sharing_group, uid,
                            resources, running)

    def mean(self, column: str, *, name: str | None = None, parallelism: int | None = None,
            slot_sharing_group: str | None = None, uid: str | None = None,
            resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """The mean of `column`'s non-null values per key (float64), in "<column>_mean"."""
        return self._single("mean", column, name, parallelism, slot_sharing_group, uid,
                            resources, running)

    def aggregate(self, aggregations: Mapping[str, str | Sequence[str]], *,
                  name: str | None = None, parallelism: int | None = None,
                  slot_sharing_group: str | None = None, uid: str | None = None,
                  resources: ResourceProfile | None = None, running: bool = False) -> DataStream:
        """Several aggregations at once: {"n": "sum", "price": ["min", "max", "mean"]}
        gives the key columns, "n_sum", "price_min", "price_max", "price_mean".
        Functions: count (non-null values), sum, min, max, mean."""
        what = name or "aggregate"
        try:
            specs = aggregations_from_spec(aggregations)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        return self._aggregate(specs, what, parallelism, slot_sharing_group, uid, resources,
                               running)

    def process(self, fn: KeyedProcessFunction | Callable[[tuple[Any, ...], pa.RecordBatch, KeyedState], Any],
                *, name: str | None = None, parallelism: int | None = None,
                slot_sharing_group: str | None = None, uid: str | None = None,
                resources: ResourceProfile | None = None) -> DataStream:
        """`fn(key, rows, state)` for each key's rows of each batch, with keyed value,
        list and map state that checkpoints keep (Flink's KeyedProcessFunction; see
        flinkyarn.pipeline.keyed_process). What it returns goes on."""
        from flinkyarn.pipeline.keyed_process import KeyedProcessOperator
        what = name or f"process({getattr(fn, '__name__', type(fn).__name__)})"
        operator = KeyedProcessOperator(self.key_columns, fn, name=what)
        node = self._pipeline._add_node(operator, [self], "", what, parallelism,
                                        slot_sharing_group, uid, resources,
                                        ChainingStrategy.HEAD)
        return DataStream(self._pipeline, node.id)

    def window(self, assigner: TumblingEventTimeWindows | SlidingEventTimeWindows
               ) -> WindowedStream:
        """Event-time windows of this keyed stream (TumblingEventTimeWindows(size) or
        SlidingEventTimeWindows(size, slide), in seconds), on the column of the
        assign_timestamps upstream; aggregate them as a KeyedStream."""
        from flinkyarn.pipeline.event_time import (SlidingEventTimeWindows,
                                                   TumblingEventTimeWindows)
        if not isinstance(assigner, (TumblingEventTimeWindows, SlidingEventTimeWindows)):
            raise TypeError(f"window on {self.name!r}: expected TumblingEventTimeWindows or "
                            f"SlidingEventTimeWindows, not {type(assigner).__name__}")
        column = self._time_column()
        if column is None:
            raise ValueError(f"window on {self.name!r}: event-time windows need "
                             f"assign_timestamps(column, ...) upstream")
        return WindowedStream(self._pipeline, self._id, self.key_columns, column, assigner)

    def _single(self, function: str, column: str, name: str | None, parallelism: int | None,
                slot_sharing_group: str | None, uid: str | None,
                resources: ResourceProfile | None, running: bool = False) -> DataStream:
        if not isinstance(column, str) or not column:
            raise ValueError(f"{name or function}: expected a column name, not {column!r}")
        return self._aggregate([Aggregation(column, function, output_name(column, function))],
                               name or f"{function}({column})", parallelism,
                               slot_sharing_group, uid, resources, running)

    def _aggregate(self, aggregations: list[Aggregation], name: str, parallelism: int | None,
                   slot_sharing_group: str | None, uid: str | None,
                   resources: ResourceProfile | None, running: bool = False) -> DataStream:
        operator = KeyedAggregateOperator(self.key_columns, aggregations, name=name,
                                          running=running)
        node = self._pipeline._add_node(operator, [self], "", name, parallelism,
                                        slot_sharing_group, uid, resources,
                                        ChainingStrategy.HEAD)
        return DataStream(self._pipeline, node.id)


class WindowedStream(KeyedStream):
    """A keyed stream cut into event-time windows: its aggregations (count, sum, min,
    max, mean, aggregate) emit one row per key and window when the window fires: the
    key columns, `window_start`, `window_end`, then the aggregates."""

    def __init__(self, pipeline: Pipeline, node_id: int, key_columns: tuple[str, ...],
                 time_column: str,
                 assigner: TumblingEventTimeWindows | SlidingEventTimeWindows) -> None:
        super().__init__(pipeline, node_id, key_columns)
        self.time_column = time_column
        self.assigner = assigner

    def _aggregate(self, aggregations: list[Aggregation], name: str, parallelism: int | None,
                   slot_sharing_group: str | None, uid: str | None,
                   resources: ResourceProfile | None, running: bool = False) -> DataStream:
        if running:
            raise ValueError(f"{name}: a window's aggregation emits when the window fires; "
                             f"running applies to a keyed stream's")
        from flinkyarn.pipeline.event_time import WindowAggregateOperator
        try:
            operator = WindowAggregateOperator(self.key_columns, self.time_column, self.assigner,
                                               aggregations, name=name)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        node = self._pipeline._add_node(operator, [self], "", name, parallelism,
                                        slot_sharing_group, uid, resources,
                                        ChainingStrategy.HEAD)
        return DataStream(self._pipeline, node.id)

    def window(self, assigner: TumblingEventTimeWindows | SlidingEventTimeWindows
               ) -> WindowedStream:
        raise ValueError(f"window on {self.name!r}: the stream is windowed already")


class DataStreamSink:
    """The end of a stream: a sink operator."""

    def __init__(self, pipeline: Pipeline, node_id: int) -> None:
        self._pipeline = pipeline
        self._id = node_id

    def __repr__(self) -> str:
        return f"DataStreamSink({self.name!r}, parallelism={self._node().parallelism})"

    @property
    def name(self) -> str:
        return self._node().name

    def _node(self) -> StreamNode:
        return self._pipeline._graph.node(self._id)

    def disable_chaining(self) -> DataStreamSink:
        """The sink runs in a task of its own."""
        self._pipeline._check_open("disable_chaining")
        self._node().chaining_strategy = ChainingStrategy.NEVER
        return self


def _file_sink(what: str, sink_class: type[FileSink], path: str, mode: str) -> Operator:
    try:
        return sink_class(path, mode=output_mode(mode))
    except ValueError as error:
        raise ValueError(f"{what}: {error}") from None


def _seconds(what: str, setting: str, value: float | str | None) -> float | None:
    """A duration in seconds: a number of seconds or Flink's text ("500 ms", "1 s")."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None if value is None else float(value)
    if isinstance(value, str):
        from flinkyarn.configuration import ConfigurationError, parse_duration
        try:
            return parse_duration(value)
        except (ConfigurationError, ValueError) as error:
            raise ValueError(f"{what}: {setting}: {error}") from None
    raise TypeError(f"{what}: {setting} must be seconds or a duration such as "
                    f"'1 s', not {type(value).__name__}")


def _chaining_strategy(value: ChainingStrategy | str) -> ChainingStrategy:
    return enum_value(ChainingStrategy, value, "chaining strategy")
