"""skein's jar, with the YARN application type `flinkyarn` and an ApplicationMaster
that runs on JDK 17.

skein has no option for either, and both are constants in its Java driver:
- every application gets the type `skein`; admins filter the YARN UI by type;
- the ApplicationMaster is started as `java -Xmx128M ...`; on JDK 17 its web UI (the
  page YARN's tracking URL opens) fails, because its template engine reflects into
  java.util, which JDK 17 opens only when asked (`--add-opens`); and it writes its
  hsperfdata file into the node's /tmp (`-XX:-UsePerfData` turns that off).
So we derive a copy of skein's jar whose driver has those two strings rewritten in its
constant pool (Utf8 constants: tag 1, a two-byte length, the bytes; nothing in a class
file refers to constant-pool byte offsets, so changing a length is safe). Nothing else
changes. The copy is cached beside the user's other caches, keyed by the original's
digest, and skein is pointed at it before it starts a driver (`use_flinkyarn_jar`).
The copy also sets each application's attempt-failures validity interval, lets the
AppMaster give YARN a final tracking URL, lets it ask YARN for containers every
yarn.heartbeat.interval instead of every 5 s (at once when one is requested, then every
yarn.heartbeat.container-request-interval until it comes), and lets our AppMaster decide
which attempt is the last (skein has no option for any of them:
yarn_client/skein_attempts.py).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

from flinkyarn import hadoop
from yarn_client import shipping, skein_attempts

APPLICATION_TYPE = "flinkyarn"
_SKEIN_AM_JAVA = "/bin/java -Xmx128M "
# -XX:-UsePerfData: the JVM's hsperfdata file goes to /tmp whatever java.io.tmpdir says,
# which is outside the container's folders and left behind by a killed AppMaster.
# skein's JVMs (the client's driver, the ApplicationMaster) mostly wait: lean ones.
AM_JAVA = (f"/bin/java -Xmx128M {hadoop.LEAN_JVM} --add-opens=java.base/java.util=ALL-UNNAMED "
           "--add-opens=java.base/java.lang=ALL-UNNAMED ")
# class file -> the string constants rewritten in it
_PATCHES = {
    "com/anaconda/skein/Driver.class": (("skein", APPLICATION_TYPE), (_SKEIN_AM_JAVA, AM_JAVA)),
    "com/anaconda/skein/Driver$DriverImpl.class": (("skein", APPLICATION_TYPE),),
}
_EDITION = "flinkyarn11"  # bump when the patches change, so cached copies are rebuilt


def _utf8_constant(text: str) -> bytes:
    data = text.encode()
    return b"\x01" + len(data).to_bytes(2, "big") + data


def patch_class(data: bytes, name: str) -> bytes:
    """The class file with its string constants rewritten per _PATCHES."""
    for before, after in _PATCHES[name]:
        old, new = _utf8_constant(before), _utf8_constant(after)
        count = data.count(old)
        if count != 1:
            raise RuntimeError(f"{name}: expected one {before!r} string constant, found "
                               f"{count}; this skein version is not supported")
        data = data.replace(old, new)
    return data


def patched_jar(original: str, cache: Path) -> Path:
    digest = hashlib.sha256(Path(original).read_bytes()).hexdigest()[:16]
    target = cache / f"skein-{digest}-{_EDITION}.jar"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".jar.partial")
    os.close(fd)
    with zipfile.ZipFile(original) as source, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename in _PATCHES:
                data = patch_class(data, entry.filename)
            if entry.filename == "com/anaconda/skein/Driver.class":
                data = skein_attempts.call_helper(data)
            if entry.filename == "com/anaconda/skein/ApplicationMaster.class":
                data = skein_attempts.call_last_attempt_helper(skein_attempts.call_heartbeat_helper(
                    skein_attempts.call_unregister_helper(data)))
            if entry.filename == skein_attempts.ALLOCATOR_CLASS:
                data = skein_attempts.call_sleep_helper(data)
            if entry.filename == skein_attempts.SERVICE_TRACKER_CLASS:
                data = skein_attempts.call_request_helper(data)
            out.writestr(entry, data)
        out.writestr(skein_attempts.HELPER_FILE, skein_attempts.helper_class())
        out.writestr(skein_attempts.UNREGISTER_HELPER_FILE, skein_attempts.unregister_helper_class())
        out.writestr(skein_attempts.HEARTBEAT_HELPER_FILE, skein_attempts.heartbeat_helper_class())
        out.writestr(skein_attempts.LAST_ATTEMPT_HELPER_FILE, skein_attempts.last_attempt_helper_class())
    os.replace(tmp, target)
    return target


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




def driver_java_options() -> str:
    """The JVM options of a skein driver started by this client: lean, the Kerberos
    configuration MIT's tools use (KRB5_CONFIG, which Java does not read), HDFS client
    settings for quick small writes (hadoop.CLIENT_HDFS), and what the user sets in
    SKEIN_DRIVER_JAVA_OPTIONS (skein's own variable) after them."""
    krb5 = (f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}"
            if os.environ.get("KRB5_CONFIG") else "")
    return " ".join(filter(None, (hadoop.LEAN_JVM, krb5, _client_hdfs_option(),
                                  os.environ.get("SKEIN_DRIVER_JAVA_OPTIONS", ""))))


def client(log=False, attempt_failures_validity_ms: int | None = None):
    """skein's Client (it starts a driver), with the patched jar and lean JVM options;
    the applications it submits count AppMaster failures within
    `attempt_failures_validity_ms` of each other only (None, 0: all; see
    yarn_client/skein_attempts.py)."""
    import skein

    use_flinkyarn_jar()
    options = driver_java_options()
    if attempt_failures_validity_ms:
        options = f"-D{skein_attempts.PROPERTY}={attempt_failures_validity_ms} {options}"
    return skein.Client(log=log, java_options=options)


def use_flinkyarn_jar() -> str:
    """Points skein at the patched jar (idempotent); returns its path."""
    import skein.core

    current = skein.core._SKEIN_JAR
    if _EDITION in os.path.basename(current):
        return current
    path = str(patched_jar(current, shipping.client_cache()))
    skein.core._SKEIN_JAR = path
    return path
