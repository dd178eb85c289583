"""The client's wait for an AppMaster in a busy queue (YarnClusterDescriptor.
wait_for_appmaster): YARN keeps the application ACCEPTED as long as its queue has no
room, and the client waits as long as that takes unless yarn.application.start-timeout
says otherwise; meanwhile it says why, with YARN's words and the queue's figures. The
ResourceManager is a fake whose answers follow a ManualClock, which the client's
pauses advance: hours of waiting take a moment."""

from __future__ import annotations

import io
import re

import pytest

from flinkyarn import options
from flinkyarn.clock import ManualClock
from flinkyarn.configuration import Configuration, ConfigurationError
from yarn_client import yarn_cluster
from yarn_client.yarn_cluster import (DASHBOARD_KEY, REST_ADDRESS_KEY, YarnClusterDescriptor,
                                      YarnDeploymentError, YarnOptions, waiting_reason)

APP = "application_1795933268076_0042"
LIMIT_EXCEEDED = (
    "[Thu Nov 26 10:00:00 +0000 2026] Application is added to the scheduler and is not yet "
    "activated. Queue's AM resource limit exceeded.  Details : AM Partition = "
    "<DEFAULT_PARTITION>; AM Resource Request = <memory:768, vCores:1>; Queue Resource "
    "Limit for AM = <memory:128, vCores:1>; User AM Resource Limit of the queue = "
    "<memory:128, vCores:1>; Queue AM Resource Usage = <memory:768, vCores:1>; ")


def resource(memory: int, vcores: int) -> dict:
    return {"memory": memory, "vCores": vcores,
            "resourceInformations": {"resourceInformation": []}}


# A leaf queue as the CapacityScheduler of Hadoop 3.5 shows it (fields the client does not
# read left out): another application's AppMaster uses more than the queue's AM limit.
SMALL = {
    "type": "capacitySchedulerLeafQueueInfo", "queuePath": "root.small", "queueName": "small",
    "capacity": 10.0, "usedCapacity": 62.5, "maxCapacity": 10.0, "absoluteCapacity": 10.0,
    "absoluteMaxCapacity": 10.0, "absoluteUsedCapacity": 6.25, "numApplications": 2,
    "state": "RUNNING", "resourcesUsed": resource(768, 1),
    "resources": {"resourceUsagesByPartition": [{
        "partitionName": "", "used": resource(768, 1), "amUsed": resource(768, 1),
        "amLimit": resource(128, 1), "userAmLimit": resource(128, 1)}]},
    "minEffectiveCapacity": resource(1228, 2), "maxEffectiveCapacity": resource(1228, 2),
    "maximumAllocation": resource(6144, 8), "numActiveApplications": 1,
    "numPendingApplications": 1, "AMResourceLimit": resource(128, 1),
    "usedAMResource": resource(768, 1), "userAMResourceLimit": resource(128, 1),
}
SCHEDULER = {"scheduler": {"schedulerInfo": {
    "type": "capacityScheduler", "queueName": "root", "queuePath": "root",
    "queues": {"queue": [{**SMALL, "queuePath": "root.default", "queueName": "default"},
                         SMALL]}}}}


class FakeResourceManager:
    """What the client asks while it waits, answered as of `clock`: the application is
    ACCEPTED (with `diagnostics`) until `runs_at`, then RUNNING; its AppMaster has
    written its REST address once it has run for `answers_after` seconds (None: never)."""

    def __init__(self, clock: ManualClock, runs_at: float | None = None,
                 answers_after: float | None = 2.0, diagnostics: str = LIMIT_EXCEEDED) -> None:
        self.clock = clock
        self.runs_at = runs_at
        self.answers_after = answers_after
        self.diagnostics = diagnostics
        self.killed: list[str] = []
        self.scheduler_asked = 0

    def running(self) -> bool:
        return self.runs_at is not None and self.clock.monotonic() >= self.runs_at

    def application_report(self, app_id: str) -> dict:
        assert app_id == APP
        if self.killed:
            return {"state": "KILLED", "finalStatus": "KILLED", "queue": "root.small"}
        if not self.running():
            return {"state": "ACCEPTED", "finalStatus": "UNDEFINED", "queue": "root.small",
                    "diagnostics": self.diagnostics}
        return {"state": "RUNNING", "finalStatus": "UNDEFINED", "queue": "root.small",
                "diagnostics": "", "amRPCAddress": "node-1:41234"}

    def rm_get(self, path: str) -> dict:
        assert path == "/ws/v1/cluster/scheduler"
        self.scheduler_asked += 1
        return SCHEDULER

    def kill(self, app_id: str) -> None:
        self.killed.append(app_id)

    def skein_application(self, report: dict):
        rm = self

        class KeyValueStore:
            def get_prefix(self, prefix: str) -> dict[str, bytes]:
                assert rm.runs_at is not None
                if rm.answers_after is None or \
                        rm.clock.monotonic() < rm.runs_at + rm.answers_after:
                    return {}
                return {REST_ADDRESS_KEY: b"node-1:8081",
                        DASHBOARD_KEY: b"http://node-1:8081/pages/flinkyarn/"}

        class Application:
            kv = KeyValueStore()

        return Application()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def rm(clock, monkeypatch) -> FakeResourceManager:
    fake = FakeResourceManager(clock)
    for name in ("application_report", "rm_get", "kill", "skein_application"):
        monkeypatch.setattr(yarn_cluster, name, getattr(fake, name))
    return fake


def descriptor(clock: ManualClock, **settings: str) -> YarnClusterDescriptor:
    return YarnClusterDescriptor(Configuration(settings), YarnOptions(queue="small"),
                                 out=io.StringIO(), clock=clock, sleep=clock.advance)


def wait(client: YarnClusterDescriptor, clock: ManualClock) -> tuple[str, str, object]:
    """The wait of an application submitted just now, 3 s after its deploy began."""
    return client.wait_for_appmaster(APP, clock.monotonic() - 3.0, {})


def waiting_lines(client: YarnClusterDescriptor) -> list[str]:
    out = client.out
    assert isinstance(out, io.StringIO)
    return [line for line in out.getvalue().splitlines() if line.startswith("  still ")]


def seconds_of(line: str) -> float:
    """The time a waiting line gives, since the submission (its deploy began 3 s before)."""
    found = re.match(r"  still \w+ \[(\d+\.\d) s\]", line)
    assert found, line
    return float(found.group(1)) - 3.0


# ------------------------------------------------------------------ no deadline


def test_without_a_deadline_an_accepted_application_is_waited_for_past_five_minutes(clock, rm):
    start = clock.monotonic()
    rm.runs_at = start + 3600.0  # an hour in a busy queue
    client = descriptor(clock)
    assert wait(client, clock)[:2] == ("node-1:8081", "http://node-1:8081/pages/flinkyarn/")
    assert clock.monotonic() - start >= 3600.0
    assert rm.killed == []
    out = client.out.getvalue()  # type: ignore[attr-defined]
    assert "  accepted [" in out and "  running [" in out and "  AppMaster up [" in out


def test_the_client_says_why_it_waits_after_10_s_then_every_30_s(clock, rm):
    rm.runs_at = clock.monotonic() + 200.0
    client = descriptor(clock)
    wait(client, clock)
    times = [seconds_of(line) for line in waiting_lines(client)]
    assert len(times) == 7  # at 10, 40, 70, ..., 190 s
    assert 10.0 <= times[0] < 10.5
    assert all(30.0 <= later - earlier < 30.5 for earlier, later in zip(times, times[1:]))
    assert rm.scheduler_asked == 7  # the queue's figures once a line, not once a poll


def test_the_waiting_line_gives_yarns_diagnostics_the_queues_use_and_the_appmasters_request(
        clock, rm):
    rm.runs_at = clock.monotonic() + 45.0
    client = descriptor(clock)
    wait(client, clock)
    first, second = (re.sub(r"\[\d+\.\d s\]", "[T]", line) for line in waiting_lines(client))
    said = ("  still ACCEPTED [T]: YARN says \"Application is added to the scheduler and is "
            "not yet activated. Queue's AM resource limit exceeded.\"; queue small uses "
            "768 MiB/1 vcore of at most 1228 MiB/2 vcores, AppMasters 768 MiB/1 vcore of at "
            "most 128 MiB/1 vcore, 1 application waiting; this AppMaster asks for "
            "768 MiB/1 vcore")
    assert first == said + "; the client waits without a deadline (yarn.application.start-timeout)"
    assert second == said


def test_the_appmasters_request_follows_its_memory_option(clock, rm):
    rm.runs_at = clock.monotonic() + 15.0
    client = descriptor(clock, **{"jobmanager.memory.process.size": "1 gb"})
    wait(client, clock)
    [line] = waiting_lines(client)
    assert "this AppMaster asks for 1024 MiB/1 vcore;" in line


def test_a_scheduler_that_cannot_be_asked_leaves_the_queues_figures_out_not_the_wait(
        clock, rm, monkeypatch):
    def refused(path: str) -> dict:
        raise YarnDeploymentError("no YARN ResourceManager answered GET " + path)

    monkeypatch.setattr(yarn_cluster, "rm_get", refused)
    rm.runs_at = clock.monotonic() + 15.0
    client = descriptor(clock)
    wait(client, clock)
    [line] = waiting_lines(client)
    assert "exceeded.\"; queue root.small; this AppMaster asks for 768 MiB/1 vcore;" in line
    assert rm.killed == []


def test_an_application_that_starts_at_once_gets_no_waiting_line(clock, rm):
    rm.runs_at = clock.monotonic() + 1.0
    client = descriptor(clock)
    wait(client, clock)
    assert waiting_lines(client) == []
    assert rm.scheduler_asked == 0


# ------------------------------------------------------------------ deadlines


def test_at_the_start_timeout_the_application_is_killed_and_the_error_names_the_option(
        clock, rm):
    start = clock.monotonic()
    client = descriptor(clock, **{"yarn.application.start-timeout": "2 min"})
    with pytest.raises(YarnDeploymentError) as raised:
        wait(client, clock)
    assert 120.0 <= clock.monotonic() - start < 120.5
    assert rm.killed == [APP]
    message = str(raised.value)
    assert message.startswith(f"{APP} did not start within 2 min "
                              f"(yarn.application.start-timeout), so it was killed; still "
                              f"ACCEPTED: YARN says \"Application is added")
    assert "queue small uses 768 MiB/1 vcore of at most 1228 MiB/2 vcores" in message
    assert ("Raise yarn.application.start-timeout, or leave it empty to wait as long as "
            "YARN keeps the application waiting") in message
    assert message.endswith(f"logs: yarn logs -applicationId {APP}")
    first = waiting_lines(client)[0]
    assert first.endswith("; the client gives up 2 min after the submission "
                          "(yarn.application.start-timeout)")


def test_an_application_that_starts_before_its_start_timeout_is_not_killed(clock, rm):
    rm.runs_at = clock.monotonic() + 100.0
    client = descriptor(clock, **{"yarn.application.start-timeout": "2 min"})
    assert wait(client, clock)[0] == "node-1:8081"
    assert rm.killed == []


def test_an_appmaster_that_yarn_runs_has_five_minutes_to_answer(clock, rm):
    rm.runs_at = clock.monotonic() + 600.0  # waiting for room does not count
    rm.answers_after = None
    client = descriptor(clock)
    with pytest.raises(YarnDeploymentError, match=(
            f"the AppMaster of {APP} did not answer within 300 s of YARN running it; "
            f"logs: yarn logs -applicationId {APP}")):
        wait(client, clock)
    assert 300.0 < clock.monotonic() - rm.runs_at < 300.5
    assert rm.killed == [APP]


def test_an_interrupted_wait_kills_the_application(clock, rm):
    client = descriptor(clock)

    def sleep(seconds: float) -> None:  # the user presses Ctrl-C after the second line
        clock.advance(seconds)
        if len(waiting_lines(client)) == 2:
            raise KeyboardInterrupt

    client.sleep = sleep
    with pytest.raises(KeyboardInterrupt):
        wait(client, clock)
    assert rm.killed == [APP]


def test_an_application_that_ends_while_waiting_is_reported_with_yarns_diagnostics(
        clock, rm, monkeypatch):
    monkeypatch.setattr(yarn_cluster, "application_report", lambda app_id: {
        "state": "FAILED", "finalStatus": "FAILED", "queue": "root.small",
        "diagnostics": "Application killed by the queue's administrator"})
    with pytest.raises(YarnDeploymentError, match=(
            f"{APP} ended while starting: FAILED: Application killed by the queue's")):
        wait(descriptor(clock), clock)


# ------------------------------------------------------------------ the option


def test_the_start_timeout_is_empty_by_default_or_a_positive_duration():
    key = options.YARN_APPLICATION_START_TIMEOUT.key
    assert Configuration().get(options.YARN_APPLICATION_START_TIMEOUT) is None
    assert Configuration({key: ""}).get(options.YARN_APPLICATION_START_TIMEOUT) is None
    assert Configuration({key: "10 min"}).get(options.YARN_APPLICATION_START_TIMEOUT) == 600.0
    for bad in ("0 s", "-1 s", "soon"):
        with pytest.raises(ConfigurationError, match=f"bad value '{bad}' for option '{key}'"):
            Configuration({key: bad})


# ------------------------------------------------------------------ the line's parts


def test_older_resourcemanagers_figures_are_percentages_and_per_partition_am_use():
    older = {"queueName": "small", "absoluteUsedCapacity": 6.25, "absoluteMaxCapacity": 10.0,
             "resources": {"resourceUsagesByPartition": [
                 {"partitionName": "x", "amUsed": resource(1, 1), "amLimit": resource(1, 1)},
                 {"partitionName": "", "amUsed": resource(768, 1),
                  "amLimit": resource(128, 1)}]},
             "numPendingApplications": 2}
    assert waiting_reason("", "small", older, (768, 1)) == (
        "queue small uses 6.2% of the cluster, at most 10.0%, AppMasters 768 MiB/1 vcore of "
        "at most 128 MiB/1 vcore, 2 applications waiting; this AppMaster asks for "
        "768 MiB/1 vcore")


def test_yarns_diagnostics_are_one_line_without_time_stamp_or_details_and_at_most_300_chars():
    assert waiting_reason("[Thu Nov 26 10:00:00 +0000 2026] Application is Activated, "
                          "waiting for resources to be assigned for AM.  Details : AM "
                          "Partition = <DEFAULT_PARTITION> ; ", "q", None, (768, 1)) == (
        'YARN says "Application is Activated, waiting for resources to be assigned for AM."; '
        "queue q; this AppMaster asks for 768 MiB/1 vcore")
    said = waiting_reason("An attempt failed:\n" + "x" * 1000, "q", None, (512, 2))
    assert said.startswith('YARN says "An attempt failed: xxx')
    assert len(said.split('"')[1]) == 300 and said.split('"')[1].endswith("...")
    assert said.endswith("this AppMaster asks for 512 MiB/2 vcores")
