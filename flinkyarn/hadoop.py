"""What the rest of flinkyarn needs to know about the Hadoop cluster it runs on.

Reads the client configuration in ``$HADOOP_CONF_DIR`` (the same files the Hadoop CLI
and skein read) and opens HDFS through WebHDFS, which needs no native library.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from urllib.parse import urlparse


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


def namenode_web_address(directory: Path | None = None) -> tuple[str, int]:
    """(host, port) of the NameNode's HTTP server, which serves WebHDFS."""
    value = site_properties("hdfs-site.xml", directory).get("dfs.namenode.http-address")
    if not value:
        host = urlparse(default_fs(directory)).hostname or "localhost"
        return host, 9870
    host, _, port = value.rpartition(":")
    if host in ("", "0.0.0.0"):
        host = urlparse(default_fs(directory)).hostname or "localhost"
    return host, int(port)


def hdfs(user: str | None = None):
    """An fsspec filesystem for the cluster's HDFS, over WebHDFS."""
    from fsspec.implementations.webhdfs import WebHDFS
    import getpass

    host, port = namenode_web_address()
    return WebHDFS(host=host, port=port, user=user or getpass.getuser())


def hdfs_path(url: str) -> str:
    """The path part of an `hdfs://` URL, as WebHDFS wants it."""
    parsed = urlparse(url)
    if parsed.scheme != "hdfs":
        raise ValueError(f"not an hdfs:// URL: {url!r}")
    return parsed.path or "/"
