"""The local Hadoop's nodes, as YARN and a container on each of them see them.

Works on a cluster of any node count (`integration/cluster up --nodes N`): the count is
the one the cluster recorded. The nodes of a cluster of several are isolated (each its
own address, configuration, /tmp and a view without the client's files); the single
node of a one-node cluster is shared with the client, and the same checks state that.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import skein

import local_hadoop
import smoke
from flinkyarn import retry

CHECK = "flinkyarn-node-check"


def cluster(layout):
    return local_hadoop.cluster_nodes(layout, local_hadoop.recorded_node_count(layout))


def test_every_node_runs_at_its_own_address(hadoop):
    nodes = cluster(hadoop)
    reports = local_hadoop.rm_nodes()

    assert len([r for r in reports if r["state"] == "RUNNING"]) == len(nodes)
    ids = set()
    for node in nodes:
        report = local_hadoop.rm_node_of(node, reports)
        assert report is not None, f"node {node.index} ({node.host}) unknown to the RM: {reports}"
        assert report["state"] == "RUNNING"
        ids.add(report["id"])
        if node.isolated:
            assert report["id"] == f"{node.host}:8041"
            assert report["nodeHTTPAddress"] == f"{node.host}:8042"
    assert len(ids) == len(nodes)


def node_check_script(client_marker: Path, tmp_marker: str) -> str:
    """Plain shell (the client's Python is not on an isolated node): reports what the
    container sees, and leaves a file in its /tmp."""
    return "\n".join([
        f'echo "{CHECK} host=$NM_HOST"',
        f'echo "{CHECK} conf=$HADOOP_CONF_DIR"',
        f'if [ -e {local_hadoop.REPO}/.venv ]; then r=visible; else r=hidden; fi',
        f'echo "{CHECK} repo=$r"',
        f'if [ -e {client_marker} ]; then c=visible; else c=hidden; fi',
        f'echo "{CHECK} client_home=$c"',
        f'echo "$NM_HOST" > /tmp/{tmp_marker}',
        f'echo "{CHECK} done"',
    ])


def container_reports(app_id: str, count: int) -> dict[str, dict[str, str]]:
    """{NM_HOST: {key: value}} from the containers' aggregated stdout (`yarn logs`)."""
    def reports() -> dict[str, dict[str, str]]:
        logs = subprocess.run(["yarn", "logs", "-applicationId", app_id],
                              capture_output=True, text=True).stdout
        reports, current = [], None
        for line in logs.splitlines():
            if line.startswith(f"{CHECK} host="):
                current = {}
                reports.append(current)
            if line.startswith(CHECK) and current is not None:
                key, _, value = line[len(CHECK) + 1:].partition("=")
                current[key] = value
        return {r["host"]: r for r in reports if "done" in r}

    try:
        return retry.poll_until(reports, lambda done: len(done) == count,
                                pauses=retry.Backoff.fixed(1.0), deadline=retry.Deadline(90))
    except retry.GaveUp as gave_up:  # the test says what is missing
        return gave_up.last_value


def test_a_container_on_each_node_sees_that_node_only(hadoop, skein_client, tmp_path):
    nodes = cluster(hadoop)
    reports = local_hadoop.rm_nodes()
    # Big enough that two never share a node, small enough to fit beside the master.
    smallest = min(r["totalResource"]["memory"] for r in reports)
    memory = (smallest // 2 // 128 + 1) * 128
    token = uuid.uuid4().hex
    # A file only the client has: in the client's ~/.flinkyarn.
    client_marker = Path.home() / ".flinkyarn" / f"{CHECK}-{token}"
    client_marker.parent.mkdir(exist_ok=True)
    client_marker.write_text("client only\n")
    tmp_marker = f"{CHECK}-{token}"
    spec = skein.ApplicationSpec(
        name="flinkyarn-node-check", queue="default", max_attempts=1,
        master=skein.Master(resources=skein.Resources(memory="256 MiB", vcores=1)),
        services={"check": skein.Service(
            instances=len(nodes),
            resources=skein.Resources(memory=f"{memory} MiB", vcores=1),
            script=node_check_script(client_marker, tmp_marker))})
    try:
        app_id = skein_client.submit(spec)
        try:
            app = smoke.wait_terminal(local_hadoop.RM_WEB, app_id)
        except BaseException:
            skein_client.kill_application(app_id)
            raise
        assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
        seen = container_reports(app_id, len(nodes))
    finally:
        client_marker.unlink()

    hosts = {local_hadoop.rm_node_of(n, reports)["nodeHostName"]: n for n in nodes}
    assert set(seen) == set(hosts), f"containers ran on {sorted(seen)}, nodes are {sorted(hosts)}"
    try:
        for host, node in hosts.items():
            report = seen[host]
            assert report["conf"] == str(node.conf)
            expected = "hidden" if node.isolated else "visible"
            assert (report["repo"], report["client_home"]) == (expected, expected), report
            # The container's /tmp is the node's own: its file is there, not in the machine's.
            in_tmp = (node.tmp or Path("/tmp")) / tmp_marker
            assert in_tmp.read_text().strip() == host
            assert (Path("/tmp") / tmp_marker).exists() == (not node.isolated)
    finally:
        for node in nodes:
            ((node.tmp or Path("/tmp")) / tmp_marker).unlink(missing_ok=True)
