"""The `flinkyarn` command.

Exit codes: 0 the job(s) finished; 1 a job failed or was canceled, or the program
failed; 2 a usage error (unknown option, bad -D value, missing file, an output folder
that exists and is not empty in mode "no_overwrite": that job is not submitted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

import flinkyarn
from flinkyarn import hadoop, kerberos, options
from flinkyarn.archive import JobArchive, find_application
from flinkyarn.configuration import Configuration, ConfigurationError, parse_dynamic_properties
from flinkyarn.environment import JobResult
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.hadoop import HadoopConfigError
from flinkyarn.jobgraph import InvalidJobGraph, JobGraph, OutputExistsError
from yarn_client import yarn_cluster
from yarn_client.executors import ClusterExecutor, check_outputs
from yarn_client.local_cluster import ClusterStartError, LocalCluster
from yarn_client.programs import GraphCapture, ProgramAborted, pyspark_job_graph, run_program
from yarn_client.rest_client import RestError
from yarn_client import shipping
from yarn_client.shipping import ShippingError
from yarn_client.spark_submit import (NOT_TAKEN, SparkSubmitError, SparkSubmitOptions,
                                      local_settings, memory_mib, yarn_settings)
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnDeploymentError, YarnOptions
from yarn_client.yarn_executors import PerJobExecutor, SessionExecutor

TARGETS = ("local", "yarn-per-job", "yarn-session")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(flinkyarn.__version__, prog_name="flinkyarn")
def cli() -> None:
    """Run Python pipelines with Flink's runtime on Hadoop YARN."""


def load_configuration(properties: tuple[str, ...]) -> Configuration:
    try:
        conf = Configuration.load(overrides=parse_dynamic_properties(properties))
        options.check_cluster_options(conf)  # before anything starts, not in the AppMaster
        return conf
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None


# How long the clean-up after an interrupt waits for each answer of a local cluster.
INTERRUPT_TIMEOUT = 10.0


class LocalTargetExecutor:
    """Starts the local cluster on the program's first job and keeps it for the rest."""

    def __init__(self, conf: Configuration) -> None:
        # Started for the job at hand: its first TaskExecutor starts with the AppMaster.
        self.cluster = LocalCluster(conf, start_workers=1)
        self.results: list[JobResult] = []
        self._executor: ClusterExecutor | None = None

    def execute(self, graph: JobGraph) -> JobResult:
        options.check_job_graph(graph, self.cluster.conf)  # before a cluster is started
        check_outputs(graph, options.resumes(graph, self.cluster.conf))
        if self._executor is None:
            click.echo("starting a local cluster ...", err=True)
            self.cluster.conf = options.with_spark_started(self.cluster.conf, graph)
            self._executor = ClusterExecutor(self.cluster.start())
        result = self._executor.execute(graph)
        self.results.append(result)
        _print_result(result)
        return result

    def cancel_running(self) -> None:
        """After an interrupt: cancels the jobs still running. An AppMaster that does not
        answer within INTERRUPT_TIMEOUT is not waited for longer: `stop` ends it anyway."""
        if self._executor is None:
            return
        rest = self._executor.rest
        for job_id in self._executor.submitted:
            try:
                if rest.job(job_id, INTERRUPT_TIMEOUT).status not in ("FINISHED", "FAILED",
                                                                      "CANCELED"):
                    rest.cancel(job_id, INTERRUPT_TIMEOUT)
                    click.echo(f"cancelled job {job_id}", err=True)
            except RestError as error:
                click.echo(f"could not cancel job {job_id}: {error}", err=True)

    def stop(self) -> None:
        self.cluster.stop()


def _print_result(result: JobResult) -> None:
    line = f"Job {result.job_id} {result.status} in {result.duration:.1f} s"
    cause = (result.failure_cause or "").strip()
    if cause:
        # A cause is a summary line, then where it happened and what it chains
        # (flinkyarn/failures.py): those lines go under the summary, not at the margin.
        summary, *details = cause.splitlines()
        line += "\n  cause: " + "\n".join([summary, *(f"    {d}" for d in details)])
    click.echo(line)


PROGRAM_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def default_target(conf: Configuration) -> str:
    """The target when -t does not say: execution.target; for auto, yarn-per-job where a
    Hadoop configuration is present, else local."""
    configured = conf.get(options.EXECUTION_TARGET)
    if configured != "auto":
        return configured
    conf_dir = os.environ.get("HADOOP_CONF_DIR")
    if conf_dir and Path(conf_dir, "yarn-site.xml").is_file():
        return "yarn-per-job"
    return "local"


def yarn_options(name: str | None, queue: str | None, tags: tuple[str, ...],
                 files: tuple[Path, ...], conf: Configuration) -> YarnOptions:
    return YarnOptions(name=name or "", queue=queue or conf.get(options.YARN_APPLICATION_QUEUE),
                       tags=tuple(t for tag in tags for t in tag.split(",") if t), files=files)


def python_files(conf: Configuration) -> list[Path]:
    """python.files as the client's program sees them: each must exist."""
    paths = [Path(p.strip()).expanduser() for p in conf.get(options.PYTHON_FILES).split(",") if p.strip()]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise click.BadParameter(f"no such file or folder: {', '.join(missing)}",
                                 param_hint="--py-files")
    return paths


def yarn_errors(function):
    """Turns the YARN client's expected errors into a message and exit code 1."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (YarnDeploymentError, RestError, HadoopConfigError, ShippingError) as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(1)
    return wrapper


def yarn_application_options(function):
    for decorator in reversed((
            click.option("--name", help="Name of the YARN application."),
            click.option("--queue", help="YARN queue (default: yarn.application.queue)."),
            click.option("--tags", multiple=True, help="Tags of the YARN application (comma-separated)."))):
        function = decorator(function)
    return function


def python_options(function):
    """Flink's options for the Python the cluster runs, as -D overrides of their keys."""
    for decorator in reversed((
            click.option("-pyarch", "--python-archives", "python_archives", multiple=True,
                         metavar="ARCHIVE[#NAME]",
                         help="A prepared environment archive (local or hdfs://) YARN unpacks "
                              "in every TaskExecutor container (python.archives)."),
            click.option("-pyexec", "--python-executable", "python_executable",
                         help="The interpreter the TaskExecutors run, e.g. NAME/bin/python "
                              "inside an archive (python.executable)."),
            click.option("-pyfs", "--py-files", "py_files", multiple=True,
                         help="Python files, folders, .zip or .egg files for the PYTHONPATH of "
                              "the program and of every container (python.files)."),
            click.option("--files", multiple=True,
                         type=click.Path(exists=True, path_type=Path),
                         help="Files or folders shipped to every container (yarn.ship-files)."))):
        function = decorator(function)
    return function


def python_properties(properties: tuple[str, ...], python_archives: tuple[str, ...],
                      python_executable: str | None, py_files: tuple[str, ...],
                      files: tuple[Path, ...]) -> tuple[str, ...]:
    """The -D overrides the Python options stand for (comma lists, as in Flink)."""
    extra = []
    for key, values in ((options.PYTHON_ARCHIVES.key, python_archives),
                        (options.PYTHON_FILES.key, py_files),
                        (options.YARN_SHIP_FILES.key, tuple(str(f) for f in files))):
        if values:
            extra.append(f"{key}={','.join(values)}")
    if python_executable:
        extra.append(f"{options.PYTHON_EXECUTABLE.key}={python_executable}")
    return (*properties, *extra)


def spark_submit_options(function):
    """spark-submit's options, for --pyspark (the others it shares with flinkyarn's)."""
    for decorator in reversed((
            click.option("--conf", "spark_confs", multiple=True, metavar="KEY=VALUE",
                         help="--pyspark: a Spark setting, as spark-submit's --conf."),
            click.option("--master", "spark_master", metavar="MASTER",
                         help="--pyspark: yarn (default on YARN), local, local[N] "
                              "(pyspark.master)."),
            click.option("--deploy-mode", type=click.Choice(("cluster", "client")),
                         help="--pyspark: the driver always runs in the cluster (cluster)."),
            click.option("--archives", multiple=True, metavar="ARCHIVE[#NAME]",
                         help="--pyspark: archives unpacked in the driver's and the "
                              "executors' folders."),
            click.option("--num-executors", type=int,
                         help="--pyspark: a fixed number of Spark executors (default: "
                              "dynamic allocation)."),
            click.option("--executor-cores", type=int, help="--pyspark: cores per executor."),
            click.option("--executor-memory", metavar="SIZE", help="--pyspark: e.g. 2g."),
            click.option("--driver-memory", metavar="SIZE",
                         help="--pyspark: the driver's heap; sizes its slot."))):
        function = decorator(function)
    return function


def _pyspark_settings(target: str, submit: SparkSubmitOptions, dynamic: dict[str, str],
                      conf: Configuration):
    try:
        if target == "local":
            return local_settings(submit, dynamic)
        return yarn_settings(submit, dynamic, shipping.Staging(conf, lambda line: click.echo(line, err=True)))
    except SparkSubmitError as error:
        raise click.UsageError(str(error)) from None


def _pyspark_cluster_properties(submit: SparkSubmitOptions, dynamic: dict[str, str]) -> tuple[str, ...]:
    """A per-job cluster for one script: one slot, sized by --driver-memory, and no warm
    driver after it (the cluster ends with the script)."""
    extra = []
    for option, value in ((options.NUM_TASK_SLOTS, "1"), (options.PYSPARK_WARM_DRIVERS, "0")):
        if option.key not in dynamic:
            extra.append(f"{option.key}={value}")
    if submit.driver_memory and options.TASK_MANAGER_PROCESS_MEMORY.key not in dynamic:
        try:
            heap = memory_mib(submit.driver_memory, "--driver-memory")
        except SparkSubmitError as error:
            raise click.UsageError(str(error)) from None
        # The driver's heap doubled: its JVM's other memory, its Python, the TaskExecutor.
        extra.append(f"{options.TASK_MANAGER_PROCESS_MEMORY.key}={max(1024, 2 * heap)} mb")
    return tuple(extra)


def option_group(parameter: str, group: type):
    """Hands a command the options named by the fields of the dataclass `group` as one
    instance of it, its argument `parameter`. The options themselves are declared as
    usual, in the order --help lists them."""
    names = [field.name for field in dataclasses.fields(group)]

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            kwargs[parameter] = group(**{name: kwargs.pop(name) for name in names})
            return function(*args, **kwargs)
        return wrapper
    return decorate


@dataclass(frozen=True)
class RunTarget:
    """-t, --detached, --application-id: where the program's jobs run."""

    target: str | None
    detached: bool
    application_id: str | None

    def resolve(self, properties: tuple[str, ...]) -> str:
        """-t, else the configured default (default_target)."""
        return self.target or default_target(load_configuration(properties))


@dataclass(frozen=True)
class SavepointRestore:
    """-s, --allow-non-restored-state: what the program's jobs resume from."""

    savepoint: str | None
    allow_non_restored_state: bool

    def properties(self) -> tuple[str, ...]:
        """The -D overrides they stand for; a UsageError when they do not go together."""
        if self.allow_non_restored_state and not self.savepoint:
            raise click.UsageError("--allow-non-restored-state goes with -s PATH")
        if not self.savepoint:
            return ()
        return (f"{options.SAVEPOINT_PATH.key}={self.savepoint}",
                f"{options.SAVEPOINT_IGNORE_UNCLAIMED_STATE.key}="
                f"{str(self.allow_non_restored_state).lower()}")


@dataclass(frozen=True)
class PythonShipping:
    """-pyarch, -pyexec, -pyfs, --files (python_options): what the containers get."""

    python_archives: tuple[str, ...]
    python_executable: str | None
    py_files: tuple[str, ...]
    files: tuple[Path, ...]

    def properties(self, pyspark: bool) -> tuple[str, ...]:
        """The -D overrides they stand for. A PySpark script's files reach its driver and
        Spark's executors (spark-submit's way), not every container."""
        if pyspark:
            return python_properties((), self.python_archives, self.python_executable, (), ())
        return python_properties((), self.python_archives, self.python_executable,
                                 self.py_files, self.files)


@dataclass(frozen=True)
class YarnApplication:
    """--name, --queue, --tags (yarn_application_options): the YARN application's."""

    name: str | None
    queue: str | None
    tags: tuple[str, ...]

    def options(self, files: tuple[Path, ...], conf: Configuration) -> YarnOptions:
        return yarn_options(self.name, self.queue, self.tags, files, conf)


@dataclass(frozen=True)
class SparkSubmitArgs:
    """spark-submit's own options (spark_submit_options), taken with --pyspark only."""

    spark_confs: tuple[str, ...]
    spark_master: str | None
    deploy_mode: str | None
    archives: tuple[str, ...]
    num_executors: int | None
    executor_cores: int | None
    executor_memory: str | None
    driver_memory: str | None

    def check_taken(self, pyspark: bool) -> None:
        """A UsageError naming those given without --pyspark."""
        if pyspark:
            return
        given = [option for option, value in (
            ("--conf", self.spark_confs), ("--master", self.spark_master),
            ("--deploy-mode", self.deploy_mode), ("--archives", self.archives),
            ("--num-executors", self.num_executors), ("--executor-cores", self.executor_cores),
            ("--executor-memory", self.executor_memory),
            ("--driver-memory", self.driver_memory)) if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: spark-submit's options go with --pyspark")

    def submit_options(self, yarn: YarnApplication, python: PythonShipping) -> SparkSubmitOptions:
        """The script's spark-submit command line, with the options it shares with ours."""
        return SparkSubmitOptions(self.spark_confs, self.spark_master, self.deploy_mode,
                                  self.num_executors, self.executor_cores, self.executor_memory,
                                  self.driver_memory, yarn.name, yarn.queue, python.files,
                                  self.archives, python.py_files)


def check_program(program: Path) -> None:
    """PROGRAM is a file, not an option click took for it (one flinkyarn does not have)."""
    if str(program).startswith("-"):
        option = str(program).split("=")[0]
        hint = f" ({NOT_TAKEN[option]})" if option in NOT_TAKEN else ""
        raise click.UsageError(f"no such option: {option}{hint}")
    if not program.is_file():
        raise click.BadParameter(f"no such file: {program}", param_hint="PROGRAM")


def dynamic_properties(properties: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_dynamic_properties(properties)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None


def run_configuration(target: str, pyspark: bool, properties: tuple[str, ...],
                      shipped: tuple[str, ...], submit: SparkSubmitOptions,
                      dynamic: dict[str, str]) -> tuple[Configuration, list[Path]]:
    """The client's configuration for the run, and the program's PYTHONPATH additions
    (python.files); a UsageError when the Python options do not fit together."""
    if pyspark:
        # A cluster of its own (per-job, local): one slot with all of the TaskExecutor.
        cluster = _pyspark_cluster_properties(submit, dynamic) if target != "yarn-session" else ()
        conf = load_configuration((*cluster, *properties, *shipped))
        program_path = []
    else:
        conf = load_configuration((*properties, *shipped))
        program_path = python_files(conf)
    try:
        shipping.check_python_options(conf)
    except ShippingError as error:
        raise click.UsageError(str(error)) from None
    return conf, program_path


def pyspark_script_job(target: str, program: Path, args: tuple[str, ...],
                       submit: SparkSubmitOptions, dynamic: dict[str, str],
                       conf: Configuration) -> JobGraph:
    """The job of one PySpark script; exits with 1 when its files cannot be staged."""
    try:
        if target != "local":  # the script's files go to the cluster's HDFS first
            kerberos.client_login(conf)
        settings = _pyspark_settings(target, submit, dynamic, conf)
    except (ShippingError, HadoopConfigError, OSError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    return pyspark_job_graph(program, args, settings)


def run_executor(target: str, where: RunTarget, conf: Configuration, yarn: YarnApplication,
                 program: Path, job_properties: tuple[str, ...], pyspark: bool
                 ) -> LocalTargetExecutor | PerJobExecutor | SessionExecutor:
    """What executes the program's jobs on `target`; exits with 1 when YARN or the
    session cannot be reached. `job_properties`: the -D overrides (with the Python
    options'), which a session takes per job."""
    try:
        if target == "local":
            return LocalTargetExecutor(conf)
        if target == "yarn-per-job":
            return PerJobExecutor(conf, yarn.options((program,), conf),
                                  where.detached or not conf.get(options.EXECUTION_ATTACHED))
        # The session's configuration is its own; the job-level -D (not the client's
        # config file) go with the jobs (a script's Spark settings with its job).
        dynamic = parse_dynamic_properties(job_properties)
        ignored = sorted(key for key in dynamic if not options.is_job_option(key)
                         and not options.is_client_option(key)
                         and not (pyspark and (key.startswith(("spark.", "pyspark.")))))
        if ignored:
            click.echo(f"warning: a session keeps its own configuration; ignored: "
                       f"{', '.join(ignored)} (jobs may set {options.JOB_OPTIONS})", err=True)
        return SessionExecutor(where.application_id, job_settings=options.job_settings(dynamic),
                               conf=conf)
    except (YarnDeploymentError, RestError, HadoopConfigError, ShippingError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


def execute_program(executor: LocalTargetExecutor | PerJobExecutor | SessionExecutor,
                    program: Path, args: tuple[str, ...], job_graph: JobGraph | None,
                    program_path: list[Path]) -> int:
    """Runs the program (or submits the script's job) and stops what it started; the
    exit code: 0 when every job finished (or was submitted), 1 when one did not, the
    program failed or ran no job, 2 when an output folder was in the way."""
    code = 0
    try:
        if job_graph is not None:
            executor.execute(job_graph)
        else:
            run_program(program, args, executor, program_path)
    except KeyboardInterrupt as interrupt:
        by = f" by {interrupt.args[0]}" if interrupt.args else ""
        click.echo(f"interrupted{by}: cancelling and stopping what was started", err=True)
        executor.cancel_running()
        code = 1
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except OutputExistsError as error:
        click.echo(f"error: {error}", err=True)
        code = 2
    except (ClusterStartError, YarnDeploymentError, RestError, ShippingError,
            HadoopConfigError, InvalidJobGraph, ConfigurationError) as error:
        click.echo(f"error: {error}", err=True)
        code = 1
    except Exception:
        click.echo(f"error: the program {program} failed:\n{traceback.format_exc()}", err=True)
        code = 1
    finally:
        executor.stop()
    if code == 0:
        if not executor.results:
            click.echo(f"error: {program} executed no job", err=True)
            code = 1
        elif any(r.status not in ("FINISHED", "SUBMITTED") for r in executor.results):
            code = 1
    return code


@cli.command(context_settings=PROGRAM_SETTINGS)
@option_group("where", RunTarget)
@option_group("restore", SavepointRestore)
@option_group("python", PythonShipping)
@option_group("yarn", YarnApplication)
@option_group("spark", SparkSubmitArgs)
@click.option("-t", "--target", type=click.Choice(TARGETS), default=None,
              help="Where to run: local processes, a YARN application per job, or a YARN "
                   "session. Default: execution.target; when that is auto, yarn-per-job "
                   "when HADOOP_CONF_DIR has a yarn-site.xml, else local.")
@click.option("-D", "properties", multiple=True, metavar="KEY=VALUE",
              help="Override a configuration option (of ~/.flinkyarn/flinkyarn.yaml, or "
                   "$FLINKYARN_CONF_DIR/flinkyarn.yaml).")
@click.option("--pyspark", is_flag=True,
              help="PROGRAM is an unmodified PySpark script: its driver runs in a slot, its "
                   "Spark on YARN (pyspark.master), as with spark-submit --deploy-mode cluster.")
@click.option("--detached", is_flag=True,
              help="yarn-per-job: print the application id and return (execution.attached=false).")
@click.option("--application-id", help="yarn-session: the session to submit into (default: your newest).")
@click.option("-s", "--from-savepoint", "savepoint", metavar="PATH",
              help="The program's jobs resume from this savepoint folder "
                   "(execution.savepoint.path).")
@click.option("--allow-non-restored-state", is_flag=True,
              help="With -s: drop the savepoint's state that no operator claims "
                   "(execution.savepoint.ignore-unclaimed-state).")
@python_options
@yarn_application_options
@spark_submit_options
@click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(properties: tuple[str, ...], pyspark: bool, program: Path, args: tuple[str, ...],
        where: RunTarget, restore: SavepointRestore, python: PythonShipping,
        yarn: YarnApplication, spark: SparkSubmitArgs) -> None:
    """Run PROGRAM (a Python file that builds and executes jobs) with ARGS."""
    properties = (*properties, *restore.properties())
    check_program(program)
    spark.check_taken(pyspark)
    submit = spark.submit_options(yarn, python)
    target = where.resolve(properties)
    dynamic = dynamic_properties(properties)
    shipped = python.properties(pyspark)
    conf, program_path = run_configuration(target, pyspark, properties, shipped, submit, dynamic)
    job_graph = pyspark_script_job(target, program, args, submit, dynamic, conf) if pyspark else None
    executor = run_executor(target, where, conf, yarn, program, (*properties, *shipped), pyspark)
    code = execute_program(executor, program, args, job_graph, program_path)
    for result in executor.results:
        if target != "local" and result.status != "SUBMITTED":
            _print_result(result)
    sys.exit(code)


@cli.group()
def session() -> None:
    """Long-running session clusters on YARN."""


@session.command("start")
@click.option("-s", "--slots", type=int, help="Slots per TaskExecutor (taskmanager.numberOfTaskSlots).")
@click.option("-D", "properties", multiple=True, metavar="KEY=VALUE")
@python_options
@yarn_application_options
@yarn_errors
def session_start(slots: int | None, properties: tuple[str, ...],
                  python_archives: tuple[str, ...], python_executable: str | None,
                  py_files: tuple[str, ...], files: tuple[Path, ...], name: str | None,
                  queue: str | None, tags: tuple[str, ...]) -> None:
    """Start a session cluster; print its application id."""
    if slots is not None:
        properties = (*properties, f"taskmanager.numberOfTaskSlots={slots}")
    conf = load_configuration(python_properties(properties, python_archives, python_executable,
                                                py_files, files))
    yarn_cluster.sweep_leftovers(conf, sys.stderr)
    deployment = YarnClusterDescriptor(conf, yarn_options(name, queue, tags, (), conf)) \
        .deploy("session")
    click.echo(f"session {deployment.app_id} is up")
    tokens = deployment.delegation_tokens
    if tokens is not None and tokens.warning:
        click.echo(f"warning: {tokens.message}", err=True)
    click.echo(f"  dashboard: {yarn_cluster.rm_web_address()}/proxy/{deployment.app_id}/pages/flinkyarn/")
    click.echo(f"  submit:    flinkyarn run -t yarn-session --application-id {deployment.app_id} FILE.py")
    click.echo(f"  stop:      flinkyarn session stop {deployment.app_id}")
    click.echo(f"  cancel from the dashboard with: flinkyarn session token {deployment.app_id}")
    click.echo(deployment.app_id)


def client_properties(function):
    """`-D key=value` for a command that only talks to applications: the client's own
    settings (on a secure cluster, the keytab it logs in from), as `conf`."""
    @click.option("-D", "properties", multiple=True, metavar="KEY=VALUE",
                  help="A client setting, e.g. -D security.kerberos.login.keytab=...")
    @functools.wraps(function)
    def wrapper(*args, properties: tuple[str, ...], **kwargs):
        return function(*args, conf=load_configuration(properties), **kwargs)
    return wrapper


@session.command("stop")
@click.argument("application_id")
@client_properties
@yarn_errors
def session_stop(application_id: str, conf: Configuration) -> None:
    """Stop a session: its running jobs are cancelled and the application ends."""
    try:
        yarn_cluster.connect(application_id, conf).shutdown_cluster()
    except RestError as error:
        click.echo(f"the AppMaster did not answer ({error}); killing {application_id}", err=True)
        yarn_cluster.kill(application_id)
    report = yarn_cluster.wait_for_end(application_id)
    for path in yarn_cluster.remove_leftovers(application_id, conf):
        click.echo(f"removed {path}, which the session could not", err=True)
    click.echo(f"{application_id} {report['state']}/{report['finalStatus']}")


@session.command("token")
@click.argument("application_id")
@client_properties
@yarn_errors
def session_token(application_id: str, conf: Configuration) -> None:
    """Print the token the application's dashboard asks for to cancel a job. Only the
    user whose client made the application holds what it is derived from."""
    click.echo(yarn_cluster.dashboard_token(application_id, conf))


@session.command("list")
@yarn_errors
def session_list() -> None:
    """Your running sessions."""
    for app in yarn_cluster.flinkyarn_applications(tag="flinkyarn-session"):
        click.echo(f"{app['id']}  {app['state']:9} {app['name']}  queue {app['queue']}")


@cli.command("list")
@click.argument("application_id", required=False)
@click.option("--all", "everything", is_flag=True,
              help="Also the applications that ended (from the archive of ended jobs).")
@client_properties
@yarn_errors
def list_jobs(application_id: str | None, everything: bool, conf: Configuration) -> None:
    """Jobs of an application (default: each of your running flinkyarn applications).
    Of an application that ended, what it archived (jobmanager.archive.fs.dir)."""
    yarn_cluster.sweep_leftovers(conf, sys.stderr)
    running = [a["id"] for a in yarn_cluster.flinkyarn_applications(states=("RUNNING",))]
    archives = yarn_cluster.archives(conf)
    if application_id:
        apps = [application_id]
    elif everything:
        archived = [a.application_id for archive in archives
                    for a in archive.applications() if a.application_id not in running]
        apps = running + list(dict.fromkeys(archived))
    else:
        apps = running
    for app_id in apps:
        if (app_id not in running and not yarn_cluster.is_running(app_id)) \
                or not _list_running(app_id, conf):
            _list_archived(app_id, archives)


def _list_running(app_id: str, conf: Configuration) -> bool:
    """Lists a running application's jobs, as its AppMaster tells; False, having listed
    nothing, when the application ended meanwhile (its archive tells then). One that
    runs but whose AppMaster does not answer (yet: it is starting) is listed as such."""
    try:
        rest = yarn_cluster.connect(app_id, conf)
        tokens = rest.overview().delegation_tokens
        jobs = [rest.job(job.job_id) for job in rest.jobs().jobs]
    except (RestError, YarnDeploymentError, OSError) as error:
        if not yarn_cluster.is_running(app_id):
            return False
        click.echo(f"{app_id}\n  its AppMaster does not answer: {kerberos.first_line(error)}")
        return True
    click.echo(app_id)
    if rest.attempt > 1:  # the AppMaster was lost before: YARN started it again
        ended = hadoop.attempt_diagnostics(app_id, rest.attempt - 1)
        click.echo(f"  AppMaster attempt {rest.attempt}; attempt {rest.attempt - 1} ended: "
                   f"{ended or 'YARN does not say how'}")
    if tokens is not None and tokens.warning:
        click.echo(f"  warning: {tokens.message}")
    for job in jobs:
        _echo_job(job)
    return True


def _list_archived(app_id: str, archives: list[JobArchive]) -> None:
    found = find_application(archives, app_id)
    if found is None:
        raise click.ClickException(
            f"{app_id} is not running and no archive has it (read: "
            f"{', '.join(a.folder for a in archives)}); was it a flinkyarn "
            f"application of yours, with {options.ARCHIVE_DIR.key} elsewhere?")
    archive, application = found
    jobs = archive.jobs(app_id)
    status, diagnostics, end = application.status, application.diagnostics, application.end_time
    if end is None:  # its last AppMaster ended without a word: ask YARN
        with contextlib.suppress(YarnDeploymentError):
            report = yarn_cluster.application_report(app_id)
            status, diagnostics = report.get("finalStatus", status), report.get("diagnostics", "")
            end = (report.get("finishedTime") or 0) / 1000 or None
    click.echo(f"{app_id}  {status} (ended {_when(end)}): {application.name}")
    if diagnostics and status != "SUCCEEDED":
        click.echo(f"  {diagnostics.strip().splitlines()[0]}")
    for job in jobs:
        _echo_job(job.details)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "when, it did not say"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _echo_job(details: JobDetails) -> None:
    restarts = f"  {details.restarts} restart(s)" if details.restarts else ""
    click.echo(f"  {details.job_id}  {details.status:10} {details.name}{restarts}")
    if details.waiting:
        click.echo(f"    {details.waiting}")
    if details.checkpoints is not None:
        click.echo(f"    {details.checkpoints.summary()}")
    if details.spark_application:
        click.echo(f"    Spark application {details.spark_application}: "
                   f"{details.spark_tracking_url or ''}")
    if details.root_cause:
        click.echo(f"    root cause: {details.root_cause.strip().splitlines()[0]}")


@cli.command("history-server")
@click.option("--port", type=int, default=None,
              help="Port to serve on (default: historyserver.web.port, 8082; 0: any free one).")
@client_properties
@yarn_errors
def history_server(port: int | None, conf: Configuration) -> None:
    """Serve the dashboard pages of ended applications from the archive (Flink's
    HistoryServer) until interrupted: historyserver.web.address (default 127.0.0.1),
    historyserver.archive.fs.dir (default: your applications' archive)."""
    import asyncio

    from yarn_am.history_server import HistoryServer

    kerberos.client_login(conf)
    archives = yarn_cluster.archives(conf)
    server = HistoryServer(archives, conf.get(options.HISTORY_SERVER_ADDRESS) or "127.0.0.1",
                           conf.get(options.HISTORY_SERVER_PORT) if port is None else port)

    async def serve() -> None:
        try:
            url = await server.start()
        except OSError as error:
            raise click.ClickException(f"the history server cannot serve: {error}") from None
        click.echo(f"history server at {url} reading {', '.join(a.folder for a in archives)}",
                   err=True)
        click.echo(url)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


@cli.command()
@click.argument("application_id")
@click.argument("job_id")
@client_properties
@yarn_errors
def cancel(application_id: str, job_id: str, conf: Configuration) -> None:
    """Cancel job JOB_ID in application APPLICATION_ID."""
    yarn_cluster.connect(application_id, conf).cancel(job_id)
    click.echo(f"cancelling job {job_id}")


@cli.command()
@click.argument("application_id")
@click.argument("job_id")
@click.argument("directory", required=False, default="")
@client_properties
@yarn_errors
def savepoint(application_id: str, job_id: str, directory: str, conf: Configuration) -> None:
    """Take a savepoint of streaming job JOB_ID into DIRECTORY (default:
    state.savepoints.dir); prints its folder, which `run -s` resumes from."""
    _savepoint(application_id, job_id, directory, False, conf)


@cli.command()
@click.argument("application_id")
@click.argument("job_id")
@click.option("--savepoint", "with_savepoint", is_flag=True, default=True,
              help="Take a savepoint first (always: Flink's stop-with-savepoint).")
@click.option("--savepoint-dir", "directory", default="",
              help="Where the savepoint goes (default: state.savepoints.dir).")
@client_properties
@yarn_errors
def stop(application_id: str, job_id: str, with_savepoint: bool, directory: str,
         conf: Configuration) -> None:
    """Stop streaming job JOB_ID with a savepoint: it ends FINISHED, and `run -s` with the
    printed folder resumes it."""
    _savepoint(application_id, job_id, directory, True, conf)


def _savepoint(application_id: str, job_id: str, directory: str, stop: bool,
               conf: Configuration) -> None:
    rest = yarn_cluster.connect(application_id, conf)
    click.echo(f"taking a savepoint of job {job_id}{' and stopping it' if stop else ''} ...",
               err=True)
    try:
        location = rest.savepoint(job_id, directory, stop,
                                  timeout=conf.get(options.CHECKPOINTING_TIMEOUT) + 30)
    except RestError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(f"savepoint written to {location}")


@cli.command()
@click.argument("application_id")
@click.option("--job", "job_id", help="Only this job: its own log files (a PySpark script's "
                                      "output and its Spark driver's log) whole, and the "
                                      "lines of the other logs that mention it.")
@client_properties
@yarn_errors
def logs(application_id: str, job_id: str | None, conf: Configuration) -> None:
    """The logs of the AppMaster and the TaskExecutors of an application (from the
    NodeManagers while it runs, aggregated in HDFS after)."""
    kerberos.client_login(conf)  # `yarn logs` then finds the ticket (a keytab's too)
    command = ["yarn", "logs", "-applicationId", application_id]
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        click.echo("error: the `yarn` command is not on PATH: `flinkyarn logs` runs Hadoop's "
                   "`yarn logs` (put the bin folder of the cluster's Hadoop client on PATH)",
                   err=True)
        sys.exit(1)
    if process.returncode != 0 and not process.stdout:
        click.echo(f"error: {' '.join(command)} failed:\n{process.stderr[-2000:]}", err=True)
        sys.exit(1)
    text = process.stdout + "".join(_running_container_logs(command, process.stdout))
    whole = False  # inside a log file of the job's own
    for line in text.splitlines():
        if line.startswith("LogType:"):
            whole = job_id is not None and job_id in line
        if job_id is None or whole or job_id in line or \
                line.startswith(("Container:", "LogType:", "End of LogType:", "===")):
            click.echo(line)


def _running_container_logs(command: list[str], shown: str) -> list[str]:
    """The logs of a running application's TaskExecutor containers, which `yarn logs`
    leaves out while the application runs (it shows the AppMaster's only): skein's
    AppMaster lists every container it ran, ended ones too, and each NodeManager serves
    their logs until the application ends."""
    app_id = command[-1]
    try:
        if yarn_cluster.application_report(app_id)["state"] in yarn_cluster.TERMINAL:
            return []  # aggregated: `yarn logs` has them all
        return [text for container_id, text in yarn_cluster.container_logs(app_id)
                if f"Container: {container_id} " not in shown]
    except Exception as error:  # the rest of the logs still helps
        click.echo(f"warning: the TaskExecutors' logs of {app_id} cannot be listed: {error}",
                   err=True)
        return []


@cli.command(context_settings=PROGRAM_SETTINGS)
@click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def info(program: Path, args: tuple[str, ...]) -> None:
    """Print the JobGraph PROGRAM would submit: vertices with their chained operators,
    parallelism and slot sharing group; edges with partitioner and exchange mode."""
    from flinkyarn.pipeline.describe import describe_job_graph

    if not program.is_file():
        raise click.BadParameter(f"no such file: {program}", param_hint="PROGRAM")
    capture = GraphCapture()
    try:
        run_program(program, args, capture)
    except ProgramAborted:
        pass
    except Exception:
        click.echo(f"error: the program {program} failed:\n{traceback.format_exc()}", err=True)
        sys.exit(1)
    if capture.graph is None:
        click.echo(f"error: {program} executed no job", err=True)
        sys.exit(1)
    click.echo(describe_job_graph(capture.graph))


def interrupt_on_termination() -> None:
    """SIGTERM (a CI runner, `kill`) and SIGHUP (a closed terminal) end the client as
    Ctrl-C does: what it started is cancelled and stopped. Further ones are ignored so the
    clean-up runs to its end; after a hang-up the terminal is gone, so output goes
    nowhere instead of failing the clean-up. (A client killed outright leaves a local
    cluster to its AppMaster's watchdog.)"""
    def interrupt(signum: int, frame) -> None:
        for other in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(other, signal.SIG_IGN)
        if signum == signal.SIGHUP:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.dup2(devnull, sys.stderr.fileno())
            os.close(devnull)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def main() -> None:
    interrupt_on_termination()
    # click exits 2 on a usage error (unknown option or command), as the CLI promises.
    cli(prog_name="flinkyarn")
