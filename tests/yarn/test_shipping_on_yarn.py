"""Nothing from the submitting machine but what YARN ships: on the test cluster's nodes
(`integration/cluster up --nodes 2`: each its own address, its own /tmp, the client's
checkout and home hidden), flinkyarn's containers run the shipped environment, find
each other by the hosts YARN put them on, and leave nothing behind."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

import local_hadoop
from flinkyarn import runtime_check
from flinkyarn.connectors.filesystems import read_parquet
from tests.waiting import wait_for
from tests.unit.test_shipping import _other_python
from yarn_client import shipping, yarn_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import make_corpus  # noqa: E402

TAG = f"flinkyarn-test-{uuid.uuid4().hex[:8]}"
FAST = ["-D", "heartbeat.interval=1 s", "-D", "heartbeat.timeout=10 s"]
# One slot per TaskExecutor, and containers so large that a node (6144 MB) holds the
# AppMaster and one TaskExecutor but not two: a job of parallelism 2 spreads over two nodes.
SPREAD = ["-D", "taskmanager.numberOfTaskSlots=1", "-D", "taskmanager.memory.process.size=3500 mb"]


@pytest.fixture(scope="module")
def nodes(hadoop):
    found = local_hadoop.cluster_nodes(hadoop, local_hadoop.recorded_node_count(hadoop))
    yield found
    leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
    for app in leftovers:
        yarn_cluster.kill(app["id"])
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def flinkyarn(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "yarn_client", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout, env=env)


LOGS_AGGREGATED = ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED")
"""YARN's log aggregation states of an application after which no node adds logs."""


def application_logs(app_id: str, expect: str, count: int = 1) -> str:
    """The aggregated logs of an ended application once every node has handed in its
    logs (each node aggregates on its own: an early read may lack the AppMaster's) and
    `expect` shows `count` times."""
    found = {}

    def aggregated():
        report = yarn_cluster.application_report(app_id)
        if report.get("logAggregationStatus", "SUCCEEDED") not in LOGS_AGGREGATED:
            return False
        result = subprocess.run(["yarn", "logs", "-applicationId", app_id],
                                capture_output=True, text=True)
        found["text"] = result.stdout
        return result.stdout.count(expect) >= count

    wait_for(aggregated, 120, f"{count} x {expect!r} in the logs of {app_id}", poll=2.0)
    return found["text"]


def node_files(nodes) -> set[str]:
    """Every file in the isolated nodes' /tmp (a shared node's /tmp is the machine's),
    but for the JVMs' performance data (each live JVM of the node keeps a file there, which
    the next JVM removes once its process is gone: a container of the test before may still
    be ending when this one starts)."""
    return {str(p) for node in nodes if node.tmp for p in node.tmp.rglob("*")
            if not any(part.startswith("hsperfdata_") for part in p.relative_to(node.tmp).parts)}


def test_per_job_wordcount_spreads_over_the_nodes_with_exact_counts(nodes, class_data, tmp_path):
    corpus = tmp_path / "corpus.txt"
    make_corpus.write_corpus(corpus, 0.3, seed=5)
    base = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    subprocess.run(["hdfs", "dfs", "-mkdir", "-p", f"{base}/in"], check=True)
    subprocess.run(["hdfs", "dfs", "-put", str(corpus), f"{base}/in/"], check=True)
    before = node_files(nodes)

    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, *SPREAD, "--tags", TAG,
                       "--name", "wc test", "examples/wordcount.py", "--input", f"{base}/in",
                       "--output", f"{base}/out")

    assert result.returncode == 0, result.stderr[-4000:]
    [app] = yarn_cluster.flinkyarn_applications(states=("FINISHED",), tag=TAG)
    assert (app["name"], app["applicationType"], app["finalStatus"]) == \
        ("wc test", "flinkyarn", "SUCCEEDED")
    assert "FINISHED" in app["diagnostics"]
    for phase in ("submitted", "accepted", "running", "AppMaster up"):
        assert phase in result.stderr
    table = read_parquet(f"{base}/out")
    expected = collections.Counter(re.findall(r"[a-z0-9]+", corpus.read_text().lower()))
    assert dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist())) == expected

    # Again into the same output: refused before anything is shipped or submitted.
    again = flinkyarn("run", "-t", "yarn-per-job", *FAST, *SPREAD, "--tags", TAG,
                      "examples/wordcount.py", "--input", f"{base}/in", "--output", f"{base}/out")
    assert again.returncode == 2, again.stderr[-3000:]
    assert f"error: output {base}/out exists and is not empty" in again.stderr
    assert "shipping" not in again.stderr and "submitted" not in again.stderr
    every_state = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED",
                   "FAILED", "KILLED")
    assert [a["id"] for a in yarn_cluster.flinkyarn_applications(every_state, tag=TAG)] == \
        [app["id"]]

    logs = application_logs(app["id"], "TaskExecutor taskexecutor-", 2)
    # The first TaskExecutor started with the AppMaster and was adopted; only the second
    # was asked of YARN by the ResourceManager.
    assert "TaskExecutor taskexecutor-0 registered" in logs
    assert len(re.findall(r"requested worker taskexecutor-", logs)) == 1, logs[-3000:]
    started = re.findall(r"serving on (\S+):\d+ \(data (\S+):\d+\), \d+ slots, python (\S+)", logs)
    assert len(started) == 2, logs[-3000:]
    hosts = {rpc for rpc, _, _ in started}
    assert hosts == {rpc for _, rpc, _ in started}, "RPC and data on the same host"
    if len(nodes) > 1:
        assert hosts == {node.host for node in nodes}, "one TaskExecutor on each node"
    for _, _, python in started:
        assert python.endswith("/environment/bin/python"), python
        assert not python.startswith(str(REPO / ".venv")), "the client's interpreter"
        assert any(python.startswith(str(node.local_dirs)) for node in nodes), python
    # Each TaskExecutor's Spark JVM mapped the archive the client made for the environment
    # it shipped (as its memory map says), with its jars where that node unpacked them.
    mapped = re.findall(r"the Spark JVM maps its class-data archive (\S+)", logs)
    assert len(mapped) == 2 and {Path(m).name for m in mapped} == {class_data.archive.name}, \
        logs[-3000:]
    assert "refused its class-data archive" not in logs
    assert node_files(nodes) <= before, "files left in a node's /tmp"


def test_a_second_submit_of_the_same_environment_uploads_nothing(nodes, class_data, tmp_path):
    program = tmp_path / "hello.py"
    program.write_text("from flinkyarn.job import JobBuilder\n"
                       "job = JobBuilder('hello')\n"
                       "job.add_vertex('hello', lambda ctx: print('hello'), parallelism=1)\n"
                       "job.execute()\n")
    first = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG, str(program))
    second = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG, str(program))

    assert first.returncode == 0, first.stderr[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Python environment" in second.stderr
    assert "uploading" not in second.stderr, second.stderr
    # The environment, the Spark JVM's class-data archive for it, our code, skein's jar
    # (which skein's driver would upload to every application's folder) and our agent
    # for skein's ApplicationMaster.
    assert second.stderr.count("cached, nothing to upload") == 5, second.stderr
    assert "Spark class-data archive: cached" in second.stderr
    assert "skein's ApplicationMaster: cached" in second.stderr
    assert "flinkyarn's agent for skein: cached" in second.stderr


def _wrong_python_archive(tmp_path: Path) -> tuple[Path, str]:
    """A virtual environment of another Python (another interpreter of this machine, or
    else one no node has), packed as a user would: its interpreter link is absolute."""
    env = tmp_path / "wrong-env"
    other = _other_python()
    if other:
        subprocess.run([other, "-m", "venv", "--without-pip", str(env)], check=True)
        version = subprocess.run([str(env / "bin" / "python"), "-c",
                                  "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    else:
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "python").symlink_to("/usr/bin/python3.99")
        (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.99.0\n")
        version = "3.99.0"
    archive = tmp_path / "wrong-env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env, arcname=".")
    return archive, version


def test_an_archive_for_another_python_fails_the_application_naming_both(nodes, tmp_path):
    archive, version = _wrong_python_archive(tmp_path)
    program = tmp_path / "hello.py"
    program.write_text("from flinkyarn.job import JobBuilder\n"
                       "job = JobBuilder('hello')\n"
                       "job.add_vertex('hello', lambda ctx: None, parallelism=1)\n"
                       "job.execute()\n")

    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG,
                       "-pyarch", f"{archive}#wrongenv", "-pyexec", "wrongenv/bin/python",
                       str(program), timeout=300)

    assert result.returncode == 1
    app_id = re.search(r"submitted (application_\d+_\d+)", result.stderr)[1]
    [app] = [a for a in yarn_cluster.flinkyarn_applications(states=("FINISHED", "FAILED"), tag=TAG)
             if a["id"] == app_id]  # not another test's that failed
    assert app["finalStatus"] == "FAILED", app
    client = "%d.%d.%d" % sys.version_info[:3]
    assert runtime_check.MARKER in app["diagnostics"], app["diagnostics"]
    assert version in app["diagnostics"] and client in app["diagnostics"], app["diagnostics"]
    assert runtime_check.MARKER in result.stderr, "the user is told too"
    # It ended at the first TaskExecutor's failure, that of the container YARN started
    # with the application (however early it failed): no replacement was asked for.
    logs = application_logs(app["id"], "LogType:", 1)
    containers = set(re.findall(r"Container: (container_\w+)", logs))
    assert len(containers) <= 2, f"{sorted(containers)}: too many for a failure that cannot heal"
    # Nor another AppMaster attempt, which would meet the same environment.
    assert {c.split("_")[3] for c in containers} == {"01"}, sorted(containers)


def test_a_session_is_reached_from_another_home(nodes, tmp_path):
    started = flinkyarn("session", "start", "--tags", TAG, *FAST)
    assert started.returncode == 0, started.stderr[-3000:]
    app_id = started.stdout.strip().splitlines()[-1]
    stranger = tmp_path / "another-home"
    stranger.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FLINKYARN_HOME"}
    env["HOME"] = str(stranger)
    program = tmp_path / "sleeper.py"
    program.write_text("from flinkyarn.job import JobBuilder\n"
                       "def sleep(ctx):\n"
                       "    while True:\n"
                       "        ctx.sleep(0.5)\n"
                       "job = JobBuilder('sleeper')\n"
                       "job.add_vertex('sleep', sleep, parallelism=1)\n"
                       "job.execute()\n")
    try:
        submit = subprocess.Popen([sys.executable, "-m", "yarn_client", "run", "-t", "yarn-session",
                                   "--application-id", app_id, str(program)],
                                  cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        job_ids = {}

        def running():
            listed = flinkyarn("list", app_id, env=env)
            assert listed.returncode == 0, listed.stderr
            job_ids.update(re.findall(r"^\s+([0-9a-f]{32})\s+(RUNNING)", listed.stdout, re.M))
            return bool(job_ids)

        wait_for(running, 180, "the job listed as RUNNING from the other home")
        [job_id] = job_ids
        cancel = flinkyarn("cancel", app_id, job_id, env=env)
        assert cancel.returncode == 0, cancel.stderr
        out, err = submit.communicate(timeout=120)
        assert submit.returncode == 1 and "CANCELED" in out + err, out + err
        assert (stranger / ".flinkyarn" / "applications" / app_id / "security").stat().st_mode & 0o077 == 0
    finally:
        stopped = flinkyarn("session", "stop", app_id)
    assert stopped.returncode == 0, stopped.stderr


def test_another_user_cannot_read_the_credentials(nodes):
    started = flinkyarn("session", "start", "--tags", TAG, *FAST)
    assert started.returncode == 0, started.stderr[-3000:]
    app_id = started.stdout.strip().splitlines()[-1]
    try:
        info = json.loads((yarn_cluster.application_dir(app_id) / "cluster.json").read_text())
        intruder = subprocess.run(["hdfs", "dfs", "-cat", f"{info['credentials']}/key.pem"],
                                  capture_output=True, text=True,
                                  env={**os.environ, "HADOOP_USER_NAME": "intruder"})
        assert intruder.returncode != 0
        assert "Permission denied" in intruder.stderr, intruder.stderr
        mine = subprocess.run(["hdfs", "dfs", "-cat", f"{info['credentials']}/key.pem"],
                              capture_output=True, text=True)
        assert "PRIVATE KEY" in mine.stdout
    finally:
        stopped = flinkyarn("session", "stop", app_id)
    assert stopped.returncode == 0, stopped.stderr


def _hello(tmp_path: Path) -> Path:
    program = tmp_path / "hello.py"
    program.write_text("from flinkyarn.job import JobBuilder\n"
                       "job = JobBuilder('hello')\n"
                       "job.add_vertex('hello', lambda ctx: print('hello'), parallelism=1)\n"
                       "job.execute()\n")
    return program


def _cached_archives(stderr: str) -> dict[str, str]:
    """What a submit says it found cached: {'environment': uri, 'flinkyarn code': uri}."""
    found = dict(re.findall(r"^\s+(Python environment|flinkyarn code)\S*.*?: cached, nothing to "
                            r"upload \((\S+)\)", stderr, re.M))
    return {("environment" if k.startswith("Python") else k): v for k, v in found.items()}


def test_a_prepared_archive_runs_the_task_executors(nodes, tmp_path):
    program = _hello(tmp_path)
    first = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG, str(program))
    assert first.returncode == 0, first.stderr[-3000:]
    environment = re.search(r"(hdfs://\S+/environment-\w+\.tar)", first.stderr).group(1)

    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG,
                       "-pyarch", f"{environment}#prepared", "-pyexec", "prepared/bin/python",
                       str(program))

    assert result.returncode == 0, result.stderr[-3000:]
    # (The stderr may also name ended applications whose leftovers the client swept.)
    app_id = re.search(r"submitted (application_\d+_\d+)", result.stderr).group(1)
    logs = application_logs(app_id, "TaskExecutor taskexecutor-")
    [python] = re.findall(r"slots, python (\S+)", logs)
    assert python.endswith("/prepared/bin/python"), python


def test_archives_in_provided_lib_dirs_are_not_uploaded(nodes, tmp_path):
    """The code archive, packed here into a provided folder, is taken from there (not
    from the cache, not uploaded); the environment still comes from the cache (a new
    environment archive would cost each node a minute of localizing)."""
    program = _hello(tmp_path)
    name = f"flinkyarn-code-{shipping.code_digest()}.tar.gz"
    packed = shipping.pack_code(tmp_path, name)
    provided = f"/tmp/flinkyarn-tests/provided-{uuid.uuid4().hex[:8]}"
    subprocess.run(["hdfs", "dfs", "-mkdir", "-p", provided], check=True)
    subprocess.run(["hdfs", "dfs", "-put", str(packed), f"{provided}/{name}"], check=True)

    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG,
                       "-D", f"yarn.provided.lib.dirs=hdfs://{provided}", str(program))

    assert result.returncode == 0, result.stderr[-3000:]
    assert "flinkyarn code: packed" not in result.stderr, result.stderr
    found = _cached_archives(result.stderr)
    assert found["flinkyarn code"].endswith(f"{provided}/{name}"), found
    assert "/cache/" in found["environment"], found
    subprocess.run(["hdfs", "dfs", "-rm", "-r", "-f", "-skipTrash", provided], check=False)


def test_py_files_and_files_reach_every_container(nodes, tmp_path):
    """A module of --py-files (not beside the program, so pickled by reference) imports
    in the TaskExecutor as on the client; a --files file is in the container's folder."""
    library = tmp_path / "lib"
    library.mkdir()
    (library / "greeting.py").write_text("def word():\n    return 'shipped'\n")
    (tmp_path / "motto.txt").write_text("nothing but what YARN ships\n")
    out = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    program = tmp_path / "program" / "uses_files.py"
    program.parent.mkdir()
    program.write_text(
        "import sys, greeting\n"
        "from flinkyarn.job import JobBuilder\n"
        "from flinkyarn.connectors.filesystems import resolve\n"
        "target = sys.argv[1]\n"
        "def work(ctx):\n"
        "    fs, path = resolve(target)\n"
        "    with fs.open_output_stream(path) as out:\n"
        "        out.write((greeting.word() + ' ' + open('motto.txt').read()).encode())\n"
        "job = JobBuilder('uses files')\n"
        "job.add_vertex('work', work, parallelism=1)\n"
        "job.execute()\n")

    result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", TAG,
                       "--py-files", str(library), "--files", str(tmp_path / "motto.txt"),
                       str(program), f"{out}/result.txt")

    assert result.returncode == 0, result.stderr[-3000:]
    written = subprocess.run(["hdfs", "dfs", "-cat", f"{out}/result.txt"], capture_output=True,
                             text=True, check=True).stdout
    assert written == "shipped nothing but what YARN ships\n"
