"""The TaskExecutor process: `python -m taskexecutor --resource-manager HOST:PORT ...`.

Exits 0 when stopped by SIGTERM, 1 when it could not register in time or failed, 3
after a fatal error (a cancelled task that would not stop: TaskExecutor.fail_fatally),
within FATAL_EXIT_DEADLINE even if closing its services hangs.
Its scratch files live in its own folders of the scratch roots (flinkyarn/scratch.py),
removed when it exits; its TMPDIR points into them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from flinkyarn import lifeline, options, prometheus
from flinkyarn.configuration import Configuration, ConfigurationError, parse_dynamic_properties
from flinkyarn.rpc.security import ClusterSecurity
from flinkyarn.rpc.service import OwnStopCancellations, RpcService
from flinkyarn.scratch import ProcessScratch, process_scratch
from taskexecutor.environment import NetworkConfig, TaskEnvironment
from taskexecutor.task_executor import RegistrationTimeout, TaskExecutor, TaskExecutorConfig

log = logging.getLogger("taskexecutor")

FATAL_EXIT_CODE = 3
FATAL_EXIT_DEADLINE = 10.0


def build_environment(resource_id: str, conf: Configuration, security: ClusterSecurity,
                      scratch: ProcessScratch) -> TaskEnvironment:
    """The data plane and Spark of this TaskExecutor, their files in `scratch`; the
    Flight server starts serving."""
    from taskexecutor.network.flight import DataClientPool, DataServer
    from taskexecutor.network.partition import ResultPartitionManager
    from taskexecutor.spark.bridge import SparkSessionProvider
    from taskexecutor.spark.warm_pool import WarmDrivers

    manager = ResultPartitionManager()
    server = DataServer(manager, security, conf.get(options.TASK_MANAGER_HOST),
                        conf.get(options.TASK_MANAGER_DATA_PORT))
    server.serve()
    return TaskEnvironment(
        resource_id=resource_id, data_address=server.address, partition_manager=manager,
        clients=DataClientPool(security),
        spark=SparkSessionProvider.from_configuration(conf, scratch),
        tmp_dir=scratch.root,
        network=NetworkConfig.from_configuration(conf),
        data_server=server, conf=conf, warm_drivers=WarmDrivers(conf, scratch.root))


def resource_manager_address(argument: str) -> str:
    """host:port as given, or, for `skein-kv:KEY`, the address the AppMaster put under
    KEY in its skein key-value store (in a YARN container)."""
    if not argument.startswith("skein-kv:"):
        return argument
    import skein  # only where YARN is spoken

    key = argument.split(":", 1)[1]
    app = skein.ApplicationClient.from_current()
    value = app.kv.wait(key)
    return value.decode() if isinstance(value, bytes) else value


async def serve(args: argparse.Namespace, conf: Configuration,
                scratch: ProcessScratch) -> str | None:
    """Runs the TaskExecutor until it stops; its fatal error, if that is why."""
    # The TaskExecutors' certificate (role taskexecutor, named TASKEXECUTOR_NAME): no
    # authority key here to issue one for its host, nor anything of the client's.
    security = ClusterSecurity.load(Path(args.security_dir))
    args.resource_manager = await asyncio.to_thread(resource_manager_address, args.resource_manager)
    rpc = RpcService(security, host=conf.get(options.TASK_MANAGER_HOST),
                     port=conf.get(options.TASK_MANAGER_RPC_PORT),
                     max_message_size=conf.get(options.RPC_MAX_MESSAGE_SIZE),
                     ask_timeout=conf.get(options.RPC_ASK_TIMEOUT))
    try:
        address = await rpc.start()
        environment = build_environment(args.resource_id, conf, security, scratch)
        if conf.get(options.TASK_MANAGER_SPARK_START_EAGERLY):
            environment.spark.start_in_background()
        try:
            executor = TaskExecutor(rpc, args.resource_id, args.resource_manager,
                                    TaskExecutorConfig.from_configuration(conf), environment)
            metrics = prometheus.start_for(conf, executor.metric_families,
                                           conf.get(options.TASK_MANAGER_HOST))
            if metrics is not None:
                executor.metrics_address = metrics.address
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, executor.stop)
            log.info("TaskExecutor %s serving on %s (data %s), %d slots, python %s",
                     args.resource_id, address, environment.data_address,
                     executor.config.num_slots, sys.executable)
            try:
                await executor.run()
            finally:
                if metrics is not None:
                    metrics.stop()
            if executor.fatal_error is not None:
                exit_at_the_latest(FATAL_EXIT_DEADLINE, FATAL_EXIT_CODE)
            return executor.fatal_error
        finally:
            # Closing Spark and the data server holds the loop for seconds: a call that
            # came in then would be cut off by its caller before its handler ran (grpc
            # logs that with a traceback). The server stops first.
            await rpc.stop(grace=0.5)
            environment.close()
    finally:
        await rpc.stop(grace=0.5)


def exit_at_the_latest(seconds: float, code: int) -> None:
    """After a fatal error, threads of the task that caused it may hold up the close of
    what they use: the process ends within `seconds` all the same."""
    import threading

    def end() -> None:
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taskexecutor")
    parser.add_argument("--resource-id", required=True)
    parser.add_argument("--resource-manager", required=True, help="host:port of the AppMaster's RPC")
    parser.add_argument("--security-dir", required=True)
    parser.add_argument("-D", dest="properties", action="append", default=[])
    parser.add_argument("--die-with-parent", type=int, metavar="PID",
                        help="exit when process PID (the one starting us) dies")
    parser.add_argument("--die-with-container", action="store_true",
                        help="exit when the container's launch processes end (on YARN)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s {args.resource_id} %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(OwnStopCancellations())
    try:
        conf = Configuration.from_raw(parse_dynamic_properties(args.properties))
    except ConfigurationError as error:
        log.error("%s", error)
        return 2
    if args.die_with_parent is not None:
        lifeline.die_with_parent(args.die_with_parent, "the AppMaster that started it")
    if args.die_with_container:
        lifeline.die_with(lifeline.ancestors(), "a launch process of this TaskExecutor's container")
    try:
        with process_scratch(conf, f"flinkyarn-{args.resource_id}-") as scratch:
            if asyncio.run(serve(args, conf, scratch)) is not None:
                return FATAL_EXIT_CODE
    except ExceptionGroup as group:
        timeouts = group.subgroup(RegistrationTimeout)
        if timeouts is None:
            raise
        log.error("%s", timeouts.exceptions[0])
        return 1
    return 0


if __name__ == "__main__":
    exit_code = main()
    # Everything is closed. Threads still blocked in user code or in a cancelled task's
    # reads (daemon threads, native Flight and gRPC threads) would only hold up the exit
    # in the interpreter's teardown, for as long as they take (seconds): leave at once.
    logging.shutdown()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(exit_code)
