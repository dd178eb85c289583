"""A fake of skein's ApplicationClient, as the YARN driver uses it from inside the
AppMaster, with YARN's side in the test's hands: when a container request returns (or
is refused), when a container runs, and when and how it ends.

Its blocking calls run on the LoopExecutor (tests/harness/loop.py). With `hold_requests`
set, `add_container` blocks like a slow skein call until the test answers it: the
driver does not know the container's id until then."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

from tests.harness.loop import BlockedCall
from yarn_am.resourcemanager.yarn_driver import RESOURCE_ID_VARIABLE, SERVICE

LIVE = ("WAITING", "REQUESTED", "RUNNING")
ENDED = ("SUCCEEDED", "FAILED", "KILLED")
KILLED_MESSAGE = "Container killed by the ApplicationMaster."


@dataclass
class FakeContainer:
    """skein.model.Container as the driver reads it (`state` a plain string)."""

    service_name: str
    instance: int
    env: dict[str, str]
    state: str = "WAITING"
    yarn_container_id: str = ""
    yarn_node_http_address: str | None = None  # None: the driver reads no NodeManager log
    exit_message: str = ""

    @property
    def id(self) -> str:
        return f"{self.service_name}_{self.instance}"

    @property
    def worker_id(self) -> str:
        return self.env[RESOURCE_ID_VARIABLE]


class ContainerRequest(BlockedCall):
    """An `add_container` call the test holds: `FakeSkeinApp.grant` or `refuse` it."""

    def __init__(self, service: str, env: dict[str, str]) -> None:
        super().__init__(f"add_container({service!r}, {env})")
        self.service = service
        self.env = env


@dataclass
class FakeSkeinApp:
    """See the module docstring. `started_with_application`: the worker id of a
    TaskExecutor container YARN started with the application (a per-job cluster's).
    `on_running(container)`: called when the test runs a container (an in-process
    cluster starts its TaskExecutor then); `on_ended(container)` when a container that
    ran ends (its process is gone then)."""

    started_with_application: str | None = None
    hold_requests: bool = False
    on_running: Callable[[FakeContainer], None] = lambda _container: None
    on_ended: Callable[[FakeContainer], None] = lambda _container: None
    kv: dict[str, bytes] = field(default_factory=dict)
    containers: dict[str, FakeContainer] = field(default_factory=dict)
    requests: list[ContainerRequest] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)  # ids, in the order of the calls
    polls: int = 0  # get_containers calls

    def __post_init__(self) -> None:
        self._instances = itertools.count()
        self._yarn_ids = itertools.count(2)  # container 1 is the AppMaster's
        self._refusal: Exception | None = None
        if self.started_with_application is not None:
            self._add(SERVICE, {RESOURCE_ID_VARIABLE: self.started_with_application})

    # ------------------------------------------- skein.ApplicationClient, as used

    def add_container(self, service: str, env: dict[str, str]) -> FakeContainer:
        request = ContainerRequest(service, dict(env))
        self.requests.append(request)
        if self._refusal is not None:
            raise self._refusal
        if self.hold_requests:
            raise request
        return self._add(service, request.env)

    def get_containers(self, services: list[str], states: list[str]) -> list[FakeContainer]:
        self.polls += 1
        return [c for c in self.containers.values()
                if c.service_name in services and c.state in states]

    def kill_container(self, id: str) -> None:
        self.kills.append(id)
        container = self.containers.get(id)
        if container is None or container.state in ENDED:
            raise ValueError(f"container {id} is not running")  # skein raises too
        self.end(container, "KILLED", KILLED_MESSAGE)

    def get_specification(self) -> SimpleNamespace:
        env = {RESOURCE_ID_VARIABLE: self.started_with_application or ""}
        return SimpleNamespace(services={SERVICE: SimpleNamespace(env=env)})

    # ------------------------------------------------------------ the test's YARN

    def refuse_requests(self, error: Exception | None) -> None:
        """From now on, `add_container` raises `error` at once (None: no longer)."""
        self._refusal = error

    def grant(self, request: ContainerRequest) -> FakeContainer:
        """The held `request` returns its new container (WAITING)."""
        container = self._add(request.service, request.env)
        request.answer(container)
        return container

    def refuse(self, request: ContainerRequest, error: Exception) -> None:
        request.fail(error)

    def run(self, container: FakeContainer) -> None:
        """YARN allocated and launched the container."""
        assert container.state in LIVE, f"{container.id} is {container.state} already"
        container.state = "RUNNING"
        container.yarn_container_id = f"container_1700000000000_0001_01_{next(self._yarn_ids):06d}"
        self.on_running(container)

    def end(self, container: FakeContainer, state: str, exit_message: str = "",
            orphaned: bool = False) -> None:
        """The container ended (its process exited, YARN or an admin killed it).
        `orphaned`: its launch script was killed and its TaskExecutor runs on, outside
        the container (as one without a lifeline would: flinkyarn/lifeline.py)."""
        assert state in ENDED, state
        ran = container.state == "RUNNING"
        container.state = state
        container.exit_message = exit_message
        if ran and not orphaned:
            self.on_ended(container)

    def container_of(self, worker_id: str) -> FakeContainer:
        [container] = [c for c in self.containers.values() if c.worker_id == worker_id]
        return container

    def _add(self, service: str, env: dict[str, str]) -> FakeContainer:
        container = FakeContainer(service, next(self._instances), env)
        self.containers[container.id] = container
        return container
