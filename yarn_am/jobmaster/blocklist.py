"""A job's blocklist (Flink's, FLIP-224, fed by task failures): the TaskExecutors the
job takes no new slots from, because its tasks keep failing there.

A TaskExecutor whose Spark is broken, or whose disk is full, fails every task given
to it, and the scheduler would give it the same slot again at each restart. Counting
each task failure (of the task's own: a lost input is the producer's fault) against the
TaskExecutor it ran on, the JobMaster blocks one with `task_failures` of them within
`timeout`, for `timeout`: the SlotPool frees its slots and takes none of its offers,
and the ResourceManager gives the job no slot of it (ResourceManager.block_task_executors).

Transitions of a TaskExecutor, for one job:
    clear   -> counting  a task failure there
    counting -> blocked  the failure that makes `task_failures` within `timeout`
    counting -> clear    its failures grow older than `timeout`
    blocked -> clear     `timeout` after it was blocked (expire)
Pure: time is an argument; the JobMaster carries the decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.ids import ResourceID


@dataclass(frozen=True)
class BlocklistConfig:
    enabled: bool = True             # cluster.resource-blocklist.enabled
    task_failures: int = 2           # cluster.resource-blocklist.task-failures
    timeout: float = 600.0           # cluster.resource-blocklist.item.timeout

    @classmethod
    def from_configuration(cls, conf: Configuration) -> "BlocklistConfig":
        return cls(conf.get(options.BLOCKLIST_ENABLED),
                   conf.get(options.BLOCKLIST_TASK_FAILURES),
                   conf.get(options.BLOCKLIST_ITEM_TIMEOUT))


@dataclass(frozen=True)
class BlockedTaskExecutor:
    resource_id: ResourceID
    cause: str      # why, for people: the client's line and the dashboard
    since: float    # monotonic, as given
    until: float


class Blocklist:
    def __init__(self, config: BlocklistConfig) -> None:
        self.config = config
        self._failures: dict[ResourceID, list[float]] = {}
        self._blocked: dict[ResourceID, BlockedTaskExecutor] = {}

    def task_failed(self, resource_id: ResourceID, task: str, cause: str,
                    now: float) -> BlockedTaskExecutor | None:
        """A task of the job failed on `resource_id`: the TaskExecutor's new block, if
        this failure blocks it (None if not, or if it is blocked already)."""
        if not self.config.enabled or resource_id in self._blocked:
            return None
        recent = [t for t in self._failures.get(resource_id, []) if now - t < self.config.timeout]
        recent.append(now)
        if len(recent) < self.config.task_failures:
            self._failures[resource_id] = recent
            return None
        self._failures.pop(resource_id, None)
        first_line = (cause.strip().splitlines() or ["unknown cause"])[0]
        blocked = BlockedTaskExecutor(
            resource_id, f"{len(recent)} task failures there within "
                         f"{self.config.timeout:g} s; the last: {task}: {first_line}",
            now, now + self.config.timeout)
        self._blocked[resource_id] = blocked
        return blocked

    def expire(self, now: float) -> list[ResourceID]:
        """The TaskExecutors whose block ended by `now`, no longer blocked."""
        ended = [rid for rid, b in self._blocked.items() if b.until <= now]
        for rid in ended:
            del self._blocked[rid]
        return ended

    def is_blocked(self, resource_id: ResourceID) -> bool:
        return resource_id in self._blocked

    def blocked(self) -> list[BlockedTaskExecutor]:
        """In the order they were blocked."""
        return list(self._blocked.values())
