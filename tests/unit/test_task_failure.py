"""How a TaskExecutor reports a task's failure: the kind and the upstream partitions it
could not read travel as typed fields of UpdateTaskExecutionState, taken from the
exception; the cause text is for people and decides nothing."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import msgspec
import pytest

from flinkyarn.gateways.job_master import (FailureKind, PartitionLocation,
                                           PartitionLocationState, TaskState,
                                           UpdateTaskExecutionState)
from flinkyarn.gateways.task_executor import ConsumedPartition
from flinkyarn.ids import IntermediateResultPartitionID
from flinkyarn.jobgraph import ResultPartitionType
from flinkyarn.rpc import codec
from flinkyarn.rpc.errors import MalformedMessage
from taskexecutor.network import (InputGate, LocalInputChannel, PartitionFailed,
                                  PartitionNotFound, ResultPartition, ResultPartitionID,
                                  ResultPartitionManager)
from taskexecutor.stream_task import OperatorError, StreamTask
from taskexecutor.task import TaskFailure
from taskexecutor.task_executor import task_execution_state

TASK, PARTITION = FailureKind.TASK, FailureKind.PARTITION


def pid(number: int) -> ResultPartitionID:
    return ResultPartitionID("job", "result", number)


def raised_from_reading(gate: InputGate) -> BaseException:
    """What iterating the gate raises, as the StreamTask's thread would see it."""
    with pytest.raises(Exception) as caught:
        for _ in gate:
            pass
    return caught.value


def test_a_failed_producer_read_through_the_gate_is_a_partition_failure_naming_it(tmp_path):
    manager = ResultPartitionManager()
    failing = ResultPartition(pid(1), "pipelined", 1, tmp_path, 1 << 20)
    manager.register(failing)
    gate = InputGate([LocalInputChannel(manager, pid(1), 0, 5)])
    threading.Timer(0.1, failing.fail, ("map (2/2) failed: ValueError: bad row",)).start()

    error = raised_from_reading(gate)
    failure = TaskFailure.of(error, task="reduce (1/1) #1")

    assert isinstance(error, PartitionFailed) and error.partition_id == pid(1)
    assert failure.kind is PARTITION
    assert failure.lost_partitions == (IntermediateResultPartitionID("result", 1),)
    assert failure.cause.startswith("PartitionFailed: ")


def test_a_partition_never_registered_is_a_partition_failure_naming_it():
    gate = InputGate([LocalInputChannel(ResultPartitionManager(), pid(7), 0, 0.2)])

    failure = TaskFailure.of(raised_from_reading(gate))

    assert failure.kind is PARTITION
    assert failure.lost_partitions == (IntermediateResultPartitionID("result", 7),)


def test_a_producer_the_job_master_reports_failed_is_a_partition_failure_naming_it():
    consumed = ConsumedPartition("result", "map", 3, ResultPartitionType.BLOCKING, 0, b"")
    task = SimpleNamespace(
        job_id="job", check_cancelled=lambda: None,
        locate=lambda result, number: PartitionLocation(
            PartitionLocationState.FAILED, error="producer map (4/4) is FAILED: boom"),
        environment=SimpleNamespace(network=SimpleNamespace(partition_request_timeout=5.0)))
    stream_task = StreamTask.__new__(StreamTask)
    stream_task.task, stream_task.env = task, task.environment

    with pytest.raises(PartitionFailed) as caught:
        stream_task._channel(consumed)
    failure = TaskFailure.of(caught.value)

    assert failure.kind is PARTITION
    assert failure.lost_partitions == (IntermediateResultPartitionID("result", 3),)


def test_a_user_error_is_the_tasks_own_even_when_its_text_reads_like_a_partition_error():
    error = ValueError("PartitionFailed: subpartition 0 of result partition result#1 of job "
                       "job: the producer's TaskExecutor at te:1 is unreachable")

    failure = TaskFailure.of(error)

    assert failure.kind is TASK and failure.lost_partitions == ()
    assert "unreachable" in failure.cause


def test_a_partition_error_an_error_was_raised_from_counts_and_one_without_an_id_names_none():
    try:
        try:
            raise PartitionNotFound("not registered", pid(2))
        except PartitionNotFound as error:
            raise OperatorError("operator 'join': PartitionNotFound: not registered") from error
    except OperatorError as wrapped:
        assert TaskFailure.of(wrapped).lost_partitions == (
            IntermediateResultPartitionID("result", 2),)

    assert TaskFailure.of(PartitionFailed("reading failed")) == TaskFailure(
        "PartitionFailed: reading failed", PARTITION, ())


def test_the_report_carries_kind_and_lost_partitions_as_fields_readable_on_the_wire():
    failure = TaskFailure("PartitionFailed: gone", PARTITION,
                          (IntermediateResultPartitionID("result", 1),))

    update = task_execution_state("jm", "attempt", TaskState.FAILED, failure)
    wire = codec.encode(update)

    assert codec.decode(wire, UpdateTaskExecutionState) == update
    as_sent = msgspec.msgpack.decode(wire)
    assert (as_sent["failure_kind"], as_sent["lost_partitions"]) == (
        "partition", [{"result_id": "result", "partition_number": 1}])
    assert task_execution_state("jm", "attempt", TaskState.RUNNING, None) == \
        UpdateTaskExecutionState("jm", "attempt", TaskState.RUNNING)


def test_an_old_sender_without_the_fields_still_decodes_and_an_unknown_kind_does_not():
    old = msgspec.msgpack.encode({"job_master_id": "jm", "attempt_id": "a",
                                  "state": "FAILED", "error": "boom"})
    update = codec.decode(old, UpdateTaskExecutionState)
    assert (update.failure_kind, update.lost_partitions) == (TASK, [])

    unknown = msgspec.msgpack.encode({"job_master_id": "jm", "attempt_id": "a",
                                      "state": "FAILED", "failure_kind": "cosmic-ray"})
    with pytest.raises(MalformedMessage, match="failure_kind"):
        codec.decode(unknown, UpdateTaskExecutionState)
