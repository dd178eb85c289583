"""What an application's next AppMaster attempt needs of the one before it, on the
default filesystem (`high-availability.storageDir`, one folder per application): where
Flink keeps its JobGraphStore, JobResultStore and leader information in ZooKeeper or
Kubernetes, we have YARN's attempts and HDFS.

    <folder>/jobs/<job id>.msgpack       every accepted JobGraph, before it is acknowledged
    <folder>/results/<job id>.json       the final JobDetails of every job that ended
    <folder>/commits/<job id>.<flags>    an empty file: the job finished and its output
                                         commit began (removed once its result is stored)
    <folder>/leader-<attempt>.json       each attempt's REST address, once it serves

Each file is written whole under a hidden name, then renamed: a reader sees all of it
or nothing. A job with a result is never run again; a job whose output commit began
has its commit finished by the next attempt, not run again (connectors/outputs.py);
any other job is run again by the next attempt. Clients find the AppMaster of the
newest attempt through its leader file (the REST address changes with the container)."""

from __future__ import annotations

import os
import re

import msgspec
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.ids import JobID
from flinkyarn.jobgraph import JobGraph

_LEADER = re.compile(r"leader-(\d+)\.json$")


class Leader(msgspec.Struct, frozen=True):
    """Where attempt `attempt` of the AppMaster serves."""

    attempt: int
    rest_address: str
    dashboard_url: str


# Left in the AppMaster's working folder when its end is the application's, whatever
# attempt it is: skein's ApplicationMaster then unregisters (yarn_client/skein_agent.py).
FINAL_END_FILE = "flinkyarn-final-end"


def attempt_of(container_id: str | None = None) -> int:
    """The application attempt a container belongs to (1 when not in a YARN container):
    container_[e<epoch>_]<cluster timestamp>_<application>_<attempt>_<container>."""
    container_id = container_id if container_id is not None else os.environ.get("CONTAINER_ID", "")
    parts = container_id.split("_")
    if len(parts) < 5 or not parts[-2].isdigit():
        return 1
    return int(parts[-2])


class JobStore:
    def __init__(self, folder: str) -> None:
        """`folder`: a local path or an hdfs:// URL, this application's own."""
        from flinkyarn.connectors import filesystems  # pyarrow: not for FINAL_END_FILE

        self.folder = folder
        self._files = filesystems.WholeFiles(folder)

    # ------------------------------------------------------------------ jobs

    def put_graph(self, graph: JobGraph) -> None:
        self._files.write(f"jobs/{graph.job_id}.msgpack", msgspec.msgpack.encode(graph))

    def put_result(self, details: JobDetails) -> None:
        self._files.write(f"results/{details.job_id}.json", msgspec.json.encode(details))

    def graphs(self) -> list[JobGraph]:
        """Every accepted JobGraph, in the order of their ids (an attempt resubmits those
        without a result)."""
        return [msgspec.msgpack.decode(self._files.read(f"jobs/{name}"), type=JobGraph)
                for name in self._files.names("jobs") if name.endswith(".msgpack")]

    def results(self) -> dict[JobID, JobDetails]:
        found = {}
        for name in self._files.names("results"):
            if name.endswith(".json"):
                details = msgspec.json.decode(self._files.read(f"results/{name}"),
                                              type=JobDetails)
                found[details.job_id] = details
        return found

    def put_commit_started(self, job_id: JobID, mark_success: bool, checkpointed: bool) -> None:
        """The job finished and its output commit begins, with these settings (in the
        empty file's name: nothing to write, so no data block on HDFS)."""
        self._files.write(f"commits/{job_id}.{_commit_flags(mark_success, checkpointed)}", b"")

    def commits_started(self) -> dict[JobID, tuple[bool, bool]]:
        """(mark_success, checkpointed) of each job whose output commit began."""
        found = {}
        for name in self._files.names("commits"):
            job_id, _, flags = name.partition(".")
            found[JobID(job_id)] = ("nomark" not in flags, "checkpointed" in flags)
        return found

    def forget_commit(self, job_id: JobID) -> None:
        for name in self._files.names("commits"):
            if name.partition(".")[0] == job_id:
                self._files.delete(f"commits/{name}")

    # ---------------------------------------------------------------- leaders

    def put_leader(self, leader: Leader) -> None:
        self._files.write(f"leader-{leader.attempt}.json", msgspec.json.encode(leader))

    def leader(self) -> Leader | None:
        """The newest attempt's leader file, if any attempt served yet."""
        attempts = [int(m.group(1)) for name in self._files.names()
                    if (m := _LEADER.match(name))]
        if not attempts:
            return None
        return msgspec.json.decode(self._files.read(f"leader-{max(attempts)}.json"),
                                   type=Leader)


def _commit_flags(mark_success: bool, checkpointed: bool) -> str:
    return f"{'mark' if mark_success else 'nomark'}-{'checkpointed' if checkpointed else 'staged'}"
