"""The local-process driver: each worker is a `python -m taskexecutor` child process.

Children ask for a parent-death signal (`--die-with-parent`), so they die with the
AppMaster even when it is killed outright; nothing of a local cluster outlives it.

`start_workers` TaskExecutors of the configured spec start with the AppMaster, as a
Flink MiniCluster starts its TaskManagers: a cluster started for a program's job (the
`local` target) does not make that job wait for a process start. `initialize` returns
them, so the ResourceManager counts them as requested.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from flinkyarn.configuration import format_memory
from flinkyarn.ids import new_id
from yarn_am.resourcemanager.driver import ResourceEventHandler, Spawn, WorkerLocation
from yarn_am.resourcemanager.slot_manager import WorkerSpec

log = logging.getLogger(__name__)

class LocalProcessDriver:
    def __init__(self, security_dir: Path, log_dir: Path, properties: dict[str, str],
                 stop_grace: float = 5.0, start_workers: tuple[WorkerSpec, ...] = ()) -> None:
        """`security_dir`: the TaskExecutors' files (security.TASKEXECUTOR_DIR of the
        client's), all that a TaskExecutor gets; `start_workers`: the workers to start
        with the AppMaster."""
        self._start_workers = start_workers
        self._security_dir = security_dir
        self._log_dir = log_dir
        self._properties = properties
        self._stop_grace = stop_grace
        self._processes: dict[str, asyncio.subprocess.Process] = {}
        self._released: set[str] = set()
        self._handler: ResourceEventHandler | None = None
        self._address = ""
        self._spawn: Spawn | None = None
        self._count = 0
        self._terminated = False

    async def initialize(self, handler: ResourceEventHandler, resource_manager_address: str,
                         spawn: Spawn) -> list[str]:
        self._handler, self._address, self._spawn = handler, resource_manager_address, spawn
        self._log_dir.mkdir(parents=True, exist_ok=True)
        return [self.request_worker(spec) for spec in self._start_workers]

    def request_worker(self, spec: WorkerSpec) -> str:
        self._count += 1
        worker_id = f"taskexecutor-{self._count}-{new_id()[:8]}"
        assert self._spawn is not None  # initialize() came first
        self._spawn(self._run(worker_id, spec), f"worker-{worker_id}")
        return worker_id

    def release_worker(self, worker_id: str, cause: str) -> None:
        process = self._processes.get(worker_id)
        if process is not None and process.returncode is None:
            log.info("stopping %s: %s", worker_id, cause)
            self._released.add(worker_id)
            process.terminate()

    def log_file(self, worker_id: str) -> Path:
        return self._log_dir / f"{worker_id}.log"

    def pid(self, worker_id: str) -> int | None:
        process = self._processes.get(worker_id)
        return process.pid if process is not None else None

    async def _run(self, worker_id: str, spec: WorkerSpec) -> None:
        assert self._handler is not None  # initialize() came first
        properties = dict(self._properties)
        properties.update({
            "taskmanager.numberOfTaskSlots": str(spec.num_slots),
            "taskmanager.cpu.cores": repr(spec.slot_profile.cpu_cores * spec.num_slots),
            "taskmanager.memory.process.size":
                format_memory(spec.slot_profile.memory_mb * spec.num_slots << 20),
        })
        command = [sys.executable, "-m", "taskexecutor", "--resource-id", worker_id,
                   "--resource-manager", self._address, "--security-dir", str(self._security_dir),
                   "--die-with-parent", str(os.getpid())]
        for key, value in properties.items():
            command += ["-D", f"{key}={value}"]
        with open(self.log_file(worker_id), "ab") as out:
            try:
                process = await asyncio.create_subprocess_exec(
                    *command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out)
            except OSError as error:
                self._handler.on_worker_terminated(worker_id, f"could not start: {error}")
                return
        self._processes[worker_id] = process
        self._handler.on_worker_started(worker_id)
        try:
            code = await process.wait()
        except asyncio.CancelledError:
            await self._stop(process)
            raise
        self._processes.pop(worker_id, None)
        if self._terminated:
            return
        if worker_id in self._released:
            self._released.discard(worker_id)
            cause = "released by the ResourceManager"
        else:
            cause = f"process exited with code {code}" if code >= 0 else \
                f"process killed by {signal.Signals(-code).name}"
        self._handler.on_worker_terminated(worker_id, cause)

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), self._stop_grace)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()

    async def explain_wait(self, worker_ids: list[str]) -> str | None:
        starting = [w for w in worker_ids if w in self._processes]
        return f"waiting for {len(starting)} TaskExecutor process(es) to start" if starting \
            else None

    def location(self, worker_id: str) -> WorkerLocation | None:
        """Local processes run on this host; their logs are files of the work folder,
        which no web page can link."""
        return WorkerLocation(host=socket.gethostname()) if worker_id in self._processes else None

    async def max_workers(self, spec: WorkerSpec) -> tuple[int, str] | None:
        return None  # resourcemanager.max-taskmanagers is the bound

    async def terminate(self) -> None:
        self._terminated = True
        processes = list(self._processes.values())
        self._released.update(self._processes)
        await asyncio.gather(*(self._stop(p) for p in processes))
