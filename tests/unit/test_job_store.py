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


def test_a_call_stamped_with_the_leader_ids_of_the_attempt_before_is_refused():
    """The leader ids of an attempt name it: a TaskExecutor that still talks to attempt
    1's JobMaster or ResourceManager is refused by attempt 2's with a clear error, and
    nothing changes."""
    from flinkyarn.gateways.job_master import (JobMasterGateway, TaskState,
                                               UpdateTaskExecutionState, job_master_endpoint)
    from flinkyarn.gateways.resource_manager import DisconnectTaskExecutor, ResourceManagerGateway
    from flinkyarn.ids import JobMasterId, ResourceManagerId, leader_id
    from flinkyarn.rpc.errors import StaleCall
    from tests.unit.test_harness_fencing import TE1, one_task_running, state_of

    async def main() -> None:
        async with in_process_cluster(task_executors=1, attempt=2) as cluster:
            run = await one_task_running(cluster)
            assert run.job_master.job_master_id.startswith("a2-")
            assert cluster.resource_manager.resource_manager_id.startswith("a2-")
            before = state_of(cluster)
            process = cluster.task_executors[TE1]
            job_master = process.rpc.connect(cluster.appmaster.address,
                                             job_master_endpoint(run.job_master.job_id),
                                             JobMasterGateway)
            resource_manager = process.rpc.connect(cluster.appmaster.address, "resourcemanager",
                                                   ResourceManagerGateway)
            old_job_master = JobMasterId(leader_id(1))
            old_resource_manager = ResourceManagerId(leader_id(1))
            with pytest.raises(StaleCall, match=rf"stale JobMaster id: the call carries "
                                                rf"'{old_job_master}', current is 'a2-"):
                await job_master.update_task_execution_state(UpdateTaskExecutionState(
                    old_job_master, run.task.attempt_id, TaskState.FAILED, "from attempt 1"))
            with pytest.raises(StaleCall, match=rf"stale ResourceManager id: the call carries "
                                                rf"'{old_resource_manager}', current is 'a2-"):
                await resource_manager.disconnect_task_executor(DisconnectTaskExecutor(
                    old_resource_manager, run.task_executor.rm_connection.instance_id, TE1,
                    "from attempt 1"))
            await cluster.advance(5.0)
            assert state_of(cluster) == before and run.task.state is TaskState.RUNNING

    asyncio.run(main())


def test_what_yarn_says_of_an_attempt_is_read_and_a_killed_one_is_recognised(monkeypatch):
    from flinkyarn import hadoop

    asked = []

    def rm_request(path, method="GET", body=None, timeout=10.0, xml=False):
        asked.append((path, xml))
        if path.endswith("/appattempts"):
            return {"appAttempts": {"appAttempt": [
                {"id": 1, "appAttemptState": "FAILED"},
                {"id": 2, "appAttemptState": "FINAL_SAVING"}]}}
        return {"diagnosticsInfo": "AM Container for appattempt_1_0007_000001 exited with  "
                                   "exitCode: 137\nFailing this attempt. For more detailed "
                                   "output, check the application tracking page"}
    monkeypatch.setattr(hadoop, "rm_request", rm_request)

    assert hadoop.attempt_diagnostics("application_1_0007", 1) == (
        "AM Container for appattempt_1_0007_000001 exited with exitCode: 137 Failing this attempt.")
    assert asked[-1] == ("/ws/v1/cluster/apps/application_1_0007/appattempts/"
                         "appattempt_1_0007_000001", True)
    assert not hadoop.attempt_killed("application_1_0007", 1)  # failed: YARN may go on
    assert hadoop.attempt_killed("application_1_0007", 2)      # being killed: the end

    def unreachable(*args, **kwargs):
        raise hadoop.ResourceManagerError("no YARN ResourceManager answered", None, ())
    monkeypatch.setattr(hadoop, "rm_request", unreachable)
    assert hadoop.attempt_diagnostics("application_1_0007", 1) == ""
    assert not hadoop.attempt_killed("application_1_0007", 1)


def test_a_new_attempt_finishes_an_output_commit_the_last_one_began_and_runs_nothing(tmp_path):
    """What an AppMaster killed in the middle of a commit leaves: the job's graph, the
    record that its commit began, one output in place, one still in its staging folder,
    an OVERWRITE target's previous content in a hidden sibling, and its claims. The next
    attempt finishes the commit, records the job FINISHED and does not run it again."""
    import msgspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flinkyarn.connectors import output_claims
    from flinkyarn.jobgraph import FileOutput, OutputMode

    store = JobStore(str(tmp_path / "application_1"))
    done, pending = tmp_path / "done", tmp_path / "pending"
    graph = msgspec.structs.replace(job_graph("commit"), outputs=[
        FileOutput(str(done), "parquet", staging=str(tmp_path / ".done.staging-1")),
        FileOutput(str(pending), "parquet", OutputMode.OVERWRITE,
                   staging=str(tmp_path / ".pending.staging-1"))])
    store.put_graph(graph)
    store.put_commit_started(graph.job_id, mark_success=True, checkpointed=False)
    for folder in (done, tmp_path / ".pending.staging-1", tmp_path / ".pending.old-0123"):
        folder.mkdir()
        pq.write_table(pa.table({"n": [len(folder.name)]}), folder / "part-00000.parquet")
    for output in graph.outputs:  # an earlier attempt's process held them
        output_claims.claim(output, output_claims.Holder(graph.job_id, "local", 1, "gone"),
                            alive=lambda holder: True)
    assert store.commits_started() == {graph.job_id: (True, False)}

    async def main() -> None:
        async with in_process_cluster(task_executors=1, job_store=store, attempt=2) as second:
            result = await second.dispatcher.wait_for_result(graph.job_id)
            assert (result.status, result.failure_cause) == (JobStatus.FINISHED, None)
            assert second.tasks.of("work") == []  # not run again

    asyncio.run(main())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["application_1", "done", "pending"]
    assert sorted(p.name for p in done.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert sorted(p.name for p in pending.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert pq.read_table(pending).column("n").to_pylist() == [len(".pending.staging-1")]
    assert store.results()[graph.job_id].status == "FINISHED"
    assert store.commits_started() == {}
