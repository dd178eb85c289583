"""Running a user's program in the client: the program builds jobs and calls
`execute()`, which reaches whatever executor the command installed (Flink's context
environment). Also the job an unmodified PySpark script becomes."""

from __future__ import annotations

import hashlib
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

import cloudpickle

from flinkyarn import environment
from flinkyarn.environment import JobExecutor, JobResult
from flinkyarn.ids import JobID, JobVertexID, new_id
from flinkyarn.jobgraph import ChainedOperator, JobGraph, JobVertex, ScheduleMode
from flinkyarn.pipeline.task_spec import StreamTaskSpec


class ProgramAborted(Exception):
    """Raised inside the program to stop it once its job graph is captured."""


def run_program(program: Path, args: tuple[str, ...], executor: JobExecutor,
                python_files: Sequence[Path] = ()) -> None:
    """Runs the program as `__main__` with `sys.argv` = [program, *args] and `executor`
    installed; the program's exceptions propagate. `python_files` (--py-files) go on
    its path as on the containers': a folder or archive itself, a .py file's folder."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(program), *args]
    for path in reversed(python_files):
        entry = path.resolve().parent if path.suffix == ".py" else path.resolve()
        sys.path.insert(0, str(entry))
    sys.path.insert(0, str(program.resolve().parent))  # its local modules, as python does
    environment.install(executor)
    try:
        runpy.run_path(str(program), run_name="__main__")
    finally:
        environment.install(None)
        sys.argv, sys.path[:] = saved_argv, saved_path


class GraphCapture:
    """The executor of `flinkyarn info`: keeps the first job graph and stops the program."""

    def __init__(self) -> None:
        self.graph: JobGraph | None = None

    def execute(self, graph: JobGraph) -> JobResult:
        self.graph = graph
        raise ProgramAborted()


def pyspark_job_graph(script: Path, args: tuple[str, ...], settings=None) -> JobGraph:
    """A job of one task whose task runs the script, unmodified, as its own driver
    process. The script's text travels in the job graph."""
    from flinkyarn.pipeline.pyspark_script import PySparkScript

    operator = PySparkScript.from_file(script, list(args), settings)
    uid = hashlib.sha256(f"pyspark\0{script.name}\0{operator.source}".encode()).hexdigest()[:32]
    vertex = JobVertex(JobVertexID(uid), operator.name, 1,
                       cloudpickle.dumps(StreamTaskSpec((operator,))),
                       operators=[ChainedOperator(uid, operator.name)])
    return JobGraph(JobID(new_id()), f"PySpark script {script.name}", [vertex],
                    schedule_mode=ScheduleMode.EAGER)
