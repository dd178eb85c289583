"""Unmodified PySpark scripts as jobs on the local target: Spark's own examples, as the
installed pyspark ships them, show on the user's terminal what `python script.py`
shows; each script is its own driver process (its own SparkContext, sys.argv, exit
status), several run side by side in one TaskExecutor, and a cancelled one leaves no
process behind."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from taskexecutor.reaper import proc_stat
from tests.local.conftest import processes_mentioning
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = Path(pyspark.__file__).resolve().parent / "examples" / "src" / "main" / "python"
DATA = Path(pyspark.__file__).resolve().parent / "data"
FAST = ["-D", "heartbeat.interval=500 ms", "-D", "heartbeat.timeout=5 s"]

# Spark's examples read these (Spark's source tree has them; the pip package does not).
PEOPLE_JSON = '{"name":"Michael"}\n{"name":"Andy", "age":30}\n{"name":"Justin", "age":19}\n'
PEOPLE_TXT = "Michael, 29\nAndy, 30\nJustin, 19\n"
TEXT = "the quick brown fox\njumps over the lazy dog\nthe dog barks\n"
LINKS = "1 2\n1 3\n1 4\n2 1\n3 1\n4 1\n"


def spark_source_tree(folder: Path) -> Path:
    """`folder` made like Spark's source tree, where the examples' relative paths resolve."""
    (folder / "data").symlink_to(DATA)
    resources = folder / "examples" / "src" / "main" / "resources"
    resources.mkdir(parents=True)
    (resources / "people.json").write_text(PEOPLE_JSON)
    (resources / "people.txt").write_text(PEOPLE_TXT)
    (folder / "text.txt").write_text(TEXT)
    (folder / "links.txt").write_text(LINKS)
    return folder


@pytest.fixture
def workdir(tmp_path):
    return spark_source_tree(tmp_path)


def environment(tmp_path: Path) -> dict[str, str]:
    # No Hadoop configuration: relative paths mean the local folder, as for `python`.
    # Spark's Python workers run this interpreter (with pandas), as for a venv's user.
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    return dict(env, TMPDIR=str(tmp_path), PYSPARK_PYTHON=sys.executable)


def flinkyarn_command(*args) -> list[str]:
    return [sys.executable, "-m", "yarn_client", "run", "-t", "local", "--pyspark", *FAST, *args]


def without_spark_noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def word_counts(text: str) -> list[str]:
    counts = collections.Counter(word for line in text.splitlines() for word in line.split(" "))
    return sorted(f"{word}: {count}" for word, count in counts.items())


# (script, its arguments, how the two outputs are compared): one or two of each kind of
# script (RDD, SQL, Arrow, ml, mllib, the SparkContext(appName=...) style, the status
# API) and of each comparison, so that the tier stays within its time (four of the same
# kinds were dropped for it: sort.py, ml/pipeline_example, ml/min_max_scaler,
# mllib/kernel_density).
#   "same":    line for line, as `python script.py` prints it
#   "sorted":  the same lines, in any order (Spark's collect order of a shuffle)
#   "shape":   the same lines but for the decimal numbers in them and the padding that
#              aligns them (random data: pandas widens a column for a minus sign)
#   "close":   the same lines, decimal numbers to 9 significant digits
#   a callable: checks flinkyarn's stdout alone (the script randomizes or times)
EXAMPLES_RUN = [
    ("pi.py", ["2"], lambda out: re.fullmatch(r"Pi is roughly 3\.1\d*", out.strip())),
    ("wordcount.py", ["text.txt"], lambda out: sorted(out.splitlines()) == word_counts(TEXT)),
    ("pagerank.py", ["links.txt", "3"], "sorted"),
    ("sql/basic.py", [], "sorted"),  # groupBy().count().show() rows in shuffle order
    ("sql/arrow.py", [], "shape"),  # pandas frames of random numbers
    ("ml/binarizer_example.py", [], "same"),
    ("mllib/correlations_example.py", [], "same"),  # SparkContext(appName=...) style
    ("mllib/multi_label_metrics_example.py", [], "close"),  # floats summed in another order
    ("status_api_demo.py", ["--master", "local[10]"],
     lambda out: "status:  RUNNING" in out and sorted(eval(out.split("Job results are: ")[1]))
     == [(i, 1) for i in range(10)]),
]

# What `python script.py` printed, recorded with the pyspark minor version CI runs
# (setup.cfg pins it): a second Spark JVM per example, beside ours, cost the tier some
# 150 s of CPU. `python -m tests.local.test_pyspark_scripts` records them again.
RECORDED = Path(__file__).resolve().parent / "spark_examples"


def recorded_name(script: str) -> str:
    return script.replace("/", "__").removesuffix(".py") + ".out"


def record_references() -> None:
    """Runs every compared example with `python` (in a folder like Spark's source tree)
    and keeps what it printed, under the pyspark version it ran."""
    import tempfile
    RECORDED.mkdir(exist_ok=True)
    for old in RECORDED.glob("*.out"):
        old.unlink()
    for script, args, compare in EXAMPLES_RUN:
        if not isinstance(compare, str):
            continue
        with tempfile.TemporaryDirectory() as folder:
            workdir = spark_source_tree(Path(folder))
            done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=workdir,
                                  env=environment(workdir), capture_output=True, text=True,
                                  timeout=300, check=True)
        (RECORDED / recorded_name(script)).write_text(done.stdout)
        print(f"recorded {script}: {len(done.stdout.splitlines())} lines")
    (RECORDED / "PYSPARK_VERSION").write_text(minor(pyspark.__version__) + "\n")


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def reference(script: str) -> str:
    recorded_version = (RECORDED / "PYSPARK_VERSION").read_text().strip()
    assert recorded_version == minor(pyspark.__version__), (
        f"the examples' outputs were recorded with pyspark {recorded_version}, this is "
        f"{pyspark.__version__}: python -m tests.local.test_pyspark_scripts records them again")
    return (RECORDED / recorded_name(script)).read_text()


@pytest.mark.parametrize("script,args,compare", EXAMPLES_RUN,
                         ids=[name for name, _, _ in EXAMPLES_RUN])
def test_spark_examples_show_what_python_shows(workdir, script, args, compare):
    env = environment(workdir)
    options = [a for a in args if a.startswith("--") or a.startswith("local[")]
    script_args = [a for a in args if a not in options]
    ours = subprocess.run(flinkyarn_command(*options, str(EXAMPLES / script), *script_args),
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0, ours.stderr[-3000:]
    # What the script printed is on stdout, unprefixed; our progress and the result line
    # are on stderr, apart from the result line flinkyarn prints last.
    printed = ours.stdout.rsplit("Job ", 1)[0] if "\nJob " in ours.stdout else ours.stdout
    assert re.search(r"Job \w+ FINISHED", ours.stdout)
    # Spark's own chatter stays in its log (`python script.py` prints this one).
    assert "Setting default log level" not in ours.stderr, ours.stderr[-3000:]
    if compare == "same":
        assert without_spark_noise(printed) == without_spark_noise(reference(script))
    elif compare == "close":
        def rounded(text):
            return [re.sub(r"-?\d+\.\d+(e[-+]?\d+)?", lambda m: f"{float(m[0]):.9g}", line)
                    for line in without_spark_noise(text)]
        assert rounded(printed) == rounded(reference(script))
    elif compare == "shape":
        def shape(text):
            return [" ".join(re.sub(r"-?\d+\.\d+(e[-+]?\d+)?", "#", line).split())
                    for line in without_spark_noise(text)]
        assert shape(printed) == shape(reference(script))
    elif compare == "sorted":
        assert sorted(without_spark_noise(printed)) == sorted(without_spark_noise(reference(script)))
    else:
        assert compare(printed), printed
    assert processes_mentioning(str(workdir)) == []


SLOW_SCRIPT = """\
import sys, time
from pyspark import SparkContext
sc = SparkContext(appName=sys.argv[1])      # its own SparkContext
print("started", sys.argv[1], flush=True)
while not __import__("os").path.exists(sys.argv[2]):
    time.sleep(0.2)
print(sys.argv[1], "sum", sc.parallelize(range(100)).sum(), flush=True)
sc.stop()
sys.exit(int(sys.argv[3]))
"""


def test_two_scripts_side_by_side_exit_status_and_cancel(tmp_path):
    """One TaskExecutor of two slots runs two drivers at once, each with its own
    SparkContext; exit status 3 fails its job and names the status; a cancelled driver
    leaves no process behind, nor does a driver whose TaskExecutor is killed."""
    from yarn_client.local_cluster import LocalCluster
    from yarn_client.rest_client import RestClient  # noqa: F401 (the cluster's client)
    from yarn_client.programs import pyspark_job_graph
    from flinkyarn.configuration import Configuration
    from flinkyarn.pipeline.pyspark_script import PySparkSettings

    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT)
    go = tmp_path / "go"
    conf = Configuration.load(overrides={"taskmanager.numberOfTaskSlots": "2",
                                         "resourcemanager.max-taskmanagers": "1",
                                         "heartbeat.interval": "500 ms",
                                         "heartbeat.timeout": "5 s"})
    settings = PySparkSettings(master="local", working_dir=str(tmp_path))
    with LocalCluster(conf) as cluster:
        rest = cluster.rest
        first = rest.submit(pyspark_job_graph(script, ("first", str(go), "0"), settings))
        second = rest.submit(pyspark_job_graph(script, ("second", str(go), "3"), settings))
        third = None

        def printed(job: str) -> str:
            return "".join(line.text for line in rest.output(job).lines)

        wait_for(lambda: "started first" in printed(first) and "started second" in printed(second),
                 timeout=120, what="both drivers started")
        overview = rest.overview()
        assert len(overview.task_executors) == 1  # both in one TaskExecutor
        go.write_text("")
        wait_for(lambda: rest.job(first).status in ("FINISHED", "FAILED") and
                 rest.job(second).status in ("FINISHED", "FAILED"), timeout=120, what="both ended")
        assert rest.job(first).status == "FINISHED", rest.job(first).failure_cause
        assert "first sum 4950" in printed(first)
        failed = rest.job(second)
        assert failed.status == "FAILED"
        assert "the script exited with status 3" in failed.failure_cause
        assert "second sum 4950" in printed(second)

        go.unlink()
        third = rest.submit(pyspark_job_graph(script, ("third", str(go), "0"), settings))
        wait_for(lambda: "started third" in printed(third), timeout=120, what="third started")
        assert processes_mentioning("slow.py")  # the driver runs
        rest.cancel(third)
        wait_for(lambda: rest.job(third).status == "CANCELED", timeout=60, what="cancelled")
        wait_for(lambda: processes_mentioning("slow.py") == [], timeout=10,
                 what="no driver left")
        # The class-data trainer a TaskExecutor may start on a fresh machine
        # (taskexecutor/spark/class_data_trainer.py) is a SparkSubmit of its own, meant to outlive it.
        assert [line for line in processes_mentioning("org.apache.spark.deploy.SparkSubmit")
                if "-XX:ArchiveClassesAtExit" not in line] == []

        # Its TaskExecutor killed (no word to the driver) while the driver's JVM does not
        # end by itself (here it never sees the end of its input; stuck in a shutdown
        # hook in CI once): the driver's group, apart from the TaskExecutor's, still
        # ends (taskexecutor/reaper.py).
        holding = tmp_path / "holding.py"
        holding.write_text(HOLDING_SCRIPT)
        fourth = rest.submit(pyspark_job_graph(holding, (), settings))
        wait_for(lambda: "started holding" in printed(fourth), timeout=120, what="fourth started")
        [launcher] = [int(line.split(":")[0]) for line in processes_mentioning("holding.py")]
        executor = int(Path(f"/proc/{launcher}/cmdline").read_bytes().split(b"\0")[3])
        left = [int(line.split(":")[0]) for line in processes_mentioning("SparkSubmit")
                + processes_mentioning("sleep 600")
                if parent_of(int(line.split(":")[0])) == launcher]
        assert len(left) == 2, left  # the JVM and the child that holds its input
        os.kill(executor, signal.SIGKILL)
        wait_for(lambda: all(parent_of(pid) is None for pid in (launcher, *left)), timeout=30,
                 what="the killed TaskExecutor's driver, its JVM and its child gone")
        wait_for(lambda: rest.job(fourth).status == "FAILED", timeout=60, what="fourth failed")
        assert "process killed by SIGKILL" in rest.job(fourth).failure_cause


HOLDING_SCRIPT = """\
import subprocess, time
from pyspark import SparkContext
sc = SparkContext(appName="holding")
# A child in the driver's group holds its JVM's input open: when the driver dies, the
# JVM does not see the end of its input.
subprocess.Popen(["sleep", "600"], pass_fds=[sc._gateway.proc.stdin.fileno()])
print("started holding", flush=True)
time.sleep(600)
"""


def parent_of(pid: int) -> int | None:
    """The parent of a running process; None if it is gone (or a zombie)."""
    fields = proc_stat(pid)
    return None if fields is None or fields[0] in (b"Z", b"X") else int(fields[1])


def test_a_failing_script_fails_its_job_with_its_traceback(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('before', sys.argv[1:])\n"
                      "def parse(x):\n    raise ValueError(f'bad record {x!r}')\nparse('z')\n")
    env = environment(tmp_path)
    result = subprocess.run(flinkyarn_command(str(script), "a", "b"), cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stdout.startswith("before ['a', 'b']\n")
    assert "Traceback (most recent call last)" in result.stderr  # streamed as written
    assert "FAILED" in result.stdout
    cause = result.stdout.split("cause:", 1)[1]
    assert "the script exited with status 1" in cause
    assert "ValueError: bad record 'z'" in cause and "in parse" in cause


MAPS = """\
from pyspark import SparkContext
sc = SparkContext(appName="maps")
with open(f"/proc/{sc._gateway.proc.pid}/maps") as maps:
    print(*sorted({line.split("/")[-1].strip() for line in maps if line.rstrip().endswith(".jsa")}))
print("workers import", sc.parallelize([0], 1).map(
    lambda _: "the zip" if ".zip" in __import__("pyspark").__file__ else "the package").collect()[0])
sc.stop()
"""


def test_a_scripts_driver_maps_this_machines_class_data_archive(tmp_path):
    """The driver's JVM has the TaskExecutor's Spark home, so it maps the TaskExecutor's
    class-data archive (made here first if there is none; its memory map says it maps
    it, beside the JDK's own). Its Python workers import pyspark from the installed
    package, compiled, not from Spark's pyspark.zip (taskexecutor/spark/daemon.py)."""
    env = environment(tmp_path)
    archive = subprocess.run(
        [sys.executable, "-c", "from flinkyarn.spark import class_data; print(class_data.ensure_archive())"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=True).stdout.strip()
    script = tmp_path / "maps.py"
    script.write_text(MAPS)
    result = subprocess.run(flinkyarn_command(str(script)), cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[:2] == [f"classes.jsa {Path(archive).name}",
                                              "workers import the package"], result.stdout


@pytest.mark.parametrize("args,message", [
    (["--jars", "x.jar"], "no such option: --jars (pass jars with --conf spark.jars"),
    (["--deploy-mode", "client"], "--deploy-mode client"),
    (["--conf", "nokey"], "--conf 'nokey': expected KEY=VALUE"),
    (["--conf", "x.y=1"], "start with 'spark.'"),
    (["--executor-memory", "lots"], "not a memory size"),
    (["--master", "yarn"], "master yarn needs a YARN target"),
    (["--num-executors", "0"], "--num-executors must be at least 1"),
])
def test_spark_submit_options_that_do_not_hold_are_named(tmp_path, args, message):
    script = tmp_path / "s.py"
    script.write_text("print('never')\n")
    result = subprocess.run([sys.executable, "-m", "yarn_client", "run", "-t", "local",
                             "--pyspark", *args, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=environment(tmp_path), timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "never" not in result.stdout


RACING_DRIVER = r"""
import sys
from py4j.protocol import Py4JJavaError
from pyspark import SparkConf, SparkContext
from taskexecutor.spark import pyspark_patches

lost = iter(sys.argv[1:])  # what each JVM context start throws first, then real starts
real = SparkContext._initialize_context

def initialize(self, jconf):
    message = next(lost, None)
    if message == "ConcurrentModificationException":  # a list changed under its view
        handlers = self._jvm.java.util.ArrayList()
        handlers.add(1)
        view = handlers.subList(0, 1)
        handlers.add(2)
        view.size()
    elif message is not None:  # a real Java exception through py4j, as Spark's would come
        self._jvm.java.util.Objects.requireNonNull(None, message)
    return real(self, jconf)

SparkContext._initialize_context = initialize
pyspark_patches.survive_ui_race(attempts=3)
try:
    sc = SparkContext(conf=SparkConf().setMaster("local[1]").setAppName("race"))
except Py4JJavaError as error:
    print("failed:", str(error.java_exception))
    sys.exit(3)
print("sum", sc.parallelize(range(10)).sum())
sc.stop()
"""


@pytest.mark.parametrize("lost, started", [
    (["No filter named org.apache.spark.deploy.yarn.AmIpFilter"] * 2, True),
    # Jetty meets the same race iterating its handlers (seen in CI too).
    (["ConcurrentModificationException", "No filter named org.apache.spark.deploy.yarn.AmIpFilter"],
     True),
    (["No filter named org.apache.spark.deploy.yarn.AmIpFilter"] * 3, False),  # attempts
    (["some other start failure"], False),  # only Spark's UI race is retried
])
def test_a_driver_on_yarn_starts_its_context_again_when_it_loses_sparks_ui_filter_race(
        tmp_path, lost, started):
    """Spark on YARN (client mode): the AM's AddWebUIFilter may reach the driver while its
    UI handlers start, failing the SparkContext with "No filter named ...AmIpFilter" or a
    ConcurrentModificationException in Jetty (both seen in CI). The launcher starts the
    context again; other failures stay failures."""
    script = tmp_path / "racing.py"
    script.write_text(RACING_DRIVER)
    done = subprocess.run([sys.executable, str(script), *lost], cwd=REPO, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    retries = done.stderr.count("lost Spark's web-UI filter race")
    if started:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "sum 45" in done.stdout
        assert retries == len(lost)
    else:
        assert done.returncode == 3, done.stderr[-3000:]
        assert f"failed: java.lang.NullPointerException: {lost[-1]}" in done.stdout
        assert retries == (2 if len(lost) == 3 else 0)


STOPPING_DRIVER = r"""
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").appName("stops").getOrCreate()
print("sum", spark.sparkContext.parallelize(range(10)).sum())
print("jvm", spark.sparkContext._gateway.proc.pid, flush=True)
if sys.argv[1] == "stop":
    spark.stop()
"""


def test_a_driver_whose_script_stopped_its_context_ends_its_jvm_with_it(tmp_path):
    """The JVM of a stopped context has only Spark's shutdown hooks left, which made the
    script's end wait some 0.35 s: the launcher ends it before it exits itself. A context
    the script left running is left to those hooks, which stop it."""
    script = tmp_path / "stops.py"
    script.write_text(STOPPING_DRIVER)
    jvms = {}
    for how in ("stop", "leave"):
        # Into files, not pipes: the JVM shares the driver's output, and a pipe's reader
        # would wait for the JVM too.
        out, err = tmp_path / f"{how}.out", tmp_path / f"{how}.err"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            code = subprocess.Popen(
                [sys.executable, "-m", "taskexecutor.spark.driver", str(os.getpid()),
                 str(script), how], cwd=REPO, stdout=stdout, stderr=stderr,
                env={**os.environ, "PYTHONPATH": str(REPO)}).wait(timeout=180)
        assert code == 0, err.read_text()[-3000:]
        assert "sum 45" in out.read_text()
        jvms[how] = int(out.read_text().split("jvm ")[1].split()[0])
        # The JVM reads its end of input until the launcher exits: without the kill it
        # was still running (its hooks) at this moment.
        if how == "stop":
            assert parent_of(jvms[how]) is None, proc_stat(jvms[how])
    wait_for(lambda: parent_of(jvms["leave"]) is None, timeout=60,
             what="the JVM whose context the script left running to end by its hooks")


if __name__ == "__main__":
    record_references()
