"""What the tasks of one TaskExecutor share: the data plane (result partitions, the
Arrow Flight server and its client pool) and the SparkSession provider. Built once by
the TaskExecutor process, handed to every task."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from flinkyarn import options
from flinkyarn.configuration import ConfigurationError
from flinkyarn.retry import Backoff

if TYPE_CHECKING:
    from flinkyarn.configuration import Configuration
    from taskexecutor.network.flight import DataClientPool, DataServer
    from taskexecutor.network.partition import ResultPartitionManager
    from taskexecutor.spark.bridge import SparkSessionProvider
    from taskexecutor.spark.warm_pool import WarmDrivers


@dataclass(frozen=True)
class NetworkConfig:
    max_buffered_bytes: int          # per pipelined subpartition (backpressure bound)
    partition_request_timeout: float
    batch_size: int
    # Between a consumer's requests for a partition not registered at its producer yet.
    request_backoff: Backoff

    @classmethod
    def from_configuration(cls, conf: "Configuration") -> NetworkConfig:
        initial = conf.get(options.NETWORK_REQUEST_BACKOFF_INITIAL)
        maximum = conf.get(options.NETWORK_REQUEST_BACKOFF_MAX)
        if maximum < initial:
            raise ConfigurationError(
                f"option {options.NETWORK_REQUEST_BACKOFF_MAX.key!r} ({maximum:g} s) must not "
                f"be less than {options.NETWORK_REQUEST_BACKOFF_INITIAL.key!r} ({initial:g} s)")
        return cls(conf.get(options.SUBPARTITION_MAX_BUFFERED_BYTES),
                   conf.get(options.PARTITION_REQUEST_TIMEOUT),
                   conf.get(options.PIPELINE_BATCH_SIZE), Backoff(initial, maximum))


@dataclass
class TaskEnvironment:
    resource_id: str
    data_address: str
    partition_manager: "ResultPartitionManager"
    clients: "DataClientPool"
    spark: "SparkSessionProvider"
    tmp_dir: Path
    network: NetworkConfig
    data_server: "DataServer | None" = None
    conf: "Configuration | None" = None   # the TaskExecutor's (PySpark drivers read it)
    # For task threads: delegation tokens of its own for a YARN application a task
    # submits (the AppMaster's answer; empty where the TaskExecutor's serve). Set by the
    # TaskExecutor once it runs.
    application_tokens: "Callable[[str], bytes] | None" = None
    # PySpark drivers started before their script (taskexecutor/spark/warm_pool.py).
    warm_drivers: "WarmDrivers | None" = None

    def close(self) -> None:
        """Stops Spark, warm drivers, the data server and the client pool; drops every
        partition."""
        if self.warm_drivers is not None:
            self.warm_drivers.close()
        self.partition_manager.release_all()
        self.spark.stop()
        if self.data_server is not None:
            self.data_server.shutdown()
        self.clients.close()
