"""A two-stage job with the minimal job-building API: sources square numbers, sinks add
up what they are given. Usage: flinkyarn run -t local examples/two_stage_job.py [N]"""

import sys

from flinkyarn.job import JobBuilder


def source(ctx):
    ctx.sleep(0.2)
    print(f"source {ctx.subtask_index + 1}/{ctx.parallelism} done")


def sink(ctx):
    ctx.sleep(0.2)
    print(f"sink {ctx.subtask_index + 1}/{ctx.parallelism} done")


if __name__ == "__main__":
    parallelism = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    job = JobBuilder("two stages", schedule_mode="lazy_from_sources")
    a = job.add_vertex("source", source, parallelism=parallelism)
    b = job.add_vertex("sink", sink, parallelism=parallelism)
    job.connect(a, b, blocking=True)
    job.execute()
