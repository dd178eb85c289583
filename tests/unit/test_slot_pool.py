"""The SlotPool as a state machine: events in, commands out, no network."""

from __future__ import annotations

from flinkyarn.ids import AllocationID, JobID, ResourceID
from flinkyarn.resources import UNKNOWN, ResourceProfile
from flinkyarn.slots import SlotOffer
from yarn_am.jobmaster.slot_pool import (
    CancelSlotRequest, FreeSlot, PhysicalSlot, RequestSlotFromResourceManager,
    SlotAssigned, SlotLost, SlotPool, SlotRequestFailed, SlotRequestId)

SLOT = ResourceProfile(cpu_cores=1.0, memory_mb=1024)
TE1, TE2 = ResourceID("te-1"), ResourceID("te-2")
R1, R2, R3 = SlotRequestId("r1"), SlotRequestId("r2"), SlotRequestId("r3")


def pool(idle_timeout=10.0, request_timeout=300.0, connected=True):
    sp = SlotPool(JobID("job-1"), idle_timeout, request_timeout)
    if connected:
        assert sp.connect_resource_manager(now=0) == []
    sp.register_task_executor(TE1)
    return sp


def asked(commands):
    """The allocation ids of the ResourceManager requests among commands."""
    return [c.allocation_id for c in commands if isinstance(c, RequestSlotFromResourceManager)]


def offer(aid, index=0, profile=SLOT):
    return SlotOffer(AllocationID(aid), index, profile)


def served(sp, request_id, resource_id=TE1, index=0, now=1.0):
    """Request a slot and have resource_id offer it; returns the slot."""
    [aid] = asked(sp.request_slot(request_id, UNKNOWN, now))
    accepted, commands = sp.offer_slots(resource_id, [offer(aid, index)], now)
    assert len(accepted) == 1
    [assigned] = commands
    return assigned.slot


def test_request_goes_to_the_resource_manager_and_the_offer_serves_it():
    sp = pool()
    commands = sp.request_slot(R1, SLOT, now=1)
    [aid] = asked(commands)
    assert commands == [RequestSlotFromResourceManager(aid, SLOT)]
    assert sp.request_slot(R1, SLOT, now=2) == []  # idempotent
    accepted, commands = sp.offer_slots(TE1, [offer(aid, 3)], now=3)
    slot = PhysicalSlot(aid, TE1, 3, SLOT)
    assert accepted == [offer(aid, 3)] and commands == [SlotAssigned(R1, slot)]
    assert sp.assigned_slots() == {R1: slot} and sp.pending_requests() == []


def test_released_slot_is_cached_and_reused_without_asking_the_resource_manager():
    sp = pool()
    slot = served(sp, R1)
    assert sp.release_slot(R1, now=2) == []
    assert sp.idle_slots() == [slot] and sp.assigned_slots() == {}
    assert sp.request_slot(R2, SLOT, now=3) == [SlotAssigned(R2, slot)]
    assert sp.idle_slots() == [] and sp.pending_requests() == []


def test_cached_slot_too_small_is_not_reused():
    sp = pool()
    served(sp, R1)
    sp.release_slot(R1, now=2)
    assert len(asked(sp.request_slot(R2, ResourceProfile(2.0, 1024), now=3))) == 1


def test_released_slot_serves_a_pending_request_and_cancels_its_resource_manager_request():
    sp = pool()
    slot = served(sp, R1)
    [aid2] = asked(sp.request_slot(R2, SLOT, now=2))
    assert sp.release_slot(R1, now=3) == [CancelSlotRequest(aid2), SlotAssigned(R2, slot)]


def test_idle_slot_is_freed_after_the_idle_timeout():
    sp = pool(idle_timeout=10.0)
    slot = served(sp, R1)
    sp.release_slot(R1, now=5)
    assert sp.check_timeouts(now=14.9) == []
    [free] = sp.check_timeouts(now=15)
    assert isinstance(free, FreeSlot)
    assert (free.resource_id, free.allocation_id) == (TE1, slot.allocation_id)
    assert sp.idle_slots() == [] and sp.check_timeouts(now=100) == []


def test_assigned_slot_is_never_freed_by_the_idle_timeout():
    sp = pool(idle_timeout=10.0)
    served(sp, R1, now=0)
    assert sp.check_timeouts(now=1000) == []
    assert list(sp.assigned_slots()) == [R1]


def test_released_task_manager_loses_its_assigned_slots_and_drops_idle_ones():
    sp = pool()
    sp.register_task_executor(TE2)
    lost = served(sp, R1, TE1, 0)
    idle = served(sp, R2, TE1, 1)
    kept = served(sp, R3, TE2, 0)
    sp.release_slot(R2, now=2)
    assert sp.release_task_manager(TE1, "heartbeat timeout", now=3) == [
        SlotLost(R1, lost.allocation_id, "heartbeat timeout")]
    assert sp.assigned_slots() == {R3: kept} and sp.idle_slots() == []
    # Its late offers are refused: it is no longer registered.
    assert sp.offer_slots(TE1, [offer(idle.allocation_id, 1)], now=4) == ([], [])


def test_offers_from_an_unregistered_task_executor_are_rejected():
    sp = pool()
    [aid] = asked(sp.request_slot(R1, SLOT, now=1))
    assert sp.offer_slots(TE2, [offer(aid)], now=2) == ([], [])
    assert [r.allocation_id for r in sp.pending_requests()] == [aid]


def test_duplicate_offer_is_accepted_again_without_double_counting():
    sp = pool()
    slot = served(sp, R1)
    accepted, commands = sp.offer_slots(TE1, [offer(slot.allocation_id)], now=2)
    assert accepted == [offer(slot.allocation_id)] and commands == []
    assert sp.assigned_slots() == {R1: slot} and sp.idle_slots() == []
    sp.register_task_executor(TE2)
    assert sp.offer_slots(TE2, [offer(slot.allocation_id)], now=3) == ([], [])


def test_offer_of_an_unknown_allocation_serves_a_fitting_request_or_idles():
    sp = pool()
    [aid] = asked(sp.request_slot(R1, SLOT, now=1))
    small = offer("foreign-small", 0, ResourceProfile(0.5, 512))
    accepted, commands = sp.offer_slots(TE1, [small, offer("foreign", 1)], now=2)
    assert accepted == [small, offer("foreign", 1)]
    assert commands == [CancelSlotRequest(aid),
                        SlotAssigned(R1, PhysicalSlot(AllocationID("foreign"), TE1, 1, SLOT))]
    assert [s.allocation_id for s in sp.idle_slots()] == ["foreign-small"]


def test_requests_wait_for_a_resource_manager_and_are_resent_with_new_ids_on_reconnect():
    sp = pool(connected=False)
    assert sp.request_slot(R1, SLOT, now=1) == []
    assert [r.sent_to_resource_manager for r in sp.pending_requests()] == [False]
    [first] = asked(sp.connect_resource_manager(now=2))
    assert sp.disconnect_resource_manager(now=3) == []
    assert sp.request_slot(R2, SLOT, now=4) == []
    resent = asked(sp.connect_resource_manager(now=5))
    assert len(resent) == 2 and first not in resent
    assert [r.allocation_id for r in sp.pending_requests()] == resent
    # The old leader's late answers about the old id change nothing...
    assert sp.slot_request_failed(first, "old leader", now=6) == []
    assert len(sp.pending_requests()) == 2
    # ...but a slot it did allocate still serves R1, and R1's new request is withdrawn.
    _, commands = sp.offer_slots(TE1, [offer(first)], now=7)
    assert commands == [CancelSlotRequest(resent[0]),
                        SlotAssigned(R1, PhysicalSlot(first, TE1, 0, SLOT))]


def test_failed_request_is_reported_to_the_scheduler_and_dropped():
    sp = pool()
    [aid] = asked(sp.request_slot(R1, SLOT, now=1))
    assert sp.slot_request_failed(aid, "no resources", now=2) == [
        SlotRequestFailed(R1, "no resources")]
    assert sp.pending_requests() == []


def test_pending_request_times_out_and_is_cancelled_at_the_resource_manager():
    sp = pool(request_timeout=300.0)
    [aid] = asked(sp.request_slot(R1, SLOT, now=0))
    assert sp.check_timeouts(now=299) == []
    failed, cancel = sp.check_timeouts(now=300)
    assert isinstance(failed, SlotRequestFailed) and failed.request_id == R1
    assert cancel == CancelSlotRequest(aid)
    assert sp.pending_requests() == []


def test_cancelled_request_is_withdrawn_from_the_resource_manager():
    sp = pool()
    [aid] = asked(sp.request_slot(R1, SLOT, now=0))
    assert sp.cancel_request(R1) == [CancelSlotRequest(aid)]
    assert sp.cancel_request(R1) == [] and sp.pending_requests() == []


def test_close_frees_every_slot_and_cancels_every_request():
    sp = pool()
    assigned = served(sp, R1, index=0)
    idle = served(sp, R2, index=1)
    sp.release_slot(R2, now=2)
    [aid] = asked(sp.request_slot(R3, ResourceProfile(2.0, 2048), now=3))  # idle one too small
    commands = sp.close(now=4)
    assert {(c.resource_id, c.allocation_id) for c in commands if isinstance(c, FreeSlot)} == {
        (TE1, assigned.allocation_id), (TE1, idle.allocation_id)}
    assert [c for c in commands if isinstance(c, CancelSlotRequest)] == [CancelSlotRequest(aid)]
    assert len(commands) == 3
    assert sp.idle_slots() == [] and sp.assigned_slots() == {} and sp.pending_requests() == []
    assert sp.offer_slots(TE1, [offer(aid)], now=5) == ([], [])


def test_the_indexes_agree_with_a_scan_over_random_inputs():
    """The SlotPool answers by its indexes (request of an allocation id, slot of a
    request, idle slots); after every one of 3000 random inputs they must say what a
    scan of its requests and held slots says."""
    import random

    rng = random.Random(11)
    sp = pool(idle_timeout=5.0, request_timeout=40.0)
    sp.register_task_executor(TE2)
    request_ids = [SlotRequestId(f"r{i}") for i in range(40)]
    known_aids: list[AllocationID] = []
    now, seen = 0.0, set()
    for _ in range(3000):
        now += rng.random()
        action = rng.randrange(9)
        rid = rng.choice(request_ids)
        if action <= 1:
            known_aids += asked(sp.request_slot(rid, SLOT, now))
        elif action == 2 and known_aids:
            aid = rng.choice(known_aids) if rng.random() < 0.8 else AllocationID(f"x{now}")
            sp.offer_slots(rng.choice([TE1, TE2]),
                           [SlotOffer(aid, rng.randrange(4), SLOT)], now)
        elif action == 3:
            sp.release_slot(rid, now)
        elif action == 4 and known_aids:
            sp.slot_request_failed(rng.choice(known_aids), "refused", now)
        elif action == 5:
            sp.cancel_request(rid)
        elif action == 6:
            sp.check_timeouts(now)
        elif action == 7 and rng.random() < 0.2:
            te = rng.choice([TE1, TE2])
            sp.release_task_manager(te, "lost", now)
            sp.register_task_executor(te)
        elif action == 8 and rng.random() < 0.1:
            sp.disconnect_resource_manager(now)
            known_aids += asked(sp.connect_resource_manager(now))
        held = sp._slots
        assert sp._request_of == {r.allocation_id: r.request_id
                                  for r in sp._requests.values()}
        assert sp._assigned == {h.request_id: aid for aid, h in held.items()
                                if h.request_id is not None}
        assert set(sp._idle) == {aid for aid, h in held.items() if h.request_id is None}
        assert not set(sp._assigned) & set(sp._requests)
        seen |= {name for name in ("_assigned", "_requests", "_idle") if getattr(sp, name)}
    assert seen == {"_assigned", "_requests", "_idle"}  # the walk reached every kind


def test_a_blocked_task_executor_keeps_its_busy_slots_until_released_and_its_offers_are_refused():
    sp = pool()
    sp.register_task_executor(TE2)
    busy, idle = served(sp, R1), served(sp, R2, index=1)
    sp.release_slot(R2, now=2)
    assert sp.block_task_executor(TE1, "2 task failures") == [
        FreeSlot(TE1, idle.allocation_id, "TaskExecutor blocked: 2 task failures")]
    assert sp.assigned_slots() == {R1: busy}  # its running task keeps it
    assert sp.release_slot(R1, now=3) == [
        FreeSlot(TE1, busy.allocation_id, "its TaskExecutor is blocked")]
    assert sp.idle_slots() == [] and sp.assigned_slots() == {}

    # An offer the ResourceManager made before it knew: refused, the request asked again.
    [first] = asked(sp.request_slot(R3, UNKNOWN, now=4))
    accepted, commands = sp.offer_slots(TE1, [offer(first)], now=5)
    [again] = asked(commands)
    assert accepted == [] and again != first
    assert [r.allocation_id for r in sp.pending_requests()] == [again]
    accepted, commands = sp.offer_slots(TE2, [offer(again)], now=6)
    assert accepted == [offer(again)] and commands == [SlotAssigned(R3, PhysicalSlot(
        AllocationID(again), TE2, 0, SLOT))]

    assert sp.unblock_task_executor(TE1) == []
    [aid] = asked(sp.request_slot(SlotRequestId("r4"), UNKNOWN, now=7))
    assert sp.offer_slots(TE1, [offer(aid)], now=8)[0] == [offer(aid)]
