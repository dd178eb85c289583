from click.testing import CliRunner

import flinkyarn
from flinkyarn.environment import JobResult
from yarn_client.cli import _print_result, cli


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and flinkyarn.__version__ in result.output


def test_unknown_option_is_a_usage_error_with_exit_code_2():
    result = CliRunner().invoke(cli, ["--no-such-option"])
    assert result.exit_code == 2
    assert "No such option: --no-such-option" in result.output or "--no-such-option" in result.output


def test_python_options_are_checked_before_anything_is_done(tmp_path):
    program = tmp_path / "job.py"
    program.write_text("raise SystemExit('must not run')\n")
    missing = CliRunner().invoke(cli, ["run", "-t", "local", "-pyfs", str(tmp_path / "nowhere.py"),
                                       str(program)])
    assert missing.exit_code == 2 and "nowhere.py" in missing.output
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"")
    half = CliRunner().invoke(cli, ["run", "-t", "yarn-per-job", "-pyarch", str(archive),
                                    str(program)])
    assert half.exit_code == 2 and "-pyexec" in half.output, half.output


def test_a_failure_cause_of_many_lines_is_printed_under_its_summary(capsys):
    cause = ("boom (1/1) failed: ValueError: bad row 7 (in task boom (1/1) #1)\n"
             '  File "/home/user/job.py", line 3, in parse\n'
             "caused by: KeyError: 'id'\n")
    _print_result(JobResult("j1", "FAILED", cause, 1.5))

    assert capsys.readouterr().out == (
        "Job j1 FAILED in 1.5 s\n"
        "  cause: boom (1/1) failed: ValueError: bad row 7 (in task boom (1/1) #1)\n"
        '      File "/home/user/job.py", line 3, in parse\n'
        "    caused by: KeyError: 'id'\n")


def test_the_default_target_is_execution_target_and_auto_looks_for_yarn(tmp_path, monkeypatch):
    from flinkyarn.configuration import Configuration
    from yarn_client.cli import default_target

    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    assert default_target(Configuration({"execution.target": "yarn-session"})) == "yarn-session"
    assert default_target(Configuration()) == "local"
    (tmp_path / "yarn-site.xml").write_text("<configuration/>")
    assert default_target(Configuration()) == "yarn-per-job"
    assert default_target(Configuration({"execution.target": "local"})) == "local"


def test_submitting_a_pyspark_script_into_a_session_imports_no_arrow_grpc_or_http_stack(tmp_path):
    """A warm session's script is on the clock from the client's start: what the client
    does for it (its modules, the script's graph and settings for pyspark.master=local,
    the output check, the staging area it does not use) imports neither pyarrow and
    numpy (a graph's operators, the outputs' filesystems) nor gRPC (the RPC's errors and
    credentials) nor WebHDFS's requests: together half a second of its start."""
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    probe = f"""
import sys
from pathlib import Path
from yarn_client import cli, rest_submit, shipping, yarn_executors
from yarn_client.executors import check_outputs
from yarn_client.programs import pyspark_job_graph
from yarn_client.spark_submit import SparkSubmitOptions, yarn_settings
from flinkyarn.configuration import Configuration
submit = SparkSubmitOptions()
settings = yarn_settings(submit, {{"pyspark.master": "local"}}, shipping.Staging(Configuration()))
graph = pyspark_job_graph(Path({str(script)!r}), ("1",), settings)
check_outputs(graph, False)
print(sorted(m for m in ("pyarrow", "numpy", "grpc", "fsspec", "requests") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"


def test_list_goes_on_past_an_application_that_ends_or_starts_while_it_lists(monkeypatch):
    """`list --all` beside other clients: one running application ends between YARN's
    list and its AppMaster's answer (listed from the archive, as ended), another's
    AppMaster does not answer yet (said); neither stops the listing."""
    from yarn_client import cli as cli_module
    from yarn_client import yarn_cluster
    from yarn_client.rest_client import RestError

    running = {"application_1_0001": False, "application_1_0002": True}  # still, when asked
    listed_archived: list[str] = []

    def refused(app_id, conf=None):
        raise RestError(f"the AppMaster of {app_id} did not answer: connection refused")

    monkeypatch.setattr(yarn_cluster, "sweep_leftovers", lambda conf, out: None)
    monkeypatch.setattr(yarn_cluster, "flinkyarn_applications",
                        lambda states: [{"id": app_id} for app_id in running])
    monkeypatch.setattr(yarn_cluster, "archives", lambda conf: [])
    monkeypatch.setattr(yarn_cluster, "connect", refused)
    monkeypatch.setattr(yarn_cluster, "is_running", lambda app_id: running[app_id])
    monkeypatch.setattr(cli_module, "_list_archived",
                        lambda app_id, archives: listed_archived.append(app_id))

    result = CliRunner().invoke(cli, ["list", "--all"])

    assert result.exit_code == 0, result.output
    assert listed_archived == ["application_1_0001"]
    assert result.output == ("application_1_0002\n  its AppMaster does not answer: the AppMaster "
                             "of application_1_0002 did not answer: connection refused\n")
