"""The in-process cluster harness of the unit tests (issue 13): real endpoints on one
loop, RPC through the real codec (tests/harness/network.py), a ManualClock that every
periodic task and timeout follows, tasks the test scripts (tasks.py), a fake skein
application for the YARN driver (fake_skein.py), and `gen_cluster` / `in_process_cluster`
to run a whole cluster in one test (cluster.py). `settle` (loop.py) makes assertions
exact: it runs the loop until nothing is ready to run."""

from tests.harness.cluster import (Cluster, InProcessDriver, TaskExecutorProcess, gen_cluster,
                                   in_process_cluster, job_graph)
from tests.harness.fake_skein import ContainerRequest, FakeContainer, FakeSkeinApp
from tests.harness.loop import BlockedCall, LoopExecutor, advance, settle
from tests.harness.network import InProcessNetwork, InProcessRpcService, Partition
from tests.harness.tasks import ScriptedTask, ScriptedTasks

__all__ = [
    "BlockedCall", "Cluster", "ContainerRequest", "FakeContainer", "FakeSkeinApp",
    "InProcessDriver", "InProcessNetwork", "InProcessRpcService", "LoopExecutor", "Partition",
    "ScriptedTask", "ScriptedTasks", "TaskExecutorProcess", "gen_cluster", "in_process_cluster",
    "advance", "job_graph", "settle",
]
