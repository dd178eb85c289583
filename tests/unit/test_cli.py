from click.testing import CliRunner

import flinkyarn
from yarn_client.cli import cli


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
