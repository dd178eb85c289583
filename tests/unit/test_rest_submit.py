"""What the REST submit (yarn_client/rest_submit.py) hands YARN for skein's
ApplicationMaster: the class path skein's driver would give it, and the command the
patched driver would start it with. The YARN tier submits every application this way."""

from __future__ import annotations

from yarn_client import rest_submit, skein_jar


def site(folder, props: dict[str, str]) -> None:
    rows = "".join(f"<property><name>{k}</name><value>{v}</value></property>"
                   for k, v in props.items())
    (folder / "yarn-site.xml").write_text(f"<configuration>{rows}</configuration>")


def test_the_class_path_is_the_sites_application_class_path_else_yarns_default(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    (tmp_path / "core-site.xml").write_text("<configuration/>")
    site(tmp_path, {"yarn.application.classpath": "$HADOOP_CONF_DIR, /opt/hadoop/lib/*"})
    assert rest_submit.classpath() == "{{CLASSPATH}}<CPS>./*<CPS>$HADOOP_CONF_DIR<CPS>/opt/hadoop/lib/*"
    site(tmp_path, {})
    entries = rest_submit.classpath().split("<CPS>")
    assert entries[:3] == ["{{CLASSPATH}}", "./*", "{{HADOOP_CONF_DIR}}"]
    assert "{{HADOOP_YARN_HOME}}/share/hadoop/yarn/lib/*" in entries


def test_the_appmaster_starts_as_the_patched_driver_starts_it():
    command = rest_submit.am_command("hdfs://nn:8020/user/u/.skein/application_1_0001", "INFO")
    # The JVM of the patched driver's constant (JDK 17's opens, no hsperfdata in /tmp).
    assert command.startswith("{{JAVA_HOME}}" + skein_jar.AM_JAVA)
    assert "--add-opens=java.base/java.util=ALL-UNNAMED" in command
    assert command.endswith(" com.anaconda.skein.ApplicationMaster "
                            "hdfs://nn:8020/user/u/.skein/application_1_0001 "
                            "><LOG_DIR>/application.master.log 2>&1")
    assert "-Dskein.log.level=INFO -Dskein.log.directory=<LOG_DIR>" in command
