"""Where a process puts its scratch files: option io.tmp.dirs, else the YARN container's
LOCAL_DIRS, else the temporary folder (TMPDIR); and the TaskExecutor's Spark settings,
which follow those folders and the TaskExecutor's host."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

import pytest

from flinkyarn.configuration import Configuration
from flinkyarn.scratch import ProcessScratch, process_scratch, scratch_roots
from taskexecutor.spark.bridge import SparkSessionProvider

YARN = {"LOCAL_DIRS": "/data1/yarn/appcache/app_1,/data2/yarn/appcache/app_1"}


def conf(**raw: str) -> Configuration:
    return Configuration.from_raw({key.replace("_", "."): value for key, value in raw.items()})


@pytest.fixture
def tmpdir(tmp_path, monkeypatch) -> Path:
    """A fresh TMPDIR for this test; no LOCAL_DIRS, no Spark configuration folder."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    for name in ("LOCAL_DIRS", "SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_io_tmp_dirs_come_first(tmpdir):
    assert scratch_roots(conf(io_tmp_dirs="/fast/a, /fast/b"), YARN) == [Path("/fast/a"), Path("/fast/b")]


def test_a_yarn_containers_local_dirs_come_before_tmpdir(tmpdir):
    assert scratch_roots(conf(), YARN) == [Path("/data1/yarn/appcache/app_1"),
                                           Path("/data2/yarn/appcache/app_1")]


def test_tmpdir_is_the_last_resort(tmpdir):
    assert scratch_roots(conf(), {}) == [tmpdir]
    assert scratch_roots(conf(io_tmp_dirs=" , "), {"LOCAL_DIRS": ""}) == [tmpdir]
    # The process's own environment by default.
    assert scratch_roots(conf()) == [tmpdir]


def test_a_process_has_its_own_folder_in_each_root_and_removes_them(tmp_path, tmpdir):
    roots = [tmp_path / "a", tmp_path / "b"]
    scratch = ProcessScratch.create(conf(io_tmp_dirs=",".join(map(str, roots))), "te-1-", YARN)

    assert [folder.parent for folder in scratch.dirs] == roots
    assert scratch.root == scratch.dirs[0] and scratch.root.name.startswith("te-1-")
    scratch.remove()
    assert [list(root.iterdir()) for root in roots] == [[], []]


def test_a_process_scratch_is_its_temporary_folder_while_it_lasts(tmpdir):
    with process_scratch(conf(), "appmaster-") as scratch:
        assert scratch.root.parent == tmpdir
        assert os.environ["TMPDIR"] == tempfile.gettempdir() == str(scratch.temp_dir)
        with tempfile.NamedTemporaryFile(delete=False) as file:
            assert Path(file.name).parent == scratch.temp_dir

    assert os.environ["TMPDIR"] == tempfile.gettempdir() == str(tmpdir)
    assert list(tmpdir.iterdir()) == []


def test_spark_binds_and_advertises_the_task_executors_host(tmp_path, tmpdir):
    settings = conf(taskmanager_host="node7.cluster.example", io_tmp_dirs=str(tmp_path))
    provider = SparkSessionProvider.from_configuration(settings, ProcessScratch.create(settings, "te-"))

    spark = provider.spark_conf()

    assert spark["spark.driver.host"] == spark["spark.driver.bindAddress"] == "node7.cluster.example"
    assert provider.spark_environment() == {"SPARK_LOCAL_IP": "node7.cluster.example",
                                            "SPARK_LOCAL_HOSTNAME": "node7.cluster.example"}
    assert "127.0.0.1" not in repr(spark) and "localhost" not in repr(spark)


def test_spark_writes_only_in_the_task_executors_scratch_folders(tmp_path, tmpdir):
    roots = [tmp_path / "disk1", tmp_path / "disk2"]
    settings = conf(io_tmp_dirs=",".join(map(str, roots)))
    scratch = ProcessScratch.create(settings, "te-")
    provider = SparkSessionProvider.from_configuration(settings, scratch)

    spark = provider.spark_conf()
    java = shlex.split(spark["spark.driver.extraJavaOptions"])

    assert spark["spark.local.dir"].split(",") == [str(d / "spark-local") for d in scratch.dirs]
    assert f"-Djava.io.tmpdir={provider.java_tmp_dir}" in java
    assert "-XX:-UsePerfData" in java  # no /tmp/hsperfdata_<user>
    assert provider.java_tmp_dir.is_relative_to(scratch.root)
    assert spark["spark.sql.warehouse.dir"].startswith(scratch.root.as_uri())


def test_java_options_of_spark_defaults_stay_and_ours_come_after_them(tmp_path, tmpdir, monkeypatch):
    (tmp_path / "spark-conf").mkdir()
    (tmp_path / "spark-conf" / "spark-defaults.conf").write_text(
        "# site settings\n"
        "spark.executor.memory 2g\n"
        "spark.driver.extraJavaOptions   -Dhttp.proxyHost=\"proxy a\" -Djava.io.tmpdir=/tmp\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "spark-conf"))
    provider = SparkSessionProvider(cores=1, memory_bytes=1 << 30, slots=1, tmp_dir=tmp_path / "s")

    java = shlex.split(provider.spark_conf()["spark.driver.extraJavaOptions"])

    assert java[:2] == ["-Dhttp.proxyHost=proxy a", "-Djava.io.tmpdir=/tmp"]
    assert java.index(f"-Djava.io.tmpdir={provider.java_tmp_dir}") > 1  # the last one wins


def test_the_spark_jvm_compiles_with_c1_alone_unless_told_otherwise(tmp_path, tmpdir):
    scratch = ProcessScratch.create(conf(io_tmp_dirs=str(tmp_path)), "te-")

    def java_options(**settings: str) -> list[str]:
        raw = {"io.tmp.dirs": str(tmp_path), **settings}
        provider = SparkSessionProvider.from_configuration(Configuration.from_raw(raw), scratch)
        return shlex.split(provider.spark_conf()["spark.driver.extraJavaOptions"])

    assert "-XX:TieredStopAtLevel=1" in java_options()
    chosen = java_options(**{"taskmanager.spark.java-options": "-XX:+UseParallelGC -Dname='a b'"})
    assert "-XX:TieredStopAtLevel=1" not in chosen
    assert chosen[-2:] == ["-XX:+UseParallelGC", "-Dname=a b"]
