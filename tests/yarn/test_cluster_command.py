"""integration/cluster against the running local Hadoop."""

from __future__ import annotations

import subprocess

import pytest

import local_hadoop

CLUSTER = str(local_hadoop.REPO / "integration" / "cluster")


def pids(layout):
    return {d.name: local_hadoop.read_pid(layout, d.name) for d in local_hadoop.DAEMONS}


def test_up_twice_is_harmless(hadoop):
    before = pids(hadoop)
    result = subprocess.run([CLUSTER, "up"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "already up" in result.stdout
    assert pids(hadoop) == before and None not in before.values()


def test_status_shows_each_daemon_and_the_resourcemanager_address(hadoop):
    result = subprocess.run([CLUSTER, "status"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
    for daemon in local_hadoop.DAEMONS:
        assert f"{daemon.name}" in result.stdout
    assert "running (pid" in result.stdout
    assert local_hadoop.RM_WEB in result.stdout


def test_second_cluster_on_taken_ports_fails_clearly_and_starts_nothing(hadoop, tmp_path):
    other = local_hadoop.Layout(cache=hadoop.cache, work=tmp_path / "other")
    with pytest.raises(local_hadoop.ClusterError) as error:
        local_hadoop.up(other, timeout=30, say=lambda _: None)
    assert "port 8020 (dfs.namenode.rpc-address.local-ns.nn1)" in str(error.value)
    assert all(pid is None for pid in pids(other).values())
