"""Hypothesis keeps its caches (no example database: the tests set database=None) in a
temporary folder removed at the end of the session, not in the repository. Set on
import: Hypothesis writes its caches while the test modules are collected."""

from __future__ import annotations

import tempfile

from hypothesis.configuration import set_hypothesis_home_dir

_hypothesis_home = tempfile.TemporaryDirectory(prefix="hypothesis-")
set_hypothesis_home_dir(_hypothesis_home.name)


def pytest_unconfigure(config) -> None:
    _hypothesis_home.cleanup()
