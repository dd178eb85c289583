"""flinkyarn's Java agent for skein's JVMs, and the skein driver that runs with it.

skein (pinned to 0.8.2 in setup.cfg) has no option for several things we need; the
agent changes its classes as they load, from readable Java in `skein-agent/` beside this
module (a Maven project: Byte Buddy `Advice` and `MemberSubstitution`, its entry point
`SkeinAgent`, whose docstring lists every change with the class that makes it):
- in skein's driver: the YARN application type `flinkyarn` (set, listed and checked;
  admins filter the YARN UI by type); the ApplicationMaster's JVM started with
  `am_java_options()` instead of skein's `-Xmx128M` (JDK 17 opens java.util for its web
  UI's template engine, no hsperfdata file in the node's /tmp, lean flags, and the agent);
  the attempt-failures validity interval (Flink's
  yarn.application-attempt-failures-validity-interval);
- in the ApplicationMaster: its allocate loop's intervals capped by HEARTBEAT_ENV and
  PENDING_HEARTBEAT_ENV (yarn.heartbeat.interval, yarn.heartbeat.container-request-
  interval) and woken by a container request; the final tracking URL the AppMaster left
  in flinkyarn.archive.FINAL_TRACKING_URL_FILE passed on at unregister; and, with
  FINAL_END_ENV set, the next attempt left to YARN unless the AppMaster left
  flinkyarn.job_store.FINAL_END_FILE (skein's own count of attempts knows nothing of the
  validity interval).

The sources ship inside the package, so a client installed with pip builds the jar on
first use with Maven (`mvn package`, JDK and Maven on the client; integration/bootstrap
builds it at once), cached in the client's cache under a digest of the sources, so it is
built once per change. The driver (`client`) gets it as `-javaagent:<jar>=driver`. The
ApplicationMaster's container gets it localized as AGENT_JAR from the staging folder's
content-addressed cache (`localized_agent`; uploaded once), and its command names it
relatively (`am_java_options`): a container never reaches for the client's files. Both
submit paths (skein's driver on a Kerberos cluster, yarn_client/rest_submit.py else)
start the ApplicationMaster with `am_java_options()`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from flinkyarn import hadoop
from yarn_client import shipping

APPLICATION_TYPE = "flinkyarn"
SOURCES = Path(__file__).parent / "skein-agent"
# The jar's name in the ApplicationMaster's container (its working folder).
AGENT_JAR = "flinkyarn-skein-agent.jar"
# System properties of the driver's JVM, read by the agent (DriverHooks.java).
VALIDITY_PROPERTY = "flinkyarn.attempt-failures-validity-interval"
AM_JAVA_PROPERTY = "flinkyarn.skein.am-java-options"
# The AppMaster container's environment, read by the agent (AllocatorHooks.java,
# AppMasterHooks.java), beside the files the AppMaster leaves in its working folder
# (flinkyarn.archive.FINAL_TRACKING_URL_FILE, flinkyarn.job_store.FINAL_END_FILE).
HEARTBEAT_ENV = "FLINKYARN_YARN_HEARTBEAT_MS"
PENDING_HEARTBEAT_ENV = "FLINKYARN_YARN_PENDING_HEARTBEAT_MS"
FINAL_END_ENV = "FLINKYARN_FINAL_END_BY_FILE"


class AgentBuildError(RuntimeError):
    """Maven could not build the agent (no JDK or Maven, no network on the first build)."""


def am_java_options() -> str:
    """The ApplicationMaster JVM's options, on either submit path: skein's heap, lean
    flags (skein's JVMs mostly wait; -XX:-UsePerfData: the hsperfdata file would go to the
    node's /tmp whatever java.io.tmpdir says, and stay behind a killed AppMaster), the
    opens JDK 17 needs for skein's web UI (the page YARN's tracking URL opens), and the
    agent, localized as AGENT_JAR."""
    return (f"-Xmx128M {hadoop.LEAN_JVM} --add-opens=java.base/java.util=ALL-UNNAMED "
            f"--add-opens=java.base/java.lang=ALL-UNNAMED -javaagent:{AGENT_JAR}=appmaster")


@functools.cache
def sources_digest() -> str:
    """A digest of the agent's sources (names and contents), which names its jar; read
    once per process (a secure submit asks twice: the driver's and the AppMaster's)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in SOURCES.rglob("*") if p.is_file()
                       and "target" not in p.relative_to(SOURCES).parts):
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def agent_jar(cache: Path | None = None) -> Path:
    """The agent's jar, built by Maven from SOURCES the first time (in a copy of them:
    the installed package stays as it is) and cached under the sources' digest.
    AgentBuildError if Maven fails."""
    cache = cache or shipping.client_cache()
    target = cache / f"skein-agent-{sources_digest()}.jar"
    if target.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise AgentBuildError("Maven (mvn) is not on PATH; it builds flinkyarn's agent for "
                              "skein's JVMs once (Debian package: maven)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skein-agent-", dir=cache) as work:
        project = Path(work) / "skein-agent"
        shutil.copytree(SOURCES, project, ignore=shutil.ignore_patterns("target"))
        result = subprocess.run([mvn, "-q", "-B", "package"], cwd=project, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        built = project / "target" / AGENT_JAR
        if result.returncode != 0 or not built.is_file():
            raise AgentBuildError("Maven could not build flinkyarn's agent for skein:\n"
                                  + result.stdout[-3000:])
        os.replace(built, target)
    return target


def skein_jar() -> Path:
    """skein's own jar, as installed: its driver's and ApplicationMaster's classes."""
    import skein.core

    return Path(skein.core._SKEIN_JAR)


def localized_agent(staging: shipping.Staging) -> shipping.Localized:
    """The agent jar in the staging folder's cache (uploaded once), localized as
    AGENT_JAR in the ApplicationMaster's container."""
    return shipping.cached_copy(staging, agent_jar(), "skein-agent",
                                "flinkyarn's agent for skein", AGENT_JAR, localize_as="file")


def hdfs_site_with(extra: dict[str, str], original: Path, cache: Path) -> Path | None:
    """A folder whose hdfs-site.xml is `original`'s with the properties of `extra` it
    does not set (cached by content); None if `original` cannot be read as one."""
    from xml.etree import ElementTree

    try:
        data = original.read_bytes() if original.is_file() else b"<configuration/>"
        root = ElementTree.fromstring(data)
    except (OSError, ElementTree.ParseError):
        return None
    present = {prop.findtext("name", "").strip() for prop in root.iter("property")}
    for name, value in extra.items():
        if name not in present:
            prop = ElementTree.SubElement(root, "property")
            ElementTree.SubElement(prop, "name").text = name
            ElementTree.SubElement(prop, "value").text = value
    text = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    folder = cache / f"hdfs-site-{hashlib.sha256(text).hexdigest()[:16]}"
    if not (folder / "hdfs-site.xml").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".partial")
        with os.fdopen(fd, "wb") as out:
            out.write(text)
        os.replace(tmp, folder / "hdfs-site.xml")
    return folder


def _client_hdfs_option() -> str:
    """A JVM option that gives the driver hadoop.CLIENT_HDFS: the folder of a completed
    hdfs-site.xml appended to the boot class path, where Hadoop's Configuration (which
    takes the first hdfs-site.xml its class loader finds, asking the boot loader first)
    finds it before HADOOP_CONF_DIR's."""
    try:
        original = hadoop.conf_dir() / "hdfs-site.xml"
    except hadoop.HadoopConfigError:
        return ""
    folder = hdfs_site_with(hadoop.CLIENT_HDFS, original, shipping.client_cache())
    if folder is None or any(c.isspace() for c in str(folder)):  # skein splits the options
        return ""
    return f"-Xbootclasspath/a:{folder}"


def driver_java_options(attempt_failures_validity_ms: int | None = None) -> list[str]:
    """The JVM options of a skein driver started by this client: the agent, the options
    it gives the ApplicationMaster and the validity interval (None, 0: YARN's default,
    every failure counts); lean; the Kerberos configuration MIT's tools use (KRB5_CONFIG,
    which Java does not read); HDFS client settings for quick small writes
    (hadoop.CLIENT_HDFS); and what the user sets in SKEIN_DRIVER_JAVA_OPTIONS (skein's
    own variable) after them. A list: skein splits a string at spaces, and the
    ApplicationMaster's options are one argument."""
    options = [f"-javaagent:{agent_jar()}=driver", f"-D{AM_JAVA_PROPERTY}={am_java_options()}"]
    if attempt_failures_validity_ms:
        options.append(f"-D{VALIDITY_PROPERTY}={attempt_failures_validity_ms}")
    options += hadoop.LEAN_JVM.split()
    if os.environ.get("KRB5_CONFIG"):
        options.append(f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}")
    options += _client_hdfs_option().split()
    options += os.environ.get("SKEIN_DRIVER_JAVA_OPTIONS", "").split()
    return options


def client(log=False, attempt_failures_validity_ms: int | None = None):
    """skein's Client, whose driver runs with the agent (driver_java_options). The
    ApplicationMaster of an application it submits runs with the agent when the
    specification localizes AGENT_JAR (localized_agent); without, it is skein's own."""
    import skein

    return skein.Client(log=log, java_options=driver_java_options(attempt_failures_validity_ms))
