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
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import local_hadoop
from flinkyarn import hadoop
from flinkyarn.connectors.filesystems import resolve
from yarn_client import yarn_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import make_corpus  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/yarn_secure/" in str(item.fspath):
            item.add_marker(pytest.mark.yarn)


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
