"""Failure causes (flinkyarn/failures.py): a user function failing deep inside the
framework is reported at the user's file and line, with what it chains.

User code here is compiled under a file name outside this project, as a user's program
is; framework code is the project's own (the StreamTask's `_call`, the operators), so
the frames are the ones a TaskExecutor's task thread sees."""

from __future__ import annotations

import textwrap
import threading

import cloudpickle
import pyarrow as pa

from flinkyarn import failures
from flinkyarn.failures import failure_cause
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.gateways.task_executor import TaskDeploymentDescriptor
from flinkyarn.pipeline.operators import FilterOperator, MapOperator
from taskexecutor.stream_task import _call
from taskexecutor.task import Task, TaskFailure

PROGRAM = "/home/user/pipeline.py"  # the client's path: not on this machine
BATCH = pa.record_batch([pa.array([1, 2, 3])], names=["n"])


def user_code(source: str, filename: str = PROGRAM) -> dict:
    """The names `source` defines, as if it were the user's program `filename` (run as
    `flinkyarn run` runs it)."""
    namespace: dict = {"__name__": "__main__", "__file__": filename}
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return namespace


def line_of(source: str, text: str) -> int:
    """The number of the line of `source` holding `text`."""
    [number] = [n for n, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line]
    return number


def raised_by(call, *args) -> BaseException:
    """What call(*args) raises, with its traceback starting below this helper's frame, as
    the task thread (framework) catches it: the test's own frames are not the user's."""
    try:
        call(*args)
    except BaseException as error:
        return error.with_traceback(error.__traceback__.tb_next)
    raise AssertionError("nothing was raised")


def in_operator(fn, operator=MapOperator) -> BaseException:
    """The error of `fn` called by an operator of the StreamTask, as a task reports it."""
    return raised_by(_call, operator(fn), "process", BATCH, 0)


def files(section: str) -> list[str]:
    return [line.strip() for line in section.splitlines() if line.strip().startswith("File ")]


def sections(cause: str) -> list[str]:
    """The cause split into one text per exception of its chain, outermost first."""
    parts, current = [], []
    for line in cause.splitlines():
        if line.startswith(("caused by: ", "while handling: ")) and current:
            parts.append("\n".join(current))
            current = []
        current.append(line)
    return parts + ["\n".join(current)]


PARSE = """
    def lookup(fields, name):
        try:
            return fields[name]
        except KeyError as error:
            raise ValueError(f"no field {name!r}") from error

    def parse_line(batch):
        return lookup({}, "word")
"""


def test_the_users_frames_are_shown_not_the_frameworks():
    cause = failure_cause(in_operator(user_code(PARSE)["parse_line"]), task="Map (1/2) #1")

    wrapper, value_error, key_error = sections(cause)
    assert wrapper == "OperatorError: operator 'map': ValueError: no field 'word' (in task Map (1/2) #1)"
    assert files(value_error) == [
        f'File "{PROGRAM}", line {line_of(PARSE, "return lookup(")}, in parse_line',
        f'File "{PROGRAM}", line {line_of(PARSE, "raise ValueError")}, in lookup']
    assert "stream_task.py" not in cause and "operators.py" not in cause
    assert "test_failures.py" not in cause


def test_the_source_line_shows_when_the_file_is_here(tmp_path):
    program = tmp_path / "pipeline.py"
    program.write_text(textwrap.dedent(PARSE))
    cause = failure_cause(in_operator(user_code(PARSE, str(program))["parse_line"]))

    value_error = sections(cause)[1]
    assert value_error.splitlines()[1:] == [
        f'  File "{program}", line {line_of(PARSE, "return lookup(")}, in parse_line',
        '    return lookup({}, "word")',
        f'  File "{program}", line {line_of(PARSE, "raise ValueError")}, in lookup',
        "    raise ValueError(f\"no field {name!r}\") from error"]


def test_a_library_failing_below_the_users_line_shows_both():
    source = """
        import pyarrow.compute as pc

        def add_label(batch):
            return pc.add(batch.column(0), "label")
    """
    cause = failure_cause(in_operator(user_code(source)["add_label"]))

    arrow_error = sections(cause)[1]
    assert arrow_error.startswith("caused by: ArrowNotImplementedError: ")
    user, called, *rest = files(arrow_error)
    assert user == f'File "{PROGRAM}", line {line_of(source, "pc.add")}, in add_label'
    assert "pyarrow/compute.py" in called     # what the user's line called
    assert len(rest) == 1 and "pyarrow" in rest[0]  # and where it raised
    assert "frames not shown" in arrow_error


def test_a_chained_cause_and_context_each_show_their_own_user_frames():
    source = """
        def read(row):
            return row["amount"]

        def convert(batch):
            try:
                read({})
            except KeyError:
                raise TypeError("amount missing")
    """
    cause = failure_cause(raised_by(user_code(source)["convert"], BATCH))

    type_error, key_error = sections(cause)
    assert type_error.splitlines()[0] == "TypeError: amount missing"
    assert files(type_error) == [f'File "{PROGRAM}", line {line_of(source, "raise TypeError")}, in convert']
    assert key_error.splitlines()[0] == "while handling: KeyError: 'amount'"
    assert files(key_error) == [
        f'File "{PROGRAM}", line {line_of(source, "read({})")}, in convert',
        f'File "{PROGRAM}", line {line_of(source, "return row")}, in read']


def test_a_cause_made_but_never_raised_shows_its_type_and_message():
    source = """
        def check(batch):
            raise ValueError("bad row 7") from KeyError("id")
    """
    cause = failure_cause(raised_by(user_code(source)["check"], BATCH))

    assert sections(cause)[1] == "caused by: KeyError: 'id'"


def test_a_suppressed_context_is_not_shown():
    source = """
        def check(batch):
            try:
                {}["id"]
            except KeyError:
                raise ValueError("no id") from None
    """
    cause = failure_cause(raised_by(user_code(source)["check"], BATCH))

    assert "KeyError" not in cause and "while handling" not in cause
    assert sections(cause) == [cause]


def test_without_any_user_frame_the_innermost_frames_show():
    # A builtin as the filter function: the operator's own check raises, no user code ran.
    cause = failure_cause(in_operator(len, FilterOperator))

    wrapper, type_error = sections(cause)
    assert wrapper.startswith("OperatorError: operator 'filter': TypeError:")
    assert files(wrapper) == []  # the wrapper only passed it on
    shown = files(type_error)
    assert 0 < len(shown) <= failures.FALLBACK_FRAMES
    assert "operators.py" in shown[-1] and shown[-1].endswith("in _mask")


def test_a_long_message_a_wrapper_repeats_is_shown_once():
    script_failure = RuntimeError("the script exited with status 1\nTraceback ...\nValueError: bad")

    def wrap():
        try:
            raise script_failure
        except RuntimeError as error:
            raise LookupError(f"operator 'script': RuntimeError: {error}") from error

    cause = failure_cause(raised_by(wrap), task="script (1/1) #1")

    assert cause.count("Traceback ...") == 1
    assert "\ncaused by: RuntimeError: the script exited with status 1\n" in cause


def test_bounds_frames_chain_and_message():
    source = """
        def deep(n):
            if n == 0:
                raise ValueError("x" * 100_000)
            return deep(n - 1)

        def chain(n):
            try:
                if n == 0:
                    raise KeyError("bottom")
                chain(n - 1)
            except Exception as error:
                raise RuntimeError(f"level {n}") from error
    """
    code = user_code(source)

    deep = failure_cause(raised_by(code["deep"], 50))
    assert len(files(deep)) == failures.USER_FRAMES
    assert len(deep) < failures.MESSAGE_CHARS + 1000
    assert deep.splitlines()[0].endswith(f"... ({100_000 - failures.MESSAGE_CHARS} more characters)")

    long_chain = failure_cause(raised_by(code["chain"], 10))
    shown = sections(long_chain)
    assert len(shown) == 1 + failures.CHAINED
    assert shown[0].splitlines()[0] == "RuntimeError: level 10"
    assert long_chain.endswith(f"... and {12 - len(shown)} more chained exceptions")


def test_a_cycle_in_the_chain_ends_it():
    first, second = ValueError("first"), KeyError("second")
    first.__cause__, second.__cause__ = second, first
    assert failure_cause(first) == "ValueError: first\ncaused by: KeyError: 'second'"


def test_the_first_line_names_the_task_even_for_a_message_of_many_lines():
    cause = failure_cause(RuntimeError("the script exited with status 1\nTraceback ..."),
                          task="PySpark (1/1) #1")
    assert cause == "RuntimeError: the script exited with status 1 (in task PySpark (1/1) #1)\nTraceback ..."


def test_a_task_reports_where_its_user_function_failed():
    # As on a TaskExecutor: the function arrives cloudpickled, which renames its code's
    # file to "<dynamic-code>"; the user's file is still known by its module.
    source = """
        def invoke(ctx):
            raise ValueError("no such column 'x'") from KeyError("x")
    """
    reported: list[tuple[TaskState, TaskFailure | None]] = []
    ended = threading.Event()

    def report(task, state, cause):
        reported.append((state, cause))
        if state in (TaskState.FAILED, TaskState.FINISHED, TaskState.CANCELED):
            ended.set()

    deployment = TaskDeploymentDescriptor(
        job_id="job", attempt_id="attempt", vertex_id="vertex", vertex_name="boom",
        subtask_index=0, parallelism=1, attempt_number=1, allocation_id="allocation",
        resource_id="te", invokable=cloudpickle.dumps(user_code(source)["invoke"]))
    Task(deployment, report).start()
    assert ended.wait(30), "the task did not end"

    state, failure = reported[-1]
    assert state is TaskState.FAILED
    assert failure.cause.splitlines() == [
        "ValueError: no such column 'x' (in task boom (1/1) #1)",
        f'  File "{PROGRAM}", line {line_of(source, "raise ValueError")}, in invoke',
        "caused by: KeyError: 'x'"]


def test_code_shipped_from_a_session_without_a_file_is_still_the_users():
    namespace: dict = {"__name__": "__main__"}  # a notebook's main module has no __file__
    exec(compile("def clean(batch):\n    raise ValueError('bad')\n", "<ipython-input-3>", "exec"),
         namespace)
    shipped = cloudpickle.loads(cloudpickle.dumps(namespace["clean"]))

    cause = failure_cause(in_operator(shipped))

    assert files(sections(cause)[1]) == ['File "<dynamic-code>", line 2, in clean']
