"""The JobMaster's last step for a job's OVERWRITE file outputs (Flink's
FinalizeOnMaster): when the job has FINISHED, each staging folder is swapped in for
its target; when it FAILED or was CANCELED, the staging folders are deleted. The file
operations are flinkyarn.connectors.outputs'; this module decides which to run and
what a failure does to the job's result.

Transitions of the result:

    FINISHED -> FINISHED   every output committed
    FINISHED -> FAILED     a commit failed (the cause names the output); the outputs not
                           yet committed are discarded
    FAILED, CANCELED       unchanged; every staging folder is discarded

A staging folder that cannot be deleted is logged and changes nothing.
"""

from __future__ import annotations

import logging
import traceback
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


def has_staged_outputs(graph: JobGraph) -> bool:
    return any(output.staging is not None for output in graph.outputs)


async def finish_outputs(graph: JobGraph, status: JobStatus, cause: str | None,
                         run_blocking: RunBlocking) -> tuple[JobStatus, str | None]:
    """The job's result after its OVERWRITE outputs are committed or discarded (see the
    module docstring). Called once, on the JobMaster's loop, after the job reached a
    terminal status and before it reports its result; `run_blocking` runs the
    filesystem calls off the loop."""
    # pyarrow only in an AppMaster whose jobs write files.
    from flinkyarn.connectors import outputs

    remaining = outputs.staged(graph.outputs)
    while status is JobStatus.FINISHED and remaining:
        output = remaining[0]
        try:
            done = await run_blocking(outputs.commit, output)
        except Exception as error:
            detail = "".join(traceback.format_exception_only(error)).strip()
            cause = f"committing output {output.path} failed: {detail}"
            log.error("job %s: %s", graph.job_id, cause)
            status = JobStatus.FAILED
            break
        remaining.pop(0)
        log.info("job %s: %s", graph.job_id, done)
    for output in remaining:
        try:
            await run_blocking(outputs.discard, output)
            log.info("job %s %s: deleted the staging folder %s of output %s", graph.job_id,
                     status.value, output.staging, output.path)
        except Exception as error:
            log.warning("job %s: the staging folder %s of output %s could not be deleted: %s",
                        graph.job_id, output.staging, output.path, error)
    return status, cause
