"""pyspark's private seams are all in taskexecutor/spark/pyspark_patches.py, each with its
reason, versions and figure; the installed pyspark is one they are verified against;
on another, each patch is skipped with a warning and leaves pyspark as it is."""

from __future__ import annotations

import ast
import configparser
import logging
from pathlib import Path

import pyspark
import pytest

from taskexecutor.spark import pyspark_patches
from tests.unit.test_import_graph import ROOT, modules

# Private names of pyspark's (and py4j's, as pyspark holds them) that our code touches.
PRIVATE = {"_gateway", "_jvm", "_jsc", "_jsparkSession", "_initialize_context",
           "_ensure_initialized", "_instantiatedSession", "_activeSession",
           "_instantiatedContext", "_active_spark_context", "_get_j_spark_session_class"}


def test_the_installed_pyspark_is_one_the_patches_are_verified_against():
    assert pyspark.__version__ in pyspark_patches.VERIFIED, (
        f"pyspark {pyspark.__version__} is installed; the patches of "
        f"taskexecutor/spark/pyspark_patches.py are verified against "
        f"{pyspark_patches.VERIFIED}: run the tests each seam names, then list it")
    for seam in pyspark_patches.SEAMS:
        assert pyspark.__version__ in seam.verified, seam.name


def test_setup_cfg_pins_pyspark_to_the_verified_minor():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    [requirement] = [line.strip() for line in parser["options"]["install_requires"].splitlines()
                     if line.strip().startswith("pyspark")]
    minors = {".".join(version.split(".")[:2]) for version in pyspark_patches.VERIFIED}
    [minor] = minors
    major, number = minor.split(".")
    assert requirement == f"pyspark>={minor},<{major}.{int(number) + 1}"


def test_every_seam_says_why_what_it_is_worth_and_how_it_is_tested():
    names = [seam.name for seam in pyspark_patches.SEAMS]
    assert len(set(names)) == len(names)
    for seam in pyspark_patches.SEAMS:
        assert seam.touches and seam.why and seam.figure and seam.tests and seam.verified, seam


def test_no_other_module_of_ours_names_a_private_attribute_of_pysparks():
    patches = Path(pyspark_patches.__file__).resolve()
    offending = []
    for path in modules(("flinkyarn", "taskexecutor", "yarn_client", "yarn_am")).values():
        if path.resolve() == patches:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offending += [f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}"
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr in PRIVATE]
        offending += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and "$$" in node.value]
    assert offending == []


def test_on_a_pyspark_not_verified_each_patch_is_skipped_with_a_warning(monkeypatch, caplog):
    from pyspark import accumulators, java_gateway
    from pyspark.core.context import SparkContext

    monkeypatch.setattr(pyspark_patches, "pyspark_version", lambda: "9.9.9")
    monkeypatch.setattr(pyspark_patches, "_warned", set())
    before = (java_gateway.Popen, SparkContext._initialize_context,
              accumulators.AccumulatorTCPServer.shutdown, SparkContext._gateway)
    with caplog.at_level(logging.WARNING, logger=pyspark_patches.__name__):
        for _ in range(2):  # a warning once per seam
            pyspark_patches.launch_jvm_without_python_in_the_child()
            pyspark_patches.survive_ui_race()
            pyspark_patches.backlog_timer_from_the_first_stage()
            pyspark_patches.stop_without_waiting()
            pyspark_patches.discard_gateway(None)
    assert (java_gateway.Popen, SparkContext._initialize_context,
            accumulators.AccumulatorTCPServer.shutdown, SparkContext._gateway) == before
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 5, warned
    assert all("pyspark 9.9.9 is not a version" in message and "4." in message
               for message in warned)


@pytest.mark.parametrize("attribute", ["_active_spark_context"])
def test_a_driver_leaves_its_jvm_to_sparks_hooks_when_pyspark_keeps_the_context_elsewhere(
        monkeypatch, attribute):
    from pyspark.core.context import SparkContext

    monkeypatch.delattr(SparkContext, attribute)
    assert pyspark_patches.context_running()
