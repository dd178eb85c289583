"""The `flinkyarn` command.

Exit codes: 0 the job(s) finished; 1 a job failed or was canceled, or the program
failed; 2 a usage error (unknown option, bad -D value, missing file).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import click

import flinkyarn
from flinkyarn.configuration import Configuration, ConfigurationError, parse_dynamic_properties
from flinkyarn.environment import JobResult
from flinkyarn.jobgraph import JobGraph
from yarn_client.executors import ClusterExecutor
from yarn_client.local_cluster import ClusterStartError, LocalCluster
from yarn_client.programs import GraphCapture, ProgramAborted, pyspark_job_graph, run_program
from yarn_client.rest_client import RestError

TARGETS = ("local",)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(flinkyarn.__version__, prog_name="flinkyarn")
def cli() -> None:
    """Run Python pipelines with Flink's runtime on Hadoop YARN."""


def load_configuration(properties: tuple[str, ...]) -> Configuration:
    try:
        return Configuration.load(overrides=parse_dynamic_properties(properties))
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None


class LocalTargetExecutor:
    """Starts the local cluster on the program's first job and keeps it for the rest."""

    def __init__(self, conf: Configuration) -> None:
        self.cluster = LocalCluster(conf)
        self.results: list[JobResult] = []
        self._executor: ClusterExecutor | None = None

    def execute(self, graph: JobGraph) -> JobResult:
        if self._executor is None:
            click.echo("starting a local cluster ...", err=True)
            self._executor = ClusterExecutor(self.cluster.start())
        result = self._executor.execute(graph)
        self.results.append(result)
        _print_result(result)
        return result

    def cancel_running(self) -> None:
        if self._executor is None:
            return
        for job_id in self._executor.submitted:
            try:
                if self._executor.rest.job(job_id).status not in ("FINISHED", "FAILED", "CANCELED"):
                    self._executor.rest.cancel(job_id)
                    click.echo(f"cancelled job {job_id}", err=True)
            except RestError:
                pass

    def stop(self) -> None:
        self.cluster.stop()


def _print_result(result: JobResult) -> None:
    line = f"Job {result.job_id} {result.status} in {result.duration:.1f} s"
    if result.failure_cause:
        line += f"\n  cause: {result.failure_cause.strip()}"
    click.echo(line)


PROGRAM_SETTINGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


@cli.command(context_settings=PROGRAM_SETTINGS)
@click.option("-t", "--target", type=click.Choice(TARGETS), default="local", show_default=True,
              help="Where to run: `local` starts an AppMaster and TaskExecutors as local processes.")
@click.option("-D", "properties", multiple=True, metavar="KEY=VALUE",
              help="Override a configuration option (see conf/flinkyarn.yaml).")
@click.option("--pyspark", is_flag=True,
              help="PROGRAM is an unmodified PySpark script: run it as a job of one task "
                   "with a TaskExecutor's SparkSession.")
@click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(target: str, properties: tuple[str, ...], pyspark: bool, program: Path,
        args: tuple[str, ...]) -> None:
    """Run PROGRAM (a Python file that builds and executes jobs) with ARGS."""
    if not program.is_file():
        raise click.BadParameter(f"no such file: {program}", param_hint="PROGRAM")
    conf = load_configuration(properties)
    executor = LocalTargetExecutor(conf)
    code = 0
    try:
        if pyspark:
            executor.execute(pyspark_job_graph(program, args))
        else:
            run_program(program, args, executor)
    except KeyboardInterrupt:
        click.echo("interrupted: cancelling and stopping the cluster", err=True)
        executor.cancel_running()
        code = 1
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except ClusterStartError as error:
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
        elif any(not r.succeeded for r in executor.results):
            code = 1
    sys.exit(code)


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


def main() -> None:
    # click exits 2 on a usage error (unknown option or command), as the CLI promises.
    cli(prog_name="flinkyarn")
