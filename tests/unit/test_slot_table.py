import pytest

from flinkyarn.resources import ResourceProfile
from taskexecutor.slot_table import SlotState, SlotTaken, TaskSlotTable


@pytest.fixture
def table():
    return TaskSlotTable("te-1", 2, ResourceProfile(1, 512))


def test_allocation_is_idempotent_and_fenced(table):
    assert table.allocate(0, "job-a", "alloc-1") is True
    assert table.allocate(0, "job-a", "alloc-1") is False
    with pytest.raises(SlotTaken, match="held by allocation alloc-1"):
        table.allocate(0, "job-b", "alloc-2")
    with pytest.raises(SlotTaken, match="already holds a slot"):
        table.allocate(1, "job-a", "alloc-1")


def test_deployment_may_overtake_the_offer_answer_but_not_cross_jobs(table):
    table.allocate(0, "job-a", "alloc-1")
    table.add_task("job-a", "alloc-1", "attempt-1")
    assert table.by_allocation("alloc-1").state is SlotState.ACTIVE
    with pytest.raises(SlotTaken):
        table.add_task("job-b", "alloc-1", "attempt-2")
    with pytest.raises(SlotTaken):
        table.add_task("job-a", "alloc-unknown", "attempt-3")


def test_free_returns_what_the_slot_held_and_report_shows_it_free(table):
    table.allocate(1, "job-a", "alloc-1")
    table.add_task("job-a", "alloc-1", "attempt-1")
    freed = table.free("alloc-1")
    assert (freed.index, freed.job_id, freed.tasks) == (1, "job-a", {"attempt-1"})
    assert table.free("alloc-1") is None
    assert all(s.allocation_id is None for s in table.report().slots)
    assert table.is_idle()
