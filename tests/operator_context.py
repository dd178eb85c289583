"""A stand-in OperatorContext (flinkyarn/pipeline/operator.py) for testing connectors
outside a TaskExecutor."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeContext:
    subtask_index: int = 0
    parallelism: int = 1
    attempt_number: int = 0
    batch_size: int = 1000
    tmp_dir: str = "/tmp"
    checkpointing: bool = False
    job_id: str = "job"
    task_name: str = "test task"

    def is_cancelled(self) -> bool:
        return False

    def spark(self):
        raise AssertionError("file connectors do not use Spark")
