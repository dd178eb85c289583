"""Heartbeat bookkeeping with a controllable clock: no sleeping. A heartbeat call times
out on the manager's clock: `send_round` advances it past the call timeout."""

from __future__ import annotations

import asyncio

from flinkyarn.clock import ManualClock
from flinkyarn.heartbeat import HeartbeatManager
from flinkyarn.rpc.errors import Unreachable
from tests.harness.loop import settle

CALL_TIMEOUT = 0.05


def manager(clock, timeouts, payloads=None, answer=None):
    return HeartbeatManager(
        "rm", timeout=50.0, clock=clock, on_timeout=timeouts.append,
        on_payload=lambda rid, p: payloads.append((rid, p)) if payloads is not None else None,
        payload_for=lambda rid: answer)


def send_round(hb, clock):
    """One round of heartbeat requests; those still unanswered once CALL_TIMEOUT has
    passed on `clock` time out."""
    async def round_():
        sending = asyncio.create_task(hb.send_heartbeats(call_timeout=CALL_TIMEOUT))
        await settle()  # every request made and waiting
        clock.advance(CALL_TIMEOUT)
        await sending
    asyncio.run(round_())


async def never_answers(payload):
    await asyncio.Event().wait()


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

    async def broken(payload):
        raise ConnectionError("refused")

    for rid, request in (("ok", healthy), ("frozen", never_answers), ("broken", broken)):
        hb.monitor_target(rid, request)
    clock.advance(51)
    send_round(hb, clock)
    assert payloads == [("ok", "report-1")]
    assert sorted(hb.check_timeouts()) == ["broken", "frozen"]
    assert hb.targets() == ["ok"]


def test_a_target_no_call_reaches_is_dead_after_the_threshold_and_a_frozen_one_is_not():
    clock, timeouts, unreachable = ManualClock(), [], []
    hb = HeartbeatManager("jm", timeout=50.0, clock=clock, on_timeout=timeouts.append,
                          rpc_failure_threshold=2,
                          on_unreachable=lambda rid, detail: unreachable.append((rid, detail)))
    flaky_answers = iter([Unreachable("te: connection refused"), "report"])

    async def gone(payload):
        raise Unreachable("te: connection refused")

    async def flaky(payload):
        answer = next(flaky_answers, Unreachable("te: connection refused"))
        if isinstance(answer, Exception):
            raise answer
        return answer

    for rid, request in (("gone", gone), ("frozen", never_answers), ("flaky", flaky)):
        hb.monitor_target(rid, request)
    send_round(hb, clock)
    assert unreachable == [] and hb.is_monitored("gone")  # one failed call is not enough
    send_round(hb, clock)
    # "gone" failed twice in a row; "flaky" answered in between, so it starts counting anew.
    assert unreachable == [("gone", "2 heartbeat calls in a row could not reach it: "
                                    "te: connection refused")]
    assert sorted(hb.targets()) == ["flaky", "frozen"]
    send_round(hb, clock)
    assert [rid for rid, _ in unreachable] == ["gone"]
    # Calls that reach a frozen target and time out are the timeout's business ("flaky"
    # has been silent as long); "gone" is not reported twice.
    clock.advance(51)
    assert sorted(hb.check_timeouts()) == ["flaky", "frozen"] == sorted(timeouts)


def test_without_a_threshold_only_the_timeout_declares_a_target_dead():
    clock, timeouts = ManualClock(), []
    hb = HeartbeatManager("jm", timeout=50.0, clock=clock, on_timeout=timeouts.append)

    async def gone(payload):
        raise Unreachable("te: connection refused")

    hb.monitor_target("gone", gone)
    for _ in range(5):
        send_round(hb, clock)
    assert hb.is_monitored("gone") and timeouts == []
    clock.advance(51)
    assert hb.check_timeouts() == ["gone"]
