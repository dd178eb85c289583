"""The archive of ended jobs and of the applications they ran in (Flink's
`jobmanager.archive.fs.dir`, which its HistoryServer reads): what `flinkyarn list` and
`flinkyarn history-server` show once an application's AppMaster is gone.

    <archive>/<application id>/application.json    ArchivedApplication: written when the
                                                   AppMaster serves (RUNNING), again when
                                                   it ends (its final status)
    <archive>/<application id>/jobs/<job id>.json  ArchivedJob: written by the Dispatcher
                                                   when the job ends, before anyone
                                                   waiting hears of the end

Files are written whole (filesystems.WholeFiles). Unlike the job store, which only the
application's next attempt needs, the archive outlives the application: it is its
history, and stays until someone deletes the application's folder.
"""

from __future__ import annotations

import time

import msgspec

from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.jobgraph import JobGraph

APPLICATION = "application.json"
# An AppMaster leaves its application's page on the history server here, in its working
# folder, for skein's ApplicationMaster to give YARN as the final tracking URL
# (yarn_client/skein_agent.py).
FINAL_TRACKING_URL_FILE = "flinkyarn-final-tracking-url"


def history_page(history_server: str, application_id: str) -> str:
    """The page of an application on the history server at `history_server` (its root
    URL, ending in "/")."""
    return f"{history_server}applications/{application_id}/"


class ArchivedVertex(msgspec.Struct, frozen=True):
    vertex_id: str
    name: str
    parallelism: int
    operators: list[str] = []  # the chained operators' names, head first


class ArchivedEdge(msgspec.Struct, frozen=True):
    source: str           # vertex ids
    target: str
    partitioner: str      # forward, rebalance, hash, broadcast, ...
    blocking: bool        # the producer's result is complete before the consumer starts


class ArchivedJob(msgspec.Struct, frozen=True):
    application_id: str
    details: JobDetails                       # as the REST API gave it at the end
    vertices: list[ArchivedVertex] = []       # the job's graph
    edges: list[ArchivedEdge] = []
    configuration: dict[str, str] = {}        # the job's own settings
    archived_at: float = 0.0                  # seconds since the epoch

    @classmethod
    def of(cls, application_id: str, details: JobDetails, graph: JobGraph) -> ArchivedJob:
        return cls(application_id, details,
                   [ArchivedVertex(v.id, v.name, v.parallelism, [op.name for op in v.operators])
                    for v in graph.vertices],
                   [ArchivedEdge(e.source, e.target, e.partitioner.value,
                                 e.partition_type.value == "blocking") for e in graph.edges],
                   dict(graph.configuration), time.time())


class ArchivedApplication(msgspec.Struct, frozen=True):
    application_id: str
    name: str
    mode: str                      # "per-job" or "session"
    user: str
    start_time: float              # when its AppMaster (first attempt) served
    status: str = "RUNNING"        # then YARN's final status: SUCCEEDED, FAILED, KILLED
    end_time: float | None = None
    diagnostics: str = ""
    attempt: int = 1               # the AppMaster attempt that wrote it last

    def ended(self, status: str, diagnostics: str, attempt: int) -> ArchivedApplication:
        return msgspec.structs.replace(self, status=status, diagnostics=diagnostics,
                                       end_time=time.time(), attempt=attempt)


class JobArchive:
    """One archive folder (a local path or an hdfs:// URL) with every application's."""

    def __init__(self, folder: str) -> None:
        # Here, not at the top: pyarrow (with numpy, 0.3 s) is no part of the client's
        # start unless it reads or writes an archive.
        from flinkyarn.connectors import filesystems

        self.folder = folder
        self._files = filesystems.WholeFiles(folder)

    # --------------------------------------------------------------- writing

    def put_application(self, application: ArchivedApplication) -> None:
        self._files.write(f"{application.application_id}/{APPLICATION}",
                          msgspec.json.encode(application))

    def put_job(self, job: ArchivedJob) -> None:
        self._files.write(f"{job.application_id}/jobs/{job.details.job_id}.json",
                          msgspec.json.encode(job))

    # --------------------------------------------------------------- reading

    def application(self, application_id: str) -> ArchivedApplication | None:
        """None when the archive has nothing of it."""
        try:
            data = self._files.read(f"{application_id}/{APPLICATION}")
        except FileNotFoundError:
            return None
        return msgspec.json.decode(data, type=ArchivedApplication)

    def applications(self) -> list[ArchivedApplication]:
        """Every archived application, the newest first; folders without a readable
        application file (being written, or not ours) are left out."""
        found = []
        for name in self._files.names():
            try:
                application = self.application(name)
            except (OSError, msgspec.DecodeError):
                continue
            if application is not None:
                found.append(application)
        return sorted(found, key=lambda a: a.start_time, reverse=True)

    def jobs(self, application_id: str) -> list[ArchivedJob]:
        """The application's archived jobs, the newest first."""
        jobs = [msgspec.json.decode(self._files.read(f"{application_id}/jobs/{name}"),
                                    type=ArchivedJob)
                for name in self._files.names(f"{application_id}/jobs") if name.endswith(".json")]
        return sorted(jobs, key=lambda j: j.details.start_time, reverse=True)

    def job(self, application_id: str, job_id: str) -> ArchivedJob | None:
        try:
            data = self._files.read(f"{application_id}/jobs/{job_id}.json")
        except FileNotFoundError:
            return None
        return msgspec.json.decode(data, type=ArchivedJob)


def find_application(archives: list[JobArchive], application_id: str
                     ) -> tuple[JobArchive, ArchivedApplication] | None:
    """The first archive (of those a history server reads) that has the application."""
    for archive in archives:
        application = archive.application(application_id)
        if application is not None:
            return archive, application
    return None
