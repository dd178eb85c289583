"""flinkyarn as a user installs it on an edge node: the wheel, `pip install`ed into a new
virtual environment outside this checkout (its dependencies from the package index, no
extra), run from a folder outside the checkout with nothing of it on the path, in an
environment that names the cluster's client configuration (HADOOP_CONF_DIR) and the
Hadoop client and JDK skein needs (PATH, JAVA_HOME), and nothing else of ours. A
wordcount per job and in a session on the test cluster, with exact counts.

The first test needs no cluster: the install, the CLI, and the same wordcount on the
local target."""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import local_hadoop
from tests.conftest import SESSION_MARK
from yarn_client import yarn_cluster

REPO = Path(__file__).resolve().parents[2]
# What a wheel is built from (setup.cfg: metadata, packages, package data).
SOURCES = ("setup.cfg", "pyproject.toml", "README.md",
           "flinkyarn", "yarn_client", "yarn_am", "taskexecutor")
TAG = f"flinkyarn-test-{uuid.uuid4().hex[:8]}"
# On the cluster's HDFS: the input, the outputs and this user's staging folder (the
# environment a new venv ships is a gigabyte: removed with the rest).
FOLDER = f"/tmp/flinkyarn-tests/edge-{uuid.uuid4().hex}"
HDFS = f"{local_hadoop.DEFAULT_FS}{FOLDER}"
# The user's own file ($FLINKYARN_HOME/flinkyarn.yaml).
SETTINGS = f"""\
heartbeat.interval: 1 s
heartbeat.timeout: 10 s
yarn.staging-directory: {FOLDER}/staging
# No class-data archive for the Spark JVMs: a new environment's is made by a JVM in the
# background the first time, which would outlive the test.
taskmanager.spark.cds.dir: ""
"""

# The first test builds the wheel and installs it with its dependencies (pip's cache
# makes that a minute or two; an empty cache downloads pyspark and pyarrow).
pytestmark = pytest.mark.timeout(1800)


@dataclass(frozen=True)
class Edge:
    venv: Path
    home: Path    # FLINKYARN_HOME: the user's applications, tickets and flinkyarn.yaml
    work: Path    # the user's working folder: wordcount.py and its corpus

    def environment(self, **more: str) -> dict[str, str]:
        """A login's basics and the venv's bin first on PATH; no PYTHONPATH, nothing of
        the checkout. SESSION_MARK: what this session's leftover check looks for."""
        kept = {name: os.environ[name] for name in
                ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", SESSION_MARK)
                if name in os.environ}
        return {**kept, "PATH": f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                "FLINKYARN_HOME": str(self.home), **more}

    def flinkyarn(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "flinkyarn"), *args], cwd=self.work,
                              env=env, capture_output=True, text=True, timeout=900)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def edge(tmp_path_factory) -> Edge:
    root = tmp_path_factory.mktemp("edge-install")
    source, wheels = root / "source", root / "wheels"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    pip_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
         str(source)], env=pip_env)
    [wheel] = wheels.glob("flinkyarn-*.whl")
    shutil.rmtree(source)  # nothing left to lean on but the wheel

    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], env=pip_env)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], env=pip_env,
        cwd=root)
    home, work = root / "flinkyarn-home", root / "work"
    home.mkdir()
    (home / "flinkyarn.yaml").write_text(SETTINGS)
    work.mkdir()
    shutil.copy2(REPO / "examples" / "wordcount.py", work / "wordcount.py")
    (work / "corpus.txt").write_text(corpus())
    yield Edge(venv, home, work)
    shutil.rmtree(root)  # the venv: a gigabyte


def corpus() -> str:
    """Six words, each as often as no other, in mixed case with punctuation."""
    words = [word for rank, word in enumerate(("alpha", "Bravo", "charlie", "delta", "echo",
                                               "foxtrot")) for _ in range(3 * (6 - rank))]
    random.Random(7).shuffle(words)
    return "".join(" ".join(words[i:i + 5]) + ".\n" for i in range(0, len(words), 5))


def top_words(text: str) -> str:
    """What wordcount.py --top prints for every word of `text`."""
    counts = collections.Counter(re.findall(r"[a-z0-9]+", text.lower()))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join([f"top {len(ranked)} words:",
                      *(f"{count:>10}  {word}" for word, count in ranked)]) + "\n"


def test_the_wheel_installs_without_kerberos_and_runs_a_job_locally(edge, tmp_path):
    env = edge.environment()
    probe = run([str(edge.venv / "bin" / "python"), "-c",
                 "import importlib.util, sys, flinkyarn\n"
                 "print(flinkyarn.__file__)\n"
                 "print(*sys.path, sep='\\n')\n"
                 "print([m for m in ('gssapi', 'requests_gssapi') if importlib.util.find_spec(m)])"],
                env=env, cwd=edge.work)
    where, *path, kerberos_modules = probe.stdout.splitlines()
    assert where.startswith(str(edge.venv)), where
    assert not any(p.startswith(str(REPO)) for p in path), path
    assert kerberos_modules == "[]", "the base install has no Kerberos extra"

    usage = edge.flinkyarn("--help", env=env)
    assert usage.returncode == 0 and "session" in usage.stdout, usage.stderr

    # The user's file is read: one with a mistake is named.
    mistaken = tmp_path / "home"
    mistaken.mkdir()
    (mistaken / "flinkyarn.yaml").write_text("heartbeat.intervall: 1 s\n")
    refused = edge.flinkyarn("run", "-t", "local", "wordcount.py", "--input", "corpus.txt",
                             "--output", "nowhere", env={**env, "FLINKYARN_HOME": str(mistaken)})
    assert refused.returncode == 2, refused.stderr
    assert f"unknown option 'heartbeat.intervall' in {mistaken / 'flinkyarn.yaml'}" in refused.stderr

    local = edge.flinkyarn("run", "-t", "local", "wordcount.py", "--input", "corpus.txt",
                           "--output", "counts-local", "--top", "6", env=env)
    assert local.returncode == 0, local.stderr[-4000:]
    assert top_words(corpus()) in local.stdout, local.stdout


@pytest.fixture(scope="module")
def cluster_env(edge, hadoop) -> dict[str, str]:
    """What `eval "$(integration/cluster env)"` gives a user of the test cluster (its
    HADOOP_CONF_DIR, JAVA_HOME, the Hadoop client on PATH), the corpus on its HDFS; no
    application of ours left running after, the HDFS folder removed."""
    exports = local_hadoop.env_exports(hadoop)
    env = edge.environment(**{k: v for k, v in exports.items() if k != "PATH"})
    env["PATH"] = f"{edge.venv / 'bin'}:{hadoop.bin}:/usr/local/bin:/usr/bin:/bin"
    run(["hdfs", "dfs", "-mkdir", "-p", f"{FOLDER}/in"])
    run(["hdfs", "dfs", "-put", str(edge.work / "corpus.txt"), f"{FOLDER}/in/"])
    yield env
    leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
    for app in leftovers:
        yarn_cluster.kill(app["id"])
    run(["hdfs", "dfs", "-rm", "-r", "-f", "-skipTrash", FOLDER])
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def test_a_per_job_wordcount_from_the_edge_node(edge, cluster_env):
    result = edge.flinkyarn("run", "-t", "yarn-per-job", "--tags", TAG,
                            "--name", "edge install: wordcount", "wordcount.py",
                            "--input", f"{HDFS}/in", "--output", f"{HDFS}/per-job", "--top", "6",
                            env=cluster_env)

    assert result.returncode == 0, result.stderr[-4000:]
    assert top_words(corpus()) in result.stdout, result.stdout
    [app] = yarn_cluster.flinkyarn_applications(states=("FINISHED",), tag=TAG)
    assert (app["name"], app["finalStatus"]) == ("edge install: wordcount", "SUCCEEDED")


def test_a_session_from_the_edge_node(edge, cluster_env):
    started = edge.flinkyarn("session", "start", "--tags", TAG, env=cluster_env)
    assert started.returncode == 0, started.stderr[-4000:]
    app_id = started.stdout.strip().splitlines()[-1]
    try:
        result = edge.flinkyarn("run", "-t", "yarn-session", "--application-id", app_id,
                                "wordcount.py", "--input", f"{HDFS}/in",
                                "--output", f"{HDFS}/session", "--top", "6", env=cluster_env)
        assert result.returncode == 0, result.stderr[-4000:]
        assert top_words(corpus()) in result.stdout, result.stdout
    finally:
        stopped = edge.flinkyarn("session", "stop", app_id, env=cluster_env)
    assert stopped.returncode == 0, stopped.stderr[-4000:]
    assert f"{app_id} FINISHED/SUCCEEDED" in stopped.stdout, stopped.stdout
