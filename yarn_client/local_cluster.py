"""The `local` target: an AppMaster as a local process, whose ResourceManager starts
TaskExecutors as local processes. Used by `flinkyarn run -t local` and by pipelines run
with plain `python`.

Everything the cluster starts is in one process session (the AppMaster leads it and
its TaskExecutors die with it), so `stop()` leaves nothing running, also after Ctrl-C;
and the AppMaster watches this process (yarn_am/__main__.py), so a client killed
outright leaves nothing running or on disk either.

Everything it writes is in its work dir: logs, credentials, and the scratch space of
its processes (`scratch_dir`: their TMPDIR, hence their scratch root unless io.tmp.dirs
is set; flinkyarn/scratch.py). `stop()` removes the scratch space, and the whole work
dir when the cluster made it, also what a killed TaskExecutor left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

from flinkyarn import options, retry
from flinkyarn.configuration import Configuration
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.scratch import LOCAL_DIRS_ENV, TMPDIR_ENV
from yarn_client.rest_client import RestClient, RestError


class ClusterStartError(RuntimeError):
    pass


class LocalCluster:
    def __init__(self, conf: Configuration, work_dir: Path | None = None,
                 keep_work_dir: bool = False, start_workers: int = 0) -> None:
        """`start_workers` TaskExecutors start with the AppMaster (for a cluster started
        for a job that is about to come); the others when jobs need slots."""
        options.check_cluster_options(conf)  # ConfigurationError before anything is made
        self.conf = conf
        self.start_workers = start_workers
        self._own_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="flinkyarn-local-"))
        self._keep = keep_work_dir
        self.process: subprocess.Popen | None = None
        self._lifeline: int | None = None  # the write end of the AppMaster's --client-pipe
        self.security: ClusterSecurity | None = None
        self.rest: RestClient | None = None
        self.rpc_address: str | None = None
        self.dashboard_url: str | None = None

    @property
    def scratch_dir(self) -> Path:
        return self.work_dir / "tmp"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "appmaster.log"

    def start(self, timeout: float = 60.0) -> RestClient:
        self.security = ClusterSecurity.generate(self.work_dir / "security")
        info = self.work_dir / "cluster.json"
        command = [sys.executable, "-m", "yarn_am", "--security-dir", str(self.security.directory),
                   "--work-dir", str(self.work_dir), "--info-file", str(info)]
        for key, value in self.conf.raw().items():
            command += ["-D", f"{key}={value}"]
        # The AppMaster's watchdog on this process: EOF on the pipe, however we end.
        watched, self._lifeline = os.pipe()
        command += ["--client-pipe", str(watched), "--start-workers", str(self.start_workers)]
        if not self._keep:
            command += ["--orphan-removes",
                        str(self.work_dir if self._own_dir else self.scratch_dir)]
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        # Not the client's LOCAL_DIRS (were it in a YARN container): they outlive stop().
        environment = {k: v for k, v in os.environ.items() if k != LOCAL_DIRS_ENV}
        environment[TMPDIR_ENV] = str(self.scratch_dir)
        try:
            with open(self.log_file, "ab") as log:
                process = self.process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, env=environment, pass_fds=(watched,))
        finally:
            os.close(watched)
        def started() -> bool:
            if info.exists():
                return True
            if process.poll() is not None:
                raise ClusterStartError(f"the local AppMaster exited with code "
                                        f"{process.returncode}:\n{self.log_tail()}")
            return False

        try:
            retry.poll_until(started, bool, pauses=retry.Backoff.fixed(0.05),
                             deadline=retry.Deadline(timeout))
        except retry.GaveUp:
            self.stop()
            raise ClusterStartError(f"the local AppMaster did not start within {timeout:g} s:"
                                    f"\n{self.log_tail()}") from None
        cluster = msgspec.json.decode(info.read_bytes())
        self.rpc_address = cluster["rpc_address"]
        self.dashboard_url = cluster["dashboard_url"]
        self.rest = RestClient(cluster["rest_address"], self.security,
                               timeout=self.conf.get(options.CLIENT_TIMEOUT))
        return self.rest

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def taskexecutor_logs(self) -> list[Path]:
        return sorted((self.work_dir / "logs").glob("taskexecutor-*.log"))

    def stop(self, timeout: float = 15.0) -> None:
        """Asks the AppMaster to shut down, makes sure its whole session is gone, then
        removes the scratch space, or the whole work dir if the cluster made it (neither
        with keep_work_dir). Idempotent; also for a cluster that never started."""
        if self.process is not None:
            self._stop_processes(self.process, timeout)
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if not self._keep:
            shutil.rmtree(self.work_dir if self._own_dir else self.scratch_dir, ignore_errors=True)

    def _stop_processes(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        if process.poll() is None and self.rest is not None:
            try:
                self.rest.shutdown_cluster()
            except RestError:
                process.send_signal(signal.SIGTERM)
        elif process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # anything left in the session
        except ProcessLookupError:
            pass
        process.wait()
        self.process = None

    def __enter__(self) -> "LocalCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
