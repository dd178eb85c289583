"""A task's I/O metrics (flinkyarn/metrics.py) and the Prometheus families made of them
(flinkyarn/prometheus.py)."""

from __future__ import annotations

import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from flinkyarn import prometheus
from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.metrics import RATE_WINDOW, TaskIO, TaskIOMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_counts_and_time_shares_over_the_recent_window():
    clock = Clock()
    io = TaskIO(clock)
    io.received(10, 800)
    io.sent(4, 320)
    io.sent(6, 480)
    clock.now += 2.0
    io.idle += 0.5
    io.backpressured += 1.0
    first = io.snapshot()   # since the start: 2 s, a quarter idle, half backpressured
    assert (first.records_in, first.records_out, first.bytes_in, first.bytes_out) == (10, 10, 800, 800)
    assert (first.idle_ms_per_second, first.backpressured_ms_per_second,
            first.busy_ms_per_second) == (250.0, 500.0, 250.0)
    clock.now += 4.0        # then 4 s of work alone: the rates follow the recent past
    second = io.snapshot()
    assert (second.idle_ms_per_second, second.backpressured_ms_per_second,
            second.busy_ms_per_second) == (0.0, 0.0, 1000.0)
    clock.now += RATE_WINDOW * 2
    io.idle += RATE_WINDOW   # half of the last window idle
    third = io.snapshot()
    assert 450.0 <= third.idle_ms_per_second <= 550.0
    io.end()
    clock.now += 100.0       # ended: its duration and counts stay as they were
    assert io.snapshot().duration == pytest.approx(6.0 + RATE_WINDOW * 2)


def test_a_vertex_sums_counts_and_shows_its_busiest_subtask():
    a = TaskIOMetrics(1, 2, 3, 4, 100.0, 700.0, 200.0, 0.5, 0.9, 3.0)
    b = TaskIOMetrics(10, 20, 30, 40, 900.0, 0.0, 100.0, 0.1, 0.2, 5.0)
    assert a.plus(b) == TaskIOMetrics(11, 22, 33, 44, 900.0, 700.0, 200.0, 0.5, 0.9, 5.0)


def test_families_parse_as_prometheus_text_and_unknown_reporters_are_refused():
    metrics = TaskIOMetrics(records_out=1000, bytes_out=8000, busy_ms_per_second=250.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(prometheus.Collector(lambda: prometheus.io_families(
        "flinkyarn_task", prometheus.TASK_LABELS, [(["j1", 'say "hi"\n', "0", "1"], metrics)])))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    [sample] = families["flinkyarn_task_records_out"].samples
    assert sample.name == "flinkyarn_task_records_out_total" and sample.value == 1000
    assert sample.labels == {"job_id": "j1", "vertex": 'say "hi"\n', "subtask": "0", "attempt": "1"}
    assert families["flinkyarn_task_busy_time_ms_per_second"].samples[0].value == 250.0

    assert prometheus.enabled(Configuration({}))
    assert not prometheus.enabled(Configuration({"metrics.reporters": ""}))
    with pytest.raises(ConfigurationError, match=r"metrics.reporters: unknown reporter\(s\) jmx"):
        prometheus.enabled(Configuration({"metrics.reporters": "prom, jmx"}))
