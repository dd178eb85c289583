"""An in-process cluster, in the spirit of dask's `gen_cluster`: the AppMaster's
Dispatcher and ResourceManager (and the JobMasters the Dispatcher starts), and
TaskExecutors, all real endpoints on the test's loop, talking through the in-process
network (tests/harness/network.py: the real codec, role checks and fencing), all
following one ManualClock.

    @gen_cluster({"heartbeat.timeout": "50 s"})
    async def test_something(cluster: Cluster) -> None:
        job_id = await cluster.submit(job_graph("job"))
        await cluster.advance(50.0)     # every periodic task runs at each of its deadlines
        assert ...                      # the loop has settled: assertions are exact

Workers come from a resource-manager driver, as in a real cluster: by default the
InProcessDriver, which starts each requested worker as an in-process TaskExecutor; with
`yarn=FakeSkeinApp(...)`, the real YarnDriver asks the fake skein application for
containers, and a container the test runs (`app.run`) starts its TaskExecutor.

Tasks are ScriptedTasks (tests/harness/tasks.py): deployed for real, but they run on the
loop as the test says (`cluster.tasks.running()[0].finish()`), without a thread, user
code, a data plane or Spark; so nothing here needs a subprocess or Arrow Flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
from typing import Any, AsyncIterator, Awaitable, Callable

from flinkyarn import options
from flinkyarn.clock import ManualClock
from flinkyarn.configuration import Configuration
from flinkyarn.gateways.dispatcher import DispatcherGateway, SubmitJob
from flinkyarn.ids import JobID, JobVertexID, ResourceID
from flinkyarn.jobgraph import JobEdge, JobGraph, JobVertex
from flinkyarn.archive import JobArchive
from flinkyarn.job_store import JobStore
from flinkyarn.resources import ResourceProfile
from flinkyarn.rpc.security import APPMASTER, CLIENT, TASKEXECUTOR
from taskexecutor.task_executor import TaskExecutor, TaskExecutorConfig
from tests.harness.fake_skein import FakeContainer, FakeSkeinApp
from tests.harness.loop import LoopExecutor, advance, settle
from tests.harness.network import InProcessNetwork, InProcessRpcService
from tests.harness.tasks import ScriptedTasks
from yarn_am.dispatcher import Dispatcher
from yarn_am.jobmaster.job_master import JobMaster
from yarn_am.resourcemanager.driver import ResourceEventHandler, Spawn
from yarn_am.resourcemanager.resource_manager import ResourceManager, ResourceManagerConfig
from yarn_am.resourcemanager.slot_manager import WorkerSpec
from yarn_am.resourcemanager.yarn_driver import YarnDriver

log = logging.getLogger(__name__)

DEFAULTS = {
    "heartbeat.interval": "10 s",   # Flink's defaults: the clock is free
    "heartbeat.timeout": "50 s",
    "restart-strategy.type": "none",
}
STOP_GUARD = 30.0
"""Real seconds the cluster may take to stop: a guard against a hang, not a wait."""
KILLED = "process killed by SIGKILL"


def job_graph(name: str, *vertices: tuple[str, int], edges: list[JobEdge] | None = None,
              configuration: dict[str, str] | None = None) -> JobGraph:
    """A job of ScriptedTasks: vertices given as (name, parallelism), by default one
    vertex `work` of parallelism 1; job and vertex ids derived from the names. Its
    invokables are never unpickled."""
    return JobGraph(JobID(name), f"job {name}",
                    [JobVertex(JobVertexID(f"{name}-{vertex}"), vertex, parallelism, b"scripted")
                     for vertex, parallelism in vertices or [("work", 1)]],
                    edges or [], configuration=configuration or {})


class Process:
    """A simulated process: its RPC service (of its role) and the endpoints it runs.
    `exit` says why it ended (None while it runs), in the local driver's words."""

    def __init__(self, cluster: "Cluster", host: str, role: str) -> None:
        self.cluster = cluster
        self.rpc: InProcessRpcService = cluster.network.service(
            host, role, cluster.conf.get(options.RPC_ASK_TIMEOUT),
            cluster.conf.get(options.RPC_MAX_MESSAGE_SIZE))
        self.exit: str | None = None
        self.error: BaseException | None = None  # what its endpoints raised, if they did
        self.ended = asyncio.Event()
        self._main: asyncio.Task[None] | None = None

    def launch(self, main: Callable[[], Awaitable[None]], name: str) -> None:
        self._main = asyncio.create_task(self._run(main), name=name)

    async def _run(self, main: Callable[[], Awaitable[None]]) -> None:
        try:
            await self.rpc.start()
            await main()
        except asyncio.CancelledError:
            self.exit = KILLED  # its loop stopped mid-flight
        except Exception as error:  # the process fails: recorded, as its exit code would be
            self.exit, self.error = "process exited with code 1", error
            log.error("%s failed", self.rpc, exc_info=error)
        else:
            self.exit = self.exit or "process exited with code 0"
        finally:
            self.rpc.kill()  # an ended process is unreachable
            self.ended.set()
            self.on_exit()

    def on_exit(self) -> None:
        """Called once the process ended (`exit` says why)."""

    def kill(self) -> None:
        """SIGKILL: unreachable at once, its endpoints stop mid-flight."""
        self.rpc.kill()
        if self._main is not None:
            self._main.cancel()

    def freeze(self) -> None:
        """SIGSTOP, as far as the others can tell: it neither answers nor calls. Its own
        loop runs on, so what a thawed process would find overdue has happened already."""
        self.rpc.freeze()

    def thaw(self) -> None:
        self.rpc.thaw()

    @property
    def address(self) -> str:
        assert self.rpc.address is not None, "the process has not started"
        return self.rpc.address

    async def join(self) -> None:
        await self.ended.wait()


class TaskExecutorProcess(Process):
    """A TaskExecutor's process; `endpoint` is its TaskExecutor once it runs."""

    def __init__(self, cluster: "Cluster", resource_id: str, spec: WorkerSpec,
                 on_exit: Callable[["TaskExecutorProcess"], None] = lambda _p: None) -> None:
        super().__init__(cluster, resource_id, TASKEXECUTOR)
        self.resource_id = ResourceID(resource_id)
        self.spec = spec
        self.endpoint: TaskExecutor | None = None
        self._on_exit = on_exit

    def start(self) -> None:
        self.cluster.task_executors[self.resource_id] = self
        self.launch(self._serve, f"taskexecutor {self.resource_id}")

    async def _serve(self) -> None:
        conf = self.cluster.conf
        slots, slot = self.spec.num_slots, self.spec.slot_profile
        config = dataclasses.replace(
            TaskExecutorConfig.from_configuration(conf), num_slots=slots,
            total=ResourceProfile(slot.cpu_cores * slots, slot.memory_mb * slots))
        self.endpoint = TaskExecutor(self.rpc, self.resource_id, self.cluster.appmaster.address,
                                     config, clock=self.cluster.clock,
                                     task_factory=self.cluster.tasks)
        await self.endpoint.run()
        if self.endpoint.fatal_error is not None:
            self.exit = "process exited with code 3"  # taskexecutor.__main__.FATAL_EXIT_CODE

    def kill(self) -> None:
        for task in self.cluster.tasks.all:
            if task.resource_id == self.resource_id:
                task.die_with_its_process()
        super().kill()

    def stop(self) -> None:
        """SIGTERM: the TaskExecutor stops as it does on a signal."""
        if self.endpoint is not None:
            self.endpoint.stop()
        elif self._main is not None:
            self._main.cancel()

    def on_exit(self) -> None:
        self._on_exit(self)


class InProcessDriver:
    """The resource-manager driver of an in-process cluster: each requested worker is an
    in-process TaskExecutor, started at once (or, with `start_workers` False, only when
    the test calls `start_worker`). Keeps driver.py's contract: on_worker_terminated
    exactly once per worker, with the local driver's causes."""

    def __init__(self, cluster: "Cluster", initial_workers: int = 0) -> None:
        self.cluster = cluster
        self.initial_workers = initial_workers
        self.start_workers = True
        self.requested: list[str] = []
        self.released: list[tuple[str, str]] = []
        self.waiting: dict[str, WorkerSpec] = {}  # requested, not started
        self.explanation: str | None = None  # what explain_wait says of waiting workers
        self._handler: ResourceEventHandler | None = None
        self._spawn: Spawn | None = None
        self._released: set[str] = set()
        self._terminated = False

    async def initialize(self, handler: ResourceEventHandler, resource_manager_address: str,
                         spawn: Spawn) -> list[str]:
        self._handler, self._spawn = handler, spawn
        spec = self.cluster.worker_spec
        started = [self._new_worker_id() for _ in range(self.initial_workers)]
        for worker_id in started:
            self._start(worker_id, spec)
        return started

    def request_worker(self, spec: WorkerSpec) -> str:
        worker_id = self._new_worker_id()
        if self.start_workers:
            self._start(worker_id, spec)
        else:
            self.waiting[worker_id] = spec
        return worker_id

    def start_worker(self, worker_id: str | None = None) -> TaskExecutorProcess:
        """Starts a worker the driver holds back (the only one, if no id is given)."""
        if worker_id is None:
            [worker_id] = self.waiting
        return self._start(worker_id, self.waiting.pop(worker_id))

    def release_worker(self, worker_id: str, cause: str) -> None:
        self.released.append((worker_id, cause))
        process = self.cluster.task_executors.get(ResourceID(worker_id))
        if worker_id in self.waiting:
            del self.waiting[worker_id]
            assert self._spawn is not None
            self._spawn(self._report_end(worker_id, "released by the ResourceManager"),
                        f"released-{worker_id}")
        elif process is not None and process.exit is None:
            self._released.add(worker_id)
            process.stop()

    async def max_workers(self, spec: WorkerSpec) -> tuple[int, str] | None:
        return None

    def location(self, worker_id: str) -> None:
        return None

    async def explain_wait(self, worker_ids: list[str]) -> str | None:
        return self.explanation if any(w in self.waiting for w in worker_ids) else None

    async def terminate(self) -> None:
        self._terminated = True
        processes = [p for p in self.cluster.task_executors.values() if p.exit is None]
        for process in processes:
            process.stop()
        await asyncio.gather(*(p.join() for p in processes))

    def _new_worker_id(self) -> str:
        worker_id = f"taskexecutor-{len(self.requested) + 1}"
        self.requested.append(worker_id)
        return worker_id

    def _start(self, worker_id: str, spec: WorkerSpec) -> TaskExecutorProcess:
        process = TaskExecutorProcess(self.cluster, worker_id, spec, on_exit=self._ended)
        process.start()
        assert self._handler is not None
        self._handler.on_worker_started(worker_id)
        return process

    async def _report_end(self, worker_id: str, cause: str) -> None:
        if not self._terminated and self._handler is not None:
            self._handler.on_worker_terminated(worker_id, cause)

    def _ended(self, process: TaskExecutorProcess) -> None:
        if self._terminated or self._handler is None:
            return
        released = process.resource_id in self._released
        self._handler.on_worker_terminated(
            process.resource_id, "released by the ResourceManager" if released else
            process.exit or "")


class HarnessYarnDriver(YarnDriver):
    """The real YarnDriver, but for `max_workers`: a queue's capacity comes from YARN's
    REST API, which an in-process cluster has not."""

    async def max_workers(self, spec: WorkerSpec) -> tuple[int, str] | None:
        return None


class Cluster:
    """See the module docstring. Attributes: `clock`, `network`, `conf`, `appmaster` (the
    AppMaster's Process), `resource_manager`, `dispatcher`, `driver`, `client` (a
    DispatcherGateway proxy from a client process), `tasks` (every ScriptedTask),
    `task_executors` (TaskExecutorProcess by resource id), `yarn` (the FakeSkeinApp,
    if any)."""

    def __init__(self, conf: Configuration, initial_workers: int = 0,
                 yarn: FakeSkeinApp | None = None, job_store: JobStore | None = None,
                 attempt: int = 1, archive: JobArchive | None = None) -> None:
        self.conf = conf
        self.clock = ManualClock()
        self.network = InProcessNetwork(self.clock)
        self.tasks = ScriptedTasks()
        self.task_executors: dict[ResourceID, TaskExecutorProcess] = {}
        rm_config = ResourceManagerConfig.from_configuration(conf)
        self.worker_spec = rm_config.worker
        self.appmaster = Process(self, "appmaster", APPMASTER)
        self.yarn = yarn
        self.driver: InProcessDriver | YarnDriver
        if yarn is None:
            self.driver = InProcessDriver(self, initial_workers)
        else:
            yarn.on_running, yarn.on_ended = self._container_runs, self._container_ended
            self.driver = HarnessYarnDriver(yarn, poll_interval=1.0, clock=self.clock)
        self.resource_manager = ResourceManager(self.appmaster.rpc, rm_config, self.driver,
                                                self.clock, attempt=attempt)
        self.dispatcher = Dispatcher(self.appmaster.rpc, self.resource_manager, conf,
                                     clock=self.clock, job_store=job_store, attempt=attempt,
                                     archive=archive, application_id="application_1_0001")
        self.resource_manager.job_leader_id = self.dispatcher.job_leader_id
        self._client = Process(self, "client", CLIENT)

    # ------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self._client.rpc.start()
        self.appmaster.launch(self._serve_appmaster, "appmaster")
        await self.settle()

    @property
    def client(self) -> DispatcherGateway:
        """The Dispatcher's gateway as a client calls it (role client, through the codec)."""
        proxy: DispatcherGateway = self._client.rpc.connect(self.appmaster.address,
                                                            "dispatcher", DispatcherGateway)
        return proxy

    async def _serve_appmaster(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.resource_manager.run())
            await self.resource_manager.running.wait()
            group.create_task(self.dispatcher.run())
            await self.dispatcher.running.wait()
            await self.dispatcher.recover()  # what an earlier attempt left, if anything

    async def stop(self) -> None:
        async with asyncio.timeout(STOP_GUARD):
            self.dispatcher.stop()
            self.resource_manager.stop()
            await self.appmaster.join()
            for process in self.task_executors.values():  # not the driver's, or left over
                process.kill()
            await asyncio.gather(*(p.join() for p in self.task_executors.values()))

    def check(self) -> None:
        """Raises what failed the AppMaster, if it failed: a test never goes on past it."""
        if self.appmaster.error is not None:
            raise AssertionError("the AppMaster failed") from self.appmaster.error
        if self.appmaster.exit is not None and not self.resource_manager.stopping:
            raise AssertionError(f"the AppMaster ended: {self.appmaster.exit}")

    # ------------------------------------------------------------------------ time

    async def settle(self) -> None:
        """Runs the loop until nothing is ready to run; then raises if the AppMaster failed."""
        await settle()
        self.check()

    async def advance(self, seconds: float) -> None:
        """Moves the clock `seconds` on, stopping at every deadline on the way (each
        periodic task runs at each of its deadlines, as in real time) and letting the
        loop settle at each, and at the end."""
        await advance(self.clock, seconds, self.settle)

    async def advance_to(self, when: float) -> None:
        await self.advance(when - self.clock.monotonic())

    @property
    def now(self) -> float:
        return self.clock.monotonic()

    # --------------------------------------------------------------------- helpers

    async def submit(self, graph: JobGraph) -> JobID:
        """Submits through the Dispatcher's gateway, as a client does; settles."""
        job_id = (await self.client.submit_job(SubmitJob(graph))).job_id
        await self.settle()
        return job_id

    def job_master(self, job_id: str) -> JobMaster:
        job_master = self.dispatcher.jobs[JobID(job_id)].job_master
        assert job_master is not None, f"job {job_id} has ended"
        return job_master

    def task_executor(self, resource_id: str | None = None) -> TaskExecutor:
        """The TaskExecutor `resource_id`, or the only one that runs."""
        if resource_id is None:
            [process] = [p for p in self.task_executors.values() if p.exit is None]
        else:
            process = self.task_executors[ResourceID(resource_id)]
        assert process.endpoint is not None, f"{process.resource_id} has not started"
        return process.endpoint

    # ------------------------------------------------------------ YARN containers

    def _container_runs(self, container: FakeContainer) -> None:
        """YARN launched the container: its TaskExecutor starts; when that process
        exits, the container ends with it."""
        def exited(process: TaskExecutorProcess) -> None:
            if container.state == "RUNNING" and self.yarn is not None:
                state = "KILLED" if process.exit == KILLED else \
                    "SUCCEEDED" if process.exit == "process exited with code 0" else "FAILED"
                self.yarn.end(container, state, process.exit or "")
        TaskExecutorProcess(self, container.worker_id, self.worker_spec, on_exit=exited).start()

    def _container_ended(self, container: FakeContainer) -> None:
        """The container ended (killed by the driver, YARN or an admin): its process with it."""
        process = self.task_executors.get(ResourceID(container.worker_id))
        if process is not None and process.exit is None:
            process.kill()


@contextlib.asynccontextmanager
async def in_process_cluster(conf: dict[str, str] | None = None, *, task_executors: int = 0,
                             yarn: FakeSkeinApp | None = None,
                             job_store: JobStore | None = None,
                             attempt: int = 1, archive: JobArchive | None = None
                             ) -> AsyncIterator[Cluster]:
    """A started Cluster on the running loop (see the module docstring), stopped on exit.
    `conf`: options over DEFAULTS; `task_executors`: workers the driver starts with the
    cluster (as YARN starts a per-job cluster's first one); `yarn`: the fake skein
    application for the real YarnDriver, instead of the InProcessDriver; `job_store`:
    the Dispatcher's (an AppMaster attempt takes over what is in it); `attempt`: the
    YARN application attempt the AppMaster is (its leader ids name it); `archive`: where
    the Dispatcher archives ended jobs (as application_1_0001). The loop's
    default executor becomes a LoopExecutor: blocking calls run on the loop."""
    asyncio.get_running_loop().set_default_executor(LoopExecutor())
    cluster = Cluster(Configuration({**DEFAULTS, **(conf or {})}), task_executors, yarn,
                      job_store, attempt, archive)
    await cluster.start()
    try:
        yield cluster
        await cluster.settle()  # a failure at the very end counts too
    finally:
        await cluster.stop()


def gen_cluster(conf: dict[str, str] | None = None, *, task_executors: int = 0,
                yarn: Callable[[], FakeSkeinApp] | None = None
                ) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., None]]:
    """Makes `async def test_x(cluster, <fixtures>...)` a pytest test that runs on a new
    loop with a fresh in_process_cluster(conf, task_executors=..., yarn=yarn()) as its
    first argument; pytest still passes the fixtures it names after that."""
    def decorate(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> None:
            async def main() -> None:
                async with in_process_cluster(conf, task_executors=task_executors,
                                              yarn=yarn() if yarn else None) as cluster:
                    await test(cluster, *args, **kwargs)
            asyncio.run(main())
        signature = inspect.signature(test)
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=list(signature.parameters.values())[1:])
        return run
    return decorate
