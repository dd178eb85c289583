"""Heartbeat bookkeeping with a controllable clock: no sleeping."""

from __future__ import annotations

import asyncio

from flinkyarn.clock import ManualClock
from flinkyarn.heartbeat import HeartbeatManager


def manager(clock, timeouts, payloads=None, answer=None):
    return HeartbeatManager(
        "rm", timeout=50.0, clock=clock, on_timeout=timeouts.append,
        on_payload=lambda rid, p: payloads.append((rid, p)) if payloads is not None else None,
        payload_for=lambda rid: answer)


def test_target_silent_longer_than_timeout_is_declared_dead_once():
    clock, dead = ManualClock(), []
    hb = manager(clock, dead)
    hb.monitor_target("te-1")
    clock.advance(50.0)
    assert hb.check_timeouts() == [] and dead == []
    clock.advance(0.1)
    assert hb.check_timeouts() == ["te-1"] and dead == ["te-1"]
    assert not hb.is_monitored("te-1")
    clock.advance(100)
    assert hb.check_timeouts() == [] and dead == ["te-1"]


def test_each_heartbeat_resets_the_timeout_and_reports_its_payload():
    clock, dead, payloads = ManualClock(), [], []
    hb = manager(clock, dead, payloads)
    hb.monitor_target("te-1")
    for report in ("slots-a", "slots-b", "slots-c"):
        clock.advance(40.0)
        hb.receive_heartbeat("te-1", report)
        assert hb.check_timeouts() == []
    assert payloads == [("te-1", "slots-a"), ("te-1", "slots-b"), ("te-1", "slots-c")]


def test_heartbeats_from_unmonitored_targets_are_ignored():
    clock, dead, payloads = ManualClock(), [], []
    hb = manager(clock, dead, payloads)
    hb.receive_heartbeat("stranger", "x")
    hb.monitor_target("te-1")
    hb.unmonitor_target("te-1")
    hb.receive_heartbeat("te-1", "y")
    assert payloads == [] and hb.targets() == []


def test_receiving_side_answers_with_its_payload_and_records_the_sender():
    clock, dead, payloads = ManualClock(), [], []
    hb = manager(clock, dead, payloads, answer="my-slot-report")
    hb.monitor_target("rm")
    clock.advance(45)
    assert hb.answer_request("rm", None) == "my-slot-report"
    clock.advance(45)
    assert hb.check_timeouts() == []


def test_sender_records_answers_and_not_failures():
    clock, dead, payloads = ManualClock(), [], []
    hb = manager(clock, dead, payloads, answer="ping")

    async def healthy(payload):
        assert payload == "ping"
        return "report-1"

    async def frozen(payload):
        await asyncio.sleep(10)

    async def broken(payload):
        raise ConnectionError("refused")

    for rid, request in (("ok", healthy), ("frozen", frozen), ("broken", broken)):
        hb.monitor_target(rid, request)
    clock.advance(51)
    asyncio.run(hb.send_heartbeats(call_timeout=0.05))
    assert payloads == [("ok", "report-1")]
    assert sorted(hb.check_timeouts()) == ["broken", "frozen"]
    assert hb.targets() == ["ok"]
