"""The HTML of the dashboard and the history server: Jinja2 templates (yarn_am/templates)
with autoescape on, so whatever users named (jobs, vertices, failure causes, output) is
escaped by the engine, never by hand; and the one stylesheet and script of every page,
which the Content-Security-Policy (PAGE_HEADERS) admits by their hashes and nothing else.

What the templates cannot say simply is computed here: where the job graph's boxes and
edges go (`graph_layout`), where restarts sit on a job's timeline (`restart_timeline`),
and the job's exceptions (`job_exceptions`).
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from flinkyarn.gateways.dispatcher import JobDetails, RestartView, VertexDetails

TEMPLATES = Path(__file__).parent / "templates"
STYLE = (TEMPLATES / "dashboard.css").read_text()
SCRIPT = (TEMPLATES / "dashboard.js").read_text()

TERMINAL = frozenset({"FINISHED", "FAILED", "CANCELED"})  # a job's final states


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


NO_CACHE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
# Only the page's own script and style run, even if something slipped past escaping;
# the script may talk only to the page's own origin (its refresh, a job's cancel).
PAGE_HEADERS = {**NO_CACHE, "Content-Security-Policy": (
    f"default-src 'none'; script-src {_hash(SCRIPT)}; style-src {_hash(STYLE)}; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'")}


# ---- values as the pages show them -------------------------------------------------------

def css(state: str) -> str:
    """A CSS class name part for a state, whatever characters the state has."""
    return "".join(c for c in state.lower() if c.isascii() and c.isalnum()) or "unknown"


def timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def size(count: int) -> str:
    amount = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"


def per_second(count: int, seconds: float) -> str:
    """A count over the seconds it took, as a rate ("" before a first second)."""
    if seconds <= 0:
        return ""
    rate = count / seconds
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"


def percent(ms_per_second: float) -> str:
    return f"{ms_per_second / 10:.0f}%"


def state(value: str) -> Markup:
    return Markup('<span class="state s-{}">{}</span>').format(css(value), value)


def counts(by_state: dict[str, int]) -> Markup:
    return Markup(" ").join(Markup('<span class="count s-{}">{} {}</span>').format(css(s), s, n)
                            for s, n in by_state.items() if n)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def task_totals(job: JobDetails) -> dict[str, int]:
    totals: dict[str, int] = {}
    for vertex in job.vertices:
        for name, count in vertex.state_counts.items():
            totals[name] = totals.get(name, 0) + count
    return totals


# ---- the job graph -----------------------------------------------------------------------

BOX_WIDTH, BOX_HEIGHT, GAP_X, GAP_Y, PAD = 200, 58, 90, 22, 12


@dataclass(frozen=True)
class Box:
    vertex: VertexDetails
    x: int
    y: int
    pressure: str  # bp-none, bp-ok, bp-mid, bp-high


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    partitioner: str
    path: str
    label_x: int
    label_y: int


@dataclass(frozen=True)
class GraphLayout:
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    box_width: int = BOX_WIDTH
    box_height: int = BOX_HEIGHT


def pressure(vertex: VertexDetails) -> str:
    """The colour class of a vertex: its busiest subtask's backpressured share of time."""
    if vertex.metrics is None:
        return "bp-none"
    share = vertex.metrics.backpressured_ms_per_second / 1000
    return "bp-ok" if share < 0.1 else "bp-mid" if share <= 0.5 else "bp-high"


def graph_layout(vertices: list[VertexDetails]) -> GraphLayout:
    """Vertices in columns by their longest path from a source (sources left), in the
    job's order within a column; each edge a curve from its producer's right side to its
    consumer's left side, labelled with its partitioner at its middle."""
    by_id = {v.vertex_id: v for v in vertices}
    depth: dict[str, int] = {}

    def depth_of(vertex_id: str, seen: frozenset[str] = frozenset()) -> int:
        if vertex_id not in depth:
            sources = [i.source for i in by_id[vertex_id].inputs
                       if i.source in by_id and i.source not in seen]
            depth[vertex_id] = 1 + max((depth_of(s, seen | {vertex_id}) for s in sources),
                                       default=-1)
        return depth[vertex_id]

    columns: dict[int, list[VertexDetails]] = {}
    for vertex in vertices:
        columns.setdefault(depth_of(vertex.vertex_id), []).append(vertex)
    if not columns:
        return GraphLayout(0, 0)
    places: dict[str, Box] = {}
    for column, members in columns.items():
        for row, vertex in enumerate(members):
            places[vertex.vertex_id] = Box(vertex, PAD + column * (BOX_WIDTH + GAP_X),
                                           PAD + row * (BOX_HEIGHT + GAP_Y), pressure(vertex))
    edges = []
    for vertex in vertices:
        target = places[vertex.vertex_id]
        for spec in vertex.inputs:
            source = places.get(spec.source)
            if source is None:
                continue
            x1, y1 = source.x + BOX_WIDTH, source.y + BOX_HEIGHT // 2
            x2, y2 = target.x, target.y + BOX_HEIGHT // 2
            bend = max(GAP_X // 2, abs(x2 - x1) // 2)
            edges.append(Edge(spec.source, vertex.vertex_id, spec.partitioner,
                              f"M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}",
                              (x1 + x2) // 2, (y1 + y2) // 2 - 5))
    width = PAD * 2 + len(columns) * BOX_WIDTH + (len(columns) - 1) * GAP_X
    rows = max(len(members) for members in columns.values())
    height = PAD * 2 + rows * BOX_HEIGHT + (rows - 1) * GAP_Y
    return GraphLayout(width, height, list(places.values()), edges)


# ---- restarts and exceptions -------------------------------------------------------------

@dataclass(frozen=True)
class Mark:
    x: int
    restart: RestartView


@dataclass(frozen=True)
class Timeline:
    width: int
    left: int
    right: int
    marks: list[Mark]


def restart_timeline(job: JobDetails, now: float, width: int = 640) -> Timeline:
    left, right = 10, width - 10
    span = max((job.end_time or now) - job.start_time, 1e-3)
    marks = [Mark(left + round((right - left) * min(max((r.time - job.start_time) / span, 0), 1)),
                  r) for r in job.restart_history]
    return Timeline(width, left, right, marks)


@dataclass(frozen=True)
class SeenException:
    time: float | None
    task: str
    cause: str
    root: bool


_TASK_FAILED = re.compile(r"(.+? \(\d+/\d+\)) failed: ", re.S)


def job_exceptions(job: JobDetails) -> list[SeenException]:
    """The job's failure (if it failed) and each failure it restarted after, newest
    first, with the task that raised it ("NAME (i/n)"); the root cause marked."""
    seen = [SeenException(r.time, r.failed_task, r.cause, r.cause == job.root_cause)
            for r in reversed(job.restart_history)]
    if job.status == "FAILED" and job.failure_cause:
        named = _TASK_FAILED.match(job.root_cause or "")
        final = SeenException(job.end_time, named.group(1) if named else "the job",
                              job.failure_cause, False)
        if not seen or seen[0].cause != final.cause:
            seen.insert(0, final)
    if seen and not any(x.root for x in seen):
        seen[0] = SeenException(seen[0].time, seen[0].task, seen[0].cause, True)
    return seen


# ---- rendering ---------------------------------------------------------------------------

_environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
    lstrip_blocks=True, undefined=jinja2.StrictUndefined)
_environment.filters.update(
    css=css, timestamp=timestamp, duration=duration, bytes=size, percent=percent,
    per_second=per_second, state=state,
    counts=counts, first_line=first_line, task_totals=task_totals,
    terminal=lambda status: status in TERMINAL)
_environment.globals.update(graph_layout=graph_layout, restart_timeline=restart_timeline,
                            job_exceptions=job_exceptions)


def render(template: str, title: str, mode: str | None = None, **context: Any) -> str:
    """The page of `template` (which extends base.html) with the pages' style and script."""
    return _environment.get_template(template).render(
        title=title, mode=mode, style=Markup(STYLE), script=Markup(SCRIPT), **context)

