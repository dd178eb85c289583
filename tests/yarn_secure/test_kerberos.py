"""flinkyarn on a Kerberos-secured Hadoop (issue 11), on the two-node secure test cluster:
the client's identity from kinit's ticket cache or a keytab, the application's HDFS
delegation tokens in the AppMaster and every TaskExecutor, owner-only staging."""

from __future__ import annotations

import getpass
import os
import subprocess
import time

import pytest

import kdc
import local_hadoop
from flinkyarn import hdfs
from tests.yarn_secure.conftest import FAST, TAG, flinkyarn, kinit, read_counts
from yarn_client import yarn_cluster

def test_without_a_ticket_the_submit_fails_at_once_and_submits_nothing(user_ticket, tmp_path):
    empty = tmp_path / "krb5cc"  # no ticket in it
    result = flinkyarn(empty, "run", "-t", "yarn-per-job", "--tags", TAG,
                       "examples/wordcount.py", "--input", "hdfs:///tmp/none",
                       "--output", "hdfs:///tmp/none-out")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "error: the Hadoop cluster is secure (Kerberos)" in result.stderr
    assert "run `kinit`, or name a keytab" in result.stderr
    assert "Traceback" not in result.stderr and "at org.apache" not in result.stderr
    # A keytab that is not there is named as such.
    result = flinkyarn(empty, "run", "-t", "yarn-per-job", "--tags", TAG,
                       "-D", f"security.kerberos.login.keytab={tmp_path / 'missing.keytab'}",
                       "-D", f"security.kerberos.login.principal={os.environ['FLINKYARN_TEST_PRINCIPAL']}",
                       "examples/wordcount.py", "--input", "hdfs:///tmp/none",
                       "--output", "hdfs:///tmp/none-out")
    assert result.returncode == 1
    assert f"no such file: {tmp_path / 'missing.keytab'}" in result.stderr
    assert yarn_cluster.flinkyarn_applications(states=("NEW", "NEW_SAVING", "SUBMITTED",
                                                        "ACCEPTED", "RUNNING", "FINISHED",
                                                        "FAILED", "KILLED"), tag=TAG) == []


def test_per_job_wordcount_reads_and_writes_hdfs_with_the_applications_tokens(corpus, tmp_path):
    """With kinit's ticket cache (a keytab login: test_token_renewal's session)."""
    base, expected = corpus
    cache = tmp_path / "krb5cc"
    kinit(cache)
    result = flinkyarn(cache, "run", "-t", "yarn-per-job", *FAST, "--tags", TAG,
                       "examples/wordcount.py", "--input", f"{base}/in", "--output", f"{base}/out")
    assert result.returncode == 0, result.stderr[-4000:]
    apps = yarn_cluster.flinkyarn_applications(states=("FINISHED",), tag=TAG)
    assert apps and all(app["finalStatus"] == "SUCCEEDED" for app in apps)
    # The TaskExecutors, which have no ticket, read and wrote HDFS with the tokens YARN
    # gave their containers.
    assert read_counts(f"{base}/out") == expected
    # The staging folder, with the application's keys, is the user's alone.
    filesystem = hdfs.filesystem()
    staging = f"/user/{getpass.getuser()}/.flinkyarn"
    assert filesystem.info(staging)["permission"] == 0o700


def test_a_token_file_hadoop_wrote_is_read_and_opens_hdfs_without_a_ticket(
        user_ticket, tmp_path, monkeypatch):
    """What a container does: Hadoop's own token file (here from `hdfs fetchdt`, as YARN
    writes container_tokens), read by flinkyarn.kerberos, authenticates HDFS (hdfs-native)."""
    from flinkyarn import kerberos

    token_file = tmp_path / "tokens"
    subprocess.run(["hdfs", "fetchdt", "--renewer", getpass.getuser(), str(token_file)],
                   check=True, capture_output=True)
    [token] = kerberos.read_token_storage(token_file.read_bytes())
    assert (token.kind, token.service) == ("HDFS_DELEGATION_TOKEN",
                                           f"ha-hdfs:{local_hadoop.NAMESERVICE}")
    # Its maximum lifetime, from its identifier, is the NameNode's.
    lifetime = kdc.TOKEN_MAX_LIFETIME_MS / 1000
    assert time.time() + lifetime - 60 < token.max_date() <= time.time() + lifetime
    # What flinkyarn writes (a TaskExecutor's newer tokens, for Spark's JVM) is what
    # Hadoop writes, byte for byte.
    assert kerberos.write_token_storage([token]) == token_file.read_bytes()
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-cache'}")
    with pytest.raises(kerberos.KerberosError, match="holds no valid ticket"):
        hdfs.filesystem()
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, str(token_file))
    filesystem = hdfs.filesystem()
    assert f"/user/{getpass.getuser()}" in filesystem.ls("/user", detail=False)

