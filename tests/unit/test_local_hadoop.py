"""integration/local_hadoop without starting daemons: pid files, ports, configuration."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

import local_hadoop
from flinkyarn import hadoop, retry


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


def test_hdfs_is_a_nameservice_of_two_namenodes_failed_over_by_hand(layout):
    layout.lib.mkdir(parents=True)
    local_hadoop.write_config(layout)

    core = properties(layout.conf / "core-site.xml")
    assert core["fs.defaultFS"] == local_hadoop.DEFAULT_FS == "hdfs://local-ns"
    site = properties(layout.conf / "hdfs-site.xml")
    assert site["dfs.nameservices"] == "local-ns"
    assert site["dfs.ha.namenodes.local-ns"] == "nn1,nn2"
    assert [n.id for n in local_hadoop.NAMENODES] == ["nn1", "nn2"]
    for namenode in local_hadoop.NAMENODES:
        assert site[f"dfs.namenode.rpc-address.local-ns.{namenode.id}"] == namenode.rpc
        assert site[f"dfs.namenode.http-address.local-ns.{namenode.id}"] == namenode.http
    assert [(n.rpc, n.http, n.https) for n in local_hadoop.NAMENODES] == [
        ("127.0.0.1:8020", "127.0.0.1:9870", "127.0.0.1:9871"),
        ("127.0.0.1:8022", "127.0.0.1:9880", "127.0.0.1:9881")]
    names = {site[f"dfs.namenode.name.dir.local-ns.{n.id}"] for n in local_hadoop.NAMENODES}
    assert len(names) == 2 and "dfs.namenode.name.dir" not in site
    assert site["dfs.namenode.shared.edits.dir"] == f"file://{layout.data}/shared-edits"
    assert site["dfs.ha.automatic-failover.enabled"] == "false"
    assert site["dfs.ha.fencing.methods"] == "shell(/bin/true)"
    assert site["dfs.client.failover.proxy.provider.local-ns"] == \
        "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
    # A viewfs mount table over the nameservice, the default filesystem staying the latter.
    assert local_hadoop.VIEWFS == "viewfs://local-view"
    for point, path in local_hadoop.VIEWFS_LINKS.items():
        assert core[f"fs.viewfs.mounttable.local-view.link.{point}"] == f"hdfs://local-ns{path}"
    assert core["fs.viewfs.mounttable.local-view.linkFallback"] == "hdfs://local-ns/"


def test_every_port_of_the_cluster_is_its_own():
    ports = [port for daemon in local_hadoop.DAEMONS for _, port in daemon.ports]
    assert len(ports) == len(set(ports))


def test_secure_namenodes_each_have_an_https_address(layout):
    layout.lib.mkdir(parents=True)
    local_hadoop._record_node_count(layout, 2, secure=True)
    layout.kdc_dir.mkdir(parents=True)
    (layout.kdc_dir / "store-password").write_text("secret\n")
    site = local_hadoop._site_files(layout, 2)["hdfs-site.xml"]
    assert site["dfs.http.policy"] == "HTTPS_ONLY"
    assert site["dfs.namenode.https-address.local-ns.nn1"] == "127.0.0.1:9871"
    assert site["dfs.namenode.https-address.local-ns.nn2"] == "127.0.0.1:9881"
    assert local_hadoop.namenode_web("nn2", layout) == "https://127.0.0.1:9881"


def fake_format(layout):
    """Stands in for `NameNode -format`: what it leaves in nn1's folder and the shared log."""
    def call(command, **_):
        assert command[-5:] == ["-D", "dfs.ha.namenode.id=nn1", "-format", "-nonInteractive",
                                "-force"]
        for folder in (local_hadoop.name_dir(layout, "nn1"), local_hadoop.shared_edits_dir(layout)):
            (folder / "current").mkdir(parents=True)
            (folder / "current" / "VERSION").write_text("clusterID=new\n")
        return 0
    return call


def test_first_start_formats_nn1_and_gives_nn2_a_copy(layout, monkeypatch):
    layout.logs.mkdir(parents=True)
    monkeypatch.setattr(local_hadoop.subprocess, "call", fake_format(layout))
    said = []
    local_hadoop._format_namenodes(layout, said.append)
    assert said == ["formatting the NameNodes (first start) ..."]
    assert local_hadoop.hdfs_formatted(layout)
    assert (local_hadoop.name_dir(layout, "nn2") / "current" / "VERSION").read_text() == \
        "clusterID=new\n"
    said.clear()
    local_hadoop._format_namenodes(layout, said.append)  # formatted: nothing to do
    assert said == []


def test_a_single_namenodes_data_is_formatted_anew_and_said_so(layout, monkeypatch):
    layout.logs.mkdir(parents=True)
    old = local_hadoop.name_dir(layout, "nn1") / "current"
    old.mkdir(parents=True)
    (old / "VERSION").write_text("clusterID=old\n")
    blocks = layout.data / "datanode" / "current"
    blocks.mkdir(parents=True)
    running = fake_daemon(layout, "namenode")
    try:
        with pytest.raises(local_hadoop.ClusterError, match="runs on it; run `integration/cluster down"):
            local_hadoop._format_namenodes(layout, print)
    finally:
        running.kill()
        running.wait()
    monkeypatch.setattr(local_hadoop.subprocess, "call", fake_format(layout))
    said = []
    local_hadoop._format_namenodes(layout, said.append)
    assert len(said) == 1 and "not an HA pair's" in said[0] and "formatting the pair anew" in said[0]
    assert (old / "VERSION").read_text() == "clusterID=new\n"
    assert not blocks.exists()  # the DataNode's blocks were of the old cluster
    assert local_hadoop.hdfs_formatted(layout)


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
    usage = subprocess.run([str(layout.bin / "hdfs"), "bogus"], capture_output=True, text=True)
    assert usage.returncode == 2 and "haadmin" in usage.stderr


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
    assert "usage: integration/cluster {up [--nodes N] [--secure]|down|status|env}" in result.stderr
    for bad in (["up", "--nodes"], ["up", "--nodes", "two"], ["down", "--nodes", "2"]):
        result = subprocess.run([str(local_hadoop.REPO / "integration" / "cluster"), *bad],
                                capture_output=True, text=True)
        assert result.returncode == 2, bad


# ------------------------------------------------------------------- several nodes

NM_ADDRESS_KEYS = ("yarn.nodemanager.address", "yarn.nodemanager.localizer.address",
                   "yarn.nodemanager.webapp.address",
                   "yarn.nodemanager.collector-service.address",
                   "yarn.nodemanager.amrmproxy.address")


def test_one_node_is_the_shared_nodemanager_of_old(layout):
    (node,) = local_hadoop.cluster_nodes(layout, 1)
    assert (node.name, node.host, node.isolated) == ("nodemanager", "127.0.0.1", False)
    assert node.conf == layout.conf and node.tmp is None


def test_each_of_several_nodes_has_its_own_address_name_and_folders(layout):
    nodes = local_hadoop.cluster_nodes(layout, 3)
    assert [n.host for n in nodes] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    # Node 1 keeps the single-node daemon name (pid file, log) scripts already read.
    assert [n.name for n in nodes] == ["nodemanager", "nodemanager-2", "nodemanager-3"]
    assert all(n.isolated for n in nodes)
    folders = [(n.conf, n.local_dirs, n.log_dirs, n.hadoop_tmp, n.tmp) for n in nodes]
    assert len({f for fs in folders for f in fs}) == 5 * 3
    assert all(f.is_relative_to(n.root) for n, fs in zip(nodes, folders) for f in fs)
    with pytest.raises(local_hadoop.ClusterError, match="--nodes must be between 1 and"):
        local_hadoop.cluster_nodes(layout, 0)


def test_each_node_configuration_binds_the_node_address_only(layout, monkeypatch):
    monkeypatch.delenv("FLINKYARN_NM_MEMORY_MB", raising=False)
    layout.lib.mkdir(parents=True)
    local_hadoop.write_config(layout, 2)

    shared = properties(layout.conf / "yarn-site.xml")
    assert not any(key.startswith("yarn.nodemanager.") and key.endswith("address")
                   for key in shared)
    assert shared["yarn.scheduler.maximum-allocation-mb"] == "6144"
    # The ApplicationMaster reads the configuration of the node it runs on.
    assert shared["yarn.application.classpath"].split(",")[0] == "$HADOOP_CONF_DIR"
    for node in local_hadoop.cluster_nodes(layout, 2):
        yarn = properties(node.conf / "yarn-site.xml")
        assert yarn["yarn.nodemanager.hostname"] == node.host
        for key in NM_ADDRESS_KEYS:
            assert yarn[key].split(":")[0] == node.host, key
        assert yarn["yarn.nodemanager.local-dirs"] == str(node.local_dirs)
        assert yarn["yarn.nodemanager.log-dirs"] == str(node.log_dirs)
        assert yarn["yarn.nodemanager.resource.memory-mb"] == "6144"
        assert properties(node.conf / "core-site.xml")["hadoop.tmp.dir"] == str(node.hadoop_tmp)
        assert hadoop.default_fs(node.conf) == local_hadoop.DEFAULT_FS
        assert node.tmp.is_dir() and (node.conf / "log4j.properties").is_file()


def test_one_node_configuration_is_shared_and_memory_is_overridable(layout, monkeypatch):
    layout.lib.mkdir(parents=True)
    monkeypatch.delenv("FLINKYARN_NM_MEMORY_MB", raising=False)
    local_hadoop.write_config(layout, 1)
    yarn = properties(layout.conf / "yarn-site.xml")
    assert yarn["yarn.nodemanager.address"] == "127.0.0.1:8041"
    assert yarn["yarn.nodemanager.resource.memory-mb"] == "8192"
    assert not (layout.work / "nodes").exists()

    monkeypatch.setenv("FLINKYARN_NM_MEMORY_MB", "4096")
    local_hadoop.write_config(layout, 2)
    node = local_hadoop.cluster_nodes(layout, 2)[1]
    assert properties(node.conf / "yarn-site.xml")["yarn.nodemanager.resource.memory-mb"] == "4096"


def test_isolation_hides_the_client_and_brings_back_what_the_node_needs(tmp_path):
    repo = tmp_path / "repo"
    layout = local_hadoop.Layout(cache=repo / ".cache" / "hadoop", work=repo / ".local-hadoop")
    node = local_hadoop.cluster_nodes(layout, 2)[1]
    hidden = [repo, tmp_path / "home" / ".flinkyarn"]
    lines = local_hadoop.isolation_script(layout, node, hidden).splitlines()

    stage = local_hadoop.STAGE
    assert lines[:3] == ["set -e", f"mkdir -p {stage}", f"mount -t tmpfs -o mode=700 flinkyarn-stage {stage}"]
    assert lines[3] == f"mkdir {stage}/tmp && mount --bind {node.tmp} {stage}/tmp"
    new_tmp = lines.index(f"mount --move {stage}/tmp /tmp")
    covers = [i for i, line in enumerate(lines) if "flinkyarn-hidden" in line]
    assert new_tmp < covers[0], "a checkout under /tmp is hidden by the node's /tmp first"
    assert [lines[i].split()[-1] for i in covers] == sorted(str(h) for h in hidden)
    binds = [line for line in lines[4:new_tmp] if "mount --bind" in line]
    moves = [line for line in lines[covers[-1]:] if "mount --move" in line]
    kept = [layout.cache, layout.bin, layout.conf, node.root, layout.resources]
    assert sorted(b.split()[-2] for b in binds) == sorted(str(k) for k in kept)
    assert sorted(m.split()[-1] for m in moves) == sorted(str(k) for k in kept)
    # Not the other nodes' folders, nor the data or logs of the shared daemons.
    assert str(layout.data) not in "\n".join(lines)
    assert lines[-2:] == [f"umount {stage}", 'exec "$0" "$@"']


def fake_daemon(layout, name):
    """A live process carrying the command-line marker of daemon `name` of `layout`."""
    layout.pids.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                f"-Dflinkyarn.daemon={name}@{layout.work}"])
    layout.pidfile(name).write_text(f"{process.pid}\n")
    # Until the child has exec'd, its command line is still ours.
    with contextlib.suppress(retry.GaveUp):
        retry.poll_until(lambda: local_hadoop.read_pid(layout, name) == process.pid, bool,
                         pauses=retry.Backoff.fixed(0.01), deadline=retry.Deadline(30))
    return process


def test_node_count_comes_from_the_request_then_the_environment_then_the_record(
        layout, monkeypatch):
    monkeypatch.delenv("FLINKYARN_NODES", raising=False)
    assert local_hadoop.requested_node_count(layout, None) == 1
    assert local_hadoop.requested_node_count(layout, 3) == 3
    monkeypatch.setenv("FLINKYARN_NODES", "2")
    assert local_hadoop.requested_node_count(layout, None) == 2
    assert local_hadoop.requested_node_count(layout, 4) == 4

    layout.work.mkdir(parents=True)
    local_hadoop._record_node_count(layout, 2)
    monkeypatch.delenv("FLINKYARN_NODES")
    running = fake_daemon(layout, "namenode")
    try:
        # A plain `up` completes the running cluster with its own count ...
        assert local_hadoop.requested_node_count(layout, None) == 2
        assert local_hadoop.requested_node_count(layout, 2) == 2
        # ... and another count is refused with what to do.
        with pytest.raises(local_hadoop.ClusterError) as error:
            local_hadoop.requested_node_count(layout, 1)
        assert "runs with 2 node(s)" in str(error.value)
        assert "`integration/cluster down` first" in str(error.value)
    finally:
        running.kill()
        running.wait()


def test_down_stops_every_node_including_those_of_a_larger_earlier_cluster(layout):
    layout.work.mkdir(parents=True)
    local_hadoop._record_node_count(layout, 2)
    processes = [fake_daemon(layout, name)
                 for name in ("nodemanager", "nodemanager-2", "nodemanager-3")]
    try:
        local_hadoop.down(layout, say=lambda _: None)
        for process in processes:
            assert process.wait(timeout=30) is not None
        assert not list(layout.pids.glob("*.pid"))
    finally:
        for process in processes:
            process.kill()
            process.wait()
