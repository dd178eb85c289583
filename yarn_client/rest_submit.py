"""Submitting a skein application through the ResourceManager's REST API and HDFS,
without skein's driver: a JVM that takes 2-3 s to start, on the critical path of every
submit.

This does what skein's Java driver does on submit (Driver.submitApplicationInner):
- asks the ResourceManager for an application id;
- writes the application's folder, `.skein/<id>` in the user's home on the default
  filesystem, which the ApplicationMaster removes when it ends: the certificate and key
  it serves gRPC with (skein's credentials of this user, `~/.skein`, which the client
  connects with, as with the driver), each service's script, the local files the
  specification names (each under a folder named by a digest of its path, as the
  driver does);
- gives every file its size and modification time (YARN refuses to localize a file
  whose time differs);
- writes the specification the ApplicationMaster reads (`.skein.proto`) as the driver
  rewrites it: a service runs `bash .skein.sh` with its log in the container's log
  folder, and each container gets the certificate and key;
- submits the ApplicationMaster's container: skein's ApplicationMaster class with
  skein's jar on the class path, its JVM started with the options the driver starts it
  with under our agent (yarn_client/skein_agent.py's am_java_options, which load the
  agent the specification localizes).
skein's jar comes from the staging folder's content-addressed cache: uploaded once,
where the driver uploads its 8 MB to every application's folder.

Only for a cluster without Kerberos: on a secure one the driver also gathers the
delegation tokens the application needs, so yarn_cluster.py still starts it there.
"""

from __future__ import annotations

import concurrent.futures
import copy
import getpass
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkyarn import hadoop, hdfs
from yarn_client import shipping, skein_agent

SKEIN_FOLDER = ".skein"
JAR = ".skein.jar"
CERT, KEY, SPEC, SCRIPT = ".skein.crt", ".skein.pem", ".skein.proto", ".skein.sh"
# YARN's own default of yarn.application.classpath, in its cross-platform form (the
# NodeManager expands {{...}} and <CPS>), as skein's driver takes it.
_DEFAULT_CLASSPATH = (
    "{{HADOOP_CONF_DIR}}", "{{HADOOP_COMMON_HOME}}/share/hadoop/common/*",
    "{{HADOOP_COMMON_HOME}}/share/hadoop/common/lib/*",
    "{{HADOOP_HDFS_HOME}}/share/hadoop/hdfs/*", "{{HADOOP_HDFS_HOME}}/share/hadoop/hdfs/lib/*",
    "{{HADOOP_YARN_HOME}}/share/hadoop/yarn/*", "{{HADOOP_YARN_HOME}}/share/hadoop/yarn/lib/*")


def classpath() -> str:
    """The ApplicationMaster's CLASSPATH: the container's own, its folder's jars, then
    yarn.application.classpath (YARN's default where the site does not set it)."""
    configured = hadoop.site_properties("yarn-site.xml").get("yarn.application.classpath", "")
    entries = [c.strip() for c in configured.split(",") if c.strip()] or list(_DEFAULT_CLASSPATH)
    return "<CPS>".join(["{{CLASSPATH}}", "./*", *entries])


def am_command(app_folder: str, log_level: str) -> str:
    """The ApplicationMaster's command, as skein's driver writes it with our agent."""
    return ("{{JAVA_HOME}}/bin/java " + skein_agent.am_java_options() + f" -Dskein.log.level={log_level} "
            f"-Dskein.log.directory=<LOG_DIR> com.anaconda.skein.ApplicationMaster "
            f"{app_folder} ><LOG_DIR>/application.master.log 2>&1")


def _local_path(source: str) -> Path | None:
    """The local file a skein File's source names; None for one on a cluster filesystem."""
    url = urlparse(source)
    return Path(url.path) if url.scheme in ("", "file") else None


def _entries(mapping: dict[str, Any]) -> dict[str, Any]:
    """A map as the ResourceManager's REST API reads one (JAXB's key/value entries)."""
    return {"entry": [{"key": k, "value": v} for k, v in sorted(mapping.items())]}


def _resource(status: dict[str, Any], uri: str, kind: str, visibility: str) -> dict[str, Any]:
    """A local resource of the AppMaster's container, as the REST API takes one. The API
    refuses a size of 0, which an empty file or folder has (YARN checks a resource's
    time, not its size)."""
    return {"resource": uri, "type": kind.upper(), "visibility": visibility.upper(),
            "size": max(1, status["length"]), "timestamp": status["modificationTime"]}


class Submission:
    """One application's submit: made, it has the application's id from the
    ResourceManager; `submit` writes its folder and hands it to the ResourceManager;
    `discard` removes the folder of a submit that did not happen."""

    def __init__(self, staging: shipping.Staging, jar: shipping.Localized) -> None:
        self.staging = staging
        self.jar = jar
        self.user = getpass.getuser()
        answer = hadoop.rm_request("/ws/v1/cluster/apps/new-application", "POST")
        self.app_id: str = answer["application-id"]
        self.folder = f"/user/{self.user}/{SKEIN_FOLDER}/{self.app_id}"

    def discard(self) -> None:
        self.staging.remove_quietly(self.folder)

    def submit(self, spec, *, application_type: str, validity_ms: int = 0,
               uploads: dict[str, Path] | None = None) -> str:
        """Writes the application's folder and submits `spec` (a skein.ApplicationSpec);
        returns the application id. `uploads` (target path: local file) are files of
        the client's that the specification names by their target's URL, written with
        the folder's. Raises OSError (HDFS) or hadoop.ResourceManagerError; the
        caller discards the folder and the uploads then."""
        import skein

        # Ours to change. (Not through protobuf: skein's from_protobuf drops max_attempts.)
        spec = copy.deepcopy(spec)
        skein.Security.from_default()  # makes ~/.skein/skein.{crt,pem} on first use
        credentials = Path(skein.properties.config_dir)
        uri = self.staging.uri
        written = {**(uploads or {}), f"{self.folder}/{CERT}": credentials / "skein.crt",
                   f"{self.folder}/{KEY}": credentials / "skein.pem"}
        # Where each file is on the cluster: a local one is uploaded once, into a
        # folder named by its path's digest.
        where: dict[str, str] = {}
        folders: dict[str, int] = {}  # a local folder's target: the size of its files
        for files in (spec.master.files, *(s.files for s in spec.services.values())):
            for f in files.values():
                local = _local_path(f.source)
                if local is None:
                    where[f.source] = f.source
                elif f.source not in where:
                    target = f"{self.folder}/{hashlib.md5(str(local).encode()).hexdigest()}/{local.name}"
                    where[f.source] = uri(target)
                    if local.is_dir():  # YARN localizes a folder whole
                        inside = {f"{target}/{path.relative_to(local)}": path
                                  for path in sorted(local.rglob("*")) if path.is_file()}
                        written.update(inside)
                        folders[target] = sum(path.stat().st_size for path in inside.values())
                    else:
                        written[target] = local
        # Every file and folder written here gets one modification time, chosen now
        # (YARN localizes a file only at the time its resource names): the
        # specification, which names them, goes up with the others, in one round of
        # writes.
        mtime = int(time.time() * 1000)
        statuses = {uri(target): {"length": local.stat().st_size, "modificationTime": mtime}
                    for target, local in written.items()}
        statuses.update({uri(target): {"length": size, "modificationTime": mtime}
                         for target, size in folders.items()})
        statuses.update(self._statuses({self.jar.uri, *where.values()} - set(statuses)))
        lang = os.environ.get("LANG")
        with tempfile.TemporaryDirectory(prefix="flinkyarn-skein-") as work:
            def write(target: str, data: bytes) -> None:
                (Path(work) / Path(target).name).write_bytes(data)
                written[target] = Path(work) / Path(target).name
                statuses[uri(target)] = {"length": len(data), "modificationTime": mtime}

            def file(source: str, kind="file", visibility="application"):
                status = statuses[source]
                return skein.File(source=source, type=kind, visibility=visibility,
                                  size=status["length"], timestamp=status["modificationTime"])

            def resolved(files: dict) -> dict:
                return {name: file(where[f.source], str(f.type).lower(),
                                   str(f.visibility).lower()) for name, f in files.items()}

            cert, key = file(uri(f"{self.folder}/{CERT}")), file(uri(f"{self.folder}/{KEY}"))
            for name, service in spec.services.items():
                write(f"{self.folder}/{name}.sh", service.script.encode())
                service.files = {**resolved(service.files), CERT: cert, KEY: key,
                                 SCRIPT: file(uri(f"{self.folder}/{name}.sh"))}
                service.script = f"bash {SCRIPT} ><LOG_DIR>/{name}.log 2>&1"
                if lang:
                    service.env["LANG"] = lang
            master = spec.master
            master.security = skein.Security(cert_file=cert, key_file=key)
            master.files = {**resolved(master.files), CERT: cert, KEY: key,
                            JAR: file(self.jar.uri, "file", self.jar.visibility)}
            write(f"{self.folder}/{SPEC}", spec.to_protobuf().SerializeToString())
            self.staging.fs.client.mkdirs(self.folder, 0o700, True)
            self.staging.upload_new(written, mtime=mtime)
            for folder in folders:  # after their files: each write changes it
                self.staging.set_time(folder, mtime)
        resources = {name: _resource(statuses[f.source], f.source, str(f.type),
                                     str(f.visibility)) for name, f in master.files.items()}
        resources[SPEC] = _resource(statuses[uri(f"{self.folder}/{SPEC}")],
                                    uri(f"{self.folder}/{SPEC}"), "file", "application")
        environment = {**master.env, "CLASSPATH": classpath(),
                       "SKEIN_APPLICATION_ID": self.app_id, "HADOOP_USER_NAME": self.user}
        if lang:
            environment["LANG"] = lang
        context: dict[str, Any] = {
            "application-id": self.app_id,
            "application-name": spec.name,
            "application-type": application_type,
            "queue": spec.queue,
            "priority": 0,
            "max-app-attempts": spec.max_attempts,
            "resource": {"memory": master.resources.memory, "vCores": master.resources.vcores},
            "application-tags": {"tag": sorted(spec.tags)},
            "unmanaged-AM": False,
            "keep-containers-across-application-attempts": False,
            "am-container-spec": {
                "local-resources": _entries(resources),
                "environment": _entries(environment),
                "commands": {"command": am_command(uri(self.folder), str(master.log_level))},
            },
        }
        if validity_ms > 0:
            context["attempt-failures-validity-interval"] = validity_ms
        hadoop.rm_request("/ws/v1/cluster/apps", "POST", context)
        return self.app_id

    def _statuses(self, uris: set[str]) -> dict[str, dict[str, Any]]:
        """The length and modification time of each of `uris`, asked at once."""
        def status(uri: str) -> dict[str, Any]:
            found = hdfs.filesystem(uri).client.get_file_info(hdfs.path_of(uri))
            return {"length": found.length, "modificationTime": found.modification_time}

        with concurrent.futures.ThreadPoolExecutor(min(8, len(uris) or 1),
                                                   thread_name_prefix="status") as pool:
            return dict(zip(uris, pool.map(status, uris)))
