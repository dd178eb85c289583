"""Metrics in the Prometheus text format (prometheus_client), one HTTP endpoint per
process: a TaskExecutor's tasks (flinkyarn/metrics.py) and an AppMaster's jobs and
cluster. The port is `metrics.reporter.prom.port` (0: any free one; Flink's key); the
address is advertised in the REST API (`/overview`: the AppMaster's and each
TaskExecutor's `metrics_address`), where Prometheus' service discovery or a person finds
it. Bound to the process's host; plain HTTP and read-only (GET /metrics), as Flink's
PrometheusReporter.

    flinkyarn_task_records_in_total{job_id, vertex, subtask, attempt}   and _out, bytes_*
    flinkyarn_task_busy_time_ms_per_second{...}, backpressured_..., idle_...
    flinkyarn_task_input_buffer_fill{...}, flinkyarn_task_output_buffer_fill{...}
    flinkyarn_job_... (the AppMaster: per job and vertex), flinkyarn_taskexecutors, ...
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from flinkyarn import options
from flinkyarn.configuration import Configuration, ConfigurationError
from flinkyarn.metrics import TaskIOMetrics

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

Families = Callable[[], Iterable[Metric]]

log = logging.getLogger(__name__)

TASK_LABELS = ["job_id", "vertex", "subtask", "attempt"]
COUNTERS = (("records_in", "Records the task read from its inputs"),
            ("records_out", "Records the task emitted to its outputs"),
            ("bytes_in", "Bytes (Arrow buffers) the task read"),
            ("bytes_out", "Bytes (Arrow buffers) the task emitted"))
GAUGES = (("busy_ms_per_second", "busy_time_ms_per_second", "Ms per second the task worked"),
          ("backpressured_ms_per_second", "backpressured_time_ms_per_second",
           "Ms per second the task waited for room in its outputs"),
          ("idle_ms_per_second", "idle_time_ms_per_second", "Ms per second the task waited for input"),
          ("input_fill", "input_buffer_fill", "How full the task's input queue is (0 to 1)"),
          ("output_fill", "output_buffer_fill", "How full the task's fullest output buffer is (0 to 1)"))


def io_families(prefix: str, labels: list[str],
                measured: Iterable[tuple[list[str], TaskIOMetrics]]) -> Iterator[Metric]:
    """Metric families of TaskIOMetrics, one sample per (label values, metrics)."""
    rows = list(measured)
    for field, help_text in COUNTERS:
        family = CounterMetricFamily(f"{prefix}_{field}", help_text, labels=labels)
        for values, metrics in rows:
            family.add_metric(values, getattr(metrics, field))
        yield family
    for field, name, help_text in GAUGES:
        gauge = GaugeMetricFamily(f"{prefix}_{name}", help_text, labels=labels)
        for values, metrics in rows:
            gauge.add_metric(values, getattr(metrics, field))
        yield gauge


class Collector:
    """A prometheus_client collector of whatever `families()` yields at each scrape."""

    def __init__(self, families: Families) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        try:
            yield from self._families()
        except Exception:  # a scrape must not take the process down; say why it is empty
            log.exception("collecting metrics failed")


class MetricsServer:
    def __init__(self, families: Families, host: str, port: int = 0) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(Collector(families))
        self._host, self._port = host, port
        self._server: WSGIServer | None = None
        self.address = ""

    def start(self) -> str:
        """Serves in a daemon thread; returns host:port."""
        server, _thread = start_http_server(self._port, addr=self._host, registry=self._registry)
        self._server = server
        port = server.server_address[1]
        self.address = f"{self._host}:{port}"
        log.info("Prometheus metrics at http://%s/metrics", self.address)
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()


def enabled(conf: Configuration) -> bool:
    """Whether `metrics.reporters` asks for the Prometheus endpoint; ConfigurationError
    naming the key for a reporter we do not have."""
    names = {name.strip() for name in conf.get(options.METRICS_REPORTERS).split(",") if name.strip()}
    unknown = sorted(names - {"prom"})
    if unknown:
        raise ConfigurationError(f"{options.METRICS_REPORTERS.key}: unknown reporter(s) "
                                 f"{', '.join(unknown)} (there is: prom)")
    return "prom" in names


def start_for(conf: Configuration, families: Families, host: str) -> MetricsServer | None:
    """The process's endpoint, serving, when `metrics.reporters` has prom."""
    if not enabled(conf):
        return None
    server = MetricsServer(families, host, conf.get(options.METRICS_PROMETHEUS_PORT))
    server.start()
    return server
