"""The AppMaster process: one RpcService hosting the ResourceManager, the Dispatcher
and the JobMasters it starts, plus the REST API, all on one asyncio loop.

Once serving, it writes its addresses (`ClusterInfo`, JSON) to the info file the
client waits for. It stops on SIGTERM/SIGINT or a REST shutdown: running jobs'
JobMasters stop, the driver stops every TaskExecutor it started, then the servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import msgspec

from flinkyarn import options
from flinkyarn.configuration import Configuration
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.rpc.service import RpcService
from yarn_am.dispatcher import Dispatcher
from yarn_am.jobmaster.job_master import JobMasterConfig
from yarn_am.resourcemanager.driver import ResourceManagerDriver
from yarn_am.resourcemanager.resource_manager import ResourceManager, ResourceManagerConfig
from yarn_am.rest import RestServer

log = logging.getLogger(__name__)


class ClusterInfo(msgspec.Struct, frozen=True):
    rest_address: str
    rpc_address: str
    pid: int


async def run_appmaster(conf: Configuration, security: ClusterSecurity,
                        driver: ResourceManagerDriver, info_file: Path | None = None) -> None:
    rpc = RpcService(security, host=conf.get(options.JOB_MANAGER_RPC_ADDRESS),
                     port=conf.get(options.JOB_MANAGER_RPC_PORT),
                     max_message_size=conf.get(options.RPC_MAX_MESSAGE_SIZE),
                     ask_timeout=conf.get(options.RPC_ASK_TIMEOUT))
    rpc_address = await rpc.start()
    resource_manager = ResourceManager(rpc, ResourceManagerConfig.from_configuration(conf), driver)
    dispatcher = Dispatcher(rpc, resource_manager, JobMasterConfig.from_configuration(conf))
    stopping = asyncio.Event()
    rest = RestServer(dispatcher, security, conf.get(options.REST_ADDRESS),
                      conf.get(options.REST_PORT), conf.get(options.RPC_MAX_MESSAGE_SIZE),
                      shutdown=stopping.set)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        async with asyncio.TaskGroup() as group:
            rm_task = group.create_task(resource_manager.run())
            dispatcher_task = group.create_task(dispatcher.run())
            await resource_manager.running.wait()
            await dispatcher.running.wait()
            rest_address = await rest.start()
            log.info("AppMaster serving: REST %s, RPC %s", rest_address, rpc_address)
            if info_file is not None:
                _write_atomically(info_file, msgspec.json.encode(
                    ClusterInfo(rest_address, rpc_address, os.getpid())))
            await stopping.wait()
            log.info("AppMaster shutting down")
            await rest.stop()
            dispatcher.stop()
            await dispatcher_task
            resource_manager.stop()
            await rm_task
    finally:
        await rest.stop()
        await rpc.stop(grace=0.5)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)
