"""Failure causes for people: where the user's code failed, not where flinkyarn noticed.

A task's failure cause travels as text from the TaskExecutor to the JobMaster and on to
the CLI, REST and the dashboard. `failure_cause` makes that text from an exception:

    OperatorError: operator 'parse': ValueError: no field 'x' (in task Map (1/2) #1)
    caused by: ValueError: no field 'x'
      File "/home/alice/pipeline.py", line 12, in parse_line
        return lookup(fields, "x")
      File "/home/alice/pipeline.py", line 5, in lookup
        raise ValueError(f"no field {name!r}") from error
    caused by: KeyError: 'x'

The first line is the failure in one line (the CLI's and the dashboard's summary, the
root cause of `flinkyarn list`). Then, for the exception and each one it chains
(`__cause__` as "caused by:", else `__context__` as "while handling:" unless
`__suppress_context__`), its innermost user frames and, when it was raised below them
in a library or in flinkyarn, the frame the user's code called and the one that raised.

User code is whatever is not framework: framework is flinkyarn's own packages
(flinkyarn/, taskexecutor/, yarn_am/, yarn_client/ of this copy), the standard library
and installed libraries (site-packages). A frame is judged by its code's file, or, when
that is not an absolute path (Cython's "pyarrow/error.pxi"), by its module's `__file__`.
Code that cloudpickle shipped by value (the functions of the user's program) is the
user's; its file is its module's `__file__`, as cloudpickle replaces the code's file name.
That file need not exist here (on YARN it is the client's path): the file and line
always show, the source line when linecache has it. A failure with no user frame at all
(a bug of ours) shows instead the innermost frames of the innermost exception raised
(the wrappers around it only passed it on).

Bounded: a few frames per exception, a few chained exceptions, long messages cut.
Standard library only; safe to call from any thread.
"""

from __future__ import annotations

import functools
import linecache
import os
import site
import sysconfig
import traceback
from pathlib import Path
from types import FrameType

USER_FRAMES = 3          # innermost user frames shown per exception
CALLED_FRAMES = 2        # frames shown below the innermost user frame: called, raised
FALLBACK_FRAMES = 3      # innermost frames of the origin when no user frame exists
CHAINED = 4              # chained exceptions shown after the first
MESSAGE_CHARS = 4000     # a message is cut after this many characters
SOURCE_CHARS = 200       # a source line is cut after this many characters

_PACKAGES = ("flinkyarn", "taskexecutor", "yarn_am", "yarn_client")
_LIBRARY_FOLDERS = ("site-packages", "dist-packages")
_SHIPPED_CODE = "<dynamic-code>"  # cloudpickle's co_filename for code it pickles by value


def failure_cause(error: BaseException, task: str | None = None) -> str:
    """The failure cause of `error` as the module docstring shows it; `task` names where
    it happened, appended to the first line as "(in task TASK)". Never raises for any
    exception (a message that cannot be turned into text says so)."""
    chain, more = _chain(error)
    frames = [_frames(link) for _, link in chain]
    if any(_is_user_code(frame) for trace in frames for frame, _ in trace):
        chosen = [_around_user_code(trace) for trace in frames]
    else:  # ours alone: where the innermost raised exception, the origin, was raised
        origin = max((i for i, trace in enumerate(frames) if trace), default=0)
        chosen = [_innermost(trace) if i == origin else [] for i, trace in enumerate(frames)]
    lines: list[str] = []
    messages: list[str] = []
    for (label, link), trace, shown in zip(chain, frames, chosen):
        message = _message(link)
        if "\n" in message and any(message in earlier for earlier in messages):
            # A wrapper repeated this long message in its own (the StreamTask's
            # OperatorError does): once is enough.
            message = message.split("\n", 1)[0]
        else:
            messages.append(message)
        headline = f"{type(link).__name__}: {message}" if message else type(link).__name__
        if not lines and task:
            first, newline, rest = headline.partition("\n")
            headline = f"{first} (in task {task}){newline}{rest}"
        lines.append(label + headline)
        lines.extend(_render(trace, shown))
    if more:
        lines.append(f"... and {more} more chained exception{'s' if more > 1 else ''}")
    return "\n".join(lines)


def _chain(error: BaseException) -> tuple[list[tuple[str, BaseException]], int]:
    """The error and up to CHAINED exceptions it chains, each with its label, and how
    many more the chain holds (counted up to a hundred; a cycle ends it)."""
    chain, seen, current, more = [("", error)], {id(error)}, error, 0
    while len(chain) + more < 100:
        label, following = _next(current)
        if following is None or id(following) in seen:
            break
        current = following
        seen.add(id(current))
        if len(chain) <= CHAINED:
            chain.append((label, current))
        else:
            more += 1
    return chain, more


def _next(error: BaseException) -> tuple[str, BaseException | None]:
    if error.__cause__ is not None:
        return "caused by: ", error.__cause__
    if error.__context__ is not None and not error.__suppress_context__:
        return "while handling: ", error.__context__
    return "", None


def _message(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:  # a broken __str__ must not hide the failure itself
        message = "<the message could not be made into text>"
    if len(message) > MESSAGE_CHARS:
        message = f"{message[:MESSAGE_CHARS]}... ({len(message) - MESSAGE_CHARS} more characters)"
    return message


def _frames(error: BaseException) -> list[tuple[FrameType, int | None]]:
    """The error's traceback, outermost frame first (where it was caught) to innermost
    (where it was raised); empty for an exception that was made but never raised."""
    return list(traceback.walk_tb(error.__traceback__))


def _around_user_code(trace: list[tuple[FrameType, int | None]]) -> list[int]:
    """Indexes into trace of the innermost user frames, and below the innermost of them
    the first frame it called and the frame that raised."""
    user = [i for i, (frame, _) in enumerate(trace) if _is_user_code(frame)]
    if not user:
        return []
    innermost = user[-1]
    below = list(range(innermost + 1, len(trace)))
    called = below if len(below) <= CALLED_FRAMES else [below[0], below[-1]]
    return user[-USER_FRAMES:] + called


def _innermost(trace: list[tuple[FrameType, int | None]]) -> list[int]:
    return list(range(max(0, len(trace) - FALLBACK_FRAMES), len(trace)))


def _render(trace: list[tuple[FrameType, int | None]], chosen: list[int]) -> list[str]:
    """The chosen frames as Python prints them, with a line for each gap between them."""
    lines: list[str] = []
    for previous, index in zip([None, *chosen], chosen):
        if previous is not None and index - previous > 1:
            skipped = index - previous - 1
            lines.append(f"  ... {skipped} frame{'s' if skipped > 1 else ''} not shown")
        frame, lineno = trace[index]
        filename = _file_of(frame)
        lines.append(f'  File "{filename}", line {lineno if lineno is not None else "?"}, '
                     f"in {frame.f_code.co_name}")
        source = linecache.getline(filename, lineno).strip() if lineno else ""
        if source:
            if len(source) > SOURCE_CHARS:
                source = source[:SOURCE_CHARS] + "..."
            lines.append(f"    {source}")
    return lines


def _file_of(frame: FrameType) -> str:
    """The file the frame's code comes from. cloudpickle ships a function's code by value
    with the file name "<dynamic-code>", but keeps its module's `__file__` in the
    function's globals: that is the user's file (on YARN, the client's path)."""
    filename = frame.f_code.co_filename
    if filename == _SHIPPED_CODE:
        module_file = frame.f_globals.get("__file__")
        if isinstance(module_file, str) and module_file:
            return module_file
    return filename


def _is_user_code(frame: FrameType) -> bool:
    if frame.f_code.co_filename == _SHIPPED_CODE:  # only the user's code travels by value
        return True
    filename = frame.f_code.co_filename
    if not os.path.isabs(filename):
        module_file = frame.f_globals.get("__file__")
        if isinstance(module_file, str) and os.path.isabs(module_file):
            filename = module_file
        elif filename.startswith("<"):  # "<frozen importlib._bootstrap>", "<string>"
            return False
    return not _is_framework_file(filename)


@functools.lru_cache(maxsize=1024)
def _is_framework_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    if any(part in _LIBRARY_FOLDERS for part in Path(path).parts):
        return True
    candidates = {path, os.path.realpath(path)}
    return any(candidate == root or candidate.startswith(root + os.sep)
               for candidate in candidates for root in _framework_roots())


@functools.lru_cache(maxsize=1)
def _framework_roots() -> tuple[str, ...]:
    """Folders whose code is framework: our packages, the standard library, installed
    libraries (each as found and with symlinks resolved)."""
    project = Path(__file__).resolve().parent.parent
    roots = [str(project / package) for package in _PACKAGES]
    paths = sysconfig.get_paths()
    roots += [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    try:
        roots += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # an old virtualenv's site module lacks them
        pass
    found = {os.path.abspath(root) for root in roots if root}
    return tuple(sorted(found | {os.path.realpath(root) for root in found}))
