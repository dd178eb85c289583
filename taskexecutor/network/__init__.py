"""The TaskExecutor's data plane: result partitions written through partitioners, read
through input gates, locally or over Arrow Flight between TaskExecutors.

    partitioner   which subpartitions a batch (or each row) goes to
    partition     ResultPartition (pipelined / blocking) and the ResultPartitionManager
    subpartition  the per-consumer queues and files, their readers, the stream's events
                  (END_OF_PARTITION, CheckpointBarrier)
    flight        DataServer (Flight DoGet with mutual TLS) and DataClientPool
    wire          tickets and errors as they travel over Flight
    input_gate    Local/RemoteInputChannel and the InputGate reading them all at once,
                  aligning barriers
    errors        PartitionNotFound, PartitionNotReady, PartitionFailed, PartitionReleased
"""

from flinkyarn.key_groups import hash_rows
from taskexecutor.network.errors import (PartitionException, PartitionFailed, PartitionNotFound,
                                         PartitionNotReady, PartitionReleased)
from taskexecutor.network.flight import DataClientPool, DataServer
from taskexecutor.network.input_gate import (CheckpointAborted, InputChannel, InputGate,
                                             LocalInputChannel, RemoteInputChannel)
from taskexecutor.network.partition import (ResultPartition, ResultPartitionID,
                                            ResultPartitionManager)
from taskexecutor.network.partitioner import Partitioner, make_partitioner
from taskexecutor.network.subpartition import (END_OF_PARTITION, CheckpointBarrier,
                                               SubpartitionReader)

__all__ = [
    "CheckpointAborted", "CheckpointBarrier", "DataClientPool", "DataServer",
    "END_OF_PARTITION", "InputChannel", "InputGate",
    "LocalInputChannel", "PartitionException", "PartitionFailed", "PartitionNotFound",
    "PartitionNotReady", "PartitionReleased", "Partitioner", "RemoteInputChannel",
    "ResultPartition", "ResultPartitionID", "ResultPartitionManager", "SubpartitionReader",
    "hash_rows", "make_partitioner",
]
