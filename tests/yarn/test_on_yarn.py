"""flinkyarn on the real local Hadoop: per-job and session clusters, as users and
admins see them (the CLI, the ResourceManager's REST API, the YARN web proxy)."""

from __future__ import annotations

import contextlib
import html
import re
import socket
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path

import cloudpickle
import pytest
import requests

import local_hadoop
from flinkyarn import hadoop
from flinkyarn.configuration import Configuration
from flinkyarn.connectors.filesystems import resolve
from flinkyarn.hadoop import site_properties
from flinkyarn.job import JobBuilder
from flinkyarn.resources import ResourceProfile
from tests import browser
from tests.local import intruder, jobs
from tests.waiting import wait_for
from tests.local.test_metrics import scrape
from yarn_client import yarn_cluster
from yarn_client.rest_client import RestError
from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions

cloudpickle.register_pickle_by_value(jobs)
cloudpickle.register_pickle_by_value(intruder)
REPO = Path(__file__).resolve().parents[2]

TAG = f"flinkyarn-test-{uuid.uuid4().hex[:8]}"
FAST = ["-D", "heartbeat.interval=1 s", "-D", "heartbeat.timeout=10 s"]
LINES = 300


@pytest.fixture(scope="module", autouse=True)
def nothing_left_running(hadoop):
    yield
    leftovers = yarn_cluster.flinkyarn_applications(tag=TAG)
    for app in leftovers:
        yarn_cluster.kill(app["id"])
    assert leftovers == [], f"applications left running: {[a['id'] for a in leftovers]}"


def flinkyarn(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "yarn_client", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout)


def our_applications(states=("FINISHED", "FAILED", "KILLED", "RUNNING", "ACCEPTED")):
    return yarn_cluster.flinkyarn_applications(states=states, tag=TAG)


@pytest.fixture
def shared_folder(hadoop) -> str:
    """A new folder on HDFS, which the test and every container reach (none of them sees
    the client's tmp_path), removed after the test."""
    url = f"{local_hadoop.DEFAULT_FS}/tmp/flinkyarn-tests/{uuid.uuid4().hex}"
    jobs.make_folder(url)
    yield url
    filesystem, path = resolve(url)
    filesystem.delete_dir(path)


FAILING = """
import pyarrow as pa
from flinkyarn import Pipeline

def rows(subtask, parallelism):
    yield pa.record_batch([pa.array([1, 2, 3])], names=["x"])

def reject(batch):
    raise ValueError("row 2 has no customer")

p = Pipeline("failing job", parallelism=1)
p.from_generator(rows).map(reject, name="validate").write_parquet("/tmp/flinkyarn-never")
p.execute()
"""


def test_failing_job_fails_the_application_with_its_error(tmp_path):
    program = tmp_path / "failing.py"
    program.write_text(FAILING)
    tag = f"{TAG}-fail"

    result = flinkyarn("run", *FAST, "--tags", tag, str(program))  # yarn-per-job: the default here

    assert result.returncode == 1
    [app] = yarn_cluster.flinkyarn_applications(states=("FINISHED", "FAILED"), tag=tag)
    assert app["finalStatus"] == "FAILED"
    assert "operator 'validate': ValueError: row 2 has no customer" in app["diagnostics"]
    assert "ValueError: row 2 has no customer" in result.stdout
    # The job's failure is the application's end: YARN starts no other AppMaster attempt
    # to run it again (or to report it again).
    attempts = hadoop.rm_request(f"/ws/v1/cluster/apps/{app['id']}/appattempts")
    assert len(attempts["appAttempts"]["appAttempt"]) == 1
    assert "AppMaster attempt" not in app["diagnostics"]


def test_requests_yarn_can_never_satisfy_are_refused_at_submit():
    tag = f"{TAG}-refused"
    too_big = flinkyarn("run", "--tags", tag, "-D", "taskmanager.memory.process.size=64 gb",
                        "examples/two_stage_job.py")
    assert too_big.returncode == 1
    assert "taskmanager.memory.process.size" in too_big.stderr
    # The cluster's maximum allocation, as configured: it depends on the node count.
    allowed = site_properties("yarn-site.xml")["yarn.scheduler.maximum-allocation-mb"]
    assert f"more than the {allowed} MiB YARN allows" in too_big.stderr
    bad_queue = flinkyarn("run", "--tags", tag, "--queue", "no-such-queue", "examples/two_stage_job.py")
    assert bad_queue.returncode == 1
    assert "unknown YARN queue 'no-such-queue'" in bad_queue.stderr
    # Refused before submission: YARN never saw an application.
    assert yarn_cluster.flinkyarn_applications(
        tag=tag, states=("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED",
                         "FAILED", "KILLED")) == []


def running_containers(app_id: str) -> int:
    from yarn_client import skein_agent

    with skein_agent.client(log=False) as client:
        return len(client.connect(app_id).get_containers(["taskexecutor"], ["RUNNING"]))


def dashboard_target(app_id: str) -> str:
    from yarn_client import skein_agent

    with skein_agent.client(log=False) as client:
        return client.connect(app_id).ui.get_pages()["flinkyarn"].target


WAITS_FOR_YARN = re.compile(r"waiting for 1 container\(s\) of \d+ MB: (queue 'default' is at its "
                            r"limit \(\d+ of \d+ MB used\)|no node has \d+ MB free .*)")


def fill_the_cluster() -> str:
    """Starts another YARN application whose containers take all the memory the cluster
    has left (or more: the rest of its requests wait); returns its id once they do."""
    import skein

    from yarn_client import skein_agent

    size = 1024
    spec = skein.ApplicationSpec(
        name="fills the cluster", queue="default", tags=[TAG],
        master=skein.Master(resources=skein.Resources(memory=256, vcores=1)),
        services={"sleep": skein.Service(instances=16, resources=skein.Resources(memory=size, vcores=1),
                                         script="sleep 600")})
    # Of type flinkyarn (the test finds it by type and tag); its ApplicationMaster is
    # skein's own: the specification does not localize the agent.
    with skein_agent.client(log=False) as client:
        app_id = client.submit(spec)

    def full() -> bool:
        nodes = hadoop.rm_request("/ws/v1/cluster/nodes?states=RUNNING")["nodes"]["node"]
        return all(node["availMemoryMB"] < size for node in nodes)
    wait_for(full, 120, "the other application's containers")
    return app_id


def waiting_job(name: str, folder: str, parallelism: int):
    job = JobBuilder(name)
    job.add_vertex(name, jobs.wait_for_go(folder), parallelism=parallelism)
    return job.build()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_session_runs_four_jobs_two_at_once_releases_idle_containers_stops_and_is_history(
        shared_folder):
    history_port = free_port()
    conf = Configuration.load(overrides={"heartbeat.interval": "1 s", "heartbeat.timeout": "10 s",
                                         "resourcemanager.taskmanager-timeout": "4 s",
                                         "taskmanager.numberOfTaskSlots": "2",
                                         "resourcemanager.max-taskmanagers": "1000",
                                         "historyserver.web.address": "127.0.0.1",
                                         "historyserver.web.port": str(history_port)})
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(TAG,))).deploy("session")
    rest, app_id = deployment.rest, deployment.app_id
    try:
        assert yarn_cluster.application_report(app_id)["state"] == "RUNNING"
        first, second = jobs.join(shared_folder, "first"), jobs.join(shared_folder, "second")
        a = rest.submit(waiting_job("first", first, 2))
        b = rest.submit(waiting_job("second", second, 2))
        wait_for(lambda: all(sum(v.state_counts.get("RUNNING", 0) for v in rest.job(j).vertices) == 2
                             for j in (a, b)), 180, "two jobs running at once")
        assert running_containers(app_id) == 2  # two TaskExecutors of two slots
        # Each TaskExecutor's Prometheus endpoint, on its node's address, and the
        # AppMaster's, as the REST API advertises them.
        overview = rest.overview()
        tasks = [sample.labels["job_id"] for task_executor in overview.task_executors
                 for sample in scrape(task_executor.metrics_address)["flinkyarn_task_records_in_total"]]
        assert sorted(tasks) == sorted([a, a, b, b])
        assert scrape(overview.metrics_address)["flinkyarn_taskexecutors"][0].value == 2
        jobs.go(first), jobs.go(second)
        wait_for(lambda: {rest.job(j).status for j in (a, b)} == {"FINISHED"}, 60, "both finished")

        third = jobs.join(shared_folder, "third")
        jobs.go(third)
        c = rest.submit(waiting_job("third", third, 1))
        wait_for(lambda: rest.job(c).status == "FINISHED", 120, "the third job")
        broken = JobBuilder("broken")
        broken.add_vertex("check", jobs.failing("the input has no header row"), parallelism=1)
        d = rest.submit(broken.build())
        wait_for(lambda: rest.job(d).status == "FAILED", 120, "the failing job")
        # A task asking for more than any slot of the session's containers has fails at
        # once with that reason, not after slot.request.timeout.
        greedy = JobBuilder("greedy")
        greedy.add_vertex("big", jobs.quick(shared_folder), parallelism=1,
                          resources=ResourceProfile(1.0, 64 * 1024))
        e = rest.submit(greedy.build())
        wait_for(lambda: rest.job(e).status == "FAILED", 10, "the greedy job to fail at once")
        assert "no slot can serve profile" in rest.job(e).failure_cause
        # A pipelined region wider than the queue could ever hold is refused at submit,
        # by the AppMaster asking YARN (from its container, on a node of its own).
        wide = JobBuilder("wide")
        wide.connect(wide.add_vertex("src", jobs.quick(shared_folder), parallelism=1000),
                     wide.add_vertex("sink", jobs.quick(shared_folder), parallelism=1000))
        with pytest.raises(RestError, match=r"needs 1000 slots at once .* can ever offer: \d+ "
                                            r"\(\d+ TaskExecutors of 2 slots .*; YARN queue "
                                            r"'default' holds at most \d+ MiB"):
            rest.submit(wide.build())
        # Idle TaskExecutors go after resourcemanager.taskmanager-timeout; so do their containers.
        wait_for(lambda: running_containers(app_id) == 0, 60, "idle containers released")
        assert rest.overview().task_executors == []
        assert sorted(j.status for j in rest.jobs().jobs) == ["FAILED"] * 2 + ["FINISHED"] * 3
    finally:
        result = flinkyarn("session", "stop", app_id)
    assert result.returncode == 0, result.stderr
    report = yarn_cluster.application_report(app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")

    # The AppMaster is gone; its archive on HDFS says what ran and how it ended.
    listed = flinkyarn("list", app_id)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith(f"{app_id}  SUCCEEDED (ended 20")
    assert sorted(line.split()[1] for line in lines if line.startswith("  ") and
                  line.split()[0] in (a, b, c, d)) == ["FAILED"] + ["FINISHED"] * 3
    cause = lines[lines.index(next(line for line in lines if line.startswith(f"  {d}"))) + 1]
    assert cause.startswith("    root cause:") and "the input has no header row" in cause
    assert app_id in flinkyarn("list", "--all").stdout
    # ... and the history server serves the dashboard's page of it, where YARN's tracking
    # URL of the ended application leads (through YARN's web proxy).
    server = subprocess.Popen([sys.executable, "-m", "yarn_client", "history-server",
                               "-D", f"historyserver.web.port={history_port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        url = server.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{history_port}/", server.stderr.read() if server.poll() else url
        index = browser.dump_dom(url)
        assert f'href="applications/{app_id}/"' in index
        tracking = yarn_cluster.application_report(app_id)["trackingUrl"]
        assert "/proxy/" in tracking, tracking
        page = browser.dump_dom(tracking)
        assert all(f'id="job-{job}"' in page for job in (a, b, c, d)), page[-2000:]
        assert "the input has no header row" in page and "SUCCEEDED" in page
    finally:
        server.terminate()
        server.wait(10)


def test_tracking_url_leads_through_the_proxy_to_the_dashboard(shared_folder, tmp_path):
    """What an admin sees through the YARN web proxy, in a browser: a finished wordcount's
    graph and record counts, a running job, the TaskExecutors with links to their
    containers' logs; and what the session's owner may do there: cancel a job."""
    conf = Configuration.load(overrides={"heartbeat.interval": "1 s", "heartbeat.timeout": "10 s"})
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(TAG,), name="dashboard test")) \
        .deploy("session")
    rest, app_id = deployment.rest, deployment.app_id
    shots: list[tuple[str, Path]] = []  # what to take a screenshot of if the test fails
    try:
        source = jobs.join(shared_folder, "lines.txt")
        jobs.write_text(source, "".join(f"the quick fox {i % 13} jumps\n" for i in range(LINES)))
        counted = rest.submit(jobs.wordcount(source, jobs.join(shared_folder, "counts")).job_graph())
        wait_for(lambda: rest.job(counted).status == "FINISHED", 180, "the wordcount")
        job_id = rest.submit(waiting_job("shown on the dashboard", shared_folder, 1))
        wait_for(lambda: rest.job(job_id).vertices[0].state_counts.get("RUNNING") == 1,
                 120, "the task running in a TaskExecutor container")
        tracking = yarn_cluster.application_report(app_id)["trackingUrl"]
        assert "/proxy/" in tracking
        dashboard = tracking.rstrip("/") + "/pages/flinkyarn/"
        shots.append((dashboard, tmp_path / "dashboard.png"))

        overview = browser.dump_dom(tracking)
        assert "flinkyarn dashboard" in overview
        page = browser.dump_dom(dashboard, wait_ms=4000)
        assert "shown on the dashboard" in page and "RUNNING" in page
        # The wordcount's graph: as many boxes and arrows as its job graph has vertices
        # and edges, with their partitioners; its source emitted one record per line.
        wordcount = rest.job(counted)
        graph = re.search(rf'<svg class="job-graph" id="graph-{counted}".*?</svg>', page, re.S)
        assert graph, page[-3000:]
        assert graph.group(0).count('<g class="vertex') == len(wordcount.vertices) == 3
        assert graph.group(0).count('<path class="edge"') == \
            sum(len(v.inputs) for v in wordcount.vertices) == 2
        assert ">rebalance</text>" in graph.group(0) and ">hash (word)</text>" in graph.group(0)
        lines_row = re.search(r'<tr class="vertex"><td>Source: lines</td>.*?</tr>', page, re.S).group(0)
        assert f'<td class="records-out">{LINES}</td>' in lines_row
        # Each TaskExecutor with its container, its node and a link to its container's
        # logs in the NodeManager's web UI, where its own log lines are.
        [executor] = [te for te in rest.overview().task_executors
                      if any(s.job_id == job_id for s in te.slots)]
        assert executor.container_id.startswith("container_") and executor.log_url
        row = re.search(rf'<tr class="executor" id="te-{executor.resource_id}">.*?</tr>',
                        page, re.S).group(0)
        assert f"<code>{executor.container_id}</code>" in row and executor.host in row
        link = re.search(r'<a class="log" href="([^"]+)">logs</a>', row).group(1)
        assert link == html.escape(executor.log_url), (link, executor.log_url)
        shots.append((executor.log_url, tmp_path / "container-logs.png"))
        logs_page = browser.dump_dom(executor.log_url)
        assert f"TaskExecutor {executor.resource_id} serving on" in logs_page, logs_page[-2000:]

        # Another application takes the rest of the cluster: a job that needs one more
        # TaskExecutor waits, and within 10 s it is told why, in the job's details and
        # `flinkyarn list`. It runs once the other application ends.
        filler = fill_the_cluster()
        try:
            behind_folder = jobs.join(shared_folder, "behind")
            jobs.make_folder(behind_folder)
            # One subtask takes the free slot, the other needs a new container.
            behind_id = rest.submit(waiting_job("behind another application", behind_folder, 2))
            wait_for(lambda: WAITS_FOR_YARN.fullmatch(rest.job(behind_id).waiting), 10,
                     "the reason the job waits")
            listed = flinkyarn("list", app_id)
            assert f"{behind_id}  RUNNING" in listed.stdout, listed.stdout
            assert any(WAITS_FOR_YARN.fullmatch(line.strip()) for line in listed.stdout.splitlines())
        finally:
            yarn_cluster.kill(filler)
        wait_for(lambda: len(jobs.markers(behind_folder, "started")) == 2, 120,
                 "the job behind running in full")
        assert rest.job(behind_id).waiting == ""
        jobs.go(behind_folder)
        wait_for(lambda: rest.job(behind_id).status == "FINISHED", 60, "the job behind")

        # Cancel from the dashboard, through the proxy: refused without the session's
        # token (and nothing happens), done with it.
        cancel = f"{dashboard}api/jobs/{job_id}/cancel"
        # A PUT, as the page's button makes it: YARN's proxy forwards only GET and PUT.
        refused = requests.put(cancel, json={"token": "guess"}, timeout=30)
        assert refused.status_code == 403 and "flinkyarn session token" in refused.json()["error"]
        assert rest.job(job_id).status == "RUNNING"
        token = flinkyarn("session", "token", app_id)
        assert token.returncode == 0, token.stderr
        done = requests.put(cancel, json={"token": token.stdout.strip()}, timeout=30)
        assert done.status_code == 202, done.text
        wait_for(lambda: rest.job(job_id).status == "CANCELED", 60, "the job canceled")
        assert jobs.markers(shared_folder, "stopped") == {"shown on the dashboard-0-0"}
        shots.clear()

        # Clients are given that proxied address; the page itself is on the AppMaster's
        # loopback under a secret path, not on its node's address.
        assert deployment.dashboard_url.startswith(tracking.rstrip("/") + "/pages/flinkyarn")
        target = urllib.parse.urlsplit(dashboard_target(app_id))
        assert target.hostname == "127.0.0.1" and len(target.path.strip("/")) == 32
        node = yarn_cluster.application_report(app_id)["amHostHttpAddress"]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((node.split(":")[0], target.port), timeout=5).close()

        # What an operator does from the shell: list and read the logs.
        listed = flinkyarn("list", app_id)
        assert listed.returncode == 0 and f"{job_id}  CANCELED" in listed.stdout, listed.stdout
        logs = flinkyarn("logs", app_id, "--job", job_id)
        assert logs.returncode == 0, logs.stderr
        assert f"job {job_id} CANCELED" in logs.stdout
    finally:
        for url, path in shots:
            with contextlib.suppress(Exception):  # the failure itself is what pytest shows
                print(f"screenshot of {url}: {browser.screenshot(url, path)}")
        flinkyarn("session", "stop", app_id)


def test_detached_per_job_returns_at_once_and_the_job_runs_to_the_end():
    tag = f"{TAG}-detached"
    result = flinkyarn("run", "--detached", *FAST, "--tags", tag, "examples/two_stage_job.py", "2")
    assert result.returncode == 0, result.stderr
    [app] = yarn_cluster.flinkyarn_applications(tag=tag, states=("ACCEPTED", "RUNNING", "FINISHED"))
    assert f"runs in {app['id']}" in result.stderr
    report = yarn_cluster.wait_for_end(app["id"], timeout=180)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")


def test_a_tasks_code_has_no_keys_to_the_session_and_a_stuck_cancel_ends_its_container(
        shared_folder):
    """Issue 12 on YARN. Finding 7: a TaskExecutor container holds only the TaskExecutors'
    certificate; code of a task, with it, is refused by the REST API and the
    Dispatcher, and the job it attacks runs on. Finding 2: a task that ignores its
    cancellation fails its TaskExecutor after task.cancellation.timeout: the job ends
    CANCELED, the container ends, and the next job runs in a new one."""
    conf = Configuration.load(overrides={"heartbeat.interval": "1 s", "heartbeat.timeout": "10 s",
                                         "taskmanager.numberOfTaskSlots": "2",
                                         "task.cancellation.interval": "1 s",
                                         "task.cancellation.timeout": "5 s"})
    deployment = YarnClusterDescriptor(conf, YarnOptions(tags=(TAG,))).deploy("session")
    rest, app_id = deployment.rest, deployment.app_id
    try:
        victim_folder, stuck_folder, after = (jobs.join(shared_folder, name)
                                              for name in ("victim", "stuck", "after"))
        for folder in (victim_folder, stuck_folder, after):
            jobs.make_folder(folder)
        victim = rest.submit(waiting_job("victim", victim_folder, 1))
        wait_for(lambda: jobs.markers(victim_folder, "started"), 180, "the victim running")
        attack = JobBuilder("intruder")
        attack.add_vertex("tries", intruder.try_the_keys(
            rest.address, "skein-kv:flinkyarn.rpc_address", victim, shared_folder),
            parallelism=1)
        attack_id = rest.submit(attack.build())
        wait_for(lambda: rest.job(attack_id).status in ("FINISHED", "FAILED"), 120,
                 "the intruder's job to end")
        assert intruder.read_report(shared_folder) == intruder.EXPECTED
        assert rest.job(attack_id).status == "FINISHED", rest.job(attack_id).failure_cause
        assert rest.job(victim).status == "RUNNING"
        jobs.go(victim_folder)
        wait_for(lambda: rest.job(victim).status == "FINISHED", 60, "the victim to finish")

        stuck = JobBuilder("stuck")
        stuck.add_vertex("sleeps", jobs.ignores_cancellation(stuck_folder), parallelism=1)
        stuck_id = rest.submit(stuck.build())
        wait_for(lambda: jobs.markers(stuck_folder, "started"), 120, "the stuck task running")
        [holder] = [te.resource_id for te in rest.overview().task_executors
                    if any(s.job_id == stuck_id for s in te.slots)]
        rest.cancel(stuck_id)
        wait_for(lambda: rest.job(stuck_id).status == "CANCELED", 60, "the stuck job canceled")
        wait_for(lambda: holder not in {te.resource_id for te in rest.overview().task_executors},
                 60, "the stuck TaskExecutor gone")
        jobs.go(after)
        next_id = rest.submit(waiting_job("after", after, 1))
        wait_for(lambda: rest.job(next_id).status == "FINISHED", 180, "the next job")
        logs = flinkyarn("logs", app_id)
        assert logs.returncode == 0, logs.stderr
        assert "did not stop within 5 s" in logs.stdout
    finally:
        flinkyarn("session", "stop", app_id)
