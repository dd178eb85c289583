"""flinkyarn on a Kerberos-secured Hadoop (issue 11), on the two-node secure test cluster:
the client's identity from kinit's ticket cache or a keytab, the application's HDFS
delegation tokens in the AppMaster and every TaskExecutor, owner-only staging."""

from __future__ import annotations

import collections
import getpass
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flinkyarn import hadoop
from flinkyarn.connectors.filesystems import resolve
from yarn_client import yarn_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import make_corpus  # noqa: E402

TAG = f"flinkyarn-secure-{uuid.uuid4().hex[:8]}"
FAST = ["-D", "heartbeat.interval=1 s", "-D", "heartbeat.timeout=10 s"]


@pytest.fixture(scope="module")
def user_ticket(secure_hadoop, tmp_path_factory):
    """This test process's own ticket (to prepare inputs and read outputs), in a cache
    of its own; the CLI runs get caches of their own below."""
    cache = tmp_path_factory.mktemp("krb5") / "krb5cc"
    kinit(cache)
    saved = os.environ.get("KRB5CCNAME")
    os.environ["KRB5CCNAME"] = f"FILE:{cache}"
    yield cache
    if saved is None:
        os.environ.pop("KRB5CCNAME", None)
    else:
        os.environ["KRB5CCNAME"] = saved
    leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
    for app in leftovers:
        yarn_cluster.kill(app["id"])
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def kinit(cache: Path) -> None:
    subprocess.run(["kinit", "-kt", os.environ["FLINKYARN_TEST_KEYTAB"], "-c", f"FILE:{cache}",
                    os.environ["FLINKYARN_TEST_PRINCIPAL"]], check=True)


def flinkyarn(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KRB5CCNAME": f"FILE:{cache}", "FLINKYARN_HOME": str(cache.parent / "home")}
    return subprocess.run([sys.executable, "-m", "yarn_client", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=600)


@pytest.fixture
def corpus(user_ticket, tmp_path):
    """A corpus on HDFS: (its folder's URL, the exact word counts)."""
    local = tmp_path / "corpus.txt"
    make_corpus.write_corpus(local, 0.05, seed=5)
    base = f"{hadoop.default_fs().rstrip('/')}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    filesystem = hadoop.hdfs()
    filesystem.makedirs(hadoop.hdfs_path(f"{base}/in"), exist_ok=True)
    with filesystem.open(hadoop.hdfs_path(f"{base}/in/corpus.txt"), "wb") as out:
        out.write(local.read_bytes())
    expected = collections.Counter(re.findall(r"[a-z0-9]+", local.read_text().lower()))
    yield base, expected
    filesystem.rm(hadoop.hdfs_path(base), recursive=True)


def read_counts(url: str) -> dict[str, int]:
    filesystem, path = resolve(url)
    table = pq.read_table(path, filesystem=filesystem)
    return dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist()))


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


@pytest.mark.parametrize("login", ["kinit", "keytab"])
def test_per_job_wordcount_reads_and_writes_hdfs_with_the_applications_tokens(
        login, corpus, tmp_path):
    base, expected = corpus
    cache = tmp_path / "krb5cc"
    identity = []
    if login == "kinit":
        kinit(cache)
    else:  # the cache stays empty: the client logs in from the keytab itself
        identity = ["-D", f"security.kerberos.login.keytab={os.environ['FLINKYARN_TEST_KEYTAB']}",
                    "-D", f"security.kerberos.login.principal={os.environ['FLINKYARN_TEST_PRINCIPAL']}"]
    result = flinkyarn(cache, "run", "-t", "yarn-per-job", *FAST, *identity, "--tags", TAG,
                       "examples/wordcount.py", "--input", f"{base}/in", "--output", f"{base}/out")
    assert result.returncode == 0, result.stderr[-4000:]
    apps = yarn_cluster.flinkyarn_applications(states=("FINISHED",), tag=TAG)
    assert apps and all(app["finalStatus"] == "SUCCEEDED" for app in apps)
    # The TaskExecutors, which have no ticket, read and wrote HDFS with the tokens YARN
    # gave their containers.
    assert read_counts(f"{base}/out") == expected
    # The staging folder, with the application's keys, is the user's alone.
    filesystem = hadoop.hdfs()
    staging = f"/user/{getpass.getuser()}/.flinkyarn"
    assert filesystem.info(staging)["permission"] == "700"


def test_a_token_file_hadoop_wrote_is_read_and_opens_hdfs_without_a_ticket(
        user_ticket, tmp_path, monkeypatch):
    """What a container does: Hadoop's own token file (here from `hdfs fetchdt`, as YARN
    writes container_tokens), read by flinkyarn.kerberos, authenticates WebHDFS."""
    from flinkyarn import kerberos

    token_file = tmp_path / "tokens"
    subprocess.run(["hdfs", "fetchdt", "--renewer", getpass.getuser(), str(token_file)],
                   check=True, capture_output=True)
    [token] = kerberos.read_token_storage(token_file.read_bytes())
    assert (token.kind, token.service) == ("HDFS_DELEGATION_TOKEN", "127.0.0.1:8020")
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-cache'}")
    with pytest.raises(kerberos.KerberosError, match="holds no valid ticket"):
        hadoop.hdfs()
    monkeypatch.setenv(kerberos.TOKEN_FILE_VARIABLE, str(token_file))
    filesystem = hadoop.hdfs()
    assert f"/user/{getpass.getuser()}" in filesystem.ls("/user", detail=False)
