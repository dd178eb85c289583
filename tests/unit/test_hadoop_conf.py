from __future__ import annotations

import pytest

from flinkyarn import hadoop, hdfs


def write(directory, name, props):
    rows = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (directory / name).write_text(f"<configuration>{rows}</configuration>")


def test_a_url_without_cluster_is_on_the_default_filesystem(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://prod-ns"})
    assert hdfs._cluster("hdfs:///a/b") == "hdfs://prod-ns"
    assert hdfs._cluster(None) == "hdfs://prod-ns"
    assert hdfs._cluster("hdfs://other-ns/x") == "hdfs://other-ns"
    assert hdfs._cluster("viewfs://cluster/x") == "viewfs://cluster"
    with pytest.raises(hadoop.HadoopConfigError, match="names no cluster.*hdfs://prod-ns"):
        hdfs._cluster("viewfs:///x")


def test_a_local_default_filesystem_is_no_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "file:///"})
    with pytest.raises(hadoop.HadoopConfigError, match="'file:///', not an hdfs:// or viewfs://"):
        hdfs._cluster(None)


def test_missing_conf_dir_names_the_variable(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(hadoop.HadoopConfigError, match="HADOOP_CONF_DIR is not set"):
        hadoop.conf_dir()


def test_conf_dir_without_core_site_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    with pytest.raises(hadoop.HadoopConfigError, match="has no core-site.xml"):
        hadoop.conf_dir()


def test_path_of_rejects_other_schemes():
    assert hdfs.path_of("hdfs://127.0.0.1:8020/a/b") == "/a/b"
    assert hdfs.path_of("viewfs://cluster/a") == "/a"
    with pytest.raises(ValueError, match="not an hdfs:// or viewfs:// URL"):
        hdfs.path_of("s3://bucket/key")
