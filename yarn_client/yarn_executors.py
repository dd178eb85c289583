"""Job executors for the YARN targets: a per-job cluster for each job, or a session."""

from __future__ import annotations

import sys
import time
from typing import Mapping, TextIO

from flinkyarn import kerberos, options
from flinkyarn.configuration import Configuration
from flinkyarn.environment import JobResult
from flinkyarn.gateways.dispatcher import JobDetails
from flinkyarn.jobgraph import JobGraph
from yarn_client import yarn_cluster
from yarn_client.rest_client import RestClient
from yarn_client.executors import (ClusterExecutor, OutputPrinter, check_outputs, follow,
                                   result_of)
from yarn_client.rest_client import RestError
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnDeploymentError, YarnOptions

JOB_STATUS_OF = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "KILLED": "CANCELED"}


def follow_attempts(app_id: str, job_store: str, rest: RestClient, job_id: str, out: TextIO,
                    conf: Configuration | None = None) -> tuple[JobDetails | None, RestClient]:
    """Follows the job to its end through every AppMaster attempt of the application
    (saying so when a new one takes over, where the job goes on); returns its final
    details, or None when the application ended without the client seeing the job's
    end (YARN has the last word then), and the REST client of the last attempt."""
    # This loop moves to a newer attempt itself, saying so: not the client's `relocate`.
    rest = RestClient(rest.address, rest.security, rest.timeout, rest.attempt)
    while True:
        try:
            return follow(rest, job_id, out, output=OutputPrinter(rest, job_id)), rest
        except RestError:  # ended with the job, or lost
            found = yarn_cluster.replacement(app_id, job_store, rest.attempt, rest, conf)
        if found is None:
            return None, rest
        if found.attempt != rest.attempt:
            print(f"the AppMaster was replaced: attempt {found.attempt} serves now "
                  f"(attempt {rest.attempt} ended: {found.previous_end or 'YARN does not say how'}); "
                  f"job {job_id[:8]} goes on there", file=out, flush=True)
        rest = found.rest


class YarnSessionClusterExecutor(ClusterExecutor):
    """A session's: follows its jobs through AppMaster attempts."""

    def __init__(self, app_id: str, job_store: str, rest: RestClient, out: TextIO,
                 job_settings: Mapping[str, str] | None, conf: Configuration | None) -> None:
        super().__init__(rest, out, job_settings)
        self.app_id, self.job_store, self.conf = app_id, job_store, conf

    def follow(self, job_id: str) -> JobDetails:
        if not self.job_store:  # a session started before job stores: no other attempt
            return super().follow(job_id)
        details, _ = follow_attempts(self.app_id, self.job_store, self.rest, job_id, self.out,
                                     self.conf)
        if details is None:
            raise RestError(f"session {self.app_id} ended before job {job_id} did")
        return details


class PerJobExecutor:
    """`-t yarn-per-job`: each job gets an application of its own that ends with it.
    Attached, it follows the job and then the application to its final status; detached,
    it prints the application id and returns at once."""

    def __init__(self, conf: Configuration, yarn: YarnOptions, detached: bool,
                 out: TextIO = sys.stderr) -> None:
        self.descriptor = YarnClusterDescriptor(conf, yarn, out)
        self.detached = detached
        self.out = out
        self.results: list[JobResult] = []
        self.applications: list[str] = []
        self.rest: RestClient | None = None

    def execute(self, graph: JobGraph) -> JobResult:
        start = time.monotonic()
        if graph.outputs:
            kerberos.client_login(self.descriptor.conf)  # HDFS is asked as the submitter
        # Before an application exists.
        check_outputs(graph, options.resumes(graph, self.descriptor.conf))
        yarn_cluster.sweep_leftovers(self.descriptor.conf, self.out)
        deployment = self.descriptor.deploy("per-job", graph)
        self.applications.append(deployment.app_id)
        self.rest = deployment.rest
        print(f"dashboard: {yarn_cluster.rm_web_address()}/proxy/{deployment.app_id}/pages/flinkyarn/",
              file=self.out, flush=True)
        if self.detached:
            print(f"detached: job {graph.job_id} runs in {deployment.app_id}", file=self.out)
            result = JobResult(graph.job_id, "SUBMITTED", None, 0.0)
            self.results.append(result)
            return result
        details = self._follow(deployment, graph)
        report = yarn_cluster.wait_for_end(deployment.app_id)
        # An AppMaster killed on its last attempt could not remove what it kept on HDFS
        # (one that succeeded did: nothing to ask HDFS then).
        if report["finalStatus"] != "SUCCEEDED":
            try:
                yarn_cluster.remove_leftovers(deployment.app_id, self.descriptor.conf)
            except Exception as error:  # best effort: the job's result matters more
                print(f"could not remove what {deployment.app_id} left on HDFS: {error}",
                      file=self.out, flush=True)
        print(f"application {deployment.app_id} {report['state']}/{report['finalStatus']}"
              f"{': ' + report['diagnostics'].strip() if report.get('diagnostics') else ''}",
              file=self.out, flush=True)
        if details is not None:
            result = result_of(details)
        else:
            status = JOB_STATUS_OF.get(report["finalStatus"], "FAILED")
            cause = None if status == "FINISHED" else report.get("diagnostics")
            result = JobResult(graph.job_id, status, cause, time.monotonic() - start)
        self.results.append(result)
        return result

    def _follow(self, deployment: yarn_cluster.Deployment, graph: JobGraph) -> JobDetails | None:
        details, self.rest = follow_attempts(deployment.app_id, deployment.job_store,
                                             deployment.rest, graph.job_id, self.out,
                                             self.descriptor.conf)
        return details

    def cancel_running(self) -> None:
        for app_id in self.applications:
            try:
                if yarn_cluster.application_report(app_id)["state"] not in yarn_cluster.TERMINAL:
                    yarn_cluster.kill(app_id)
                    print(f"killed {app_id}", file=self.out)
            except Exception as error:  # best effort on the way out
                print(f"could not kill {app_id}: {error}", file=self.out)

    def stop(self) -> None:
        pass


class SessionExecutor:
    """`-t yarn-session`: submits into a running session (the given one, or the newest
    of this user's)."""

    def __init__(self, application_id: str | None, out: TextIO = sys.stderr,
                 job_settings: Mapping[str, str] | None = None,
                 conf: Configuration | None = None) -> None:
        if application_id is None:
            sessions = yarn_cluster.flinkyarn_applications(tag="flinkyarn-session", states=("RUNNING",))
            if not sessions:
                raise YarnDeploymentError("no running flinkyarn session of yours; start one with "
                                          "`flinkyarn session start`")
            application_id = sessions[0]["id"]
        self.app_id = application_id
        self.out = out
        # The client's configuration: who it is on a secure cluster (a keytab of -D).
        rest = yarn_cluster.connect(application_id, conf)
        self.executor = YarnSessionClusterExecutor(
            application_id, yarn_cluster.job_store_of(application_id), rest, out, job_settings,
            conf)
        self.rest = self.executor.rest
        self.results: list[JobResult] = []

    def execute(self, graph: JobGraph) -> JobResult:
        # Before the job is submitted.
        check_outputs(graph, options.resumes(graph, settings=self.executor.job_settings))
        print(f"submitting into session {self.app_id}", file=self.out, flush=True)
        result = self.executor.execute(graph)
        self.results.append(result)
        return result

    def cancel_running(self) -> None:
        for job_id in self.executor.submitted:
            try:
                self.rest.cancel(job_id)
            except RestError:
                pass

    def stop(self) -> None:
        pass
