"""The secure tier: the two-node test cluster in Hadoop's secure mode (Kerberos, its own
KDC: `integration/cluster up --nodes 2 --secure`). The cluster's ports are fixed, so the
tier stops a plain cluster first and brings it back afterwards if it ran before (but for
one integration/run-tests started); it runs after tests/yarn."""

from __future__ import annotations

import os

import pytest

import local_hadoop


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/yarn_secure/" in str(item.fspath):
            item.add_marker(pytest.mark.yarn)


@pytest.fixture(scope="session")
def secure_hadoop() -> local_hadoop.Layout:
    layout = local_hadoop.Layout.default()
    healthy, _ = local_hadoop.status(layout)
    was = (local_hadoop.recorded_node_count(layout), local_hadoop.recorded_secure(layout))
    if not (healthy and was[1]):
        local_hadoop.down(layout, say=lambda line: None)
        local_hadoop.up(layout, say=print, nodes=2, secure=True)
    saved = dict(os.environ)
    local_hadoop.apply_env(layout)
    yield layout
    os.environ.clear()
    os.environ.update(saved)
    # A plain cluster that ran before runs again, unless integration/run-tests started
    # it (and stops it right after the tests).
    if healthy and not was[1] and not os.environ.get("FLINKYARN_TEST_CLUSTER_OWNED"):
        local_hadoop.down(layout, say=lambda line: None)
        local_hadoop.up(layout, say=print, nodes=was[0], secure=False)
