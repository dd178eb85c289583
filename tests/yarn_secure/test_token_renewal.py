"""Sessions that outlive their delegation tokens (issue 11), on the secure test cluster,
whose HDFS and ResourceManager tokens live 1 minute unrenewed and 4 minutes at most
(integration/kdc.py).

One scenario, two sessions side by side, started with the tier's first test (conftest's
aging_sessions) so that their tokens age past their maximum lifetime while the tier's
other tests run, instead of in a wait here:
- with a keytab, the session logs in from it in the AppMaster, obtains new tokens before
  the old ones expire and hands them to its TaskExecutors: a running one (it keeps its
  slot between the jobs), and one started after the tokens of the submit are dead (YARN
  localizes its files with the ResourceManager's new tokens: proxy-user privileges). Both
  jobs read and write HDFS, counted exactly. Then a PySpark script's driver submits its
  Spark application to YARN with the new ResourceManager token and hands it the new HDFS
  token, which YARN can renew only because it names YARN's ResourceManager (`rm` on the
  test cluster) as its renewer. The keytab reaches the AppMaster alone, from
  an owner-only staging file that goes with the session.
- without one, the session says at start until when it can live, and says afterwards
  that its tokens ran out.
"""

from __future__ import annotations

import collections
import getpass
import json
import os
import re
import time

import kdc
from flinkyarn import hdfs
from tests.yarn.test_pyspark_on_yarn import EXAMPLES, printed
from tests.yarn_secure.conftest import AgingSessions, flinkyarn, read_counts, session_id
from yarn_client import yarn_cluster

KEYTAB_NAME = yarn_cluster.KEYTAB


def container_logs(layout, app_id: str) -> dict[str, str]:
    """The logs of each container of `app_id`, from the nodes' log folders (a secure
    cluster does not aggregate them), by container id."""
    found: dict[str, str] = {}
    for folder in layout.work.glob(f"nodes/*/container-logs/{app_id}/container_*"):
        found[folder.name] = "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))
    return found


def test_a_session_with_a_keytab_outlives_its_tokens_and_one_without_says_when_it_cannot(
        secure_hadoop, aging_sessions: AgingSessions, user_ticket):
    """The sessions started with the tier (conftest's aging_sessions): the keytab's has
    run its first job since; the tier's other tests ran while their tokens aged."""
    aging = aging_sessions
    base, expected = aging.base, aging.expected
    with_keytab, ticket, identity = aging.with_keytab, aging.ticket, aging.identity
    started, plain_started = aging.started, aging.plain_started
    renewing = session_id(aging.renewing_start)
    plain_start = aging.plain_start
    plain = session_id(plain_start)
    keytab = os.environ["FLINKYARN_TEST_KEYTAB"]
    try:
        # Without a keytab: told at start, with the tokens' end.
        assert "warning: no keytab: this application's delegation tokens cannot be renewed past" \
            in plain_start.stderr, plain_start.stderr[-3000:]

        # The keytab went to the staging folder owner-only, next to the cluster's keys.
        filesystem = hdfs.filesystem()
        index = f"/user/{getpass.getuser()}/.flinkyarn/applications/{renewing}.json"
        staged = f"{json.loads(filesystem.cat(index))['credentials']}/{KEYTAB_NAME}"
        assert filesystem.info(staged)["permission"] == 0o600
        assert filesystem.info(staged.rsplit("/", 1)[0])["permission"] == 0o700

        first = aging.first
        assert first is not None and first.returncode == 0, first and first.stderr[-4000:]
        assert read_counts(f"{base}/out1") == expected

        # Past the maximum lifetime of every token the submit obtained.
        lifetime = kdc.TOKEN_MAX_LIFETIME_MS / 1000
        time.sleep(max(0.0, started + lifetime + 10 - time.time()))

        second = flinkyarn(with_keytab, "run", "-t", "yarn-session", "--application-id", renewing, *identity,
                           "examples/wordcount.py", "--input", f"{base}/in",
                           "--output", f"{base}/out2", "--parallelism", "2")
        assert second.returncode == 0, second.stderr[-4000:]
        assert read_counts(f"{base}/out2") == expected

        # A PySpark script: its driver starts with the TaskExecutor's newest tokens (its
        # token file); Spark's YARN client submits with the ResourceManager token the
        # AppMaster obtained after the submit's had died, and reads HDFS.
        script = flinkyarn(with_keytab, "run", "-t", "yarn-session", "--application-id",
                           renewing, *identity, "--pyspark", str(EXAMPLES / "wordcount.py"),
                           f"{base}/in/corpus.txt")
        assert script.returncode == 0, script.stderr[-4000:]
        text = filesystem.cat(hdfs.path_of(f"{base}/in/corpus.txt")).decode()
        words = collections.Counter(w for line in text.splitlines() for w in line.split(" "))
        assert sorted(printed(script.stdout)) == sorted(f"{w}: {n}" for w, n in words.items())
        assert re.search(r"Spark application application_\d+_\d+", script.stderr)

        # Without a keytab: told afterwards too, where the user looks (and on the dashboard).
        time.sleep(max(0.0, plain_started + lifetime + 10 - time.time()))
        listed = flinkyarn(ticket, "list", plain)
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert "warning: the delegation tokens of this application expired at" in listed.stdout, \
            listed.stdout

        # The keytab reached the AppMaster alone; the client's path for it no container.
        containers = sorted(secure_hadoop.work.glob(
            f"nodes/*/local/usercache/*/appcache/{renewing}/container_*"), key=lambda p: p.name)
        assert len(containers) == 3, containers
        assert [(c / KEYTAB_NAME).exists() for c in containers] == [True, False, False]
        localized = (containers[0] / KEYTAB_NAME).resolve()  # no other local user reads it
        assert localized.stat().st_mode & 0o077 == 0, oct(localized.stat().st_mode)
        scripts = sorted(secure_hadoop.work.glob(
            f"nodes/*/container-logs/{renewing}/container_*/launch_container.sh"),
            key=lambda p: p.parent.name)
        assert len(scripts) == 3
        assert all(keytab not in script.read_text() for script in scripts)
        assert all("security.kerberos.login.keytab" not in script.read_text() for script in scripts[1:])
    finally:
        # Each as it started: the keytab's (its cache stays empty), kinit's.
        stopped = {renewing: flinkyarn(with_keytab, "session", "stop", renewing, *identity),
                   plain: flinkyarn(ticket, "session", "stop", plain)}
    assert all(result.returncode == 0 for result in stopped.values()), stopped
    # Nothing of either is left in the staging folder. The session with a keytab removed
    # its own; the one without may have (hdfs-native keeps the NameNode connection it
    # authenticated while its tokens were valid, where WebHDFS presented the dead token
    # on each call), else the client did and said so.
    assert "which the session could not" not in stopped[renewing].stderr
    filesystem = hdfs.filesystem()
    for app in (renewing, plain):
        assert not filesystem.exists(f"/user/{getpass.getuser()}/.flinkyarn/applications/{app}.json")

    logs = container_logs(secure_hadoop, renewing)
    appmaster = logs.pop(min(logs))
    # Rounds: when the submit's tokens were 3/4 through their life, then 3/4 through each new set's.
    assert "this application's delegation tokens serve until" in appmaster
    assert len(re.findall(r"delegation tokens obtained from the keytab of", appmaster)) >= 2, appmaster[-3000:]
    # The first TaskExecutor, running, got new tokens pushed; the second registered after
    # the submit's tokens were dead and got the newest with its registration.
    assert re.search(r"new delegation tokens handed to TaskExecutor taskexecutor-1-", appmaster)
    # The PySpark script's Spark application had tokens of its own: YARN cancelled them
    # when it ended, and the session's went on (its AppMaster removed its staging files).
    assert re.search(r"delegation tokens obtained for the Spark application of wordcount.py "
                     r"\(job \w+\) \(TaskExecutor taskexecutor-\S+\): "
                     r"HDFS_DELEGATION_TOKEN, RM_DELEGATION_TOKEN",
                     appmaster), appmaster[-3000:]
    assert "py4j" not in appmaster  # its JVMs come and go without a word
    registered = re.findall(r"^(\S+ \S+) .*TaskExecutor (taskexecutor-\S+) registered",
                            appmaster, re.MULTILINE)
    assert len(registered) == 2, registered
    late = time.mktime(time.strptime(registered[1][0].split(",")[0], "%Y-%m-%d %H:%M:%S"))
    assert late > started + lifetime, (registered, started)
    assert len(logs) == 2
    assert all("installed new delegation tokens: HDFS_DELEGATION_TOKEN, RM_DELEGATION_TOKEN"
               in text for text in logs.values()), logs.keys()
    # The staged keytab went with the session; skein's folders with both (skein's
    # AppMaster, with the tokens of the submit, cannot remove them).
    assert not filesystem.exists(staged)
    for app_id in (renewing, plain):
        assert not filesystem.exists(f"/user/{getpass.getuser()}/.skein/{app_id}"), app_id
