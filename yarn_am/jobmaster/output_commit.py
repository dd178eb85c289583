"""The JobMaster's last step for a job's file outputs (Flink's FinalizeOnMaster, Hadoop's
FileOutputCommitter's commitJob): when the job has FINISHED, every output's staging
folder is put in place at its target and marked `_SUCCESS`; when it FAILED or was
CANCELED, the staging folders are deleted. The file operations are
flinkyarn.connectors.outputs'; this module decides which to run, in what order, and
what a failure does to the job's result.

Transitions of the result:

    FINISHED -> FINISHED   every output committed (and marked, unless marking is off)
    FINISHED -> FAILED     a step failed (the cause names the output): the outputs
                           committed before it are put back as they were
    FAILED, CANCELED       unchanged; every staging folder is deleted

The JobMaster reports the job as RUNNING (FAILING, CANCELLING) while this runs, so no
one hears of its end before its outputs are final. A staging folder that cannot be
deleted is logged and changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from flinkyarn.jobgraph import JobGraph
from yarn_am.jobmaster.execution_graph import JobStatus

log = logging.getLogger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]


# What the JobMaster reports while it commits or discards: the job is not terminal to
# anyone asking before its outputs are final (Flink finalizes before the transition).
STATUS_WHILE_FINISHING = {JobStatus.FINISHED: JobStatus.RUNNING,
                          JobStatus.FAILED: JobStatus.FAILING,
                          JobStatus.CANCELED: JobStatus.CANCELLING}


async def finish_outputs(graph: JobGraph, status: JobStatus, cause: str | None,
                         run_blocking: RunBlocking, checkpointed: bool = False,
                         mark_success: bool = True,
                         recovering: bool = False) -> tuple[JobStatus, str | None]:
    """The job's result after its outputs are committed or discarded (see the module
    docstring). Called once, on the JobMaster's loop, after the job reached a terminal
    status and before it reports its result; `run_blocking` runs the filesystem calls
    off the loop. `checkpointed`: the job ran with checkpoints (its NO_OVERWRITE sinks
    wrote in place); `mark_success`: whether to write `_SUCCESS` (not after a stop with
    a savepoint, whose job goes on); `recovering`: an earlier AppMaster attempt began
    this commit (outputs.commit)."""
    if not graph.outputs:
        return status, cause
    # pyarrow only in an AppMaster whose jobs write files.
    from flinkyarn.connectors import outputs

    committed: list[outputs.Committed] = []
    if status is JobStatus.FINISHED:
        try:
            step = "committing"
            for output in graph.outputs:
                committed.append(await run_blocking(outputs.commit, output, checkpointed,
                                                    recovering))
            # Marked once all are in place: no marker for an output that is then undone.
            step = f"writing {outputs.SUCCESS_MARKER} into"
            for done in committed if mark_success else ():
                output = done.output
                await run_blocking(outputs.mark, done)
        except Exception as error:
            notes = "".join(f"; {note}" for note in getattr(error, "__notes__", ()))
            cause = f"{step} output {output.path} failed: {type(error).__name__}: {error}{notes}"
            log.error("job %s: %s", graph.job_id, cause)
            status = JobStatus.FAILED
            # Every output committed so far goes back as it was.
            for done in reversed(committed):
                try:
                    await run_blocking(outputs.undo, done)
                    log.info("job %s: put %s back as it was", graph.job_id, done.output.path)
                except Exception as undo_error:
                    log.error("job %s: putting %s back as it was failed: %s", graph.job_id,
                              done.output.path, undo_error)
                    cause += (f"; putting {done.output.path} back as it was failed too: "
                              f"{undo_error}")
            committed = []
    for done in committed:
        log.info("job %s: %s", graph.job_id, await run_blocking(outputs.finish, done))
    kept = {done.output.path for done in committed}
    for output in graph.outputs:
        if output.path in kept or output.staging is None:
            continue
        try:
            await run_blocking(outputs.discard, output)
        except Exception as error:
            log.warning("job %s: the staging folder %s of output %s could not be deleted: %s",
                        graph.job_id, output.staging, output.path, error)
    return status, cause
