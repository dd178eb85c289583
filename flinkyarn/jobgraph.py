"""The JobGraph: what the client submits and the JobMaster expands into an ExecutionGraph.

A JobVertex is one task type run at some parallelism; a JobEdge connects a producer
vertex to a consumer vertex through an intermediate data set. User code travels as
cloudpickled bytes, only ever unpickled inside a TaskExecutor; so what the client
and the JobMaster must know about the job's file outputs travels in `outputs`.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import msgspec

from flinkyarn.ids import JobID, JobVertexID
from flinkyarn.resources import UNKNOWN, ResourceProfile


class DistributionPattern(str, enum.Enum):
    """How producer subtasks connect to consumer subtasks."""

    ALL_TO_ALL = "all_to_all"  # every producer subtask to every consumer subtask
    POINTWISE = "pointwise"    # producer i to consumer i (or a range when parallelism differs)


class ResultPartitionType(str, enum.Enum):
    """PIPELINED: consumed while produced, producer and consumer run together.
    BLOCKING: fully produced (and kept) before the consumer is deployed."""

    PIPELINED = "pipelined"
    BLOCKING = "blocking"


class ShipStrategy(str, enum.Enum):
    """How a producer subtask picks the subpartitions (consumer subtasks) of an edge that
    a batch, or each row of it, goes to: Flink's ship strategy of a JobEdge, carried out
    by taskexecutor.network.partitioner."""

    FORWARD = "forward"      # one-to-one (round-robin over a pointwise fan-out)
    REBALANCE = "rebalance"  # whole batches round-robin over all consumers
    HASH = "hash"            # rows with equal key_columns values to the same consumer
    BROADCAST = "broadcast"  # every batch to every consumer


class ScheduleMode(str, enum.Enum):
    EAGER = "eager"                          # deploy every task at once (streaming)
    LAZY_FROM_SOURCES = "lazy_from_sources"  # sources first; consumers when inputs are done


DEFAULT_SLOT_SHARING_GROUP = "default"


class ChainedOperator(msgspec.Struct, frozen=True):
    """One operator of a vertex's chain, as `flinkyarn info` shows it."""

    uid: str   # stable operator id: the user's uid, or a hash of the program's shape
    name: str


class JobVertex(msgspec.Struct, frozen=True):
    id: JobVertexID
    name: str
    parallelism: int
    # Cloudpickled, run by each subtask: a pipeline's StreamTaskSpec, or a callable taking
    # the task's context (see taskexecutor.task).
    invokable: bytes
    # Subtasks of vertices in the same group may share a slot; None: a slot of its own.
    slot_sharing_group: str | None = DEFAULT_SLOT_SHARING_GROUP
    resources: ResourceProfile = UNKNOWN
    # The operators chained into this vertex, head first (pipelines only).
    operators: list[ChainedOperator] = []
    # Whether its chain has a Spark stage (runs in the TaskExecutor's SparkSession).
    uses_spark: bool = False


class InvalidJobGraph(ValueError):
    """A job graph no cluster should take; the message names what is wrong."""


class JobEdge(msgspec.Struct, frozen=True):
    source: JobVertexID
    target: JobVertexID
    distribution: DistributionPattern = DistributionPattern.ALL_TO_ALL
    partition_type: ResultPartitionType = ResultPartitionType.PIPELINED
    # Whether re-running the producer sends every record to the same consumer again
    # (hash, forward, broadcast: yes; rebalance, random: no). Region failover uses it.
    deterministic: bool = True
    # How the producer picks subpartitions.
    partitioner: ShipStrategy = ShipStrategy.FORWARD
    key_columns: list[str] = []


class OutputMode(str, enum.Enum):
    """What a file sink does with a folder that already has content (Flink's WriteMode).
    NO_OVERWRITE: the client refuses to submit the job. OVERWRITE: the job's staging
    folder replaces the target when the job finishes."""

    NO_OVERWRITE = "no_overwrite"
    OVERWRITE = "overwrite"


E = TypeVar("E", bound=enum.Enum)


def enum_value(kind: type[E], value: E | str, what: str) -> E:
    """`value` (a member or its value) as a member of `kind`; else ValueError
    "unknown WHAT 'x'; one of 'a', 'b'", naming the allowed values."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"unknown {what} {value!r}; one of "
                         f"{', '.join(repr(m.value) for m in kind)}") from None


def output_mode(value: OutputMode | str) -> OutputMode:
    return enum_value(OutputMode, value, "mode")


class FileOutput(msgspec.Struct, frozen=True):
    """A folder of part files the job writes (see flinkyarn.connectors.outputs): the
    client checks it before submitting; the JobMaster puts `staging` in place at `path`
    when the job finishes and deletes it when the job fails or is canceled."""

    path: str                  # the target folder, as the sink has it (absolute or a URL)
    format: str                # "parquet", "csv": names the call in messages (write_<format>)
    mode: OutputMode = OutputMode.NO_OVERWRITE
    # The hidden sibling of `path` the sink's subtasks write into (None: they write into
    # `path` itself, the root of a filesystem; OVERWRITE always has one).
    staging: str | None = None


class OutputExistsError(Exception):
    """A NO_OVERWRITE output already has content (flinkyarn.connectors.outputs.check),
    so the job is not submitted: a usage error (`flinkyarn run` exits 2)."""

    def __init__(self, output: FileOutput, what: str) -> None:
        super().__init__(f"output {output.path} {what}; write_{output.format}(..., "
                         f"mode=\"overwrite\") replaces it")
        self.output = output


class JobGraph(msgspec.Struct, frozen=True):
    job_id: JobID
    name: str
    vertices: list[JobVertex]
    edges: list[JobEdge] = []
    schedule_mode: ScheduleMode = ScheduleMode.EAGER
    # The job's own fault-tolerance settings (options.is_job_option), over the cluster's.
    configuration: dict[str, str] = {}
    # The file sinks' folders, one per sink (filled by the pipeline's JobGraph builder).
    outputs: list[FileOutput] = []

    def validate(self) -> None:
        """Raises ValueError naming what is wrong: the JobMaster never sees a bad graph."""
        if not self.vertices:
            raise InvalidJobGraph(f"job {self.name!r} has no vertices")
        ids = set()
        for vertex in self.vertices:
            if vertex.id in ids:
                raise InvalidJobGraph(f"job {self.name!r}: duplicate vertex id {vertex.id}")
            ids.add(vertex.id)
            if vertex.parallelism < 1:
                raise InvalidJobGraph(f"vertex {vertex.name!r}: parallelism must be >= 1, "
                                 f"not {vertex.parallelism}")
        for edge in self.edges:
            for end in (edge.source, edge.target):
                if end not in ids:
                    raise InvalidJobGraph(f"job {self.name!r}: edge refers to unknown vertex {end}")
            if edge.source == edge.target:
                raise InvalidJobGraph(f"job {self.name!r}: vertex {edge.source} feeds itself")
        self.topological_order()  # raises on a cycle
        paths = set()
        for output in self.outputs:
            if output.path.rstrip("/") in paths:
                raise InvalidJobGraph(f"job {self.name!r} writes {output.path} twice: two "
                                      f"sinks would replace each other's part files")
            paths.add(output.path.rstrip("/"))
            if output.mode is OutputMode.OVERWRITE and output.staging is None:
                raise InvalidJobGraph(f"output {output.path}: mode overwrite needs a "
                                      f"staging folder")

    @property
    def uses_spark(self) -> bool:
        """Whether a vertex runs a Spark stage: its TaskExecutors may start their
        SparkSession when they start (taskmanager.spark.start-eagerly)."""
        return any(vertex.uses_spark for vertex in self.vertices)

    def vertex(self, vertex_id: JobVertexID) -> JobVertex:
        for vertex in self.vertices:
            if vertex.id == vertex_id:
                return vertex
        raise KeyError(vertex_id)

    def topological_order(self) -> list[JobVertex]:
        incoming = {v.id: 0 for v in self.vertices}
        for edge in self.edges:
            incoming[edge.target] += 1
        ready = [v for v in self.vertices if incoming[v.id] == 0]
        order = []
        while ready:
            vertex = ready.pop(0)
            order.append(vertex)
            for edge in self.edges:
                if edge.source == vertex.id:
                    incoming[edge.target] -= 1
                    if incoming[edge.target] == 0:
                        ready.append(self.vertex(edge.target))
        if len(order) != len(self.vertices):
            raise InvalidJobGraph(f"job {self.name!r} has a cycle")
        return order
