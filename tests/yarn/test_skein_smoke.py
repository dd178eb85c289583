"""skein on the local Hadoop, end to end: a master container runs a shell script (on
any node: it needs nothing of the client's)."""

from __future__ import annotations

import subprocess
import uuid

import smoke
import local_hadoop
from tests.waiting import wait_for


def hdfs_cat(path: str) -> str:
    """Reads a file with Hadoop's own Java client (`hdfs dfs -cat`), not the code under test."""
    return subprocess.run(["hdfs", "dfs", "-cat", path], check=True,
                          capture_output=True, text=True).stdout


def test_master_script_writes_to_hdfs_and_application_succeeds(hadoop, skein_client):
    path = f"/tmp/flinkyarn-tests/{uuid.uuid4().hex}/out.txt"
    text = f"written in a YARN container {uuid.uuid4()}"

    app_id, app, _ = smoke.run(skein_client, local_hadoop.RM_WEB,
                               [local_hadoop.DEFAULT_FS + path, text])

    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    assert app["name"] == "flinkyarn-smoke"
    assert hdfs_cat(path) == text


def test_failing_script_fails_the_application_with_its_error(hadoop, skein_client):
    message = f"deliberate smoke failure {uuid.uuid4().hex}"

    app_id, app, _ = smoke.run(skein_client, local_hadoop.RM_WEB, ["--fail", message])

    assert (app["state"], app["finalStatus"]) == ("FINISHED", "FAILED")
    # The script's error reaches the user: in the diagnostics, or in the container's
    # log, which aggregation moves to HDFS shortly after the end.
    said = f"smoke_app failed on purpose: {message}"
    wait_for(lambda: said in app["diagnostics"] or said in subprocess.run(
        ["yarn", "logs", "-applicationId", app_id], capture_output=True, text=True).stdout,
        60, f"{said!r} in the diagnostics or the container's log", poll=1)
