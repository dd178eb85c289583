"""PySpark scripts as real Spark applications on the two-node test cluster: submitted
into one session, each script's driver runs in a slot and Spark's own YARN backend asks
YARN for its executors (from the HDFS cache: no jars uploaded per job); the script's
output reaches the client's terminal; `list` and `logs` show the Spark application;
a cancelled script leaves no driver, no executor and no Spark application behind."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyspark
import pytest

import local_hadoop
from flinkyarn import hadoop
from taskexecutor.reaper import group_alive
from tests.local.conftest import processes_mentioning
from tests.local.test_pyspark_scripts import PEOPLE_JSON, PEOPLE_TXT, reference
from tests.waiting import wait_for
from tests.yarn.test_shipping_on_yarn import application_logs, flinkyarn
from yarn_client import yarn_cluster

EXAMPLES = Path(pyspark.__file__).resolve().parent / "examples" / "src" / "main" / "python"
TAG = f"flinkyarn-test-{uuid.uuid4().hex[:8]}"
FAST = ["-D", "heartbeat.interval=1 s", "-D", "heartbeat.timeout=10 s"]
TEXT = "the quick brown fox\njumps over the lazy dog\nthe dog barks\n"
# Executors so large (2816 MB heap + 384 MB overhead = 3200 MB) that no node (6144 MB)
# holds two, while any node holds one beside the session's containers (AppMaster 768,
# TaskExecutor 1280; Spark's AM runs in the driver): two executors are on two nodes.
# The driver waits for both (by default it starts after 30 s with one, and a slow second
# executor, on a loaded machine, is then stopped before it ran anything).
SPREAD = ["--num-executors", "2", "--executor-memory", "2816m",
          "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
          "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=300s"]


@pytest.fixture(scope="module")
def session(hadoop):
    """One session for the module's scripts, and their inputs on HDFS, where Spark's
    relative paths point (the user's home folder)."""
    home = f"/user/{os.environ.get('USER') or 'root'}"
    resources = f"{home}/examples/src/main/resources"
    subprocess.run(["hdfs", "dfs", "-mkdir", "-p", resources], check=True)
    for name, text in (("people.json", PEOPLE_JSON), ("people.txt", PEOPLE_TXT)):
        subprocess.run(["hdfs", "dfs", "-put", "-f", "-", f"{resources}/{name}"],
                       input=text, text=True, check=True)
    started = flinkyarn("session", "start", *FAST, "--tags", TAG,
                        "-D", "taskmanager.memory.process.size=1280 mb")
    assert started.returncode == 0, started.stderr[-4000:]
    app_id = started.stdout.strip().splitlines()[-1]
    yield app_id
    flinkyarn("session", "stop", app_id)
    leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
    for app in leftovers:
        yarn_cluster.kill(app["id"])
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def submit(app_id: str, *args, timeout=600):
    return flinkyarn("run", "-t", "yarn-session", "--application-id", app_id, "--pyspark",
                     *args, timeout=timeout)


def spark_application(stderr: str) -> str:
    found = re.findall(r"Spark application (application_\d+_\d+): (\S*)", stderr)
    assert found, stderr[-3000:]
    return found[-1][0]


def executor_containers(app_id: str, count: int) -> dict[str, str]:
    """{container: host} of the executors of Spark application `app_id` (every container:
    its AM runs in the driver, unmanaged), as YARN's aggregated logs list them, once
    `count` are there: each node hands in its logs on its own, and `yarn logs` shows a
    header per log file, so the headers' number says nothing of how many containers ran."""
    found: dict[str, str] = {}

    def listed() -> bool:
        logs = application_logs(app_id, "Container: container_")
        found.update(re.findall(r"Container: (container_\w+) on ([\d.]+)_\d+", logs))
        return len(found) >= count

    try:
        wait_for(listed, 120, f"{count} executor containers in the logs of {app_id}", poll=2.0)
    except AssertionError as error:
        raise AssertionError(f"{error}; found {found}") from None
    return found


def printed(stdout: str) -> list[str]:
    """The script's lines on stdout: all but flinkyarn's result line at the end."""
    return [line for line in stdout.splitlines()
            if line.strip() and not re.match(r"Job \w+ (FINISHED|FAILED|CANCELED) in", line)]


def test_spark_examples_run_as_spark_applications_on_the_nodes(session, tmp_path):
    # pi.py with two executors: one on each node, YARN's container reports say.
    pi = submit(session, *SPREAD, str(EXAMPLES / "pi.py"), "4")
    assert pi.returncode == 0, pi.stderr[-4000:]
    assert re.fullmatch(r"Pi is roughly 3\.1\d*", "\n".join(printed(pi.stdout))), pi.stdout
    spark_app = spark_application(pi.stderr)
    report = yarn_cluster.application_report(spark_app)
    assert report["finalStatus"] == "SUCCEEDED" and report["applicationType"] == "SPARK"
    assert session.lower() in report["applicationTags"].split(",")
    assert report["queue"].endswith("default")
    # Its AM ran in the driver (no container of its own); the job links the application
    # through YARN's web proxy all the same.
    assert report["unmanagedApplication"] is True
    job_id = re.search(r"submitted job (\w+) \(PySpark script pi.py\)", pi.stderr)[1]
    assert yarn_cluster.connect(session).job(job_id).spark_tracking_url == \
        f"{hadoop.rm_web_address()}/proxy/{spark_app}/"

    # wordcount.py: exact counts, on a file of HDFS.
    base = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    subprocess.run(["hdfs", "dfs", "-mkdir", "-p", base], check=True)
    subprocess.run(["hdfs", "dfs", "-put", "-", f"{base}/text.txt"], input=TEXT, text=True,
                   check=True)
    words = submit(session, str(EXAMPLES / "wordcount.py"), f"{base}/text.txt")
    assert words.returncode == 0, words.stderr[-4000:]
    counts = collections.Counter(w for line in TEXT.splitlines() for w in line.split(" "))
    assert sorted(printed(words.stdout)) == sorted(f"{w}: {n}" for w, n in counts.items())

    # sql/basic.py: what `python sql/basic.py` shows, with its files on HDFS.
    basic = submit(session, str(EXAMPLES / "sql" / "basic.py"))
    assert basic.returncode == 0, basic.stderr[-4000:]
    assert sorted(printed(basic.stdout)) == sorted(printed(reference("sql/basic.py")))

    # list shows the job's Spark application; logs --job prints what the script printed
    # (from the running TaskExecutor's container) and the driver's Spark log.
    listed = flinkyarn("list", session)
    assert listed.returncode == 0, listed.stderr
    assert spark_app in listed.stdout
    job_logs = flinkyarn("logs", session, "--job", job_id)
    assert job_logs.returncode == 0, job_logs.stderr[-2000:]
    assert f"LogType:pyspark-{job_id}.log" in job_logs.stdout
    assert "Pi is roughly" in job_logs.stdout
    # Spark's jars and the environment came from the HDFS cache: nothing uploaded.
    assert re.search(r"Not copying hdfs://\S+/cache/spark-jars-", job_logs.stdout)
    assert re.search(r"Not copying hdfs://\S+/cache/environment-", job_logs.stdout)
    assert not re.search(r"Uploading resource file:\S+(jars|\.tar)", job_logs.stdout)

    # pi's executors, one on each node: last, their nodes had the other scripts' time to
    # hand in their logs.
    executors = executor_containers(spark_app, 2)
    assert len(set(executors.values())) == 2, f"executors on {executors}"


MAPS = """\
import os
from pyspark import SparkContext

def archives(pid):
    with open(f"/proc/{pid}/maps") as maps:
        return sorted({os.path.basename(line.split()[-1]) for line in maps
                       if line.rstrip().endswith(".jsa")})

def executor_jvm(_):
    pid = os.getpid()  # a Python worker, forked by pyspark's daemon, started by the JVM
    while open(f"/proc/{pid}/comm").read().strip() != "java":
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    return archives(pid)

def backlog_timer(sc):
    # Spark's dynamic allocation's timer for asking more executors (NOT_SET, the
    # largest long: no task has waited yet), read from its private field.
    manager = sc._jsc.sc().executorAllocationManager().get()
    field = manager.getClass().getDeclaredField("addTime")
    field.setAccessible(True)
    return "not set" if field.getLong(manager) == 2 ** 63 - 1 else "set"

def pyspark_from(_):
    import pyspark
    return ("a zip" if ".zip" in pyspark.__file__ else "its environment"
            if "/site-packages/pyspark/" in pyspark.__file__ else pyspark.__file__)

sc = SparkContext(appName="maps")
print("backlog timer", backlog_timer(sc))
print("driver", *archives(sc._gateway.proc.pid))
print("executor", *sc.parallelize([0], 1).map(executor_jvm).collect()[0])
print("executor imports pyspark from", sc.parallelize([0], 1).map(pyspark_from).collect()[0])
sc.stop()
"""


def test_a_per_job_script_runs_in_an_application_of_its_own(hadoop, class_data, tmp_path):
    """`flinkyarn run --pyspark` in place of spark-submit's cluster mode: an application of
    its own whose TaskExecutor runs the script's driver, on Spark's executors; the
    script's output reaches the client and both applications succeed. The driver's and
    the executor's JVMs map the class-data archive the client shipped (their memory maps
    say so, beside the JDK's own). Spark's dynamic allocation (the default, here from one
    executor) has no task waiting once the SparkContext started: the YARN AM's
    registration, which resets it, no longer makes the first stage ask for more
    executors at once (taskexecutor/spark/pyspark_patches.py: backlog_timer_from_the_first_stage). The
    executor's Python workers import pyspark compiled, from the environment they run, not
    from pyspark's zips (taskexecutor/spark/daemon.py, shipped through the cache)."""
    script = tmp_path / "maps.py"
    script.write_text(MAPS)
    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG, "--pyspark",
                       "--conf", "spark.dynamicAllocation.initialExecutors=1", str(script))
    assert result.returncode == 0, result.stderr[-4000:]
    archive, jdk = class_data.archive.name, "classes.jsa"
    assert printed(result.stdout) == [
        "backlog timer not set", f"driver {jdk} {archive}", f"executor {jdk} {archive}",
        "executor imports pyspark from its environment"], result.stdout
    spark_app = spark_application(result.stderr)
    assert yarn_cluster.application_report(spark_app)["finalStatus"] == "SUCCEEDED"
    app_id = re.search(r"submitted (application_\d+_\d+)", result.stderr)[1]
    assert yarn_cluster.application_report(app_id)["finalStatus"] == "SUCCEEDED"


EXITS = """\
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("exits").getOrCreate()
print("counted", spark.range(10).count(), flush=True)
sys.exit(3)
"""

WAITS = """\
import sys, time
from pyspark import SparkContext
sc = SparkContext(appName="waits")
print("started", flush=True)
while True:
    sc.parallelize(range(4), 2).map(lambda x: time.sleep(1) or x).sum()
"""


def attached(session: str, script: Path, *options: str) -> subprocess.Popen:
    """An attached client running WAITS as `script` in the session."""
    script.write_text(WAITS)
    return subprocess.Popen(
        [sys.executable, "-m", "yarn_client", "run", "-t", "yarn-session", "--application-id",
         session, "--pyspark", *options, str(script)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])


def cancel(session: str, job_id: str, client: subprocess.Popen) -> None:
    """Cancels the job of an attached client, which must end with it CANCELED."""
    cancelled = flinkyarn("cancel", session, job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    out, err = client.communicate(timeout=120)
    assert client.returncode == 1 and "CANCELED" in out, err[-3000:]


def running_spark_application(session: str, script: str) -> tuple[str, str]:
    """(job, Spark application) of the running script, once it printed "started"."""
    def reported():
        for job in yarn_cluster.connect(session).jobs().jobs:
            details = yarn_cluster.connect(session).job(job.job_id)
            if job.name == f"PySpark script {script}" and details.status == "RUNNING" \
                    and details.spark_application and "started" in details.output_tail:
                return job.job_id, details.spark_application
        return None

    return wait_for(reported, 300, f"the Spark application of {script}", poll=1.0)


def test_exit_status_fails_the_job_and_cancel_leaves_nothing(session, tmp_path):
    exits = tmp_path / "exits.py"
    exits.write_text(EXITS)
    failed = submit(session, "-D", "pyspark.master=local", str(exits))
    assert failed.returncode == 1
    assert "counted 10" in failed.stdout
    assert "the script exited with status 3" in failed.stdout

    client = attached(session, tmp_path / "waits.py")
    try:
        job_id, spark_app = running_spark_application(session, "waits.py")
        wait_for(lambda: yarn_cluster.application_report(spark_app)["state"] == "RUNNING", 120,
                 "its Spark application running", poll=1.0)
        assert processes_mentioning("waits.py", containers=True)
        cancel(session, job_id, client)
    finally:
        client.kill()
    report = yarn_cluster.wait_for_end(spark_app, 60)
    assert report["state"] in ("KILLED", "FINISHED"), report
    assert processes_mentioning("waits.py", containers=True) == []
    wait_for(lambda: not running_containers(spark_app), 60, "no container of the Spark "
             "application running", poll=1.0)


def running_containers(app_id: str) -> list[str]:
    """The containers of `app_id` the NodeManagers run now."""
    import json
    import urllib.request

    found = []
    nodes = hadoop.rm_request("/ws/v1/cluster/nodes?states=RUNNING")["nodes"]["node"]
    for node in nodes:
        with urllib.request.urlopen(f"http://{node['nodeHTTPAddress']}/ws/v1/node/containers",
                                    timeout=10) as response:
            listed = (json.load(response).get("containers") or {}).get("container") or []
        found += [c["id"] for c in listed if app_id[len("application_"):] in c["id"]
                  and c.get("state") == "RUNNING"]
    return found


USES_FILES = """\
import helper
print(open("words.txt").read().strip(), helper.GREETING, open("bundle/inner/a.txt").read().strip())
"""


def test_files_archives_and_py_files_reach_the_driver_from_the_cache(session, tmp_path):
    import zipfile

    (tmp_path / "words.txt").write_text("from --files\n")
    (tmp_path / "helper.py").write_text("GREETING = 'from --py-files'\n")
    with zipfile.ZipFile(tmp_path / "bundle.zip", "w") as bundle:
        bundle.writestr("inner/a.txt", "from --archives\n")
    script = tmp_path / "uses_files.py"
    script.write_text(USES_FILES)
    ran = submit(session, "-D", "pyspark.master=local", "--files", str(tmp_path / "words.txt"),
                 "--py-files", str(tmp_path / "helper.py"),
                 "--archives", f"{tmp_path / 'bundle.zip'}#bundle", str(script))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert printed(ran.stdout) == ["from --files from --py-files from --archives"]


def test_a_driver_lost_with_its_taskexecutor_takes_its_spark_application_along(session, tmp_path):
    """The Spark application's AM runs in the driver (unmanaged): when the driver dies
    with its TaskExecutor and nothing of them can clean up (their node failed: here
    SIGKILL to the TaskExecutor and to the driver's process group, its JVM too), YARN
    would keep the application RUNNING until its AM expiry, ten minutes on. The
    JobMaster kills it. (A driver's JVM that outlives its Python driver stops its
    SparkContext and ends the application itself.)"""
    import signal

    client = attached(session, tmp_path / "orphan.py")
    try:
        _, spark_app = running_spark_application(session, "orphan.py")
        # The driver: python -m taskexecutor.spark.driver TASKEXECUTOR_PID SCRIPT
        [driver] = [p for p in processes_mentioning("taskexecutor.spark.driver", containers=True) if "orphan.py" in p]
        words = driver.split()
        task_executor = int(words[words.index("taskexecutor.spark.driver") + 1])
        os.killpg(int(driver.split(":")[0]), signal.SIGKILL)  # the driver leads its group
        os.kill(task_executor, signal.SIGKILL)
        out, err = client.communicate(timeout=180)
    finally:
        client.kill()
    assert client.returncode == 1 and "FAILED" in out, err[-3000:]
    report = yarn_cluster.wait_for_end(spark_app, 60)
    assert report["state"] == "KILLED", report
    wait_for(lambda: not running_containers(spark_app), 60, "no container of the Spark "
             "application running", poll=1.0)
    assert processes_mentioning("orphan.py", containers=True) == []


PROBE = """\
import os, sys
from pyspark import SparkConf, SparkContext

sc = SparkContext(conf=SparkConf().setAppName("probe"))  # the classic way: no context yet
print("args", sys.argv[1:], "app", sc.appName,
      "partitions", sc.getConf().get("spark.sql.shuffle.partitions", "unset"))
print("sum", sc.parallelize(range(100), 4).sum(), "stdin", repr(sys.stdin.read()))
print("warm", "warm-drivers" in os.getcwd())
sc.stop()
"""


def warm_drivers() -> set[int]:
    """Process ids of the warm drivers (python -m taskexecutor.spark.warm_driver PID)."""
    return {int(p.split(":")[0])
            for p in processes_mentioning("taskexecutor.spark.warm_driver", containers=True)}


def test_local_scripts_run_in_warm_drivers_as_in_drivers_of_their_own(hadoop, tmp_path):
    """Once a TaskExecutor ran a pyspark.master=local script, it keeps a driver started
    for the next one (pyspark's JVM up and warmed up by a SparkSession of its own). The
    next script runs in it as in a driver of its own: its arguments, its own SparkContext
    made the classic way with its own name and --conf, no input, its output and nothing
    of the warm-up; the driver is used once. A script whose JVM needs other settings
    (spark.driver.memory) starts its own. Cancel ends a warm driver's script and its JVM.
    A session of one slot: every script runs in its one TaskExecutor."""
    started = flinkyarn("session", "start", *FAST, "--tags", TAG,
                        "-D", "taskmanager.numberOfTaskSlots=1")
    assert started.returncode == 0, started.stderr[-4000:]
    session = started.stdout.strip().splitlines()[-1]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    local = ("-D", "pyspark.master=local")
    others = warm_drivers()  # of the module's session

    def mine() -> set[int]:
        return warm_drivers() - others

    try:
        assert mine() == set()
        first = submit(session, *local, str(probe), "one")
        assert first.returncode == 0, first.stderr[-3000:]
        assert printed(first.stdout) == ["args ['one'] app probe partitions unset",
                                         "sum 4950 stdin ''", "warm False"]
        ready = wait_for(mine, 60, "a warm driver after the first script")

        second = submit(session, *local, "--conf", "spark.sql.shuffle.partitions=7",
                        str(probe), "two", "2")
        assert second.returncode == 0, second.stderr[-3000:]
        assert printed(second.stdout) == ["args ['two', '2'] app probe partitions 7",
                                          "sum 4950 stdin ''", "warm True"]
        assert "WARNING" not in second.stderr  # the JVM's start-up line is the warm-up's
        wait_for(lambda: not any(group_alive(pid) for pid in ready), 30, "the used driver gone")
        ready = wait_for(mine, 60, "a warm driver after the second script")

        own = submit(session, *local, "--conf", "spark.driver.memory=600m", str(probe))
        assert own.returncode == 0, own.stderr[-3000:]
        assert printed(own.stdout)[-1] == "warm False"
        # Its driver took the one slot's memory, which the warm one held: that one ended.
        assert not any(group_alive(pid) for pid in ready)
        ready = wait_for(mine, 60, "a warm driver after the third script")

        client = attached(session, tmp_path / "waits_here.py", *local)
        try:
            def running() -> str | None:
                for job in yarn_cluster.connect(session).jobs().jobs:
                    if job.status == "RUNNING" and "started" in \
                            yarn_cluster.connect(session).job(job.job_id).output_tail:
                        return job.job_id
                return None

            job_id = wait_for(running, 120, "the waiting script running", poll=1.0)
            assert all(group_alive(pid) for pid in ready)
            cancel(session, job_id, client)
        finally:
            client.kill()
        wait_for(lambda: not any(group_alive(pid) for pid in ready), 30,
                 "the cancelled script's warm driver and its JVM gone")
    finally:
        flinkyarn("session", "stop", session)
    wait_for(lambda: mine() == set(), 30, "no warm driver after the session")
