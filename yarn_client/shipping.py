"""What a YARN application of flinkyarn takes from the submitting machine, and how it
gets there: only through YARN localization, from the cluster's default filesystem.

- The Python environment the client runs in, packed with venv-pack (conda-pack for a
  conda environment), named by a digest of what is installed, uploaded once into
  `<staging>/cache/` and localized as an archive (`environment/`) with PRIVATE
  visibility, so each NodeManager unpacks it once for all applications of the user.
- flinkyarn's own code (`flinkyarn-code/` on the containers' PYTHONPATH), content
  addressed the same way. It travels apart from the environment: an editable install
  points into the client's checkout, which no node has; and changing our code must not
  repack a gigabyte of pyspark.
- The class-data archive of the TaskExecutors' Spark JVM for that environment
  (flinkyarn/spark/class_data.py), made on this machine in the background the first time,
  then uploaded once into the cache like the environment and localized as a file.
- The user's files (`--py-files`, `--files`) go through skein, per application.
- The cluster's credentials, under `<staging>/clusters/<cluster id>/` (mode 0700), so
  that another machine of the same user can reach a session (`connect`), and localized
  from there (nothing else carries them).

`<staging>` is `yarn.staging-directory`, by default `/user/<user>/.flinkyarn` on the
default filesystem. Archives are looked up first in `yarn.provided.lib.dirs`, where an
admin may have put them: found there, nothing is uploaded.

Everything here runs in the client, on its thread; HDFS is spoken through hdfs-native
(flinkyarn/hdfs.py).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import getpass
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import shlex
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from flinkyarn import hadoop, hdfs, options, runtime_check
from flinkyarn.configuration import ConfigOption, Configuration
from flinkyarn.spark import python_daemon
from flinkyarn.spark.class_data import PORTABLE_PREFIX, SparkClassData

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

ENVIRONMENT_DIR = "environment"
CODE_DIR = "flinkyarn-code"
# The packages the containers import, and the folder of the default configuration.
CODE_PACKAGES = ("flinkyarn", "yarn_am", "taskexecutor", "yarn_client")
_REPOSITORY = Path(__file__).resolve().parent.parent


class ShippingError(RuntimeError):
    """What the client would ship cannot be shipped; the message says what to change."""


@dataclass(frozen=True)
class Localized:
    """A file or archive on the cluster's filesystem that YARN localizes as `name`."""

    name: str
    uri: str
    kind: str = "file"            # or "archive"
    visibility: str = "application"
    uploaded_bytes: int = 0       # what this submit had to upload for it (0: cached)

    def skein_file(self):
        import skein

        return skein.File(source=self.uri, type=self.kind, visibility=self.visibility)


@dataclass
class Shipment:
    """Everything a submit localizes, and what it cost."""

    files: dict[str, Localized] = field(default_factory=dict)
    python: str = ""              # the interpreter the TaskExecutors run
    runtime_python: str = ""      # the interpreter the AppMaster runs
    python_path: list[str] = field(default_factory=list)

    @property
    def uploaded_bytes(self) -> int:
        return sum(f.uploaded_bytes for f in self.files.values())

    # What each role localizes: only what it runs. YARN links a resource once per
    # container, so one archive under two names (python.archives naming the shipped
    # environment itself) would leave one of the names missing.

    def master_files(self) -> dict[str, Localized]:
        """The AppMaster's: the shipped environment it runs and the code."""
        return {name: f for name, f in self.files.items() if name in (ENVIRONMENT_DIR, CODE_DIR)}

    def executor_files(self) -> dict[str, Localized]:
        """A TaskExecutor's: the code, the user's archives, and the shipped environment
        only when the TaskExecutors run it (no python.executable of their own)."""
        return {name: f for name, f in self.files.items()
                if name != ENVIRONMENT_DIR or self.python == self.runtime_python}


# ----------------------------------------------------------------- the staging area


def _staging_path(value: str) -> str:
    """A path on the default filesystem from an option's value: an absolute path, or an
    hdfs:// or viewfs:// URL (whose path is taken)."""
    return hdfs.path_of(value) if hdfs.is_hdfs(value) else value.rstrip("/")


class Staging:
    """`<staging>` on the default filesystem."""

    def __init__(self, conf: Configuration, say: Callable[[str], None] = print) -> None:
        self.user = getpass.getuser()
        root = conf.get(options.YARN_STAGING_DIRECTORY) or f"/user/{self.user}/.flinkyarn"
        self.root = _staging_path(root)
        if not self.root.startswith("/"):
            raise ShippingError(f"{options.YARN_STAGING_DIRECTORY.key} must be an absolute "
                                f"path or an hdfs:// URL, not {root!r}")
        self.provided = [_staging_path(d) for d in conf.get(options.YARN_PROVIDED_LIB_DIRS).split(",") if d.strip()]
        self.say = say

    @functools.cached_property
    def fs(self) -> AbstractFileSystem:
        """Made on first use: a script with nothing to ship (pyspark.master=local) makes
        none."""
        return hdfs.filesystem()

    @property
    def cache(self) -> str:
        return f"{self.root}/cache"

    def job_store(self, conf: Configuration) -> str:
        """The folder of the applications' job stores (high-availability.storageDir)."""
        return self._folder(conf, options.HA_STORAGE_DIR, "ha")

    def archive(self, conf: Configuration) -> str:
        """The archive folder of ended jobs (jobmanager.archive.fs.dir)."""
        return self._folder(conf, options.ARCHIVE_DIR, "archive")

    def _folder(self, conf: Configuration, option: ConfigOption[str], default: str) -> str:
        """A path on the default filesystem: the option's, or `default` in the staging root."""
        folder = conf.get(option) or f"{self.root}/{default}"
        folder = _staging_path(folder)
        if not folder.startswith("/"):
            raise ShippingError(f"{option.key} must be an absolute path or an hdfs:// URL, "
                                f"not {conf.get(option)!r}")
        return folder

    def uri(self, path: str) -> str:
        return hadoop.default_fs().rstrip("/") + path

    def private_folder(self, path: str) -> None:
        """Creates `path` and the staging root, readable by this user only."""
        for folder in (self.root, path):
            self.fs.client.mkdirs(folder, 0o700, True)
            self.fs.client.set_permission(folder, 0o700)

    def find(self, name: str) -> str | None:
        for folder in (*self.provided, self.cache):
            if self.fs.exists(f"{folder}/{name}"):
                return f"{folder}/{name}"
        return None

    def ensure(self, cached: str, build: Callable[[Path], Path], what: str,
               name: str, kind: str = "archive") -> Localized:
        """The archive (or file: `kind`) `cached` of the cache (or of a provided folder),
        built by `build(folder)` and uploaded when absent; localized as `name`."""
        found = self.find(cached)
        if found is not None:
            self.say(f"  {what}: cached, nothing to upload ({self.uri(found)})")
            return Localized(name, self.uri(found), kind, "private")
        self.private_folder(self.cache)
        with tempfile.TemporaryDirectory(prefix="flinkyarn-ship-") as folder:
            start = time.monotonic()
            local = build(Path(folder))
            size = local.stat().st_size
            target = f"{self.cache}/{cached}"
            self.say(f"  {what}: packed {size / 2**20:.0f} MiB in {time.monotonic() - start:.1f} s; "
                     f"uploading once to {self.uri(target)} ...")
            start = time.monotonic()
            self.upload(local, target)
            self.say(f"  {what}: uploaded in {time.monotonic() - start:.1f} s")
        return Localized(name, self.uri(target), kind, "private", size)

    def upload(self, local: Path, target: str, mode: str = "600") -> None:
        """Writes `local` to `target` atomically: into a unique partial name, then renamed;
        a concurrent upload of the same content loses the rename harmlessly."""
        partial = f"{target}.partial-{uuid.uuid4().hex[:8]}"
        try:
            self._write(local, partial, mode)
            self.fs.client.rename(partial, target, False)
        except FileExistsError:  # the other upload's rename won
            self.remove_quietly(partial)
        except BaseException:
            self.remove_quietly(partial)
            raise

    def upload_new(self, files: dict[str, Path], mode: str = "600",
                   mtime: int | None = None) -> None:
        """Writes each local file of `files` to its target (the key) at once, for a folder
        of this submit alone that nothing reads before the submit: in place, without
        upload's partial name and rename, and concurrently; with `mtime`, each file's
        modification time is set to it (ms since the epoch). The caller removes the
        folder when this raises."""
        def write(item: tuple[str, Path]) -> None:
            target, local = item
            self._write(local, target, mode)
            if mtime is not None:
                self.set_time(target, mtime)

        with concurrent.futures.ThreadPoolExecutor(min(16, len(files) or 1),
                                                   thread_name_prefix="upload") as pool:
            for _ in pool.map(write, files.items()):  # the first error raises
                pass

    def set_time(self, path: str, mtime: int) -> None:
        """Sets `path`'s modification (and access) time, in ms since the epoch."""
        self.fs.client.set_times(path, mtime, mtime)

    def _write(self, local: Path, target: str, mode: str) -> None:
        """Creates `target` (never over an existing file; its folder made if missing)
        with `local`'s bytes, saying how far a long write is every 10 s."""
        from hdfs_native import WriteOptions

        settings = WriteOptions()
        settings.overwrite, settings.create_parent = False, True
        settings.permission = int(mode, 8)
        size = local.stat().st_size
        done, next_word = 0, time.monotonic() + 10.0
        with open(local, "rb") as data, self.fs.client.create(target, settings) as out:
            while chunk := data.read(8 << 20):
                out.write(chunk)
                done += len(chunk)
                if time.monotonic() > next_word:
                    self.say(f"    {done / 2**20:.0f} of {size / 2**20:.0f} MiB")
                    next_word = time.monotonic() + 10.0

    def remove_quietly(self, path: str) -> None:
        """Best effort, on the way out of a failure that is the one to report."""
        try:
            self.fs.rm(path, recursive=True)
        except Exception:
            pass

    def write_private(self, path: str, data: bytes) -> None:
        with tempfile.NamedTemporaryFile(prefix="flinkyarn-") as local:
            local.write(data)
            local.flush()
            self.upload(Path(local.name), path)


# ------------------------------------------------------------------ the environment


def client_cache() -> Path:
    """This user's cache of flinkyarn's client (XDG_CACHE_HOME/flinkyarn)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flinkyarn"


def environment_prefix() -> Path:
    """The virtual (or conda) environment this client runs in."""
    prefix = Path(sys.prefix)
    if sys.prefix == sys.base_prefix and not (prefix / "conda-meta").is_dir():
        raise ShippingError(
            f"the client's Python ({sys.executable}) is not in a virtual or conda environment, "
            f"so there is nothing to ship to the cluster's nodes: run flinkyarn from a venv, "
            f"or name a prepared environment with -pyarch ({options.PYTHON_ARCHIVES.key}) "
            f"and -pyexec ({options.PYTHON_EXECUTABLE.key})")
    return prefix


def _is_ours(dist: importlib.metadata.Distribution) -> bool:
    return (dist.metadata["Name"] or "").lower() == "flinkyarn"


def site_packages(prefix: Path) -> list[str]:
    return [p for p in sys.path if p.startswith(str(prefix)) and p.endswith("site-packages")]


def environment_digest(site: list[str], cache: Path | None = None) -> str:
    """A digest of what is installed in the folders `site`: the interpreter's version
    and every distribution's name, version and RECORD (which lists each installed file
    with its hash); flinkyarn itself is left out, it travels as code. Reading every
    distribution's metadata takes half a second: the digest is kept in `cache` (a
    file) under a key of each metadata folder's name and its RECORD's size and
    modification time, which every install, upgrade or removal changes."""
    key = hashlib.sha256(f"{sys.version_info[:3]}\0{sys.implementation.name}\0".encode())
    for folder in site:
        with os.scandir(folder) as entries:
            infos = sorted(e.name for e in entries if e.name.endswith((".dist-info", ".egg-info")))
        for name in infos:
            try:
                record = os.stat(os.path.join(folder, name, "RECORD"))
                key.update(f"{name}\0{record.st_size}\0{record.st_mtime_ns}\0".encode())
            except OSError:
                key.update(f"{name}\0-\0".encode())
    known: dict[str, str] = {}
    if cache is not None:
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
        if key.hexdigest() in known:
            return known[key.hexdigest()]
    digest = hashlib.sha256(f"{sys.version_info[:3]}\0{sys.implementation.name}\0".encode())
    dists = [d for d in importlib.metadata.distributions(path=site) if not _is_ours(d)]
    for dist in sorted(dists, key=lambda d: (d.metadata["Name"] or "").lower()):
        digest.update(f"{dist.metadata['Name']}\0{dist.version}\0".encode())
        digest.update((dist.read_text("RECORD") or "").encode())
    if cache is not None:
        known = {**dict(list(known.items())[-20:]), key.hexdigest(): digest.hexdigest()[:20]}
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps(known))
        os.replace(partial, cache)
    return digest.hexdigest()[:20]


def pack_environment(prefix: Path, folder: Path, name: str) -> Path:
    """The environment as an uncompressed tar (packing 1 GB takes seconds, not a
    minute; the nodes cache it unpacked), without flinkyarn's editable hooks."""
    output = folder / name
    if (prefix / "conda-meta").is_dir():
        try:
            import conda_pack
        except ImportError:
            raise ShippingError("a conda environment is shipped with conda-pack: "
                                "pip install conda-pack") from None
        conda_pack.pack(prefix=str(prefix), output=str(output), format="tar",
                        ignore_editable_packages=True)
        return output
    import venv_pack

    env = venv_pack.Env(str(prefix))
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    for pattern in (f"{site}/__editable__*flinkyarn*", f"{site}/flinkyarn-*.dist-info/*",
                    f"{site}/__editable___flinkyarn*"):
        env = env.exclude(pattern)
    env.pack(output=str(output), format="tar", force=True)
    return output


# ---------------------------------------------------------------------- our code


def _code_files() -> list[tuple[Path, str]]:
    import flinkyarn

    base = Path(flinkyarn.__file__).resolve().parent.parent
    found = []
    for package in CODE_PACKAGES:
        for path in sorted((base / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append((path, str(path.relative_to(base))))
    conf = base / "conf" / "flinkyarn.yaml"
    if conf.is_file():
        found.append((conf, "conf/flinkyarn.yaml"))
    return found


def code_digest() -> str:
    """Of the sources and of the Python whose bytecode goes with them (pack_code)."""
    digest = hashlib.sha256(sys.implementation.cache_tag.encode() + b"\0")
    for path, name in _code_files():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def pack_code(folder: Path, name: str) -> Path:
    """The sources with their bytecode for this Python (which the containers' is, or
    runtime_check stops them), so that no container writes into the archive once
    localized: it is shared by every container of the user on the node, and a write
    there (a .pyc's temporary file) races with the directory listing YARN's launch
    script makes of a starting container, which then fails. The bytecode is not checked
    against the sources (unchecked hash): the archive is named by their content."""
    output = folder / name
    with tarfile.open(output, "w:gz") as tar, tempfile.TemporaryDirectory() as scratch:
        for path, arcname in _code_files():
            tar.add(path, arcname=arcname)
            if path.suffix == ".py":
                compiled = Path(scratch) / "module.pyc"
                py_compile.compile(str(path), cfile=str(compiled), dfile=arcname, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
                tar.add(compiled, arcname=importlib.util.cache_from_source(arcname))
    return output


# ---------------------------------------------------------------------- versions


def client_versions() -> str:
    """What the containers must match: `python=3.11.7 pyarrow=... pyspark=...`."""
    from flinkyarn import runtime_check

    return runtime_check.describe(runtime_check.versions())


# ------------------------------------------------------------------------ shipping


def _archive_name(spec: str) -> tuple[str, str]:
    """`path#name` -> (path, name); the name defaults to the file name."""
    path, _, name = spec.partition("#")
    return path, name or Path(path).name


def ship(conf: Configuration, staging: Staging) -> Shipment:
    """Makes sure the environment and the code are on the cluster's filesystem and says
    what to localize; the user's own archives (python.archives) are uploaded per content."""
    check_python_options(conf)
    shipment = Shipment()
    # The user's archives first: a wrong one is named before a gigabyte is packed.
    for spec in (a.strip() for a in conf.get(options.PYTHON_ARCHIVES).split(",") if a.strip()):
        path, name = _archive_name(spec)
        if name in shipment.files or name in (ENVIRONMENT_DIR, CODE_DIR):
            raise ShippingError(f"{options.PYTHON_ARCHIVES.key}: the name {name!r} is taken; "
                                f"give the archive another with {path}#NAME")
        shipment.files[name] = _user_archive(staging, path, name)
    prefix = environment_prefix()
    digest = environment_digest(site_packages(prefix), client_cache() / "environment-digests.json")
    env_name = f"environment-{digest}.tar"
    shipment.files[ENVIRONMENT_DIR] = staging.ensure(
        env_name, lambda folder: pack_environment(prefix, folder, env_name),
        f"Python environment {prefix}", ENVIRONMENT_DIR)
    code_name = f"flinkyarn-code-{code_digest()}.tar.gz"
    shipment.files[CODE_DIR] = staging.ensure(code_name, lambda folder: pack_code(folder, code_name),
                                              "flinkyarn code", CODE_DIR)
    runtime = f"./{ENVIRONMENT_DIR}/bin/python"
    shipment.runtime_python = shipment.python = runtime
    shipment.python_path = [f"$PWD/{CODE_DIR}"]
    executable = conf.get(options.PYTHON_EXECUTABLE)
    if executable:
        shipment.python = executable if executable.startswith("/") else f"./{executable}"
    else:
        archive = _spark_class_data(conf, staging, prefix)
        if archive is not None:
            shipment.files[archive.name] = archive
    return shipment


def _spark_class_data(conf: Configuration, staging: Staging, prefix: Path) -> Localized | None:
    """The class-data archive of the TaskExecutors' Spark JVM for the shipped environment
    (flinkyarn/spark/class_data.py), uploaded to the cache once; none the first time, when
    this machine starts making it in the background for the next submits."""
    data = SparkClassData.portable(conf, prefix)
    if data is None:
        return None
    if not data.archive.is_file():
        try:
            if data.train_in_background():
                staging.say(f"  Spark class-data archive: none for this environment yet, "
                            f"made in the background for the next submits "
                            f"({data.archive.with_suffix('.log')})")
        except OSError as error:
            staging.say(f"  Spark class-data archive: cannot make one in {data.folder}: {error}")
        return None
    with contextlib.suppress(OSError):
        os.utime(data.archive)  # in use (class_data.remove_unused)
    return staging.ensure(data.archive.name, lambda folder: data.archive,
                          "Spark class-data archive", data.archive.name, "file")


def check_python_options(conf: Configuration) -> None:
    """What can be said of python.archives and python.executable before anything is done."""
    if conf.get(options.PYTHON_ARCHIVES) and not conf.get(options.PYTHON_EXECUTABLE):
        raise ShippingError(f"{options.PYTHON_ARCHIVES.key} (-pyarch) is set but "
                            f"{options.PYTHON_EXECUTABLE.key} (-pyexec) is not: name the "
                            f"interpreter inside the archive, e.g. -pyexec NAME/bin/python")


def _user_archive(staging: Staging, path: str, name: str) -> Localized:
    if hdfs.is_hdfs(path):
        if not hdfs.filesystem(path).exists(hdfs.path_of(path)):
            raise ShippingError(f"{options.PYTHON_ARCHIVES.key}: no such file {path}")
        return Localized(name, path, "archive", "private")
    local = Path(path).expanduser()
    if not local.is_file():
        raise ShippingError(f"{options.PYTHON_ARCHIVES.key}: no such file {path}")
    return cached_copy(staging, local, "archive", f"archive {local}", name)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:20]


def cached_copy(staging: Staging, local: Path, kind: str, what: str, name: str,
                localize_as: str = "archive") -> Localized:
    """`local`'s content in the cache as `<kind>-<digest><suffix>`, uploaded once;
    localized as `name`, an archive or (`localize_as`) a file."""
    suffix = "".join(local.suffixes[-2:]) if local.name.endswith((".tar.gz", ".tar.bz2")) \
        else local.suffix
    return staging.ensure(f"{kind}-{_file_digest(local)}{suffix}", lambda folder: local, what,
                          name, localize_as)


# ------------------------------------------------------------------ the containers


def container_python_path(shipment: Shipment, conf: Configuration) -> str:
    """The containers' PYTHONPATH: our code, then python.files as Flink's -pyfs puts them
    (a folder or an archive itself, a .py file through the folder it is localized in)."""
    entries = list(shipment.python_path)
    for path in (p.strip() for p in conf.get(options.PYTHON_FILES).split(",") if p.strip()):
        name = Path(path).name
        entry = "$PWD" if name.endswith(".py") else f"$PWD/{name}"
        if entry not in entries:
            entries.append(entry)
    return ":".join(entries)


def launch_script(python: str, python_path: str, versions: str, command: str) -> str:
    """The script of a container: scratch space inside the container's folder (YARN
    removes it), our code on the path, the interpreter checked against the client's
    `versions`, then `python command`. A mismatch, or an interpreter that does not run
    at all, exits EXIT_MISMATCH with one line starting with runtime_check.MARKER, also
    written to a *stderr* file of the container's log folder, which YARN puts in the
    container's diagnostics."""
    check = f"{CODE_DIR}/flinkyarn/runtime_check.py"
    venv_cfg = f'"$(dirname "$(dirname "{python}")")/pyvenv.cfg"'
    return "\n".join([
        'export TMPDIR="$PWD/tmp" && mkdir -p "$TMPDIR"',
        *_stdlib_distutils(versions),
        f'export PYTHONPATH="{python_path}${{PYTHONPATH:+:$PYTHONPATH}}"',
        f"export FLINKYARN_CLIENT_VERSIONS={shlex.quote(versions)}",
        f'if ! found=$({python} {check} "$FLINKYARN_CLIENT_VERSIONS" 2>&1); then',
        f'  case "$found" in "{runtime_check.MARKER}"*) ;; *)',
        f'    found="{runtime_check.MARKER} cannot run the container\'s Python {python}'
        f' ($(echo $found | tail -c 300)); its environment says: '
        f'$(grep -s "^version" {venv_cfg} || echo "no pyvenv.cfg"); the client runs '
        f'$FLINKYARN_CLIENT_VERSIONS" ;;',
        "  esac",
        '  echo "$found" >&2',
        '  [ -n "$LOG_DIRS" ] && echo "$found" > "${LOG_DIRS%%,*}/flinkyarn.stderr"',
        f"  exit {runtime_check.EXIT_MISMATCH}",
        "fi",
        f"exec {python} {command}"])


def _stdlib_distutils(versions: str) -> list[str]:
    """Where Python still has distutils (before 3.12), the line that gives it to skein
    (`from distutils.version import LooseVersion`) instead of setuptools' copy, whose
    shim imports setuptools and pkg_resources first: 0.2 s of every container's start."""
    from flinkyarn import runtime_check

    python = runtime_check.parse(versions).get("python", "")
    try:
        major, minor = (int(part) for part in python.split(".")[:2])
    except ValueError:
        return []
    return ["export SETUPTOOLS_USE_DISTUTILS=stdlib"] if (major, minor) < (3, 12) else []


# ------------------------------------------------------------- PySpark scripts on YARN


def spark_jars_digest(jars: Path) -> str:
    """Spark's jars by name and size (the pyspark release names them all by version)."""
    digest = hashlib.sha256()
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name}\0{jar.stat().st_size}\0".encode())
    return digest.hexdigest()[:20]


def pack_spark_jars(jars: Path, output: Path) -> Path:
    """spark.yarn.archive: the jars at the archive's root, stored (they are compressed)."""
    import zipfile

    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_STORED) as archive:
        for jar in sorted(jars.glob("*.jar")):
            archive.write(jar, jar.name)
    return output


def pack_spark_daemon(output: Path) -> Path:
    """A zip of our Spark Python worker daemon's source as python_daemon.FILE_NAME, the
    same bytes for the same module (its time fixed): cached once."""
    import zipfile

    with zipfile.ZipFile(output, "w") as archive:
        archive.writestr(zipfile.ZipInfo(python_daemon.FILE_NAME, date_time=(2020, 1, 1, 0, 0, 0)),
                         python_daemon.source().read_bytes())
    return output


def _cached_file(staging: Staging, local: Path, what: str, kind: str = "file") -> str:
    """The URL of `local`'s content in the cache, uploaded once."""
    if not local.is_file():
        raise ShippingError(f"{what}: no such file {local}")
    return cached_copy(staging, local, kind, f"{what} {local}", local.name).uri


@dataclass
class PySparkShipment:
    """What a PySpark script's Spark on YARN takes from the cache: Spark's jars
    (spark.yarn.archive), pyspark's own Python archives (PYSPARK_ARCHIVES_PATH), and the
    user's --files, --archives and --py-files (as hdfs:// URLs)."""

    spark_conf: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    archives: list[tuple[str, str]] = field(default_factory=list)
    py_files: list[str] = field(default_factory=list)


def ship_pyspark(staging: Staging, files: list[Path], archives: list[str],
                 py_files: list[Path], with_spark: bool = True) -> PySparkShipment:
    """The user's files in the cache; with `with_spark` (master yarn) also Spark's jars
    and pyspark's Python archives for the executors."""
    shipment = PySparkShipment()
    if with_spark:
        import pyspark

        home = Path(pyspark.__file__).resolve().parent
        jars = home / "jars"
        name = f"spark-jars-{pyspark.__version__}-{spark_jars_digest(jars)}.zip"
        shipment.spark_conf["spark.yarn.archive"] = staging.ensure(
            name, lambda folder: pack_spark_jars(jars, folder / name), "Spark's jars",
            "__spark_libs__").uri
        python_lib = sorted((home / "python" / "lib").glob("*.zip"))
        if not python_lib:
            raise ShippingError(f"pyspark at {home} has no python/lib/*.zip for Spark's executors")
        with tempfile.TemporaryDirectory(prefix="flinkyarn-daemon-") as folder:
            daemon = pack_spark_daemon(Path(folder) / "spark-daemon.zip")
            shipment.environment["PYSPARK_ARCHIVES_PATH"] = ",".join([
                *(_cached_file(staging, zipped, "pyspark archive", "pyspark-lib")
                  for zipped in python_lib),
                _cached_file(staging, daemon, "Python worker daemon", python_daemon.CACHE_KIND)])
    for path in files:
        if path.is_dir():
            raise ShippingError(f"--files: {path} is a folder; pack it and pass it with "
                                f"--archives {path.name}.zip#{path.name}")
        shipment.files.append(f"{_cached_file(staging, path, '--files')}#{path.name}")
    for spec in archives:
        local, alias = _archive_name(spec)
        local_path = Path(local).expanduser()
        shipment.archives.append((_cached_file(staging, local_path, "--archives", "archive"), alias))
    for path in py_files:
        if path.is_dir():
            raise ShippingError(f"--py-files: {path} is a folder; Spark ships .py, .zip and "
                                f".egg files: zip it")
        shipment.py_files.append(f"{_cached_file(staging, path, '--py-files')}#{path.name}")
    if shipment.files:
        shipment.spark_conf["spark.yarn.dist.files"] = ",".join(shipment.files)
    if shipment.archives:
        shipment.spark_conf["spark.yarn.dist.archives"] = ",".join(
            f"{url}#{alias}" for url, alias in shipment.archives)
    if shipment.py_files:
        shipment.spark_conf["spark.yarn.dist.pyFiles"] = ",".join(shipment.py_files)
    return shipment


def executor_python(conf: Configuration, shipment: Shipment) -> dict[str, str]:
    """pyspark.yarn.python-archive and pyspark.yarn.python for the TaskExecutors: Spark's
    executors run the TaskExecutors' own Python (unless the user named another), and map
    the class-data archive shipped for it (pyspark.yarn.class-data-archive)."""
    if conf.get(options.PYSPARK_PYTHON_ARCHIVE):
        return {}
    executable = conf.get(options.PYTHON_EXECUTABLE)
    if executable and executable.startswith("/"):
        return {options.PYSPARK_PYTHON.key: executable}
    name = executable.split("/")[0] if executable else ENVIRONMENT_DIR
    localized = shipment.files.get(name)
    if localized is None:
        return {}
    found = {options.PYSPARK_PYTHON_ARCHIVE.key: f"{localized.uri}#{name}",
             options.PYSPARK_PYTHON.key: f"./{executable}" if executable else
             f"./{ENVIRONMENT_DIR}/bin/python"}
    class_data = [f.uri for n, f in shipment.files.items() if n.startswith(PORTABLE_PREFIX)]
    if not executable and class_data and not conf.get(options.PYSPARK_CLASS_DATA_ARCHIVE):
        found[options.PYSPARK_CLASS_DATA_ARCHIVE.key] = class_data[0]
    return found
