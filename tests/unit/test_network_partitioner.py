"""Partitioners: where batches and rows go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from flinkyarn.ids import JobVertexID
from flinkyarn.jobgraph import JobEdge, ShipStrategy
from flinkyarn.pipeline.task_spec import OutputSpec
from flinkyarn.rpc import codec
from flinkyarn.rpc.errors import MalformedMessage
from flinkyarn.key_groups import hash_rows
from taskexecutor.network.partitioner import (BroadcastPartitioner, HashPartitioner,
                                              make_partitioner)

REPO = Path(__file__).resolve().parents[2]


def batch(**columns) -> pa.RecordBatch:
    return pa.record_batch(columns)


def routes(partitioner, batches) -> list[tuple[int, int]]:
    """(subpartition, first value of x) of every routed batch, in order."""
    return [(sub, part.column("x")[0].as_py()) for b in batches for sub, part in partitioner.route(b)]


def test_forward_sends_everything_to_the_single_consumer():
    forward = make_partitioner("forward", 1)
    assert routes(forward, [batch(x=[i]) for i in range(3)]) == [(0, 0), (0, 1), (0, 2)]


def test_forward_fans_out_round_robin_when_one_producer_feeds_several_consumers():
    forward = make_partitioner("forward", 2)
    assert routes(forward, [batch(x=[i]) for i in range(4)]) == [(0, 0), (1, 1), (0, 2), (1, 3)]


def test_rebalance_round_robins_whole_batches_from_the_subtasks_offset():
    first = make_partitioner("rebalance", 3, subtask_index=0)
    second = make_partitioner("rebalance", 3, subtask_index=1)
    batches = [batch(x=[i, i]) for i in range(4)]
    assert [sub for sub, _ in routes(first, batches)] == [0, 1, 2, 0]
    assert [sub for sub, _ in routes(second, batches)] == [1, 2, 0, 1]
    # Whole batches: not split.
    assert all(part.num_rows == 2 for _, part in make_partitioner("rebalance", 3).route(batches[0]))


def test_broadcast_sends_every_batch_to_every_subpartition():
    b = batch(x=[1, 2, 3])
    routed = BroadcastPartitioner(3).route(b)
    assert [sub for sub, _ in routed] == [0, 1, 2]
    assert all(part is b for _, part in routed)


def test_hash_sends_equal_keys_to_one_subpartition_and_keeps_every_row():
    keys = [f"user-{i % 37}" for i in range(2000)]
    b = batch(key=keys, x=list(range(2000)))
    routed = HashPartitioner(4, ("key",)).route(b)
    assert len({sub for sub, _ in routed}) == len(routed) > 1
    seen: dict[str, int] = {}
    for sub, part in routed:
        for key in part.column("key").to_pylist():
            assert seen.setdefault(key, sub) == sub, f"{key} went to two subpartitions"
    assert sorted(x for _, part in routed for x in part.column("x").to_pylist()) == list(range(2000))


def test_hash_of_a_value_does_not_depend_on_the_rest_of_its_batch():
    """Nulls, width and dictionary encoding elsewhere in a batch change nothing."""
    plain = hash_rows(batch(k=pa.array([1, 2, 3], pa.int64())), ["k"])
    assert list(hash_rows(batch(k=pa.array([1, None, 3], pa.int64())), ["k"])[[0, 2]]) == \
        [plain[0], plain[2]]
    assert list(hash_rows(batch(k=pa.array([1, 2, 3], pa.int32())), ["k"])) == list(plain)
    words = hash_rows(batch(k=["a", "b", "a"]), ["k"])
    encoded = hash_rows(batch(k=pa.array(["a", "b", "a"]).dictionary_encode()), ["k"])
    assert list(words) == list(encoded) and words[0] == words[2] != words[1]
    assert hash_rows(batch(k=[0.0]), ["k"])[0] == hash_rows(batch(k=[-0.0]), ["k"])[0]


def test_hash_combines_several_key_columns():
    b = batch(a=[1, 1, 2, 2], b=["x", "y", "x", "x"])
    hashes = hash_rows(b, ["a", "b"])
    assert hashes[2] == hashes[3]
    assert len({hashes[0], hashes[1], hashes[2]}) == 3
    assert list(hashes) != list(hash_rows(b, ["b", "a"]))


HASH_SCRIPT = """
import json, sys
import pyarrow as pa
from flinkyarn.key_groups import hash_rows
from taskexecutor.network.partitioner import HashPartitioner
b = pa.record_batch({"key": [f"k{i}" for i in range(200)], "n": list(range(200)),
                     "x": list(range(200))})
routed = HashPartitioner(5, ("key", "n")).route(b)
print(json.dumps({"hashes": [int(h) for h in hash_rows(b, ["key", "n"])],
                  "routes": {str(s): p.column("x").to_pylist() for s, p in routed}}))
"""


def test_hash_is_the_same_in_every_process():
    """str hashes are salted per process in Python; ours must not be."""
    results = []
    for seed in ("1", "2", "random"):
        done = subprocess.run([sys.executable, "-c", HASH_SCRIPT], cwd=REPO, check=True,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        results.append(json.loads(done.stdout))
    assert results[0] == results[1] == results[2]
    b = pa.record_batch({"key": [f"k{i}" for i in range(200)], "n": list(range(200))})
    assert [int(h) for h in hash_rows(b, ["key", "n"])] == results[0]["hashes"]


def test_a_missing_key_column_names_it_and_the_batchs_columns():
    with pytest.raises(KeyError, match=r"'user'.*\['name', 'amount'\]"):
        HashPartitioner(2, ("user",)).route(batch(name=["a"], amount=[1]))


def test_empty_batches_and_empty_row_groups_are_not_emitted():
    empty = batch(x=pa.array([], pa.int64()))
    for name in ("forward", "rebalance", "broadcast"):
        assert make_partitioner(name, 3).route(empty) == []
    assert make_partitioner("hash", 3, ("x",)).route(empty) == []
    one_key = make_partitioner("hash", 8, ("x",)).route(batch(x=[7, 7, 7]))
    assert len(one_key) == 1 and one_key[0][1].num_rows == 3


def test_unknown_partitioners_and_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown partitioner 'shuffle'"):
        make_partitioner("shuffle", 2)
    with pytest.raises(ValueError, match="key column"):
        make_partitioner("hash", 2)
    with pytest.raises(ValueError, match="at least one subpartition"):
        make_partitioner("forward", 0)


def test_a_ship_strategy_is_an_enum_kept_by_the_spec_and_sent_by_its_value():
    assert OutputSpec("b", "hash", ("k",)).partitioner is ShipStrategy.HASH
    assert OutputSpec("b", ShipStrategy.REBALANCE) == OutputSpec("b", "rebalance")
    with pytest.raises(ValueError, match="unknown partitioner 'shuffle'"):
        OutputSpec("b", "shuffle")
    assert isinstance(make_partitioner(ShipStrategy.BROADCAST, 2), BroadcastPartitioner)

    edge = JobEdge(JobVertexID("a"), JobVertexID("b"), partitioner=ShipStrategy.BROADCAST)
    wire = codec.encode(edge)
    assert b"broadcast" in wire and codec.decode(wire, JobEdge) == edge
    with pytest.raises(MalformedMessage, match="partitioner"):
        codec.decode(wire.replace(b"broadcast", b"broadcasx"), JobEdge)
