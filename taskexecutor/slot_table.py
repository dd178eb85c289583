"""The TaskExecutor's TaskSlotTable: which of its slots belongs to which job's allocation,
and which tasks run in it.

States of one slot:
    FREE --allocate--> ALLOCATED --mark_active (offer accepted) | add_task--> ACTIVE
    ALLOCATED / ACTIVE --free--> FREE          (its tasks must have ended or been failed)
The allocation id is the slot's fencing token: calls naming another allocation are refused.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from flinkyarn.ids import AllocationID, ExecutionAttemptID, JobID, ResourceID, SlotID
from flinkyarn.resources import ResourceProfile
from flinkyarn.slots import SlotOffer, SlotReport, SlotStatus


class SlotState(enum.Enum):
    FREE = "free"
    ALLOCATED = "allocated"  # given to a job by the ResourceManager, not yet accepted
    ACTIVE = "active"        # accepted by the job's JobMaster; tasks may run in it


class SlotTaken(Exception):
    """The slot is held by another allocation."""


@dataclass
class TaskSlot:
    index: int
    profile: ResourceProfile
    state: SlotState = SlotState.FREE
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None
    tasks: set[ExecutionAttemptID] = field(default_factory=set)


class TaskSlotTable:
    def __init__(self, resource_id: ResourceID, num_slots: int, profile: ResourceProfile) -> None:
        self.resource_id = resource_id
        self._slots = [TaskSlot(i, profile) for i in range(num_slots)]

    def allocate(self, index: int, job_id: JobID, allocation_id: AllocationID) -> bool:
        """Gives slot `index` to the allocation. True if newly allocated, False if it already
        was (an idempotent repeat). Raises SlotTaken if another allocation holds it."""
        if not 0 <= index < len(self._slots):
            raise IndexError(f"no slot {index} on {self.resource_id}")
        slot = self._slots[index]
        if slot.state is not SlotState.FREE:
            if slot.allocation_id == allocation_id:
                return False
            raise SlotTaken(f"slot {index} of {self.resource_id} is held by allocation "
                            f"{slot.allocation_id} of job {slot.job_id}")
        # The same allocation may not hold two slots.
        if self.by_allocation(allocation_id) is not None:
            raise SlotTaken(f"allocation {allocation_id} already holds a slot")
        slot.state, slot.job_id, slot.allocation_id = SlotState.ALLOCATED, job_id, allocation_id
        return True

    def mark_active(self, allocation_id: AllocationID) -> bool:
        slot = self.by_allocation(allocation_id)
        if slot is None:
            return False
        slot.state = SlotState.ACTIVE
        return True

    def free(self, allocation_id: AllocationID) -> TaskSlot | None:
        """Frees the allocation's slot; returns what it was (its tasks), or None if unknown."""
        slot = self.by_allocation(allocation_id)
        if slot is None:
            return None
        freed = TaskSlot(slot.index, slot.profile, slot.state, slot.allocation_id, slot.job_id,
                         set(slot.tasks))
        slot.state, slot.job_id, slot.allocation_id = SlotState.FREE, None, None
        slot.tasks.clear()
        return freed

    def by_allocation(self, allocation_id: AllocationID) -> TaskSlot | None:
        for slot in self._slots:
            if slot.allocation_id == allocation_id and slot.state is not SlotState.FREE:
                return slot
        return None

    def slots_of_job(self, job_id: JobID) -> list[TaskSlot]:
        return [s for s in self._slots if s.job_id == job_id and s.state is not SlotState.FREE]

    def allocations_of_job(self, job_id: JobID) -> list[AllocationID]:
        """The allocation ids of the job's slots."""
        return [s.allocation_id for s in self.slots_of_job(job_id) if s.allocation_id is not None]

    def jobs(self) -> set[JobID]:
        return {s.job_id for s in self._slots if s.job_id is not None}

    def add_task(self, job_id: JobID, allocation_id: AllocationID,
                 attempt_id: ExecutionAttemptID) -> None:
        """Puts a task into the allocation's slot, marking the slot ACTIVE: the JobMaster
        deploys only into slots it accepted, and its deployment may overtake the answer
        to our offer (as Flink's tryMarkSlotActive allows)."""
        slot = self.by_allocation(allocation_id)
        if slot is None or slot.job_id != job_id:
            raise SlotTaken(f"no slot for allocation {allocation_id} of job {job_id} "
                            f"on {self.resource_id}")
        slot.state = SlotState.ACTIVE
        slot.tasks.add(attempt_id)

    def remove_task(self, attempt_id: ExecutionAttemptID) -> None:
        for slot in self._slots:
            slot.tasks.discard(attempt_id)

    def offers_for(self, job_id: JobID) -> list[SlotOffer]:
        return [SlotOffer(s.allocation_id, s.index, s.profile) for s in self.slots_of_job(job_id)
                if s.allocation_id is not None]

    def report(self) -> SlotReport:
        return SlotReport([SlotStatus(SlotID(self.resource_id, s.index), s.profile,
                                      s.allocation_id, s.job_id) for s in self._slots])

    def free_count(self) -> int:
        return sum(s.state is SlotState.FREE for s in self._slots)

    def is_idle(self) -> bool:
        return all(s.state is SlotState.FREE for s in self._slots)

    def __len__(self) -> int:
        return len(self._slots)
