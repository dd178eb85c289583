"""The class-data archive of the Spark JVM (flinkyarn/spark/class_data.py): where it
lives, what names it, one trainer at a time (taskexecutor/spark/class_data_trainer.py).
The archive a real trainer makes, and a JVM that maps it, are in
tests/local/test_spark_bridge.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.spark import class_data
from flinkyarn.spark.class_data import SparkClassData, archive_dir, archive_key
from taskexecutor.spark import class_data_trainer


def test_auto_is_the_users_cache_for_a_process_and_the_shipped_one_in_a_yarn_container(monkeypatch, tmp_path):
    monkeypatch.delenv("CONTAINER_ID", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert archive_dir(Configuration()) == tmp_path / "flinkyarn" / "spark-cds"
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000002")
    assert archive_dir(Configuration()) is None
    monkeypatch.chdir(tmp_path)  # no environment shipped, so none
    assert SparkClassData.from_configuration(Configuration()) is None
    # Named: also in a container; empty: never.
    assert archive_dir(Configuration({"taskmanager.spark.cds.dir": str(tmp_path)})) == tmp_path
    assert archive_dir(Configuration({"taskmanager.spark.cds.dir": ""})) is None


def test_without_spark_home_the_installed_pyspark_is_found_without_importing_it(monkeypatch):
    import sys

    import pyspark

    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delitem(sys.modules, "pyspark")
    assert class_data.spark_home() == Path(pyspark.__file__).parent
    assert "pyspark" not in sys.modules


def test_the_key_changes_with_a_jar_the_jdk_its_own_archive_or_the_class_path_environment(spark_home, monkeypatch):
    key = archive_key()
    assert key == archive_key()
    jar = spark_home / "jars" / "spark-sql.jar"
    jar.write_bytes(b"another build")
    changed_jar = archive_key()
    assert changed_jar != key
    monkeypatch.setenv("HADOOP_CONF_DIR", "/etc/hadoop/conf")  # on spark-class's class path
    with_conf = archive_key()
    assert with_conf != changed_jar
    base = Path(os.environ["JAVA_HOME"]) / "lib" / "server" / "classes.jsa"
    base.parent.mkdir(parents=True)
    base.write_bytes(b"the JDK's own archive")
    with_base = archive_key()
    assert with_base != with_conf
    base.write_bytes(b"the JDK's own archive, dumped again")  # java -Xshare:dump
    assert archive_key() != with_base
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    java.write_text("#!/bin/sh\n# another JDK\n")
    assert archive_key() not in (with_conf, with_base)


REAL_POPEN = subprocess.Popen


class Trainers:
    """subprocess.Popen of the trainer, recorded instead of run."""

    def __init__(self) -> None:
        self.started: list[list[str]] = []

    def __call__(self, command, **kwargs):
        self.started.append(command)
        assert kwargs["start_new_session"], "the trainer outlives the TaskExecutor's session"
        return REAL_POPEN(["sleep", "30"], start_new_session=True)


@pytest.fixture
def trainers(monkeypatch):
    recorded = Trainers()
    monkeypatch.setattr(class_data.subprocess, "Popen", recorded)
    return recorded


def test_no_archive_starts_one_trainer_and_the_jvm_starts_without(tmp_path, trainers):
    data = SparkClassData(tmp_path, "k1")
    assert data.java_options() == []
    assert trainers.started and trainers.started[0][-1] == str(data.archive)
    pid = int(data.lock.read_text())
    try:
        # While it runs, no other TaskExecutor starts another.
        assert SparkClassData(tmp_path, "k1").java_options() == []
        assert len(trainers.started) == 1
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    # Its trainer died without an archive (its JVM dumped half of one): the next one
    # takes its lock over, and the half is removed.
    partial = data.archive.with_suffix(f".partial-{pid}")
    partial.write_bytes(b"half")
    assert SparkClassData(tmp_path, "k1").train_in_background()
    assert not partial.exists()
    assert len(trainers.started) == 2
    os.kill(int(data.lock.read_text()), 9)


def test_an_archive_is_mapped_and_a_failed_training_is_not_repeated(tmp_path, trainers):
    data = SparkClassData(tmp_path, "k2")
    data.archive.write_bytes(b"archive")
    assert data.java_options()[0] == f"-XX:SharedArchiveFile={data.archive}"
    assert not trainers.started
    failed = SparkClassData(tmp_path, "k3")
    failed.failed.touch()
    assert failed.java_options() == [] and not failed.train_in_background()
    assert not trainers.started
    with pytest.raises(RuntimeError, match="failed"):
        failed.ensure(timeout=1)


def test_a_fresh_empty_lock_is_a_trainer_starting_and_an_old_one_is_stale(tmp_path, trainers):
    data = SparkClassData(tmp_path, "k4")
    data.lock.touch()  # made, the trainer's pid not written yet
    assert not data.train_in_background()
    os.utime(data.lock, (0, 0))  # a process that died between the two
    assert data.train_in_background()
    os.kill(int(data.lock.read_text()), 9)


def test_a_mapped_archive_is_touched_and_ones_unused_for_a_month_are_removed(tmp_path, trainers):
    used, unused = SparkClassData(tmp_path, "used"), SparkClassData(tmp_path, "old")
    for data in (used, unused):
        data.archive.write_bytes(b"archive")
        data.archive.with_suffix(".log").write_text("written")
        os.utime(data.archive, (0, 0))
    used.java_options()  # a JVM maps it: touched
    assert class_data.remove_unused(tmp_path) == [unused.archive]
    assert used.archive.exists() and used.archive.with_suffix(".log").exists()
    assert not unused.archive.exists() and not unused.archive.with_suffix(".log").exists()


def test_a_folder_that_cannot_be_written_costs_the_archive_not_the_session(tmp_path, trainers):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert SparkClassData(blocked / "spark-cds", "k5").java_options() == []
    assert not trainers.started


# --- the portable archive, for YARN containers ---------------------------------------


def environment(root: Path, times: int = 1_700_000_000) -> Path:
    """An environment of two pyspark jars, as venv-pack ships it (times in whole
    seconds, as a tar keeps them)."""
    jars = root / f"lib/python{sys.version_info.major}.{sys.version_info.minor}" \
        / "site-packages/pyspark/jars"
    jars.mkdir(parents=True)
    for name in ("spark-sql.jar", "spark-core.jar"):
        (jars / name).write_bytes(b"jar " + name.encode())
        os.utime(jars / name, (times, times))
    return root


def test_the_portable_key_is_the_clients_and_the_containers_and_names_jars_through_the_link(
        spark_home, tmp_path, monkeypatch):
    client = environment(tmp_path / "venv")
    container = tmp_path / "container"
    container.mkdir()
    shutil.copytree(client, container / "environment")  # keeps the times, as tar does
    key = class_data.portable_key(client)
    assert key is not None and key.startswith("portable-")
    monkeypatch.chdir(container)
    assert class_data.portable_key(Path("environment")) == key
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    assert SparkClassData(tmp_path, key, client).class_path == [
        f"environment/{site}/pyspark/jars/spark-core.jar",
        f"environment/{site}/pyspark/jars/spark-sql.jar"]
    # The JVM checks each jar's size and time: another time is another key.
    jar = container / "environment" / site / "pyspark/jars/spark-sql.jar"
    os.utime(jar, (1_700_000_001, 1_700_000_001))
    assert class_data.portable_key(Path("environment")) != key
    assert class_data.portable_key(tmp_path / "no-pyspark") is None


def test_a_container_maps_the_archive_shipped_for_its_key_and_makes_none(spark_home, tmp_path, monkeypatch, trainers):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTAINER_ID", "container_1_0001_01_000002")
    environment(tmp_path / "environment")
    conf = Configuration()
    assert SparkClassData.from_configuration(conf) is None, "nothing shipped"
    key = class_data.portable_key(Path("environment"))
    (tmp_path / f"spark-{key}.jsa").write_bytes(b"archive")
    data = SparkClassData.from_configuration(conf)
    assert data is not None and data.archive == tmp_path / f"spark-{key}.jsa"
    assert data.class_path[0].startswith("environment/") and len(data.class_path) == 2
    assert data.java_options()[0] == f"-XX:SharedArchiveFile={data.archive}"
    assert SparkClassData.from_configuration(Configuration({"taskmanager.spark.cds.dir": ""})) is None
    # Gone by the time the JVM starts: the container starts it without, and trains none.
    data.archive.unlink()
    assert data.java_options() == [] and not trainers.started


def test_the_client_trains_a_portable_archive_of_the_environment_it_ships(spark_home, tmp_path, monkeypatch, trainers):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CONTAINER_ID", raising=False)
    client = environment(tmp_path / "venv")
    data = SparkClassData.portable(Configuration(), client)
    assert data is not None and data.archive.parent == tmp_path / "cache/flinkyarn/spark-cds"
    assert data.train_in_background()
    assert trainers.started[0][-2:] == [str(data.archive), str(client)]
    os.kill(int(data.lock.read_text()), 9)
    assert SparkClassData.portable(Configuration({"taskmanager.spark.cds.dir": ""}), client) is None


def test_whether_a_process_maps_the_archive_is_read_from_its_memory_map(tmp_path, caplog):
    data = SparkClassData(tmp_path, "k6")
    data.archive.write_bytes(b"\0" * 4096)
    link = tmp_path / "link.jsa"  # YARN localizes a file as a link to its cache
    link.symlink_to(data.archive)
    mapper = subprocess.Popen([sys.executable, "-c", f"""
import mmap, sys
with open({str(link)!r}, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print("mapped", flush=True)
    sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert mapper.stdout.readline().strip() == "mapped"
        shown = SparkClassData(tmp_path, "k6")
        shown.archive = link
        assert shown.log_mapping(mapper.pid)
        assert not SparkClassData(tmp_path, "other").log_mapping(mapper.pid)
        assert "refused its class-data archive" in caplog.text
    finally:
        mapper.stdin.close()
        mapper.wait()


def test_a_trainer_keeps_its_temporary_files_in_its_own_folder(tmp_path, monkeypatch):
    """Not in the temporary folder of the TaskExecutor that started it, which goes with
    that TaskExecutor: pyspark's JVM writes the file pyspark waits for there, and a
    trainer whose starter had ended waited for it for ever (2 h on this machine)."""
    import tempfile

    gone = tmp_path / "taskexecutor-scratch"  # removed with its TaskExecutor
    monkeypatch.setenv("TMPDIR", str(gone))
    monkeypatch.setattr(tempfile, "tempdir", None)
    seen = {}

    class Provider:
        def __init__(self, **_settings) -> None:
            pass

        def get(self):
            seen["TMPDIR"], seen["python"] = os.environ["TMPDIR"], tempfile.gettempdir()
            raise RuntimeError("stop here")

    monkeypatch.setattr(class_data_trainer, "SparkSessionProvider", Provider)
    archive = tmp_path / "cds" / "spark-key.jsa"
    archive.parent.mkdir()
    with pytest.raises(RuntimeError, match="stop here"):
        class_data_trainer.train(archive)
    work = Path(seen["TMPDIR"])
    assert seen["python"] == str(work) and work.parent.parent == archive.parent
    assert not gone.exists()
    assert archive.with_suffix(".failed").exists()  # and not tried again
