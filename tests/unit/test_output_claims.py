"""One writer per output folder (flinkyarn.connectors.output_claims), on the local disk:
a claim is made in one step, refused to a second live holder with an error naming the
folder and the job, taken over by a later attempt of the same job, broken when its
holder is gone, and released only by its holder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flinkyarn.connectors import output_claims
from flinkyarn.connectors.output_claims import Holder, OutputBusyError
from flinkyarn.jobgraph import FileOutput


def output(tmp_path: Path, name: str = "out") -> FileOutput:
    return FileOutput(str(tmp_path / name), "parquet", staging=str(tmp_path / f".{name}.staging-1"))


def holder(job: str, pid: int = 0) -> Holder:
    return Holder(job, "application_1_0001", pid or os.getpid(), "node-1.example")


def test_a_claim_names_its_holder_in_a_hidden_sibling(tmp_path):
    claims = output_claims.claim_all([output(tmp_path)], holder("a1"), alive=lambda h: True)
    lock = tmp_path / ".out.flinkyarn-lock"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.flinkyarn-lock"]
    assert [p.name for p in lock.iterdir()] == \
        [f"held-by-job-a1-of-application_1_0001-pid-{os.getpid()}@node-1.example"]
    assert output_claims.holder_of(output(tmp_path)) == holder("a1")
    claims.release()
    assert list(tmp_path.iterdir()) == []
    assert output_claims.holder_of(output(tmp_path)) is None


def test_a_live_holder_keeps_its_claim_and_the_refusal_names_folder_and_job(tmp_path):
    output_claims.claim(output(tmp_path), holder("a1"), alive=lambda h: True)
    with pytest.raises(OutputBusyError) as refused:
        output_claims.claim(output(tmp_path), holder("b2"), alive=lambda h: True)
    assert str(refused.value) == (
        f"output {tmp_path}/out is being written by job a1 of application_1_0001 "
        f"(its claim: {tmp_path}/.out.flinkyarn-lock)")
    assert output_claims.holder_of(output(tmp_path)) == holder("a1")
    # Nothing of the refused attempt is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.flinkyarn-lock"]
    # The refused job cannot release it either.
    output_claims.release_all([output(tmp_path)], holder("b2"))
    assert output_claims.holder_of(output(tmp_path)) == holder("a1")


def test_a_later_attempt_of_the_job_takes_over_and_a_gone_holder_is_broken(tmp_path):
    output_claims.claim(output(tmp_path), holder("a1", pid=111), alive=lambda h: True)
    output_claims.claim(output(tmp_path), holder("a1"), alive=lambda h: True)
    assert output_claims.holder_of(output(tmp_path)) == holder("a1")
    asked = []

    def gone(h):
        asked.append(h)
        return False
    output_claims.claim(output(tmp_path), holder("b2"), alive=gone)
    assert asked == [holder("a1")]
    assert output_claims.holder_of(output(tmp_path)) == holder("b2")


def test_claiming_several_folders_is_all_or_nothing(tmp_path):
    output_claims.claim(output(tmp_path, "second"), holder("a1"), alive=lambda h: True)
    with pytest.raises(OutputBusyError, match="output .*/second is being written by job a1"):
        output_claims.claim_all([output(tmp_path, "first"), output(tmp_path, "second")],
                                holder("b2"), alive=lambda h: True)
    assert output_claims.holder_of(output(tmp_path, "first")) is None


def test_a_local_cluster_is_alive_while_its_process_runs_on_this_host():
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    host = socket.gethostname()
    running = {"mine"}

    def alive(h: Holder) -> bool:
        return output_claims.holder_alive(h, "", running.__contains__)
    assert not alive(Holder("x", "local", int(ended.stdout), host))
    assert alive(Holder("x", "local", 1, host))  # init runs
    assert alive(Holder("x", "local", int(ended.stdout), "another-host"))  # cannot tell
    # This process's jobs: alive while running.
    assert alive(Holder("mine", "local", os.getpid(), host))
    assert not alive(Holder("ended", "local", os.getpid(), host))
    # This application's (any attempt): alive while running here.
    assert not output_claims.holder_alive(Holder("ended", "application_1_0001", 7, "h"),
                                          "application_1_0001", running.__contains__)
