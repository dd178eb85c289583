"""flinkyarn's agent for skein's JVMs (yarn_client/skein_agent.py, its Java in
yarn_client/skein-agent/), as skein 0.8.2's own Driver and ApplicationMaster classes run
with it in a JDK's JVM against YARN's client classes (the local Hadoop's jars), each of its
jobs checked by what skein then hands YARN; and the HDFS client settings skein's driver
gets: the user's hdfs-site.xml completed with what it does not set, never changed where
it does."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree


from flinkyarn import hadoop
from yarn_client import skein_agent
from yarn_client.skein_agent import hdfs_site_with

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


def test_skein_is_the_version_the_agent_is_written_for():
    """The agent changes skein's classes as skein 0.8.2 has them (setup.cfg pins it)."""
    import importlib.metadata

    assert importlib.metadata.version("skein") == "0.8.2"


# ------------------------------------------------------------------ running skein's classes

JAVA_HELPERS = """
    static java.lang.reflect.Field field(Class<?> type, String name) throws Exception {
        java.lang.reflect.Field f = type.getDeclaredField(name);
        f.setAccessible(true);
        return f;
    }
    static Object get(Object o, String name) throws Exception {
        return field(o.getClass(), name).get(o);
    }
    static void set(Object o, String name, Object value) throws Exception {
        field(o.getClass(), name).set(o, value);
    }
    static Object call(Object o, String name, Class<?>[] types, Object... args) throws Exception {
        java.lang.reflect.Method m = o.getClass().getDeclaredMethod(name, types);
        m.setAccessible(true);
        try {
            return m.invoke(o, args);
        } catch (java.lang.reflect.InvocationTargetException e) {
            throw (Exception) e.getCause();
        }
    }
    static void say(Object line) {
        System.out.println("CHECK " + line);
    }
"""


# Each source's class Check, compiled once per session (its JVMs start a dozen times).
_COMPILED: dict[str, Path] = {}


def compiled(source: str, classpath: str, scratch: Path) -> Path:
    """A folder (in `scratch`, a test's tmp_path, which outlasts the session) with class
    Check of `source` compiled."""
    import subprocess

    if source not in _COMPILED:
        folder = scratch / "check-classes"
        folder.mkdir()
        (folder / "Check.java").write_text(source)
        done = subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(folder),
                               str(folder / "Check.java")], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
        _COMPILED[source] = folder
    return _COMPILED[source]


def run_java(tmp_path, source: str, role: str, *args: str, java_options=(),
             env: dict[str, str | None] | None = None) -> list[str]:
    """Runs class Check of `source` with the agent as `role` on skein's jar and the local
    Hadoop's, with the JVM options skein's JVMs get (hadoop.LEAN_JVM); the lines it
    printed with `say`."""
    import subprocess

    import local_hadoop
    import skein.core

    lib = local_hadoop.Layout.default().lib
    classpath = f"{skein.core._SKEIN_JAR}:{lib}/*"
    classes = compiled(source.replace("//HELPERS", JAVA_HELPERS), classpath, tmp_path)
    environment = dict(os.environ)
    for key, value in (env or {}).items():
        environment.pop(key, None)
        if value is not None:
            environment[key] = value
    command = ["java", f"-javaagent:{skein_agent.agent_jar()}={role}", *hadoop.LEAN_JVM.split(),
               *java_options, f"-Duser.home={tmp_path}", "-cp", f"{classes}:{classpath}",
               "Check", *args]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    # The agent reports a class it could not change on stderr; it must change them all.
    assert "[Byte Buddy] ERROR" not in result.stderr, result.stderr[-5000:]
    return [line[len("CHECK "):] for line in result.stdout.splitlines() if line.startswith("CHECK ")]


DRIVER_CHECK = """
import java.nio.file.*;
import java.util.*;
import com.anaconda.skein.*;
import com.anaconda.skein.shaded.io.grpc.stub.StreamObserver;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.yarn.api.records.*;
import org.apache.hadoop.yarn.api.protocolrecords.GetNewApplicationResponse;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.client.api.impl.YarnClientImpl;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.util.Records;

public class Check {
    //HELPERS

    /** YARN, as skein's driver sees it: what it is handed is printed. */
    static class Yarn extends YarnClientImpl {
        public YarnClientApplication createApplication() {
            ApplicationSubmissionContext context = Records.newRecord(ApplicationSubmissionContext.class);
            context.setApplicationId(ApplicationId.newInstance(1L, 1));
            return new YarnClientApplication(GetNewApplicationResponse.newInstance(
                context.getApplicationId(), Resource.newInstance(1024, 1),
                Resource.newInstance(8192, 8)), context);
        }
        public ApplicationId submitApplication(ApplicationSubmissionContext context) {
            say("type " + context.getApplicationType());
            say("validity " + context.getAttemptFailuresValidityInterval());
            say("attempts " + context.getMaxAppAttempts());
            say("command " + context.getAMContainerSpec().getCommands());
            say("resources " + new TreeSet<>(context.getAMContainerSpec().getLocalResources().keySet()));
            return context.getApplicationId();
        }
        public List<ApplicationReport> getApplications(Set<String> types,
                EnumSet<YarnApplicationState> states) {
            say("listed types " + types);
            return new ArrayList<>();
        }
        public ApplicationReport getApplicationReport(ApplicationId id) {
            ApplicationReport report = Records.newRecord(ApplicationReport.class);
            report.setApplicationId(id);
            report.setApplicationType(System.getProperty("report.type"));
            return report;
        }
    }

    static class Answer implements StreamObserver<Object> {
        public void onNext(Object value) {}
        public void onError(Throwable error) { say("refused " + error.getMessage()); }
        public void onCompleted() {}
    }

    /** The local filesystem, named with a host, as skein's driver expects of a filesystem
     * (skein's Utils.equalFs fails on a URI without one). */
    public static class HostedLocal extends org.apache.hadoop.fs.RawLocalFileSystem {
        public java.net.URI getUri() { return java.net.URI.create("file://localhost/"); }
        public String getScheme() { return "file"; }
        protected void checkPath(org.apache.hadoop.fs.Path path) {}
    }

    public static void main(String[] args) throws Exception {
        Driver driver = new Driver();
        YarnConfiguration conf = new YarnConfiguration();
        conf.setClassLoader(Check.class.getClassLoader());  // the source launcher's
        conf.set("fs.file.impl", HostedLocal.class.getName());
        conf.setBoolean("fs.file.impl.disable.cache", true);
        set(driver, "conf", conf);
        set(driver, "defaultFileSystem", FileSystem.get(java.net.URI.create("file://localhost/"), conf));
        set(driver, "defaultYarnClient", new Yarn());
        set(driver, "classpath", "skein's classpath");
        set(driver, "jarPath", args[1]);
        set(driver, "loggedIn", true);
        set(driver, "certBytes", com.anaconda.skein.shaded.com.google.protobuf.ByteString.copyFromUtf8("certificate"));
        set(driver, "keyBytes", com.anaconda.skein.shaded.com.google.protobuf.ByteString.copyFromUtf8("key"));
        // As skein's gRPC submit reads the client's specification.
        Model.ApplicationSpec spec = MsgUtils.readApplicationSpec(
            Msg.ApplicationSpec.parseFrom(Files.readAllBytes(Paths.get(args[0]))));
        driver.submitApplication(spec);

        Class<?> impl = Class.forName("com.anaconda.skein.Driver$DriverImpl");
        java.lang.reflect.Constructor<?> make = impl.getDeclaredConstructor(Driver.class);
        make.setAccessible(true);
        Object service = make.newInstance(driver);
        call(service, "getApplications",
             new Class<?>[] {Msg.ApplicationsRequest.class, StreamObserver.class},
             Msg.ApplicationsRequest.newBuilder().build(), new Answer());
        Object report = call(service, "getReport",
             new Class<?>[] {String.class, StreamObserver.class},
             "application_1_0001", new Answer());
        say("report " + (report == null ? "refused" : "accepted"));
    }
}
"""


def driver_submits(tmp_path, *, with_agent_jar: bool, validity_ms: int | None,
                   report_type: str = "flinkyarn") -> dict[str, str]:
    """What skein's driver, with the agent, hands YARN for a specification (and how it
    lists applications and takes one's report): {what: value}."""
    import skein
    import skein.core

    jar = tmp_path / skein_agent.AGENT_JAR
    jar.write_bytes(b"the agent")
    files = {skein_agent.AGENT_JAR: str(jar)} if with_agent_jar else {}
    spec = skein.ApplicationSpec(
        name="agent check", queue="default", max_attempts=2,
        master=skein.Master(resources=skein.Resources(memory=256, vcores=1), files=files,
                            script="echo master"))
    (tmp_path / "spec.proto").write_bytes(spec.to_protobuf().SerializeToString())
    options = [f"-D{skein_agent.AM_JAVA_PROPERTY}={skein_agent.am_java_options()}",
               f"-Dreport.type={report_type}"]
    if validity_ms is not None:
        options.append(f"-D{skein_agent.VALIDITY_PROPERTY}={validity_ms}")
    lines = run_java(tmp_path, DRIVER_CHECK, "driver", "spec.proto", skein.core._SKEIN_JAR,
                     java_options=options)
    return dict(line.split(" ", 1) for line in lines)


def test_skeins_driver_submits_a_flinkyarn_application_whose_appmaster_runs_the_agent(tmp_path):
    """skein's driver (its submit, as its gRPC service calls it) with the agent: the type
    is flinkyarn; the ApplicationMaster's JVM starts with am_java_options (JDK 17's opens,
    no hsperfdata in /tmp, the agent from its container's folder, which the application
    localizes); the validity interval is the driver's property; the driver lists and
    accepts applications of type flinkyarn (skein's own refuses any but `skein`)."""
    submitted = driver_submits(tmp_path, with_agent_jar=True, validity_ms=10000)
    assert submitted["type"] == "flinkyarn"
    assert submitted["validity"] == "10000"
    assert submitted["attempts"] == "2"
    command = submitted["command"]
    assert command.startswith("[{{JAVA_HOME}}/bin/java " + skein_agent.am_java_options() + " ")
    assert "-Xmx128M -Xmx128M" not in command
    assert f"-javaagent:{skein_agent.AGENT_JAR}=appmaster" in command
    assert "--add-opens=java.base/java.util=ALL-UNNAMED" in command and "-XX:-UsePerfData" in command
    assert command.endswith(" com.anaconda.skein.ApplicationMaster "
                            f"file://localhost{tmp_path}/.skein/application_1_0001 "
                            "><LOG_DIR>/application.master.log 2>&1]")
    assert skein_agent.AGENT_JAR in submitted["resources"].strip("[]").split(", ")
    assert submitted["listed"] == "types [flinkyarn]"
    assert submitted["report"] == "accepted"


def test_without_the_agent_jar_or_a_validity_interval_the_driver_keeps_skeins(tmp_path):
    """An application that does not localize the agent (another skein application
    submitted through our driver) starts its ApplicationMaster as skein does; without the
    property the interval is YARN's default (-1: every failure counts); an application of
    skein's own type is refused as not ours."""
    submitted = driver_submits(tmp_path, with_agent_jar=False, validity_ms=None,
                               report_type="skein")
    assert submitted["type"] == "flinkyarn"
    assert submitted["validity"] == "-1"
    assert submitted["command"].startswith("[{{JAVA_HOME}}/bin/java -Xmx128M -Dskein.log.level=")
    assert "javaagent" not in submitted["command"]
    assert submitted["report"] == "refused"


APPMASTER_CHECK = """
import java.util.*;
import java.util.concurrent.atomic.AtomicInteger;
import com.anaconda.skein.*;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.records.*;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.impl.AMRMClientImpl;

public class Check {
    //HELPERS

    /** YARN's ResourceManager, as skein's ApplicationMaster sees it. */
    static class Yarn extends AMRMClientImpl<ContainerRequest> {
        final AtomicInteger allocations = new AtomicInteger();
        public AllocateResponse allocate(float progress) {
            allocations.incrementAndGet();
            return AllocateResponse.newInstance(0, new ArrayList<ContainerStatus>(),
                new ArrayList<Container>(), new ArrayList<NodeReport>(), null, null, 1, null,
                new ArrayList<NMToken>());
        }
        public void addContainerRequest(ContainerRequest request) {
            say("request added");
        }
        public void unregisterApplicationMaster(FinalApplicationStatus status, String message,
                                                String url) {
            say("unregistered " + status + " " + url);
        }
    }

    static boolean waitFor(java.util.function.BooleanSupplier condition) throws Exception {
        for (int i = 0; i < 600 && !condition.getAsBoolean(); i++) Thread.sleep(100);
        return condition.getAsBoolean();
    }

    public static void main(String[] args) throws Exception {
        ApplicationMaster master = new ApplicationMaster();
        Yarn yarn = new Yarn();
        set(master, "rmClient", yarn);
        if (args[0].equals("intervals")) {
            say(get(master, "idleHeartbeat") + " " + get(master, "pendingHeartbeat"));
        } else if (args[0].equals("allocator")) {
            // The allocator calls allocate, then waits its idle interval (10 min here).
            call(master, "startAllocator", new Class<?>[0]);
            Thread allocator = (Thread) get(master, "allocatorThread");
            say("waits " + waitFor(() -> yarn.allocations.get() == 1
                                   && allocator.getState() == Thread.State.TIMED_WAITING));
            // A service asks for a container: the allocator asks YARN at once.
            Model.Service service = new Model.Service(1, "", new ArrayList<String>(),
                new ArrayList<String>(), true, 0, false, Resource.newInstance(256, 1),
                new HashMap<String, LocalResource>(), new HashMap<String, String>(), "true",
                new HashSet<String>());
            Class<?> trackerClass = Class.forName("com.anaconda.skein.ApplicationMaster$ServiceTracker");
            java.lang.reflect.Constructor<?> make = trackerClass.getDeclaredConstructor(
                ApplicationMaster.class, String.class, Model.Service.class);
            make.setAccessible(true);
            Object tracker = make.newInstance(master, "worker", service);
            call(tracker, "requestContainer", new Class<?>[] {Model.Container.class},
                 new Model.Container("worker", 0, Model.Container.State.WAITING,
                                     new HashMap<String, String>()));
            say("asked again " + waitFor(() -> yarn.allocations.get() >= 2));
            // skein stops its allocator with an interrupt, which ends the wait.
            call(master, "stopAllocator", new Class<?>[0]);
            allocator.join(60000);
            say("stopped " + !allocator.isAlive());
        } else {  // exit <attempt> <max attempts>: the exit hook after a failure
            Model.ApplicationSpec spec = new Model.ApplicationSpec();
            spec.setMaxAttempts(Integer.parseInt(args[2]));
            set(master, "spec", spec);
            set(master, "containerId", ContainerId.newContainerId(ApplicationAttemptId.newInstance(
                ApplicationId.newInstance(1L, 1), Integer.parseInt(args[1])), 1L));
            set(master, "appRegistered", true);
            set(master, "appFinished", true);
            set(master, "finalStatus", FinalApplicationStatus.FAILED);
            call(master, "runOnExit", new Class<?>[0]);
            say("exited");
        }
    }
}
"""


def appmaster(tmp_path, *args: str, env: dict[str, str | None] | None = None) -> list[str]:
    """skein's ApplicationMaster, with the agent, in a working folder of its own."""
    names = (skein_agent.HEARTBEAT_ENV, skein_agent.PENDING_HEARTBEAT_ENV,
             skein_agent.FINAL_END_ENV)
    return run_java(tmp_path, APPMASTER_CHECK, "appmaster", *args,
                    env={**{name: None for name in names}, **(env or {})})


def test_the_appmasters_heartbeat_intervals_are_capped_by_its_environment(tmp_path):
    """skein's intervals between its calls of YARN's allocate (idle: min(5 s, half the AM
    expiry), pending: min(1 s, idle)) capped by yarn.heartbeat.interval and
    yarn.heartbeat.container-request-interval from the container's environment, the
    pending one never above the idle one; skein's own without them or with garbage."""
    def intervals(idle: str | None, pending: str | None) -> list[str]:
        return appmaster(tmp_path, "intervals", env={skein_agent.HEARTBEAT_ENV: idle,
                                                    skein_agent.PENDING_HEARTBEAT_ENV: pending})

    assert intervals("1000", "200") == ["1000 200"]
    assert intervals("250", "500") == ["250 250"]
    assert intervals(None, None) == ["5000 1000"]
    assert intervals("soon", "later") == ["5000 1000"]


def test_a_container_request_wakes_the_appmasters_allocator(tmp_path):
    """skein's real allocator thread waits its idle interval (10 min here) after calling
    allocate; a service's container request ends the wait, so YARN is asked at once (the
    check gives up after 60 s and says so), and skein's interrupt still stops it."""
    lines = appmaster(tmp_path, "allocator", env={skein_agent.HEARTBEAT_ENV: "600000",
                                                  skein_agent.PENDING_HEARTBEAT_ENV: "600000"})
    assert lines == ["waits true", "request added", "asked again true", "stopped true"]


def test_the_appmaster_unregisters_when_our_appmaster_says_so_with_its_tracking_url(tmp_path):
    """skein's exit hook unregisters (the application ends, YARN starts no other attempt)
    on a success or on what skein counts as the last attempt. In our AppMaster
    (FINAL_END_ENV set) the count is left to YARN, which knows the validity interval: a
    failure in attempt 2 of 2 does not unregister, unless the AppMaster left its
    final-end file; then it does, with the final tracking URL the AppMaster left. Another
    skein application keeps skein's count and its null URL."""
    from flinkyarn.archive import FINAL_TRACKING_URL_FILE
    from flinkyarn.job_store import FINAL_END_FILE

    ours = {skein_agent.FINAL_END_ENV: "1"}
    assert appmaster(tmp_path, "exit", "2", "2", env=ours) == ["exited"]
    assert appmaster(tmp_path, "exit", "1", "2") == ["exited"]  # skein's: will retry
    assert appmaster(tmp_path, "exit", "2", "2") == ["unregistered FAILED null", "exited"]
    (tmp_path / FINAL_END_FILE).write_text("FAILED")
    (tmp_path / FINAL_TRACKING_URL_FILE).write_text(
        "http://history:8082/applications/application_1_0001/\n")
    assert appmaster(tmp_path, "exit", "1", "2", env=ours) == [
        "unregistered FAILED http://history:8082/applications/application_1_0001/", "exited"]
