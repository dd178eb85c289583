"""Figures for the data plane (issue 4): remote exchange throughput between two processes
on loopback, 1 MiB batches, as a ratio to a bare Arrow Flight DoGet measured in the same run.

Three processes: this one is the consumer; a "TaskExecutor-like" producer process holds
a ResultPartitionManager and a DataServer (mutual TLS with a cluster's certificates,
ClusterSecurity.generate); a bare server process is a plain `pyarrow.flight` server
with the same TLS set-up (server certificate, client certificates required, the same
authority). Both producers send the same batch: by default one int64 column of 131072
rows, exactly 1 MiB (`--columns mixed`: an int64 and a string column, ~1 MiB).

Measured, each run moving `--batches` batches (default 256, i.e. 256 MiB):

    bare DoGet           baseline: the bare server answers DoGet with a RecordBatchStream
                         of a table built once (N references to the one batch; Flight
                         serializes it in C++); a plain FlightClient (default gRPC options)
                         iterates the reader.
    pipelined            ours: a pipelined ResultPartition (bound: the configured
                         taskmanager.network.subpartition.max-buffered-bytes) into which a
                         producer thread emits the N batches, then finish(); read through a
                         RemoteInputChannel from the DataClientPool. Timed from just before
                         the producer is told to start emitting (so before the first request)
                         to end of partition.
    blocking             ours: a blocking partition, written (spilled to an Arrow IPC file)
                         and finished before the clock starts; then read like pipelined, from
                         the first request to end of partition. The file is in the page cache.
    gate, 1 channel      pipelined, read through an InputGate of the one RemoteInputChannel
                         (its reader thread and bounded queue).
    gate, 2 channels     a pipelined partition of two subpartitions, the producer thread
                         emitting to them alternately (N in all); an InputGate of two
                         RemoteInputChannels (one gRPC connection, two streams).
  and, to say where a gap comes from (not baselines):
    bare, pool client    the bare server, read through the DataClientPool's client: its
                         gRPC options (fixed 1 MiB HTTP/2 receive window, no BDP probe).
    bare, generator      the bare server answering with a GeneratorStream, a Python
                         generator yielding the batches (as the DataServer does), read
                         with the plain client and with the pool's client.

Throughput is payload (the batches' nbytes) per second, MiB/s. Every round runs each
variant once, in an order rotated from round to round, so drift and neighbours' load hit
all alike; the figure is the median over rounds, and the ratio is ours / bare of those
medians ("paired": the median over rounds of ours / bare within the round, which follows
the machine's load more closely). One untimed warm-up round first (connections, imports,
page cache).

These machines are shared and noisy (2 cores, and on loopback the producer, the consumer
and gRPC's threads share them): compare ratios between runs, not MiB/s, and never assert
on absolute figures.

usage: .venv/bin/python bench/data_plane.py [--rounds N] [--batches N] [--columns int64|mixed]
Writes bench/results/data_plane.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.rpc.security import ClusterSecurity
from taskexecutor.network import (DataClientPool, DataServer, InputGate, RemoteInputChannel,
                                  ResultPartition, ResultPartitionID, ResultPartitionManager)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "data_plane.json"
MIB = 1 << 20
JOB = "bench"
REQUEST_TIMEOUT = 30.0


def make_batch(columns: str) -> pa.RecordBatch:
    """The batch every producer sends, N times. int64: exactly 1 MiB. mixed: an int64
    column and a string column of 17-character values, 36864 rows, ~1.02 MiB."""
    if columns == "int64":
        return pa.record_batch({"i": pa.array(range(131072), pa.int64())})
    if columns == "mixed":
        rows = 36864
        return pa.record_batch({"i": pa.array(range(rows), pa.int64()),
                                "s": pa.array([f"word-{v:012d}" for v in range(rows)])})
    raise ValueError(f"unknown --columns {columns!r}: int64 or mixed")


def flight_client(security: ClusterSecurity, address: str) -> flight.FlightClient:
    """A plain FlightClient with the cluster's TLS files and gRPC's default options."""
    return flight.FlightClient(f"grpc+tls://{address}", tls_root_certs=security.ca,
                               cert_chain=security.cert, private_key=security.key)


# ====================================================== the producer process

class _Producer:
    """The TaskExecutor-like side: a ResultPartitionManager and a DataServer, driven by
    JSON commands on stdin, one JSON reply per command on stdout.

        register {result, type, subpartitions}   a new partition
        emit {result, batches}                   a thread emits the batches round-robin
                                                 over the subpartitions, then finish();
                                                 replies at once
        wait {result}                            joins that thread; replies its time
        release {result}
    """

    def __init__(self, security: ClusterSecurity, spill_dir: Path, columns: str,
                 max_buffered_bytes: int) -> None:
        self.batch = make_batch(columns)
        self.spill_dir = spill_dir
        self.bound = max_buffered_bytes
        self.manager = ResultPartitionManager()
        self.server = DataServer(self.manager, security, "127.0.0.1")
        self.partitions: dict[str, ResultPartition] = {}
        self.emitters: dict[str, tuple[threading.Thread, list]] = {}

    def handle(self, command: dict) -> dict:
        op, result = command["op"], command.get("result")
        if op == "register":
            partition = ResultPartition(ResultPartitionID(JOB, result, 0), command["type"],
                                        command["subpartitions"], self.spill_dir, self.bound)
            self.manager.register(partition)
            self.partitions[result] = partition
        elif op == "emit":
            outcome: list = []
            thread = threading.Thread(target=self._emit, name=f"emitter {result}",
                                      args=(self.partitions[result], command["batches"], outcome))
            self.emitters[result] = (thread, outcome)
            thread.start()
        elif op == "wait":
            thread, outcome = self.emitters.pop(result)
            thread.join()
            if isinstance(outcome[0], str):
                return {"error": outcome[0]}
            return {"ok": True, "emit_s": outcome[0]}
        elif op == "release":
            self.manager.release(ResultPartitionID(JOB, result, 0))
            self.partitions.pop(result, None)
        else:
            return {"error": f"unknown op {op!r}"}
        return {"ok": True}

    def _emit(self, partition: ResultPartition, batches: int, outcome: list) -> None:
        start = time.perf_counter()
        try:
            for i in range(batches):
                partition.emit(i % partition.num_subpartitions, self.batch)
            partition.finish()
            outcome.append(time.perf_counter() - start)
        except Exception as error:  # reported to the consumer by `wait`
            outcome.append(f"{type(error).__name__}: {error}")

    def run(self) -> None:
        self.server.serve()
        print(json.dumps({"address": self.server.address}), flush=True)
        try:
            for line in sys.stdin:
                try:
                    reply = self.handle(json.loads(line))
                except Exception as error:
                    reply = {"error": f"{type(error).__name__}: {error}"}
                print(json.dumps(reply), flush=True)
        finally:
            self.server.shutdown()


class _BareServer(flight.FlightServerBase):
    """The baseline: a plain Flight server, the same TLS set-up as the DataServer. A
    ticket is JSON {"stream": "table" | "generator", "batches": N}."""

    def __init__(self, security: ClusterSecurity, columns: str) -> None:
        super().__init__("grpc+tls://127.0.0.1:0",
                         tls_certificates=[flight.CertKeyPair(security.cert, security.key)],
                         verify_client=True, root_certificates=security.ca)
        self.batch = make_batch(columns)
        self._tables: dict[int, pa.Table] = {}

    def do_get(self, context, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        batches = request["batches"]
        if request["stream"] == "generator":
            return flight.GeneratorStream(self.batch.schema,
                                          (self.batch for _ in range(batches)))
        table = self._tables.get(batches)
        if table is None:  # built once, before the first timed run (the warm-up)
            table = self._tables[batches] = pa.Table.from_batches([self.batch] * batches)
        return flight.RecordBatchStream(table)

    def run(self) -> None:
        print(json.dumps({"address": f"127.0.0.1:{self.port}"}), flush=True)
        threading.Thread(target=self.serve, daemon=True, name="bare flight server").start()
        sys.stdin.read()  # until the consumer closes our stdin
        self.shutdown()


class ChildProcess:
    """One of the two server processes: this very file with --serve."""

    def __init__(self, role: str, security: ClusterSecurity, spill_dir: Path, columns: str,
                 max_buffered_bytes: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", role, "--security-dir", str(security.directory),
             "--spill-dir", str(spill_dir), "--columns", columns,
             "--max-buffered-bytes", str(max_buffered_bytes)],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {role} process exited with code {self.process.wait()}")
        self.address = json.loads(line)["address"]

    def send(self, op: str, **arguments) -> dict:
        self.process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        if "error" in reply:
            raise RuntimeError(f"producer: {op} failed: {reply['error']}")
        return reply

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ========================================================== the consumer side

class Run:
    """One timed run: seconds, and what arrived (checked against what was sent)."""

    def __init__(self, seconds: float, batches: int, rows: int, nbytes: int) -> None:
        self.seconds, self.batches, self.rows, self.nbytes = seconds, batches, rows, nbytes

    @property
    def mib_per_s(self) -> float:
        return self.nbytes / MIB / self.seconds


class Bench:
    """The consumer: one method per variant, each one timed run of `batches` batches.
    Called from this process's main thread only; the gate variants read in its threads."""

    def __init__(self, security: ClusterSecurity, producer: ChildProcess, bare: ChildProcess,
                 batch: pa.RecordBatch, batches: int) -> None:
        self.security = security
        self.producer = producer
        self.bare_server = bare
        self.batch = batch
        self.batches = batches
        self.pool = DataClientPool(security)
        self.plain = flight_client(security, bare.address)
        self._results = 0

    def close(self) -> None:
        self.plain.close()
        self.pool.close()

    def _check(self, name: str, run: Run, expected_batches: int) -> Run:
        if run.rows != expected_batches * self.batch.num_rows or run.nbytes != \
                expected_batches * self.batch.nbytes:
            raise AssertionError(f"{name}: got {run.rows} rows / {run.nbytes} bytes, sent "
                                 f"{expected_batches} batches of {self.batch.num_rows} rows")
        return run

    # ---------------------------------------------------------------- baselines

    def bare(self, stream: str = "table", client: flight.FlightClient | None = None) -> Run:
        ticket = flight.Ticket(json.dumps({"stream": stream, "batches": self.batches}).encode())
        client = client or self.plain
        batches = rows = nbytes = 0
        start = time.perf_counter()
        reader = client.do_get(ticket)
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            batches += 1
            rows += chunk.data.num_rows
            nbytes += chunk.data.nbytes
        seconds = time.perf_counter() - start
        return self._check(f"bare {stream}", Run(seconds, batches, rows, nbytes), self.batches)

    def bare_pool_client(self) -> Run:
        return self.bare("table", self.pool.client(self.bare_server.address))

    def bare_generator(self) -> Run:
        return self.bare("generator")

    def bare_generator_pool_client(self) -> Run:
        return self.bare("generator", self.pool.client(self.bare_server.address))

    # --------------------------------------------------------------------- ours

    def _new_result(self) -> str:
        self._results += 1
        return f"result-{self._results}"

    def _channel(self, result: str, subpartition: int = 0) -> RemoteInputChannel:
        address = self.producer.address
        return RemoteInputChannel(self.pool, lambda: address, ResultPartitionID(JOB, result, 0),
                                  subpartition, REQUEST_TIMEOUT)

    def pipelined(self, channels: int = 1, gate: bool = False) -> Run:
        result = self._new_result()
        self.producer.send("register", result=result, type="pipelined", subpartitions=channels)
        batches = rows = nbytes = 0
        start = time.perf_counter()
        self.producer.send("emit", result=result, batches=self.batches)
        if gate:
            with InputGate([self._channel(result, i) for i in range(channels)]) as input_gate:
                for _, batch in input_gate:
                    batches += 1
                    rows += batch.num_rows
                    nbytes += batch.nbytes
        else:
            for batch in self._channel(result).read():
                batches += 1
                rows += batch.num_rows
                nbytes += batch.nbytes
        seconds = time.perf_counter() - start
        self.producer.send("wait", result=result)
        self.producer.send("release", result=result)
        name = f"gate of {channels}" if gate else "pipelined"
        return self._check(name, Run(seconds, batches, rows, nbytes), self.batches)

    def gate_one(self) -> Run:
        return self.pipelined(1, gate=True)

    def gate_two(self) -> Run:
        return self.pipelined(2, gate=True)

    def blocking(self) -> Run:
        result = self._new_result()
        self.producer.send("register", result=result, type="blocking", subpartitions=1)
        self.producer.send("emit", result=result, batches=self.batches)
        self.producer.send("wait", result=result)  # spilled and finished: readable
        batches = rows = nbytes = 0
        start = time.perf_counter()
        for batch in self._channel(result).read():
            batches += 1
            rows += batch.num_rows
            nbytes += batch.nbytes
        seconds = time.perf_counter() - start
        self.producer.send("release", result=result)
        return self._check("blocking", Run(seconds, batches, rows, nbytes), self.batches)


VARIANTS = [  # (key, label, is the baseline)
    ("bare", "bare DoGet (RecordBatchStream, plain client)"),
    ("pipelined", "pipelined partition -> RemoteInputChannel"),
    ("blocking", "blocking partition (spilled) -> RemoteInputChannel"),
    ("gate_1", "pipelined -> InputGate, 1 remote channel"),
    ("gate_2", "pipelined, 2 subpartitions -> InputGate, 2 channels"),
    ("bare_pool_client", "bare DoGet, read with the DataClientPool's client"),
    ("bare_generator", "bare DoGet, Python GeneratorStream"),
    ("bare_generator_pool_client", "bare DoGet, GeneratorStream, DataClientPool's client"),
]


def measure(bench: Bench, rounds: int) -> dict[str, list[Run]]:
    calls = {"bare": bench.bare, "pipelined": bench.pipelined, "blocking": bench.blocking,
             "gate_1": bench.gate_one, "gate_2": bench.gate_two,
             "bare_pool_client": bench.bare_pool_client, "bare_generator": bench.bare_generator,
             "bare_generator_pool_client": bench.bare_generator_pool_client}
    for call in calls.values():  # warm-up, untimed
        call()
    runs: dict[str, list[Run]] = {key: [] for key in calls}
    keys = list(calls)
    for round_ in range(rounds):
        shift = round_ % len(keys)
        order = keys[shift:] + keys[:shift]
        if round_ % 2:
            order.reverse()
        for key in order:
            gc.collect()
            runs[key].append(calls[key]())
        print(f"round {round_ + 1}/{rounds}: " + ", ".join(
            f"{key} {runs[key][-1].mib_per_s:.0f}" for key in keys) + " MiB/s",
            file=sys.stderr, flush=True)
    return runs


def summarize(runs: dict[str, list[Run]]) -> dict:
    bare_runs = [r.mib_per_s for r in runs["bare"]]
    bare = statistics.median(bare_runs)
    out = {}
    for key, label in VARIANTS:
        values = [r.mib_per_s for r in runs[key]]
        median = statistics.median(values)
        out[key] = {"label": label, "median_mib_s": median, "min_mib_s": min(values),
                    "max_mib_s": max(values), "ratio_to_bare": median / bare,
                    "paired_ratio_median": statistics.median(
                        v / b for v, b in zip(values, bare_runs)),
                    "runs_mib_s": values,
                    "runs_s": [r.seconds for r in runs[key]]}
    return out


def print_report(figures: dict, batch: pa.RecordBatch, batches: int, rounds: int,
                 bound: int) -> None:
    print(f"{'figure':56} {'MiB/s':>8} {'min':>7} {'max':>7}   {'ratio to bare':>13} "
          f"{'paired':>7}")
    for key, _ in VARIANTS:
        if key == "bare_pool_client":
            print("where a gap comes from:")
        f = figures[key]
        print(f"{f['label']:56} {f['median_mib_s']:8.0f} {f['min_mib_s']:7.0f} "
              f"{f['max_mib_s']:7.0f}   {f['ratio_to_bare']:12.2f}x "
              f"{f['paired_ratio_median']:6.2f}x")
    gate1, gate2, pipelined = figures["gate_1"], figures["gate_2"], figures["pipelined"]
    same_client = figures["bare_pool_client"]["median_mib_s"]
    print(f"\nwith the same (pool's) client on both sides: pipelined "
          f"{pipelined['median_mib_s'] / same_client:.2f}x, blocking "
          f"{figures['blocking']['median_mib_s'] / same_client:.2f}x of the bare DoGet")
    print(f"gate overhead: 1 channel {gate1['median_mib_s'] / pipelined['median_mib_s']:.2f}x "
          f"of the bare channel, 2 channels {gate2['median_mib_s'] / gate1['median_mib_s']:.2f}x "
          f"of 1 channel")
    print(f"{batches} batches of {batch.nbytes / MIB:.3f} MiB ({batch.num_rows} rows: "
          f"{', '.join(f'{f.name} {f.type}' for f in batch.schema)}) per run; {rounds} rounds "
          f"+ 1 warm-up; medians; loopback, mutual TLS, producer and bare server in processes "
          f"of their own; pipelined bound {bound / MIB:g} MiB")


def serve(args: argparse.Namespace) -> None:
    # Each server process issues its own certificate for 127.0.0.1, as a TaskExecutor
    # does for its host, next to the spill folder in the bench's scratch folder.
    security = ClusterSecurity.load(Path(args.security_dir)).for_host(
        "127.0.0.1", Path(args.spill_dir).parent / f"{args.serve}-security")
    if args.serve == "producer":
        _Producer(security, Path(args.spill_dir), args.columns, args.max_buffered_bytes).run()
    else:
        _BareServer(security, args.columns).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="timed rounds (default 11)")
    parser.add_argument("--batches", type=int, default=256,
                        help="batches per run, ~1 MiB each (default 256)")
    parser.add_argument("--columns", choices=("int64", "mixed"), default="int64",
                        help="int64: one int64 column, 131072 rows (default); mixed: int64 "
                             "and string columns")
    parser.add_argument("--serve", choices=("producer", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--security-dir", help=argparse.SUPPRESS)
    parser.add_argument("--spill-dir", help=argparse.SUPPRESS)
    parser.add_argument("--max-buffered-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return

    bound = Configuration.load().get(options.SUBPARTITION_MAX_BUFFERED_BYTES)
    batch = make_batch(args.columns)
    with tempfile.TemporaryDirectory(prefix="flinkyarn-bench-") as scratch:
        security = ClusterSecurity.generate(Path(scratch) / "security")
        spill = Path(scratch) / "spill"
        producer = ChildProcess("producer", security, spill, args.columns, bound)
        bare = ChildProcess("bare", security, spill, args.columns, bound)
        bench = Bench(security, producer, bare, batch, args.batches)
        try:
            runs = measure(bench, args.rounds)
        finally:
            bench.close()
            producer.stop()
            bare.stop()

    figures = summarize(runs)
    print_report(figures, batch, args.batches, args.rounds, bound)
    results = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "pyarrow": pa.__version__, "load_average": os.getloadavg()},
        "batch": {"columns": args.columns, "rows": batch.num_rows, "bytes": batch.nbytes,
                  "schema": str(batch.schema)},
        "batches_per_run": args.batches,
        "rounds": args.rounds,
        "pipelined_bound_bytes": bound,
        "figures": figures,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
