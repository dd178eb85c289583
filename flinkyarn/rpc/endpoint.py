"""The base of every long-lived component: Dispatcher, ResourceManager, JobMaster and
TaskExecutor.

Contract:
- An endpoint's state is changed only on its event loop (the process's asyncio loop):
  by its gateway methods, which the RpcService awaits there, and by the tasks it spawns.
  Blocking work goes to `run_blocking` and comes back as a result on the loop.
- Every task an endpoint starts belongs to its task group (`spawn`). When one raises,
  the group cancels the others and `run()` raises: the failure is loud, never lost.
- `run()` serves until `stop()`; the endpoint is registered on the RpcService (its
  gateway reachable) only while it runs.
- Its periodic work (`every`), its timeouts and its pauses follow its Clock, so that a
  test with a ManualClock decides when they happen (tests/harness).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from flinkyarn.clock import Clock, SystemClock
from flinkyarn.rpc.errors import StaleCall
from flinkyarn.rpc.service import RpcService

T = TypeVar("T")
log = logging.getLogger(__name__)


def check_fencing(expected: object, received: object, what: str) -> None:
    """Drops a stale call: raises StaleCall unless the call's token is the current one."""
    if expected is None or received != expected:
        raise StaleCall(f"stale {what}: the call carries {received!r}, current is {expected!r}")


class RpcEndpoint:
    def __init__(self, rpc: RpcService, name: str, gateway: type,
                 clock: Clock | None = None) -> None:
        self.rpc = rpc
        self.name = name
        self.gateway = gateway
        # What its periodic tasks, timeouts and pauses follow (tests: a ManualClock).
        self._clock: Clock = clock or SystemClock()
        self._group: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop_requested = asyncio.Event()
        self._loop_thread: int | None = None
        self.running = asyncio.Event()

    async def on_start(self) -> None:
        """Called on the loop once the gateway is reachable."""

    async def on_stop(self) -> None:
        """Called on the loop when the endpoint stops, before its tasks are cancelled."""

    async def run(self) -> None:
        self._loop_thread = threading.get_ident()
        async with asyncio.TaskGroup() as group:
            self._group = group
            self.rpc.register(self.name, self.gateway, self)
            try:
                await self.on_start()
                self.running.set()
                await self._stop_requested.wait()
            finally:
                self.rpc.unregister(self.name)
                try:
                    await self.on_stop()
                finally:
                    for task in list(self._tasks):
                        task.cancel()

    def stop(self) -> None:
        self._stop_requested.set()

    @property
    def stopping(self) -> bool:
        """stop() was called: the endpoint's task group takes no new tasks once its
        on_stop has run."""
        return self._stop_requested.is_set()

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Starts a task owned by this endpoint; its exception fails the endpoint."""
        if self._group is None:
            raise RuntimeError(f"{self.name}: spawn before run()")
        task = self._group.create_task(coroutine, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def every(self, interval: Callable[[], float], action: Callable[[], Awaitable[None] | None],
              name: str) -> asyncio.Task[None]:
        """Runs `action` every `interval()` seconds of the endpoint's clock, on the loop,
        until the endpoint stops."""
        async def loop() -> None:
            while True:
                await self._clock.sleep(interval())
                result = action()
                if asyncio.iscoroutine(result):
                    await result
        return self.spawn(loop(), name)

    async def run_blocking(self, function: Callable[..., T], *args: Any) -> T:
        """Runs a blocking call on a worker thread and returns its result on the loop."""
        return await asyncio.get_running_loop().run_in_executor(None, function, *args)

    def assert_on_loop(self) -> None:
        """Debug check: state may only change on the endpoint's loop."""
        assert self._loop_thread in (None, threading.get_ident()), \
            f"{self.name}: state touched off its event loop"
