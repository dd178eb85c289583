"""Honest configuration: every option in the registry is read by some component. An
option counts as read when code outside flinkyarn/options.py and configuration.py names
its constant or its key, or uses what options.py makes of it: the field of a
configuration object its `from_configuration` fills from the option, or a function of
options.py that reads it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from flinkyarn import options
from flinkyarn.configuration import ConfigOption

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("flinkyarn", "taskexecutor", "yarn_am", "yarn_client")
REGISTRY = {REPO / "flinkyarn" / "options.py", REPO / "flinkyarn" / "configuration.py"}


def _sources() -> str:
    return "\n".join(path.read_text() for package in PACKAGES
                     for path in sorted((REPO / package).rglob("*.py")) if path not in REGISTRY)


def _read_in(node: ast.AST, names: dict[str, set[str]]) -> set[str]:
    """The option constants `node` reads: conf.get(CONSTANT), or a local name bound to one."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr == "get" and sub.args and isinstance(sub.args[0], ast.Name):
            found.add(sub.args[0].id)
        elif isinstance(sub, ast.Name) and sub.id in names:
            found |= names[sub.id]
    return found


def _uses_in_options() -> list[tuple[str, set[str]]]:
    """(how code outside uses it, the constants it reads) for each configuration-object
    field and each module-level function of options.py."""
    tree = ast.parse((REPO / "flinkyarn" / "options.py").read_text())
    uses: list[tuple[str, set[str]]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            uses.append((rf"\b{node.name}\(", _read_in(node, {})))
        if not isinstance(node, ast.ClassDef):
            continue
        for method in node.body:
            if isinstance(method, ast.FunctionDef) and method.name == "from_configuration":
                local: dict[str, set[str]] = {}
                for statement in method.body:
                    if isinstance(statement, ast.Assign):
                        for target in statement.targets:
                            if isinstance(target, ast.Name):
                                local[target.id] = _read_in(statement.value, local)
                for call in ast.walk(method):
                    if isinstance(call, ast.Call):
                        for keyword in call.keywords:
                            if keyword.arg:
                                uses.append((rf"\.{keyword.arg}\b",
                                             _read_in(keyword.value, local)))
    return uses


def unread_options() -> list[str]:
    sources = _sources()
    uses = _uses_in_options()
    # A function of options.py that other code of options.py calls counts as its callers do.
    text = (REPO / "flinkyarn" / "options.py").read_text()
    unread = []
    for name, value in vars(options).items():
        if not isinstance(value, ConfigOption):
            continue
        if re.search(rf"\b{name}\b", sources) or re.search(rf"[\"']{re.escape(value.key)}[\"']",
                                                            sources):
            continue
        if any(name in read and (re.search(pattern, sources) or
                                 (pattern.endswith(r"\(") and len(re.findall(pattern, text)) > 1))
               for pattern, read in uses):
            continue
        unread.append(value.key)
    return unread


def test_every_registered_option_is_read_by_some_component():
    assert unread_options() == [], ("registered options that nothing reads: wire each in "
                                    "or remove it from flinkyarn/options.py and "
                                    "conf/flinkyarn.yaml")
