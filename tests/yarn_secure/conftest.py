"""The secure tier: the two-node test cluster in Hadoop's secure mode (Kerberos, its own
KDC: `integration/cluster up --nodes 2 --secure`). The cluster's ports are fixed, so the
tier stops a plain cluster first and brings it back afterwards if it ran before (but for
one integration/run-tests started); it runs after tests/yarn."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import local_hadoop
from flinkyarn import hadoop, hdfs
from flinkyarn.connectors.filesystems import read_parquet
from yarn_client import yarn_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import make_corpus  # noqa: E402


def pytest_collection_modifyitems(items):
    secure = [item for item in items if "/tests/yarn_secure/" in str(item.fspath)]
    for item in secure:
        item.add_marker(pytest.mark.yarn)
    # test_token_renewal's sessions start with the tier's first test: their tokens age
    # past their maximum lifetime while the tier's other tests run, not in a wait.
    if any("aging_sessions" in getattr(item, "fixturenames", ()) for item in secure) \
            and "aging_sessions" not in secure[0].fixturenames:  # type: ignore[attr-defined]
        secure[0].fixturenames.insert(0, "aging_sessions")  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def secure_hadoop() -> local_hadoop.Layout:
    layout = local_hadoop.Layout.default()
    healthy, _ = local_hadoop.status(layout)
    was = (local_hadoop.recorded_node_count(layout), local_hadoop.recorded_secure(layout))
    if not (healthy and was[1]):
        local_hadoop.down(layout, say=lambda line: None)
        local_hadoop.up(layout, say=print, nodes=2, secure=True)
    saved = dict(os.environ)
    local_hadoop.apply_env(layout)
    yield layout
    os.environ.clear()
    os.environ.update(saved)
    # A plain cluster that ran before runs again, unless integration/run-tests started
    # it (and stops it right after the tests).
    if healthy and not was[1] and not os.environ.get("FLINKYARN_TEST_CLUSTER_OWNED"):
        local_hadoop.down(layout, say=lambda line: None)
        local_hadoop.up(layout, say=print, nodes=was[0], secure=False)


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
    base, expected = write_corpus(tmp_path)
    yield base, expected
    hdfs.filesystem().rm(hdfs.path_of(base), recursive=True)


def write_corpus(folder: Path) -> tuple[str, collections.Counter]:
    """A corpus on HDFS: (its folder's URL, the exact word counts)."""
    local = folder / "corpus.txt"
    make_corpus.write_corpus(local, 0.05, seed=5)
    base = f"{hadoop.default_fs().rstrip('/')}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    filesystem = hdfs.filesystem()
    filesystem.makedirs(hdfs.path_of(f"{base}/in"), exist_ok=True)
    with filesystem.open(hdfs.path_of(f"{base}/in/corpus.txt"), "wb") as out:
        out.write(local.read_bytes())
    return base, collections.Counter(re.findall(r"[a-z0-9]+", local.read_text().lower()))


def read_counts(url: str) -> dict[str, int]:
    table = read_parquet(url)
    return dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist()))


# Idle TaskExecutors stay: test_token_renewal's second job finds the first's, which got
# its tokens pushed.
KEEP = ["-D", "resourcemanager.taskmanager-timeout=10 min", "-s", "1"]
RENEWAL_TAG = f"{TAG}-renewal"


@dataclass
class AgingSessions:
    """test_token_renewal's two sessions, one with a keytab and one without, started (the
    first with one job run) when the tier starts."""

    renewing_start: subprocess.CompletedProcess
    plain_start: subprocess.CompletedProcess
    started: float        # before the keytab's session was submitted
    plain_started: float  # before the other was
    first: subprocess.CompletedProcess | None  # the keytab session's first job
    with_keytab: Path     # the keytab session's client cache (stays empty)
    ticket: Path          # kinit's, for the other
    identity: list[str]   # the keytab's -D options
    base: str             # the corpus on HDFS
    expected: collections.Counter


def session_id(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def aging_sessions(secure_hadoop, tmp_path_factory):
    """Started with the tier's first test (pytest_collection_modifyitems): the tokens of
    their submits age past their maximum lifetime while the other tests run."""
    folder = tmp_path_factory.mktemp("aging-sessions")
    principal, keytab = os.environ["FLINKYARN_TEST_PRINCIPAL"], os.environ["FLINKYARN_TEST_KEYTAB"]
    with_keytab = folder / "keytab-home" / "krb5cc"  # stays empty: the keytab logs in
    with_keytab.parent.mkdir()
    ticket = folder / "ticket-home" / "krb5cc"
    ticket.parent.mkdir()
    kinit(ticket)
    identity = ["-D", f"security.kerberos.login.keytab={keytab}",
                "-D", f"security.kerberos.login.principal={principal}"]
    saved = os.environ.get("KRB5CCNAME")
    os.environ["KRB5CCNAME"] = f"FILE:{ticket}"
    try:
        base, expected = write_corpus(folder)
    finally:
        if saved is None:
            os.environ.pop("KRB5CCNAME", None)
        else:
            os.environ["KRB5CCNAME"] = saved
    started = time.time()
    renewing_start = flinkyarn(with_keytab, "session", "start", *FAST, *KEEP, *identity,
                               "--tags", RENEWAL_TAG)
    plain_started = time.time()  # its tokens are younger: the first start may take a minute
    plain_start = flinkyarn(ticket, "session", "start", *FAST, "--tags", RENEWAL_TAG)
    first = None
    if renewing_start.returncode == 0:
        first = flinkyarn(with_keytab, "run", "-t", "yarn-session", "--application-id",
                          session_id(renewing_start), *identity, "examples/wordcount.py",
                          "--input", f"{base}/in", "--output", f"{base}/out1",
                          "--parallelism", "1")
    yield AgingSessions(renewing_start, plain_start, started, plain_started, first, with_keytab,
                        ticket, identity, base, expected)
    # What the test did not stop (it failed before), and the corpus.
    for app in yarn_cluster.flinkyarn_applications(tag=RENEWAL_TAG):
        yarn_cluster.kill(app["id"])
    os.environ["KRB5CCNAME"] = f"FILE:{ticket}"
    try:
        hdfs.filesystem().rm(hdfs.path_of(base), recursive=True)
    finally:
        if saved is None:
            os.environ.pop("KRB5CCNAME", None)
        else:
            os.environ["KRB5CCNAME"] = saved
