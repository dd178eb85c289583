"""Issue 15 on the two-node Hadoop: a lost AppMaster comes back as YARN's next attempt and
its job goes on. The AppMaster container's processes (skein's JVM and our master) are
SIGKILLed while the job's tasks run, as when its node is lost; the next attempt finds
the job in the job store on HDFS, runs it again, and the attached client follows it
there and exits with the job's status."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid

import cloudpickle
import pytest

import local_hadoop
from flinkyarn import Pipeline, hdfs
from flinkyarn.connectors.filesystems import read_parquet
from tests import chaos
from tests.local import jobs
from tests.waiting import wait_for
from tests.yarn.test_on_yarn import FAST, REPO, TAG
from yarn_client import yarn_cluster
from yarn_client.rest_client import RestError

pytestmark = pytest.mark.usefixtures("hadoop")
cloudpickle.register_pickle_by_value(jobs)  # the containers have no tests to import

WORDS = [f"w{i}" for i in range(10)]
BATCHES = 30  # per subtask, 0.5 s apart: the job runs for some 15 s

SLOW_WORDCOUNT = f"""
import sys, time
import pyarrow as pa
from flinkyarn import Pipeline

def words(subtask, parallelism):
    for _ in range({BATCHES}):
        time.sleep(0.5)
        yield pa.record_batch([pa.array({WORDS!r})], names=["word"])

p = Pipeline("slow wordcount", parallelism=2)
p.from_generator(words).key_by("word").count().write_parquet(sys.argv[1])
p.execute()
"""


def container_processes(container_id: str) -> list[int]:
    """The pids on this machine of the YARN container `container_id` (or, ending in "_",
    of every container whose id starts so)."""
    return [process.pid for process in chaos.container_processes(container_id)]


@pytest.mark.parametrize("kills, window", [(2, "10 min"), (2, "1 s")])
def test_a_killed_appmaster_comes_back_and_the_per_job_wordcount_finishes_exactly(
        tmp_path, kills, window):
    """Killed once, the job runs on in attempt 2. Killed in attempt 2 again within
    yarn.application-attempt-failures-validity-interval of the first, the application
    has no attempt left: FAILED with YARN's cause, nothing left running, and the client
    says so and exits 1; further apart than that, YARN starts attempt 3, where the job
    finishes. (A single kill is the second case's first: the client follows the job to
    attempt 2, which runs it until the second kill.)"""
    program = tmp_path / "slow_wordcount.py"
    program.write_text(SLOW_WORDCOUNT)
    output = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}/counts"
    tag = f"{TAG}-am-failover-{kills}"
    client = subprocess.Popen(
        [sys.executable, "-m", "yarn_client", "run", *FAST, "--tags", tag,
         "-D", f"yarn.application-attempt-failures-validity-interval={window}",
         str(program), output],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        [app] = wait_for(lambda: yarn_cluster.flinkyarn_applications(tag=tag), 120,
                         "the application", poll=0.2)
        app_id = app["id"]
        for attempt in range(1, kills + 1):
            # Tasks run: the AppMaster's REST API says so, the attempt's own.
            # The suite's first submit packs and ships the environment, beside the local tier.
            wait_for(lambda attempt=attempt: tasks_running(app_id, attempt=attempt), 300,
                     f"the job's tasks to run in attempt {attempt}", poll=0.2)
            master = f"container_{app_id.removeprefix('application_')}_{attempt:02d}_000001"
            killed = container_processes(master)
            assert killed, f"no process of {master} on this machine"
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        stdout, stderr = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
    report = yarn_cluster.application_report(app_id)
    user = os.environ.get("USER") or "root"
    # The job store went with the application (or with the client, after the last kill).
    assert not hdfs.filesystem().exists(f"/user/{user}/.flinkyarn/ha/{app_id}")
    if kills == 2 and window == "10 min":  # ample: attempt 2 takes a minute or more under load
        assert client.returncode == 1, stderr[-3000:]
        assert (report["state"], report["finalStatus"]) == ("FAILED", "FAILED")
        assert re.search(rf"appattempt_{app_id.removeprefix('application_')}_000002 exited "
                         r"with\s+exitCode: 137", report["diagnostics"]), report["diagnostics"]
        assert f"application {app_id} FAILED/FAILED" in stderr
        # YARN ends every container of the application: no TaskExecutor is left.
        wait_for(lambda: not container_processes(f"container_{app_id.removeprefix('application_')}_"),
                 60, "the application's containers to end", poll=0.2)
        return
    assert client.returncode == 0, stderr[-3000:]
    for attempt in range(1, kills + 1):
        assert (f"the AppMaster was replaced: attempt {attempt + 1} serves now (attempt {attempt} "
                f"ended: AM Container for appattempt_{app_id.removeprefix('application_')}"
                f"_{attempt:06d} exited with exitCode: 137") in stderr
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    assert f"(AppMaster attempt {kills + 1})" in report["diagnostics"]
    counts = read_parquet(output).to_pydict()
    assert dict(zip(counts["word"], counts["count"])) == {w: 2 * BATCHES for w in WORDS}


def tasks_running(app_id: str, name: str | None = None, attempt: int = 1) -> bool:
    """Whether the tasks of a vertex of the application's job (named `name`) all run,
    as AppMaster attempt `attempt` says."""
    try:
        rest = yarn_cluster.connect(app_id)
        rest.jobs()
        if rest.attempt != attempt:
            return False
        jobs = [j for j in rest.jobs().jobs if name is None or j.name == name]
        if not jobs:
            return False
        details = rest.job(jobs[-1].job_id)
    except Exception:  # not up yet
        return False
    return any(v.state_counts.get("RUNNING", 0) == v.parallelism for v in details.vertices)


def test_a_session_keeps_its_jobs_through_a_lost_appmaster_and_takes_new_ones():
    """One job finished and a streaming one running (checkpoints on HDFS, an exactly-once
    sink) when the AppMaster is lost: the next attempt lists the finished one as it
    ended (not run again), resumes the streaming one from its latest checkpoint (every
    row once, none missing, after a stop with a savepoint), and takes a new job; a
    client of the lost attempt is sent to the new one."""
    from tests.yarn.test_on_yarn import flinkyarn

    folder = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    started = flinkyarn("session", "start", *FAST, "--tags", f"{TAG}-am-failover-session")
    assert started.returncode == 0, started.stderr[-3000:]
    app_id = started.stdout.strip().splitlines()[-1]
    try:
        def run_two_stage_job():
            done = subprocess.run([sys.executable, "-m", "yarn_client", "run", "-t", "yarn-session",
                                   "--application-id", app_id, "examples/two_stage_job.py", "2"],
                                  cwd=REPO, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]

        run_two_stage_job()
        rest = yarn_cluster.connect(app_id)  # of attempt 1; it follows to attempt 2
        [finished] = rest.jobs().jobs
        p = Pipeline("generated", parallelism=2, configuration={
            "execution.checkpointing.interval": "500 ms",
            "state.checkpoints.dir": f"{folder}/checkpoints"})
        p.from_data_generator(jobs.as_rows, rows_per_second=400).write_parquet(f"{folder}/out")
        job = rest.submit(p.job_graph())
        answered(lambda: (v := rest.job(job).checkpoints) and v.completed >= 2, 120,
                 "two checkpoints")
        first = "container_" + app_id.removeprefix("application_") + "_01_000001"
        for pid in container_processes(first):
            os.kill(pid, signal.SIGKILL)

        answered(lambda: (v := rest.job(job).checkpoints) and rest.attempt == 2
                 and v.restored_from is not None and v.completed >= 2, 180,
                 "the job to go on from its checkpoint in attempt 2")
        rest.savepoint(job, f"{folder}/savepoints", stop=True, timeout=120)
        details = answered(lambda: (d := rest.job(job)).status in ("FINISHED", "FAILED") and d,
                           60, "the job's end")
        assert details.status == "FINISHED", details.failure_cause
        numbers = read_parquet(f"{folder}/out").column("n").to_pylist()
        assert len(numbers) == len(set(numbers)) > 100
        for subtask in (0, 1):  # each subtask's numbers from the first, without a gap
            mine = sorted(n for n in numbers if n % 2 == subtask)
            assert mine == list(range(subtask, 2 * len(mine), 2)), subtask

        # The finished job as it ended, not run again (its times are those of attempt 1).
        listed = flinkyarn("list", app_id)
        assert listed.returncode == 0, listed.stderr
        assert "AppMaster attempt 2; attempt 1 ended:" in listed.stdout
        assert f"{finished.job_id}  FINISHED   {finished.name}" in listed.stdout
        [kept] = [j for j in rest.jobs().jobs if j.job_id == finished.job_id]
        assert (kept.start_time, kept.end_time) == (finished.start_time, finished.end_time)
        run_two_stage_job()  # a new job goes into the same application
        # The dashboard is back where YARN's tracking URL leads, with every job.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        page = html.unescape(opener.open(f"{yarn_cluster.rm_web_address()}/proxy/{app_id}"
                                         f"/pages/flinkyarn/", timeout=30).read().decode())
        assert "AppMaster attempt 2" in page and finished.job_id in page and job in page
    finally:
        stopped = flinkyarn("session", "stop", app_id)
    assert stopped.returncode == 0, stopped.stderr
    report = yarn_cluster.application_report(app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")


def answered(condition, timeout: float, what: str):
    """wait_for, where the AppMaster may not answer meanwhile (it is being replaced)."""
    def probe():
        try:
            return condition()
        except RestError:
            return None
    return wait_for(probe, timeout, what, poll=0.2)
