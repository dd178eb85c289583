"""The bookkeeping of a TaskExecutor's warm PySpark drivers (taskexecutor/warm_drivers.py)
with a stand-in process for the driver (the real one, pyspark's JVM and all, runs in
tests/yarn/test_pyspark_on_yarn.py): none before a script wanted one, never more than
free slots, handed only to a script launched alike, ended when a slot's memory is
taken, when dead, and at close; none in a per-job cluster of one script."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.pipeline.pyspark_script import PySparkSettings
from taskexecutor import warm_drivers
from taskexecutor.pyspark_driver import driver_conf, driver_environment, yarn_conf
from taskexecutor.warm_drivers import WarmDrivers

WAITS = [sys.executable, "-c", "import sys; sys.stdin.readline()"]


@pytest.fixture
def pool(tmp_path, monkeypatch):
    monkeypatch.setattr(warm_drivers, "REPLENISH_DELAY", 0.0)
    drivers = WarmDrivers(Configuration({}), tmp_path / "scratch")
    drivers.command = WAITS
    yield drivers
    drivers.close()


def settled(pool: WarmDrivers, ready: int) -> list:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pool._timer is None and len(pool._ready) == ready:
            return list(pool._ready)
        time.sleep(0.02)
    raise AssertionError(f"{len(pool._ready)} ready drivers, not {ready}")


def settings_for(settings: PySparkSettings, log: Path):
    def make(folder: Path):
        master = yarn_conf(Configuration({}), ["flinkyarn-task-a1"]) \
            if settings.master == "yarn" else None
        conf = driver_conf(Configuration({}), settings, folder, log, master)
        return conf, driver_environment(Configuration({}), settings, conf, folder)
    return make


def test_drivers_wait_for_a_script_that_wanted_one_and_only_in_free_slots(pool, tmp_path):
    pool.replenish()                      # a slot was freed: no script wanted one yet
    assert settled(pool, 0) == []
    free = [0]
    pool.free_slots = lambda: free[0]
    pool.used()                           # a script ran that could have run warm
    assert settled(pool, 0) == []         # but no slot is free
    free[0] = 2
    pool.replenish()
    [driver] = settled(pool, 1)           # pyspark.warm-drivers: 1
    assert driver.process.poll() is None and (driver.folder / "work").is_dir()


def test_a_driver_goes_to_a_script_launched_alike_with_its_settings(pool, tmp_path):
    pool.used()
    [driver] = settled(pool, 1)
    log = tmp_path / "spark-job.log"
    # spark.driver.memory is the JVM's heap, fixed at its start: not this driver's.
    big = PySparkSettings(spark_conf={"spark.driver.memory": "3g"})
    assert pool.take(big, settings_for(big, log)) is None
    assert settled(pool, 1) == [driver]
    seven = PySparkSettings(spark_conf={"spark.sql.shuffle.partitions": "7"})
    taken = pool.take(seven, settings_for(seven, log))
    assert taken is not None
    got, conf, env = taken
    assert got is driver and pool._ready == []
    assert conf["spark.sql.shuffle.partitions"] == "7"
    assert conf["spark.local.dir"] == str(driver.folder / "local")
    assert str(log) in (driver.folder / "log4j2.properties").read_text()
    got.hand_over(driver.folder / "script" / "s.py", ["a"], conf)
    assert got.process.wait(timeout=10) == 0  # it read its line
    got.end()
    assert not driver.folder.exists()


def test_a_task_that_takes_the_last_free_slot_ends_a_ready_driver(pool):
    free = [1]
    pool.free_slots = lambda: free[0]
    pool.used()
    [driver] = settled(pool, 1)
    pool.make_room()                      # a task in one of two slots: one still free
    assert settled(pool, 1) == [driver]
    free[0] = 0
    pool.make_room()
    assert pool._ready == [] and driver.process.poll() is not None
    assert not driver.folder.exists()


def test_a_dead_driver_is_dropped_and_close_ends_the_rest(pool, tmp_path):
    pool.used()
    [driver] = settled(pool, 1)
    driver.process.kill()
    driver.process.wait()
    assert pool.take(PySparkSettings(), settings_for(PySparkSettings(), tmp_path / "log")) is None
    assert not driver.folder.exists()
    assert settled(pool, 0) == []         # none before a script or a slot ends
    pool.replenish()
    [second] = settled(pool, 1)
    pool.close()
    assert second.process.poll() is not None and not second.folder.exists()
    pool.replenish()
    assert settled(pool, 0) == []


def test_a_per_job_cluster_of_one_script_keeps_no_warm_driver_unless_told():
    from yarn_client.cli import _pyspark_cluster_properties
    from yarn_client.spark_submit import SparkSubmitOptions

    assert "pyspark.warm-drivers=0" in _pyspark_cluster_properties(SparkSubmitOptions(), {})
    told = _pyspark_cluster_properties(SparkSubmitOptions(), {"pyspark.warm-drivers": "1"})
    assert not any(p.startswith("pyspark.warm-drivers=") for p in told)


@pytest.fixture
def plain_hadoop(tmp_path, monkeypatch):
    """A Hadoop configuration without Kerberos, as a YARN container has."""
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text("<configuration/>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    return conf


SCRIPT = PySparkSettings(master="yarn", spark_conf={"spark.executor.memory": "2g"},
                         environment={"PYSPARK_ARCHIVES_PATH": "hdfs:///cache/pyspark.zip"},
                         archives=[("hdfs:///data/d.zip", "d")])


def test_a_prestarted_driver_starts_its_jvm_alone_and_goes_to_its_script_only(
        pool, tmp_path, plain_hadoop):
    """The TaskExecutor of a per-job cluster starts its script's driver as it starts: with
    the script's settings (master yarn: no warm-up, which would be a Spark application),
    taken by a script with those very settings, however they travelled, and by no other,
    even one a warm driver would do for."""
    pool.prestart(SCRIPT)
    [driver] = settled(pool, 1)
    assert driver.process.args[-1] == "--jvm-only"
    assert "--master yarn --deploy-mode client" in driver.env["PYSPARK_SUBMIT_ARGS"]
    log = tmp_path / "spark-job.log"
    other = PySparkSettings(master="yarn", spark_conf={"spark.executor.memory": "3g"},
                            environment=SCRIPT.environment, archives=SCRIPT.archives)
    assert pool.may_take(other) is False
    assert pool.take(other, settings_for(other, log)) is None
    local = PySparkSettings()  # eligible for a warm driver: not for this one
    assert pool.take(local, settings_for(local, log)) is None
    assert settled(pool, 1) == [driver]
    # The settings as the script's task has them: archives as lists (unpickled, decoded).
    same = PySparkSettings(master="yarn", spark_conf=dict(SCRIPT.spark_conf),
                           environment=dict(SCRIPT.environment),
                           archives=[["hdfs:///data/d.zip", "d"]])  # type: ignore[list-item]
    assert pool.may_take(same)
    taken = pool.take(same, settings_for(same, log))
    assert taken is not None
    got, conf, _ = taken
    assert got is driver
    assert conf["spark.yarn.tags"].split(",")[0] == "flinkyarn-task-a1"  # the task's own
    got.hand_over(driver.folder / "script" / "s.py", [], conf)
    assert got.process.wait(timeout=10) == 0
    got.end()


def test_no_prestarted_driver_for_py_files_a_clients_folder_or_kerberos(pool, tmp_path, plain_hadoop):
    pool.prestart(PySparkSettings(master="yarn", py_files=["hdfs:///lib/a.py#a.py"]))
    pool.prestart(PySparkSettings(master="local", working_dir=str(tmp_path)))
    assert settled(pool, 0) == []
    (plain_hadoop / "core-site.xml").write_text(
        "<configuration><property><name>hadoop.security.authentication</name>"
        "<value>kerberos</value></property></configuration>")
    pool.prestart(SCRIPT)
    assert settled(pool, 0) == []


def test_the_client_finds_the_settings_of_a_scripts_job_and_of_no_other(tmp_path):
    from flinkyarn.ids import JobID, JobVertexID
    from flinkyarn.jobgraph import JobGraph, JobVertex
    from yarn_client.programs import pyspark_job_graph, pyspark_settings_of

    script = tmp_path / "s.py"
    script.write_text("print('hello')\n")
    graph = pyspark_job_graph(script, ("1",), SCRIPT)
    assert warm_drivers.same_settings(pyspark_settings_of(graph), SCRIPT)
    plain = JobGraph(JobID("j"), "plain", [JobVertex(JobVertexID("v"), "v", 1, b"not a pickle")])
    assert pyspark_settings_of(plain) is None
