"""The resource-manager driver: how the ResourceManager gets and returns the processes
TaskExecutors run in. `local` starts local processes; `yarn` asks YARN for containers.
The SlotManager never knows which.

Threading contract:
- Every method is called on the ResourceManager's event loop and must not block it.
  `request_worker` and `release_worker` return at once; the work happens in tasks the
  driver starts through the `spawn` function it gets in `initialize` (so they belong to
  the ResourceManager's task group), or on the driver's own threads.
- The driver calls the ResourceEventHandler only on that same loop (from a thread it
  hops there with `loop.call_soon_threadsafe`).
- For every worker id returned by `request_worker`, `on_worker_terminated` is called
  exactly once: when its process ends or its container completes, whether it ever
  registered or not, and also after `release_worker` (the cause then says so).
- `terminate` stops every worker still running and returns when they are gone; no
  handler call follows it.
- The worker id is also the TaskExecutor's ResourceID: the process registers with it.
- `initialize` returns the ids of workers already under way that nobody requested (a
  per-job application's first TaskExecutor, started by YARN beside the AppMaster): they
  count as requested, and the same contract holds for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Protocol

from yarn_am.resourcemanager.slot_manager import WorkerSpec

Spawn = Callable[[Coroutine[Any, Any, Any], str], Any]


@dataclass(frozen=True)
class WorkerLocation:
    """Where a worker runs, as its platform names it, for people: the dashboard."""

    container_id: str = ""  # YARN's container id
    host: str = ""          # the node
    log_url: str = ""       # its logs in the platform's web UI


class ResourceEventHandler(Protocol):
    def on_worker_terminated(self, worker_id: str, cause: str) -> None:
        """The worker's process ended or its container completed."""

    def on_worker_started(self, worker_id: str) -> None:
        """The worker's process runs (it may not have registered yet)."""


class ResourceManagerDriver(Protocol):
    async def initialize(self, handler: ResourceEventHandler, resource_manager_address: str,
                         spawn: Spawn) -> list[str]:
        """Returns the workers already under way (see above)."""
        ...

    def request_worker(self, spec: WorkerSpec) -> str:
        """Starts getting one worker of `spec`; returns its id at once."""
        ...

    def release_worker(self, worker_id: str, cause: str) -> None:
        """Stops the worker and returns its resources."""
        ...

    async def max_workers(self, spec: WorkerSpec) -> tuple[int, str] | None:
        """The most workers of `spec` the platform could ever hold at once, and what bounds
        it (e.g. a YARN queue's maximum); None when it sets no bound or does not say."""
        ...

    async def explain_wait(self, worker_ids: list[str]) -> str | None:
        """Why the workers `worker_ids` (requested, not registered) do not run a
        TaskExecutor yet, as the platform tells ("waiting for 2 containers of 1024 MB:
        queue 'etl' is at its limit (8192 of 8192 MB used)"); None if it does not say."""
        ...

    def location(self, worker_id: str) -> WorkerLocation | None:
        """Where the worker runs, once its process does; None before, or if unknown."""
        ...

    async def terminate(self) -> None:
        ...
