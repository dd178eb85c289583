"""Issue 42 on the two-node Hadoop: a `viewfs://` mount table over the nameservice, as
federated clusters have them (integration/local_hadoop.py: VIEWFS, VIEWFS_LINKS). A
per-job word count reads its input and writes its output by viewfs:// URLs; the files
are where the mount table leads, on the nameservice, as Hadoop's own client sees them."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import local_hadoop
from tests import chaos
from tests.yarn.test_on_yarn import FAST, TAG, flinkyarn

pytestmark = pytest.mark.usefixtures("hadoop")


def hdfs_dfs(*args: str) -> str:
    return subprocess.run(["hdfs", "dfs", *args], check=True, capture_output=True,
                          text=True).stdout


def test_a_per_job_wordcount_reads_and_writes_through_a_viewfs_mount(tmp_path):
    name = uuid.uuid4().hex
    [(mount, target)] = local_hadoop.VIEWFS_LINKS.items()
    on_nameservice = f"{local_hadoop.DEFAULT_FS}{target}/{name}"
    viewed = f"{local_hadoop.VIEWFS}{mount}/{name}"
    text = "a b b\nc c c\n" * 100
    (tmp_path / "part-0.txt").write_text(text)
    hdfs_dfs("-mkdir", "-p", f"{on_nameservice}/in")
    hdfs_dfs("-put", str(tmp_path / "part-0.txt"), f"{on_nameservice}/in/")
    try:
        result = flinkyarn("run", "-t", "yarn-per-job", *FAST, "--tags", f"{TAG}-viewfs",
                           "examples/wordcount.py", "--input", f"{viewed}/in",
                           "--output", f"{viewed}/counts", "--top", "3")
        assert result.returncode == 0, result.stderr[-4000:]
        assert "300  c\n" in result.stdout and "200  b\n" in result.stdout, result.stdout
        # Written where the mount table leads (Hadoop's client lists it there).
        listed = hdfs_dfs("-ls", "-C", f"{on_nameservice}/counts").split()
        assert any(p.endswith(".parquet") for p in listed), listed
        assert chaos.counts_of(f"{on_nameservice}/counts") == {"a": 100, "b": 200, "c": 300}
    finally:
        hdfs_dfs("-rm", "-r", "-f", "-skipTrash", on_nameservice)

