"""The core package `flinkyarn` (what the client, the AppMaster and the TaskExecutor share)
depends on none of the roles: no module under flinkyarn/ imports `yarn_client`, `yarn_am`
or `taskexecutor`, at the top or inside a function (the architecture's "Processes and
roles"). A role reaches the core the other way round: it imports the core, registers
itself (an entry point, `environment.install`) or recognises the core's types."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pytest

import flinkyarn
from flinkyarn import environment
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.gateways.task_executor import TaskDeploymentDescriptor
from flinkyarn.pipeline.operator import SourceOperator
from flinkyarn.pipeline.pyspark_script import PySparkScript
from flinkyarn.pipeline.task_spec import StreamTaskSpec

ROLES = ("yarn_client", "yarn_am", "taskexecutor")
CORE = Path(flinkyarn.__file__).parent


class Numbers(SourceOperator):
    name = "Source: numbers"

    def read(self):
        yield pa.record_batch({"n": [1, 2, 3]})


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import anywhere in the tree, also inside functions, classes
    and `if TYPE_CHECKING:`; and of `importlib.import_module("x")` / `__import__("x")`
    with a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Name) and node.func.id == "__import__"
                   or isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")):
            found.append((node.lineno, node.args[0].value))
    return sorted(found)


def role_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(CORE.parent)}:{line}: imports {module}"
            for line, module in imported_modules(tree) if module.split(".")[0] in ROLES]


def test_the_core_package_imports_no_role():
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 20  # the walk found the package
    offending = [hit for path in modules for hit in role_imports(path)]
    assert offending == [], "the core package imports a role:\n" + "\n".join(offending)


def test_imports_inside_functions_and_literal_dynamic_imports_are_found():
    tree = ast.parse("import os\n"
                     "def f():\n"
                     "    from taskexecutor.stream_task import run_stream_task\n"
                     "class C:\n"
                     "    def g(self):\n"
                     "        import yarn_am.rest\n"
                     "importlib.import_module('yarn_client.executors')\n"
                     "from . import sibling\n")
    assert imported_modules(tree) == [(1, "os"), (3, "taskexecutor.stream_task"),
                                      (6, "yarn_am.rest"), (7, "yarn_client.executors")]


# ---- the TaskExecutor recognises a stream task ---------------------------------------------

def test_the_task_executor_runs_an_unpickled_stream_task_spec_as_its_stream_task(monkeypatch):
    from taskexecutor import stream_task
    from taskexecutor.task import Task

    ran: list[tuple[StreamTaskSpec, object]] = []
    monkeypatch.setattr(stream_task, "run_stream_task", lambda spec, task: ran.append((spec, task)))
    spec = StreamTaskSpec((Numbers(),))
    states: list[TaskState] = []
    ended = threading.Event()

    def report(task, state, cause):
        states.append(state)
        if state in (TaskState.FAILED, TaskState.FINISHED, TaskState.CANCELED):
            ended.set()

    deployment = TaskDeploymentDescriptor(
        job_id="job", attempt_id="attempt", vertex_id="vertex", vertex_name="numbers",
        subtask_index=0, parallelism=1, attempt_number=1, allocation_id="allocation",
        resource_id="te", invokable=cloudpickle.dumps(spec))
    task = Task(deployment, report)
    task.start()
    assert ended.wait(30), "the task did not end"
    assert states[-1] is TaskState.FINISHED
    [(ran_spec, context)] = ran
    assert isinstance(ran_spec, StreamTaskSpec) and context is task.context
    assert [operator.name for operator in ran_spec.operators] == ["Source: numbers"]


def test_a_pyspark_script_is_run_by_the_task_executor_not_read():
    script = PySparkScript("pi.py", "print(3.14)")
    with pytest.raises(TypeError, match=r"pyspark-script\(pi.py\).*run by a TaskExecutor"):
        script.read()


# ---- the executor of a plain `python` run is registered, not imported ----------------------

@pytest.fixture
def no_installed_executor():
    previous = environment._executor
    environment.install(None)
    yield
    environment.install(previous)


def test_an_installed_executor_is_the_one_execute_uses(no_installed_executor):
    class Recording:
        def execute(self, graph):
            raise AssertionError("not called")

    executor = Recording()
    environment.install(executor)
    assert environment.current_executor() is executor


def test_plain_python_gets_the_local_executor_the_client_registers(no_installed_executor):
    from yarn_client.executors import StandaloneLocalExecutor

    assert isinstance(environment.current_executor(), StandaloneLocalExecutor)


def test_with_no_executor_installed_or_registered_execute_says_what_to_do(
        no_installed_executor, monkeypatch):
    monkeypatch.setattr(environment, "entry_points", lambda **selection: ())
    with pytest.raises(environment.NoExecutorError,
                       match=r"flinkyarn run PROGRAM.*entry point 'local' of group "
                             r"'flinkyarn.executors'"):
        environment.current_executor()
