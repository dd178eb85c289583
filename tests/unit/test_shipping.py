"""What a YARN container gets from the client: the environment's digest, our code, the
launch script's interpreter check (run with bash and real interpreters, no YARN)."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from flinkyarn import runtime_check
from flinkyarn.configuration import Configuration
from yarn_client import shipping

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ runtime_check


def test_python_must_match_in_minor_version_packages_exactly():
    client = {"python": "3.11.7", "pyarrow": "26.0.1", "pyspark": "4.3.0"}
    assert runtime_check.mismatches(client, {**client, "python": "3.11.2"}) == []
    assert runtime_check.mismatches(client, {**client, "python": "3.12.1"}) == ["python"]
    assert runtime_check.mismatches(client, {**client, "pyarrow": "25.0.0"}) == ["pyarrow"]
    assert runtime_check.mismatches(client, {**client, "pyspark": "missing"}) == ["pyspark"]


def test_versions_round_trip_through_their_description():
    found = runtime_check.versions()
    assert runtime_check.parse(runtime_check.describe(found)) == found
    assert found["python"] == "%d.%d.%d" % sys.version_info[:3]


# ---------------------------------------------------------------- the environment


def _dist(site: Path, name: str, version: str, record: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(record)


def test_environment_digest_follows_what_is_installed_but_not_flinkyarn(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "alpha", "1.0", "alpha/__init__.py,sha256=aaa,10\n")
    first = shipping.environment_digest([str(site)])
    assert shipping.environment_digest([str(site)]) == first

    _dist(site, "flinkyarn", "0.1.0", "__editable__.flinkyarn.pth,sha256=x,1\n")
    assert shipping.environment_digest([str(site)]) == first, "our code travels apart"

    (site / "alpha-1.0.dist-info" / "RECORD").write_text("alpha/__init__.py,sha256=bbb,10\n")
    assert shipping.environment_digest([str(site)]) != first, "a changed file changes it"


def test_the_cached_environment_digest_follows_every_install_and_removal(tmp_path):
    site, cache = tmp_path / "site-packages", tmp_path / "cache" / "digests.json"
    _dist(site, "alpha", "1.0", "alpha/__init__.py,sha256=aaa,10\n")
    first = shipping.environment_digest([str(site)], cache)
    assert first == shipping.environment_digest([str(site)]) and cache.is_file()
    # Served from the cache while nothing changes: a digest planted under the key
    # comes back.
    cache.write_text(cache.read_text().replace(first, "planted"))
    assert shipping.environment_digest([str(site)], cache) == "planted"
    _dist(site, "beta", "2.0", "beta/__init__.py,sha256=bbb,10\n")
    second = shipping.environment_digest([str(site)], cache)
    assert second == shipping.environment_digest([str(site)]) != first
    (site / "alpha-1.0.dist-info" / "RECORD").write_text("alpha/__init__.py,sha256=ccc,10\n")
    assert shipping.environment_digest([str(site)], cache) == \
        shipping.environment_digest([str(site)]) != second
    shutil.rmtree(site / "beta-2.0.dist-info")
    assert shipping.environment_digest([str(site)], cache) == shipping.environment_digest([str(site)])


def test_code_archive_holds_every_package_and_the_default_configuration(tmp_path):
    archive = shipping.pack_code(tmp_path, "code.tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for module in ("flinkyarn/runtime_check.py", "yarn_am/yarn_entrypoint.py",
                   "taskexecutor/__main__.py", "yarn_client/shipping.py", "conf/flinkyarn.yaml"):
        assert module in names
    assert len(shipping.code_digest()) == 20


def test_code_archive_brings_its_bytecode_so_no_container_writes_into_it(tmp_path):
    """The localized archive is shared by the node's containers: a module compiled there
    at import raced with YARN's listing of a starting container (which then failed)."""
    archive = shipping.pack_code(tmp_path, "code.tar.gz")
    unpacked = tmp_path / "flinkyarn-code"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    sources = sorted(unpacked.rglob("*.py"))
    for source in sources:
        assert Path(importlib.util.cache_from_source(str(source))).is_file(), source
    before = sorted(unpacked.rglob("*"))
    os.utime(unpacked / "flinkyarn" / "clock.py", (0, 0))  # mtimes do not matter
    imported = subprocess.run(
        [sys.executable, "-c", "import flinkyarn.clock, yarn_am.yarn_entrypoint, "
                               "taskexecutor.task_executor, flinkyarn.clock as c; print(c.__file__)"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == str(unpacked / "flinkyarn" / "clock.py")
    assert sorted(unpacked.rglob("*")) == before, "the imports wrote into the archive"


def test_a_client_outside_any_environment_is_told_what_to_do(monkeypatch):
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    with pytest.raises(shipping.ShippingError, match="-pyarch .*-pyexec"):
        shipping.environment_prefix()


def test_container_python_path_puts_py_files_as_flink_does():
    shipment = shipping.Shipment(python_path=["$PWD/flinkyarn-code"])
    conf = Configuration({"python.files": "lib/helpers.py, deps.zip,pkgdir"})
    assert shipping.container_python_path(shipment, conf) == \
        "$PWD/flinkyarn-code:$PWD:$PWD/deps.zip:$PWD/pkgdir"


# ----------------------------------------------------------- the launch script


def _container(tmp_path: Path, python: str) -> tuple[Path, Path]:
    """A container's working folder with our code localized, and its log folder."""
    work, logs = tmp_path / "container", tmp_path / "logs"
    (work / shipping.CODE_DIR / "flinkyarn").mkdir(parents=True)
    shutil.copy(REPO / "flinkyarn" / "runtime_check.py",
                work / shipping.CODE_DIR / "flinkyarn" / "runtime_check.py")
    logs.mkdir()
    return work, logs


def _launch(work: Path, logs: Path, python: str, versions: str,
            command: str = "-c 'import os; print(\"started in\", os.environ[\"TMPDIR\"])'",
            ) -> subprocess.CompletedProcess:
    script = shipping.launch_script(python, "$PWD/flinkyarn-code", versions, command)
    env = {"PATH": os.environ["PATH"], "LOG_DIRS": f"{logs},/nowhere"}
    return subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True)


def test_a_fitting_interpreter_starts_with_scratch_space_inside_the_container(tmp_path):
    work, logs = _container(tmp_path, sys.executable)
    done = _launch(work, logs, sys.executable, runtime_check.describe(runtime_check.versions()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"started in {work}/tmp"


def test_skein_gets_the_standard_librarys_distutils_where_python_has_one(tmp_path):
    """setuptools' distutils shim imports setuptools and pkg_resources (0.2 s of each
    container's start): a container of a Python that still has distutils (< 3.12) uses
    the standard library's."""
    work, logs = _container(tmp_path, sys.executable)
    versions = runtime_check.describe(runtime_check.versions())
    done = _launch(work, logs, sys.executable, versions,
                   "-c 'import distutils.version, sys; print(distutils.__file__, "
                   "\"pkg_resources\" in sys.modules)'")
    assert done.returncode == 0, done.stderr
    where, setuptools_loaded = done.stdout.split()
    if sys.version_info < (3, 12):
        assert "setuptools" not in where and setuptools_loaded == "False"
    assert "SETUPTOOLS_USE_DISTUTILS" in shipping.launch_script(
        sys.executable, "", "python=3.11.7", "-c pass")
    assert "SETUPTOOLS_USE_DISTUTILS" not in shipping.launch_script(
        sys.executable, "", "python=3.12.1", "-c pass")


def test_a_package_mismatch_names_both_versions_where_yarn_reads_it(tmp_path):
    work, logs = _container(tmp_path, sys.executable)
    client = {**runtime_check.versions(), "pyarrow": "0.1.0"}
    done = _launch(work, logs, sys.executable, runtime_check.describe(client))
    assert done.returncode == runtime_check.EXIT_MISMATCH
    line = (logs / "flinkyarn.stderr").read_text().strip()
    assert line.startswith(runtime_check.MARKER)
    assert f"pyarrow {runtime_check.versions()['pyarrow']} here, 0.1.0 on the client" in line
    assert "started" not in done.stdout


def _other_python() -> str | None:
    """An interpreter of another minor version, if this machine has one."""
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [shutil.which(f"python3.{m}") for m in range(8, 15)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    for candidate in filter(None, candidates):
        version = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and version != minor and tuple(map(int, version.split("."))) >= (3, 6):
            return candidate
    return None


def test_an_environment_of_another_python_fails_naming_both(tmp_path):
    """A venv made elsewhere: its interpreter is either another Python on the node, or
    one the node does not have at all; both end in one line naming both versions."""
    env = tmp_path / "container" / "venv"
    (env / "bin").mkdir(parents=True)
    other = _other_python()
    target = other or "/usr/bin/python3.99"
    (env / "bin" / "python").symlink_to(target)
    (env / "pyvenv.cfg").write_text(f"home = {Path(target).parent}\nversion = 3.99.0\n")
    work, logs = _container(tmp_path, "./venv/bin/python")
    done = _launch(work, logs, "./venv/bin/python", runtime_check.describe(runtime_check.versions()))
    assert done.returncode == runtime_check.EXIT_MISMATCH
    line = (logs / "flinkyarn.stderr").read_text().strip()
    assert line.startswith(runtime_check.MARKER)
    client = "%d.%d.%d" % sys.version_info[:3]
    assert client in line
    if other:
        assert "python " in line and "on the client" in line
    else:
        assert "cannot run" in line and "version = 3.99.0" in line


def test_containers_bind_the_host_yarn_put_them_on_whatever_the_client_says():
    from yarn_client.yarn_cluster import YarnClusterDescriptor, YarnOptions

    conf = Configuration({"taskmanager.host": "127.0.0.1", "jobmanager.rpc.address": "edge",
                          "rest.address": "edge", "heartbeat.timeout": "20 s"})
    descriptor = YarnClusterDescriptor(conf, YarnOptions())
    shipment = shipping.Shipment(python="./environment/bin/python",
                                 runtime_python="./environment/bin/python",
                                 python_path=["$PWD/flinkyarn-code"])
    spec = descriptor._spec("session", None, {}, {}, shipment, descriptor._containers())
    master, worker = spec.master.script, spec.services["taskexecutor"].script
    assert "-D taskmanager.host=$NM_HOST" in worker and "127.0.0.1" not in worker
    assert "-D jobmanager.rpc.address=$NM_HOST" in master and "edge" not in master
    assert "-D rest.address=$NM_HOST" in master
    assert "heartbeat.timeout=20 s" in worker and "heartbeat.timeout=20 s" in master


def test_each_role_localizes_only_what_it_runs():
    """YARN links a resource once per container: python.archives naming the shipped
    environment itself must not give one container the same archive under two names."""
    from yarn_client.shipping import CODE_DIR, ENVIRONMENT_DIR, Localized, Shipment

    environment = "hdfs:///user/u/.flinkyarn/cache/environment-1.tar"
    shipment = Shipment(files={
        "prepared": Localized("prepared", environment, "archive", "private"),
        ENVIRONMENT_DIR: Localized(ENVIRONMENT_DIR, environment, "archive", "private"),
        CODE_DIR: Localized(CODE_DIR, "hdfs:///code.tar.gz", "archive", "private")},
        python="./prepared/bin/python", runtime_python=f"./{ENVIRONMENT_DIR}/bin/python")
    assert sorted(shipment.master_files()) == sorted([ENVIRONMENT_DIR, CODE_DIR])
    assert sorted(shipment.executor_files()) == sorted(["prepared", CODE_DIR])
    shipment.python = shipment.runtime_python  # no python.executable: the shipped one
    assert sorted(shipment.executor_files()) == sorted(["prepared", ENVIRONMENT_DIR, CODE_DIR])
