"""A real single-node Hadoop (HDFS + YARN) on 127.0.0.1, for development, demos and tests.

The daemons are the real ones, from the pinned jars of ``integration/pom.xml``:

    NameNode, DataNode, ResourceManager (with its embedded web proxy), NodeManager

each a background JVM with a small heap, logging to ``<work>/logs/<daemon>.log``.
The jars are fetched once by Maven into ``<cache>/lib``; the configuration is written
into ``<work>/conf`` on every ``up`` (it is derived, never edited by hand).

Only the standard library is used here: ``integration/cluster`` runs before any
virtual environment exists.

Locations (both ignored by git, both overridable):
    FLINKYARN_HADOOP_CACHE   the jar cache      (default: <repo>/.cache/hadoop-<version>)
    FLINKYARN_HADOOP_WORK    the work folder    (default: <repo>/.local-hadoop)
"""

from __future__ import annotations

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
import urllib.request
from pathlib import Path
from typing import Callable, Iterable

HADOOP_VERSION = "3.5.0"
REPO = Path(__file__).resolve().parent.parent
POM = Path(__file__).resolve().parent / "pom.xml"
HOST = "127.0.0.1"

# Heaps are small on purpose: the machine is shared with the TaskExecutors and Spark.
HEAP_MB = {"namenode": 256, "datanode": 192, "resourcemanager": 384, "nodemanager": 256}

# What the NodeManager offers to containers. vcores are a scheduling unit, not cores.
NM_MEMORY_MB = int(os.environ.get("FLINKYARN_NM_MEMORY_MB", "8192"))
NM_VCORES = int(os.environ.get("FLINKYARN_NM_VCORES", "8"))

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


DAEMONS = (
    Daemon("namenode", "org.apache.hadoop.hdfs.server.namenode.NameNode",
           (("fs.defaultFS", 8020), ("dfs.namenode.http-address", 9870))),
    Daemon("datanode", "org.apache.hadoop.hdfs.server.datanode.DataNode",
           (("dfs.datanode.address", 9866), ("dfs.datanode.http.address", 9864),
            ("dfs.datanode.ipc.address", 9867))),
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
NN_WEB = f"http://{HOST}:{_port('dfs.namenode.http-address')}"
DEFAULT_FS = f"hdfs://{HOST}:{_port('fs.defaultFS')}"


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

    def log(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def pidfile(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"


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


def _address(key: str) -> str:
    return f"{HOST}:{_port(key)}"


def write_config(layout: Layout) -> None:
    """Writes the four site files, log4j and the `yarn`/`hdfs` commands skein and users call."""
    conf, data = layout.conf, layout.data
    for folder in (conf, layout.logs, layout.pids, data, layout.bin):
        folder.mkdir(parents=True, exist_ok=True)
    for webapp in ("hdfs", "datanode", "secondary", "journal"):
        (layout.resources / "webapps" / webapp).mkdir(parents=True, exist_ok=True)
    classpath = f"{conf}:{layout.lib}/*"
    files = {
        "core-site.xml": {
            "fs.defaultFS": DEFAULT_FS,
            "hadoop.tmp.dir": data / "tmp",
            # The local cluster runs as one user; let it impersonate for skein and tests.
            f"hadoop.proxyuser.{_user()}.hosts": "*",
            f"hadoop.proxyuser.{_user()}.groups": "*",
        },
        "hdfs-site.xml": {
            "dfs.replication": 1,
            "dfs.namenode.name.dir": data / "namenode",
            "dfs.datanode.data.dir": data / "datanode",
            "dfs.namenode.rpc-bind-host": HOST,
            "dfs.namenode.http-address": _address("dfs.namenode.http-address"),
            "dfs.datanode.address": _address("dfs.datanode.address"),
            "dfs.datanode.http.address": _address("dfs.datanode.http.address"),
            "dfs.datanode.ipc.address": _address("dfs.datanode.ipc.address"),
            "dfs.datanode.hostname": HOST,
            "dfs.namenode.safemode.extension": 0,
            "dfs.namenode.safemode.min.datanodes": 1,
            "dfs.webhdfs.enabled": "true",
        },
        "yarn-site.xml": {
            "yarn.resourcemanager.hostname": HOST,
            "yarn.resourcemanager.address": _address("yarn.resourcemanager.address"),
            "yarn.resourcemanager.scheduler.address": _address("yarn.resourcemanager.scheduler.address"),
            "yarn.resourcemanager.resource-tracker.address": _address("yarn.resourcemanager.resource-tracker.address"),
            "yarn.resourcemanager.admin.address": _address("yarn.resourcemanager.admin.address"),
            "yarn.resourcemanager.webapp.address": _address("yarn.resourcemanager.webapp.address"),
            "yarn.nodemanager.hostname": HOST,
            "yarn.nodemanager.address": _address("yarn.nodemanager.address"),
            "yarn.nodemanager.localizer.address": _address("yarn.nodemanager.localizer.address"),
            "yarn.nodemanager.webapp.address": _address("yarn.nodemanager.webapp.address"),
            "yarn.nodemanager.local-dirs": data / "nm-local",
            "yarn.nodemanager.log-dirs": data / "nm-logs",
            "yarn.nodemanager.resource.memory-mb": NM_MEMORY_MB,
            "yarn.nodemanager.resource.cpu-vcores": NM_VCORES,
            "yarn.scheduler.minimum-allocation-mb": 128,
            "yarn.scheduler.maximum-allocation-mb": NM_MEMORY_MB,
            "yarn.scheduler.maximum-allocation-vcores": NM_VCORES,
            # A small machine: the disk-health checker marks the node unhealthy on a
            # full-ish disk, and the vmem check kills JVMs for their reserved address space.
            "yarn.nodemanager.disk-health-checker.enable": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            # Containers see only whitelisted variables; JAVA_HOME and PATH must reach them.
            "yarn.nodemanager.env-whitelist":
                "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,"
                "CLASSPATH_PREPEND_DISTCACHE,HADOOP_YARN_HOME,HADOOP_HOME,PATH,LANG,TZ",
            # What skein's ApplicationMaster (and any Java container) runs with.
            "yarn.application.classpath": f"{conf},{layout.lib}/*",
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
            "yarn.scheduler.capacity.root.queues": "default",
            "yarn.scheduler.capacity.root.default.capacity": 100,
            "yarn.scheduler.capacity.root.default.maximum-capacity": 100,
            "yarn.scheduler.capacity.root.default.state": "RUNNING",
            "yarn.scheduler.capacity.root.default.acl_submit_applications": "*",
            "yarn.scheduler.capacity.root.default.acl_administer_queue": "*",
            # At the default 0.1, a second application waits in ACCEPTED forever.
            "yarn.scheduler.capacity.maximum-am-resource-percent": 0.5,
            "yarn.scheduler.capacity.resource-calculator":
                "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator",
        },
    }
    for name, properties in files.items():
        (conf / name).write_text(_site(properties))
    (conf / "log4j.properties").write_text(
        "log4j.rootLogger=INFO,console\n"
        "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.console.target=System.err\n"
        "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n\n"
        "log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR\n")
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
        "classpath": None,
    }, classpath)


def _write_command(layout: Layout, name: str, subcommands: dict[str, str | None],
                   classpath: str) -> None:
    """A small stand-in for Hadoop's shell launcher: `yarn classpath --glob` (what skein
    calls), and the client subcommands a user needs (`yarn logs`, `hdfs dfs`, ...)."""
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
OPTS="-Xmx256m -Dlog4j.configuration=file:{layout.conf}/log4j.properties -Dhadoop.root.logger=WARN,console {' '.join(JDK17_OPTIONS)}"
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


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return True
    return False


def _check_ports(daemon: Daemon) -> None:
    taken = [(key, port) for key, port in daemon.ports if _port_in_use(port)]
    if taken:
        listing = ", ".join(f"{port} ({key})" for key, port in taken)
        raise ClusterError(
            f"cannot start the {daemon.name}: port {listing} on {HOST} is already in use "
            f"by another process. Stop it (e.g. `ss -ltnp | grep :{taken[0][1]}` shows "
            f"which), or stop another local Hadoop with its own `integration/cluster down`.")


def daemon_env(layout: Layout) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env["JAVA_HOME"] = java_home()
    env["HADOOP_CONF_DIR"] = str(layout.conf)
    # The NodeManager hands its PATH to containers: our `yarn`/`hdfs` first.
    env["PATH"] = f"{layout.bin}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _start(layout: Layout, daemon: Daemon, args: Iterable[str] = ()) -> int:
    heap = HEAP_MB[daemon.name]
    command = [
        f"{java_home()}/bin/java", f"-Xmx{heap}m", f"-Xms{min(heap, 64)}m",
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dflinkyarn.daemon={daemon.name}@{layout.work}",
        f"-Dhadoop.log.dir={layout.logs}", f"-Dyarn.log.dir={layout.logs}",
        f"-Dhadoop.home.dir={layout.cache}", f"-Dyarn.home.dir={layout.cache}",
        f"-Dlog4j.configuration=file:{layout.conf}/log4j.properties",
        "-Djava.net.preferIPv4Stack=true",
        *JDK17_OPTIONS,
        "-cp", f"{layout.conf}:{layout.resources}:{layout.lib}/*",
        daemon.main_class, *args,
    ]
    log = open(layout.log(daemon.name), "ab")
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               env=daemon_env(layout), cwd=layout.work, start_new_session=True)
    log.close()
    layout.pidfile(daemon.name).write_text(f"{process.pid}\n")
    return process.pid


def _format_namenode(layout: Layout, say: Callable[[str], None]) -> None:
    if (layout.data / "namenode" / "current" / "VERSION").exists():
        return
    say("formatting the NameNode (first start) ...")
    log = layout.logs / "namenode-format.log"
    with open(log, "wb") as out:
        code = subprocess.call(
            [f"{java_home()}/bin/java", "-Xmx256m", *JDK17_OPTIONS,
             f"-Dlog4j.configuration=file:{layout.conf}/log4j.properties",
             "-cp", f"{layout.conf}:{layout.lib}/*",
             DAEMON_BY_NAME["namenode"].main_class, "-format", "-nonInteractive", "-force"],
            stdout=out, stderr=out, env=daemon_env(layout), cwd=layout.work)
    if code != 0:
        raise ClusterError(f"formatting the NameNode failed (exit {code}):\n{tail(log)}")


# --------------------------------------------------------------------------- health


def _get_json(url: str, timeout: float = 3.0) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as response:
        return json.load(response)


def hdfs_state() -> tuple[bool, str]:
    """(healthy, what it is waiting for): out of safe mode with a live DataNode."""
    try:
        beans = _get_json(f"{NN_WEB}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")["beans"]
    except (OSError, ValueError, KeyError) as error:
        return False, f"NameNode web at {NN_WEB} not answering ({error.__class__.__name__})"
    if not beans:
        return False, "NameNode starting"
    state = beans[0]
    if state.get("NumLiveDataNodes", 0) < 1:
        return False, "no live DataNode yet"
    if state.get("FSState") != "Operational":
        return False, f"HDFS in {state.get('FSState')}"
    return True, "HDFS operational, out of safe mode"


def yarn_state() -> tuple[bool, str]:
    """(healthy, what it is waiting for): the ResourceManager reports an active NodeManager."""
    try:
        metrics = _get_json(f"{RM_WEB}/ws/v1/cluster/metrics")["clusterMetrics"]
    except (OSError, ValueError, KeyError) as error:
        return False, f"ResourceManager web at {RM_WEB} not answering ({error.__class__.__name__})"
    if metrics.get("activeNodes", 0) < 1:
        return False, "no active NodeManager yet"
    return True, f"{metrics['activeNodes']} active NodeManager(s), {metrics.get('totalMB')} MB"


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
          deadline: float, say: Callable[[str], None]) -> None:
    last = ""
    while True:
        for name in names:
            if read_pid(layout, name) is None:
                raise ClusterError(f"the {name} exited during start; the end of "
                                   f"{layout.log(name)}:\n{tail(layout.log(name))}")
        healthy, what = check()
        if healthy:
            say(f"  {what}")
            return
        if what != last:
            say(f"  waiting: {what}")
            last = what
        if time.monotonic() > deadline:
            name = names[-1]
            raise ClusterError(f"timed out waiting for {', '.join(names)} ({what}); the end of "
                               f"{layout.log(name)}:\n{tail(layout.log(name))}")
        time.sleep(0.5)


def _webhdfs(method: str, path: str, op: str, **params: str) -> None:
    query = "&".join([f"op={op}", f"user.name={_user()}"] + [f"{k}={v}" for k, v in params.items()])
    request = urllib.request.Request(f"{NN_WEB}/webhdfs/v1{path}?{query}", method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10):
        pass


# ----------------------------------------------------------------------- commands


def up(layout: Layout | None = None, timeout: float = 180.0,
       say: Callable[[str], None] = print) -> None:
    """Starts whatever is not running and returns once HDFS and YARN are healthy.

    Harmless when everything already runs. Raises ClusterError, after printing the tail
    of the failing daemon's log, when a daemon dies or health is not reached in time.
    """
    layout = layout or Layout.default()
    ensure_jars(layout, say)
    write_config(layout)
    deadline = time.monotonic() + timeout
    started = []
    for daemon in DAEMONS:
        if read_pid(layout, daemon.name) is not None:
            continue
        _check_ports(daemon)
        if daemon.name == "namenode":
            _format_namenode(layout, say)
        pid = _start(layout, daemon)
        started.append(daemon.name)
        say(f"started {daemon.name} (pid {pid}, log {layout.log(daemon.name)})")
    if not started:
        say("the local Hadoop is already up")
    try:
        _wait(layout, ["namenode", "datanode"], hdfs_state, deadline, say)
        _wait(layout, ["resourcemanager", "nodemanager"], yarn_state, deadline, say)
    except ClusterError:
        # Leave nothing half-started behind: stop what this call started.
        down(layout, only=started, say=say)
        raise
    # Directories every user of the cluster expects: a world-writable /tmp (YARN log
    # aggregation, staging) and the user's home (skein's staging directory).
    _webhdfs("PUT", "/tmp", "MKDIRS")
    _webhdfs("PUT", "/tmp", "SETPERMISSION", permission="1777")
    _webhdfs("PUT", f"/user/{_user()}", "MKDIRS")
    say(f"local Hadoop is up: ResourceManager {RM_WEB}, NameNode {NN_WEB}, fs {DEFAULT_FS}")


def down(layout: Layout | None = None, timeout: float = 30.0,
         say: Callable[[str], None] = print, only: Iterable[str] | None = None) -> None:
    """Stops exactly the daemons `up` started (checked by their command line), newest first."""
    layout = layout or Layout.default()
    for daemon in reversed(DAEMONS):
        if only is not None and daemon.name not in only:
            continue
        pid = read_pid(layout, daemon.name)
        layout.pidfile(daemon.name).unlink(missing_ok=True)
        if pid is None:
            continue
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < end:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        say(f"stopped {daemon.name} (pid {pid})")


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
    """(all running and healthy, a human-readable report)."""
    layout = layout or Layout.default()
    lines = []
    running = True
    for daemon in DAEMONS:
        pid = read_pid(layout, daemon.name)
        running &= pid is not None
        state = f"running (pid {pid})" if pid else "stopped"
        lines.append(f"{daemon.name:16} {state:24} log {layout.log(daemon.name)}")
    hdfs_ok, hdfs_what = hdfs_state()
    yarn_ok, yarn_what = yarn_state()
    lines.append(f"{'HDFS':16} {hdfs_what}")
    lines.append(f"{'YARN':16} {yarn_what}")
    lines.append(f"ResourceManager web: {RM_WEB}    NameNode web: {NN_WEB}    fs: {DEFAULT_FS}")
    return running and hdfs_ok and yarn_ok, "\n".join(lines)


def env_exports(layout: Layout | None = None) -> dict[str, str]:
    """What a shell (or a test) needs to use the cluster: skein finds `yarn` on PATH."""
    layout = layout or Layout.default()
    return {
        "HADOOP_CONF_DIR": str(layout.conf),
        "JAVA_HOME": java_home(),
        # Our `yarn` first, ahead of Node.js's `yarn` which would shadow it.
        "PATH": f"{layout.bin}:{os.environ.get('PATH', '')}",
        "SKEIN_DRIVER_JAVA_OPTIONS": " ".join(JDK17_OPTIONS),
        # gRPC (skein's driver connection) honours proxy variables; keep loopback direct.
        "no_proxy": _no_proxy(),
        "NO_PROXY": _no_proxy(),
    }


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


def main(argv: list[str]) -> int:
    usage = "usage: integration/cluster {up|down|status|env}"
    if len(argv) != 1 or argv[0] not in ("up", "down", "status", "env"):
        print(usage, file=sys.stderr)
        return 2
    command = argv[0]
    try:
        if command == "up":
            up(say=_say)
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
