"""Figures for the control plane (issue 3), each against a baseline measured in the same run.

1. RPC round trip, p50 and p99, over loopback with mutual TLS: a typed gateway proxy
   calling a tiny endpoint hosted by an RpcService, against a bare grpc.aio unary call
   (same cluster credentials, a generic handler echoing bytes, the same wire size).
   Both run in this one process on one event loop, as tests/local/test_rpc.py does;
   the two are measured in alternating blocks, so both see the same noise.
2. Slot request to slot offer with a free slot: in a warm local cluster, a job of one
   vertex with parallelism 1, from `rest.submit` returning to its task RUNNING. On the
   way: JobMaster start and registration at the ResourceManager, the SlotPool's request,
   the SlotManager's choice of the free slot, allocate_slot at the TaskExecutor, its
   registration at the JobMaster and the offer, deployment, the task's state update.
3. Submit to RUNNING: a job of two vertices, parallelism 2 each, one slot sharing group
   (two slots), from `rest.submit` returning to job RUNNING with all four tasks RUNNING.
4. Many jobs at once (issue 17): JOBS_AT_ONCE tiny jobs (one task of parallelism 1)
   submitted together, each from its own thread, into a warm cluster with a free slot
   for each (JOBS_AT_ONCE / 2 TaskExecutors of 2 slots); all must finish. The figure is
   each job's submit (the REST call returning) to its task running, p50 and p99, against
   the same for one such job alone, in the same cluster between the rounds. The task
   notes when it starts itself (time.time() into a file: the TaskExecutors run on this
   machine), so no polling loads the AppMaster while the jobs start.
For 2 and 3 the baseline is one REST round trip, `rest.overview()` (p50 of 50 calls,
half before and half after the runs). Between runs the script waits until the
ResourceManager shows every slot free, so each run starts from a free slot.

What "RUNNING" means from outside: `rest.job(job_id)` is polled, a new poll started every
5 ms (`--poll-ms`; back to back when a poll takes longer), and the time taken is when the
first answer showing it arrived: an upper bound, at most one poll period plus one REST
round trip late. The bracket (the previous poll's start) is in the JSON. Each poll is a
new HTTPS connection to the AppMaster (the RestClient does not keep connections), so
polling loads the AppMaster's loop a little: an observer effect, the same in every run.

These machines are shared and noisy (2 cores): compare ratios between runs, not
milliseconds, and never assert on absolute times.

usage: .venv/bin/python bench/control_plane.py [--runs N] [--calls N] [--rounds N]
                                              [--keep-work-dir]
Writes bench/results/control_plane.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Protocol

import grpc
import grpc.aio
import msgspec

from flinkyarn.configuration import Configuration
from flinkyarn.gateways.dispatcher import ClusterOverview, JobDetails
from flinkyarn.job import JobBuilder
from flinkyarn.jobgraph import JobGraph
from flinkyarn.rpc import codec
from flinkyarn.rpc.endpoint import RpcEndpoint
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.rpc.service import RpcService
from yarn_client.executors import describe
from yarn_client.local_cluster import LocalCluster
from yarn_client.rest_client import RestClient

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "control_plane.json"
TERMINAL = ("FINISHED", "FAILED", "CANCELED")

CLUSTER_OVERRIDES = {
    # A warm cluster: TaskExecutors stay while the benchmark runs...
    "resourcemanager.taskmanager-timeout": "10 min",
    # ...and a slot a job no longer uses goes back to the ResourceManager quickly.
    "slot.idle.timeout": "1 s",
}
HOLD = 0.5  # how long the benchmark's tasks stay RUNNING
JOBS_AT_ONCE = 20


def ms(seconds: float) -> float:
    return seconds * 1000.0


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(p / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# ============================================================== 1. RPC round trip

class Echo(msgspec.Struct, frozen=True):
    sequence: int
    payload: bytes


class EchoGateway(Protocol):
    async def echo(self, request: Echo) -> Echo:
        ...


class EchoEndpoint(RpcEndpoint):
    def __init__(self, rpc: RpcService) -> None:
        super().__init__(rpc, "echo", EchoGateway)

    async def echo(self, request: Echo) -> Echo:
        return request


BARE_METHOD = "/bare/echo"


class BareEcho(grpc.GenericRpcHandler):
    """The baseline server: raw bytes in, the same bytes out, no codec, no dispatch."""

    def __init__(self) -> None:
        async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return request
        self._handler = grpc.unary_unary_rpc_method_handler(echo)

    def service(self, details: grpc.HandlerCallDetails):
        return self._handler if details.method == BARE_METHOD else None


async def rpc_round_trips(security: ClusterSecurity, calls: int, warmup: int,
                          payload_size: int, blocks: int = 10) -> dict:
    server = RpcService(security)
    await server.start()
    endpoint = EchoEndpoint(server)
    endpoint_task = asyncio.create_task(endpoint.run())
    await endpoint.running.wait()
    client = RpcService(security)
    proxy = client.connect(server.address, "echo", EchoGateway)
    message = Echo(0, os.urandom(payload_size))
    wire_size = len(codec.encode(message))

    bare_server = grpc.aio.server()
    bare_server.add_generic_rpc_handlers((BareEcho(),))
    port = bare_server.add_secure_port("127.0.0.1:0", security.server_credentials())
    await bare_server.start()
    bare_channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", security.channel_credentials())
    bare_stub = bare_channel.unary_unary(BARE_METHOD)
    raw = os.urandom(wire_size)
    timeout = server.ask_timeout  # the proxy sends this deadline with each call; so does the baseline

    async def typed() -> None:
        await proxy.echo(message)

    async def bare() -> None:
        await bare_stub(raw, timeout=timeout)

    try:
        assert await proxy.echo(message) == message
        assert await bare_stub(raw, timeout=timeout) == raw
        for _ in range(warmup):
            await typed()
            await bare()
        samples: dict[str, list[float]] = {"typed": [], "bare": []}
        per_block = max(1, calls // blocks)
        for block in range(blocks):
            order = [("bare", bare), ("typed", typed)]
            if block % 2:
                order.reverse()
            for name, call in order:
                gc.collect()
                out = samples[name]
                for _ in range(per_block):
                    start = time.perf_counter()
                    await call()
                    out.append(time.perf_counter() - start)
    finally:
        await bare_channel.close()
        await bare_server.stop(0.5)
        endpoint.stop()
        await endpoint_task
        await client.stop()
        await server.stop()

    def summary(values: list[float]) -> dict:
        return {"calls": len(values), "p50_ms": ms(percentile(values, 50)),
                "p99_ms": ms(percentile(values, 99)), "mean_ms": ms(statistics.fmean(values))}

    typed_summary, bare_summary = summary(samples["typed"]), summary(samples["bare"])
    return {
        "wire_bytes": wire_size,
        "typed_proxy": typed_summary,
        "bare_grpc": bare_summary,
        "ratio_p50": typed_summary["p50_ms"] / bare_summary["p50_ms"],
        "ratio_p99": typed_summary["p99_ms"] / bare_summary["p99_ms"],
    }


# ================================================== 2./3. slots and submission

def hold_for(seconds: float) -> Callable:
    # Defined in __main__ (this file runs as a script), so cloudpickle ships it by value.
    def hold(ctx) -> None:
        ctx.sleep(seconds)
    return hold


def one_vertex_job(hold: float) -> JobGraph:
    job = JobBuilder("bench: one slot")
    job.add_vertex("hold", hold_for(hold), parallelism=1)
    return job.build()


def two_vertex_job(hold: float) -> JobGraph:
    job = JobBuilder("bench: two vertices", schedule_mode="eager")
    source = job.add_vertex("source", hold_for(hold), parallelism=2)
    sink = job.add_vertex("sink", hold_for(hold), parallelism=2)
    job.connect(source, sink, pattern="pointwise", blocking=False)
    return job.build()


def first_vertex_running(details: JobDetails) -> bool:
    return details.vertices[0].state_counts.get("RUNNING", 0) > 0


def all_running(details: JobDetails) -> bool:
    return details.status == "RUNNING" and all(
        v.state_counts.get("RUNNING", 0) == v.parallelism for v in details.vertices)


class JobFailed(RuntimeError):
    """A measured job did not finish: the run is left out of the figures and reported."""


class Poll(msgspec.Struct):
    seen_at: float   # perf_counter when the first answer showing the condition arrived
    not_before: float  # start of the poll before it (the condition was not yet true then)
    polls: int
    period: float    # mean time between poll starts
    details: JobDetails
    changes: list[tuple[float, str]]  # (answer arrived, what the job looked like), on each change


def poll_job(rest: RestClient, job_id: str, condition: Callable[[JobDetails], bool],
             interval: float, timeout: float = 60.0) -> Poll:
    first = previous = time.perf_counter()
    polls = 0
    changes: list[tuple[float, str]] = []
    while True:
        sent = time.perf_counter()
        details = rest.job(job_id)
        received = time.perf_counter()
        polls += 1
        seen = describe(details)
        if not changes or changes[-1][1] != seen:
            changes.append((received, seen))
        if condition(details):
            return Poll(received, previous, polls, (sent - first) / max(1, polls - 1), details,
                        changes)
        previous = sent
        if details.status in TERMINAL:
            raise JobFailed(f"job {job_id} ended {details.status} before the awaited state: "
                               f"{details.failure_cause}")
        if received - first > timeout:
            raise TimeoutError(f"job {job_id} not there within {timeout:g} s: {details}")
        time.sleep(max(0.0, sent + interval - time.perf_counter()))


def wait_finished(rest: RestClient, job_id: str, interval: float) -> float:
    poll = poll_job(rest, job_id, lambda d: d.status in TERMINAL, interval)
    if poll.details.status != "FINISHED":
        raise JobFailed(f"job {job_id} {poll.details.status}: {poll.details.failure_cause}")
    return poll.seen_at


def slots_all_free(overview: ClusterOverview) -> bool:
    return (bool(overview.task_executors)
            and all(s.state == "free" for te in overview.task_executors for s in te.slots)
            and all(job.status in TERMINAL for job in overview.jobs))


def wait_slots_free(rest: RestClient, interval: float, timeout: float = 60.0) -> float:
    deadline = time.perf_counter() + timeout
    while True:
        overview = rest.overview()
        if slots_all_free(overview):
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"slots not free within {timeout:g} s: {overview}")
        time.sleep(interval)


def slots_held(overview: ClusterOverview, job_id: str) -> list[tuple[str, int]]:
    return [(te.resource_id, s.index) for te in overview.task_executors for s in te.slots
            if s.job_id == job_id]


def run_job(rest: RestClient, graph: JobGraph, running: Callable[[JobDetails], bool],
            interval: float) -> dict:
    """One measured run from all-slots-free to all-slots-free again. A job that fails is
    no measurement: its run says why instead (`failed`)."""
    start = time.perf_counter()
    job_id = rest.submit(graph)
    accepted = time.perf_counter()
    try:
        poll = poll_job(rest, job_id, running, interval)
        held = slots_held(rest.overview(), job_id)
        finished = wait_finished(rest, job_id, interval)
    except JobFailed as failure:
        wait_slots_free(rest, interval)
        print(f"run failed: {failure}", file=sys.stderr)
        return {"job_id": job_id, "failed": str(failure)}
    free = wait_slots_free(rest, interval)
    return {
        "job_id": job_id,
        "submit_call_ms": ms(accepted - start),
        "submitted_to_running_ms": ms(poll.seen_at - accepted),
        "not_before_ms": ms(max(0.0, poll.not_before - accepted)),
        "poll_period_ms": ms(poll.period),
        "polls": poll.polls,
        "finished_to_slots_free_ms": ms(free - finished),
        "slots": held,
        "seen": [(round(ms(at - accepted), 1), what) for at, what in poll.changes],
    }


def rest_round_trips(rest: RestClient, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        rest.overview()
        out.append(time.perf_counter() - start)
    return out


def cluster_figures(runs: int, rest_calls: int, poll_interval: float,
                    keep_work_dir: bool) -> dict:
    conf = Configuration.load(overrides=CLUSTER_OVERRIDES)
    cluster = LocalCluster(conf, keep_work_dir=keep_work_dir)
    try:
        started = time.perf_counter()
        rest = cluster.start()
        cluster_start = time.perf_counter() - started
        # Warm: the first jobs start the TaskExecutors; untimed.
        for graph, running in ((two_vertex_job(HOLD), all_running),
                               (one_vertex_job(HOLD), first_vertex_running)):
            run_job(rest, graph, running, poll_interval)
        warm = rest.overview()

        baseline = rest_round_trips(rest, rest_calls // 2)
        single, pair = [], []
        for _ in range(runs):  # interleaved, so drift hits both alike
            single.append(run_job(rest, one_vertex_job(HOLD), first_vertex_running, poll_interval))
            pair.append(run_job(rest, two_vertex_job(HOLD), all_running, poll_interval))
        baseline += rest_round_trips(rest, rest_calls - rest_calls // 2)
        after = rest.overview()
    finally:
        cluster.stop()
        if keep_work_dir:
            print(f"cluster work dir kept: {cluster.work_dir}", file=sys.stderr)

    rest_p50 = ms(percentile(baseline, 50))

    def figure(runs: list[dict]) -> dict:
        samples = [s for s in runs if "failed" not in s]
        if not samples:
            raise JobFailed(f"every measured run failed, e.g. {runs[0]['failed']}")
        values = [s["submitted_to_running_ms"] for s in samples]
        median = statistics.median(values)
        return {
            "median_ms": median,
            "min_ms": min(values),
            "max_ms": max(values),
            "ratio_to_rest_p50": median / rest_p50,
            "failed_runs": len(runs) - len(samples),
            "submit_call_median_ms": statistics.median(s["submit_call_ms"] for s in samples),
            "poll_period_median_ms": statistics.median(s["poll_period_ms"] for s in samples),
            "finished_to_slots_free_median_ms":
                statistics.median(s["finished_to_slots_free_ms"] for s in samples),
            "task_executors_used": sorted({rid for s in samples for rid, _ in s["slots"]}),
            "slots_per_job": sorted({len(s["slots"]) for s in samples}),
            "runs": runs,
        }

    return {
        "overrides": CLUSTER_OVERRIDES,
        "poll_interval_ms": ms(poll_interval),
        "cluster_start_s": cluster_start,
        "rest_overview": {"calls": len(baseline), "p50_ms": rest_p50,
                          "p99_ms": ms(percentile(baseline, 99))},
        "task_executors_warm": len(warm.task_executors),
        "slots_warm": sum(len(te.slots) for te in warm.task_executors),
        "task_executors_at_end": len(after.task_executors),
        "slot_request_one_vertex": figure(single),
        "submit_to_running_two_vertices": figure(pair),
    }


# ============================================================ 4. many jobs at once

def noting_hold(folder: str, seconds: float) -> Callable:
    """A task that writes when it started (seconds since the epoch) into folder/<job id>,
    then holds its slot for `seconds`."""
    def hold(ctx) -> None:
        started = time.time()
        Path(folder, str(ctx.job_id)).write_text(repr(started))
        ctx.sleep(seconds)
    return hold


def tiny_job(folder: str, name: str) -> JobGraph:
    job = JobBuilder(f"bench: {name}")
    job.add_vertex("hold", noting_hold(folder, HOLD), parallelism=1)
    return job.build()


def submit_and_time(rest: RestClient, graph: JobGraph, submitted: dict[str, float]) -> str:
    job_id = rest.submit(graph)
    submitted[job_id] = time.time()
    return job_id


def started_after_submit(folder: Path, submitted: dict[str, float], timeout: float = 120.0
                         ) -> dict[str, float]:
    """Each job's seconds from its submit call's return to its task's start, once every
    task has noted its start."""
    deadline = time.time() + timeout
    while True:
        noted = {job_id: folder / job_id for job_id in submitted}
        if all(path.is_file() and path.read_text() for path in noted.values()):
            return {job_id: float(path.read_text()) - submitted[job_id]
                    for job_id, path in noted.items()}
        if time.time() > deadline:
            missing = [job_id for job_id, path in noted.items() if not path.is_file()]
            raise TimeoutError(f"{len(missing)} job(s) never started: {missing[:3]}")
        time.sleep(0.02)


def wait_all_finished(rest: RestClient, job_ids: list[str], timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while True:
        statuses = {job.job_id: job.status for job in rest.jobs().jobs if job.job_id in job_ids}
        if all(statuses.get(job_id) in TERMINAL for job_id in job_ids):
            failed = {j: s for j, s in statuses.items() if s != "FINISHED"}
            if failed:
                raise JobFailed(f"not every job finished: {failed}")
            return
        if time.time() > deadline:
            raise TimeoutError(f"jobs not finished within {timeout:g} s: {statuses}")
        time.sleep(0.1)


def many_jobs_figures(rounds: int, alone_runs: int, keep_work_dir: bool) -> dict:
    """Figure 4: JOBS_AT_ONCE jobs submitted together, against one alone."""
    import concurrent.futures
    import threading

    overrides = {**CLUSTER_OVERRIDES,
                 "resourcemanager.max-taskmanagers": str(JOBS_AT_ONCE // 2),
                 "taskmanager.numberOfTaskSlots": "2"}
    conf = Configuration.load(overrides=overrides)
    cluster = LocalCluster(conf, keep_work_dir=keep_work_dir)
    notes = Path(tempfile.mkdtemp(prefix="flinkyarn-bench-notes-"))
    alone: list[float] = []
    together: list[float] = []
    round_spans: list[float] = []
    try:
        rest = cluster.start()
        # Warm: one job as wide as all of them starts every TaskExecutor; untimed.
        warm = JobBuilder("bench: warm-up")
        warm.add_vertex("hold", hold_for(HOLD), parallelism=JOBS_AT_ONCE)
        wait_finished(rest, rest.submit(warm.build()), 0.05)
        wait_slots_free(rest, 0.05)
        slots = sum(len(te.slots) for te in rest.overview().task_executors)
        if slots < JOBS_AT_ONCE:
            raise RuntimeError(f"the warm cluster has {slots} slots, not {JOBS_AT_ONCE}")

        def one_alone() -> None:
            submitted: dict[str, float] = {}
            job_id = submit_and_time(rest, tiny_job(str(notes), "alone"), submitted)
            alone.extend(started_after_submit(notes, submitted).values())
            wait_all_finished(rest, [job_id])
            wait_slots_free(rest, 0.05)

        def a_round(number: int) -> None:
            submitted: dict[str, float] = {}
            gate = threading.Barrier(JOBS_AT_ONCE)  # the threads submit together

            def submit(index: int) -> str:
                graph = tiny_job(str(notes), f"{number}-{index}")
                gate.wait()
                return submit_and_time(rest, graph, submitted)

            first = time.time()
            with concurrent.futures.ThreadPoolExecutor(JOBS_AT_ONCE) as pool:
                job_ids = list(pool.map(submit, range(JOBS_AT_ONCE)))
            delays = started_after_submit(notes, submitted)
            together.extend(delays.values())
            round_spans.append(max(submitted[j] + delays[j] for j in job_ids) - first)
            wait_all_finished(rest, job_ids)
            wait_slots_free(rest, 0.05)

        for _ in range(alone_runs // 2):
            one_alone()
        for number in range(rounds):
            a_round(number)
        for _ in range(alone_runs - alone_runs // 2):
            one_alone()
    finally:
        cluster.stop()
        if keep_work_dir:
            print(f"cluster work dir kept: {cluster.work_dir}", file=sys.stderr)

    alone_p50, alone_p99 = ms(percentile(alone, 50)), ms(percentile(alone, 99))
    together_p50, together_p99 = ms(percentile(together, 50)), ms(percentile(together, 99))
    return {
        "overrides": overrides, "jobs_at_once": JOBS_AT_ONCE, "rounds": rounds,
        "alone": {"runs": len(alone), "p50_ms": alone_p50, "p99_ms": alone_p99,
                  "samples_ms": [ms(s) for s in alone]},
        "together": {"jobs": len(together), "p50_ms": together_p50, "p99_ms": together_p99,
                     "all_started_after_first_submit_ms": [ms(s) for s in round_spans],
                     "samples_ms": [ms(s) for s in together]},
        "ratio_p50": together_p50 / alone_p50, "ratio_p99": together_p99 / alone_p99,
    }


# ===================================================================== report

def table(rpc: dict, cluster: dict) -> list[tuple[str, float, str, float]]:
    rest = cluster["rest_overview"]["p50_ms"]
    one, two = cluster["slot_request_one_vertex"], cluster["submit_to_running_two_vertices"]
    measured = [r for r in one["runs"] + two["runs"] if "failed" not in r]
    return [
        ("RPC round trip p50, typed proxy", rpc["typed_proxy"]["p50_ms"],
         "bare gRPC p50", rpc["bare_grpc"]["p50_ms"]),
        ("RPC round trip p99, typed proxy", rpc["typed_proxy"]["p99_ms"],
         "bare gRPC p99", rpc["bare_grpc"]["p99_ms"]),
        ("slot request -> offer -> RUNNING (1x1), median", one["median_ms"],
         "REST overview p50", rest),
        ("submit -> all RUNNING (2 vertices x2), median", two["median_ms"],
         "REST overview p50", rest),
        ("REST submit call, median", statistics.median(
            r["submit_call_ms"] for r in measured),
         "REST overview p50", rest),
        ("job FINISHED -> slots free at the RM, median", statistics.median(
            r["finished_to_slots_free_ms"] for r in measured),
         "REST overview p50", rest),
    ]


def print_report(rows: list[tuple[str, float, str, float]], rpc: dict, cluster: dict) -> None:
    print(f"{'figure':48} {'ms':>9}   {'baseline':18} {'ms':>8}   {'ratio':>7}")
    for name, value, base_name, base in rows:
        print(f"{name:48} {value:9.3f}   {base_name:18} {base:8.3f}   {value / base:6.2f}x")
    one, two = cluster["slot_request_one_vertex"], cluster["submit_to_running_two_vertices"]
    print(f"\nRPC: {rpc['typed_proxy']['calls']} calls each, {rpc['wire_bytes']} bytes on the wire "
          f"per message, loopback, mutual TLS, one process")
    print(f"cluster: {cluster['task_executors_warm']} TaskExecutor(s) with "
          f"{cluster['slots_warm']} slot(s) when warm, {cluster['task_executors_at_end']} at the end; "
          f"slots per job: 1x1 {one['slots_per_job']}, 2 vertices {two['slots_per_job']}; "
          f"{len(one['runs'])} runs each; poll period ~{one['poll_period_median_ms']:.1f} ms; "
          f"local cluster start {cluster['cluster_start_s']:.2f} s")
    print(f"spread: 1x1 {one['min_ms']:.1f}..{one['max_ms']:.1f} ms, "
          f"2 vertices {two['min_ms']:.1f}..{two['max_ms']:.1f} ms")
    for name, figure in (("1x1", one), ("2 vertices", two)):
        failures = [r["failed"] for r in figure["runs"] if "failed" in r]
        if failures:
            print(f"FAILED runs ({name}): {len(failures)} of {len(figure['runs'])}, left out; "
                  f"first: {failures[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10,
                        help="measured jobs of each shape on the local cluster (default 10)")
    parser.add_argument("--calls", type=int, default=2000,
                        help="measured RPC calls of each kind (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="RPC warm-up calls of each kind")
    parser.add_argument("--payload", type=int, default=64,
                        help="payload bytes of the RPC message (default 64)")
    parser.add_argument("--rest-calls", type=int, default=50,
                        help="REST overview calls for the baseline (default 50)")
    parser.add_argument("--poll-ms", type=float, default=5.0,
                        help="period of the job status polls (default 5 ms)")
    parser.add_argument("--rounds", type=int, default=3,
                        help=f"rounds of {JOBS_AT_ONCE} jobs submitted at once (default 3)")
    parser.add_argument("--keep-work-dir", action="store_true",
                        help="keep the local cluster's work dir (logs) and print its path")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="flinkyarn-bench-") as scratch:
        # As an AppMaster on 127.0.0.1: its own certificate, server and client.
        security = ClusterSecurity.generate(Path(scratch) / "security").for_host(
            "127.0.0.1", Path(scratch) / "process")
        rpc = asyncio.run(rpc_round_trips(security, args.calls, args.warmup, args.payload))
    cluster = cluster_figures(args.runs, args.rest_calls, args.poll_ms / 1000.0,
                              args.keep_work_dir)
    many = many_jobs_figures(args.rounds, args.runs, args.keep_work_dir)

    rows = table(rpc, cluster)
    print_report(rows, rpc, cluster)
    print(f"\n{JOBS_AT_ONCE} tiny jobs submitted at once ({many['rounds']} rounds, all finished), "
          f"submit -> task running: p50 {many['together']['p50_ms']:.1f} ms, p99 "
          f"{many['together']['p99_ms']:.1f} ms; one job alone ({many['alone']['runs']} runs): "
          f"p50 {many['alone']['p50_ms']:.1f} ms, p99 {many['alone']['p99_ms']:.1f} ms; "
          f"ratios {many['ratio_p50']:.2f}x (p50), {many['ratio_p99']:.2f}x (p99); all "
          f"{JOBS_AT_ONCE} running {statistics.median(many['together']['all_started_after_first_submit_ms']):.0f} ms "
          f"after the first submit (median of rounds)")
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "grpc": grpc.__version__},
        "rpc_round_trip": rpc,
        "cluster": cluster,
        "many_jobs_at_once": many,
        "table": [{"figure": n, "ms": v, "baseline": b, "baseline_ms": bv, "ratio": v / bv}
                  for n, v, b, bv in rows],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
