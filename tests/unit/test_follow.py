"""What an attached client prints while it follows a job: state changes and each
restart as it happens (pure: a fake REST client replays the job's details)."""

from __future__ import annotations

import io

from flinkyarn.gateways.dispatcher import JobDetails, RestartView, VertexDetails
from yarn_client.executors import follow


def details(status: str, history: list[RestartView], limit: int | None = 3) -> JobDetails:
    vertex = VertexDetails("v", "sum", 2, "RUNNING", {"RUNNING": 2})
    return JobDetails("j" * 32, "job", status, 0.0, None, None, [vertex],
                      len(history), history[-1].cause if history else None, history, limit)


class Replay:
    def __init__(self, *steps: JobDetails) -> None:
        self.steps = list(steps)

    def job(self, job_id: str) -> JobDetails:
        return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]


def restart(number: int, cause: str, task: str, restarted: int) -> RestartView:
    return RestartView(number, 0.0, cause, task, [f"t{i}" for i in range(restarted)])


def test_each_restart_is_printed_once_as_it_happens():
    lost = restart(1, "TaskExecutor taskexecutor-1 lost: container exited\n  more", "sum (1/2)", 2)
    udf = restart(2, "sum (2/2) failed: ValueError: bad record", "sum (2/2)", 1)
    out = io.StringIO()

    follow(Replay(details("RUNNING", []), details("RUNNING", [lost]), details("RUNNING", [lost]),
                  details("RUNNING", [lost, udf]), details("FINISHED", [lost, udf])),
           "j" * 32, out, poll=0)

    lines = [line for line in out.getvalue().splitlines() if "restart (" in line]
    assert [line.split("] job jjjjjjjj ", 1)[1] for line in lines] == [
        "restart (attempt 1 of 3): sum (1/2) failed: TaskExecutor taskexecutor-1 lost: "
        "container exited; 2 task(s) restart",
        "restart (attempt 2 of 3): sum (2/2) failed: ValueError: bad record; 1 task(s) restart"]


def test_a_capped_history_and_an_unbounded_strategy():
    history = [restart(n, f"failure {n}", "sum (1/2)", 1) for n in (5, 6)]
    out = io.StringIO()
    follow(Replay(details("RUNNING", history[:1], None), details("FAILED", history, None)),
           "j" * 32, out, poll=0)
    printed = [line for line in out.getvalue().splitlines() if "restart (" in line]
    assert len(printed) == 2
    assert "restart (attempt 6): sum (1/2) failed: failure 6" in printed[1]


def test_why_the_job_waits_is_printed_when_it_starts_and_when_it_changes():
    import msgspec

    full = "waiting for 1 container(s) of 1024 MB: queue 'etl' is at its limit (8192 of 8192 MB used)"
    busy = "waiting for 1 TaskExecutor(s) to start in their containers"

    def waiting(reason: str) -> JobDetails:
        return msgspec.structs.replace(details("RUNNING", []), waiting=reason)

    out = io.StringIO()
    follow(Replay(waiting(""), waiting(full), waiting(full), waiting(busy), waiting(""),
                  details("FINISHED", [])), "j" * 32, out, poll=0)
    said = [line.split("] job jjjjjjjj ", 1)[1] for line in out.getvalue().splitlines()
            if "waiting for" in line]
    assert said == [full, busy]


def test_a_blocked_task_executor_is_printed_once_with_why():
    import msgspec

    from flinkyarn.gateways.dispatcher import BlockedView

    cause = "2 task failures there within 600 s; the last: sum (1/2): OSError: disk full"
    block = BlockedView("taskexecutor-3-ab", 1_700_000_000.0, cause)
    blocking = msgspec.structs.replace(details("RUNNING", []), blocked=[block])
    out = io.StringIO()
    follow(Replay(details("RUNNING", []), blocking, blocking,
                  msgspec.structs.replace(details("FINISHED", []), blocked=[block])),
           "j" * 32, out, poll=0)
    said = [line.split("] job jjjjjjjj ", 1)[1] for line in out.getvalue().splitlines()
            if "blocked" in line]
    assert len(said) == 1
    assert said[0].startswith("TaskExecutor taskexecutor-3-ab blocked for this job until ")
    assert said[0].endswith(f"(cluster.resource-blocklist.*): {cause}")
