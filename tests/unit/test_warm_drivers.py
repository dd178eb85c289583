"""The bookkeeping of a TaskExecutor's warm PySpark drivers (taskexecutor/spark/warm_pool.py)
with a stand-in process for the driver (the real one, pyspark's JVM and all, runs in
tests/yarn/test_pyspark_on_yarn.py): none before a script wanted one, never more than
free slots, handed only to a script launched alike, ended when a slot's memory is
taken, when dead, and at close; none in a per-job cluster of one script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.pipeline.pyspark_script import PySparkSettings
from taskexecutor.spark import warm_pool
from taskexecutor.spark.script_task import driver_conf, driver_environment
from taskexecutor.spark.warm_pool import WarmDrivers
from tests.waiting import wait_for

WAITS = [sys.executable, "-c", "import sys; sys.stdin.readline()"]


@pytest.fixture
def pool(tmp_path, monkeypatch):
    monkeypatch.setattr(warm_pool, "REPLENISH_DELAY", 0.0)
    drivers = WarmDrivers(Configuration({}), tmp_path / "scratch")
    drivers.command = WAITS
    yield drivers
    drivers.close()


def settled(pool: WarmDrivers, ready: int) -> list:
    wait_for(lambda: pool._timer is None and len(pool._ready) == ready, 10,
             f"{ready} ready drivers (there are {len(pool._ready)})", poll=0.02)
    return list(pool._ready)


def settings_for(settings: PySparkSettings, log: Path):
    def make(folder: Path):
        conf = driver_conf(Configuration({}), settings, folder, log)
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
    assert pool.take(settings_for(PySparkSettings(spark_conf={"spark.driver.memory": "3g"}),
                                  log)) is None
    assert settled(pool, 1) == [driver]
    taken = pool.take(settings_for(PySparkSettings(spark_conf={"spark.sql.shuffle.partitions": "7"}),
                                   log))
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
    assert pool.take(settings_for(PySparkSettings(), tmp_path / "log")) is None
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
