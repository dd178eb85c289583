"""Keyed process functions (flinkyarn/pipeline/keyed_process.py): value, list and map
state per key across batches, its checkpointed form (restored, and shared out by key
group), the hook at the end of the input, and errors that name the operator."""

from __future__ import annotations

import pyarrow as pa
import pytest

from flinkyarn import KeyedProcessFunction, Pipeline, key_groups
from flinkyarn.pipeline.keyed_process import KeyedProcessOperator
from tests.operator_context import FakeContext


def running(key, rows, state):
    """Per row: the key's running count (value), its values so far (list) and a count per
    value (map)."""
    count, seen, per_value = state.value("count", default=0), state.list("seen"), state.map("per")
    out = []
    for v in rows.column("v").to_pylist():
        count.update(count.value() + 1)
        seen.add(v)
        per_value[v] = per_value.get(v, 0) + 1
        out.append((count.value(), len(seen.get()), per_value[v]))
    return pa.record_batch({"k": [key[0]] * len(out), "count": [o[0] for o in out],
                            "seen": [o[1] for o in out], "same": [o[2] for o in out]})


def opened(fn, subtask=0, parallelism=1) -> KeyedProcessOperator:
    operator = KeyedProcessOperator(("k",), fn, name="running")
    operator.open(FakeContext(subtask, parallelism))
    return operator


def rows_of(results) -> list[tuple]:
    return [tuple(r.values()) for b in results for r in b.to_pylist()]


def test_state_is_per_key_and_lasts_across_batches():
    operator = opened(running)
    first = operator.process(pa.record_batch({"k": ["a", "b", "a"], "v": [1, 1, 1]}), 0)
    second = operator.process(pa.record_batch({"k": pa.array(["a"]), "v": [2]}), 0)
    assert rows_of(first) == [("a", 1, 1, 1), ("a", 2, 2, 2), ("b", 1, 1, 1)]
    assert rows_of(second) == [("a", 3, 3, 1)]


def test_checkpointed_state_restores_and_is_shared_out_by_key_group():
    operator = opened(running)
    keys = pa.array([7, 8, 9, 7], pa.int32())  # the key's type is kept (its hash too)
    operator.process(pa.record_batch({"k": keys, "v": [1, 2, 3, 4]}), 0)
    state = operator.snapshot_state(1)
    assert set(state) == {"count", "seen", "per"}
    assert state["count"].schema.field("k").type == pa.int32()
    assert operator.state_redistribution("seen") == key_groups.keyed("k")

    again = opened(running)
    again.initialize_state(state)
    assert rows_of(again.process(pa.record_batch({"k": pa.array([7], pa.int32()), "v": [4]}), 0)) \
        == [(7, 3, 3, 2)]

    # At parallelism 2, each subtask takes its key groups' rows (as redistribute does).
    table = state["count"]
    groups = key_groups.key_groups(table, ["k"], 128)
    owned = []
    for index in range(2):
        mine = key_groups.key_group_range(128, 2, index)
        share = table.filter(pa.array((groups >= mine.start) & (groups < mine.stop)))
        half = opened(running, index, 2)
        half.initialize_state({"count": share})
        owned += [k for (k,) in half._states["count"][1]]
    assert sorted(owned) == [7, 8, 9]


def test_a_function_with_hooks_emits_at_the_end_of_the_input():
    class Totals(KeyedProcessFunction):
        def open(self, context):
            self.subtask = context.subtask_index

        def process(self, key, rows, state):
            total = state.value("total", default=0)
            total.update(total.value() + sum(rows.column("v").to_pylist()))

        def finish(self, key, state):
            return pa.table({"k": [key[0]], "total": [state.value("total").value()],
                             "subtask": [self.subtask]})

    operator = opened(Totals(), subtask=1, parallelism=2)
    assert operator.process(pa.record_batch({"k": ["x", "y", "x"], "v": [1, 2, 3]}), 0) == []
    assert sorted(rows_of(operator.finish())) == [("x", 4, 1), ("y", 2, 1)]


def test_mistakes_name_the_operator_and_what_is_wrong():
    def two_kinds(key, rows, state):
        state.value("s").update(1)
        state.list("s")

    with pytest.raises(ValueError, match="running: state 's' is value state, not list state"):
        opened(two_kinds).process(pa.record_batch({"k": [1], "v": [1]}), 0)
    with pytest.raises(TypeError, match="running: the function returned a dict for key"):
        opened(lambda key, rows, state: {"a": 1}).process(pa.record_batch({"k": [1]}), 0)
    with pytest.raises(KeyError, match="running: the input has no column 'k'"):
        opened(running).process(pa.record_batch({"x": [1]}), 0)
    with pytest.raises(TypeError, match="process: expected a function"):
        Pipeline("p").from_generator(lambda i, n: ()).key_by("k").process(42, name="process")
