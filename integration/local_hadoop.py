"""A real Hadoop (HDFS + YARN) on loopback, for development, demos and tests.

The daemons are the real ones, from the pinned jars of ``integration/pom.xml``:

    two NameNodes, DataNode, ResourceManager (with its embedded web proxy), NodeManager(s)

each a background JVM with a small heap, logging to ``<work>/logs/<daemon>.log``.

HDFS is an HA nameservice as in production: `NAMESERVICE` (fs.defaultFS is
``hdfs://local-ns``) of the NameNodes `NAMENODES` (nn1, nn2), sharing their edit log in
a local folder (no JournalNodes, no ZooKeeper), failed over by hand (`failover`,
``hdfs haadmin``; fencing is a no-op). `up` makes nn1 active. A `viewfs://` mount table
(`VIEWFS`, `VIEWFS_LINKS`) lies over the nameservice.

`up --secure` runs it in Hadoop's secure mode against an MIT Kerberos KDC of its own
(integration/kdc.py): Kerberos for every RPC, SASL-protected block transfer, HTTPS for
the NameNode and DataNode web servers, short-lived delegation tokens.

By default the cluster has one node: its NodeManager runs on 127.0.0.1 beside the
client, sees everything the client sees and shares ``<work>/conf``. ``up --nodes N``
(N >= 2) emulates N separate hosts instead; see `Node` and `isolation_script`.

The jars are fetched once by Maven into ``<cache>/lib``; the configuration is written
into ``<work>/conf`` on every ``up`` (it is derived, never edited by hand).

Only the standard library is used here: ``integration/cluster`` runs before any
virtual environment exists.

Locations (both ignored by git, both overridable):
    FLINKYARN_HADOOP_CACHE   the jar cache      (default: <repo>/.cache/hadoop-<version>)
    FLINKYARN_HADOOP_WORK    the work folder    (default: <repo>/.local-hadoop)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

# Standard library only, so the system Python of integration/cluster can import it.
from flinkyarn import retry

HADOOP_VERSION = "3.5.0"
REPO = Path(__file__).resolve().parent.parent
POM = Path(__file__).resolve().parent / "pom.xml"
HOST = "127.0.0.1"

# Heaps are small on purpose: the machine is shared with the TaskExecutors and Spark.
HEAP_MB = {"namenode": 256, "namenode-2": 256, "datanode": 192, "resourcemanager": 384,
           "nodemanager": 256}

# What each NodeManager offers to containers. vcores are a scheduling unit, not cores.
# Several nodes share one machine (24 GiB here), so each offers less by default.
NM_MEMORY_MB = {"one": 8192, "several": 6144}
NM_VCORES = 8
MAX_NODES = 253  # node i listens on 127.0.0.(i+1)

# The --add-opens/--add-exports set Hadoop's own hadoop-functions.sh adds on JDK 17.
JDK17_OPTIONS = [
    "--add-opens=java.base/java.util.regex=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.util=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
]

# Variables that break skein's driver connection to 127.0.0.1 (gRPC honours them).
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


class ClusterError(RuntimeError):
    """`up` or `down` could not do what was asked; the message says why."""


@dataclasses.dataclass(frozen=True)
class Daemon:
    name: str
    main_class: str
    # (configuration key, port) pairs the daemon listens on; checked before start.
    ports: tuple[tuple[str, int], ...]


NAMESERVICE = "local-ns"
NAMENODE_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"


def _namenode_daemon(name: str, namenode_id: str, rpc: int, http: int, https: int) -> Daemon:
    kinds = ("rpc", "http", "https")
    return Daemon(name, NAMENODE_MAIN, tuple(
        (f"dfs.namenode.{kind}-address.{NAMESERVICE}.{namenode_id}", port)
        for kind, port in zip(kinds, (rpc, http, https))))


# nn1 keeps the single NameNode's daemon name (pid and log file) and ports.
DAEMONS = (
    _namenode_daemon("namenode", "nn1", 8020, 9870, 9871),
    _namenode_daemon("namenode-2", "nn2", 8022, 9880, 9881),
    Daemon("datanode", "org.apache.hadoop.hdfs.server.datanode.DataNode",
           (("dfs.datanode.address", 9866), ("dfs.datanode.http.address", 9864),
            ("dfs.datanode.ipc.address", 9867), ("dfs.datanode.https.address", 9865))),
    Daemon("resourcemanager", "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
           (("yarn.resourcemanager.address", 8032),
            ("yarn.resourcemanager.scheduler.address", 8030),
            ("yarn.resourcemanager.resource-tracker.address", 8031),
            ("yarn.resourcemanager.admin.address", 8033),
            ("yarn.resourcemanager.webapp.address", 8088))),
    Daemon("nodemanager", "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
           (("yarn.nodemanager.address", 8041),
            ("yarn.nodemanager.localizer.address", 8040),
            ("yarn.nodemanager.webapp.address", 8042))),
)
DAEMON_BY_NAME = {d.name: d for d in DAEMONS}


def _port(key: str) -> int:
    for daemon in DAEMONS:
        for k, port in daemon.ports:
            if k == key:
                return port
    raise KeyError(key)


RM_WEB = f"http://{HOST}:{_port('yarn.resourcemanager.webapp.address')}"


class NameNode(NamedTuple):
    """One NameNode of the nameservice: its HA id, its addresses (host:port) and its
    daemon's name (pid and log file)."""

    id: str
    rpc: str
    http: str
    https: str
    daemon: str


def _namenode(namenode_id: str, daemon: str) -> NameNode:
    def address(kind: str) -> str:
        return f"{HOST}:{_port(f'dfs.namenode.{kind}-address.{NAMESERVICE}.{namenode_id}')}"
    return NameNode(namenode_id, address("rpc"), address("http"), address("https"), daemon)


NAMENODES = (_namenode("nn1", "namenode"), _namenode("nn2", "namenode-2"))
NAMENODE_BY_ID = {n.id: n for n in NAMENODES}
DEFAULT_FS = f"hdfs://{NAMESERVICE}"
# A viewfs:// mount table over the nameservice: each link's mount point, and the path
# on DEFAULT_FS it leads to; everything else falls through to DEFAULT_FS's root.
VIEWFS = "viewfs://local-view"
VIEWFS_LINKS = {"/data": "/tmp/viewfs-data"}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the jars, configuration, data, logs and pid files live."""

    cache: Path
    work: Path

    @classmethod
    def default(cls) -> "Layout":
        cache = os.environ.get("FLINKYARN_HADOOP_CACHE") or REPO / ".cache" / f"hadoop-{HADOOP_VERSION}"
        work = os.environ.get("FLINKYARN_HADOOP_WORK") or REPO / ".local-hadoop"
        return cls(Path(cache).resolve(), Path(work).resolve())

    lib = property(lambda self: self.cache / "lib")
    conf = property(lambda self: self.work / "conf")
    logs = property(lambda self: self.work / "logs")
    pids = property(lambda self: self.work / "pids")
    data = property(lambda self: self.work / "data")
    bin = property(lambda self: self.work / "bin")
    # Holds the empty `webapps/<name>` folders HttpServer2 looks up on the classpath:
    # the HDFS web apps ship in Hadoop's tarball, not in its Maven jars.
    resources = property(lambda self: self.work / "resources")

    # The node count of the last `up`; `status` and `down` read it.
    node_record = property(lambda self: self.work / "nodes.json")
    kdc_dir = property(lambda self: self.work / "kdc")

    def kdc(self):
        from kdc import Kdc
        return Kdc(self.kdc_dir, _user())

    def log(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def pidfile(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"


@dataclasses.dataclass(frozen=True)
class Node:
    """One NodeManager "host" of the cluster.

    A shared node (the single node of a one-node cluster) is the NodeManager as it always
    was: on 127.0.0.1, configured by `<work>/conf`, seeing the whole machine.

    An isolated node (each node of a cluster of several) has its own loopback address
    (node i: 127.0.0.(i+1)) bound by every NodeManager address, its own configuration
    (the HADOOP_CONF_DIR its containers get), local, log and temporary folders under
    `<work>/nodes/node<i>`, and runs in a private mount namespace (`isolation_script`)
    in which the client's files are hidden and `/tmp` is the node's own. Containers
    inherit that namespace (DefaultContainerExecutor), so a container that reaches for a
    path only the client has fails, as it would on a real cluster.
    """

    index: int  # 1-based
    host: str
    isolated: bool
    # The daemon name: pid file, log file, command-line marker. Node 1 keeps the
    # single-node names ("nodemanager") that scripts and the benchmarks read.
    name: str
    conf: Path
    local_dirs: Path
    log_dirs: Path
    hadoop_tmp: Path
    # What the node sees as /tmp; None for a shared node (the machine's /tmp).
    tmp: Path | None
    # The node's own folder (everything above lives in it); None for a shared node.
    root: Path | None


def cluster_nodes(layout: Layout, count: int) -> tuple[Node, ...]:
    """The nodes of a cluster of `count` nodes (pure: nothing is created)."""
    if not 1 <= count <= MAX_NODES:
        raise ClusterError(f"--nodes must be between 1 and {MAX_NODES}, not {count}")
    if count == 1:
        return (Node(1, HOST, False, "nodemanager", layout.conf, layout.data / "nm-local",
                     layout.data / "nm-logs", layout.data / "tmp", None, None),)
    nodes = []
    for index in range(1, count + 1):
        root = layout.work / "nodes" / f"node{index}"
        nodes.append(Node(index, f"127.0.0.{index + 1}", True,
                          "nodemanager" if index == 1 else f"nodemanager-{index}",
                          root / "conf", root / "local", root / "container-logs",
                          root / "hadoop-tmp", root / "tmp", root))
    return tuple(nodes)


def nm_memory_mb(count: int) -> int:
    default = NM_MEMORY_MB["one" if count == 1 else "several"]
    return int(os.environ.get("FLINKYARN_NM_MEMORY_MB", default))


def nm_vcores() -> int:
    return int(os.environ.get("FLINKYARN_NM_VCORES", NM_VCORES))


def recorded_node_count(layout: Layout) -> int:
    """The node count of the last `up` in this work folder; 1 when there was none."""
    try:
        return int(json.loads(layout.node_record.read_text())["nodes"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return 1


def _record_node_count(layout: Layout, count: int, secure: bool = False) -> None:
    layout.work.mkdir(parents=True, exist_ok=True)
    layout.node_record.write_text(json.dumps({"nodes": count, "secure": secure}) + "\n")


def recorded_secure(layout: Layout) -> bool:
    """Whether the last `up` in this work folder was --secure."""
    try:
        return bool(json.loads(layout.node_record.read_text()).get("secure"))
    except (FileNotFoundError, ValueError, AttributeError):
        return False


# ---------------------------------------------------------------------------- jars


def ensure_jars(layout: Layout, say: Callable[[str], None] = print) -> None:
    """Copies the pom's dependencies into the cache once; later calls need no network."""
    marker = layout.cache / ".complete"
    if marker.exists() and marker.read_text() == _pom_digest():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("Maven (mvn) is not on PATH; it fetches the Hadoop jars "
                           "(Debian package: maven)")
    say(f"fetching Hadoop {HADOOP_VERSION} jars with Maven into {layout.lib} ...")
    tmp = layout.cache / "lib.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
         f"-DoutputDirectory={tmp}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise ClusterError("Maven could not fetch the Hadoop jars:\n" + _tail_text(result.stdout))
    shutil.rmtree(layout.lib, ignore_errors=True)
    tmp.rename(layout.lib)
    marker.write_text(_pom_digest())


def _pom_digest() -> str:
    import hashlib
    return hashlib.sha256(POM.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- config


def _site(properties: dict[str, object]) -> str:
    rows = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n"
                   for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def _address(key: str, host: str = HOST) -> str:
    return f"{host}:{_port(key)}"


def node_properties(node: Node, count: int) -> dict[str, object]:
    """The yarn-site keys that make a NodeManager the given node: every address it binds
    carries the node's host, every folder is the node's own."""
    memory = nm_memory_mb(count)
    return {
        "yarn.nodemanager.hostname": node.host,
        "yarn.nodemanager.address": _address("yarn.nodemanager.address", node.host),
        "yarn.nodemanager.localizer.address":
            _address("yarn.nodemanager.localizer.address", node.host),
        "yarn.nodemanager.webapp.address": _address("yarn.nodemanager.webapp.address", node.host),
        # Only bound when enabled (timeline service v2, AMRMProxy), and then on the
        # node's address rather than the defaults' 0.0.0.0.
        "yarn.nodemanager.collector-service.address": f"{node.host}:8048",
        "yarn.nodemanager.amrmproxy.address": f"{node.host}:8049",
        "yarn.nodemanager.local-dirs": node.local_dirs,
        "yarn.nodemanager.log-dirs": node.log_dirs,
        "yarn.nodemanager.resource.memory-mb": memory,
        "yarn.nodemanager.resource.cpu-vcores": nm_vcores(),
        # Its localized files outlive a restart (the secure tier's, from plain to secure):
        # without a state to recover from, a NodeManager deletes its local dirs as it
        # starts, and the next container localizes the 1 GB environment again (85 s).
        "yarn.nodemanager.recovery.enabled": "true",
        "yarn.nodemanager.recovery.dir": node.hadoop_tmp / "nm-recovery",
        # The localizer is a JVM the NodeManager starts per application; without this its
        # hsperfdata folder lands in the node's /tmp, which the tests keep clean.
        "yarn.nodemanager.container-localizer.java.opts": "-Xmx256m -XX:-UsePerfData",
    }


def write_config(layout: Layout, count: int = 1) -> None:
    """Writes the four site files, log4j and the `yarn`/`hdfs` commands skein and users
    call into `<work>/conf`, and, for a cluster of several nodes, each node's own copy
    (with its NodeManager keys) into its `conf` folder."""
    conf, data = layout.conf, layout.data
    for folder in (conf, layout.logs, layout.pids, data, layout.bin):
        folder.mkdir(parents=True, exist_ok=True)
    for webapp in ("hdfs", "datanode", "secondary", "journal"):
        (layout.resources / "webapps" / webapp).mkdir(parents=True, exist_ok=True)
    nodes = cluster_nodes(layout, count)
    shared = _site_files(layout, count)
    if not nodes[0].isolated:
        shared["yarn-site.xml"].update(node_properties(nodes[0], count))
    _write_site_files(conf, shared)
    for node in nodes:
        if not node.isolated:
            continue
        for folder in (node.conf, node.local_dirs, node.log_dirs, node.hadoop_tmp, node.tmp,
                       node.root / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        files = _site_files(layout, count)
        files["core-site.xml"]["hadoop.tmp.dir"] = node.hadoop_tmp
        files["yarn-site.xml"].update(node_properties(node, count))
        if recorded_secure(layout):
            _node_security(layout, node, files)
        _write_site_files(node.conf, files)
    classpath = f"{conf}:{layout.lib}/*"
    _write_command(layout, "yarn", {
        "classpath": None,  # handled inline below
        "application": "org.apache.hadoop.yarn.client.cli.ApplicationCLI",
        "applicationattempt": "org.apache.hadoop.yarn.client.cli.ApplicationCLI",
        "container": "org.apache.hadoop.yarn.client.cli.ApplicationCLI",
        "node": "org.apache.hadoop.yarn.client.cli.NodeCLI",
        "queue": "org.apache.hadoop.yarn.client.cli.QueueCLI",
        "logs": "org.apache.hadoop.yarn.client.cli.LogsCLI",
        "rmadmin": "org.apache.hadoop.yarn.client.cli.RMAdminCLI",
    }, classpath)
    _write_command(layout, "hdfs", {
        "dfs": "org.apache.hadoop.fs.FsShell",
        "dfsadmin": "org.apache.hadoop.hdfs.tools.DFSAdmin",
        "haadmin": "org.apache.hadoop.hdfs.tools.DFSHAAdmin",
        "fetchdt": "org.apache.hadoop.hdfs.tools.DelegationTokenFetcher",
        "classpath": None,
    }, classpath)


def _node_security(layout: Layout, node: Node, files: dict[str, dict[str, object]]) -> None:
    """A secure node's own copies of what it needs from the realm (the KDC's folder is
    hidden there, as another host's disk): the NodeManager's keytab and the truststore,
    readable by the node's user only."""
    kdc = layout.kdc()
    folder = node.root / "security"
    folder.mkdir(mode=0o700, exist_ok=True)
    for source, name in ((kdc.services_keytab, "nm.keytab"), (kdc.truststore, "truststore.p12"),
                         (kdc.ca_pem, "ca.pem")):
        shutil.copyfile(source, folder / name)
        (folder / name).chmod(0o600)
    files["yarn-site.xml"]["yarn.nodemanager.keytab"] = folder / "nm.keytab"
    files["core-site.xml"]["hadoop.http.authentication.kerberos.keytab"] = folder / "nm.keytab"
    files["ssl-server.xml"]["ssl.server.truststore.location"] = folder / "truststore.p12"
    files["ssl-client.xml"]["ssl.client.truststore.location"] = folder / "truststore.p12"


def _write_site_files(conf: Path, files: dict[str, dict[str, object]]) -> None:
    for name, properties in files.items():
        (conf / name).write_text(_site(properties))
    (conf / "log4j.properties").write_text(
        "log4j.rootLogger=INFO,console\n"
        "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.console.target=System.err\n"
        "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n\n"
        "log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR\n")


def _site_files(layout: Layout, count: int) -> dict[str, dict[str, object]]:
    """The site files every daemon and client shares (no NodeManager-specific keys)."""
    files = _plain_site_files(layout, count)
    if recorded_secure(layout):
        for name, properties in _secure_site_files(layout).items():
            files.setdefault(name, {}).update(properties)
    return files


RM_USER = "rm"  # the short name of the ResourceManager's principal, on a secure cluster


def _secure_site_files(layout: Layout) -> dict[str, dict[str, object]]:
    """Hadoop's secure mode: Kerberos for RPC (every service principal maps to the one
    local user the daemons run as, but the ResourceManager's, which is `rm`, as `yarn` is
    on a real cluster: the tokens an application hands to YARN must name it as their
    renewer, not the application's user), block access tokens, SASL on the DataNode's data
    transfer (no privileged ports), which Hadoop only accepts with HTTPS-only web
    servers; delegation tokens that expire within minutes. Both NameNodes are
    `nn/127.0.0.1` (one host), each with its own HTTPS address."""
    from kdc import REALM, TOKEN_MAX_LIFETIME_MS, TOKEN_RENEW_INTERVAL_MS, principal

    kdc = layout.kdc()
    keytab = kdc.services_keytab
    password = kdc.store_password
    realm = REALM.replace(".", "\\.")
    return {
        "core-site.xml": {
            "hadoop.security.authentication": "kerberos",
            "hadoop.security.authorization": "false",
            "hadoop.rpc.protection": "authentication",
            "hadoop.security.auth_to_local":
                f"RULE:[2:$1@$0](rm@{realm})s/.*/{RM_USER}/\n"
                f"RULE:[2:$1@$0](.*@{realm})s/.*/{_user()}/\nDEFAULT",
            # WebHDFS (and every web endpoint) authenticates with SPNEGO.
            "hadoop.http.authentication.type": "kerberos",
            "hadoop.http.authentication.kerberos.principal": principal("HTTP"),
            "hadoop.http.authentication.kerberos.keytab": keytab,
            "hadoop.http.authentication.simple.anonymous.allowed": "false",
            # The ResourceManager may obtain HDFS tokens on behalf of an application's
            # user: the new tokens it hands the NodeManagers keep localizing containers
            # past the tokens' maximum lifetime.
            f"hadoop.proxyuser.{RM_USER}.hosts": "*",
            f"hadoop.proxyuser.{RM_USER}.groups": "*",
        },
        "hdfs-site.xml": {
            "dfs.block.access.token.enable": "true",
            "dfs.namenode.kerberos.principal": principal("nn"),
            "dfs.namenode.keytab.file": keytab,
            "dfs.namenode.kerberos.internal.spnego.principal": principal("HTTP"),
            "dfs.datanode.kerberos.principal": principal("dn"),
            "dfs.datanode.keytab.file": keytab,
            "dfs.web.authentication.kerberos.principal": principal("HTTP"),
            "dfs.web.authentication.kerberos.keytab": keytab,
            "dfs.data.transfer.protection": "authentication",
            "dfs.http.policy": "HTTPS_ONLY",
            **{f"dfs.namenode.https-address.{NAMESERVICE}.{n.id}": n.https for n in NAMENODES},
            "dfs.datanode.https.address": _address("dfs.datanode.https.address"),
            "dfs.namenode.delegation.token.renew-interval": TOKEN_RENEW_INTERVAL_MS,
            "dfs.namenode.delegation.token.max-lifetime": TOKEN_MAX_LIFETIME_MS,
        },
        "yarn-site.xml": {
            "yarn.resourcemanager.principal": principal("rm"),
            "yarn.resourcemanager.keytab": keytab,
            "yarn.nodemanager.principal": principal("nm"),
            "yarn.nodemanager.keytab": keytab,
            "yarn.resourcemanager.delegation.token.renew-interval": TOKEN_RENEW_INTERVAL_MS,
            "yarn.resourcemanager.delegation.token.max-lifetime": TOKEN_MAX_LIFETIME_MS,
            "yarn.resourcemanager.proxy-user-privileges.enabled": "true",
            # ... once a token has less than this left before its maximum lifetime (the
            # default, 3 h, is longer than the whole of these tokens' lives): until then
            # it renews the application's own, which a container localizing meanwhile uses.
            "yarn.resourcemanager.system-credentials.valid-time-remaining":
                TOKEN_MAX_LIFETIME_MS // 4,
            # Aggregating a secure node's logs opens them with Hadoop's SecureIOUtils,
            # which needs the native libhadoop that no Maven jar carries: the NodeManager
            # would die at the first application's end. The logs stay on the nodes.
            "yarn.log-aggregation-enable": "false",
        },
        "ssl-server.xml": {
            "ssl.server.keystore.location": kdc.keystore,
            "ssl.server.keystore.type": "pkcs12",
            "ssl.server.keystore.password": password,
            "ssl.server.keystore.keypassword": password,
            "ssl.server.truststore.location": kdc.truststore,
            "ssl.server.truststore.type": "pkcs12",
            "ssl.server.truststore.password": password,
        },
        "ssl-client.xml": {
            "ssl.client.truststore.location": kdc.truststore,
            "ssl.client.truststore.type": "pkcs12",
            "ssl.client.truststore.password": password,
        },
    }


def _plain_site_files(layout: Layout, count: int) -> dict[str, dict[str, object]]:
    data = layout.data
    memory = nm_memory_mb(count)
    view = VIEWFS.removeprefix("viewfs://")
    return {
        "core-site.xml": {
            "fs.defaultFS": DEFAULT_FS,
            **{f"fs.viewfs.mounttable.{view}.link.{point}": f"{DEFAULT_FS}{path}"
               for point, path in VIEWFS_LINKS.items()},
            f"fs.viewfs.mounttable.{view}.linkFallback": f"{DEFAULT_FS}/",
            "hadoop.tmp.dir": data / "tmp",
            # The local cluster runs as one user; let it impersonate for skein and tests.
            f"hadoop.proxyuser.{_user()}.hosts": "*",
            f"hadoop.proxyuser.{_user()}.groups": "*",
        },
        "hdfs-site.xml": {
            "dfs.replication": 1,
            **_ha_properties(layout),
            "dfs.datanode.data.dir": data / "datanode",
            "dfs.namenode.rpc-bind-host": HOST,
            "dfs.datanode.address": _address("dfs.datanode.address"),
            "dfs.datanode.http.address": _address("dfs.datanode.http.address"),
            "dfs.datanode.ipc.address": _address("dfs.datanode.ipc.address"),
            "dfs.datanode.hostname": HOST,
            "dfs.namenode.safemode.extension": 0,
            "dfs.namenode.safemode.min.datanodes": 1,
            "dfs.webhdfs.enabled": "true",
            # A file's close waits until a DataNode has reported its last block. The
            # writer (for WebHDFS the DataNode's own client) asks, and when the report
            # is not in yet, asks again after 400 ms, doubling, 5 times: half the small
            # writes here took 0.42 s instead of 0.03 s (the job store, staging,
            # spark-submit's uploads alike). Ask again after 25 ms, doubling, up to 10
            # times: a close fails after 25 s (12 s before), and the first wait is 16x shorter.
            "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": 25,
            "dfs.client.block.write.locateFollowingBlock.retries": 10,
        },
        "yarn-site.xml": {
            "yarn.resourcemanager.hostname": HOST,
            "yarn.resourcemanager.address": _address("yarn.resourcemanager.address"),
            "yarn.resourcemanager.scheduler.address": _address("yarn.resourcemanager.scheduler.address"),
            "yarn.resourcemanager.resource-tracker.address": _address("yarn.resourcemanager.resource-tracker.address"),
            "yarn.resourcemanager.admin.address": _address("yarn.resourcemanager.admin.address"),
            "yarn.resourcemanager.webapp.address": _address("yarn.resourcemanager.webapp.address"),
            "yarn.scheduler.minimum-allocation-mb": 128,
            "yarn.scheduler.maximum-allocation-mb": memory,
            "yarn.scheduler.maximum-allocation-vcores": nm_vcores(),
            # A small machine: the disk-health checker marks the node unhealthy on a
            # full-ish disk, and the vmem check kills JVMs for their reserved address space.
            "yarn.nodemanager.disk-health-checker.enable": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            # Containers see only whitelisted variables; JAVA_HOME and PATH must reach them.
            "yarn.nodemanager.env-whitelist":
                "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,"
                "CLASSPATH_PREPEND_DISTCACHE,HADOOP_YARN_HOME,HADOOP_HOME,PATH,LANG,TZ",
            # What skein's ApplicationMaster (and any Java container) runs with: the
            # configuration of the node it runs on (the NodeManager hands it over).
            "yarn.application.classpath": f"$HADOOP_CONF_DIR,{layout.lib}/*",
            # Logs of finished applications go to HDFS, so `yarn logs` works after the end.
            "yarn.log-aggregation-enable": "true",
            "yarn.nodemanager.remote-app-log-dir": "/tmp/logs",
            "yarn.log-aggregation.retain-seconds": 7 * 24 * 3600,
            "yarn.nodemanager.delete.debug-delay-sec": 0,
            "yarn.resourcemanager.nodemanager-connect-retries": 10,
            "yarn.nodemanager.resourcemanager.minimum.version": "NONE",
        },
        "capacity-scheduler.xml": {
            # The ResourceManager does not start without this file.
            "yarn.scheduler.capacity.root.queues": "default,small",
            "yarn.scheduler.capacity.root.default.capacity": 90,
            "yarn.scheduler.capacity.root.default.maximum-capacity": 100,
            # One user may still take all of the cluster in default, as with 100 above.
            "yarn.scheduler.capacity.root.default.user-limit-factor": 2,
            "yarn.scheduler.capacity.root.default.state": "RUNNING",
            "yarn.scheduler.capacity.root.default.acl_submit_applications": "*",
            "yarn.scheduler.capacity.root.default.acl_administer_queue": "*",
            # A busy queue on demand (tests/yarn/test_busy_queue_on_yarn.py): room for one
            # AppMaster, and an AM limit that keeps any second application ACCEPTED.
            "yarn.scheduler.capacity.root.small.capacity": 10,
            "yarn.scheduler.capacity.root.small.maximum-capacity": 10,
            "yarn.scheduler.capacity.root.small.maximum-am-resource-percent": 0.1,
            "yarn.scheduler.capacity.root.small.state": "RUNNING",
            "yarn.scheduler.capacity.root.small.acl_submit_applications": "*",
            "yarn.scheduler.capacity.root.small.acl_administer_queue": "*",
            # At the default 0.1, a second application waits in ACCEPTED forever.
            "yarn.scheduler.capacity.maximum-am-resource-percent": 0.5,
            "yarn.scheduler.capacity.resource-calculator":
                "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator",
        },
    }


def _ha_properties(layout: Layout) -> dict[str, object]:
    """The nameservice: each NameNode's addresses and own name folder (the keys suffixed
    with the nameservice and NameNode ids, which Hadoop reads for that NameNode only),
    the edit log they share, manual failover with nothing to fence (one machine)."""
    properties: dict[str, object] = {
        "dfs.nameservices": NAMESERVICE,
        f"dfs.ha.namenodes.{NAMESERVICE}": ",".join(n.id for n in NAMENODES),
    }
    for namenode in NAMENODES:
        suffix = f"{NAMESERVICE}.{namenode.id}"
        properties[f"dfs.namenode.rpc-address.{suffix}"] = namenode.rpc
        properties[f"dfs.namenode.http-address.{suffix}"] = namenode.http
        properties[f"dfs.namenode.name.dir.{suffix}"] = name_dir(layout, namenode.id)
    return {
        **properties,
        "dfs.namenode.shared.edits.dir": f"file://{shared_edits_dir(layout)}",
        "dfs.ha.automatic-failover.enabled": "false",
        "dfs.ha.fencing.methods": "shell(/bin/true)",
        # The standby reads the shared edits only in finished segments: the active rolls
        # one every 10 s (Hadoop: 2 min) and the standby looks every second (1 min), so
        # a restarted standby knows of deleted blocks, and leaves safe mode, in seconds.
        "dfs.ha.log-roll.period": "10s",
        "dfs.ha.tail-edits.period": "1s",
        f"dfs.client.failover.proxy.provider.{NAMESERVICE}":
            "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider",
    }


def name_dir(layout: Layout, namenode_id: str) -> Path:
    """NameNode `namenode_id`'s own folder of the namespace (fsimage, edits)."""
    return layout.data / NAMENODE_BY_ID[namenode_id].daemon


def shared_edits_dir(layout: Layout) -> Path:
    """The edit log both NameNodes write (the active one) and read (the standby)."""
    return layout.data / "shared-edits"


def _write_command(layout: Layout, name: str, subcommands: dict[str, str | None],
                   classpath: str) -> None:
    """A small stand-in for Hadoop's shell launcher: `yarn classpath --glob` (what skein
    calls), and the client subcommands a user needs (`yarn logs`, `hdfs dfs`, ...);
    HADOOP_CLIENT_OPTS adds JVM options, as with Hadoop's."""
    cases = []
    for sub, main in subcommands.items():
        if sub == "application" or sub == "applicationattempt" or sub == "container":
            # ApplicationCLI takes the subcommand's name as its first argument.
            cases.append(f'  {sub}) exec "$JAVA" $OPTS -cp "$CP" {main} {sub} "$@" ;;')
        elif main is not None:
            cases.append(f'  {sub}) exec "$JAVA" $OPTS -cp "$CP" {main} "$@" ;;')
    glob = ":".join([str(layout.conf)] + sorted(str(p) for p in layout.lib.glob("*.jar")))
    script = f"""#!/usr/bin/env bash
# Written by integration/cluster for the local Hadoop in {layout.work}; do not edit.
set -e
export HADOOP_CONF_DIR="{layout.conf}"
JAVA="${{JAVA_HOME:-{java_home()}}}/bin/java"
CP="{classpath}"
OPTS="-Xmx256m -Dlog4j.configuration=file:{layout.conf}/log4j.properties \
-Dhadoop.root.logger=WARN,console {' '.join(java_options(layout))} ${{HADOOP_CLIENT_OPTS:-}}"
sub="${{1:-}}"; shift || true
case "$sub" in
  classpath)
    if [ "${{1:-}}" = "--glob" ]; then echo "{glob}"; else echo "$CP"; fi ;;
{chr(10).join(cases)}
  *) echo "usage: {name} {{{','.join(subcommands)}}} ..." >&2; exit 2 ;;
esac
"""
    path = layout.bin / name
    path.write_text(script)
    path.chmod(0o755)


def java_options(layout: Layout, krb5_conf: Path | None = None) -> list[str]:
    """What every JVM of the cluster and its client gets: JDK 17's openings and, on a
    secure cluster, the realm's krb5.conf (Java reads no KRB5_CONFIG); an isolated node
    has it as /etc/krb5.conf."""
    if not recorded_secure(layout):
        return list(JDK17_OPTIONS)
    return [*JDK17_OPTIONS, f"-Djava.security.krb5.conf={krb5_conf or layout.kdc().krb5_conf}"]


def _user() -> str:
    import getpass
    return getpass.getuser()


def java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        raise ClusterError("no java on PATH and JAVA_HOME is unset (OpenJDK 17 is needed)")
    return str(Path(java).resolve().parent.parent)


# -------------------------------------------------------------------------- process


def read_pid(layout: Layout, daemon: str) -> int | None:
    """The pid of our running daemon, or None; a stale or foreign pid file is ignored."""
    try:
        pid = int(layout.pidfile(daemon).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _is_ours(pid, layout, daemon) else None


def _is_ours(pid: int, layout: Layout, daemon: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    marker = f"-Dflinkyarn.daemon={daemon}@{layout.work}".encode()
    return marker in cmdline


def _port_in_use(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _check_ports(daemon: Daemon, host: str = HOST, name: str | None = None) -> None:
    taken = [(key, port) for key, port in daemon.ports if _port_in_use(port, host)]
    if taken:
        listing = ", ".join(f"{port} ({key})" for key, port in taken)
        raise ClusterError(
            f"cannot start the {name or daemon.name}: port {listing} on {host} is already in use "
            f"by another process. Stop it (e.g. `ss -ltnp | grep :{taken[0][1]}` shows "
            f"which), or stop another local Hadoop with its own `integration/cluster down`.")


def daemon_env(layout: Layout, conf: Path | None = None) -> dict[str, str]:
    # Nor the caller's ticket cache: a daemon logs in from its keytab, and a NodeManager
    # hands its environment to its containers, which must authenticate with their
    # delegation tokens alone (a container that found the user's ticket would outlive
    # its tokens unnoticed: HDFS clients fall back to a ticket).
    env = {k: v for k, v in os.environ.items() if k not in (*PROXY_VARIABLES, "KRB5CCNAME")}
    env["JAVA_HOME"] = java_home()
    # A NodeManager hands HADOOP_CONF_DIR to its containers: its node's configuration.
    env["HADOOP_CONF_DIR"] = str(conf or layout.conf)
    # The NodeManager hands its PATH to containers: our `yarn`/`hdfs` first.
    env["PATH"] = f"{layout.bin}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


# Where an isolated node's start stages the folders it keeps, in its own namespace only.
STAGE = "/mnt"


def client_paths() -> tuple[Path, ...]:
    """What only the client has, hidden inside an isolated node: the repository (with
    its .venv) and the user's flinkyarn and skein state."""
    home = Path.home()
    return (REPO, home / ".flinkyarn", home / ".skein", home / ".cache" / "flinkyarn")


def isolation_script(layout: Layout, node: Node, hidden: Iterable[Path]) -> str:
    """The shell prelude that turns a fresh private mount namespace into the node's view
    of the machine, then execs the NodeManager (`"$0" "$@"`), keeping the pid.

    What the node needs (the jars, the shared configuration and commands, the node's own
    folder) and the node's /tmp are first bound onto a staging tmpfs at STAGE (outside
    /tmp, which is about to change). The node's /tmp is bound over /tmp; an empty tmpfs
    covers each hidden path (made first if the new /tmp no longer has it: a checkout
    under /tmp); each kept folder is moved back to its place. Everything else (the JDK,
    the base Python interpreter, the rest of the home folder) stays visible.
    """
    import shlex
    hidden = sorted({Path(h) for h in hidden})
    wanted = sorted({layout.cache, layout.conf, layout.bin, layout.resources, node.root})
    tmp = Path("/tmp")
    covered = [k for k in wanted if any(k == h or h in k.parents for h in (*hidden, tmp))]
    # A folder inside another kept folder comes back with it.
    keep = [k for k in covered if not any(other in k.parents for other in covered)]
    q = lambda path: shlex.quote(str(path))  # noqa: E731
    lines = ["set -e"]
    if recorded_secure(layout) and Path("/etc/krb5.conf").is_file():
        # A host of a secure cluster has the realm's krb5.conf as its own (bound first:
        # the file's folder is hidden below).
        lines.append(f"mount --bind {q(layout.kdc().krb5_conf)} /etc/krb5.conf")
    lines += [f"mkdir -p {STAGE}", f"mount -t tmpfs -o mode=700 flinkyarn-stage {STAGE}",
             f"mkdir {STAGE}/tmp && mount --bind {q(node.tmp)} {STAGE}/tmp"]
    for i, path in enumerate(keep):
        lines.append(f"mkdir {STAGE}/{i} && mount --bind {q(path)} {STAGE}/{i}")
    lines.append(f"mount --move {STAGE}/tmp /tmp")
    for path in hidden:
        lines.append(f"mkdir -p {q(path)} && mount -t tmpfs -o mode=755 flinkyarn-hidden {q(path)}")
    for i, path in enumerate(keep):
        lines.append(f"mkdir -p {q(path)} && mount --move {STAGE}/{i} {q(path)}")
    lines += [f"umount {STAGE}", 'exec "$0" "$@"']
    return "\n".join(lines) + "\n"


def _check_isolation_possible(layout: Layout) -> None:
    if os.geteuid() != 0:
        raise ClusterError("several nodes need root: each NodeManager runs in its own "
                           "mount namespace (unshare -m)")
    if shutil.which("unshare") is None:
        raise ClusterError("several nodes need `unshare` (Debian package: util-linux)")


def _java_command(layout: Layout, name: str, heap: int, main_class: str,
                  args: Iterable[str] = (), conf: Path | None = None,
                  extra: Iterable[str] = (), krb5_conf: Path | None = None) -> list[str]:
    conf = conf or layout.conf
    return [
        f"{java_home()}/bin/java", f"-Xmx{heap}m", f"-Xms{min(heap, 64)}m",
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dflinkyarn.daemon={name}@{layout.work}",
        *extra,
        f"-Dhadoop.home.dir={layout.cache}", f"-Dyarn.home.dir={layout.cache}",
        f"-Dlog4j.configuration=file:{conf}/log4j.properties",
        "-Djava.net.preferIPv4Stack=true",
        *java_options(layout, krb5_conf),
        "-cp", f"{conf}:{layout.resources}:{layout.lib}/*",
        main_class, *args,
    ]


def _spawn(layout: Layout, name: str, command: list[str], env: dict[str, str]) -> int:
    log = open(layout.log(name), "ab")
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               env=env, cwd=layout.work, start_new_session=True)
    log.close()
    layout.pidfile(name).write_text(f"{process.pid}\n")
    # Popen can return before the child has exec'd (an isolated node: before its shell
    # has), while its command line is not the daemon's yet: read_pid would take the
    # daemon for gone.
    with contextlib.suppress(retry.GaveUp):
        retry.poll_until(lambda: _is_ours(process.pid, layout, name) or process.poll() is not None,
                         bool, pauses=retry.Backoff.fixed(0.005), deadline=retry.Deadline(10))
    return process.pid


def _start(layout: Layout, daemon: Daemon, args: Iterable[str] = ()) -> int:
    logs = [f"-Dhadoop.log.dir={layout.logs}", f"-Dyarn.log.dir={layout.logs}"]
    command = _java_command(layout, daemon.name, HEAP_MB[daemon.name], daemon.main_class,
                            args, extra=logs)
    return _spawn(layout, daemon.name, command, daemon_env(layout))


def _start_node(layout: Layout, node: Node) -> int:
    """Starts the node's NodeManager; for an isolated node inside a new mount namespace.
    `unshare` (without --fork) and `sh` exec, so the pid recorded is the JVM's."""
    daemon = DAEMON_BY_NAME["nodemanager"]
    if not node.isolated:
        logs = [f"-Dhadoop.log.dir={layout.logs}", f"-Dyarn.log.dir={layout.logs}"]
        command = _java_command(layout, node.name, HEAP_MB["nodemanager"], daemon.main_class,
                                extra=logs)
        return _spawn(layout, node.name, command, daemon_env(layout))
    for path in client_paths():
        # A path can only be covered if it exists; an empty folder hides "nothing" too.
        path.mkdir(parents=True, exist_ok=True)
    # The node's /tmp starts empty on every start, like a host's after a reboot.
    shutil.rmtree(node.tmp, ignore_errors=True)
    node.tmp.mkdir(parents=True)
    logs = node.root / "logs"
    extra = [f"-Dhadoop.log.dir={logs}", f"-Dyarn.log.dir={logs}",
             # The JVM's own scratch files (Jetty, hsperfdata) stay out of the node's
             # /tmp, which belongs to the containers.
             f"-Djava.io.tmpdir={node.hadoop_tmp}", "-XX:-UsePerfData"]
    java = _java_command(layout, node.name, HEAP_MB["nodemanager"], daemon.main_class,
                         conf=node.conf, extra=extra, krb5_conf=Path("/etc/krb5.conf"))
    script = isolation_script(layout, node, client_paths())
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *java]
    return _spawn(layout, node.name, command, daemon_env(layout, node.conf))


def _namenode_args(namenode_id: str) -> list[str]:
    """Which NameNode of the nameservice a NameNode JVM is: Hadoop would tell by the
    local addresses, which both share."""
    return ["-D", f"dfs.ha.namenode.id={namenode_id}"]


def _start_namenode(layout: Layout, namenode: NameNode) -> int:
    return _start(layout, DAEMON_BY_NAME[namenode.daemon], _namenode_args(namenode.id))


def hdfs_formatted(layout: Layout) -> bool:
    """Whether HDFS's folders are the pair's: each NameNode's and the shared edit log
    formatted."""
    folders = [*(name_dir(layout, n.id) for n in NAMENODES), shared_edits_dir(layout)]
    return all((folder / "current" / "VERSION").exists() for folder in folders)


def _format_namenodes(layout: Layout, say: Callable[[str], None]) -> None:
    """Formats the pair unless it is: nn1's folder and the shared edit log by NameNode
    -format, nn2's a copy of nn1's (what -bootstrapStandby would fetch from a running
    nn1, without waiting for it). Other HDFS data (a single NameNode's, from before the
    pair; a format cut short) is test data: formatted anew, the DataNode's blocks gone
    with it. Raises while an HDFS daemon runs on that data."""
    if hdfs_formatted(layout):
        return
    folders = [*(name_dir(layout, n.id) for n in NAMENODES), shared_edits_dir(layout),
               layout.data / "datanode"]
    if any(folder.exists() for folder in folders):
        running = [name for name in (*(n.daemon for n in NAMENODES), "datanode")
                   if read_pid(layout, name) is not None]
        if running:
            raise ClusterError(f"the HDFS data in {layout.data} is not an HA pair's (a single "
                               f"NameNode's, from before the pair?) and {', '.join(running)} "
                               f"runs on it; run `integration/cluster down` first")
        say(f"the HDFS data in {layout.data} is not an HA pair's (a single NameNode's, from "
            f"before the pair, or a format cut short): formatting the pair anew, its files "
            f"are gone")
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        say("formatting the NameNodes (first start) ...")
    first, *others = NAMENODES
    log = layout.logs / "namenode-format.log"
    with open(log, "wb") as out:
        code = subprocess.call(
            [f"{java_home()}/bin/java", "-Xmx256m", *java_options(layout),
             f"-Dlog4j.configuration=file:{layout.conf}/log4j.properties",
             "-cp", f"{layout.conf}:{layout.lib}/*", NAMENODE_MAIN,
             *_namenode_args(first.id), "-format", "-nonInteractive", "-force"],
            stdout=out, stderr=out, env=daemon_env(layout), cwd=layout.work)
    if code != 0:
        raise ClusterError(f"formatting the NameNode failed (exit {code}):\n{tail(log)}")
    for other in others:
        shutil.copytree(name_dir(layout, first.id), name_dir(layout, other.id))


# --------------------------------------------------------------------------- health


def _get_json(url: str, timeout: float = 3.0) -> dict:
    return json.loads(_http(url, timeout=timeout))


def _http(url: str, method: str = "GET", timeout: float = 3.0) -> bytes:
    """The body of the answer to an HTTP request to the cluster; OSError when it fails."""
    layout = Layout.default()
    if recorded_secure(layout):
        return _http_spnego(layout, url, method, timeout)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url, method=method), timeout=timeout) as response:
        return response.read()


def _cluster_ticket(layout: Layout) -> Path:
    """A ticket cache of the cluster's folder with a ticket of the user's own (the user's
    default cache is theirs), renewed when older than an hour. A KDC that is down makes
    it an OSError, as unreachable as any endpoint."""
    from kdc import KdcError

    cache = layout.kdc_dir / "cluster.cc"
    if not cache.exists() or time.time() - cache.stat().st_mtime > 3600:
        try:
            layout.kdc().kinit(cache)
        except KdcError as error:
            raise OSError(str(error)) from None
    return cache


def _http_spnego(layout: Layout, url: str, method: str, timeout: float) -> bytes:
    """A secure cluster's web endpoints want SPNEGO: curl (GSS-API) with the cluster's
    ticket, checking the NameNode's certificate against the realm's CA."""
    kdc = layout.kdc()
    cache = _cluster_ticket(layout)
    result = subprocess.run(
        ["curl", "-sS", "--fail", "--negotiate", "-u", ":", "--noproxy", "*", "-X", method,
         "--cacert", str(kdc.ca_pem), "--max-time", str(timeout), url],
        capture_output=True, env={**kdc.env(), "KRB5CCNAME": f"FILE:{cache}"})
    if result.returncode != 0:
        raise OSError(f"curl exit {result.returncode}: "
                      f"{result.stderr.decode(errors='replace').strip()[-300:]}")
    return result.stdout


def namenode_web(namenode_id: str, layout: Layout | None = None) -> str:
    """NameNode `namenode_id`'s web address: HTTPS on a secure cluster."""
    layout = layout or Layout.default()
    namenode = NAMENODE_BY_ID[namenode_id]
    if recorded_secure(layout):
        return f"https://{namenode.https}"
    return f"http://{namenode.http}"


def _namenode_bean(namenode_id: str, name: str, layout: Layout | None = None) -> dict | None:
    """The NameNode's JMX bean Hadoop:service=NameNode,name=`name`; None while it has none.
    OSError while it does not answer."""
    web = namenode_web(namenode_id, layout)
    try:
        beans = _get_json(f"{web}/jmx?qry=Hadoop:service=NameNode,name={name}")["beans"]
    except (KeyError, ValueError) as error:
        raise OSError(f"{web} answered no JMX: {error!r}") from None
    return beans[0] if beans else None


def namenode_state(namenode_id: str, layout: Layout | None = None) -> str | None:
    """The NameNode's HA state, "active" or "standby" ("initializing" while it starts);
    None when it does not answer. Cheap: one HTTP request, no JVM."""
    try:
        bean = _namenode_bean(namenode_id, "NameNodeStatus", layout)
    except OSError:
        return None
    return bean.get("State", "initializing") if bean else "initializing"


def active_namenode(layout: Layout | None = None) -> str | None:
    """The id of the active NameNode; None while none is."""
    return next((n.id for n in NAMENODES if namenode_state(n.id, layout) == "active"), None)


def _namenodes_answer(layout: Layout | None = None) -> tuple[bool, str]:
    """(healthy, what it is waiting for): each NameNode in an HA state, active or
    standby."""
    states = {n.id: namenode_state(n.id, layout) for n in NAMENODES}
    for namenode_id, state in states.items():
        if state is None:
            return False, (f"NameNode {namenode_id} web at {namenode_web(namenode_id, layout)} "
                           f"not answering")
        if state not in ("active", "standby"):
            return False, f"NameNode {namenode_id} {state}"
    return True, "NameNodes " + ", ".join(f"{i} {state}" for i, state in states.items())


def hdfs_state(layout: Layout | None = None) -> tuple[bool, str]:
    """(healthy, what it is waiting for): both NameNodes answer, one of them active and
    out of safe mode, and a DataNode is live at each."""
    active = []
    for namenode in NAMENODES:
        try:
            status = _namenode_bean(namenode.id, "NameNodeStatus", layout)
            fs = _namenode_bean(namenode.id, "FSNamesystemState", layout)
        except OSError as error:
            web = namenode_web(namenode.id, layout)
            return False, (f"NameNode {namenode.id} web at {web} not answering "
                           f"({error.__class__.__name__})")
        if status is None or fs is None:
            return False, f"NameNode {namenode.id} starting"
        if fs.get("NumLiveDataNodes", 0) < 1:
            return False, f"no live DataNode at NameNode {namenode.id} yet"
        if status.get("State") == "active":
            active.append(namenode.id)
            if fs.get("FSState") != "Operational":
                return False, f"HDFS in {fs.get('FSState')} (NameNode {namenode.id})"
    if len(active) != 1:
        return False, f"{len(active)} NameNodes active ({', '.join(active) or 'none'})"
    return True, f"HDFS operational, out of safe mode; {active[0]} active"


def rm_nodes() -> list[dict]:
    """The ResourceManager's node reports (/ws/v1/cluster/nodes), or [] when it is down."""
    try:
        return (_get_json(f"{RM_WEB}/ws/v1/cluster/nodes").get("nodes") or {}).get("node", [])
    except (OSError, ValueError):
        return []


def rm_node_of(node: Node, reports: list[dict]) -> dict | None:
    """The ResourceManager's report of the node, matched by its NodeManager web address.

    The NodeManager names itself by the reverse lookup of its address: 127.0.0.1 is
    "localhost" (/etc/hosts), an isolated node's 127.0.0.x has no name and stays as is.
    """
    host = "localhost" if node.host == HOST else node.host
    web = _address("yarn.nodemanager.webapp.address", host)
    return next((r for r in reports if r.get("nodeHTTPAddress") == web), None)


def yarn_state(count: int = 1) -> tuple[bool, str]:
    """(healthy, what it is waiting for): the ResourceManager reports `count` active
    NodeManagers."""
    try:
        metrics = _get_json(f"{RM_WEB}/ws/v1/cluster/metrics")["clusterMetrics"]
    except (OSError, ValueError, KeyError) as error:
        return False, f"ResourceManager web at {RM_WEB} not answering ({error.__class__.__name__})"
    active = metrics.get("activeNodes", 0)
    if active < count:
        return False, f"{active} of {count} NodeManager(s) active"
    return True, f"{active} active NodeManager(s), {metrics.get('totalMB')} MB"


def tail(path: Path, lines: int = 40) -> str:
    try:
        return _tail_text(path.read_text(errors="replace"), lines)
    except FileNotFoundError:
        return f"({path} does not exist)"


def _tail_text(text: str, lines: int = 40, width: int = 400) -> str:
    # Daemons log their whole classpath on one line; keep the tail readable.
    return "\n".join(line if len(line) <= width else line[:width] + " ..."
                     for line in text.splitlines()[-lines:])


def _wait(layout: Layout, names: list[str], check: Callable[[], tuple[bool, str]],
          deadline: retry.Deadline, say: Callable[[str], None]) -> None:
    last = ""

    def probe() -> tuple[bool, str]:
        nonlocal last
        for name in names:
            if read_pid(layout, name) is None:
                raise ClusterError(f"the {name} exited during start; the end of "
                                   f"{layout.log(name)}:\n{tail(layout.log(name))}")
        healthy, what = check()
        if not healthy and what != last:
            say(f"  waiting: {what}")
            last = what
        return healthy, what

    try:
        _, what = retry.poll_until(probe, lambda state: state[0],
                                   pauses=retry.Backoff.fixed(0.5), deadline=deadline)
    except retry.GaveUp as gave_up:
        name = names[-1]
        raise ClusterError(f"timed out waiting for {', '.join(names)} "
                           f"({gave_up.last_value[1]}); the end of "
                           f"{layout.log(name)}:\n{tail(layout.log(name))}") from None
    say(f"  {what}")


# ----------------------------------------------------------------------- commands


def requested_node_count(layout: Layout, nodes: int | None) -> int:
    """The node count `up` starts: --nodes, else FLINKYARN_NODES; else, while any daemon
    runs, the recorded count (so a plain `up` completes the running cluster); else 1.

    Raises when the request differs from the count of a running cluster: the shared
    configuration (and the ResourceManager's view of the nodes) changes with the count,
    so the cluster is stopped first rather than half-restarted.
    """
    if nodes is None and os.environ.get("FLINKYARN_NODES"):
        try:
            nodes = int(os.environ["FLINKYARN_NODES"])
        except ValueError:
            raise ClusterError(f"FLINKYARN_NODES must be a number, not "
                               f"{os.environ['FLINKYARN_NODES']!r}") from None
    running = [name for name in _daemon_names(layout) if read_pid(layout, name) is not None]
    recorded = recorded_node_count(layout)
    if not running:
        return 1 if nodes is None else nodes
    if nodes is not None and nodes != recorded:
        raise ClusterError(
            f"the local Hadoop runs with {recorded} node(s) ({', '.join(running)}); "
            f"run `integration/cluster down` first, then `integration/cluster up "
            f"--nodes {nodes}`")
    return recorded


def _daemon_names(layout: Layout) -> list[str]:
    """Every daemon that may run in this work folder: the shared ones, the nodes of the
    recorded count, and any node that left a pid file (a larger earlier cluster)."""
    names = [d.name for d in DAEMONS if d.name != "nodemanager"]
    names += [n.name for n in cluster_nodes(layout, recorded_node_count(layout))]
    if layout.pids.is_dir():
        names += sorted(p.stem for p in layout.pids.glob("nodemanager-*.pid")
                        if p.stem not in names)
    return names


def up(layout: Layout | None = None, timeout: float = 180.0,
       say: Callable[[str], None] = print, nodes: int | None = None,
       secure: bool | None = None) -> None:
    """Starts whatever is not running and returns once HDFS and YARN are healthy.

    Harmless when everything already runs. Raises ClusterError, after printing the tail
    of the failing daemon's log, when a daemon dies or health is not reached in time,
    and before starting anything when `nodes` differs from a running cluster's count
    (or `secure` from its mode; None: as it runs, else off).
    """
    layout = layout or Layout.default()
    count = requested_node_count(layout, nodes)
    running = any(read_pid(layout, name) is not None for name in _daemon_names(layout))
    if running and secure is not None and secure != recorded_secure(layout):
        raise ClusterError(f"the local Hadoop runs {'in' if recorded_secure(layout) else 'without'} "
                           f"secure mode; run `integration/cluster down` first")
    secure = recorded_secure(layout) if running else bool(secure)
    cluster = cluster_nodes(layout, count)
    if count > 1 or secure:
        _check_isolation_possible(layout)
    if secure and not cluster[0].isolated:
        raise ClusterError("--secure needs isolated nodes (--nodes 2 or more): each node "
                           "then has the realm's krb5.conf as /etc/krb5.conf")
    ensure_jars(layout, say)
    if secure:
        from kdc import KdcError
        kdc = layout.kdc()
        try:
            kdc.create(java_home())
            say(f"KDC of realm {kdc.user_principal.split('@')[1]} up (pid {kdc.start()}, "
                f"log {kdc.log})")
        except KdcError as error:
            raise ClusterError(str(error)) from None
    _record_node_count(layout, count, secure)
    write_config(layout, count)
    deadline = retry.Deadline(timeout)
    shared = [d for d in DAEMONS if d.name != "nodemanager" and read_pid(layout, d.name) is None]
    nodes = [n for n in cluster if read_pid(layout, n.name) is None]
    for daemon in shared:
        _check_ports(daemon)
    for node in nodes:
        _check_ports(DAEMON_BY_NAME["nodemanager"], node.host, node.name)
    _format_namenodes(layout, say)
    started = []
    for daemon in shared:
        namenode = next((n for n in NAMENODES if n.daemon == daemon.name), None)
        pid = _start_namenode(layout, namenode) if namenode else _start(layout, daemon)
        started.append(daemon.name)
        what = f"NameNode {namenode.id}, " if namenode else ""
        say(f"started {daemon.name} (pid {pid}, {what}log {layout.log(daemon.name)})")
    for node in nodes:
        pid = _start_node(layout, node)
        started.append(node.name)
        where = f"node {node.index} on {node.host}" + (", isolated" if node.isolated else "")
        say(f"started {node.name} (pid {pid}, {where}, log {layout.log(node.name)})")
    if not started:
        say("the local Hadoop is already up")
    namenodes = [n.daemon for n in NAMENODES]
    try:
        _wait(layout, namenodes, _namenodes_answer, deadline, say)
        if active_namenode(layout) is None:
            # A NameNode of a pair starts as standby.
            _haadmin(layout, "-transitionToActive", NAMENODES[0].id)
            say(f"  made {NAMENODES[0].id} active")
        _wait(layout, [*namenodes, "datanode"], hdfs_state, deadline, say)
        _make_folders(layout)
        _wait(layout, ["resourcemanager", *(n.name for n in cluster)],
              lambda: yarn_state(count), deadline, say)
    except ClusterError:
        # Leave nothing half-started behind: stop what this call started.
        down(layout, only=started, say=say)
        raise
    active = active_namenode(layout) or NAMENODES[0].id
    say(f"local Hadoop is up with {count} node(s){', secure' if secure else ''}: "
        f"ResourceManager {RM_WEB}, NameNode {active} {namenode_web(active, layout)} (active), "
        f"fs {DEFAULT_FS}")


def _client_env(layout: Layout) -> dict[str, str]:
    """The environment our `hdfs` command runs in as the cluster's user (on a secure
    cluster with the cluster's ticket), a short-lived JVM: the quick compiler only
    (half the CPU of a start, which is most of a haadmin call)."""
    env = {**daemon_env(layout), "HADOOP_CLIENT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    if recorded_secure(layout):
        env["KRB5CCNAME"] = f"FILE:{_cluster_ticket(layout)}"
    return env


def _haadmin(layout: Layout, *args: str) -> str:
    """`hdfs haadmin ARGS`'s output; ClusterError when it fails."""
    result = subprocess.run([str(layout.bin / "hdfs"), "haadmin", *args],
                            capture_output=True, text=True, env=_client_env(layout))
    if result.returncode != 0:
        raise ClusterError(f"hdfs haadmin {' '.join(args)} failed (exit {result.returncode}): "
                           f"{_tail_text(result.stderr, 20)}")
    return result.stdout


def _make_folders(layout: Layout) -> None:
    """Makes the folders every user of the cluster expects: a world-writable /tmp (YARN
    log aggregation, staging), the user's home (skein's staging folder), the targets of
    the viewfs links. Over WebHDFS at the NameNode active now (`up` has made sure one
    is; nothing fails it over meanwhile): no JVM, where `hdfs dfs` would start two,
    seconds on a busy machine."""
    active = active_namenode(layout)
    if active is None:
        raise ClusterError(f"no NameNode of {DEFAULT_FS} is active")
    web = namenode_web(active, layout)
    for path, op, params in [*((f, "MKDIRS", {}) for f in ("/tmp", f"/user/{_user()}",
                                                          *VIEWFS_LINKS.values())),
                             ("/tmp", "SETPERMISSION", {"permission": "1777"})]:
        query = urllib.parse.urlencode({"op": op, "user.name": _user(), **params})
        try:
            _http(f"{web}/webhdfs/v1{path}?{query}", method="PUT", timeout=10)
        except OSError as error:
            raise ClusterError(f"WebHDFS {op} {path} at NameNode {active} failed: "
                               f"{error}") from None


def start_namenode(namenode_id: str, layout: Layout | None = None,
                   timeout: float = 120.0) -> int:
    """Starts NameNode `namenode_id` unless it runs; returns its pid once it is in an HA
    state (it starts as standby: `failover` makes it active), a DataNode has registered
    with it and it has left safe mode (a NameNode in safe mode refuses to become active)."""
    layout = layout or Layout.default()
    namenode = NAMENODE_BY_ID[namenode_id]
    pid = read_pid(layout, namenode.daemon)
    if pid is None:
        _check_ports(DAEMON_BY_NAME[namenode.daemon])
        pid = _start_namenode(layout, namenode)

    def ready() -> tuple[bool, str]:
        try:
            status = _namenode_bean(namenode_id, "NameNodeStatus", layout)
            fs = _namenode_bean(namenode_id, "FSNamesystemState", layout)
        except OSError:
            return False, f"NameNode {namenode_id} not answering"
        if not (status and status.get("State") in ("active", "standby")):
            return False, f"NameNode {namenode_id} starting"
        if not (fs and fs.get("NumLiveDataNodes", 0) >= 1):
            return False, f"no live DataNode at NameNode {namenode_id} yet"
        info = _namenode_bean(namenode_id, "NameNodeInfo", layout)
        if info is None or info.get("Safemode"):
            return False, f"NameNode {namenode_id} in safe mode"
        return True, f"NameNode {namenode_id} {status['State']}"

    _wait(layout, [namenode.daemon], ready, retry.Deadline(timeout), say=lambda _: None)
    return pid


def kill_namenode(namenode_id: str, layout: Layout | None = None,
                  sig: signal.Signals = signal.SIGKILL) -> int | None:
    """Sends NameNode `namenode_id` `sig` (SIGKILL: it dies on the spot, as with its host
    lost) and returns its pid once it has ended; None when it did not run. The other
    stays as it is: a standby stays standby until `failover`."""
    layout = layout or Layout.default()
    daemon = NAMENODE_BY_ID[namenode_id].daemon
    pid = read_pid(layout, daemon)
    if pid is None:
        return None
    os.kill(pid, sig)
    ports = [port for _, port in DAEMON_BY_NAME[daemon].ports]
    # Its ports are free once the last of its threads has ended, which can be after its
    # main thread shows it a zombie.
    try:
        retry.poll_until(lambda: not _alive(pid) and not any(map(_port_in_use, ports)), bool,
                         pauses=retry.Backoff.fixed(0.05), deadline=retry.Deadline(60))
    except retry.GaveUp:
        raise ClusterError(f"NameNode {namenode_id} (pid {pid}) still runs 60 s after "
                           f"{sig.name}") from None
    layout.pidfile(daemon).unlink(missing_ok=True)
    return pid


def failover(from_id: str, to_id: str, layout: Layout | None = None) -> None:
    """Makes NameNode `to_id` active in place of `from_id` (`hdfs haadmin -failover`), as
    an admin does: `from_id` is made standby if it answers, else fenced (a no-op here).
    Returns once `to_id` is active; ClusterError when haadmin fails."""
    _haadmin(layout or Layout.default(), "-failover", from_id, to_id)


def down(layout: Layout | None = None, timeout: float = 30.0,
         say: Callable[[str], None] = print, only: Iterable[str] | None = None) -> None:
    """Stops exactly the daemons `up` started (checked by their command line): the nodes
    first, then the ResourceManager, the DataNode, the NameNodes."""
    layout = layout or Layout.default()
    shared = [d.name for d in DAEMONS if d.name != "nodemanager"]
    nodes = [name for name in _daemon_names(layout) if name not in shared]
    for name in [*reversed(nodes), *reversed(shared)]:
        if only is not None and name not in only:
            continue
        pid = read_pid(layout, name)
        layout.pidfile(name).unlink(missing_ok=True)
        if pid is None:
            continue
        os.kill(pid, signal.SIGTERM)
        try:
            # Polled before the loop moves on: `pid` is this iteration's.
            retry.poll_until(lambda: not _alive(pid), bool,  # noqa: B023
                             pauses=retry.Backoff.fixed(0.2),
                             deadline=retry.Deadline(timeout))
        except retry.GaveUp:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        say(f"stopped {name} (pid {pid})")
    if only is None and layout.kdc_dir.is_dir():
        pid = layout.kdc().stop()
        if pid is not None:
            say(f"stopped the KDC (pid {pid})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def status(layout: Layout | None = None) -> tuple[bool, str]:
    """(all running and healthy, a human-readable report): each shared daemon, each node
    of the recorded count with its address and its state at the ResourceManager."""
    layout = layout or Layout.default()
    count = recorded_node_count(layout)
    lines = []
    running = True
    for daemon in DAEMONS:
        if daemon.name == "nodemanager":
            continue
        pid = read_pid(layout, daemon.name)
        running &= pid is not None
        state = f"running (pid {pid})" if pid else "stopped"
        lines.append(f"{daemon.name:16} {state:24} log {layout.log(daemon.name)}")
        namenode = next((n for n in NAMENODES if n.daemon == daemon.name), None)
        if namenode is not None:
            lines.append(f"{'':16} NameNode {namenode.id} at {namenode.rpc}, web "
                         f"{namenode_web(namenode.id, layout)}: "
                         f"{namenode_state(namenode.id, layout) or 'not answering'}")
    reports = rm_nodes()
    for node in cluster_nodes(layout, count):
        pid = read_pid(layout, node.name)
        running &= pid is not None
        state = f"running (pid {pid})" if pid else "stopped"
        report = rm_node_of(node, reports)
        at_rm = report["state"] if report else "unknown"
        kind = "isolated" if node.isolated else "shared"
        lines.append(f"{node.name:16} {state:24} log {layout.log(node.name)}\n"
                     f"{'':16} node {node.index} on {node.host} ({kind}), "
                     f"at the ResourceManager: {at_rm}")
    if recorded_secure(layout):
        pid = layout.kdc().running_pid()
        running &= pid is not None
        lines.append(f"{'kdc':16} {f'running (pid {pid})' if pid else 'stopped':24} "
                     f"log {layout.kdc().log}")
    hdfs_ok, hdfs_what = hdfs_state(layout)
    yarn_ok, yarn_what = yarn_state(count)
    lines.append(f"{'HDFS':16} {hdfs_what}")
    lines.append(f"{'YARN':16} {yarn_what}")
    lines.append(f"ResourceManager web: {RM_WEB}    fs: {DEFAULT_FS} (viewfs: {VIEWFS})")
    return running and hdfs_ok and yarn_ok, "\n".join(lines)


def env_exports(layout: Layout | None = None) -> dict[str, str]:
    """What a shell (or a test) needs to use the cluster: skein finds `yarn` on PATH."""
    layout = layout or Layout.default()
    return {
        "HADOOP_CONF_DIR": str(layout.conf),
        "JAVA_HOME": java_home(),
        # Our `yarn` first, ahead of Node.js's `yarn` which would shadow it.
        "PATH": f"{layout.bin}:{os.environ.get('PATH', '')}",
        "SKEIN_DRIVER_JAVA_OPTIONS": " ".join(java_options(layout)),
        # gRPC (skein's driver connection) honours proxy variables; keep loopback direct.
        "no_proxy": _no_proxy(),
        "NO_PROXY": _no_proxy(),
        **_secure_exports(layout),
    }


def _secure_exports(layout: Layout) -> dict[str, str]:
    """On a secure cluster: the realm for MIT's tools, and a ready user principal and
    its keytab (`kinit -kt "$FLINKYARN_TEST_KEYTAB" "$FLINKYARN_TEST_PRINCIPAL"`)."""
    if not recorded_secure(layout):
        return {}
    kdc = layout.kdc()
    return {"KRB5_CONFIG": str(kdc.krb5_conf), "FLINKYARN_TEST_PRINCIPAL": kdc.user_principal,
            "FLINKYARN_TEST_KEYTAB": str(kdc.user_keytab)}


def _no_proxy() -> str:
    current = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    hosts = [h for h in current.split(",") if h]
    return ",".join(hosts + [h for h in (HOST, "localhost") if h not in hosts])


def apply_env(layout: Layout | None = None) -> None:
    """Sets env_exports() in this process and drops the proxy variables skein trips on."""
    for name in PROXY_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(env_exports(layout))


def _say(line: str) -> None:
    print(line, flush=True)


USAGE = "usage: integration/cluster {up [--nodes N] [--secure]|down|status|env}"


def main(argv: list[str]) -> int:
    command, nodes, secure = (argv[0] if argv else None), None, None
    rest = list(argv[1:])
    if command == "up" and "--secure" in rest:
        rest.remove("--secure")
        secure = True
    if command == "up" and len(rest) == 2 and rest[0] == "--nodes" and rest[1].isdigit():
        nodes = int(rest[1])
    elif rest or command not in ("up", "down", "status", "env"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if command == "up":
            up(say=_say, nodes=nodes, secure=secure)
        elif command == "down":
            down(say=_say)
        elif command == "status":
            healthy, report = status()
            print(report)
            return 0 if healthy else 1
        else:
            import shlex
            for key, value in env_exports().items():
                print(f"export {key}={shlex.quote(value)}")
    except ClusterError as error:
        print(f"integration/cluster {command}: {error}", file=sys.stderr)
        return 1
    return 0
