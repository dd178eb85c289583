"""A local cluster of real processes: AppMaster (Dispatcher, ResourceManager, JobMasters)
and TaskExecutors, talking gRPC over loopback with the cluster's TLS. What is tested here
is what the processes do (start, register over loopback, run user code, exit on a
signal, a release or a fatal error); the control plane's decisions are tested exactly
on the in-process cluster (tests/unit/test_cluster_control_plane.py and the
test_harness_*.py)."""

from __future__ import annotations

import os
import signal

from flinkyarn.job import JobBuilder
from tests.local import jobs
from tests.local.conftest import task_executor_process
from tests.waiting import wait_for

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


def finished(rest, job_id, timeout=60.0):
    return wait_for(lambda: (d := rest.job(job_id)).status in TERMINAL and d, timeout,
                    f"job {job_id} to end")


def running_tasks(rest, job_id) -> int:
    return sum(v.state_counts.get("RUNNING", 0) for v in rest.job(job_id).vertices)


def test_task_executors_register_with_their_slots(cluster, folder):
    job = JobBuilder("one task")
    job.add_vertex("only", jobs.quick(folder), parallelism=1)
    details = finished(cluster.rest, cluster.rest.submit(job.build()))

    assert details.status == "FINISHED"
    executors = cluster.rest.overview().task_executors
    assert len(executors) == 1
    assert [s.index for s in executors[0].slots] == [0, 1]
    assert executors[0].address.startswith("127.0.0.1:")
    assert jobs.markers(folder, "finished") == {"only-0-0"}  # its user code ran


def test_cancel_stops_every_task_and_ends_canceled(cluster, folder):
    job = JobBuilder("to cancel")
    job.add_vertex("waits", jobs.wait_for_go(folder), parallelism=3)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 3, 60, "3 running tasks")

    cluster.rest.cancel(job_id)

    assert finished(cluster.rest, job_id).status == "CANCELED"
    assert jobs.markers(folder, "stopped") == {f"waits-{i}-0" for i in range(3)}
    assert not jobs.markers(folder, "finished")


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


def start_waiting_job(cluster, folder):
    job = JobBuilder("long")
    job.add_vertex("waits", jobs.wait_for_go(folder), parallelism=1)
    job_id = cluster.rest.submit(job.build())
    wait_for(lambda: running_tasks(cluster.rest, job_id) == 1, 60, "the task running")
    [executor] = cluster.rest.overview().task_executors
    return job_id, executor.resource_id


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


def exited(pid: int) -> bool:
    """The process is gone or a zombie. (It may vanish between looking and reading.)"""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_task_executor_started_with_the_cluster_exits_once_released_as_idle(start_cluster):
    """As the local target starts a cluster for a job: its first TaskExecutor's process
    starts with the AppMaster and registers with no job; idle for
    resourcemanager.taskmanager-timeout, it is released and its process exits."""
    cluster = start_cluster(start_workers=1, **{"resourcemanager.taskmanager-timeout": "1 s"})
    [log] = wait_for(cluster.taskexecutor_logs, 60, "a TaskExecutor to start")
    resource_id = log.name.removesuffix(".log")
    pid = task_executor_process(resource_id)
    wait_for(lambda: "registered at ResourceManager" in log.read_text(), 60,
             "the TaskExecutor to register")
    assert cluster.rest.jobs().jobs == []

    wait_for(lambda: exited(pid), 60, "its process to exit")
    assert f"TaskExecutor {resource_id} was idle for 1 s" in cluster.log_file.read_text()
    assert cluster.rest.overview().task_executors == []


def test_a_job_of_many_more_subtasks_than_slots_runs_through_them(cluster, folder):
    """1500 one-subtask regions on 16 slots: the JobMaster's slot requests go out a few
    at a time (all at once, gRPC cancelled them and the job failed)."""
    job = JobBuilder("many", schedule_mode="lazy_from_sources")
    job.add_vertex("a", jobs.quick(folder), parallelism=1500)

    details = finished(cluster.rest, cluster.rest.submit(job.build()), timeout=180)

    assert details.status == "FINISHED", details.failure_cause
    assert len(jobs.markers(folder, "finished")) == 1500
