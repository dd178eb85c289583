"""Isolation in a session (ARCHITECTURE, shape 12): an unexpected exception inside one
job's JobMaster fails that job, with the cause, and nothing else: its peers are told it
is gone, the other job runs on to its end, and the Dispatcher and the ResourceManager
go on serving, on an in-process cluster with a ManualClock."""

from __future__ import annotations

import logging

import pytest

from flinkyarn.gateways.dispatcher import JobQuery
from flinkyarn.gateways.job_master import TaskState
from flinkyarn.ids import ResourceID
from tests.harness import Cluster, gen_cluster, job_graph

TE1 = ResourceID("taskexecutor-1")
BROKEN = "the SlotPool of job bad broke"


@gen_cluster(task_executors=1)  # two slots: one for each job
async def test_a_job_master_that_fails_unexpectedly_fails_its_job_alone(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    rm, te = cluster.resource_manager, cluster.task_executor()
    good = await cluster.submit(job_graph("good", ("source", 1)))
    bad = await cluster.submit(job_graph("bad", ("sink", 1)))
    [good_task], [bad_task] = cluster.tasks.running("source"), cluster.tasks.running("sink")
    bad_slot = bad_task.deployment.allocation_id

    def broken(now: float) -> list[object]:
        raise RuntimeError(BROKEN)
    # Its next housekeeping (every second, from its start at t = 1000 s) raises, in a
    # task of the JobMaster's own.
    cluster.job_master(bad).slot_pool.check_timeouts = broken  # type: ignore[method-assign]

    await cluster.advance(0.999)
    assert cluster.dispatcher.jobs[bad].result is None
    with caplog.at_level(logging.ERROR, logger="yarn_am.dispatcher"):
        await cluster.advance(0.001)

    result = cluster.dispatcher.jobs[bad].result
    assert result is not None and result.status.value == "FAILED"
    assert result.failure_cause.splitlines()[0] == (
        f"the JobMaster failed unexpectedly: RuntimeError: {BROKEN}")
    assert "test_harness_session.py" in result.failure_cause  # where it was raised
    [logged] = [r for r in caplog.records if r.name == "yarn_am.dispatcher"]
    assert logged.exc_info is not None  # once, with its traceback
    details = await cluster.client.job_details(JobQuery(bad))
    assert (details.status, details.root_cause) == ("FAILED", result.failure_cause)
    # Its peers were told it is gone: its task stopped, its slot is free again at the
    # TaskExecutor and at the ResourceManager, which dropped its registration.
    assert bad_task.state is TaskState.CANCELED
    assert te.slot_table.by_allocation(bad_slot) is None and bad not in te.job_connections
    assert bad not in rm.job_masters
    assert sorted((s.state, s.job_id) for s in rm.slot_manager.slots_of(TE1)) == [
        ("allocated", good), ("free", None)]

    # The other job never noticed, and ends as it would have.
    assert good_task.state is TaskState.RUNNING
    assert cluster.job_master(good).status.value == "RUNNING"
    good_task.finish()
    await cluster.settle()
    assert (await cluster.client.job_details(JobQuery(good))).status == "FINISHED"

    # The session takes a new job, on the slots the failed one left: no new worker.
    later = await cluster.submit(job_graph("later", ("work", 2)))
    assert [(t.name, t.resource_id) for t in cluster.tasks.running()] == [
        ("work (1/2) #0", TE1), ("work (2/2) #0", TE1)]
    assert cluster.driver.requested == [TE1]
    assert (await cluster.client.job_details(JobQuery(later))).status == "RUNNING"
    assert not cluster.dispatcher.stopping and not rm.stopping
