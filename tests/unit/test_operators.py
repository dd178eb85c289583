"""Record-level operators: what map, flat_map, filter and keyed aggregations emit, and
how they report a function that returns the wrong thing."""

from __future__ import annotations

from dataclasses import dataclass

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from flinkyarn.pipeline.operators import (Aggregation, FilterOperator, FlatMapOperator,
                                          KeyedAggregateOperator, MapOperator,
                                          aggregations_from_spec)


@dataclass
class FakeContext:
    subtask_index: int = 0
    parallelism: int = 1
    attempt_number: int = 0
    job_id: str = "job"
    task_name: str = "test (1/1)"
    batch_size: int = 1000
    tmp_dir: str = "/tmp"
    checkpointing: bool = False

    def is_cancelled(self) -> bool:
        return False

    def spark(self):
        raise AssertionError("no Spark in these tests")


def run(operator, *batches, batch_size: int = 1000) -> list[pa.RecordBatch]:
    """Drives an operator as the StreamTask does, on input 0."""
    operator.open(FakeContext(batch_size=batch_size))
    out: list[pa.RecordBatch] = []
    try:
        for batch in batches:
            out.extend(operator.process(batch, 0))
        out.extend(operator.end_input(0))
        out.extend(operator.finish())
    finally:
        operator.close()
    return out


def rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


WORDS = pa.record_batch({"word": ["a", "b", "a"], "n": [1, 2, 3]})


# ---- map ---------------------------------------------------------------------------------

def test_map_emits_what_the_function_returns():
    doubled = run(MapOperator(lambda b: pa.record_batch({"n": pc.multiply(b["n"], 2)})),
                  WORDS, WORDS)
    assert rows(doubled) == [{"n": 2}, {"n": 4}, {"n": 6}] * 2


def test_map_passes_a_table_on_as_its_batches():
    out = run(MapOperator(lambda b: pa.Table.from_batches([b, b])), WORDS)
    assert all(isinstance(b, pa.RecordBatch) for b in out)
    assert len(rows(out)) == 6


@pytest.mark.parametrize("returned, described", [
    (None, "None"), ({"n": [1]}, "builtins.dict"), ([WORDS], "builtins.list")])
def test_map_returning_the_wrong_type_is_a_type_error_naming_the_operator(returned, described):
    with pytest.raises(TypeError, match=f"tokenize: the function returned .*{described}.*"
                                        f"expected a pyarrow.RecordBatch"):
        run(MapOperator(lambda b: returned, name="tokenize"), WORDS)


def test_map_returning_a_dataframe_says_how_to_convert_it():
    with pytest.raises(TypeError, match="pandas.*RecordBatch.from_pandas"):
        run(MapOperator(lambda b: b.to_pandas()), WORDS)


def test_an_exception_of_the_function_propagates_unchanged():
    class Boom(Exception):
        pass

    def explode(batch):
        raise Boom("bad row")

    for operator in (MapOperator(explode), FlatMapOperator(explode), FilterOperator(explode)):
        with pytest.raises(Boom, match="^bad row$"):
            run(operator, WORDS)


# ---- flat_map ----------------------------------------------------------------------------

def test_flat_map_emits_every_batch_of_a_list_or_generator():
    def split(batch):
        for i in range(batch.num_rows):
            yield batch.slice(i, 1)

    assert rows(run(FlatMapOperator(split), WORDS)) == WORDS.to_pylist()
    assert rows(run(FlatMapOperator(lambda b: [b, b]), WORDS)) == WORDS.to_pylist() * 2
    assert run(FlatMapOperator(lambda b: []), WORDS) == []


def test_flat_map_accepts_a_single_batch():
    assert rows(run(FlatMapOperator(lambda b: b), WORDS)) == WORDS.to_pylist()


def test_flat_map_returning_none_is_a_type_error():
    with pytest.raises(TypeError, match="words: the function returned None, expected an "
                                        "iterable of pyarrow.RecordBatch"):
        run(FlatMapOperator(lambda b: None, name="words"), WORDS)


def test_flat_map_names_the_item_of_the_wrong_type():
    with pytest.raises(TypeError, match="words: item 1 of what the function returned is "
                                        "a builtins.str"):
        run(FlatMapOperator(lambda b: [b, "oops"], name="words"), WORDS)


# ---- filter ------------------------------------------------------------------------------

@pytest.mark.parametrize("make_mask", [
    lambda b: pc.equal(b["word"], "a"),                       # pa.Array
    lambda b: pa.chunked_array([pc.equal(b["word"], "a")]),   # ChunkedArray
    lambda b: np.array([True, False, True]),                          # numpy
    lambda b: pd.Series([True, False, True]),                         # pandas
    lambda b: [True, False, True],                                    # list
])
def test_filter_keeps_the_rows_where_the_mask_is_true(make_mask):
    assert rows(run(FilterOperator(make_mask), WORDS)) == [{"word": "a", "n": 1},
                                                           {"word": "a", "n": 3}]


def test_filter_treats_a_null_as_false_and_drops_empty_batches():
    assert rows(run(FilterOperator(lambda b: pa.array([None, True, None])), WORDS)) == [
        {"word": "b", "n": 2}]
    assert run(FilterOperator(lambda b: pa.array([False] * b.num_rows)), WORDS) == []


def test_filter_mask_of_the_wrong_length_is_an_error_naming_the_operator():
    with pytest.raises(ValueError, match="only_a: the mask has 2 entries for a batch of 3 rows"):
        run(FilterOperator(lambda b: pa.array([True, False]), name="only_a"), WORDS)


def test_filter_mask_that_is_not_boolean_is_a_type_error():
    with pytest.raises(TypeError, match="only_a: the function returned a mask of type int64, "
                                        "expected bool"):
        run(FilterOperator(lambda b: pa.array([1, 0, 1]), name="only_a"), WORDS)
    with pytest.raises(TypeError, match="only_a: the function returned a builtins.bool"):
        run(FilterOperator(lambda b: True, name="only_a"), WORDS)


# ---- keyed aggregations ------------------------------------------------------------------

SALES = [
    pa.record_batch({"shop": ["x", "y", "x"], "item": ["tea", "tea", "cake"],
                     "n": [1, 2, None], "price": [1.5, 2.0, 4.0]}),
    pa.record_batch({"shop": ["y", None, "x"], "item": ["cake", "tea", "tea"],
                     "n": [5, 7, 3], "price": [3.0, 1.0, None]}),
]


def aggregate(keys, spec, *batches, batch_size=1000, merge_every=None):
    operator = KeyedAggregateOperator(keys, spec, name="agg")
    if merge_every is not None:
        operator.MERGE_EVERY = merge_every
    return run(operator, *batches, batch_size=batch_size)


def test_count_per_key_in_order_of_first_appearance_with_nulls_as_a_key():
    out = aggregate(["shop"], [Aggregation(None, "count", "count")], *SALES)
    assert out[0].schema.names == ["shop", "count"]
    assert out[0].schema.field("count").type == pa.int64()
    assert rows(out) == [{"shop": "x", "count": 3}, {"shop": "y", "count": 2},
                         {"shop": None, "count": 1}]


def test_sum_min_max_mean_and_count_of_a_column_are_exact_and_skip_nulls():
    spec = aggregations_from_spec({"n": ["sum", "min", "max", "mean", "count"],
                                   "price": "mean"})
    out = aggregate(["shop"], spec, *SALES)
    assert out[0].schema.names == ["shop", "n_sum", "n_min", "n_max", "n_mean", "n_count",
                                   "price_mean"]
    assert out[0].schema.field("n_sum").type == pa.int64()
    assert out[0].schema.field("n_mean").type == pa.float64()
    assert rows(out) == [
        {"shop": "x", "n_sum": 4, "n_min": 1, "n_max": 3, "n_mean": 2.0, "n_count": 2,
         "price_mean": 2.75},
        {"shop": "y", "n_sum": 7, "n_min": 2, "n_max": 5, "n_mean": 3.5, "n_count": 2,
         "price_mean": 2.5},
        {"shop": None, "n_sum": 7, "n_min": 7, "n_max": 7, "n_mean": 7.0, "n_count": 1,
         "price_mean": 1.0},
    ]


def test_aggregates_over_only_nulls_are_null():
    batch = pa.record_batch({"k": ["a", "a"], "n": pa.array([None, None], pa.int64())})
    out = aggregate(["k"], aggregations_from_spec({"n": ["sum", "mean", "count"]}), batch)
    assert rows(out) == [{"k": "a", "n_sum": None, "n_mean": None, "n_count": 0}]


def test_several_key_columns():
    out = aggregate(["shop", "item"], [Aggregation("n", "sum", "n_sum")], *SALES)
    assert rows(out) == [
        {"shop": "x", "item": "tea", "n_sum": 4}, {"shop": "y", "item": "tea", "n_sum": 2},
        {"shop": "x", "item": "cake", "n_sum": None}, {"shop": "y", "item": "cake", "n_sum": 5},
        {"shop": None, "item": "tea", "n_sum": 7}]


def test_partial_aggregates_merge_to_the_same_result_as_one_pass():
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 20, 5000)
    values = rng.integers(-100, 100, 5000)
    batches = [pa.record_batch({"k": keys[i:i + 100], "v": values[i:i + 100]})
               for i in range(0, 5000, 100)]
    spec = aggregations_from_spec({"v": ["sum", "min", "max", "mean", "count"]})
    merged_often = rows(aggregate(["k"], spec, *batches, merge_every=2))
    frame = pd.DataFrame({"k": keys, "v": values}).groupby("k", sort=False)["v"]
    expected = frame.agg(["sum", "min", "max", "mean", "count"]).reset_index()
    assert sorted(r["k"] for r in merged_often) == sorted(expected["k"].tolist())
    by_key = {r["k"]: r for r in merged_often}
    for row in expected.itertuples():
        got = by_key[row.k]
        assert (got["v_sum"], got["v_min"], got["v_max"], got["v_count"]) == (
            row.sum, row.min, row.max, row.count)
        assert got["v_mean"] == pytest.approx(row.mean)
    assert merged_often == rows(aggregate(["k"], spec, *batches))


def test_the_result_comes_in_batches_of_at_most_batch_size_rows():
    batch = pa.record_batch({"k": list(range(10)), "v": [1] * 10})
    out = aggregate(["k"], [Aggregation(None, "count", "count")], batch, batch_size=4)
    assert [b.num_rows for b in out] == [4, 4, 2]
    assert [r["k"] for r in rows(out)] == list(range(10))


def test_nothing_is_emitted_before_the_end_nor_for_an_empty_input():
    operator = KeyedAggregateOperator(["shop"], [Aggregation(None, "count", "count")])
    operator.open(FakeContext())
    assert list(operator.process(SALES[0], 0)) == []
    assert list(operator.end_input(0)) == []
    assert rows(list(operator.finish())) != []
    assert aggregate(["shop"], [Aggregation(None, "count", "count")]) == []
    empty = SALES[0].slice(0, 0)
    assert aggregate(["shop"], [Aggregation(None, "count", "count")], empty) == []


def test_a_missing_column_is_named():
    with pytest.raises(KeyError, match="agg: the input has no column 'qty'"):
        aggregate(["shop"], [Aggregation("qty", "sum", "qty_sum")], *SALES)
    with pytest.raises(KeyError, match="agg: the input has no column 'store'"):
        aggregate(["store"], [Aggregation(None, "count", "count")], *SALES)


def test_an_aggregate_the_column_type_does_not_support_is_a_type_error():
    with pytest.raises(TypeError, match=r"agg: cannot compute sum\(item: string\)"):
        aggregate(["shop"], [Aggregation("item", "sum", "item_sum")], *SALES)


def test_aggregation_specs_are_checked_when_the_operator_is_made():
    with pytest.raises(ValueError, match="agg: unknown aggregate function 'median'"):
        KeyedAggregateOperator(["k"], aggregations_from_spec({"n": "median"}), name="agg")
    with pytest.raises(ValueError, match="output column 'count' appears twice"):
        KeyedAggregateOperator(["count"], [Aggregation(None, "count", "count")])
    with pytest.raises(ValueError, match="non-empty dict"):
        aggregations_from_spec({})


def test_operators_survive_cloudpickle_with_their_functions():
    operator = cloudpickle.loads(cloudpickle.dumps(MapOperator(lambda b: b.slice(1),
                                                               name="tail")))
    assert operator.name == "tail"
    assert rows(run(operator, WORDS)) == WORDS.to_pylist()[1:]


def test_a_running_aggregation_emits_each_batchs_keys_updated_and_nothing_at_the_end():
    """Flink's rolling aggregation on an unbounded stream: after each batch, the current
    row of every key in it (keys with nulls too), other keys untouched."""
    operator = KeyedAggregateOperator(["k"], [Aggregation(None, "count", "count"),
                                              Aggregation("n", "sum", "n_sum")], running=True)
    out = run(operator,
              pa.record_batch({"k": ["a", "b", "a"], "n": [1, 2, 3]}),
              pa.record_batch({"k": pa.array(["b", None], pa.string()), "n": [10, 5]}),
              pa.record_batch({"k": ["a"], "n": [100]}))
    assert rows(out) == [
        {"k": "a", "count": 2, "n_sum": 4}, {"k": "b", "count": 1, "n_sum": 2},
        {"k": "b", "count": 2, "n_sum": 12}, {"k": None, "count": 1, "n_sum": 5},
        {"k": "a", "count": 3, "n_sum": 104}]
