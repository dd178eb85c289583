"""The skein smoke application: a bare YARN application whose master runs a shell
script that writes a file to HDFS and reads it back. It proves the local Hadoop, skein
and HDFS work together, on any node: the script needs nothing of the client's (an
isolated node sees neither the repository nor its venv), only sh and curl.

usage: python integration/smoke.py     (with the environment of `integration/cluster env`)
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import skein

from flinkyarn import retry

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import local_hadoop  # noqa: E402

TERMINAL = ("FINISHED", "FAILED", "KILLED")


def application_spec(args: list[str], name: str = "flinkyarn-smoke") -> skein.ApplicationSpec:
    """One master container running smoke_app.sh. `args`: [HDFS_URL, TEXT] (the URL
    given to the script as its WebHDFS URL at the active NameNode) or ["--fail", MESSAGE]."""
    if args and args[0] != "--fail":
        args = [webhdfs_url(args[0]), *args[1:]]
    script = " ".join(["sh", "smoke_app.sh", *(shlex.quote(a) for a in args)])
    return skein.ApplicationSpec(
        name=name,
        queue="default",
        tags={"flinkyarn", "smoke"},
        max_attempts=1,
        master=skein.Master(
            resources=skein.Resources(memory="256 MiB", vcores=1),
            files={"smoke_app.sh": str(HERE / "smoke_app.sh")},
            script=script,
        ),
    )


def webhdfs_url(url: str) -> str:
    """http://NAMENODE:PORT/webhdfs/v1/PATH at the local Hadoop's active NameNode (now:
    the script would not follow a failover) for a URL of its default filesystem."""
    active = local_hadoop.active_namenode()
    if active is None:
        raise RuntimeError(f"no NameNode of {local_hadoop.DEFAULT_FS} is active")
    path = urllib.parse.urlparse(url).path or "/"
    return f"{local_hadoop.namenode_web(active)}/webhdfs/v1{urllib.parse.quote(path)}"


def rm_app(rm_web: str, app_id: str) -> dict:
    """The application's record in the ResourceManager's REST API."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{rm_web}/ws/v1/cluster/apps/{app_id}", timeout=10) as response:
        return json.load(response)["app"]


def wait_terminal(rm_web: str, app_id: str, timeout: float = 180.0) -> dict:
    """Polls the REST API until the application reaches FINISHED, FAILED or KILLED."""
    try:
        return retry.poll_until(lambda: rm_app(rm_web, app_id),
                                lambda app: app["state"] in TERMINAL,
                                pauses=retry.Backoff.fixed(0.25), deadline=retry.Deadline(timeout))
    except retry.GaveUp as gave_up:
        raise TimeoutError(f"{app_id} still {gave_up.last_value['state']} after "
                           f"{timeout:.0f} s") from None


def run(client: skein.Client, rm_web: str, args: list[str]) -> tuple[str, dict, float]:
    """Submits and waits; returns (application id, final REST record, seconds taken)."""
    start = time.monotonic()
    app_id = client.submit(application_spec(args))
    try:
        app = wait_terminal(rm_web, app_id)
    except BaseException:
        client.kill_application(app_id)
        raise
    return app_id, app, time.monotonic() - start


def main() -> int:
    local_hadoop.apply_env()
    url = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-smoke/{uuid.uuid4().hex}.txt"
    with skein.Client() as client:
        app_id, app, seconds = run(client, local_hadoop.RM_WEB, [url, "hello from YARN"])
    print(f"smoke application {app_id}: {app['state']}/{app['finalStatus']} in {seconds:.1f} s")
    if app["finalStatus"] != "SUCCEEDED":
        print(f"diagnostics: {app.get('diagnostics')}\n"
              f"logs: yarn logs -applicationId {app_id}", file=sys.stderr)
        return 1
    print(f"final status: {app['finalStatus']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
