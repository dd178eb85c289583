"""Checkpoint files on a local filesystem (HDFS goes through the same pyarrow calls; the
YARN tier writes there)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flinkyarn import checkpoints as cp


def test_state_written_is_read_back_and_its_size_counted(tmp_path):
    job = cp.job_directory(str(tmp_path), "job1")
    table = pa.table({"key": ["a", "b"], "count": [3, 4]})
    path, size = cp.write_state(job, 7, "op1", 0, "attempt-123456789", "counts", table)
    assert path == f"{tmp_path}/job1/chk-7/op1/0-attempt--counts.arrow"
    assert size > 0 and cp.read_state(path).equals(table)


def test_metadata_is_the_mark_of_a_completed_checkpoint(tmp_path):
    job = cp.job_directory(str(tmp_path), "job1")
    snapshot = cp.TaskStateSnapshot({"op1": {"counts": "/x"}}, 10)
    metadata = cp.CheckpointMetadata("job1", 3, 1234, [cp.SubtaskState("v1", 1, snapshot)])
    with pytest.raises(ValueError, match="chk-3 is not a completed checkpoint: no readable _metadata"):
        cp.read_metadata(cp.checkpoint_directory(job, 3))
    cp.write_metadata(job, metadata)
    read = cp.read_metadata(cp.checkpoint_directory(job, 3))
    assert read == metadata
    assert read.restore_for("v1", 1) == cp.TaskRestore(3, snapshot)
    assert read.restore_for("v1", 0) is None
    assert [p.name for p in (tmp_path / "job1" / "chk-3").iterdir()] == ["_metadata"]


def test_garbled_metadata_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "chk-1"
    folder.mkdir()
    (folder / "_metadata").write_text('{"job_id": 5}')
    with pytest.raises(ValueError, match=r"chk-1/_metadata is not checkpoint metadata"):
        cp.read_metadata(str(folder))


def test_discard_removes_the_checkpoint_folder(tmp_path):
    job = cp.job_directory(str(tmp_path), "job1")
    cp.write_state(job, 1, "op", 0, "a" * 8, "s", pa.table({"x": [1]}))
    cp.discard(job, 1)
    cp.discard(job, 2)  # none: nothing happens
    assert not (tmp_path / "job1" / "chk-1").exists()


def test_the_latest_completed_checkpoint_is_the_newest_with_its_metadata(tmp_path):
    """What a new AppMaster attempt resumes a streaming job from: a checkpoint folder
    whose metadata was not written yet (one in progress) does not count."""
    job_dir = str(tmp_path / "job")
    assert cp.latest_completed(job_dir) is None
    for number in (1, 3):
        cp.write_metadata(job_dir, cp.CheckpointMetadata("job", number, 0, []))
    (tmp_path / "job" / "chk-4").mkdir()       # in progress: state, no metadata yet
    (tmp_path / "job" / "shared").mkdir()      # not a checkpoint
    assert cp.latest_completed(job_dir) == f"{job_dir}/chk-3"


def test_off_yarn_the_default_folders_are_in_the_clients_folder_not_a_scratch_one(
        tmp_path, monkeypatch):
    """A local cluster's scratch folders go when it stops: a retained checkpoint or a
    savepoint written there by default was not retained."""
    from flinkyarn.configuration import Configuration
    from yarn_am.jobmaster.job_master import JobMasterConfig

    monkeypatch.setenv("FLINKYARN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    monkeypatch.delenv("SKEIN_APPLICATION_ID", raising=False)
    config = JobMasterConfig.from_configuration(Configuration({}))
    assert (config.checkpoint.directory, config.checkpoint.savepoint_directory) == (
        str(tmp_path / "home" / "checkpoints"), str(tmp_path / "home" / "savepoints"))
    monkeypatch.setenv("SKEIN_APPLICATION_ID", "application_1_0001")
    monkeypatch.setenv("USER", "ann")
    config = JobMasterConfig.from_configuration(Configuration({}))
    assert config.checkpoint.directory == "hdfs:///user/ann/.flinkyarn/checkpoints"
