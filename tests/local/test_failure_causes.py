"""Where the user's code failed, as a user sees it: a pipeline's map function raises
through a helper of the program, and the CLI, REST and the dashboard each show the
program's file and line, the error and the error it chains."""

from __future__ import annotations

import html
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from yarn_client.executors import ClusterExecutor
from yarn_client.programs import run_program

REPO = Path(__file__).resolve().parents[2]
NO_RESTART = {"restart-strategy.type": "none"}

PROGRAM = """\
import sys

import pyarrow as pa

from flinkyarn import Pipeline


def rates(subtask, parallelism):
    yield pa.record_batch([pa.array(["USD", "EUR"])], names=["currency"])


def rate_of(currency):
    raise ValueError(f"no exchange rate for {currency!r}") from KeyError(currency)


def convert(batch):
    rate_of(batch.column(0)[1].as_py())
    return batch


p = Pipeline("convert prices", parallelism=1)
p.from_generator(rates).map(convert, name="convert").write_parquet(sys.argv[1])
p.execute()
"""
RAISE_LINE = PROGRAM.splitlines().index(
    '    raise ValueError(f"no exchange rate for {currency!r}") from KeyError(currency)') + 1


@pytest.fixture
def program(tmp_path) -> Path:
    path = tmp_path / "prices.py"
    path.write_text(PROGRAM)
    return path


def assert_shows_where_it_failed(cause: str, program: Path) -> None:
    assert f'File "{program}", line {RAISE_LINE}, in rate_of' in cause, cause
    assert "ValueError: no exchange rate for 'EUR'" in cause
    assert "caused by: KeyError: 'EUR'" in cause


def test_the_cli_shows_the_programs_line_and_the_chained_error(program, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    settings = [f"{key}={value}" for key, value in NO_RESTART.items()] + [
        "heartbeat.interval=250 ms", "heartbeat.timeout=2 s"]
    result = subprocess.run(
        [sys.executable, "-m", "yarn_client", "run", "-t", "local",
         *(arg for setting in settings for arg in ("-D", setting)),
         str(program), str(tmp_path / "out")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=180)

    assert result.returncode == 1, result.stderr
    cause = result.stdout.split("  cause: ", 1)[1]
    assert_shows_where_it_failed(cause, program)
    # Under the summary line, indented, and with the source line the file has here.
    assert f'\n      File "{program}", line {RAISE_LINE}, in rate_of\n' in cause
    assert '\n        raise ValueError(f"no exchange rate for {currency!r}") from KeyError(currency)\n' in cause


def test_rest_and_dashboard_show_the_programs_line_and_the_chained_error(start_cluster, program,
                                                                         tmp_path):
    cluster = start_cluster(**NO_RESTART)
    executor = ClusterExecutor(cluster.rest)
    run_program(program, (str(tmp_path / "out"),), executor)
    [job_id] = executor.submitted

    details = cluster.rest.job(job_id)
    assert details.status == "FAILED"
    assert_shows_where_it_failed(details.failure_cause, program)

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(cluster.dashboard_url, timeout=10) as response:
        page = html.unescape(response.read().decode())
    marker = f'<details class="cause" id="cause-{job_id}">'
    assert marker in page, page
    summary, _, full = page.split(marker, 1)[1].partition("</summary>")
    assert "ValueError: no exchange rate for 'EUR'" in summary
    assert_shows_where_it_failed(full.split("</pre>", 1)[0], program)
