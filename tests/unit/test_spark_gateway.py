"""How a TaskExecutor brings pyspark up beside its gRPC and task threads: the JVM starts
with no Python in the forked child (taskexecutor/spark/pyspark_patches.GatewayPopen), yet ignores
SIGINT as pyspark wants; pyspark is first imported by one thread at a time."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter: a fork handler that notes each child in which Python ran after
# the fork, then one child by pyspark's way (a preexec_fn) and one by GatewayPopen's.
PROBE = textwrap.dedent("""
    import os, signal, subprocess, sys
    from taskexecutor.spark.pyspark_patches import GatewayPopen

    os.register_at_fork(after_in_child=lambda: os.write(1, b"python ran in the child\\n"))
    ignores_sigint = [sys.executable, "-c",
                      "import os, signal; print(signal.getsignal(signal.SIGINT) "
                      "is signal.SIG_IGN, os.getpid())"]
    ignore = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    for kind in (subprocess.Popen, GatewayPopen):
        print(kind.__name__, flush=True)
        child = kind(ignores_sigint, preexec_fn=ignore, stdout=subprocess.PIPE, text=True)
        out, _ = child.communicate()
        print(out.strip() == f"True {child.pid}", flush=True)
""")


def test_the_spark_jvm_starts_without_python_in_the_child_and_ignores_sigint():
    lines = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           check=True, timeout=60).stdout.splitlines()
    # The probe sees pyspark's way (the control), and not GatewayPopen's: the preexec_fn
    # is dropped. Both children ignore SIGINT and are the program itself (its pid is the
    # JVM's, which the reaper watches), the shell having exec'd it.
    assert lines == ["Popen", "python ran in the child", "True",
                     "GatewayPopen", "True"], lines


# In a fresh interpreter: a finder that notes, at the first import of pyspark, whether the
# importing thread holds the TaskExecutor's lock for first imports and whether the Spark
# stage had asked for its session yet, and stops the import there (no JVM starts).
IMPORTS_PROBE = textwrap.dedent("""
    import sys
    from taskexecutor.task import IMPORTING
    seen, asked = [], []

    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "pyspark":
                seen.append((IMPORTING._is_owned(), bool(asked)))
                raise ImportError("the probe stops here")

    assert "pyspark" not in sys.modules
    sys.meta_path.insert(0, Watch())
    from flinkyarn.pipeline.spark_stage import SparkStage
    from taskexecutor.spark.bridge import MIB, SparkSessionProvider

    provider = SparkSessionProvider(cores=1, memory_bytes=1024 * MIB, slots=1,
                                    tmp_dir=sys.argv[1])
    try:
        provider.get()
    except ImportError:
        pass

    class Context:
        def spark(self):
            asked.append(1)
            return provider.get()

    stage = SparkStage(lambda df: df, name="probe")
    stage.context = Context()
    try:
        stage._run([])
    except ImportError:
        pass
    print(seen)
""")


def test_pyspark_is_first_imported_under_the_task_executors_import_lock(tmp_path):
    """Two threads importing pyspark for the first time at once can get an ImportError
    ("partially initialized module"): the session's start imports it holding the lock
    that tasks hold to unpickle their code, and a Spark stage imports it only once it has
    its session (seen in the soak: a Spark stage's task failed so on both TaskExecutors)."""
    seen = subprocess.run([sys.executable, "-c", IMPORTS_PROBE, str(tmp_path)],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    # The provider's start, under the lock; then the stage, whose request for the session
    # came first (and started it, under the lock, before its own import).
    assert seen.strip() == "[(True, False), (True, True)]", seen
