"""A minimal job-building API: vertices running Python functions, connected by edges.

    from flinkyarn.job import JobBuilder

    def work(ctx):                      # ctx: taskexecutor.task.TaskContext
        print(ctx.subtask_index, "of", ctx.parallelism)

    job = JobBuilder("example", schedule_mode="lazy_from_sources")
    source = job.add_vertex("source", work, parallelism=2)
    sink = job.add_vertex("sink", work, parallelism=2)
    job.connect(source, sink, blocking=True)
    result = job.execute()

`execute()` hands the JobGraph to the current executor: under `flinkyarn run`, the
cluster chosen on the command line; under plain `python`, a local cluster started for
the job. Functions are cloudpickled here and unpickled only inside TaskExecutors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

from flinkyarn import environment
from flinkyarn.ids import JobID, JobVertexID, new_id
from flinkyarn.jobgraph import (DEFAULT_SLOT_SHARING_GROUP, DistributionPattern, JobEdge,
                                JobGraph, JobVertex, ResultPartitionType, ScheduleMode)
from flinkyarn.resources import UNKNOWN, ResourceProfile


@dataclass(frozen=True)
class VertexHandle:
    id: JobVertexID
    name: str


class JobBuilder:
    def __init__(self, name: str, schedule_mode: str = "eager") -> None:
        self.name = name
        self.schedule_mode = ScheduleMode(schedule_mode)
        self._vertices: list[JobVertex] = []
        self._edges: list[JobEdge] = []

    def add_vertex(self, name: str, function: Callable[[Any], object], parallelism: int = 1,
                   slot_sharing_group: str | None = DEFAULT_SLOT_SHARING_GROUP,
                   resources: ResourceProfile = UNKNOWN) -> VertexHandle:
        if not callable(function):
            raise TypeError(f"vertex {name!r}: {function!r} is not callable")
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"vertex {name!r}: parallelism must be an int >= 1, not {parallelism!r}")
        # Stable: the same program gives the same ids.
        digest = hashlib.sha256(f"{self.name}\0{len(self._vertices)}\0{name}".encode()).hexdigest()
        vertex = JobVertex(JobVertexID(digest[:32]), name, parallelism,
                           environment.pickle_user_code(function), slot_sharing_group, resources)
        self._vertices.append(vertex)
        return VertexHandle(vertex.id, name)

    def connect(self, upstream: VertexHandle, downstream: VertexHandle,
                pattern: str = "all_to_all", blocking: bool = False,
                deterministic: bool = True) -> None:
        self._edges.append(JobEdge(
            upstream.id, downstream.id, DistributionPattern(pattern),
            ResultPartitionType.BLOCKING if blocking else ResultPartitionType.PIPELINED,
            deterministic))

    def build(self) -> JobGraph:
        graph = JobGraph(JobID(new_id()), self.name, list(self._vertices), list(self._edges),
                         self.schedule_mode)
        graph.validate()
        return graph

    def execute(self) -> environment.JobResult:
        return environment.current_executor().execute(self.build())
