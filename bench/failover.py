"""How the failover strategies' computation grows with the graph: n producers -> n
consumers, ALL_TO_ALL (n * n edges, 2n subtasks), for n = 1000 and 2000 by default.

Each scenario builds an ExecutionGraph (its own construction is O(edges) and is shown
only for scale), puts it in a state, and times `tasks_to_restart`: the first call (which
for the region strategy includes building its per-graph index) and the median of the
following calls. Doubling n quadruples the edges and doubles the subtasks; a computation
linear in subtasks and partitions grows about 2x, one walking every edge 4x.

    blocking-rebalance  region; BLOCKING, non-deterministic; producers FINISHED, consumers
                        RUNNING; a consumer fails reading an input nobody knows lost: every
                        producer re-runs, so every consumer does (2n subtasks)
    blocking-hash-lost  region; BLOCKING, deterministic; one producer's output lost: that
                        producer and the failed consumer (2 subtasks)
    pipelined           region; PIPELINED: one region of 2n subtasks
    full                full; every subtask

Then, for scale of what a restart costs beyond choosing the set: deploying every
subtask of the PIPELINED n x n job through the Scheduler (start, then a slot for each
request). Each consumer's descriptor names its n inputs, so this is O(edges): about 4x
per doubling. (Before a consumer's subpartition was found in constant time, it was a
sort per input per deployment, O(n^3 log n): 5.8 s at n = 500.)

Pure computation, one process, no cluster. These machines are shared and noisy: compare
the growth ratios, not the milliseconds; never assert on absolute times.

usage: .venv/bin/python bench/failover.py [--sizes 1000 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flinkyarn.ids import ExecutionVertexID, JobID, JobVertexID  # noqa: E402
from flinkyarn.jobgraph import JobEdge, JobGraph, JobVertex, ResultPartitionType  # noqa: E402
from yarn_am.jobmaster.execution_graph import ExecutionGraph, ExecutionState  # noqa: E402
from yarn_am.jobmaster.failover_strategy import (FailureKind, RegionFailoverStrategy,  # noqa: E402
                                                 RestartAllFailoverStrategy)
from yarn_am.jobmaster.scheduler import DeployTask, RequestSlot, Scheduler, SlotInfo  # noqa: E402

S = ExecutionState


def build(n: int, partition_type: ResultPartitionType, deterministic: bool) -> ExecutionGraph:
    a, b = JobVertexID("a"), JobVertexID("b")
    graph = ExecutionGraph(JobGraph(
        JobID("bench"), f"{n}x{n}", [JobVertex(a, "A", n, b""), JobVertex(b, "B", n, b"")],
        [JobEdge(a, b, partition_type=partition_type, deterministic=deterministic)]))
    for index in range(n):
        for vertex_id, final in ((a, S.FINISHED), (b, None)):
            execution = graph.vertex(ExecutionVertexID(vertex_id, index)).current_execution
            for step in (S.SCHEDULED, S.DEPLOYING, S.RUNNING):
                execution.transition(step, 0.0)
            if final is not None and partition_type is ResultPartitionType.BLOCKING:
                execution.transition(final, 0.0)
    graph.vertex(ExecutionVertexID(b, 0)).current_execution.transition(S.FAILED, 0.0)
    return graph


SCENARIOS = {
    # name: (partition type, deterministic, strategy, kind, lost producers, expected size)
    "blocking-rebalance": (ResultPartitionType.BLOCKING, False, RegionFailoverStrategy,
                           FailureKind.PARTITION, (), lambda n: 2 * n),
    "blocking-hash-lost": (ResultPartitionType.BLOCKING, True, RegionFailoverStrategy,
                           FailureKind.PARTITION, (7,), lambda n: 2),
    "pipelined": (ResultPartitionType.PIPELINED, True, RegionFailoverStrategy,
                  FailureKind.TASK, (), lambda n: 2 * n),
    "full": (ResultPartitionType.BLOCKING, True, RestartAllFailoverStrategy,
             FailureKind.TASK, (), lambda n: 2 * n),
}


def measure(name: str, n: int, repeat: int) -> dict[str, float]:
    partition_type, deterministic, strategy_class, kind, lost_indices, expected = SCENARIOS[name]
    start = time.perf_counter()
    graph = build(n, partition_type, deterministic)
    built = time.perf_counter() - start
    failed = ExecutionVertexID(JobVertexID("b"), 0)
    lost = frozenset(ExecutionVertexID(JobVertexID("a"), i) for i in lost_indices)
    strategy = strategy_class()
    gc.collect()
    start = time.perf_counter()
    restart = strategy.tasks_to_restart(graph, failed, kind, lost)
    first = time.perf_counter() - start
    if len(restart) != expected(n):
        raise AssertionError(f"{name} {n}: {len(restart)} subtasks to restart, "
                             f"expected {expected(n)}")
    calls = []
    for _ in range(repeat):
        start = time.perf_counter()
        strategy.tasks_to_restart(graph, failed, kind, lost)
        calls.append(time.perf_counter() - start)
    return {"build_s": built, "first_call_s": first, "call_s": statistics.median(calls),
            "restarted": len(restart)}


def measure_deploy(n: int) -> float:
    """Seconds for the Scheduler to deploy all 2n subtasks of the pipelined n x n job."""
    a, b = JobVertexID("a"), JobVertexID("b")
    scheduler = Scheduler(ExecutionGraph(JobGraph(
        JobID("bench"), f"{n}x{n}", [JobVertex(a, "A", n, b""), JobVertex(b, "B", n, b"")],
        [JobEdge(a, b)])))
    gc.collect()
    start = time.perf_counter()
    deployed = 0
    for number, command in enumerate(scheduler.start(0.0)):
        if isinstance(command, RequestSlot):
            slot = SlotInfo(f"allocation-{number}", "te", number, "127.0.0.1:1")
            deployed += sum(isinstance(c, DeployTask)
                            for c in scheduler.slot_assigned(command.request_id, slot, 0.0))
    elapsed = time.perf_counter() - start
    if deployed != 2 * n:
        raise AssertionError(f"deploy {n}: {deployed} subtasks deployed, expected {2 * n}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    args = parser.parse_args()
    print(f"{'scenario':20} {'n':>5} {'edges':>9} {'graph build':>12} {'first call':>11} "
          f"{'call':>9} {'restarted':>9}")
    for name in args.scenarios:
        results = {}
        for n in args.sizes:
            results[n] = r = measure(name, n, args.repeat)
            print(f"{name:20} {n:5d} {n * n:9d} {r['build_s']:11.2f}s "
                  f"{r['first_call_s'] * 1e3:9.1f}ms {r['call_s'] * 1e3:7.2f}ms "
                  f"{r['restarted']:9d}")
        if len(args.sizes) >= 2:
            small, large = args.sizes[0], args.sizes[-1]
            factor = large / small
            first = results[large]["first_call_s"] / results[small]["first_call_s"]
            call = results[large]["call_s"] / max(results[small]["call_s"], 1e-9)
            print(f"{'':20} growth {small} -> {large}: subtasks x{factor:g}, edges "
                  f"x{factor ** 2:g}; first call x{first:.2f}, call x{call:.2f}")
    deploys = {n: measure_deploy(n) for n in args.sizes}
    for n, elapsed in deploys.items():
        print(f"{'deploy every subtask':20} {n:5d} {n * n:9d} {elapsed:11.2f}s")
    if len(args.sizes) >= 2:
        small, large = args.sizes[0], args.sizes[-1]
        print(f"{'':20} growth {small} -> {large}: x{deploys[large] / deploys[small]:.2f} "
              f"(edges x{(large / small) ** 2:g})")


if __name__ == "__main__":
    main()
