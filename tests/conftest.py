"""Fixtures shared by every test tier."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "integration"))

import local_hadoop  # noqa: E402


@pytest.fixture(scope="session")
def hadoop() -> local_hadoop.Layout:
    """The running local Hadoop of integration/. A YARN-tier test fails, never skips,
    when it is not up: `integration/run-tests` starts it, and CI runs that."""
    layout = local_hadoop.Layout.default()
    healthy, report = local_hadoop.status(layout)
    if not healthy:
        pytest.fail("the local Hadoop is not up; start it with `integration/cluster up` "
                    "or run the tests through `integration/run-tests`\n" + report,
                    pytrace=False)
    local_hadoop.apply_env(layout)
    return layout


@pytest.fixture(scope="session")
def skein_client(hadoop):
    import skein

    with skein.Client(log=str(hadoop.logs / "skein-driver-tests.log")) as client:
        yield client
