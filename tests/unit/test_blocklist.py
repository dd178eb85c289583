"""The job's blocklist as a state machine (yarn_am/jobmaster/blocklist.py)."""

from __future__ import annotations

from flinkyarn.configuration import Configuration
from flinkyarn.ids import ResourceID
from yarn_am.jobmaster.blocklist import Blocklist, BlocklistConfig

TE1, TE2 = ResourceID("te-1"), ResourceID("te-2")


def test_the_configured_number_of_failures_within_the_timeout_blocks_for_the_timeout():
    blocklist = Blocklist(BlocklistConfig(task_failures=3, timeout=60.0))
    assert blocklist.task_failed(TE1, "work (1/2)", "a", now=0) is None
    assert blocklist.task_failed(TE2, "work (2/2)", "b", now=1) is None
    assert blocklist.task_failed(TE1, "work (1/2)", "c", now=30) is None
    blocked = blocklist.task_failed(TE1, "work (2/2)", "RuntimeError: d\n  traceback", now=59)
    assert blocked is not None
    assert (blocked.resource_id, blocked.since, blocked.until) == (TE1, 59, 119)
    assert blocked.cause == "3 task failures there within 60 s; the last: work (2/2): RuntimeError: d"
    assert blocklist.task_failed(TE1, "work (1/2)", "e", now=60) is None  # blocked already
    assert [b.resource_id for b in blocklist.blocked()] == [TE1]
    assert blocklist.expire(now=118) == [] and blocklist.is_blocked(TE1)
    assert blocklist.expire(now=119) == [TE1] and not blocklist.is_blocked(TE1)


def test_failures_older_than_the_timeout_do_not_count():
    blocklist = Blocklist(BlocklistConfig(task_failures=2, timeout=60.0))
    assert blocklist.task_failed(TE1, "work (1/1)", "a", now=0) is None
    assert blocklist.task_failed(TE1, "work (1/1)", "b", now=60) is None
    assert blocklist.task_failed(TE1, "work (1/1)", "c", now=100) is not None


def test_a_disabled_blocklist_blocks_nothing():
    blocklist = Blocklist(BlocklistConfig(enabled=False, task_failures=1))
    assert blocklist.task_failed(TE1, "work (1/1)", "a", now=0) is None
    assert blocklist.blocked() == []


def test_the_options_are_flinks():
    config = BlocklistConfig.from_configuration(Configuration.from_raw({
        "cluster.resource-blocklist.enabled": "false",
        "cluster.resource-blocklist.task-failures": "4",
        "cluster.resource-blocklist.item.timeout": "2 min"}))
    assert config == BlocklistConfig(False, 4, 120.0)
    assert BlocklistConfig.from_configuration(Configuration()) == BlocklistConfig()
