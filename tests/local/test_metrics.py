"""Task metrics on a real local cluster: counted by the tasks, reported with the final
task states and the heartbeats to the JobMaster, shown in the REST API's job details
and on the Prometheus endpoints of the TaskExecutors and the AppMaster."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from flinkyarn import Pipeline
from tests.waiting import wait_for

LINES = 1000


def scrape(address: str) -> dict[str, list]:
    """The samples of an endpoint, by sample name (as prometheus_client parses them)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_record_counts_reach_the_job_details_and_both_prometheus_endpoints(cluster, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"word{i % 7} other{i % 3}\n" for i in range(LINES)))
    p = Pipeline("counted", parallelism=2)
    # rebalance: the source and the sink are two vertices, with an exchange between them.
    p.read_text(str(source), name="lines").rebalance() \
        .map(lambda batch: batch, name="same").write_parquet(str(tmp_path / "out"))
    job_id = cluster.rest.submit(p.job_graph())
    wait_for(lambda: cluster.rest.job(job_id).status == "FINISHED", 60, "the job to finish")

    details = cluster.rest.job(job_id)
    lines, sink = details.vertices
    assert lines.metrics is not None and sink.metrics is not None
    assert (lines.metrics.records_in, lines.metrics.records_out) == (0, LINES)
    assert (sink.metrics.records_in, sink.metrics.records_out) == (LINES, 0)
    assert sink.metrics.bytes_in > 0 and lines.metrics.bytes_out == sink.metrics.bytes_in
    assert sum(s.metrics.records_out for s in lines.subtasks) == LINES
    assert all(s.metrics.duration > 0 for v in details.vertices for s in v.subtasks)

    overview = cluster.rest.overview()
    by_vertex: dict[str, float] = {}
    for task_executor in overview.task_executors:
        assert task_executor.metrics_address, task_executor
        samples = scrape(task_executor.metrics_address)
        for sample in samples["flinkyarn_task_records_out_total"]:
            if sample.labels["job_id"] == job_id:
                by_vertex[sample.labels["vertex"]] = by_vertex.get(sample.labels["vertex"], 0) \
                    + sample.value
        assert all(0 <= s.value <= 1000 for s in samples["flinkyarn_task_busy_time_ms_per_second"])
    # Tasks that ended stay on their TaskExecutor's endpoint with their final counts.
    assert by_vertex[lines.name] == LINES

    assert overview.metrics_address
    appmaster = scrape(overview.metrics_address)
    records_in = {s.labels["vertex"]: s.value for s in appmaster["flinkyarn_vertex_records_in_total"]
                  if s.labels["job_id"] == job_id}
    assert records_in[sink.name] == LINES
    running = [s for s in appmaster["flinkyarn_job_running"] if s.labels["job_id"] == job_id]
    assert [(s.labels["status"], s.value) for s in running] == [("FINISHED", 0)]
    assert appmaster["flinkyarn_taskexecutors"][0].value == len(overview.task_executors)
