"""The examples, run as a user runs them, with their exact results checked against a
computation in plain Python."""

from __future__ import annotations

import collections
import csv
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.local.conftest import processes_mentioning
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
FAST = ["-D", "heartbeat.interval=500 ms", "-D", "heartbeat.timeout=5 s"]
sys.path.insert(0, str(REPO / "examples"))
import make_corpus  # noqa: E402


def flinkyarn(*args, tmp_path, timeout=300):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "yarn_client", *args], capture_output=True,
                            text=True, cwd=REPO, env=env, timeout=timeout)
    assert processes_mentioning(str(tmp_path)) == []
    return result


def test_wordcount_counts_every_word_exactly(tmp_path):
    corpus = tmp_path / "corpus"
    make_corpus.write_corpus(corpus / "a.txt", 0.5, seed=1)
    make_corpus.write_corpus(corpus / "b.txt", 0.3, seed=2)
    (corpus / "c.txt").write_text("Ünïcode wörds, CAPS and snake_case x86-64 ok\n\n  tabs\tend")
    out = tmp_path / "counts"

    result = flinkyarn("run", "-t", "local", *FAST, "examples/wordcount.py", "--input", str(corpus),
                       "--output", str(out), "--top", "3", tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    text = "".join(p.read_text() for p in sorted(corpus.iterdir())).lower()
    expected = collections.Counter(re.findall(r"[a-z0-9]+", text))
    table = pq.read_table(out)
    assert table.schema.field("word").type == pa.string()
    assert table.schema.field("count").type == pa.int64()
    assert len(list(out.glob("part-*.parquet"))) == 2
    counts = table.column("count").to_pylist()
    words = table.column("word").to_pylist()
    assert len(words) == len(set(words))
    assert dict(zip(words, counts)) == expected
    top = expected.most_common(1)[0]
    assert f"{top[1]:>10}  {top[0]}" in result.stdout


def test_etl_joins_and_aggregates_exactly(tmp_path):
    rng = random.Random(3)
    countries = ["de", "fr", "jp", "br", "nz"]
    customers = [(i, f"customer {i}", rng.choice(countries)) for i in range(200)]
    orders = [(i, rng.randrange(230), round(rng.uniform(1, 500), 2)) for i in range(3000)]
    for name, header, rows in (("customers.csv", ["customer_id", "name", "country"], customers),
                               ("orders.csv", ["order_id", "customer_id", "amount"], orders)):
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f).writerows([header, *rows])
    out = tmp_path / "revenue"

    result = flinkyarn("run", "-t", "local", *FAST, "examples/etl.py", "--orders", str(tmp_path / "orders.csv"),
                       "--customers", str(tmp_path / "customers.csv"), "--output", str(out),
                       tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    country_of = {c: country for c, _, country in customers}
    expected = collections.defaultdict(lambda: [0, 0.0])
    for _, customer, amount in orders:
        if customer in country_of:  # orders of unknown customers drop out of the inner join
            expected[country_of[customer]][0] += 1
            expected[country_of[customer]][1] += amount
    table = pq.read_table(out)
    got = {r["country"]: (r["orders"], r["revenue"]) for r in table.to_pylist()}
    assert set(got) == set(expected)
    for country, (n, revenue) in expected.items():
        assert got[country][0] == n
        assert abs(got[country][1] - revenue) < 1e-6


def test_unmodified_pyspark_script_runs_as_a_job(tmp_path):
    lines = ["Alpha beta", "alpha gamma", "  Beta x", "", "ALPHA", "delta"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "first-words"

    # file:// URIs: like spark-submit, a script's bare paths mean fs.defaultFS (HDFS when
    # a Hadoop configuration is present, as in integration/run-tests).
    result = flinkyarn("run", "-t", "local", "--pyspark", *FAST, "examples/pyspark_script.py",
                       (tmp_path / "in.txt").as_uri(), out.as_uri(), tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert "FINISHED" in result.stdout
    table = pq.read_table(out)
    assert dict(zip(table.column("first_word").to_pylist(), table.column("count").to_pylist())) \
        == {"alpha": 3, "beta": 1, "delta": 1}


def test_info_prints_the_job_graph_without_running_it(tmp_path):
    result = flinkyarn("info", "examples/wordcount.py", "--input", "in", "--output", "out",
                       tmp_path=tmp_path)

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Source: text" in out and "split words" in out and "count words" in out
    assert "hash" in out and "word" in out
    assert not (REPO / "out").exists()


def test_plain_python_runs_the_pipeline_on_a_local_cluster(tmp_path):
    make_corpus.write_corpus(tmp_path / "in.txt", 0.05, seed=5)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    result = subprocess.run([sys.executable, "examples/wordcount.py", "--input",
                             str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")],
                            capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = collections.Counter(re.findall(r"[a-z0-9]+", (tmp_path / "in.txt").read_text().lower()))
    table = pq.read_table(tmp_path / "out")
    assert dict(zip(table.column("word").to_pylist(), table.column("count").to_pylist())) == expected
    assert processes_mentioning(str(tmp_path)) == []


def test_streaming_wordcount_counts_a_fed_folder_exactly_in_windows(tmp_path):
    """Files are renamed into the watched folder while the job runs (with checkpoints
    every 200 ms); the windows' counts add up to each word's total."""
    feed, out = tmp_path / "feed", tmp_path / "counts"
    feed.mkdir()
    texts = [f"Alpha beta {i}\nbeta GAMMA gamma, alpha!\n" * (i + 1) for i in range(4)]
    job = subprocess.Popen(
        [sys.executable, "-m", "yarn_client", "run", "-t", "local", *FAST,
         "-D", "execution.checkpointing.interval=200 ms", "examples/streaming_wordcount.py",
         "--input", str(feed), "--output", str(out), "--until-files", str(len(texts)),
         "--window", "0.5", "--monitor-interval", "0.1"],
        cwd=REPO, env=dict(os.environ, TMPDIR=str(tmp_path)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert job.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(job.stderr or ()), daemon=True)
    reader.start()
    try:
        # Fed once every task runs (the client's progress line says so), 1.2 s apart: the
        # reader would have to stall for 3.6 s to read them all into one 0.5 s window.
        wait_for(lambda: any(re.search(r"RUNNING: .*\[2 RUNNING\].*\[2 RUNNING\]", line)
                             for line in list(lines)), 120, "the job's tasks running")
        for number, text in enumerate(texts):
            hidden = feed / f".{number}.txt.inprogress"
            hidden.write_text(text)
            hidden.rename(feed / f"{number}.txt")
            time.sleep(1.2)
        job.wait(timeout=300)
        reader.join(10)
    finally:
        job.kill()
    assert job.returncode == 0, "".join(lines)[-3000:]
    table = pq.read_table(out)
    assert table.schema.names == ["word", "count"]
    totals: collections.Counter = collections.Counter()
    for word, count in zip(table.column("word").to_pylist(), table.column("count").to_pylist()):
        totals[word] += count
    assert totals == collections.Counter(re.findall(r"[a-z0-9]+", "".join(texts).lower()))
    # The files came over 3.6 s: their words fell into several windows.
    assert table.column("word").to_pylist().count("alpha") >= 2
    assert processes_mentioning(str(tmp_path)) == []
