"""The `flinkyarn` command."""

from __future__ import annotations

import click

import flinkyarn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(flinkyarn.__version__, prog_name="flinkyarn")
def cli() -> None:
    """Run Python pipelines with Flink's runtime on Hadoop YARN."""


def main() -> None:
    # click exits 2 on a usage error (unknown option or command), as the CLI promises.
    cli(prog_name="flinkyarn")
