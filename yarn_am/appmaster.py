"""The AppMaster: one RpcService hosting the ResourceManager, the Dispatcher and the
JobMasters it starts, plus the REST API (clients, mutual TLS) and the dashboard (read
only, plain HTTP, for the YARN web proxy), all on one asyncio loop.

`serve()` returns when `shutdown()` is called (SIGTERM/SIGINT, a REST shutdown, or the
per-job entrypoint after its job): running jobs' JobMasters stop, the driver stops
every TaskExecutor it started, then the servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
from pathlib import Path
from typing import Awaitable, Callable

import msgspec

from flinkyarn import options, prometheus
from flinkyarn.archive import JobArchive
from flinkyarn.configuration import Configuration
from flinkyarn.gateways import ACK
from flinkyarn.job_store import JobStore
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.rpc.service import RpcService
from yarn_am.delegation_tokens import DelegationTokenManager
from yarn_am.dispatcher import Dispatcher, metric_families
from yarn_am.resourcemanager.driver import ResourceManagerDriver
from yarn_am.resourcemanager.resource_manager import ResourceManager, ResourceManagerConfig
from yarn_am.rest import RestServer

log = logging.getLogger(__name__)


class ClusterInfo(msgspec.Struct, frozen=True):
    rest_address: str
    rpc_address: str
    dashboard_url: str
    pid: int


def appmaster_security(conf: Configuration, cluster: ClusterSecurity,
                       directory: Path) -> ClusterSecurity:
    """The AppMaster's own certificate, issued at its start into `directory` (its own
    folder), naming the hosts its RPC and REST endpoints bind and advertise."""
    return cluster.for_host(conf.get(options.JOB_MANAGER_RPC_ADDRESS), directory,
                            aliases=[conf.get(options.REST_ADDRESS)])


class AppMaster:
    def __init__(self, conf: Configuration, security: ClusterSecurity,
                 driver: ResourceManagerDriver, title: str = "flinkyarn",
                 delegation_tokens: DelegationTokenManager | None = None,
                 job_store: JobStore | None = None, attempt: int = 1,
                 archive: JobArchive | None = None, application_id: str = "",
                 cancel_token: str | None = None) -> None:
        """`job_store`: where an earlier attempt left its jobs (taken over before the
        REST API serves) and this one keeps its own (flinkyarn/job_store.py); `attempt`:
        the YARN application attempt this AppMaster is (its leader ids name it);
        `archive`: where ended jobs of application `application_id` are archived;
        `cancel_token`: what the dashboard's Cancel asks for (None: no Cancel)."""
        self.conf = conf
        self.job_store = job_store
        self.attempt = attempt
        self.archive, self.application_id = archive, application_id
        self.security = security
        self.driver = driver
        self.title = title
        self.delegation_tokens = delegation_tokens
        self.cancel_token = cancel_token
        self.info: ClusterInfo | None = None
        self.dispatcher: Dispatcher | None = None
        self._stopping = asyncio.Event()  # also when asked before serve() is up
        self.signalled: int | None = None  # the signal that stopped it, if one did

    def shutdown(self) -> None:
        self._stopping.set()

    def _on_signal(self, signum: int) -> None:
        self.signalled = signum
        self.shutdown()

    @staticmethod
    def _metric_families(dispatcher: Dispatcher, loop: asyncio.AbstractEventLoop
                         ) -> Callable[[], list]:
        """For the Prometheus endpoint's thread: the Dispatcher's state, read on its loop."""
        async def read() -> list:
            overview = await dispatcher.cluster_overview(ACK)
            jobs = [await dispatcher.job_details_of(job.job_id) for job in overview.jobs]
            return metric_families(jobs, overview)

        def families() -> list:
            return asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=10)
        return families

    async def serve(self, on_ready: Callable[["AppMaster"], Awaitable[None]] | None = None,
                    info_file: Path | None = None) -> None:
        from yarn_am.dashboard import Dashboard

        conf = self.conf
        raise_descriptor_limit()
        rpc = RpcService(self.security, host=conf.get(options.JOB_MANAGER_RPC_ADDRESS),
                         port=conf.get(options.JOB_MANAGER_RPC_PORT),
                         max_message_size=conf.get(options.RPC_MAX_MESSAGE_SIZE),
                         ask_timeout=conf.get(options.RPC_ASK_TIMEOUT))
        rpc_address = await rpc.start()
        resource_manager = ResourceManager(rpc, ResourceManagerConfig.from_configuration(conf),
                                           self.driver, attempt=self.attempt)
        tokens = self.delegation_tokens
        self.dispatcher = dispatcher = Dispatcher(
            rpc, resource_manager, conf, lambda: tokens.status if tokens is not None else None,
            job_store=self.job_store, attempt=self.attempt, archive=self.archive,
            application_id=self.application_id)
        resource_manager.job_leader_id = dispatcher.job_leader_id
        host = conf.get(options.REST_ADDRESS)
        rest = RestServer(dispatcher, self.security, host, conf.get(options.REST_PORT),
                          conf.get(options.RPC_MAX_MESSAGE_SIZE), shutdown=self.shutdown)
        # On loopback, whatever rest.address says: see yarn_am/dashboard.py.
        dashboard = Dashboard(dispatcher, title=self.title,
                              max_connections=conf.get(options.DASHBOARD_MAX_CONNECTIONS),
                              timeout=conf.get(options.DASHBOARD_TIMEOUT),
                              cancel_token=self.cancel_token)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            async with asyncio.TaskGroup() as group:
                rm_task = group.create_task(resource_manager.run())
                dispatcher_task = group.create_task(dispatcher.run())
                await resource_manager.running.wait()
                await dispatcher.running.wait()
                tokens_task = None
                if self.delegation_tokens is not None:
                    hand_over = resource_manager.hand_over_delegation_tokens
                    resource_manager.obtain_application_tokens = self.delegation_tokens.for_application
                    delay = await self.delegation_tokens.start(hand_over)
                    tokens_task = group.create_task(self.delegation_tokens.run(hand_over, delay))
                await dispatcher.recover()
                metrics = prometheus.start_for(conf, self._metric_families(dispatcher, loop),
                                               conf.get(options.JOB_MANAGER_RPC_ADDRESS))
                if metrics is not None:
                    dispatcher.metrics_address = metrics.address
                self.info = ClusterInfo(await rest.start(), rpc_address, await dashboard.start(),
                                        os.getpid())
                log.info("AppMaster serving: REST %s, RPC %s, dashboard %s",
                         self.info.rest_address, rpc_address, self.info.dashboard_url)
                if on_ready is not None:
                    await on_ready(self)
                if info_file is not None:
                    _write_atomically(info_file, msgspec.json.encode(self.info))
                await self._stopping.wait()
                log.info("AppMaster shutting down")
                if tokens_task is not None:
                    tokens_task.cancel()
                await rest.stop()
                if metrics is not None:
                    metrics.stop()
                dispatcher.stop()
                await dispatcher_task
                resource_manager.stop()
                await rm_task
        finally:
            await rest.stop()
            await dashboard.stop()
            await rpc.stop(grace=0.5)


def raise_descriptor_limit() -> None:
    """Lets this process open as many files as the system allows it (the hard limit): its
    descriptors serve RPC, REST, the dashboard and the TaskExecutors' connections at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, error)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)
