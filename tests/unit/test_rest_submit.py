"""What the REST submit (yarn_client/rest_submit.py) hands YARN for skein's
ApplicationMaster: the class path skein's driver would give it, and the command skein's
driver starts it with under our agent (tests/unit/test_skein_agent.py checks the
driver's). The YARN tier submits every application this way."""

from __future__ import annotations

from yarn_client import rest_submit, skein_agent


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


def test_the_appmaster_starts_as_the_driver_starts_it_under_our_agent():
    command = rest_submit.am_command("hdfs://nn:8020/user/u/.skein/application_1_0001", "INFO")
    # The options the agent gives skein's driver (JDK 17's opens, no hsperfdata in /tmp),
    # which load the agent from the container's folder.
    assert command.startswith("{{JAVA_HOME}}/bin/java " + skein_agent.am_java_options() + " ")
    assert "--add-opens=java.base/java.util=ALL-UNNAMED" in command
    assert f" -javaagent:{skein_agent.AGENT_JAR}=appmaster " in command
    assert command.endswith(" com.anaconda.skein.ApplicationMaster "
                            "hdfs://nn:8020/user/u/.skein/application_1_0001 "
                            "><LOG_DIR>/application.master.log 2>&1")
    assert "-Dskein.log.level=INFO -Dskein.log.directory=<LOG_DIR>" in command
