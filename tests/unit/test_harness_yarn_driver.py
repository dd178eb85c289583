"""The YARN resource-manager driver against a fake skein application whose YARN the test
plays (tests/harness/fake_skein.py): when a container request returns or is refused,
when a container runs and how it ends. Its blocking skein calls run on the loop
(LoopExecutor); its watcher polls every POLL seconds of a ManualClock. The contract of
driver.py is what is checked: on_worker_terminated exactly once per worker, with the
cause, whatever YARN does and however often the watcher looks."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable

import pytest
import skein

from flinkyarn.clock import ManualClock
from flinkyarn.ids import ResourceID
from flinkyarn.resources import ResourceProfile
from tests.harness import (Cluster, FakeSkeinApp, LoopExecutor, advance, gen_cluster,
                           job_graph, settle)
from yarn_am.resourcemanager.slot_manager import WorkerSpec
from yarn_am.resourcemanager import yarn_driver as yarn_driver_module
from yarn_am.resourcemanager.yarn_driver import RESOURCE_ID_VARIABLE, SERVICE, YarnDriver

POLL = 1.0
SPEC = WorkerSpec(2, ResourceProfile(1.0, 512))
REFUSAL = ValueError("Resource request of 65536 MiB exceeds the maximum allocation 8192 MiB")


class Handler:
    """The ResourceManager, as the driver reports to it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def on_worker_started(self, worker_id: str) -> None:
        self.events.append(("started", worker_id))

    def on_worker_terminated(self, worker_id: str, cause: str) -> None:
        self.events.append(("terminated", worker_id, cause))


@contextlib.asynccontextmanager
async def yarn_driver(app: FakeSkeinApp, on_fatal: Callable[[str], None] | None = None,
                      ) -> AsyncIterator[tuple[YarnDriver, Handler, ManualClock]]:
    """The driver, initialized; what it spawns runs in a task group of the test's, as it
    would in the ResourceManager's."""
    asyncio.get_running_loop().set_default_executor(LoopExecutor())
    clock, handler = ManualClock(), Handler()
    driver = YarnDriver(app, poll_interval=POLL, clock=clock, on_fatal=on_fatal)
    spawned: list[asyncio.Task[object]] = []
    async with asyncio.TaskGroup() as group:
        def spawn(coroutine, name: str) -> asyncio.Task[object]:
            spawned.append(group.create_task(coroutine, name=name))
            return spawned[-1]
        await driver.initialize(handler, "appmaster:1", spawn)
        try:
            yield driver, handler, clock
        finally:
            await driver.terminate()
            for task in spawned:
                task.cancel()


def test_a_worker_released_before_its_container_id_is_known_is_killed_once_it_is() -> None:
    async def scenario() -> None:
        app = FakeSkeinApp(hold_requests=True)
        async with yarn_driver(app) as (driver, handler, clock):
            worker = driver.request_worker(SPEC)
            await settle()
            [request] = app.requests
            assert request.pending and driver.container_of(worker) is None
            assert request.env == {RESOURCE_ID_VARIABLE: worker}

            driver.release_worker(worker, "idle for 30 s")
            await advance(clock, 3 * POLL)
            assert app.kills == [] and handler.events == []  # nothing to kill yet

            container = app.grant(request)
            await settle()
            # Killed as soon as its id is known: it never runs, never leaks.
            assert app.kills == [container.id] and container.state == "KILLED"
            assert driver.container_of(worker) == container.id
            assert handler.events == []  # until the watcher sees the end

            await advance(clock, POLL)
            assert handler.events == [("terminated", worker, (
                f"released by the ResourceManager (container {container.id} KILLED: "
                f"Container killed by the ApplicationMaster.)"))]
            await advance(clock, 5 * POLL)
            assert len(handler.events) == 1
            assert app.kills == [container.id]
    asyncio.run(scenario())


def test_a_container_request_yarn_refuses_ends_its_worker_at_once_with_the_cause() -> None:
    async def scenario() -> None:
        app = FakeSkeinApp()
        async with yarn_driver(app) as (driver, handler, clock):
            app.refuse_requests(REFUSAL)
            refused = driver.request_worker(SPEC)
            await settle()  # no time passes: no poll is involved
            assert handler.events == [("terminated", refused,
                                       f"container request refused by YARN: {REFUSAL}")]

            # The same when the call takes its time before YARN refuses it.
            app.refuse_requests(None)
            app.hold_requests = True
            held = driver.request_worker(SPEC)
            await settle()
            app.refuse(app.requests[-1], REFUSAL)
            await settle()
            assert handler.events[1:] == [("terminated", held,
                                           f"container request refused by YARN: {REFUSAL}")]

            driver.release_worker(refused, "no longer needed")  # ended: nothing to do
            await advance(clock, 3 * POLL)
            assert len(handler.events) == 2 and app.kills == [] and app.containers == {}
    asyncio.run(scenario())


def test_a_container_end_is_reported_once_however_many_polls_see_it() -> None:
    async def scenario() -> None:
        app = FakeSkeinApp()
        async with yarn_driver(app) as (driver, handler, clock):
            worker = driver.request_worker(SPEC)
            await settle()
            container = app.container_of(worker)
            app.run(container)
            await advance(clock, POLL)
            assert handler.events == [("started", worker)]

            app.end(container, "FAILED", "Exception from container-launch.\nExit code: 137\n"
                                         "Container killed on request: memory limit exceeded")
            polls = app.polls
            await advance(clock, 5 * POLL)
            assert app.polls == polls + 5  # each poll sees the ended container
            assert handler.events == [("started", worker), ("terminated", worker, (
                f"container {container.yarn_container_id} FAILED: Container killed on "
                f"request: memory limit exceeded"))]
    asyncio.run(scenario())


def test_the_container_started_with_the_application_is_adopted_as_a_worker() -> None:
    async def scenario() -> None:
        app = FakeSkeinApp(started_with_application="taskexecutor-0")
        asyncio.get_running_loop().set_default_executor(LoopExecutor())
        driver = YarnDriver(app, poll_interval=POLL, clock=ManualClock())
        watcher: list[asyncio.Task[object]] = []
        adopted = await driver.initialize(
            Handler(), "appmaster:1",
            lambda coroutine, name: watcher.append(asyncio.create_task(coroutine)))
        assert adopted == ["taskexecutor-0"]
        assert driver.container_of("taskexecutor-0") == f"{SERVICE}_0"
        assert app.kv == {"flinkyarn.rpc_address": b"appmaster:1"}
        watcher[0].cancel()
    asyncio.run(scenario())


class RacingKeyValueStore(dict):
    """skein 0.8.2's store, losing its race between a put's event and a new watch's
    answer: the value is stored, the put fails (yarn_driver._put_key)."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses
        self.puts = 0

    def __setitem__(self, key: str, value: bytes) -> None:
        self.puts += 1
        super().__setitem__(key, value)
        if self.puts <= self.losses:
            raise skein.exceptions.ApplicationError("")


def test_a_put_that_loses_skeins_watch_race_is_made_again() -> None:
    async def scenario(losses: int) -> RacingKeyValueStore:
        kv = RacingKeyValueStore(losses)
        app = FakeSkeinApp(started_with_application="taskexecutor-0", kv=kv)
        asyncio.get_running_loop().set_default_executor(LoopExecutor())
        driver = YarnDriver(app, poll_interval=POLL, clock=ManualClock())
        watcher: list[asyncio.Task[object]] = []
        try:
            await driver.initialize(
                Handler(), "appmaster:1",
                lambda coroutine, name: watcher.append(asyncio.create_task(coroutine)))
        finally:
            for task in watcher:
                task.cancel()
        return kv

    kv = asyncio.run(scenario(losses=2))
    assert kv == {"flinkyarn.rpc_address": b"appmaster:1"} and kv.puts == 3
    with pytest.raises(skein.exceptions.ApplicationError):  # not forever
        asyncio.run(scenario(losses=yarn_driver_module.KV_PUT_ATTEMPTS))


def test_an_unfit_container_started_with_the_application_ends_it_and_nothing_more_is_asked(
        monkeypatch) -> None:
    """The container YARN started with a per-job application may fail (its environment
    does not fit the client's) before the driver first looks: it is adopted all the same,
    its end is fatal, and no replacement is asked of YARN (it would meet the same
    environment)."""
    unfit = "flinkyarn: environment mismatch: python 3.10.13 here, 3.11.7 on the client"
    monkeypatch.setattr(yarn_driver_module, "unfit_diagnostic", lambda node, container: unfit)

    async def scenario() -> None:
        app = FakeSkeinApp(started_with_application="taskexecutor-0")
        eager = app.container_of("taskexecutor-0")
        app.run(eager)
        app.end(eager, "FAILED", "Exception from container-launch.\nExit code: 3")
        fatal: list[str] = []
        async with yarn_driver(app, on_fatal=fatal.append) as (driver, handler, clock):
            assert driver.container_of("taskexecutor-0") == eager.id  # adopted

            await advance(clock, POLL)
            assert fatal == [f"TaskExecutor container {eager.yarn_container_id}: {unfit}"]
            assert handler.events == [("terminated", "taskexecutor-0",
                                       f"container {eager.yarn_container_id} FAILED: {unfit}")]
            driver.request_worker(SPEC)  # the ResourceManager's replacement
            await advance(clock, 3 * POLL)
            assert app.requests == [] and len(fatal) == 1
    asyncio.run(scenario())


@gen_cluster(yarn=FakeSkeinApp)
async def test_a_task_executor_container_that_yarn_ends_is_dropped_at_the_next_poll(
        cluster: Cluster) -> None:
    """The whole way round on an in-process cluster: the ResourceManager asks the driver
    for a worker, YARN (the test) runs its container, whose TaskExecutor registers and
    runs the job's tasks; YARN preempts it, and the driver's next poll tells the
    ResourceManager, which tells the JobMaster."""
    app, rm = cluster.yarn, cluster.resource_manager
    assert app is not None
    job = await cluster.submit(job_graph("job", ("work", 2)))
    [request] = app.requests
    worker = ResourceID(request.env[RESOURCE_ID_VARIABLE])
    assert rm.workers == {worker: False}  # requested, not registered
    app.run(app.container_of(worker))
    await cluster.settle()
    assert [(task.name, task.resource_id) for task in cluster.tasks.running()] == [
        ("work (1/2) #0", worker), ("work (2/2) #0", worker)]

    await cluster.advance(0.5)  # between two polls
    container = app.container_of(worker)
    app.end(container, "KILLED", "Container preempted by the scheduler")
    await cluster.settle()
    assert worker in rm.task_executors  # nobody has looked yet
    await cluster.advance(0.5)
    assert worker not in rm.task_executors and worker not in rm.workers
    result = cluster.dispatcher.jobs[job].result
    assert result is not None and result.status.value == "FAILED"
    assert result.failure_cause.endswith(
        f"TaskExecutor {worker} container {container.yarn_container_id} KILLED: Container "
        f"preempted by the scheduler")
    assert all(task.lost for task in cluster.tasks.all)  # they died with their process


@gen_cluster(yarn=FakeSkeinApp)
async def test_a_task_executor_that_outlives_its_container_is_rejected_and_exits(
        cluster: Cluster) -> None:
    """The chaos run of issue 41: the container's launch script killed, YARN reports the
    container FAILED, its TaskExecutor lives on. The ResourceManager drops it and asks
    it to reconnect; its new registration names a worker whose container has ended, is
    rejected, and the TaskExecutor ends itself instead of offering slots again."""
    app, rm = cluster.yarn, cluster.resource_manager
    assert app is not None
    await cluster.submit(job_graph("job", ("work", 2)))
    [request] = app.requests
    worker = ResourceID(request.env[RESOURCE_ID_VARIABLE])
    app.run(app.container_of(worker))
    await cluster.settle()
    orphan = cluster.task_executors[worker]
    assert len(cluster.network.calls_to("register_task_executor")) == 1

    app.end(app.container_of(worker), "FAILED", "Container exited with exit code 137",
            orphaned=True)
    await cluster.advance(1.0)  # the driver's poll
    assert worker not in rm.task_executors and worker not in rm.workers
    assert len(cluster.network.calls_to("register_task_executor")) == 2
    assert orphan.exit == "process exited with code 3"  # its fatal error
    fatal = orphan.endpoint.fatal_error if orphan.endpoint else None
    assert fatal is not None and "rejected its registration" in fatal, fatal
    assert rm.slot_manager.slots_of(worker) == []
    await cluster.advance(60.0)  # nothing of it comes back
    assert worker not in rm.task_executors
    assert len(cluster.network.calls_to("register_task_executor")) == 2
