"""The import graph of our code, read with `ast` (nothing is imported):

- no import cycle among the modules of flinkyarn/ and taskexecutor/ (the few older ones
  listed in KNOWN_CYCLES excepted; none of them touches taskexecutor/spark/);
- neither the client (yarn_client/) nor the AppMaster (yarn_am/) imports a module of the
  TaskExecutor: what they share with it is in the core, flinkyarn/;
- every `python -m MODULE` our code starts names a module that exists.

An import counts wherever it runs: at the top, inside a function or a class; not under
`if TYPE_CHECKING:`, which never runs (annotations only)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import flinkyarn
from tests.unit.test_layering import imported_modules

ROOT = Path(flinkyarn.__file__).resolve().parent.parent
GRAPHED = ("flinkyarn", "taskexecutor")
ROLES_WITHOUT_THE_TASKEXECUTOR = ("yarn_client", "yarn_am")
# Cycles older than this test, outside the Spark integration: each is broken at run time
# by an import inside a function. Shrink the list; never grow it.
KNOWN_CYCLES = {
    frozenset({"flinkyarn.configuration", "flinkyarn.options"}),
    frozenset({"flinkyarn.hadoop", "flinkyarn.hdfs", "flinkyarn.kerberos"}),
    frozenset({"taskexecutor.task", "taskexecutor.stream_task"}),
}


def modules(packages: tuple[str, ...]) -> dict[str, Path]:
    """Module name -> file, for every module of `packages`."""
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    return {id(node) for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for statement in block.body for node in ast.walk(statement)}


def runtime_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, name) of each module an import of `path` may load at run time: for
    `from A import B`, both A and A.B (B may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    known = modules(packages)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for _, imported in runtime_imports(path):
            if imported in known and imported != name and not name.startswith(imported + "."):
                graph[name].add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_flinkyarn_and_the_taskexecutor_have_no_new_import_cycle():
    graph = import_graph(GRAPHED)
    assert "taskexecutor.spark.bridge" in graph and "flinkyarn.spark.class_data" in graph
    new = [sorted(cycle) for cycle in cycles(graph) if cycle not in KNOWN_CYCLES]
    assert new == [], f"import cycles: {new}"


def test_no_cycle_touches_the_spark_integration():
    touching = [sorted(cycle) for cycle in cycles(import_graph(GRAPHED))
                if any(name.startswith(("taskexecutor.spark", "flinkyarn.spark")) for name in cycle)]
    assert touching == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_and_skips_type_checking():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n"
                     "    from taskexecutor.task import Task\n"
                     "def f():\n"
                     "    from taskexecutor.spark import bridge\n")
    skipped = _type_checking_only(tree)
    imported = [node for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and id(node) not in skipped]
    assert [node.module for node in imported] == ["typing", "taskexecutor.spark"]


def test_the_client_and_the_appmaster_import_no_taskexecutor_module():
    """Anywhere, under TYPE_CHECKING too: a type of the TaskExecutor's that they need
    belongs in the core as well."""
    roles = modules(ROLES_WITHOUT_THE_TASKEXECUTOR)
    assert len(roles) > 20  # the walk found them
    offending = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
                 for path in roles.values()
                 for line, name in imported_modules(ast.parse(path.read_text(encoding="utf-8")))
                 if name.split(".")[0] == "taskexecutor"]
    assert offending == []


def _module_arguments(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, MODULE) of each `"-m", "MODULE"` pair of string constants in a list or
    tuple, and each "-m MODULE" inside one string (a shell command)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            for first, second in zip(items, items[1:]):
                if (isinstance(first, ast.Constant) and first.value == "-m"
                        and isinstance(second, ast.Constant) and isinstance(second.value, str)):
                    yield node.lineno, second.value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "-m " in node.value:
            words = node.value.split()
            yield from ((node.lineno, words[i + 1]) for i, word in enumerate(words[:-1])
                        if word == "-m")


def test_every_module_our_code_starts_with_python_m_exists():
    """The process command lines name their entry modules as strings: a module moved
    without its command lines would only fail when the process starts."""
    ours = modules(("flinkyarn", "taskexecutor", "yarn_client", "yarn_am"))
    named = [(path, line, name) for path in [*ours.values(), *sorted((ROOT / "tests").rglob("*.py")),
                                             *sorted((ROOT / "bench").rglob("*.py"))]
             for line, name in _module_arguments(ast.parse(path.read_text(encoding="utf-8")))
             if name.split(".")[0] in ("flinkyarn", "taskexecutor", "yarn_client", "yarn_am")]
    assert any(name == "taskexecutor.spark.driver" for _, _, name in named)
    missing = [f"{path.relative_to(ROOT)}:{line}: -m {name}" for path, line, name in named
               if name not in ours]
    assert missing == []


def test_the_names_the_core_gives_the_taskexecutor_s_spark_processes_exist():
    """flinkyarn/spark/ names two modules of taskexecutor/spark/ without importing them:
    the class-data trainer it starts and the Python daemon whose source it ships."""
    from flinkyarn.spark import class_data, python_daemon

    ours = modules(("taskexecutor",))
    assert class_data.TRAINER in ours
    assert python_daemon.LOCAL_MODULE in ours
    assert python_daemon.source() == ours[python_daemon.LOCAL_MODULE]
