"""The YARN resource-manager driver: TaskExecutors are containers of the skein service
`taskexecutor`, requested one at a time from inside the AppMaster.

Assumptions about YARN (through skein): requests are asynchronous and may be satisfied
late or never; a container may end at any time (its process exits, the NodeManager kills
it for memory, an admin kills it) and we learn of it only by asking. So:
- `request_worker` names the worker at once and asks skein for a container in a task
  (the call is a blocking gRPC call to skein's ApplicationMaster, run on a thread);
  the worker id reaches the container as FLINKYARN_RESOURCE_ID, and the TaskExecutor
  registers with it;
- a watcher polls skein's view of the service's containers every `poll_interval` and
  reports each container's end once, with its state and YARN's exit message;
- a request skein refuses ends the worker at once (`on_worker_terminated`);
- a per-job application asks for its first TaskExecutor with the AppMaster (the skein
  service starts with one instance, whose worker id is the service's own
  FLINKYARN_RESOURCE_ID); `initialize` adopts it, so the job's first slots do not wait
  for the AppMaster to start before YARN is even asked;
- a container whose launch script found its Python environment unfit for the client's
  (runtime_check; the line is read from the container's log folder through its
  NodeManager) can never run a TaskExecutor, nor can its replacements: the driver calls
  `on_fatal` with the diagnostic, once, and asks YARN for no container after that,
  instead of letting restarts loop.
The threading contract of driver.py holds: every handler call happens on the loop.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import skein

from flinkyarn import hadoop, runtime_check
from flinkyarn.clock import Clock, SystemClock
from flinkyarn.ids import new_id
from yarn_am.resourcemanager.driver import ResourceEventHandler, Spawn, WorkerLocation
from yarn_am.resourcemanager.slot_manager import WorkerSpec

log = logging.getLogger(__name__)

SERVICE = "taskexecutor"
RESOURCE_ID_VARIABLE = "FLINKYARN_RESOURCE_ID"
RPC_ADDRESS_KEY = "flinkyarn.rpc_address"
KV_PUT_ATTEMPTS = 5  # _put_key: skein's race, in 2 of some 60 applications of a loaded run
KV_PUT_PAUSE_S = 0.2
# Written by the container's launch script (yarn_client.shipping.launch_script).
UNFIT_LOG = "flinkyarn.stderr"
_ENDED = ("SUCCEEDED", "FAILED", "KILLED")


def unfit_diagnostic(node_http_address: str | None, container_id: str | None,
                     timeout: float = 5.0) -> str | None:
    """The line a container's launch script wrote when its Python environment did not fit
    the client's (runtime_check.MARKER ...), read from the container's log folder through
    its NodeManager's web services while the application runs; None when there is none.
    (skein reports a failed container only as "failed during execution", and the script
    could not have told us otherwise: the environment it would speak with is the unfit one.)"""
    if not node_http_address or not container_id:
        return None
    url = (f"http://{node_http_address}/ws/v1/node/containerlogs/{container_id}/"
           f"{UNFIT_LOG}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            text = response.read(65536).decode(errors="replace")
    except (OSError, ValueError):
        return None
    lines = [line for line in text.splitlines() if line.startswith(runtime_check.MARKER)]
    return lines[-1] if lines else None


@dataclass
class _Worker:
    worker_id: str
    container_id: str | None = None
    released: bool = False
    state: str = "REQUESTING"
    ended: bool = False
    location: WorkerLocation | None = None
    history: list[str] = field(default_factory=list)


_ASKING_YARN_FAILED = (OSError, ValueError, KeyError, hadoop.HadoopConfigError,
                       skein.exceptions.SkeinError)


def why_containers_wait(size: int, queue_name: str, queue: dict, nodes: list[dict]) -> str:
    """Why YARN gives no container of `size` MB, from the application's leaf queue (the
    scheduler's REST view) and the running nodes: the queue at its limit, no node with
    room, or neither (the scheduler has not got to it)."""
    used = (queue.get("resourcesUsed") or {}).get("memory", 0)
    most = (queue.get("maxEffectiveCapacity") or {}).get("memory")
    usage = f"{used} of {most} MB used" if most else f"{used} MB used"
    if most and used + size > most:
        return f"queue {queue_name!r} is at its limit ({usage})"
    free = sorted((n.get("availMemoryMB", 0), n.get("nodeHostName", "?")) for n in nodes)
    if not free:
        return "no NodeManager is running"
    if free[-1][0] < size:
        return f"no node has {size} MB free (the most: {free[-1][0]} MB on {free[-1][1]})"
    return f"YARN has not allocated them yet (queue {queue_name!r}: {usage})"


def _location(container) -> WorkerLocation:
    """A running container's id, node and the page of its TaskExecutor's log (skein
    names a service's output `<service>.log`) in its NodeManager's web UI, where YARN's
    own UI leads to a running container's logs; whole, from its first line."""
    node = container.yarn_node_http_address or ""
    cid = container.yarn_container_id or ""
    user = os.environ.get("USER") or getpass.getuser()  # YARN sets it to the app's user
    log_url = (f"http://{node}/node/containerlogs/{cid}/{user}/{SERVICE}.log/?start=0"
               if node and cid else "")
    return WorkerLocation(cid, node.rpartition(":")[0] or node, log_url)


class YarnDriver:
    def __init__(self, app, poll_interval: float = 0.5,
                 on_fatal: Callable[[str], None] | None = None,
                 clock: Clock | None = None) -> None:
        """`app` is skein's ApplicationClient of this application; `on_fatal(diagnostic)`
        is called on the loop when no TaskExecutor container can ever start; the watcher
        polls every `poll_interval` seconds of `clock`."""
        self._app = app
        self._clock: Clock = clock or SystemClock()
        self._on_fatal = on_fatal
        self._fatal = False
        self._poll_interval = poll_interval
        self._workers: dict[str, _Worker] = {}
        self._by_container: dict[str, _Worker] = {}
        self._handler: ResourceEventHandler | None = None
        self._spawn: Spawn | None = None
        self._count = 0
        self._terminated = False

    async def initialize(self, handler: ResourceEventHandler, resource_manager_address: str,
                         spawn: Spawn) -> list[str]:
        self._handler, self._spawn = handler, spawn
        containers = await asyncio.to_thread(self._app.get_containers, [SERVICE],
                                             ["WAITING", "REQUESTED", "RUNNING", *_ENDED])
        # One that has already ended is adopted too: the watcher reports its end, and
        # whether its environment was unfit, as for any other.
        started = ([c for c in containers if str(c.state) not in _ENDED]
                   or containers[:1])
        if started:
            spec = await asyncio.to_thread(self._app.get_specification)
            worker_id = spec.services[SERVICE].env[RESOURCE_ID_VARIABLE]
            if len(started) > 1:
                raise RuntimeError(f"{len(started)} TaskExecutor containers started with the "
                                   f"application, all as worker {worker_id}: at most one may")
            worker = _Worker(worker_id, started[0].id)
            self._workers[worker_id] = self._by_container[started[0].id] = worker
            log.info("worker %s: container %s started with the application", worker_id,
                     started[0].id)
        # TaskExecutors find the ResourceManager through skein's key-value store.
        await self._put_key(RPC_ADDRESS_KEY, resource_manager_address.encode())
        spawn(self._watch(), "yarn-container-watcher")
        return [worker.worker_id for worker in self._workers.values()]

    async def _put_key(self, key: str, value: bytes) -> None:
        """Puts `key` into skein's key-value store. skein 0.8.2's ApplicationMaster sends
        a put's event to a watcher from the put's thread while the watch's own thread
        may still be answering its creation: gRPC refuses the second ("sendHeaders has
        already been called") and the put fails, the value stored but the event lost (a
        TaskExecutor starting with the application, waiting for the key, then waits on).
        The same put again, once the watch is answered, stores the same value and sends
        the event."""
        for attempt in range(1, KV_PUT_ATTEMPTS + 1):
            try:
                await asyncio.to_thread(self._app.kv.__setitem__, key, value)
                return
            except skein.exceptions.ApplicationError as error:
                if attempt == KV_PUT_ATTEMPTS:
                    raise
                log.warning("skein's key-value store refused to put %s (%s); again", key,
                            str(error).strip() or "an ApplicationError without a message")
                await asyncio.sleep(KV_PUT_PAUSE_S)

    async def max_workers(self, spec: WorkerSpec) -> tuple[int, str] | None:
        """How many TaskExecutor containers fit in the application's queue at its maximum
        capacity (CapacityScheduler's maxEffectiveCapacity) beside the AppMaster's, as the
        ResourceManager says now; None when it does not say."""
        try:
            app_spec, queue = await self._queue()
        except _ASKING_YARN_FAILED as error:
            log.warning("cannot learn the YARN queue's capacity: %s", error)
            return None
        most = queue.get("maxEffectiveCapacity") or {}
        if not most.get("memory") or not most.get("vCores"):
            return None
        master, worker = app_spec.master.resources, app_spec.services[SERVICE].resources
        count = max(0, min((most["memory"] - master.memory) // worker.memory,
                           (most["vCores"] - master.vcores) // worker.vcores))
        return count, (f"YARN queue {app_spec.queue!r} holds at most {most['memory']} MiB and "
                       f"{most['vCores']} vcores: the AppMaster's container and {count} "
                       f"TaskExecutor containers of {worker.memory} MiB and {worker.vcores} vcores")

    async def explain_wait(self, worker_ids: list[str]) -> str | None:
        waiting = [w for w in map(self._workers.get, worker_ids) if w is not None and not w.ended]
        if not waiting:
            return None
        unallocated = [w for w in waiting if w.state != "RUNNING"]
        if not unallocated:
            return f"waiting for {len(waiting)} TaskExecutor(s) to start in their containers"
        try:
            app_spec, queue = await self._queue()
            nodes = (await asyncio.to_thread(hadoop.rm_request,
                                             "/ws/v1/cluster/nodes?states=RUNNING"))["nodes"]
        except (*_ASKING_YARN_FAILED, TypeError) as error:
            log.warning("cannot ask YARN why containers wait: %s", error)
            return None
        size = app_spec.services[SERVICE].resources.memory
        return (f"waiting for {len(unallocated)} container(s) of {size} MB: "
                + why_containers_wait(size, app_spec.queue, queue,
                                      (nodes or {}).get("node") or []))

    async def _queue(self) -> tuple[skein.ApplicationSpec, dict]:
        """The application's specification and its leaf queue as the ResourceManager's
        scheduler describes it now ({} if it does not); _ASKING_YARN_FAILED if it cannot
        be asked."""
        app_spec = await asyncio.to_thread(self._app.get_specification)
        scheduler = (await asyncio.to_thread(hadoop.rm_request, "/ws/v1/cluster/scheduler")
                     )["scheduler"]["schedulerInfo"]
        return app_spec, hadoop.leaf_queues(scheduler).get(app_spec.queue) or {}

    def request_worker(self, spec: WorkerSpec) -> str:
        self._count += 1
        worker = _Worker(f"taskexecutor-{self._count}-{new_id()[:8]}")
        self._workers[worker.worker_id] = worker
        if self._fatal:  # it would meet the same environment; the application ends
            log.info("worker %s: no container requested, the application ends",
                     worker.worker_id)
            return worker.worker_id
        assert self._spawn is not None  # initialize() came first
        self._spawn(self._request(worker), f"request-{worker.worker_id}")
        return worker.worker_id

    async def _request(self, worker: _Worker) -> None:
        try:
            container = await asyncio.to_thread(
                self._app.add_container, SERVICE, {RESOURCE_ID_VARIABLE: worker.worker_id})
        except Exception as error:  # skein refused: over the maximum allocation, app ending
            self._end(worker, f"container request refused by YARN: {error}")
            return
        worker.container_id = container.id
        self._by_container[container.id] = worker
        log.info("worker %s: container %s requested", worker.worker_id, container.id)
        if worker.released:
            await self._kill(worker)

    def release_worker(self, worker_id: str, cause: str) -> None:
        worker = self._workers.get(worker_id)
        if worker is None or worker.ended:
            return
        log.info("releasing worker %s (%s): %s", worker_id, worker.container_id, cause)
        worker.released = True
        if worker.container_id is not None:
            assert self._spawn is not None  # initialize() came first
            self._spawn(self._kill(worker), f"kill-{worker_id}")

    async def _kill(self, worker: _Worker) -> None:
        try:
            await asyncio.to_thread(self._app.kill_container, worker.container_id)
        except Exception as error:  # already gone: the watcher reports its end
            log.info("killing %s: %s", worker.container_id, error)

    async def _watch(self) -> None:
        assert self._handler is not None  # initialize() came first
        while True:
            await self._clock.sleep(self._poll_interval)
            containers = await asyncio.to_thread(
                self._app.get_containers, [SERVICE],
                ["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"])
            for container in containers:
                worker = self._by_container.get(container.id)
                if worker is None or worker.ended:
                    continue
                state = str(container.state)
                if state != worker.state:
                    worker.state = state
                    if state == "RUNNING":
                        worker.location = _location(container)
                        self._handler.on_worker_started(worker.worker_id)
                if state in _ENDED:
                    message = (container.exit_message or "").strip().splitlines()
                    detail = f": {message[-1]}" if message else ""
                    if state == "FAILED":
                        unfit = await asyncio.to_thread(
                            unfit_diagnostic, container.yarn_node_http_address,
                            container.yarn_container_id)
                        if unfit:
                            detail = f": {unfit}"
                            self._fail_fatally(f"TaskExecutor container "
                                               f"{container.yarn_container_id}: {unfit}")
                    self._end(worker, f"container {container.yarn_container_id or container.id} "
                                      f"{state}{detail}")

    def _fail_fatally(self, diagnostic: str) -> None:
        if self._on_fatal is not None and not self._fatal:
            self._fatal = True
            self._on_fatal(diagnostic)

    def _end(self, worker: _Worker, cause: str) -> None:
        worker.ended = True
        if self._terminated:
            return
        if worker.released:
            cause = f"released by the ResourceManager ({cause})"
        assert self._handler is not None  # initialize() came first
        self._handler.on_worker_terminated(worker.worker_id, cause)

    def container_of(self, worker_id: str) -> str | None:
        worker = self._workers.get(worker_id)
        return worker.container_id if worker else None

    def location(self, worker_id: str) -> WorkerLocation | None:
        worker = self._workers.get(worker_id)
        return worker.location if worker else None

    async def terminate(self) -> None:
        self._terminated = True
        live = [w for w in self._workers.values() if not w.ended and w.container_id]
        await asyncio.gather(*(self._kill(w) for w in live))
