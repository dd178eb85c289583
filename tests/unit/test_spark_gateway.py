"""How a TaskExecutor starts pyspark's JVM (taskexecutor/spark_bridge.GatewayPopen): no
Python runs in the forked child, yet the JVM ignores SIGINT as pyspark wants."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter: a fork handler that notes each child in which Python ran after
# the fork, then one child by pyspark's way (a preexec_fn) and one by GatewayPopen's.
PROBE = textwrap.dedent("""
    import os, signal, subprocess, sys
    from taskexecutor.spark_bridge import GatewayPopen

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
