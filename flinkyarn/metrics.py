"""A task's I/O metrics, as Flink names and means them: records and bytes in and out
(numRecordsIn/Out, numBytesIn/Out), the share of each second it was busy, backpressured
(waiting for room in its output) or idle (waiting for input) in ms per second
(busyTimeMsPerSecond, backPressuredTimeMsPerSecond, idleTimeMsPerSecond), and how full
its input and output buffers are (inPoolUsage, outPoolUsage: 0 to 1).

The task's own thread counts into a TaskIO (plain attribute updates, no lock: one
writer); readers on other threads (the TaskExecutor's heartbeat answer to the JobMaster,
its Prometheus endpoint) take `snapshot()`s, which may lag a batch behind. The rates are
over the last RATE_WINDOW seconds of snapshots (since the start before that), so each
reader sees rates of the recent past whatever its own pace.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

import msgspec

RATE_WINDOW = 10.0


class TaskIOMetrics(msgspec.Struct, frozen=True):
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    busy_ms_per_second: float = 0.0
    backpressured_ms_per_second: float = 0.0
    idle_ms_per_second: float = 0.0
    input_fill: float = 0.0    # 0..1, of the input gate's queue
    output_fill: float = 0.0   # 0..1, of the pipelined outputs' buffers
    duration: float = 0.0      # seconds it has run (ran, once ended)

    def plus(self, other: TaskIOMetrics) -> TaskIOMetrics:
        """Sums of counts, the larger of rates and fills (a vertex's: its busiest subtask's,
        as Flink's web UI shows a vertex's backpressure)."""
        return TaskIOMetrics(
            self.records_in + other.records_in, self.records_out + other.records_out,
            self.bytes_in + other.bytes_in, self.bytes_out + other.bytes_out,
            max(self.busy_ms_per_second, other.busy_ms_per_second),
            max(self.backpressured_ms_per_second, other.backpressured_ms_per_second),
            max(self.idle_ms_per_second, other.idle_ms_per_second),
            max(self.input_fill, other.input_fill), max(self.output_fill, other.output_fill),
            max(self.duration, other.duration))


def _no_fill() -> float:
    return 0.0


class TaskIO:
    """Counted by one task's thread; `snapshot()` from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.records_in = self.records_out = self.bytes_in = self.bytes_out = 0
        self.idle = 0.0           # seconds waiting for input
        self.backpressured = 0.0  # seconds waiting for room in an output
        self.started = clock()
        self.ended: float | None = None
        self.input_fill: Callable[[], float] = _no_fill
        self.output_fill: Callable[[], float] = _no_fill
        self._samples: deque[tuple[float, float, float]] = deque()  # (time, idle, backpressured)
        self._lock = threading.Lock()

    # ---- the task's thread

    def now(self) -> float:
        return self._clock()

    def received(self, rows: int, nbytes: int) -> None:
        self.records_in += rows
        self.bytes_in += nbytes

    def sent(self, rows: int, nbytes: int) -> None:
        self.records_out += rows
        self.bytes_out += nbytes

    def end(self) -> None:
        if self.ended is None:
            self.ended = self._clock()

    # ---- readers

    def snapshot(self) -> TaskIOMetrics:
        now = self.ended if self.ended is not None else self._clock()
        idle, backpressured = self.idle, self.backpressured
        with self._lock:
            samples = self._samples
            if self.ended is None:
                samples.append((now, idle, backpressured))
            while len(samples) > 1 and now - samples[1][0] >= RATE_WINDOW:
                samples.popleft()
            start, idle_before, backpressured_before = (
                samples[0] if samples and now - samples[0][0] >= 0.5 else
                (self.started, 0.0, 0.0))
        span = now - start
        if span <= 0:
            idle_rate = backpressured_rate = 0.0
        else:
            idle_rate = min(1000.0, 1000.0 * (idle - idle_before) / span)
            backpressured_rate = min(1000.0, 1000.0 * (backpressured - backpressured_before) / span)
        busy_rate = max(0.0, 1000.0 - idle_rate - backpressured_rate) if span > 0 else 0.0
        running = self.ended is None
        return TaskIOMetrics(
            self.records_in, self.records_out, self.bytes_in, self.bytes_out,
            round(busy_rate, 1), round(backpressured_rate, 1), round(idle_rate, 1),
            self.input_fill() if running else 0.0, self.output_fill() if running else 0.0,
            round(now - self.started, 3))


class UncountedTaskIO(TaskIO):
    """A TaskIO that counts nothing and reads no clock (metrics.task-io: false): what
    counting costs is measured against it (bench/metrics_cost.py)."""

    def now(self) -> float:
        return 0.0

    def received(self, rows: int, nbytes: int) -> None:
        pass

    def sent(self, rows: int, nbytes: int) -> None:
        pass
