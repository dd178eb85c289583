"""The SlotManager: the ResourceManager's book of every slot of every TaskExecutor.

A pure state machine: each input method takes the event (and `now`, monotonic seconds)
and returns the commands the ResourceManager endpoint must carry out, in order. It does
no I/O and never reads a clock; the endpoint calls it on its own loop only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from flinkyarn.ids import AllocationID, JobID, ResourceID, SlotID
from flinkyarn.resources import ResourceProfile
from flinkyarn.slots import SlotReport

MAX_CONSECUTIVE_START_FAILURES = 3
"""After this many workers in a row failed to start, requests waiting for them fail."""

SlotState = Literal["free", "pending", "allocated", "unknown"]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """The TaskExecutor the driver starts on demand: num_slots slots of slot_profile."""

    num_slots: int
    slot_profile: ResourceProfile

    def __post_init__(self) -> None:
        if self.num_slots < 1:
            raise ValueError(f"a worker needs at least one slot, not {self.num_slots}")


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """A JobMaster's SlotPool asks for one slot; allocation_id fences everything after."""

    job_id: JobID
    allocation_id: AllocationID
    profile: ResourceProfile
    job_master_address: str


@dataclass(frozen=True, slots=True)
class TaskManagerSlotInfo:
    """Read-only view of one slot, for the REST API and tests."""

    slot_id: SlotID
    profile: ResourceProfile
    state: SlotState
    allocation_id: AllocationID | None
    job_id: JobID | None


# ---- commands ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AllocateSlot:
    """Call the TaskExecutor's requestSlot; answer with allocation_acknowledged or
    allocation_rejected."""

    resource_id: ResourceID
    slot_id: SlotID
    allocation_id: AllocationID
    job_id: JobID
    job_master_address: str
    profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class RequestWorker:
    """Ask the driver for one more TaskExecutor; answer with register_task_executor once
    it registers, or worker_failed_to_start."""

    spec: WorkerSpec


@dataclass(frozen=True, slots=True)
class ReleaseWorker:
    """Stop the TaskExecutor and return its container. The SlotManager has forgotten it."""

    resource_id: ResourceID
    cause: str


@dataclass(frozen=True, slots=True)
class FailSlotRequest:
    """Tell the job's JobMaster that the request allocation_id will not be served."""

    job_id: JobID
    allocation_id: AllocationID
    cause: str


Command = AllocateSlot | RequestWorker | ReleaseWorker | FailSlotRequest


# ---- internal state ---------------------------------------------------------------------

@dataclass(slots=True)
class _Slot:
    slot_id: SlotID
    profile: ResourceProfile
    state: SlotState = "free"
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None
    pending_since: float = 0.0  # when the AllocateSlot in flight was sent
    acknowledged_at: float | None = None  # when the TaskExecutor's ack of it arrived


@dataclass(slots=True)
class _TaskExecutor:
    resource_id: ResourceID
    slots: dict[SlotID, _Slot] = field(default_factory=dict)
    idle_since: float | None = None  # every slot free since then; None while any is not
    in_use: int | None = None  # its key in SlotManager._with_free; None: no free slot


@dataclass(slots=True, eq=False)
class _PendingWorker:
    assigned: list[AllocationID] = field(default_factory=list)  # one pending slot each


@dataclass(slots=True)
class _PendingRequest:
    request: SlotRequest
    requested_at: float
    slot_id: SlotID | None = None  # AllocateSlot in flight on this slot
    worker: _PendingWorker | None = None  # holds a pending slot of this worker


class SlotManager:
    """Matches slot requests to slots of registered TaskExecutors, and asks for workers.

    A slot is in one of these states, with these transitions only:

        free      -> pending    request_slot / a freed slot serves a request (AllocateSlot)
        pending   -> allocated  allocation_acknowledged; a report says allocated to it
        pending   -> unknown    allocation_rejected (the TaskExecutor knew better)
        pending   -> free       a report says free and the AllocateSlot is older than the
                                slot request timeout (it was lost); free_slot
        allocated -> free       free_slot with its allocation id; a report says free
        unknown   -> free | allocated            the next report says which
        any       -> allocated to X              a report says allocated to X
        any       -> gone       its TaskExecutor unregisters, re-registers or is released

    A slot request is pending from request_slot until its slot is allocated, it fails
    (FailSlotRequest) or is cancelled. While pending it either waits, holds a slot of a
    pending worker, or has an AllocateSlot in flight; it moves back to waiting when that
    slot or worker is lost, and waiting requests are served first come, first served.
    A pending worker exists from RequestWorker (or add_pending_worker) until a new
    TaskExecutor registers (the oldest pending worker is taken) or worker_failed_to_start.

    A job may block TaskExecutors for a while (its blocklist: block_task_executors):
    none of their slots serves its requests until then; other jobs' requests are not
    affected.

    Invariant after every input: no waiting request fits a free slot it may take.
    """

    def __init__(self, worker: WorkerSpec, taskmanager_timeout: float,
                 slot_request_timeout: float, max_workers: int) -> None:
        if max_workers < 0:
            raise ValueError(f"max_workers must not be negative, not {max_workers}")
        self._worker = worker
        self._taskmanager_timeout = taskmanager_timeout
        self._slot_request_timeout = slot_request_timeout
        self._max_workers = max_workers
        self._task_executors: dict[ResourceID, _TaskExecutor] = {}  # registration order
        self._pending_workers: list[_PendingWorker] = []  # RequestWorker order
        self._requests: dict[AllocationID, _PendingRequest] = {}  # arrival order
        # The registered slots holding each allocation id (usually one; a second may hold
        # it pending): _slot_with_allocation in O(1) rather than a scan of every slot at
        # each of a job's n requests. Kept by _set and _forget_slot.
        self._by_allocation: dict[AllocationID, list[_Slot]] = {}
        # The TaskExecutors with a free slot, by how many of their slots are in use
        # (pending or allocated): a request takes the busiest one's free slot (packing)
        # in O(slots of one TaskExecutor), not by a look at every TaskExecutor. Kept by
        # _index, which _set and every change to a TaskExecutor's set of slots call.
        self._with_free: dict[int, dict[ResourceID, _TaskExecutor]] = {}
        self._start_failures = 0  # consecutive; reset by any registration
        # The TaskExecutors each job blocked, with when each block ends.
        self._blocked: dict[JobID, dict[ResourceID, float]] = {}

    # ---- inputs -------------------------------------------------------------------------

    def register_task_executor(self, resource_id: ResourceID, slot_report: SlotReport,
                               now: float) -> list[Command]:
        """A TaskExecutor (re)registers. A re-registration first drops the old slots; a
        new TaskExecutor takes the place of the oldest pending worker, whose requests are
        allocated on its slots."""
        out: list[Command] = []
        known = resource_id in self._task_executors
        if known:
            self._drop_task_executor(resource_id)
        te = self._task_executors[resource_id] = _TaskExecutor(resource_id)
        for status in slot_report.slots:
            slot = te.slots[status.slot_id] = _Slot(status.slot_id, status.profile)
            if status.allocation_id is not None:
                self._record_allocation(slot, status.allocation_id, status.job_id)
        self._index(te)
        self._update_idle(te, now)
        self._start_failures = 0
        if not known and self._pending_workers:
            worker = self._pending_workers.pop(0)
            for allocation_id in worker.assigned:
                pending = self._requests[allocation_id]
                pending.worker = None
                free = self._free_slot_on(te, pending.request.profile)
                if free is not None:
                    self._start_allocation(pending, te, free, now, out)
        return self._serve_waiting(now, out)

    def add_pending_worker(self) -> None:
        """A worker of the configured spec is under way without a RequestWorker (it was
        started with the application): requests take its slots instead of asking for one."""
        self._pending_workers.append(_PendingWorker())

    def unregister_task_executor(self, resource_id: ResourceID, cause: str,
                                 now: float) -> list[Command]:
        """The TaskExecutor is gone (heartbeat timeout, container completed, exit). Its
        allocated slots vanish silently: JobMasters learn it from their own heartbeats."""
        if resource_id not in self._task_executors:
            return []
        self._drop_task_executor(resource_id)
        return self._serve_waiting(now)

    def request_slot(self, request: SlotRequest, now: float) -> list[Command]:
        """A JobMaster asks for a slot. Idempotent for an allocation id already known."""
        aid = request.allocation_id
        if aid in self._requests or self._slot_with_allocation(aid) is not None:
            return []
        if not (request.profile.fits_in(self._worker.slot_profile) or any(
                request.profile.fits_in(s.profile)
                for te in self._task_executors.values() for s in te.slots.values())):
            return [FailSlotRequest(request.job_id, aid, (
                f"no slot can serve profile {request.profile}: workers offer slots of "
                f"{self._worker.slot_profile} and no registered slot is larger"))]
        out: list[Command] = []
        pending = self._requests[aid] = _PendingRequest(request, now)
        self._serve(pending, now, out)
        return out

    def allocation_acknowledged(self, allocation_id: AllocationID, now: float) -> list[Command]:
        """The TaskExecutor accepted the AllocateSlot: the request is fulfilled."""
        found = self._slot_with_allocation(allocation_id, "pending")
        if found is not None:
            te, slot = found
            self._record_allocation(slot, allocation_id, slot.job_id)
            slot.acknowledged_at = now
            self._update_idle(te, now)
        return []

    def allocation_rejected(self, allocation_id: AllocationID, cause: str,
                            now: float) -> list[Command]:
        """The TaskExecutor refused the AllocateSlot: its slot is not used until the next
        report says what it is, and the request is served elsewhere."""
        found = self._slot_with_allocation(allocation_id, "pending")
        if found is None:
            return []
        te, slot = found
        self._return_request(slot)
        self._set(slot, "unknown")
        self._update_idle(te, now)
        return self._serve_waiting(now)

    def report_slot_status(self, resource_id: ResourceID, slot_report: SlotReport,
                           now: float, requested_at: float | None = None) -> list[Command]:
        """Reconcile with the TaskExecutor's heartbeat payload, the truth about its slots,
        except that an AllocateSlot younger than the slot request timeout may not have
        arrived yet, and that a report asked for (`requested_at`) before an allocation's
        acknowledgement arrived may have been made before the TaskExecutor took it: such a
        report's "free" does not undo the allocation (the next report's does)."""
        te = self._task_executors.get(resource_id)
        if te is None:
            return []
        reported = {status.slot_id: status for status in slot_report.slots}
        for slot_id in [s for s in te.slots if s not in reported]:
            slot = te.slots.pop(slot_id)
            self._return_request(slot)
            self._forget_slot(slot)
        for status in slot_report.slots:
            slot = te.slots.setdefault(status.slot_id, _Slot(status.slot_id, status.profile))
            if status.allocation_id is None:
                in_flight = (slot.state == "pending"
                             and now - slot.pending_since < self._slot_request_timeout)
                older = (slot.state == "allocated" and requested_at is not None
                         and slot.acknowledged_at is not None
                         and requested_at < slot.acknowledged_at)
                if slot.state != "free" and not in_flight and not older:
                    self._return_request(slot)
                    self._set(slot, "free")
            elif slot.state != "allocated" or slot.allocation_id != status.allocation_id:
                if slot.allocation_id != status.allocation_id:
                    self._return_request(slot)
                self._record_allocation(slot, status.allocation_id, status.job_id)
        self._index(te)
        self._update_idle(te, now)
        return self._serve_waiting(now)

    def free_slot(self, slot_id: SlotID, allocation_id: AllocationID,
                  now: float) -> list[Command]:
        """The TaskExecutor freed the slot of allocation_id; stale if the slot now belongs
        to another allocation."""
        te = self._task_executors.get(slot_id.resource_id)
        slot = te.slots.get(slot_id) if te is not None else None
        if te is None or slot is None or slot.allocation_id != allocation_id:
            return []
        # Freed while its AllocateSlot was unanswered: it had been allocated, so done.
        self._forget_request(allocation_id)
        self._set(slot, "free")
        self._update_idle(te, now)
        return self._serve_waiting(now)

    def cancel_slot_request(self, allocation_id: AllocationID) -> list[Command]:
        """The JobMaster no longer needs the request. An AllocateSlot in flight is not
        recalled: the slot stays pending until the TaskExecutor's report says what it did.
        A freed pending-worker slot is taken by a waiting request at the next input that
        serves requests. Returns no commands (the list keeps the inputs uniform)."""
        self._forget_request(allocation_id)
        return []

    def unregister_job(self, job_id: JobID) -> list[Command]:
        """Drop every pending request of the job, and its blocks. Its allocated slots stay
        allocated until their TaskExecutors free them. Returns no commands."""
        for aid in [a for a, p in self._requests.items() if p.request.job_id == job_id]:
            self.cancel_slot_request(aid)
        self._blocked.pop(job_id, None)
        return []

    def block_task_executors(self, job_id: JobID, resource_ids: list[ResourceID],
                             until: float) -> list[Command]:
        """The job takes no slot of these TaskExecutors before `until` (a later block of
        the same one extends it). An AllocateSlot in flight is not recalled: the
        JobMaster rejects that offer and asks again. Returns no commands."""
        blocked = self._blocked.setdefault(job_id, {})
        for resource_id in resource_ids:
            blocked[resource_id] = max(until, blocked.get(resource_id, until))
        return []

    def _blocked_for(self, job_id: JobID, resource_id: ResourceID, now: float) -> bool:
        return self._blocked.get(job_id, {}).get(resource_id, now) > now

    def worker_failed_to_start(self, cause: str, now: float) -> list[Command]:
        """The oldest pending worker could not be started. Its requests are served again,
        until MAX_CONSECUTIVE_START_FAILURES in a row: then they fail."""
        if not self._pending_workers:
            return []
        out: list[Command] = []
        worker = self._pending_workers.pop(0)
        self._start_failures += 1
        for aid in worker.assigned:
            pending = self._requests[aid]
            pending.worker = None
            if self._start_failures >= MAX_CONSECUTIVE_START_FAILURES:
                del self._requests[aid]
                out.append(FailSlotRequest(pending.request.job_id, aid, (
                    f"{self._start_failures} TaskExecutors in a row failed to start; "
                    f"last cause: {cause}")))
        return self._serve_waiting(now, out)

    def check_timeouts(self, now: float) -> list[Command]:
        """Fail requests pending for slot_request_timeout; release TaskExecutors whose
        every slot has been free for taskmanager_timeout (forgotten at once)."""
        out: list[Command] = []
        for aid, pending in list(self._requests.items()):
            if now - pending.requested_at >= self._slot_request_timeout:
                self._forget_request(aid)
                out.append(FailSlotRequest(pending.request.job_id, aid, (
                    f"slot request {aid} was not served within "
                    f"{self._slot_request_timeout:g} s")))
        for job_id, blocked in list(self._blocked.items()):
            for rid in [rid for rid, until in blocked.items() if until <= now]:
                del blocked[rid]  # its free slots serve the job again, below
            if not blocked:
                del self._blocked[job_id]
        for rid, te in list(self._task_executors.items()):
            if te.idle_since is not None and now - te.idle_since >= self._taskmanager_timeout:
                self._drop_task_executor(rid)
                out.append(ReleaseWorker(rid, (
                    f"TaskExecutor {rid} was idle for {self._taskmanager_timeout:g} s")))
        return self._serve_waiting(now, out)

    # ---- queries ------------------------------------------------------------------------

    def free_slot_count(self) -> int:
        return sum(s.state == "free" for te in self._task_executors.values()
                   for s in te.slots.values())

    def registered_slot_count(self) -> int:
        return sum(len(te.slots) for te in self._task_executors.values())

    def registered_task_executors(self) -> list[ResourceID]:
        """In registration order."""
        return list(self._task_executors)

    def pending_worker_count(self) -> int:
        return len(self._pending_workers)

    def waiting_since(self, job_id: JobID | None = None) -> float | None:
        """When the oldest pending request (of the job, if given) came; None if none."""
        return min((p.requested_at for p in self._requests.values()
                    if job_id is None or p.request.job_id == job_id), default=None)

    def pending_request_count(self) -> int:
        """Requests not yet allocated: waiting, on a pending worker, or in flight."""
        return len(self._requests)

    def slots_of(self, resource_id: ResourceID) -> list[TaskManagerSlotInfo]:
        """The slots of a registered TaskExecutor by slot number; [] if not registered."""
        te = self._task_executors.get(resource_id)
        if te is None:
            return []
        return [TaskManagerSlotInfo(s.slot_id, s.profile, s.state, s.allocation_id, s.job_id)
                for s in sorted(te.slots.values(), key=lambda s: s.slot_id)]

    # ---- decisions ----------------------------------------------------------------------

    def _serve(self, pending: _PendingRequest, now: float, out: list[Command]) -> None:
        """Free slot (packing: of the TaskExecutor with the most slots in use), else a
        pending worker's slot, else a new worker, else wait."""
        profile, job_id = pending.request.profile, pending.request.job_id
        for in_use in sorted(self._with_free, reverse=True):
            for te in self._with_free[in_use].values():
                if self._blocked and self._blocked_for(job_id, te.resource_id, now):
                    continue
                slot = self._free_slot_on(te, profile)
                if slot is not None:
                    self._start_allocation(pending, te, slot, now, out)
                    return
        if pending.worker is not None or not profile.fits_in(self._worker.slot_profile):
            return
        worker = next((w for w in self._pending_workers
                       if len(w.assigned) < self._worker.num_slots), None)
        if worker is None:
            if len(self._task_executors) + len(self._pending_workers) >= self._max_workers:
                return
            worker = _PendingWorker()
            self._pending_workers.append(worker)
            out.append(RequestWorker(self._worker))
        worker.assigned.append(pending.request.allocation_id)
        pending.worker = worker

    def _serve_waiting(self, now: float, out: list[Command] | None = None) -> list[Command]:
        """Serve every request without an AllocateSlot in flight, in arrival order. Each
        looks only at TaskExecutors with a free slot: none at all while a job waits for
        workers, when every heartbeat's report comes here."""
        out = [] if out is None else out
        for pending in list(self._requests.values()):
            if pending.slot_id is None:
                self._serve(pending, now, out)
        return out

    def _start_allocation(self, pending: _PendingRequest, te: _TaskExecutor, slot: _Slot,
                          now: float, out: list[Command]) -> None:
        request = pending.request
        if pending.worker is not None:
            pending.worker.assigned.remove(request.allocation_id)
            pending.worker = None
        pending.slot_id = slot.slot_id
        self._set(slot, "pending", request.allocation_id, request.job_id)
        slot.pending_since = now
        te.idle_since = None
        out.append(AllocateSlot(te.resource_id, slot.slot_id, request.allocation_id,
                                request.job_id, request.job_master_address, request.profile))

    def _record_allocation(self, slot: _Slot, allocation_id: AllocationID,
                           job_id: JobID | None) -> None:
        """The slot is allocated to allocation_id, which fulfils that request if pending.
        Another slot with an AllocateSlot in flight for it stays pending: the TaskExecutor
        may still accept, and its report will say so."""
        pending = self._forget_request(allocation_id)
        if pending is not None and job_id is None:
            job_id = pending.request.job_id
        self._set(slot, "allocated", allocation_id, job_id)

    def _forget_request(self, allocation_id: AllocationID) -> _PendingRequest | None:
        """The request is no longer pending; its pending-worker slot (if any) is free."""
        pending = self._requests.pop(allocation_id, None)
        if pending is not None and pending.worker is not None:
            pending.worker.assigned.remove(allocation_id)
        return pending

    def _return_request(self, slot: _Slot) -> None:
        """The slot will not be allocated: a request in flight on it waits again."""
        if slot.state == "pending" and slot.allocation_id is not None:
            pending = self._requests.get(slot.allocation_id)
            if pending is not None and pending.slot_id == slot.slot_id:
                pending.slot_id = None

    def _drop_task_executor(self, resource_id: ResourceID) -> None:
        te = self._task_executors.pop(resource_id)
        for slot in te.slots.values():
            self._return_request(slot)
            self._forget_slot(slot)
        te.slots.clear()
        self._index(te)

    @staticmethod
    def _free_slot_on(te: _TaskExecutor, profile: ResourceProfile) -> _Slot | None:
        """Its lowest-numbered free slot that fits `profile`."""
        return min((s for s in te.slots.values()
                    if s.state == "free" and profile.fits_in(s.profile)),
                   key=lambda s: s.slot_id, default=None)

    def _slot_with_allocation(self, allocation_id: AllocationID, state: SlotState | None = None
                              ) -> tuple[_TaskExecutor, _Slot] | None:
        for slot in self._by_allocation.get(allocation_id, ()):
            if state in (None, slot.state):
                return self._task_executors[slot.slot_id.resource_id], slot
        return None

    def _set(self, slot: _Slot, state: SlotState, allocation_id: AllocationID | None = None,
             job_id: JobID | None = None) -> None:
        if allocation_id != slot.allocation_id:
            self._forget_slot(slot)
            if allocation_id is not None:
                self._by_allocation.setdefault(allocation_id, []).append(slot)
        changed = state != slot.state
        slot.state, slot.allocation_id, slot.job_id = state, allocation_id, job_id
        slot.acknowledged_at = None
        te = self._task_executors.get(slot.slot_id.resource_id)
        if changed and te is not None:
            self._index(te)

    def _index(self, te: _TaskExecutor) -> None:
        """File te in _with_free by its slots as they are now."""
        slots = te.slots.values()
        in_use = (sum(s.state in ("pending", "allocated") for s in slots)
                  if any(s.state == "free" for s in slots) else None)
        if in_use == te.in_use:
            return
        if te.in_use is not None:
            bucket = self._with_free[te.in_use]
            del bucket[te.resource_id]
            if not bucket:
                del self._with_free[te.in_use]
        te.in_use = in_use
        if in_use is not None:
            self._with_free.setdefault(in_use, {})[te.resource_id] = te

    def _forget_slot(self, slot: _Slot) -> None:
        """The slot no longer holds its allocation id, or is no longer registered."""
        holders = self._by_allocation.get(slot.allocation_id) \
            if slot.allocation_id is not None else None
        if holders is not None:
            holders.remove(slot)
            if not holders:
                del self._by_allocation[slot.allocation_id]  # type: ignore[arg-type]

    @staticmethod
    def _update_idle(te: _TaskExecutor, now: float) -> None:
        if all(s.state == "free" for s in te.slots.values()):
            if te.idle_since is None:
                te.idle_since = now
        else:
            te.idle_since = None
