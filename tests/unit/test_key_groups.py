"""Key groups and rescaling (flinkyarn/key_groups.py, checkpoints.restores_from and
redistribute): every key group has exactly one owner at every parallelism, the hash
exchange routes a key to its group's owner, and a savepoint's state is shared out at
another parallelism so that each new subtask gets exactly the rows it owns."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

from flinkyarn import checkpoints, key_groups
from flinkyarn.checkpoints import CheckpointMetadata, SubtaskState, TaskStateSnapshot
from flinkyarn.key_groups import (default_max_parallelism, key_group_range, operator_indices,
                                  resolve_max_parallelism)
from taskexecutor.network.partitioner import HashPartitioner


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 32768])
def test_each_key_group_has_one_owner_whose_range_holds_it(max_parallelism):
    for parallelism in sorted({1, 2, 3, 5, max_parallelism // 3 or 1, max_parallelism}):
        owned = [g for i in range(parallelism)
                 for g in key_group_range(max_parallelism, parallelism, i)]
        assert owned == list(range(max_parallelism)), parallelism
        groups = np.arange(max_parallelism, dtype=np.uint64)
        owners = operator_indices(groups, max_parallelism, parallelism)
        for group, owner in zip(groups.tolist(), owners.tolist()):
            assert group in key_group_range(max_parallelism, parallelism, owner)


def test_flinks_default_max_parallelism():
    assert [default_max_parallelism(p) for p in (1, 85, 86, 100, 1000, 30000)] == \
        [128, 128, 256, 256, 2048, 32768]


def test_the_number_of_key_groups_is_kept_from_a_savepoint_and_bounds_the_parallelism():
    assert resolve_max_parallelism(-1, [2, 3]) == 128
    assert resolve_max_parallelism(-1, [200], saved=256) == 256   # the default would be 512
    assert resolve_max_parallelism(-1, [3], saved=7) == 7
    assert resolve_max_parallelism(64, [3], saved=64) == 64
    with pytest.raises(ValueError, match="cut into 128 key groups .* this job sets 64"):
        resolve_max_parallelism(64, [3], saved=128)
    with pytest.raises(ValueError, match="parallelism 9, above the savepoint's maximum parallelism 8"):
        resolve_max_parallelism(-1, [9], saved=8)
    with pytest.raises(ValueError, match="parallelism 9, above pipeline.max-parallelism 4"):
        resolve_max_parallelism(4, [9])


def test_the_hash_exchange_sends_a_key_to_the_owner_of_its_key_group():
    batch = pa.record_batch({"k": [f"key{i}" for i in range(500)], "n": list(range(500))})
    for parallelism in (1, 2, 3, 7):
        for target, part in HashPartitioner(parallelism, ("k",), 128).route(batch):
            for group in key_groups.key_groups(part, ["k"], 128).tolist():
                assert group in key_group_range(128, parallelism, target)


# --- a savepoint at parallelism 2 shared out at 3 and 1 ------------------------------------

KEYS = [f"word{i}" for i in range(300)]


def savepoint(tmp_path, parallelism: int = 2) -> CheckpointMetadata:
    """Operator "agg" (keyed partials, key column k0), "src" (union: files read) and
    "sink" (by subtask), each subtask holding what a real run at `parallelism` would."""
    table = pa.table({"k0": KEYS, "p0": list(range(len(KEYS)))})
    owners = operator_indices(key_groups.hash_rows(table.to_batches()[0], ["k0"]), 128, parallelism)
    job = str(tmp_path / "job")
    tasks = []
    for index in range(parallelism):
        state = {
            "agg": {"partials": table.filter(pa.array(owners == index))},
            "src": {"files": pa.table({"file": [f"f{index}"]})},
            "sink": {"position": pa.table({"subtask": pa.array([index], pa.int32()),
                                           "next_part": pa.array([index + 10], pa.int64())})}}
        files = {op: {name: checkpoints.write_state(job, 1, op, index, "a" * 8, name, t)[0]
                      for name, t in named.items()} for op, named in state.items()}
        shapes = {"agg": {"partials": key_groups.keyed("k0")},
                  "src": {"files": key_groups.union()},
                  "sink": {"position": key_groups.by_subtask()}}
        tasks.append(SubtaskState("v", index, TaskStateSnapshot(files, 1, shapes), parallelism))
    return CheckpointMetadata("job", 1, 0, tasks, 128)


@pytest.mark.parametrize("parallelism", [3, 1])
def test_state_is_shared_out_at_another_parallelism_each_row_to_its_owner(tmp_path, parallelism):
    restores = checkpoints.restores_from(savepoint(tmp_path), [("v", parallelism,
                                                                ["agg", "src", "sink"])])
    assert sorted(restores) == [("v", i) for i in range(parallelism)]
    seen: collections.Counter[str] = collections.Counter()
    for (_, index), restore in restores.items():
        assert restore.snapshot.operators == {}
        shares = {op: checkpoints.redistribute(state, 128, parallelism, index)
                  for op, state in restore.rescaled.items()}
        keys = shares["agg"]["partials"].column("k0").to_pylist()
        seen.update(keys)
        owners = operator_indices(key_groups.hash_rows(
            pa.record_batch({"k0": keys}), ["k0"]), 128, parallelism)
        assert set(owners.tolist()) <= {index}
        assert sorted(shares["src"]["files"].column("file").to_pylist()) == ["f0", "f1"]
        assert shares["sink"]["position"].column("subtask").to_pylist() == \
            [s for s in (0, 1) if s % parallelism == index]
    assert seen == collections.Counter(KEYS)  # every key once


def test_the_same_parallelism_restores_each_subtask_its_own_files(tmp_path):
    metadata = savepoint(tmp_path)
    restores = checkpoints.restores_from(metadata, [("v", 2, ["agg", "src", "sink"])])
    for index in range(2):
        restore = restores[("v", index)]
        assert restore.rescaled == {}
        assert restore.snapshot.operators == metadata.tasks[index].snapshot.operators


def test_state_that_cannot_be_shared_out_pins_its_operators_parallelism(tmp_path):
    job = str(tmp_path / "job")
    path, _ = checkpoints.write_state(job, 1, "gen", 0, "a" * 8, "position",
                                      pa.table({"emitted": [3]}))
    metadata = CheckpointMetadata("job", 1, 0, [SubtaskState(
        "v", 0, TaskStateSnapshot({"gen": {"position": path}}, 1), 1)])
    with pytest.raises(ValueError, match="operator gen ran with parallelism 1 in the savepoint "
                                         "and has 2 now, but its state position cannot be "
                                         "shared out"):
        checkpoints.restores_from(metadata, [("v", 2, ["gen"])])
    assert checkpoints.restores_from(metadata, [("v", 1, ["gen"])])[("v", 0)].snapshot.operators
