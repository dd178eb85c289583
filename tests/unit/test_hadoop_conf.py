from __future__ import annotations

import pytest

from flinkyarn import hadoop


def write(directory, name, props):
    rows = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (directory / name).write_text(f"<configuration>{rows}</configuration>")


def test_namenode_web_address_falls_back_to_default_fs_host(tmp_path):
    write(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example:8020"})
    write(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "0.0.0.0:50070"})
    assert hadoop.namenode_web_address(tmp_path) == ("nn.example", 50070)


def test_missing_conf_dir_names_the_variable(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(hadoop.HadoopConfigError, match="HADOOP_CONF_DIR is not set"):
        hadoop.conf_dir()


def test_conf_dir_without_core_site_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    with pytest.raises(hadoop.HadoopConfigError, match="has no core-site.xml"):
        hadoop.conf_dir()


def test_hdfs_path_rejects_other_schemes():
    assert hadoop.hdfs_path("hdfs://127.0.0.1:8020/a/b") == "/a/b"
    with pytest.raises(ValueError, match="not an hdfs:// URL"):
        hadoop.hdfs_path("s3://bucket/key")
