"""What the rest of flinkyarn needs to know about the Hadoop cluster it runs on.

Reads the client configuration in ``$HADOOP_CONF_DIR`` (the same files the Hadoop CLI
and skein read) and opens HDFS through WebHDFS, which needs no native library.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from urllib.parse import urlparse

# Options of the JVMs we start that mostly wait (skein's driver and ApplicationMaster,
# Spark's client-mode AM): the quick compiler only and the serial collector halve the
# CPU their start costs (skein's driver: 6.5 -> 4 s), which on a busy node is the job's.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto -XX:-UsePerfData"


class HadoopConfigError(RuntimeError):
    """The Hadoop client configuration is missing or does not say what is needed."""


def conf_dir() -> Path:
    value = os.environ.get("HADOOP_CONF_DIR")
    if not value:
        raise HadoopConfigError(
            "HADOOP_CONF_DIR is not set; for the local cluster run "
            "`eval \"$(integration/cluster env)\"`")
    path = Path(value)
    if not (path / "core-site.xml").is_file():
        raise HadoopConfigError(f"HADOOP_CONF_DIR={value} has no core-site.xml")
    return path


def site_properties(name: str, directory: Path | None = None) -> dict[str, str]:
    """The properties of one site file (e.g. 'hdfs-site.xml'); {} when the file is absent."""
    path = (directory or conf_dir()) / name
    if not path.is_file():
        return {}
    root = ElementTree.parse(path).getroot()
    return {prop.findtext("name", "").strip(): (prop.findtext("value") or "").strip()
            for prop in root.iter("property")}


def default_fs(directory: Path | None = None) -> str:
    return site_properties("core-site.xml", directory).get("fs.defaultFS", "file:///")


def https_only(directory: Path | None = None) -> bool:
    """Whether the NameNode's web server (WebHDFS) speaks HTTPS only (dfs.http.policy)."""
    policy = site_properties("hdfs-site.xml", directory).get("dfs.http.policy", "HTTP_ONLY")
    return policy.upper() == "HTTPS_ONLY"


def namenode_web_address(directory: Path | None = None) -> tuple[str, int]:
    """(host, port) of the NameNode's web server, which serves WebHDFS: its HTTPS
    address when dfs.http.policy is HTTPS_ONLY."""
    secure = https_only(directory)
    value = site_properties("hdfs-site.xml", directory).get(
        "dfs.namenode.https-address" if secure else "dfs.namenode.http-address")
    if not value:
        host = urlparse(default_fs(directory)).hostname or "localhost"
        return host, 9871 if secure else 9870
    host, _, port = value.rpartition(":")
    if host in ("", "0.0.0.0"):
        host = urlparse(default_fs(directory)).hostname or "localhost"
    return host, int(port)


def hdfs(user: str | None = None, host: str | None = None):
    """An fsspec filesystem for the cluster's HDFS, over WebHDFS, as Hadoop's own client
    would speak to it: on a secure cluster (hadoop.security.authentication=kerberos)
    with a delegation token where the process has one (a YARN container), else with the
    user's Kerberos ticket (SPNEGO); over HTTPS, checked against the truststore of
    ssl-client.xml, where the web servers speak only that."""
    from fsspec.implementations.webhdfs import WebHDFS
    import getpass

    from flinkyarn import kerberos

    web_host, port = namenode_web_address()
    tls = {"use_https": True, "session_verify": kerberos.ca_bundle()} if https_only() else {}
    if not kerberos.security_enabled():
        filesystem = WebHDFS(host=host or web_host, port=port, user=user or getpass.getuser(),
                             **tls)
    elif kerberos.hdfs_delegation_token() is not None:
        filesystem = kerberos.DelegatedWebHDFS(host=host or web_host, port=port, **tls)
    else:
        filesystem = WebHDFS(host=host or web_host, port=port, **tls)
        filesystem.session.auth = kerberos.spnego_auth()
    if isinstance(tls.get("session_verify"), str):
        # requests lets REQUESTS_CA_BUNDLE in the environment override a session's own
        # `verify`: the cluster's truststore must win.
        filesystem.session.trust_env = False
    return filesystem


def delete(filesystem, path: str) -> bool:
    """Removes `path` (a folder with its contents) through WebHDFS `filesystem`; whether
    there was anything to remove. A refusal raises (fsspec's `exists` would answer "not
    there" to one, and its `rm` does not say whether it removed anything)."""
    answer = filesystem._call("DELETE", method="delete", path=path, recursive="true")
    return bool(answer.json().get("boolean"))


def hdfs_path(url: str) -> str:
    """The path part of an `hdfs://` URL, as WebHDFS wants it."""
    parsed = urlparse(url)
    if parsed.scheme != "hdfs":
        raise ValueError(f"not an hdfs:// URL: {url!r}")
    return parsed.path or "/"


# ------------------------------------------------------- the ResourceManager's REST API


def rm_web_address(directory: Path | None = None) -> str:
    """http://host:port of the ResourceManager's web services."""
    properties = site_properties("yarn-site.xml", directory)
    address = properties.get("yarn.resourcemanager.webapp.address")
    if not address:
        address = f"{properties.get('yarn.resourcemanager.hostname', 'localhost')}:8088"
    return f"http://{address}"


def rm_request(path: str, method: str = "GET", body: dict | None = None,
               timeout: float = 10.0) -> dict:
    """A call of the ResourceManager's REST API as this process's user (simple
    authentication: `user.name`); its JSON answer. Raises OSError (unreachable, or an
    HTTP error: urllib.error.HTTPError) and ValueError (not JSON)."""
    import getpass
    import json
    import urllib.request

    user = os.environ.get("HADOOP_USER_NAME") or os.environ.get("USER") or getpass.getuser()
    separator = "&" if "?" in path else "?"
    request = urllib.request.Request(
        f"{rm_web_address()}{path}{separator}user.name={user}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout) as response:
        data = response.read()
    return json.loads(data) if data else {}


def leaf_queues(scheduler: dict) -> dict[str, dict]:
    """The leaf queues of the ResourceManager's schedulerInfo (/ws/v1/cluster/scheduler),
    by name and by path; none for a scheduler without queues (FIFO)."""
    out: dict[str, dict] = {}

    def visit(queue: dict) -> None:
        children = (queue.get("queues") or {}).get("queue") or []
        if not children:
            out[queue["queueName"]] = queue
            out[queue.get("queuePath", queue["queueName"])] = queue
        for child in children:
            visit(child)

    if "queues" in scheduler:
        visit(scheduler)
    return out


def applications_tagged(tag: str) -> list[dict]:
    """The YARN applications that carry `tag` (YARN keeps tags in lower case)."""
    found = rm_request(f"/ws/v1/cluster/apps?applicationTags={tag.lower()}")
    return (found.get("apps") or {}).get("app") or []


def kill_application(app_id: str) -> None:
    """Asks the ResourceManager to kill `app_id` (nothing happens to an ended one)."""
    rm_request(f"/ws/v1/cluster/apps/{app_id}/state", "PUT", {"state": "KILLED"})

