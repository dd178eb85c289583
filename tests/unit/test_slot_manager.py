"""The SlotManager as a state machine: events in, commands out, no network."""

from __future__ import annotations

from flinkyarn.ids import AllocationID, JobID, ResourceID, SlotID
from flinkyarn.resources import UNKNOWN, ResourceProfile
from flinkyarn.slots import SlotReport, SlotStatus
from yarn_am.resourcemanager.slot_manager import (
    MAX_CONSECUTIVE_START_FAILURES, AllocateSlot, FailSlotRequest, ReleaseWorker,
    RequestWorker, SlotManager, SlotRequest, WorkerSpec)

JOB, OTHER_JOB = JobID("job-1"), JobID("job-2")
SLOT = ResourceProfile(cpu_cores=1.0, memory_mb=1024)
SPEC = WorkerSpec(num_slots=2, slot_profile=SLOT)
JM = "jobmaster@am:6123"
TE1, TE2 = ResourceID("te-1"), ResourceID("te-2")


def manager(max_workers=4, taskmanager_timeout=30.0, slot_request_timeout=300.0):
    return SlotManager(SPEC, taskmanager_timeout, slot_request_timeout, max_workers)


def report(rid, allocated=None, slots=2):
    """slots free slots of rid, except those in allocated: {slot number: allocation id}."""
    allocated = allocated or {}
    return SlotReport([SlotStatus(SlotID(rid, n), SLOT, *(
        (AllocationID(allocated[n]), JOB) if n in allocated else (None, None)))
        for n in range(slots)])


def request(aid, profile=UNKNOWN, job=JOB):
    return SlotRequest(job, AllocationID(aid), profile, JM)


def allocate(rid, number, aid, profile=UNKNOWN, job=JOB):
    return AllocateSlot(rid, SlotID(rid, number), AllocationID(aid), job, JM, profile)


def states(sm, rid):
    return [(s.state, s.allocation_id) for s in sm.slots_of(rid)]


def test_request_is_served_by_a_free_slot_and_is_idempotent():
    sm = manager()
    assert sm.register_task_executor(TE1, report(TE1), now=0) == []
    assert sm.free_slot_count() == 2
    assert sm.request_slot(request("a1"), now=1) == [allocate(TE1, 0, "a1")]
    assert sm.request_slot(request("a1"), now=2) == []
    assert states(sm, TE1) == [("pending", "a1"), ("free", None)]
    assert sm.allocation_acknowledged(AllocationID("a1"), now=3) == []
    assert states(sm, TE1) == [("allocated", "a1"), ("free", None)]
    assert sm.request_slot(request("a1"), now=4) == []
    assert sm.pending_request_count() == 0 and sm.free_slot_count() == 1


def test_free_slot_of_the_busiest_task_executor_is_preferred():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.register_task_executor(TE2, report(TE2, {0: "earlier"}), now=0)
    assert sm.request_slot(request("a1"), now=1) == [allocate(TE2, 1, "a1")]
    # TE2 is full now; TE1 is the only choice left.
    assert sm.request_slot(request("a2"), now=1) == [allocate(TE1, 0, "a2")]


def test_request_without_a_free_slot_starts_a_worker_whose_registration_serves_it():
    sm = manager()
    assert sm.request_slot(request("a1"), now=0) == [RequestWorker(SPEC)]
    assert sm.request_slot(request("a2"), now=0) == []  # the worker's second slot
    assert sm.request_slot(request("a3"), now=0) == [RequestWorker(SPEC)]
    assert sm.pending_worker_count() == 2
    assert sm.register_task_executor(TE1, report(TE1), now=5) == [
        allocate(TE1, 0, "a1"), allocate(TE1, 1, "a2")]
    assert sm.pending_worker_count() == 1 and sm.pending_request_count() == 3
    assert sm.register_task_executor(TE2, report(TE2), now=6) == [allocate(TE2, 0, "a3")]
    assert sm.pending_worker_count() == 0


def test_a_worker_started_with_the_application_serves_the_first_requests_without_asking():
    sm = manager()
    sm.add_pending_worker()
    assert sm.request_slot(request("a1"), now=0) == []
    assert sm.request_slot(request("a2"), now=0) == []  # its second slot
    assert sm.request_slot(request("a3"), now=0) == [RequestWorker(SPEC)]
    assert sm.register_task_executor(TE1, report(TE1), now=5) == [
        allocate(TE1, 0, "a1"), allocate(TE1, 1, "a2")]
    # If it never starts, its requests ask for a worker of their own.
    sm = manager()
    sm.add_pending_worker()
    sm.request_slot(request("a1"), now=0)
    assert sm.worker_failed_to_start("container FAILED", now=1) == [RequestWorker(SPEC)]


def test_a_freed_slot_serves_a_request_that_was_waiting_for_a_worker():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1, {0: "x", 1: "y"}), now=0)
    assert sm.request_slot(request("a1"), now=1) == [RequestWorker(SPEC)]
    assert sm.free_slot(SlotID(TE1, 1), AllocationID("y"), now=2) == [allocate(TE1, 1, "a1")]
    # The pending worker's slots are unclaimed; when it registers it allocates nothing.
    assert sm.register_task_executor(TE2, report(TE2), now=3) == []


def test_max_workers_bounds_registered_plus_pending_workers():
    sm = manager(max_workers=1)
    assert sm.request_slot(request("a1"), now=0) == [RequestWorker(SPEC)]
    assert sm.request_slot(request("a2"), now=0) == []
    assert sm.request_slot(request("a3"), now=0) == []  # waits: no worker may be added
    assert sm.pending_worker_count() == 1 and sm.pending_request_count() == 3
    assert sm.register_task_executor(TE1, report(TE1), now=1) == [
        allocate(TE1, 0, "a1"), allocate(TE1, 1, "a2")]
    for aid in ("a1", "a2"):
        sm.allocation_acknowledged(AllocationID(aid), now=2)
    assert sm.free_slot(SlotID(TE1, 0), AllocationID("a1"), now=3) == [allocate(TE1, 0, "a3")]


def test_worker_capacity_freed_by_an_unregistration_serves_a_waiting_request():
    sm = manager(max_workers=1)
    sm.register_task_executor(TE1, report(TE1, {0: "x", 1: "y"}), now=0)
    assert sm.request_slot(request("a1"), now=1) == []
    assert sm.unregister_task_executor(TE1, "container completed", now=2) == [RequestWorker(SPEC)]


def test_profile_no_worker_can_offer_fails_at_once_naming_the_profiles():
    sm = manager()
    [command] = sm.request_slot(request("big", ResourceProfile(4.0, 1024)), now=0)
    assert isinstance(command, FailSlotRequest)
    assert (command.job_id, command.allocation_id) == (JOB, "big")
    assert "4 cpu, 1024 MiB" in command.cause and "1 cpu, 1024 MiB" in command.cause
    assert sm.pending_request_count() == 0 and sm.pending_worker_count() == 0


def test_unregistered_task_executor_gives_back_its_in_flight_requests_silently_dropping_allocated_slots():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.request_slot(request("held"), now=1)
    sm.allocation_acknowledged(AllocationID("held"), now=1)
    assert sm.request_slot(request("in-flight"), now=2) == [allocate(TE1, 1, "in-flight")]
    sm.register_task_executor(TE2, report(TE2, {0: "x", 1: "y"}), now=3)
    # "held" is silently gone; "in-flight" waits again and asks for a worker.
    assert sm.unregister_task_executor(TE1, "heartbeat timeout", now=4) == [RequestWorker(SPEC)]
    assert sm.registered_task_executors() == [TE2] and sm.pending_request_count() == 1
    assert sm.free_slot(SlotID(TE2, 0), AllocationID("x"), now=5) == [
        allocate(TE2, 0, "in-flight")]
    assert sm.unregister_task_executor(ResourceID("stranger"), "?", now=6) == []


def test_reregistration_drops_the_old_slots_first():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.request_slot(request("a1"), now=1)
    # The TaskExecutor restarted and never saw the AllocateSlot: a1 is allocated again.
    assert sm.register_task_executor(TE1, report(TE1), now=2) == [allocate(TE1, 0, "a1")]
    assert sm.pending_worker_count() == 0


def test_slot_report_frees_a_slot_whose_free_slot_message_was_lost():
    sm = manager(max_workers=1)
    sm.register_task_executor(TE1, report(TE1), now=0)
    for aid in ("a1", "a2"):
        sm.request_slot(request(aid), now=1)
        sm.allocation_acknowledged(AllocationID(aid), now=1)
    assert sm.request_slot(request("a3"), now=2) == []
    assert sm.report_slot_status(TE1, report(TE1, {1: "a2"}), now=10) == [allocate(TE1, 0, "a3")]


def test_a_report_asked_for_before_an_acknowledgement_does_not_free_that_slot():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.request_slot(request("a1"), now=1)
    sm.allocation_acknowledged(AllocationID("a1"), now=3)
    # Asked at 2, answered after the ack: made before the TaskExecutor took the slot.
    assert sm.report_slot_status(TE1, report(TE1), now=4, requested_at=2) == []
    assert states(sm, TE1) == [("allocated", "a1"), ("free", None)]
    # Asked after the ack: the truth, the slot is free (its free_slot was lost).
    sm.report_slot_status(TE1, report(TE1), now=5, requested_at=4)
    assert states(sm, TE1) == [("free", None), ("free", None)]


def test_slot_report_keeps_a_young_in_flight_allocation_and_records_a_reordered_one():
    sm = manager(slot_request_timeout=300.0)
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.request_slot(request("a1"), now=1)
    # A report sent before the TaskExecutor saw the AllocateSlot.
    assert sm.report_slot_status(TE1, report(TE1), now=2) == []
    assert states(sm, TE1) == [("pending", "a1"), ("free", None)]
    # No acknowledgement came (lost), but the next report shows the allocation.
    assert sm.report_slot_status(TE1, report(TE1, {0: "a1"}), now=12) == []
    assert states(sm, TE1) == [("allocated", "a1"), ("free", None)]
    assert sm.pending_request_count() == 0


def test_slot_report_naming_an_allocation_served_elsewhere_fulfils_that_request():
    sm = manager(max_workers=2)
    sm.register_task_executor(TE1, report(TE1, {0: "x", 1: "y"}), now=0)
    assert sm.request_slot(request("a1"), now=1) == [RequestWorker(SPEC)]
    # The TaskExecutor says slot 1 went to a1 (e.g. from before an AM restart).
    assert sm.report_slot_status(TE1, report(TE1, {0: "x", 1: "a1"}), now=2) == []
    assert sm.pending_request_count() == 0
    assert sm.register_task_executor(TE2, report(TE2), now=3) == []


def test_slot_report_frees_an_in_flight_allocation_older_than_the_request_timeout():
    sm = manager(slot_request_timeout=60.0)
    sm.register_task_executor(TE1, report(TE1, {1: "y"}), now=0)
    sm.request_slot(request("a1"), now=1)
    sm.cancel_slot_request(AllocationID("a1"))
    assert sm.report_slot_status(TE1, report(TE1, {1: "y"}), now=60) == []
    assert states(sm, TE1)[0] == ("pending", "a1")
    sm.report_slot_status(TE1, report(TE1, {1: "y"}), now=61)
    assert states(sm, TE1)[0] == ("free", None)


def test_stale_free_slot_with_an_old_allocation_id_is_ignored():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1, {1: "y"}), now=0)
    sm.request_slot(request("a1"), now=1)
    sm.allocation_acknowledged(AllocationID("a1"), now=1)
    sm.free_slot(SlotID(TE1, 0), AllocationID("a1"), now=2)
    assert sm.request_slot(request("a2"), now=3) == [allocate(TE1, 0, "a2")]
    sm.allocation_acknowledged(AllocationID("a2"), now=3)
    assert sm.free_slot(SlotID(TE1, 0), AllocationID("a1"), now=4) == []  # duplicate, late
    assert states(sm, TE1)[0] == ("allocated", "a2")


def test_rejected_allocation_makes_the_slot_unusable_until_the_next_report():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.request_slot(request("a1"), now=1)
    assert sm.allocation_rejected(AllocationID("a1"), "slot taken", now=2) == [
        allocate(TE1, 1, "a1")]
    assert states(sm, TE1)[0] == ("unknown", None)
    assert sm.request_slot(request("a2"), now=3) == [RequestWorker(SPEC)]
    assert sm.report_slot_status(TE1, report(TE1, {1: "a1"}), now=4) == [
        allocate(TE1, 0, "a2")]


def test_idle_task_executor_is_released_after_the_timeout_but_never_while_a_slot_is_busy():
    sm = manager(taskmanager_timeout=30.0)
    sm.register_task_executor(TE1, report(TE1), now=0)
    assert sm.check_timeouts(now=29.9) == []
    sm.request_slot(request("a1"), now=29.9)
    assert sm.check_timeouts(now=100) == []  # allocation in flight
    sm.allocation_acknowledged(AllocationID("a1"), now=100)
    assert sm.check_timeouts(now=200) == []  # allocated
    sm.free_slot(SlotID(TE1, 0), AllocationID("a1"), now=200)
    assert sm.check_timeouts(now=229.9) == []
    [release] = sm.check_timeouts(now=230)
    assert isinstance(release, ReleaseWorker) and release.resource_id == TE1
    assert sm.registered_task_executors() == [] and sm.free_slot_count() == 0
    assert sm.request_slot(request("a2"), now=231) == [RequestWorker(SPEC)]


def test_pending_request_fails_after_the_slot_request_timeout():
    sm = manager(max_workers=0, slot_request_timeout=300.0)
    assert sm.request_slot(request("a1"), now=0) == []
    assert sm.check_timeouts(now=299) == []
    [fail] = sm.check_timeouts(now=300)
    assert isinstance(fail, FailSlotRequest) and fail.allocation_id == "a1"
    assert sm.pending_request_count() == 0 and sm.check_timeouts(now=400) == []


def test_timed_out_request_gives_its_pending_worker_slot_to_a_later_one():
    sm = manager(max_workers=1, slot_request_timeout=100.0)
    sm.request_slot(request("a1"), now=0)
    sm.request_slot(request("a2"), now=0)
    sm.request_slot(request("a3"), now=50)  # waits: both slots of the worker are taken
    assert [type(c) for c in sm.check_timeouts(now=100)] == [FailSlotRequest, FailSlotRequest]
    assert sm.register_task_executor(TE1, report(TE1), now=101) == [allocate(TE1, 0, "a3")]


def test_workers_failing_to_start_are_retried_then_their_requests_fail():
    sm = manager()
    assert sm.request_slot(request("a1"), now=0) == [RequestWorker(SPEC)]
    for _ in range(MAX_CONSECUTIVE_START_FAILURES - 1):
        assert sm.worker_failed_to_start("container exited", now=1) == [RequestWorker(SPEC)]
    [fail] = sm.worker_failed_to_start("container exited", now=2)
    assert isinstance(fail, FailSlotRequest) and "container exited" in fail.cause
    assert sm.pending_worker_count() == 0 and sm.pending_request_count() == 0


def test_a_registration_resets_the_start_failure_count():
    sm = manager()
    sm.request_slot(request("a1"), now=0)
    sm.worker_failed_to_start("no", now=1)
    sm.worker_failed_to_start("no", now=1)
    sm.register_task_executor(TE1, report(TE1, {0: "x", 1: "y"}), now=2)
    assert sm.worker_failed_to_start("no", now=3) == [RequestWorker(SPEC)]


def test_cancelled_and_unregistered_job_requests_are_dropped_allocated_slots_stay():
    sm = manager(max_workers=1)
    sm.register_task_executor(TE1, report(TE1, {0: "old", 1: "older"}), now=0)
    for aid, job in (("a1", OTHER_JOB), ("a2", JOB), ("a3", JOB)):
        assert sm.request_slot(request(aid, job=job), now=1) == []
    assert sm.cancel_slot_request(AllocationID("a2")) == []
    assert sm.pending_request_count() == 2
    assert sm.unregister_job(JOB) == []
    assert sm.pending_request_count() == 1
    assert [c.allocation_id for c in sm.check_timeouts(now=1000)] == ["a1"]
    assert states(sm, TE1) == [("allocated", "old"), ("allocated", "older")]


def test_the_indexes_hold_exactly_the_registered_slots_of_each_allocation_and_state():
    """Random inputs; after each, the indexes the SlotManager reads instead of scanning
    every slot equal a scan of every registered slot: the slots of each allocation (so
    nothing freed or gone stays in it) and the TaskExecutors with a free slot by how many
    slots they have in use (so packing picks the busiest and no full one is offered)."""
    import random

    rng = random.Random(7)
    sm = manager(max_workers=3, slot_request_timeout=5.0)
    rids = [ResourceID(f"te-{n}") for n in range(3)]
    aids = [f"a{n}" for n in range(8)]
    now = 0.0
    for _ in range(2000):
        now += rng.random()
        rid, aid, choice = rng.choice(rids), rng.choice(aids), rng.randrange(9)
        if choice == 0:
            sm.register_task_executor(rid, report(rid, {n: rng.choice(aids) for n in range(2)
                                                        if rng.random() < 0.3}), now)
        elif choice == 1:
            sm.unregister_task_executor(rid, "lost", now)
        elif choice in (2, 3):
            sm.request_slot(request(aid), now)
        elif choice == 4:
            sm.allocation_acknowledged(AllocationID(aid), now)
        elif choice == 5:
            sm.allocation_rejected(AllocationID(aid), "no", now)
        elif choice == 6:
            sm.free_slot(SlotID(rid, rng.randrange(2)), AllocationID(aid), now)
        elif choice == 7:
            sm.report_slot_status(rid, report(rid, {n: rng.choice(aids) for n in range(2)
                                                    if rng.random() < 0.3},
                                              slots=rng.choice((1, 2))), now)
        else:
            sm.check_timeouts(now)
        scanned: dict[AllocationID, list[SlotID]] = {}
        for te in sm._task_executors.values():
            for slot in te.slots.values():
                if slot.allocation_id is not None:
                    scanned.setdefault(slot.allocation_id, []).append(slot.slot_id)
        indexed = {aid: sorted(s.slot_id for s in slots)
                   for aid, slots in sm._by_allocation.items()}
        assert indexed == {aid: sorted(ids) for aid, ids in scanned.items()}
        with_free = {te.resource_id: sum(s.state in ("pending", "allocated")
                                         for s in te.slots.values())
                     for te in sm._task_executors.values()
                     if any(s.state == "free" for s in te.slots.values())}
        assert {rid: in_use for in_use, bucket in sm._with_free.items()
                for rid in bucket} == with_free
        assert all(sm._with_free.values())  # no empty bucket left behind


def test_a_report_while_requests_wait_for_workers_looks_at_no_busy_task_executor(monkeypatch):
    """200 TaskExecutors with every slot allocated, 100 requests waiting for workers: each
    heartbeat's report serves the waiting requests again, and found them no slot after a
    look at every TaskExecutor for each (O(requests x TaskExecutors) per report, for
    every TaskExecutor's report: the AppMaster's CPU went to it)."""
    sm = manager(max_workers=250)
    rids = [ResourceID(f"te-{n}") for n in range(200)]
    for n, rid in enumerate(rids):
        sm.register_task_executor(rid, report(rid, {0: f"x{n}", 1: f"y{n}"}), now=0)
    for n in range(100):
        sm.request_slot(request(f"w{n}"), now=1)
    assert sm.pending_request_count() == 100 and sm.pending_worker_count() == 50

    looks = []
    original = SlotManager._free_slot_on
    monkeypatch.setattr(SlotManager, "_free_slot_on",
                        staticmethod(lambda te, profile: looks.append(te) or original(te, profile)))
    assert sm.report_slot_status(rids[7], report(rids[7], {0: "x7", 1: "y7"}), now=2) == []
    assert looks == []

    # A slot freed in that report serves the oldest waiting request, as before.
    assert sm.report_slot_status(rids[7], report(rids[7], {0: "x7"}), now=3) == [
        allocate(rids[7], 1, "w0")]


def test_a_job_of_1000_requests_on_500_free_task_executors_looks_at_one_each(monkeypatch):
    """Each request took the busiest TaskExecutor with a free slot after a look at every
    one with a free slot: O(n^2) for a job start on n TaskExecutors. The index hands out
    the busiest at once, and packing still fills one TaskExecutor before the next."""
    sm = manager(max_workers=500)
    rids = [ResourceID(f"te-{n}") for n in range(500)]
    for rid in rids:
        sm.register_task_executor(rid, report(rid), now=0)
    looks = []
    original = SlotManager._free_slot_on
    monkeypatch.setattr(SlotManager, "_free_slot_on",
                        staticmethod(lambda te, profile: looks.append(te) or original(te, profile)))
    commands = [c for n in range(1000) for c in sm.request_slot(request(f"r{n}"), now=1)]
    assert len(looks) == 1000
    assert [(c.resource_id, c.slot_id.slot_number) for c in commands] == [
        (rid, number) for rid in rids for number in range(2)]


def test_a_task_executor_a_job_blocked_serves_no_request_of_that_job_until_the_block_ends():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    assert sm.block_task_executors(JOB, [TE1], until=100) == []
    # The blocking job's request asks for a new worker; another job's takes TE1's slot.
    assert sm.request_slot(request("a1"), now=1) == [RequestWorker(SPEC)]
    assert sm.request_slot(request("b1", job=OTHER_JOB), now=2) == [
        allocate(TE1, 0, "b1", job=OTHER_JOB)]
    assert sm.check_timeouts(now=99) == []
    # The block ends: the waiting request takes TE1's free slot.
    assert sm.check_timeouts(now=100) == [allocate(TE1, 1, "a1")]


def test_a_jobs_blocks_end_with_its_registration():
    sm = manager()
    sm.register_task_executor(TE1, report(TE1), now=0)
    sm.block_task_executors(JOB, [TE1], until=100)
    sm.unregister_job(JOB)
    assert sm.request_slot(request("a2"), now=1) == [allocate(TE1, 0, "a2")]
