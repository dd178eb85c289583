"""integration/local_hadoop without starting daemons: pid files, ports, configuration."""

from __future__ import annotations

import os
import socket
import subprocess
import xml.etree.ElementTree as ElementTree

import pytest

import local_hadoop
from flinkyarn import hadoop


@pytest.fixture
def layout(tmp_path):
    return local_hadoop.Layout(cache=tmp_path / "cache", work=tmp_path / "work")


def properties(path):
    root = ElementTree.parse(path).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


def test_stale_pid_file_of_a_dead_process_is_ignored(layout):
    layout.pids.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    layout.pidfile("namenode").write_text(f"{dead.pid}\n")
    assert local_hadoop.read_pid(layout, "namenode") is None


def test_pid_file_naming_a_foreign_live_process_is_not_ours(layout):
    # A recycled pid: alive, but not a daemon started for this work folder.
    layout.pids.mkdir(parents=True)
    layout.pidfile("resourcemanager").write_text(f"{os.getpid()}\n")
    assert local_hadoop.read_pid(layout, "resourcemanager") is None
    layout.pidfile("resourcemanager").write_text("garbage\n")
    assert local_hadoop.read_pid(layout, "resourcemanager") is None


def test_taken_port_is_reported_with_its_key_before_anything_starts():
    with socket.socket() as holder:
        holder.bind((local_hadoop.HOST, 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        daemon = local_hadoop.Daemon("namenode", "x", (("dfs.namenode.http-address", port),))
        with pytest.raises(local_hadoop.ClusterError) as error:
            local_hadoop._check_ports(daemon)
    assert f"port {port} (dfs.namenode.http-address)" in str(error.value)
    assert "already in use" in str(error.value)


def test_configuration_has_what_yarn_needs_on_a_small_machine(layout):
    layout.lib.mkdir(parents=True)
    (layout.lib / "a.jar").touch()
    local_hadoop.write_config(layout)

    capacity = properties(layout.conf / "capacity-scheduler.xml")
    assert float(capacity["yarn.scheduler.capacity.maximum-am-resource-percent"]) > 0.1
    yarn = properties(layout.conf / "yarn-site.xml")
    assert yarn["yarn.nodemanager.disk-health-checker.enable"] == "false"
    assert yarn["yarn.nodemanager.vmem-check-enabled"] == "false"
    whitelist = yarn["yarn.nodemanager.env-whitelist"].split(",")
    assert "JAVA_HOME" in whitelist and "PATH" in whitelist
    assert str(layout.lib) in yarn["yarn.application.classpath"]
    # The files our own Hadoop client helper reads agree with the daemons' addresses.
    assert hadoop.default_fs(layout.conf) == local_hadoop.DEFAULT_FS
    assert hadoop.namenode_web_address(layout.conf) == (local_hadoop.HOST, 9870)


def test_yarn_command_prints_the_globbed_classpath_skein_asks_for(layout):
    layout.lib.mkdir(parents=True)
    (layout.lib / "b.jar").touch()
    (layout.lib / "a.jar").touch()
    local_hadoop.write_config(layout)

    out = subprocess.run([str(layout.bin / "yarn"), "classpath", "--glob"],
                         check=True, capture_output=True, text=True).stdout.strip()
    assert out.split(":") == [str(layout.conf), str(layout.lib / "a.jar"), str(layout.lib / "b.jar")]
    usage = subprocess.run([str(layout.bin / "yarn"), "bogus"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: yarn" in usage.stderr


def test_env_puts_our_yarn_first_and_keeps_loopback_off_proxies(layout, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin")
    monkeypatch.setenv("no_proxy", "example.internal")
    exports = local_hadoop.env_exports(layout)
    assert exports["PATH"].split(":")[0] == str(layout.bin)
    assert exports["HADOOP_CONF_DIR"] == str(layout.conf)
    assert exports["no_proxy"].split(",") == ["example.internal", "127.0.0.1", "localhost"]


def test_cluster_command_rejects_unknown_subcommand():
    result = subprocess.run([str(local_hadoop.REPO / "integration" / "cluster"), "upp"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: integration/cluster {up|down|status|env}" in result.stderr
