"""The HDFS client settings skein's driver gets (yarn_client/skein_jar.py): the user's
hdfs-site.xml completed with what it does not set, never changed where it does."""

from __future__ import annotations

from xml.etree import ElementTree

from flinkyarn import hadoop
from yarn_client.skein_jar import hdfs_site_with

DELAY = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
RETRIES = "dfs.client.block.write.locateFollowingBlock.retries"


def properties(folder) -> dict[str, str]:
    root = ElementTree.parse(folder / "hdfs-site.xml").getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


def test_the_users_hdfs_site_is_completed_not_changed(tmp_path):
    site = tmp_path / "conf" / "hdfs-site.xml"
    site.parent.mkdir()
    site.write_text(f"<?xml version='1.0'?><configuration>"
                    f"<property><name>dfs.replication</name><value>3</value></property>"
                    f"<property><name>{DELAY}</name><value>250</value></property>"
                    f"</configuration>")
    folder = hdfs_site_with(hadoop.CLIENT_HDFS, site, tmp_path / "cache")
    assert folder is not None
    assert properties(folder) == {"dfs.replication": "3", DELAY: "250",
                                  RETRIES: hadoop.CLIENT_HDFS[RETRIES]}
    # Cached by content: the same file gives the same folder; another, another.
    assert hdfs_site_with(hadoop.CLIENT_HDFS, site, tmp_path / "cache") == folder
    site.write_text("<configuration/>")
    other = hdfs_site_with(hadoop.CLIENT_HDFS, site, tmp_path / "cache")
    assert other != folder and properties(other) == hadoop.CLIENT_HDFS


def test_no_hdfs_site_or_an_unreadable_one(tmp_path):
    absent = hdfs_site_with(hadoop.CLIENT_HDFS, tmp_path / "none.xml", tmp_path / "cache")
    assert absent is not None and properties(absent) == hadoop.CLIENT_HDFS
    broken = tmp_path / "hdfs-site.xml"
    broken.write_text("<configuration><property>")
    assert hdfs_site_with(hadoop.CLIENT_HDFS, broken, tmp_path / "cache") is None
