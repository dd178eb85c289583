"""The process of PySpark's Python worker daemon, importing pyspark from the installed
package rather than from Spark's zips (spark.python.daemon.module of local-mode Spark:
scripts with pyspark.master=local, the TaskExecutor's own session; and of Spark's
executors on YARN, which get this file in a zip of the cache: flinkyarn/spark/python_daemon.py).

Spark starts each SparkContext's (each executor's) Python workers through a daemon,
`python -m pyspark.daemon pyspark.worker`, with `$SPARK_HOME/python/lib/pyspark.zip` and
py4j's source zip first on PYTHONPATH. With pyspark installed from PyPI, that Python has
the same pyspark in its site-packages, compiled; from the zip, nothing is compiled, so
the daemon and then every worker it forks (it imports pyspark.worker after the fork)
compile pyspark's modules from source again: the first task of a new SparkContext waited
1-5 s here for it. And zipimport re-reads a zip's whole directory (1,400 entries) at
each `importlib.invalidate_caches()`, which pyspark's worker calls at its first task:
0.1-0.7 s more per worker.

This module takes a zip off `sys.path` when the same package (its version.py, byte for
byte) is importable without it, then runs pyspark's own daemon unchanged; a Python
without pyspark of Spark's version keeps the zips, as before. It imports nothing of
flinkyarn: Spark's executors have none of our code. (Their PYTHONPATH also starts with
the driver's, as Spark passes it on: the zips of the driver's own node.)
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import zipfile
import zipimport

def _spark_zip(path: str) -> tuple[str, bytes] | None:
    """(package, its version.py) of a Spark zip on the path, pyspark's or py4j's, known
    by its content: Spark names them pyspark.zip and py4j-VERSION-src.zip, our cache by
    their digest. None for any other entry."""
    if not path.endswith(".zip"):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            return next(((package, archive.read(f"{package}/version.py"))
                         for package in ("pyspark", "py4j")
                         if f"{package}/version.py" in names), None)
    except (OSError, zipfile.BadZipFile):
        return None


def _installed_version_file(package: str) -> bytes | None:
    """The package's version.py as `sys.path` finds it now (no zip of Spark's left)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), "rb") as f:
            return f.read()
    except OSError:
        return None


def drop_spark_zips() -> list[str]:
    """Takes each Spark zip off sys.path whose package is installed in the same version;
    returns the zips taken off."""
    zips = {path: found for path in sys.path if (found := _spark_zip(path)) is not None}
    if not zips:
        return []
    kept = list(sys.path)
    sys.path[:] = [path for path in kept if path not in zips]
    dropped = [path for path, (package, in_zip) in zips.items()
               if in_zip == _installed_version_file(package)]
    sys.path[:] = [path for path in kept if path not in dropped]
    for path in dropped:  # the zipimporters made as this module was looked for
        sys.path_importer_cache.pop(path, None)
        zipimport._zip_directory_cache.pop(path, None)  # type: ignore[attr-defined]
    return dropped


def main() -> None:
    drop_spark_zips()
    # pyspark's daemon, as `python -m pyspark.daemon WORKER_MODULE` would run it.
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
