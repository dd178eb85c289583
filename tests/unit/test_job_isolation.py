"""Isolation (STYLE 12): what one job's JobMaster does wrong fails that job, never its
session. An in-process AppMaster (real RPC, REST and endpoints on loopback) whose driver
starts no TaskExecutor, so its jobs wait for slots until they are cancelled."""

from __future__ import annotations

import asyncio

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.gateways.dispatcher import SubmitJob
from flinkyarn.ids import JobID, JobVertexID
from flinkyarn.jobgraph import JobGraph, JobVertex
from flinkyarn.rpc.security import ClusterSecurity
from tests.waiting import wait_for_async
from yarn_am.appmaster import AppMaster, appmaster_security
from yarn_am.jobmaster.job_master import JobMaster
from yarn_client.rest_client import RestClient

DEADLINE = 60.0  # generous: a condition, not a speed


class IdleDriver:
    """A platform that never starts a worker: every slot request waits."""

    def __init__(self) -> None:
        self.requested = 0

    async def initialize(self, handler, resource_manager_address, spawn) -> list[str]:
        return []

    def request_worker(self, spec) -> str:
        self.requested += 1
        return f"worker-{self.requested}"

    def release_worker(self, worker_id: str, cause: str) -> None:
        pass

    async def max_workers(self, spec):
        return None

    def location(self, worker_id):
        return None

    async def explain_wait(self, worker_ids):
        return None

    async def terminate(self) -> None:
        pass


def graph(job_id: str) -> JobGraph:
    return JobGraph(JobID(job_id), f"job {job_id}",
                    [JobVertex(JobVertexID(f"{job_id}-source"), "Source", 2, b"never deployed")])


def broken_housekeeping_of(job_id: str):
    original = JobMaster._housekeeping

    def housekeeping(self: JobMaster) -> None:
        if self.job_id == job_id:
            raise RuntimeError(f"the housekeeping of job {job_id} broke")
        return original(self)
    return housekeeping


def test_a_job_master_that_raises_fails_its_job_alone_and_the_session_goes_on(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(JobMaster, "_housekeeping", broken_housekeeping_of("bad"))
    conf = Configuration({"heartbeat.interval": "100 ms", "heartbeat.timeout": "5 s"})
    client = ClusterSecurity.generate(tmp_path / "cluster")
    appmaster = AppMaster(conf, appmaster_security(conf, client, tmp_path / "appmaster"),
                          IdleDriver())

    async def scenario() -> None:
        ready = asyncio.Event()

        async def on_ready(_am: AppMaster) -> None:
            ready.set()

        serving = asyncio.create_task(appmaster.serve(on_ready))
        try:
            await asyncio.wait_for(ready.wait(), DEADLINE)
            dispatcher = appmaster.dispatcher
            resource_manager = dispatcher._resource_manager
            await dispatcher.submit_job(SubmitJob(graph("good")))
            await dispatcher.submit_job(SubmitJob(graph("bad")))

            result = await asyncio.wait_for(dispatcher.wait_for_result(JobID("bad")), DEADLINE)

            assert result.status.value == "FAILED"
            first_line = result.failure_cause.splitlines()[0]
            assert first_line == ("the JobMaster failed unexpectedly: RuntimeError: the "
                                  "housekeeping of job bad broke")
            assert "test_job_isolation.py" in result.failure_cause  # where it was raised
            # Its peers were told: the ResourceManager no longer serves its requests.
            await wait_for_async(lambda: JobID("bad") not in resource_manager.job_masters,
                                 DEADLINE, "disconnect of the failed JobMaster")

            rest = RestClient(appmaster.info.rest_address, client)
            bad = await asyncio.to_thread(rest.job, "bad")
            assert bad.status == "FAILED" and bad.root_cause == result.failure_cause
            good = await asyncio.to_thread(rest.job, "good")
            assert good.status in ("CREATED", "RUNNING")
            assert JobID("good") in resource_manager.job_masters
            overview = await asyncio.to_thread(rest.overview)
            assert {(j.job_id, j.status) for j in overview.jobs} >= {("bad", "FAILED")}
            assert not serving.done()

            # The other job's JobMaster still does its work: it is cancelled as asked.
            await asyncio.to_thread(rest.cancel, "good")
            cancelled = await asyncio.wait_for(dispatcher.wait_for_result(JobID("good")),
                                               DEADLINE)
            assert cancelled.status.value == "CANCELED"
            # A new job is still accepted.
            await dispatcher.submit_job(SubmitJob(graph("later")))
            assert (await dispatcher.job_details_of(JobID("later"))).status in ("CREATED",
                                                                                "RUNNING")
        finally:
            appmaster.shutdown()
            await asyncio.wait_for(serving, DEADLINE)

    asyncio.run(scenario())


@pytest.mark.parametrize("broken", ["on_start", "scheduler"])
def test_a_job_master_that_fails_while_it_starts_fails_its_job_with_the_cause(tmp_path,
                                                                           monkeypatch, broken):
    if broken == "on_start":
        original = JobMaster.on_start

        async def on_start(self: JobMaster) -> None:
            await original(self)
            if self.job_id == "bad":
                raise KeyError("no such thing")
        monkeypatch.setattr(JobMaster, "on_start", on_start)
        expected = "KeyError: 'no such thing'"
    else:
        original_run = JobMaster._run_scheduler

        def run_scheduler(self: JobMaster, commands: list) -> None:
            if self.job_id == "bad":
                raise TypeError(f"unknown Scheduler command {commands[:1]!r}")
            original_run(self, commands)
        monkeypatch.setattr(JobMaster, "_run_scheduler", run_scheduler)
        expected = "TypeError: unknown Scheduler command"
    conf = Configuration()
    client = ClusterSecurity.generate(tmp_path / "cluster")
    appmaster = AppMaster(conf, appmaster_security(conf, client, tmp_path / "appmaster"),
                          IdleDriver())

    async def scenario() -> None:
        serving = asyncio.create_task(appmaster.serve())
        try:
            await wait_for_async(lambda: appmaster.info is not None, DEADLINE, "AppMaster serving")
            dispatcher = appmaster.dispatcher
            await dispatcher.submit_job(SubmitJob(graph("good")))
            await dispatcher.submit_job(SubmitJob(graph("bad")))
            result = await asyncio.wait_for(dispatcher.wait_for_result(JobID("bad")), DEADLINE)
            assert result.status.value == "FAILED"
            assert expected in result.failure_cause.splitlines()[0]
            assert (await dispatcher.job_details_of(JobID("good"))).status in ("CREATED",
                                                                               "RUNNING")
            assert not serving.done()
        finally:
            appmaster.shutdown()
            await asyncio.wait_for(serving, DEADLINE)

    asyncio.run(scenario())
