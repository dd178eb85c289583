"""The Pipeline API and the graphs it builds: StreamGraph nodes and virtual partition
nodes, JobEdges, batch mode, stable operator ids, the StreamTaskSpec of each vertex,
eager validation, execute() and `describe_job_graph`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pytest

from flinkyarn import environment
from flinkyarn.configuration import ConfigurationError
from flinkyarn.jobgraph import DistributionPattern, ResultPartitionType, ScheduleMode
from flinkyarn.pipeline.api import DataStream, KeyedStream, Pipeline
from flinkyarn.pipeline.describe import describe_job_graph
from flinkyarn.pipeline.operator import Operator, SourceOperator
from flinkyarn.pipeline.operators import (FilterOperator, FlatMapOperator,
                                          KeyedAggregateOperator, MapOperator)
from flinkyarn.pipeline.stream_graph import ChainingStrategy
from flinkyarn.pipeline.task_spec import InputSpec, OutputSpec, StreamTaskSpec
from flinkyarn.resources import UNKNOWN, ResourceProfile

REPO = Path(__file__).resolve().parents[2]


class Numbers(SourceOperator):
    name = "numbers"

    def read(self):
        yield pa.record_batch({"word": ["a", "b"], "n": [1, 2]})


class Collect(Operator):
    name = "collect"

    def process(self, batch, input_index):
        return ()


class Union(Operator):
    name = "union"


class FakeSparkStage(Operator):
    """Stands in for flinkyarn.pipeline.spark_stage.SparkStage, constructed the same way."""

    name = "spark"

    def __init__(self, fn, num_inputs: int) -> None:
        self.fn = fn
        self.num_inputs = num_inputs


class FakeConnector(Operator):
    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs


class FakeSource(FakeConnector, SourceOperator):
    pass


@pytest.fixture
def fake_spark(monkeypatch):
    module = types.ModuleType("flinkyarn.pipeline.spark_stage")
    module.SparkStage = FakeSparkStage
    monkeypatch.setitem(sys.modules, "flinkyarn.pipeline.spark_stage", module)


@pytest.fixture
def fake_connectors(monkeypatch):
    files = types.ModuleType("flinkyarn.connectors.files")
    generator = types.ModuleType("flinkyarn.connectors.generator")
    for name, base, short in [("TextSource", FakeSource, "text"),
                              ("CsvSource", FakeSource, "csv"),
                              ("ParquetSource", FakeSource, "parquet"),
                              ("ParquetSink", FakeConnector, "parquet"),
                              ("CsvSink", FakeConnector, "csv")]:
        setattr(files, name, type(name, (base,), {"name": short}))
    generator.GeneratorSource = type("GeneratorSource", (FakeSource,), {"name": "generator"})
    monkeypatch.setitem(sys.modules, "flinkyarn.connectors.files", files)
    monkeypatch.setitem(sys.modules, "flinkyarn.connectors.generator", generator)


class RecordingExecutor:
    def __init__(self) -> None:
        self.graphs = []

    def execute(self, graph):
        self.graphs.append(graph)
        return environment.JobResult(graph.job_id, "FINISHED", None, 0.0)


@pytest.fixture
def executor():
    previous = environment._executor
    recording = RecordingExecutor()
    environment.install(recording)
    yield recording
    environment.install(previous)


def split_words(batch):
    return [batch]


def wordcount_program(insert_filter: bool = False, map_name: str = "normalise",
                      map_fn=None, sink_uid: str | None = None) -> Pipeline:
    """The article's WindowWordCount shape: source, flat_map, key_by, sum, sink, plus a
    map; used in this process and in a separate one."""
    p = Pipeline("wordcount", parallelism=2, batch_mode=True)
    lines = p.add_source(Numbers())
    if insert_filter:
        lines = lines.filter(lambda b: pa.array([True] * b.num_rows))
    words = lines.flat_map(split_words).map(map_fn or (lambda b: b), name=map_name)
    words.key_by("word").sum("n", parallelism=3).sink_to(Collect(), parallelism=3,
                                                         uid=sink_uid)
    return p


def operator_ids(pipeline: Pipeline) -> dict[str, str]:
    return {op.name: op.uid for v in pipeline.job_graph().vertices for op in v.operators}


def specs(graph) -> dict[str, StreamTaskSpec]:
    return {v.name: cloudpickle.loads(v.invokable) for v in graph.vertices}


# ---- StreamGraph ---------------------------------------------------------------------------

def test_every_transformation_is_a_node_in_creation_order_and_key_by_is_virtual():
    p = Pipeline("article", parallelism=2)
    p.add_source(Numbers()).flat_map(split_words).key_by("word").sum("n").sink_to(Collect())
    graph = p.stream_graph()
    assert [(n.id, n.name) for n in graph.nodes()] == [
        (1, "Source: numbers"), (2, "flat_map"), (4, "sum(n)"), (5, "Sink: collect")]
    assert graph.is_virtual(3)
    [edge] = graph.node(4).in_edges
    assert (edge.source_id, edge.partitioner, edge.key_columns) == (2, "hash", ("word",))


def test_operators_are_the_record_level_operators_with_the_given_names():
    p = Pipeline("kinds")
    s = p.add_source(Numbers()).map(lambda b: b, name="m").flat_map(split_words)
    s.filter(lambda b: [True] * b.num_rows).key_by("word").count()
    kinds = [(type(n.operator), n.operator.name, n.chaining_strategy)
             for n in p.stream_graph().nodes()]
    assert kinds == [(Numbers, "Source: numbers", ChainingStrategy.HEAD),
                     (MapOperator, "m", ChainingStrategy.ALWAYS),
                     (FlatMapOperator, "flat_map", ChainingStrategy.ALWAYS),
                     (FilterOperator, "filter", ChainingStrategy.ALWAYS),
                     (KeyedAggregateOperator, "count", ChainingStrategy.HEAD)]


def test_edges_default_to_forward_or_rebalance_by_parallelism():
    p = Pipeline("defaults", parallelism=2)
    source = p.add_source(Numbers())
    source.map(lambda b: b, name="same").map(lambda b: b, name="more", parallelism=4)
    graph = p.stream_graph()
    assert [(e.partitioner, graph.node(e.target_id).name)
            for n in graph.nodes() for e in n.out_edges] == [("forward", "same"),
                                                             ("rebalance", "more")]


@pytest.mark.parametrize("partition, expected", [
    (lambda s: s.rebalance(), ("rebalance", ())),
    (lambda s: s.broadcast(), ("broadcast", ())),
    (lambda s: s.forward(), ("forward", ())),
    (lambda s: s.key_by("word", "n"), ("hash", ("word", "n"))),
    (lambda s: s.key_by(["word"]), ("hash", ("word",))),
    (lambda s: s.partition("hash", "word"), ("hash", ("word",))),
    (lambda s: s.key_by("word").rebalance(), ("rebalance", ())),   # nearest wins
    (lambda s: s.rebalance().key_by("n"), ("hash", ("n",))),
    (lambda s: s.key_by("word").blocking(), ("hash", ("word",))),  # blocking keeps it
])
def test_virtual_partition_nodes_set_the_partitioner_of_the_next_edge(partition, expected):
    p = Pipeline("partitioning", parallelism=2)
    partition(p.add_source(Numbers())).map(lambda b: b).start_new_chain()
    [edge] = p.job_graph().edges
    assert (edge.partitioner, tuple(edge.key_columns)) == expected


def test_a_keyed_stream_stays_keyed_through_blocking():
    p = Pipeline("keyed", parallelism=2)
    keyed = p.add_source(Numbers()).key_by("word").blocking()
    assert isinstance(keyed, KeyedStream) and keyed.key_columns == ("word",)
    keyed.count()
    [edge] = p.job_graph().edges
    assert (edge.partitioner, edge.key_columns, edge.partition_type) == (
        "hash", ["word"], ResultPartitionType.BLOCKING)


def test_slot_sharing_groups_are_inherited_from_inputs_that_agree():
    p = Pipeline("groups", parallelism=2)
    a = p.add_source(Numbers(), name="a", slot_sharing_group="sources")
    b = p.add_source(Numbers(), name="b")
    after_a = a.rebalance().map(lambda x: x, name="after a")
    a.key_by("word").transform(Union(), b.key_by("word"), name="both")
    after_a.map(lambda x: x, name="own", slot_sharing_group="mine")
    graph = p.stream_graph()
    group = {n.name: n.slot_sharing_group for n in graph.nodes()}
    assert group == {"Source: a": "sources", "Source: b": "default", "after a": "sources",
                     "both": "default", "own": "mine"}
    assert {v.name: v.slot_sharing_group for v in p.job_graph().vertices}["own"] == "mine"


# ---- JobEdges, batch mode, resources ---------------------------------------------------------

@pytest.mark.parametrize("partition, distribution, deterministic", [
    (lambda s: s.forward(), DistributionPattern.POINTWISE, True),
    (lambda s: s.rebalance(), DistributionPattern.ALL_TO_ALL, False),
    (lambda s: s.broadcast(), DistributionPattern.ALL_TO_ALL, True),
    (lambda s: s.key_by("word"), DistributionPattern.ALL_TO_ALL, True),
])
def test_job_edges_say_how_subtasks_connect(partition, distribution, deterministic):
    p = Pipeline("edges", parallelism=2)
    partition(p.add_source(Numbers())).map(lambda b: b).start_new_chain()
    [edge] = p.job_graph().edges
    assert (edge.distribution, edge.deterministic) == (distribution, deterministic)


def test_batch_mode_makes_every_exchange_blocking_and_schedules_lazily():
    batch = wordcount_program().job_graph()
    assert batch.schedule_mode is ScheduleMode.LAZY_FROM_SOURCES
    assert {e.partition_type for e in batch.edges} == {ResultPartitionType.BLOCKING}

    p = Pipeline("streaming", parallelism=2)
    p.add_source(Numbers()).key_by("word").count().rebalance().sink_to(Collect())
    streaming = p.job_graph()
    assert streaming.schedule_mode is ScheduleMode.EAGER
    assert [e.partition_type for e in streaming.edges] == [ResultPartitionType.PIPELINED] * 2


def test_a_vertex_needs_the_sum_of_the_resources_its_operators_declare():
    p = Pipeline("resources", parallelism=2)
    (p.add_source(Numbers(), resources=ResourceProfile(1.0, 512))
     .map(lambda b: b, resources=ResourceProfile(0.5, 1024))
     .map(lambda b: b)
     .rebalance().sink_to(Collect()))
    assert [v.resources for v in p.job_graph().vertices] == [ResourceProfile(1.5, 1536),
                                                             UNKNOWN]


# ---- stable ids --------------------------------------------------------------------------------

def test_ids_are_32_hex_digits_and_a_vertex_has_its_heads_id():
    graph = wordcount_program().job_graph()
    for vertex in graph.vertices:
        assert vertex.id == vertex.operators[0].uid
        for op in vertex.operators:
            assert len(op.uid) == 32 and int(op.uid, 16) >= 0


def test_the_same_program_built_twice_has_the_same_ids():
    first, second = wordcount_program().job_graph(), wordcount_program().job_graph()
    assert first.job_id != second.job_id
    assert [(v.id, v.operators) for v in first.vertices] == [
        (v.id, v.operators) for v in second.vertices]


def test_the_same_program_built_in_another_process_has_the_same_ids():
    script = ("import json\n"
              "from tests.unit.test_pipeline_api import wordcount_program, operator_ids\n"
              "print(json.dumps(operator_ids(wordcount_program())))\n")
    here = operator_ids(wordcount_program())
    for seed in ("1", "2"):  # ids must not depend on Python's str hashing
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120, check=True)
        assert json.loads(out.stdout) == here


def test_names_and_functions_do_not_change_ids():
    assert operator_ids(wordcount_program()) == {
        name.replace("tidy", "normalise"): uid for name, uid in
        operator_ids(wordcount_program(map_name="tidy", map_fn=lambda b: b.slice(0))).items()}


def test_an_operator_inserted_upstream_changes_the_ids_downstream_only():
    before = operator_ids(wordcount_program())
    after = operator_ids(wordcount_program(insert_filter=True))
    # Same position, same chainable outputs, no inputs: the source keeps its id.
    assert after["Source: numbers"] == before["Source: numbers"]
    for name in ("flat_map", "normalise", "sum(n)", "Sink: collect"):
        assert after[name] != before[name], name


def test_a_uid_fixes_an_operators_id_wherever_it_is():
    before = operator_ids(wordcount_program(sink_uid="word-sums"))
    after = operator_ids(wordcount_program(insert_filter=True, sink_uid="word-sums"))
    assert after["Sink: collect"] == before["Sink: collect"]
    assert after["sum(n)"] != before["sum(n)"]
    assert operator_ids(wordcount_program(sink_uid="other"))["Sink: collect"] != \
        before["Sink: collect"]
    assert operator_ids(wordcount_program())["Sink: collect"] != before["Sink: collect"]


# ---- what each vertex runs ---------------------------------------------------------------------

def test_each_vertex_runs_a_pickled_stream_task_spec(fake_spark):
    p = Pipeline("join", parallelism=2)
    customers = p.add_source(Numbers(), name="customers")   # created first...
    orders = p.add_source(Numbers(), name="orders")
    joined = orders.key_by("word").spark(lambda o, c: o, customers.key_by("word"),
                                         name="join")       # ...but read as input 1
    joined.sink_to(Collect(), name="out")
    orders.rebalance().sink_to(Collect(), name="raw", parallelism=1)
    graph = p.job_graph()
    vertex = {v.name: v for v in graph.vertices}
    spec = specs(graph)
    assert list(vertex) == ["Source: customers", "Source: orders", "join -> Sink: out",
                            "Sink: raw"]
    join_id, orders_id = vertex["join -> Sink: out"].id, vertex["Source: orders"].id

    join_spec = spec["join -> Sink: out"]
    assert [type(op) for op in join_spec.operators] == [FakeSparkStage, Collect]
    assert join_spec.operators[0].num_inputs == 2
    assert join_spec.operators[0].fn("o", "c") == "o"
    assert join_spec.inputs == (InputSpec(orders_id), InputSpec(vertex["Source: customers"].id))
    assert join_spec.outputs == ()

    orders_spec = spec["Source: orders"]
    assert [type(op) for op in orders_spec.operators] == [Numbers]
    assert orders_spec.inputs == ()
    assert orders_spec.outputs == (OutputSpec(join_id, "hash", ("word",)),
                                   OutputSpec(vertex["Sink: raw"].id, "rebalance"))
    # Outputs in the order of the vertex's JobEdges.
    assert [(e.target, e.partitioner) for e in graph.edges if e.source == orders_id] == [
        (join_id, "hash"), (vertex["Sink: raw"].id, "rebalance")]


def test_chained_operators_run_in_one_spec_head_first():
    graph = wordcount_program().job_graph()
    spec = specs(graph)
    assert [type(op) for op in spec["Source: numbers -> flat_map -> normalise"].operators] == [
        Numbers, FlatMapOperator, MapOperator]
    assert [type(op) for op in spec["sum(n) -> Sink: collect"].operators] == [
        KeyedAggregateOperator, Collect]


def test_spark_stage_is_constructed_with_the_function_and_number_of_inputs(fake_spark):
    p = Pipeline("spark", parallelism=2)
    a, b, c = (p.add_source(Numbers(), name=n) for n in "abc")
    stage = p.stream_graph().resolve(a.spark(lambda x, y, z: x, b, c)._id)
    assert isinstance(stage.operator, FakeSparkStage) and stage.operator.num_inputs == 3
    assert stage.chaining_strategy is ChainingStrategy.HEAD and stage.name == "spark"


def test_connectors_are_made_from_the_api_arguments(fake_connectors):
    p = Pipeline("files")
    schema = pa.schema([("a", pa.int64())])
    sources = [p.read_text("in.txt"), p.read_csv("in.csv", schema, delimiter=";"),
               p.read_parquet("in.parquet", columns=["a"]),
               p.from_generator(lambda i, n: [], name="gen")]
    made = [(type(p.stream_graph().resolve(s._id).operator).__name__,
             p.stream_graph().resolve(s._id).operator.args,
             p.stream_graph().resolve(s._id).operator.kwargs, s.name) for s in sources]
    assert made[:3] == [("TextSource", ("in.txt",), {"monitor_interval": None,
                                                      "until_files": None}, "Source: text"),
                        ("CsvSource", ("in.csv", schema), {"delimiter": ";"}, "Source: csv"),
                        ("ParquetSource", ("in.parquet", ["a"]), {}, "Source: parquet")]
    assert made[3][0] == "GeneratorSource" and made[3][3] == "Source: gen"
    out = [sources[0].write_parquet("out"), sources[1].write_csv("out.csv", name="report")]
    nodes = [p.stream_graph().node(s._id) for s in out]
    assert [(type(n.operator).__name__, n.operator.args, n.name) for n in nodes] == [
        ("ParquetSink", ("out",), "Sink: parquet"), ("CsvSink", ("out.csv",), "Sink: report")]


# ---- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("parallelism", [0, -1, "2", 1.5, True])
def test_parallelism_must_be_a_positive_int(parallelism):
    with pytest.raises(ValueError, match="Pipeline 'p': parallelism must be an int >= 1"):
        Pipeline("p", parallelism=parallelism)
    p = Pipeline("p")
    with pytest.raises(ValueError, match="tokenize: parallelism must be an int >= 1"):
        p.add_source(Numbers()).map(lambda b: b, name="tokenize", parallelism=parallelism)


def test_key_by_needs_columns():
    s = Pipeline("p").add_source(Numbers())
    with pytest.raises(ValueError, match="key_by on 'Source: numbers': give at least one"):
        s.key_by()
    with pytest.raises(ValueError, match="key columns are non-empty strings"):
        s.key_by("")
    with pytest.raises(ValueError, match="repeated"):
        s.key_by("a", "a")


def test_unknown_partitioning_is_refused():
    s = Pipeline("p").add_source(Numbers())
    with pytest.raises(ValueError, match="unknown partitioning 'shuffle'"):
        s.partition("shuffle")
    with pytest.raises(ValueError, match="only hash partitioning takes key columns"):
        s.partition("rebalance", "word")


def test_forward_between_different_parallelisms_is_refused():
    s = Pipeline("p", parallelism=2).add_source(Numbers())
    with pytest.raises(ValueError, match="wide: forward partitioning does not allow a change "
                                         "of parallelism"):
        s.forward().map(lambda b: b, name="wide", parallelism=4)


def test_functions_are_checked_when_given():
    s = Pipeline("p").add_source(Numbers())
    with pytest.raises(TypeError, match="map: expected a function, not int"):
        s.map(3)
    with pytest.raises(TypeError, match="split: the function must take 1 positional argument"):
        s.flat_map(lambda a, b: a, name="split")


def test_spark_function_takes_one_dataframe_per_input(fake_spark):
    p = Pipeline("p")
    a, b = p.add_source(Numbers()), p.add_source(Numbers())
    with pytest.raises(TypeError, match="join: the function must take 2 positional arguments"):
        a.spark(lambda df: df, b, name="join")
    with pytest.raises(ValueError, match="reads 'Source: numbers' more than once"):
        a.spark(lambda x, y: x, a.rebalance())


def test_streams_of_another_pipeline_are_refused(fake_spark):
    a = Pipeline("a").add_source(Numbers())
    b = Pipeline("b").add_source(Numbers())
    with pytest.raises(ValueError, match="input 1 belongs to pipeline 'b', not 'a'"):
        a.spark(lambda x, y: x, b)


def test_uids_must_be_unique():
    s = Pipeline("p").add_source(Numbers(), uid="in")
    with pytest.raises(ValueError, match="uid 'in' is already the uid of 'Source: numbers'"):
        s.map(lambda b: b, uid="in")


def test_settings_of_the_wrong_type_are_refused():
    s = Pipeline("p").add_source(Numbers())
    with pytest.raises(TypeError, match="resources must be a ResourceProfile"):
        s.map(lambda b: b, resources={"memory_mb": 1})
    with pytest.raises(ValueError, match="slot_sharing_group must be a non-empty string"):
        s.map(lambda b: b, slot_sharing_group="")
    with pytest.raises(ValueError, match="count: output column 'count' appears twice"):
        s.key_by("count").count()
    with pytest.raises(ValueError, match="totals: unknown aggregate function 'median'"):
        s.key_by("word").aggregate({"n": "median"}, name="totals")
    with pytest.raises(ValueError, match="disable_chaining: applies to an operator"):
        s.rebalance().disable_chaining()


def test_an_empty_pipeline_has_no_job_graph():
    with pytest.raises(ValueError, match="pipeline 'empty' has no operators"):
        Pipeline("empty").job_graph()


def test_a_failed_call_leaves_the_graph_unchanged():
    p = Pipeline("p", parallelism=2)
    s = p.add_source(Numbers())
    with pytest.raises(ValueError):
        s.forward().map(lambda b: b, parallelism=3)
    s.map(lambda b: b)
    assert [n.name for n in p.stream_graph().nodes()] == ["Source: numbers", "map"]
    assert len(p.stream_graph().nodes()[0].out_edges) == 1


# ---- execute -----------------------------------------------------------------------------------

def test_execute_submits_the_job_graph_to_the_current_executor(executor):
    p = wordcount_program()
    result = p.execute()
    [graph] = executor.graphs
    assert result.succeeded and result.job_id == graph.job_id
    assert [v.id for v in graph.vertices] == [v.id for v in p.job_graph().vertices]


def test_a_stream_cannot_be_used_after_its_pipeline_ran(executor):
    p = Pipeline("once")
    s = p.add_source(Numbers())
    s.sink_to(Collect())
    p.execute()
    with pytest.raises(RuntimeError, match="map: pipeline 'once' was already executed"):
        s.map(lambda b: b)
    with pytest.raises(RuntimeError, match="key_by: pipeline 'once' was already executed"):
        s.key_by("word")
    with pytest.raises(RuntimeError, match="execute: pipeline 'once' was already executed"):
        p.execute()
    assert len(executor.graphs) == 1


def test_pipeline_is_importable_from_the_package():
    import flinkyarn
    assert flinkyarn.Pipeline is Pipeline
    assert isinstance(Pipeline("p").add_source(Numbers()), DataStream)


# ---- describe ----------------------------------------------------------------------------------

def test_describe_shows_vertices_operators_and_edges():
    graph = wordcount_program().job_graph()
    text = describe_job_graph(graph)
    head, tail = graph.vertices
    assert text.splitlines()[0] == ("Job 'wordcount': 2 vertices, 1 edge, "
                                    "schedule lazy_from_sources")
    assert f"v1  Source: numbers -> flat_map -> normalise  (id {head.id[:8]})" in text
    assert "parallelism 2, slot sharing group 'default', resources UNKNOWN" in text
    assert f"v2  sum(n) -> Sink: collect  (id {tail.id[:8]})" in text
    assert f"operators: sum(n) [{tail.id[:8]}], Sink: collect [{tail.operators[1].uid[:8]}]" in text
    assert ("v1 -> v2  hash [word], blocking, all_to_all  (normalise => sum(n))"
            in text)
    assert describe_job_graph(wordcount_program().job_graph()) == text


def test_describe_names_ship_strategies_by_their_value():
    p = Pipeline("strategies", parallelism=2)
    p.add_source(Numbers(), name="numbers").rebalance().sink_to(Collect(), name="collect")
    text = describe_job_graph(p.job_graph())
    assert ("v1 -> v2  rebalance, pipelined, all_to_all  (Source: numbers => Sink: collect)"
            in text)


# ---- the job's own settings -------------------------------------------------------------------

def test_a_pipeline_carries_its_fault_tolerance_settings_in_its_job_graph():
    p = Pipeline("settings", configuration={"restart-strategy.type": "fixed-delay",
                                            "jobmanager.execution.failover-strategy": "full"})
    p.add_source(Numbers(), name="n").write_parquet("/tmp/out")
    assert p.job_graph().configuration == {"restart-strategy.type": "fixed-delay",
                                           "jobmanager.execution.failover-strategy": "full"}
    plain = Pipeline("no settings")
    plain.add_source(Numbers(), name="n").write_parquet("/tmp/out")
    assert plain.job_graph().configuration == {}


@pytest.mark.parametrize("settings, message", [
    ({"taskmanager.numberOfTaskSlots": "8"}, "a job cannot set option 'taskmanager.numberOfTaskSlots'"),
    ({"restart-strategy.type": "sometimes"}, "bad value 'sometimes' for option 'restart-strategy.type'"),
    ({"restart-strategy.fixed-delay.atempts": "3"}, "did you mean 'restart-strategy.fixed-delay.attempts'"),
])
def test_bad_settings_are_refused_where_the_pipeline_is_made(settings, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Pipeline("bad", configuration=settings)


def test_a_watched_folder_is_for_streaming_pipelines_with_a_valid_interval():
    streaming = Pipeline("watch", parallelism=2)
    source = streaming.read_text("/in", monitor_interval="500 ms", until_files=4)
    operator = streaming.stream_graph().node(source._id).operator
    assert (operator.monitor_interval, operator.until_files) == (0.5, 4)
    with pytest.raises(ValueError, match="an unbounded source; pipeline 'b' is in batch mode"):
        Pipeline("b", batch_mode=True).read_text("/in", monitor_interval=1)
    with pytest.raises(ValueError, match="read_text: monitor_interval: "):
        streaming.read_text("/in", monitor_interval="soon")
    with pytest.raises(ValueError, match="read_text: .*until_files"):
        streaming.read_text("/in", until_files=3)


def test_the_runtime_mode_is_streaming_by_default_or_batch():
    assert not Pipeline("p").batch_mode and not Pipeline("p", mode="streaming").batch_mode
    assert Pipeline("p", mode="batch").batch_mode
    with pytest.raises(ValueError, match="mode is 'streaming' or 'batch', not 'stream'"):
        Pipeline("p", mode="stream")
    with pytest.raises(ValueError, match="contradict"):
        Pipeline("p", batch_mode=True, mode="streaming")
    with pytest.raises(ValueError, match="an unbounded source; pipeline 'p' is in batch mode"):
        Pipeline("p", mode="batch").read_text("/tmp/x", monitor_interval=1)
