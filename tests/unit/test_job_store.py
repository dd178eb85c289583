"""The job store an AppMaster attempt leaves to the next (flinkyarn/job_store.py), and a
Dispatcher that takes over from it, on an in-process cluster: jobs that ended stay
listed and never run again; the others run again from the start."""

from __future__ import annotations

import asyncio

import pytest

from flinkyarn.gateways import ACK
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.ids import JobID
from flinkyarn.job_store import JobStore, Leader, attempt_of
from tests.harness import in_process_cluster, job_graph
from yarn_am.jobmaster.execution_graph import JobStatus


@pytest.mark.parametrize("container_id, attempt", [
    ("container_1795695337760_0007_01_000001", 1),
    ("container_1795695337760_0007_02_000001", 2),
    ("container_e17_1795695337760_0007_03_000004", 3),  # with the RM's epoch
    ("", 1), ("not-a-container", 1),
])
def test_the_attempt_is_read_from_the_container_id(container_id, attempt):
    assert attempt_of(container_id) == attempt


def test_what_is_stored_is_read_back_whole_and_the_newest_leader_wins(tmp_path):
    store = JobStore(str(tmp_path / "application_1"))
    assert (store.graphs(), store.results(), store.leader()) == ([], {}, None)
    graph = job_graph("wordcount", ("source", 2), ("sink", 1))
    store.put_graph(graph)
    store.put_graph(graph)  # again (a later attempt): replaced, not doubled
    details = JobDetails(JobID("wordcount"), "job wordcount", "FINISHED", 1.0, 2.0, None, [])
    store.put_result(details)
    (tmp_path / "application_1" / "results" / ".half-written.json").write_text("{")
    store.put_leader(Leader(1, "https://a:1", "http://proxy/a"))
    store.put_leader(Leader(2, "https://b:2", "http://proxy/b"))
    assert store.graphs() == [graph]
    assert store.results() == {JobID("wordcount"): details}
    assert store.leader() == Leader(2, "https://b:2", "http://proxy/b")
    # Nothing of a write is left under a hidden name.
    assert not [p for p in (tmp_path / "application_1").rglob(".*") if p.name != ".half-written.json"]
    store.remove()
    assert not (tmp_path / "application_1").exists()


def test_a_new_attempt_lists_ended_jobs_and_runs_the_others_again(tmp_path):
    store = JobStore(str(tmp_path / "application_1"))

    async def main() -> None:
        async with in_process_cluster(task_executors=1, job_store=store) as first:
            done = await first.submit(job_graph("done"))
            [work] = first.tasks.running("work")
            work.finish()
            await first.settle()
            running = await first.submit(job_graph("running", ("source", 1)))
            assert len(first.tasks.running("source")) == 1
            assert first.dispatcher.jobs[done].ended.is_set()  # its result is stored
        # The first attempt is gone with one job ended and one running.
        assert set(store.results()) == {done}
        assert {g.job_id for g in store.graphs()} == {done, running}

        async with in_process_cluster(task_executors=1, job_store=store) as second:
            ended = await second.client.list_jobs(ACK)
            assert sorted((j.job_id, j.status) for j in ended.jobs) == [
                (done, "FINISHED"), (running, "RUNNING")]
            assert second.tasks.of("work") == []  # never run again
            [again] = second.tasks.running("source")  # from the start
            again.finish()
            await second.settle()
            result = await second.dispatcher.wait_for_result(running)
            assert result.status is JobStatus.FINISHED
        assert {job_id: d.status for job_id, d in store.results().items()} == {
            done: "FINISHED", running: "FINISHED"}

    asyncio.run(main())
