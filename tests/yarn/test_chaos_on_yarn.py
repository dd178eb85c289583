"""Issue 41 on the two-node Hadoop: any process of ours may die, and the job still
finishes, exact, with nothing of its application left running on either node.

One parametrized scenario (tests/chaos.py), for each kind of process and two per-job
jobs: the chaos word count (batch), and a checkpointed stream whose rows go to an
exactly-once sink and through a Spark stage. Once the Spark stage runs (Spark's Python
workers exist; for the stream, once a checkpoint committed records), one process of the
kind is SIGKILLed; the job restarts (the stream from its latest checkpoint), or the
AppMaster comes back as YARN's next attempt; the result is exact (every record once,
the sums whole); after the application ends, no process of it runs on this machine.
The random chaos runs (a process of any kind every 0-6 s for 60 s, five rounds) are in
bench/chaos.py: minutes each."""

from __future__ import annotations

import uuid

import pytest

import local_hadoop
from tests import chaos
from tests.yarn.test_on_yarn import REPO, TAG
from yarn_client import yarn_cluster

pytestmark = pytest.mark.usefixtures("hadoop")

MEGABYTES = 5  # per file, two files: the Spark stage runs for some seconds


@pytest.fixture(scope="module")
def corpus(hadoop, tmp_path_factory):
    """(the corpus's folder on HDFS, its exact word counts)."""
    folder, expected = chaos.put_corpus(REPO, tmp_path_factory.mktemp("corpus"), MEGABYTES)
    yield folder, expected
    chaos.remove(folder)


@pytest.mark.parametrize("kind", chaos.KINDS)
@pytest.mark.parametrize("job", chaos.JOBS)
def test_a_process_killed_mid_job_leaves_the_job_exact_and_nothing_running(
        corpus, job, kind, tmp_path):
    folder = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    if job == "wordcount":
        corpus_folder, expected = corpus
        client = chaos.start(REPO, tmp_path / "chaos_wordcount.py",
                             [corpus_folder, f"{folder}/counts"], f"{TAG}-chaos")
    else:  # once a checkpoint committed some records: the job goes on from one
        client = chaos.start(REPO, tmp_path / "chaos_stream.py",
                             [f"{folder}/records", f"{folder}/sums", f"{folder}/checkpoints",
                              str(chaos.STREAM_ROWS)], f"{TAG}-chaos", chaos.STREAM_PROGRAM)
    stderr: list[str] = []
    try:
        app_id = chaos.application_id(client, stderr, timeout=300)
        # Mid-job: the Spark stage runs its rows through Spark's Python workers.
        chaos.wait_for(lambda: chaos.of_kind(app_id, "spark-worker") and (
            job == "wordcount" or chaos.committed(f"{folder}/records")), 300,
            "the Spark stage's Python workers (and a committed checkpoint)")
        below = {p.pid for p in chaos.processes(app_id)}  # before the kill: then orphans
        victim = chaos.wait_for(lambda: chaos.kill_one(app_id, kind), 30, f"a {kind} to kill")
        if kind == "launch-script":
            # Its TaskExecutor does not run on outside the container YARN saw end.
            orphaned = {p.pid for p in chaos.processes(app_id) if p.pid in below
                        and p.container == victim.container}
            chaos.wait_for(lambda: not orphaned & {p.pid for p in chaos.processes(app_id)},
                           30, "the killed launch script's TaskExecutor to end")
        _, rest = client.communicate(timeout=600)
    finally:
        if client.poll() is None:
            client.kill()
    stderr.append(rest)
    said = "".join(stderr)
    assert client.returncode == 0, f"killed {kind} {victim}:\n{said[-4000:]}"
    report = yarn_cluster.application_report(app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED"), report
    if job == "wordcount":
        assert chaos.counts_of(f"{folder}/counts") == expected
    else:
        chaos.check_stream(f"{folder}/records", f"{folder}/sums")
    chaos.nothing_left(app_id)
    chaos.remove(folder)


def test_an_application_yarn_kills_mid_job_leaves_no_process_behind(corpus, tmp_path):
    """`yarn application -kill` (through YARN's REST API) in the Spark stage: YARN ends
    the containers; the Spark JVMs, daemons, workers and reapers under them end too."""
    folder = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    client = chaos.start(REPO, tmp_path / "chaos_wordcount.py", [corpus[0], f"{folder}/counts"],
                         f"{TAG}-chaos")
    stderr: list[str] = []
    try:
        app_id = chaos.application_id(client, stderr, timeout=300)
        chaos.wait_for(lambda: chaos.of_kind(app_id, "spark-worker"), 300,
                       "the Spark stage's Python workers")
        yarn_cluster.kill(app_id)
        client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode != 0
    assert yarn_cluster.application_report(app_id)["state"] == "KILLED"
    chaos.nothing_left(app_id)
    chaos.remove(folder)
