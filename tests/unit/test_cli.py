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
