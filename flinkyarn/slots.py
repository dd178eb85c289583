"""What TaskExecutors, the ResourceManager and JobMasters say about slots."""

from __future__ import annotations

import msgspec

from flinkyarn.ids import AllocationID, JobID, SlotID
from flinkyarn.resources import ResourceProfile


class SlotStatus(msgspec.Struct, frozen=True):
    """One slot as its TaskExecutor sees it: free (allocation_id None) or given to a job."""

    slot_id: SlotID
    profile: ResourceProfile
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None


class SlotReport(msgspec.Struct, frozen=True):
    """Every slot of one TaskExecutor. Sent on registration and as the payload of each
    heartbeat to the ResourceManager: the truth that corrects lost or reordered messages."""

    slots: list[SlotStatus] = []


class SlotOffer(msgspec.Struct, frozen=True):
    """A slot a TaskExecutor offers to the JobMaster it was allocated for."""

    allocation_id: AllocationID
    slot_index: int
    profile: ResourceProfile
