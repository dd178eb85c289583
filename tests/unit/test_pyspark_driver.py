"""The pure parts of running PySpark scripts: the bounded output log of a job, what an
attached client prints of it, spark-submit's options, and the driver's helpers."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flinkyarn import hadoop, retry
from flinkyarn.gateways.dispatcher import JobOutputView, OutputLine
from flinkyarn.configuration import Configuration
from flinkyarn.pipeline.pyspark_script import PySparkScript, PySparkSettings
from flinkyarn.spark.class_data import SparkClassData
from taskexecutor.spark import driver, pyspark_patches
from taskexecutor.spark.script_task import (PySparkDriver, driver_conf, last_traceback,
                                          log4j2_properties, proxied, submit_args)
from yarn_am.jobmaster.job_output import JobOutput
from yarn_client.executors import OutputPrinter
from yarn_client.spark_submit import (SparkSubmitError, SparkSubmitOptions, master, memory_mib,
                                      spark_conf)

REPO = Path(__file__).resolve().parents[2]


def test_output_is_read_after_the_last_number_seen_and_bounded():
    output = JobOutput(limit_chars=10)
    output.append("stdout", "abc\n")
    output.append("stderr", "warn\n")
    first = output.read(0, now=1.0)
    assert [(line.seq, line.stream, line.text) for line in first.lines] == [
        (0, "stdout", "abc\n"), (1, "stderr", "warn\n")]
    assert first.next == 2 and first.missed == 0
    assert output.read(first.next, now=2.0).lines == []
    output.append("stdout", "0123456789\n")   # over the bound: the oldest go
    late = output.read(2, now=3.0)
    assert [line.text for line in late.lines] == ["0123456789\n"]
    fresh = output.read(0, now=4.0)           # a reader from the start missed some
    assert fresh.missed == 9 and fresh.lines[0].seq == 2
    assert output.read_up_to == 2 and output.last_read == 4.0


def test_tail_is_the_last_lines_of_both_streams():
    output = JobOutput()
    for i in range(30):
        output.append("stdout" if i % 2 else "stderr", f"line {i}\n")
    assert output.tail(3) == "line 27\nline 28\nline 29"
    assert JobOutput().tail() == ""


class Pages:
    def __init__(self, *views: JobOutputView) -> None:
        self.views = list(views)
        self.asked: list[int] = []

    def output(self, job_id: str, after: int) -> JobOutputView:
        self.asked.append(after)
        return self.views.pop(0) if self.views else JobOutputView([], after)


def test_the_client_writes_each_stream_where_it_belongs_unprefixed():
    rest = Pages(JobOutputView([OutputLine(0, "stdout", "Pi is "), OutputLine(1, "stderr", "oops\n")], 2),
                 JobOutputView([OutputLine(2, "stdout", "roughly 3.14\n")], 3, missed=0))
    stdout, stderr = io.StringIO(), io.StringIO()
    OutputPrinter(rest, "j", stdout, stderr).pump()
    assert stdout.getvalue() == "Pi is roughly 3.14\n"
    assert stderr.getvalue() == "oops\n"
    assert rest.asked == [0, 2, 3]


def test_a_reader_that_fell_behind_is_told():
    stderr = io.StringIO()
    OutputPrinter(Pages(JobOutputView([OutputLine(7, "stdout", "x\n")], 8, missed=120)), "j",
                  io.StringIO(), stderr).pump()
    assert "120 characters of output were dropped" in stderr.getvalue()


def test_spark_submit_options_become_spark_settings():
    submit = SparkSubmitOptions(confs=("spark.sql.shuffle.partitions=7", "spark.x=a=b"),
                                num_executors=2, executor_cores=3, executor_memory="2g",
                                driver_memory="1536m", name="pi", queue="etl")
    assert spark_conf(submit, {"spark.y": "1", "taskmanager.x": "2"}) == {
        "spark.y": "1", "spark.sql.shuffle.partitions": "7", "spark.x": "a=b",
        "spark.executor.instances": "2", "spark.executor.cores": "3",
        "spark.executor.memory": "2g", "spark.driver.memory": "1536m", "spark.app.name": "pi",
        "spark.yarn.queue": "etl"}
    assert memory_mib("2g", "--x") == 2048 and memory_mib("512m", "--x") == 512
    assert memory_mib("1024", "--x") == 1024
    assert master(SparkSubmitOptions(), {}, yarn_target=True) == "yarn"
    assert master(SparkSubmitOptions(), {}, yarn_target=False) == "local"
    assert master(SparkSubmitOptions(), {"pyspark.master": "local"}, yarn_target=True) == "local"
    assert master(SparkSubmitOptions(master="local[3]"), {}, yarn_target=False) == "local[3]"
    with pytest.raises(SparkSubmitError, match="unknown Spark master 'mesos://x'"):
        master(SparkSubmitOptions(master="mesos://x"), {}, yarn_target=True)


def test_driver_helpers():
    lines = ["noise", "Traceback (most recent call last):", '  File "a.py", line 1',
             "ValueError: first", "more", "Traceback (most recent call last):",
             '  File "b.py", line 2', "KeyError: 'second'"]
    assert last_traceback(lines) == "\n".join(lines[5:])
    assert last_traceback(["a", "b"]) == "a\nb"
    quiet = log4j2_properties("/logs/spark-j.log", console=False)
    assert "fileName = /logs/spark-j.log" in quiet and "Console" not in quiet
    assert "threshold.level = warn" in log4j2_properties("/l", console=True)
    # pyspark's JVM is PythonGatewayServer: at the root's level it prints no "Setting
    # default log level" line to the script's stderr.
    assert "logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer" in quiet


SITE = "<configuration><property><name>{}</name><value>{}</value></property></configuration>"


def test_spark_on_yarn_settings_follow_the_hadoop_configuration(tmp_path, monkeypatch):
    """The Spark AM runs in the driver but on a Kerberos cluster; the HDFS client's quick
    retries go in unless the cluster's hdfs-site.xml sets them; the user's --conf wins."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "core-site.xml").write_text("<configuration/>")
    retries = "dfs.client.block.write.locateFollowingBlock.retries"
    delay = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
    (conf_dir / "hdfs-site.xml").write_text(SITE.format(retries, "3"))
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))

    def spark_conf(**user: str) -> dict[str, str]:
        script = PySparkScript("pi.py", "", settings=PySparkSettings(
            master="yarn", spark_conf={k.replace("_", "."): v for k, v in user.items()}))
        context = SimpleNamespace(attempt_id="a1", job_id="j1", environment=SimpleNamespace(
            conf=Configuration({}), tmp_dir=str(tmp_path)))
        return PySparkDriver(script, context).spark_conf(tmp_path, tmp_path)

    plain = spark_conf()
    assert plain["spark.yarn.unmanagedAM.enabled"] == "true"
    assert plain["spark.dynamicAllocation.schedulerBacklogTimeout"] == "15s"
    assert plain["spark.dynamicAllocation.sustainedSchedulerBacklogTimeout"] == "5s"
    assert spark_conf(spark_dynamicAllocation_schedulerBacklogTimeout="1s")[
        "spark.dynamicAllocation.schedulerBacklogTimeout"] == "1s"
    assert "spark.dynamicAllocation.enabled" not in spark_conf(spark_executor_instances="2")
    assert plain[f"spark.hadoop.{delay}"] == "20" and f"spark.hadoop.{retries}" not in plain
    assert spark_conf(spark_yarn_unmanagedAM_enabled="false")[
        "spark.yarn.unmanagedAM.enabled"] == "false"
    (conf_dir / "core-site.xml").write_text(SITE.format("hadoop.security.authentication",
                                                        "kerberos"))
    assert spark_conf()["spark.yarn.unmanagedAM.enabled"] == "false"


def test_a_driver_maps_the_taskexecutors_class_data_archive(tmp_path, monkeypatch, spark_home):
    """In a container, the shipped one, its jars named as the archive names them, through
    an `environment` link in the driver's working folder; the user's class path follows
    ours; none where the user's files take the name. Outside a container, this machine's,
    whose class path is the Spark home's, as the TaskExecutor's."""
    from flinkyarn.spark import class_data
    from tests.unit.test_spark_cds import environment

    container, work = tmp_path / "container", tmp_path / "container" / "task"
    work.mkdir(parents=True)
    environment(container / "environment")
    monkeypatch.chdir(container)
    key = class_data.portable_key(Path("environment"))
    (container / f"spark-{key}.jsa").write_bytes(b"archive")
    settings = PySparkSettings(master="local", spark_conf={"spark.driver.extraClassPath": "my.jar"})

    monkeypatch.delenv("CONTAINER_ID", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    local = SparkClassData.from_configuration(Configuration({}))
    local.folder.mkdir(parents=True)
    local.archive.write_bytes(b"archive")
    outside = driver_conf(Configuration({}), settings, work, tmp_path / "log")
    assert outside["spark.driver.extraClassPath"] == "my.jar"
    assert f"-XX:SharedArchiveFile={local.archive}" in outside["spark.driver.extraJavaOptions"]
    assert not (work / "work").exists()
    assert "SharedArchiveFile" not in driver_conf(Configuration(
        {"taskmanager.spark.cds.dir": ""}), settings, work, tmp_path / "log")["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000002")
    conf = driver_conf(Configuration({}), settings, work, tmp_path / "log")
    class_path = conf["spark.driver.extraClassPath"].split(":")
    assert class_path[-1] == "my.jar" and len(class_path) == 3
    assert all((work / "work" / jar).is_file() for jar in class_path[:2]), \
        "named from the driver's folder"
    assert class_path[0].startswith("environment/")
    assert f"-XX:SharedArchiveFile={container / f'spark-{key}.jsa'}" in conf["spark.driver.extraJavaOptions"]
    assert driver_conf(Configuration({}), settings, work, tmp_path / "log") == conf, "again, alike"
    for taken in (PySparkSettings(master="local", archives=[("hdfs:///env.tgz", "environment")]),
                  PySparkSettings(master="local", files=["hdfs:///a/b#environment"]),
                  PySparkSettings(master="local", working_dir=str(tmp_path))):
        other = tmp_path / "other"
        other.mkdir(exist_ok=True)
        conf = driver_conf(Configuration({}), taken, other, tmp_path / "log")
        assert "spark.driver.extraClassPath" not in conf and not (other / "work").exists()


def test_spark_executors_map_the_archive_beside_the_same_environment(tmp_path, monkeypatch):
    """On YARN, Spark's executors get the archive the TaskExecutor maps (localized beside
    their `environment`, its jars named alike, the user's settings after ours), and only
    when they run that environment."""
    from flinkyarn.spark import class_data
    from tests.unit.test_spark_cds import environment

    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "core-site.xml").write_text("<configuration/>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "conf"))
    environment(tmp_path / "environment")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000002")
    name = f"spark-{class_data.portable_key(Path('environment'))}.jsa"
    (tmp_path / name).write_bytes(b"archive")
    uri = f"hdfs://nn/user/u/.flinkyarn/cache/{name}"

    def spark_conf(python_archive: str, class_data: str = uri, **user: str) -> dict[str, str]:
        script = PySparkScript("pi.py", "", settings=PySparkSettings(
            master="yarn", spark_conf={k.replace("_", "."): v for k, v in user.items()}))
        conf = Configuration({"pyspark.yarn.python-archive": python_archive,
                              "pyspark.yarn.class-data-archive": class_data})
        context = SimpleNamespace(attempt_id="a1", job_id="j1", environment=SimpleNamespace(
            conf=conf, tmp_dir=str(tmp_path)))
        (tmp_path / "work").mkdir(exist_ok=True)
        return PySparkDriver(script, context).spark_conf(tmp_path / "work", tmp_path)

    conf = spark_conf("hdfs://nn/cache/environment-1.tar#environment",
                      spark_yarn_dist_files="hdfs://nn/f.txt#f.txt",
                      spark_executor_extraJavaOptions="-Xshare:on")
    assert conf["spark.yarn.dist.files"] == f"{uri},hdfs://nn/f.txt#f.txt"
    jars = conf["spark.executor.extraClassPath"].split(":")
    assert len(jars) == 2 and all(jar.startswith("environment/lib/") for jar in jars)
    options = conf["spark.executor.extraJavaOptions"].split()
    assert options[0] == f"-XX:SharedArchiveFile={name}" and options[-1] == "-Xshare:on"
    for other in (spark_conf("hdfs://nn/other.tar#other"),   # another Python: other jars
                  spark_conf("hdfs://nn/cache/environment-1.tar#environment", class_data=""),
                  spark_conf("hdfs://nn/cache/environment-1.tar#environment",
                             class_data="hdfs://nn/spark-portable-another.jsa")):
        assert "spark.executor.extraClassPath" not in other
        assert "SharedArchiveFile" not in other.get("spark.executor.extraJavaOptions", "")


def test_an_unmanaged_spark_am_is_linked_through_the_proxy(monkeypatch):
    """The RM reports an unmanaged AM's tracking URL as registered (the driver's UI on
    its node); the job links it through YARN's web proxy, as any other application."""
    monkeypatch.setattr(hadoop, "rm_web_address", lambda directory=None: "http://rm:8088")
    unmanaged = {"id": "application_1_0002", "trackingUrl": "http://node7:4040",
                 "unmanagedApplication": True}
    assert proxied(unmanaged)["trackingUrl"] == "http://rm:8088/proxy/application_1_0002/"
    managed = {"id": "application_1_0003", "unmanagedApplication": False,
               "trackingUrl": "http://rm-host:8088/proxy/application_1_0003/"}
    assert proxied(managed) == managed
    accepted = {"id": "application_1_0004", "unmanagedApplication": True, "trackingUrl": ""}
    assert proxied(accepted) == accepted  # not registered yet: nothing to link


@pytest.mark.parametrize("master, on_yarn", [("yarn", True), ("local", False),
                                              ("spark://host:7077", False)])
def test_the_launcher_guards_only_drivers_on_yarn_against_sparks_ui_race(master, on_yarn):
    """The driver's PYSPARK_SUBMIT_ARGS tell the launcher whether Spark's YARN AM will
    race the UI (tests/local/test_pyspark_scripts.py has the race itself)."""
    args = submit_args(Configuration({}), PySparkSettings(master=master), {"spark.app.name": "yarn"})
    assert driver.on_yarn(args) is on_yarn


def test_a_contexts_stop_does_not_wait_for_its_accumulator_servers_thread(monkeypatch):
    """pyspark's accumulator server serves a connection in its own thread and sees the
    shutdown flag only when the handler's one-second poll ends; the launcher's shutdown
    returns at once and leaves that wait to a daemon thread, which still ends the server.
    Here the handler is held in the middle of an update (a count sent, not the update),
    so the server's thread cannot end before the test lets it, however slow the machine."""
    import pickle
    import socket
    import threading

    from pyspark import accumulators

    for server_class in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        monkeypatch.setattr(server_class, "shutdown", server_class.shutdown)  # restored after
    pyspark_patches.stop_without_waiting()
    server = accumulators.AccumulatorTCPServer(("localhost", 0), accumulators.UpdateRequestHandler,
                                               "token")
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    client = socket.create_connection(server.server_address)  # as the JVM's
    try:
        client.sendall(b"token" + (0).to_bytes(4, "big"))  # signed in, no updates
        assert client.recv(1) == b"\x01"  # acknowledged: the handler polls for more
        client.sendall((1).to_bytes(4, "big"))  # one update follows: the handler reads it

        def reading_the_update() -> bool:
            frame = sys._current_frames().get(serving.ident)
            while frame is not None and frame.f_code.co_name != "_read_with_length":
                frame = frame.f_back
            return frame is not None

        retry.poll_until(reading_the_update, bool, pauses=retry.Backoff.fixed(0.01),
                         deadline=retry.Deadline(10))
        stopping = threading.Thread(target=server.shutdown, daemon=True)
        stopping.start()
        stopping.join(timeout=30)
        assert not stopping.is_alive(), "shutdown() waited for the server's thread"
        retry.poll_until(lambda: server.server_shutdown, bool, pauses=retry.Backoff.fixed(0.05),
                         deadline=retry.Deadline(10))
        assert serving.is_alive()  # still reading the update
        update = pickle.dumps((-1, 0))  # for no accumulator of this process
        client.sendall(len(update).to_bytes(4, "big") + update)
        assert client.recv(1) == b"\x01"
        serving.join(timeout=10)  # the handler saw the flag: the server ended
        assert not serving.is_alive()
        retry.poll_until(lambda: server.socket.fileno() == -1, bool,  # closed
                         pauses=retry.Backoff.fixed(0.05), deadline=retry.Deadline(10))
    finally:
        client.close()


def test_the_worker_daemon_takes_sparks_zips_off_the_path_only_for_the_same_pyspark(tmp_path):
    """taskexecutor/spark/daemon.py, in a Python started as Spark starts its daemon
    (Spark's zips first on PYTHONPATH): pyspark then comes from the installed package;
    a zip of another version (here a made one) stays, and pyspark comes from it."""
    import pyspark
    import zipfile

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    probe = ("from taskexecutor.spark.daemon import drop_spark_zips\n"
             "dropped = drop_spark_zips()\n"
             "import pyspark, py4j\n"
             "print(len(dropped), '.zip' in pyspark.__file__, '.zip' in py4j.__file__)\n")

    def run(python_path: list[str]) -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*python_path, str(REPO)])}
        return subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=True).stdout.strip()

    assert run(zips) == "2 False False"
    other = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(other, "w") as made:
        made.writestr("pyspark/__init__.py", "")
        made.writestr("pyspark/version.py", "__version__ = '0.0.1'\n")
    assert run([str(other), *zips[1:]]) == "1 True False"
