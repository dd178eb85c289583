"""The SlotPool: a JobMaster's view of the slots of its job.

A pure state machine: each input method takes the event (and `now`, monotonic seconds)
and returns the commands the JobMaster endpoint must carry out, in order. It does no I/O
and never reads a clock; the endpoint calls it on its own loop only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

from flinkyarn.ids import AllocationID, JobID, ResourceID, new_id
from flinkyarn.resources import ResourceProfile
from flinkyarn.slots import SlotOffer

SlotRequestId = NewType("SlotRequestId", str)
"""The scheduler's handle of one request (one per shared slot)."""


@dataclass(frozen=True, slots=True)
class PhysicalSlot:
    """A slot the job holds: slot slot_index of TaskExecutor resource_id."""

    allocation_id: AllocationID
    resource_id: ResourceID
    slot_index: int
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class PendingSlotRequest:
    """Read-only view of a request not yet served."""

    request_id: SlotRequestId
    allocation_id: AllocationID
    profile: ResourceProfile
    sent_to_resource_manager: bool


# ---- commands ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SlotAssigned:
    """To the scheduler: request_id is served by slot."""

    request_id: SlotRequestId
    slot: PhysicalSlot


@dataclass(frozen=True, slots=True)
class SlotRequestFailed:
    """To the scheduler: request_id will not be served."""

    request_id: SlotRequestId
    cause: str


@dataclass(frozen=True, slots=True)
class SlotLost:
    """To the scheduler: the slot serving request_id is gone; fail its tasks."""

    request_id: SlotRequestId
    allocation_id: AllocationID
    cause: str


@dataclass(frozen=True, slots=True)
class RequestSlotFromResourceManager:
    """Call the ResourceManager's requestSlot for this job; a failure comes back as
    slot_request_failed(allocation_id, ...)."""

    allocation_id: AllocationID
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class CancelSlotRequest:
    """Call the ResourceManager's cancelSlotRequest."""

    allocation_id: AllocationID


@dataclass(frozen=True, slots=True)
class FreeSlot:
    """Call the TaskExecutor's freeSlot: the job gives the slot back."""

    resource_id: ResourceID
    allocation_id: AllocationID
    cause: str


Command = (SlotAssigned | SlotRequestFailed | SlotLost | RequestSlotFromResourceManager
           | CancelSlotRequest | FreeSlot)


@dataclass(slots=True)
class _Request:
    request_id: SlotRequestId
    profile: ResourceProfile
    allocation_id: AllocationID
    requested_at: float
    sent: bool = False  # to the ResourceManager we are connected to now


@dataclass(slots=True)
class _HeldSlot:
    slot: PhysicalSlot
    request_id: SlotRequestId | None = None  # None: idle, cached since idle_since
    idle_since: float = 0.0


class SlotPool:
    """Requests slots for the scheduler and caches the ones it released.

    A request moves: pending (unsent) -> pending (sent to the ResourceManager) ->
    served (SlotAssigned) | failed (SlotRequestFailed) | cancelled. A disconnect turns
    sent requests back to unsent; a connect (re)sends every pending one with a fresh
    allocation id, so a late answer to an old id can no longer be confused with it.

    A held slot moves: assigned to a request -> idle (release_slot) -> assigned again
    (request_slot reuse) | freed (idle_timeout, close: FreeSlot) ; any held slot ->
    gone when its TaskExecutor is released (SlotLost if it was assigned).

    An offered slot is held for good once accepted; the allocation id of a pending
    request is served by its offer, any other new slot first serves the oldest pending
    request it fits (whose own ResourceManager request is then cancelled), else idles.

    A blocked TaskExecutor (the job's blocklist, yarn_am/jobmaster/blocklist.py) keeps
    the slots assigned to running tasks until they are released; its idle slots, and
    each one released from then on, are freed, and its offers are rejected (a pending
    request an offer was for is sent again, with a fresh allocation id) until unblocked.
    """

    def __init__(self, job_id: JobID, idle_timeout: float, request_timeout: float) -> None:
        self.job_id = job_id
        self._idle_timeout = idle_timeout
        self._request_timeout = request_timeout
        self._connected = False
        self._closed = False
        self._task_executors: set[ResourceID] = set()
        self._blocked: set[ResourceID] = set()
        self._requests: dict[SlotRequestId, _Request] = {}  # pending, in arrival order
        self._slots: dict[AllocationID, _HeldSlot] = {}
        # Indexes, so that each of a job's n requests, offers and answers costs O(1) and
        # not a scan of everything held or pending: the pending request carrying each
        # allocation id, the held slot serving each request, and the idle held slots
        # (in the order they became idle). Kept by _add_request/_pop_request and
        # _hold/_assign/_set_idle/_drop_slot.
        self._request_of: dict[AllocationID, SlotRequestId] = {}
        self._assigned: dict[SlotRequestId, AllocationID] = {}
        self._idle: dict[AllocationID, _HeldSlot] = {}

    # ---- inputs -------------------------------------------------------------------------

    def request_slot(self, request_id: SlotRequestId, profile: ResourceProfile,
                     now: float) -> list[Command]:
        """A slot for request_id: an idle cached slot that fits at once, else a new one
        from the ResourceManager. Idempotent while request_id is pending or served."""
        if self._closed:
            raise RuntimeError(f"the SlotPool of job {self.job_id} is closed")
        if request_id in self._requests or request_id in self._assigned:
            return []
        for held in self._idle.values():
            if profile.fits_in(held.slot.profile):
                self._assign(held, request_id)
                return [SlotAssigned(request_id, held.slot)]
        request = self._add_request(_Request(request_id, profile, AllocationID(new_id()), now))
        return self._send(request)

    def connect_resource_manager(self, now: float) -> list[Command]:
        """A ResourceManager leader is connected: send it every pending request, each
        with a fresh allocation id (what a previous leader was asked is void)."""
        self._connected = True
        out: list[Command] = []
        for request in list(self._requests.values()):
            out.extend(self._resend(request))
        return out

    def disconnect_resource_manager(self, now: float) -> list[Command]:
        """The ResourceManager is gone: what it was asked is lost with it."""
        self._connected = False
        for request in self._requests.values():
            request.sent = False
        return []

    def register_task_executor(self, resource_id: ResourceID) -> list[Command]:
        """The TaskExecutor connected to this JobMaster: its offers may be accepted."""
        self._task_executors.add(resource_id)
        return []

    def release_task_manager(self, resource_id: ResourceID, cause: str,
                             now: float) -> list[Command]:
        """The TaskExecutor is gone (heartbeat timeout, disconnect): its slots with it."""
        self._task_executors.discard(resource_id)
        out: list[Command] = []
        for aid, held in list(self._slots.items()):
            if held.slot.resource_id == resource_id:
                self._drop_slot(aid)
                if held.request_id is not None:
                    out.append(SlotLost(held.request_id, aid, cause))
        return out

    def block_task_executor(self, resource_id: ResourceID, cause: str) -> list[Command]:
        """The job takes no new slot of the TaskExecutor: its idle slots are freed."""
        self._blocked.add(resource_id)
        out: list[Command] = []
        for aid, held in list(self._idle.items()):
            if held.slot.resource_id == resource_id:
                self._drop_slot(aid)
                out.append(FreeSlot(resource_id, aid, f"TaskExecutor blocked: {cause}"))
        return out

    def unblock_task_executor(self, resource_id: ResourceID) -> list[Command]:
        self._blocked.discard(resource_id)
        return []

    def offer_slots(self, resource_id: ResourceID, offers: list[SlotOffer],
                    now: float) -> tuple[list[SlotOffer], list[Command]]:
        """Returns the accepted offers (the TaskExecutor frees the others) and commands.
        Offers from a TaskExecutor that is not registered, or after close, are rejected;
        an allocation id held from another TaskExecutor is rejected; one held from this
        TaskExecutor is accepted again without change."""
        accepted: list[SlotOffer] = []
        out: list[Command] = []
        if self._closed or resource_id not in self._task_executors:
            return accepted, out
        if resource_id in self._blocked:
            for offer in offers:  # the ResourceManager allocated them before it knew
                request_id = self._request_of.get(offer.allocation_id)
                if request_id is not None:
                    out.extend(self._resend(self._requests[request_id]))
            return accepted, out
        for offer in offers:
            held = self._slots.get(offer.allocation_id)
            if held is not None:
                if held.slot.resource_id == resource_id:
                    accepted.append(offer)
                continue
            accepted.append(offer)
            slot = PhysicalSlot(offer.allocation_id, resource_id, offer.slot_index,
                                offer.profile)
            request_id = self._request_of.get(offer.allocation_id)
            self._hold(_HeldSlot(slot, idle_since=now))
            self._serve_with(slot, None if request_id is None else self._requests[request_id],
                             out)
        return accepted, out

    def release_slot(self, request_id: SlotRequestId, now: float) -> list[Command]:
        """The scheduler is done with the slot of request_id: it serves the oldest pending
        request it fits, else is cached idle. A still pending request is cancelled."""
        if request_id in self._requests:
            return self.cancel_request(request_id)
        aid = self._assigned.get(request_id)
        if aid is None:
            return []
        held = self._slots[aid]
        if held.slot.resource_id in self._blocked:
            self._drop_slot(aid)
            return [FreeSlot(held.slot.resource_id, aid, "its TaskExecutor is blocked")]
        self._set_idle(held, now)
        out: list[Command] = []
        self._serve_with(held.slot, None, out)
        return out

    def slot_request_failed(self, allocation_id: AllocationID, cause: str,
                            now: float) -> list[Command]:
        """The ResourceManager failed the request; an answer about an allocation id no
        pending request carries (anymore) is stale and ignored."""
        request_id = self._request_of.get(allocation_id)
        if request_id is None:
            return []
        self._pop_request(request_id)
        return [SlotRequestFailed(request_id, cause)]

    def cancel_request(self, request_id: SlotRequestId) -> list[Command]:
        """The scheduler withdraws a pending request; for a served one use release_slot."""
        request = self._pop_request(request_id)
        if request is None or not request.sent:
            return []
        return [CancelSlotRequest(request.allocation_id)]

    def check_timeouts(self, now: float) -> list[Command]:
        """Free slots idle for idle_timeout; fail requests pending for request_timeout."""
        out: list[Command] = []
        for aid, held in list(self._idle.items()):
            if now - held.idle_since >= self._idle_timeout:
                self._drop_slot(aid)
                out.append(FreeSlot(held.slot.resource_id, aid, (
                    f"slot idle in the SlotPool for {self._idle_timeout:g} s")))
        for request_id, request in list(self._requests.items()):
            if now - request.requested_at >= self._request_timeout:
                self._pop_request(request_id)
                out.append(SlotRequestFailed(request_id, (
                    f"no slot for {request.profile} within {self._request_timeout:g} s")))
                if request.sent:
                    out.append(CancelSlotRequest(request.allocation_id))
        return out

    def close(self, now: float) -> list[Command]:
        """The job ended: give every slot back and cancel every sent request. Later
        offers are rejected and request_slot raises."""
        self._closed = True
        out: list[Command] = [FreeSlot(h.slot.resource_id, aid, f"job {self.job_id} ended")
                              for aid, h in self._slots.items()]
        out += [CancelSlotRequest(r.allocation_id) for r in self._requests.values() if r.sent]
        for index in (self._slots, self._requests, self._request_of, self._assigned,
                      self._idle):
            index.clear()
        return out

    # ---- queries ------------------------------------------------------------------------

    def idle_slots(self) -> list[PhysicalSlot]:
        return [h.slot for h in self._idle.values()]

    def assigned_slots(self) -> dict[SlotRequestId, PhysicalSlot]:
        return {request_id: self._slots[aid].slot for request_id, aid in self._assigned.items()}

    def pending_requests(self) -> list[PendingSlotRequest]:
        """In arrival order."""
        return [PendingSlotRequest(r.request_id, r.allocation_id, r.profile, r.sent)
                for r in self._requests.values()]

    # ---- decisions ----------------------------------------------------------------------

    def _resend(self, request: _Request) -> list[Command]:
        """Asks again for `request`, under a fresh allocation id: an answer to the old
        one is then stale."""
        del self._request_of[request.allocation_id]
        request.allocation_id = AllocationID(new_id())
        self._request_of[request.allocation_id] = request.request_id
        return self._send(request)

    def _send(self, request: _Request) -> list[Command]:
        if not self._connected:
            return []
        request.sent = True
        return [RequestSlotFromResourceManager(request.allocation_id, request.profile)]

    def _serve_with(self, slot: PhysicalSlot, request: _Request | None,
                    out: list[Command]) -> None:
        """Assign the held idle slot to request, or else to the oldest pending request it
        fits, whose own ResourceManager request is then superfluous."""
        if request is None:
            request = next((r for r in self._requests.values()
                            if r.profile.fits_in(slot.profile)), None)
            if request is None:
                return
            if request.sent:
                out.append(CancelSlotRequest(request.allocation_id))
        self._pop_request(request.request_id)
        self._assign(self._slots[slot.allocation_id], request.request_id)
        out.append(SlotAssigned(request.request_id, slot))

    def _add_request(self, request: _Request) -> _Request:
        self._requests[request.request_id] = request
        self._request_of[request.allocation_id] = request.request_id
        return request

    def _pop_request(self, request_id: SlotRequestId) -> _Request | None:
        request = self._requests.pop(request_id, None)
        if request is not None:
            del self._request_of[request.allocation_id]
        return request

    def _hold(self, held: _HeldSlot) -> None:
        """A newly accepted slot, idle until _assign."""
        self._slots[held.slot.allocation_id] = held
        self._idle[held.slot.allocation_id] = held

    def _assign(self, held: _HeldSlot, request_id: SlotRequestId) -> None:
        held.request_id = request_id
        self._idle.pop(held.slot.allocation_id, None)
        self._assigned[request_id] = held.slot.allocation_id

    def _set_idle(self, held: _HeldSlot, now: float) -> None:
        if held.request_id is not None:
            del self._assigned[held.request_id]
        held.request_id, held.idle_since = None, now
        self._idle[held.slot.allocation_id] = held

    def _drop_slot(self, allocation_id: AllocationID) -> None:
        held = self._slots.pop(allocation_id)
        self._idle.pop(allocation_id, None)
        if held.request_id is not None:
            del self._assigned[held.request_id]
