"""What the rest of flinkyarn needs to know about the Hadoop cluster it runs on.

Reads the client configuration in ``$HADOOP_CONF_DIR`` (the same files the Hadoop CLI
and skein read) and speaks to the ResourceManager's REST API; HDFS is flinkyarn/hdfs.py's.
"""

from __future__ import annotations

import getpass
import os
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlparse

from flinkyarn import retry

if TYPE_CHECKING:  # imported where used: most processes never speak to the RM
    import requests

# Options of the JVMs we start that mostly wait (skein's driver and ApplicationMaster,
# Spark's client-mode AM): the quick compiler only and the serial collector halve the
# CPU their start costs (skein's driver: 6.5 -> 4 s), which on a busy node is the job's.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto -XX:-UsePerfData"

# Closing an HDFS file waits until the NameNode has the DataNode's report of the file's
# last block. The client asks, and asks again after a pause (400 ms by default,
# doubling); a small file's report comes a few ms after the first ask. skein's driver
# writes six or so small files per submission, one after the other, so most of a
# submission's second was these pauses. Our clients (skein's driver, the Spark client
# in a script's driver) ask again sooner, and as patiently in all (20 ms doubling over
# 10 tries: 10 s; the default 400 ms over 5: 6 s). What the user's settings say stays.
CLIENT_HDFS = {"dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
               "dfs.client.block.write.locateFollowingBlock.retries": "10"}


class HadoopConfigError(RuntimeError):
    """The Hadoop client configuration is missing or does not say what is needed."""


def conf_dir() -> Path:
    value = os.environ.get("HADOOP_CONF_DIR")
    if not value:
        raise HadoopConfigError(
            "HADOOP_CONF_DIR is not set: export it as the folder of the cluster's Hadoop "
            "client configuration (core-site.xml, hdfs-site.xml, yarn-site.xml)")
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


# ------------------------------------------------------- the ResourceManager's REST API


_RM_WEB_KEY = "yarn.resourcemanager.webapp.address"
_RM_HTTPS_KEY = "yarn.resourcemanager.webapp.https.address"
_RM_HOST_KEY = "yarn.resourcemanager.hostname"
# What a standby ResourceManager's web server answers when it cannot redirect to the
# active one (Hadoop's RMWebAppFilter); otherwise it answers 307 to the active one.
_STANDBY_PAGE = "This is standby RM"
# The RM that answered last, by the configured RMs: the next call asks it first.
_active_rm: dict[tuple[str, ...], str] = {}


class ResourceManagerError(OSError):
    """A REST call that no ResourceManager answered, or that the active one refused.
    `status` is the HTTP status of the refusal (404: it knows no such thing), None when
    none answered; `tried` the RMs asked, in order. The message names them."""

    def __init__(self, message: str, status: int | None = None,
                 tried: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status, self.tried = status, tried


def rm_web_addresses(directory: Path | None = None) -> list[str]:
    """scheme://host:port of each ResourceManager's web services, as Hadoop's clients
    read yarn-site.xml: HTTPS (yarn.resourcemanager.webapp.https.address, default port
    8090) when yarn.http.policy is HTTPS_ONLY, else HTTP (yarn.resourcemanager.webapp.address,
    8088); with RM HA (yarn.resourcemanager.ha.enabled) one per id of
    yarn.resourcemanager.ha.rm-ids, from `<key>.<id>`, else from
    yarn.resourcemanager.hostname.<id> and the default port."""
    properties = site_properties("yarn-site.xml", directory)
    secure = properties.get("yarn.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
    scheme, key, port = ("https", _RM_HTTPS_KEY, 8090) if secure else ("http", _RM_WEB_KEY, 8088)
    if properties.get("yarn.resourcemanager.ha.enabled", "false").lower() != "true":
        suffixes = [""]
    else:
        suffixes = [f".{i.strip()}" for i in
                    properties.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
        if not suffixes:
            raise HadoopConfigError("yarn-site.xml: yarn.resourcemanager.ha.enabled is true "
                                    "but yarn.resourcemanager.ha.rm-ids names no ResourceManager")
    addresses = []
    for suffix in suffixes:
        hostname = _expanded(properties, _RM_HOST_KEY + suffix)
        value = _expanded(properties, key + suffix) or (hostname and f"{hostname}:{port}")
        if not value:
            if suffix:
                raise HadoopConfigError(f"yarn-site.xml: neither {key}{suffix} nor "
                                        f"{_RM_HOST_KEY}{suffix} says where ResourceManager "
                                        f"{suffix[1:]} is")
            value = f"localhost:{port}"
        host, _, number = value.rpartition(":")
        if host in ("", "0.0.0.0"):  # a bind address: the RM's host name says where it is
            host = hostname if hostname and hostname != "0.0.0.0" else "localhost"
        addresses.append(f"{scheme}://{host}:{number}")
    return addresses


def _expanded(properties: dict[str, str], key: str) -> str | None:
    """A property's value with Hadoop's `${other.key}` references to other properties
    of the same file resolved (yarn-default.xml's style, often copied)."""
    value = properties.get(key)
    for _ in range(8):
        if value is None or "${" not in value:
            break
        value = re.sub(r"\$\{([^}]+)\}", lambda m: properties.get(m.group(1), m.group(0)), value)
    return value


def rm_web_address(directory: Path | None = None) -> str:
    """scheme://host:port of the ResourceManager's web services: the one that answered
    last (the active one, with RM HA), else the first configured."""
    addresses = rm_web_addresses(directory)
    return _active_rm.get(tuple(addresses), addresses[0])


def rm_request(path: str, method: str = "GET", body: dict[str, Any] | None = None,
               timeout: float = 10.0, xml: bool = False) -> dict[str, Any]:
    """A call of the ResourceManager's REST API as this process's user; its JSON answer
    ({} for none). Asks each configured RM in turn (the one that answered last first),
    each within `timeout` seconds, and follows a standby's redirect to the active one.
    Authenticates as Hadoop's own clients do: `user.name` (pseudo authentication), and
    on a secure cluster (hadoop.security.authentication=kerberos) SPNEGO with the
    process's Kerberos ticket where the RM asks for it; checks an HTTPS RM against
    ssl-client.xml's truststore. Raises ResourceManagerError (an OSError) when none
    answers, the active one refuses (also: it wants SPNEGO and there is no ticket), or
    the answer is not JSON; HadoopConfigError when the configuration does not say where
    an RM is. `xml`: ask for XML (some of the RM's answers have no JSON writer, such as
    one application attempt's) and return the texts of the root's children by tag."""
    import requests

    from flinkyarn import kerberos

    configured = rm_web_addresses()
    session = requests.Session()
    # No proxy (the RMs are on the cluster's network), and the cluster's truststore wins
    # over REQUESTS_CA_BUNDLE.
    session.trust_env = False
    session.headers["Accept"] = "application/xml" if xml else "application/json"
    if any(a.startswith("https:") for a in configured):
        session.verify = kerberos.ca_bundle()
    # As Hadoop's AuthenticatedURL: `user.name` for an RM that authenticates as Hadoop's
    # pseudo handler does (or not at all), SPNEGO for one that answers 401 Negotiate
    # (requests-gssapi negotiates only then). A process without a ticket (a container:
    # delegation tokens only) still reaches an RM whose web services are open.
    session.params = {"user.name": os.environ.get("HADOOP_USER_NAME")
                      or os.environ.get("USER") or getpass.getuser()}
    no_ticket: kerberos.KerberosError | None = None
    if kerberos.security_enabled():
        try:
            session.auth = kerberos.spnego_auth()
        except kerberos.KerberosError as error:
            no_ticket = error
    last = _active_rm.get(tuple(configured))
    queue = [last] + [a for a in configured if a != last] if last else list(configured)
    tried: list[str] = []
    failures: list[str] = []
    with session:
        while queue:
            base = queue.pop(0)
            tried.append(base)
            try:
                response = session.request(method, base + path, json=body, timeout=timeout,
                                           allow_redirects=False)
            except requests.RequestException as error:
                failures.append(f"{base}: {_reason(error, timeout)}")
                continue
            if response.is_redirect:  # a standby, pointing at the active RM
                target = _origin(urljoin(base + path, response.headers["Location"]))
                failures.append(f"{base}: standby, redirects to {target}")
                if target not in tried:
                    queue = [target] + [a for a in queue if a != target]
                continue
            if response.status_code == 503:  # an RM becoming active, or going
                failures.append(f"{base}: answered 503 {response.reason}")
                continue
            if (("xml" if xml else "json") not in response.headers.get("Content-Type", "")
                    and _STANDBY_PAGE in response.text[:4096]):
                failures.append(f"{base}: standby")
                continue
            _active_rm[tuple(configured)] = base
            if response.status_code == 401 and no_ticket is not None:
                raise ResourceManagerError(f"the YARN ResourceManager at {base} wants "
                                           f"Kerberos (SPNEGO): {no_ticket}", 401, tuple(tried))
            return _answer(response, base, method, path, tuple(tried), xml)
    raise ResourceManagerError(f"no YARN ResourceManager answered {method} {path}: "
                               f"{'; '.join(failures)}", None, tuple(tried))


def _answer(response: requests.Response, base: str, method: str, path: str,
            tried: tuple[str, ...], xml: bool = False) -> dict[str, Any]:
    """The active RM's answer as JSON (or XML: see rm_request); a refusal or another
    body raises."""
    if response.status_code >= 400:
        try:  # the RM says why in a RemoteException
            why = response.json()["RemoteException"]["message"]
        except (ValueError, KeyError, TypeError):
            why = response.reason
        raise ResourceManagerError(f"the YARN ResourceManager at {base} answered "
                                   f"{response.status_code} to {method} {path}: {why}",
                                   response.status_code, tried)
    if not response.content:
        return {}
    if xml:
        try:
            root = ElementTree.fromstring(response.content)
        except ElementTree.ParseError as error:
            raise ResourceManagerError(f"the YARN ResourceManager at {base} answered {method} "
                                       f"{path} with no XML: {error}", response.status_code,
                                       tried) from None
        return {child.tag: child.text or "" for child in root}
    try:
        answer: dict[str, Any] = response.json()
    except ValueError:
        raise ResourceManagerError(f"the YARN ResourceManager at {base} answered {method} "
                                   f"{path} with no JSON ({response.headers.get('Content-Type')})",
                                   response.status_code, tried) from None
    return answer


def _origin(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def _reason(error: Exception, timeout: float) -> str:
    """What a requests error says, without urllib3's wrapping."""
    import requests

    if isinstance(error, requests.Timeout):
        return f"no answer within {timeout:g} s"
    text = str(error)
    found = re.search(r"\[Errno -?\d+\][^'\")]*", text) or re.search(
        r"\[SSL[^\]]*\][^'\")]*", text)
    return found.group(0).strip() if found else text


def leaf_queues(scheduler: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The leaf queues of the ResourceManager's schedulerInfo (/ws/v1/cluster/scheduler),
    by name and by path; none for a scheduler without queues (FIFO)."""
    out: dict[str, dict[str, Any]] = {}

    def visit(queue: dict[str, Any]) -> None:
        children = (queue.get("queues") or {}).get("queue") or []
        if not children:
            out[queue["queueName"]] = queue
            out[queue.get("queuePath", queue["queueName"])] = queue
        for child in children:
            visit(child)

    if "queues" in scheduler:
        visit(scheduler)
    return out


def applications_tagged(tag: str) -> list[dict[str, Any]]:
    """The YARN applications that carry `tag` (YARN keeps tags in lower case)."""
    found = rm_request(f"/ws/v1/cluster/apps?applicationTags={tag.lower()}")
    apps: list[dict[str, Any]] = (found.get("apps") or {}).get("app") or []
    return apps


def attempt_diagnostics(app_id: str, attempt: int) -> str:
    """What YARN says of how attempt `attempt` of `app_id` ended, on one line (empty if
    it says nothing or cannot be asked)."""
    prefix = app_id.replace("application_", "appattempt_", 1)
    try:  # this answer of the RM is XML only
        answer = rm_request(f"/ws/v1/cluster/apps/{app_id}/appattempts/{prefix}_{attempt:06d}",
                            xml=True)
    except (OSError, ValueError, ResourceManagerError, HadoopConfigError):
        return ""
    said = answer.get("diagnosticsInfo", "").split("For more detailed output")[0]
    return " ".join(said.split())[:500]


def attempt_killed(app_id: str, attempt: int) -> bool:
    """Whether YARN is killing (or has killed) attempt `attempt` of `app_id` because the
    application is killed: it then starts no other attempt. False when it cannot tell."""
    try:
        attempts = rm_request(f"/ws/v1/cluster/apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
    except (OSError, ValueError, KeyError, TypeError, ResourceManagerError, HadoopConfigError):
        return False
    return any(int(entry.get("id", 0)) == attempt
               and entry.get("appAttemptState") in ("KILLED", "FINAL_SAVING")
               for entry in attempts)


def kill_application(app_id: str) -> None:
    """Asks the ResourceManager to kill `app_id` (nothing happens to an ended one)."""
    rm_request(f"/ws/v1/cluster/apps/{app_id}/state", "PUT", {"state": "KILLED"})


# An application's states in which it has ended.
APPLICATION_ENDED = ("FINISHED", "FAILED", "KILLED")


class _StillRunning(Exception):
    """An application that was asked to end has not yet."""


def kill_application_until_ended(app_id: str, timeout: float) -> dict[str, Any]:
    """Kills `app_id` and waits until YARN says it ended; returns its last report. While
    it has not, looks again after 50 ms, doubling to a second, and asks again: a busy RM
    may time out a call, and an RM that failed over may not have seen it. GaveUp (with
    the last error) after `timeout` s."""
    def attempt() -> dict[str, Any]:
        report: dict[str, Any] = rm_request(f"/ws/v1/cluster/apps/{app_id}")["app"]
        if report["state"] in APPLICATION_ENDED:
            return report
        kill_application(app_id)
        raise _StillRunning(f"{app_id} is {report['state']}")

    return retry.retry(attempt, retry_on=(OSError, ValueError, KeyError, _StillRunning),
                       pauses=retry.Backoff(0.05, 1.0), deadline=retry.Deadline(timeout))

