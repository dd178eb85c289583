"""The control plane past this machine's size (issue 17): one AppMaster with 50, 200 and
500 registered TaskExecutors of 2 slots each, and a job that fills their slots (100, 400
and 1000 subtasks).

The AppMaster is the real one, a local cluster's (`python -m yarn_am`), at
`heartbeat.interval` 10 s and `heartbeat.timeout` 50 s (Flink's defaults). The
TaskExecutors are the real TaskExecutor endpoint (taskexecutor/task_executor.py), each
with its own gRPC server and the cluster's TaskExecutor certificate, speaking the real
RPC to the AppMaster over loopback; what is light about them is their process: a few
hundred of them share a process (SERVE_PER_PROCESS each) and have no data plane and no
Spark (their tasks need neither). They register as TaskExecutors started by anything
else would; the ResourceManager starts none of its own (the slots suffice).

Figures, at each size (the TaskExecutors grow from one size to the next):
- registration: from the serving processes' start to the ResourceManager listing all;
- the AppMaster's CPU share while idle with them registered: its process's CPU time
  (/proc/PID/stat) over IDLE_WINDOW seconds (several heartbeat intervals), per core;
  all of it is heartbeats (the ResourceManager's to each TaskExecutor, their answers);
- submit -> all RUNNING of a job of 2 subtasks per TaskExecutor (one vertex, each task
  holding its slot until cancelled), polled through the REST API every 0.2 s, and the
  AppMaster's CPU time in it (the rest is the TaskExecutors' processes, which here share
  the machine's cores with it); then the job is cancelled and every slot must come back
  free.
Growth is read from the ratios between sizes (linear: the ratio of the sizes); the goal
is that 500 TaskExecutors cost the AppMaster under 10% of one core.

These machines are shared and noisy (2 cores): compare ratios between sizes and runs.

usage: .venv/bin/python bench/control_plane_scale.py [--sizes 50,200,500] [--idle S]
Writes bench/results/control_plane_scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from flinkyarn.configuration import Configuration  # noqa: E402
from flinkyarn.job import JobBuilder  # noqa: E402
from flinkyarn.rpc.security import TASKEXECUTOR_DIR, ClusterSecurity  # noqa: E402
from yarn_client.local_cluster import LocalCluster  # noqa: E402

RESULTS = REPO / "bench" / "results" / "control_plane_scale.json"
SLOTS = 2
SERVE_PER_PROCESS = 100
IDLE_WINDOW = 30.0
SETTINGS = {
    "heartbeat.interval": "10 s",
    "heartbeat.timeout": "50 s",
    "taskmanager.numberOfTaskSlots": str(SLOTS),
    # The slots are the registered ones; nothing starts or releases TaskExecutors.
    "resourcemanager.taskmanager-timeout": "1 h",
    "resourcemanager.max-taskmanagers": "1",
    "slot.request.timeout": "10 min",
    "metrics.reporters": "",
}


# ============================================================ the TaskExecutors' side

def serve(security_dir: str, rm_address: str, first: int, count: int) -> None:
    """This process: `count` TaskExecutor endpoints, each with its own RPC server, until
    SIGTERM. Prints one line when all serve."""
    from flinkyarn.ids import ResourceID
    from flinkyarn.rpc.service import RpcService
    from taskexecutor.task_executor import TaskExecutor, TaskExecutorConfig

    conf = Configuration.load(overrides=SETTINGS)
    security = ClusterSecurity.load(Path(security_dir) / TASKEXECUTOR_DIR)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        services, executors, runs = [], [], []
        for number in range(first, first + count):
            rpc = RpcService(security, "127.0.0.1")
            await rpc.start()
            executor = TaskExecutor(rpc, ResourceID(f"light-{number}"), rm_address,
                                    TaskExecutorConfig.from_configuration(conf))
            services.append(rpc)
            executors.append(executor)
            runs.append(asyncio.create_task(executor.run()))
        print("serving", flush=True)
        await stop.wait()
        for executor in executors:
            executor.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        for rpc in services:
            await rpc.stop(grace=0)

    asyncio.run(main())


# ============================================================ the AppMaster's side

def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def appmaster_pid(cluster: LocalCluster) -> int:
    info = json.loads((cluster.work_dir / "cluster.json").read_text())
    return int(info["pid"])


def holds_until_cancelled(ctx) -> None:
    while True:
        ctx.sleep(3600)


def wait(condition, timeout: float, what: str, pause: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(pause)


def start_servers(cluster: LocalCluster, servers: list[subprocess.Popen], first: int,
                  count: int) -> None:
    """Processes serving TaskExecutors number first.. first+count-1, SERVE_PER_PROCESS
    each; returns once each serves."""
    assert cluster.security is not None and cluster.rpc_address is not None  # started
    for start in range(first, first + count, SERVE_PER_PROCESS):
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(cluster.security.directory),
             cluster.rpc_address, str(start), str(min(SERVE_PER_PROCESS, first + count - start))],
            stdout=subprocess.PIPE, text=True, cwd=REPO)
        servers.append(server)
        assert server.stdout is not None
        if server.stdout.readline().strip() != "serving":
            raise RuntimeError(f"a serving process exited with code {server.wait()}")


def measure_size(rest, pid: int, size: int, idle: float, registration: float) -> dict:
    """The idle CPU share and a job over every slot, with `size` TaskExecutors."""
    time.sleep(2.0)  # the registrations' own work done
    before, at = cpu_seconds(pid), time.monotonic()
    time.sleep(idle)
    share = (cpu_seconds(pid) - before) / (time.monotonic() - at)

    subtasks = SLOTS * size
    job = JobBuilder(f"bench: {subtasks} subtasks")
    job.add_vertex("hold", holds_until_cancelled, parallelism=subtasks)
    graph = job.build()
    cpu_before, submitted = cpu_seconds(pid), time.monotonic()
    job_id = rest.submit(graph)

    def all_running() -> bool:
        details = rest.job(job_id)
        if details.status in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"the job ended {details.status}: {details.failure_cause}")
        return details.vertices[0].state_counts.get("RUNNING", 0) == subtasks
    wait(all_running, 600, "job with every subtask RUNNING")
    running = time.monotonic() - submitted
    appmaster_cpu = cpu_seconds(pid) - cpu_before
    rest.cancel(job_id)
    wait(lambda: rest.job(job_id).status == "CANCELED", 300, "job canceled")
    wait(lambda: all(s.state == "free" for te in rest.overview().task_executors
                     for s in te.slots), 300, "every slot free")
    print(f"  {size:4} TaskExecutors: registered in {registration:6.1f} s; idle AppMaster "
          f"{100 * share:5.2f}% of a core; {subtasks:4} subtasks submit -> all RUNNING "
          f"{running:6.1f} s (AppMaster CPU {appmaster_cpu:.1f} s of it)", flush=True)
    return {"task_executors": size, "subtasks": subtasks,
            "registration_s": round(registration, 2),
            "idle_appmaster_cpu_share": round(share, 4),
            "submit_to_all_running_s": round(running, 2),
            "appmaster_cpu_in_it_s": round(appmaster_cpu, 2)}


def registered_at_least(rest, count: int) -> bool:
    return len(rest.overview().task_executors) >= count


def measure(sizes: list[int], idle: float) -> dict:
    conf = Configuration.load(overrides=SETTINGS)
    cluster = LocalCluster(conf)
    servers: list[subprocess.Popen] = []
    figures = []
    try:
        rest = cluster.start()
        pid = appmaster_pid(cluster)
        registered = 0
        for size in sizes:
            started = time.monotonic()
            start_servers(cluster, servers, registered, size - registered)
            registered = size
            wait(functools.partial(registered_at_least, rest, size), 300,
                 f"{size} TaskExecutors registered", pause=0.5)
            figures.append(measure_size(rest, pid, size, idle, time.monotonic() - started))
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        for server in servers:
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
        cluster.stop()
    return {"settings": SETTINGS, "idle_window_s": idle, "figures": figures}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,500",
                        help="TaskExecutor counts, ascending (default 50,200,500)")
    parser.add_argument("--idle", type=float, default=IDLE_WINDOW,
                        help=f"seconds of idle CPU measured at each size (default {IDLE_WINDOW:g})")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    result = measure(sizes, args.idle)
    figures = result["figures"]
    for smaller, larger in zip(figures, figures[1:]):
        scale = larger["task_executors"] / smaller["task_executors"]
        base = smaller["idle_appmaster_cpu_share"]
        cpu = f"x{larger['idle_appmaster_cpu_share'] / base:.2f}" if base else "n/a (none measured)"
        running = larger["submit_to_all_running_s"] / smaller["submit_to_all_running_s"]
        print(f"  {smaller['task_executors']} -> {larger['task_executors']} TaskExecutors "
              f"(x{scale:g}): idle CPU {cpu}, submit -> all RUNNING x{running:.2f}")
    result.update(date=time.strftime("%Y-%m-%d"), machine=platform.node(), cores=os.cpu_count())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
