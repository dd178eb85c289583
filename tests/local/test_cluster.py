"""A local cluster of real processes: AppMaster (Dispatcher, ResourceManager, JobMasters)
and TaskExecutors, talking gRPC over loopback with the cluster's TLS."""

from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest

from flinkyarn.gateways.resource_manager import DisconnectTaskExecutor, ResourceManagerGateway
from flinkyarn.job import JobBuilder
from flinkyarn.rpc.errors import StaleCall
from flinkyarn.rpc.service import RpcService
from tests.local import jobs
from tests.local.conftest import task_executor_process, task_executor_security
from tests.waiting import wait_for
from yarn_client.rest_client import RestError

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


def finished(rest, job_id, timeout=60.0):
    return wait_for(lambda: (d := rest.job(job_id)).status in TERMINAL and d, timeout,
                    f"job {job_id} to end")


def running_tasks(rest, job_id) -> int:
    return sum(v.state_counts.get("RUNNING", 0) for v in rest.job(job_id).vertices)


def slots_of_job(rest, job_id) -> int:
    return sum(1 for te in rest.overview().task_executors for s in te.slots if s.job_id == job_id)


def test_task_executors_register_with_their_slots(cluster, folder):
    job = JobBuilder("one task")
    job.add_vertex("only", jobs.quick(folder), parallelism=1)
    details = finished(cluster.rest, cluster.rest.submit(job.build()))

    assert details.status == "FINISHED"
    executors = cluster.rest.overview().task_executors
    assert len(executors) == 1
    assert [s.index for s in executors[0].slots] == [0, 1]
    assert executors[0].address.startswith("127.0.0.1:")
    # The job ended cleanly: its slots were freed and the TaskExecutor stopped watching
    # the JobMaster, so no heartbeat timeout follows, however long it checks.
    heartbeats_checked_since_now(cluster, executors[0].resource_id)
    timeouts = [line for p in cluster.taskexecutor_logs()
                for line in p.read_text().splitlines() if "timed out" in line]
    assert timeouts and all("resourcemanager-" in line for line in timeouts), timeouts


def test_a_cluster_started_for_a_job_has_its_first_task_executor_before_the_job(
        start_cluster, folder):
    # As the local target starts it: its job need not wait for a TaskExecutor's start.
    cluster = start_cluster(start_workers=1)
    [first] = wait_for(lambda: cluster.rest.overview().task_executors, 60,
                       "a TaskExecutor registered with no job submitted")
    assert cluster.rest.jobs().jobs == [] and [s.index for s in first.slots] == [0, 1]
    job = JobBuilder("two tasks")
    job.add_vertex("only", jobs.quick(folder), parallelism=2)
    assert finished(cluster.rest, cluster.rest.submit(job.build())).status == "FINISHED"
    # Its slots served the job: no other TaskExecutor was started for it.
    assert [te.resource_id for te in cluster.rest.overview().task_executors] == [first.resource_id]


def test_multi_vertex_job_with_parallelism_runs_every_subtask_to_finished(cluster, folder):
    job = JobBuilder("three vertices", schedule_mode="lazy_from_sources")
    a = job.add_vertex("a", jobs.quick(folder), parallelism=3)
    b = job.add_vertex("b", jobs.quick(folder), parallelism=3)
    c = job.add_vertex("c", jobs.quick(folder), parallelism=2)
    job.connect(a, b, pattern="pointwise")
    job.connect(b, c, blocking=True)

    details = finished(cluster.rest, cluster.rest.submit(job.build()))

    assert details.status == "FINISHED", details.failure_cause
    assert jobs.markers(folder, "finished") == {
        f"{v}-{i}-0" for v, n in (("a", 3), ("b", 3), ("c", 2)) for i in range(n)}
    assert {v.name: v.state_counts for v in details.vertices} == {
        "a": {"FINISHED": 3}, "b": {"FINISHED": 3}, "c": {"FINISHED": 2}}


def test_vertices_in_one_slot_sharing_group_share_slots(cluster, folder):
    shared = JobBuilder("shared")
    a = shared.add_vertex("a", jobs.wait_for_go(folder), parallelism=2)
    b = shared.add_vertex("b", jobs.wait_for_go(folder), parallelism=2)
    shared.connect(a, b)
    job_id = cluster.rest.submit(shared.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 4, 60, "4 running tasks")

    # Four tasks of two vertices in two slots: one subtask of each vertex per slot.
    assert slots_of_job(cluster.rest, job_id) == 2
    (folder / "go").touch()
    assert finished(cluster.rest, job_id).status == "FINISHED"


def test_vertex_without_a_sharing_group_gets_slots_of_its_own(cluster, folder):
    job = JobBuilder("separate")
    a = job.add_vertex("a", jobs.wait_for_go(folder), parallelism=2)
    b = job.add_vertex("b", jobs.wait_for_go(folder), parallelism=2, slot_sharing_group=None)
    job.connect(a, b)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 4, 60, "4 running tasks")

    assert slots_of_job(cluster.rest, job_id) == 4
    assert len(cluster.rest.overview().task_executors) == 2  # two slots each
    (folder / "go").touch()
    assert finished(cluster.rest, job_id).status == "FINISHED"


def test_cancel_stops_every_task_and_ends_canceled(cluster, folder):
    job = JobBuilder("to cancel")
    job.add_vertex("waits", jobs.wait_for_go(folder), parallelism=3)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 3, 60, "3 running tasks")

    cluster.rest.cancel(job_id)

    assert finished(cluster.rest, job_id).status == "CANCELED"
    assert jobs.markers(folder, "stopped") == {f"waits-{i}-0" for i in range(3)}
    assert not jobs.markers(folder, "finished")
    wait_for(lambda: slots_of_job(cluster.rest, job_id) == 0, 60, "the job's slots to be freed")


def test_a_task_that_ignores_cancel_fails_its_task_executor_after_the_timeout(start_cluster,
                                                                              folder):
    """Flink's task.cancellation.interval/timeout: the stuck thread's stack is logged, then
    its TaskExecutor exits, the job ends CANCELED and its slots are free for the next."""
    cluster = start_cluster(**{"task.cancellation.interval": "500 ms",
                               "task.cancellation.timeout": "3 s"})
    job = JobBuilder("stuck")
    job.add_vertex("sleeps", jobs.ignores_cancellation(folder), parallelism=1)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 1, 60, "the task running")
    wait_for(lambda: jobs.markers(folder, "started"), 60, "the user code running")
    [stuck] = [te.resource_id for te in cluster.rest.overview().task_executors
               if any(s.job_id == job_id for s in te.slots)]
    pid = task_executor_process(stuck)

    cluster.rest.cancel(job_id)

    assert finished(cluster.rest, job_id).status == "CANCELED"
    wait_for(lambda: exited(pid), 60, "the TaskExecutor to exit")
    log = "".join(p.read_text() for p in cluster.taskexecutor_logs())
    assert "has not stopped" in log and "invokable(context)" in log  # where the thread was
    assert "fatal error, this TaskExecutor exits: task sleeps (1/1) #0 did not stop within 3 s" in log
    assert stuck not in {te.resource_id for te in cluster.rest.overview().task_executors}
    # Its goodbye carried its registration's tokens: the ResourceManager took it.
    appmaster_log = cluster.log_file.read_text()
    assert f"closing the connection to TaskExecutor {stuck}: TaskExecutor {stuck} failed" \
        in appmaster_log
    assert "refused resourcemanager.disconnect_task_executor" not in appmaster_log
    job = JobBuilder("next")
    job.add_vertex("quick", jobs.quick(folder), parallelism=1)
    assert finished(cluster.rest, cluster.rest.submit(job.build())).status == "FINISHED"


def test_two_jobs_run_at_once(cluster, folder):
    ids = []
    for name in ("first", "second"):
        job = JobBuilder(name)
        job.add_vertex(name, jobs.wait_for_go(folder), parallelism=2)
        ids.append(cluster.rest.submit(job.build()))

    wait_for(lambda: all(running_tasks(cluster.rest, j) == 2 for j in ids), 60,
             "both jobs running")
    assert {j.status for j in cluster.rest.jobs().jobs} == {"RUNNING"}
    (folder / "go").touch()
    assert [finished(cluster.rest, j).status for j in ids] == ["FINISHED", "FINISHED"]


def test_failing_task_fails_the_job_with_its_error(cluster, folder):
    job = JobBuilder("fails")
    job.add_vertex("boom", jobs.failing("no such column 'x'"), parallelism=2)
    job.add_vertex("bystander", jobs.wait_for_go(folder), parallelism=1)
    details = finished(cluster.rest, cluster.rest.submit(job.build()))

    assert details.status == "FAILED"
    assert "boom" in details.failure_cause
    assert "ValueError: no such column 'x'" in details.failure_cause


def start_waiting_job(cluster, folder):
    job = JobBuilder("long")
    job.add_vertex("waits", jobs.wait_for_go(folder), parallelism=1)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 1, 60, "the task running")
    [executor] = cluster.rest.overview().task_executors
    return job_id, executor.resource_id


def registration_at_resource_manager(cluster, resource_id) -> tuple[str, str]:
    """The ResourceManagerId and InstanceID of the TaskExecutor's latest registration,
    as it logged them: the tokens its calls to the ResourceManager carry."""
    text = (cluster.work_dir / "logs" / f"{resource_id}.log").read_text()
    *_, last = re.finditer(r"registered at ResourceManager ([\w-]+) as (\w+)", text)
    return last.group(1), last.group(2)


def drop_at_resource_manager(cluster, resource_id, instance_id: str) -> None:
    """What the ResourceManager does on its side of a network partition: it forgets the
    TaskExecutor's registration `instance_id` and stops sending it heartbeats. The
    JobMaster still reaches it."""
    resource_manager_id, _ = registration_at_resource_manager(cluster, resource_id)

    async def drop():
        rpc = RpcService(task_executor_security(cluster))
        try:
            await rpc.connect(cluster.rpc_address, "resourcemanager", ResourceManagerGateway) \
                .disconnect_task_executor(DisconnectTaskExecutor(
                    resource_manager_id, instance_id, resource_id, "partitioned"))
        finally:
            await rpc.stop()
    asyncio.run(drop())


def heartbeats_checked_since_now(cluster, resource_id) -> None:
    """Returns once TaskExecutor `resource_id` has checked its heartbeat timeouts (all of
    them at once) more than heartbeat.timeout after this call began, as its log shows.
    The ResourceManager drops it twice: after the first time it registers again, so its
    ResourceManager heartbeat is watched from a moment after this call began; that one
    timing out after the second drop is such a check. It ends registered again."""
    log = cluster.work_dir / "logs" / f"{resource_id}.log"
    for _ in range(2):
        registrations = log.read_text().count("registered at ResourceManager")
        drop_at_resource_manager(cluster, resource_id,
                                 registration_at_resource_manager(cluster, resource_id)[1])
        wait_for(lambda before=registrations:
                 log.read_text().count("registered at ResourceManager") > before, 60,
                 f"TaskExecutor {resource_id} to find its ResourceManager heartbeat timed "
                 f"out and register again")


def test_killed_task_executor_is_reported_by_the_resource_manager_when_its_process_ends(
        cluster, folder):
    job_id, resource_id = start_waiting_job(cluster, folder)

    os.kill(task_executor_process(resource_id), signal.SIGKILL)

    # The driver sees the process end and the ResourceManager tells the JobMaster, before
    # the JobMaster's own heartbeat timeout (that path is the frozen TaskExecutor's).
    details = finished(cluster.rest, job_id)
    assert details.status == "FAILED"
    assert f"TaskExecutor {resource_id} process killed by SIGKILL" in details.failure_cause
    assert "timed out" not in details.failure_cause
    wait_for(lambda: all(te.resource_id != resource_id
                         for te in cluster.rest.overview().task_executors), 60,
             "the ResourceManager to drop the killed TaskExecutor")


def test_task_executor_stopped_in_the_middle_of_a_task_leaves_cleanly(cluster, folder):
    job_id, resource_id = start_waiting_job(cluster, folder)

    os.kill(task_executor_process(resource_id), signal.SIGTERM)

    details = finished(cluster.rest, job_id)
    assert details.status == "FAILED"
    assert f"TaskExecutor {resource_id} process exited with code 0" in details.failure_cause
    [log] = [p for p in cluster.taskexecutor_logs() if resource_id in p.name]
    text = log.read_text()
    # Its cancelled task's report is dropped on purpose, not by a crash in the shutdown.
    assert "not reporting waits CANCELED: this TaskExecutor is stopping" in text
    assert "Traceback" not in text and "Error" not in text


def test_frozen_task_executor_is_declared_dead_and_registers_again_when_thawed(cluster, folder):
    job_id, resource_id = start_waiting_job(cluster, folder)
    pid = task_executor_process(resource_id)

    os.kill(pid, signal.SIGSTOP)
    try:
        details = finished(cluster.rest, job_id)
        assert details.status == "FAILED"
        assert f"heartbeat of TaskExecutor {resource_id} timed out" in details.failure_cause
        wait_for(lambda: not cluster.rest.overview().task_executors, 60,
                 "the ResourceManager to drop the frozen TaskExecutor")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Thawed, it finds its ResourceManager connection gone and registers again.
    wait_for(lambda: [te.resource_id for te in cluster.rest.overview().task_executors]
             == [resource_id], 60, "the thawed TaskExecutor to register again")


def exited(pid: int) -> bool:
    """The process is gone or a zombie. (It may vanish between looking and reading.)"""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_idle_task_executors_are_released_after_the_taskmanager_timeout(start_cluster, folder):
    cluster = start_cluster(**{"resourcemanager.taskmanager-timeout": "1 s"})
    job = JobBuilder("short")
    job.add_vertex("only", jobs.quick(folder), parallelism=1)
    finished(cluster.rest, cluster.rest.submit(job.build()))
    [executor] = wait_for(lambda: cluster.rest.overview().task_executors, 60, "a TaskExecutor")
    pid = task_executor_process(executor.resource_id)

    wait_for(lambda: not cluster.rest.overview().task_executors, 60,
             "the idle TaskExecutor to be released")
    wait_for(lambda: exited(pid), 60, "its process to exit")


def test_task_executor_that_loses_only_its_resource_manager_registers_again_and_keeps_its_tasks(
        cluster, folder):
    job_id, resource_id = start_waiting_job(cluster, folder)
    _, instance_id = registration_at_resource_manager(cluster, resource_id)

    # A disconnect of a registration it does not have (any more) is refused, changing nothing.
    with pytest.raises(StaleCall, match=f"stale instance id of TaskExecutor {resource_id}"):
        drop_at_resource_manager(cluster, resource_id, "an-older-registration")
    assert [te.resource_id for te in cluster.rest.overview().task_executors] == [resource_id]
    refusals = [line for line in cluster.log_file.read_text().splitlines()
                if "refused resourcemanager.disconnect_task_executor" in line]
    assert len(refusals) == 1 and "Traceback" not in cluster.log_file.read_text()

    drop_at_resource_manager(cluster, resource_id, instance_id)
    assert cluster.rest.overview().task_executors == []

    # Its ResourceManager heartbeat times out (2 s); it registers again with a slot report
    # that still holds the job's slot, and the task never stops.
    wait_for(lambda: slots_of_job(cluster.rest, job_id) == 1, 60,
             "the TaskExecutor registered again with the job's slot")
    assert [te.resource_id for te in cluster.rest.overview().task_executors] == [resource_id]
    assert running_tasks(cluster.rest, job_id) == 1
    (folder / "go").touch()
    details = finished(cluster.rest, job_id)
    assert (details.status, details.restarts) == ("FINISHED", 0)
    assert jobs.markers(folder, "started") == {"waits-0-0"}
    assert jobs.markers(folder, "finished") == {"waits-0-0"}
    wait_for(lambda: slots_of_job(cluster.rest, job_id) == 0, 60, "the job's slot freed")


def test_a_job_the_cluster_can_never_run_is_refused_at_submit(cluster):
    """Too wide for pipeline.max-parallelism, or a pipelined region needing more slots
    than the ResourceManager may ever start: refused naming the bound, nothing started."""
    def noop(ctx):
        pass

    def wide(parallelism: int):
        job = JobBuilder("wide")
        job.connect(job.add_vertex("src", noop, parallelism=parallelism),
                    job.add_vertex("sink", noop, parallelism=parallelism))
        return job.build()

    with pytest.raises(RestError, match=r"'src': parallelism 40000 is above the maximum "
                                        r"parallelism 32768 \(pipeline.max-parallelism\)"):
        cluster.rest.submit(wide(40000))
    with pytest.raises(RestError, match=(
            r"job 'wide' needs 17 slots at once \(its largest pipelined region\), more than this "
            r"cluster can ever offer: 16 \(8 TaskExecutors of 2 slots "
            r"\(taskmanager.numberOfTaskSlots\); resourcemanager.max-taskmanagers = 8\)")):
        cluster.rest.submit(wide(17))
    assert cluster.rest.jobs().jobs == []
    assert cluster.rest.overview().task_executors == []


def test_a_job_of_many_more_subtasks_than_slots_runs_through_them(cluster, folder):
    """1500 one-subtask regions on 16 slots: the JobMaster's slot requests go out a few
    at a time (all at once, gRPC cancelled them and the job failed)."""
    job = JobBuilder("many", schedule_mode="lazy_from_sources")
    job.add_vertex("a", jobs.quick(folder), parallelism=1500)

    details = finished(cluster.rest, cluster.rest.submit(job.build()), timeout=180)

    assert details.status == "FINISHED", details.failure_cause
    assert len(jobs.markers(folder, "finished")) == 1500
