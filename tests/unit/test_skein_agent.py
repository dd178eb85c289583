"""The HDFS client settings skein's driver gets (yarn_client/skein_jar.py): the user's
hdfs-site.xml completed with what it does not set, never changed where it does."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

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


def test_skeins_driver_calls_our_helper_which_sets_the_validity_interval():
    """The rewrite of skein's Driver class (yarn_client/skein_attempts.py) on the jar skein
    ships: one instruction changes, in place, to call a method whose class we add; the
    rest of the class is untouched. (The YARN tier shows the JVM accepts both: attempts
    further apart than the interval do not end an application.)"""
    import struct
    import zipfile

    import skein.core

    from yarn_client import skein_attempts

    with zipfile.ZipFile(skein.core._SKEIN_JAR) as jar:
        original = jar.read("com/anaconda/skein/Driver.class")
        other = jar.read("com/anaconda/skein/Driver$DriverImpl.class")
    patched = skein_attempts.call_helper(original)
    entries, count, end = skein_attempts._pool(patched)
    old_entries, old_count, old_end = skein_attempts._pool(original)
    assert count == old_count + 6 and {i: entries[i] for i in old_entries} == old_entries
    method = count - 1
    assert entries[method][0] == 10  # a Methodref: of the helper's class and method
    owner, name_and_type = struct.unpack(">HH", entries[method][1])
    assert entries[struct.unpack(">H", entries[owner][1])[0]][1][2:] == skein_attempts.HELPER.encode()
    # Past the pool, the class differs in the one call alone: same length, 3 bytes.
    before, after = original[old_end:], patched[end:]
    assert len(before) == len(after)
    differing = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert len(differing) <= 3 and after[differing[0]] == 0xB8  # invokestatic
    assert after[differing[0] + 1:differing[0] + 3] == struct.pack(">H", method)

    helper = skein_attempts.helper_class()
    assert helper[:4] == b"\xca\xfe\xba\xbe"
    helper_entries, helper_count, _ = skein_attempts._pool(helper)
    assert helper_count == 31
    assert (1, b"\x00" + bytes([len(skein_attempts.PROPERTY)]) + skein_attempts.PROPERTY.encode()) \
        in helper_entries.values()
    with pytest.raises(skein_attempts.UnsupportedClass):  # another class: no such call
        skein_attempts.call_helper(other)


HELPERS_CHECK = """
import java.nio.file.*;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.client.api.impl.AMRMClientImpl;

public class Check {
    public static void main(String[] args) throws Exception {
        ClassLoader loader = new ClassLoader(Check.class.getClassLoader()) {
            protected Class<?> findClass(String name) throws ClassNotFoundException {
                try {
                    byte[] b = Files.readAllBytes(Paths.get(name.replace('.', '/') + ".class"));
                    return defineClass(name, b, 0, b.length);
                } catch (java.io.IOException e) { throw new ClassNotFoundException(name); }
            }
        };
        Class.forName("com.anaconda.skein.FlinkyarnAttempts", true, loader);
        Class<?> helper = Class.forName("com.anaconda.skein.FlinkyarnUnregister", true, loader);
        AMRMClientImpl<?> client = new AMRMClientImpl() {
            public void unregisterApplicationMaster(FinalApplicationStatus status, String message,
                                                    String url) {
                System.out.println(status + " " + message + " " + url);
            }
        };
        java.lang.reflect.Method unregister = helper.getMethods()[0];
        unregister.invoke(null, client, FinalApplicationStatus.SUCCEEDED, "with", null);
        Files.delete(Paths.get(args[0]));
        unregister.invoke(null, client, FinalApplicationStatus.FAILED, "without", null);
    }
}
"""


def test_the_helper_classes_pass_the_jvms_verifier_and_the_final_tracking_url_is_read(tmp_path):
    """Both classes we add to skein's jar, as a JDK 17 JVM loads them with every check on
    (-Xverify:all), against YARN's real client classes: the unregister helper passes on
    the URL the AppMaster left in its file, and skein's null when there is none."""
    import subprocess

    import local_hadoop
    from yarn_client import skein_attempts

    folder = tmp_path / "com" / "anaconda" / "skein"
    folder.mkdir(parents=True)
    (folder / "FlinkyarnAttempts.class").write_bytes(skein_attempts.helper_class())
    (folder / "FlinkyarnUnregister.class").write_bytes(skein_attempts.unregister_helper_class())
    (tmp_path / "Check.java").write_text(HELPERS_CHECK)
    url_file = tmp_path / skein_attempts.FINAL_TRACKING_URL_FILE
    url_file.write_text("http://history:8082/applications/application_1_0001/\n")
    lib = local_hadoop.Layout.default().lib
    result = subprocess.run(["java", "-Xverify:all", "-cp", f"{lib}/*", "Check.java", url_file.name],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "SUCCEEDED with http://history:8082/applications/application_1_0001/",
        "FAILED without null"]


HEARTBEAT_CHECK = """
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.impl.AMRMClientImpl;
import com.anaconda.skein.FlinkyarnHeartbeat;

public class Check {
    static Thread waiting() throws Exception {
        Thread thread = new Thread(() -> {
            try {
                FlinkyarnHeartbeat.sleep(600000);
                System.out.println("woken");
            } catch (Exception e) {  // not declared by the helper: javac would refuse
                System.out.println(e.getClass().getSimpleName());
            }
        });
        thread.start();
        while (FlinkyarnHeartbeat.allocator != thread) Thread.sleep(10);
        return thread;
    }

    public static void main(String[] args) throws Exception {
        // skein's heartbeats: idle min(5000, max(0, expiry / 2)), expiry 600000 by
        // default; pending min(1000, idle).
        int idle = Math.min(5000, FlinkyarnHeartbeat.max(0, 600000 / 2));
        long pending = FlinkyarnHeartbeat.min(1000, idle);
        System.out.println(idle + " " + pending);
        if (args.length == 0) return;
        AMRMClientImpl<AMRMClient.ContainerRequest> client =
            new AMRMClientImpl<AMRMClient.ContainerRequest>() {
                public void addContainerRequest(AMRMClient.ContainerRequest request) {
                    System.out.println("request added");
                }
            };
        // The allocator waits 10 min; a container request wakes it.
        Thread allocator = waiting();
        FlinkyarnHeartbeat.addContainerRequest(client, null);
        allocator.join();
        // Interrupted (skein's shutdown), the wait throws, as Thread.sleep does.
        allocator = waiting();
        allocator.interrupt();
        allocator.join();
    }
}
"""


def test_skeins_application_master_takes_its_heartbeats_and_waits_from_our_helper(tmp_path):
    """The ApplicationMaster's one Math.max and one Math.min(long) call, its allocator's
    one Thread.sleep and its service tracker's one addContainerRequest go to our helper,
    in place. The helper, loaded with every check on (-Xverify:all) against YARN's client
    classes: caps skein's idle interval at the one the AppMaster's environment names
    (yarn.heartbeat.interval) and its pending one at
    yarn.heartbeat.container-request-interval, keeping skein's without one or with a
    garbled one; a container request ends the allocator's wait at once (a test that
    hangs for 10 minutes when it does not: the subprocess's timeout fails it), and an
    interrupt ends it with InterruptedException, which is how skein stops its
    allocator."""
    import os
    import subprocess

    import local_hadoop
    from yarn_client import skein_attempts

    assert 2 <= len(changed_code(skein_attempts.call_heartbeat_helper)) <= 4  # the indices alone
    assert 1 <= len(changed_code(skein_attempts.call_sleep_helper,
                                 skein_attempts.ALLOCATOR_CLASS)) <= 2
    # invokevirtual -> invokestatic, and the index
    assert 2 <= len(changed_code(skein_attempts.call_request_helper,
                                 skein_attempts.SERVICE_TRACKER_CLASS)) <= 3
    folder = tmp_path / "com" / "anaconda" / "skein"
    folder.mkdir(parents=True)
    (folder / "FlinkyarnHeartbeat.class").write_bytes(skein_attempts.heartbeat_helper_class())
    (tmp_path / "Check.java").write_text(HEARTBEAT_CHECK)
    lib = local_hadoop.Layout.default().lib

    def run(idle: str | None, pending: str | None, *args: str) -> list[str]:
        env = {k: v for k, v in os.environ.items()
               if k not in (skein_attempts.HEARTBEAT_ENV, skein_attempts.PENDING_HEARTBEAT_ENV)}
        for key, value in ((skein_attempts.HEARTBEAT_ENV, idle),
                           (skein_attempts.PENDING_HEARTBEAT_ENV, pending)):
            if value is not None:
                env[key] = value
        result = subprocess.run(["java", "-Xverify:all", "-cp", f".:{lib}/*", "Check.java", *args],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.split("\n")[:-1]

    assert run("1000", "200") == ["1000 200"]
    assert run("250", "500") == ["250 250"]  # never above the idle interval
    assert run(None, None) == ["5000 1000"]
    assert run("soon", "later") == ["5000 1000"]
    assert run("1000", "200", "wait") == ["1000 200", "request added", "woken", "InterruptedException"]


LAST_ATTEMPT_CHECK = """
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;

public class Check {
    public static void main(String[] args) throws Exception {
        ApplicationAttemptId id = ApplicationAttemptId.newInstance(ApplicationId.newInstance(1L, 1), 1);
        System.out.println(com.anaconda.skein.FlinkyarnLastAttempt.getAttemptId(id));
    }
}
"""


def test_skeins_application_master_unregisters_when_told_and_else_leaves_the_next_attempt_to_yarn(tmp_path):
    """The ApplicationMaster's one getAttemptId call (its exit hook: unregister on success
    or at the last attempt, else let YARN retry) goes to our helper, in place; the helper,
    loaded with every check on, gives, in our AppMaster, 0 (so skein leaves the next
    attempt to YARN, which counts with the attempt-failures validity interval), in
    another skein application the attempt's number (skein's own count), and the
    largest int (so skein takes the attempt for the last and unregisters) once the
    AppMaster left its file."""
    import os
    import subprocess

    import local_hadoop

    from yarn_client import skein_attempts

    # The opcode (invokevirtual -> invokestatic) and the constant-pool index alone.
    assert 1 <= len(changed_code(skein_attempts.call_last_attempt_helper)) <= 3
    folder = tmp_path / "com" / "anaconda" / "skein"
    folder.mkdir(parents=True)
    (folder / "FlinkyarnLastAttempt.class").write_bytes(skein_attempts.last_attempt_helper_class())
    (tmp_path / "Check.java").write_text(LAST_ATTEMPT_CHECK)
    lib = local_hadoop.Layout.default().lib

    def attempt(ours: bool) -> str:
        env = {k: v for k, v in os.environ.items() if k != skein_attempts.FINAL_END_ENV}
        if ours:
            env[skein_attempts.FINAL_END_ENV] = "1"
        result = subprocess.run(["java", "-Xverify:all", "-cp", f".:{lib}/*", "Check.java"],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.strip()

    # Without the file: in our AppMaster never the last by skein's count (YARN decides);
    # in another skein application, skein's own count (attempt 1 here).
    assert attempt(ours=True) == "0"
    assert attempt(ours=False) == "1"
    (tmp_path / skein_attempts.FINAL_END_FILE).write_text("FAILED")
    assert attempt(ours=True) == attempt(ours=False) == str(2**31 - 1)


def changed_code(patch, entry: str = "com/anaconda/skein/ApplicationMaster.class") -> list[int]:
    """The offsets, after the constant pool, where `patch` changed skein's class `entry`
    (its ApplicationMaster); nothing there moved (the same length)."""
    import zipfile

    import skein.core

    from yarn_client import skein_attempts

    with zipfile.ZipFile(skein.core._SKEIN_JAR) as jar:
        original = jar.read(entry)
    patched = patch(original)
    _, _, old_end = skein_attempts._pool(original)
    _, _, end = skein_attempts._pool(patched)
    before, after = original[old_end:], patched[end:]
    assert len(before) == len(after)
    return [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
